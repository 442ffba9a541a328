"""The desync guard's check: replicas whose weight fingerprints differ are named, every one of them.
A run with a perturbed replica failing under each launcher: tests/integration/test_desync_guard.py."""
import pytest

from tf_recipes.desync import DesyncError, check_in_sync


def test_check_in_sync_names_every_replica():
    check_in_sync(["ab", "ab", "ab"])
    with pytest.raises(DesyncError, match="replica 0: ab, replica 1: ab, replica 2: cd"):
        check_in_sync(["ab", "ab", "cd"])
