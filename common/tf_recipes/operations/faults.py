"""Faults on purpose, for the tests and the nightly's control cells:

    python -m tf_recipes.operations.faults recipes/mnist-cnn/train.py --launcher mirrored ...

runs the script as `python SCRIPT ARGS` would, after wrapping every launcher that
`tf_recipes.launchers.create_launcher` makes with the faults its environment asks for. The faults are
injected from outside the training loop, through the Launcher methods named in WRAPPED (an interface:
tests/unit/test_faults.py fails when one of them is renamed, rather than a fault silently not happening);
no training run imports this module, and a run started without it has no fault whatever its environment
says.

- `TF_RECIPES_FAULT_DESYNC_REPLICA=R`: after training, replica R's copy of the first weight moves by
  1e-3 just before the desync guard compares the replicas, which must stop the run (exit 3, no
  results.json).
- `TF_RECIPES_FAULT_OVERFLOW=R:N` (float16 only): replica R's own gradients become inf in the N-th
  step this process runs (a resumed run counts from its first step), so every replica must skip that
  step and halve its loss scale alike.
- `TF_RECIPES_FAULT_SLOW_STEP=SECONDS`: every step takes at least this long, the throughput regression
  the nightly's `slow` cell must catch.
- `TF_RECIPES_FAULT_DOWNLOAD_HOST=HOST`: downloads (TFDS, Keras's weights) go to HOST instead of
  tf_recipes.data.DOWNLOAD_HOST; `unreachable.invalid` is a machine without a network.

A value that is not what its variable takes is one line naming the variable (exit 2). `invoke run`
starts the script this way, and passes the variables into a container, when its environment sets one.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import time
from dataclasses import dataclass

from tf_recipes import cli
from tf_recipes.contract import UserError

DESYNC, OVERFLOW = "TF_RECIPES_FAULT_DESYNC_REPLICA", "TF_RECIPES_FAULT_OVERFLOW"
SLOW = "TF_RECIPES_FAULT_SLOW_STEP"
DOWNLOAD_HOST = "TF_RECIPES_FAULT_DOWNLOAD_HOST"
FAULT_ENVS = (DESYNC, OVERFLOW, SLOW, DOWNLOAD_HOST)
# The tf_recipes.launchers.Launcher methods the faults wrap: renaming one there fails inject(), and a test
WRAPPED = ("run", "aggregate_gradients", "prepare", "all_fingerprints")


@dataclass(frozen=True)
class Faults:
    """The faults the environment asks for; the defaults are none."""

    desync_replica: int | None = None
    overflow: tuple[int, int] | None = None  # (replica, the process's n-th step)
    slow_step: float = 0.0
    download_host: str | None = None


def replica_at_step(text: str) -> tuple[int, int]:
    """R:N, R >= 0 and N >= 1."""
    try:
        replica, step = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not REPLICA:STEP, e.g. 1:3") from None
    if replica < 0 or step < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: need REPLICA >= 0 and STEP >= 1")
    return replica, step


def faults(environ=None) -> Faults:
    """The faults `environ` (default os.environ) asks for; an unset or empty variable asks for none."""
    environ = os.environ if environ is None else environ
    parsed = {}
    for name, parse in ((DESYNC, cli.non_negative_int), (OVERFLOW, replica_at_step), (SLOW, cli.at_least(0))):
        text = environ.get(name, "")
        try:
            parsed[name] = parse(text) if text else None
        except argparse.ArgumentTypeError as error:
            raise UserError(f"{name}={text}: {error}; unset it for a normal run") from None
    return Faults(parsed[DESYNC], parsed[OVERFLOW], parsed[SLOW] or 0.0, environ.get(DOWNLOAD_HOST) or None)


def replica_index(launcher):
    """In a replica's step: the replica's index in the job, 0 .. num_replicas-1."""
    import tensorflow as tf

    if launcher.traits["collective"] == "horovod":  # one replica per rank, outside any strategy
        return tf.constant(launcher.worker_index)
    return tf.distribute.get_replica_context().replica_id_in_sync_group


def inject(launcher, asked: Faults):
    """`launcher`, its methods wrapped for the `asked` faults."""
    import keras
    import tensorflow as tf

    from tf_recipes.launchers import replica_copies

    missing = [name for name in WRAPPED if not callable(getattr(type(launcher), name, None))]
    if missing:  # never a fault that silently does not happen
        raise RuntimeError(
            f"tf_recipes.operations.faults wraps Launcher.{', '.join(missing)}, which "
            f"{type(launcher).__name__} no longer has: rename WRAPPED's names too"
        )
    run, aggregate, prepare, fingerprints = (getattr(launcher, name) for name in WRAPPED)
    if asked.overflow:  # the steps this process ran, counted in the graph
        steps = tf.Variable(0, dtype=tf.int64, trainable=False)

    def counted_run(replica_fn, batch, reduce=True):
        if asked.overflow:
            steps.assign_add(1)
        if asked.slow_step:
            tf.py_function(lambda: time.sleep(asked.slow_step), [], [])
        return run(replica_fn, batch, reduce)

    def overflowing(gradients):
        replica, step = asked.overflow
        here = tf.logical_and(tf.equal(steps, step), tf.equal(replica_index(launcher), replica))
        return aggregate(
            [g if g is None else tf.where(here, tf.constant(float("inf"), g.dtype), g) for g in gradients]
        )

    def loss_scaled(model, optimizer):
        if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            raise UserError(
                f"{OVERFLOW} tests float16 loss scaling, and this run computes in "
                f"{keras.mixed_precision.global_policy().name}; add --amp float16"
            )
        return prepare(model, optimizer)

    def desynced(variables):
        copies = replica_copies(variables[0])
        first = launcher.worker_index * launcher.local_replicas
        if first <= asked.desync_replica < first + launcher.local_replicas:  # the process holding replica R
            copy = copies[asked.desync_replica - first]
            copy.assign(copy + tf.ones_like(copy) * 1e-3)
        return fingerprints(variables)

    launcher.run = counted_run
    if asked.overflow:
        replica, replicas = asked.overflow[0], launcher.num_replicas
        if replica >= replicas:
            raise UserError(
                f"{OVERFLOW}={replica}:{asked.overflow[1]}: there is no replica {replica}, this "
                f"run has {replicas} (0..{replicas - 1})"
            )
        launcher.aggregate_gradients, launcher.prepare = overflowing, loss_scaled
    if asked.desync_replica is not None:
        launcher.all_fingerprints = desynced
    return launcher


def main(argv: list[str]) -> None:
    if not argv or argv[0].startswith("-"):
        raise UserError(
            "usage: python -m tf_recipes.operations.faults SCRIPT [ARGS...], with TF_RECIPES_FAULT_* set"
        )
    from tf_recipes import data, launchers  # TensorFlow loads here, after the faults are read

    asked = faults()
    if asked.download_host:
        data.DOWNLOAD_HOST = asked.download_host
    create = launchers.create_launcher
    launchers.create_launcher = lambda *args, **kwargs: inject(create(*args, **kwargs), asked)
    sys.argv = list(argv)
    # the script's own modules, as `python SCRIPT`
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    cli.run_main(lambda: main(sys.argv[1:]))
