"""Test hooks: every way a test reaches into a training run, in one place. A normal run sets none.

Each hook makes a run go wrong on purpose, or keeps it offline, so that a test can see the guard
meant for that case answer. All of them are environment variables, so that no user meets them in
`train.py --help`:

- `TF_RECIPES_FAULT_DESYNC_REPLICA=R`: after training, replica R's weights move by 1e-3, so the
  desync guard must stop the run (exit 3, no results.json). Set by
  tests/integration/test_desync_guard.py and the nightly's `desync` control cell.
- `TF_RECIPES_FAULT_OVERFLOW=R:STEP` (float16 only): replica R's own gradients become inf at step
  STEP, so every replica must skip that step and halve its loss scale alike. Set by
  tests/integration/test_precision.py.
- `TF_RECIPES_FAULT_SLOW_STEP=SECONDS`: every training step waits this long, timed as step time: the
  throughput regression that the nightly's `slow` control cell must catch (and, in
  tests/integration/test_stop_docker.py, a stop still under way when the second interrupt comes).
- `TF_RECIPES_DOWNLOAD_HOST`: the host asked before a dataset or weights download
  (storage.googleapis.com, where TFDS and Keras download from). Tests set it to a name that never
  answers (unreachable.invalid) to see the offline message at once; tf_recipes.data.cannot_download
  reads it through `download_host`.

tf_recipes.training's Trainer reads the three faults once, when it is made (`faults`); a value that is not
what the variable takes stops the run with one line naming the variable and the value (exit 2). Every
process of a job reads the same environment: the launchers pass it on to their processes, and
`invoke run` passes the TF_RECIPES_FAULT_* variables it was given into a container (FAULT_ENVS). No
recipe's train.py names a hook, and parsing a command line sets nothing here.

This module loads no TensorFlow at import: only the hooks that change tensors import it, and only a run
with that fault calls them.
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

from tf_recipes.cli import non_negative_float, non_negative_int
from tf_recipes.contract import UserError

DOWNLOAD_HOST_ENV = "TF_RECIPES_DOWNLOAD_HOST"
DOWNLOAD_HOST = "storage.googleapis.com"
FAULT_DESYNC_REPLICA_ENV = "TF_RECIPES_FAULT_DESYNC_REPLICA"
FAULT_OVERFLOW_ENV = "TF_RECIPES_FAULT_OVERFLOW"
FAULT_SLOW_STEP_ENV = "TF_RECIPES_FAULT_SLOW_STEP"
FAULT_ENVS = (FAULT_DESYNC_REPLICA_ENV, FAULT_OVERFLOW_ENV, FAULT_SLOW_STEP_ENV)


@dataclass(frozen=True)
class Faults:
    """The faults the environment asks for; the defaults are a normal run's: none."""

    desync_replica: int | None = None  # TF_RECIPES_FAULT_DESYNC_REPLICA=R
    overflow: tuple[int, int] | None = None  # TF_RECIPES_FAULT_OVERFLOW=R:STEP
    slow_step: float = 0.0  # TF_RECIPES_FAULT_SLOW_STEP=SECONDS


NO_FAULTS = Faults()


def replica_at_step(text: str) -> tuple[int, int]:
    """R:STEP, R >= 0 and STEP >= 1 (TF_RECIPES_FAULT_OVERFLOW)."""
    try:
        replica, step = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not REPLICA:STEP, e.g. 1:3") from None
    if replica < 0 or step < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: need REPLICA >= 0 and STEP >= 1")
    return replica, step


def _fault(environ, name: str, parse, default):
    """One fault variable: its value parsed, `default` when it is unset or empty, else a UserError that
    names the variable and the value."""
    text = environ.get(name, "")
    if not text:
        return default
    try:
        return parse(text)
    except argparse.ArgumentTypeError as error:
        raise UserError(f"{name}={text}: {error}; unset it for a normal run") from None


def faults(environ=None) -> Faults:
    """The faults the environment (`environ`, default os.environ) asks for; none when it sets none."""
    environ = os.environ if environ is None else environ
    return Faults(desync_replica=_fault(environ, FAULT_DESYNC_REPLICA_ENV, non_negative_int, None),
                  overflow=_fault(environ, FAULT_OVERFLOW_ENV, replica_at_step, None),
                  slow_step=_fault(environ, FAULT_SLOW_STEP_ENV, non_negative_float, 0.0))


def download_host() -> str:
    """The host to ask before downloading a dataset or weights: TF_RECIPES_DOWNLOAD_HOST, else
    storage.googleapis.com. Read at every call, so a test may set it at any time."""
    return os.environ.get(DOWNLOAD_HOST_ENV, DOWNLOAD_HOST)


def check_overflow_fault(overflow: tuple[int, int] | None, loss_scaled: bool, precision: str, replicas: int) -> None:
    """TF_RECIPES_FAULT_OVERFLOW=R:STEP needs float16's loss scaling and a replica R."""
    if overflow and not loss_scaled:
        raise UserError(f"{FAULT_OVERFLOW_ENV} tests float16 loss scaling, and this run computes in {precision}; "
                        "add --amp float16")
    if overflow and overflow[0] >= replicas:
        raise UserError(f"{FAULT_OVERFLOW_ENV}={overflow[0]}:{overflow[1]}: there is no replica "
                        f"{overflow[0]}, this run has {replicas} (0..{replicas - 1})")


def overflow_gradients(gradients, step, replica_id, overflow: tuple[int, int]):
    """In a replica's step, TF_RECIPES_FAULT_OVERFLOW=R:STEP: replica R's own gradients become inf at step STEP."""
    import tensorflow as tf

    replica, at_step = overflow
    here = tf.logical_and(tf.equal(step, at_step), tf.equal(replica_id, replica))  # Distributed: replica R only
    return [g if g is None else tf.where(here, tf.constant(float("inf"), g.dtype), g) for g in gradients]


def slow_down(slow_step: float, steps: int) -> None:
    """TF_RECIPES_FAULT_SLOW_STEP=SECONDS: wait that long for each of `steps` steps (zero in a normal run)."""
    time.sleep(slow_step * steps)


def desync_replica(copies, launcher, replica: int) -> None:
    """TF_RECIPES_FAULT_DESYNC_REPLICA=R, after training: replica R's copy of the first weight moves by 1e-3.
    `copies`: this process's copies of that weight, in replica order; only the process that holds
    replica R changes anything."""
    import tensorflow as tf

    first_local = launcher.worker_index * launcher.local_replicas
    if first_local <= replica < first_local + launcher.local_replicas:  # Distributed: the process holding R
        copy = copies[replica - first_local]
        copy.assign(copy + tf.ones_like(copy) * 1e-3)
