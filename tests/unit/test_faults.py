"""The faults the tests and the nightly's control cells inject from outside a run (tf_recipes.operations.faults): read
from the environment, one line for a bad value, and each striking where it says, through the launcher's
methods only. The runs that prove each guard answers them: tests/integration/test_desync_guard.py,
test_precision.py, test_nightly_controls.py, test_stop_docker.py. Also the download host every run asks
before a download (tf_recipes.data.cannot_download), and the one-line error of a TFDS download that cannot
start or fails (download_tfds)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import run_python
from tf_recipes import contract, data, launchers
from tf_recipes.data import DataError, cannot_download, download_tfds
from tf_recipes.operations import faults


def test_the_faults_come_from_the_environment():
    assert faults.faults({}) == faults.Faults()
    assert faults.faults(dict.fromkeys(faults.FAULT_ENVS, "")) == faults.Faults()  # set but empty: unset
    asked = {faults.OVERFLOW: "1:5", faults.SLOW: "0.5", faults.DESYNC: "2", "PATH": "/bin",
             faults.DOWNLOAD_HOST: "unreachable.invalid"}
    assert faults.faults(asked) == faults.Faults(desync_replica=2, overflow=(1, 5), slow_step=0.5,
                                                 download_host="unreachable.invalid")
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
    process = run_python("-m", "tf_recipes.operations.faults", "recipes/mnist-cnn/train.py", "--synthetic",
                         "--max-steps", "1", "--no-export", "--results-dir", str(tmp_path / "run"),
                         env={faults.OVERFLOW: "1:0"}, timeout=300)
    errors = [line for line in process.stderr.splitlines() if line.startswith("error:")]
    assert process.returncode == contract.EXIT_USER_ERROR and "Traceback" not in process.stderr, process.stderr[-3000:]
    assert errors == ["error: TF_RECIPES_FAULT_OVERFLOW=1:0: '1:0': need REPLICA >= 0 and STEP >= 1; "
                      "unset it for a normal run"], process.stderr[-3000:]
    assert not (tmp_path / "run").exists()


class FakeLauncher(launchers.Launcher):
    """A launcher's surface as the training loop calls it, eagerly: `run` calls the replica function. One
    replica a process, as Horovod's, so a replica's index is its worker_index."""

    traits = {**contract.LAUNCHER_TRAITS["horovod"]}

    def __init__(self, replicas, worker_index, local_replicas):
        self.num_replicas, self.worker_index, self.local_replicas = replicas, worker_index, local_replicas

    def run(self, replica_fn, batch, reduce=True):
        return replica_fn(*batch)

    def aggregate_gradients(self, gradients):
        return gradients

    def prepare(self, model, optimizer):
        return "prepared"

    def all_fingerprints(self, variables):
        return [float(v.numpy().sum()) for v in variables]


def fake_launcher(replica=0, replicas=2, worker_index=None, local_replicas=1):
    return FakeLauncher(replicas, replica if worker_index is None else worker_index, local_replicas)


@pytest.mark.parametrize("kind", [launchers.Launcher, launchers.SingleLauncher, launchers.MirroredLauncher,
                                  launchers.MultiWorkerLauncher, launchers.HorovodLauncher])
def test_every_method_the_faults_wrap_is_a_method_of_every_launcher(kind):
    assert all(callable(getattr(kind, name, None)) for name in faults.WRAPPED), faults.WRAPPED


def test_a_launcher_without_a_method_the_faults_wrap_is_refused_rather_than_left_without_its_fault():
    class Renamed(FakeLauncher):
        prepare = None  # as if Launcher.prepare had been renamed

    with pytest.raises(RuntimeError, match=r"wraps Launcher\.prepare, which Renamed no longer has"):
        faults.inject(Renamed(2, 0, 1), faults.Faults())


def test_a_horovod_replica_is_its_rank():
    launcher = object.__new__(launchers.HorovodLauncher)
    launcher.worker_index = 3
    assert int(faults.replica_index(launcher)) == 3


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


def test_a_download_host_that_does_not_answer_cannot_be_reached_unless_a_proxy_fetches(monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(data, "DOWNLOAD_HOST", "127.0.0.1")
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
    monkeypatch.setattr(data, "DOWNLOAD_HOST", "127.0.0.1")
    offline = r"^x is not in D and 127\.0\.0\.1 cannot be reached to download it \(1 GB\); do y$"
    with pytest.raises(DataError, match=offline):
        download_tfds(Builder(), "x is not in D and {}; do y", " (1 GB)")
    assert Builder.calls == 0  # never started: no retry loop offline
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    failed = r"^x is not in D and the download failed \(ConnectionResetError: peer reset\); do y$"
    with pytest.raises(DataError, match=failed):
        download_tfds(Builder(), "x is not in D and {}; do y")
    assert Builder.calls == 1
