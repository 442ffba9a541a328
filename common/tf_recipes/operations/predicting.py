"""Predictions from an exported model (RESULTS/export, common/tf_recipes/export.py): what every predict.py
runs.

--model is the export folder (a TF Serving model base: version folders 1/, 2/, ...), the results folder
that holds it, or one version folder. Given a model base, it uses the newest version, as TF Serving
does: the highest integer-named folder that holds a saved_model.pb (a .partial- folder that a killed
run left, and anything else there, is not a version). It reads that version only (tf.saved_model.load,
and labels.txt, classes.json and model.json in its assets.extra/), never the training code, and sends
the files' bytes in batches to the serving_default signature:

- classification: OUT/predictions.csv with file, class, probability, the top k as `name:probability`
  and model_version, the name of the version folder used;
- segmentation: OUT/NAME.png (the image at the model's input size, half covered by the class colours;
  NAME keeps the subfolders of a folder --input)
  and OUT/NAME.json (the fraction of the pixels of each class, and model_version).

The version used is also printed, with its folder, before the first prediction.

Output never lands on input. Before anything is written (and before the model is loaded) the run is
refused with one line, exit 2, when --out is, contains or lies inside --input or the model's folder
(symlinks resolved, each input file included), when --out is a file, when two inputs would be written
to the same output (segmentation: a.jpg and a.png are both OUT/a.png), or when --out already holds files
that no predict run wrote: a run leaves PREDICT_MARKER in --out, and only a folder that is missing,
empty or holds that marker is written to.

Every file is written to a temporary name and renamed. predictions.csv is built as
predictions.csv.partial, its rows appended and flushed as each batch finishes, and renamed at the end:
a run stopped by an unexpected error keeps the rows done so far there. A file that cannot be read
(permissions, a broken symlink, an empty file, bytes TensorFlow cannot decode) and an entry of --input
that is no regular file (a FIFO, a socket, a device: never opened) is named on one line of stderr and
skipped; at the end the run exits 2 and says how many were skipped.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys

from tf_recipes import user_paths
from tf_recipes.atomic import write_atomically
from tf_recipes.cli import positive_int
from tf_recipes.contract import (
    EXPORT_CLASSES_FILE,
    EXPORT_DIR,
    EXPORT_INFO_FILE,
    EXPORT_INPUT,
    EXPORT_LABELS_FILE,
    UserError,
)

EXPORT_SIGNATURE = "serving_default"  # the export's signature that predict.py calls
PREDICTIONS_FILE = "predictions.csv"  # what a classification predict.py writes in --out
PREDICT_MARKER = ".tf-recipes-predict"  # in --out: a predict run wrote here, a later run may write again
PARTIAL_SUFFIX = ".partial"  # predictions.csv while it is being written
VERSION_COLUMN = "model_version"  # predictions.csv and each segmentation JSON: the version folder used


class PredictError(UserError):
    """A missing export or input, or inputs that could not be read: one line, exit 2."""


def parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--model",
        required=True,
        help="the export folder (RESULTS/export: its newest version is used), the results "
        "folder that holds it, or one version folder (RESULTS/export/N)",
    )
    parser.add_argument(
        "--input",
        required=True,
        help="an image file, or a folder of them (its subfolders too; hidden ones left out)",
    )
    parser.add_argument("--out", required=True, help="folder for the predictions (created if missing)")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="images per call of the model")
    parser.add_argument(
        "--top-k", type=positive_int, default=3, help="classification: classes listed per image"
    )
    return parser


def find_export(path: str) -> tuple[str, str]:
    """(the version folder to load, its name): `path` itself when it is a version folder, else the
    newest version of `path` or of `path`/export."""
    # here, not at the top: it loads TensorFlow, which the checks before do not need
    from tf_recipes import export

    if os.path.isfile(os.path.join(path, export.SAVED_MODEL_FILE)):
        return path, os.path.basename(os.path.normpath(path))
    base = os.path.join(path, EXPORT_DIR) if os.path.isdir(os.path.join(path, EXPORT_DIR)) else path
    found = export.versions(base)
    if found:
        return os.path.join(base, found[-1]), found[-1]
    if not os.path.isdir(path):
        kind = "a file, not a folder" if os.path.exists(path) else "no such folder"
        raise PredictError(
            f"--model {path}: no exported model there ({kind}); give the export folder of a "
            f"training run (RESULTS/{EXPORT_DIR}) or one of its version folders"
        )
    raise PredictError(
        f"--model {path}: no exported model there: {base} holds no version folder (1/, 2/, "
        f"... with {export.SAVED_MODEL_FILE} in it); point --model at RESULTS/{EXPORT_DIR} of "
        "a run that finished without --no-export, or at one of its version folders"
    )


def model_base(path: str) -> str:
    """The folder find_export reads the model from (a version folder, or the model base that holds the
    versions), found without loading TensorFlow: what --out must stay out of."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    return os.path.join(path, EXPORT_DIR) if os.path.isdir(os.path.join(path, EXPORT_DIR)) else path


def extra_file(folder: str, name: str) -> str:
    """assets.extra/NAME of the version folder `folder`, which the export writes beside the SavedModel."""
    from tf_recipes import export

    path = os.path.join(folder, export.EXTRA_DIR, name)
    if not os.path.isfile(path):
        raise PredictError(
            f"--model {folder}: no {export.EXTRA_DIR}/{name} in that version folder (an "
            "export written before versioned folders kept it beside the version: move "
            f"{EXPORT_LABELS_FILE}, {EXPORT_INFO_FILE} and {EXPORT_CLASSES_FILE} into "
            f"{os.path.join(folder, export.EXTRA_DIR)})"
        )
    return path


def list_inputs(path: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The regular files of --input (itself, or the folder's and its subfolders', hidden ones left out),
    and its other entries with what each is (a FIFO, a socket, a dangling link: named and skipped, never
    opened)."""
    what = user_paths.what_is(path)
    if what == user_paths.FILE:
        return [path], []
    if what != user_paths.FOLDER:
        raise PredictError(
            f"--input {path}: "
            f"{'no such file or folder' if what == user_paths.MISSING else what}; give an "
            "image file or a folder of them"
        )
    listing = user_paths.list_files(path, recursive=True, hidden=False)  # a val/ folder of classes, say
    if not listing.files and not listing.others:
        raise PredictError(f"--input {path}: the folder holds no files")
    return listing.files, listing.others


def output_stem(args, path: str) -> str:
    """Segmentation: OUT/STEM.png and OUT/STEM.json for this input (subfolders of a folder --input kept)."""
    name = os.path.relpath(path, args.input) if os.path.isdir(args.input) else os.path.basename(path)
    return os.path.splitext(name)[0]


def check_paths(args, files: list[str], task: str) -> None:
    """Refuse, before anything is written, a run whose outputs could land on its inputs or on other files."""
    out = os.path.realpath(args.out)
    problem = user_paths.output_problem(
        "--out", args.out, {"--input": args.input, "--model": model_base(args.model)}
    )
    if problem:
        raise PredictError(problem)
    for path in files:
        if user_paths.inside(os.path.realpath(path), out):
            raise PredictError(
                f"--input file {path} is inside --out {args.out} (as "
                f"{os.path.realpath(path)}): choose an --out outside the inputs"
            )
    problem = user_paths.flags_problem({}, {"--out": args.out})
    if problem:
        raise PredictError(problem)
    if os.path.isdir(args.out):
        present = sorted(os.listdir(args.out))
        if present and PREDICT_MARKER not in present:
            raise PredictError(
                f"--out {args.out} already holds files no predict run wrote (such as "
                f"{present[0]}): choose a new or empty folder"
            )
    if task == "segmentation":
        owners = {}
        for path in files:
            stem = output_stem(args, path)
            if stem in owners:
                raise PredictError(
                    f"--input files {owners[stem]} and {path} would both be written as "
                    f"{os.path.join(args.out, stem)}.png and .json: rename one of them"
                )
            owners[stem] = path
        for stem, path in owners.items():  # OUT/a.png written for a.jpg, and a folder a.png/ of inputs
            parent = os.path.dirname(stem)
            while parent:
                for suffix in (".png", ".json"):
                    if parent.endswith(suffix) and parent[: -len(suffix)] in owners:
                        raise PredictError(
                            f"--input files {owners[parent[: -len(suffix)]]} and {path} would "
                            "be written as a file and into a folder both named "
                            f"{os.path.join(args.out, parent)}: rename one of them"
                        )
                parent = os.path.dirname(parent)


class Export:
    """The loaded export: its serving signature, what model.json says, the class names and colours."""

    def __init__(self, path: str):
        import tensorflow as tf

        self.tf = tf
        self.path, self.version = find_export(path)  # the version folder, and its name
        with open(extra_file(self.path, EXPORT_INFO_FILE)) as handle:
            self.info = json.load(handle)
        with open(extra_file(self.path, EXPORT_LABELS_FILE)) as handle:
            self.class_names = handle.read().splitlines()
        self.colours = None
        if self.info["task"] == "segmentation":
            with open(extra_file(self.path, EXPORT_CLASSES_FILE)) as handle:
                self.colours = [entry["colour"] for entry in json.load(handle)]
        self.serve = tf.saved_model.load(self.path).signatures[EXPORT_SIGNATURE]

    def __call__(self, blobs: list[bytes]) -> dict:
        outputs = self.serve(**{EXPORT_INPUT: self.tf.constant(blobs)})
        return {name: value.numpy() for name, value in outputs.items()}


def skip(path: str, why: str, unreadable: list[str]) -> None:
    print(f"unreadable: {path} ({why})", file=sys.stderr, flush=True)
    unreadable.append(path)


def read_input(path: str, unreadable: list[str]):
    """The bytes of one input file, or None once it is named as unreadable."""
    try:
        with open(path, "rb") as handle:
            blob = handle.read()
    except OSError as error:  # permissions, a broken symlink, a folder, a file gone since it was listed
        skip(path, f"cannot be read: {error.strerror or type(error).__name__}", unreadable)
        return None
    if not blob:
        skip(path, "an empty file", unreadable)
        return None
    return blob


def predict_batch(model: Export, files: list[str], unreadable: list[str]):
    """(files, their bytes, outputs) for the readable files of the batch; the others are named and added to
    `unreadable`. The bytes are read once: what is predicted is what a segmentation overlay is drawn on."""
    tf = model.tf
    read = [(path, blob) for path in files if (blob := read_input(path, unreadable)) is not None]
    if read:
        try:
            return [path for path, _ in read], [blob for _, blob in read], model([blob for _, blob in read])
        except tf.errors.ResourceExhaustedError:
            raise  # out of memory: not the inputs' fault
        except tf.errors.OpError:
            pass
    good = []
    for path, blob in read:  # one at a time, to name the files that fail
        try:
            model([blob])
            good.append((path, blob))
        except tf.errors.ResourceExhaustedError:
            raise
        except tf.errors.OpError:
            skip(path, "not an image file TensorFlow can decode", unreadable)
    if not good:
        return [], [], None
    return [path for path, _ in good], [blob for _, blob in good], model([blob for _, blob in good])


def classification_rows(model: Export, files: list[str], outputs: dict, top_k: int) -> list[list]:
    rows = []
    for path, probabilities in zip(files, outputs["probabilities"], strict=True):
        order = probabilities.argsort()[::-1][:top_k]
        top = " ".join(f"{model.class_names[i]}:{probabilities[i]:.6f}" for i in order)
        rows.append([path, model.class_names[order[0]], f"{probabilities[order[0]]:.6f}", top, model.version])
    return rows


def write_segmentation(model: Export, path: str, blob: bytes, class_ids, out: str, stem: str) -> None:
    import numpy as np

    tf = model.tf
    image = tf.io.decode_image(blob, channels=3, expand_animations=False)
    size = model.info.get("output_size", model.info["image_size"])  # the prediction's size
    image = tf.cast(tf.round(tf.image.resize(image, size)), tf.uint8).numpy()
    colours = np.asarray(model.colours, np.uint8)[class_ids]
    overlay = ((image.astype(np.uint16) + colours) // 2).astype(np.uint8)
    stem = os.path.join(out, stem)  # subfolders of --input are kept; check_paths refused clashing names
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    png = tf.io.encode_png(overlay).numpy()
    write_atomically(f"{stem}.png", png)
    counts = np.bincount(class_ids.ravel(), minlength=len(model.class_names)) / class_ids.size
    areas = {
        "file": path,
        "size": list(class_ids.shape),
        "class_fractions": {name: float(counts[i]) for i, name in enumerate(model.class_names)},
        VERSION_COLUMN: model.version,
    }
    write_atomically(f"{stem}.json", json.dumps(areas, indent=1))


def run(args, task: str) -> None:
    if args.batch_size < 1 or args.top_k < 1:
        raise PredictError("--batch-size and --top-k must be at least 1")
    files, others = list_inputs(args.input)
    check_paths(args, files, task)
    model = Export(args.model)
    if model.info["task"] != task:
        raise PredictError(
            f"--model {model.path} is a {model.info['task']} model of {model.info['recipe']}, "
            f"not a {task} model: use that recipe's predict.py"
        )
    print(f"predict: model version {model.version} ({model.path})", flush=True)
    problem = user_paths.make_folder("--out", args.out)
    if problem:
        raise PredictError(problem)
    with open(os.path.join(args.out, PREDICT_MARKER), "w") as handle:
        handle.write(
            "written by tf_recipes.operations.predicting: a later predict run may write here again\n"
        )
    unreadable, table, done = [], None, 0
    for path, what in others:
        skip(path, f"{what}, not a regular file", unreadable)
    final = os.path.join(args.out, PREDICTIONS_FILE)
    partial = final + PARTIAL_SUFFIX
    try:
        if task == "classification":
            table = open(partial, "w", newline="")
            writer = csv.writer(table)
            writer.writerow(["file", "class", "probability", f"top_{args.top_k}", VERSION_COLUMN])
            table.flush()
        for start in range(0, len(files), args.batch_size):
            batch, blobs, outputs = predict_batch(model, files[start : start + args.batch_size], unreadable)
            if task == "classification" and batch:
                writer.writerows(classification_rows(model, batch, outputs, args.top_k))
                table.flush()  # the rows of every finished batch survive a later failure
            if task == "segmentation":
                answers = outputs["class_ids"] if batch else []
                for path, blob, class_ids in zip(batch, blobs, answers, strict=True):
                    write_segmentation(model, path, blob, class_ids, args.out, output_stem(args, path))
            done += len(batch)
            print(f"predict: {min(start + args.batch_size, len(files))}/{len(files)} files", flush=True)
        if table is not None:
            table.close()
            os.replace(partial, final)
    except BaseException:
        if table is not None:
            table.close()
            print(
                f"predict: stopped; the predictions of the {done} files done are in {partial}",
                file=sys.stderr,
                flush=True,
            )
        raise
    total = len(files) + len(others)
    print(f"predictions: {args.out} ({total - len(unreadable)} of {total} files)", flush=True)
    if unreadable:
        raise PredictError(
            f"{len(unreadable)} of {total} input files could not be read (named above); "
            f"the predictions of the others are in {args.out}"
        )


def main(description: str, task: str, argv=None) -> None:
    from tf_recipes import cli

    args = parser(description).parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's own log of each undecodable file
    cli.run_main(lambda: run(args, task))
