"""The nightly report: report.json, JUnit XML (one test case per cell and README command), a
Markdown summary for $GITHUB_STEP_SUMMARY, and a PNG of images/s per cell per night.

The renderers are pure functions of the report (and the history for the plot); the matrix table
in docs/nightly.md is rendered here too, from ci/nightly/matrix.yaml.
"""
from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

from ci.nightly import matrix as nightly
from commands.choices import STACK_BASES
from tf_recipes.contract import DEFAULT_STACK

MARK = {"pass": "✅ pass", "fail": "❌ **fail**"}


def render_junit(report: dict) -> str:
    entries = report["entries"]
    suite = ET.Element("testsuite", name=f"nightly-{report['tier']}", tests=str(len(entries)),
                       failures=str(sum(e["status"] == "fail" for e in entries)),
                       time=f"{report['duration_s']:.1f}", timestamp=report["started"])
    for entry in entries:
        group = "readme" if entry["kind"] == "readme" else entry["recipe"]
        case = ET.SubElement(suite, "testcase", classname=f"nightly.{report['tier']}.{group}", name=entry["id"],
                             time=f"{entry.get('duration_s') or 0:.1f}")
        command = entry["command"] if isinstance(entry["command"], str) else nightly.quote(entry["command"])
        if entry["status"] == "fail":
            ET.SubElement(case, "failure", message=entry["reason"]).text = (
                f"{entry['reason']}\ncommand: {command}\nlog: {entry.get('log', '')}")
        quality = f"\n{_quality(entry)}" if entry["kind"] == "quality" else ""
        ET.SubElement(case, "system-out").text = f"command: {command}\nattempts: {entry.get('attempts', 0)}{quality}"
    suites = ET.Element("testsuites", name="tf-recipes nightly")
    suites.append(suite)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _rate(entry: dict) -> str:
    rate = entry.get("images_per_sec")
    if not rate:
        return ""
    text = f"{rate:,.0f} img/s" if rate >= 100 else f"{rate:.3g} img/s"
    if entry.get("change") is not None:
        text += f" ({entry['change']:+.0%})"
    return text


def _value(entry: dict) -> str:
    """A quality cell's metric value, or `missing` when its results.json had none."""
    return "missing" if entry.get("value") is None else f"{entry['value']:.4f}"


def _quality(entry: dict) -> str:
    """A quality cell's metric, its value and its floor, in words."""
    return f"{entry['metric']} {_value(entry)}, floor {entry['floor']:g}"


def _image(entry: dict) -> str:
    """A cell's image variant (`cpu`, `current-cpu`); reports written before the stack axis have `base`."""
    return entry.get("image", entry["base"])


def render_summary(report: dict) -> str:
    cells = [e for e in report["entries"] if e["kind"] == "cell"]
    readme = [e for e in report["entries"] if e["kind"] == "readme"]
    quality = [e for e in report["entries"] if e["kind"] == "quality"]
    counts = {s: sum(e["status"] == s for e in report["entries"]) for s in MARK}
    lines = [f"## Nightly, tier `{report['tier']}`: {'green' if report['passed'] else 'RED'}", "",
             f"{counts['pass']} passed, {counts['fail']} failed; "
             f"{report['started']}, {report['duration_s'] / 60:.1f} min. Command: `{report['command']}`", ""]
    failed = [e for e in report["entries"] if e["status"] == "fail"]
    if failed:
        lines += ["### Failed", ""] + [f"- **{e['id']}**: {e['reason']}" for e in failed] + [""]
    if report["regressions"]:
        lines += ["### Throughput regressions", ""] + [
            f"- **{r['cell']}**: ratio {r['ratio']:.3f} against the median {r['baseline']:.3f} of {r['nights']} nights "
            f"({r['change']:+.0%})" for r in report["regressions"]] + [""]
    launchers = list(dict.fromkeys(e["launcher"] for e in cells))
    for runtime, image, stack in dict.fromkeys((e["runtime"], _image(e), e.get("stack", DEFAULT_STACK)) for e in cells):
        lines += [f"### {runtime} / {image} image (stack {stack})", "",
                  "| recipe | " + " | ".join(launchers) + " |", "|---|" + "---|" * len(launchers)]
        for recipe in dict.fromkeys(e["recipe"] for e in cells):
            row = []
            for launcher in launchers:
                entry = next((e for e in cells if (e["recipe"], e["launcher"], e["runtime"], _image(e))
                              == (recipe, launcher, runtime, image)), None)
                row.append("" if entry is None else " ".join(filter(None, (MARK[entry["status"]], _rate(entry)))))
            lines.append(f"| {recipe} | " + " | ".join(row) + " |")
        lines.append("")
    lines += ["Images/s is each cell's median training rate; the change in brackets is its ratio to the "
              "recipe's single-device cell against the median of recent nights "
              f"(rule: a drop of more than {report['regression_rule']['drop']:.0%} against the last "
              f"{report['regression_rule']['window']} nights fails the night).", ""]
    if quality:
        lines += ["### Quality: each recipe's metric on held-out data against its floor", "",
                  "| cell | metric | value | floor | result |", "|---|---|---|---|---|"]
        lines += [f"| {e['id']} | `{e['metric']}` | {_value(e)} | {e['floor']:g} | {MARK[e['status']]} |"
                  for e in quality] + [""]
    if readme:
        lines += ["### README commands, run as written", "", "| command | result |", "|---|---|"]
        lines += [f"| `{e['command'] or e['id']}` | {MARK[e['status']]} |" for e in readme] + [""]
    return "\n".join(lines)


def plot_history(nights: list[dict], tier: str, path: str) -> None:
    """images/s per cell per night: one panel per recipe (their rates differ a hundredfold), one
    line per launcher/runtime/base, regressions and failures ringed in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nights = [n for n in nights if n.get("tier") == tier]
    cell_ids = list(dict.fromkeys(c for n in nights for c in n["cells"]))
    recipes = list(dict.fromkeys(c.split("/")[0] for c in cell_ids)) or ["(no cells)"]
    figure, panels = plt.subplots(len(recipes), 1, figsize=(9, 2.6 * len(recipes) + 0.8), sharex=True, squeeze=False)
    for recipe, axes in zip(recipes, panels[:, 0], strict=True):
        for cell_id in [c for c in cell_ids if c.split("/")[0] == recipe]:
            points = [(i, n["cells"][cell_id]) for i, n in enumerate(nights)
                      if n["cells"].get(cell_id, {}).get("images_per_sec")]
            if not points:
                continue
            axes.plot([i for i, _ in points], [c["images_per_sec"] for _, c in points], marker="o",
                      label=cell_id.split("/", 1)[1])
            bad = [(i, c["images_per_sec"]) for i, c in points if c.get("regression") or c.get("status") == "fail"]
            if bad:
                axes.scatter(*zip(*bad, strict=True), s=160, facecolors="none", edgecolors="red", linewidths=2,
                             zorder=3)
        axes.set_title(recipe, fontsize=10, loc="left")
        axes.set_ylabel("images/s")
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        if axes.lines:
            axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    panels[-1, 0].set_xticks(range(len(nights)), [n["started"][:16].replace("T", "\n") for n in nights], fontsize=7)
    figure.suptitle(f"tf-recipes nightly, tier {tier}: images/s per cell and night (red ring: regression or failure)",
                    fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def build_report(matrix, tier: str, entries: dict, found: list[dict], facts: dict, *, started, finished,
                 command: str, matrix_path: str) -> dict:
    """report.json: the night's entries (judged), its regressions, the machine and the command."""
    return {"tier": tier, "matrix": matrix_path,
            "started": started.isoformat(timespec="seconds"), "finished": finished.isoformat(timespec="seconds"),
            "duration_s": round((finished - started).total_seconds(), 1), "command": command,
            "machine": dict(facts), "regression_rule": matrix.regression,
            "passed": all(e["status"] != "fail" for e in entries.values()),
            "entries": list(entries.values()), "regressions": found}


def history_record(report: dict) -> dict:
    """What the history keeps of a night: each cell's status, images/s, ratio and regression flag."""
    regressed = {r["cell"] for r in report["regressions"]}
    return {"started": report["started"], "tier": report["tier"], "passed": report["passed"],
            "cells": {e["id"]: {"status": e["status"], "images_per_sec": e.get("images_per_sec"),
                                "ratio": e.get("ratio"), "regression": e["id"] in regressed}
                      for e in report["entries"] if e["kind"] == "cell"}}


def write_all(report: dict, nights: list[dict], out: str) -> None:
    with open(os.path.join(out, "report.json"), "w") as handle:
        json.dump(report, handle, indent=1)
    with open(os.path.join(out, "junit.xml"), "w") as handle:
        handle.write(render_junit(report))
    with open(os.path.join(out, "summary.md"), "w") as handle:
        handle.write(render_summary(report))
    plot_history(nights, report["tier"], os.path.join(out, "history.png"))


def render_matrix_table(matrix) -> str:
    """The README's launcher x runtime table: for each tier and stack, which cells it has and which
    ran on the CI machine (docker/cpu cells do; apptainer/cpu cells too, with the `apptainer` of
    ci/apptainer.sh, and fail, saying why, without one; a gpu tier stops at once and red on a machine
    without GPUs)."""
    lines = ["| tier | stack | recipes | launchers | runtime / base | run on the CI machine |",
             "|---|---|---|---|---|---|"]
    for tier, spec in matrix.tiers.items():
        for stack in spec.get("stacks", [DEFAULT_STACK]):
            launchers = [name for name in spec["launchers"] if nightly.runs_on(matrix.launchers, name, stack)]
            for runtime in spec["runtimes"]:
                for base in (b for b in spec["bases"] if b in STACK_BASES[stack]):
                    lacking = ", ".join(filter(None, (
                        "needs GPUs" if spec.get("gpus") else "", "NGC base" if base == "ngc" else "",
                        "TensorFlow GPU image" if base == "gpu" else "")))
                    here = ("yes" if runtime == "docker" and base == "cpu" and not spec.get("gpus")
                            else "yes, with the `apptainer` of `ci/apptainer.sh` (without one: failed, saying why)"
                            if runtime == "apptainer" and base == "cpu" and not spec.get("gpus")
                            else f"no: the tier stops at once, red ({lacking})" if spec.get("gpus")
                            else f"no: failed, saying why ({lacking})")
                    replicas = "one per GPU" if spec.get("gpus") else "CPU replicas"
                    lines.append(f"| `{tier}` | {stack} | {', '.join(spec['recipes'])} | {', '.join(launchers)} "
                                 f"({replicas}) | {runtime} / {base} | {here} |")
    readme = [f"`{c.match}` ({', '.join(tiers)})" for c, tiers in matrix.readme]
    lines += ["", "README commands run as written: " + "; ".join(readme) + "."]
    quality = [f"{recipe} ({', '.join(spec['tiers'])}; {spec['launcher']}, {spec['runtime']} / {spec['base']}): "
               f"`{spec['metric']}` >= {spec['floor']:g}" for recipe, spec in matrix.quality.items()]
    if quality:
        lines += ["", "Quality cells, each a recipe's metric on held-out data against its floor: "
                  + "; ".join(quality) + "."]
    return "\n".join(lines) + "\n"
