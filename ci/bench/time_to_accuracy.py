r"""Time to accuracy on the real MNIST digits: mnist-cnn against the short-script baseline, side by side.

    .venv/bin/python -m ci.bench.time_to_accuracy --data-dir ../shared/data/mnist --rounds 2 \
        --json docs/bench/mnist-cnn/time-to-accuracy.json

Each round runs, as whole processes timed from their start to their exit (start-up, data loading, the
export included):
- the baseline, ci/bench/mnist_baseline.py: the keras-io-style convnet, 15 epochs of `model.fit`;
- mnist-cnn with its defaults and `--target accuracy=T`, T the baseline's figure (--target-accuracy,
  keras-io's 0.9906 by default): it ends at the first evaluation of the 10,000 test digits that reaches T.
The two alternate, the baseline first in odd rounds and second in even ones, on the same machine; the
report gives each run's wall time and test accuracy, the recipe's time_to_target from its results.json,
and the recipe's wall time over the baseline's within each round.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from tf_recipes.contract import EXIT_DONE, EXIT_TARGET_MISSED
from tf_recipes.reporting import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASELINE = os.path.join(ROOT, "ci", "bench", "mnist_baseline.py")
RECIPE = os.path.join(ROOT, "recipes", "mnist-cnn", "train.py")


def timed(argv: list[str], log: str) -> tuple[float, int]:
    """Wall seconds of `argv` from its start to its exit, and its status; its output goes to `log`."""
    started = time.perf_counter()
    with open(log, "w") as handle:
        status = subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    return round(time.perf_counter() - started, 1), status


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 platform.processor())
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
            "load_average_at_start": os.getloadavg()}


def baseline_run(data_dir: str, work: str, name: str) -> dict:
    out = os.path.join(work, f"{name}.json")
    wall, status = timed([sys.executable, BASELINE, "--data-dir", data_dir, "--json", out],
                         os.path.join(work, f"{name}.log"))
    if status:
        raise SystemExit(f"the baseline failed with status {status}; see {work}/{name}.log")
    with open(out) as handle:
        result = json.load(handle)
    return {"wall_seconds": wall, "test_accuracy": round(result["test_accuracy"], 4),
            "epochs": result["epochs"], "fit_seconds": result["fit_seconds"]}


def recipe_run(data_dir: str, work: str, name: str, target: float, extra: list[str]) -> dict:
    results_dir = os.path.join(work, name)
    argv = [sys.executable, RECIPE, "--data-dir", data_dir, "--results-dir", results_dir,
            "--target", f"accuracy={target}", *extra]
    wall, status = timed(argv, os.path.join(work, f"{name}.log"))
    if status not in (EXIT_DONE, EXIT_TARGET_MISSED):  # a missed target shows in the report
        raise SystemExit(f"mnist-cnn failed with status {status}; see {work}/{name}.log")
    with open(os.path.join(results_dir, "results.json")) as handle:
        results = json.load(handle)
    return {"wall_seconds": wall, "test_accuracy": round(results["final_metrics"]["test"]["accuracy"], 4),
            "time_to_target": results["time_to_target"], "target_step": results["target_step"],
            "steps_per_epoch": results["steps_per_epoch"], "reached": status == 0,
            "command": ["python", "recipes/mnist-cnn/train.py", "--data-dir", "DIR",
                        "--target", f"accuracy={target}", *extra]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="folder holding the Keras mnist.npz (real digits)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--target-accuracy", type=float, default=0.9906,
                        help="the baseline's published test accuracy (keras-io's mnist_convnet)")
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("recipe_args", nargs="*", help="after --: more flags for mnist-cnn (none: its defaults)")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.data_dir, "mnist.npz")):
        parser.error(f"--data-dir {args.data_dir} holds no mnist.npz; give the folder of the Keras mnist.npz")

    report = {"machine": machine(), "target_accuracy": args.target_accuracy, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="time-to-accuracy-") as work:
        for index in range(args.rounds):
            runs = {}
            order = ["baseline", "recipe"] if index % 2 == 0 else ["recipe", "baseline"]
            for which in order:
                name = f"{which}-{index}"
                runs[which] = (baseline_run(args.data_dir, work, name) if which == "baseline"
                               else recipe_run(args.data_dir, work, name, args.target_accuracy, args.recipe_args))
                print(f"round {index + 1} {which}: {json.dumps(runs[which])}", flush=True)
            runs["recipe_over_baseline"] = round(runs["recipe"]["wall_seconds"] / runs["baseline"]["wall_seconds"], 3)
            report["rounds"].append(runs)
    rounds = report["rounds"]
    report["median"] = {
        "baseline_wall_seconds": statistics.median(r["baseline"]["wall_seconds"] for r in rounds),
        "baseline_test_accuracy": statistics.median(r["baseline"]["test_accuracy"] for r in rounds),
        "recipe_wall_seconds": statistics.median(r["recipe"]["wall_seconds"] for r in rounds),
        "recipe_time_to_target": statistics.median(r["recipe"]["time_to_target"] or float("inf") for r in rounds),
        "recipe_over_baseline": statistics.median(r["recipe_over_baseline"] for r in rounds),
        "recipe_over_baseline_worst": max(r["recipe_over_baseline"] for r in rounds),
    }
    print(json.dumps(report["median"], indent=2))
    if args.json:
        write_json(args.json, report)


if __name__ == "__main__":
    main()
