"""ci/bench/segmentation.py without training: which runs it makes with which budgets, and what its summary
says of them (the runs are stand-ins here; tests/recipes/cityscapes/test_side_by_side.py runs them for real);
ci/bench/cityscapes_baseline.py's one-line answer to a folder it cannot train on."""
import argparse
import json
import pathlib
import statistics

import pytest

from ci.bench import segmentation
from helpers import run_python

CLASSES, CATEGORIES = ["road", "car", "sky"], ["flat", "vehicle", "sky"]
# class mean IoU of each seed: the recipe, and each version of the page (2020 the better one here)
RECIPE_IOU = {3: 0.50, 5: 0.56, 8: 0.53}
PAGE_IOU = {"current": {3: 0.30, 5: 0.36, 8: 0.33}, "2020": {3: 0.42, 5: 0.40, 8: 0.44}}


def per_class(mean_iou: float, seed: int) -> list:
    return [mean_iou + 0.1, mean_iou - 0.1 + seed / 100, None]


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """Each run replaced by a stand-in that records how it was asked for and answers figures of its seed."""
    asked = {"recipe": [], "baseline": [], "target": []}

    def recipe_run(data_dir, results_dir, log, seed, extra, target_iou):
        asked["recipe"].append({"seed": seed, "extra": extra})
        pathlib.Path(results_dir).mkdir(parents=True)
        (pathlib.Path(results_dir) / "results.json").write_text(json.dumps(
            {"view": "classes", "classes": CLASSES, "categories": CATEGORIES, "seed": seed}))
        return {"seed": seed, "wall_seconds": 100.0 + seed, "load_average": {"start": [1, 1, 1], "end": [2, 2, 2]},
                "view": "classes", "mean_iou": RECIPE_IOU[seed], "iou_per_class": per_class(RECIPE_IOU[seed], seed),
                "category_mean_iou": RECIPE_IOU[seed] + 0.2, "iou_per_category": [0.9, 0.8, None], "steps": 600}

    def baseline_run(data_dir, version, seconds, view, seed, size, out, log):
        asked["baseline"].append({"version": version, "seconds": seconds, "view": view, "seed": seed, "size": size})
        iou = PAGE_IOU[version][seed]
        return {"seed": seed, "version": version, "wall_seconds": seconds + 5, "budget_seconds": seconds,
                "load_average": {"start": [1, 1, 1], "end": [2, 2, 2]}, "mean_iou": iou,
                "iou_per_class": per_class(iou, seed), "category_mean_iou": iou + 0.25,
                "iou_per_category": [0.7, 0.6, None], "steps": 700, "batch_size": 8}

    def target_run(data_dir, results_dir, log, seed, extra, target_iou):
        asked["target"].append({"seed": seed, "target_iou": target_iou})
        return {"seed": seed, "reached": True, "target_step": 75, "time_to_target": 80.0, "after_target_seconds": 3.0,
                "steps": 75, "wall_seconds": 83.0}

    for name, function in (("recipe_run", recipe_run), ("baseline_run", baseline_run), ("target_run", target_run)):
        monkeypatch.setattr(segmentation, name, function)
    data = tmp_path / "prepared"
    data.mkdir()
    for split, count in (("train", 4), ("val", 2)):
        (data / f"{split}.json").write_text(json.dumps({"format": "f", "examples": [str(i) for i in range(count)],
                                                        "height": 8, "width": 16}))
    return asked, data


def arguments(data, **given):
    return argparse.Namespace(**{"data_dir": str(data), "seeds": [3, 5, 8], "target_iou": 0.2,
                                 "baseline_size": "128x256", "baseline_seconds": None, "results_dir": None,
                                 "recipe_args": ["--epochs", "2"], **given})


def test_each_seed_gives_both_pages_the_recipes_wall_time_of_that_seed(stand_ins, capsys):
    asked, data = stand_ins
    report = segmentation.benchmark(arguments(data))
    assert [run["seed"] for run in asked["recipe"]] == [3, 5, 8]
    assert all(run["extra"] == ["--epochs", "2"] for run in asked["recipe"])
    assert asked["baseline"] == [{"version": version, "seconds": 100.0 + seed, "view": "classes", "seed": seed,
                                  "size": "128x256"} for seed in (3, 5, 8) for version in ("current", "2020")]
    assert asked["target"] == [{"seed": 3, "target_iou": 0.2}]  # one run to the target, with the first seed
    assert report["classes"] == CLASSES and report["categories"] == CATEGORIES and report["baseline_budget"] == "recipe"
    assert report["data"]["train_examples"] == 4 and report["data"]["val_examples"] == 2
    assert len(report["data"]["sha256"]) == 64 and report["command"][-4:] == ["REPORT", "--", "--epochs", "2"]
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 3 * 3 + 1  # a line per finished run
    assert printed[1] == ("seed 3 keras.io U-Net (current): class mean IoU 0.3000, category mean IoU 0.5500, "
                          "700 steps in 108 s (budget 103 s), load 1.0 -> 2.0")

    summary = report["summary"]
    assert summary["better_baseline"] == "2020"  # the higher mean class mean IoU over the seeds
    recipe, page = list(RECIPE_IOU.values()), list(PAGE_IOU["2020"].values())
    assert summary["recipe"]["class_mean_iou"] == {
        "mean": round(statistics.fmean(recipe), 4), "min": min(recipe), "max": max(recipe),
        "std": round(statistics.stdev(recipe), 4), "n": 3}
    assert summary["class_ratio"] == round(round(statistics.fmean(recipe), 4) / round(statistics.fmean(page), 4), 3)
    assert summary["category_delta"] == round(statistics.fmean(recipe) + 0.2 - statistics.fmean(page) - 0.25, 4)
    assert summary["margin_met"] is (summary["class_ratio"] >= 1.2 and summary["category_delta"] >= 0)
    # the per-class table: the recipe beside the better page, each class over the seeds; a class never seen, None
    assert [cell and cell["mean"] for cell in summary["iou_per_class"]["baseline"]] == [
        round(statistics.fmean(iou + 0.1 for iou in page), 4),
        round(statistics.fmean(iou - 0.1 + seed / 100 for seed, iou in PAGE_IOU["2020"].items()), 4), None]
    assert summary["iou_per_category"]["recipe"][1]["std"] == 0.0


def test_a_fixed_baseline_budget_is_given_to_every_run_and_said(stand_ins):
    asked, data = stand_ins
    report = segmentation.benchmark(arguments(data, seeds=[5], baseline_seconds=7.0))
    assert {run["seconds"] for run in asked["baseline"]} == {7.0} and report["baseline_budget"] == 7.0
    assert report["summary"]["recipe"]["class_mean_iou"]["std"] is None  # one seed: no spread


def one_seed(recipe_class, recipe_category, page_class, page_category):
    figures = {"iou_per_class": None, "iou_per_category": None, "wall_seconds": 1.0, "steps": 1}
    return [{"seed": 0, "recipe": {**figures, "mean_iou": recipe_class, "category_mean_iou": recipe_category},
             "baselines": {version: {**figures, "mean_iou": page_class, "category_mean_iou": page_category}
                           for version in segmentation.VERSIONS}}]


@pytest.mark.parametrize("recipe_class, recipe_category, met", [
    (0.6, 0.8, True), (0.6, 0.7, True), (0.599, 0.8, False), (0.6, 0.699, False)])
def test_the_margin_wants_a_fifth_more_class_iou_and_no_less_category_iou(recipe_class, recipe_category, met):
    summary = segmentation.summarize(one_seed(recipe_class, recipe_category, 0.5, 0.7))
    assert summary["margin_met"] is met


def test_pairs_data_without_categories_is_judged_on_its_classes():
    runs = [{"seed": seed, "recipe": {"mean_iou": 0.6, "category_mean_iou": None, "wall_seconds": 10.0,
                                      "iou_per_class": [0.6, 0.6], "iou_per_category": None},
             "baselines": {version: {"mean_iou": 0.4 if version == "current" else 0.3, "category_mean_iou": None,
                                     "steps": 9, "iou_per_class": [0.4, 0.4], "iou_per_category": None}
                           for version in segmentation.VERSIONS}} for seed in (0, 1)]
    summary = segmentation.summarize(runs)
    assert summary["better_baseline"] == "current" and summary["class_ratio"] == 1.5
    assert summary["category_delta"] is None and summary["margin_met"] is True
    assert summary["recipe"]["category_mean_iou"] is None and summary["iou_per_category"]["recipe"] is None


@pytest.mark.parametrize("problem", ["missing", "old format", "unknown view"])
def test_the_baseline_answers_a_folder_it_cannot_train_on_in_one_line(tmp_path, problem):
    data = tmp_path / "prepared"
    if problem != "missing":
        data.mkdir()
        index = ({"format": "cityscapes-categories-png/1"} if problem == "old format" else
                 {"format": "cityscapes-labels-png/2", "examples": ["a"], "default_view": "classes",
                  "views": {"classes": {"names": ["x"], "lookup": [0] * 256}}})
        for split in ("train", "val"):
            (data / f"{split}.json").write_text(json.dumps(index))
    process = run_python("ci/bench/cityscapes_baseline.py", "--data-dir", str(data), "--seconds", "1",
                         *(["--classes", "categories"] if problem == "unknown view" else []))
    assert process.returncode == 2 and "Traceback" not in process.stderr
    (message,) = process.stderr.strip().splitlines()
    assert message.startswith("error: ") and str(data) in message
    assert {"missing": "holds no train.json; give a folder that recipes/cityscapes-unet/prepare_data.py wrote",
            "old format": "not cityscapes-labels-png/2; run this version's recipes/cityscapes-unet/prepare_data.py",
            "unknown view": "--classes categories: the data in"}[problem] in message
