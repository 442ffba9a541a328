"""tf_recipes: the library every recipe's train.py and predict.py import (the distribution tf-recipes,
`pip install /path/to/tf-recipes`; its public API: docs/library.md). Everything that differs between
launchers lives here, so the recipes stay plain. Importing the package loads nothing (no TensorFlow).

What a training run imports: `contract` (the names everything agrees on), `cli` (the shared flags, one-line
errors), `launchers` (single, mirrored, multiworker, horovod behind one interface) and `cluster` (TF_CONFIG,
a Kubernetes Indexed Job's peers), `training` (the loop, `Trainer.finish`), `checkpoints` (resume, stop),
`evaluation` (--eval-every, --target, the curve), `reporting` (progress, the desync guard, results.json),
`export` (the SavedModel), `data` (the global order of examples), `image_folder` and `user_paths` (a user's
photos and paths), `stopping` (signals), `atomic` (writes that survive a crash).

What serves operations, and no training run imports: `spawn` (`python -m tf_recipes.operations.spawn`: local
workers), `preflight` (the cluster check), `predicting` (every predict.py), `pipeline_bench` (the input
benchmarks), `constraints` (a stack's pins, with `tf_recipes.stacks`), `faults` (`python -m
tf_recipes.operations.faults train.py`: the faults the tests inject through the launcher).
"""
__version__ = "0.4.0"
