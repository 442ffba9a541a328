"""cityscapes-unet end to end under each launcher, as a user runs it: fixture zips -> prepare_data.py
-> invoke run, then a run stopped and resumed; the export of the two-process runs is checked too. In
one process (--benchmark, --profile, predictions): tests/recipes/cityscapes/test_train.py."""
import pytest

from cityscapes_data import official_evaluation
from helpers import RESULT_FIELDS, assert_ok, read_results, run_invoke

pytestmark = pytest.mark.slow


def invoke_run(prepared, results_dir, launcher, *train_args):
    # Batch norm, not the default (none): its moving statistics are the state that only the
    # training loop's averaging keeps equal on every replica, and these runs check that it does.
    return run_invoke("run", "cityscapes-unet", "--gpus", "0", "--cpu-replicas", "1" if launcher == "single" else "2",
                      "--launcher", launcher, "--runtime", "local", "--data-dir", str(prepared),
                      "--results-dir", str(results_dir), "--", "--preset", "tiny", "--norm", "batch",
                      "--log-every", "5", *train_args)


@pytest.mark.parametrize("launcher", ["single", "mirrored", "multiworker", "horovod"])
def test_trains_under_every_launcher_and_resumes_exactly(prepared, tmp_path, launcher, request):
    """Also: a run stopped after step 4 and resumed to step 10 ends bit-identical to the 10-step run,
    with batch norm (whose statistics every replica averages every step) and the default augmentation
    (random zoom, crop and flip). The default (no normalisation) has no such state; tests/recipes/cityscapes/
    test_model.py checks that it keeps each image's prediction independent of its batch."""
    if launcher == "horovod":
        request.getfixturevalue("require_horovod")
    process = invoke_run(prepared, tmp_path / "whole", launcher, "--max-steps", "10",
                         "--predict-dir", str(tmp_path / "predicted"), "--predict-format", "labelids")
    assert_ok(process)
    results = read_results(tmp_path / "whole")
    replicas = 1 if launcher == "single" else 2
    assert RESULT_FIELDS <= results.keys()
    assert (results["launcher"], results["replicas"], results["steps"]) == (launcher, replicas, 10)
    assert len(results["replica_fingerprints"]) == replicas and len(set(results["replica_fingerprints"])) == 1
    val = results["final_metrics"]["val"]
    assert val["examples"] == 4 and 0.0 <= val["mean_iou"] <= 1.0
    assert len(val["iou_per_class"]) == 19 and len(val["iou_per_category"]) == 7
    # the official evaluation of the label-id PNGs the run wrote agrees with the run's own figures
    official = official_evaluation(prepared.parent / "release", tmp_path / "predicted", tmp_path / "official")
    assert official["averageScoreClasses"] == pytest.approx(val["mean_iou"], abs=1e-4)
    assert official["averageScoreCategories"] == pytest.approx(val["category_mean_iou"], abs=1e-4)
    for name, iou in zip(results["classes"], val["iou_per_class"], strict=True):
        assert official["classScores"][name] == pytest.approx(float("nan") if iou is None else iou, abs=1e-4,
                                                              nan_ok=True), name
    if replicas > 1 and launcher != "mirrored":  # an export written by a job of two processes serves the model
        from export_checks import check_export
        from helpers import recipe_module
        labels = recipe_module("cityscapes-unet", "labels")
        check_export(tmp_path / "whole", tmp_path, recipe="cityscapes-unet", build_args=(8, 2, 0.0, "batch"),
                     size=(64, 128), channels=3,
                     classes=labels.cityscapes_views()["classes"]["names"])

    assert_ok(invoke_run(prepared, tmp_path / "parts", launcher, "--max-steps", "4"))
    resumed = invoke_run(prepared, tmp_path / "parts", launcher, "--max-steps", "10", "--resume")
    assert_ok(resumed)
    assert "at step 4" in resumed.stdout
    assert read_results(tmp_path / "parts")["replica_fingerprints"] == results["replica_fingerprints"]
