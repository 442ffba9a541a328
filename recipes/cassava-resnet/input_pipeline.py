"""Cassava input pipelines: ours, the seed tutorial's (for comparison), and generated images.

Ours decodes and resizes every training photo once, each by exactly one input pipeline, into a
cache of uint8 images on disk; training then reads its shard's batches from that cache by example
index. The seed's pipeline decodes (TFDS) and resizes in parallel in its first epoch and keeps the
resized float32 images in memory (`Dataset.cache()`), one copy per process.

    cassava_builder(data_dir)                  the prepared TFDS `cassava` dataset, or a DataError
    (or a tf_recipes.image_folder.ImageFolder: the user's own photos, through the same cache and order)
    cache_split(builder, split, size, ...)     decode + resize once, sharded, parallel -> ImageArrays
    synthetic_split(num, size, seed)           generated images at the training size -> ImageArrays
    make_train_dataset(arrays, shard, ...)     this pipeline's per-replica batches, in sharded_order
    make_eval_dataset(builder, split, ...)     one pass over a split (parallel decode, not cached)
    seed_train_dataset(data_dir, ...)          the seed tutorial's pipeline, as it wrote it

Why a cache of resized images, and why a file: decoding and resizing a photo costs milliseconds of
CPU (benchmark_input.py), on the cores that also feed the accelerators, so it is done once. The seed
does that too, with Dataset.cache(): float32 in memory, about 1 MB per 300x300 image in every process
that runs the pipeline. Here the images are uint8 (270 KB each, 1.5 GB for the 5,656 training photos)
in files read through np.memmap: the page cache holds one copy for every process on a node, and a job
that starts again reuses it.

Why sharded by example index, before decoding: `tf_recipes.data.sharded_order` gives every launcher the
same global batches. The cache is cut into chunks of CHUNK examples, and input pipeline p of P
decodes only the p-th run of 1/P of the chunks, so every photo is decoded once in the whole job when
the cache folder is shared (one node, or a shared file system). A chunk another node wrote where this
node cannot see it is decoded here after the barrier. Training batches are then gathered from the
cache by the indices of this pipeline's own share.
"""
from __future__ import annotations

import errno
import functools
import hashlib
import os
import socket
import zlib

import numpy as np
import tensorflow as tf

from tf_recipes.atomic import replace_durably
from tf_recipes.contract import DiskFullError
from tf_recipes.data import DataError, InputShard, check_labels, download_tfds, error_reason, sharded_order
from tf_recipes.image_folder import VAL, ImageFolder, unreadable

AUTOTUNE = tf.data.AUTOTUNE
CHUNK = 256  # examples per cache file
DECODE_BATCH = 8  # decoded examples handed to Python at a time
CACHE_FORMAT = "bilinear-uint8-v1"  # change when decode_and_resize changes: old caches are not reused
NUM_CLASSES = 5
PREPARE_HINT = ("prepare it once on a machine with internet (a login node): "
                "`python recipes/cassava-resnet/download_cassava.py --data-dir DIR`, then pass --data-dir DIR "
                "(or use --synthetic)")


# ## The dataset
# Clusters prepare TFDS `cassava` once on a login node; compute nodes only read it. Asking whether
# the download host answers first turns TFDS's minutes of retries into an immediate message.

def cassava_builder(data_dir: str | None, allow_download: bool = True):
    import tensorflow_datasets as tfds

    if data_dir and not os.path.isdir(data_dir):
        raise DataError(f"--data-dir {data_dir} does not exist; {PREPARE_HINT}")
    builder = tfds.builder("cassava", data_dir=data_dir)
    if builder.is_prepared():
        return builder
    missing = f"TFDS cassava is not prepared in {builder.data_dir} and {{}}; {PREPARE_HINT}"
    if not allow_download:  # Distributed: a job of several processes never downloads
        raise DataError(missing.format("a job of several processes does not download it (each would)"))
    download_tfds(builder, missing, " (1.3 GB)")
    return builder


def encoded_split(builder, split: str) -> tf.data.Dataset:
    """(JPEG bytes, label) in the split's stored order, not decoded. No TFDS auto-cache: the real
    dataset (1.3 GB) is too big for it anyway, and a small test set must behave like the real one."""
    import tensorflow_datasets as tfds

    dataset = builder.as_dataset(split=split, shuffle_files=False,
                                 decoders={"image": tfds.decode.SkipDecoding()},
                                 read_config=tfds.ReadConfig(try_autocache=False))
    return dataset.map(lambda example: (example["image"], tf.cast(example["label"], tf.int32)))


# ## A source: TFDS cassava, or an ImageFolder of the user's photos (a list of files)
# The cache and the sharded order only need, per split, how many examples there are and the encoded
# bytes and labels of examples [start, stop) in a fixed order; both sources give that.

def is_folder(source) -> bool:
    return isinstance(source, ImageFolder)


def _folder_split(split: str) -> str:
    return VAL if split == "validation" else split


def split_size(source, split: str) -> int:
    if is_folder(source):
        return len(source.files(_folder_split(split)))
    return source.info.splits[split].num_examples


def num_classes(source) -> int:
    return source.num_classes if is_folder(source) else NUM_CLASSES


def encoded_range(source, split: str, start: int, stop: int) -> tf.data.Dataset:
    """(encoded image bytes, label) of examples [start, stop) of the split, in its fixed order."""
    if not is_folder(source):
        return encoded_split(source, f"{split}[{start}:{stop}]")
    split = _folder_split(split)
    files = tf.data.Dataset.from_tensor_slices((source.files(split)[start:stop], source.labels(split)[start:stop]))
    return files.map(lambda path, label: (tf.io.read_file(path), label))


def decode_and_resize(jpeg, image_size: int):
    """JPEG bytes -> uint8 [size, size, 3]. Bilinear, aspect ratio not kept: what the seed did.
    uint8 (rounded) rather than float: 4x less to cache and to copy to the accelerator."""
    image = tf.io.decode_image(jpeg, channels=3, expand_animations=False)
    image = tf.image.resize(image, (image_size, image_size))
    # Bilinear weights are convex, so the values stay in 0..255: a plain cast after rounding gives
    # what saturate_cast did, without its extra clipping pass over the image.
    return tf.cast(tf.round(image), tf.uint8)


# ## Decode and resize once, into a cache of uint8 images

class ImageArrays:
    """A split as uint8 images [N, size, size, 3] and int32 labels [N], held in chunks (files
    opened with np.memmap, or arrays in memory), addressed by example index."""

    def __init__(self, chunks: list[tuple[np.ndarray, np.ndarray]]):
        self.images = [images for images, _ in chunks]
        self.labels = np.concatenate([labels for _, labels in chunks]).astype(np.int32)
        self.starts = np.cumsum([0] + [len(images) for images in self.images])
        self.image_size = int(self.images[0].shape[1])

    def __len__(self) -> int:
        return len(self.labels)

    def gather(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        chunk_of = np.searchsorted(self.starts, indices, side="right") - 1
        images = np.stack([self.images[c][i - self.starts[c]] for c, i in zip(chunk_of, indices, strict=True)])
        return images, self.labels[indices]


def cache_folder(builder, split: str, image_size: int, cache_dir: str) -> str:
    """One folder per (prepared dataset, split, size, resize method); anything else is not reused.
    For an ImageFolder, the dataset is its file list with each file's size and modification time."""
    if is_folder(builder):
        split = _folder_split(split)
        listing = "|".join(f"{path}:{os.path.getsize(path)}:{os.stat(path).st_mtime_ns}"
                           for path in builder.files(split)) + "|" + ",".join(builder.class_names)
        digest = hashlib.sha256(f"{os.path.abspath(builder.root)}|{CACHE_FORMAT}|{listing}".encode()).hexdigest()[:12]
        return os.path.join(cache_dir, f"image-folder-{split}-{image_size}px-{digest}")
    with tf.io.gfile.GFile(os.path.join(builder.data_dir, "dataset_info.json"), "rb") as handle:
        info = handle.read()
    digest = hashlib.sha256(f"{os.path.abspath(builder.data_dir)}|{CACHE_FORMAT}|".encode() + info).hexdigest()[:12]
    return os.path.join(cache_dir, f"cassava-{builder.version}-{split}-{image_size}px-{digest}")


def chunk_paths(folder: str, start: int) -> tuple[str, str]:
    return (os.path.join(folder, f"{start:07d}-images.npy"), os.path.join(folder, f"{start:07d}-labels.npy"))


def checksums_path(folder: str, start: int) -> str:
    return os.path.join(folder, f"{start:07d}-crc32.npy")


_VERIFIED = set()  # (images file, inode, mtime, size) whose bytes this process checked


def damaged(images_path: str, images: np.ndarray, checksums: np.ndarray) -> int | None:
    """The first image whose bytes do not match the crc32 written with it (zeros after a crash: the
    file system may keep a renamed file whose data never reached the disk), else None. Once per
    version of the file per process."""
    stat = os.stat(images_path)
    key = (images_path, stat.st_ino, stat.st_mtime_ns, stat.st_size)
    if key not in _VERIFIED:
        for index, image in enumerate(images):
            if zlib.crc32(image) != int(checksums[index]):
                return index
        _VERIFIED.add(key)
    return None


def load_chunk(folder: str, start: int, count: int, image_size: int, log=lambda message: None):
    """The chunk's arrays if it is complete, of the right shape and its images match their crc32,
    else None (it is then decoded again)."""
    images_path, labels_path = chunk_paths(folder, start)
    try:
        images = np.load(images_path, mmap_mode="r")
        labels = np.load(labels_path)
        checksums = np.load(checksums_path(folder, start))
    except (OSError, ValueError):
        return None
    if images.shape != (count, image_size, image_size, 3) or labels.shape != (count,) or checksums.shape != (count,):
        return None
    bad = damaged(images_path, images, checksums)
    if bad is not None:
        log(f"{images_path} is damaged (image {bad} does not match its crc32, e.g. zeros after a crash): "
            "decoding its chunk again")
        return None
    return images, labels


def write_chunks(builder, split: str, image_size: int, folder: str, starts: list[int], total: int) -> None:
    """Decode + resize the examples of these chunks in one parallel pipeline, each example written
    straight to its place in its chunk's file, and publish each chunk atomically and durably once all
    its examples are in (labels, the images' crc32s, then images last: a complete images file marks a
    complete chunk, and its crc32s tell whether its bytes reached the disk).

    The decode map is not ordered (deterministic=False): every example carries its index and is
    written at its own offset, so a slow photo never holds back the next ones while a core idles,
    and the files hold the same bytes in the same order as an ordered map would write."""
    if not starts:
        return
    runs = _consecutive_runs(starts)
    examples = _decoded_examples(builder, split, image_size, runs, total)
    count = {start: min(start + CHUNK, total) - start for start in starts}
    filling = {}  # chunk start -> [images file, offset of its data, labels, examples in, crc32s]
    os.makedirs(folder, exist_ok=True)
    try:
        for indices, images, labels in examples:
            for index, image, label in zip(indices.tolist(), images, labels, strict=True):
                start = index - index % CHUNK
                if start not in filling:
                    filling[start] = [*_open_chunk_file(_temporary(chunk_paths(folder, start)[0]),
                                                        (count[start], image_size, image_size, 3)),
                                      np.empty(count[start], np.int32), 0, np.empty(count[start], np.uint32)]
                chunk = filling[start]
                # One write per image, from the decoder's batch to the file: no chunk-sized buffer to
                # fill first (fresh memory is what costs most here, in a VM above all).
                _write_at(chunk[0], image, chunk[1] + (index - start) * image.nbytes)
                chunk[2][index - start] = label
                chunk[4][index - start] = zlib.crc32(image)
                chunk[3] += 1
                if chunk[3] == count[start]:
                    images_file, _, labels, _, checksums = filling.pop(start)
                    _publish_chunk(folder, start, images_file, labels, checksums)
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
        raise DataError(_unreadable_example(builder, split, runs, total, image_size, error)) from None
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        needed = sum(count.values()) * image_size * image_size * 3
        raise DiskFullError(f"the decoded-image cache folder {folder} is full ({error.strerror}): caching these "
                            f"chunks needs {needed} bytes; free space there or give --cache-dir a larger "
                            "folder") from None
    finally:
        for images_file, *_ in filling.values():  # chunks left incomplete by an error
            images_file.close()
            os.remove(images_file.name)
        for start in starts:  # a labels or crc32s file whose chunk was never published
            for path in (chunk_paths(folder, start)[1], checksums_path(folder, start)):
                if os.path.exists(_temporary(path)):
                    os.remove(_temporary(path))


def _consecutive_runs(starts: list[int]) -> list[list[int]]:
    """The chunk starts (ascending) grouped into runs of consecutive chunks. One TFDS slice per run:
    a slice that starts mid-file reads (and skips) the records before it, so many small slices would
    read the split many times over."""
    runs = [[starts[0]]]
    for start in starts[1:]:
        if start == runs[-1][-1] + CHUNK:
            runs[-1].append(start)
        else:
            runs.append([start])
    return runs


def _decoded_examples(builder, split: str, image_size: int, runs: list[list[int]], total: int):
    """Batches of (indices, images, labels) of the chunks of `runs`, decoded and resized in one
    parallel pipeline, in the order they finish."""
    parts = [tf.data.Dataset.zip((tf.data.Dataset.range(run[0], min(run[-1] + CHUNK, total)),
                                  encoded_range(builder, split, run[0], min(run[-1] + CHUNK, total))))
             for run in runs]
    dataset = functools.reduce(lambda a, b: a.concatenate(b), parts)
    dataset = dataset.map(lambda index, example: (index, decode_and_resize(example[0], image_size), example[1]),
                          num_parallel_calls=len(os.sched_getaffinity(0)), deterministic=False)
    # A fixed parallelism of one decode per usable core, and no autotuner: deleting an iterator whose
    # autotuner ran waits for its model thread, up to a second or two in this one-pass pipeline
    # (measured on 1,024 photos: 0 to 2.3 s of a 3 s pass), and there is nothing to tune here.
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.batch(DECODE_BATCH).prefetch(2).with_options(options).as_numpy_iterator()


def _open_chunk_file(path: str, shape: tuple):
    """A new .npy file for uint8 images of this shape, its header written and its data still a hole
    of the full size (one size change, not one per write); and the offset where its data starts."""
    handle = open(path, "wb", buffering=0)
    np.lib.format.write_array_header_1_0(handle, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)),
                                                  "fortran_order": False, "shape": shape})
    os.ftruncate(handle.fileno(), handle.tell() + int(np.prod(shape)))
    return handle, handle.tell()


def _write_at(handle, array: np.ndarray, offset: int) -> None:
    """All of the array's bytes at this offset: pwrite may write fewer than it was given."""
    written = os.pwrite(handle.fileno(), array, offset)
    rest = memoryview(array).cast("B")[written:]
    while rest:
        written = os.pwrite(handle.fileno(), rest, offset + array.nbytes - len(rest))
        rest = rest[written:]


def _temporary(path: str) -> str:
    return f"{path}.{socket.gethostname()}.{os.getpid()}.tmp"  # unique among writers sharing the folder


def _publish_chunk(folder: str, start: int, images_file, labels: np.ndarray, checksums: np.ndarray) -> None:
    """Each file fsynced, then renamed, then the folder fsynced (tf_recipes.atomic): after a crash a
    published file holds its bytes, and an images file comes with its labels and crc32s."""
    images_path, labels_path = chunk_paths(folder, start)
    for path, array in ((labels_path, labels), (checksums_path(folder, start), checksums)):
        with open(_temporary(path), "wb") as handle:
            np.save(handle, array)
        replace_durably(_temporary(path), path)
    images_file.close()
    replace_durably(images_file.name, images_path)  # concurrent writers of one chunk write the same bytes


def _unreadable_example(builder, split: str, runs, total: int, image_size: int, error) -> str:
    """Which example of the chunks being cached fails, found by decoding them one at a time."""
    remedy = f"the TFDS data in {builder.data_dir} is damaged: delete that folder and {PREPARE_HINT}"
    try:
        for run in runs:
            first = run[0]
            examples = encoded_range(builder, split, first, min(run[-1] + CHUNK, total))
            for offset, (jpeg, _) in enumerate(examples):
                try:
                    decode_and_resize(jpeg, image_size)
                except tf.errors.InvalidArgumentError as bad:
                    if is_folder(builder):
                        path = builder.files(_folder_split(split))[first + offset]
                        raise unreadable(path, error_reason(bad)) from None
                    return (f"cassava {split} example {first + offset} cannot be decoded as an image "
                            f"({error_reason(bad)}); {remedy}")
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as bad:  # the records themselves
        error = bad
    return f"cassava {split} in {builder.data_dir} cannot be read ({error_reason(error)}); {remedy}"


def cache_split(builder, split: str, image_size: int, cache_dir: str, shard: InputShard,
                barrier=lambda: None, log=print) -> ImageArrays:
    """The split decoded and resized once, as ImageArrays backed by files under `cache_dir`.

    Pipeline p of P writes the missing chunks of its p-th of the split; after `barrier()` every
    pipeline opens all chunks, writing any it still cannot see (another node's, on node-local disks).
    """
    total = split_size(builder, split)
    folder = cache_folder(builder, split, image_size, cache_dir)
    starts = list(range(0, total, CHUNK))
    count = {start: min(start + CHUNK, total) - start for start in starts}

    def missing(candidates):
        return [s for s in candidates if load_chunk(folder, s, count[s], image_size, log) is None]

    # Distributed: this pipeline's share of the chunks
    first, last = (len(starts) * i // shard.num_pipelines for i in (shard.pipeline_id, shard.pipeline_id + 1))
    mine = missing(starts[first:last])
    if mine:
        who = f"input pipeline {shard.pipeline_id + 1}/{shard.num_pipelines}: " if shard.num_pipelines > 1 else ""
        log(f"{who}caching {split}: decoding and resizing {sum(count[s] for s in mine)} of {total} images "
            f"to {image_size}x{image_size} in {folder}")
    write_chunks(builder, split, image_size, folder, mine, total)
    barrier()  # Distributed: every pipeline has written its chunks
    write_chunks(builder, split, image_size, folder, missing(starts), total)  # Distributed: chunks out of sight
    chunks = [load_chunk(folder, s, count[s], image_size, log) for s in starts]
    for start, chunk in zip(starts, chunks, strict=True):
        if chunk is None:  # decoded again just now, and still not whole: the disk does not keep it
            raise DataError(f"the decoded-image cache chunk {chunk_paths(folder, start)[0]} is still damaged after "
                            f"being decoded again; delete {folder} and check that disk")
    # out-of-range labels would fail mid-step, naming nothing
    for start, (_, labels) in zip(starts, chunks, strict=True):
        check_labels(labels, num_classes(builder), f"cassava {split} labels in {chunk_paths(folder, start)[1]} "
                     f"(examples {start}..{start + count[start] - 1})",
                     f"delete {folder} so that it is rebuilt from {builder.data_dir}; if this error returns, "
                     f"{PREPARE_HINT}")
    return ImageArrays(chunks)


def synthetic_split(num_examples: int, image_size: int, seed: int) -> ImageArrays:
    """Images at the training size with a class-coloured square on noise: learnable, no decoding."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, num_examples).astype(np.int32)
    images = rng.integers(0, 128, (num_examples, image_size, image_size, 3), dtype=np.uint8)
    colours = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0], [255, 255, 255]], np.uint8)
    side = max(image_size // 3, 1)
    images[:, side:2 * side, side:2 * side] = colours[labels][:, None, None, :]
    return ImageArrays([(images, labels)])


# ## Training and evaluation datasets

def make_train_dataset(arrays: ImageArrays, shard: InputShard, total_steps: int, seed: int,
                       start_step: int = 0) -> tf.data.Dataset:
    """This pipeline's per-replica batches of uint8 images and int32 labels, in sharded_order."""
    order = sharded_order(len(arrays), shard, total_steps, seed, start_step)  # Distributed: this pipeline's share
    size = arrays.image_size

    def gather(indices):
        images, labels = tf.numpy_function(arrays.gather, [indices], (tf.uint8, tf.int32), stateful=False)
        return tf.ensure_shape(images, [None, size, size, 3]), tf.ensure_shape(labels, [None])

    dataset = tf.data.Dataset.from_tensor_slices(order).batch(shard.per_replica_batch, drop_remainder=True)
    return dataset.map(gather, num_parallel_calls=AUTOTUNE, deterministic=True).prefetch(AUTOTUNE)


def make_eval_dataset(builder, split: str, image_size: int, batch_size: int,
                      share: slice | None = None) -> tf.data.Dataset:
    """One pass over a split, or over examples [share.start, share.stop) of it (this process's
    share, see Launcher.eval_share): decoded in parallel, not cached (read once per run)."""
    share = share or slice(0, split_size(builder, split))  # Distributed: this process's share of the split
    dataset = encoded_range(builder, split, share.start, share.stop).map(
        lambda jpeg, label: (decode_and_resize(jpeg, image_size), label), num_parallel_calls=AUTOTUNE)
    return dataset.batch(batch_size).prefetch(AUTOTUNE)


def arrays_dataset(arrays: ImageArrays, batch_size: int, share: slice | None = None) -> tf.data.Dataset:
    """Evaluation over in-memory ImageArrays (--synthetic), or over examples [share.start, share.stop)."""
    share = share or slice(0, len(arrays))  # Distributed: this process's share of the examples
    indices = tf.data.Dataset.range(share.start, share.stop).batch(batch_size)
    return indices.map(lambda i: tf.numpy_function(arrays.gather, [i], (tf.uint8, tf.int32), stateful=False))


# ## The seed tutorial's pipeline, for comparison only
# Reproduced as the seed wrote it (its create_dataset): TFDS decodes (TFDS maps its decoder with
# AUTOTUNE parallelism); one map, also AUTOTUNE-parallel, resizes and scales to [0, 1]; `.cache()`
# keeps the resized float32 images in memory (about 1 MB per 300x300 image, in every process), so
# only the first epoch decodes; then shuffle(1000), batch, prefetch. Its [0, 1] scaling does not
# match the caffe-style input the ImageNet ResNet50 weights expect, so this recipe does not train on it.

def seed_train_dataset(data_dir: str | None, global_batch: int, image_size: int = 300,
                       shuffle_buffer: int = 1000, seed: int | None = None) -> tf.data.Dataset:
    import tensorflow_datasets as tfds

    # try_autocache=False: TFDS caches datasets under 250 MiB in memory; the real cassava (1.3 GB)
    # never is, so a small generated copy must not be either.
    dataset = tfds.load("cassava", split="train", as_supervised=True, data_dir=data_dir,
                        read_config=tfds.ReadConfig(try_autocache=False))

    def resize_and_scale(image, label):
        image = tf.image.resize(image, (image_size, image_size))
        return tf.cast(image, tf.float32) / 255.0, label

    dataset = dataset.map(resize_and_scale, num_parallel_calls=AUTOTUNE).cache()
    return dataset.shuffle(shuffle_buffer, seed=seed).batch(global_batch).prefetch(AUTOTUNE)
