"""Evaluation during training: when it happens (--eval-every), the quality target that ends a run
(--target METRIC=VALUE), and the learning curve that results.json, TensorBoard and a resume keep.

A point is {"step", "examples_seen", "seconds" (since the process started, plus on a resume the earlier
attempts' time), and the metrics}. The curve is kept beside the checkpoints (checkpoints/curve.json), so a
resume continues it. Imports no TensorFlow: the flags are parsed before TensorFlow loads.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import dataclass

CURVE_FILE = "curve.json"  # RESULTS/checkpoints/curve.json
POINTS_PER_RUN = 8  # --eval-every's default: at most about this many evaluations in a run, and one an epoch


def process_seconds() -> float:
    """Wall seconds since this process started (Linux: from /proc; elsewhere: since this module loaded)."""
    try:
        with open("/proc/self/stat") as handle:
            started_ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        return max(0.0, uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _LOADED


_LOADED = time.monotonic()


def lower_is_better(metric: str) -> bool:
    return metric == "loss" or metric.endswith("_loss")


@dataclass(frozen=True)
class Target:
    """--target METRIC=VALUE: the run ends at the first evaluation whose METRIC reaches VALUE (a loss: below)."""

    metric: str
    value: float

    def reached(self, metrics: dict) -> bool:
        value = metrics[self.metric]
        return value <= self.value if lower_is_better(self.metric) else value >= self.value

    def __str__(self) -> str:
        return f"{self.metric}{'<=' if lower_is_better(self.metric) else '>='}{self.value:g}"


def target_type(metrics: tuple[str, ...]):
    """An argparse type for --target METRIC=VALUE, METRIC one of `metrics` or loss."""
    known = (*metrics, "loss")

    def target(text: str) -> Target:
        name, _, number = text.partition("=")
        if name not in known:
            raise argparse.ArgumentTypeError(f"{text!r}: the metric must be one of {', '.join(known)}, "
                                              f"as in {known[0]}=0.99")
        try:
            value = float(number)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r}: the value after '=' must be a finite number, "
                                              f"as in {known[0]}=0.99")
        return Target(name, value)

    target.__name__ = "METRIC=VALUE"
    return target


def eval_interval(eval_every: int | None, total_steps: int, steps_per_epoch: int) -> int:
    """Steps between evaluations: --eval-every (0: the end only); by default every epoch, or every few in
    a run of more than POINTS_PER_RUN epochs."""
    if eval_every is None:
        return max(1, steps_per_epoch, math.ceil(total_steps / POINTS_PER_RUN))
    return eval_every


class Curve:
    """The evaluation points of one run, kept in RESULTS/checkpoints/curve.json beside its checkpoints."""

    def __init__(self, checkpoint_dir: str, global_batch: int, target: Target | None = None):
        self.path = os.path.join(checkpoint_dir, CURVE_FILE)
        self.global_batch, self.target = global_batch, target
        self.points: list[dict] = []
        self.earlier_seconds = 0.0  # a resumed run: what the attempts before it spent to reach its step
        self.target_reached: dict | None = None  # {"step", "seconds"} of the first point at the target

    def seconds(self) -> float:
        return round(self.earlier_seconds + process_seconds(), 3)

    def add(self, step: int, metrics: dict) -> dict:
        point = {"step": step, "examples_seen": step * self.global_batch, "seconds": self.seconds(),
                 **{key: value for key, value in metrics.items() if key != "examples"}}
        self.points = [p for p in self.points if p["step"] < step] + [point]
        self._find_target()
        return point

    def _find_target(self) -> None:
        first = next((p for p in self.points if self.target and self.target.reached(p)), None)
        self.target_reached = first and {"step": first["step"], "seconds": first["seconds"]}

    def state(self, step: int) -> dict:
        """What curve.json holds at a checkpoint of `step`."""
        return {"step": step, "seconds": self.seconds(), "points": self.points}

    def restore(self, step: int) -> str | None:
        """Continue the curve of the checkpoint at `step`; the line to print when curve.json cannot be read,
        and the run goes on without the earlier points."""
        try:
            with open(self.path) as handle:
                saved = json.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            return (f"{self.path} cannot be read ({type(error).__name__}); the learning curve starts again at "
                    f"step {step}, without the points before it")
        points = [p for p in saved.get("points", []) if p.get("step", math.inf) <= step]
        self.points = points
        self.earlier_seconds = float(saved.get("seconds", 0.0)) if saved.get("step") == step else (
            max((p["seconds"] for p in points), default=0.0))
        self._find_target()
        return None
