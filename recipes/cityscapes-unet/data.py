"""Input pipeline of the Cityscapes UNet: prepared PNGs -> (image, training label map) batches.

The prepared label maps hold label ids (Cityscapes' or the user's class ids); each is mapped through
the chosen view's lookup (labels.py: the 19 classes or the 7 categories) as it is decoded, so the rest
of the pipeline and the model see training indices 0..C-1, and IGNORE (255) where a pixel counts in
neither the loss nor the metric.

Training order: tf_recipes.data.sharded_order shuffles example *indices* per epoch and deals them to
the input pipelines before anything is read, so each pipeline reads and decodes only its own share,
and the replicas of step i together always hold global batch i, whatever the launcher.

Augmentation (random scale, crop, horizontal flip; the same for image and categories, categories
resized with nearest neighbour; optionally mmsegmentation's class ratio rule for crops and its photometric
distortion of the image) draws from stateless random ops keyed on (seed, position of the
example in the global stream). An example therefore gets the same augmentation on one pipeline or
on eight, and a run resumed at start_step sees exactly what an uninterrupted run would have seen.

Images stay uint8 through decode, crop and flip, and become float32 only per batch: that keeps the
per-example copies four times smaller, which matters at 1024x2048 on a few cores.
"""
from __future__ import annotations

import json
import numbers
import os
import pathlib
import struct

import numpy as np
import tensorflow as tf

from tf_recipes import user_paths
from tf_recipes.contract import class_name_problem
from tf_recipes.data import DataError, InputShard, error_reason, global_order, pipeline_positions

import layout
import scene_cache
from labels import IGNORE

AUTOTUNE = tf.data.AUTOTUNE


def _prepare_hint(data_dir) -> str:
    return (f"run `python recipes/cityscapes-unet/prepare_data.py --source CITYSCAPES_DIR --out {data_dir}` "
            "(CITYSCAPES_DIR holds leftImg8bit_trainvaltest.zip and gtFine_trainvaltest.zip)")


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_RGB, _GRAY = 2, 0  # PNG colour types: prepared images are RGB, label maps 8-bit grayscale
_INDEXES: dict = {}  # (data dir, split) -> checked index: every process checks each split once


def _file_problem(path: pathlib.Path, height: int, width: int, colour_type: int, size) -> str | None:
    """Why a prepared file is not what the index promises, from its size and PNG header (the
    first 33 bytes, not the pixels); None when it matches."""
    what = user_paths.what_is(path)  # checked, not opened: a FIFO in its place would block every process
    if what != user_paths.FILE:
        return "is missing" if what == user_paths.MISSING else f"is {what}, not a regular file"
    try:
        with open(path, "rb") as handle:
            actual = os.fstat(handle.fileno()).st_size
            header = handle.read(33)
    except FileNotFoundError:
        return "is missing"
    except OSError as error:
        return f"cannot be read ({error_reason(error)})"
    if size is not None and actual != size:
        return f"is {actual} bytes, the index says {size}"
    if header[:8] != _PNG_SIGNATURE or header[12:16] != b"IHDR":
        return "is not a PNG file"
    file_width, file_height = struct.unpack(">II", header[16:24])
    if (file_height, file_width) != (height, width):
        return f"is {file_height}x{file_width}, the index says {height}x{width}"
    depth, colour = header[24], header[25]
    if colour != colour_type or (colour_type == _GRAY and depth != 8):
        expected = "RGB" if colour_type == _RGB else "8-bit grayscale"
        return f"is a {depth}-bit PNG of colour type {colour}, not {expected}"
    return None


def read_index(data_dir, split: str) -> dict:
    """The prepared split's index, after checking that every file it names is there and is the
    PNG it says: same byte size as prepared, image size and colour type from the header."""
    key = (os.path.abspath(data_dir), split)
    if key not in _INDEXES:
        _INDEXES[key] = _checked_index(data_dir, split)
    return _INDEXES[key]


def _checked_index(data_dir, split: str) -> dict:
    path = layout.index_path(data_dir, split)
    if not path.is_file():
        reason = "does not exist" if not pathlib.Path(data_dir).is_dir() else f"has no {path.name}"
        raise DataError(f"no prepared {split!r} data: {data_dir} {reason}; {_prepare_hint(data_dir)}")
    try:
        index = json.loads(path.read_text())
    except ValueError as error:
        raise DataError(f"{path} is not a valid index ({error}); {_prepare_hint(data_dir)}") from None
    if isinstance(index, dict) and index.get("format") in layout.OLD_INDEX_FORMATS:
        raise DataError(f"{path} was prepared for the 8 categories by an older prepare_data.py; prepare it again "
                        f"(it keeps the label ids now): {_prepare_hint(data_dir)}")
    if not isinstance(index, dict) or index.get("format") != layout.INDEX_FORMAT or not index.get("examples"):
        raise DataError(f"{path} is not a {layout.INDEX_FORMAT} index with examples; {_prepare_hint(data_dir)}")
    height, width, examples = index.get("height"), index.get("width"), index["examples"]
    sizes, views = index.get("bytes", {}), index.get("views")
    if (not all(isinstance(side, int) and side > 0 for side in (height, width))
            or not isinstance(examples, list) or not all(isinstance(i, str) for i in examples)
            or not isinstance(sizes, dict) or not isinstance(views, dict) or not views
            or not all(isinstance(v, dict) and len(v.get("lookup", ())) == 256 for v in views.values())):
        raise DataError(f"{path} lacks a valid height, width, list of examples or views of its labels; "
                        f"{_prepare_hint(data_dir)}")
    problems = []
    for example_id in examples:
        image_size, labels_size = sizes.get(example_id, (None, None))
        for file, colour_type, size in ((layout.prepared_image(data_dir, split, example_id), _RGB, image_size),
                                        (layout.prepared_labels(data_dir, split, example_id), _GRAY,
                                         labels_size)):
            problem = _file_problem(file, height, width, colour_type, size)
            if problem:
                problems.append(f"{file} {problem}")
    if problems:
        raise DataError(f"{len(problems)} files listed in {path} are missing or no longer match it, e.g. "
                        f"{'; '.join(problems[:3])}; delete any such file that still exists and "
                        f"{_prepare_hint(data_dir)}: it writes them again")
    return index


def view(data_dir, name: str | None = None) -> dict:
    """The view `name` of the prepared labels (labels.py; None: the data's default, `classes`): its class
    names, colours, lookup and, for Cityscapes, the label ids and categories; a DataError naming the views
    the data has otherwise."""
    index = read_index(data_dir, "train")
    name = name or index.get("default_view", "classes")
    if name not in index["views"]:
        raise DataError(f"--classes {name}: the data in {data_dir} has the views {', '.join(index['views'])} "
                        "(categories: Cityscapes data only); choose one of them")
    chosen = {**index["views"][name], "name": name}
    for class_name in chosen["names"]:
        if class_name_problem(class_name):
            raise DataError(f"class {class_name!r} in {layout.index_path(data_dir, 'train')}: the name "
                            f"{class_name_problem(class_name)}, and each class name is one line of the export's "
                            "labels.txt; prepare the data again with prepare_data.py")
    chosen["colours"] = [tuple(colour) for colour in chosen["colours"]]
    return chosen


def image_size(data_dir, split: str = "train") -> tuple[int, int]:
    index = read_index(data_dir, split)
    return index["height"], index["width"]


def _known_values(index: dict) -> list[bool]:
    """Which stored values (0..255) are labels of this data: mapped to a class, or known and ignored."""
    known = [False] * 256
    for value in index.get("values", range(256)):
        known[value] = True
    return known


def example_problem(data_dir, split: str, index: dict, example: int) -> str | None:
    """Why example number `example` of a prepared split cannot be trained on, found by reading it
    as the input pipeline does (TF's PNG decoder); None when it can."""
    for path, channels in ((layout.prepared_image(data_dir, split, index["examples"][example]), 3),
                           (layout.prepared_labels(data_dir, split, index["examples"][example]), 1)):
        try:
            decoded = tf.io.decode_png(tf.io.read_file(str(path)), channels=channels).numpy()
        except tf.errors.OpError as error:
            return f"{path} cannot be read or decoded ({error_reason(error)})"
        if decoded.shape[:2] != (index["height"], index["width"]):
            return (f"{path} is {decoded.shape[0]}x{decoded.shape[1]}, the index says "
                    f"{index['height']}x{index['width']}")
        known = np.array(_known_values(index))
        if channels == 1 and not known[decoded].all():
            values = np.unique(decoded[~known[decoded]])[:5].tolist()
            return f"{path} holds values {values} that are no label of this data"
    return None


def bad_example_message(data_dir, split: str, examples, during: str) -> str | None:
    """One line naming the first of `examples` (indices into the split) that cannot be read, and
    what to do; None if all of them can."""
    index = read_index(data_dir, split)
    for example in examples:
        problem = example_problem(data_dir, split, index, int(example))
        if problem:
            return (f"{problem}: example {int(example)} ({index['examples'][example]}) of the prepared {split} "
                    f"split, {during}; delete that file and {_prepare_hint(data_dir)}: it writes it again")
    return None


def explain_train_error(data_dir, global_batch: int, seed: int):
    """For Trainer.fit(explain_input_error=...): given the 1-based global step whose input failed,
    the message naming the file of that global batch that cannot be read, or None."""
    def explain(step: int) -> str | None:
        count = len(read_index(data_dir, "train")["examples"])
        batch = global_order(count, global_batch, step, seed, step - 1)  # the examples of step `step`
        return bad_example_message(data_dir, "train", batch, f"read for global step {step}")
    return explain


def num_examples(data_dir, split: str = "train") -> int:
    return len(read_index(data_dir, split)["examples"])


def _file_names(data_dir, split: str, index: dict):
    images = [str(layout.prepared_image(data_dir, split, i)) for i in index["examples"]]
    label_maps = [str(layout.prepared_labels(data_dir, split, i)) for i in index["examples"]]
    return tf.constant(images), tf.constant(label_maps)


def _read_and_decode(image_file, label_file, height: int, width: int, index: dict, lookup):
    """(image uint8 [H, W, 3], training indices uint8 [H, W]: the stored labels through `lookup`)."""
    image = tf.io.decode_png(tf.io.read_file(image_file), channels=3)
    stored = tf.io.decode_png(tf.io.read_file(label_file), channels=1)[..., 0]
    # A label map replaced after preparation would otherwise train on wrong classes, or give a NaN
    # loss on GPU. One lookup over the map; the error names the file.
    known = tf.reduce_all(tf.gather(tf.constant(_known_values(index)), tf.cast(stored, tf.int32)))
    with tf.control_dependencies([tf.debugging.Assert(known, ["values that are no label of this data in",
                                                              label_file])]):
        trained = tf.gather(tf.constant(lookup, tf.uint8), tf.cast(stored, tf.int32))
    # Fails loudly, naming the shapes, if a file was replaced after prepare_data checked it.
    return tf.ensure_shape(image, [height, width, 3]), tf.ensure_shape(trained, [height, width])


def _to_model_types(images, truth):
    """Pixels as float32 0..255 (resized ones are fractional): the model scales them itself."""
    return tf.cast(images, tf.float32), tf.cast(truth, tf.int32)


def _scale_range(scale) -> tuple[float, float]:
    low, high = (scale, scale) if isinstance(scale, numbers.Number) else tuple(scale)
    if not 0 < low <= high:
        raise ValueError(f"scale {scale!r}: use a positive number or a (min, max) pair with min <= max")
    return float(low), float(high)


def _shrink(image, truth, factor: float):
    """The example at `factor` (< 1) of its size: the image area-averaged (antialiased bilinear), the
    truth by nearest neighbour. The one resize from full resolution, in training and evaluation."""
    size = (round(image.shape[0] * factor), round(image.shape[1] * factor))
    image = tf.saturate_cast(tf.round(tf.image.resize(image, size, antialias=True)), tf.uint8)
    truth = tf.image.resize(truth[..., None], size, method="nearest")[..., 0]
    return image, truth


def working_factor(downscale: int, scale_range) -> float:
    """The size, relative to the prepared images, at which training decodes and keeps an example: the
    largest the zoom (`scale_range` at 1/`downscale` of full resolution) asks for, never above full size."""
    return min(1.0, scale_range[1] / downscale)


CROP_TRIES = 10  # mmsegmentation's RandomCrop: a crop is checked at most 10 times, the 11th taken as drawn


def _acceptable_crop(truth, cat_max_ratio: float):
    """mmsegmentation's cat_max_ratio rule: the crop holds two classes or more and none covers `cat_max_ratio`
    of its labelled pixels (IGNORE left out)."""
    counts = tf.math.bincount(tf.reshape(tf.cast(truth, tf.int32), [-1]), minlength=256, maxlength=256)
    counts = tf.concat([counts[:IGNORE], counts[IGNORE + 1:]], 0)
    ratio = tf.cast(tf.reduce_max(counts), tf.float32) / tf.cast(tf.maximum(tf.reduce_sum(counts), 1), tf.float32)
    return tf.logical_and(tf.math.count_nonzero(counts) > 1, ratio < cat_max_ratio)


def _crop_offsets(truth, window, limits, keys, redraw_key, cat_max_ratio: float):
    """(y, x) of a `window` in `truth`, drawn uniformly below `limits` from `keys`; with cat_max_ratio < 1,
    drawn again (from `redraw_key`) while the window fails _acceptable_crop, CROP_TRIES times at most. The
    rule is checked on the window before the zoom's resize, whose nearest-neighbour labels hold the same
    shares up to rounding."""
    def draw(y_key, x_key):
        return (tf.random.stateless_uniform([], y_key, 0, limits[0], tf.int32),
                tf.random.stateless_uniform([], x_key, 0, limits[1], tf.int32))

    y, x = draw(*keys)
    if cat_max_ratio >= 1.0:
        return y, x

    def failing(tries, y, x):
        return tf.logical_and(tries < CROP_TRIES, tf.logical_not(
            _acceptable_crop(truth[y:y + window[0], x:x + window[1]], cat_max_ratio)))

    def again(tries, y, x):
        keys = tf.unstack(tf.random.experimental.stateless_split(
            tf.random.experimental.stateless_fold_in(redraw_key, tries), 2))
        return (tries + 1, *draw(*keys))

    _, y, x = tf.while_loop(failing, again, (tf.constant(0), y, x))
    return y, x


def _photometric(image, key):
    """mmsegmentation's PhotoMetricDistortion on a uint8 RGB image, each step with probability 0.5: brightness
    + U[-32, 32]; contrast x U[0.5, 1.5], before the HSV steps or after them (even odds); saturation x U[0.5,
    1.5]; hue + k/180 of the circle, k of -18..17 (OpenCV's 8-bit hue counts 180 steps). Each step clips to
    0..255 and truncates to whole values, as its uint8 conversions; the HSV steps work in floating point."""
    keys = tf.unstack(tf.random.experimental.stateless_split(key, 10))

    def when(step_key, apply, x):
        return tf.cond(tf.random.stateless_uniform([], step_key) < 0.5, lambda: apply(x), lambda: x)

    def scaled(x, alpha, beta=0.0):
        return tf.floor(tf.clip_by_value(x * alpha + beta, 0.0, 255.0))

    def in_hsv(x, change):
        return tf.floor(tf.clip_by_value(tf.image.hsv_to_rgb(change(tf.image.rgb_to_hsv(x / 255.0))) * 255.0,
                                         0.0, 255.0))

    def saturation(hsv, alpha):
        return tf.stack([hsv[..., 0], tf.clip_by_value(hsv[..., 1] * alpha, 0.0, 1.0), hsv[..., 2]], -1)

    def hue(hsv, steps):
        return tf.stack([tf.math.floormod(hsv[..., 0] + tf.cast(steps, tf.float32) / 180.0, 1.0),
                         hsv[..., 1], hsv[..., 2]], -1)

    def contrast(x):
        return scaled(x, tf.random.stateless_uniform([], keys[1], 0.5, 1.5))

    x = tf.cast(image, tf.float32)
    x = when(keys[0], lambda x: scaled(x, 1.0, tf.random.stateless_uniform([], keys[2], -32.0, 32.0)), x)
    contrast_first = tf.random.stateless_uniform([], keys[3]) < 0.5
    x = tf.cond(contrast_first, lambda: when(keys[4], contrast, x), lambda: x)
    alpha = tf.random.stateless_uniform([], keys[5], 0.5, 1.5)
    x = when(keys[6], lambda x: in_hsv(x, lambda hsv: saturation(hsv, alpha)), x)
    steps = tf.random.stateless_uniform([], keys[7], -18, 18, tf.int32)
    x = when(keys[8], lambda x: in_hsv(x, lambda hsv: hue(hsv, steps)), x)
    x = tf.cond(contrast_first, lambda: x, lambda: when(keys[9], contrast, x))
    return tf.cast(x, tf.uint8)


def _augment(image, truth, position, seed: int, out_size, scale_range, cat_max_ratio=1.0, photometric=False):
    """Random scale, crop (mmsegmentation's class ratio rule under `cat_max_ratio` < 1) and flip, identical for
    image and truth, then (`photometric`) _photometric on the image; keyed on (seed, position). `scale_range`
    is relative to the image as given."""
    out_h, out_w = out_size
    height, width = image.shape[0], image.shape[1]
    key = tf.stack([tf.constant(seed, tf.int64), tf.cast(position, tf.int64)])
    scale_key, y_key, x_key, flip_key = tf.unstack(tf.random.experimental.stateless_split(key, 4))
    redraw_key, colour_key = (tf.random.experimental.stateless_fold_in(key, i) for i in (1, 2))
    if scale_range != (1.0, 1.0):
        # Crop the window that becomes the output, then resize only that: far cheaper than
        # resizing the whole 1024x2048 image first. A window larger than the image (zooming out)
        # is padded with black pixels that count in neither the loss nor the metric.
        scale = tf.random.stateless_uniform([], scale_key, *scale_range)
        window_h = tf.cast(tf.round(out_h / scale), tf.int32)
        window_w = tf.cast(tf.round(out_w / scale), tf.int32)
        pad_h, pad_w = tf.maximum(window_h - height, 0), tf.maximum(window_w - width, 0)
        image = tf.pad(image, [[0, pad_h], [0, pad_w], [0, 0]])
        truth = tf.pad(truth, [[0, pad_h], [0, pad_w]], constant_values=IGNORE)
        limits = (height + pad_h - window_h + 1, width + pad_w - window_w + 1)
        y, x = _crop_offsets(truth, (window_h, window_w), limits, (y_key, x_key), redraw_key, cat_max_ratio)
        image = tf.image.resize(image[y:y + window_h, x:x + window_w], out_size)
        image = tf.saturate_cast(tf.round(image), tf.uint8)
        truth = tf.image.resize(truth[y:y + window_h, x:x + window_w, None], out_size,
                                     method="nearest")[..., 0]
    elif out_size != (height, width):
        limits = (height - out_h + 1, width - out_w + 1)
        y, x = _crop_offsets(truth, out_size, limits, (y_key, x_key), redraw_key, cat_max_ratio)
        image = tf.slice(image, [y, x, 0], [out_h, out_w, 3])
        truth = tf.slice(truth, [y, x], [out_h, out_w])
    # tf.reverse, not image[:, ::-1]: a negative-stride slice was 2x slower at full size.
    flip = tf.random.stateless_uniform([], flip_key) < 0.5
    image, truth = tf.cond(flip, lambda: (tf.reverse(image, [1]), tf.reverse(truth, [1])),
                                lambda: (image, truth))
    if photometric:
        image = _photometric(tf.ensure_shape(image, [out_h, out_w, 3]), colour_key)
    return tf.ensure_shape(image, [out_h, out_w, 3]), tf.ensure_shape(truth, [out_h, out_w])


def _centre_crop(image, truth, out_size):
    out_h, out_w = out_size
    image = tf.image.resize_with_crop_or_pad(image, out_h, out_w)
    truth = tf.image.resize_with_crop_or_pad(truth[..., None], out_h, out_w)[..., 0]
    return image, truth


def _decoded_in_memory(image_files, label_files, example_ids: np.ndarray, height: int, width: int, data_dir,
                       decode):
    """Decode the given examples once (`decode(image_file, label_file)`, at height x width) into host
    memory; returns a tf function index -> example."""
    needed = len(example_ids) * height * width * 4
    available = scene_cache.available_memory_bytes()
    if needed > available // 2:
        raise DataError(f"cache=True would hold {len(example_ids)} decoded examples, {needed / 2**30:.1f} GiB, "
                        f"but only {available / 2**30:.1f} GiB of memory is available; train without "
                        "the cache (it only pays off for data sets that fit in memory)")
    decoded = tf.data.Dataset.from_tensor_slices(example_ids).map(
        lambda i: decode(tf.gather(image_files, i), tf.gather(label_files, i)),
        num_parallel_calls=AUTOTUNE, deterministic=True)
    images = np.empty([len(example_ids), height, width, 3], np.uint8)
    truth = np.empty([len(example_ids), height, width], np.uint8)
    try:
        for row, (image, truth_map) in enumerate(decoded.as_numpy_iterator()):
            images[row], truth[row] = image, truth_map
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError, tf.errors.NotFoundError):
        message = bad_example_message(data_dir, "train", example_ids, "decoded for --cache")
        if message:
            raise DataError(message) from None
        raise

    def lookup(index):
        row = np.searchsorted(example_ids, index)
        return images[row], truth[row]

    # numpy_function keeps the arrays out of the graph (a >2 GB constant cannot be serialised);
    # the cost is that this dataset only runs in this process.
    def fetch(index):
        image, truth_map = tf.numpy_function(lookup, [index], [tf.uint8, tf.uint8], stateful=False)
        return tf.ensure_shape(image, [height, width, 3]), tf.ensure_shape(truth_map, [height, width])
    return fetch


def _scene_decoder(index: dict, lookup, factor: float):
    """(image file, label file) -> the example decoded, mapped through `lookup`, shrunk to `factor`."""
    height, width = index["height"], index["width"]

    def decode(image_file, label_file):
        example = _read_and_decode(image_file, label_file, height, width, index, lookup)
        return _shrink(*example, factor) if factor < 1 else example
    return decode


def cached_train_scenes(data_dir, shard: InputShard, cache_dir, *, downscale: int = 1, scale=1.0,
                        augment: bool = True, classes: str | None = None, barrier=lambda: None, log=print):
    """Every training scene decoded once per node, at the size make_train_dataset keeps it, into the files
    under `cache_dir` that every process of the node maps (scene_cache.py): make_train_dataset's `scenes`.
    Made before the dataset, since it waits for the other pipelines (`barrier`: a collective)."""
    index = read_index(data_dir, "train")
    factor = working_factor(downscale, _scale_range(scale) if augment else (1.0, 1.0))
    lookup = view(data_dir, classes)["lookup"]
    return scene_cache.cached_scenes(data_dir, "train", index, _scene_decoder(index, lookup, factor),
                                     round(index["height"] * factor), round(index["width"] * factor), cache_dir,
                                     shard, barrier, log, lookup=lookup)


def _fetcher(data_dir, index: dict, lookup, image_files, label_files, factor: float, cached_ids=None, scenes=None):
    """A tf function example index -> (image, truth), decoded, mapped through `lookup` and shrunk to
    `factor` of the prepared size; with `cached_ids`, those examples are decoded once into this process's
    memory and read from there; with `scenes` (cached_train_scenes), read from the node's cache files."""
    height, width = index["height"], index["width"]
    decode = _scene_decoder(index, lookup, factor)
    if scenes is not None:
        size = [round(height * factor), round(width * factor)]
        if [scenes.height, scenes.width] != size:
            raise ValueError(f"the scene cache holds {scenes.height}x{scenes.width} scenes, this pipeline keeps "
                             f"{size[0]}x{size[1]}: make it with the same downscale, scale and augment")

        def fetch(i):
            image, truth = tf.numpy_function(scenes.scene, [i], [tf.uint8, tf.uint8], stateful=False)
            return tf.ensure_shape(image, [*size, 3]), tf.ensure_shape(truth, size)
        return fetch
    if cached_ids is not None:
        return _decoded_in_memory(image_files, label_files, cached_ids, round(height * factor),
                                  round(width * factor), data_dir, decode)
    return lambda i: decode(tf.gather(image_files, i), tf.gather(label_files, i))


def _output_size(data_dir, height: int, width: int, downscale: int, crop) -> tuple[int, int]:
    """A training example's size: `crop`, or the whole image at 1/`downscale`; a DataError if either does
    not fit the prepared images."""
    if downscale < 1 or height % downscale or width % downscale:
        raise DataError(f"downscale {downscale} does not divide the {height}x{width} images in {data_dir}; "
                        "use a whole divisor of both sides")
    out_size = tuple(int(side) for side in crop) if crop else (height // downscale, width // downscale)
    if out_size[0] > height // downscale or out_size[1] > width // downscale or min(out_size) < 1:
        at = f" at 1/{downscale} of their size" if downscale > 1 else ""
        raise DataError(f"crop {out_size[0]}x{out_size[1]} does not fit the {height}x{width} images "
                        f"in {data_dir}{at}; use a crop of at most {height // downscale}x{width // downscale}, "
                        "or none")
    return out_size


def make_train_dataset(data_dir, shard: InputShard, total_steps: int, seed: int, start_step: int = 0,
                       crop=None, scale=1.0, augment: bool = True, cache: bool = False,
                       shard_late: bool = False, downscale: int = 1, classes: str | None = None,
                       cat_max_ratio: float = 1.0, photometric: bool = False, scenes=None) -> tf.data.Dataset:
    """Batches of (image float32 [b,H,W,3] in 0..255, truth int32 [b,H,W]: the view `classes`'s indices, or
    IGNORE), b = per-replica batch.

    Yields exactly (total_steps - start_step) * global_batch / num_pipelines examples for global
    steps [start_step, total_steps). downscale=N: the model sees the scenes at 1/N of their prepared
    resolution (each decoded example shrunk once, antialiased); crop=(H, W) sets the output size
    (default: the whole image at that resolution); scale is a zoom factor or a (min, max) range drawn
    per example, relative to that resolution; cat_max_ratio < 1 redraws a crop as mmsegmentation's
    RandomCrop does, photometric=True adds its PhotoMetricDistortion (_augment). augment=False gives a centre
    crop, no scale, no flip, no colour change.
    cache=True keeps this pipeline's examples in memory, decoded and shrunk (refused if they do not
    fit); `scenes` (cached_train_scenes) reads them from the node's cache files instead. shard_late=True
    reproduces the slow variant: every pipeline reads and decodes the whole stream and keeps its own
    slices of every global batch; same output, more work.
    """
    index = read_index(data_dir, "train")
    height, width = index["height"], index["width"]
    out_size = _output_size(data_dir, height, width, downscale, crop)
    scale_range = _scale_range(scale) if augment else (1.0, 1.0)
    factor = working_factor(downscale, scale_range)  # the size an example is decoded to and kept at
    scale_range = tuple(s / downscale / factor for s in scale_range)  # relative to the kept size
    image_files, label_files = _file_names(data_dir, "train", index)
    count = len(index["examples"])

    # Which examples to read, and each one's position in the global stream (the augmentation key).
    first = start_step * shard.global_batch
    stream = global_order(count, shard.global_batch, total_steps, seed, start_step)
    mine = pipeline_positions(shard, len(stream))  # Distributed: this pipeline's positions in the stream
    if shard_late:
        order, positions = stream, first + np.arange(len(stream))
    else:
        order, positions = stream[mine], first + mine  # Distributed: sharded before anything is read
    examples = tf.data.Dataset.from_tensor_slices((order, positions))

    lookup = view(data_dir, classes)["lookup"]
    fetch = _fetcher(data_dir, index, lookup, image_files, label_files, factor,
                     np.unique(order) if cache and scenes is None else None, scenes)
    examples = examples.map(lambda i, position: (*fetch(i), position),
                            num_parallel_calls=AUTOTUNE, deterministic=True)
    if shard_late:
        # Distributed: late sharding, the seed's slow variant
        # Keep this pipeline's slices of every global batch, after everything was decoded.
        share = shard.global_batch // shard.num_pipelines
        examples = examples.filter(
            lambda image, truth, position: (position // share) % shard.num_pipelines == shard.pipeline_id)

    if augment:
        def transform(image, truth, position):
            return _augment(image, truth, position, seed, out_size, scale_range, cat_max_ratio, photometric)
    else:
        def transform(image, truth, position):
            return _centre_crop(image, truth, out_size)
    examples = examples.map(transform, num_parallel_calls=AUTOTUNE, deterministic=True)
    batches = examples.batch(shard.per_replica_batch, drop_remainder=True,
                             num_parallel_calls=AUTOTUNE, deterministic=True)
    batches = batches.map(_to_model_types, num_parallel_calls=AUTOTUNE, deterministic=True)
    return batches.prefetch(AUTOTUNE)


def make_eval_dataset(data_dir, split: str = "val", *, batch_size: int, size=None,
                      share: slice | None = None, classes: str | None = None) -> tf.data.Dataset:
    """Every example of the split once (or of examples [share.start, share.stop): this process's
    share, see Launcher.eval_share), in index order, unaugmented; the last batch may be smaller.

    size=(H, W) resizes the images (antialiased bilinear, as training shrinks them) and never the
    truth: they stay at the prepared resolution, which the model's prediction is scored at
    (model.at_truth_size). Default: the images at full resolution too.
    """
    index = read_index(data_dir, split)
    height, width = index["height"], index["width"]
    lookup = view(data_dir, classes)["lookup"]
    image_files, label_files = _file_names(data_dir, split, index)
    if share is not None:  # Distributed: this process's share of the split
        image_files, label_files = image_files[share], label_files[share]

    def load(image_file, label_file):
        image, truth = _read_and_decode(image_file, label_file, height, width, index, lookup)
        if size and tuple(size) != (height, width):
            image = tf.saturate_cast(tf.round(tf.image.resize(image, size, antialias=True)), tf.uint8)
        return image, truth

    examples = tf.data.Dataset.from_tensor_slices((image_files, label_files))
    examples = examples.map(load, num_parallel_calls=AUTOTUNE, deterministic=True)
    batches = examples.batch(batch_size, num_parallel_calls=AUTOTUNE, deterministic=True)
    return batches.map(_to_model_types, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)
