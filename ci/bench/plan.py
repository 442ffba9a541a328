"""`invoke bench`'s plan: which training runs measure a recipe, in which order (pure).

The runs are interleaved over rounds (round 1 runs every launcher and replica count once, then
round 2, ...), so that every configuration sees the same changes in machine load; the report takes
the median of the rounds. Every run is started by the same builder as `invoke run --runtime local`
(`launch.build_launch`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from commands import launch
from tf_recipes.contract import LAUNCHERS, launcher_trait

# What a run trains when no arguments follow `--`: short runs that make sense on a CPU.
DEFAULT_TRAIN_ARGS = {
    "mnist-cnn": ["--synthetic", "--max-steps", "60", "--log-every", "60"],
    "cassava-resnet": ["--synthetic", "--weights", "none", "--batch-size", "8", "--max-steps", "10",
                       "--warmup-steps", "3", "--log-every", "10"],
    "cityscapes-unet": ["--benchmark", "--preset", "cpu", "--max-steps", "10", "--warmup-steps", "3",
                        "--log-every", "10"],
}
# Recipes without a benchmark_input.py, and why they need none.
NO_INPUT_BENCHMARK = {
    "mnist-cnn": "mnist-cnn keeps the whole data set in memory as arrays and gathers each batch by index "
                 "(a tf.gather and a cast per batch, nothing decoded), so there is no input pipeline to "
                 "measure: its training rate is the step rate.",
}
INPUT_BENCHMARK = "benchmark_input.py"
DEFAULT_CPU_REPLICAS = (1, 2, 4)
DEFAULT_GPU_REPLICAS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Measurement:
    """One planned training run."""
    round: int  # 1-based
    launcher: str
    replicas: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    results_dir: str = ""

    @property
    def name(self) -> str:
        return f"round{self.round}-{self.launcher}-{self.replicas}"


# -- options ---------------------------------------------------------------------------------------

def parse_replicas(text: str) -> list[int]:
    """`1,2,4` -> [1, 2, 4]: positive whole numbers, no repeats, in the order given."""
    values = []
    for word in str(text).split(","):
        value = launch.parse_count("--replicas", word.strip())
        if value < 1:
            raise launch.LaunchError(f"--replicas {text!r}: every count must be at least 1")
        if value in values:
            raise launch.LaunchError(f"--replicas {text!r} lists {value} twice")
        values.append(value)
    return values


def parse_launchers(text: str) -> list[str]:
    names = [word.strip() for word in str(text).split(",") if word.strip()]
    if not names:
        raise launch.LaunchError(f"--launchers {text!r} names no launcher; choose from: {', '.join(LAUNCHERS)}")
    for name in names:
        launch.check_choice("launcher", name, LAUNCHERS)
    return list(dict.fromkeys(names))


def default_replicas(gpus: int) -> list[int]:
    """1, 2, 4 replicas on the CPU; 1, 2, 4, 8 GPUs up to the number there is."""
    if not gpus:
        return list(DEFAULT_CPU_REPLICAS)
    return [count for count in DEFAULT_GPU_REPLICAS if count <= gpus] + ([gpus] if gpus not in DEFAULT_GPU_REPLICAS
                                                                         and gpus > 1 else [])


def train_args_for(recipe: str, given: list[str]) -> list[str]:
    return list(given) if given else list(DEFAULT_TRAIN_ARGS.get(recipe, []))


# -- the run list ----------------------------------------------------------------------------------

def configurations(launchers, replicas) -> list[tuple[str, int]]:
    """(launcher, replicas) pairs to measure: `single` only at 1 replica, every other launcher at every count."""
    pairs = [(launcher, count) for count in replicas for launcher in launchers
             if not (launcher_trait(launcher, "one_replica") and count != 1)]
    if not pairs:
        raise launch.LaunchError(f"nothing to measure: --launchers {','.join(launchers)} with --replicas "
                                 f"{','.join(map(str, replicas))} (single runs only 1 replica)")
    return pairs


def plan_runs(recipe: str, launchers, replicas, rounds: int, train_args, runs_dir: str, *, gpus: int = 0,
              python: str = "python", horovodrun: str = "horovodrun") -> list[Measurement]:
    """Every run of the benchmark in the order it runs: round by round, each round every configuration.

    With `gpus` 0 the replicas are CPU replicas (`--cpu-replicas`); otherwise they are GPUs, at most `gpus`.
    """
    if rounds < 1:
        raise launch.LaunchError(f"--rounds {rounds} must be at least 1")
    if gpus and max(replicas) > gpus:
        raise launch.LaunchError(f"--replicas {max(replicas)} is more than --gpus {gpus}; "
                                 f"ask for at most {gpus} replicas")
    runs = []
    for round_number in range(1, rounds + 1):
        for launcher, count in configurations(launchers, replicas):
            results_dir = os.path.join(runs_dir, f"round{round_number}-{launcher}-{count}")
            plan = launch.build_launch(recipe, launcher, gpus=count if gpus else 0,
                                       cpu_replicas=1 if gpus else count,
                                       train_args=[*train_args, "--results-dir", results_dir],
                                       python=python, horovodrun=horovodrun)
            runs.append(Measurement(round_number, launcher, count, plan.argv, dict(plan.env), results_dir))
    return runs


def input_benchmark_command(recipe: str, json_path: str, extra_args=(), python: str = "python") -> list[str]:
    """The recipe's input-pipeline benchmark with its report written to `json_path`."""
    return [python, os.path.join("recipes", recipe, INPUT_BENCHMARK), *extra_args, "--json", json_path]
