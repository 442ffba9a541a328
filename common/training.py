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

from common.data import steps_per_epoch
from common.launchers import Launcher
from common.results import check_in_sync, throughput, versions, write_json


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


def configure_precision(amp: bool) -> str:
    """--amp: mixed_float16 on GPU (tensor cores), mixed_bfloat16 on CPU (no loss scaling needed)."""
    policy = "float32"
    if amp:
        policy = "mixed_float16" if tf.config.list_physical_devices("GPU") else "mixed_bfloat16"
    keras.mixed_precision.set_global_policy(policy)
    return policy


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
    history: list = field(default_factory=list)

    def __post_init__(self):
        self.global_batch = self.per_replica_batch * self.launcher.num_replicas
        self.steps_per_epoch = steps_per_epoch(self.num_examples, self.global_batch)
        self.total_steps = self.epochs * self.steps_per_epoch
        if self.max_steps:
            self.total_steps = min(self.total_steps, self.max_steps)
        self.start_step = 0
        self.checkpoint_dir = os.path.join(self.results_dir, "checkpoints")

    # -- set-up ------------------------------------------------------------------------------------
    def setup(self, model: keras.Model, optimizer: keras.optimizers.Optimizer) -> None:
        """Build the optimizer's state, restore the latest checkpoint (--resume), sync replicas."""
        with self.launcher.scope():
            if keras.mixed_precision.global_policy().name == "mixed_float16":
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            optimizer.build(model.trainable_variables)
        self.model, self.optimizer = model, optimizer
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=self.step)
        latest = tf.train.latest_checkpoint(self.checkpoint_dir)
        if self.resume and latest:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
            self.start_step = int(self.step.numpy())
            log(self.launcher, f"resumed from {latest} at step {self.start_step}")
        elif self.resume:
            log(self.launcher, f"--resume: no checkpoint in {self.checkpoint_dir}, starting from step 0")
        elif latest:
            raise FileExistsError(
                f"{self.checkpoint_dir} already holds checkpoints ({os.path.basename(latest)}); "
                "pass --resume to continue that run, or choose another --results-dir")
        self.launcher.prepare(model, optimizer)

    # -- training ----------------------------------------------------------------------------------
    def _build_train_step(self, task: Task):
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

        def replica_step(x, y):
            loss, gradients, sums = forward_backward(x, y)
            gradients = launcher.aggregate_gradients(gradients)
            optimizer.apply_gradients(zip(gradients, variables))
            return {"loss": loss, **sums}

        @tf.function
        def train_step(batch):
            return launcher.run(replica_step, batch)

        return train_step

    def _replica_state(self):
        """What must be identical on every replica: the trainable weights and the float state that
        no gradient keeps in sync (batch-norm moving statistics)."""
        model = self.model
        drifting = [v for v in model.non_trainable_variables if "float" in str(v.dtype)]
        return model.trainable_variables, drifting

    def _sync_drifting_state(self) -> None:
        self.launcher.average_replicas(self._replica_state()[1])

    def _save_checkpoint(self) -> None:
        self._sync_drifting_state()  # a collective: every replica takes part, before anyone saves
        # Every worker saves (saving can involve collectives), but only the chief keeps its copy.
        # Horovod has no collectives in saving: only rank 0 writes.
        if self.launcher.name == "horovod" and not self.launcher.is_chief:
            return
        directory = self.checkpoint_dir
        if not self.launcher.is_chief:
            directory = tempfile.mkdtemp(prefix=f"worker{self.launcher.worker_index}-ckpt-")
        manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=2)
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

    def fit(self, dataset, task: Task, fault_desync_replica: int | None = None) -> None:
        """Train from `start_step` to `total_steps`, then check that every replica agrees."""
        launcher = self.launcher
        log(launcher, f"{self.recipe}: launcher {launcher.name}, {launcher.num_workers} process(es), "
                      f"{launcher.num_replicas} replica(s), global batch {self.global_batch} "
                      f"({self.per_replica_batch} per replica), steps {self.start_step}..{self.total_steps} "
                      f"({self.steps_per_epoch} per epoch)")
        train_step = self._build_train_step(task)
        checkpoint_every = self.checkpoint_every or self.steps_per_epoch
        self.step_times, self.sums = [], {}
        iterator = iter(dataset)
        last = time.perf_counter()
        for step in range(self.start_step + 1, self.total_steps + 1):
            if self.profile_steps:
                self._profile(step, before=True)
            outputs = {k: np.asarray(v.numpy(), np.float64) for k, v in train_step(next(iterator)).items()}
            now = time.perf_counter()
            self.step_times.append(now - last)
            loss = float(outputs.pop("loss"))
            if not math.isfinite(loss):
                raise FloatingPointError(f"loss became {loss} at step {step}; lower --lr or check the data")
            for key, value in outputs.items():
                self.sums[key] = self.sums.get(key, 0.0) + value
            if step % self.log_every == 0 or step == self.total_steps:
                metrics = task.summarize(outputs)
                self.history.append({"step": step, "loss": loss, **metrics})
                rate = self.global_batch / np.median(self.step_times[-self.log_every:])
                rate = f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"
                shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
                log(launcher, f"step {step:>6}/{self.total_steps}  epoch {(step - 1) // self.steps_per_epoch + 1}"
                              f"  loss {loss:.4f}  {shown}  {rate} img/s")
            self.step.assign(step)
            if self.profile_steps:
                self._profile(step, before=False)
            if step % checkpoint_every == 0 or step == self.total_steps:
                self._save_checkpoint()
            last = time.perf_counter()  # checkpoint and logging time is not step time

        # The last step always checkpoints, which also averaged the batch-norm statistics.
        trainable, drifting = self._replica_state()
        if fault_desync_replica is not None:
            launcher.perturb_replica(trainable, fault_desync_replica)
        self.fingerprints = launcher.all_fingerprints(trainable + drifting)
        check_in_sync(self.fingerprints)
        log(launcher, f"replicas in sync: {len(self.fingerprints)} identical fingerprints of the weights "
                      f"and any batch-norm statistics ({self.fingerprints[0]})")

    # -- evaluation and results --------------------------------------------------------------------
    def evaluate(self, dataset, task: Task) -> dict:
        """Loss and metrics over a whole dataset (every example counted once), on this process."""
        model = self.model

        @tf.function
        def eval_step(x, y):
            y_pred = model(x, training=False)
            sums = {k: tf.cast(v, tf.float32) for k, v in task.metric_sums(y, y_pred).items()}
            sums["loss"] = tf.reduce_sum(tf.cast(task.loss_fn(y, y_pred), tf.float32))
            sums["examples"] = tf.cast(tf.shape(y)[0], tf.float32)
            return sums

        totals = {}
        for x, y in dataset:
            for key, value in eval_step(x, y).items():
                totals[key] = totals.get(key, 0.0) + value.numpy().astype(np.float64)
        if not totals:
            raise ValueError("the evaluation dataset is empty")
        return {"loss": float(totals["loss"] / totals["examples"]), **task.summarize(totals),
                "examples": int(totals["examples"])}

    def save_results(self, extra: dict | None = None) -> str | None:
        """results.json and the final weights, written by the chief only."""
        if not self.launcher.is_chief:
            return None
        path = os.path.join(self.results_dir, "results.json")
        self.model.save_weights(os.path.join(self.results_dir, "final.weights.h5"))
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
            "precision": keras.mixed_precision.global_policy().name,
            "xla": self.xla,
            "versions": versions(),
            "command": sys.argv,
            **(extra or {}),
        }
        write_json(path, results)
        print(f"results: {path}", flush=True)
        return path
