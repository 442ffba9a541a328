"""The short-script baseline cityscapes-unet is measured against: keras.io's U-Net-like example in one file.

    .venv/bin/python ci/bench/cityscapes_baseline.py --data-dir PREPARED --seconds 600 \
        [--version current|2020] [--classes classes|categories] [--seed N] [--json OUT]

The model is keras.io's "Image segmentation with a U-Net-like architecture" (keras-team/keras-io,
examples/vision/oxford_pets_image_segmentation.py), the same in every version of the page: an entry
convolution of 32 filters with stride 2, batch normalisation and a ReLU; three down blocks of 64, 128 and
256 filters (two separable 3x3 convolutions, each after a ReLU and followed by batch normalisation, a 3x3
max-pool of stride 2, and a residual added through a strided 1x1 convolution); four up blocks of 256, 128,
64 and 32 filters (two transposed 3x3 convolutions in the same way, up-sampling by 2, a residual added
through an up-sampled 1x1 convolution); last, a 3x3 softmax convolution over the classes.

What each version of the page trains with, as read in keras-team/keras-io:
- `--version 2020`: the page as written in 2020 (examples/vision/oxford_pets_image_segmentation.py at
  commit e70ae747b458, "Last modified: 2020/04/20", tf.keras): a `keras.utils.Sequence` of fixed batches of
  32 in file order, len // 32 of them (the last partial batch dropped), whose order `fit` shuffles each
  epoch; `model.compile(optimizer="rmsprop", loss="sparse_categorical_crossentropy")`, that is RMSprop at
  Keras's default rate (1e-3); 15 epochs.
- `--version current`: the page as keras.io shows it now (examples/vision/md/oxford_pets_image_segmentation.md,
  the generated page, whose training log is of 2023-11-19; the Keras 3 port before it, commit 9092bfaf16b0,
  still compiled with "rmsprop" for 15 epochs; the header still says "Last modified: 2020/04/20"): a tf.data
  pipeline of the files in a fixed order, batches of 32 (the last partial one kept), never shuffled;
  `model.compile(optimizer=keras.optimizers.Adam(1e-4), loss="sparse_categorical_crossentropy")`; 50 epochs,
  `verbose=2`; the training list capped at its first 1,000 files (`max_dataset_len`, no cap at 80 scenes).
- Both: the model above, its last layer unchanged; the files split once with `random.Random(1337)` over
  their sorted names, which is the order of the training scenes here too; the images fed as floats of
  0..255 (2020: `load_img` with PIL's nearest resize; current: `tf.image.resize`, bilinear); the masks
  resized by nearest neighbour; a validation pass and a `ModelCheckpoint(save_best_only=True)` each epoch,
  but the page predicts with the model as training left it, so they only watch: they are left out here and
  the whole budget trains.

What this script changes, the same for both versions:
- batch 8 whole scenes, not 32: the 32 was for 160x160 pets (6,390 of them); 80 training scenes make 2
  batches of 32 per epoch (the 2020 Sequence would drop 16 scenes each epoch), and 8 is cityscapes-unet's
  batch, so each step of both sees as many scenes;
- the stopping rule is the wall-time budget (--seconds, counted from the process's start as the recipe's
  time is): `fit` stops after the batch that uses it up. The page's epochs are passes over its pets (about
  3,000 steps in 2020, 1,600 now), more steps than a budget of the recipe's time allows here, so the budget
  ends first; `--epochs` caps the epochs if asked;
- the inputs are the scenes cityscapes-unet sees: each shrunk to --size as the recipe shrinks it (area
  averaging: antialiased bilinear, rounded back to uint8), then fed as floats of 0..255 as both pages feed
  theirs (the batch normalisation after the entry convolution takes out the scale); the label map
  shrunk by nearest neighbour and mapped through the view's lookup (PREPARED/train.json: `classes`, the 19
  evaluated classes, or `categories`, the 7); pixels whose label is IGNORE (255, every label cityscapesScripts
  leaves out of the evaluation) are left out of the loss as a Keras user does it: label 0, sample weight 0.

Scoring, as cityscapes-unet scores: each val scene predicted at --size, its class probabilities resized
bilinearly to the label map's full resolution, then the argmax; a confusion matrix over the pixels whose
truth is not IGNORE, summed over the val scenes; the class IoU and its mean, and for Cityscapes the category
IoU and its mean from the same predictions, by the recipe's own `segmentation_scores` (model.py, as
cityscapesScripts' evalPixelLevelSemanticLabeling computes them).

PREPARED is a folder written by `recipes/cityscapes-unet/prepare_data.py` (index format
cityscapes-labels-png/2; Cityscapes or `--format pairs`): PREPARED/SPLIT.json lists the example ids and the
views, PREPARED/SPLIT/images/ID.png and PREPARED/SPLIT/labels/ID.png hold each example.
"""
import argparse
import json
import os
import random
import re
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
STARTED = time.time()

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPE_DIR = os.path.join(ROOT, "recipes", "cityscapes-unet")
INDEX_FORMAT = "cityscapes-labels-png/2"
IGNORE = 255
SIDE_MULTIPLE = 16  # the model halves the scene four times (the entry convolution and three max-pools)

# What each version of the page trains with (the module docstring says where each was read)
VERSIONS = {
    "2020": {"optimizer": "rmsprop (Keras's default rate, 1e-3)", "page_epochs": 15},
    "current": {"optimizer": "Adam at 1e-4", "page_epochs": 50},
}


class DataDirError(Exception):
    """--data-dir is not a folder prepare_data.py wrote (or it is damaged): one line, exit 2."""


def size(text):
    try:
        height, width = (int(side) for side in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not HEIGHTxWIDTH, e.g. 128x256") from None
    if height < SIDE_MULTIPLE or width < SIDE_MULTIPLE or height % SIDE_MULTIPLE or width % SIDE_MULTIPLE:
        raise argparse.ArgumentTypeError(f"{text!r}: both sides must be multiples of {SIDE_MULTIPLE}")
    return height, width


def read_index(data_dir: str, split: str) -> dict:
    path = os.path.join(data_dir, f"{split}.json")
    again = "give a folder that recipes/cityscapes-unet/prepare_data.py wrote"
    try:
        with open(path) as handle:
            index = json.load(handle)
    except FileNotFoundError:
        raise DataDirError(f"--data-dir {data_dir} holds no {split}.json; {again}") from None
    except (OSError, ValueError) as error:
        raise DataDirError(f"{path} cannot be read ({error}); run prepare_data.py into --data-dir again") from None
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        found = index.get("format") if isinstance(index, dict) else None
        raise DataDirError(f"{path} is of format {found!r}, not {INDEX_FORMAT}; run this version's "
                           "recipes/cityscapes-unet/prepare_data.py into --data-dir again")
    views = index.get("views")
    if (not isinstance(index.get("examples"), list) or not index["examples"] or not isinstance(views, dict)
            or not all(isinstance(v, dict) and len(v.get("lookup", ())) == 256 and v.get("names")
                       for v in views.values())):
        raise DataDirError(f"{path} lacks its examples or the views of its labels; run prepare_data.py into "
                           "--data-dir again")
    return index


def chosen_view(index: dict, name: str | None, data_dir: str) -> tuple[str, dict]:
    name = name or index.get("default_view", "classes")
    if name not in index["views"]:
        raise DataDirError(f"--classes {name}: the data in {data_dir} has the views {', '.join(index['views'])}")
    return name, index["views"][name]


def decoded(data_dir: str, split: str, example: str, table):
    """One example at full resolution: the image (uint8 [H, W, 3]) and its training indices (uint8 [H, W]:
    the stored labels through the view's lookup, IGNORE where not trained)."""
    import tensorflow as tf

    image_path = os.path.join(data_dir, split, "images", f"{example}.png")
    label_path = os.path.join(data_dir, split, "labels", f"{example}.png")
    decoded_files = []
    for path, channels in ((image_path, 3), (label_path, 1)):
        try:
            decoded_files.append(tf.io.decode_png(tf.io.read_file(path), channels=channels))
        except (tf.errors.OpError, ValueError) as error:
            message = getattr(error, "message", str(error)).splitlines()[0]
            message = re.sub(r"\s*\[Op:.*$", "", re.sub(r"\{\{.*?\}\}\s*", "", message))  # TensorFlow's node names
            raise DataDirError(f"cannot read {path} ({message}); run prepare_data.py into --data-dir again") from None
    image, stored = decoded_files
    return image, tf.gather(table, tf.cast(stored[..., 0], tf.int32))


def shrunk(image, size):
    """The image at `size` as cityscapes-unet shrinks it: area averaging, rounded back to uint8."""
    import tensorflow as tf

    return tf.saturate_cast(tf.round(tf.image.resize(image, size, antialias=True)), tf.uint8)


def training_scenes(data_dir: str, ids: list, lookup, size):
    """The training scenes at `size`: images uint8 [n, H, W, 3], training indices uint8 [n, H, W] (shrunk by
    nearest neighbour)."""
    import numpy as np
    import tensorflow as tf

    table = tf.constant(lookup, tf.uint8)
    images, truths = [], []
    for example in ids:
        image, truth = decoded(data_dir, "train", example, table)
        images.append(shrunk(image, size).numpy())
        truths.append(tf.image.resize(truth[..., None], size, method="nearest")[..., 0].numpy())
    return np.stack(images), np.stack(truths)


def get_model(img_size, num_classes):
    import keras
    from keras import layers

    inputs = keras.Input(shape=img_size + (3,))
    x = layers.Conv2D(32, 3, strides=2, padding="same")(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    shortcut = x
    for filters in (64, 128, 256):
        for _ in range(2):
            x = layers.Activation("relu")(x)
            x = layers.SeparableConv2D(filters, 3, padding="same")(x)
            x = layers.BatchNormalization()(x)
        x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
        x = layers.add([x, layers.Conv2D(filters, 1, strides=2, padding="same")(shortcut)])
        shortcut = x
    for filters in (256, 128, 64, 32):
        for _ in range(2):
            x = layers.Activation("relu")(x)
            x = layers.Conv2DTranspose(filters, 3, padding="same")(x)
            x = layers.BatchNormalization()(x)
        x = layers.UpSampling2D(2)(x)
        x = layers.add([x, layers.Conv2D(filters, 1, padding="same")(layers.UpSampling2D(2)(shortcut))])
        shortcut = x
    outputs = layers.Conv2D(num_classes, 3, activation="softmax", padding="same")(x)
    return keras.Model(inputs, outputs)


def compiled(model, version: str):
    """The model compiled as that version of the page compiles it."""
    import keras

    optimizer = "rmsprop" if version == "2020" else keras.optimizers.Adam(1e-4)
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    return model


def training_data(version: str, x, y, w, batch_size: int):
    """The batches as that version of the page makes them: 2020, a Sequence of len // batch fixed batches
    whose order fit shuffles each epoch; current, a tf.data pipeline in file order, never shuffled."""
    import keras
    import tensorflow as tf

    if version == "current":
        return tf.data.Dataset.from_tensor_slices((x, y, w)).batch(batch_size)

    class Scenes(keras.utils.PyDataset):  # keras.utils.Sequence, as Keras 3 names it
        def __len__(self):
            return len(x) // batch_size

        def __getitem__(self, index):
            batch = slice(index * batch_size, (index + 1) * batch_size)
            return x[batch], y[batch], w[batch]

    return Scenes()


def scores(model, data_dir: str, view: dict, size) -> dict:
    """The val scenes predicted at `size`, their probabilities resized to the full-resolution labels, scored
    over the pixels that are not IGNORE by the recipe's segmentation_scores."""
    import numpy as np
    import tensorflow as tf

    if RECIPE_DIR not in sys.path:
        sys.path.insert(0, RECIPE_DIR)
    from model import segmentation_scores  # the recipe's own scores: both are scored by one function

    classes = len(view["names"])
    table = tf.constant(view["lookup"], tf.uint8)
    confusion = np.zeros(classes * classes, np.int64)
    for example in read_index(data_dir, "val")["examples"]:
        image, truth = decoded(data_dir, "val", example, table)
        seen = tf.cast(shrunk(image, size), tf.float32)[None]  # 0..255, as the page feeds them
        probabilities = model.predict_on_batch(seen)
        full = tf.image.resize(probabilities, tf.shape(truth))[0]  # bilinear, to the labels' resolution
        predicted = tf.argmax(full, axis=-1, output_type=tf.int32).numpy()
        truth = truth.numpy()
        valid = truth != IGNORE
        confusion += np.bincount(truth[valid].astype(np.int64) * classes + predicted[valid],
                                 minlength=classes * classes)
    return segmentation_scores(confusion.reshape(classes, classes), view.get("group_of"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="a folder prepared by cityscapes-unet's prepare_data.py")
    parser.add_argument("--version", choices=sorted(VERSIONS), default="current",
                        help="which version of keras.io's page trains: its optimizer and batching")
    parser.add_argument("--classes", help="the view of the labels to train (default: the data's, classes)")
    parser.add_argument("--size", type=size, default=(128, 256), help="HEIGHTxWIDTH the model sees the scenes at")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seconds", type=float, required=True,
                        help="wall-time budget from the process's start; fit stops after the batch that uses it up")
    parser.add_argument("--epochs", type=int, default=10_000, help="at most this many epochs within the budget")
    parser.add_argument("--seed", type=int, default=0, help="keras.utils.set_random_seed: weights, batch order")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    try:
        run(args)
    except DataDirError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


def run(args):
    index = read_index(args.data_dir, "train")
    read_index(args.data_dir, "val")
    view_name, view = chosen_view(index, args.classes, args.data_dir)
    ids = sorted(index["examples"])
    random.Random(1337).shuffle(ids)  # the page's split shuffle over the sorted files: the training order
    if len(ids) < args.batch_size:
        raise DataDirError(f"--data-dir {args.data_dir} holds {len(ids)} training scenes, fewer than "
                           f"--batch-size {args.batch_size}")

    import keras
    import numpy as np

    keras.utils.set_random_seed(args.seed)
    images, truths = training_scenes(args.data_dir, ids, view["lookup"], args.size)
    x = images.astype("float32")  # 0..255, as the page feeds them
    w = (truths != IGNORE).astype("float32")  # IGNORE pixels: weight 0 in the loss, label 0
    y = np.where(truths == IGNORE, 0, truths).astype("int32")

    model = compiled(get_model(args.size, len(view["names"])), args.version)

    class Budget(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if time.time() - STARTED >= args.seconds:
                self.model.stop_training = True

    fit_started = time.time()
    history = model.fit(training_data(args.version, x, y, w, args.batch_size), epochs=args.epochs,
                        callbacks=[Budget()], verbose=2)
    fit_ended = time.time()
    trained = fit_ended - STARTED
    epochs = len(history.history.get("loss", []))

    figures = scores(model, args.data_dir, view, args.size)
    category = figures.get("category_mean_iou")
    print(f"val ({args.version}): class mean IoU {figures['mean_iou']:.4f}"
          + (f", category mean IoU {category:.4f}" if category is not None else "")
          + f" after {epochs} epochs, {trained:.0f} s", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"version": args.version, **VERSIONS[args.version],
                       "view": view_name, "classes": view["names"], "categories": view.get("groups"),
                       "mean_iou": figures["mean_iou"], "iou_per_class": figures["iou_per_class"],
                       "category_mean_iou": category, "iou_per_category": figures.get("iou_per_category"),
                       "seed": args.seed, "epochs": epochs, "steps": int(model.optimizer.iterations.numpy()),
                       "train_scenes": len(ids), "size": list(args.size), "batch_size": args.batch_size,
                       "budget_seconds": args.seconds, "trained_seconds": round(trained, 1),
                       "fit_seconds": round(fit_ended - fit_started, 1),
                       "wall_seconds": round(time.time() - STARTED, 1), "history": history.history},
                      handle, indent=2)


if __name__ == "__main__":
    main()
