"""`invoke predict RECIPE --model EXPORT --input FILE|FOLDER --out DIR`: recipes/RECIPE/predict.py on this machine.

The model is the export a training run wrote (RESULTS/export, see docs/using.md): its newest version, as TF
Serving picks it, or the version folder given (RESULTS/export/N); predict.py reads only that version.
"""
from __future__ import annotations

import os
import sys

from invoke import Exit, task

from tasks import host


@task(
    positional=["recipe"],
    auto_shortflags=False,
    help={
        "recipe": "recipe whose predict.py to run",
        "model": "the export folder (RESULTS/export: its newest version), the results folder that holds it, "
                 "or one version folder (RESULTS/export/N)",
        "input": "an image file, or a folder of them",
        "out": "folder for predictions.csv (classification) or the PNG and JSON files (segmentation)",
        "batch-size": "images per call of the model",
        "top-k": "classification: classes listed per image",
        "dry": "print the command, run nothing",
    },
)
def predict(c, recipe, model=None, input=None, out=None, batch_size="32", top_k="3", dry=False):
    """Predict with an exported model: a CSV of classes, or overlay PNGs and class areas per image."""
    host.check_recipe(recipe, "predict")
    missing = [flag for flag, value in (("--model", model), ("--input", input), ("--out", out)) if not value]
    if missing:
        host.fail(f"invoke predict {recipe} needs {', '.join(missing)}")
    argv = [sys.executable, os.path.join("recipes", recipe, "predict.py"), "--model", model, "--input", input,
            "--out", out, "--batch-size", str(batch_size), "--top-k", str(top_k)]
    code = host.execute(argv, dry=dry)
    if code:
        raise Exit(code=code)
