"""The short-script baseline cityscapes-unet is measured against: a keras.io-style U-Net in one file.

    .venv/bin/python ci/bench/cityscapes_baseline.py --data-dir PREPARED --seconds 600 [--json OUT]

Written from the description of keras.io's "Image segmentation with a U-Net-like architecture"
(examples/vision/oxford_pets_image_segmentation.py), with its model and training settings unchanged:
- the Xception-style U-Net: an entry convolution of 32 filters with stride 2; three down blocks of
  64, 128 and 256 filters (two separable 3x3 convolutions, each after a ReLU and followed by batch
  normalisation, a 3x3 max-pool of stride 2, and a residual added through a strided 1x1 convolution);
  four up blocks of 256, 128, 64 and 32 filters (two transposed 3x3 convolutions with batch
  normalisation, up-sampling by 2, a residual added through an up-sampled 1x1 convolution); a 3x3
  softmax convolution over the classes;
- `model.compile(optimizer="rmsprop", loss="sparse_categorical_crossentropy")`: RMSprop at Keras's
  default rate;
- the images and masks loaded whole with `keras.utils.load_img(path, target_size=SIZE)` (Keras's
  default nearest-neighbour resize), the masks in grayscale;
- `model.fit` with batch 8 (the example's batch is 32 for 160x160 pets; 8 whole scenes fit this
  machine's memory and its 80 training scenes).

Given a wall-time budget (--seconds, counted from the process's start as the recipe's are), `fit` stops
after the batch that uses it up. The val scenes are then predicted at SIZE, each argmax up-sampled
(nearest) to the categories' full resolution and scored there, as cityscapes-unet scores: per-category
intersection and union summed over every val scene, the mean over the categories that occur.

PREPARED is a folder written by `recipes/cityscapes-unet/prepare_data.py` (Cityscapes or
`--format pairs`): it reads PREPARED/SPLIT/images/**.png and the categories of the same name in
PREPARED/SPLIT/categories/, and the class names from PREPARED/train.json.
"""
import argparse
import glob
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
STARTED = time.time()


def size(text):
    height, width = (int(side) for side in text.lower().split("x"))
    return height, width


def pairs(data_dir, split):
    images = sorted(glob.glob(os.path.join(data_dir, split, "images", "**", "*.png"), recursive=True))
    masks = [path.replace(os.path.join(split, "images"), os.path.join(split, "categories"), 1) for path in images]
    if not images:
        raise SystemExit(f"error: {data_dir}/{split}/images holds no PNG; give a folder prepare_data.py wrote")
    return images, masks


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


def score(model, data_dir, size, num_classes):
    """Mean IoU and per-category IoU on the val scenes, at the categories' full resolution: the prediction
    is up-sampled, never the truth down-sampled."""
    import keras
    import numpy as np
    import tensorflow as tf

    intersection, union = np.zeros(num_classes), np.zeros(num_classes)
    for image_path, mask_path in zip(*pairs(data_dir, "val"), strict=True):
        truth = np.asarray(keras.utils.load_img(mask_path, color_mode="grayscale"))
        image = np.asarray(keras.utils.load_img(image_path, target_size=size), "float32")[None] / 255.0
        predicted = tf.argmax(model.predict(image, verbose=0), axis=-1)[0, ..., None]
        predicted = tf.image.resize(predicted, truth.shape, method="nearest")[..., 0].numpy()
        for c in range(num_classes):
            intersection[c] += np.sum((truth == c) & (predicted == c))
            union[c] += np.sum((truth == c) | (predicted == c))
    present = union > 0
    per_category = [float(i / u) if u else None for i, u in zip(intersection, union, strict=True)]
    return float(np.mean(intersection[present] / union[present])), per_category


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="a folder prepared by cityscapes-unet's prepare_data.py")
    parser.add_argument("--size", type=size, default=(128, 256), help="HEIGHTxWIDTH the scenes are loaded at")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seconds", type=float, required=True,
                        help="wall-time budget from the process's start; fit stops after the batch that uses it up")
    parser.add_argument("--epochs", type=int, default=10_000, help="at most this many epochs within the budget")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()

    import keras
    import numpy as np

    with open(os.path.join(args.data_dir, "train.json")) as handle:
        class_names = json.load(handle).get("categories") or ["void", "flat", "construction", "object", "nature",
                                                              "sky", "human", "vehicle"]
    num_classes = len(class_names)

    def load(paths, grayscale=False):
        mode = "grayscale" if grayscale else "rgb"
        return np.stack([np.asarray(keras.utils.load_img(p, target_size=args.size, color_mode=mode)) for p in paths])

    train_images, train_masks = pairs(args.data_dir, "train")
    x_train = load(train_images).astype("float32") / 255.0
    y_train = load(train_masks, grayscale=True).astype("int32")

    model = get_model(args.size, num_classes)
    model.compile(optimizer="rmsprop", loss="sparse_categorical_crossentropy")

    class Budget(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if time.time() - STARTED >= args.seconds:
                self.model.stop_training = True

    fit_started = time.time()
    history = model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, callbacks=[Budget()],
                        verbose=2)
    fit_ended = time.time()
    trained = fit_ended - STARTED
    epochs = len(history.history["loss"])

    mean_iou, per_category = score(model, args.data_dir, args.size, num_classes)
    print(f"val: mean IoU {mean_iou:.4f} after {epochs} epochs, {trained:.0f} s", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"mean_iou": mean_iou, "iou_per_category": per_category, "classes": class_names,
                       "epochs": epochs, "steps": int(model.optimizer.iterations.numpy()),
                       "size": list(args.size), "batch_size": args.batch_size, "budget_seconds": args.seconds,
                       "trained_seconds": round(trained, 1), "fit_seconds": round(fit_ended - fit_started, 1),
                       "wall_seconds": round(time.time() - STARTED, 1), "history": history.history}, handle, indent=2)


if __name__ == "__main__":
    main()
