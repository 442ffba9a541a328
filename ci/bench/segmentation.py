r"""cityscapes-unet against the short-script U-Net, side by side, in the same wall time.

    .venv/bin/python -m ci.bench.segmentation --data-dir PREPARED --rounds 1 \
        --json docs/bench/cityscapes-unet/side-by-side.json [--results-dir DIR] [-- RECIPE FLAGS]

Each round runs, as whole processes on the same machine, one after the other:
- cityscapes-unet's `--preset cpu` with no other flag (or the flags after `--`), timed from its start to
  its exit: start-up, the data, its evaluations during training, the checkpoints and the export included;
- the baseline, ci/bench/cityscapes_baseline.py (keras.io's U-Net-like model as its example trains it,
  on whole scenes loaded at 128x256), given the recipe's whole wall time as its training budget, counted
  from its own start; its evaluation comes after the budget;
- the recipe again with `--target mean_iou=T` (--target-iou, 0.3 by default): its time to the target and
  its whole process's, start to exit, so the time it takes to end after reaching it.
Both score their prediction on the val scenes at the categories' full resolution. The report gives
each one's mean IoU and per-category IoU, the recipe's time to a mean IoU of --target-iou (its first
evaluation at or above it, from its learning curve, and as a run of its own), and the commands.
PREPARED is a folder written by recipes/cityscapes-unet/prepare_data.py; --results-dir keeps the
recipe's run of the last round there (for `invoke results cityscapes-unet --from DIR`).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

from ci.bench.time_to_accuracy import machine, timed
from tf_recipes.contract import EXIT_DONE
from tf_recipes.reporting import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASELINE = os.path.join(ROOT, "ci", "bench", "cityscapes_baseline.py")
RECIPE = os.path.join(ROOT, "recipes", "cityscapes-unet", "train.py")


def first_at(curve: list[dict], metric: str, value: float) -> dict | None:
    """The first point of a learning curve at or above `value`: {"step", "seconds"}, or None."""
    return next(({"step": p["step"], "seconds": p["seconds"]} for p in curve if p[metric] >= value), None)


def recipe_run(data_dir: str, results_dir: str, log: str, extra: list[str], target_iou: float) -> dict:
    argv = [sys.executable, RECIPE, "--preset", "cpu", "--data-dir", data_dir, "--results-dir", results_dir, *extra]
    wall, status = timed(argv, log)
    if status != EXIT_DONE:
        raise SystemExit(f"cityscapes-unet failed with status {status}; see {log}")
    with open(os.path.join(results_dir, "results.json")) as handle:
        results = json.load(handle)
    val = results["final_metrics"]["val"]
    return {"wall_seconds": wall, "mean_iou": round(val["mean_iou"], 4),
            "iou_per_category": [None if v is None else round(v, 4) for v in val["iou_per_category"]],
            "constant_mean_iou": round(val["constant_mean_iou"], 4), "steps": results["steps"],
            "epochs": results["steps"] // results["steps_per_epoch"], "global_batch": results["global_batch"],
            "time_to_iou": first_at(results["curve"], "mean_iou", target_iou),
            "curve": [{"step": p["step"], "seconds": p["seconds"], "mean_iou": round(p["mean_iou"], 4)}
                      for p in results["curve"]],
            "command": ["python", "recipes/cityscapes-unet/train.py", "--preset", "cpu", "--data-dir", "DIR", *extra]}


def target_run(data_dir: str, results_dir: str, log: str, extra: list[str], target_iou: float) -> dict:
    """The recipe with --target mean_iou=T: its time to the target and its whole process's, start to exit."""
    flags = ["--preset", "cpu", *extra, "--target", f"mean_iou={target_iou}"]
    wall, status = timed([sys.executable, RECIPE, "--data-dir", data_dir, "--results-dir", results_dir, *flags], log)
    if status != EXIT_DONE:  # a missed target (13) too: the report's figures need it reached
        raise SystemExit(f"cityscapes-unet --target mean_iou={target_iou} ended with status {status}; see {log}")
    with open(os.path.join(results_dir, "results.json")) as handle:
        results = json.load(handle)
    return {"wall_seconds": wall, "time_to_target": results["time_to_target"], "target_step": results["target_step"],
            "steps": results["steps"], "mean_iou": round(results["final_metrics"]["val"]["mean_iou"], 4),
            "after_target_seconds": round(wall - results["time_to_target"], 1), "flags": " ".join(flags)}


def baseline_run(data_dir: str, seconds: float, out: str, log: str) -> dict:
    wall, status = timed([sys.executable, BASELINE, "--data-dir", data_dir, "--seconds", str(seconds),
                          "--json", out], log)
    if status:
        raise SystemExit(f"the baseline failed with status {status}; see {log}")
    with open(out) as handle:
        result = json.load(handle)
    return {"wall_seconds": wall, "budget_seconds": seconds, "trained_seconds": result["trained_seconds"],
            "mean_iou": round(result["mean_iou"], 4),
            "iou_per_category": [None if v is None else round(v, 4) for v in result["iou_per_category"]],
            "epochs": result["epochs"], "steps": result["steps"], "size": result["size"],
            "batch_size": result["batch_size"],
            "command": ["python", "ci/bench/cityscapes_baseline.py", "--data-dir", "DIR", "--seconds", str(seconds)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="a folder written by cityscapes-unet's prepare_data.py")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--target-iou", type=float, default=0.3, help="report the recipe's time to this mean IoU")
    parser.add_argument("--results-dir", help="keep the last round's recipe run here (a new or empty folder)")
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("recipe_args", nargs="*", help="after --: more flags for cityscapes-unet (none: --preset cpu)")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.data_dir, "train.json")):
        parser.error(f"--data-dir {args.data_dir} holds no train.json; give a folder prepare_data.py wrote")
    if args.results_dir and os.path.exists(args.results_dir) and os.listdir(args.results_dir):
        parser.error(f"--results-dir {args.results_dir} is not empty; give a new folder")

    with open(os.path.join(args.data_dir, "train.json")) as handle:
        classes = json.load(handle).get("categories")
    report = {"kind": "segmentation-side-by-side", "machine": machine(), "classes": classes,
              "target_iou": args.target_iou, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="segmentation-bench-") as work:
        for index in range(args.rounds):
            recipe_dir = os.path.join(work, f"recipe-{index}")
            recipe = recipe_run(args.data_dir, recipe_dir, os.path.join(work, f"recipe-{index}.log"),
                                args.recipe_args, args.target_iou)
            print(f"round {index + 1} recipe: {json.dumps({k: v for k, v in recipe.items() if k != 'curve'})}",
                  flush=True)
            baseline = baseline_run(args.data_dir, recipe["wall_seconds"], os.path.join(work, f"baseline-{index}.json"),
                                    os.path.join(work, f"baseline-{index}.log"))
            print(f"round {index + 1} baseline: {json.dumps(baseline)}", flush=True)
            target = target_run(args.data_dir, os.path.join(work, f"target-{index}"),
                                os.path.join(work, f"target-{index}.log"), args.recipe_args, args.target_iou)
            print(f"round {index + 1} recipe to its target: {json.dumps(target)}", flush=True)
            report["rounds"].append({"recipe": recipe, "baseline": baseline, "target_run": target,
                                     "recipe_minus_baseline": round(recipe["mean_iou"] - baseline["mean_iou"], 4)})
            if args.results_dir and index == args.rounds - 1:
                shutil.copytree(recipe_dir, args.results_dir, dirs_exist_ok=True)
    report["recipe_at_or_above_baseline"] = all(r["recipe_minus_baseline"] >= 0 for r in report["rounds"])
    print(json.dumps({"rounds": [r["recipe_minus_baseline"] for r in report["rounds"]],
                      "recipe_at_or_above_baseline": report["recipe_at_or_above_baseline"]}))
    if args.json:
        write_json(args.json, report)


if __name__ == "__main__":
    main()
