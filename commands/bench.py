"""invoke bench: a recipe's throughput under every launcher and replica count, and its input pipeline.

Every measurement is a real training run started by the same builder as `invoke run --runtime local`
(`launch.build_launch`); its images/s comes from the run's results.json. The runs are interleaved
over rounds (round 1 runs every launcher and replica count once, then round 2, ...), so that every
configuration sees the same changes in machine load, and the median of the rounds is reported.

The pure parts (the run list, medians and efficiency, the input report, the Markdown) are
unit-tested; `run_measurement` starts one run and `plot` draws the PNG with matplotlib, which is a
development dependency only (`pip install -e ".[dev]"`), never part of a recipe image.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import statistics
import subprocess
from dataclasses import dataclass, field

from commands import launch

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
RATE_KEYS = ("images_per_s", "images_per_sec")
FIGURE_SIZE_INCHES = (15.0, 4.8)
FIGURE_DPI = 100  # the PNG is 1500 x 480 pixels
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
        raise launch.LaunchError(f"--launchers {text!r} names no launcher; choose from: {', '.join(launch.LAUNCHERS)}")
    for name in names:
        launch.check_choice("launcher", name, launch.LAUNCHERS)
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
             if not (launcher == "single" and count != 1)]
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


def input_benchmark_command(recipe: str, root: str, json_path: str, extra_args=(),
                            python: str = "python") -> list[str] | None:
    """The recipe's input-pipeline benchmark with its report written to `json_path`, or None if it has none."""
    script = os.path.join("recipes", recipe, INPUT_BENCHMARK)
    if not os.path.isfile(os.path.join(root, script)):
        return None
    return [python, script, *extra_args, "--json", json_path]


# -- one run ---------------------------------------------------------------------------------------

def run_measurement(run: Measurement, root: str, log_path: str) -> dict:
    """Start one planned run, its output to `log_path`; the record of what it measured.

    A failed run is a record with `error` set (its status and the log), so one broken configuration
    does not throw away the others.
    """
    os.makedirs(run.results_dir, exist_ok=True)
    env = {**os.environ, **run.env, "PYTHONPATH": root}  # as `invoke run --runtime local`
    with open(log_path, "w") as log:
        status = subprocess.call(run.argv, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    # The 1-minute load average as the run ends: other work on the machine shows here.
    record = {"round": run.round, "launcher": run.launcher, "replicas": run.replicas,
              "load_average_1min": round(os.getloadavg()[0], 2)}
    results_path = os.path.join(run.results_dir, "results.json")
    if status or not os.path.isfile(results_path):
        return {**record, "images_per_sec": None, "error": f"exit status {status}; output in {log_path}"}
    with open(results_path) as handle:
        results = json.load(handle)
    record.update({key: results.get(key) for key in (
        "images_per_sec", "images_per_sec_per_replica", "step_time_p50_ms", "step_time_p90_ms", "global_batch",
        "per_replica_batch", "timed_steps", "replicas_in_sync", "versions")})
    if results.get("replicas") != run.replicas:
        record["error"] = f"results.json reports {results.get('replicas')} replicas, not {run.replicas}"
    elif results.get("replicas_in_sync") is False:
        record["error"] = "the replicas finished with different weights"
    elif record["images_per_sec"] is None:
        record["error"] = "no timed steps: give --max-steps more than --warmup-steps"
    return record


# -- summary ---------------------------------------------------------------------------------------

def summarize(records) -> list[dict]:
    """One row per (launcher, replicas): every round's img/s, the median, speed-up and efficiency.

    Scaling efficiency at N replicas = median img/s at N / (N x median img/s of the same launcher at
    1 replica); a launcher not measured at 1 replica is compared with `single`. Failed rounds are
    left out of the median and counted.
    """
    groups: dict[tuple[str, int], list[dict]] = {}
    for record in records:
        groups.setdefault((record["launcher"], record["replicas"]), []).append(record)
    rows = []
    for (launcher, replicas), group in groups.items():
        rates = [r["images_per_sec"] for r in group if r.get("images_per_sec") is not None and not r.get("error")]
        batches = [r["global_batch"] for r in group if r.get("global_batch")]
        rows.append({"launcher": launcher, "replicas": replicas, "global_batch": batches[0] if batches else None,
                     "images_per_sec_rounds": rates, "images_per_sec_median": statistics.median(rates) if rates else None,
                     "failed_rounds": len(group) - len(rates),
                     "replicas_in_sync": all(r.get("replicas_in_sync", True) for r in group)})
    medians = {(row["launcher"], row["replicas"]): row["images_per_sec_median"] for row in rows}
    single = medians.get(("single", 1))
    for row in rows:
        base = medians.get((row["launcher"], 1)) or single
        median = row["images_per_sec_median"]
        row["speedup"] = median / base if median and base else None
        row["efficiency"] = row["speedup"] / row["replicas"] if row["speedup"] else None
        row["vs_single"] = median / single if median and single else None
    order = {name: index for index, name in enumerate(launch.LAUNCHERS)}
    return sorted(rows, key=lambda row: (order.get(row["launcher"], 99), row["replicas"]))


def input_rates(report) -> dict[str, float]:
    """Every images/s figure in an input benchmark's JSON report, by its dotted path.

    Read defensively: the reports of the recipes differ and change, so any dictionary holding an
    `images_per_s` or `images_per_sec` number counts, wherever it is; per-round lists (under
    `rounds`) are left out, since the report's own median is what is compared.
    """
    found: dict[str, float] = {}

    def walk(node, path):
        if isinstance(node, dict):
            for key in RATE_KEYS:
                value = node.get(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
                        and value > 0 and path:
                    found[".".join(path)] = float(value)
                    break
            for key, value in node.items():
                if key != "rounds" and isinstance(value, dict):
                    walk(value, [*path, str(key)])

    walk(report, [])
    return found


def reference_training_rate(rows) -> tuple[str, float] | None:
    """The training rate the input rates are compared with: single at 1 replica, else the first 1-replica row."""
    candidates = [row for row in rows if row["replicas"] == 1 and row["images_per_sec_median"]]
    candidates.sort(key=lambda row: row["launcher"] != "single")
    if not candidates:
        return None
    return f"{candidates[0]['launcher']}, 1 replica", candidates[0]["images_per_sec_median"]


def scaling_note(gpus: int, cpus: int | None) -> str:
    if gpus:
        return ("One replica per GPU; efficiency 1.0 means N GPUs train N times the images/s of one.")
    return (f"On the CPU every replica shares the same {cpus or 'few'} cores, so more replicas cannot train "
            f"faster: the ideal here is the same img/s at every count (efficiency 1/N), not N times. "
            f"Efficiency on a CPU measures what each launcher's synchronisation costs, not a speed-up.")


def _number(value, digits=None) -> str:
    """A rate for people: whole numbers from 100 up, more decimals below (0.46 img/s is not 0)."""
    if value is None:
        return "n/a"
    if digits is None:
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:,.{digits}f}"


def render_markdown(report: dict) -> str:
    """The README-ready table of a bench report (the dictionary written as bench.json)."""
    rows = report["rows"]
    machine, versions = report["machine"], report.get("versions") or {}
    version_text = ", ".join(f"{name} {value}" for name, value in versions.items() if value)
    lines = [
        f"`{report['command']}`",
        "",
        f"{report['recipe']}, {report['date']}; {machine.get('cpus')} CPUs ({machine.get('processor') or machine.get('machine')}), "
        f"{'GPUs: ' + str(report['gpus']) if report['gpus'] else 'no GPU'}; {version_text}. "
        f"Median of {report['rounds']} interleaved rounds; train.py arguments: `{shlex.join(report['train_args'])}`.",
        "",
        "| launcher | replicas | global batch | img/s (median) | img/s per round | x 1 replica | scaling efficiency |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        per_round = " / ".join(_number(rate) for rate in row["images_per_sec_rounds"]) or "n/a"
        if row["failed_rounds"]:
            per_round += f" ({row['failed_rounds']} failed)"
        speedup = f"{row['speedup']:.2f}x" if row["speedup"] else "n/a"
        efficiency = f"{row['efficiency']:.2f}" if row["efficiency"] else "n/a"
        lines.append(f"| {row['launcher']} | {row['replicas']} | {_number(row['global_batch'], 0)} | "
                     f"{_number(row['images_per_sec_median'])} | {per_round} | {speedup} | {efficiency} |")
    lines += ["", f"Scaling efficiency = img/s at N replicas / (N x img/s of the same launcher at 1 replica). "
                  f"{report['scaling_note']}"]
    load = machine.get("load_average")
    if load:
        lines += ["", f"Load average (1, 5, 15 min) before: {load['before']}, after: {load['after']}."]
    run_loads = [run["load_average_1min"] for run in report.get("runs", []) if run.get("load_average_1min") is not None]
    if run_loads:
        lines[-1] += (f" 1-minute load average as each run ended: {min(run_loads):.1f} to {max(run_loads):.1f} "
                      f"(median {statistics.median(run_loads):.1f}) on {machine.get('cpus')} CPUs.")
    lines += ["", "Input pipeline against the training step:", ""]
    inputs = report.get("input") or {}
    reference = report.get("training_reference")
    if inputs.get("rates") and reference:
        lines += [f"`{inputs['command']}`", "",
                  f"| measured | img/s | / training ({reference['label']}: {_number(reference['images_per_sec'])} img/s) |",
                  "|---|---|---|"]
        for name, rate in inputs["rates"].items():
            lines.append(f"| {name} | {_number(rate)} | {rate / reference['images_per_sec']:,.2f}x |")
        lines += ["", "Below 1.00x the input cannot keep up with training on its own: the run is input-bound."]
    else:
        lines.append(inputs.get("note") or "not measured")
    return "\n".join(lines) + "\n"


# -- the picture -----------------------------------------------------------------------------------

LAUNCHER_STYLE = {"single": ("tab:gray", "s"), "mirrored": ("tab:blue", "o"),
                  "multiworker": ("tab:orange", "^"), "horovod": ("tab:green", "D")}


def plot(report: dict, path: str) -> None:
    """images/s and scaling efficiency against replicas (one line per launcher), and the input rates."""
    import matplotlib
    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    rows = report["rows"]
    figure, (rate_axis, efficiency_axis, input_axis) = plt.subplots(1, 3, figsize=FIGURE_SIZE_INCHES,
                                                                     dpi=FIGURE_DPI)
    replica_counts = sorted({row["replicas"] for row in rows})
    for launcher in dict.fromkeys(row["launcher"] for row in rows):
        mine = [row for row in rows if row["launcher"] == launcher and row["images_per_sec_median"]]
        if not mine:
            continue
        colour, marker = LAUNCHER_STYLE.get(launcher, (None, "o"))
        counts = [row["replicas"] for row in mine]
        rate_axis.plot(counts, [row["images_per_sec_median"] for row in mine], marker=marker, color=colour,
                       label=launcher, linestyle="-" if len(mine) > 1 else "none", markersize=7)
        for row in mine:  # every round, faint, to show the spread behind the median
            rate_axis.scatter([row["replicas"]] * len(row["images_per_sec_rounds"]), row["images_per_sec_rounds"],
                              color=colour, alpha=0.25, s=14)
        efficient = [row for row in mine if row["efficiency"]]
        efficiency_axis.plot([row["replicas"] for row in efficient], [row["efficiency"] for row in efficient],
                             marker=marker, color=colour, label=launcher,
                             linestyle="-" if len(efficient) > 1 else "none", markersize=7)
    for axis in (rate_axis, efficiency_axis):
        axis.set_xscale("log", base=2)
        axis.set_xticks(replica_counts, [str(count) for count in replica_counts])
        axis.minorticks_off()
        axis.set_xlim(min(replica_counts) / 1.3, max(replica_counts) * 1.3)
    rate_axis.set(title="Throughput (median; faint: every round)", xlabel="replicas", ylabel="images/s")
    rate_axis.set_ylim(bottom=0)
    rate_axis.grid(alpha=0.3)
    rate_axis.legend(loc="lower right", fontsize=9)
    efficiency_axis.axhline(1.0, color="black", linewidth=0.8, linestyle="--", label="ideal with a device per replica")
    if not report["gpus"]:
        ideal = [1 / count for count in replica_counts]
        efficiency_axis.plot(replica_counts, ideal, color="black", linewidth=0.8, linestyle=":",
                             label="1/N: replicas share the cores")
    efficiency_axis.set(title="Scaling efficiency", xlabel="replicas", ylabel="img/s(N) / (N x img/s(1))")
    efficiency_axis.set_ylim(0, max([1.1] + [row["efficiency"] * 1.1 for row in rows if row["efficiency"]]))
    efficiency_axis.grid(alpha=0.3)
    efficiency_axis.legend(loc="lower left", fontsize=8)

    inputs, reference = report.get("input") or {}, report.get("training_reference")
    input_axis.set_title("Input pipeline vs training step")
    if inputs.get("rates") and reference:
        names = list(inputs["rates"])
        shared = _shared_prefix(names)  # "pipelines.summary." on every bar says nothing
        training = [(f"training: {reference['label']}", reference["images_per_sec"])]
        best = max((row for row in rows if row["images_per_sec_median"]), key=lambda row: row["images_per_sec_median"])
        if best["images_per_sec_median"] > reference["images_per_sec"]:
            training.append((f"training: {best['launcher']}, {best['replicas']} replicas",
                             best["images_per_sec_median"]))
        labels = [name[len(shared):] for name in names] + [label for label, _ in training]
        values = [inputs["rates"][name] for name in names] + [value for _, value in training]
        colours = ["tab:purple"] * len(names) + ["tab:gray"] * len(training)
        bars = input_axis.barh(range(len(values)), values, color=colours)
        input_axis.bar_label(bars, labels=[_number(value) for value in values], fontsize=8, padding=2)
        input_axis.axvline(reference["images_per_sec"], color="black", linewidth=0.8, linestyle="--")
        input_axis.set_yticks(range(len(values)), labels, fontsize=8)
        input_axis.invert_yaxis()
        input_axis.set_xscale("log")
        input_axis.set_xlim(min(values) / 2, max(values) * 4)  # room for the value labels
        input_axis.set_title("Input pipeline vs training step\n(input left of the dashed line: input-bound)",
                             fontsize=10)
        input_axis.set_xlabel(f"images/s (log scale){'; ' + shared.rstrip('.') if shared else ''}")
    else:
        input_axis.axis("off")
        note = _wrap(inputs.get("note") or "input pipeline not measured", 48)
        if reference:
            note = f"Training, {reference['label']}: {_number(reference['images_per_sec'])} img/s.\n\n{note}"
        input_axis.text(0.0, 0.5, note, fontsize=10, va="center", ha="left", transform=input_axis.transAxes)
    figure.suptitle(f"{report['recipe']}: {report['machine'].get('cpus')} CPUs"
                    f"{', ' + str(report['gpus']) + ' GPUs' if report['gpus'] else ', no GPU'}, "
                    f"median of {report['rounds']} round{'s' if report['rounds'] != 1 else ''}, {report['date'][:10]}", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=FIGURE_DPI)  # no bbox_inches="tight": the size stays FIGURE_SIZE_INCHES x DPI
    plt.close(figure)


def _shared_prefix(names) -> str:
    """The dotted path every name starts with ("a.b." for a.b.x and a.b.y); empty for a single name."""
    if len(names) < 2:
        return ""
    parts = [name.split(".") for name in names]
    shared = []
    for words in zip(*(part[:-1] for part in parts)):
        if len(set(words)) != 1:
            break
        shared.append(words[0])
    return "".join(word + "." for word in shared)


def _wrap(text: str, width: int) -> str:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join(lines + [line])


# -- the report ------------------------------------------------------------------------------------

def machine_info() -> dict:
    """CPU count and model, platform; what the figures depend on."""
    import platform

    model = ""
    try:
        with open("/proc/cpuinfo") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "processor": model or platform.processor() or platform.machine(),
            "platform": platform.platform(), "python": platform.python_version()}


def build_report(recipe: str, records, *, command: str, date: str, machine: dict, gpus: int, rounds: int,
                 train_args, input_section: dict | None) -> dict:
    """Everything bench.json holds: every round's numbers, the medians, the machine, versions, the command."""
    rows = summarize(records)
    versions = next((record["versions"] for record in records if record.get("versions")), {})
    reference = reference_training_rate(rows)
    return {
        "recipe": recipe, "date": date, "command": command, "machine": machine, "gpus": gpus, "rounds": rounds,
        "train_args": list(train_args), "versions": versions, "scaling_note": scaling_note(gpus, machine.get("cpus")),
        "rows": rows,
        "training_reference": {"label": reference[0], "images_per_sec": reference[1]} if reference else None,
        "input": input_section or {},
        "runs": [{key: value for key, value in record.items() if key != "versions"} for record in records],
    }


def input_section(recipe: str, command, report_path: str | None, status: int | None = None) -> dict:
    """What the input benchmark measured, read from its JSON report, or why there is nothing."""
    if command is None:
        return {"note": NO_INPUT_BENCHMARK.get(recipe, f"recipes/{recipe} has no {INPUT_BENCHMARK}")}
    section = {"command": shlex.join(command), "report": report_path}
    if status:
        return {**section, "note": f"{INPUT_BENCHMARK} failed with status {status}; nothing compared"}
    try:
        with open(report_path) as handle:
            rates = input_rates(json.load(handle))
    except (OSError, ValueError) as error:
        return {**section, "note": f"{INPUT_BENCHMARK} wrote no readable report ({error}); nothing compared"}
    if not rates:
        return {**section, "note": f"{INPUT_BENCHMARK}'s report holds no images/s figure; nothing compared"}
    return {**section, "rates": rates}


def write_outputs(report: dict, out: str) -> dict[str, str]:
    """bench.md, bench.json and bench.png in `out`."""
    os.makedirs(out, exist_ok=True)
    paths = {kind: os.path.join(out, f"bench.{kind}") for kind in ("md", "json", "png")}
    with open(paths["md"], "w") as handle:
        handle.write(render_markdown(report))
    with open(paths["json"], "w") as handle:
        json.dump(report, handle, indent=1)
        handle.write("\n")
    plot(report, paths["png"])
    return paths
