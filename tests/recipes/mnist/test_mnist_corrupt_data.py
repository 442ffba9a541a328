"""mnist-cnn with damaged or inconsistent data: one line naming the file or value, before training.

The Keras mnist.npz (truncated, not a zip, labels outside 0..9) and a prepared TFDS mnist (labels
outside 0..9, a damaged TFRecord shard). TFDS data is written by the real TFDS MNIST builder, fed
generated digits instead of the download. The shared label check is also tested directly."""
import pathlib

import numpy as np
import pytest

from error_checks import assert_one_line_error
from helpers import assert_ok, read_results, results_beside, run_python
from test_mnist_data import write_npz

from tf_recipes.data import DataError, check_labels

TRAIN = "recipes/mnist-cnn/train.py"


def train(data_dir, results_dir, *extra):
    return run_python("-m", "tf_recipes.operations.faults", TRAIN, "--data-dir", str(data_dir), "--max-steps", "2",
                      "--batch-size", "32", "--results-dir", str(results_dir), *extra, timeout=300,
                      env={"TF_RECIPES_FAULT_DOWNLOAD_HOST": "unreachable.invalid"})


def test_check_labels_names_the_first_bad_label_and_passes_good_ones():
    check_labels(np.array([0, 9, 3], np.uint8), 10, "x", "fix it")
    with pytest.raises(DataError, match=r"^x: 2 of 4 labels are outside the model's classes 0\.\.9, "
                                        r"e\.g\. label 10 of example 1 \(values \[-1, 10\]\); fix it$"):
        check_labels(np.array([0, 10, 3, -1]), 10, "x", "fix it")
    with pytest.raises(DataError, match="1-D integer array, got float32"):
        check_labels(np.array([0.0, 1.0], np.float32), 10, "x", "fix it")


@pytest.mark.parametrize("damage", ["truncated", "not a zip"])
def test_an_unreadable_npz_is_named(tmp_path, damage):
    write_npz(tmp_path / "mnist.npz")
    data = (tmp_path / "mnist.npz").read_bytes()
    (tmp_path / "mnist.npz").write_bytes(data[:len(data) // 2] if damage == "truncated" else b"<html>proxy</html>")
    line = assert_one_line_error(train(tmp_path, results_beside(tmp_path)), results_beside(tmp_path),
                                 f"{tmp_path / 'mnist.npz'} cannot be read as the Keras mnist.npz", "download it again")
    # numpy reads a file that is no zip as a pickle, which it refuses: a ValueError, named too
    assert ("BadZipFile" if damage == "truncated" else "ValueError") in line


def test_a_bad_crc_inside_the_npz_is_named(tmp_path):
    write_npz(tmp_path / "mnist.npz")
    data = bytearray((tmp_path / "mnist.npz").read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside x_train's bytes: the zip directory still reads
    (tmp_path / "mnist.npz").write_bytes(bytes(data))
    assert_one_line_error(train(tmp_path, results_beside(tmp_path)), results_beside(tmp_path),
                          f"{tmp_path / 'mnist.npz'} cannot be read", "Bad CRC-32")


@pytest.mark.parametrize("array,value", [("y_train", 10), ("y_train", -1), ("y_test", 255)])
def test_labels_outside_the_ten_classes_are_named_before_training(tmp_path, array, value):
    write_npz(tmp_path / "mnist.npz")
    with np.load(tmp_path / "mnist.npz") as data:
        arrays = {name: data[name] for name in data.files}
    arrays[array] = arrays[array].astype(np.int64)
    arrays[array][7] = value
    np.savez(tmp_path / "mnist.npz", **arrays)
    split = array.split("_")[1]
    process = train(tmp_path, results_beside(tmp_path))
    assert_one_line_error(process, results_beside(tmp_path), f"{tmp_path / 'mnist.npz'} {split} labels",
                          "outside the model's classes 0..9", f"label {value} of example 7")
    assert "step" not in process.stdout  # stopped before the first training step


def test_images_of_the_wrong_shape_are_named(tmp_path):
    write_npz(tmp_path / "mnist.npz")
    with np.load(tmp_path / "mnist.npz") as data:
        arrays = {name: data[name] for name in data.files}
    arrays["x_train"] = arrays["x_train"][:, :27]
    np.savez(tmp_path / "mnist.npz", **arrays)
    assert_one_line_error(train(tmp_path, results_beside(tmp_path)), results_beside(tmp_path),
                          "the train images are (512, 27, 28)", "expected N 28x28 images")


# --- TFDS mnist, prepared by the real builder from generated digits -------------------------------

def write_tfds_mnist(data_dir, train_labels, test_labels):
    """DATA_DIR/mnist/3.0.1 as download_and_prepare leaves it, from the given labels.

    TFDS' ClassLabel accepts -1 (its 'no label' value), so a prepared MNIST can hold it."""
    import tensorflow_datasets as tfds
    from tensorflow_datasets.image_classification import mnist

    rng = np.random.default_rng(0)

    class LocalMnist(mnist.MNIST, skip_registration=True):
        name = "mnist"

        def _split_generators(self, dl_manager):
            return [tfds.core.SplitGenerator(name=split, gen_kwargs={"labels": labels})
                    for split, labels in (("train", train_labels), ("test", test_labels))]

        def _generate_examples(self, labels):
            for index, label in enumerate(labels):
                yield index, {"image": rng.integers(0, 256, (28, 28, 1), dtype=np.uint8), "label": int(label)}

    builder = LocalMnist(data_dir=str(data_dir))
    builder.download_and_prepare(download_dir=str(pathlib.Path(data_dir) / "downloads"))
    return pathlib.Path(builder.data_dir)


def test_a_prepared_tfds_mnist_trains(tmp_path):
    write_tfds_mnist(tmp_path / "tfds", np.arange(128) % 10, np.arange(40) % 10)
    process = train(tmp_path / "tfds", tmp_path / "out")
    assert_ok(process)
    results = read_results(tmp_path / "out")
    assert results["data"] == "mnist" and results["steps_per_epoch"] == 128 // 32


def test_tfds_labels_outside_the_ten_classes_are_named(tmp_path):
    # TFDS stores examples shuffled by key, so the example number in the message is TFDS' order.
    train_labels = np.arange(128) % 10
    train_labels[5] = -1
    folder = write_tfds_mnist(tmp_path / "tfds", train_labels, np.arange(40) % 10)
    assert_one_line_error(train(tmp_path / "tfds", tmp_path / "out"), tmp_path / "out",
                          f"TFDS mnist in {folder} train labels", "1 of 128 labels", "label -1 of example",
                          f"delete {folder} and prepare TFDS mnist again")


def test_a_damaged_tfds_shard_is_named(tmp_path):
    folder = write_tfds_mnist(tmp_path / "tfds", np.arange(128) % 10, np.arange(40) % 10)
    shard, = folder.glob("mnist-train.tfrecord-*")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2: len(data) // 2 + 64] = bytes(64)
    shard.write_bytes(bytes(data))
    assert_one_line_error(train(tmp_path / "tfds", tmp_path / "out"), tmp_path / "out",
                          f"TFDS mnist train in {folder} cannot be read", "prepare TFDS mnist again")
