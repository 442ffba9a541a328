"""What one run is, as typed values: the engine's configuration.

`RunConfig` holds the batch, the schedule, the evaluation and its `Target`, the checkpoints, the
precision and whether to export. The command line builds one from its flags (`tf_recipes.cli.run_config`);
a benchmark, a test or a notebook builds one in Python:

    config = RunConfig(batch_size=64, epochs=1, max_steps=100, results_dir="/tmp/run")
    trainer = Trainer(create_launcher("single"), "mnist-cnn", config, num_examples=60_000)

The engine (training, checkpoints, evaluation, export) reads these values and never sees argparse. This
module imports no TensorFlow, so that `train.py --help` and a mistyped flag answer at once.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass


# --amp DTYPE: the 16-bit type of the computation, never of the weights (they stay float32)
AMP_DTYPES = ("auto", "float16", "bfloat16")
# Keras's LossScaleOptimizer defaults: the first scale, and the steps without an overflow that double it
LOSS_SCALE_INITIAL = 2.0 ** 15
LOSS_SCALE_GROWTH_STEPS = 2000


def precision_policy(amp: str | None, gpu: bool) -> str:
    """The Keras dtype policy of `--amp [DTYPE]` (None: no --amp) with or without a GPU. A bare --amp is
    float16 with loss scaling on a GPU, where its tensor cores are; bfloat16 on the CPU, which needs no
    loss scale and which float16 only slows down."""
    if not amp:
        return "float32"
    if amp not in AMP_DTYPES:
        raise ValueError(f"--amp {amp!r}: choose one of {', '.join(AMP_DTYPES)}")
    return f"mixed_{('float16' if gpu else 'bfloat16') if amp == 'auto' else amp}"


def amp_flags(policy: str) -> str:
    """The --amp flag that asks for `policy` on any machine, for messages."""
    flags = {"float32": "--no-amp", "mixed_float16": "--amp float16", "mixed_bfloat16": "--amp bfloat16"}
    return flags.get(policy, policy)


class TargetMissed(Exception):
    """No evaluation of the run reached its --target: exit contract.EXIT_TARGET_MISSED, one line."""


def lower_is_better(metric: str) -> bool:
    return metric == "loss" or metric.endswith("_loss")


@dataclass(frozen=True)
class Target:
    """--target METRIC=VALUE: the run ends at the first evaluation whose METRIC reaches VALUE (a loss: falls
    to it). Parsed, held and checked here; a run that ends without reaching it raises TargetMissed (exit 13),
    so that a pipeline waiting for a model good enough to ship sees the difference from a finished run."""

    metric: str
    value: float

    @classmethod
    def parse(cls, text: str, metrics: tuple[str, ...]) -> Target:
        """METRIC=VALUE with METRIC one of `metrics` or loss; a ValueError that says what to write."""
        known = (*metrics, "loss")
        name, _, number = text.partition("=")
        if name not in known:
            raise ValueError(f"{text!r}: the metric must be one of {', '.join(known)}, as in {known[0]}=0.99")
        try:
            value = float(number)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ValueError(f"{text!r}: the value after '=' must be a finite number, as in {known[0]}=0.99")
        return cls(name, value)

    def reached(self, metrics: dict) -> bool:
        value = metrics[self.metric]
        return value <= self.value if lower_is_better(self.metric) else value >= self.value

    def first_reached(self, points: list[dict]) -> dict | None:
        """{"step", "seconds"} of the first point of a learning curve at the target, or None."""
        first = next((point for point in points if self.reached(point)), None)
        return first and {"step": first["step"], "seconds": first["seconds"]}

    def missed(self, points: list[dict], steps: int, results_dir: str) -> TargetMissed | None:
        """The error that ends a run of `steps` whose curve `points` never reached the target, or None."""
        if self.first_reached(points):
            return None
        last = points[-1].get(self.metric, math.nan) if points else math.nan
        return TargetMissed(f"--target {self} was not reached in {steps} steps (the last evaluation's "
                            f"{self.metric}: {last:.4f}); train longer (--epochs) or lower the target; "
                            f"results are in {results_dir}")

    def __str__(self) -> str:
        return f"{self.metric}{'<=' if lower_is_better(self.metric) else '>='}{self.value:g}"


@dataclass(frozen=True)
class RunConfig:
    """One run of the shared loop. Every field has the command line's default; `tf_recipes.cli` adds the
    flag of the same name (batch_size is --batch-size) and a recipe may change the defaults."""

    # Batch and schedule
    batch_size: int = 32  # examples per replica a step; the global batch is this times the replicas
    epochs: int = 1  # passes over the training examples; a learning-rate schedule spans them all
    max_steps: int | None = None  # end after this many global steps, on the schedule of all epochs
    seed: int = 42  # the weights, the data order and the augmentation
    # Evaluation of the held-out set during training
    # steps between evaluations; None: once an epoch (at most ~8 a run); 0: the end
    eval_every: int | None = None
    target: Target | None = None  # end at the first evaluation that reaches it
    # Checkpoints and results
    results_dir: str = ""  # results.json, checkpoints, final weights and the export; "": results/RECIPE
    resume: bool = False  # continue from the latest checkpoint in results_dir
    checkpoint_every: int = 0  # steps between checkpoints; 0: at the end of every epoch
    export: bool = True  # write RESULTS/export (the SavedModel for TF Serving and predict.py)
    # Precision and compilation (the dtype policy itself is set by training.configure_precision)
    loss_scale_initial: float = LOSS_SCALE_INITIAL  # float16 only: the first loss scale
    xla: bool = False  # compile each replica's forward and backward pass with XLA
    steps_per_loop: int = 10  # steps per compiled call: the host reads the outputs only every this many
    # Progress and profiling
    log_every: int = 10  # print progress every this many steps
    warmup_steps: int = 5  # first steps left out of the throughput figures (tracing, autotuning)
    profile: tuple[int, int] | None = None  # (START, END): a profiler trace of steps START+1..END

    def results_folder(self, recipe: str) -> str:
        return self.results_dir or os.path.join("results", recipe)
