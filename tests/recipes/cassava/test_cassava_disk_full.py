"""A full disk while caching decoded photos: one line naming the cache folder and the bytes it
needs, exit 2, and no half-written chunk left in the cache (a real tmpfs that fills up)."""
import os
import subprocess

import pytest

from error_checks import assert_one_line_error
from helpers import run_python


@pytest.fixture
def small_tmpfs(tmp_path):
    folder = tmp_path / "small"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(folder)]).returncode:
        pytest.fail("mounting a tmpfs needs root (the test machine runs as root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_full_cache_folder_ends_in_one_line(cassava_data_dir, small_tmpfs, tmp_path):
    cache = small_tmpfs / "cache"
    process = run_python("-m", "tf_recipes.operations.faults", "recipes/cassava-resnet/train.py",
                         "--data-dir", str(cassava_data_dir),
                         "--cache-dir", str(cache), "--image-size", "96", "--batch-size", "4", "--max-steps", "1",
                         "--weights", "none", "--results-dir", str(tmp_path / "out"), timeout=600,
                         env={"TF_RECIPES_FAULT_DOWNLOAD_HOST": "unreachable.invalid"})
    line = assert_one_line_error(process, tmp_path / "out", str(cache), "bytes", "is full")
    assert "No space left on device" in line
    left = [name for _, _, files in os.walk(cache) for name in files]
    assert not left, f"half-written cache files: {left}"
