"""`invoke bench`'s report: medians, speed-up and efficiency, bench.md, bench.json and bench.png.

Everything but `plot` and `write_outputs` is pure and unit-tested. The plot uses matplotlib, a
development dependency only (`pip install -e ".[dev]"`), never part of a recipe image.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import statistics

from ci.bench.plan import INPUT_BENCHMARK, NO_INPUT_BENCHMARK
from tf_recipes.contract import LAUNCHER_TRAITS, LAUNCHERS, launcher_trait

RATE_KEY = "images_per_sec"  # the images/s figure of results.json and of the input benchmarks' reports
FIGURE_SIZE_INCHES = (15.0, 4.8)
FIGURE_DPI = 100  # the PNG is 1500 x 480 pixels

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
                     "images_per_sec_rounds": rates,
                     "images_per_sec_median": statistics.median(rates) if rates else None,
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
    order = {name: index for index, name in enumerate(LAUNCHERS)}
    return sorted(rows, key=lambda row: (order.get(row["launcher"], 99), row["replicas"]))


def input_rates(report) -> dict[str, float]:
    """Every images/s figure in an input benchmark's JSON report, by its dotted path.

    Read defensively: the reports of the recipes differ and change, so any dictionary holding an
    `images_per_sec` number counts, wherever it is; per-round lists (under
    `rounds`) are left out, since the report's own median is what is compared.
    """
    found: dict[str, float] = {}

    def walk(node, path):
        if isinstance(node, dict):
            value = node.get(RATE_KEY)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
                    and value > 0 and path:
                found[".".join(path)] = float(value)
            for key, value in node.items():
                if key != "rounds" and isinstance(value, dict):
                    walk(value, [*path, str(key)])

    walk(report, [])
    return found


def _one_replica(launcher: str) -> bool:
    """Whether the launcher runs exactly one replica (False for a name this checkout does not know)."""
    return launcher in LAUNCHER_TRAITS and launcher_trait(launcher, "one_replica")


def reference_training_rate(rows) -> tuple[str, float] | None:
    """The training rate the input rates are compared with: single at 1 replica, else the first 1-replica row."""
    candidates = [row for row in rows if row["replicas"] == 1 and row["images_per_sec_median"]]
    candidates.sort(key=lambda row: not _one_replica(row["launcher"]))
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
        f"{report['recipe']}, {report['date']}; {machine.get('cpus')} CPUs "
        f"({machine.get('processor') or machine.get('machine')}), "
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
                  f"| measured | img/s | / training ({reference['label']}: "
                  f"{_number(reference['images_per_sec'])} img/s) |",
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


def _plot_scaling(rows, gpus: int, rate_axis, efficiency_axis) -> None:
    """images/s (every round faint, the median joined) and efficiency against replicas, per launcher."""
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
    if not gpus:
        ideal = [1 / count for count in replica_counts]
        efficiency_axis.plot(replica_counts, ideal, color="black", linewidth=0.8, linestyle=":",
                             label="1/N: replicas share the cores")
    efficiency_axis.set(title="Scaling efficiency", xlabel="replicas", ylabel="img/s(N) / (N x img/s(1))")
    efficiency_axis.set_ylim(0, max([1.1] + [row["efficiency"] * 1.1 for row in rows if row["efficiency"]]))
    efficiency_axis.grid(alpha=0.3)
    efficiency_axis.legend(loc="lower left", fontsize=8)


def _plot_input(report: dict, input_axis) -> None:
    """The input benchmark's rates as bars against the training rate, or why there are none."""
    rows, inputs, reference = report["rows"], report.get("input") or {}, report.get("training_reference")
    input_axis.set_title("Input pipeline vs training step")
    if not (inputs.get("rates") and reference):
        input_axis.axis("off")
        note = _wrap(inputs.get("note") or "input pipeline not measured", 48)
        if reference:
            note = f"Training, {reference['label']}: {_number(reference['images_per_sec'])} img/s.\n\n{note}"
        input_axis.text(0.0, 0.5, note, fontsize=10, va="center", ha="left", transform=input_axis.transAxes)
        return
    names = list(inputs["rates"])
    shared = _shared_prefix(names)  # "pipelines.summary." on every bar says nothing
    training = [(f"training: {reference['label']}", reference["images_per_sec"])]
    best = max((row for row in rows if row["images_per_sec_median"]), key=lambda row: row["images_per_sec_median"])
    if best["images_per_sec_median"] > reference["images_per_sec"]:
        training.append((f"training: {best['launcher']}, {best['replicas']} replicas", best["images_per_sec_median"]))
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
    input_axis.set_title("Input pipeline vs training step\n(input left of the dashed line: input-bound)", fontsize=10)
    input_axis.set_xlabel(f"images/s (log scale){'; ' + shared.rstrip('.') if shared else ''}")


def plot(report: dict, path: str) -> None:
    """images/s and scaling efficiency against replicas (one line per launcher), and the input rates."""
    import matplotlib
    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    figure, (rate_axis, efficiency_axis, input_axis) = plt.subplots(1, 3, figsize=FIGURE_SIZE_INCHES,
                                                                     dpi=FIGURE_DPI)
    _plot_scaling(report["rows"], report["gpus"], rate_axis, efficiency_axis)
    _plot_input(report, input_axis)
    figure.suptitle(f"{report['recipe']}: {report['machine'].get('cpus')} CPUs"
                    f"{', ' + str(report['gpus']) + ' GPUs' if report['gpus'] else ', no GPU'}, "
                    f"median of {report['rounds']} round{'s' if report['rounds'] != 1 else ''}, {report['date'][:10]}",
                    fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=FIGURE_DPI)  # no bbox_inches="tight": the size stays FIGURE_SIZE_INCHES x DPI
    plt.close(figure)


def _shared_prefix(names) -> str:
    """The dotted path every name starts with ("a.b." for a.b.x and a.b.y); empty for a single name."""
    if len(names) < 2:
        return ""
    parts = [name.split(".") for name in names]
    shared = []
    for words in zip(*(part[:-1] for part in parts), strict=False):  # up to the shortest name
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


def input_section(recipe: str, command, report_path: str | None, report: dict | None = None,
                  status: int | None = None, error: str | None = None) -> dict:
    """What the input benchmark measured (its JSON `report`), or why there is nothing to compare."""
    if command is None:
        return {"note": NO_INPUT_BENCHMARK.get(recipe, f"recipes/{recipe} has no {INPUT_BENCHMARK}")}
    section = {"command": shlex.join(command), "report": report_path}
    if status:
        return {**section, "note": f"{INPUT_BENCHMARK} failed with status {status}; nothing compared"}
    if report is None:
        return {**section, "note": f"{INPUT_BENCHMARK} wrote no readable report ({error}); nothing compared"}
    rates = input_rates(report)
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
