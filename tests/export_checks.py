"""Checks of RESULTS/export (common/tf_recipes/export.py) that the training tests share.

A version folder RESULTS/export/N is loaded by a fresh Python process that imports nothing from this
repository (cwd outside it, no PYTHONPATH), as a client would, and its outputs on test images are
compared with the trained model's: final.weights.h5 loaded into the recipe's model, fed the same
decoded images. The newest version is the one the run's final weights went into.
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
version, out, *files = sys.argv[1:]
serve = tf.saved_model.load(version).signatures["serving_default"]
outputs = serve(images=tf.constant([open(path, "rb").read() for path in files]))
np.savez(out, **{name: value.numpy() for name, value in outputs.items()})
"""


def snapshot(path):
    """Every file and folder at or under `path`: a file's bytes, a symlink's target, a folder as None."""
    if not os.path.isdir(path) or os.path.islink(path):
        return {str(path): os.readlink(path) if os.path.islink(path) else open(path, "rb").read()}
    entries = {}
    for root, folders, names in os.walk(path):
        entries[root] = None
        for name in names + [name for name in folders if os.path.islink(os.path.join(root, name))]:
            entry = os.path.join(root, name)
            entries[entry] = os.readlink(entry) if os.path.islink(entry) else open(entry, "rb").read()
    return entries


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


def version_folders(results_dir) -> list[str]:
    """The integer-named folders of RESULTS/export, oldest first: the versions a server would see."""
    export_dir = results_dir / "export"
    return sorted((name for name in os.listdir(export_dir) if name.isdigit()), key=int)


def newest_version(results_dir):
    """RESULTS/export/N with the highest N."""
    return results_dir / "export" / version_folders(results_dir)[-1]


def extra(results_dir, name):
    """The text of assets.extra/NAME (labels.txt, model.json, classes.json) of the newest version."""
    return (newest_version(results_dir) / "assets.extra" / name).read_text()


def served_outputs(version_dir, files, tmp_path):
    """serving_default's outputs on these files of the version folder `version_dir`, computed by a
    process that knows nothing of the repo."""
    out = tmp_path / "served.npz"
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    process = subprocess.run([sys.executable, "-c", CLIENT, str(version_dir), str(out), *map(str, files)],
                             cwd=tmp_path, env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"}, capture_output=True, text=True,
                             timeout=300)
    assert process.returncode == 0, process.stderr[-4000:]
    with np.load(out) as data:
        return dict(data)


def signature_listing(version_dir) -> str:
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    process = subprocess.run([cli, "show", "--all", "--dir", str(version_dir)], capture_output=True, text=True,
                             timeout=300)
    assert process.returncode == 0, process.stderr[-2000:]
    return process.stdout


def trained_model(recipe, build_args, results_dir):
    model = recipe_module(recipe, "train").build_model(*build_args) if recipe != "cityscapes-unet" else \
        recipe_module(recipe, "model").build_unet(*build_args)
    model.load_weights(results_dir / "final.weights.h5")
    return model


def check_export(results_dir, tmp_path, *, recipe, build_args, size, channels, classes):
    """Everything the docs promise about RESULTS/export for one run of `recipe`: its newest version. The
    served probabilities are the trained model's on the same raw pixels (the model holds its preprocessing)."""
    export_dir = results_dir / "export"
    version = newest_version(results_dir)
    info = json.loads(extra(results_dir, "model.json"))
    expected_extras = ["classes.json"] * (info["task"] == "segmentation") + ["labels.txt", "model.json"]
    assert sorted(os.listdir(version / "assets.extra")) == expected_extras  # what lay beside the version before
    assert (info["recipe"], info["image_size"], info["channels"]) == (recipe, list(size), channels)
    assert extra(results_dir, "labels.txt").splitlines() == classes
    assert sorted(os.listdir(export_dir)) == sorted(version_folders(results_dir))  # no .partial- folder left
    listing = signature_listing(version)
    assert "signature_def['serving_default']" in listing
    assert "inputs['images'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in listing
    for output in info["outputs"]:
        assert f"outputs['{output}']" in listing
    files, arrays = write_test_images(tmp_path / "images", size, channels)
    served = served_outputs(version, files, tmp_path)
    model = trained_model(recipe, build_args, results_dir)
    expected = np.asarray(model(arrays.astype(model.inputs[0].dtype), training=False))
    np.testing.assert_allclose(served["probabilities"], expected, rtol=0, atol=TOLERANCE)
    ids = served["class_id"] if info["task"] == "classification" else served["class_ids"]
    np.testing.assert_array_equal(ids, served["probabilities"].argmax(-1))
    return served
