"""Context for this recipe's models: an atrous spatial pyramid pooling block (context_module) and a
U-Net decoder on keras.applications' ResNet50 (build_resnet50_unet), optionally ImageNet-pretrained.

Why: the plain UNet of model.py (3x3 convolutions, two per level, four max-pools) sees at most 200x200
input pixels per output pixel, a fifth of a 1024x2048 scene's height and less than half of a 512x1024
training crop's; road and sidewalk look alike in such a window, and what tells them apart lies farther away.
Theoretical receptive fields (the span of input pixels one output pixel depends on through the convolutions
and poolings), counted from each model's graph by ci/bench/cityscapes_full.py's receptive_field (the plain
UNet's 200 px matches the hand count, and a gradient taken through it spans 188 px at the centre pixel):

    plain UNet, 32 filters, depth 4 (build_unet)                      200 px
    the same, context module in place of its bottleneck (6/12/18)     712 px + the whole input (pooling)
    ResNet50 (483 px) U-Net, context module at stride 32 (3/6/9)    1,231 px + the whole input (pooling)

so the last two cover a 512x1024 crop's height, and through the pooled branch every pixel sees all of it.

A normalisation is passed in as a factory, `normalization(channels, name)` -> a Keras layer or None, so that
this module needs nothing from model.py (which imports it): model.py passes
`lambda channels, name: normalization_layer(kind, channels, name, 1)`.
"""
import os
import warnings

import keras

# DeepLabV3's atrous rates at an output stride of 16; at another stride they scale inversely, so that
# the branches look as far in input pixels (stride 32: 3, 6, 9; stride 8: 12, 24, 36).
RATES_AT_STRIDE_16 = (6, 12, 18)

# ResNet50's stage outputs (keras.applications layer names): stride 4, 8, 16 (the skips) and 32.
RESNET50_STAGES = ("conv2_block3_out", "conv3_block4_out", "conv4_block6_out", "conv5_block3_out")
DECODER_FILTERS = (256, 128, 64)  # the decoder's blocks at stride 16, 8 and 4
CONTEXT_FILTERS = 256
IMAGENET_FILE = "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5"  # what weights="imagenet" downloads
PACKAGE = "cityscapes_unet"


def atrous_rates(stride: int) -> tuple[int, ...]:
    """The context module's dilation rates for features at `stride` (8, 16 or 32) of the input."""
    return tuple(max(1, round(rate * 16 / stride)) for rate in RATES_AT_STRIDE_16)


@keras.saving.register_keras_serializable(package=PACKAGE)
class SpreadOver(keras.layers.Layer):
    """[pooled [b, 1, 1, c], features [b, h, w, ...]] -> the pooled vector at every one of the h x w
    positions (what a bilinear resize of a 1x1 map gives), at whatever size the features have."""

    def call(self, inputs):
        pooled, features = inputs
        return pooled * keras.ops.ones_like(features[..., :1])

    def compute_output_shape(self, input_shape):
        pooled, features = input_shape
        return (*features[:3], pooled[-1])


@keras.saving.register_keras_serializable(package=PACKAGE)
class ImageNetPixels(keras.layers.Layer):
    """Pixels 0..255 (as decoded) to the input ResNet50's ImageNet weights were trained on, by
    keras.applications.resnet50.preprocess_input: BGR, ImageNet's channel means subtracted. The model's
    own preprocessing, computed in float32 under any policy (--amp casts its output for the next layer)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)

    def call(self, images):
        return keras.applications.resnet50.preprocess_input(images)


def conv_unit(x, filters, kernel, normalization, name, dilation=1):
    """Convolution (He-initialised, no bias when a normalisation follows), the normalisation, ReLU."""
    norm = normalization(filters, name) if normalization else None
    x = keras.layers.Conv2D(filters, kernel, padding="same", dilation_rate=dilation, use_bias=norm is None,
                            kernel_initializer="he_normal", name=f"{name}_conv")(x)
    if norm is not None:
        x = norm(x)
    return keras.layers.Activation("relu", name=f"{name}_relu")(x)


def context_module(x, filters, normalization, name, rates=RATES_AT_STRIDE_16, dropout=0.0):
    """Atrous spatial pyramid pooling: a 1x1 convolution, a 3x3 convolution at each dilation rate of
    `rates` (atrous_rates(stride) for the features' stride), and the image-level branch (the average over
    the whole input, a 1x1 convolution, spread back over every position), concatenated and projected to
    `filters` by a 1x1 convolution. Every input size works: nothing depends on it but the pooled average.

    `normalization(channels, name)` gives the layer after each convolution (or None, or pass None for no
    normalisation). The image-level branch has a bias and no normalisation: it is one vector per image,
    which batch norm would normalise over the batch alone, to 0 at one image per replica.
    """
    branches = [conv_unit(x, filters, 1, normalization, f"{name}_1x1")]
    for rate in rates:
        branches.append(conv_unit(x, filters, 3, normalization, f"{name}_rate{rate}", dilation=rate))
    pooled = keras.layers.GlobalAveragePooling2D(keepdims=True, name=f"{name}_image_pool")(x)
    pooled = keras.layers.Conv2D(filters, 1, activation="relu", kernel_initializer="he_normal",
                                 name=f"{name}_image_conv")(pooled)
    branches.append(SpreadOver(name=f"{name}_image_spread")([pooled, x]))
    x = keras.layers.Concatenate(name=f"{name}_concat")(branches)
    x = conv_unit(x, filters, 1, normalization, f"{name}_project")
    if dropout:
        x = keras.layers.Dropout(dropout, name=f"{name}_dropout")(x)
    return x


def _one_line(error) -> str:
    return " ".join(str(error).split())[:300]


def resnet50_backbone(weights):
    """keras.applications.ResNet50 without its top, for any input size; its weights: "imagenet"
    (downloaded by Keras, or read from ~/.keras/models/ when a copy is there), a path to a weights file of
    that model (e.g. IMAGENET_FILE copied from a machine that can download it, or a .weights.h5 that
    model's save_weights wrote) or None (from scratch). Errors are ValueErrors of one line."""
    shape = (None, None, 3)
    if weights is None:
        return keras.applications.ResNet50(include_top=False, weights=None, input_shape=shape)
    if isinstance(weights, str) and weights == "imagenet":
        try:
            return keras.applications.ResNet50(include_top=False, weights="imagenet", input_shape=shape)
        except Exception as error:  # Keras raises a bare Exception when the download fails
            raise ValueError(f"weights='imagenet': ResNet50's ImageNet weights could not be downloaded or read "
                             f"({_one_line(error)}); pass the path of a copy of {IMAGENET_FILE} instead, or "
                             "None to train from scratch") from None
    path = os.fspath(weights)
    if not os.path.isfile(path):
        raise ValueError(f"ResNet50 weights file {path} does not exist; pass the path of {IMAGENET_FILE} "
                         "(or of a .weights.h5 of keras.applications.ResNet50(include_top=False)), or None")
    backbone = keras.applications.ResNet50(include_top=False, weights=None, input_shape=shape)
    expected = f"it must hold the weights of keras.applications.ResNet50(include_top=False), as {IMAGENET_FILE} does"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            backbone.load_weights(path)
    except Exception as error:  # h5py's OSError for no HDF5 file, Keras's ValueError for another model's
        raise ValueError(f"ResNet50 weights file {path} cannot be loaded: {_one_line(error)}; {expected}") from None
    # Keras only warns when parts of a .weights.h5 file are missing and leaves those layers as initialised
    skipped = [w for w in caught if "freshly-initialized" in str(w.message) or "could not be loaded" in str(w.message)]
    if skipped:
        raise ValueError(f"ResNet50 weights file {path} cannot be loaded: {len(skipped)} parts of ResNet50 are "
                         f"not in it ({_one_line(skipped[0].message)}); {expected}")
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return backbone


def build_resnet50_unet(num_classes, normalization, weights, dropout=0.0, freeze_batch_norm=None):
    """A U-Net decoder on ResNet50: the context module on the stride-32 features, then at stride 16, 8
    and 4 a bilinear up-sampling by 2, the encoder's features there (projected by a 1x1 convolution to
    half the block's filters) concatenated, and two 3x3 convolutions (DECODER_FILTERS); the class scores
    at stride 4, up-sampled bilinearly to the input's size, and the softmax head "categories" in float32.

    Takes pixels 0..255 of any size whose sides are multiples of 32 and applies ResNet50's own
    preprocessing inside (ImageNetPixels). `normalization(channels, name)`: the decoder's and context
    module's normalisation (see context_module). `weights`: see resnet50_backbone. The backbone is the
    nested model "resnet50" (model.get_layer("resnet50")), which holds ResNet50's layers and weights.

    The backbone's batch norm layers are frozen (fixed statistics and scales, inference mode also in
    training) when `freeze_batch_norm` is True, by default when pretrained weights are loaded: their
    ImageNet statistics then stay as they were learnt, whatever a replica's batch holds, and like model.py's
    "none" they compute the same on a crop as on a whole scene. From scratch they normalise per batch.
    """
    backbone = resnet50_backbone(weights)
    if freeze_batch_norm is None:
        freeze_batch_norm = weights is not None
    if freeze_batch_norm:
        for layer in backbone.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.trainable = False  # Keras 3: a BatchNormalization that is not trainable runs in inference mode
    encoder = keras.Model(backbone.input, [backbone.get_layer(name).output for name in RESNET50_STAGES],
                          name="resnet50")

    inputs = keras.Input((None, None, 3), name="image")
    *skips, x = encoder(ImageNetPixels(name="imagenet_pixels")(inputs))
    x = context_module(x, CONTEXT_FILTERS, normalization, "context", atrous_rates(32), dropout)
    for skip, filters, stride in zip(reversed(skips), DECODER_FILTERS, (16, 8, 4), strict=True):
        x = keras.layers.UpSampling2D(2, interpolation="bilinear", name=f"up{stride}")(x)
        skip = conv_unit(skip, filters // 2, 1, normalization, f"skip{stride}")
        x = keras.layers.Concatenate(name=f"concat{stride}")([x, skip])
        x = conv_unit(x, filters, 3, normalization, f"dec{stride}_1")
        x = conv_unit(x, filters, 3, normalization, f"dec{stride}_2")
        if dropout:
            x = keras.layers.Dropout(dropout, name=f"dec{stride}_dropout")(x)
    x = keras.layers.Conv2D(num_classes, 1, name="scores")(x)
    # Up-sampled and normalised in float32 under --amp: the loss needs the precision.
    x = keras.layers.UpSampling2D(4, interpolation="bilinear", dtype="float32", name="scores_up")(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="categories")(x)
    return keras.Model(inputs, outputs, name="resnet50_unet")
