"""Test hooks: every way a test reaches into a training run, in one place. A normal run sets none.

Each hook makes a run go wrong on purpose, or keeps it offline, so that a test can see the guard
meant for that case answer:

- `--fault-desync-replica R`: after training, replica R's weights move by 1e-3, so the desync guard
  must stop the run (exit 3, no results.json). Set by tests/integration/test_desync_guard.py and
  the nightly's `desync` control cell.
- `--fault-overflow R:STEP` (float16 only): replica R's own gradients become inf at step STEP, so
  every replica must skip that step and halve its loss scale alike. Set by
  tests/integration/test_precision.py.
- `--fault-slow-step SECONDS`: every training step waits this long, timed as step time: the
  throughput regression that the nightly's `slow` control cell must catch.
- `TF_RECIPES_DOWNLOAD_HOST` (environment): the host asked before a dataset or weights download
  (storage.googleapis.com, where TFDS and Keras download from). Tests set it to a name that never
  answers (unreachable.invalid) to see the offline message at once; common.data.cannot_download
  reads it through `download_host`.

The three flags are part of common.cli's shared parser, so every recipe takes them; that parser
hands them over here whenever it parses a command line (`record`), and common.training's Trainer
reads them (`faults`). No recipe's train.py names a hook.

This module loads no TensorFlow at import (the parser imports it before TensorFlow loads): only the
hooks that change tensors import it, and only a run with that fault calls them.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from common.contract import UserError

DOWNLOAD_HOST_ENV = "TF_RECIPES_DOWNLOAD_HOST"
DOWNLOAD_HOST = "storage.googleapis.com"


@dataclass(frozen=True)
class Faults:
    """The faults a command line asked for; the defaults are a normal run's: none."""

    desync_replica: int | None = None  # --fault-desync-replica R
    overflow: tuple[int, int] | None = None  # --fault-overflow R:STEP
    slow_step: float = 0.0  # --fault-slow-step SECONDS


NO_FAULTS = Faults()
_recorded = NO_FAULTS


def record(args) -> Faults:
    """Keep the faults of a parsed command line (common.cli's parser calls this on every parse)."""
    global _recorded
    _recorded = Faults(desync_replica=getattr(args, "fault_desync_replica", None),
                       overflow=getattr(args, "fault_overflow", None),
                       slow_step=getattr(args, "fault_slow_step", 0.0))
    return _recorded


def faults() -> Faults:
    """The faults of the last command line parsed in this process; none when nothing was parsed."""
    return _recorded


def download_host() -> str:
    """The host to ask before downloading a dataset or weights: TF_RECIPES_DOWNLOAD_HOST, else
    storage.googleapis.com. Read at every call, so a test may set it at any time."""
    return os.environ.get(DOWNLOAD_HOST_ENV, DOWNLOAD_HOST)


def check_overflow_fault(overflow: tuple[int, int] | None, loss_scaled: bool, precision: str, replicas: int) -> None:
    """--fault-overflow R:STEP needs float16's loss scaling and a replica R."""
    if overflow and not loss_scaled:
        raise UserError(f"--fault-overflow tests float16 loss scaling, and this run computes in {precision}; "
                        "add --amp float16")
    if overflow and overflow[0] >= replicas:
        raise UserError(f"--fault-overflow {overflow[0]}:{overflow[1]}: there is no replica "
                        f"{overflow[0]}, this run has {replicas} (0..{replicas - 1})")


def overflow_gradients(gradients, step, replica_id, overflow: tuple[int, int]):
    """In a replica's step, --fault-overflow R:STEP: replica R's own gradients become inf at step STEP."""
    import tensorflow as tf

    replica, at_step = overflow
    here = tf.logical_and(tf.equal(step, at_step), tf.equal(replica_id, replica))  # Distributed: replica R only
    return [g if g is None else tf.where(here, tf.constant(float("inf"), g.dtype), g) for g in gradients]


def slow_down(slow_step: float, steps: int) -> None:
    """--fault-slow-step SECONDS: wait that long for each of `steps` steps (zero in a normal run)."""
    time.sleep(slow_step * steps)


def desync_replica(copies, launcher, replica: int) -> None:
    """--fault-desync-replica R, after training: replica R's copy of the first weight moves by 1e-3.
    `copies`: this process's copies of that weight, in replica order; only the process that holds
    replica R changes anything."""
    import tensorflow as tf

    first_local = launcher.worker_index * launcher.local_replicas
    if first_local <= replica < first_local + launcher.local_replicas:  # Distributed: the process holding R
        copy = copies[replica - first_local]
        copy.assign(copy + tf.ones_like(copy) * 1e-3)
