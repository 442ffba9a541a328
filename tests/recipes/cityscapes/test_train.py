"""cityscapes-unet trained in one process, as a user runs it: fixture zips -> prepare_data.py ->
train.py with --benchmark, --profile and prediction PNGs, and its one-line errors. Under every
launcher, with an exact resume: tests/integration/test_cityscapes_launchers.py."""
import os

import pytest

from cityscapes_data import RECIPE
from helpers import assert_ok, read_results, run_python

pytestmark = pytest.mark.slow


@pytest.mark.full  # full-size tensors, the night's; every push runs --benchmark at the tiny crop (test_predict.py)
def test_benchmark_mode_measures_generated_full_size_batches(tmp_path):
    # Full-size tensors at a tiny model: the mode is what is tested here, not the speed.
    process = run_python(f"{RECIPE}/train.py", "--benchmark", "--preset", "tiny", "--crop", "1024x2048",
                         "--batch-size", "1", "--max-steps", "3", "--warmup-steps", "1", "--results-dir", str(tmp_path),
                         "--no-export")
    assert_ok(process)
    results = read_results(tmp_path)
    assert results["mode"] == "benchmark" and results["crop"] == [1024, 2048]
    assert results["timed_steps"] == 2 and results["images_per_sec"] > 0
    assert results["step_time_p90_ms"] >= results["step_time_p50_ms"] > 0
    assert not (tmp_path / "export").exists()  # --no-export


def test_profile_and_predictions_are_written(prepared, tmp_path):
    process = run_python(f"{RECIPE}/train.py", "--preset", "tiny", "--data-dir", str(prepared), "--max-steps", "4",
                         "--profile", "1:3", "--predict-dir", str(tmp_path / "pred"), "--predict-count", "2",
                         "--results-dir", str(tmp_path / "run"))
    assert_ok(process)
    traces = [name for _, _, files in os.walk(tmp_path / "run" / "profile") for name in files]
    assert any(name.endswith(".xplane.pb") for name in traces), traces
    pngs = sorted(os.listdir(tmp_path / "pred"))
    assert pngs == ["val_0000.png", "val_0001.png"]
    check_segmentation_export(tmp_path)


def check_segmentation_export(tmp_path):
    """RESULTS/export of the run above: served class ids and probabilities at the crop size, the classes file."""
    import json

    from export_checks import check_export

    from helpers import recipe_module
    trained = recipe_module("cityscapes-unet", "labels").cityscapes_views()["classes"]  # the 19 classes
    served = check_export(tmp_path / "run", tmp_path, recipe="cityscapes-unet", build_args=(8, 2, 0.0, "none"),
                          size=(64, 128), channels=3,
                          classes=trained["names"])
    assert served["class_ids"].shape == (3, 64, 128)
    classes = json.loads((tmp_path / "run" / "export" / "1" / "assets.extra" / "classes.json").read_text())
    named = zip(trained["names"], trained["colours"], strict=True)
    assert [(c["id"], c["name"], list(c["colour"])) for c in classes] == [
        (i, name, list(colour)) for i, (name, colour) in enumerate(named)]


@pytest.mark.parametrize("args,message", [
    ([], "--data-dir is required"),
    (["--data-dir", "/nonexistent"], "prepare_data.py"),
    (["--crop", "100x200", "--benchmark"], "multiples of 16"),  # the full preset's UNet-S5-D16 halves 4 times
    (["--preset", "resnet50", "--crop", "80x160", "--benchmark"], "multiples of 32"),  # its ResNet50, 5 times
    (["--encoder-weights", "/nonexistent/resnet50.h5"], "is neither imagenet, none nor a file of ResNet50's"),
    # synchronized batch norm all-reduces inside the step that XLA would compile per replica
    (["--preset", "tiny", "--norm", "batch", "--synthetic", "--xla", "--launcher", "mirrored", "--cpu-replicas", "2"],
     "--xla compiles each replica's step on its own"),
])
def test_bad_input_is_named(args, message):
    process = run_python(f"{RECIPE}/train.py", "--max-steps", "1", *args)
    assert process.returncode == 2, process.stderr[-2000:]
    assert message in process.stderr and "Traceback" not in process.stderr


def test_the_categories_view_trains_the_7_categories_with_void_ignored(prepared, tmp_path):
    process = run_python(f"{RECIPE}/train.py", "--preset", "tiny", "--data-dir", str(prepared), "--max-steps", "2",
                         "--classes", "categories", "--results-dir", str(tmp_path / "run"), "--no-export")
    assert_ok(process)
    results = read_results(tmp_path / "run")
    assert results["view"] == "categories" and results["classes"] == [
        "flat", "construction", "object", "nature", "sky", "human", "vehicle"]
    assert len(results["final_metrics"]["val"]["iou_per_class"]) == 7
    assert "category_mean_iou" not in results["final_metrics"]["val"]  # the classes are the categories
