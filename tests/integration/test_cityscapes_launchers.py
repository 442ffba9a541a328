"""cityscapes-unet end to end under each launcher, as a user runs it: fixture zips -> prepare_data.py
-> invoke run, then a run stopped and resumed. In one process (--benchmark, --profile, predictions):
tests/recipes/cityscapes/test_train.py."""
import pytest

from helpers import RESULT_FIELDS, assert_ok, read_results, run_invoke

pytestmark = pytest.mark.slow


def invoke_run(prepared, results_dir, launcher, *train_args):
    return run_invoke("run", "cityscapes-unet", "--gpus", "0", "--cpu-replicas", "1" if launcher == "single" else "2",
                      "--launcher", launcher, "--runtime", "local", "--data-dir", str(prepared),
                      "--results-dir", str(results_dir), "--", "--preset", "tiny", "--log-every", "5", *train_args)


@pytest.mark.parametrize("launcher", ["single", "mirrored", "multiworker", "horovod"])
def test_trains_under_every_launcher_and_resumes_exactly(prepared, tmp_path, launcher, request):
    """Also: a run stopped after step 4 and resumed to step 10 ends bit-identical to the 10-step run,
    with the default model (batch norm, whose statistics every replica averages every step) and the
    default augmentation (random zoom, crop and flip)."""
    if launcher == "horovod":
        request.getfixturevalue("require_horovod")
    process = invoke_run(prepared, tmp_path / "whole", launcher, "--max-steps", "10")
    assert_ok(process)
    results = read_results(tmp_path / "whole")
    replicas = 1 if launcher == "single" else 2
    assert RESULT_FIELDS <= results.keys()
    assert (results["launcher"], results["replicas"], results["steps"]) == (launcher, replicas, 10)
    assert len(results["replica_fingerprints"]) == replicas and len(set(results["replica_fingerprints"])) == 1
    val = results["final_metrics"]["val"]
    assert val["examples"] == 4 and 0.0 <= val["mean_iou"] <= 1.0
    assert len(val["iou_per_category"]) == 8

    assert_ok(invoke_run(prepared, tmp_path / "parts", launcher, "--max-steps", "4"))
    resumed = invoke_run(prepared, tmp_path / "parts", launcher, "--max-steps", "10", "--resume")
    assert_ok(resumed)
    assert "at step 4" in resumed.stdout
    assert read_results(tmp_path / "parts")["replica_fingerprints"] == results["replica_fingerprints"]
