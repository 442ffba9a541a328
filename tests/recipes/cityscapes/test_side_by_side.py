"""ci/bench/segmentation.py, the side-by-side benchmark of cityscapes-unet and the keras.io-style U-Net, run
whole on the generated fixture: the recipe, the baseline given the recipe's wall time, the recipe to its
target; the README's Results section is rendered from what it wrote."""
import json

from ci import results as results_section
from cityscapes_data import prepared  # noqa: F401 (fixture)
from helpers import assert_ok, read_results, run_python


def test_the_benchmark_runs_both_in_the_same_time_and_its_report_makes_the_results_section(
        prepared, tmp_path):  # noqa: F811
    report_path, kept = tmp_path / "side-by-side.json", tmp_path / "recipe-run"
    # 64x128 fixture scenes seen at 32x64; a target of 0 is reached at the first evaluation
    process = run_python("-m", "ci.bench.segmentation", "--data-dir", str(prepared), "--target-iou", "0",
                         "--results-dir", str(kept), "--json", str(report_path),
                         "--", "--downscale", "2", "--max-steps", "2", timeout=1200)
    assert_ok(process)
    report = json.loads(report_path.read_text())
    (round_,) = report["rounds"]
    recipe, baseline, target = round_["recipe"], round_["baseline"], round_["target_run"]
    results = read_results(kept)
    assert results["command"][-4:] == ["--downscale", "2", "--max-steps", "2"]
    assert recipe["mean_iou"] == round(results["final_metrics"]["val"]["mean_iou"], 4) and recipe["steps"] == 2
    # The baseline trained for the recipe's whole wall time, counted from its own start, then was scored
    assert baseline["budget_seconds"] == recipe["wall_seconds"] <= baseline["trained_seconds"]
    assert baseline["trained_seconds"] < baseline["wall_seconds"]
    assert baseline["steps"] >= 1 and len(baseline["iou_per_category"]) == len(report["classes"]) == 8
    assert target["target_step"] == target["steps"] and 0 <= target["after_target_seconds"] < target["wall_seconds"]
    assert round_["recipe_minus_baseline"] == round(recipe["mean_iou"] - baseline["mean_iou"], 4)

    section = results_section.render("cityscapes-unet", results, report)
    assert f"| {baseline['mean_iou']:.4f} | — | same machine, same hour |" in section
    assert "| IoU per category | void | flat |" in section and f"**{recipe['mean_iou']:.3f}**" in section
    assert "`--preset cpu --downscale 2 --max-steps 2 --target mean_iou=0.0`" in section
