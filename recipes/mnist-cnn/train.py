"""MNIST CNN: the smallest recipe, and the template for the others.

Trains the classic Keras MNIST convnet (Conv32, Conv64, MaxPool, Dropout 0.25, Dense 128,
Dropout 0.5, Dense 10) on the 60,000 MNIST training digits, then evaluates on the 10,000 test digits.
The same script runs under every launcher; only `--launcher` and the program that starts it change:

    python recipes/mnist-cnn/train.py --launcher single
    python recipes/mnist-cnn/train.py --launcher mirrored                  # all local GPUs
    python recipes/mnist-cnn/train.py --launcher mirrored --cpu-replicas 2 # no GPU: 2 CPU replicas
    python -m tf_recipes.spawn --nproc 2 -- python recipes/mnist-cnn/train.py --launcher multiworker
    horovodrun -np 2 -H localhost:2 python recipes/mnist-cnn/train.py --launcher horovod

or all of them through `invoke run mnist-cnn --gpus N --launcher L`.

Data: TFDS `mnist`, or `--data-dir DIR` holding either a TFDS data directory or the Keras
`mnist.npz` (what `keras.datasets.mnist.load_data()` downloads) for clusters without internet.
`--synthetic` trains on generated digits-like images instead, for benchmarks and tests.
Your own photos: `--data-format image-folder --data-dir DIR`, DIR holding train/ and val/ with one
subfolder per class (common/image_folder.py); each photo becomes 28x28 grayscale (decoded, resized
bilinearly, rounded to uint8: what the export does to a client's image), and the classes, sorted
folder names, set the model's output size.
"""
import os
import zipfile

from tf_recipes import cli, image_folder, user_paths

RECIPE = "mnist-cnn"


# ## Command line
# Parsed before TensorFlow is imported, so that --help and a mistyped flag answer at once.

def parse_args(argv=None):
    parser = cli.training_parser(__doc__.split("\n")[0], batch_size=128, epochs=6, lr=3e-3)
    # What it takes to reach 99.2% on the real test digits, sooner than a 15-epoch script reaches 99%:
    # the rate up over 100 steps and down along a half cosine over the 6 epochs
    parser.set_defaults(lr_schedule="cosine")
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam",
                        help="sgd (momentum 0.9) is sensitive to the gradient scale, which Adam hides")
    parser.add_argument("--no-dropout", action="store_true",
                        help="disable dropout (parity tests: masks are drawn per replica)")
    image_folder.add_args(parser, default="mnist")
    return parser.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse_args()

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tf_recipes import export, training  # noqa: E402
from tf_recipes.data import DataError, cannot_download, check_labels, error_reason, sharded_order  # noqa: E402
from tf_recipes.launchers import create_launcher  # noqa: E402


# ## Data
# MNIST fits in memory, so the input pipeline shuffles and shards example *indices* and gathers the
# images of each batch: no replica ever touches another replica's share.

MNIST_NPZ_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
NUM_CLASSES = 10
class_names = [str(digit) for digit in range(NUM_CLASSES)]


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
    if not os.path.isdir(builder.data_dir):
        offline = cannot_download()
        if offline:
            raise DataError(missing.format(f"{offline} to download it"))
    try:
        builder.download_and_prepare()
    except Exception as error:  # network or proxy failure halfway, a corrupt partial download
        raise DataError(missing.format(f"the download failed ({type(error).__name__}: {error})")) from None
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
    dataset = dataset.map(lambda x, y: (tf.cast(x, tf.float32)[..., None] / 255.0, y))
    return dataset.prefetch(tf.data.AUTOTUNE)


def make_eval_dataset(images, labels, batch_size=1000):
    dataset = tf.data.Dataset.from_tensor_slices((images, labels.astype(np.int32))).batch(batch_size)
    return dataset.map(lambda x, y: (tf.cast(x, tf.float32)[..., None] / 255.0, y))


# ## Model
# The output layer stays float32 under --amp so that the softmax and the loss keep full precision.

def build_model(dropout=True, num_classes=NUM_CLASSES):
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Dropout(0.25 if dropout else 0.0),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dropout(0.5 if dropout else 0.0),
        keras.layers.Dense(num_classes, activation="softmax", dtype="float32"),
    ], name="mnist_cnn")


TASK = training.classification_task()  # cross-entropy loss, accuracy metric


# ## Training
# The same lines under every launcher: the launcher decides where the replicas run and which share
# of the data each process reads; the Trainer runs the loop, checkpoints and writes the results.

def main(args):
    results_dir = args.results_dir or os.path.join("results", RECIPE)

    # Distributed: the launcher (--launcher), first: it may split the CPU into replicas before TF starts
    launcher = create_launcher(args.launcher, args.cpu_replicas, args.collective, args.join_timeout)
    keras.utils.set_random_seed(args.seed)
    precision = training.configure_precision(args.amp)

    names = class_names
    if args.data_format == "image-folder":
        x_train, y_train, x_test, y_test, names = load_image_folder(args.data_dir, args.val_fraction, args.seed)
    else:
        x_train, y_train, x_test, y_test = load_mnist(args.data_dir, args.synthetic, args.seed)
    trainer = training.Trainer(
        launcher, RECIPE, num_examples=len(x_train), per_replica_batch=args.batch_size,
        epochs=args.epochs, max_steps=args.max_steps, results_dir=results_dir, resume=args.resume,
        checkpoint_every=args.checkpoint_every, log_every=args.log_every,
        warmup_steps=args.warmup_steps, xla=args.xla, profile_steps=args.profile,
        steps_per_loop=args.steps_per_loop, seed=args.seed, loss_scale_initial=args.loss_scale_initial,
        export=args.export, eval_every=args.eval_every, target=args.target)

    with launcher.scope():  # Distributed: model and optimizer variables on every replica
        model = build_model(dropout=not args.no_dropout, num_classes=len(names))
        # Distributed: with --scale-lr, the rate times the replicas, reached over --lr-warmup-steps
        rate = training.learning_rate(args.lr, launcher, args.scale_lr, args.lr_warmup_steps, args.lr_schedule,
                                      trainer.planned_steps)
        optimizer = (keras.optimizers.Adam(rate) if args.optimizer == "adam"
                     else keras.optimizers.SGD(rate, momentum=0.9))
    trainer.setup(model, optimizer)

    dataset = launcher.distribute_dataset(  # Distributed: one input pipeline per process, split over its replicas
        lambda shard: make_train_dataset(x_train, y_train, shard, trainer.total_steps, args.seed,
                                         trainer.start_step),
        args.batch_size)
    # Every process evaluates its own share of the test set; the sums are added up over processes.
    share = launcher.eval_share(len(x_test))  # Distributed: this process's share of the test set
    trainer.fit(dataset, TASK, evaluation=lambda: make_eval_dataset(x_test[share], y_test[share]))
    test_metrics = trainer.evaluate()  # the test set at the step training ended
    training.log(launcher, f"test: loss {test_metrics['loss']:.4f}  accuracy {test_metrics['accuracy']:.4f}")
    data = "synthetic" if args.synthetic else args.data_format
    trainer.save_results({"final_metrics": {"test": test_metrics}, "precision": precision, "data": data,
                          "classes": names})
    export.export_model(launcher, results_dir, model, lambda: build_model(num_classes=len(names)),
                        enabled=args.export, recipe=RECIPE, task=export.CLASSIFICATION, class_names=names,
                        image_size=(28, 28), channels=1,
                        to_model=lambda images: keras.ops.cast(images, "float32") / 255.0)
    trainer.check_target()  # --target: a run that never reached it ends with status 13


if __name__ == "__main__":
    cli.run_main(lambda: main(ARGS))
