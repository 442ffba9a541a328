"""predict's throughput against Keras model.predict, on the same model and the same images, in one process.

    .venv/bin/python -m ci.bench.predict --results RESULTS --images 512 --batch-size 32 --rounds 3 \
        --json docs/bench/predict.json

RESULTS is a training run's results folder (final.weights.h5, results.json and export/, whose newest version
is the one the final weights were exported into). The images are
generated PNG files of the model's input size. The export is timed as predict.py calls it: the encoded
files' bytes in batches of --batch-size into serving_default, which decodes, resizes and normalises in
the graph. model.predict is the recipe's model with final.weights.h5, given the same images already
decoded and normalised (its decoding is not timed), at the same batch size. Each side has one untimed
warm-up pass; the two alternate over --rounds, and the medians are reported with their ratio.
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tf_recipes import export, user_paths  # noqa: E402
from tf_recipes.contract import (EXIT_USER_ERROR, EXPORT_DIR, EXPORT_INFO_FILE, EXPORT_INPUT,  # noqa: E402
                                 FINAL_WEIGHTS_FILE, RESULTS_FILE)
from tf_recipes.operations.predicting import EXPORT_SIGNATURE  # noqa: E402


def recipe_train_module(recipe):
    folder = os.path.join(ROOT, "recipes", recipe)
    sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"{recipe.replace('-', '_')}_train", os.path.join(folder, "train.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def keras_model(results_dir, info):
    """The recipe's model with the run's final weights, and how its input is made from uint8 images (the
    model holds its own preprocessing: the pixels, in the model's input type)."""
    with open(os.path.join(results_dir, RESULTS_FILE)) as handle:
        results = json.load(handle)
    train = recipe_train_module(info["recipe"])
    if info["recipe"] == "cassava-resnet":
        model = train.build_model(info["image_size"][0], None)
    elif info["recipe"] == "cityscapes-unet":
        # results.json written before the normalisation was recorded came from batch-norm models
        model = train.build_unet(results["filters"], results["depth"],
                                 normalization=results.get("normalization", "batch"))
    else:
        model = train.build_model()
    model.load_weights(os.path.join(results_dir, FINAL_WEIGHTS_FILE))
    return model, (lambda images: images.astype(model.inputs[0].dtype))


def make_images(count, size, channels, seed):
    rng = np.random.default_rng(seed)
    arrays = rng.integers(0, 256, (count, *size, channels), dtype=np.uint8)
    return arrays, [tf.io.encode_png(array).numpy() for array in arrays]


def time_export(serve, blobs, batch_size):
    started = time.perf_counter()
    for start in range(0, len(blobs), batch_size):
        outputs = serve(**{EXPORT_INPUT: tf.constant(blobs[start:start + batch_size])})
        next(iter(outputs.values())).numpy()
    return len(blobs) / (time.perf_counter() - started)


def time_keras(model, inputs, batch_size):
    started = time.perf_counter()
    model.predict(inputs, batch_size=batch_size, verbose=0)
    return len(inputs) / (time.perf_counter() - started)


def measure(args) -> dict:
    base = os.path.join(args.results, EXPORT_DIR)
    found = export.versions(base)
    if not found:
        print(f"error: --results {args.results}: {base} holds no version folder (1/, 2/, ...); give the results "
              "folder of a run that finished without --no-export", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    version = os.path.join(base, found[-1])  # the newest: what the run's final weights were exported into
    with open(os.path.join(version, export.EXTRA_DIR, EXPORT_INFO_FILE)) as handle:
        info = json.load(handle)
    serve = tf.saved_model.load(version).signatures[EXPORT_SIGNATURE]
    model, to_model = keras_model(args.results, info)
    arrays, blobs = make_images(args.images, info["image_size"], info["channels"], args.seed)
    inputs = to_model(arrays)
    time_export(serve, blobs, args.batch_size)  # warm-up: tracing, thread pools
    time_keras(model, inputs, args.batch_size)
    export_rates, keras_rates = [], []
    for _ in range(args.rounds):
        export_rates.append(time_export(serve, blobs, args.batch_size))
        keras_rates.append(time_keras(model, inputs, args.batch_size))
    export_rate, keras_rate = statistics.median(export_rates), statistics.median(keras_rates)
    return {
        "recipe": info["recipe"], "image_size": info["image_size"], "images": args.images,
        "batch_size": args.batch_size, "rounds": args.rounds,
        "export_images_per_sec": round(export_rate, 1), "keras_predict_images_per_sec": round(keras_rate, 1),
        "ratio": round(export_rate / keras_rate, 3),
        "export_rounds": [round(rate, 1) for rate in export_rates],
        "keras_rounds": [round(rate, 1) for rate in keras_rates],
        "export_includes": "PNG decoding, resizing and normalisation in the graph",
        "keras_predict_includes": "the model only (inputs decoded and normalised beforehand)",
        "command": "python -m ci.bench.predict " + " ".join(sys.argv[1:]),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", required=True, help="a training run's results folder, with export/")
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the report here")
    args = parser.parse_args(argv)
    user_paths.exit_if(user_paths.flags_problem({"--results": args.results}, files={"--json": args.json}))
    report = measure(args)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        user_paths.exit_if(user_paths.make_folder(*user_paths.folder_of("--json", args.json)))
        with open(args.json, "w") as handle:
            handle.write(text + "\n")
    return report


if __name__ == "__main__":
    main()
