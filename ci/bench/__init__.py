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
  `cityscapes_baseline.py` (keras.io's U-Net-like example as its current and its 2020 page train it),
  given the same wall time, over several seeds, all scored as cityscapesScripts scores (class and
  category IoU at the labels' full resolution), and the recipe's time to a mean IoU
  (`python -m ci.bench.segmentation`); `seed_cityscapes.py` puts the seed workshop's 100 scenes in the
  official Cityscapes layout it is run on.

The recipes' input-pipeline benchmarks stay in their folders (`recipes/*/benchmark_input.py`) and
share common/tf_recipes/operations/pipeline_bench.py.
"""
