"""Checks of RESULTS/export (common/export.py) that the training tests share.

The export is loaded by a fresh Python process that imports nothing from this repository (cwd outside
it, no PYTHONPATH), as a client would, and its outputs on test images are compared with the trained
model's: final.weights.h5 loaded into the recipe's model, fed the same decoded images.
"""
import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from helpers import recipe_module

TOLERANCE = 1e-5

CLIENT = """
import json, sys
import numpy as np
import tensorflow as tf
export, out, *files = sys.argv[1:]
serve = tf.saved_model.load(export + "/1").signatures["serving_default"]
outputs = serve(images=tf.constant([open(path, "rb").read() for path in files]))
np.savez(out, **{name: value.numpy() for name, value in outputs.items()})
"""


def write_test_images(folder, size, channels, count=3, seed=0):
    """PNG files of the model's input size (so resizing keeps every pixel) and their uint8 arrays."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    paths, arrays = [], []
    for index in range(count):
        array = rng.integers(0, 256, (*size, channels), dtype=np.uint8)
        path = os.path.join(folder, f"image{index}.png")
        tf.io.write_file(path, tf.io.encode_png(array))
        paths.append(path)
        arrays.append(array)
    return paths, np.stack(arrays)


def served_outputs(export_dir, files, tmp_path):
    """serving_default's outputs on these files, computed by a process that knows nothing of the repo."""
    out = tmp_path / "served.npz"
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    process = subprocess.run([sys.executable, "-c", CLIENT, str(export_dir), str(out), *map(str, files)],
                             cwd=tmp_path, env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"}, capture_output=True, text=True,
                             timeout=300)
    assert process.returncode == 0, process.stderr[-4000:]
    with np.load(out) as data:
        return dict(data)


def signature_listing(export_dir) -> str:
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    process = subprocess.run([cli, "show", "--all", "--dir", str(export_dir / "1")], capture_output=True, text=True,
                             timeout=300)
    assert process.returncode == 0, process.stderr[-2000:]
    return process.stdout


def trained_model(recipe, build_args, results_dir):
    model = recipe_module(recipe, "train").build_model(*build_args) if recipe != "cityscapes-unet" else \
        recipe_module(recipe, "model").build_unet(*build_args)
    model.load_weights(results_dir / "final.weights.h5")
    return model


def check_export(results_dir, tmp_path, *, recipe, build_args, size, channels, to_model, classes):
    """Everything the docs promise about RESULTS/export for one run of `recipe`."""
    export_dir = results_dir / "export"
    info = json.loads((export_dir / "model.json").read_text())
    assert (info["recipe"], info["image_size"], info["channels"]) == (recipe, list(size), channels)
    assert (export_dir / "labels.txt").read_text().splitlines() == classes
    assert not [name for name in os.listdir(results_dir) if name.startswith(".export")]  # no temporary left
    listing = signature_listing(export_dir)
    assert "signature_def['serving_default']" in listing
    assert "inputs['images'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in listing
    for output in info["outputs"]:
        assert f"outputs['{output}']" in listing
    files, arrays = write_test_images(tmp_path / "images", size, channels)
    served = served_outputs(export_dir, files, tmp_path)
    expected = np.asarray(trained_model(recipe, build_args, results_dir)(to_model(arrays), training=False))
    np.testing.assert_allclose(served["probabilities"], expected, rtol=0, atol=TOLERANCE)
    ids = served["class_id"] if info["task"] == "classification" else served["class_ids"]
    np.testing.assert_array_equal(ids, served["probabilities"].argmax(-1))
    return served
