"""cassava-resnet under the launchers with 2 replicas, as a user runs it, on a generated prepared TFDS
directory:

    invoke run cassava-resnet --gpus 0 --cpu-replicas 2 --launcher L --runtime local -- \
        --max-steps 5 --weights FILE --image-size 64 --data-dir GENERATED

Each run must exit 0, write a complete results.json and end with every replica's weights (trainable
and batch-norm statistics) bit-identical. Because every launcher groups the same examples on a
replica (batch normalization depends on it) and sums the same gradients, and both start from the
same weights file, the launchers must also follow one loss curve. The mirrored run's export is
checked; the horovod run passes `--no-export`, since a chief's export under a job of two processes is
checked in test_mnist_launchers.py and test_cityscapes_launchers.py, and ResNet50's export is a sixth
of such a run's CPU time.

Here: mirrored (one process) and horovod (two processes, each caching its own chunk of the photos).
One device (`--launcher single`) trains cassava-resnet in tests/recipes/cassava/ (an image folder, the
benchmark's step, the damaged-data runs), in the same process as `invoke run --launcher single` starts
it. multiworker, the other two-process launcher, runs cassava-resnet every night in its image, held
to the mirrored cell's losses and weights (ci/nightly/matrix.yaml, tier cpu), and on every submission
with mnist-cnn and cityscapes-unet (test_mnist_launchers.py, test_cityscapes_launchers.py).
"""
import numpy as np
import pytest

from cassava_data import SPLITS
from helpers import RESULT_FIELDS, assert_ok, read_results, run_invoke

# In the full tier only: each recipe under every launcher is the night's; every push proves the launchers
# with mnist-cnn's parity runs and trains cassava-resnet in one process (tests/recipes/cassava).
pytestmark = [pytest.mark.slow, pytest.mark.full]
MULTI = ["mirrored", "horovod"]
TRAIN_ARGS = ["--max-steps", "5", "--image-size", "64", "--batch-size", "2", "--log-every", "1"]
LOSS_RTOL = 1e-3  # float32 sums in another order; a different grouping of examples moves losses by >10%


def invoke_local(tmp_path, launcher, replicas, data_dir, *train_args):
    results_dir = tmp_path / launcher
    process = run_invoke("run", "cassava-resnet", "--gpus", "0", "--cpu-replicas", str(replicas),
                         "--launcher", launcher, "--runtime", "local", "--results-dir", str(results_dir), "--",
                         *TRAIN_ARGS, "--data-dir", str(data_dir), "--cache-dir", str(tmp_path / f"cache-{launcher}"),
                         *train_args)
    return process, results_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cassava_data_dir, keras_backbone_file, request):
    tmp = tmp_path_factory.mktemp("cassava-runs")
    weights = ["--weights", str(keras_backbone_file)]
    done = {"mirrored": invoke_local(tmp, "mirrored", 2, cassava_data_dir, *weights)}
    request.getfixturevalue("require_horovod")
    done["horovod"] = invoke_local(tmp, "horovod", 2, cassava_data_dir, *weights, "--no-export")
    return done


@pytest.mark.parametrize("launcher", MULTI)
def test_two_replicas_train_in_sync_and_write_results(runs, launcher, keras_backbone_file):
    process, results_dir = runs[launcher]
    assert_ok(process)
    results = read_results(results_dir)
    assert RESULT_FIELDS <= results.keys()
    assert (results["recipe"], results["launcher"], results["replicas"]) == ("cassava-resnet", launcher, 2)
    assert (results["steps"], results["global_batch"], results["steps_per_epoch"]) == (5, 4, SPLITS["train"] // 4)
    assert len(results["replica_fingerprints"]) == 2 and len(set(results["replica_fingerprints"])) == 1
    assert results["final_metrics"]["validation"]["examples"] == SPLITS["validation"]
    assert (results["data"], results["image_size"], results["weights"]) == ("cassava", 64, str(keras_backbone_file))
    assert f"--weights: loaded {keras_backbone_file} into the ResNet50 backbone" in process.stdout
    assert [entry["step"] for entry in results["losses"]] == [1, 2, 3, 4, 5]
    assert (results_dir / "final.weights.h5").exists()
    # Each photo is decoded once in the job: with one chunk, only the second of 2 processes decodes.
    assert process.stdout.count("caching train: decoding and resizing 24 of 24 images to 64x64") == 1
    if launcher != "mirrored":
        assert "input pipeline 2/2: caching train" in process.stdout
    assert "step      5/5" in process.stdout


def test_the_launchers_train_the_same_model(runs):
    curves = {}
    for launcher in MULTI:
        process, results_dir = runs[launcher]
        assert_ok(process)
        curves[launcher] = [entry["loss"] for entry in read_results(results_dir)["losses"]]
    for launcher in MULTI[1:]:
        np.testing.assert_allclose(curves[launcher], curves["mirrored"], rtol=LOSS_RTOL, err_msg=launcher)


def test_the_mirrored_run_exports_a_savedmodel_that_serves_the_trained_model(runs, tmp_path):
    from export_checks import check_export

    process, results_dir = runs["mirrored"]
    assert_ok(process)
    check_export(results_dir, tmp_path, recipe="cassava-resnet", build_args=(64, None), size=(64, 64), channels=3,
                 classes=["cbb", "cbsd", "cgm", "cmd", "healthy"])
