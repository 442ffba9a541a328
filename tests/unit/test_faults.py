"""The faults the tests and the nightly's control cells inject from outside a run (tf_recipes.faults): read
from the environment, one line for a bad value, and each striking where it says, through the launcher's
methods only. The runs that prove each guard answers them: tests/integration/test_desync_guard.py,
test_precision.py, test_nightly_controls.py, test_stop_docker.py. Also the download host every run asks
before a download (tf_recipes.data.cannot_download), and the one-line error of a TFDS download that cannot
start or fails (download_tfds)."""
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import run_python
from tf_recipes import contract, faults
from tf_recipes.data import DataError, cannot_download, download_tfds


def test_the_faults_come_from_the_environment():
    assert faults.faults({}) == faults.Faults()
    assert faults.faults(dict.fromkeys(faults.FAULT_ENVS, "")) == faults.Faults()  # set but empty: unset
    asked = {faults.OVERFLOW: "1:5", faults.SLOW: "0.5", faults.DESYNC: "2", "PATH": "/bin"}
    assert faults.faults(asked) == faults.Faults(desync_replica=2, overflow=(1, 5), slow_step=0.5)
    assert faults.faults({faults.DESYNC: "0", faults.SLOW: "0"}) == faults.Faults(desync_replica=0)


@pytest.mark.parametrize("name, value", [
    *((faults.SLOW, value) for value in ("-1", "nan", "inf", "slow")),
    *((faults.DESYNC, value) for value in ("-1", "1.5")),
    *((faults.OVERFLOW, value) for value in ("1", "a:b", "-1:3", "1:0", "1:2:3")),
])
def test_a_bad_fault_value_is_one_line_naming_the_variable_and_the_value(name, value):
    with pytest.raises(contract.UserError) as error:
        faults.faults({name: value})
    message = str(error.value)
    assert message.startswith(f"{name}={value}: ") and "\n" not in message, message


def test_a_bad_fault_value_ends_a_run_with_one_line_and_exit_2(tmp_path):
    process = run_python("-m", "tf_recipes.faults", "recipes/mnist-cnn/train.py", "--synthetic", "--max-steps", "1",
                         "--no-export", "--results-dir", str(tmp_path / "run"), env={faults.OVERFLOW: "1:0"},
                         timeout=300)
    errors = [line for line in process.stderr.splitlines() if line.startswith("error:")]
    assert process.returncode == contract.EXIT_USER_ERROR and "Traceback" not in process.stderr, process.stderr[-3000:]
    assert errors == ["error: TF_RECIPES_FAULT_OVERFLOW=1:0: '1:0': need REPLICA >= 0 and STEP >= 1; "
                      "unset it for a normal run"], process.stderr[-3000:]
    assert not (tmp_path / "run").exists()


def fake_launcher(replica=0, replicas=2, worker_index=0, local_replicas=1):
    """A launcher's surface as the training loop calls it: `run` calls the replica function, eagerly."""
    return SimpleNamespace(num_replicas=replicas, worker_index=worker_index, local_replicas=local_replicas,
                           run=lambda fn, batch, reduce=True: fn(*batch), aggregate_gradients=lambda g: g,
                           replica_id=lambda: tf.constant(replica), prepare=lambda model, optimizer: "prepared",
                           all_fingerprints=lambda variables: [float(v.numpy().sum()) for v in variables])


def steps_run(launcher, steps):
    """The first gradient seen by aggregate_gradients in each of `steps` steps."""
    return [launcher.run(lambda: launcher.aggregate_gradients([tf.constant([1.0, -2.0]), None]), ())[0].numpy()
            for _ in range(steps)]


def test_an_overflow_strikes_the_named_replica_in_the_named_step_only():
    struck = steps_run(faults.inject(fake_launcher(replica=1), faults.Faults(overflow=(1, 3))), 4)
    assert [bool(np.isinf(g).all()) for g in struck] == [False, False, True, False]
    spared = steps_run(faults.inject(fake_launcher(replica=0), faults.Faults(overflow=(1, 3))), 4)
    assert not np.isinf(spared).any()
    assert not np.isinf(steps_run(faults.inject(fake_launcher(replica=1), faults.Faults()), 4)).any()


def test_an_overflow_needs_float16_loss_scaling_and_an_existing_replica():
    launcher = faults.inject(fake_launcher(), faults.Faults(overflow=(1, 3)))
    with pytest.raises(contract.UserError, match="computes in float32; add --amp float16"):
        launcher.prepare(None, keras.optimizers.SGD())
    assert launcher.prepare(None, keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())) == "prepared"
    with pytest.raises(contract.UserError, match=r"TF_RECIPES_FAULT_OVERFLOW=2:3: there is no replica 2, this run has "
                                                 r"2 \(0\.\.1\)"):
        faults.inject(fake_launcher(), faults.Faults(overflow=(2, 3)))


def test_a_desync_moves_the_named_replica_only_on_the_process_that_holds_it_before_the_comparison():
    weight = tf.Variable([0.0, 1.0])
    elsewhere = faults.inject(fake_launcher(worker_index=0), faults.Faults(desync_replica=1))
    assert elsewhere.all_fingerprints([weight]) == [1.0] and weight.numpy().tolist() == [0.0, 1.0]
    here = faults.inject(fake_launcher(worker_index=1), faults.Faults(desync_replica=1))
    assert here.all_fingerprints([weight]) == [pytest.approx(1.002)]
    assert weight.numpy() == pytest.approx([1e-3, 1.001])


def test_a_slow_step_takes_at_least_its_seconds_in_a_compiled_step():
    launcher = faults.inject(fake_launcher(), faults.Faults(slow_step=0.3))
    step = tf.function(lambda: launcher.run(lambda: tf.constant(1.0), ()))
    step()  # traced
    started = tf.timestamp()
    step()
    assert float(tf.timestamp() - started) >= 0.3


def test_the_download_host_is_read_at_every_call(monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TF_RECIPES_DOWNLOAD_HOST", "127.0.0.1")
    assert cannot_download(timeout_s=1.0) == "127.0.0.1 cannot be reached"  # nothing listens on 443 here
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert cannot_download(timeout_s=1.0) is None  # a proxy is asked to fetch it


def test_a_tfds_download_that_cannot_start_or_fails_is_one_data_error(monkeypatch):
    class Builder:
        calls = 0

        def download_and_prepare(self):
            Builder.calls += 1
            raise ConnectionResetError("peer reset")

    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TF_RECIPES_DOWNLOAD_HOST", "127.0.0.1")
    offline = r"^x is not in D and 127\.0\.0\.1 cannot be reached to download it \(1 GB\); do y$"
    with pytest.raises(DataError, match=offline):
        download_tfds(Builder(), "x is not in D and {}; do y", " (1 GB)")
    assert Builder.calls == 0  # never started: no retry loop offline
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    failed = r"^x is not in D and the download failed \(ConnectionResetError: peer reset\); do y$"
    with pytest.raises(DataError, match=failed):
        download_tfds(Builder(), "x is not in D and {}; do y")
    assert Builder.calls == 1
