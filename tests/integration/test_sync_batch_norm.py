"""Synchronized batch norm (tf_recipes.launchers.SyncBatchNormalization) across 2 replicas: each replica's
output and its gradient are those of one device normalising the whole global batch, under the strategies
(two logical CPU devices of one process) and under Horovod (two ranks); Keras' plain BatchNormalization,
each replica alone, is the negative control that the same comparison must catch."""
import json
import os
import re
import pathlib
import shutil
import sys

import pytest

from helpers import REPO, assert_ok, run_python

# Each replica r normalises images 2r and 2r+1 of 4; the second replica's images are scaled, so that its own
# statistics differ from the global batch's. Prints, per replica, how far its outputs and input gradients
# are from those of a single device that normalises all 4 images (the reference, made in the same process by
# Keras' formula, which SyncBatchNormalization follows under Horovod).
SCRIPT = """
import json, sys
import numpy as np
import keras
import tensorflow as tf
from tf_recipes.launchers import SyncBatchNormalization, create_launcher

launcher_name = sys.argv[1]
launcher = create_launcher(launcher_name, cpu_replicas=2)
images = np.random.default_rng(0).normal(3.0, 2.0, (4, 6, 8, 5)).astype(np.float32)
images[2:] *= 3.0
weights = tf.constant(np.random.default_rng(1).normal(size=(1, 6, 8, 5)).astype(np.float32))


def outputs_and_gradients(layer, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = tf.reduce_sum(y * weights)
    return y, tape.gradient(loss, x)


reference = keras.layers.BatchNormalization(synchronized=True)  # no replicas here: the whole batch's moments
expected_y, expected_gradient = (t.numpy() for t in tf.function(outputs_and_gradients)(reference, tf.constant(images)))
for kind, make in (("sync", SyncBatchNormalization), ("plain", keras.layers.BatchNormalization)):
    with launcher.scope():
        layer = make()
        layer.build(images.shape)
    if launcher_name == "horovod":
        rank = launcher.worker_index
        step = tf.function(outputs_and_gradients)
        results = [[t.numpy() for t in step(layer, tf.constant(images[2 * rank:2 * rank + 2]))]]
        ranks = [rank]
    else:
        strategy = launcher.strategy
        shards = strategy.experimental_distribute_values_from_function(
            lambda context: tf.constant(images[2 * context.replica_id_in_sync_group:][:2]))
        run = tf.function(lambda x: strategy.run(lambda part: outputs_and_gradients(layer, part), (x,)))
        y, gradient = run(shards)
        results = list(zip([t.numpy() for t in strategy.experimental_local_results(y)],
                           [t.numpy() for t in strategy.experimental_local_results(gradient)]))
        ranks = [0, 1]
    for rank, (y, gradient) in zip(ranks, results):
        print(json.dumps({"kind": kind, "replica": rank,
                          "output": float(np.abs(y - expected_y[2 * rank:2 * rank + 2]).max()),
                          "gradient": float(np.abs(gradient - expected_gradient[2 * rank:2 * rank + 2]).max())}))
"""


def distances(output: str) -> dict:
    """{(kind, replica): {"output", "gradient"}} of the script's lines (horovodrun prefixes them with
    [RANK]<stdout>:)."""
    # the two ranks' lines may interleave in horovodrun's output: each record is read on its own
    rows = [json.loads(record) for record in re.findall(r'\{"kind"[^{}]*\}', output)]
    return {(row["kind"], row["replica"]): row for row in rows}


def horovodrun(script: pathlib.Path, *args) -> "subprocess.CompletedProcess":  # noqa: F821
    runner = shutil.which("horovodrun", path=os.path.dirname(sys.executable)) or "horovodrun"
    return run_python("-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))", runner, "-np", "2",
                      "-H", "localhost:2", sys.executable, str(script), *args, timeout=600)


@pytest.mark.parametrize("launcher", ["mirrored", pytest.param("horovod", marks=pytest.mark.full)])
def test_two_replicas_normalise_with_the_global_batch_and_plain_batch_norm_does_not(launcher, tmp_path, request):
    if launcher == "horovod":
        request.getfixturevalue("require_horovod")
    script = tmp_path / "sync_batch_norm.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(REPO / 'common')!r})\n" + SCRIPT)
    process = horovodrun(script, launcher) if launcher == "horovod" else run_python(str(script), launcher,
                                                                                      timeout=600)
    assert_ok(process)
    measured = distances(process.stdout)
    assert sorted(measured) == [("plain", 0), ("plain", 1), ("sync", 0), ("sync", 1)], process.stdout
    for replica in (0, 1):
        # float32 sums in another order than the one device's: equal to a few ulps of values about 1
        assert measured["sync", replica]["output"] < 1e-5 and measured["sync", replica]["gradient"] < 1e-4
    # each replica alone: the second replica's scaled images get other statistics, so other outputs
    assert max(measured["plain", replica]["output"] for replica in (0, 1)) > 1e-2
