"""What a run tells and leaves behind: progress lines, TensorBoard scalars and the profiler trace, the
replicas' fingerprints and loss scales (the desync guard), results.json (throughput, versions, the machine)
and the final weights, JSON written whole or not at all; a write that fills the disk is one line. Every
process calls these alike (the gathers are collectives); only the chief prints and writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import importlib.metadata
import json
import os
import platform
import shutil
import sys
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

from tf_recipes.contract import CONFIG_FILE, FINAL_WEIGHTS_FILE, RESULT_FIELDS, RESULTS_FILE, DiskFullError
from tf_recipes.atomic import atomic_file, write_atomically
from tf_recipes.launchers import Launcher


def log(launcher: Launcher, message: str) -> None:
    """One line for the whole job, printed by the chief."""
    if launcher.is_chief:  # Distributed: the chief prints progress
        print(message, flush=True)


def scales_loss(optimizer) -> bool:
    """The optimizer is float16's LossScaleOptimizer (Trainer.setup wraps the recipe's in it)."""
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


def nbytes(variables) -> int:
    """Bytes the values of `variables` take: about what a checkpoint or weights file of them needs."""
    return int(
        sum(np.prod(v.shape) * np.dtype(getattr(v.dtype, "name", v.dtype)).itemsize for v in variables)
    )


def disk_full_reason(error) -> str | None:
    """ "No space left on device", "Disk quota exceeded" or "Read-only file system" when `error` is one of
    them, else None."""
    text = "" if isinstance(error, OSError) and error.errno else str(getattr(error, "message", error))
    return next(
        (
            os.strerror(code)
            for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
            if getattr(error, "errno", None) == code or os.strerror(code) in text
        ),
        None,
    )


@contextlib.contextmanager
def disk_full_is_one_line(folder: str, needed: int, what: str, also=()):
    """A write into `folder` that runs out of space (ENOSPC) or quota (EDQUOT), or finds it read-only (EROFS),
    becomes a DiskFullError naming the folder and the bytes needed; what the write left in `folder` (and the
    files `also`) is removed first, so nothing half-written remains."""
    before = set(os.listdir(folder)) if os.path.isdir(folder) else set()
    free = shutil.disk_usage(folder).free if os.path.isdir(folder) else needed
    if free < needed:  # h5py left a failed file open crashes at exit: do not start a write that cannot end
        raise DiskFullError(
            f"{folder} is full ({free} bytes free): writing {what} needs about {needed} "
            "bytes; free space there or give --results-dir a larger folder"
        )
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
        if reason == os.strerror(errno.EROFS):
            raise DiskFullError(
                f"{folder} cannot be written ({reason}): writing {what} failed; make it "
                "writable again or give --results-dir another folder, and continue with "
                "--resume"
            ) from None
        raise DiskFullError(
            f"{folder} is full ({reason}): writing {what} needs about {needed} bytes; "
            "free space there or give --results-dir a larger folder"
        ) from None


def progress_line(
    step: int, total_steps: int, steps_per_epoch: int, loss: float, metrics: dict, images_per_sec: float
) -> str:
    """The progress line of `step`: its epoch, loss, float metrics (a loss scale as %g) and images/s."""
    shown = "  ".join(
        f"{k} {v:.4f}" if k != "loss_scale" else f"loss scale {v:g}"
        for k, v in metrics.items()
        if isinstance(v, float)
    )
    rate = f"{images_per_sec:,.0f}" if images_per_sec >= 100 else f"{images_per_sec:.3g}"
    return (
        f"step {step:>6}/{total_steps}  epoch {(step - 1) // steps_per_epoch + 1}"
        f"  loss {loss:.4f}  {shown}  {rate} img/s"
    )


class RunReport:
    """One run's losses (results.json's "losses"), progress lines, TensorBoard scalars
    (RESULTS/tensorboard) and --profile trace (RESULTS/profile)."""

    def __init__(self, launcher: Launcher, results_dir: str, plan, log_every: int, profile_steps=None):
        self.launcher, self.results_dir, self.plan = launcher, results_dir, plan  # plan: config.Plan
        self.log_every, self.profile_steps = log_every, profile_steps  # --profile START:END, or None
        self.history = []  # {"step", "loss", metrics...} at every logged step
        self._writers = {}

    def log_step(self, step: int, loss: float, metrics: dict, step_times: list[float], optimizer) -> None:
        """Progress line, the history in results.json and TensorBoard scalars (chief only)."""
        if scales_loss(optimizer):  # float16: the scale after this step
            metrics = {**metrics, "loss_scale": float(keras.ops.convert_to_numpy(optimizer.dynamic_scale))}
        self.history.append({"step": step, "loss": loss, **metrics})
        step_time = float(np.median(step_times[-self.log_every :]))
        plan, rate = self.plan, self.plan.global_batch / step_time
        log(self.launcher, progress_line(step, plan.total_steps, plan.steps_per_epoch, loss, metrics, rate))
        learning_rate = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
        floats = {k: v for k, v in metrics.items() if isinstance(v, float)}
        timing = {"learning_rate": learning_rate, "images_per_sec": rate, "step_time_ms": step_time * 1e3}
        self.write_scalars("train", step, {"loss": loss, **floats, **timing})

    def write_scalars(self, run: str, step: int, scalars: dict) -> None:
        """TensorBoard scalars under RESULTS/tensorboard/RUN (chief only), beside the --profile trace."""
        if not self.launcher.is_chief:  # Distributed: the chief writes TensorBoard scalars
            return
        if run not in self._writers:
            folder = os.path.join(self.results_dir, "tensorboard", run)
            self._writers[run] = tf.summary.create_file_writer(folder)
        with self._writers[run].as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(name, value)

    def profile(self, step: int, before: bool) -> None:
        """TensorBoard profiler trace of steps START+1..END (--profile START:END), chief only."""
        if not self.profile_steps or not self.launcher.is_chief:  # Distributed: the chief traces the profile
            return
        start, end = self.profile_steps
        folder = os.path.join(self.results_dir, "profile")
        if before and step == start + 1:
            tf.profiler.experimental.start(folder)
        elif not before and (step == end or (step == self.plan.total_steps and start < step < end)):
            tf.profiler.experimental.stop()
            log(self.launcher, f"profiler trace of steps {start + 1}..{step}: tensorboard --logdir {folder}")

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()


def throughput(step_times_s: list[float], global_batch: int, num_replicas: int, warmup_steps: int) -> dict:
    """Images/s (trained on, over their steps' summed time) and step-time percentiles after the warm-up."""
    timed = np.asarray(step_times_s[warmup_steps:], dtype=np.float64)
    if timed.size == 0:
        figures = ("images_per_sec", "images_per_sec_per_replica", "step_time_p50_ms", "step_time_p90_ms")
        return {"timed_steps": 0, **dict.fromkeys(figures)}
    images_per_sec = global_batch * timed.size / timed.sum()
    return {
        "timed_steps": int(timed.size),
        "images_per_sec": float(f"{images_per_sec:.4g}"),
        # Distributed: rate per replica
        "images_per_sec_per_replica": float(f"{images_per_sec / num_replicas:.4g}"),
        "step_time_p50_ms": round(float(np.percentile(timed, 50) * 1e3), 3),
        "step_time_p90_ms": round(float(np.percentile(timed, 90) * 1e3), 3),
    }


def versions() -> dict:
    """The versions that made the run; Horovod's read without importing it."""
    try:
        horovod_version = importlib.metadata.version("horovod")
    except importlib.metadata.PackageNotFoundError:
        horovod_version = None
    return {
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "horovod": horovod_version,
    }


def machine() -> dict:
    """What ran it: the CPU's model, its cores, the GPUs TensorFlow sees, the load average at the end."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as handle:
        cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "gpus": len(tf.config.list_physical_devices("GPU")),
        "load_average": load and [round(value, 2) for value in load],
    }


def write_json(path: str, data: dict) -> None:
    """Write atomically and durably: a reader sees the old file or the whole new one, also after a crash."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_file(path, "w") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")


@dataclass(frozen=True)
class RunSummary:
    """What one run did, as results.json reports it (`Trainer.summary`): the launch, the steps and their
    times, the losses logged, the replicas' fingerprints, the precision, the learning curve and --target."""

    recipe: str
    launcher: str
    nodes: int
    workers: int
    replicas: int
    per_replica_batch: int
    global_batch: int
    start_step: int
    steps: int
    steps_per_epoch: int
    warmup_steps: int
    step_times: list  # seconds of every step trained, for the throughput figures
    losses: list
    replica_fingerprints: list
    precision: str
    loss_scaling: dict | None
    xla: bool
    eval_every: int
    curve: list
    target: str | None
    time_to_target: float | None
    target_step: int | None
    wall_seconds: float  # since the process started (and, on a resume, the earlier attempts)


def results_record(summary: RunSummary, extra: dict | None = None, command: list[str] | None = None) -> dict:
    """results.json of a run's `summary`; `extra`, the recipe's fields, adds to and overrides these."""
    record = dataclasses.asdict(summary)
    step_times = record.pop("step_times")
    return {
        **record,
        **throughput(step_times, summary.global_batch, summary.replicas, summary.warmup_steps),
        "replicas_in_sync": len(set(summary.replica_fingerprints)) == 1,
        "machine": machine(),
        "versions": versions(),
        "command": sys.argv if command is None else command,
        **(extra or {}),
    }


def save_results(launcher: Launcher, folder: str, model, results: dict, kept: str | None) -> str | None:
    """results.json (`results`, results_record's) and `model`'s final weights, with the configuration the
    run `kept` (config_yaml's text; None: none), written by the chief while every process waits."""
    if not launcher.is_chief:  # Distributed: the others wait for the chief's results
        launcher.barrier()
        return None
    path = os.path.join(folder, RESULTS_FILE)
    # a recipe that passes no final_metrics, say: the nightly and bench read every field
    if missing := RESULT_FIELDS - results.keys():
        raise RuntimeError(
            f"results.json would lack {', '.join(sorted(missing))} (tf_recipes.contract.RESULT_FIELDS)"
        )
    weights, config = os.path.join(folder, FINAL_WEIGHTS_FILE), os.path.join(folder, CONFIG_FILE)
    with disk_full_is_one_line(folder, nbytes(model.variables), "the final weights"):
        model.save_weights(weights)
    if kept is not None:  # the configuration that `train.py --config` runs again
        with disk_full_is_one_line(folder, len(kept), CONFIG_FILE, also=[weights]):
            write_atomically(config, kept)
    with disk_full_is_one_line(
        folder, len(json.dumps(results, indent=2)), RESULTS_FILE, also=[weights, config]
    ):
        write_json(path, results)
    print(f"results: {path}", flush=True)
    launcher.barrier()  # Distributed: the chief joins the others once its results are written
    return path
