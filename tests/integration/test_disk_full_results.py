"""A results folder that fills up (a real tmpfs): the checkpoint or the final weights end the run
with one line naming the folder and the bytes needed, exit 2, and nothing half-written left."""
import subprocess

import pytest

from error_checks import assert_one_error_line, assert_one_line_error
from helpers import REPO, assert_ok, run_python


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


def mounted(mount, size):
    mount.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)]).returncode:
        pytest.fail("mounting a tmpfs needs root (the test machine runs as root)")


def folder_bytes(folder) -> dict:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}


def test_a_full_disk_during_the_export_is_one_line_and_the_previous_version_stays(tmp_path):
    """RESULTS/export on a real tmpfs with room for one version: the second run's export fills it, ends in
    one line (exit 2) and leaves version 1 as it was and nothing half-written; with room again, --resume
    writes the export it owes (its results.json came first, so it was not finished)."""
    results, export = tmp_path / "run", tmp_path / "run" / "export"
    mounted(export, "64m")
    try:
        train = ("recipes/mnist-cnn/train.py", "--synthetic", "--results-dir", str(results))
        assert_ok(run_python(*train, "--max-steps", "2"))
        used = sum(len(data) for data in folder_bytes(export).values())
        subprocess.run(["mount", "-o", f"remount,size={used + 256 * 1024}", str(export)], check=True)
        version_1 = folder_bytes(export / "1")
        process = run_python(*train, "--max-steps", "4", "--resume", env={"TF_CPP_MIN_LOG_LEVEL": "1"})
        assert_one_error_line(process, f"{export} is full", "the export", "bytes")
        assert folder_bytes(export / "1") == version_1 and sorted(p.name for p in export.iterdir()) == ["1"]
        assert (results / "checkpoints" / "ckpt-4.index").is_file()
        subprocess.run(["mount", "-o", "remount,size=64m", str(export)], check=True)
        again = run_python(*train, "--max-steps", "4", "--resume")
        assert_ok(again)
        assert (export / "2" / "saved_model.pb").is_file() and folder_bytes(export / "1") == version_1
    finally:
        subprocess.run(["umount", str(export)], check=True)


def test_a_results_folder_that_turns_read_only_mid_run_is_one_line_and_the_checkpoint_stays(tmp_path):
    """RESULTS/checkpoints made read-only after its first checkpoint (a real read-only bind mount over it, as a
    storage fault or an administrator leaves it): the next checkpoint ends the run in one line, exit 2; the
    checkpoint before stays and, writable again, --resume finishes the run."""
    import os
    import sys
    import time

    results = tmp_path / "run"
    folder = results / "checkpoints"
    train = ("recipes/mnist-cnn/train.py", "--synthetic", "--checkpoint-every", "5", "--results-dir", str(results))
    process = subprocess.Popen([sys.executable, "-m", "tf_recipes.operations.faults", *train, "--max-steps", "40"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_RECIPES_FAULT_SLOW_STEP": "0.3"})
    bound = False
    try:
        deadline = time.monotonic() + 300
        while not (folder / "ckpt-5.index").is_file():
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        time.sleep(0.5)  # ckpt-5 whole: the state file is written after its files
        if subprocess.run(["mount", "--bind", str(folder), str(folder)]).returncode:
            pytest.fail("a bind mount needs root (the test machine runs as root)")
        bound = True
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
        stdout, stderr = process.communicate(timeout=300)
        ended = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        assert_one_error_line(ended, f"{folder} cannot be written (Read-only file system)", "--resume")
        subprocess.run(["umount", str(folder)], check=True)
        bound = False
        resumed = run_python(*train, "--max-steps", "40", "--resume")
        assert_ok(resumed)
        assert "resumed from" in resumed.stdout
    finally:
        if process.poll() is None:
            process.kill()
        if bound:
            subprocess.run(["umount", str(folder)], check=True)
