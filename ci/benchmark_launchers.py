"""Throughput of one recipe under every launcher, measured side by side on this machine.

    .venv/bin/python ci/benchmark_launchers.py mnist-cnn --rounds 3 -- --synthetic --max-steps 60

Runs `invoke run RECIPE --runtime local` for single (1 replica) and mirrored, multiworker and horovod
(--replicas each), interleaved over --rounds so that every launcher sees the same machine load, and
prints the median images/s of each with its ratio to single. On one CPU the replicas share the same
cores, so the ratio measures what each launcher's synchronisation costs, not a speed-up.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHERS = ("single", "mirrored", "multiworker", "horovod")


def run_once(recipe, launcher, replicas, train_args, folder):
    command = [sys.executable, "-m", "invoke", "run", recipe, "--gpus", "0", "--launcher", launcher,
               "--cpu-replicas", str(1 if launcher == "single" else replicas), "--runtime", "local",
               "--results-dir", folder, "--", *train_args]
    process = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if process.returncode != 0:
        sys.exit(f"{launcher} failed ({process.returncode}):\n{process.stderr[-2000:]}")
    with open(os.path.join(folder, "results.json")) as handle:
        return json.load(handle)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--json", help="also write the results here")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, train_args = parser.parse_args(argv[:split]), argv[split + 1:]  # after --: for train.py

    rates = {launcher: [] for launcher in LAUNCHERS}
    details = {}
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            for launcher in LAUNCHERS:
                folder = os.path.join(scratch, f"{launcher}-{round_index}")
                results = run_once(args.recipe, launcher, args.replicas, train_args, folder)
                assert results["replicas_in_sync"], f"{launcher} replicas out of sync"
                rates[launcher].append(results["images_per_sec"])
                details[launcher] = {k: results[k] for k in ("replicas", "global_batch", "timed_steps")}
                print(f"round {round_index + 1}/{args.rounds} {launcher:<12} {results['images_per_sec']:>10.1f} img/s",
                      flush=True)

    baseline = statistics.median(rates["single"])
    summary = {launcher: {**details[launcher], "images_per_sec_median": statistics.median(values),
                          "images_per_sec_rounds": values, "ratio_to_single": statistics.median(values) / baseline}
               for launcher, values in rates.items()}
    print(f"\n{args.recipe}, {os.cpu_count()} CPUs, median of {args.rounds} interleaved rounds, train args: "
          f"{' '.join(train_args)}")
    print(f"{'launcher':<12} {'replicas':>8} {'global batch':>12} {'img/s':>10} {'vs single':>10}")
    for launcher, row in summary.items():
        print(f"{launcher:<12} {row['replicas']:>8} {row['global_batch']:>12} {row['images_per_sec_median']:>10.1f} "
              f"{row['ratio_to_single']:>9.2f}x")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(summary, handle, indent=2)


if __name__ == "__main__":
    main()
