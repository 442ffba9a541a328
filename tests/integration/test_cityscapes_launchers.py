"""cityscapes-unet end to end under each launcher, as a user runs it: fixture zips -> prepare_data.py
-> invoke run, stopped after step 4 and resumed to step 10, against the run nobody stopped; the export of
the two-process jobs is checked too. In one process (--benchmark, --profile, predictions):
tests/recipes/cityscapes/test_train.py."""
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


REPLICAS = {"single": 1, "mirrored": 2, "multiworker": 2, "horovod": 2}


@pytest.fixture(scope="module")
def uninterrupted(prepared, tmp_path_factory):
    """Fingerprints of the 10-step run nobody stopped, per replica count (made on first use): single's,
    or mirrored's for every launcher with 2 replicas. These train the same model bit for bit: the same
    examples on each replica, augmentation keyed on (seed, position in the stream), batch norm's
    statistics averaged over the same two replicas."""
    cache = {}

    def fingerprints(launcher):
        reference = "single" if REPLICAS[launcher] == 1 else "mirrored"
        if reference not in cache:
            results_dir = tmp_path_factory.mktemp(f"whole-{reference}")
            assert_ok(invoke_run(prepared, results_dir, reference, "--max-steps", "10"))
            cache[reference] = read_results(results_dir)["replica_fingerprints"]
        return cache[reference]

    return fingerprints


# Every push runs mirrored (two replicas in one process, resume and official evaluation); the night all four.
@pytest.mark.parametrize("launcher", [pytest.param("single", marks=pytest.mark.full), "mirrored",
                                      pytest.param("multiworker", marks=pytest.mark.full),
                                      pytest.param("horovod", marks=pytest.mark.full)])
def test_trains_under_every_launcher_and_resumes_exactly(prepared, tmp_path, launcher, uninterrupted, request):
    """A run limited to step 4, then resumed to step 10, ends bit-identical to the 10-step run nobody
    stopped, with batch norm (whose statistics every replica averages every step) and the default
    augmentation (random zoom, crop and flip). The default (no normalisation) has no such state;
    tests/recipes/cityscapes/test_model.py checks that it keeps each image's prediction independent of its
    batch. What the resumed run ends with is then checked as any run's: results, predictions that the
    official evaluation scores as the run did, and the export of a job of two processes."""
    if launcher == "horovod":
        request.getfixturevalue("require_horovod")
    assert_ok(invoke_run(prepared, tmp_path / "run", launcher, "--max-steps", "4"))
    resumed = invoke_run(prepared, tmp_path / "run", launcher, "--max-steps", "10", "--resume",
                         "--predict-dir", str(tmp_path / "predicted"), "--predict-format", "labelids")
    assert_ok(resumed)
    assert "at step 4" in resumed.stdout
    results = read_results(tmp_path / "run")
    replicas = REPLICAS[launcher]
    assert RESULT_FIELDS <= results.keys()
    assert (results["launcher"], results["replicas"], results["steps"]) == (launcher, replicas, 10)
    assert len(results["replica_fingerprints"]) == replicas
    assert results["replica_fingerprints"] == uninterrupted(launcher)
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
        check_export(tmp_path / "run", tmp_path, recipe="cityscapes-unet", build_args=(8, 2, 0.0, "batch"),
                     size=(64, 128), channels=3,
                     classes=labels.cityscapes_views()["classes"]["names"])


@pytest.mark.parametrize("launcher", ["mirrored", pytest.param("horovod", marks=pytest.mark.full)])
def test_the_full_preset_s_step_trains_in_sync_on_two_replicas(prepared, tmp_path, launcher, request):
    """The full preset as `--gpus 8` trains it, on crops of generated scenes, for 3 iterations on 2 replicas:
    mmsegmentation's UNet-S5-D16 with its auxiliary head, batch norm synchronized over the replicas, PyTorch's
    SGD with coupled weight decay, the class ratio rule and photometric distortion, from the node's scene cache
    (--cache-dir: one pipeline decodes the chunk, the other waits at the barrier and maps it). The replicas end with one
    fingerprint (the desync guard ends the run with an error otherwise: a weight decayed after another replica
    had updated it did), and the export is written from the main head alone."""
    if launcher == "horovod":
        request.getfixturevalue("require_horovod")
    process = run_invoke("run", "cityscapes-unet", "--gpus", "0", "--cpu-replicas", "2", "--launcher", launcher,
                         "--runtime", "local", "--data-dir", str(prepared), "--results-dir", str(tmp_path / "run"),
                         "--", "--crop", "32x64", "--max-steps", "3", "--log-every", "1", "--cache",
                         "--cache-dir", str(tmp_path / "scenes"))
    assert_ok(process)
    # the node's scene cache: the 8 scenes are one chunk, decoded once in the job, by one of its pipelines
    assert process.stdout.count("caching train: decoding 8 of 8 scenes") == 1, process.stdout
    assert "(sgd, poly, 0 warm-up iterations)" in process.stdout and "replicas in sync" in process.stdout
    results = read_results(tmp_path / "run")
    assert (results["preset"], results["model"], results["optimizer"], results["replicas"]) == (
        "full", "unet-s5-d16", "sgd", 2)
    assert len(set(results["replica_fingerprints"])) == 1 and results["steps"] == 3
    # the export serves the first output only: a list of two would not have been written
    assert (tmp_path / "run" / "export" / "1" / "saved_model.pb").is_file()
