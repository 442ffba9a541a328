"""Predictions from an exported model (RESULTS/export, common/export.py): what every predict.py runs.

It reads the export only (tf.saved_model.load, labels.txt, classes.json, model.json), never the
training code, and sends the files' bytes in batches to the serving_default signature:

- classification: OUT/predictions.csv with file, class, probability and the top k as `name:probability`;
- segmentation: OUT/NAME.png (the image at the model's input size, half covered by the class colours;
  NAME keeps the subfolders of a folder --input)
  and OUT/NAME.json (the fraction of the pixels of each class).

Every file is written to a temporary name and renamed. A file that cannot be decoded is named on one
line of stderr and skipped; at the end the run exits 2 and says how many were skipped.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import tempfile

from common.contract import (EXPORT_CLASSES_FILE, EXPORT_DIR, EXPORT_INFO_FILE, EXPORT_INPUT, EXPORT_LABELS_FILE,
                             EXPORT_SIGNATURE, EXPORT_VERSION, PREDICTIONS_FILE, UserError)


class PredictError(UserError):
    """A missing export or input, or inputs that could not be read: one line, exit 2."""


def parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", required=True,
                        help="the export folder (RESULTS/export), or the results folder that holds it")
    parser.add_argument("--input", required=True, help="an image file, or a folder of them (not recursive)")
    parser.add_argument("--out", required=True, help="folder for the predictions (created if missing)")
    parser.add_argument("--batch-size", type=int, default=32, help="images per call of the model")
    parser.add_argument("--top-k", type=int, default=3, help="classification: classes listed per image")
    return parser


def find_export(path: str) -> str:
    for candidate in (path, os.path.join(path, EXPORT_DIR), os.path.dirname(os.path.normpath(path))):
        if os.path.isfile(os.path.join(candidate, EXPORT_VERSION, "saved_model.pb")):
            return candidate
    raise PredictError(f"--model {path}: no exported model there (expected {EXPORT_DIR}/{EXPORT_VERSION}/"
                       "saved_model.pb, written at the end of a training run without --no-export)")


def list_inputs(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise PredictError(f"--input {path}: no such file or folder")
    files = []  # the folder and its subfolders (a val/ folder of classes, say), hidden ones left out
    for folder, subfolders, names in os.walk(path):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        files += [os.path.join(folder, name) for name in names if not name.startswith(".")]
    files.sort()
    if not files:
        raise PredictError(f"--input {path}: the folder holds no files")
    return files


def replace_file(path: str, write) -> None:
    """write(handle) into a temporary file beside `path`, then rename it to `path`."""
    handle, temporary = tempfile.mkstemp(prefix=".", suffix=".part", dir=os.path.dirname(path))
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


class Export:
    """The loaded export: its serving signature, what model.json says, the class names and colours."""

    def __init__(self, path: str):
        import tensorflow as tf

        self.tf = tf
        self.path = find_export(path)
        with open(os.path.join(self.path, EXPORT_INFO_FILE)) as handle:
            self.info = json.load(handle)
        with open(os.path.join(self.path, EXPORT_LABELS_FILE)) as handle:
            self.class_names = handle.read().splitlines()
        self.colours = None
        if self.info["task"] == "segmentation":
            with open(os.path.join(self.path, EXPORT_CLASSES_FILE)) as handle:
                self.colours = [entry["colour"] for entry in json.load(handle)]
        self.serve = tf.saved_model.load(os.path.join(self.path, EXPORT_VERSION)).signatures[EXPORT_SIGNATURE]

    def __call__(self, blobs: list[bytes]) -> dict:
        outputs = self.serve(**{EXPORT_INPUT: self.tf.constant(blobs)})
        return {name: value.numpy() for name, value in outputs.items()}


def predict_batch(model: Export, files: list[str], unreadable: list[str]):
    """(files, outputs) for the readable files of the batch; the others are named and added to `unreadable`."""
    blobs = [open(path, "rb").read() for path in files]
    try:
        return files, model(blobs)
    except model.tf.errors.InvalidArgumentError:
        pass
    good = []
    for path, blob in zip(files, blobs):  # one at a time, to name the files that fail
        try:
            model([blob])
            good.append(path)
        except model.tf.errors.InvalidArgumentError:
            print(f"unreadable: {path} (not an image file TensorFlow can decode)", file=sys.stderr, flush=True)
            unreadable.append(path)
    if not good:
        return [], None
    return good, model([open(path, "rb").read() for path in good])


def classification_rows(model: Export, files: list[str], outputs: dict, top_k: int) -> list[list]:
    rows = []
    for path, probabilities in zip(files, outputs["probabilities"]):
        order = probabilities.argsort()[::-1][:top_k]
        top = " ".join(f"{model.class_names[i]}:{probabilities[i]:.6f}" for i in order)
        rows.append([path, model.class_names[order[0]], f"{probabilities[order[0]]:.6f}", top])
    return rows


def write_segmentation(model: Export, path: str, class_ids, out: str, name: str) -> None:
    import numpy as np

    tf = model.tf
    image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    image = tf.cast(tf.round(tf.image.resize(image, model.info["image_size"])), tf.uint8).numpy()
    colours = np.asarray(model.colours, np.uint8)[class_ids]
    overlay = ((image.astype(np.uint16) + colours) // 2).astype(np.uint8)
    stem = os.path.join(out, os.path.splitext(name)[0])  # subfolders of --input are kept: no name clashes
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    png = tf.io.encode_png(overlay).numpy()
    replace_file(f"{stem}.png", lambda stream: stream.write(png))
    counts = np.bincount(class_ids.ravel(), minlength=len(model.class_names)) / class_ids.size
    areas = {"file": path, "size": list(class_ids.shape),
             "class_fractions": {name: float(counts[i]) for i, name in enumerate(model.class_names)}}
    replace_file(f"{stem}.json", lambda stream: stream.write(json.dumps(areas, indent=1).encode()))


def run(args, task: str) -> None:
    if args.batch_size < 1 or args.top_k < 1:
        raise PredictError("--batch-size and --top-k must be at least 1")
    files = list_inputs(args.input)
    model = Export(args.model)
    if model.info["task"] != task:
        raise PredictError(f"--model {model.path} is a {model.info['task']} model of {model.info['recipe']}, "
                           f"not a {task} model: use that recipe's predict.py")
    os.makedirs(args.out, exist_ok=True)
    rows, unreadable = [], []
    for start in range(0, len(files), args.batch_size):
        batch, outputs = predict_batch(model, files[start:start + args.batch_size], unreadable)
        if task == "classification" and batch:
            rows += classification_rows(model, batch, outputs, args.top_k)
        for path, class_ids in zip(batch, outputs["class_ids"] if task == "segmentation" and batch else []):
            name = os.path.relpath(path, args.input) if os.path.isdir(args.input) else os.path.basename(path)
            write_segmentation(model, path, class_ids, args.out, name)
        print(f"predict: {min(start + args.batch_size, len(files))}/{len(files)} files", flush=True)
    if task == "classification":
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(["file", "class", "probability", f"top_{args.top_k}"])
        writer.writerows(rows)
        replace_file(os.path.join(args.out, PREDICTIONS_FILE), lambda stream: stream.write(text.getvalue().encode()))
    print(f"predictions: {args.out} ({len(files) - len(unreadable)} of {len(files)} files)", flush=True)
    if unreadable:
        raise PredictError(f"{len(unreadable)} of {len(files)} input files could not be read (named above); "
                           f"the predictions of the others are in {args.out}")


def main(description: str, task: str, argv=None) -> None:
    from common import cli

    args = parser(description).parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's own log of each undecodable file
    cli.run_main(lambda: run(args, task))
