"""cityscapes-unet end to end, as a user runs it: fixture zips -> prepare_data.py -> invoke run under
each launcher; plus --benchmark, --profile and prediction PNGs."""
import os

import pytest

from helpers import RESULT_FIELDS, assert_ok, read_results, run_invoke, run_python

pytestmark = pytest.mark.slow
RECIPE = "recipes/cityscapes-unet"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("cityscapes")
    assert_ok(run_python(f"{RECIPE}/make_fixture.py", "--out", str(root / "release"), "--zip", "--no-tree",
                         "--train", "8", "--val", "4"))
    assert_ok(run_python(f"{RECIPE}/prepare_data.py", "--source", str(root / "release"), "--out", str(root / "prepared")))
    return root / "prepared"


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


def test_benchmark_mode_measures_generated_full_size_batches(tmp_path):
    # Full-size tensors at a tiny model: the mode is what is tested here, not the speed.
    process = run_python(f"{RECIPE}/train.py", "--benchmark", "--preset", "tiny", "--crop", "1024x2048",
                         "--batch-size", "1", "--max-steps", "3", "--warmup-steps", "1", "--results-dir", str(tmp_path))
    assert_ok(process)
    results = read_results(tmp_path)
    assert results["mode"] == "benchmark" and results["crop"] == [1024, 2048]
    assert results["timed_steps"] == 2 and results["images_per_sec"] > 0
    assert results["step_time_p90_ms"] >= results["step_time_p50_ms"] > 0


def test_profile_and_predictions_are_written(prepared, tmp_path):
    process = run_python(f"{RECIPE}/train.py", "--preset", "tiny", "--data-dir", str(prepared), "--max-steps", "4",
                         "--profile", "1:3", "--predict-dir", str(tmp_path / "pred"), "--predict-count", "2",
                         "--results-dir", str(tmp_path / "run"))
    assert_ok(process)
    traces = [name for _, _, files in os.walk(tmp_path / "run" / "profile") for name in files]
    assert any(name.endswith(".xplane.pb") for name in traces), traces
    pngs = sorted(os.listdir(tmp_path / "pred"))
    assert pngs == ["val_0000.png", "val_0001.png"]


@pytest.mark.parametrize("args,message", [
    ([], "--data-dir is required"),
    (["--data-dir", "/nonexistent"], "prepare_data.py"),
    (["--crop", "100x200", "--benchmark"], "multiples of 16"),
])
def test_bad_input_is_named(args, message):
    process = run_python(f"{RECIPE}/train.py", "--max-steps", "1", *args)
    assert process.returncode == 2, process.stderr[-2000:]
    assert message in process.stderr and "Traceback" not in process.stderr
