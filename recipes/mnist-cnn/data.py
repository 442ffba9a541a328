"""MNIST for this recipe's train.py: the digits as arrays, checked before anything is built on them, and the
input pipelines.

`load_mnist` reads, in this order: generated digits (`--synthetic`), the Keras `mnist.npz` in
`--data-dir` (what `keras.datasets.mnist.load_data()` downloads, for clusters without internet), else
TFDS `mnist` (in `--data-dir`, or TFDS's own folder, downloaded when missing). `load_image_folder` reads
your own photos (`--data-format image-folder`, tf_recipes.image_folder) as 28x28 grayscale, decoded and
resized as the export does to a client's image. A file that cannot be read, or arrays of the wrong
shape or labels, stop the run with one line naming the file and what to do.

MNIST fits in memory, so the training pipeline shuffles and shards example *indices* and gathers the
images of each batch: no replica ever touches another replica's share.
"""
import os
import zipfile

import numpy as np
import tensorflow as tf

from tf_recipes import export, image_folder, user_paths
from tf_recipes.data import DataError, check_labels, download_tfds, error_reason, sharded_order

MNIST_NPZ_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
NUM_CLASSES = 10
CLASS_NAMES = [str(digit) for digit in range(NUM_CLASSES)]


def check_mnist(arrays, source, remedy):
    """Shapes and labels of (x_train, y_train, x_test, y_test), before anything is built on them."""
    for split, images, labels in (("train", *arrays[:2]), ("test", *arrays[2:])):
        if images.ndim != 3 or images.shape[1:] != (28, 28) or labels.shape != (len(images),):
            raise DataError(f"{source}: the {split} images are {images.shape} and labels {labels.shape}; "
                            f"expected N 28x28 images and N labels; {remedy}")
        check_labels(labels, NUM_CLASSES, f"{source} {split} labels", remedy)
    return arrays


def load_npz(path):
    remedy = f"download it again ({MNIST_NPZ_URL})"
    try:
        with np.load(path) as data:
            missing = {"x_train", "y_train", "x_test", "y_test"} - set(data.files)
            if missing:
                raise DataError(f"{path} lacks arrays {sorted(missing)}; expected the Keras mnist.npz")
            arrays = data["x_train"], data["y_train"], data["x_test"], data["y_test"]
    except DataError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:  # truncated, not a zip, bad CRC
        raise DataError(f"{path} cannot be read as the Keras mnist.npz ({type(error).__name__}: "
                        f"{error_reason(error)}); "
                        f"{remedy}") from None
    return check_mnist(arrays, path, remedy)


def load_tfds(data_dir):
    import tensorflow_datasets as tfds

    builder = tfds.builder("mnist", data_dir=data_dir)
    missing = (f"MNIST is not in {builder.data_dir} and {{}}. Copy the Keras mnist.npz "
               f"({MNIST_NPZ_URL}) into a folder and "
               "pass --data-dir FOLDER, prepare TFDS mnist on a machine with internet and pass its "
               "data dir, or use --synthetic")
    if not builder.is_prepared():
        download_tfds(builder, missing)
    remedy = (f"delete {builder.data_dir} and prepare TFDS mnist again, or pass --data-dir with the "
              "Keras mnist.npz")
    arrays = {}
    for split in ("train", "test"):
        try:
            images, labels = tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1, as_supervised=True))
        except tf.errors.OpError as error:  # a damaged TFRecord shard
            raise DataError(f"TFDS mnist {split} in {builder.data_dir} cannot be read ({error_reason(error)}); "
                            f"{remedy}") from None
        arrays[split] = images[..., 0], labels
    return check_mnist((*arrays["train"], *arrays["test"]), f"TFDS mnist in {builder.data_dir}", remedy)


def synthetic_mnist(seed, train=10_000, test=2_000):
    """Noise images with a bright 6x6 patch whose position is the label: learnable in a few steps."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=train + test)
    images = (rng.random((train + test, 28, 28)) * 96).astype(np.uint8)
    for digit in range(10):
        row, col = 2 + 12 * (digit // 5), 2 + 5 * (digit % 5)
        images[labels == digit, row:row + 6, col:col + 6] = 255
    return images[:train], labels[:train], images[train:], labels[train:]


def load_image_folder(data_dir, val_fraction, seed):
    """Your own photos as 28x28 grayscale arrays (x_train, y_train, x_val, y_val) and the class names."""
    folder = image_folder.read_image_folder(data_dir, val_fraction, seed)
    arrays = []
    for split in (image_folder.TRAIN, image_folder.VAL):
        images = []
        for path in folder.files(split):
            try:
                with open(path, "rb") as handle:
                    encoded = tf.constant([handle.read()])
                images.append(export.decode_images(encoded, (28, 28), 1).numpy()[0, ..., 0])
            except (OSError, tf.errors.OpError) as error:
                raise image_folder.unreadable(path, error_reason(error)) from None
        arrays += [np.stack(images), folder.labels(split)]
    return (*arrays, folder.class_names)


def load(config):
    """(x_train, y_train, x_test, y_test, class names), as the run's configuration (train.Config) asks:
    --data-format, --data-dir and --synthetic."""
    if config.data_format == "image-folder":
        return load_image_folder(config.data_dir, config.val_fraction, config.seed)
    return (*load_mnist(config.data_dir, config.synthetic, config.seed), CLASS_NAMES)


def load_mnist(data_dir, synthetic, seed):
    if synthetic:
        return synthetic_mnist(seed)
    npz = os.path.join(data_dir, "mnist.npz") if data_dir else None
    what = user_paths.what_is(npz) if npz else user_paths.MISSING
    if what == user_paths.FILE:
        return load_npz(npz)
    if what != user_paths.MISSING:  # never opened: a FIFO would block the run
        raise DataError(f"{user_paths.not_a_file(npz, what)}; copy the Keras mnist.npz there ({MNIST_NPZ_URL})")
    if data_dir and not os.path.isdir(data_dir):
        raise DataError(f"--data-dir {data_dir} does not exist")
    return load_tfds(data_dir)


def make_train_dataset(images, labels, shard, total_steps, seed, start_step):
    # Distributed: this pipeline's slice of every global batch
    order = sharded_order(len(images), shard, total_steps, seed, start_step)
    images, labels = tf.constant(images), tf.constant(labels, tf.int32)
    dataset = tf.data.Dataset.from_tensor_slices(order).batch(shard.per_replica_batch, drop_remainder=True)
    dataset = dataset.map(lambda index: (tf.gather(images, index), tf.gather(labels, index)))
    dataset = dataset.map(lambda x, y: (x[..., None], y))  # raw uint8 pixels: the model scales them
    return dataset.prefetch(tf.data.AUTOTUNE)


def make_eval_dataset(images, labels, batch_size=1000):
    dataset = tf.data.Dataset.from_tensor_slices((images, labels.astype(np.int32))).batch(batch_size)
    return dataset.map(lambda x, y: (x[..., None], y))
