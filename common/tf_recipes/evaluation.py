"""Evaluation during training: when it happens (--eval-every), and the learning curve that results.json,
TensorBoard and a resume keep (the target that ends a run is tf_recipes.config.Target).

A point is {"step", "examples_seen", "seconds" (since the process started, plus on a resume the earlier
attempts' time), and the metrics}. The curve is kept beside the checkpoints (checkpoints/curve.json), so a
resume continues it. Imports no TensorFlow: the flags are parsed before TensorFlow loads.
"""

from __future__ import annotations

import json
import math
import os
import time

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


def eval_interval(eval_every: int | None, total_steps: int, steps_per_epoch: int) -> int:
    """Steps between evaluations: --eval-every (0: the end only); by default every epoch, or every few in
    a run of more than POINTS_PER_RUN epochs."""
    if eval_every is None:
        return max(1, steps_per_epoch, math.ceil(total_steps / POINTS_PER_RUN))
    return eval_every


class Curve:
    """The evaluation points of one run, kept in RESULTS/checkpoints/curve.json beside its checkpoints."""

    def __init__(self, checkpoint_dir: str, global_batch: int):
        self.path = os.path.join(checkpoint_dir, CURVE_FILE)
        self.global_batch = global_batch
        self.points: list[dict] = []
        self.earlier_seconds = 0.0  # a resumed run: what the attempts before it spent to reach its step

    def seconds(self) -> float:
        return round(self.earlier_seconds + process_seconds(), 3)

    def add(self, step: int, metrics: dict) -> dict:
        """The point of an evaluation at `step`, replacing any from a later step (a resume went back)."""
        point = {"step": step, "examples_seen": step * self.global_batch, "seconds": self.seconds()}
        point.update((key, value) for key, value in metrics.items() if key != "examples")
        self.points = [p for p in self.points if p["step"] < step] + [point]
        return point

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
            return (
                f"{self.path} cannot be read ({type(error).__name__}); the learning curve starts again "
                f"at step {step}, without the points before it"
            )
        self.points = [p for p in saved.get("points", []) if p.get("step", math.inf) <= step]
        if saved.get("step") == step:
            self.earlier_seconds = float(saved.get("seconds", 0.0))
        else:
            self.earlier_seconds = max((p["seconds"] for p in self.points), default=0.0)
        return None
