"""The models (the UNet, mmsegmentation's UNet-S5-D16 with its auxiliary head, a U-Net on ResNet50), their
losses (cross-entropy, with Dice for the small presets), the optimizer of PyTorch's SGD, and the metric: class
and category IoU, as Cityscapes scores."""
import math

import keras
import numpy as np
import tensorflow as tf

from encoders import build_resnet50_unet
from labels import IGNORE
from tf_recipes.launchers import SyncBatchNormalization


# Normalisation after each convolution (each preset chooses one: --preset tiny none, cpu group, full
# batch). "none" has none: every output pixel depends only on the pixels around it, the same in training
# and inference, on a crop as on the whole image, in a batch of any size and on any number of replicas.
# "batch" normalises over the global batch in training, its statistics summed over every replica as the
# field's SyncBN does (tf_recipes.launchers.SyncBatchNormalization, under every launcher), and uses moving
# statistics in inference; over one replica's 2 images they did not match on real images. "group"
# normalises each image over its whole extent, so a model trained on crops sees other statistics on whole
# images (it suits training on whole images, e.g. --preset cpu).
NORMALIZATIONS = ("none", "group", "batch")
GROUPS = 8  # at most: fewer when a level's channels are not a multiple of 8


def normalization_layer(kind, channels, name, i):
    if kind == "group":
        return keras.layers.GroupNormalization(groups=math.gcd(channels, GROUPS), name=f"{name}_gn{i}")
    if kind == "batch":
        return SyncBatchNormalization(name=f"{name}_bn{i}")  # Distributed: statistics of the global batch
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


def build_unet(filters=32, depth=4, dropout=0.0, normalization="none", num_classes=19):
    """Encoder of `depth` conv blocks with max-pooling, a bottleneck, and an up-sampling decoder that
    concatenates the encoder's features at each level. Any input size divisible by 2**depth works,
    so the model trains on crops and evaluates on whole images. `normalization` is one of
    NORMALIZATIONS."""
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization {normalization!r}: use one of {', '.join(NORMALIZATIONS)}")
    inputs = keras.Input((None, None, 3), name="image")  # pixels 0..255, as decoded (and resized)
    # The model's own preprocessing, in float32 under any --amp: training, evaluation and the export agree
    x, skips = keras.layers.Rescaling(1.0 / 255, dtype="float32", name="pixels")(inputs), []
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


# ## UNet-S5-D16, as mmsegmentation builds it (fcn_unet_s5-d16 on Cityscapes)
# mmseg/models/backbones/unet.py with the FCNHead decode and auxiliary heads, layer for layer: the ImageNet mean
# and std subtracted in the model, 5 stages of 2 x (3x3 conv, no bias, batch norm, ReLU) at 64..1024 channels
# with a 2x2 max-pool before stages 1-4, a decoder of bilinear x2 + 1x1 conv-BN-ReLU ("InterpConv") then
# [skip, up] through 2 convs per level, and two heads (3x3 conv-BN-ReLU to 64, channel dropout, 1x1 classifier):
# the main one on the full-size 64-channel output, the auxiliary one on the 128-channel output at 1/2, upsampled
# to the labels and weighed 0.4 in the loss. Convolutions Kaiming-normal (fan_out, ReLU), classifiers N(0, 0.01);
# batch norm with PyTorch's defaults (momentum 0.1 there is 0.9 here; eps 1e-5).
MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)  # RGB, on pixels 0..255
AUXILIARY_WEIGHT = 0.4


def kaiming():
    """PyTorch's kaiming_normal_ (fan_out, ReLU), one per layer: an unseeded Keras initializer takes its seed
    when it is made (from the seed set by keras.utils.set_random_seed, if made after it) and gives the same
    values at every call, so one made at import would start every run from other weights, and every layer of
    a shape from the same ones."""
    return keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")


def conv_bn_relu(x, filters, kernel, name):
    x = keras.layers.Conv2D(filters, kernel, padding="same", use_bias=False, kernel_initializer=kaiming(),
                            name=f"{name}_conv")(x)
    # Distributed: statistics of the global batch (SyncBN)
    x = SyncBatchNormalization(momentum=0.9, epsilon=1e-5, name=f"{name}_bn")(x)
    return keras.layers.Activation("relu", name=f"{name}_relu")(x)


def fcn_head(x, num_classes, dropout, name):
    """mmseg's FCNHead (num_convs 1, concat_input False): 3x3 conv-BN-ReLU to 64, Dropout2d, 1x1 classifier."""
    x = conv_bn_relu(x, 64, 3, f"{name}_0")
    if dropout:
        x = keras.layers.SpatialDropout2D(dropout, name=f"{name}_dropout")(x)  # Dropout2d: whole channels
    # float32 under --amp: the loss needs the precision
    return keras.layers.Conv2D(num_classes, 1, kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
                               dtype="float32", name=f"{name}_classifier")(x)


def build_unet_s5_d16(num_classes=19, filters=64, depth=4, dropout=0.1):
    """Outputs [main, auxiliary]: class probabilities at the input's size, from the decode head and from the
    auxiliary head (the latter for the loss only: the export answers with the first)."""
    inputs = keras.Input((None, None, 3), name="image")  # pixels 0..255, RGB
    x = keras.layers.Normalization(mean=MEAN, variance=[s * s for s in STD], dtype="float32", name="pixels")(inputs)
    skips = []
    for stage in range(depth + 1):
        if stage:
            x = keras.layers.MaxPooling2D(2, name=f"encoder{stage}_pool")(x)
        for i in (1, 2):
            x = conv_bn_relu(x, filters * 2 ** stage, 3, f"encoder{stage}_{i}")
        skips.append(x)
    outputs = [x]
    for stage in reversed(range(depth)):
        up = keras.layers.UpSampling2D(2, interpolation="bilinear", name=f"decoder{stage}_up")(x)
        up = conv_bn_relu(up, filters * 2 ** stage, 1, f"decoder{stage}_interp")
        x = keras.layers.Concatenate(name=f"decoder{stage}_skip")([skips[stage], up])
        for i in (1, 2):
            x = conv_bn_relu(x, filters * 2 ** stage, 3, f"decoder{stage}_{i}")
        outputs.append(x)
    main = fcn_head(outputs[-1], num_classes, dropout, "decode_head")
    auxiliary = fcn_head(outputs[-2], num_classes, dropout, "auxiliary_head")
    auxiliary = keras.layers.UpSampling2D(2, interpolation="bilinear", dtype="float32", name="auxiliary_up")(auxiliary)
    probabilities = [keras.layers.Softmax(dtype="float32", name=name)(logits)
                     for name, logits in (("categories", main), ("auxiliary", auxiliary))]
    return keras.Model(inputs, probabilities, name=f"unet_s5_d16_f{filters}")


def prediction(outputs):
    """The model's answer: its first output when it has an auxiliary head."""
    return outputs[0] if isinstance(outputs, (list, tuple)) else outputs


def cross_entropy(y_true, y_pred):
    """Per-example loss of mmsegmentation's CrossEntropyLoss (avg_non_ignore False): the cross-entropy summed
    over the pixels that are not IGNORE and divided by all the pixels, of the main output plus AUXILIARY_WEIGHT
    times that of the auxiliary one."""
    outputs = y_pred if isinstance(y_pred, (list, tuple)) else [y_pred]
    valid = tf.not_equal(y_true, IGNORE)
    truth = tf.where(valid, y_true, 0)
    total = 0.0
    for weight, output in zip((1.0, AUXILIARY_WEIGHT)[:len(outputs)], outputs, strict=True):
        output = at_truth_size(y_true, output)
        per_pixel = keras.losses.sparse_categorical_crossentropy(truth, output) * tf.cast(valid, output.dtype)
        total += weight * tf.reduce_mean(per_pixel, axis=[1, 2])
    return total


class CoupledSGD(keras.optimizers.SGD):
    """SGD as PyTorch's torch.optim.SGD computes it, which published Cityscapes configurations train with:
    the weight decay coupled (weight_decay x w added to the gradient of every weight, batch norm's and biases
    included, before the momentum), and the momentum kept over gradients (b = m b + g; w -= rate x b), where
    Keras' SGD keeps it over rate-scaled steps and decays weights apart from the gradient."""

    def __init__(self, learning_rate, momentum=0.9, coupled_weight_decay=0.0, **options):
        super().__init__(learning_rate, momentum=momentum, **options)
        self.coupled_weight_decay = coupled_weight_decay

    def update_step(self, gradient, variable, learning_rate):
        rate = keras.ops.cast(learning_rate, variable.dtype)
        gradient = keras.ops.cast(gradient, variable.dtype) + variable * self.coupled_weight_decay
        buffer = self.momentums[self._get_variable_index(variable)]
        # Distributed: b = m b + g in two updates, not one sum: TensorFlow's graph optimizer rewrites a sum of
        # three terms whose inputs share a device (one replica's, not another's), rounding it otherwise there
        self.assign(buffer, buffer * self.momentum)
        self.assign_add(buffer, gradient)
        self.assign_sub(variable, rate * buffer)

    def get_config(self):
        return {**super().get_config(), "coupled_weight_decay": self.coupled_weight_decay}


MODELS = ("unet-s5-d16", "unet", "resnet50-unet")


def build_model(name, num_classes, filters=32, depth=4, dropout=0.0, normalization="none", encoder_weights=None):
    """`name` of MODELS: the UNet above, or a U-Net decoder with a context module on ResNet50 (encoders.py),
    whose `encoder_weights` are None (from scratch), "imagenet" or a file of ResNet50's weights."""
    if name == "unet-s5-d16":
        return build_unet_s5_d16(num_classes, filters, depth, dropout)
    if name == "resnet50-unet":
        return build_resnet50_unet(num_classes, lambda channels, layer: normalization_layer(normalization, channels,
                                                                                            layer, 1),
                                   encoder_weights, dropout)
    return build_unet(filters, depth, dropout, normalization, num_classes=num_classes)


def at_truth_size(y_true, y_pred):
    """The prediction at the truth's resolution: a model that sees smaller images (--downscale,
    --eval-size) is scored against the categories as prepared, its probabilities resized bilinearly to
    them; the truth is never resized to the prediction."""
    if y_pred.shape[1:3] == y_true.shape[1:3] and None not in y_pred.shape[1:3]:
        return y_pred
    return tf.cast(tf.image.resize(tf.cast(y_pred, tf.float32), tf.shape(y_true)[1:3]), y_pred.dtype)


def cross_entropy_dice(y_true, y_pred, smooth=1.0):
    """Per-example loss: mean pixel cross-entropy + (1 - mean soft Dice over the classes), both over the
    pixels that are not IGNORE (an example with none of them adds 0).

    Cross-entropy alone is dominated by the large classes (road, building, sky); the Dice term weighs
    every class present in the image equally, so small ones (poles, signs, people) count.
    """
    y_pred = at_truth_size(y_true, y_pred)
    valid = tf.not_equal(y_true, IGNORE)
    truth = tf.where(valid, y_true, 0)
    weight = tf.cast(valid, y_pred.dtype)
    pixels = tf.reduce_sum(weight, axis=[1, 2])
    per_pixel = keras.losses.sparse_categorical_crossentropy(truth, y_pred) * weight
    cross_entropy = tf.math.divide_no_nan(tf.reduce_sum(per_pixel, axis=[1, 2]), pixels)
    one_hot = tf.one_hot(truth, y_pred.shape[-1], dtype=y_pred.dtype) * weight[..., None]
    guess = y_pred * weight[..., None]
    intersection = tf.reduce_sum(one_hot * guess, axis=[1, 2])
    total = tf.reduce_sum(one_hot + guess, axis=[1, 2])
    dice = tf.reduce_mean((2.0 * intersection + smooth) / (total + smooth), axis=-1)
    return cross_entropy + (1.0 - dice) * tf.cast(pixels > 0, y_pred.dtype)


def confusion_sums(y_true, y_pred):
    """The confusion matrix over the pixels that are not IGNORE, flattened (truth * C + prediction): it
    adds up across replicas and batches, and every IoU, class or category, follows from it."""
    y_pred = at_truth_size(y_true, prediction(y_pred))
    classes = y_pred.shape[-1]
    predicted = tf.cast(tf.argmax(y_pred, axis=-1), tf.int32)
    # An ignored pixel goes to one extra cell, dropped after: fixed shapes, so it compiles under --xla too
    cells = tf.where(tf.not_equal(y_true, IGNORE), y_true * classes + predicted, classes * classes)
    counts = tf.math.unsorted_segment_sum(tf.ones_like(cells, tf.float32), cells, classes * classes + 1)
    return {"confusion": counts[:-1]}


def truth_sums(y_true, y_pred):
    """Per-class pixel counts of the truth (evaluation only: the constant prediction's baseline)."""
    classes = tf.range(prediction(y_pred).shape[-1])
    return {"truth_pixels": tf.reduce_sum(tf.cast(tf.equal(y_true[..., None], classes), tf.float32), axis=[0, 1, 2])}


def constant_mean_iou(truth_pixels) -> float:
    """The best mean IoU of one class predicted everywhere: class c scores IoU share(c) and every
    other class in the truth 0, averaged over the classes present."""
    truth_pixels = truth_pixels.astype("float64")
    total, present = truth_pixels.sum(), truth_pixels > 0
    if total == 0:
        return 0.0
    return max(float(truth_pixels[c] / total / (present.sum() + (not present[c])))
               for c in range(len(truth_pixels)))


def _ious(confusion: np.ndarray) -> list:
    """IoU of each class, as cityscapesScripts' getIouScoreForLabel computes it: tp / (tp + fp + fn), where
    the ignored pixels are already out of the matrix; None where tp + fp + fn is 0 (its NaN)."""
    tp = np.diag(confusion)
    denominator = confusion.sum(axis=0) + confusion.sum(axis=1) - tp
    return [float(t / d) if d > 0 else None for t, d in zip(tp, denominator, strict=True)]


def _mean(ious: list) -> float:
    present = [iou for iou in ious if iou is not None]  # getScoreAverage: the mean over valid entries
    return float(np.mean(present)) if present else 0.0


def segmentation_scores(confusion, group_of=None) -> dict:
    """Class IoU and its mean from a [C, C] confusion matrix (rows truth, columns prediction); with
    `group_of` (class -> category), the category IoU and its mean too, from the same matrix, as
    cityscapesScripts' getIouScoreForCategory adds up the rows and columns of a category's classes."""
    confusion = np.asarray(confusion, np.float64)
    scores = {"iou_per_class": _ious(confusion)}
    scores["mean_iou"] = _mean(scores["iou_per_class"])
    if group_of is not None:
        groups = np.zeros((confusion.shape[0], max(group_of) + 1))
        groups[np.arange(len(group_of)), group_of] = 1.0
        scores["iou_per_category"] = _ious(groups.T @ confusion @ groups)
        scores["category_mean_iou"] = _mean(scores["iou_per_category"])
    return scores


def summarize(group_of=None):
    """The Trainer's `summarize` for the evaluation's sums: the scores above, and with the truth's pixel
    counts (an evaluation), the best constant prediction's mean IoU beside them."""
    def summary(sums) -> dict:
        classes = len(sums["confusion"]) ** 0.5
        metrics = segmentation_scores(np.reshape(sums["confusion"], (round(classes), round(classes))), group_of)
        if "truth_pixels" in sums:
            metrics["constant_mean_iou"] = constant_mean_iou(sums["truth_pixels"])
        return metrics
    return summary
