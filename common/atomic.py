"""Writes that survive a crash: after a power loss, a file written here holds its new content or its
old one, never a partial file or zeros.

    write_atomically(path, data)          text or bytes
    with atomic_file(path, "w") as f:     for writers that stream; in place when the block ends well
    replace_durably(temporary, path)      for writers that make their own temporary file
    fsync_tree(folder)                    every file and folder under `folder`, before renaming it

Renaming a temporary file over the target makes the write atomic for readers, but not durable: the
file system may commit the rename before the data, so the file's content is fsynced before the
rename, and the folder (which holds the rename) after it. Imports no project module.
"""
from __future__ import annotations

import contextlib
import os
import tempfile


def fsync_directory(folder: str) -> None:
    descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _fsync_file(path: str) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def replace_durably(temporary: str, path: str) -> None:
    """Put the (closed) file `temporary` in place of `path`: its data on disk, then the rename."""
    _fsync_file(temporary)
    os.replace(temporary, path)
    fsync_directory(os.path.dirname(os.path.abspath(path)))


def fsync_tree(folder: str) -> None:
    """Every file under `folder` and every folder in it, so that renaming `folder` publishes data."""
    for root, _, files in os.walk(folder):
        for name in files:
            _fsync_file(os.path.join(root, name))
        fsync_directory(root)


@contextlib.contextmanager
def atomic_file(path: str, mode: str = "w", encoding: str | None = None):
    """Yield an open temporary file beside `path`; when the block ends without an error it is fsynced
    and renamed to `path`. On any error it is removed and `path` is left as it was."""
    folder = os.path.dirname(os.path.abspath(path))
    handle = tempfile.NamedTemporaryFile(mode, dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                                         delete=False, encoding=encoding if "b" not in mode else None)
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
    text = isinstance(data, str)
    with atomic_file(path, "w" if text else "wb", encoding="utf-8" if text else None) as handle:
        handle.write(data)
