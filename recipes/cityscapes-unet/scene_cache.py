"""The node's cache of decoded training scenes: uint8 files written once per node, mapped by every process.

    cached_scenes(data_dir, split, index, decode, height, width, cache_dir, shard, barrier, log, lookup=...)
        -> SceneArrays: every scene of the split, decoded by `decode` at height x width
    SceneArrays.scene(i), .gather(indices)      copies of example i (or of several), read from the files

Why files: the in-memory cache (data.py's --cache) decodes into each training process's own arrays, so
an 8-GPU node holds 8 copies (about 23 GiB each for Cityscapes' 2,975 training scenes at 1024x2048).
Here each scene is decoded once into uint8 files that every process opens with np.memmap: the page
cache holds one copy for the node, a job that starts again reuses it, and a cache larger than memory
is read again from disk, never decoded again.

A cache folder, CACHE_DIR/SPLIT-HxW-DIGEST, is one prepared index (its bytes and its folder), one view
(the label lookup), one size, CACHE_FORMAT and CHUNK: anything else gets a folder of its own. It holds
chunks of CHUNK examples (fewer in the last), each in four files named by its first example SSSSSS:
    SSSSSS-images.npy   uint8 [n, height, width, 3]
    SSSSSS-truth.npy    uint8 [n, height, width]: the training indices (the view's lookup applied)
    SSSSSS-crc32.npy    uint32 [n, 2]: each example's image and truth crc32
    SSSSSS-checked      which version of those three files was written or checksummed in which boot
and node-BOOT.lock while a job's first process on a machine holds it.

Sharded as tf_recipes.data deals examples: input pipeline p of P decodes the p-th run of 1/P of the
missing chunks; after `barrier()` every pipeline maps all of them, decoding any it still cannot see
(another node's, on node-local disks), starting at its own place in that list so that the processes
of one node share that work too.

A chunk is published by renames, each file fsynced first (tf_recipes.atomic): crc32s, truth, then the
images, so a killed writer never leaves a chunk that looks whole. A crash can still leave a renamed
file whose data never reached the disk (zeros), which its crc32s catch. A chunk is checksummed only
when it was neither written nor checked in this boot of the machine (`checked`): not once per process,
and, once it has matched in another boot than the one that wrote it (its data read from the disk),
never again. A damaged chunk is decoded again.

One disk and memory check per machine: the process that takes node-BOOT.lock first (flock) checks, and
holds it until the barrier, so every other process of the job has tried it and lost by then.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import socket
import zlib

import numpy as np
import tensorflow as tf

from tf_recipes import user_paths
from tf_recipes.atomic import replace_durably, write_atomically
from tf_recipes.contract import DiskFullError
from tf_recipes.data import DataError, InputShard, error_reason

import layout

CACHE_FORMAT = "scenes-uint8-v1"  # change when the files' layout changes: old caches are not reused
CHUNK = 32  # examples per chunk: 256 MiB of files at 1024x2048, 93 chunks for Cityscapes' training split
DURABLE = "durable"  # `checked`: the files matched their crc32s in a later boot than the one that wrote them


class SceneArrays:
    """A split as uint8 images [N, height, width, 3] and truth [N, height, width], held in chunks
    (np.memmap views of the cache files), addressed by example index."""

    def __init__(self, chunks: list[tuple[np.ndarray, np.ndarray]], folder: str):
        self.chunks, self.folder = chunks, folder
        self.starts = np.cumsum([0] + [len(images) for images, _ in chunks])
        self.height, self.width = (int(side) for side in chunks[0][0].shape[1:3])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _rows(self, index) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= index < len(self):
            raise IndexError(f"example {index} of a cache of {len(self)}")
        chunk = int(np.searchsorted(self.starts, index, side="right")) - 1
        images, truth = self.chunks[chunk]
        return images[index - self.starts[chunk]], truth[index - self.starts[chunk]]

    def scene(self, index) -> tuple[np.ndarray, np.ndarray]:
        """Copies: TensorFlow may reuse a buffer it was handed for its output, and these pages are read-only."""
        image, truth = self._rows(int(index))
        return np.array(image), np.array(truth)

    def gather(self, indices) -> tuple[np.ndarray, np.ndarray]:
        rows = [self._rows(int(i)) for i in np.asarray(indices).reshape(-1)]
        return np.stack([image for image, _ in rows]), np.stack([truth for _, truth in rows])


def cache_folder(data_dir, split: str, lookup, height: int, width: int, cache_dir) -> str:
    """The folder for these pixels: the prepared index (its bytes and where it is), the view's lookup,
    the size, CACHE_FORMAT and CHUNK."""
    key = hashlib.sha256(f"{os.path.abspath(data_dir)}|{split}|{height}x{width}|{CACHE_FORMAT}|{CHUNK}|".encode())
    key.update(np.asarray(lookup, np.uint8).tobytes())
    key.update(layout.index_path(data_dir, split).read_bytes())
    return os.path.join(os.path.abspath(cache_dir), f"{split}-{height}x{width}-{key.hexdigest()[:12]}")


def _paths(folder: str, start: int) -> dict[str, str]:
    return {kind: os.path.join(folder, f"{start:06d}-{kind}{suffix}")
            for kind, suffix in (("images", ".npy"), ("truth", ".npy"), ("crc32", ".npy"), ("checked", ""))}


def _shapes(count: int, height: int, width: int) -> dict[str, tuple]:
    return {"images": (count, height, width, 3), "truth": (count, height, width), "crc32": (count, 2)}


def _chunk_bytes(count: int, height: int, width: int) -> int:
    return count * height * width * 4


# ## Reading a chunk, and when to trust it without reading all of it

def _boot_id() -> str | None:
    """This boot of this machine's kernel (shared by its containers, whose page cache it is), if Linux says."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def _version(paths: dict) -> str:
    """Which files these are: a chunk rewritten or edited gets another version."""
    stats = [os.stat(paths[kind]) for kind in ("images", "truth", "crc32")]
    return " ".join(f"{stat.st_ino}:{stat.st_mtime_ns}:{stat.st_size}" for stat in stats)


def _checked(paths: dict) -> str | None:
    """The boot (or DURABLE) in which this version of the chunk was written or found whole, if any."""
    try:
        with open(paths["checked"]) as handle:
            version, when = (handle.read().splitlines() + ["", ""])[:2]
        return when if version == _version(paths) else None
    except OSError:
        return None


def _mark_checked(paths: dict, when: str) -> None:
    with contextlib.suppress(OSError):  # a read-only cache is checksummed in every process instead
        write_atomically(paths["checked"], f"{_version(paths)}\n{when}\n")


def _damaged(images: np.ndarray, truth: np.ndarray, crc32: np.ndarray) -> tuple[int, str] | None:
    """(row, "images" or "truth") of the first example whose bytes do not match their crc32, else None."""
    for row in range(len(images)):
        for column, (kind, arrays) in enumerate((("images", images), ("truth", truth))):
            if zlib.crc32(arrays[row]) != int(crc32[row, column]):
                return row, kind
    return None


def _load_chunk(folder: str, start: int, count: int, height: int, width: int, log) -> tuple | None:
    """(images, truth) of the chunk, mapped, if its files are complete, of the right shapes and (unless
    written or checked in this boot) match their crc32s; else None, and it is decoded again."""
    paths, shapes = _paths(folder, start), _shapes(count, height, width)
    try:
        arrays = {kind: np.load(paths[kind], mmap_mode="r") for kind in shapes}
    except (OSError, ValueError):  # missing, truncated below its header, or not a .npy file
        return None
    if any(arrays[kind].shape != shape for kind, shape in shapes.items()):
        return None
    boot, when = _boot_id(), _checked(paths)
    if boot is None or when not in (boot, DURABLE):
        bad = _damaged(arrays["images"], arrays["truth"], arrays["crc32"])
        if bad is not None:
            log(f"{paths[bad[1]]} is damaged (example {start + bad[0]} does not match its crc32, e.g. zeros "
                "after a crash): decoding its chunk again")
            return None
        if boot is not None:  # read by another boot than the one that wrote or checked it: from the disk
            _mark_checked(paths, DURABLE if when else boot)
    return arrays["images"], arrays["truth"]


# ## The one check per machine: room on the disk, and whether the page cache can hold it

def _free_bytes(folder: str) -> int:
    return shutil.disk_usage(folder).free


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (0 if unknown): what the page cache can grow to without swapping."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@contextlib.contextmanager
def _first_on_node(folder: str):
    """Whether this process is the job's first on this machine to reach the cache: the first to flock
    node-BOOT.lock. Held until the block ends (after the barrier); by then every process of the job has
    tried it, so the lock file is removed. Without flock (some file systems) every process checks."""
    path = os.path.join(folder, f"node-{_boot_id() or socket.gethostname()}.lock")
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield True
        return
    first = None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            first = True
        except BlockingIOError:
            first = False
        except OSError:  # ENOLCK, EOPNOTSUPP: no locks here
            pass
        yield first is not False
    finally:
        if first:
            with contextlib.suppress(OSError):
                os.remove(path)
        os.close(descriptor)


def _check_node(folder: str, needed: int, total: int, scenes: int, height: int, width: int, log) -> None:
    """A DataError when the disk cannot take the chunks still to write; one line when the page cache
    cannot hold the whole cache (training then reads pages from disk again, which is slower, not wrong)."""
    free = _free_bytes(folder)
    if needed > free:
        raise DataError(f"the scene cache {folder} needs {needed / 2**30:.2f} GiB more ({scenes} scenes at "
                        f"{height}x{width}, {total / 2**30:.2f} GiB in all) but only {free / 2**30:.2f} GiB is "
                        "free there; give --cache-dir a folder on a larger disk, or train without --cache")
    available = available_memory_bytes()
    if available and total > available:
        log(f"the scene cache {folder} holds {total / 2**30:.1f} GiB, more than the {available / 2**30:.1f} GiB of "
            "memory available on this machine: the page cache cannot keep all of it, so training reads its pages "
            "from disk again (nothing is decoded again)")


# ## Decoding chunks into their files

class _ChunkFile:
    """One chunk being written: its images and truth files under temporary names (their .npy headers
    written and their data still holes of the full size), each example written at its offset."""

    def __init__(self, folder: str, start: int, count: int, height: int, width: int):
        self.paths, self.count, self.written = _paths(folder, start), count, 0
        self.crc32 = np.zeros((count, 2), np.uint32)
        self.files = {kind: _open_npy(_temporary(self.paths[kind]), shape)
                      for kind, shape in _shapes(count, height, width).items() if kind != "crc32"}

    def put(self, row: int, image: np.ndarray, truth: np.ndarray) -> None:
        for column, (kind, array) in enumerate((("images", image), ("truth", truth))):
            handle, offset = self.files[kind]
            _write_at(handle, array, offset + row * array.nbytes)
            self.crc32[row, column] = zlib.crc32(array)
        self.written += 1

    def publish(self) -> None:
        """crc32s, truth, then images (the last: complete images mark a complete chunk)."""
        with open(_temporary(self.paths["crc32"]), "wb") as handle:
            np.save(handle, self.crc32)
        replace_durably(handle.name, self.paths["crc32"])
        for kind in ("truth", "images"):
            handle, _ = self.files.pop(kind)
            handle.close()
            replace_durably(handle.name, self.paths[kind])  # concurrent writers of one chunk write the same bytes
        if boot := _boot_id():
            _mark_checked(self.paths, boot)

    def discard(self) -> None:
        for handle, _ in self.files.values():
            handle.close()
            os.remove(handle.name)
        with contextlib.suppress(FileNotFoundError):
            os.remove(_temporary(self.paths["crc32"]))


def _temporary(path: str) -> str:
    return f"{path}.{socket.gethostname()}.{os.getpid()}.tmp"  # unique among the writers sharing the folder


def _open_npy(path: str, shape: tuple):
    """A new .npy file of uint8 `shape`: the header, then a hole of the data's size (one size change)."""
    handle = open(path, "wb", buffering=0)
    np.lib.format.write_array_header_1_0(handle, {"descr": "|u1", "fortran_order": False, "shape": shape})
    os.ftruncate(handle.fileno(), handle.tell() + int(np.prod(shape)))
    return handle, handle.tell()


def _write_at(handle, array: np.ndarray, offset: int) -> None:
    """pwrite, not a writable mmap: a full disk is then an ENOSPC error, not a SIGBUS."""
    data = memoryview(np.ascontiguousarray(array)).cast("B")
    while data:
        written = os.pwrite(handle.fileno(), data, offset)
        data, offset = data[written:], offset + written


def _write_chunks(folder: str, starts: list[int], count: dict, height: int, width: int, decode, files,
                  split: str, recheck: bool = False) -> None:
    """Decode the examples of these chunks in one parallel pipeline and publish each chunk once all its
    examples are in. `recheck`: skip a chunk that another process published meanwhile.

    The map is not ordered: every example carries its index and is written at its own offset, so a slow
    scene does not hold back the others, and the files hold what an ordered map would write."""
    if not starts:
        return

    def indices():
        for start in starts:
            if not (recheck and _load_chunk(folder, start, count[start], height, width, lambda _: None)):
                yield from range(start, start + count[start])

    image_files, label_files = files
    examples = tf.data.Dataset.from_generator(indices, output_signature=tf.TensorSpec([], tf.int64)).map(
        lambda i: (i, *decode(tf.gather(image_files, i), tf.gather(label_files, i))),
        num_parallel_calls=len(os.sched_getaffinity(0)), deterministic=False)
    # One decode per usable core and no autotuner: nothing to tune in one pass, and deleting an iterator
    # whose autotuner ran can wait a second or two for its thread.
    options = tf.data.Options()
    options.autotune.enabled = False
    filling: dict[int, _ChunkFile] = {}
    try:
        for index, image, truth in examples.prefetch(2).with_options(options).as_numpy_iterator():
            start = int(index) - int(index) % CHUNK
            if start not in filling:
                filling[start] = _ChunkFile(folder, start, count[start], height, width)
            chunk = filling[start]
            chunk.put(int(index) - start, image, truth)
            if chunk.written == chunk.count:
                filling.pop(start).publish()
    except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError, tf.errors.DataLossError) as error:
        raise DataError(_undecodable(decode, files, starts, count, split, error)) from None
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        needed = sum(_chunk_bytes(count[start], height, width) for start in starts)
        raise DiskFullError(f"the scene cache folder {folder} is full ({error.strerror}): its chunks need "
                            f"{needed / 2**30:.2f} GiB; free space there or give --cache-dir a larger disk") from None
    finally:
        for chunk in filling.values():  # chunks an error left incomplete
            chunk.discard()


def _undecodable(decode, files, starts: list[int], count: dict, split: str, error) -> str:
    """The first example of these chunks that `decode` fails on, decoding them one by one, as one line."""
    image_files, label_files = (names.numpy() for names in files)
    for start in starts:
        for i in range(start, start + count[start]):
            try:
                decode(tf.constant(image_files[i]), tf.constant(label_files[i]))
            except tf.errors.OpError as bad:
                return (f"{image_files[i].decode()} or {label_files[i].decode()} (example {i} of the prepared "
                        f"{split} split) cannot be decoded for the scene cache ({error_reason(bad)}); delete that "
                        "file and run prepare_data.py again: it writes it again")
    return f"the {split} scenes could not be decoded for the scene cache ({error_reason(error)})"


# ## The cache of a split

def cached_scenes(data_dir, split: str, index: dict, decode, height: int, width: int, cache_dir,
                  shard: InputShard, barrier=lambda: None, log=print, *, lookup) -> SceneArrays:
    """Every scene of the split as `decode(image_file, label_file)` gives it (uint8 [height, width, 3]
    and [height, width]), from the cache under `cache_dir`, decoding only what it lacks. `lookup` is the
    view's label lookup that `decode` applies (it keys the folder, as the index, size and format do).

    Pipeline p of P writes the missing chunks of its p-th of the split; after `barrier()` every pipeline
    maps all chunks, writing any it still cannot see (another node's, on node-local disks)."""
    total = len(index["examples"])
    if not total:
        raise DataError(f"the prepared {split} split in {data_dir} has no examples; run prepare_data.py again")
    folder = cache_folder(data_dir, split, lookup, height, width, cache_dir)
    if problem := user_paths.make_folder("--cache-dir", folder):
        raise DataError(problem)
    starts = list(range(0, total, CHUNK))
    count = {start: min(start + CHUNK, total) - start for start in starts}
    files = (tf.constant([str(layout.prepared_image(data_dir, split, i)) for i in index["examples"]]),
             tf.constant([str(layout.prepared_labels(data_dir, split, i)) for i in index["examples"]]))
    who = f"input pipeline {shard.pipeline_id + 1}/{shard.num_pipelines}: " if shard.num_pipelines > 1 else ""

    def missing(candidates):
        return [start for start in candidates if _load_chunk(folder, start, count[start], height, width, log) is None]

    # Distributed: this pipeline's share of the chunks
    first, last = (len(starts) * i // shard.num_pipelines for i in (shard.pipeline_id, shard.pipeline_id + 1))
    with _first_on_node(folder) as first_here:
        if first_here:  # Distributed: one check for the machine, before anything is written
            absent = [start for start in starts if not _looks_whole(folder, start, count[start], height, width)]
            _check_node(folder, sum(_chunk_bytes(count[s], height, width) for s in absent),
                        _chunk_bytes(total, height, width), total, height, width, log)
        mine = missing(starts[first:last])
        if mine:
            log(f"{who}caching {split}: decoding {sum(count[s] for s in mine)} of {total} scenes at "
                f"{height}x{width} into {folder}")
        _write_chunks(folder, mine, count, height, width, decode, files, split)
        barrier()  # Distributed: every pipeline has written its share
    chunks = {start: _load_chunk(folder, start, count[start], height, width, log) for start in starts}
    rest = [start for start in starts if chunks[start] is None]
    if rest:  # Distributed: chunks another node wrote out of this one's sight; each process starts elsewhere
        log(f"{who}caching {split}: {sum(count[s] for s in rest)} scenes are still missing from {folder} after "
            "every pipeline wrote its share (another node's, on its own disk, or damaged ones): decoding them here")
        turn = len(rest) * shard.pipeline_id // shard.num_pipelines
        _write_chunks(folder, rest[turn:] + rest[:turn], count, height, width, decode, files, split, recheck=True)
    for start in rest:
        chunks[start] = _load_chunk(folder, start, count[start], height, width, log)
        if chunks[start] is None:  # decoded again just now, and still not whole: the disk does not keep it
            raise DataError(f"the scene cache chunk {_paths(folder, start)['images']} is still damaged after being "
                            f"decoded again; delete {folder} and check that disk")
    return SceneArrays([chunks[start] for start in starts], folder)


def _looks_whole(folder: str, start: int, count: int, height: int, width: int) -> bool:
    """Whether the chunk's files are there at their full sizes (their headers read, not their data)."""
    paths = _paths(folder, start)
    try:
        return all(np.load(paths[kind], mmap_mode="r").shape == shape
                   for kind, shape in _shapes(count, height, width).items())
    except (OSError, ValueError):
        return False
