"""A results folder that fills up (a real tmpfs): the checkpoint or the final weights end the run
with one line naming the folder and the bytes needed, exit 2, and nothing half-written left."""
import subprocess

import pytest

from error_checks import assert_one_line_error
from helpers import run_python


@pytest.mark.parametrize("size,folder,what", [("2m", "run/checkpoints", "a checkpoint"),
                                              ("16m", "run", "the final weights")])
def test_a_full_results_folder_ends_in_one_line(tmp_path, size, folder, what):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)]).returncode:
        pytest.fail("mounting a tmpfs needs root (the test machine runs as root)")
    try:
        process = run_python("recipes/mnist-cnn/train.py", "--synthetic", "--max-steps", "2",
                             "--results-dir", str(mount / "run"), env={"TF_CPP_MIN_LOG_LEVEL": "1"})
        # The last whole checkpoint stays (resumable); only what the failed write began must be gone.
        checked = mount / folder if what == "a checkpoint" else tmp_path / "nothing"
        line = assert_one_line_error(process, checked, f"{mount / folder} is full", what, "bytes")
        assert "No space left on device" in line or "bytes free" in line
        assert not (mount / "run" / "final.weights.h5").exists() and not (mount / "run" / "results.json").exists()
        assert not list((mount / "run").glob("*.tmp"))
    finally:
        subprocess.run(["umount", str(mount)], check=True)
