"""Writes that survive a crash: a file written here holds its new content or its old one, never part of one.
Its data is fsynced before the rename that puts it in place, and its folder after the rename."""

from __future__ import annotations

import contextlib
import os
import tempfile


def _fsync(path: str, flags: int = os.O_RDONLY) -> None:
    descriptor = os.open(path, flags)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_directory(folder: str) -> None:
    """The entries of `folder` (a rename into it) on disk."""
    _fsync(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def replace_durably(temporary: str, path: str) -> None:
    """Put the (closed) file `temporary` in place of `path`: its data on disk, then the rename."""
    _fsync(temporary)
    os.replace(temporary, path)
    fsync_directory(os.path.dirname(os.path.abspath(path)))


def fsync_tree(folder: str) -> None:
    """Every file under `folder` and every folder in it, so that renaming `folder` publishes data."""
    for root, _, files in os.walk(folder):
        for name in files:
            _fsync(os.path.join(root, name))
        fsync_directory(root)


@contextlib.contextmanager
def atomic_file(path: str, mode: str = "w"):
    """Yield a temporary file that becomes `path` when the block ends without an error."""
    folder = os.path.dirname(os.path.abspath(path))
    prefix = f".{os.path.basename(path)}."
    handle = tempfile.NamedTemporaryFile(mode, dir=folder, prefix=prefix, suffix=".tmp", delete=False)
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(handle.name, 0o666 & ~umask)  # a temporary file is private; the file it becomes is not
        os.replace(handle.name, path)
        fsync_directory(folder)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(handle.name)
        raise


def write_atomically(path: str, data: str | bytes) -> None:
    """`path` holds `data` (text is UTF-8) or what it held before, also after a crash."""
    with atomic_file(path, "wb") as handle:
        handle.write(data.encode() if isinstance(data, str) else data)
