"""The programs that run beside training, in the same images as the recipes (which copy tools/ with
common/): no train.py imports them.

- `spawn`: starts N local worker processes with their TF_CONFIG (`python -m tf_recipes.spawn`);
- `preflight`: the cluster check before a job (`python -m tf_recipes.preflight`, `invoke preflight`);
- `predicting`: what every recipe's predict.py runs on an export (imports no training code);
- `pipeline_bench`: what the recipes' input benchmarks (benchmark_input.py) share;
- `gpu_libraries`: whether a GPU image's CUDA libraries are the ones its TensorFlow was built for, without
  a GPU (`python tools/gpu_libraries.py`; images/current's gpu target runs it while it builds).
"""
