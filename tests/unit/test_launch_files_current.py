"""The launch files kept in recipes/<recipe>/launch/ are what `invoke launch-files` renders today, so a user
who takes one runs what `invoke sbatch`, `invoke k8s` and `invoke run` would start."""
import pytest

from helpers import run_invoke
from tasks import clusters, host

pytestmark = pytest.mark.repository


def test_no_launch_file_is_stale():
    stale = clusters.stale_launch_files(host.recipes())
    assert stale == [], f"run `invoke launch-files`: {stale}"


def test_invoke_launch_files_check_passes_here():
    process = run_invoke("launch-files", "--check")
    assert process.returncode == 0, process.stdout + process.stderr
