"""One training loop for every launcher.

A recipe builds its model and optimizer under `launcher.scope()`, hands them to a `Trainer` with a
`Task` (per-example loss and summed metrics), and calls `fit`. The loop is the same under all four
launchers; the launcher decides where each replica runs, how gradients are combined and which share
of the data each process reads.

Loss scaling rule: every replica divides the *sum* of its per-example losses by the *global* batch.
Summing those gradients over replicas (the strategies do it inside `apply_gradients`, Horovod in
`aggregate_gradients`) then gives exactly the gradient of the mean loss over the global batch, the
same number a single device computes on the whole batch.
"""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from common.cli import LOSS_SCALE_GROWTH_STEPS, LOSS_SCALE_INITIAL, amp_flags, precision_policy
from common.data import DataError, steps_per_epoch
from common.launchers import Launcher, replica_copies
from common.results import check_in_sync, throughput, versions, write_json
from common.contract import (FINAL_WEIGHTS_FILE, RESULT_FIELDS, RESULTS_FILE, ClusterError, DesyncError,
                             DiskFullError, RunFinished, StopRequested, UserError)
from common.stopping import StopFlag, peer_error_summary, stopped_marker



def _nbytes(variables) -> int:
    return int(sum(np.prod(v.shape) * np.dtype(getattr(v.dtype, "name", v.dtype)).itemsize for v in variables))


def _disk_full_reason(error) -> str | None:
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
        reason = _disk_full_reason(error)
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

class ResumeError(UserError, ValueError):
    """--resume cannot continue the checkpointed run exactly; the message names what differs."""


@dataclass
class Task:
    """What a recipe trains: a per-example loss and metrics kept as sums over examples."""

    loss_fn: Callable  # (y_true, y_pred) -> per-example loss, shape [batch]
    metric_sums: Callable = lambda y_true, y_pred: {}  # -> {name: sum over the batch}
    summarize: Callable = lambda sums: {}  # {name: total} (with "examples") -> {metric: value}


def classification_task() -> Task:
    """Sparse categorical cross-entropy and accuracy, for models that end in a softmax over classes."""
    def correct(y_true, y_pred):
        predicted = tf.cast(tf.argmax(y_pred, axis=-1), y_true.dtype)
        return {"correct": tf.reduce_sum(tf.cast(tf.equal(predicted, y_true), tf.float32))}

    return Task(loss_fn=keras.losses.sparse_categorical_crossentropy, metric_sums=correct,
                summarize=lambda sums: {"accuracy": float(sums["correct"] / sums["examples"])})


def configure_precision(amp: str | None) -> str:
    """--amp [DTYPE]: set and return Keras's dtype policy. A bare --amp is mixed_float16 on a GPU
    (tensor cores; the Trainer adds loss scaling) and mixed_bfloat16 on the CPU (no loss scaling
    needed); --amp float16 gives the GPU's loss-scaled path on the CPU too (common.cli.precision_policy)."""
    policy = precision_policy(amp, gpu=bool(tf.config.list_physical_devices("GPU")))
    keras.mixed_precision.set_global_policy(policy)
    return policy


def scales_loss(optimizer) -> bool:
    """The optimizer is float16's LossScaleOptimizer (Trainer.setup wraps the recipe's in it)."""
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear ramp from the base rate to `scale` x base over `warmup_steps`, then constant.

    Scaling the rate with the number of replicas keeps the per-example step size when the global
    batch grows with them; the warm-up avoids the unstable first steps at a large rate.
    """

    def __init__(self, base_rate: float, scale: float, warmup_steps: int):
        self.base_rate, self.scale, self.warmup_steps = base_rate, scale, warmup_steps

    def __call__(self, step):
        progress = tf.minimum(tf.cast(step, tf.float32) / max(self.warmup_steps, 1), 1.0)
        return self.base_rate * (1.0 + (self.scale - 1.0) * progress)

    def get_config(self):
        return {"base_rate": self.base_rate, "scale": self.scale, "warmup_steps": self.warmup_steps}


def learning_rate(base_rate: float, launcher: Launcher, scale_lr: bool, warmup_steps: int):
    if not scale_lr or launcher.num_replicas == 1:
        return base_rate
    return WarmupSchedule(base_rate, float(launcher.num_replicas), warmup_steps)


def log(launcher: Launcher, message: str) -> None:
    if launcher.is_chief:
        print(message, flush=True)


@dataclass
class Trainer:
    launcher: Launcher
    recipe: str
    num_examples: int  # training examples in one epoch
    per_replica_batch: int
    epochs: int = 1
    max_steps: int | None = None
    results_dir: str = "results"
    resume: bool = False
    checkpoint_every: int = 0  # steps; 0 = at the end of every epoch
    log_every: int = 10
    warmup_steps: int = 5  # steps left out of the throughput figures
    xla: bool = False
    profile_steps: tuple[int, int] | None = None  # TensorBoard profiler trace of steps START..END
    steps_per_loop: int = 1  # training steps per compiled call; the host reads outputs only between calls
    seed: int | None = None  # the data-order seed; a resume must use the same one
    loss_scale_initial: float = LOSS_SCALE_INITIAL  # float16 (mixed_float16) only: the first loss scale
    history: list = field(default_factory=list)

    def __post_init__(self):
        self.global_batch = self.per_replica_batch * self.launcher.num_replicas
        self.steps_per_epoch = steps_per_epoch(self.num_examples, self.global_batch)
        self.total_steps = self.epochs * self.steps_per_epoch
        if self.max_steps:
            self.total_steps = min(self.total_steps, self.max_steps)
        self.start_step = 0
        self.checkpoint_dir = os.path.join(self.results_dir, "checkpoints")
        self.precision = keras.mixed_precision.global_policy().name  # configure_precision has set it
        if self.loss_scale_initial != LOSS_SCALE_INITIAL and self.precision != "mixed_float16":
            raise UserError(f"--loss-scale-initial {self.loss_scale_initial:g} applies only to float16 loss scaling, "
                            f"and this run computes in {self.precision}; add --amp float16 (a bare --amp is float16 "
                            "only on a GPU) or leave --loss-scale-initial out")
        self._check_resume_target()
        # SIGTERM/SIGUSR1 from here on stop the job after a step, with a checkpoint (common.stopping).
        # The launcher exists already, so TensorFlow's own SIGTERM handler is not installed over ours.
        self.stop_flag = StopFlag().install()
        self._writers = {}
        self.loss_scaling = None  # float16: what fit found out about the loss scale (results.json)

    def run_identity(self) -> dict:
        """What decides the data order and the per-replica state: a resumed run must match it. The
        precision decides the arithmetic, and float16's loss scale is part of the optimizer state."""
        return {"recipe": self.recipe, "global_batch": self.global_batch, "replicas": self.launcher.num_replicas,
                "per_replica_batch": self.per_replica_batch, "seed": self.seed,
                "training_examples": self.num_examples, "precision": self.precision}

    # -- set-up ------------------------------------------------------------------------------------
    def setup(self, model: keras.Model, optimizer: keras.optimizers.Optimizer) -> None:
        """Build the optimizer's state, restore the latest checkpoint (--resume), sync replicas."""
        with self.launcher.scope():
            if self.precision == "mixed_float16":  # float16 gradients underflow without a loss scale
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=self.loss_scale_initial,
                                                                dynamic_growth_steps=LOSS_SCALE_GROWTH_STEPS)
            optimizer.build(model.trainable_variables)
        self.model, self.optimizer = model, optimizer
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        # model.variables adds what the model's own checkpoint graph leaves out: the random state of
        # the dropout layers (Keras SeedGenerator). Without it a resumed run draws other masks.
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=self.step,
                                              model_state=list(model.variables))
        latest = tf.train.latest_checkpoint(self.checkpoint_dir)
        if self.resume and latest:  # _check_resume_target has checked its settings and step
            try:
                self.checkpoint.restore(latest).assert_existing_objects_matched()
            except Exception as error:  # a truncated or foreign file fails in many ways (OpError, IndexError, ...)
                raise ResumeError(
                    f"checkpoint {latest} cannot be restored into this model ({type(error).__name__}: "
                    f"{str(error).strip().splitlines()[0][:300]}); resume with the model settings that "
                    "wrote it, delete it to fall back to the one before, or start over in another "
                    "--results-dir") from None
            self.start_step = int(self.step.numpy())
            log(self.launcher, f"resumed from {latest} at step {self.start_step}")
        elif self.resume:
            log(self.launcher, f"--resume: no checkpoint in {self.checkpoint_dir}, starting from step 0")
        elif latest:
            raise FileExistsError(
                f"{self.checkpoint_dir} already holds checkpoints ({os.path.basename(latest)}); "
                "pass --resume to continue that run, or choose another --results-dir")
        if self.resume and self.launcher.is_chief and os.path.exists(stopped_marker(self.results_dir)):
            os.remove(stopped_marker(self.results_dir))  # this run continues the stopped one
        self.launcher.prepare(model, optimizer)

    # -- training ----------------------------------------------------------------------------------
    def _build_train_step(self, task: Task, fault_overflow: tuple[int, int] | None = None):
        model, optimizer, launcher = self.model, self.optimizer, self.launcher
        variables = model.trainable_variables
        global_batch = float(self.global_batch)

        # XLA, when asked, compiles one replica's forward and backward pass; the gradient
        # aggregation stays outside it, where the strategies and Horovod insert their collectives.
        @tf.function(jit_compile=True if self.xla else None)
        def forward_backward(x, y):
            with tf.GradientTape() as tape:
                y_pred = model(x, training=True)
                loss = tf.reduce_sum(tf.cast(task.loss_fn(y, y_pred), tf.float32)) / global_batch
                scaled_loss = optimizer.scale_loss(loss)
            gradients = tape.gradient(scaled_loss, variables)
            sums = {k: tf.cast(v, tf.float32) for k, v in task.metric_sums(y, y_pred).items()}
            sums["examples"] = tf.cast(tf.shape(y)[0], tf.float32)
            return loss, gradients, sums

        drifting = self._replica_state()[1]
        # float16 loss scaling skips a step whose gradients overflowed. Horovod sums the gradients
        # before apply_gradients, so every rank sees the same inf or nan; the strategies sum them inside
        # it, after the LossScaleOptimizer has looked at each replica's own (with merge_call, the first
        # replica of each process decides for its process), so there the replicas decide together.
        skip_together = scales_loss(optimizer) and launcher.num_replicas > 1 and launcher.name != "horovod"

        def replica_step(x, y, stop, step):
            loss, gradients, sums = forward_backward(x, y)
            if fault_overflow:
                gradients = self._overflow_fault(gradients, step, *fault_overflow)
            gradients = launcher.aggregate_gradients(gradients)
            if skip_together:
                gradients = self._overflow_anywhere_is_overflow_everywhere(gradients)
            optimizer.apply_gradients(zip(gradients, variables))
            # Batch-norm moving statistics: every replica takes the mean, so all hold one value.
            means = launcher.mean_over_replicas([tf.identity(v.value) for v in drifting])  # tensors, not variables
            for variable, mean in zip(drifting, means):
                variable.assign(mean)
            # The stop flag travels with the outputs: summed over replicas, every process sees the
            # same total, so all of them stop after the same step.
            return {"loss": loss, **sums, "stop": tf.identity(stop)}

        # Several steps per call (--steps-per-loop): the host neither waits for nor reads the
        # steps in between, which saves a round-trip per step. Only the last step's outputs are
        # summed over the replicas and returned; the stop flag travels with them.
        @tf.function
        def train_loop(iterator, first, steps, stop):
            for i in tf.range(steps - 1):
                launcher.run(lambda x, y: replica_step(x, y, stop, first + i), next(iterator), reduce=False)
            return launcher.run(lambda x, y: replica_step(x, y, stop, first + steps - 1), next(iterator))

        return train_loop

    def _overflow_anywhere_is_overflow_everywhere(self, gradients):
        """In a replica's step: the gradients, or nan on every replica when any replica's overflowed
        (one scalar all-reduce), so that every replica's LossScaleOptimizer skips the step alike."""
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in gradients if g is not None])
        overflowed = self.launcher.mean_over_replicas([1.0 - tf.cast(finite, tf.float32)])[0] > 0
        return [g if g is None else tf.where(overflowed, tf.constant(np.nan, g.dtype), g) for g in gradients]

    def _overflow_fault(self, gradients, step, replica: int, at_step: int):
        """--fault-overflow R:STEP (testing only): replica R's own gradients become inf at step STEP."""
        if self.launcher.name == "horovod":  # Horovod: one replica per rank, outside any strategy
            replica_id = self.launcher.worker_index
        else:
            replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
        here = tf.logical_and(tf.equal(step, at_step), tf.equal(replica_id, replica))
        return [g if g is None else tf.where(here, tf.constant(np.inf, g.dtype), g) for g in gradients]

    def _check_resume_target(self) -> None:
        """--resume, decided before any model is built, collective run or file written: refuse a
        checkpoint from other settings or past this run's last step, and end a run that already
        finished without touching it. Every process reads the same files, so all decide alike and
        none is left waiting for a peer that returned."""
        latest = tf.train.latest_checkpoint(self.checkpoint_dir) if self.resume else None
        if not latest:
            return
        self._check_identity(latest)
        try:
            reached = int(tf.train.load_checkpoint(latest).get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))
        except Exception:  # unreadable or foreign: setup's restore names the problem
            return
        if reached > self.total_steps:
            raise ResumeError(
                f"--resume: {latest} is at step {reached}, past this run's last step {self.total_steps} "
                f"(--max-steps/--epochs); pass --max-steps {reached} or more (or enough --epochs) to "
                "continue it, or start over in another --results-dir")
        results = os.path.join(self.results_dir, RESULTS_FILE)
        if reached == self.total_steps and self._results_complete(results, reached):
            log(self.launcher, f"--resume: the run already finished at step {reached}; its results are in "
                               f"{results}; nothing to do")
            raise RunFinished(results)

    @staticmethod
    def _results_complete(path: str, steps: int) -> bool:
        """`path` is a whole results.json of a run that ended at `steps`."""
        try:
            with open(path) as handle:
                results = json.load(handle)
        except (OSError, ValueError):
            return False
        return isinstance(results, dict) and RESULT_FIELDS <= results.keys() and results.get("steps") == steps

    def _identity_path(self) -> str:
        return os.path.join(self.checkpoint_dir, "run.json")

    def _check_identity(self, latest: str) -> None:
        """Refuse a resume that could not continue the same run (different data order or replicas)."""
        try:
            with open(self._identity_path()) as handle:
                saved = json.load(handle)
        except (OSError, ValueError) as error:
            raise ResumeError(f"{self._identity_path()} cannot be read ({error}), so {latest} cannot be resumed "
                              "safely; start over in another --results-dir") from None
        identity = self.run_identity()
        if "precision" not in saved:  # written before the precision was recorded
            del identity["precision"]
        differ = [key for key, value in identity.items() if saved.get(key) != value]
        if not differ:
            return
        reasons, remedies = [], []
        if set(differ) - {"precision"}:
            reasons.append("the data order and the per-replica state would not match its step count")
            remedies.append("the same --batch-size, replica count, --seed and data")
        if "precision" in differ:  # float16's loss scale lives in the optimizer state, and not in the others'
            reasons.append("the arithmetic and the optimizer state (float16's loss scale) differ between precisions")
            remedies.append(f"its precision ({amp_flags(saved['precision'])}; a bare --amp is float16 only on a GPU)")
        raise ResumeError(
            f"--resume: {latest} was written by a run with other settings "
            f"({'; '.join(f'{key} {saved.get(key)} -> {identity[key]}' for key in differ)}); {' and '.join(reasons)}. "
            f"Resume with {' and '.join(remedies)}, or start over in another --results-dir")

    def _replica_state(self):
        """What must be identical on every replica: the trainable weights and the float state that
        no gradient keeps in sync (batch-norm moving statistics)."""
        model = self.model
        drifting = [v for v in model.non_trainable_variables if "float" in str(v.dtype)]
        return model.trainable_variables, drifting

    def _loss_scale_state(self) -> list:
        """float16: the loss scale and its growth counter, which each replica updates on its own."""
        optimizer = self.optimizer
        return [optimizer.dynamic_scale, optimizer.step_counter] if scales_loss(optimizer) else []

    def _loss_scale(self) -> float:
        return float(keras.ops.convert_to_numpy(self.optimizer.dynamic_scale))

    def _gather_loss_scaling(self) -> dict | None:
        """float16: every replica's loss scale and count of steps skipped for overflow (the steps it
        did not apply: the step count minus the optimizer's), gathered like the fingerprints. Raises
        DesyncError when two replicas differ."""
        optimizer = self.optimizer
        if not scales_loss(optimizer):
            return None
        step = int(self.step.numpy())
        rows = [[float(scale.numpy()), step - int(applied.numpy())]
                for scale, applied in zip(replica_copies(optimizer.dynamic_scale), replica_copies(optimizer.iterations))]
        rows = self.launcher.gather_replica_rows(rows)
        scales, skipped = [row[0] for row in rows], [int(row[1]) for row in rows]
        if len(set(scales)) > 1 or len(set(skipped)) > 1:
            listing = ", ".join(f"replica {i}: {scale:g} ({count} skipped)"
                                for i, (scale, count) in enumerate(zip(scales, skipped)))
            raise DesyncError(f"replicas finished with different loss scales or skipped steps ({listing}); "
                              "they did not skip the same overflowed steps, so this run trained no single model; "
                              "results were not written")
        log(self.launcher, f"loss scale {scales[0]:g} on every replica; {skipped[0]} of {step} steps skipped for "
                           "overflow on every replica")
        return {"initial_scale": optimizer.initial_scale, "growth_steps": optimizer.dynamic_growth_steps,
                "final_scale": scales[0], "skipped_steps": skipped[0],
                "replica_scales": scales, "replica_skipped_steps": skipped}

    def _check_overflow_fault(self, fault_overflow: tuple[int, int] | None) -> None:
        """--fault-overflow R:STEP needs float16's loss scaling and a replica R."""
        if fault_overflow and not scales_loss(self.optimizer):
            raise UserError(f"--fault-overflow tests float16 loss scaling, and this run computes in {self.precision}; "
                            "add --amp float16")
        replicas = self.launcher.num_replicas
        if fault_overflow and fault_overflow[0] >= replicas:
            raise UserError(f"--fault-overflow {fault_overflow[0]}:{fault_overflow[1]}: there is no replica "
                            f"{fault_overflow[0]}, this run has {replicas} (0..{replicas - 1})")

    def _save_checkpoint(self) -> None:
        # Every worker saves (saving can involve collectives), but only the chief keeps its copy.
        # Horovod has no collectives in saving: only rank 0 writes.
        if self.launcher.name == "horovod" and not self.launcher.is_chief:
            return
        directory = self.checkpoint_dir
        if not self.launcher.is_chief:
            directory = tempfile.mkdtemp(prefix=f"worker{self.launcher.worker_index}-ckpt-")
        manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=2)
        needed = _nbytes(self.model.variables) + _nbytes(self.optimizer.variables)
        with disk_full_is_one_line(directory, needed, "a checkpoint"):
            if self.launcher.is_chief:
                write_json(self._identity_path(), self.run_identity())
            manager.save(checkpoint_number=int(self.step.numpy()))
        if not self.launcher.is_chief:
            shutil.rmtree(directory, ignore_errors=True)

    def _profile(self, step: int, before: bool) -> None:
        """TensorBoard profiler trace of steps START+1..END (--profile START:END), chief only."""
        start, end = self.profile_steps
        if not self.launcher.is_chief:
            return
        folder = os.path.join(self.results_dir, "profile")
        if before and step == start + 1:
            tf.profiler.experimental.start(folder)
        elif not before and (step == end or (step == self.total_steps and start < step < end)):
            tf.profiler.experimental.stop()
            log(self.launcher, f"profiler trace of steps {start + 1}..{step}: tensorboard --logdir {folder}")

    def fit(self, dataset, task: Task, fault_desync_replica: int | None = None, fault_slow_step: float = 0.0,
            explain_input_error: Callable[[int], str | None] | None = None,
            fault_overflow: tuple[int, int] | None = None) -> None:
        """Train from `start_step` to `total_steps`, then check that every replica agrees.

        `explain_input_error(step)`, when given, is asked to name the file or value behind a data
        error (a failed decode, a label out of range) in the batch of `step`; its answer becomes a
        one-line DataError instead of TensorFlow's traceback.
        """
        launcher = self.launcher
        log(launcher, f"{self.recipe}: launcher {launcher.name}, {launcher.num_workers} process(es), "
                      f"{launcher.num_replicas} replica(s), global batch {self.global_batch} "
                      f"({self.per_replica_batch} per replica), steps {self.start_step}..{self.total_steps} "
                      f"({self.steps_per_epoch} per epoch)")
        self._check_overflow_fault(fault_overflow)
        train_loop = self._build_train_step(task, fault_overflow)
        checkpoint_every = self.checkpoint_every or self.steps_per_epoch
        self.step_times = []
        iterator = iter(dataset)
        step = self.start_step
        last = time.perf_counter()
        while step < self.total_steps:
            first, step = step + 1, self._loop_end(step, checkpoint_every)
            if self.profile_steps:
                self._profile(first, before=True)
            outputs = self._run_steps(train_loop, iterator, first, step, explain_input_error)
            time.sleep(fault_slow_step * (step - first + 1))
            now = time.perf_counter()
            self.step_times += [(now - last) / (step - first + 1)] * (step - first + 1)
            stop = outputs.pop("stop") > 0
            loss = float(outputs.pop("loss"))
            if not math.isfinite(loss):
                raise FloatingPointError(f"loss became {loss} at step {step}; lower --lr or check the data")
            if step % self.log_every == 0 or step == self.total_steps or stop:
                self._log_step(step, loss, task.summarize(outputs))
            self.step.assign(step)
            if self.profile_steps:
                self._profile(step, before=False)
            if step % checkpoint_every == 0 or step == self.total_steps or stop:
                self._save_checkpoint()
            if stop and step < self.total_steps:
                self._stop(step)
            last = time.perf_counter()  # checkpoint and logging time is not step time
        for writer in self._writers.values():
            writer.flush()

        trainable, drifting = self._replica_state()
        if fault_desync_replica is not None:
            launcher.perturb_replica(trainable, fault_desync_replica)
        self.loss_scaling = self._gather_loss_scaling()
        self.fingerprints = launcher.all_fingerprints(trainable + drifting + self._loss_scale_state())
        check_in_sync(self.fingerprints)
        log(launcher, f"replicas in sync: {len(self.fingerprints)} identical fingerprints of the weights, "
                      f"any batch-norm statistics and any loss scale ({self.fingerprints[0]})")

    def _loop_end(self, step: int, checkpoint_every: int) -> int:
        """The last step of the next compiled call: at most --steps-per-loop steps after `step`, and
        never past a step whose outputs the host needs (log, checkpoint, profile, the end)."""
        end = min(step + self.steps_per_loop, self.total_steps)
        for every in (self.log_every, checkpoint_every):
            end = min(end, (step // every + 1) * every)
        for boundary in self.profile_steps or ():
            if step < boundary:
                end = min(end, boundary)
        return end

    def _run_steps(self, train_loop, iterator, first: int, last: int, explain_input_error) -> dict:
        """Steps `first`..`last` in one call; the last one's outputs summed over replicas, as float64."""
        stop = tf.constant(1.0 if self.stop_flag.requested else 0.0)
        try:
            outputs = train_loop(iterator, tf.constant(first), tf.constant(last - first + 1), stop)
            return {key: np.asarray(value.numpy(), np.float64) for key, value in outputs.items()}
        except (tf.errors.InvalidArgumentError, tf.errors.DataLossError):
            for step in range(first, last + 1) if explain_input_error else ():
                message = explain_input_error(step)
                if message:
                    raise DataError(message) from None
            raise
        except self.launcher.peer_errors as error:
            raise ClusterError(
                f"worker {self.launcher.worker_index}: lost contact with the other workers at steps {first}..{last} "
                f"({type(error).__name__}: {peer_error_summary(error)}); a peer died, froze or was stopped. "
                "Continue from the last checkpoint with --resume") from None

    def _log_step(self, step: int, loss: float, metrics: dict) -> None:
        """Progress line, the history in results.json and TensorBoard scalars (chief only)."""
        if scales_loss(self.optimizer):  # float16: the scale after this step
            metrics = {**metrics, "loss_scale": self._loss_scale()}
        self.history.append({"step": step, "loss": loss, **metrics})
        step_time = float(np.median(self.step_times[-self.log_every:]))
        rate = self.global_batch / step_time
        shown = "  ".join(f"{k} {v:.4f}" if k != "loss_scale" else f"loss scale {v:g}"
                          for k, v in metrics.items() if isinstance(v, float))
        rate_text = f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"
        log(self.launcher, f"step {step:>6}/{self.total_steps}  epoch {(step - 1) // self.steps_per_epoch + 1}"
                           f"  loss {loss:.4f}  {shown}  {rate_text} img/s")
        scalars = {"loss": loss, **{k: v for k, v in metrics.items() if isinstance(v, float)},
                   "learning_rate": self._learning_rate(), "images_per_sec": rate, "step_time_ms": step_time * 1e3}
        self._write_scalars("train", step, scalars)

    def _learning_rate(self) -> float:
        return float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))

    def _write_scalars(self, run: str, step: int, scalars: dict) -> None:
        """TensorBoard scalars under RESULTS/tensorboard/RUN (chief only), beside the --profile trace."""
        if not self.launcher.is_chief:
            return
        if run not in self._writers:
            self._writers[run] = tf.summary.create_file_writer(os.path.join(self.results_dir, "tensorboard", run))
        with self._writers[run].as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(name, value)

    def _stop(self, step: int) -> None:
        """After the checkpoint of `step`: wait for every process, then leave with StopRequested."""
        if self.launcher.is_chief:  # for whatever started the job: horovodrun reports only "status 1"
            write_json(stopped_marker(self.results_dir), {"step": step, "total_steps": self.total_steps,
                                                         "signal": self.stop_flag.signal_name})
        self.launcher.barrier()  # nobody exits (and has a scheduler kill the rest) before the checkpoint is whole
        raise StopRequested(f"stopped at step {step} of {self.total_steps} ({self.stop_flag.signal_name or 'a peer'}"
                            f"{'' if self.stop_flag.requested else ' was signalled'}); checkpoint in "
                            f"{self.checkpoint_dir}; continue with --resume", step)

    # -- evaluation and results --------------------------------------------------------------------
    def evaluate(self, dataset, task: Task, explain_input_error: Callable[[], str | None] | None = None) -> dict:
        """Loss and metrics over an evaluation set shared by every process of the job.

        Each process passes the dataset of its own share (`launcher.eval_share(num_examples)`); the
        loss and metric sums are added up over the processes, so every example counts exactly once
        and every process returns the whole set's figures. Every process must call it.
        """
        model = self.model

        @tf.function
        def eval_step(x, y):
            y_pred = model(x, training=False)
            sums = {k: tf.cast(v, tf.float32) for k, v in task.metric_sums(y, y_pred).items()}
            sums["loss"] = tf.reduce_sum(tf.cast(task.loss_fn(y, y_pred), tf.float32))
            sums["examples"] = tf.cast(tf.shape(y)[0], tf.float32)
            return sums

        totals = {}
        try:
            for x, y in dataset:
                for key, value in eval_step(x, y).items():
                    totals[key] = totals.get(key, 0.0) + value.numpy().astype(np.float64)
        except (tf.errors.InvalidArgumentError, tf.errors.DataLossError):
            message = explain_input_error() if explain_input_error else None  # names the file, as in fit
            if message:
                raise DataError(message) from None
            raise
        if not totals:
            raise DataError("this process's share of the evaluation set is empty")
        totals = self._sum_over_processes(totals)
        metrics = {"loss": float(totals["loss"] / totals["examples"]), **task.summarize(totals),
                   "examples": int(totals["examples"])}
        self._write_scalars("eval", self.total_steps, {k: v for k, v in metrics.items() if isinstance(v, float)})
        return metrics

    def _sum_over_processes(self, totals: dict) -> dict:
        """{name: float64 array} summed over every process, in one collective."""
        keys = sorted(totals)
        shapes = [np.shape(totals[key]) for key in keys]
        flat = np.concatenate([np.ravel(totals[key]) for key in keys]) if keys else np.zeros([0])
        flat = self.launcher.sum_over_processes(flat)
        summed, offset = {}, 0
        for key, shape in zip(keys, shapes):
            size = int(np.prod(shape))
            summed[key] = flat[offset:offset + size].reshape(shape)
            offset += size
        return summed

    def save_results(self, extra: dict | None = None) -> str | None:
        """results.json and the final weights, written by the chief; every process calls it and
        returns only once the chief has written them, so the job's processes end together."""
        if not self.launcher.is_chief:
            self.launcher.barrier()
            return None
        path = os.path.join(self.results_dir, RESULTS_FILE)
        with disk_full_is_one_line(self.results_dir, _nbytes(self.model.variables), "the final weights"):
            self.model.save_weights(os.path.join(self.results_dir, FINAL_WEIGHTS_FILE))
        results = {
            "recipe": self.recipe,
            "launcher": self.launcher.name,
            "nodes": self.launcher.num_nodes,
            "workers": self.launcher.num_workers,
            "replicas": self.launcher.num_replicas,
            "per_replica_batch": self.per_replica_batch,
            "global_batch": self.global_batch,
            "start_step": self.start_step,
            "steps": self.total_steps,
            "steps_per_epoch": self.steps_per_epoch,
            "warmup_steps": self.warmup_steps,
            **throughput(self.step_times, self.global_batch, self.launcher.num_replicas, self.warmup_steps),
            "losses": self.history,
            "replica_fingerprints": self.fingerprints,
            "replicas_in_sync": len(set(self.fingerprints)) == 1,
            "precision": self.precision,
            "loss_scaling": self.loss_scaling,
            "xla": self.xla,
            "versions": versions(),
            "command": sys.argv,
            **(extra or {}),
        }
        missing = RESULT_FIELDS - results.keys()
        if missing:  # a recipe that passes no final_metrics, say: the nightly and bench read every field
            raise RuntimeError(f"results.json would lack {', '.join(sorted(missing))} (common.contract.RESULT_FIELDS)")
        with disk_full_is_one_line(self.results_dir, len(json.dumps(results, indent=2)), RESULTS_FILE,
                                   also=[os.path.join(self.results_dir, FINAL_WEIGHTS_FILE)]):
            write_json(path, results)
        for writer in self._writers.values():
            writer.flush()
        print(f"results: {path}", flush=True)
        self.launcher.barrier()
        return path
