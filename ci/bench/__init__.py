"""The benchmarks, and where their kept reports go (docs/bench/).

- `plan.py`: pure: which runs `invoke bench` makes (launchers x replica counts x rounds);
- `runner.py`: runs them, each a real training run, and the recipe's input benchmark;
- `report.py`: pure: medians, efficiency, bench.md and bench.json; and the bench.png plot;
- `host_overhead.py`: the training loop's host overhead against a bare tf.function loop
  (`python -m ci.bench.host_overhead`);
- `predict.py`: an exported model's predictions (as predict.py makes them) against Keras model.predict
  (`python -m ci.bench.predict`);
- `time_to_accuracy.py`: mnist-cnn's wall time to a test accuracy on the real digits against the
  short-script baseline, `mnist_baseline.py` (a keras-io-style convnet), run side by side
  (`python -m ci.bench.time_to_accuracy`);
- `segmentation.py`: cityscapes-unet's `--preset cpu` against the short-script baseline,
  `cityscapes_baseline.py` (a keras.io-style U-Net), given the same wall time, both scored at the
  categories' full resolution, and the recipe's time to a mean IoU (`python -m ci.bench.segmentation`).

The recipes' input-pipeline benchmarks stay in their folders (`recipes/*/benchmark_input.py`) and
share common/tf_recipes/pipeline_bench.py.
"""
