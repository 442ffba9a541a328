"""The GPU nodes' precision path on the CPU: `--amp float16` (float16 with loss scaling) and `--xla`,
alone and together, under every launcher of the installed stack.

float16 is slow on the CPU but computes the same way as on a GPU: the LossScaleOptimizer scales the
loss, skips a step whose gradients overflowed and halves the scale. What must hold, under every launcher:

- float16 + XLA, with a first loss scale so large that the first step overflows on its own, and one
  replica's gradients overflowing on purpose at a later step (TF_RECIPES_FAULT_OVERFLOW, tf_recipes.operations.faults;
  replica 1 where there are two, since left to Keras the first replica of each process decides for it): every replica
  skips exactly those steps, the loss scale halves at each of them and stays equal on every replica,
  the replicas end bit-identical, and a run limited to 3 steps and resumed ends bit-identical to the
  uninterrupted one (loss scale included). Dropout is on. The uninterrupted run makes one step per
  compiled call, the limited and resumed ones three (the fault strikes inside a call).
- float16 alone (3 steps) and XLA alone (20 steps), dropout off, SGD, global batch 8 on every launcher:
  the replicas end bit-identical, and they train the model one device trains with the same flags, within
  the rounding of two half-batch sums instead of one full-batch sum. float16 and XLA need not be
  bit-identical to float32 and to graph mode, so each is compared with itself on other launchers only.
- Every launcher with 2 replicas ends bit-identical to the others, in all three runs: they run the
  same per-replica arithmetic, and a sum of two numbers does not depend on its order.

A run that were silently bfloat16 or float32 fails here (precision and loss-scale fields, halvings),
so does a replica that drifted (fingerprints, per-replica loss scales) and an inexact resume.
"""
import numpy as np
import pytest

from error_checks import TF_LOG_LINE, assert_one_line_error
from helpers import assert_ok, read_results, run_invoke, run_python, stack_launchers
from image_folder_data import write_image_folder
from test_mnist_launchers import load_weights, losses

pytestmark = pytest.mark.slow
LAUNCHERS = stack_launchers("single", "mirrored", "multiworker", "horovod")
REPLICAS = {"single": 1, "mirrored": 2, "multiworker": 2, "horovod": 2}
GLOBAL_BATCH = 8
# At a constant rate (mnist-cnn's default warms up from 0), as these tests were measured
COMMON = ["--synthetic", "--log-every", "1", "--no-export", "--lr-schedule", "constant"]

# float16 + XLA: the first step overflows at this scale (measured: 1 of the 6 steps overflows on its own
# on TF 2.17, 2 to 3 on TF 2.21; from 2**18 on, steps pass); the fault makes the last replica's
# gradients inf at step FAULT_STEP, after the resume point RESUME_AT.
INITIAL_SCALE = 2 ** 20
STEPS, RESUME_AT, FAULT_STEP = 6, 3, 5
PARTS = ["--log-every", "3"]  # 3 steps per compiled call (--steps-per-loop stops at every logged step)


def invoke_local(results_dir, launcher, *train_args, env=None):
    """tests/integration/test_mnist_launchers.py's way of starting each launcher (invoke run --runtime
    local), with a deadline that ends a run whose replicas wait for each other forever."""
    return run_invoke("run", "mnist-cnn", "--gpus", "0", "--launcher", launcher,
                      "--cpu-replicas", str(REPLICAS[launcher]), "--runtime", "local",
                      "--results-dir", str(results_dir), "--", *train_args, timeout=300, env=env)


def float16_xla_args(launcher, steps):
    return [*COMMON, "--batch-size", str(GLOBAL_BATCH // REPLICAS[launcher]), "--amp", "float16", "--xla",
            "--loss-scale-initial", str(INITIAL_SCALE), "--max-steps", str(steps)]


def overflow_fault(launcher, start_step=0):
    """The environment that makes the last replica's gradients overflow at FAULT_STEP of a run that
    starts at `start_step` (tf_recipes.operations.faults counts the steps a process runs)."""
    return {"TF_RECIPES_FAULT_OVERFLOW": f"{REPLICAS[launcher] - 1}:{FAULT_STEP - start_step}"}


ALONE = {"float16": ["--amp", "float16"], "xla": ["--xla"]}
# Steps of each flag alone: XLA is fast, as many as the parity test of tests/integration/test_mnist_launchers.py;
# float16 without XLA is slow on the CPU.
ALONE_STEPS = {"float16": 3, "xla": 20}
# Against one device with the same flags and global batch, with SGD: it shows the gradient's scale,
# where Adam hides it, and it does not blow rounding up (Adam moves a weight by about the learning rate
# whatever its gradient's size, so a near-zero gradient that rounds to the other sign moves it 2e-3 the
# other way). Measured on both stacks, 2 replicas x 4 against 1 x 8: XLA after 20 steps 5e-7 relative
# in the losses and 7e-6 in the weights; float16 after 3 steps 5e-6 and 6e-5 (it keeps about 3
# decimal digits, and two half-batch gradient sums round differently from one full-batch sum).
ALONE_OPTIMIZER = ["--optimizer", "sgd", "--lr", "0.01"]
ALONE_LOSS_RTOL = {"float16": 1e-4, "xla": 1e-5}
ALONE_WEIGHT_ATOL = {"float16": 3e-4, "xla": 1e-4}


def alone_args(launcher, name):
    """One flag alone, dropout off, SGD, the same global batch on every launcher."""
    return [*COMMON, "--batch-size", str(GLOBAL_BATCH // REPLICAS[launcher]), *ALONE[name],
            "--max-steps", str(ALONE_STEPS[name]), "--no-dropout", *ALONE_OPTIMIZER]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, request):
    """runs(launcher) -> {name: results folder} of that launcher's five runs, made on first use:
    whole (float16 + XLA, STEPS steps), parts (the same limited to RESUME_AT steps, then resumed to
    STEPS), float16 and xla (each alone)."""
    cache = {}

    def make(launcher):
        if launcher not in cache:
            if launcher == "horovod":
                request.getfixturevalue("require_horovod")
            tmp = tmp_path_factory.mktemp(f"precision-{launcher}")
            fault = overflow_fault(launcher)
            made = {"whole": invoke_local(tmp / "whole", launcher, *float16_xla_args(launcher, STEPS), env=fault),
                    "part": invoke_local(tmp / "parts", launcher, *float16_xla_args(launcher, RESUME_AT), *PARTS,
                                         env=fault)}
            made["resumed"] = invoke_local(tmp / "parts", launcher, *float16_xla_args(launcher, STEPS), *PARTS,
                                           "--resume", env=overflow_fault(launcher, RESUME_AT))
            for name in ALONE:
                made[name] = invoke_local(tmp / name, launcher, *alone_args(launcher, name))
            for process in made.values():
                assert_ok(process)
            assert "resumed from" in made["resumed"].stdout and f"at step {RESUME_AT}" in made["resumed"].stdout
            cache[launcher] = {"whole": tmp / "whole", "parts": tmp / "parts", "float16": tmp / "float16",
                               "xla": tmp / "xla"}
        return cache[launcher]

    return make


def assert_replicas_agree(results, launcher):
    prints = results["replica_fingerprints"]
    assert results["launcher"] == launcher and len(prints) == REPLICAS[launcher], results
    assert len(set(prints)) == 1, prints
    assert results["global_batch"] == GLOBAL_BATCH


def halvings(results):
    """The steps at which the loss scale halved (the skipped ones), checking that it never changed
    otherwise (it doubles only after 2000 steps without an overflow)."""
    scale, halved = results["loss_scaling"]["initial_scale"], []
    for entry in results["losses"]:
        assert entry["loss_scale"] in (scale, scale / 2), (entry, scale)
        if entry["loss_scale"] == scale / 2:
            halved.append(entry["step"])
        scale = entry["loss_scale"]
    return halved


@pytest.mark.full  # the precision runs under every launcher are the night's
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_float16_with_xla_skips_overflowed_steps_on_every_replica_alike(runs, launcher):
    results = read_results(runs(launcher)["whole"])
    assert_replicas_agree(results, launcher)
    assert (results["precision"], results["xla"], results["steps"]) == ("mixed_float16", True, STEPS)
    scaling = results["loss_scaling"]
    assert scaling is not None, "float16 ran without a loss scale"
    assert (scaling["initial_scale"], scaling["growth_steps"]) == (INITIAL_SCALE, 2000)
    skipped = halvings(results)
    # Step 1 overflowed on its own (the scale is too large), FAULT_STEP on one replica only.
    assert skipped[0] == 1 and FAULT_STEP in skipped and len(skipped) < STEPS, skipped
    assert scaling["skipped_steps"] == len(skipped)
    assert scaling["final_scale"] == INITIAL_SCALE / 2 ** len(skipped)
    assert scaling["replica_scales"] == [scaling["final_scale"]] * REPLICAS[launcher]
    assert scaling["replica_skipped_steps"] == [len(skipped)] * REPLICAS[launcher]
    assert all(np.isfinite(losses(runs(launcher)["whole"])))


@pytest.mark.full  # the precision runs under every launcher are the night's
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_float16_with_xla_resumes_exactly_loss_scale_included(runs, launcher):
    whole, parts = (read_results(runs(launcher)[name]) for name in ("whole", "parts"))
    assert parts["start_step"] == RESUME_AT and parts["steps"] == STEPS
    assert parts["replica_fingerprints"] == whole["replica_fingerprints"]
    assert parts["loss_scaling"] == whole["loss_scaling"]
    assert [entry["step"] for entry in parts["losses"]] == [STEPS]
    assert parts["losses"] == [entry for entry in whole["losses"] if entry["step"] == STEPS]


@pytest.mark.full  # the precision runs under every launcher are the night's
@pytest.mark.parametrize("name", sorted(ALONE))
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_each_flag_alone_trains_the_one_device_model_in_sync(runs, launcher, name):
    folder = runs(launcher)[name]
    results = read_results(folder)
    assert_replicas_agree(results, launcher)
    if name == "float16":
        assert (results["precision"], results["xla"]) == ("mixed_float16", False)
        scaling = results["loss_scaling"]
        assert scaling["replica_scales"] == [32768.0] * REPLICAS[launcher], scaling  # nothing overflowed
        assert scaling["replica_skipped_steps"] == [0] * REPLICAS[launcher], scaling
    else:
        assert (results["precision"], results["xla"], results["loss_scaling"]) == ("float32", True, None)
    single = runs("single")[name]
    assert len(losses(folder)) == ALONE_STEPS[name]
    np.testing.assert_allclose(losses(folder), losses(single), rtol=ALONE_LOSS_RTOL[name])
    expected, got = load_weights(single), load_weights(folder)
    assert expected.keys() == got.keys() and expected
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=0, atol=ALONE_WEIGHT_ATOL[name], err_msg=key)


TWO_REPLICAS = [launcher for launcher in LAUNCHERS if REPLICAS[launcher] == 2]


@pytest.mark.full  # the precision runs under every launcher are the night's
@pytest.mark.skipif(len(TWO_REPLICAS) < 2, reason="needs two launchers with 2 replicas")
@pytest.mark.parametrize("name", ["whole", "parts", *sorted(ALONE)])
def test_launchers_with_two_replicas_end_bit_identical(runs, name):
    prints = {launcher: read_results(runs(launcher)[name])["replica_fingerprints"] for launcher in TWO_REPLICAS}
    assert len({fp for each in prints.values() for fp in each}) == 1, prints


@pytest.fixture(scope="module")
def float16_run(tmp_path_factory):
    """A float16 run of one step on one device, ended: its checkpoint holds a loss scale. On a folder of
    18 generated photos (6 held out), not the synthetic set: its final evaluation of 10,000 examples in
    float16 would take most of a push's minute here; and without XLA, whose compile would too."""
    root = tmp_path_factory.mktemp("float16")
    data = ["--data-format", "image-folder", "--data-dir", str(write_image_folder(root / "photos", per_class=(4, 2))),
            "--batch-size", "4", "--log-every", "1", "--no-export", "--lr-schedule", "constant"]
    assert_ok(invoke_local(root / "run", "single", *data, "--amp", "float16", "--max-steps", "1"))
    return root / "run", data


def test_a_float16_checkpoint_resumed_in_another_precision_is_one_line(float16_run):
    """A checkpoint with a loss scale does not restore into an optimizer without one (and a resume in
    another precision would not continue the same run): one line naming both precisions and the flag."""
    whole, data = float16_run
    for amp in ([], ["--amp"]):  # float32, and a bare --amp: bfloat16 on the CPU
        process = run_python("recipes/mnist-cnn/train.py", *data, "--max-steps", "2", "--results-dir", str(whole),
                             "--resume", *amp, env={"CUDA_VISIBLE_DEVICES": ""})
        assert process.returncode == 2, process.stderr[-4000:]
        ours = [line for line in process.stderr.splitlines() if line.strip() and not TF_LOG_LINE.match(line)]
        assert len(ours) == 1 and ours[0].startswith("error: "), process.stderr[-4000:]
        policy = "mixed_bfloat16" if amp else "float32"
        assert f"precision mixed_float16 -> {policy}" in ours[0] and "--amp float16" in ours[0], ours[0]


def test_a_loss_scale_without_float16_is_one_line(tmp_path):
    """--loss-scale-initial where nothing scales the loss (a bare --amp on the CPU is bfloat16) would be
    ignored: it is refused before anything is written."""
    process = run_python("recipes/mnist-cnn/train.py", *COMMON, "--max-steps", "1", "--amp", "--loss-scale-initial",
                         "1024", "--results-dir", str(tmp_path / "run"), env={"CUDA_VISIBLE_DEVICES": ""})
    assert_one_line_error(process, tmp_path, "--loss-scale-initial 1024", "mixed_bfloat16", "--amp float16")
