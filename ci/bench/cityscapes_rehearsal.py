r"""cityscapes-unet's `full` preset rehearsed on real scenes: its whole code path, scaled down only in size and
length, under multiworker and horovod with 2 replicas each.

    .venv/bin/python -m ci.bench.cityscapes_rehearsal --data-dir PREPARED --out docs/bench/cityscapes-unet/rehearsal

PREPARED is `prepare_data.py --source CS`'s output for the seed workshop's 100 real scenes (80 train, 20 val;
the recipe README's Results section says how CS is made). Each launcher trains `--preset full` with these flags
and nothing else changed: mmsegmentation's UNet-S5-D16 with its auxiliary head, synchronized batch norm, SGD with
coupled weight decay on the poly rate, crops with the class ratio rule, flips, zoom and photometric distortion;
the iterations and rate follow --reference-batch's rule for the global batch of 4 (2 replicas x 2):

    --downscale 16 --crop 32x64 --iterations 50 --eval-every 10 --seed 0

(scenes of 64x128, a sixteenth of their sides; 50 iterations of 16 are 200 of 4 at a quarter of the rate; an
evaluation of the 20 val scenes every 40 iterations). multiworker runs through `invoke run` with this checkout's
.venv; horovod through `invoke run --launcher horovod` with --horovod-venv's (`bash ci/setup.sh --horovod`).
Checked per launcher, from what the run writes (results.json, its log): the replicas' weights identical, the
training loss falling (the mean of its last five logged values below that of its first five), the class mean IoU
on val above the best constant prediction's and higher at the last evaluation than at the first. Writes
OUT/report.json and OUT/report.md; exit status 1 when any check fails.
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLAGS = ["--downscale", "16", "--crop", "32x64", "--iterations", "50", "--eval-every", "10", "--seed", "0",
         "--log-every", "10"]


def reference_loop() -> float:
    """The seconds one core takes for 10^7 Python additions, as ci/test.sh prints them (ci/reference_loop.py,
    in a process of its own)."""
    return float(subprocess.run([sys.executable, str(ROOT / "ci" / "reference_loop.py")], capture_output=True,
                                text=True, check=True).stdout)


def command(launcher: str, data_dir: str, results: pathlib.Path, horovod_venv: str) -> tuple[list, pathlib.Path]:
    """The run's command and the checkout it runs in (horovod: the one --horovod-venv belongs to)."""
    venv = pathlib.Path(horovod_venv) if launcher == "horovod" else ROOT / ".venv"
    invoke = [str(venv / "bin" / "invoke"), "run", "cityscapes-unet", "--launcher", launcher, "--cpu-replicas", "2",
              "--runtime", "local", "--results-dir", str(results)]
    return [*invoke, "--", "--data-dir", data_dir, *FLAGS], venv.resolve().parent


def checks(results: dict, log: str) -> dict:
    losses = [row["loss"] for row in results["losses"]]
    curve = results["curve"]
    first, last = curve[0], curve[-1]
    return {
        "replicas_in_sync": bool(results["replicas_in_sync"]) and len(set(results["replica_fingerprints"])) == 1
        and "replicas in sync" in log,
        "loss_falls": statistics.mean(losses[-5:]) < statistics.mean(losses[:5]),
        "above_constant": last["mean_iou"] > last["constant_mean_iou"],
        "last_above_first": last["mean_iou"] > first["mean_iou"],
    }


def rehearse(launcher: str, args) -> dict:
    results_dir = pathlib.Path(args.work_dir) / launcher
    argv, checkout = command(launcher, args.data_dir, results_dir, args.horovod_venv)
    log_file = pathlib.Path(args.work_dir) / f"{launcher}.log"
    if args.reuse and (results_dir / "results.json").is_file() and log_file.is_file():
        # --reuse: the run this command made before, read again (its log and results.json), not trained again
        log, returncode, seconds = log_file.read_text(), 0, None
    else:
        print(f"$ (cd {checkout}; {' '.join(argv)})", flush=True)
        start = time.monotonic()
        done = subprocess.run(argv, cwd=checkout, capture_output=True, text=True)
        seconds = round(time.monotonic() - start, 1)
        log, returncode = done.stdout + done.stderr, done.returncode
        log_file.write_text(log)
    if returncode:
        return {"launcher": launcher, "command": argv, "exit_status": returncode, "seconds": seconds,
                "log_tail": log.splitlines()[-15:], "checks": {"finished": False}}
    results = json.loads((results_dir / "results.json").read_text())
    schedule = re.search(r"schedule: .*", log).group(0)  # horovodrun prefixes lines with [RANK]<stdout>:
    return {
        "launcher": launcher, "command": argv, "exit_status": 0, "schedule": schedule,
        "seconds": seconds or round(results["wall_seconds"], 1),
        "replicas": results["replicas"], "global_batch": results["global_batch"], "steps": results["steps"],
        "fingerprints": results["replica_fingerprints"], "parameters": results["parameters"],
        "loss_first_last": [results["losses"][0]["loss"], results["losses"][-1]["loss"]],
        "losses": [[row["step"], round(row["loss"], 4)] for row in results["losses"]],
        "curve": [[point["step"], round(point["mean_iou"], 4)] for point in results["curve"]],
        "constant_mean_iou": round(results["curve"][-1]["constant_mean_iou"], 4),
        "final_mean_iou": round(results["final_metrics"]["val"]["mean_iou"], 4),
        "step_time_p50_ms": results["step_time_p50_ms"], "checks": checks(results, log),
    }


def markdown(report: dict) -> str:
    lines = [f"# cityscapes-unet: the full preset rehearsed ({report['date']}, commit {report['commit']})", "",
             f"`{report['command']}` on {report['machine']['cores']} cores ({report['machine']['processor']}), "
             f"reference loop {report['machine']['reference_loop_seconds']} s. Flags: `--preset full "
             f"{' '.join(FLAGS)}`.", "",
             "| launcher | replicas | iterations | loss first → last | val mean IoU by evaluation | constant | "
             "in sync | wall time |", "|---|---|---|---|---|---|---|---|"]
    for run in report["runs"]:
        if run["exit_status"]:
            lines.append(f"| {run['launcher']} | failed (exit {run['exit_status']}) | | | | | | {run['seconds']} s |")
            continue
        curve = " → ".join(f"{iou:.4f}" for _, iou in run["curve"])
        lines.append(f"| {run['launcher']} | {run['replicas']} | {run['steps']} | {run['loss_first_last'][0]:.3f} → "
                     f"{run['loss_first_last'][1]:.3f} | {curve} | {run['constant_mean_iou']:.4f} | "
                     f"{'yes' if run['checks']['replicas_in_sync'] else 'NO'} ({run['fingerprints'][0]}) | "
                     f"{run['seconds'] / 60:.1f} min |")
    lines += ["", "Checks: " + "; ".join(f"{run['launcher']}: " + ", ".join(
        f"{name} {'passed' if ok else 'FAILED'}" for name, ok in run["checks"].items()) for run in report["runs"])]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="prepare_data.py's output for the 100 real scenes")
    parser.add_argument("--out", required=True, help="folder for report.json and report.md")
    parser.add_argument("--work-dir", default="/tmp/cityscapes-rehearsal", help="the runs' results and logs")
    parser.add_argument("--horovod-venv", default=str(ROOT / ".venv"), help="a .venv with Horovod")
    parser.add_argument("--launchers", default="multiworker,horovod", help="comma-separated")
    parser.add_argument("--reuse", action="store_true", help="read the runs --work-dir already holds (their logs "
                        "and results.json) instead of training them again")
    args = parser.parse_args(argv)
    os.makedirs(args.work_dir, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    report = {
        "date": datetime.date.today().isoformat(), "commit": commit,
        "command": "python -m ci.bench.cityscapes_rehearsal " + " ".join(argv or sys.argv[1:]),
        "machine": {"cores": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                    "reference_loop_seconds": reference_loop()},
        "flags": ["--preset", "full", *FLAGS],
        "runs": [rehearse(launcher, args) for launcher in args.launchers.split(",")],
    }
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(markdown(report))
    print(markdown(report))
    return 0 if all(all(run["checks"].values()) for run in report["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
