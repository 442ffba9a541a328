"""What runs inside every recipe's train.py, and nothing else: every module here is imported by some
train.py, directly or through another (tests/unit/test_layout.py proves it). Everything that differs
between launchers lives here, so the recipes stay plain.

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
- `export`: RESULTS/export at the end of a run, the SavedModel for TF Serving and predict.py.

The programs that run beside training, in the same images, are in tools/.
"""
