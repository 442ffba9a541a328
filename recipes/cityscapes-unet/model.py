"""The UNet, its loss (cross-entropy + Dice) and its metric (mean IoU over the 8 categories)."""
import math

import keras
import tensorflow as tf

from labels import NUM_CATEGORIES


# Normalisation after each convolution. "none" (the default) has none: every output pixel depends only on
# the pixels around it, the same in training and inference, on a crop as on the whole image, in a batch
# of any size and on any number of replicas. "batch" normalises over the replica's batch in training and
# uses moving statistics in inference, which did not match at 2 images per replica on real images; "group"
# normalises each image over its whole extent, so a model trained on crops sees other statistics on
# whole images (it suits training on whole images, e.g. --preset full).
NORMALIZATIONS = ("none", "group", "batch")
GROUPS = 8  # at most: fewer when a level's channels are not a multiple of 8


def normalization_layer(kind, channels, name, i):
    if kind == "group":
        return keras.layers.GroupNormalization(groups=math.gcd(channels, GROUPS), name=f"{name}_gn{i}")
    if kind == "batch":
        return keras.layers.BatchNormalization(name=f"{name}_bn{i}")
    return None


def conv_block(x, filters, normalization, dropout, name):
    for i in (1, 2):
        norm = normalization_layer(normalization, filters, name, i)
        # He initialisation, for ReLU: without normalisation it keeps the signal's scale through the levels.
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=norm is None, kernel_initializer="he_normal",
                                name=f"{name}_conv{i}")(x)
        if norm is not None:
            x = norm(x)
        x = keras.layers.Activation("relu", name=f"{name}_relu{i}")(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name=f"{name}_dropout")(x)
    return x


def build_unet(filters=32, depth=4, dropout=0.0, normalization="none", num_classes=NUM_CATEGORIES):
    """Encoder of `depth` conv blocks with max-pooling, a bottleneck, and an up-sampling decoder that
    concatenates the encoder's features at each level. Any input size divisible by 2**depth works,
    so the model trains on crops and evaluates on whole images. `normalization` is one of
    NORMALIZATIONS."""
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization {normalization!r}: use one of {', '.join(NORMALIZATIONS)}")
    inputs = keras.Input((None, None, 3), name="image")
    x, skips = inputs, []
    for level in range(depth):
        x = conv_block(x, filters * 2 ** level, normalization, dropout, f"down{level}")
        skips.append(x)
        x = keras.layers.MaxPooling2D(2, name=f"pool{level}")(x)
    x = conv_block(x, filters * 2 ** depth, normalization, dropout, "bottleneck")
    for level in reversed(range(depth)):
        x = keras.layers.UpSampling2D(2, name=f"up{level}")(x)
        x = keras.layers.Concatenate(name=f"skip{level}")([x, skips[level]])
        x = conv_block(x, filters * 2 ** level, normalization, dropout, f"dec{level}")
    # The softmax head stays float32 under --amp: the loss needs the precision.
    outputs = keras.layers.Conv2D(num_classes, 1, activation="softmax", dtype="float32", name="categories")(x)
    return keras.Model(inputs, outputs, name=f"unet_f{filters}_d{depth}")


def at_truth_size(y_true, y_pred):
    """The prediction at the truth's resolution: a model that sees smaller images (--downscale,
    --eval-size) is scored against the categories as prepared, its probabilities resized bilinearly to
    them; the truth is never resized to the prediction."""
    if y_pred.shape[1:3] == y_true.shape[1:3] and None not in y_pred.shape[1:3]:
        return y_pred
    return tf.cast(tf.image.resize(tf.cast(y_pred, tf.float32), tf.shape(y_true)[1:3]), y_pred.dtype)


def cross_entropy_dice(y_true, y_pred, smooth=1.0):
    """Per-example loss: mean pixel cross-entropy + (1 - mean soft Dice over the categories).

    Cross-entropy alone is dominated by the large categories (flat, construction, sky); the Dice
    term weighs every category present in the image equally, so small ones (human, object) count.
    """
    y_pred = at_truth_size(y_true, y_pred)
    cross_entropy = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y_true, y_pred), axis=[1, 2])
    one_hot = tf.one_hot(y_true, y_pred.shape[-1], dtype=y_pred.dtype)
    intersection = tf.reduce_sum(one_hot * y_pred, axis=[1, 2])
    total = tf.reduce_sum(one_hot + y_pred, axis=[1, 2])
    dice = tf.reduce_mean((2.0 * intersection + smooth) / (total + smooth), axis=-1)
    return cross_entropy + (1.0 - dice)


def iou_sums(y_true, y_pred):
    """Per-category intersection and union pixel counts, summed over the batch (they add up across
    replicas and batches; the IoU itself does not)."""
    y_pred = at_truth_size(y_true, y_pred)
    predicted = tf.cast(tf.argmax(y_pred, axis=-1), tf.int32)
    classes = tf.range(y_pred.shape[-1])  # the model's classes: Cityscapes' 8 or the user's
    truth = tf.equal(y_true[..., None], classes)
    guess = tf.equal(predicted[..., None], classes)
    axes = [0, 1, 2]
    return {"intersection": tf.reduce_sum(tf.cast(truth & guess, tf.float32), axis=axes),
            "union": tf.reduce_sum(tf.cast(truth | guess, tf.float32), axis=axes)}


def truth_sums(y_true, y_pred):
    """Per-category pixel counts of the truth (evaluation only: the constant prediction's baseline)."""
    classes = tf.range(y_pred.shape[-1])
    return {"truth_pixels": tf.reduce_sum(tf.cast(tf.equal(y_true[..., None], classes), tf.float32), axis=[0, 1, 2])}


def constant_mean_iou(truth_pixels) -> float:
    """The best mean IoU of one category predicted everywhere: category c scores IoU share(c) and every
    other category in the truth 0, averaged over the categories present."""
    truth_pixels = truth_pixels.astype("float64")
    total, present = truth_pixels.sum(), truth_pixels > 0
    if total == 0:
        return 0.0
    return max(float(truth_pixels[c] / total / (present.sum() + (not present[c])))
               for c in range(len(truth_pixels)))


def mean_iou(sums) -> dict:
    """Mean IoU over the categories that occur (in truth or prediction), and per-category IoU; with the
    truth's pixel counts (an evaluation), the best constant prediction's mean IoU beside it."""
    intersection, union = sums["intersection"], sums["union"]
    present = union > 0
    per_category = [float(i / u) if u > 0 else None for i, u in zip(intersection, union, strict=True)]
    metrics = {"mean_iou": float((intersection[present] / union[present]).mean()) if present.any() else 0.0,
               "iou_per_category": per_category}
    if "truth_pixels" in sums:
        metrics["constant_mean_iou"] = constant_mean_iou(sums["truth_pixels"])
    return metrics
