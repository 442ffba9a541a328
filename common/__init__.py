"""tf_recipes: the library every recipe's train.py and predict.py import (the distribution tf-recipes,
built from this repository: `pip install /path/to/tf-recipes`; docs/library.md). Its source is this
folder, common/; pyproject.toml installs it under the one name `tf_recipes`. Everything that differs
between launchers lives here, so the recipes stay plain. Importing the package loads nothing else (no
TensorFlow), so a recipe's `--help` answers at once; each module is imported on its own.

The public API, what the recipes call and what stays compatible within a minor version (docs/library.md):

- `tf_recipes.cli`: `training_parser` (the shared flags), `run_main` (one line and a status for a
  user's error), `positive_int` and the other argument types;
- `tf_recipes.launchers`: `create_launcher(name, ...)`, one interface over single, mirrored,
  multiworker and horovod: `scope()`, `distribute_dataset`, `eval_share`, `is_chief`;
- `tf_recipes.training`: `Trainer` (the loop, checkpoints, resume, results.json), `learning_rate`,
  `configure_precision`, `classification_task`, `log`;
- `tf_recipes.data`: `sharded_order`, `DataError`, `check_labels`, `cannot_download`;
- `tf_recipes.image_folder`, `tf_recipes.user_paths`: a folder of photos per class; the paths a user gives;
- `tf_recipes.export`: `export_model`, the SavedModel for TF Serving and predict.py;
- `tf_recipes.predicting`: `main`, the whole of a recipe's predict.py;
- `python -m tf_recipes.spawn --nproc N -- python train.py ...`: N local worker processes;
- `python -m tf_recipes.preflight --launcher L`: the cluster check before a job;
- `python -m tf_recipes.constraints STACK`: the pip constraints of a stack (ngc-25.02, current).

The modules, all of them here (tests/unit/test_layout.py proves each is imported by some recipe
script, directly or through another, or started as `python -m tf_recipes.NAME`):

- `contract`: the names everything agrees on (launchers and their traits, exit statuses and their
  errors, results.json fields); imports nothing;
- `cli`: the shared flags and the one-line errors, before TensorFlow loads;
- `launchers`: single, mirrored, multiworker and horovod behind one interface;
- `training`: the one training loop (steps per call, the replica step, evaluation);
- `checkpoints`: checkpoint and resume, and the stop with a checkpoint;
- `reporting`: progress, TensorBoard, the replicas' fingerprints and loss scales, results.json;
- `test_hooks`: the faults a test asks for (TF_RECIPES_FAULT_* variables) and the download host; a
  normal run sets none;
- `data`: sharding and the global order of examples, the same under every launcher;
- `image_folder`: `--data-format image-folder`, a folder of class-named subfolders of photos;
- `user_paths`: the paths a user hands a run: a folder's regular files (anything else named, never
  opened), a folder flag given a file, an output on an input; imports no project module;
- `atomic`: writes that survive a crash (temporary file, fsync, rename, fsync of the folder);
  imports no project module;
- `results`: throughput, versions, the desync guard and results.json;
- `stopping`: stop signals, the stop marker, passing signals on to children;
- `tf_config`: TF_CONFIG built for worker i and checked before anything waits on it;
- `indexed_job`: TF_CONFIG in a Kubernetes Indexed Job;
- `export`: RESULTS/export at the end of a run, the SavedModel for TF Serving and predict.py;
- `spawn`: starts N local worker processes with their TF_CONFIG (`python -m tf_recipes.spawn`);
- `preflight`: the cluster check before a job (`python -m tf_recipes.preflight`, `invoke preflight`);
- `predicting`: what every recipe's predict.py runs on an export (imports no training code);
- `pipeline_bench`: what the recipes' input benchmarks (benchmark_input.py) share;
- `constraints`: prints a stack's pip constraints, shipped in the library as `tf_recipes.stacks`
  (the files of the repository's stacks/), for the recipe images (`python -m tf_recipes.constraints STACK`).
"""
__version__ = "0.2.0"
