"""The flags every recipe shares, and clean one-line errors for user mistakes. Imports no TensorFlow, so
`train.py --help` and a mistyped flag answer at once, without TensorFlow's start-up log."""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys

from tf_recipes import contract, evaluation, user_paths
from tf_recipes.config import (AMP_DTYPES, LOSS_SCALE_GROWTH_STEPS, LOSS_SCALE_INITIAL, RunConfig, Target,
                               TargetMissed)
from tf_recipes.contract import COLLECTIVES, LAUNCHERS
from tf_recipes.stopping import peer_error_summary


def _whole(minimum: int, rule: str):
    """An argparse type: a whole number of at least `minimum`."""
    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} {rule}")
        return value
    return whole


def _real(accept, rule: str):
    """An argparse type: a finite number (never nan or inf) for which accept(value) holds."""
    def real(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and accept(value)):
            raise argparse.ArgumentTypeError(f"{text!r} is not {rule}")
        return value
    return real


positive_int = _whole(1, "must be at least 1")
non_negative_int = _whole(0, "must not be negative")
positive_float = _real(lambda value: value > 0, "a finite number greater than 0")
# 0 < F < 1: a share of the examples (such as --val-fraction)
fraction = _real(lambda value: 0 < value < 1, "a fraction between 0 and 1 (both excluded), e.g. 0.2")
# 0 <= R < 1: a probability that may be zero but never drops everything (such as a dropout rate)
rate = _real(lambda value: 0 <= value < 1, "a number from 0 up to (not including) 1")
# A loss scale: greater than 0, and one that float32 (the scale's variable) holds.
loss_scale = _real(lambda value: 0 < value <= 3.4028234663852886e38,
                   "a finite number greater than 0 and at most 3.4e38 (float32), e.g. 32768")


def at_least(minimum: float):
    """An argparse type: a finite number >= minimum (a deadline with a floor, a fault's seconds)."""
    return _real(lambda value: value >= minimum, f"a finite number of at least {minimum:g}")


def step_window(text: str) -> tuple[int, int]:
    """--profile START:END, 0 <= START < END."""
    try:
        start, end = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not START:END, e.g. 10:20") from None
    if not 0 <= start < end:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 <= START < END")
    return start, end


def add_precision_flags(group) -> None:
    """--amp [DTYPE] and --loss-scale-initial (tf_recipes.training.configure_precision and Trainer)."""
    group.add_argument("--amp", nargs="?", const="auto", default=None, choices=AMP_DTYPES, metavar="DTYPE",
                       help="mixed precision: compute in 16 bits, keep the weights in float32. DTYPE auto "
                            "(what a bare --amp means): float16 with loss scaling on a GPU, bfloat16 on the "
                            "CPU; float16 or bfloat16 force that type anywhere (float16 on the CPU runs the "
                            "GPU's loss-scaled path, slowly); without --amp everything is float32")
    group.add_argument("--no-amp", dest="amp", action="store_const", const=None,
                       help="everything in float32 (undoes an --amp given earlier on the command line)")
    group.add_argument("--loss-scale-initial", type=loss_scale, default=LOSS_SCALE_INITIAL, metavar="SCALE",
                       help="float16 only: the first loss scale; every step whose gradients overflow is "
                            f"skipped and halves it, {LOSS_SCALE_GROWTH_STEPS} steps in a row without one "
                            "double it")


def folder_flags_problem(args) -> str | None:
    """One line when --data-dir or an output folder names a file, overlaps --data-dir or cannot be made."""
    data_dir = getattr(args, "data_dir", None)
    outputs = {f"--{dest.replace('_', '-')}": getattr(args, dest, None)
               for dest in ("results_dir", "cache_dir", "predict_dir")}
    return (data_dir and user_paths.folder_problem("--data-dir", data_dir)) or user_paths.flags_problem(
        {"--data-dir": data_dir}, outputs)


class TrainingParser(argparse.ArgumentParser):
    """argparse's parser that also refuses, in one line, folder flags that name a file or overlap."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        user_paths.exit_if(folder_flags_problem(namespace))
        return namespace, extras


def target_type(metrics: tuple[str, ...]):
    """An argparse type for --target METRIC=VALUE, METRIC one of `metrics` or loss (config.Target.parse)."""
    def target(text: str) -> Target:
        try:
            return Target.parse(text, metrics)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    target.__name__ = "METRIC=VALUE"
    return target


def add_evaluation_flags(parser, metrics: tuple[str, ...]) -> None:
    """--eval-every and --target (tf_recipes.evaluation, the Trainer's evaluation during training)."""
    quality = parser.add_argument_group("evaluation during training")
    quality.add_argument("--eval-every", type=non_negative_int, default=None, metavar="N",
                         help="evaluate the held-out set every N steps: a point of the learning curve in "
                              "results.json and TensorBoard (default: every epoch, at most about "
                              f"{evaluation.POINTS_PER_RUN} times a run; 0: only at the end)")
    quality.add_argument("--target", type=target_type(metrics), default=None, metavar="METRIC=VALUE",
                         help="end the run at the first evaluation whose METRIC reaches VALUE (at most "
                              f"VALUE for the loss), e.g. {metrics[0]}=0.99; results.json records its "
                              "time_to_target. A run that never reaches it exits with status "
                              f"{contract.EXIT_TARGET_MISSED}")


def add_image_folder_flags(parser, default: str) -> None:
    """--data-format (DEFAULT or image-folder) and --val-fraction, on a recipe's parser
    (tf_recipes.image_folder reads such a folder)."""
    group = parser.add_argument_group("your own photos")
    group.add_argument("--data-format", choices=[default, "image-folder"], default=default,
                       help="image-folder: --data-dir holds train/ and val/ (or, with --val-fraction, one "
                            "folder), each with one subfolder of .jpg/.png photos per class")
    group.add_argument("--val-fraction", type=fraction, default=None, metavar="F",
                       help="image-folder without val/: keep this fraction of each class for validation "
                            "(drawn from --seed)")


def training_parser(description: str, *, batch_size: int, epochs: int, lr: float,
                    metrics: tuple[str, ...] = ("accuracy",)) -> argparse.ArgumentParser:
    """An argparse parser with the shared flags (`metrics`: what --target may name besides the loss)."""
    parser = TrainingParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    run = parser.add_argument_group("launch")
    run.add_argument("--launcher", choices=LAUNCHERS, default="single",
                     help="how replicas are created and kept in sync")
    run.add_argument("--cpu-replicas", type=positive_int, default=1,
                     help="mirrored launcher without a GPU: split the CPU into this many replicas")
    run.add_argument("--collective", choices=COLLECTIVES, default="auto",
                     help="multiworker all-reduce implementation")
    run.add_argument("--join-timeout", type=positive_float, default=300.0, metavar="SECONDS",
                     help="multiworker: exit (status 4, naming the missing workers) when the cluster has "
                          "not formed within this many seconds")
    train = parser.add_argument_group("training")
    train.add_argument("--batch-size", type=positive_int, default=batch_size,
                       help="batch size per replica; the global batch is this times the replicas")
    train.add_argument("--epochs", type=positive_int, default=epochs)
    train.add_argument("--max-steps", type=positive_int, default=None,
                       help="stop after this many global steps (default: all epochs)")
    train.add_argument("--lr", type=positive_float, default=lr, help="base learning rate")
    train.add_argument("--scale-lr", action=argparse.BooleanOptionalAction, default=False,
                       help="multiply the learning rate by the number of replicas")
    train.add_argument("--lr-schedule", choices=("constant", "cosine"), default="constant",
                       help="constant: the rate (ramped up to the scaled rate under --scale-lr); cosine: "
                            "from 0 up to the rate over --lr-warmup-steps, then down to 0 along a half "
                            "cosine at the end of the last epoch (--max-steps and --target end a run "
                            "sooner, on the same schedule)")
    train.add_argument("--lr-warmup-steps", type=non_negative_int, default=100,
                       help="steps over which the rate ramps up: to the scaled rate (--scale-lr), or to the "
                            "peak rate (--lr-schedule cosine)")
    train.add_argument("--seed", type=non_negative_int, default=42,
                       help="seed for weights, data order and augmentation")
    add_precision_flags(train)
    train.add_argument("--xla", action="store_true", help="compile each replica's step with XLA")
    train.add_argument("--steps-per-loop", type=positive_int, default=10, metavar="K",
                       help="training steps per compiled call; the host waits for and reads the outputs "
                            "only every K steps (and at --log-every, checkpoint, --profile and the end)")
    add_evaluation_flags(parser, metrics)
    data = parser.add_argument_group("data")
    data.add_argument("--data-dir", default=None, help="where the dataset is (see the recipe README)")
    data.add_argument("--synthetic", action="store_true",
                      help="generated data instead of the dataset: for benchmarks and tests")
    out = parser.add_argument_group("output")
    out.add_argument("--results-dir", default=None,
                     help="results.json, checkpoints and final weights (default: results/RECIPE)")
    out.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    out.add_argument("--checkpoint-every", type=non_negative_int, default=0,
                     help="checkpoint every N steps (0: at the end of every epoch)")
    out.add_argument("--log-every", type=positive_int, default=10, help="print progress every N steps")
    out.add_argument("--no-export", dest="export", action="store_false",
                     help="do not write RESULTS/export (the SavedModel for TF Serving and predict.py)")
    out.add_argument("--warmup-steps", type=non_negative_int, default=5,
                     help="first steps left out of the throughput figures (tracing, autotuning)")
    out.add_argument("--profile", type=step_window, default=None, metavar="START:END",
                     help="write a TensorBoard profiler trace of steps START+1..END to RESULTS/profile")
    return parser


def is_peer_error(error: BaseException) -> bool:
    """A TensorFlow error that a collective raises when a peer died or froze."""
    return any(kind.__name__ in contract.PEER_ERRORS and kind.__module__.startswith("tensorflow")
               for kind in type(error).__mro__)


_STATUSES = (((contract.UserError, FileExistsError, FileNotFoundError, FloatingPointError),
              contract.EXIT_USER_ERROR),
             (contract.DesyncError, contract.EXIT_DESYNC),
             (TargetMissed, contract.EXIT_TARGET_MISSED),
             (contract.ClusterError, contract.EXIT_CLUSTER))


def run_config(args) -> RunConfig:
    """The engine's configuration from the shared flags (training_parser's): each field of RunConfig is the
    flag of the same name. The engine never sees `args`."""
    return RunConfig(**{field.name: getattr(args, field.name) for field in dataclasses.fields(RunConfig)})


RELEASE_WAIT = 1.0  # seconds: how long leave() waits for a training iterator still being released


def leave(status: int) -> None:
    """Exit with `status`, leaving a training iterator still being released (tf_recipes.training.releasing)
    after RELEASE_WAIT s behind: under MultiWorkerMirroredStrategy its deletion outlasted the peers by up to
    a minute (TF 2.17), and everything the run promises is written by then."""
    training = sys.modules.get("tf_recipes.training")  # loaded only by a process that trained
    for thread in getattr(training, "releasing", ()):
        thread.join(RELEASE_WAIT)
        if thread.is_alive():
            sys.stdout.flush(), sys.stderr.flush()
            os._exit(status)
    sys.exit(status)


def run_main(main) -> None:
    """Run a recipe's main(); a user's mistake ends in one line on stderr and a contract.EXIT_* status."""
    try:
        main()
        leave(contract.EXIT_DONE)
    except contract.RunFinished:  # the chief has said so; a requeued job or recreated pod ends cleanly
        leave(contract.EXIT_DONE)
    except contract.StopRequested as stop:
        sys.stderr.write(f"{stop}\n")  # one write, as below
        sys.stderr.flush()
        leave(contract.EXIT_STOPPED)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:
        status = next((status for kinds, status in _STATUSES if isinstance(error, kinds)), None)
        if status is None and not is_peer_error(error):
            raise
        message = str(error) if status else (f"lost contact with the other workers ({type(error).__name__}: "
                                             f"{peer_error_summary(error)}); continue from the last "
                                             "checkpoint with --resume")
        # One write of the whole line: the processes of a job share the stream, and print writes its end apart
        sys.stderr.write(f"error: {message}\n")
        sys.stderr.flush()
        # not sys.exit: TensorFlow's shutdown can wait on a lost peer
        if status in (None, contract.EXIT_CLUSTER):
            os._exit(contract.EXIT_CLUSTER)
        leave(status)
