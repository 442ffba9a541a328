r"""cityscapes-unet against keras.io's U-Net-like example, side by side, in the same wall time, over seeds.

    .venv/bin/python -m ci.bench.segmentation --data-dir PREPARED --seeds 0,1,2 \
        --json docs/bench/cityscapes-unet/side-by-side.json [--results-dir DIR] [-- RECIPE FLAGS]

For each seed S, as whole processes on the same machine, one after the other:
- cityscapes-unet's `--preset cpu --seed S` with no other flag (or the flags after `--`), timed from its
  start to its exit: start-up, the data, its evaluations during training, the checkpoints and the export
  included;
- the baseline, ci/bench/cityscapes_baseline.py, as keras.io's current page trains it (`--version current`:
  Adam at 1e-4) and as its 2020 page did (`--version 2020`: RMSprop), each with `--seed S`, the recipe's view
  of the labels and that recipe run's whole wall time as its budget, counted from its own start (its
  evaluation comes after the budget).
Then the recipe once more, with the first seed and `--target mean_iou=T` (--target-iou, 0.2 by default): its
time to the target and its whole process's time, so the time it takes to end after reaching it.

All are scored as cityscapesScripts scores (model.py's segmentation_scores): at the labels' full resolution,
the ignored labels left out, the class IoU and, for Cityscapes, the category IoU from the same predictions.
The report (--json) holds every run's figures with the load average at its start and end, the commit and
whether the work tree had changes, a fingerprint of the data (sha256 of PREPARED/train.json and val.json),
the machine, the exact commands (DIR for the folders), and a summary: for the recipe and each baseline
version the mean, min, max and standard deviation over the seeds of the class and category mean IoU; the
better baseline (the higher mean class mean IoU), which is the one that counts; the recipe's class mean IoU
over that baseline's (`class_ratio`), the category mean IoU difference (`category_delta`), whether the
margin is met (`margin_met`: class_ratio >= 1.2 and no less category mean IoU), and the mean IoU of each
class and category for the recipe and the better baseline.
PREPARED is a folder written by recipes/cityscapes-unet/prepare_data.py; --results-dir keeps the recipe's
run of the last seed there (for `invoke results cityscapes-unet --from DIR`).
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from ci.bench.time_to_accuracy import machine, timed
from tf_recipes.contract import EXIT_DONE, EXIT_TARGET_MISSED

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASELINE = os.path.join(ROOT, "ci", "bench", "cityscapes_baseline.py")
RECIPE = os.path.join(ROOT, "recipes", "cityscapes-unet", "train.py")
VERSIONS = ("current", "2020")  # the baseline's versions of keras.io's page, as cityscapes_baseline.py trains them
MARGIN = 1.2  # the recipe's class mean IoU over the better baseline's that the benchmark looks for
KIND = "segmentation-side-by-side"
REPORT_VERSION = 2  # 1: rounds of one seed against one baseline, the 8 categories


class RunFailed(Exception):
    """A run of the benchmark ended badly: the message, then the end of its log."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


def rounded(values):
    return [None if v is None else round(v, 4) for v in values] if values is not None else None


def first_at(curve: list[dict], metric: str, value: float) -> dict | None:
    """The first point of a learning curve at or above `value`: {"step", "seconds"}, or None."""
    return next(({"step": p["step"], "seconds": p["seconds"]} for p in curve if p[metric] >= value), None)


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def measured(argv: list[str], log: str) -> tuple[float, int, dict]:
    """`timed`, with the load average at the run's start and end."""
    start = load_average()
    wall, status = timed(argv, log)
    return wall, status, {"start": start, "end": load_average()}


def recipe_run(data_dir: str, results_dir: str, log: str, seed: int, extra: list[str], target_iou: float) -> dict:
    flags = ["--preset", "cpu", "--seed", str(seed), *extra]
    wall, status, load = measured([sys.executable, RECIPE, "--data-dir", data_dir, "--results-dir", results_dir,
                                   *flags], log)
    if status != EXIT_DONE:
        raise RunFailed(f"cityscapes-unet --seed {seed} failed with status {status}", log)
    with open(os.path.join(results_dir, "results.json")) as handle:
        results = json.load(handle)
    val = results["final_metrics"]["val"]
    return {"seed": seed, "wall_seconds": wall, "load_average": load, "view": results.get("view"),
            "mean_iou": round(val["mean_iou"], 4), "iou_per_class": rounded(val["iou_per_class"]),
            "category_mean_iou": None if val.get("category_mean_iou") is None else round(val["category_mean_iou"], 4),
            "iou_per_category": rounded(val.get("iou_per_category")),
            "constant_mean_iou": round(val["constant_mean_iou"], 4), "steps": results["steps"],
            "epochs": results["steps"] // results["steps_per_epoch"], "global_batch": results["global_batch"],
            "time_to_iou": first_at(results["curve"], "mean_iou", target_iou),
            "curve": [{"step": p["step"], "seconds": p["seconds"], "mean_iou": round(p["mean_iou"], 4)}
                      for p in results["curve"]],
            "command": ["python", "recipes/cityscapes-unet/train.py", "--data-dir", "DIR", "--results-dir", "RUN",
                        *flags]}


def baseline_run(data_dir: str, version: str, seconds: float, view: str | None, seed: int, size: str, out: str,
                 log: str) -> dict:
    flags = ["--version", version, *(["--classes", view] if view else []), "--seed", str(seed), "--size", size,
             "--seconds", str(seconds)]
    wall, status, load = measured([sys.executable, BASELINE, "--data-dir", data_dir, *flags, "--json", out], log)
    if status:
        raise RunFailed(f"the baseline --version {version} --seed {seed} failed with status {status}", log)
    with open(out) as handle:
        result = json.load(handle)
    return {"seed": seed, "version": version, "optimizer": result["optimizer"], "wall_seconds": wall,
            "load_average": load, "budget_seconds": seconds, "trained_seconds": result["trained_seconds"],
            "mean_iou": round(result["mean_iou"], 4), "iou_per_class": rounded(result["iou_per_class"]),
            "category_mean_iou": (None if result.get("category_mean_iou") is None
                                  else round(result["category_mean_iou"], 4)),
            "iou_per_category": rounded(result.get("iou_per_category")),
            "epochs": result["epochs"], "steps": result["steps"], "size": result["size"],
            "batch_size": result["batch_size"],
            "command": ["python", "ci/bench/cityscapes_baseline.py", "--data-dir", "DIR", *flags]}


def target_run(data_dir: str, results_dir: str, log: str, seed: int, extra: list[str], target_iou: float) -> dict:
    """The recipe with --target mean_iou=T: its time to the target and its whole process's, start to exit."""
    flags = ["--preset", "cpu", "--seed", str(seed), *extra, "--target", f"mean_iou={target_iou}"]
    wall, status, load = measured([sys.executable, RECIPE, "--data-dir", data_dir, "--results-dir", results_dir,
                                   *flags], log)
    if status not in (EXIT_DONE, EXIT_TARGET_MISSED):  # a missed target is a figure of the report too
        raise RunFailed(f"cityscapes-unet --target mean_iou={target_iou} failed with status {status}", log)
    with open(os.path.join(results_dir, "results.json")) as handle:
        results = json.load(handle)
    reached = status == EXIT_DONE and results.get("time_to_target") is not None
    return {"seed": seed, "reached": reached, "wall_seconds": wall, "load_average": load,
            "time_to_target": results.get("time_to_target"), "target_step": results.get("target_step"),
            "steps": results["steps"], "mean_iou": round(results["final_metrics"]["val"]["mean_iou"], 4),
            "after_target_seconds": round(wall - results["time_to_target"], 1) if reached else None,
            "flags": " ".join(flags),
            "command": ["python", "recipes/cityscapes-unet/train.py", "--data-dir", "DIR", "--results-dir", "RUN",
                        *flags]}


def spread(values) -> dict | None:
    """Mean, min, max and sample standard deviation (None for one value) of the values that are not None."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"mean": round(statistics.fmean(present), 4), "min": round(min(present), 4),
            "max": round(max(present), 4),
            "std": round(statistics.stdev(present), 4) if len(present) > 1 else None, "n": len(present)}


def per_index(runs: list[dict], key: str) -> list | None:
    """The spread over the runs of each entry of the list `key` (per class, per category)."""
    lists = [run[key] for run in runs if run.get(key) is not None]
    return [spread(column) for column in zip(*lists, strict=True)] if lists else None


def summarize(runs: list[dict]) -> dict:
    """The report's summary of the runs of every seed (see the module docstring)."""
    recipes = [run["recipe"] for run in runs]
    figures = {"recipe": {"class_mean_iou": spread(r["mean_iou"] for r in recipes),
                          "category_mean_iou": spread(r["category_mean_iou"] for r in recipes),
                          "wall_seconds": spread(r["wall_seconds"] for r in recipes)}}
    for version in VERSIONS:
        baselines = [run["baselines"][version] for run in runs]
        figures[version] = {"class_mean_iou": spread(b["mean_iou"] for b in baselines),
                            "category_mean_iou": spread(b["category_mean_iou"] for b in baselines),
                            "steps": spread(b["steps"] for b in baselines)}
    better = max(VERSIONS, key=lambda version: figures[version]["class_mean_iou"]["mean"])  # a tie: current
    recipe_class = figures["recipe"]["class_mean_iou"]["mean"]
    baseline_class = figures[better]["class_mean_iou"]["mean"]
    ratio = round(recipe_class / baseline_class, 3) if baseline_class > 0 else None
    recipe_category, baseline_category = (figures["recipe"]["category_mean_iou"],
                                          figures[better]["category_mean_iou"])
    delta = (round(recipe_category["mean"] - baseline_category["mean"], 4)
             if recipe_category and baseline_category else None)
    met = (ratio >= MARGIN if ratio is not None else recipe_class > 0) and (delta is None or delta >= 0)
    chosen = [run["baselines"][better] for run in runs]
    return {"seeds": [run["seed"] for run in runs], **figures, "better_baseline": better, "class_ratio": ratio,
            "category_delta": delta, "margin": MARGIN, "margin_met": met,
            "iou_per_class": {"recipe": per_index(recipes, "iou_per_class"),
                              "baseline": per_index(chosen, "iou_per_class")},
            "iou_per_category": {"recipe": per_index(recipes, "iou_per_category"),
                                 "baseline": per_index(chosen, "iou_per_category")}}


def fingerprint(data_dir: str) -> dict:
    """sha256 over PREPARED/train.json and val.json (they list every example with its files' sizes and hold
    the views), with the counts and the image size."""
    digest, counts = hashlib.sha256(), {}
    for split in ("train", "val"):
        with open(os.path.join(data_dir, f"{split}.json"), "rb") as handle:
            content = handle.read()
        digest.update(f"{split}.json {len(content)}\n".encode())
        digest.update(content)
        index = json.loads(content)
        counts[f"{split}_examples"] = len(index.get("examples", []))
    return {"sha256": digest.hexdigest(), **counts, "format": index.get("format"),
            "size": [index.get("height"), index.get("width")]}


def git_state() -> dict:
    """The commit and whether the work tree differs from it (None where git cannot tell)."""
    def git(*args):
        process = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return process.stdout.strip() if process.returncode == 0 else None

    try:
        commit, status = git("rev-parse", "HEAD"), git("status", "--porcelain")
    except OSError:
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def line(seed: int, name: str, run: dict) -> str:
    category = run.get("category_mean_iou")
    load = run["load_average"]
    return (f"seed {seed} {name}: class mean IoU {run['mean_iou']:.4f}"
            + (f", category mean IoU {category:.4f}" if category is not None else "")
            + f", {run['steps']} steps in {run['wall_seconds']:.0f} s"
            + (f" (budget {run['budget_seconds']:.0f} s)" if "budget_seconds" in run else "")
            + f", load {load['start'][0]:.1f} -> {load['end'][0]:.1f}")


def scene_size(text: str) -> str:
    """HEIGHTxWIDTH, both multiples of 16 (the baseline's model halves the scene four times)."""
    try:
        sides = [int(side) for side in text.lower().split("x")]
    except ValueError:
        sides = []
    if len(sides) != 2 or min(sides) < 16 or any(side % 16 for side in sides):
        raise argparse.ArgumentTypeError(f"{text!r} is not HEIGHTxWIDTH with both sides multiples of 16")
    return f"{sides[0]}x{sides[1]}"


def seed_list(text: str) -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of seeds, e.g. 0,1,2") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give distinct seeds of 0 or more")
    return seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="a folder written by cityscapes-unet's prepare_data.py")
    parser.add_argument("--seeds", type=seed_list, default=[0, 1, 2], help="comma-separated: one round per seed")
    parser.add_argument("--target-iou", type=float, default=0.2,
                        help="report the recipe's time to this class mean IoU (its own run, the first seed)")
    parser.add_argument("--baseline-size", type=scene_size, default="128x256",
                        help="HEIGHTxWIDTH the baseline sees the scenes at")
    parser.add_argument("--baseline-seconds", type=float,
                        help="a fixed budget for the baseline instead of each seed's recipe wall time (for "
                             "tests: the figures are then no same-time comparison, and the report says so)")
    parser.add_argument("--results-dir", help="keep the last seed's recipe run here (a new or empty folder)")
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("recipe_args", nargs="*", help="after --: more flags for cityscapes-unet (none: --preset cpu)")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.data_dir, "train.json")):
        parser.error(f"--data-dir {args.data_dir} holds no train.json; give a folder prepare_data.py wrote")
    if args.results_dir and os.path.exists(args.results_dir) and os.listdir(args.results_dir):
        parser.error(f"--results-dir {args.results_dir} is not empty; give a new folder")
    try:
        report = benchmark(args)
    except RunFailed as failure:
        with open(failure.log, errors="replace") as handle:
            tail = handle.read().splitlines()[-30:]
        print("\n".join(tail), file=sys.stderr)
        print(f"error: {failure} (the end of its output is above)", file=sys.stderr)
        sys.exit(1)
    summary = report["summary"]
    print(json.dumps({key: summary[key] for key in ("better_baseline", "class_ratio", "category_delta",
                                                    "margin_met")}))
    if args.json:
        from tf_recipes.reporting import write_json  # TensorFlow's import: only the report needs it

        write_json(args.json, report)


def benchmark(args) -> dict:
    command = ["python", "-m", "ci.bench.segmentation", "--data-dir", "DIR",
               "--seeds", ",".join(map(str, args.seeds)), "--target-iou", str(args.target_iou),
               "--baseline-size", args.baseline_size,
               *(["--baseline-seconds", str(args.baseline_seconds)] if args.baseline_seconds else []),
               "--results-dir", "RUN", "--json", "REPORT", *(["--", *args.recipe_args] if args.recipe_args else [])]
    report = {"kind": KIND, "version": REPORT_VERSION, "git": git_state(), "data": fingerprint(args.data_dir),
              "machine": machine(), "seeds": args.seeds, "target_iou": args.target_iou,
              "baseline_size": [int(side) for side in args.baseline_size.lower().split("x")],
              "baseline_budget": args.baseline_seconds or "recipe", "command": command, "runs": []}
    with tempfile.TemporaryDirectory(prefix="segmentation-bench-") as work:
        for seed in args.seeds:
            recipe_dir = os.path.join(work, f"recipe-{seed}")
            recipe = recipe_run(args.data_dir, recipe_dir, os.path.join(work, f"recipe-{seed}.log"), seed,
                                args.recipe_args, args.target_iou)
            print(line(seed, "cityscapes-unet", recipe), flush=True)
            if "classes" not in report:
                with open(os.path.join(recipe_dir, "results.json")) as handle:
                    results = json.load(handle)
                report.update(view=results.get("view"), classes=results.get("classes"),
                              categories=results.get("categories"))
            baselines = {}
            for version in VERSIONS:
                baselines[version] = baseline_run(
                    args.data_dir, version, args.baseline_seconds or recipe["wall_seconds"], recipe["view"], seed,
                    args.baseline_size, os.path.join(work, f"baseline-{version}-{seed}.json"),
                    os.path.join(work, f"baseline-{version}-{seed}.log"))
                print(line(seed, f"keras.io U-Net ({version})", baselines[version]), flush=True)
            report["runs"].append({"seed": seed, "recipe": recipe, "baselines": baselines})
            if args.results_dir and seed == args.seeds[-1]:
                shutil.copytree(recipe_dir, args.results_dir, dirs_exist_ok=True)
        target = target_run(args.data_dir, os.path.join(work, "target"), os.path.join(work, "target.log"),
                            args.seeds[0], args.recipe_args, args.target_iou)
        print(f"seed {args.seeds[0]} cityscapes-unet to mean IoU {args.target_iou}: "
              + (f"reached at step {target['target_step']}, {target['time_to_target']:.0f} s, "
                 f"ended {target['after_target_seconds']:.1f} s later" if target["reached"] else
                 f"not reached in {target['steps']} steps, {target['wall_seconds']:.0f} s"), flush=True)
        report["target_run"] = target
    report["machine"]["load_average_at_end"] = os.getloadavg()
    report["summary"] = summarize(report["runs"])
    return report


if __name__ == "__main__":
    main()
