"""cassava-resnet's data path: the generated TFDS directory, the decode-once cache, sharding and
replica groups, the seed's pipeline, and the offline errors."""
import os
import time

import numpy as np
import pytest
import tensorflow as tf

from cassava_data import SPLITS
from tf_recipes import data
from tf_recipes.data import DataError, InputShard
from helpers import recipe_module

input_pipeline = recipe_module("cassava-resnet", "input_pipeline")


@pytest.fixture(scope="module")
def builder(cassava_data_dir):
    return input_pipeline.cassava_builder(str(cassava_data_dir), allow_download=False)


def decoded_split(builder, split, size):
    """Every example of a split, decoded and resized one by one, in stored order."""
    pairs = [(input_pipeline.decode_and_resize(jpeg, size).numpy(), int(label))
             for jpeg, label in input_pipeline.encoded_split(builder, split)]
    return np.stack([image for image, _ in pairs]), np.array([label for _, label in pairs])


# -- the generated dataset ----------------------------------------------------------------------

def test_the_generated_directory_is_what_tfds_builder_cassava_loads(cassava_data_dir):
    import tensorflow_datasets as tfds

    builder = tfds.builder("cassava", data_dir=str(cassava_data_dir))
    assert builder.is_prepared() and str(builder.version) == "0.1.0"
    assert {name: split.num_examples for name, split in builder.info.splits.items()} == SPLITS
    assert builder.info.features["label"].names == ["cbb", "cbsd", "cgm", "cmd", "healthy"]
    example = next(iter(tfds.load("cassava", split="validation", data_dir=str(cassava_data_dir))))
    assert example["image"].dtype == tf.uint8 and example["image"].shape[-1] == 3
    assert example["image/filename"].numpy().decode().startswith("validation-")


# -- the cache ----------------------------------------------------------------------------------

def test_the_cache_holds_each_example_decoded_and_resized_with_its_label(builder, tmp_path):
    shard = InputShard(1, 0, 2, 2)
    arrays = input_pipeline.cache_split(builder, "train", 40, str(tmp_path), shard, log=lambda _: None)
    expected_images, expected_labels = decoded_split(builder, "train", 40)
    assert len(arrays) == SPLITS["train"]
    images, labels = arrays.gather(np.arange(len(arrays)))
    assert images.dtype == np.uint8 and images.shape == (SPLITS["train"], 40, 40, 3)
    np.testing.assert_array_equal(images, expected_images)
    np.testing.assert_array_equal(labels, expected_labels)
    assert set(labels) == set(range(5))


def test_short_writes_still_put_every_byte_in_the_cache(builder, tmp_path, monkeypatch):
    """pwrite may write fewer bytes than it is given (a full disk, a signal): the rest is written too,
    not left as zeros in the file."""
    pwrite, calls = os.pwrite, []

    def short_pwrite(fd, data, offset):
        data = memoryview(data).cast("B")
        calls.append(len(data))
        return pwrite(fd, data[:1000], offset)

    monkeypatch.setattr(os, "pwrite", short_pwrite)
    arrays = input_pipeline.cache_split(builder, "train", 40, str(tmp_path), InputShard(1, 0, 2, 2),
                                        log=lambda _: None)
    assert max(calls) == 40 * 40 * 3 and min(calls) < 1000  # whole images asked for, written in pieces
    np.testing.assert_array_equal(arrays.gather(np.arange(len(arrays)))[0], decoded_split(builder, "train", 40)[0])


def test_a_second_run_reuses_the_cache_and_another_size_does_not(builder, tmp_path):
    shard = InputShard(1, 0, 2, 2)
    messages = []
    input_pipeline.cache_split(builder, "train", 40, str(tmp_path), shard, log=messages.append)
    assert len(messages) == 1 and "decoding and resizing 24 of 24 images" in messages[0]
    input_pipeline.cache_split(builder, "train", 40, str(tmp_path), shard, log=messages.append)
    assert len(messages) == 1  # nothing decoded again
    input_pipeline.cache_split(builder, "train", 48, str(tmp_path), shard, log=messages.append)
    assert len(messages) == 2 and "48x48" in messages[1]


def test_each_pipeline_decodes_only_its_own_chunks_before_the_barrier(builder, tmp_path, monkeypatch):
    monkeypatch.setattr(input_pipeline, "CHUNK", 5)  # 24 examples -> chunks at 0, 5, 10, 15, 20
    folder = input_pipeline.cache_folder(builder, "train", 32, str(tmp_path))
    written = {}

    def run(pipeline_id, barrier):
        shard = InputShard(2, pipeline_id, 2, 4)
        return input_pipeline.cache_split(builder, "train", 32, str(tmp_path), shard, barrier=barrier,
                                          log=lambda _: None)

    def chunks_on_disk():
        return sorted(int(path.name[:7]) for path in tmp_path.glob("*/*-images.npy"))

    # Pipeline 1 arrives first on a node of its own: it decodes its chunks, and after the barrier
    # the ones pipeline 0 has not written where it can see them.
    run(1, barrier=lambda: written.setdefault(1, chunks_on_disk()))
    assert written[1] == [10, 15, 20]  # its half: chunks 2..4 of 5
    assert chunks_on_disk() == [0, 5, 10, 15, 20]
    # Pipeline 0 on the same (shared) folder finds everything and decodes nothing.
    mtimes = {path: path.stat().st_mtime_ns for path in tmp_path.glob("*/*.npy")}
    arrays = run(0, barrier=lambda: None)
    assert {path: path.stat().st_mtime_ns for path in tmp_path.glob("*/*.npy")} == mtimes
    np.testing.assert_array_equal(arrays.gather(np.arange(24))[0], decoded_split(builder, "train", 32)[0])
    assert {path.parent for path in tmp_path.glob("*/*.npy")} == {tmp_path / folder.rsplit("/", 1)[-1]}


def test_truncated_chunks_are_decoded_again(builder, tmp_path, monkeypatch):
    monkeypatch.setattr(input_pipeline, "CHUNK", 5)
    shard = InputShard(1, 0, 2, 2)
    input_pipeline.cache_split(builder, "train", 32, str(tmp_path), shard, log=lambda _: None)
    for start in (5, 15):  # two chunks that are not next to each other: two TFDS slices
        [images_file] = tmp_path.glob(f"*/{start:07d}-images.npy")
        images_file.write_bytes(images_file.read_bytes()[:1000])
    messages = []
    arrays = input_pipeline.cache_split(builder, "train", 32, str(tmp_path), shard, log=messages.append)
    assert len(messages) == 1 and "decoding and resizing 10 of 24 images" in messages[0]
    np.testing.assert_array_equal(arrays.gather(np.arange(24))[0], decoded_split(builder, "train", 32)[0])


def test_a_chunk_of_zeros_of_the_right_size_is_found_by_its_crc32_and_decoded_again(builder, tmp_path, monkeypatch):
    """After a power loss a renamed chunk can hold zeros where its images were, header and size intact:
    the shape check passes, so only the crc32s written with the chunk tell."""
    monkeypatch.setattr(input_pipeline, "CHUNK", 8)
    shard = InputShard(1, 0, 2, 2)
    input_pipeline.cache_split(builder, "train", 32, str(tmp_path), shard, log=lambda _: None)
    [images_file] = tmp_path.glob("*/0000008-images.npy")
    data = images_file.read_bytes()
    header = len(data) - 8 * 32 * 32 * 3
    images_file.write_bytes(data[:header] + bytes(len(data) - header))
    messages = []
    arrays = input_pipeline.cache_split(builder, "train", 32, str(tmp_path), shard, log=messages.append)
    assert len(messages) == 2, messages
    assert f"{images_file} is damaged (image 0 does not match its crc32" in messages[0]
    assert "\n" not in messages[0] and "decoding and resizing 8 of 24 images" in messages[1]
    np.testing.assert_array_equal(arrays.gather(np.arange(24))[0], decoded_split(builder, "train", 32)[0])
    assert images_file.read_bytes() == data


# -- sharding ----------------------------------------------------------------------------------------
# (That every launcher layout puts the same examples on each replica is tested in
# tests/unit/test_data_sharding.py, for tf_recipes.data.sharded_order itself.)

# -- the seed's pipeline ------------------------------------------------------------------------

def test_the_seed_pipeline_is_float_in_zero_one_at_the_global_batch(cassava_data_dir):
    batches = list(input_pipeline.seed_train_dataset(str(cassava_data_dir), global_batch=8, image_size=32,
                                                     seed=0).as_numpy_iterator())
    assert [len(labels) for _, labels in batches] == [8, 8, 8]
    images = np.concatenate([images for images, _ in batches])
    assert images.dtype == np.float32 and images.shape[1:] == (32, 32, 3)
    assert 0.0 <= images.min() and images.max() <= 1.0 and images.max() > 0.5


# -- errors -------------------------------------------------------------------------------------

def test_a_missing_data_dir_is_named_with_how_to_prepare_it(tmp_path):
    with pytest.raises(DataError, match=r"--data-dir .*nope does not exist.*download_cassava.py"):
        input_pipeline.cassava_builder(str(tmp_path / "nope"))


def test_unprepared_data_offline_fails_at_once_with_how_to_prepare_it(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "DOWNLOAD_HOST", "unreachable.invalid")
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    started = time.monotonic()
    with pytest.raises(DataError, match=r"not prepared in .*unreachable.invalid cannot be reached.*--data-dir DIR"):
        input_pipeline.cassava_builder(str(tmp_path))
    assert time.monotonic() - started < 30


def test_a_job_of_several_processes_does_not_download(tmp_path):
    with pytest.raises(DataError, match="several processes does not download"):
        input_pipeline.cassava_builder(str(tmp_path), allow_download=False)


def test_a_resumed_run_continues_with_the_batches_the_whole_run_would_have_seen():
    arrays = input_pipeline.synthetic_split(40, 8, 0)
    shard = InputShard(2, 0, 2, 8)  # 2 processes x 2 local replicas
    whole = list(input_pipeline.make_train_dataset(arrays, shard, total_steps=9, seed=4).as_numpy_iterator())
    resumed = list(input_pipeline.make_train_dataset(arrays, shard, total_steps=9, seed=4,
                                                     start_step=6).as_numpy_iterator())
    assert len(whole) == 9 * 2 and len(resumed) == 3 * 2  # per-replica batches of this pipeline
    for (images, labels), (expected_images, expected_labels) in zip(resumed, whole[6 * 2:], strict=True):
        np.testing.assert_array_equal(images, expected_images)
        np.testing.assert_array_equal(labels, expected_labels)
