"""The Results section of each recipe's README: what the recipe learns, on which data, in how long.

    invoke results RECIPE --data-dir DIR        train the recipe's documented run, keep it, write the section
    invoke results RECIPE --from RESULTS_DIR    the section from a run already made (its results.json)
    invoke results mnist-cnn --data-dir DIR --launcher mirrored   the same run on 2 replicas (a row of its own)

The kept run is docs/results/RECIPE/results.json, exactly as the recipe wrote it, and its learning
curve docs/results/RECIPE/curve.png; a run under another launcher is docs/results/RECIPE/LAUNCHER/
results.json. The README's section between RESULTS_BEGIN and RESULTS_END is rendered from them (and,
for mnist-cnn, from the kept time-to-accuracy benchmark, docs/bench/mnist-cnn/time-to-accuracy.json).
A unit test renders it again and compares: the section is never edited by hand.

Everything but `plot` and `keep` is pure; `keep` writes each file whole or not at all (tf_recipes.atomic).
"""
from __future__ import annotations

import json
import os
import textwrap

from tf_recipes.atomic import write_atomically

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_BEGIN = "<!-- results: written by `invoke results RECIPE` from docs/results/RECIPE; do not edit -->"
RESULTS_END = "<!-- end of results -->"

# What each recipe's documented run is, what its data is, what its metric is held against, and what
# could not be measured here.
RECIPES = {
    "mnist-cnn": {
        "run": ["--gpus", "0", "--runtime", "local", "--data-dir", "DIR"],
        "data": "the real MNIST digits (`mnist.npz`): 60,000 training, 10,000 test",
        "name": "MNIST, real",
        "split": "test",
        "metric": "accuracy",
        "baseline": ("majority_accuracy", "the most frequent digit predicted for every image"),
        "licence": "MNIST is by Yann LeCun, Corinna Cortes and Christopher J.C. Burges, made available under "
                   "the Creative Commons Attribution-Share Alike 3.0 licence.",
        "benchmark": "docs/bench/mnist-cnn/time-to-accuracy.json",
        # The same run on 2 replicas: half the batch on each keeps the global batch of 128, and so the same
        # steps, schedule and data order as one device
        "replicated": {"replicas": 2, "args": ["--batch-size", "64"]},
        "not_here": "No GPU here: on one, `invoke run mnist-cnn --gpus 1 --data-dir DIR` measures the same "
                    "figures (a bare `--amp` there is float16 with loss scaling).",
    },
    "cityscapes-unet": {
        "run": ["--gpus", "0", "--runtime", "local", "--data-dir", "DIR", "--", "--preset", "cpu"],
        "data": "100 real Cityscapes scenes at 1024x2048, the seed workshop's sample (`8data/` of "
                "github.com/twittidai/TF2_Workshop: `img/` and `gt/`, the release's colour maps), put in the "
                "official layout by `ci/bench/seed_cityscapes.py --seed-dir 8data --out CS --split train=0:80 "
                "--split val=80:100` (sorted by name, the first 80 for training and the last 20 for validation, "
                "the label ids recovered from the colours through cityscapesScripts' table) and prepared with "
                "`prepare_data.py --source CS`; the 19 evaluation classes are trained and scored, the labels the "
                "benchmark ignores left out; `--data-dir` is the prepared folder",
        "name": "Cityscapes, 100 real scenes",
        "split": "val",
        "metric": "mean_iou",
        "baseline": ("constant_mean_iou", "the best single class predicted for every pixel"),
        "licence": "Cityscapes images are under the Cityscapes dataset licence, which forbids redistribution: "
                   "none is kept here, only the figures.",
        "benchmark": "docs/bench/cityscapes-unet/side-by-side.json",
        "not_here": "Not measured here: the full Cityscapes train and val splits (2,975 and 500 scenes, a "
                    "manual download), scenes of another city, any GPU, and the `full` preset's training (what "
                    "`invoke run cityscapes-unet --gpus 8` trains: mmsegmentation's UNet-S5-D16 configuration on "
                    "512x1024 crops for 160,000 iterations), only rehearsed here at a small size; what was measured "
                    "of it and what it is expected to reach are in [The full preset](#the-full-preset). On a GPU "
                    "node: `invoke run cityscapes-unet --gpus 8 --data-dir data/cityscapes -- --target "
                    "mean_iou=0.69` records the time to the published 69.10% in its `results.json`.",
    },
    "cassava-resnet": {
        "run": ["--gpus", "0", "--runtime", "local", "--data-dir", "DIR", "--", "--weights", "none",
                "--image-size", "64", "--epochs", "6", "--batch-size", "8", "--bn-momentum", "0.9"],
        "data": "a generated TFDS `cassava` directory, since the real photos cannot be downloaded here: "
                "`python recipes/cassava-resnet/generated_cassava.py DIR --train 120 --validation 40 --test 8` "
                "(photos of the real sizes, one hue per class, the five classes in turn)",
        "name": "cassava, generated",
        "split": "validation",
        "metric": "accuracy",
        "baseline": ("majority_accuracy", "the most frequent class predicted for every photo"),
        "licence": "The generated photos are made by the test; TFDS `cassava` itself is under its own terms "
                   "(see its catalogue page).",
        "benchmark": None,
        "not_here": "Not measured here: the real TFDS `cassava` photos with ImageNet weights, and any GPU. On a "
                    "machine that can download them: `invoke run cassava-resnet --gpus 1 -- --target "
                    "accuracy=0.8`.",
    },
}


class ResultsError(ValueError):
    """A results.json that cannot make the section; the message names it and what is missing."""


LAUNCHERS = ("mirrored", "multiworker", "horovod")  # a replicated run's launchers, in the table's order


def kept_dir(recipe: str, launcher: str | None = None) -> str:
    return os.path.join(ROOT, "docs", "results", recipe, *([launcher] if launcher else []))


def check_results(results: dict, recipe: str, source: str) -> None:
    spec = RECIPES[recipe]
    metrics = results.get("final_metrics", {}).get(spec["split"], {})
    missing = [key for key in (spec["metric"], spec["baseline"][0]) if key not in metrics]
    if results.get("recipe") != recipe or missing or not results.get("curve"):
        raise ResultsError(f"{source} is not a finished {recipe} run with a learning curve and "
                           f"final_metrics.{spec['split']}.{spec['metric']}/{spec['baseline'][0]} "
                           f"(recipe {results.get('recipe')!r}, missing {missing or 'the curve'}); "
                           "run the recipe again with this version")


def flags_of(command: list[str]) -> str:
    """The train.py flags of a run's command line, with folders, the launcher and the replicas left out
    (the table's launcher and replicas columns)."""
    shown, skip = [], False
    for arg in command[1:]:
        if skip:
            skip = False
            continue
        if arg in ("--data-dir", "--results-dir", "--launcher", "--cpu-replicas"):
            skip = True
            continue
        shown.append(arg)
    return " ".join(shown) or "(defaults)"


def minutes(seconds) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def machine_of(results: dict) -> str:
    machine = results.get("machine") or {}
    gpus, load = machine.get("gpus") or 0, machine.get("load_average")
    return (f"{machine.get('cpu', '?')}, {machine.get('cores', '?')} cores"
            + (f", {gpus} GPU(s)" if gpus else ", no GPU")
            + (f", load {load[1]:.1f} (5 min) at the end" if load else ""))


def run_args(recipe: str, data_dir: str, results_dir: str, launcher: str | None = None) -> list[str]:
    """`invoke run RECIPE`'s arguments for the documented run into `results_dir`; with `launcher`, the same
    run on more replicas, with the flags that keep it the same run."""
    spec = RECIPES[recipe]
    args = [os.path.abspath(data_dir) if arg == "DIR" else arg for arg in spec["run"]]
    where = args.index("--data-dir")
    args[where + 2:where + 2] = ["--results-dir", results_dir]
    if launcher:
        args[where:where] = ["--launcher", launcher, "--cpu-replicas", str(spec["replicated"]["replicas"])]
        args += ([] if "--" in args else ["--"]) + spec["replicated"]["args"]
    return args


def row(spec: dict, results: dict) -> str:
    """One run's line of the table."""
    metrics = results["final_metrics"][spec["split"]]
    return (f"| {spec['name']} | `{flags_of(results.get('command', []))}` | {results['launcher']} | "
            f"{results['replicas']} | {results['steps']} | {minutes(results.get('wall_seconds'))} | "
            f"{minutes(results.get('time_to_target')) if results.get('target') else '—'} | "
            f"**{metrics[spec['metric']]:.4f}** | {metrics[spec['baseline'][0]]:.4f} | {machine_of(results)} |")


def render(recipe: str, results: dict, benchmark: dict | None = None, replicated: tuple[dict, ...] = ()) -> str:
    """The README's Results section (without its markers) from a run's results.json, the same run under
    other launchers (`replicated`) and, for mnist-cnn, the time-to-accuracy report."""
    spec = RECIPES[recipe]
    metric, baseline_says = spec["metric"], spec["baseline"][1]
    lines = [
        prose(f"Measured here with `invoke results {recipe}`, which trains the run below, keeps its `results.json` "
              f"in [docs/results/{recipe}](../../docs/results/{recipe}) and writes this section. Data: {spec['data']}. "
              f"{spec['licence']}"),
        "",
        "| data | flags | launcher | replicas | steps | wall time | time to target | "
        f"{spec['split']} {metric} | baseline | machine |",
        "|---|---|---|---|---|---|---|---|---|---|",
        row(spec, results),
        *(row(spec, other) for other in replicated),
    ]
    if not (benchmark and benchmark.get("kind") == SIDE_BY_SIDE):  # that report has its own per-class tables
        lines += per_category_lines(results, results["final_metrics"][spec["split"]])
    rows, measured = benchmark_lines(spec, benchmark, results) if benchmark else ([], [])
    lines += rows
    lines += [
        "",
        prose(f"The baseline is {baseline_says}, on the same {spec['split']} split. Time to target counts from the "
              "process's start (TensorFlow's import and the data included) to the first evaluation at the target. "
              "The load average is the machine's: other work on it slows a run down."),
    ]
    if replicated:
        lines += [
            "",
            prose(f"Under {', '.join(r['launcher'] for r in replicated)}, {spec['replicated']['replicas']} replicas "
                  f"on the same CPU, with `{' '.join(spec['replicated']['args'])}` (the same global batch, and so the "
                  "same steps, schedule and data order as one device): each row measured with "
                  f"`invoke results {recipe} --data-dir DIR --launcher LAUNCHER`, kept in "
                  f"docs/results/{recipe}/LAUNCHER."),
        ]
    lines += measured
    lines += [
        "",
        f"![{recipe} learning curve](../../docs/results/{recipe}/curve.png)",
        "",
        prose(spec["not_here"]),
    ]
    return "\n".join(lines) + "\n"


SIDE_BY_SIDE = "segmentation-side-by-side"  # ci/bench/segmentation.py's report


def benchmark_lines(spec: dict, benchmark: dict, results: dict) -> tuple[list[str], list[str]]:
    """The kept benchmark report's rows of the table, and what follows the table."""
    if benchmark.get("kind") == SIDE_BY_SIDE:
        return side_by_side_lines(spec, benchmark, results)
    median, rounds = benchmark["median"], benchmark["rounds"]
    target = benchmark["target_accuracy"]
    rows = [
        f"| {spec['name']} | keras-io-style script, 15 epochs (`ci/bench/mnist_baseline.py`) | "
        f"— | 1 | — | {minutes(median['baseline_wall_seconds'])} | — | {median['baseline_test_accuracy']:.4f} "
        f"| — | same machine, same hour |",
        f"| {spec['name']} | `--target accuracy={target}` | single | 1 | "
        f"{rounds[-1]['recipe']['target_step']} | {minutes(median['recipe_wall_seconds'])} | "
        f"{minutes(median['recipe_time_to_target'])} | "
        f"{statistics_median([r['recipe']['test_accuracy'] for r in rounds]):.4f} | — | same machine, same hour |",
    ]
    paragraph = prose(
        f"Time to keras-io's {target:.2%} (its published test accuracy): the recipe's defaults with `--target "
        f"accuracy={target}` took {median['recipe_wall_seconds']:.0f} s as a whole process, the keras-io-style "
        f"script {median['baseline_wall_seconds']:.0f} s for its 15 epochs (reaching "
        f"{median['baseline_test_accuracy']:.2%}), a ratio of {median['recipe_over_baseline']:.2f} (the median "
        f"of {len(rounds)} interleaved rounds; the worst {median['recipe_over_baseline_worst']:.2f}). "
        f"Measured with `python -m ci.bench.time_to_accuracy --data-dir DIR --rounds {len(rounds)} --json "
        f"{spec['benchmark']}`.")
    return rows, ["", paragraph]


VERSION_PAGES = {"current": "its current page (Adam at 1e-4)", "2020": "its 2020 page (RMSprop)"}


def spread_cell(spread: dict | None, bold: bool = False, extent: bool = False) -> str:
    """A figure over seeds: its mean, ± its standard deviation when there are several seeds, and with
    `extent` its min and max."""
    if not spread:
        return "—"
    text = f"{spread['mean']:.3f}"
    if spread.get("std") is not None:
        text += f" ± {spread['std']:.3f}"
    text = f"**{text}**" if bold else text
    if extent and spread.get("n", 1) > 1:
        text += f" ({spread['min']:.3f}–{spread['max']:.3f})"
    return text


def spread_table(kind: str, names: list[str], per: dict, summary: dict, key: str, seeds: list, better: str) -> list:
    """A table of the IoU per class (or category): the recipe beside the better baseline, over the seeds."""
    heading = (f"IoU per {kind}, mean ± sd of {len(seeds)} seeds" if len(seeds) > 1
               else f"IoU per {kind}, seed {seeds[0]}")
    lines = ["", f"| {heading} | cityscapes-unet `--preset cpu` | keras.io U-Net, {better} page |", "|---|---|---|"]
    for index, name in enumerate(names):
        recipe = per["recipe"][index] if per.get("recipe") else None
        baseline = per["baseline"][index] if per.get("baseline") else None
        lines.append(f"| {name} | {spread_cell(recipe)} | {spread_cell(baseline)} |")
    lines.append(f"| **{kind} mean IoU** | {spread_cell(summary['recipe'][key], bold=True, extent=True)} | "
                 f"{spread_cell(summary[better][key], extent=True)} |")
    return lines


def side_by_side_lines(spec: dict, benchmark: dict, results: dict) -> tuple[list[str], list[str]]:
    """cityscapes-unet against keras.io's U-Net-like example (ci/bench/segmentation.py): the baselines' rows
    and the --target run's, the IoU per class and per category of the recipe and the better baseline over
    the seeds, and the paragraph that says how they were run."""
    if benchmark.get("version") != 2 or "summary" not in benchmark:
        raise ResultsError(f"{spec['benchmark']} is a report of an older ci/bench/segmentation.py (one seed, the "
                           "8 categories): run `python -m ci.bench.segmentation` again, then invoke results "
                           "cityscapes-unet --from its --results-dir")
    runs, summary, seeds = benchmark["runs"], benchmark["summary"], benchmark["seeds"]
    recipe, target, better = runs[-1]["recipe"], benchmark.get("target_run"), summary["better_baseline"]
    kept_iou = round(results["final_metrics"]["val"]["mean_iou"], 4)
    if recipe["steps"] != results["steps"] or recipe["mean_iou"] != kept_iou:
        raise ResultsError(f"{spec['benchmark']} is not the run kept in docs/results: keep its recipe run "
                           "(ci/bench/segmentation.py --results-dir DIR, then invoke results cityscapes-unet "
                           "--from DIR)")
    size = "x".join(str(side) for side in benchmark["baseline_size"])
    same_time = benchmark.get("baseline_budget") == "recipe"
    budget = "the recipe's wall time" if same_time else f"{benchmark['baseline_budget']:.0f} s"
    several = f", mean of seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else f", seed {seeds[0]}"
    rows = []
    if len(seeds) > 1:
        rows.append(f"| {spec['name']} | `--preset cpu --seed S`{several} | single | 1 | {recipe['steps']} | "
                    f"{minutes(summary['recipe']['wall_seconds']['mean'])} | — | "
                    f"{summary['recipe']['class_mean_iou']['mean']:.4f} | — | same machine, same hour |")
    for version in ("current", "2020"):
        mine = [run["baselines"][version] for run in runs]
        wall = sum(run["wall_seconds"] for run in mine) / len(mine)
        rows.append(f"| {spec['name']} | keras.io's U-Net as {VERSION_PAGES[version]}, scenes at {size}, {budget}"
                    f"{several} (`ci/bench/cityscapes_baseline.py --version {version}`) | — | 1 | "
                    f"{round(summary[version]['steps']['mean'])} | {minutes(wall)} | — | "
                    f"{summary[version]['class_mean_iou']['mean']:.4f} | — | same machine, same hour |")
    if target:
        rows.append(f"| {spec['name']} | `{target['flags']}` | single | 1 | {target['steps']} | "
                    f"{minutes(target['wall_seconds'])} | "
                    f"{minutes(target['time_to_target']) if target.get('reached', True) else 'not reached'} | "
                    f"{target['mean_iou']:.4f} | — | same machine, same hour |")
    tables = spread_table("class", benchmark["classes"], summary["iou_per_class"], summary, "class_mean_iou",
                          seeds, better)
    if benchmark.get("categories") and summary["recipe"]["category_mean_iou"]:
        tables += spread_table("category", benchmark["categories"], summary["iou_per_category"], summary,
                               "category_mean_iou", seeds, better)
    return rows, tables + ["", prose(side_by_side_text(spec, benchmark, size, same_time))]


def side_by_side_text(spec: dict, benchmark: dict, size: str, same_time: bool) -> str:
    runs, summary, seeds = benchmark["runs"], benchmark["summary"], benchmark["seeds"]
    better, other = summary["better_baseline"], "2020" if summary["better_baseline"] == "current" else "current"
    recipe, baseline = summary["recipe"], summary[better]
    batch = runs[-1]["baselines"][better]["batch_size"]
    command = " ".join(spec["benchmark"] if arg == "REPORT" else arg for arg in benchmark["command"])
    text = (f"Side by side over {'seeds' if len(seeds) > 1 else 'seed'} {', '.join(map(str, seeds))} in one run "
            f"of `{command}` (then `invoke results cityscapes-unet --from RUN`, which keeps the last seed's recipe "
            "run): for each seed, "
            f"the recipe's `--preset cpu --seed S` ran as a whole process ({recipe['wall_seconds']['mean']:.0f} s "
            "on average), then keras.io's U-Net-like example (Xception-style blocks, batch normalisation) as its "
            "current page trains it (Adam at 1e-4) and as its 2020 page did (RMSprop), each with the same seed, "
            + ("given that run's wall time from its own start" if same_time
               else f"given a fixed {benchmark['baseline_budget']:.0f} s (not the recipe's time)")
            + f", on the same scenes shrunk as the recipe shrinks them (to {size}, batch {batch}, the ignored "
            "labels out of its loss). All are scored as cityscapesScripts scores, at the labels' full resolution, "
            "the ignored labels left out: the class IoU and, from the same predictions, the category IoU.")
    ratio, delta = summary["class_ratio"], summary["category_delta"]
    text += (f" The better baseline is the {better} page ({baseline['class_mean_iou']['mean']:.4f} class mean IoU, "
             f"the {other} page {summary[other]['class_mean_iou']['mean']:.4f}): the recipe's class mean IoU, "
             f"{recipe['class_mean_iou']['mean']:.4f}, is "
             + (f"{ratio:.2f} times its" if ratio is not None else "above its 0")
             + (f", its category mean IoU {recipe['category_mean_iou']['mean']:.4f} against "
                f"{baseline['category_mean_iou']['mean']:.4f} ({delta:+.4f})" if delta is not None else "")
             + f"; the margin looked for ({summary['margin']} times the class mean IoU"
             + (", and no less category mean IoU" if delta is not None else "")
             + f") is {'met' if summary['margin_met'] else 'not met'}.")
    reached = runs[-1]["recipe"].get("time_to_iou")
    if reached:
        text += (f" The last seed's learning curve first reached a class mean IoU of {benchmark['target_iou']} at "
                 f"step {reached['step']}, {reached['seconds']:.0f} s after its start.")
    target = benchmark.get("target_run")
    if target and target.get("reached", True):
        text += (f" Run with `--target mean_iou={benchmark['target_iou']}`, it reached it at step "
                 f"{target['target_step']}, {target['time_to_target']:.0f} s after its start, and its process "
                 f"ended {target['wall_seconds'] - target['time_to_target']:.1f} s later, checkpoint, results and "
                 f"export included: {target['wall_seconds']:.0f} s from start to exit.")
    elif target:
        text += (f" Run with `--target mean_iou={benchmark['target_iou']}`, it did not reach it in "
                 f"{target['steps']} steps.")
    data = benchmark["data"]
    loads = [side["load_average"][moment][0] for run in runs for side in (run["recipe"], *run["baselines"].values())
             if "load_average" in side for moment in ("start", "end")]
    # the commit it ran is the kept report's ("git"): a README holds no commit
    text += (f" Data: {data['train_examples']} training and {data['val_examples']} val scenes, fingerprint "
             f"`{data['sha256'][:12]}` (sha256 of the prepared train.json and val.json); "
             f"the load average (1 min) at the runs' starts and ends {min(loads):.1f}–{max(loads):.1f}.")
    return text


def per_category_lines(results: dict, metrics: dict) -> list[str]:
    """Segmentation: which classes, and categories, the model learnt (IoU above 0) and which not."""
    groups = [("class", results.get("classes"), metrics.get("iou_per_class")),
              ("category", results.get("categories"), metrics.get("iou_per_category"))]
    if metrics.get("iou_per_class") is None:  # a run of before the 19 classes: its "classes" were categories
        groups = [("category", results.get("classes"), metrics.get("iou_per_category"))]
    lines = []
    for kind, names, values in groups:
        if not (names and values):
            continue
        pairs = list(zip(names, values, strict=False))
        learnt = ", ".join(f"{name} {iou:.3f}" for name, iou in pairs if iou)
        unlearnt = ", ".join(name for name, iou in pairs if iou == 0)
        absent = ", ".join(name for name, iou in pairs if iou is None)  # neither in the truth nor predicted
        lines += ["", prose(f"IoU per {kind}: {learnt or 'none above 0'}" + (f"; 0 for {unlearnt}" if unlearnt else "")
                            + (f"; none for {absent}, neither in the val scenes nor predicted" if absent else "")
                            + ".")]
    return lines


def prose(text: str) -> str:
    return textwrap.fill(text, 110, break_long_words=False, break_on_hyphens=False)


def statistics_median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def splice(readme: str, section: str, path: str) -> str:
    """`readme` with the text between its results markers replaced by `section`."""
    if readme.count(RESULTS_BEGIN) != 1 or readme.count(RESULTS_END) != 1:
        raise ResultsError(f"{path} must hold one line `{RESULTS_BEGIN}` and one `{RESULTS_END}` after it, "
                           "where its Results section goes")
    head, rest = readme.split(RESULTS_BEGIN)
    _, tail = rest.split(RESULTS_END)
    return f"{head}{RESULTS_BEGIN}\n{section}{RESULTS_END}{tail}"


def load_replicated(recipe: str) -> tuple[dict, ...]:
    """The kept runs of `recipe` under other launchers (docs/results/RECIPE/LAUNCHER), in LAUNCHERS' order."""
    return tuple(load(recipe, kept_dir(recipe, launcher))[0] for launcher in LAUNCHERS
                 if os.path.exists(os.path.join(kept_dir(recipe, launcher), "results.json")))


def section(recipe: str) -> str:
    """The README's Results section from everything kept in docs/results/RECIPE."""
    results, benchmark = load(recipe, kept_dir(recipe))
    return render(recipe, results, benchmark, load_replicated(recipe))


def load(recipe: str, folder: str) -> tuple[dict, dict | None]:
    """The kept results.json of `recipe` in `folder`, and its benchmark report if it has one."""
    path = os.path.join(folder, "results.json")
    try:
        with open(path) as handle:
            results = json.load(handle)
    except (OSError, ValueError) as error:
        raise ResultsError(f"{path} cannot be read ({error}); run `invoke results {recipe}` with --data-dir "
                           "or --from") from None
    check_results(results, recipe, path)
    benchmark = None
    if RECIPES[recipe]["benchmark"] and os.path.exists(os.path.join(ROOT, RECIPES[recipe]["benchmark"])):
        with open(os.path.join(ROOT, RECIPES[recipe]["benchmark"])) as handle:
            benchmark = json.load(handle)
    return results, benchmark


def replicas_label(results: dict) -> str:
    return f"{results['launcher']}, {results['replicas']} replica{'s' if results['replicas'] > 1 else ''}"


def plot(recipe: str, results: dict, path: str, replicated: tuple[dict, ...] = (),
         benchmark: dict | None = None) -> None:
    """The learning curve: the held-out metric against wall seconds, with the baseline and any target; with a
    side-by-side report, the short script's figure at the end of its time."""
    import matplotlib
    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    spec = RECIPES[recipe]
    metric, baseline_key = spec["metric"], spec["baseline"][0]
    curve = results["curve"]
    figure, axis = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    values = [p[metric] for p in curve]
    axis.plot([p["seconds"] for p in curve], values, marker="o", label=replicas_label(results))
    for other in replicated:  # the same run under other launchers
        axis.plot([p["seconds"] for p in other["curve"]], [p[metric] for p in other["curve"]], marker=".",
                  linewidth=0.8, label=replicas_label(other))
    baseline = results["final_metrics"][spec["split"]][baseline_key]
    low = min(values + [baseline]) if baseline >= min(values) - (max(values) - min(values) + 0.01) else None
    if low is None:  # far below the curve: named, not drawn, so that the curve keeps its detail
        axis.plot([], [], " ", label=f"baseline ({baseline_key}): {baseline:.4f}")
    else:
        axis.axhline(baseline, color="grey", linestyle=":", label=f"baseline ({baseline_key}): {baseline:.4f}")
    if benchmark and benchmark.get("kind") == SIDE_BY_SIDE and "runs" in benchmark:
        for version, marker in (("current", "X"), ("2020", "P")):  # the last seed's baselines, at their end
            script = benchmark["runs"][-1]["baselines"][version]
            axis.plot([script["trained_seconds"]], [script["mean_iou"]], marker=marker, linestyle="none",
                      color="black", label=f"keras.io U-Net, {version} page: {script['mean_iou']:.4f}")
    axis.set_xlabel("wall seconds since the start")
    axis.set_ylabel(f"{spec['split']} {metric}")
    axis.set_title(f"{recipe}: {flags_of(results.get('command', []))}", fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def keep(recipe: str, run_dir: str, launcher: str | None = None) -> str:
    """Copy `run_dir`'s results.json into docs/results/RECIPE (a run under another launcher: into
    docs/results/RECIPE/LAUNCHER), draw the curves and write the README's section; returns the README's path."""
    results, _ = load(recipe, run_dir)
    if launcher and (results["launcher"], results["replicas"]) != (launcher, RECIPES[recipe]["replicated"]["replicas"]):
        raise ResultsError(f"{run_dir}/results.json is a run of {results['launcher']} on {results['replicas']} "
                           f"replica(s), not of {launcher} on {RECIPES[recipe]['replicated']['replicas']}")
    folder = kept_dir(recipe, launcher)
    os.makedirs(folder, exist_ok=True)
    if os.path.abspath(run_dir) != os.path.abspath(folder):
        with open(os.path.join(run_dir, "results.json"), "rb") as handle:
            write_atomically(os.path.join(folder, "results.json"), handle.read())
    results, benchmark = load(recipe, kept_dir(recipe))
    replicated = load_replicated(recipe)
    plot(recipe, results, os.path.join(kept_dir(recipe), "curve.png"), replicated, benchmark)
    readme = os.path.join(ROOT, "recipes", recipe, "README.md")
    with open(readme) as handle:
        text = splice(handle.read(), render(recipe, results, benchmark, replicated), readme)
    write_atomically(readme, text)
    return readme
