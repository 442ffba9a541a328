"""cassava-resnet with damaged inputs: one line naming the file or value, before training.

A weights file that cannot be read (checked before any data is touched), labels outside the five
classes in the decode-once cache, an undecodable photo and a damaged TFRecord shard in the
prepared TFDS data. TFDS data is written by the real cassava builder from generated photos."""
import pathlib
import shutil
import tempfile

import h5py
import keras
import numpy as np
import pytest

from cassava_data import SPLITS, TEST_PHOTO_SIZES
from tf_recipes.data import InputShard
from error_checks import assert_one_line_error
from helpers import recipe_module, run_python

generated_cassava = recipe_module("cassava-resnet", "generated_cassava")
input_pipeline = recipe_module("cassava-resnet", "input_pipeline")
TRAIN = "recipes/cassava-resnet/train.py"
SIZE = 32
OFFLINE = {"TF_RECIPES_FAULT_DOWNLOAD_HOST": "unreachable.invalid"}  # as on a machine without a network


def train(data_dir, tmp_path, *extra):
    return run_python("-m", "tf_recipes.operations.faults", TRAIN, "--data-dir", str(data_dir),
                      "--cache-dir", str(tmp_path / "cache"),
                      "--image-size", str(SIZE), "--batch-size", "4", "--max-steps", "1",
                      "--results-dir", str(tmp_path / "out"), *extra, timeout=600, env=OFFLINE)


@pytest.fixture(scope="module")
def notop_file(tmp_path_factory):
    """A readable ResNet50 backbone file in the Keras notop format (legacy HDF5)."""
    from keras.src.legacy.saving import legacy_h5_format

    path = tmp_path_factory.mktemp("weights") / "notop.h5"
    backbone = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(SIZE, SIZE, 3))
    with h5py.File(path, "w") as handle:
        legacy_h5_format.save_weights_to_hdf5_group(handle, backbone)
    return path


@pytest.mark.parametrize("damage,reason", [("truncated", "truncated file"), ("not hdf5", "file signature not found")])
def test_an_unreadable_weights_file_is_named_before_the_data_is_read(cassava_data_dir, notop_file, tmp_path,
                                                                      damage, reason):
    weights = tmp_path / "notop.h5"
    data = notop_file.read_bytes()
    weights.write_bytes(data[:len(data) // 2] if damage == "truncated" else b"<html>proxy error</html>")
    process = train(cassava_data_dir, tmp_path, "--weights", str(weights))
    assert_one_line_error(process, tmp_path / "out", f"--weights {weights} cannot be read as an HDF5 weights file",
                          reason, "--weights none")
    assert not (tmp_path / "cache").exists()  # failed before decoding a single photo


@pytest.fixture(scope="module")
def builder(cassava_data_dir):
    return input_pipeline.cassava_builder(str(cassava_data_dir), allow_download=False)


def test_labels_outside_the_classes_in_the_cache_are_named(builder, cassava_data_dir, tmp_path):
    shard = InputShard(num_pipelines=1, pipeline_id=0, per_replica_batch=4, global_batch=4)
    input_pipeline.cache_split(builder, "train", SIZE, str(tmp_path / "cache"), shard, log=lambda message: None)
    folder = input_pipeline.cache_folder(builder, "train", SIZE, str(tmp_path / "cache"))
    labels_file = pathlib.Path(input_pipeline.chunk_paths(folder, 0)[1])
    labels = np.load(labels_file)
    labels[3] = 5
    np.save(labels_file, labels)
    process = train(cassava_data_dir, tmp_path, "--weights", "none")
    assert_one_line_error(process, tmp_path / "out", f"cassava train labels in {labels_file}",
                          "label 5 of example 3", f"delete {folder}")
    # What the message says to do: the cache is rebuilt from the TFDS data, with good labels.
    shutil.rmtree(folder)
    arrays = input_pipeline.cache_split(builder, "train", SIZE, str(tmp_path / "cache"), shard,
                                        log=lambda message: None)
    assert arrays.labels.max() < input_pipeline.NUM_CLASSES and len(arrays) == SPLITS["train"]


def prepared_with_a_truncated_photo(data_dir):
    """A prepared TFDS cassava whose train split holds one truncated JPEG; returns its bytes."""
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        generated_cassava.write_jpegs(scratch, {"train": 12, "validation": 4}, TEST_PHOTO_SIZES, 5, 90)
        photo = sorted((scratch / "cassavaleafdata" / "train").rglob("*.jpg"))[4]
        truncated = photo.read_bytes()[:200]
        photo.write_bytes(truncated)
        builder = generated_cassava.local_cassava_builder(scratch, str(data_dir))
        builder.download_and_prepare(download_dir=str(scratch / "downloads"))
    return truncated


def test_an_undecodable_photo_is_named_by_its_example_number(tmp_path):
    truncated = prepared_with_a_truncated_photo(tmp_path / "tfds")
    builder = input_pipeline.cassava_builder(str(tmp_path / "tfds"), allow_download=False)
    stored = [jpeg.numpy() for jpeg, _ in input_pipeline.encoded_split(builder, "train")]
    position = stored.index(truncated)
    process = train(tmp_path / "tfds", tmp_path, "--weights", "none")
    assert_one_line_error(process, tmp_path / "out", f"cassava train example {position} cannot be decoded as an image",
                          f"the TFDS data in {builder.data_dir} is damaged", "download_cassava.py",
                          foreign=r"^Improper call to JPEG library in state \d+$")  # libjpeg's own stderr


def test_a_chunk_cut_short_by_a_bad_photo_leaves_no_file_behind(tmp_path, monkeypatch):
    truncated = prepared_with_a_truncated_photo(tmp_path / "tfds")
    builder = input_pipeline.cassava_builder(str(tmp_path / "tfds"), allow_download=False)
    stored = [jpeg.numpy() for jpeg, _ in input_pipeline.encoded_split(builder, "train")]
    assert stored.index(truncated) >= 2  # so that, two decodes at a time, example 0 is in before it fails
    monkeypatch.setattr(input_pipeline, "DECODE_BATCH", 1)
    opened = []
    open_chunk_file = input_pipeline._open_chunk_file
    monkeypatch.setattr(input_pipeline, "_open_chunk_file", lambda path, shape: opened.append(path) or
                        open_chunk_file(path, shape))
    shard = InputShard(num_pipelines=1, pipeline_id=0, per_replica_batch=4, global_batch=4)
    with pytest.raises(input_pipeline.DataError, match="cannot be decoded as an image"):
        input_pipeline.cache_split(builder, "train", SIZE, str(tmp_path / "cache"), shard, log=lambda message: None)
    assert opened  # the chunk's file was being filled when the bad photo came
    assert [path for path in (tmp_path / "cache").rglob("*") if path.is_file()] == []


def test_a_damaged_tfrecord_shard_is_named(cassava_data_dir, tmp_path):
    copy = tmp_path / "tfds"
    shutil.copytree(cassava_data_dir, copy)
    shard, = copy.glob("cassava/*/cassava-train.tfrecord-*")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2: len(data) // 2 + 64] = bytes(64)
    shard.write_bytes(bytes(data))
    assert_one_line_error(train(copy, tmp_path, "--weights", "none"), tmp_path / "out",
                          f"cassava train in {shard.parent} cannot be read", "is damaged: delete that folder")
