"""tf_recipes: the library every recipe's train.py and predict.py import (the distribution tf-recipes,
`pip install /path/to/tf-recipes`; its public API: docs/library.md). Everything that differs between
launchers lives here, so the recipes stay plain. Importing the package loads nothing (no TensorFlow).

What a training run imports, layer by layer (docs/library.md, "Layers"; pyproject.toml's import-linter
contract holds them): `cli` (the shared flags, the RunConfig they make, one-line errors and exit statuses);
the engine: `training` (the loop, `Trainer.finish`), `checkpoints` (resume, stop), `export` (the SavedModel,
`ExportSpec`), `reporting` (progress, the desync guard, results.json), `evaluation` (--eval-every, the
curve) and `config` (`RunConfig`, `Target`, precision); `launchers` (single, mirrored, multiworker, horovod
behind one interface), `cluster` (TF_CONFIG, a Kubernetes Indexed Job's peers), `stopping` (signals), `data`
(the global order of examples) and `image_folder` (a user's photos); `contract` (the names everything agrees
on), `atomic` (writes that survive a crash) and `user_paths` (the paths a user gives).

What serves operations, and no training run imports, is `tf_recipes.operations`: `spawn` (`python -m
tf_recipes.operations.spawn`: local workers), `preflight` (the cluster check), `predicting` (every
predict.py), `pipeline_bench` (the input benchmarks), `constraints` (a stack's pins, with
`tf_recipes.stacks`), `faults` (`python -m tf_recipes.operations.faults train.py`: the faults the tests
inject from outside a run).
"""

__version__ = "0.4.0"
