"""The trained model as a SavedModel for TF Serving and predict.py: RESULTS/export/ at the end of a run.

    RESULTS/export/1/saved_model.pb   signature serving_default: images (tf.string [None], encoded files)
    RESULTS/export/labels.txt         one class name per line, in class-id order
    RESULTS/export/classes.json       segmentation only: id, name and RGB colour of every class
    RESULTS/export/model.json         recipe, task, input size, channels, output names

The signature takes what a client has, the bytes of JPEG/PNG/BMP/GIF files; decoding, resizing to the
model's input size (bilinear, aspect ratio not kept, rounded to uint8) and the recipe's
normalisation happen inside the graph. Classification returns `probabilities` [N, classes] and
`class_id` [N]; segmentation returns `class_ids` [N, H, W] and `probabilities` [N, H, W, classes] at
the model's input size.

Only the chief writes, once per job, into a temporary sibling that is then renamed. The model is
rebuilt outside any distribution strategy and the trained weights are copied in, so that no
strategy variable (and no collective) is involved in tracing the export.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

import keras
import tensorflow as tf

from common.atomic import fsync_directory, fsync_tree, write_atomically
from common.contract import (EXPORT_CLASSES_FILE, EXPORT_DIR, EXPORT_INFO_FILE, EXPORT_INPUT, EXPORT_LABELS_FILE,
                             EXPORT_VERSION, class_name_problem)
from common.data import DataError

CLASSIFICATION, SEGMENTATION = "classification", "segmentation"


def decode_images(encoded, image_size, channels):
    """Encoded image files [N] -> uint8 [N, H, W, channels], resized as the recipes' pipelines do."""
    def decode(data):
        image = tf.io.decode_image(data, channels=channels, expand_animations=False)
        image = tf.image.resize(image, image_size)
        return tf.cast(tf.round(image), tf.uint8)

    return tf.map_fn(decode, encoded, fn_output_signature=tf.TensorSpec((*image_size, channels), tf.uint8))


def serving_function(model, task, image_size, channels, to_model):
    """The tf.function behind serving_default; `to_model` maps the uint8 batch to the model's input."""
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=EXPORT_INPUT)])
    def serve(images):
        probabilities = tf.cast(model(to_model(decode_images(images, image_size, channels)), training=False),
                                tf.float32)
        if task == CLASSIFICATION:
            return {"probabilities": probabilities, "class_id": tf.argmax(probabilities, axis=-1, output_type=tf.int32)}
        return {"class_ids": tf.argmax(probabilities, axis=-1, output_type=tf.int32), "probabilities": probabilities}

    return serve


def check_class_names(class_names) -> None:
    """A DataError for a name that cannot be one line of labels.txt. The data's readers refuse such
    names already; one that slipped past would shift every label after it."""
    for name in class_names:
        if class_name_problem(name):
            raise DataError(f"class name {name!r} {class_name_problem(name)}, so it cannot be a line of "
                            f"{EXPORT_LABELS_FILE}; rename the class")


def write_export(folder, model, *, recipe, task, class_names, image_size, channels, to_model, palette=None):
    """Write the export into `folder` (which must not exist yet); see the module docstring."""
    check_class_names(class_names)
    archive = keras.export.ExportArchive()
    archive.track(model)
    serve = serving_function(model, task, tuple(image_size), channels, to_model)
    archive.add_endpoint("serve", serve)  # "serve" is also written as the serving_default signature
    archive.write_out(os.path.join(folder, EXPORT_VERSION), verbose=False)
    write_atomically(os.path.join(folder, EXPORT_LABELS_FILE), "".join(f"{name}\n" for name in class_names))
    outputs = ["probabilities", "class_id"] if task == CLASSIFICATION else ["class_ids", "probabilities"]
    info = {"recipe": recipe, "task": task, "image_size": list(image_size), "channels": channels,
            "input": EXPORT_INPUT, "outputs": outputs}
    write_atomically(os.path.join(folder, EXPORT_INFO_FILE), json.dumps(info, indent=1))
    if task == SEGMENTATION:
        classes = [{"id": i, "name": name, "colour": list(colour)}
                   for i, (name, colour) in enumerate(zip(class_names, palette, strict=True))]
        write_atomically(os.path.join(folder, EXPORT_CLASSES_FILE), json.dumps(classes, indent=1))


def publish(results_dir, write) -> str:
    """Run write(temporary folder) beside RESULTS/export, then put it in place by renaming: its files
    are on disk (fsync_tree) before the rename and the rename after it (fsync of RESULTS), so that a
    crash never leaves an export with empty or zeroed files."""
    final = os.path.join(results_dir, EXPORT_DIR)
    temporary = tempfile.mkdtemp(prefix=f".{EXPORT_DIR}-", dir=results_dir)
    try:
        folder = os.path.join(temporary, EXPORT_DIR)
        write(folder)
        fsync_tree(folder)
        if os.path.exists(final):  # a resumed run replaces the export of the earlier one
            os.rename(final, os.path.join(temporary, "previous"))
        os.rename(folder, final)
        fsync_directory(results_dir)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return final


def export_model(launcher, results_dir, model, build, *, enabled=True, **spec) -> str | None:
    """At the end of a run, on every process: the chief exports `model`'s weights in a copy made by
    `build()` outside any strategy scope; the others wait for it. `spec`: see write_export."""
    if not enabled:
        return None
    check_class_names(spec["class_names"])  # on every process, so that none waits for a chief that stopped
    final = None
    if launcher.is_chief:
        plain = build()
        plain.set_weights([keras.ops.convert_to_numpy(w) for w in model.weights])
        final = publish(results_dir, lambda folder: write_export(folder, plain, **spec))
        print(f"export: {final} (signature serving_default, input {EXPORT_INPUT}: encoded images)", flush=True)
    launcher.barrier()
    return final
