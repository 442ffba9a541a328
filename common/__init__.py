"""What runs inside every recipe's train.py: everything that differs between launchers lives here,
so the recipes stay plain.

- `contract`: the names everything agrees on (launchers, exit statuses and their errors,
  results.json fields); imports nothing;
- `cli`: the shared flags and the one-line errors, before TensorFlow loads;
- `launchers`: single, mirrored, multiworker and horovod behind one interface;
- `training`: the one training loop (steps per call, checkpoints, resume, stop, results);
- `data`: sharding and the global order of examples, the same under every launcher;
- `image_folder`: `--data-format image-folder`, a folder of class-named subfolders of photos;
- `atomic`: writes that survive a crash (temporary file, fsync, rename, fsync of the folder);
  imports no project module;
- `results`: throughput, versions, the desync guard and results.json;
- `stopping`: stop signals, the stop marker, passing signals on to children;
- `spawn`: N local worker processes with their TF_CONFIG (`python -m common.spawn`);
- `indexed_job`: TF_CONFIG in a Kubernetes Indexed Job;
- `pipeline_bench`: what the recipes' input benchmarks share;
- `export`: RESULTS/export at the end of a run, the SavedModel for TF Serving and predict.py;
- `predicting`: what every recipe's predict.py runs on an export (imports no training code);
- `preflight`: the cluster check before a job (`python -m common.preflight`, `invoke preflight`);
  imported by no recipe.
"""
