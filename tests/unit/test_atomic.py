"""tf_recipes.atomic: a file written there holds its new content or its old one, never part of one; the
file and its folder are fsynced; no temporary file is left behind."""
import os

import pytest

from tf_recipes import atomic


@pytest.fixture
def fsyncs(monkeypatch):
    """What os.fsync was called on: 'file' or 'dir', in order."""
    calls = []
    real = os.fsync

    def record(descriptor):
        calls.append("dir" if os.path.isdir(f"/proc/self/fd/{descriptor}") else "file")
        real(descriptor)

    monkeypatch.setattr(os, "fsync", record)
    return calls


def test_text_and_bytes_are_written_and_the_file_and_its_folder_fsynced(tmp_path, fsyncs):
    atomic.write_atomically(str(tmp_path / "a.txt"), "héllo\n")
    atomic.write_atomically(str(tmp_path / "b.bin"), b"\0\1\2")
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "héllo\n"
    assert (tmp_path / "b.bin").read_bytes() == b"\0\1\2"
    assert fsyncs == ["file", "dir", "file", "dir"]  # the data before the rename, the folder after
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.bin"]


def test_the_file_gets_the_usual_permissions_not_the_temporary_files(tmp_path):
    umask = os.umask(0o022)
    try:
        atomic.write_atomically(str(tmp_path / "results.json"), "{}")
    finally:
        os.umask(umask)
    assert (tmp_path / "results.json").stat().st_mode & 0o777 == 0o644


def test_a_failure_mid_write_leaves_the_old_content_and_no_temporary_file(tmp_path, fsyncs):
    target = tmp_path / "index.json"
    target.write_text("old\n")
    with pytest.raises(RuntimeError, match="disk gone"):
        with atomic.atomic_file(str(target), "w") as handle:
            handle.write("new, half of it")
            handle.flush()
            raise RuntimeError("disk gone")
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["index.json"]
    assert fsyncs == []


def test_a_failing_fsync_leaves_the_old_content_and_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "labels.txt"
    target.write_text("old\n")

    def failing(descriptor):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError):
        atomic.write_atomically(str(target), "new\n" * 1000)
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["labels.txt"]


def test_a_new_file_that_fails_is_not_created(tmp_path):
    with pytest.raises(ValueError):
        with atomic.atomic_file(str(tmp_path / "new.bin"), "wb") as handle:
            handle.write(b"x" * 10)
            raise ValueError
    assert os.listdir(tmp_path) == []


def test_replace_durably_fsyncs_a_writers_own_temporary_then_its_folder(tmp_path, fsyncs):
    temporary = tmp_path / "chunk.npy.host.1.tmp"
    temporary.write_bytes(b"data")
    atomic.replace_durably(str(temporary), str(tmp_path / "chunk.npy"))
    assert os.listdir(tmp_path) == ["chunk.npy"] and (tmp_path / "chunk.npy").read_bytes() == b"data"
    assert fsyncs == ["file", "dir"]


def test_fsync_tree_reaches_every_file_and_folder(tmp_path, fsyncs):
    (tmp_path / "export" / "1" / "variables").mkdir(parents=True)
    for name in ("export/labels.txt", "export/1/saved_model.pb", "export/1/variables/v.data"):
        (tmp_path / name).write_bytes(b"x")
    atomic.fsync_tree(str(tmp_path / "export"))
    assert sorted(fsyncs) == ["dir"] * 3 + ["file"] * 3
