"""The desync guard: a run whose replicas end with different weights must fail, loudly, and write
no results. One replica's weights are perturbed on purpose after training (TF_RECIPES_FAULT_DESYNC_REPLICA,
which `invoke run` injects through tf_recipes.operations.faults).
The check itself (tf_recipes.desync.check_in_sync): tests/unit/test_desync_check.py."""
import pytest

from helpers import run_invoke

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("launcher", ["mirrored", "multiworker", "horovod"])
def test_a_perturbed_replica_fails_the_run(tmp_path, launcher, request):
    if launcher == "horovod":
        request.getfixturevalue("require_horovod")
    process = run_invoke("run", "mnist-cnn", "--gpus", "0", "--launcher", launcher, "--cpu-replicas", "2",
                         "--runtime", "local", "--results-dir", str(tmp_path), "--",
                         "--synthetic", "--max-steps", "3", env={"TF_RECIPES_FAULT_DESYNC_REPLICA": "1"})
    assert process.returncode != 0
    output = process.stdout + process.stderr
    assert "replicas finished with different weights" in output
    # Our processes end with one line, no traceback. (horovodrun itself prints a traceback of its
    # own when any rank fails; lines from the ranks carry its [rank] prefix.)
    ours = [line for line in output.splitlines() if launcher != "horovod" or line.startswith("[")]
    assert not [line for line in ours if "Traceback" in line], output[-3000:]
    assert not (tmp_path / "results.json").exists()
