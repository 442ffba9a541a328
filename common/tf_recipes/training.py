"""One training loop for every launcher.

A recipe builds its model and optimizer under `launcher.scope()`, hands them to a `Trainer` with a
`Task` (per-example loss and summed metrics), and calls `fit`. The loop is the same under all four
launchers; the launcher decides where each replica runs, how gradients are combined and which share
of the data each process reads.

Every replica divides the *sum* of its per-example losses by the *global* batch, so the gradients summed
over the replicas (inside `apply_gradients`, or Horovod's `aggregate_gradients`) are exactly the gradient
of the mean loss over the global batch, as one device computes it. A run ends in one call, `Trainer.finish`.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from tf_recipes import desync, evaluation as evaluating, export as exporting, reporting
from tf_recipes.checkpoints import Checkpoints, hold_results_dir
from tf_recipes.config import LOSS_SCALE_GROWTH_STEPS, LOSS_SCALE_INITIAL, Plan, RunConfig
from tf_recipes.config import config_yaml, precision_policy
from tf_recipes.contract import ClusterError, UserError
from tf_recipes.export import ExportSpec
from tf_recipes.data import DataError
from tf_recipes.launchers import Launcher
from tf_recipes.reporting import log, scales_loss, write_json
from tf_recipes.stopping import StopFlag, leave_behind, peer_error_summary


@dataclass
class Task:
    """What a recipe trains: a per-example loss and metrics kept as sums over examples."""

    loss_fn: Callable  # (y_true, y_pred) -> per-example loss, shape [batch]
    metric_sums: Callable = lambda y_true, y_pred: {}  # -> {name: sum over the batch}
    summarize: Callable = lambda sums: {}  # {name: total} (with "examples") -> {metric: value}
    # Evaluation only: the sums `summarize` turns into the best constant prediction's figure (the baseline)
    baseline_sums: Callable = lambda y_true, y_pred: {}


def classification_task() -> Task:
    """Sparse categorical cross-entropy and accuracy, for models that end in a softmax over classes."""

    def correct(y_true, y_pred):
        predicted = tf.cast(tf.argmax(y_pred, axis=-1), y_true.dtype)
        return {"correct": tf.reduce_sum(tf.cast(tf.equal(predicted, y_true), tf.float32))}

    def class_counts(y_true, y_pred):
        one_hot = tf.one_hot(tf.cast(y_true, tf.int32), y_pred.shape[-1])
        return {"class_counts": tf.reduce_sum(one_hot, axis=0)}

    def summarize(sums):
        metrics = {"accuracy": float(sums["correct"] / sums["examples"])}
        # the majority class's accuracy: what predicting one class everywhere scores
        if "class_counts" in sums:
            metrics["majority_accuracy"] = float(np.max(sums["class_counts"]) / sums["examples"])
        return metrics

    return Task(keras.losses.sparse_categorical_crossentropy, correct, summarize, baseline_sums=class_counts)


def configure_precision(amp: str | None) -> str:
    """--amp [DTYPE]: set and return Keras's dtype policy (tf_recipes.config.precision_policy: a bare --amp is
    float16 with loss scaling on a GPU, bfloat16 on the CPU)."""
    policy = precision_policy(amp, gpu=bool(tf.config.list_physical_devices("GPU")))
    keras.mixed_precision.set_global_policy(policy)
    return policy


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear from the base rate to `scale` x base over `warmup_steps`, then constant (--scale-lr: the
    per-example step size kept as the global batch grows with the replicas)."""

    def __init__(self, base_rate: float, scale: float, warmup_steps: int):
        self.base_rate, self.scale, self.warmup_steps = base_rate, scale, warmup_steps

    def __call__(self, step):
        progress = tf.minimum(tf.cast(step, tf.float32) / max(self.warmup_steps, 1), 1.0)
        return self.base_rate * (1.0 + (self.scale - 1.0) * progress)

    def get_config(self):
        return {"base_rate": self.base_rate, "scale": self.scale, "warmup_steps": self.warmup_steps}


class WarmupCosineSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """--lr-schedule cosine: linear from 0 to `peak_rate` over `warmup_steps`, then down to 0 along a
    half cosine at `total_steps`. A --target that ends the run early leaves the schedule as planned."""

    def __init__(self, peak_rate: float, warmup_steps: int, total_steps: int):
        self.peak_rate, self.warmup_steps, self.total_steps = peak_rate, warmup_steps, total_steps

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warmup = tf.cast(self.warmup_steps, tf.float32)
        ramp = (step + 1.0) / tf.maximum(warmup, 1.0)
        progress = tf.clip_by_value((step - warmup) / max(self.total_steps - self.warmup_steps, 1), 0.0, 1.0)
        decay = 0.5 * (1.0 + tf.cos(math.pi * progress))
        return self.peak_rate * tf.where(step < warmup, ramp, decay)

    def get_config(self):
        return {
            "peak_rate": self.peak_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
        }


class WarmupPolySchedule(keras.optimizers.schedules.LearningRateSchedule):
    """--lr-schedule poly: (peak - end) (1 - step/total_steps)^0.9 + end, as mmsegmentation's and DeepLab's
    "poly" policy; over the first `warmup_steps`, that rate times (step + 1)/warmup_steps."""

    def __init__(self, peak_rate: float, end_rate: float, warmup_steps: int, total_steps: int):
        self.peak_rate, self.end_rate = peak_rate, end_rate
        self.warmup_steps, self.total_steps = warmup_steps, total_steps

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        progress = tf.clip_by_value(step / max(self.total_steps, 1), 0.0, 1.0)
        rate = (self.peak_rate - self.end_rate) * (1.0 - progress) ** POLY_POWER + self.end_rate
        return rate * tf.minimum((step + 1.0) / max(self.warmup_steps, 1), 1.0)

    def get_config(self):
        return {
            "peak_rate": self.peak_rate,
            "end_rate": self.end_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
        }


POLY_POWER = 0.9  # every published poly schedule of segmentation uses this power


def learning_rate(config: RunConfig, plan: Plan):
    """The optimizer's rate (--lr-schedule): --lr, a WarmupSchedule up to it times the replicas (--scale-lr),
    or a WarmupCosineSchedule (cosine) or WarmupPolySchedule (poly) over the plan's steps to that peak."""
    # Distributed: learning rate scaled by replicas
    scale = float(plan.replicas) if config.scale_lr else 1.0
    if config.lr_schedule == "cosine":
        return WarmupCosineSchedule(config.lr * scale, config.lr_warmup_steps, plan.planned_steps)
    if config.lr_schedule == "poly":
        peak = config.lr * scale
        return WarmupPolySchedule(peak, config.lr_end * scale, config.lr_warmup_steps, plan.planned_steps)
    if scale == 1.0:
        return config.lr
    return WarmupSchedule(config.lr, scale, config.lr_warmup_steps)


def loop_end(
    step: int, total_steps: int, steps_per_loop: int, every: tuple = (), boundaries: tuple = ()
) -> int:
    """The last step of the compiled call after `step`: at most `steps_per_loop` on, never past a multiple of
    any of `every` (--log-every, the checkpoints), a step of `boundaries` ahead (--profile) or the last."""
    ahead = [(step // interval + 1) * interval for interval in every] + [b for b in boundaries if step < b]
    return min(step + steps_per_loop, total_steps, *ahead)


def summed_over_processes(launcher: Launcher, totals: dict) -> dict:
    """{name: float64 array} summed over every process, in one collective."""
    keys = sorted(totals)
    flat = np.concatenate([np.ravel(totals[key]) for key in keys] or [np.zeros([0])])
    flat = launcher.sum_over_processes(flat)  # Distributed: evaluation sums added over processes
    parts = np.split(flat, np.cumsum([np.size(totals[key]) for key in keys[:-1]], dtype=int))
    return {key: part.reshape(np.shape(totals[key])) for key, part in zip(keys, parts, strict=False)}


RELEASE_WAIT = 1.0  # seconds: how long finish() waits for the training iterator's release


def release_in_background(holder: list) -> threading.Thread:
    """Drop the training iterator, `holder`'s only item, on a thread that the process's exit does not wait
    for (tf_recipes.stopping.leave_behind): a prefetching distributed iterator's deletion held the end of a
    run 1 to 31 s (TF 2.17.1). Not a daemon: one returning at exit aborted it."""
    thread = threading.Thread(target=holder.clear, name="release-train-iterator")
    thread.start()
    leave_behind(thread)
    return thread


class Trainer:
    """One run of `recipe`, made in one step: `model` and `optimizer` (built under `launcher.scope()`) train
    `task` for the steps of `plan` (`config.plan`), as `config` says (tf_recipes.config.RunConfig).

    Making it takes the results folder (a second run into it refuses), checks what the run will need before
    its first step (`export`, the ExportSpec that finish() exports; --resume's checkpoint; the next export
    version), builds the optimizer's state, restores the latest checkpoint under --resume (`start_step`) and
    makes every replica's state one. Then `fit` trains, `evaluate` scores the model at the step it has
    reached, `summary` says what the run did and `finish` writes it; evaluate and finish work without fit
    too (the restored model, at `start_step`)."""

    def __init__(
        self,
        launcher: Launcher,
        recipe: str,
        config: RunConfig,
        plan: Plan,
        *,
        model,
        optimizer,
        task: Task,
        export: ExportSpec | None = None,
    ):
        self.launcher, self.recipe, self.config, self.plan, self.task = launcher, recipe, config, plan, task
        self.results_dir = config.results_folder(recipe)
        self.export_spec = export.checked() if export else None
        self.exports = bool(export) and config.export  # RESULTS/export gets a version at the end
        self.total_steps = plan.total_steps  # where training ends: sooner when --target is reached
        # The step training has reached
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.precision = keras.mixed_precision.global_policy().name  # configure_precision has set it
        if config.loss_scale_initial != LOSS_SCALE_INITIAL and self.precision != "mixed_float16":
            why = f"applies only to float16 loss scaling, and this run computes in {self.precision}"
            raise UserError(
                f"--loss-scale-initial {config.loss_scale_initial:g} {why}; add --amp float16 (a "
                "bare --amp is float16 only on a GPU) or leave --loss-scale-initial out"
            )
        synchronized = any(getattr(layer, "synchronized", False) for layer in model._flatten_layers())
        # A collective inside the forward pass (synchronized batch norm), which XLA's cluster cannot hold
        self._synchronized = synchronized and plan.replicas > 1
        if config.xla and self._synchronized:
            raise UserError(
                "--xla compiles each replica's step on its own, and this model's synchronized batch "
                "norm adds up every replica's statistics inside it; leave --xla out, or choose "
                "another normalisation"
            )
        folder, identity = self.results_dir, self.run_identity()
        self.checkpoints = Checkpoints(
            launcher, folder, config.resume, identity, plan.total_steps, self.exports, config.keep_checkpoints
        )
        self.eval_interval = evaluating.eval_interval(
            config.eval_every, plan.total_steps, plan.steps_per_epoch
        )
        self.curve = evaluating.Curve(self.checkpoints.folder, plan.global_batch)
        self.evaluation = None  # fit's `evaluation`: this process's share of the held-out set, made anew
        self._explain_eval_error = None
        self._eval_step = None  # the compiled evaluation step
        self._evaluated = None  # (step, metrics) of the last evaluation
        self._checkpointed = None  # the step of the last checkpoint
        # Distributed: the chief holds RESULTS for the run, so a second run into it refuses before it reads;
        # every process learns of a refusal, so that none waits for a chief that left
        in_use = UserError(
            f"{folder} is in use by another run (the chief's error line says which); wait for "
            "it to end, or choose another --results-dir"
        )
        self._results_lock = launcher.chief_decides(lambda: hold_results_dir(folder), in_use)
        self.checkpoints.check_resume_target(config.target)
        if self.exports:  # a RESULTS/export that cannot take the next version ends the run before it trains
            exporting.next_version(self.results_dir)
        # SIGTERM/SIGUSR1 stop the job after a step, with a checkpoint; installed after the launcher's own.
        self.stop_flag = StopFlag().install()
        self.report = reporting.RunReport(launcher, folder, plan, config.log_every, config.profile)
        self.step_times = []  # seconds of every step fit ran
        self.loss_scaling = self.fingerprints = None  # fit's check that the replicas agree (results.json)
        self._release = None  # the thread that releases fit's training iterator
        with launcher.scope():  # Strategy: optimizer state on every replica
            if self.precision == "mixed_float16":  # float16 gradients underflow without a loss scale
                scale, growth = config.loss_scale_initial, LOSS_SCALE_GROWTH_STEPS
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer, scale, dynamic_growth_steps=growth)
            optimizer.build(model.trainable_variables)
        self.model, self.optimizer = model, optimizer
        self.checkpoints.track(model, optimizer, self.step)
        self.start_step = self.checkpoints.restore()  # 0 unless --resume found a checkpoint
        # the curve goes on from the restored step, and so does the time to target
        if self.start_step and (lost := self.curve.restore(self.start_step)):
            log(launcher, lost)
        launcher.prepare(model, optimizer)  # Distributed: every replica starts from one state

    def target_reached(self) -> dict | None:
        """{"step", "seconds"} of the first evaluation at --target, or None (also without one)."""
        return self.config.target and self.config.target.first_reached(self.curve.points)

    def run_identity(self) -> dict:
        """What decides the data order, the arithmetic and the per-replica state: a resumed run must match
        it."""
        plan, config = self.plan, self.config
        return dict(
            recipe=self.recipe,
            global_batch=plan.global_batch,
            replicas=plan.replicas,
            seed=config.seed,
            per_replica_batch=config.batch_size,
            training_examples=plan.num_examples,
            precision=self.precision,
        )

    def _build_train_step(self, task: Task):
        """The compiled call that runs --steps-per-loop steps on every replica. Each replica divides its
        summed per-example loss by the global batch, so that the gradients summed over replicas (in
        apply_gradients, or Horovod's all-reduce) are those of the mean over the global batch, as one device
        computes them; state that no gradient keeps equal (batch-norm statistics, float16's skipped steps) is
        made equal here, so that the replicas end bit-identical and a checkpoint resumes exactly."""
        model, optimizer, launcher = self.model, self.optimizer, self.launcher
        variables = model.trainable_variables
        global_batch = float(self.plan.global_batch)

        # XLA compiles one replica's forward and backward pass; the collectives stay outside it. A forward
        # pass that all-reduces (synchronized batch norm) is traced into the step itself: the strategies
        # refuse a collective inside a nested tf.function (merge_call)
        def forward_backward(x, y):
            with tf.GradientTape() as tape:
                y_pred = model(x, training=True)
                # Distributed: loss over the global batch
                loss = tf.reduce_sum(tf.cast(task.loss_fn(y, y_pred), tf.float32)) / global_batch
                scaled_loss = optimizer.scale_loss(loss)
            gradients = tape.gradient(scaled_loss, variables)
            sums = {k: tf.cast(v, tf.float32) for k, v in task.metric_sums(y, y_pred).items()}
            sums["examples"] = tf.cast(tf.shape(y)[0], tf.float32)
            return loss, gradients, sums

        if not self._synchronized:
            forward_backward = tf.function(forward_backward, jit_compile=True if self.config.xla else None)

        drifting = desync.replica_state(model)[1]
        # float16 skips a step whose gradients overflowed. Horovod's ranks see the summed gradients; under
        # the strategies each process's first replica would decide alone, so the replicas decide together.
        # Strategy: replicas skip an overflowed step together
        strategy = launcher.traits["collective"] == "strategy"
        skip_together = scales_loss(optimizer) and launcher.num_replicas > 1 and strategy

        def replica_step(x, y, stop):
            loss, gradients, sums = forward_backward(x, y)
            # Horovod sums the gradients here; the strategies inside apply_gradients.
            gradients = launcher.aggregate_gradients(gradients)  # Distributed: gradients summed over replicas
            if skip_together:
                gradients = self._overflow_anywhere_is_overflow_everywhere(gradients)
            optimizer.apply_gradients(zip(gradients, variables, strict=True))
            # Batch-norm moving statistics: every replica takes the mean, so all hold one value.
            # Distributed: batch-norm statistics averaged
            # tensors, not variables
            means = launcher.mean_over_replicas([tf.identity(v.value) for v in drifting])
            for variable, mean in zip(drifting, means, strict=True):
                variable.assign(mean)  # Distributed: every replica keeps the mean statistics
            # The stop flag is summed over replicas with the outputs, so every process stops after one step.
            return {"loss": loss, **sums, "stop": tf.identity(stop)}  # Distributed: stop flag all-reduced

        # --steps-per-loop steps per call: only the last step's outputs (and the stop flag) are returned.
        @tf.function
        def train_loop(iterator, steps, stop):
            for _ in tf.range(steps - 1):
                # Distributed: no output collective between steps
                launcher.run(lambda x, y: replica_step(x, y, stop), next(iterator), reduce=False)
            # Distributed: last step's outputs summed over replicas
            return launcher.run(lambda x, y: replica_step(x, y, stop), next(iterator))

        return train_loop

    def _overflow_anywhere_is_overflow_everywhere(self, gradients):
        """In a replica's step: the gradients, or nan on every replica when any replica's overflowed."""
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in gradients if g is not None])
        # Strategy: overflow all-reduce of loss scaling
        overflowed = self.launcher.mean_over_replicas([1.0 - tf.cast(finite, tf.float32)])[0] > 0
        return [g if g is None else tf.where(overflowed, tf.constant(np.nan, g.dtype), g) for g in gradients]

    def fit(
        self,
        dataset,
        explain_input_error: Callable[[int], str | None] | None = None,
        evaluation: Callable[[], tf.data.Dataset] | None = None,
        explain_eval_error: Callable[[], str | None] | None = None,
    ) -> None:
        """Train from `start_step` to `total_steps`, then check that every replica agrees.

        `explain_input_error(step)` names the file or value behind a data error in the batch of `step`
        (a one-line DataError instead of a traceback). `evaluation()` returns this process's share of the
        held-out set, evaluated every `eval_interval` steps (training ends at the first evaluation that
        reaches `target`); `explain_eval_error()` names the file behind a failed read of it."""
        launcher, config, plan, task = self.launcher, self.config, self.plan, self.task
        replicas = (
            f"{plan.replicas} replica(s), global batch {plan.global_batch} ({config.batch_size} per replica)"
        )
        log(
            launcher,
            f"{self.recipe}: launcher {launcher.name}, {launcher.num_workers} process(es), {replicas}, "
            f"steps {self.start_step}..{self.total_steps} ({plan.steps_per_epoch} per epoch)",
        )
        train_loop = self._build_train_step(task)
        checkpoint_every = config.checkpoint_every or plan.steps_per_epoch
        eval_every = self._start_evaluation(evaluation, explain_eval_error)
        # A compiled call never runs past a step that logs, checkpoints, evaluates or starts or ends the trace
        every = (config.log_every, checkpoint_every, *([eval_every] if eval_every else []))
        self.step_times = []
        inputs = [iter(dataset)]  # the iterator's only reference: release_in_background drops it
        step, minutes = self.start_step, config.checkpoint_minutes
        last = saved = time.perf_counter()
        while step < self.total_steps:
            first = step + 1
            step = loop_end(step, self.total_steps, config.steps_per_loop, every, config.profile or ())
            self.report.profile(first, before=True)
            due = bool(minutes) and time.perf_counter() - saved >= 60 * minutes  # --checkpoint-minutes
            outputs = self._run_steps(train_loop, inputs[0], first, step, explain_input_error, due)
            now = time.perf_counter()
            self.step_times += [(now - last) / (step - first + 1)] * (step - first + 1)
            # Distributed: a stop, or a checkpoint due by one process's clock, on every process
            stop, due = outputs.pop("stop") > 0
            loss = float(outputs.pop("loss"))
            if not math.isfinite(loss):
                raise FloatingPointError(f"loss became {loss} at step {step}; lower --lr or check the data")
            if step % config.log_every == 0 or step == self.total_steps or stop:
                self.report.log_step(step, loss, task.summarize(outputs), self.step_times, self.optimizer)
            self.step.assign(step)
            self.report.profile(step, before=False)
            # The evaluation at the last step is evaluate()'s, after fit
            reached = (
                eval_every and step % eval_every == 0 and step < self.total_steps and self._eval_point(step)
            )
            if step % checkpoint_every == 0 or step == self.total_steps or stop or reached or due:
                self._save_checkpoint(step)
                saved = time.perf_counter()
            if reached:  # every process evaluated the same sums, so all of them stop here
                self.total_steps = step
                break
            if stop and step < self.total_steps:
                self.checkpoints.stop(step, self.stop_flag)
            last = time.perf_counter()  # checkpoint and logging time is not step time
        self._release = release_in_background(inputs)
        self.report.flush()
        self._check_replicas_agree()

    def _run_steps(self, train_loop, iterator, first: int, last: int, explain_input_error, due=False) -> dict:
        """Steps `first`..`last` in one call; the last one's outputs summed over replicas, as float64. Its
        "stop" holds this process's two flags, summed: a stop was asked for, a checkpoint is `due`."""
        stop = tf.constant([1.0 if self.stop_flag.signal_name else 0.0, 1.0 if due else 0.0])
        try:
            outputs = train_loop(iterator, tf.constant(last - first + 1), stop)
            return {key: np.asarray(value.numpy(), np.float64) for key, value in outputs.items()}
        except (tf.errors.InvalidArgumentError, tf.errors.DataLossError):
            for step in range(first, last + 1) if explain_input_error else ():
                if message := explain_input_error(step):
                    raise DataError(message) from None
            raise
        except self.launcher.peer_errors as error:  # Distributed: a lost peer is one line
            what = f"{type(error).__name__}: {peer_error_summary(error)}"
            raise ClusterError(
                f"worker {self.launcher.worker_index}: lost contact with the other workers at "
                f"steps {first}..{last} ({what}); a peer died, froze or was stopped. Continue "
                "from the last checkpoint with --resume"
            ) from None

    def _check_replicas_agree(self) -> None:
        """The end of fit: every replica's weights, statistics and loss scale bit-identical
        (tf_recipes.desync), or DesyncError."""
        step = int(self.step.numpy())
        self.loss_scaling, self.fingerprints = desync.check_replicas_agree(
            self.launcher, self.model, self.optimizer, step
        )

    def _start_evaluation(self, evaluation, explain_eval_error) -> int:
        """Keep fit's held-out set; the steps between its evaluations during training (0: none)."""
        self.evaluation, self._explain_eval_error = evaluation, explain_eval_error
        target = self.config.target
        if target and not evaluation:
            raise UserError(
                f"--target {target}: this run has no held-out set to evaluate (generated data); "
                "give it real data or leave --target out"
            )
        eval_every = self.eval_interval if evaluation else 0
        if target:
            every = eval_every or self.total_steps
            log(self.launcher, f"target: {target} on the held-out set, evaluated every {every} steps")
        return eval_every

    def _save_checkpoint(self, step: int) -> None:
        """A checkpoint of `step`, and the curve up to it."""
        self.checkpoints.save()
        self._checkpointed = step
        self._save_curve(step)

    def _save_curve(self, step: int) -> None:
        """The curve up to the checkpoint of `step`: the chief's RESULTS/checkpoints/curve.json."""
        if self.launcher.is_chief:  # Distributed: the chief keeps the curve
            write_json(self.curve.path, self.curve.state(step))

    def _eval_point(self, step: int) -> bool:
        """Evaluate the held-out set at `step` (a point of the curve); True when it reaches the target."""
        self._measure(self.evaluation(), self._explain_eval_error)
        if reached := self.target_reached():
            when = f"at step {step}, {reached['seconds']:.1f} s after the start"
            log(self.launcher, f"target {self.config.target} reached {when}; training ends here")
        return bool(reached)

    def evaluate(self, dataset=None, explain_input_error: Callable[[], str | None] | None = None) -> dict:
        """Loss and metrics over an evaluation set at the step training ended (the curve's last point).
        Every process calls it with its own share (`launcher.eval_share`); the sums are added over the
        processes. Without `dataset`, fit's held-out set, not evaluated twice at one step."""
        step = int(self.step.numpy())
        if dataset is None:
            if self._evaluated and self._evaluated[0] == step:
                return self._evaluated[1]
            if not self.evaluation:
                raise UserError(
                    "Trainer.evaluate() without a dataset evaluates fit's held-out set, and this "
                    "run has none: give evaluate() a dataset"
                )
            dataset = self.evaluation()
        return self._measure(dataset, explain_input_error)

    def _measure(self, dataset, explain_input_error) -> dict:
        """One evaluation of `dataset` at the current step, added to the curve, the log and TensorBoard."""
        step, model, task = int(self.step.numpy()), self.model, self.task

        @tf.function
        def eval_step(x, y):
            y_pred = model(x, training=False)
            loss = tf.reduce_sum(tf.cast(task.loss_fn(y, y_pred), tf.float32))
            sums = {**task.metric_sums(y, y_pred), **task.baseline_sums(y, y_pred), "loss": loss}
            return {k: tf.cast(v, tf.float32) for k, v in {**sums, "examples": tf.shape(y)[0]}.items()}

        self._eval_step = self._eval_step or eval_step  # compiled once, at the first evaluation
        eval_step, totals = self._eval_step, {}
        try:
            for x, y in dataset:
                for key, value in eval_step(x, y).items():
                    totals[key] = totals.get(key, 0.0) + value.numpy().astype(np.float64)
        except (tf.errors.InvalidArgumentError, tf.errors.DataLossError):
            if explain_input_error and (message := explain_input_error()):  # names the file, as in fit
                raise DataError(message) from None
            raise
        if not totals:
            raise DataError("this process's share of the evaluation set is empty")
        totals = summed_over_processes(self.launcher, totals)
        examples = totals["examples"]
        metrics = {
            "loss": float(totals["loss"] / examples),
            **task.summarize(totals),
            "examples": int(examples),
        }
        scalars = {k: v for k, v in metrics.items() if isinstance(v, float)}
        self.report.write_scalars("eval", step, scalars)
        point = self.curve.add(step, metrics)
        self._evaluated = step, metrics
        # the evaluation at the end, after the last checkpoint: a resume keeps it
        if self._checkpointed == step:
            self._save_curve(step)
        shown = "  ".join(f"{k} {v:.4f}" for k, v in scalars.items())
        seen = f"{point['examples_seen']:,} examples seen, {point['seconds']:.1f} s"
        log(self.launcher, f"eval at step {step} ({seen}): {shown}")
        return metrics

    def summary(self) -> reporting.RunSummary:
        """What the run has done so far, as results.json reports it (after fit, or without it)."""
        launcher, config, reached = self.launcher, self.config, self.target_reached() or {}
        return reporting.RunSummary(
            recipe=self.recipe,
            launcher=launcher.name,
            nodes=launcher.num_nodes,
            workers=launcher.num_workers,
            replicas=launcher.num_replicas,
            per_replica_batch=config.batch_size,
            global_batch=self.plan.global_batch,
            start_step=self.start_step,
            steps=self.total_steps,
            steps_per_epoch=self.plan.steps_per_epoch,
            warmup_steps=config.warmup_steps,
            step_times=self.step_times,
            losses=self.report.history,
            replica_fingerprints=self.fingerprints,
            precision=self.precision,
            loss_scaling=self.loss_scaling,
            xla=config.xla,
            eval_every=self.eval_interval if self.evaluation else 0,
            curve=self.curve.points,
            target=config.target and str(config.target),
            time_to_target=reached.get("seconds"),
            target_step=reached.get("step"),
            wall_seconds=self.curve.seconds(),
        )

    def finish(self, results: dict) -> None:
        """The end of every run, on every process: results.json (the summary and `results`, the recipe's
        fields, its final_metrics above all) and the final weights, then the export the Trainer was given
        (unless --no-export), then TargetMissed (exit 13) when no evaluation reached --target."""
        if self.fingerprints is None:  # finish without fit: the restored replicas must agree too
            self._check_replicas_agree()
        kept = self.config.flags is not None and config_yaml(self.recipe, self.config.flags)
        reporting.save_results(
            self.launcher,
            self.results_dir,
            self.model,
            reporting.results_record(self.summary(), results),
            kept or None,
        )
        self.report.flush()
        if self.exports:
            exporting.export_model(self.launcher, self.results_dir, self.model, self.export_spec, self.recipe)
        if self._release:  # a while, not until it ends: the process's exit leaves it behind
            self._release.join(RELEASE_WAIT)
        target = self.config.target
        if target and (missed := target.missed(self.curve.points, self.total_steps, self.results_dir)):
            raise missed
