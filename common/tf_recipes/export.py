"""The trained model as a SavedModel for TF Serving and predict.py: at the end of every run the chief adds
version N to RESULTS/export, a TF Serving model base (layout: docs/using.md). A version is written into
.partial-XXXXXXXX/ beside PARTIAL_MARKER, fsynced and renamed, so it appears whole or not at all.

What a run exports is one `ExportSpec`, given to the Trainer and checked before the first step. Its
signature takes encoded image files, decodes and resizes them in the graph, and hands the raw pixels to the
model: every recipe's model holds its own preprocessing, so that training, evaluation, this export and
predict.py cannot prepare an image differently.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from typing import Callable

import keras
import tensorflow as tf

from tf_recipes.atomic import fsync_directory, fsync_tree, write_atomically
from tf_recipes.contract import EXPORT_CLASSES_FILE, EXPORT_DIR, EXPORT_INFO_FILE, EXPORT_INPUT
from tf_recipes.contract import EXPORT_LABELS_FILE, UserError, class_name_problem
from tf_recipes.data import DataError
from tf_recipes.reporting import disk_full_is_one_line, nbytes

CLASSIFICATION, SEGMENTATION = "classification", "segmentation"
SAVED_MODEL_FILE = "saved_model.pb"  # RESULTS/export/N/saved_model.pb: what makes N a version
EXTRA_DIR = "assets.extra"  # RESULTS/export/N/assets.extra: labels.txt, model.json, classes.json
VERSION_NAME = re.compile(r"[0-9]+")  # the names TF Serving reads as versions
PARTIAL_PREFIX = ".partial-"  # RESULTS/export/.partial-XXXXXXXX: a version being written
# in such a folder: tf_recipes.export made it; a later export deletes it
PARTIAL_MARKER = ".tf-recipes-export"
_MARKER_TEXT = "written by tf_recipes.export: a version being written; a later export deletes this folder\n"


class ExportError(UserError):
    """RESULTS/export cannot take a new version: one line, exit 2."""


def decode_images(encoded, image_size, channels, antialias=False):
    """Encoded image files [N] -> uint8 [N, H, W, channels], resized (bilinear) as the recipes' pipelines
    do."""

    def decode(data):
        image = tf.io.decode_image(data, channels=channels, expand_animations=False)
        image = tf.image.resize(image, image_size, antialias=antialias)
        return tf.cast(tf.round(image), tf.uint8)

    return tf.map_fn(decode, encoded, fn_output_signature=tf.TensorSpec((*image_size, channels), tf.uint8))


@dataclass(frozen=True)
class ExportSpec:
    """What finish() exports: the task, the classes, the images the signature takes, and how to build a
    plain copy of the model (outside any distribution strategy) for the trained weights."""

    task: str  # CLASSIFICATION: one class an image; SEGMENTATION: one class a pixel
    class_names: list[str]  # the model's outputs, in order: labels.txt, one name a line
    image_size: tuple[int, int]  # (height, width) every decoded image is resized to (bilinear)
    channels: int  # 1 (grayscale) or 3 (RGB): what the decoder makes of any image file
    build: Callable[[], keras.Model]  # a new model of the trained one's architecture
    palette: list | None = None  # segmentation: an (R, G, B) colour per class (classes.json)
    output_size: tuple[int, int] | None = None  # segmentation: the size of the answer (default image_size)
    antialias: bool = False  # resize with an antialiasing filter (as the recipe's own pipeline shrinks)

    def checked(self) -> ExportSpec:
        """This spec, or a one-line ExportError that names the field: before training, not after it. A class
        name that cannot be one line of labels.txt (one would shift every label after it) is a DataError."""

        def size_problem(field, value):
            pair = isinstance(value, (tuple, list)) and len(value) == 2
            whole = pair and all(isinstance(n, int) and n > 0 for n in value)
            return not whole and f"{field} {value!r} is not (height, width) in pixels"

        problems = [
            self.task not in (CLASSIFICATION, SEGMENTATION)
            and f"task {self.task!r} is not {CLASSIFICATION!r} or {SEGMENTATION!r}",
            not self.class_names and "class_names is empty",
            size_problem("image_size", self.image_size),
            self.channels not in (1, 3) and f"channels {self.channels!r} is not 1 or 3",
            not callable(self.build) and "build is not a function that makes the model",
            self.task == SEGMENTATION
            and len(self.palette or ()) != len(self.class_names or ())
            and f"palette has {len(self.palette or ())} colours for {len(self.class_names or ())} classes",
            self.output_size is not None and size_problem("output_size", self.output_size),
        ]
        if problem := next((p for p in problems if p), None):
            raise ExportError(
                f"the export this run would write is wrong: {problem} (the recipe's ExportSpec)"
            )
        for name in self.class_names:
            if class_name_problem(name):
                raise DataError(
                    f"class name {name!r} {class_name_problem(name)}, so it cannot be a line of "
                    f"{EXPORT_LABELS_FILE}; rename the class"
                )
        return self


def write_export(folder, model, spec: ExportSpec, recipe: str):
    """Write one version into the new `folder`: the SavedModel and, in assets.extra/, what describes it."""
    task, class_names, channels = spec.task, spec.class_names, spec.channels
    image_size, output_size = tuple(spec.image_size), tuple(spec.output_size or spec.image_size)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=EXPORT_INPUT)])
    def serve(images):
        """The signature TF Serving and predict.py call: encoded files in, the model's answer out."""
        pixels = decode_images(images, image_size, channels, spec.antialias)  # the model preprocesses them
        probabilities = tf.cast(model(tf.cast(pixels, model.inputs[0].dtype), training=False), tf.float32)
        if task == SEGMENTATION and output_size != image_size:
            probabilities = tf.image.resize(probabilities, output_size)
        class_ids = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        if task == CLASSIFICATION:
            return {"probabilities": probabilities, "class_id": class_ids}
        return {"class_ids": class_ids, "probabilities": probabilities}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serve", serve)  # "serve" is also written as the serving_default signature
    archive.write_out(folder, verbose=False)
    extra = os.path.join(folder, EXTRA_DIR)
    os.makedirs(extra)
    write_atomically(os.path.join(extra, EXPORT_LABELS_FILE), "".join(f"{name}\n" for name in class_names))
    outputs = ["probabilities", "class_id"] if task == CLASSIFICATION else ["class_ids", "probabilities"]
    info = dict(recipe=recipe, task=task, image_size=list(image_size), channels=channels, input=EXPORT_INPUT)
    info["outputs"] = outputs
    if task == SEGMENTATION:  # the size of class_ids and probabilities, and every class's colour
        info["output_size"] = list(output_size)
        pairs = zip(class_names, spec.palette, strict=True)
        classes = [{"id": i, "name": name, "colour": list(colour)} for i, (name, colour) in enumerate(pairs)]
        write_atomically(os.path.join(extra, EXPORT_CLASSES_FILE), json.dumps(classes, indent=1))
    write_atomically(os.path.join(extra, EXPORT_INFO_FILE), json.dumps(info, indent=1))


def versions(base: str) -> list[str]:
    """The version folders (integer names holding a saved_model.pb) of the model base `base`, oldest first."""
    try:
        names = os.listdir(base)
    except (FileNotFoundError, NotADirectoryError):
        return []
    numbered = (name for name in names if VERSION_NAME.fullmatch(name))
    return sorted((n for n in numbered if os.path.isfile(os.path.join(base, n, SAVED_MODEL_FILE))), key=int)


def next_version(results_dir: str) -> int:
    """The number of the version a run adds to RESULTS/export; an ExportError for what a server cannot
    take."""
    base = os.path.join(results_dir, EXPORT_DIR)
    if os.path.lexists(base) and not os.path.isdir(base):
        raise ExportError(
            f"{base} is not a folder, and the exported model's versions go into that folder as "
            f"{base}/1, 2, ...: move it away, choose another --results-dir, or pass --no-export"
        )
    found = versions(base)
    for name in sorted(os.listdir(base) if os.path.isdir(base) else []):
        if VERSION_NAME.fullmatch(name) and name not in found:
            path = os.path.join(base, name)
            kind = "a folder without saved_model.pb" if os.path.isdir(path) else "not a folder"
            raise ExportError(
                f"{path} is named like a model version but is {kind}, and TF Serving would try to load it: "
                f"move it out of {base} (or delete it), or choose another --results-dir"
            )
    return max((int(name) for name in found), default=0) + 1


def publish(results_dir, write) -> str:
    """Run write(temporary folder) inside RESULTS/export, then make that folder, durably, the next version."""
    base = os.path.join(results_dir, EXPORT_DIR)
    next_version(results_dir)  # refuse before writing anything
    if not os.path.isdir(base):
        os.makedirs(base)
        fsync_directory(results_dir)
    for name in sorted(os.listdir(base)):  # what an export killed before its rename left, marked as its own
        path = os.path.join(base, name)
        marker = os.path.join(path, PARTIAL_MARKER)
        if name.startswith(PARTIAL_PREFIX) and not os.path.islink(path) and os.path.isfile(marker):
            shutil.rmtree(path, ignore_errors=True)
    partial = tempfile.mkdtemp(prefix=PARTIAL_PREFIX, dir=base)
    write_atomically(os.path.join(partial, PARTIAL_MARKER), _MARKER_TEXT)
    folder = os.path.join(partial, "version")  # renamed to RESULTS/export/N when whole
    try:
        write(folder)
        fsync_tree(folder)
        # counted again: the folder may have changed
        final = os.path.join(base, str(next_version(results_dir)))
        os.rename(folder, final)  # no folder N exists: next_version has checked every integer name
        fsync_directory(base)
    finally:  # a write that failed leaves nothing; one killed leaves the marked folder for the next export
        shutil.rmtree(partial, ignore_errors=True)
    return final


def export_model(launcher, results_dir, model, spec: ExportSpec, recipe: str) -> str | None:
    """On every process: the chief exports `model`'s weights in `spec.build()`'s copy (outside any
    strategy)."""
    # Distributed: the chief's RESULTS/export decides, and every process learns of a refusal
    refused = f"the chief refused to write the export into {results_dir} (its error line says why)"
    launcher.chief_decides(lambda: next_version(results_dir), ExportError(refused))
    final = None
    if launcher.is_chief:  # Distributed: only the chief writes the export
        plain = spec.build()
        plain.set_weights([keras.ops.convert_to_numpy(w) for w in model.weights])
        if len(plain.outputs) > 1:  # auxiliary heads serve training only: the export answers with the first
            plain = keras.Model(plain.inputs, plain.outputs[0], name=plain.name)
        # A full or read-only disk: one line; publish leaves nothing half-written and the versions before
        # intact
        base = os.path.join(results_dir, EXPORT_DIR)
        with disk_full_is_one_line(base, nbytes(plain.weights), "the export"):
            final = publish(results_dir, lambda folder: write_export(folder, plain, spec, recipe))
        print(
            f"export: {final} (signature serving_default, input {EXPORT_INPUT}: encoded images)", flush=True
        )
    launcher.barrier()
    return final
