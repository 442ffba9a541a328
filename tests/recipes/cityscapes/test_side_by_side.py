"""ci/bench/segmentation.py, the side-by-side benchmark of cityscapes-unet and keras.io's U-Net-like example,
run whole on the generated fixture for one seed: the recipe, the baseline as the current and the 2020 page
train it, the recipe to its target; the README's Results section is rendered from what it wrote."""
import hashlib
import json

import pytest

from ci import results as results_section
from cityscapes_data import prepared  # noqa: F401 (fixture)
from helpers import assert_ok, read_results, run_python

# In the full tier only: a benchmark run whole, the night's; every push trains the recipe and scores it
# (test_train.py, test_labels.py).
pytestmark = pytest.mark.full


def test_the_benchmark_runs_the_recipe_and_both_baselines_and_its_report_makes_the_results_section(
        prepared, tmp_path):  # noqa: F811
    report_path, kept = tmp_path / "side-by-side.json", tmp_path / "recipe-run"
    # 64x128 fixture scenes, the recipe's seen at 32x64 for 2 steps, the baselines' at 32x64 for a budget of 1 s
    # (which their start-up uses up: each trains one batch); a target of 0 is reached at the first evaluation
    process = run_python("-m", "ci.bench.segmentation", "--data-dir", str(prepared), "--seeds", "0",
                         "--target-iou", "0", "--baseline-size", "32x64", "--baseline-seconds", "1",
                         "--results-dir", str(kept), "--json", str(report_path),
                         "--", "--downscale", "2", "--max-steps", "2", timeout=900)
    assert_ok(process)
    report = json.loads(report_path.read_text())
    (run,) = report["runs"]
    recipe, baselines, target, summary = run["recipe"], run["baselines"], report["target_run"], report["summary"]
    results = read_results(kept)  # the last (only) seed's recipe run, kept
    assert results["command"][-6:] == ["--seed", "0", "--downscale", "2", "--max-steps", "2"]
    val = results["final_metrics"]["val"]
    assert recipe["mean_iou"] == round(val["mean_iou"], 4) and recipe["steps"] == 2
    assert recipe["category_mean_iou"] == round(val["category_mean_iou"], 4)
    assert report["classes"] == results["classes"] and len(report["classes"]) == len(recipe["iou_per_class"]) == 19
    assert report["categories"] == results["categories"] and len(report["categories"]) == 7

    # Each version of the page: its own optimizer, the recipe's view and seed, trained until its budget (from
    # its own start), then scored on every class and category
    assert {version: b["optimizer"] for version, b in baselines.items()} == {
        "current": "Adam at 1e-4", "2020": "rmsprop (Keras's default rate, 1e-3)"}
    for version, baseline in baselines.items():
        assert baseline["version"] == version and baseline["seed"] == 0 and baseline["size"] == [32, 64]
        assert baseline["budget_seconds"] == 1.0 <= baseline["trained_seconds"] < baseline["wall_seconds"]
        assert baseline["steps"] >= 1 and baseline["batch_size"] == 8
        assert len(baseline["iou_per_class"]) == 19 and len(baseline["iou_per_category"]) == 7
        assert "--classes" in baseline["command"] and recipe["view"] == "classes"
        assert all(len(baseline["load_average"][moment]) == 3 for moment in ("start", "end"))
        assert f"seed 0 keras.io U-Net ({version}): class mean IoU {baseline['mean_iou']:.4f}" in process.stdout

    # The summary: the better page is the one of higher class mean IoU, and the ratio and margin follow from it
    better = max(("current", "2020"), key=lambda version: baselines[version]["mean_iou"])
    assert summary["better_baseline"] == better
    assert summary["recipe"]["class_mean_iou"] == {"mean": recipe["mean_iou"], "min": recipe["mean_iou"],
                                                   "max": recipe["mean_iou"], "std": None, "n": 1}
    ratio, delta = summary["class_ratio"], summary["category_delta"]
    assert ratio == (round(recipe["mean_iou"] / baselines[better]["mean_iou"], 3) if baselines[better]["mean_iou"]
                     else None)
    assert delta == round(recipe["category_mean_iou"] - baselines[better]["category_mean_iou"], 4)
    assert summary["margin_met"] == ((ratio >= 1.2 if ratio is not None else recipe["mean_iou"] > 0) and delta >= 0)
    per_class = summary["iou_per_class"]["baseline"]
    assert [cell and cell["mean"] for cell in per_class] == baselines[better]["iou_per_class"]

    assert target["reached"] and target["target_step"] == target["steps"]
    assert 0 <= target["after_target_seconds"] < target["wall_seconds"]
    digest = hashlib.sha256()
    for split in ("train", "val"):
        content = (prepared / f"{split}.json").read_bytes()
        digest.update(f"{split}.json {len(content)}\n".encode() + content)
    assert report["data"]["sha256"] == digest.hexdigest() and report["data"]["train_examples"] == 8
    assert len(report["git"]["commit"]) == 40 and isinstance(report["git"]["dirty"], bool)

    section = results_section.render("cityscapes-unet", results, report)
    assert f"| {baselines['2020']['mean_iou']:.4f} | — | same machine, same hour |" in section
    assert f"| {baselines['current']['mean_iou']:.4f} | — | same machine, same hour |" in section
    assert "| IoU per class, seed 0 | cityscapes-unet `--preset cpu` |" in section and "| road |" in section
    assert "| IoU per category, seed 0 |" in section and "| vehicle |" in section
    assert "`--preset cpu --seed 0 --downscale 2 --max-steps 2 --target mean_iou=0.0`" in section
