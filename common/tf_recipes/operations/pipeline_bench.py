"""What the recipes' input benchmarks share: a pipeline's memory, and epoch-by-epoch summaries.

Each benchmark runs every pipeline in a process of its own, so that the process's peak resident
memory is the pipeline's, and alternates the pipelines over rounds. A run is
{"epochs": [{"images_per_sec": ..., "cpu_ms_per_image": ..., "seconds": ..., "first_batch_s": ...}, ...],
 "memory": {...}}: the first epoch (which builds the pipeline, and any cache) and the later ones.
"""

from __future__ import annotations

import statistics

EPOCH_FIGURES = ("images_per_sec", "cpu_ms_per_image", "seconds", "first_batch_s")


def memory_mb() -> dict:
    """This process's resident memory from /proc/self/status, in MB: the peak (VmHWM), now, and
    now split into anonymous memory (private to the process) and file pages (page cache, shared
    by every process that maps the same file)."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                fields[name] = round(int(value.split()[0]) / 1024, 1)
    return {
        "peak_rss_mb": fields["VmHWM"],
        "rss_mb": fields["VmRSS"],
        "anon_mb": fields["RssAnon"],
        "file_mb": fields["RssFile"],
    }


def memory_since(start: dict) -> dict:
    """Peak resident memory of this process, and above what it held at `start` (a memory_mb())."""
    end = memory_mb()
    return {
        "start_rss_mb": start["rss_mb"],
        "peak_rss_mb": end["peak_rss_mb"],
        "peak_above_start_mb": round(end["peak_rss_mb"] - start["rss_mb"], 1),
        "end_anon_mb": end["anon_mb"],
        "end_file_mb": end["file_mb"],
    }


def summarise_epochs(runs: list[dict]) -> dict:
    """Medians over rounds of the first epoch and of the later epochs (each round's median first),
    and of the memory figures."""

    def medians(epochs):
        return {key: round(statistics.median(epoch[key] for epoch in epochs), 3) for key in EPOCH_FIGURES}

    later = [medians(run["epochs"][1:]) for run in runs if len(run["epochs"]) > 1]
    first = medians([run["epochs"][0] for run in runs]) | {"images": runs[0]["epochs"][0]["images"]}
    return {
        "first_epoch": first,
        "later_epochs": medians(later) if later else None,
        "memory": {key: statistics.median(run["memory"][key] for run in runs) for key in runs[0]["memory"]},
    }


def ratios_within_rounds(ours: list[dict], seed: list[dict]) -> dict:
    """ours / seed images/s, taken within each round (both shared its load): median and lowest over
    the rounds, for the first epoch and for the later epochs."""

    def ratio(pick):
        values = [pick(o) / pick(s) for o, s in zip(ours, seed, strict=True)]
        return {"median": round(statistics.median(values), 2), "min": round(min(values), 2)}

    result = {"first_epoch": ratio(lambda run: run["epochs"][0]["images_per_sec"])}
    if len(ours[0]["epochs"]) > 1:
        result["later_epochs"] = ratio(
            lambda run: statistics.median(e["images_per_sec"] for e in run["epochs"][1:])
        )
    return result
