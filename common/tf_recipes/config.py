"""What one run is, as typed values: the engine's configuration.

`RunConfig` holds the batch, the schedule, the evaluation and its `Target`, the checkpoints, the
precision and whether to export. The command line builds one from its flags (`tf_recipes.cli.run_config`);
a benchmark, a test or a notebook builds one in Python:

    config = RunConfig(batch_size=64, epochs=1, max_steps=100, results_dir="/tmp/run")
    trainer = Trainer(create_launcher("single"), "mnist-cnn", config, num_examples=60_000)

The engine (training, checkpoints, evaluation, export) reads these values and never sees argparse. A run
keeps the flags that made it in RESULTS/config.yaml (`config_yaml`), which `train.py --config FILE` runs
again (`read_config`, `tf_recipes.cli`). This module imports no TensorFlow, so that `train.py --help` and a
mistyped flag answer at once.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import dataclass

import yaml

from tf_recipes.contract import COLLECTIVES, LAUNCHERS
from tf_recipes.data import steps_per_epoch
from tf_recipes.evaluation import POINTS_PER_RUN


# --amp DTYPE: the 16-bit type of the computation, never of the weights (they stay float32)
AMP_DTYPES = ("auto", "float16", "bfloat16")
# Keras's LossScaleOptimizer defaults: the first scale, and the steps without an overflow that double it
LOSS_SCALE_INITIAL = 2.0**15
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


# ## What a flag's value may be
# Each reads a flag's text, or raises a ValueError that says what is wrong (tf_recipes.cli makes it the
# flag's error line).


def _whole(minimum: int, rule: str):
    """A whole number of at least `minimum`."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise ValueError(f"{value} {rule}")
        return value

    return whole


def _real(accept, rule: str):
    """A finite number (never nan or inf) for which accept(value) holds."""

    def real(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and accept(value)):
            raise ValueError(f"{text!r} is not {rule}")
        return value

    return real


positive_int = _whole(1, "must be at least 1")
non_negative_int = _whole(0, "must not be negative")
positive_float = _real(lambda value: value > 0, "a finite number greater than 0")
non_negative_float = _real(lambda value: value >= 0, "a finite number, 0 or more")
# 0 < F < 1: a share of the examples (such as --val-fraction)
fraction = _real(lambda value: 0 < value < 1, "a fraction between 0 and 1 (both excluded), e.g. 0.2")
# 0 <= R < 1: a probability that may be zero but never drops everything (such as a dropout rate)
rate = _real(lambda value: 0 <= value < 1, "a number from 0 up to (not including) 1")
# A loss scale: greater than 0, and one that float32 (the scale's variable) holds.
loss_scale = _real(
    lambda value: 0 < value <= 3.4028234663852886e38,
    "a finite number greater than 0 and at most 3.4e38 (float32), e.g. 32768",
)


def at_least(minimum: float):
    """A finite number >= minimum (a deadline with a floor, a fault's seconds)."""
    return _real(lambda value: value >= minimum, f"a finite number of at least {minimum:g}")


def step_window(text: str) -> tuple[int, int]:
    """--profile START:END, 0 <= START < END."""
    try:
        start, end = (int(part) for part in text.split(":"))
    except ValueError:
        raise ValueError(f"{text!r} is not START:END, e.g. 10:20") from None
    if not 0 <= start < end:
        raise ValueError(f"{text!r}: need 0 <= START < END")
    return start, end


def flag(group: str, default, help: str, **options):
    """A field that is also a flag: --NAME (NAME's underscores as hyphens) in `group` of --help, with its
    `default`, `help` and argparse's `options` (type, choices, metavar, action: "store_true", "store_false"
    or "negatable", --NAME and --no-NAME; `names` replaces --NAME). tf_recipes.cli.add_flags makes them."""
    return dataclasses.field(default=default, metadata={"group": group, "help": help, **options})


def data_format_flag(default: str):
    """A recipe's --data-format: its own dataset (`default`) or image-folder (tf_recipes.image_folder)."""
    return flag(
        "your own photos",
        default,
        "image-folder: --data-dir holds train/ and val/ (or, with "
        "--val-fraction, one folder), each with one subfolder of .jpg/.png photos per class",
        choices=(default, "image-folder"),
    )


def val_fraction_flag():
    """--val-fraction, beside data_format_flag's."""
    return flag(
        "your own photos",
        None,
        "image-folder without val/: keep this fraction of each class for validation (drawn from --seed)",
        type=fraction,
        metavar="F",
    )


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
        return TargetMissed(
            f"--target {self} was not reached in {steps} steps (the last evaluation's "
            f"{self.metric}: {last:.4f}); train longer (--epochs) or lower the target; "
            f"results are in {results_dir}"
        )

    def __str__(self) -> str:
        return f"{self.metric}{'<=' if lower_is_better(self.metric) else '>='}{self.value:g}"


# --help's groups of the shared flags, in this order, and a field-maker for each
GROUPS = ("launch", "training", "evaluation during training", "data", "output")
_launch, _training, _evaluation, _data, _output = (functools.partial(flag, group) for group in GROUPS)


@dataclass(frozen=True)
class RunConfig:
    """One run of the shared loop: how it launches, trains, evaluates and writes. Each field but `flags` is
    also the flag of its name (batch_size is --batch-size), with its default, type and help here, once;
    `tf_recipes.cli.training_parser` makes the flags, and a recipe may change their defaults."""

    # Launch: how replicas are created (tf_recipes.launchers.create_launcher)
    launcher: str = _launch("single", "how replicas are created and kept in sync", choices=LAUNCHERS)
    cpu_replicas: int = _launch(
        1, "mirrored launcher without a GPU: split the CPU into this many replicas", type=positive_int
    )
    collective: str = _launch("auto", "multiworker all-reduce implementation", choices=COLLECTIVES)
    join_timeout: float = _launch(
        300.0,
        "multiworker: exit (status 4, naming the missing workers) when the "
        "cluster has not formed within this many seconds",
        type=positive_float,
        metavar="SECONDS",
    )
    # Batch, schedule and rate
    batch_size: int = _training(
        32, "batch size per replica; the global batch is this times the replicas", type=positive_int
    )
    epochs: int = _training(
        1, "passes over the training examples; a learning-rate schedule spans them all", type=positive_int
    )
    max_steps: int | None = _training(
        None, "stop after this many global steps (default: all epochs)", type=positive_int
    )
    lr: float = _training(1e-3, "base learning rate", type=positive_float)
    scale_lr: bool = _training(
        False, "multiply the learning rate by the number of replicas", action="negatable"
    )
    lr_schedule: str = _training(
        "constant",
        "constant: the rate (ramped up to the scaled rate under --scale-lr); "
        "cosine: from 0 up to the rate over --lr-warmup-steps, then down to 0 along a half "
        "cosine at the end of the last epoch (--max-steps and --target end a run sooner, "
        "on the same schedule); poly: from the rate down to --lr-end as (1 - step/steps)^0.9, "
        "as segmentation trains (DeepLab, mmsegmentation), after --lr-warmup-steps up to it",
        choices=("constant", "cosine", "poly"),
    )
    lr_end: float = _training(0.0, "poly: the rate at the last step", type=non_negative_float)
    lr_warmup_steps: int = _training(
        100,
        "steps over which the rate ramps up: to the scaled rate (--scale-lr), "
        "or to the peak rate (--lr-schedule cosine)",
        type=non_negative_int,
    )
    seed: int = _training(42, "seed for weights, data order and augmentation", type=non_negative_int)
    # Precision and compilation (training.configure_precision sets the dtype policy of `amp`)
    amp: str | None = _training(
        None,
        "mixed precision: compute in 16 bits, keep the weights in float32. DTYPE "
        "auto (what a bare --amp means): float16 with loss scaling on a GPU, bfloat16 on "
        "the CPU; float16 or bfloat16 force that type anywhere (float16 on the CPU runs "
        "the GPU's loss-scaled path, slowly); without --amp everything is float32",
        nargs="?",
        const="auto",
        choices=AMP_DTYPES,
        metavar="DTYPE",
    )
    loss_scale_initial: float = _training(
        LOSS_SCALE_INITIAL,
        "float16 only: the first loss scale; every step "
        "whose gradients overflow is skipped and halves it, "
        f"{LOSS_SCALE_GROWTH_STEPS} steps in a row without one double it",
        type=loss_scale,
        metavar="SCALE",
    )
    xla: bool = _training(False, "compile each replica's step with XLA", action="store_true")
    steps_per_loop: int = _training(
        10,
        "training steps per compiled call; the host waits for and reads the "
        "outputs only every K steps (and at --log-every, checkpoint, --profile and "
        "the end)",
        type=positive_int,
        metavar="K",
    )
    # Evaluation of the held-out set during training (tf_recipes.evaluation)
    eval_every: int | None = _evaluation(
        None,
        "evaluate the held-out set every N steps: a point of the learning "
        "curve in results.json and TensorBoard (default: every epoch, at most "
        f"about {POINTS_PER_RUN} times a run; 0: only at the end)",
        type=non_negative_int,
        metavar="N",
    )
    # --target METRIC=VALUE: end at the first evaluation that reaches it (its flag names the recipe's metrics)
    target: Target | None = None
    # Data
    data_dir: str | None = _data(None, "where the dataset is (see the recipe README)")
    synthetic: bool = _data(
        False, "generated data instead of the dataset: for benchmarks and tests", action="store_true"
    )
    # Checkpoints and results
    results_dir: str | None = _output(
        None, "results.json, checkpoints and final weights (default: results/RECIPE)"
    )
    resume: bool = _output(False, "continue from the latest checkpoint", action="store_true")
    checkpoint_every: int = _output(
        0, "checkpoint every N steps (0: at the end of every epoch)", type=non_negative_int
    )
    checkpoint_minutes: float | None = _output(
        None,
        "also checkpoint when this many minutes have passed since the last checkpoint (a long run's "
        "loss at a crash or preemption)",
        type=positive_float,
        metavar="MINUTES",
    )
    keep_checkpoints: int = _output(
        2, "checkpoints kept: the newest N, older ones deleted", type=positive_int, metavar="N"
    )
    log_every: int = _output(10, "print progress every N steps", type=positive_int)
    export: bool = _output(
        True,
        "do not write RESULTS/export (the SavedModel for TF Serving and predict.py)",
        names=("--no-export",),
        action="store_false",
    )
    warmup_steps: int = _output(
        5, "first steps left out of the throughput figures (tracing, autotuning)", type=non_negative_int
    )
    profile: tuple[int, int] | None = _output(
        None,
        "write a TensorBoard profiler trace of steps START+1..END to RESULTS/profile",
        type=step_window,
        metavar="START:END",
    )
    # Every flag of the command line that made the run ({name: value}, before a recipe resolves its preset),
    # kept in RESULTS/config.yaml so that `train.py --config` can run it again; None: not kept
    flags: dict | None = None

    def results_folder(self, recipe: str) -> str:
        return self.results_dir or os.path.join("results", recipe)

    def plan(self, num_examples: int, replicas: int) -> Plan:
        """The steps this run trains over `num_examples` training examples an epoch on `replicas` replicas,
        resolved once, before anything is built: the rate's schedule, the input pipeline and the Trainer
        read them from it."""
        global_batch = self.batch_size * replicas  # Distributed: the global batch
        per_epoch = steps_per_epoch(num_examples, global_batch)
        planned = self.epochs * per_epoch  # a schedule spans the epochs: --max-steps, --target end it sooner
        return Plan(
            num_examples, replicas, global_batch, per_epoch, planned, min(planned, self.max_steps or planned)
        )


@dataclass(frozen=True)
class Plan:
    """The steps of one run (RunConfig.plan): its global batch, the steps of an epoch, those a learning-rate
    schedule spans (every epoch) and those it trains (`total_steps`: --max-steps may end it sooner)."""

    num_examples: int
    replicas: int
    global_batch: int
    steps_per_epoch: int
    planned_steps: int
    total_steps: int


def recipe_default(name: str, value):
    """RunConfig's field `name` (its group, type and help) with a recipe's own default `value`, for a recipe's
    subclass: `batch_size: int = recipe_default("batch_size", 128)`."""
    return dataclasses.field(default=value, metadata=RunConfig.__dataclass_fields__[name].metadata)


def config_yaml(recipe: str, flags: dict) -> str:
    """RESULTS/config.yaml: `flags` ({name: number, text, boolean or null}), one per line, under a header
    that says how to run them again."""
    header = (
        f"# The configuration of a {recipe} run: every flag of the command line that made it.\n"
        "# Run it again with `train.py --config THIS_FILE`; flags given beside --config override its\n"
        "# values (say, --results-dir DIR for a run into another folder).\n"
    )
    return header + yaml.safe_dump(flags, sort_keys=True, default_flow_style=False, allow_unicode=True)


def read_config(path: str) -> dict:
    """The {name: value} mapping of a configuration file (config_yaml's); a ValueError that says what is
    wrong with it."""
    try:
        with open(path, encoding="utf-8") as handle:
            values = yaml.safe_load(handle)
    except OSError as error:
        raise ValueError(f"the file cannot be read ({error.strerror or error})") from None
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        reason = " ".join(str(error).split())
        raise ValueError(
            f"the file is not YAML ({reason}); give --config a results folder's config.yaml"
        ) from None
    if not isinstance(values, dict) or not all(isinstance(name, str) for name in values):
        raise ValueError(
            "the file does not hold a mapping of flag names to values, as a results folder's config.yaml does"
        )
    return values
