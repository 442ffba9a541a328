"""What a run tells and leaves behind: progress lines, the loss curve, TensorBoard scalars and the
profiler trace, the replicas' fingerprints and loss scales (the desync guard), results.json and the
final weights; and the one-line error of a write that fills the disk.

Every process of the job calls these alike (the gathers are collectives every process must join);
only the chief prints and writes. The figures themselves (throughput, versions), the check that the
fingerprints agree and the crash-safe write of a JSON file are tf_recipes.results'.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys

import keras
import numpy as np
import tensorflow as tf

from tf_recipes.contract import FINAL_WEIGHTS_FILE, RESULT_FIELDS, RESULTS_FILE, DesyncError, DiskFullError
from tf_recipes.launchers import Launcher, replica_copies
from tf_recipes.results import check_in_sync, machine, throughput, versions, write_json


def log(launcher: Launcher, message: str) -> None:
    """One line for the whole job, printed by the chief."""
    if launcher.is_chief:  # Distributed: the chief prints progress
        print(message, flush=True)


def scales_loss(optimizer) -> bool:
    """The optimizer is float16's LossScaleOptimizer (Trainer.setup wraps the recipe's in it)."""
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


# -- writes that may fill the disk ----------------------------------------------------------------

def nbytes(variables) -> int:
    """Bytes the values of `variables` take: about what a checkpoint or weights file of them needs."""
    return int(sum(np.prod(v.shape) * np.dtype(getattr(v.dtype, "name", v.dtype)).itemsize for v in variables))


def disk_full_reason(error) -> str | None:
    """"No space left on device" / "Disk quota exceeded" when `error` is one of them, else None."""
    if isinstance(error, OSError) and error.errno:
        return os.strerror(error.errno) if error.errno in (errno.ENOSPC, errno.EDQUOT) else None
    text = str(getattr(error, "message", error))
    return next((os.strerror(code) for code in (errno.ENOSPC, errno.EDQUOT) if os.strerror(code) in text), None)


@contextlib.contextmanager
def disk_full_is_one_line(folder: str, needed: int, what: str, also=()):
    """A write into `folder` that runs out of space (ENOSPC) or quota (EDQUOT) becomes a DiskFullError
    naming the folder and the bytes needed; what the write left in `folder` (and the files `also`) is
    removed first, so nothing half-written remains."""
    before = set(os.listdir(folder)) if os.path.isdir(folder) else set()
    free = shutil.disk_usage(folder).free if os.path.isdir(folder) else needed
    if free < needed:  # h5py left a failed file open crashes at exit: do not start a write that cannot end
        raise DiskFullError(f"{folder} is full ({free} bytes free): writing {what} needs about {needed} bytes; "
                            "free space there or give --results-dir a larger folder")
    try:
        yield
    # TensorFlow's savers raise ResourceExhaustedError, h5py (the weights) a RuntimeError or OSError.
    except (OSError, RuntimeError, tf.errors.ResourceExhaustedError) as error:
        reason = disk_full_reason(error)
        if not reason:
            raise
        new = set(os.listdir(folder)) - before if os.path.isdir(folder) else set()
        for path in [os.path.join(folder, name) for name in new] + list(also):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.exists(path):
                os.remove(path)
        raise DiskFullError(f"{folder} is full ({reason}): writing {what} needs about {needed} bytes; "
                            "free space there or give --results-dir a larger folder") from None


# -- progress: the lines, the loss curve, TensorBoard ---------------------------------------------

def progress_line(step: int, total_steps: int, steps_per_epoch: int, loss: float, metrics: dict,
                  images_per_sec: float) -> str:
    """The progress line of `step`: its epoch, loss, float metrics (a loss scale as %g) and images/s."""
    shown = "  ".join(f"{k} {v:.4f}" if k != "loss_scale" else f"loss scale {v:g}"
                      for k, v in metrics.items() if isinstance(v, float))
    rate = f"{images_per_sec:,.0f}" if images_per_sec >= 100 else f"{images_per_sec:.3g}"
    return (f"step {step:>6}/{total_steps}  epoch {(step - 1) // steps_per_epoch + 1}"
            f"  loss {loss:.4f}  {shown}  {rate} img/s")


class RunReport:
    """The loss curve of one run (results.json's "losses"), its progress lines, its TensorBoard
    scalars under RESULTS/tensorboard and its --profile trace under RESULTS/profile."""

    def __init__(self, launcher: Launcher, results_dir: str, global_batch: int, total_steps: int,
                 steps_per_epoch: int, log_every: int, profile_steps: tuple[int, int] | None = None):
        self.launcher, self.results_dir = launcher, results_dir
        self.global_batch, self.total_steps, self.steps_per_epoch = global_batch, total_steps, steps_per_epoch
        self.log_every, self.profile_steps = log_every, profile_steps
        self.history = []  # {"step", "loss", metrics...} at every logged step
        self._writers = {}

    def log_step(self, step: int, loss: float, metrics: dict, step_times: list[float], optimizer) -> None:
        """Progress line, the history in results.json and TensorBoard scalars (chief only)."""
        if scales_loss(optimizer):  # float16: the scale after this step
            metrics = {**metrics, "loss_scale": float(keras.ops.convert_to_numpy(optimizer.dynamic_scale))}
        self.history.append({"step": step, "loss": loss, **metrics})
        step_time = float(np.median(step_times[-self.log_every:]))
        rate = self.global_batch / step_time
        log(self.launcher, progress_line(step, self.total_steps, self.steps_per_epoch, loss, metrics, rate))
        scalars = {"loss": loss, **{k: v for k, v in metrics.items() if isinstance(v, float)},
                   "learning_rate": float(keras.ops.convert_to_numpy(optimizer.learning_rate)),
                   "images_per_sec": rate, "step_time_ms": step_time * 1e3}
        self.write_scalars("train", step, scalars)

    def write_scalars(self, run: str, step: int, scalars: dict) -> None:
        """TensorBoard scalars under RESULTS/tensorboard/RUN (chief only), beside the --profile trace."""
        if not self.launcher.is_chief:  # Distributed: the chief writes TensorBoard scalars
            return
        if run not in self._writers:
            self._writers[run] = tf.summary.create_file_writer(os.path.join(self.results_dir, "tensorboard", run))
        with self._writers[run].as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(name, value)

    def profile(self, step: int, before: bool) -> None:
        """TensorBoard profiler trace of steps START+1..END (--profile START:END), chief only."""
        start, end = self.profile_steps
        if not self.launcher.is_chief:  # Distributed: the chief traces the profile
            return
        folder = os.path.join(self.results_dir, "profile")
        if before and step == start + 1:
            tf.profiler.experimental.start(folder)
        elif not before and (step == end or (step == self.total_steps and start < step < end)):
            tf.profiler.experimental.stop()
            log(self.launcher, f"profiler trace of steps {start + 1}..{step}: tensorboard --logdir {folder}")

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()


# -- the replicas agree: fingerprints and loss scales --------------------------------------------

def replica_state(model: keras.Model):
    """What must be identical on every replica: the trainable weights and the float state that
    no gradient keeps in sync (batch-norm moving statistics)."""
    drifting = [v for v in model.non_trainable_variables if "float" in str(v.dtype)]
    return model.trainable_variables, drifting


def loss_scale_state(optimizer) -> list:
    """float16: the loss scale and its growth counter, which each replica updates on its own."""
    return [optimizer.dynamic_scale, optimizer.step_counter] if scales_loss(optimizer) else []


def gather_loss_scaling(launcher: Launcher, optimizer, step: int) -> dict | None:
    """float16: every replica's loss scale and count of steps skipped for overflow (the steps it
    did not apply: the step count minus the optimizer's), gathered like the fingerprints; results.json's
    "loss_scaling". Raises DesyncError when two replicas differ."""
    if not scales_loss(optimizer):
        return None
    rows = [[float(scale.numpy()), step - int(applied.numpy())]
            for scale, applied in zip(replica_copies(optimizer.dynamic_scale), replica_copies(optimizer.iterations),
                                      strict=False)]
    rows = launcher.gather_replica_rows(rows)  # Distributed: loss scales gathered from every replica
    scales, skipped = [row[0] for row in rows], [int(row[1]) for row in rows]
    if len(set(scales)) > 1 or len(set(skipped)) > 1:
        listing = ", ".join(f"replica {i}: {scale:g} ({count} skipped)"
                            for i, (scale, count) in enumerate(zip(scales, skipped, strict=True)))
        raise DesyncError(f"replicas finished with different loss scales or skipped steps ({listing}); "
                          "they did not skip the same overflowed steps, so this run trained no single model; "
                          "results were not written")
    log(launcher, f"loss scale {scales[0]:g} on every replica; {skipped[0]} of {step} steps skipped for "
                  "overflow on every replica")
    return {"initial_scale": optimizer.initial_scale, "growth_steps": optimizer.dynamic_growth_steps,
            "final_scale": scales[0], "skipped_steps": skipped[0],
            "replica_scales": scales, "replica_skipped_steps": skipped}


def agreed_fingerprints(launcher: Launcher, variables) -> list[str]:
    """Every replica's fingerprint of `variables`, known to every process: the desync guard raises
    DesyncError unless they are all the same."""
    fingerprints = launcher.all_fingerprints(variables)  # Distributed: desync guard's gather
    check_in_sync(fingerprints)
    log(launcher, f"replicas in sync: {len(fingerprints)} identical fingerprints of the weights, "
                  f"any batch-norm statistics and any loss scale ({fingerprints[0]})")
    return fingerprints


# -- results.json and the final weights ------------------------------------------------------------

def results_record(run, extra: dict | None = None, command: list[str] | None = None) -> dict:
    """results.json of a finished run (a tf_recipes.training.Trainer after fit); `extra` adds the recipe's
    fields (its final_metrics above all) and overrides any of these."""
    launcher = run.launcher
    return {
        "recipe": run.recipe,
        "launcher": launcher.name,
        "nodes": launcher.num_nodes,
        "workers": launcher.num_workers,
        "replicas": launcher.num_replicas,
        "per_replica_batch": run.per_replica_batch,
        "global_batch": run.global_batch,
        "start_step": run.start_step,
        "steps": run.total_steps,
        "steps_per_epoch": run.steps_per_epoch,
        "warmup_steps": run.warmup_steps,
        **throughput(run.step_times, run.global_batch, launcher.num_replicas, run.warmup_steps),
        "losses": run.report.history,
        "replica_fingerprints": run.fingerprints,
        "replicas_in_sync": len(set(run.fingerprints)) == 1,
        "precision": run.precision,
        "loss_scaling": run.loss_scaling,
        "xla": run.xla,
        # The learning curve: the held-out set's metrics during training, and the time to --target
        "eval_every": run.eval_interval if run.evaluation else 0,
        "curve": run.curve.points,
        "target": str(run.target) if run.target else None,
        "time_to_target": run.curve.target_reached and run.curve.target_reached["seconds"],
        "target_step": run.curve.target_reached and run.curve.target_reached["step"],
        "wall_seconds": run.curve.seconds(),  # since the process started (and, on a resume, the earlier attempts)
        "machine": machine(),
        "versions": versions(),
        "command": sys.argv if command is None else command,
        **(extra or {}),
    }


def save_results(run, extra: dict | None = None) -> str | None:
    """results.json and the final weights of `run`, written by the chief; every process calls it and
    returns only once the chief has written them, so the job's processes end together."""
    launcher, folder = run.launcher, run.results_dir
    if not launcher.is_chief:  # Distributed: the others wait for the chief's results
        launcher.barrier()
        return None
    path = os.path.join(folder, RESULTS_FILE)
    with disk_full_is_one_line(folder, nbytes(run.model.variables), "the final weights"):
        run.model.save_weights(os.path.join(folder, FINAL_WEIGHTS_FILE))
    results = results_record(run, extra)
    missing = RESULT_FIELDS - results.keys()
    if missing:  # a recipe that passes no final_metrics, say: the nightly and bench read every field
        raise RuntimeError(f"results.json would lack {', '.join(sorted(missing))} (tf_recipes.contract.RESULT_FIELDS)")
    with disk_full_is_one_line(folder, len(json.dumps(results, indent=2)), RESULTS_FILE,
                               also=[os.path.join(folder, FINAL_WEIGHTS_FILE)]):
        write_json(path, results)
    run.report.flush()
    print(f"results: {path}", flush=True)
    launcher.barrier()  # Distributed: the chief joins the others once its results are written
    return path
