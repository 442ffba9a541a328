"""Measurement and the results file: throughput, step-time percentiles, versions, results.json."""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform

import numpy as np

from tf_recipes.atomic import atomic_file
from tf_recipes.contract import DesyncError


def check_in_sync(fingerprints: list[str]) -> None:
    """The desync guard: every replica must end with bit-identical trainable weights."""
    if len(set(fingerprints)) > 1:  # Distributed: the replicas must end as one model
        listing = ", ".join(f"replica {i}: {fp}" for i, fp in enumerate(fingerprints))
        raise DesyncError(
            f"replicas finished with different weights ({listing}). The launchers did not keep "
            "them in sync, so this run trained no single model; results were not written. "
            "Check the Keras version (>= 3.8 is required for MirroredStrategy) and the launcher.")


def throughput(step_times_s: list[float], global_batch: int, num_replicas: int,
               warmup_steps: int) -> dict:
    """Images/s and step-time percentiles over the steps after the warm-up.

    Counts only images that were trained on (whole global batches), divided by the summed wall
    time of those steps, so the figure is not inflated the way epoch-size / epoch-time can be.
    """
    timed = np.asarray(step_times_s[warmup_steps:], dtype=np.float64)
    if timed.size == 0:
        return {"timed_steps": 0, "images_per_sec": None, "images_per_sec_per_replica": None,
                "step_time_p50_ms": None, "step_time_p90_ms": None}
    images_per_sec = global_batch * timed.size / timed.sum()
    return {
        "timed_steps": int(timed.size),
        "images_per_sec": float(f"{images_per_sec:.4g}"),
        "images_per_sec_per_replica": float(f"{images_per_sec / num_replicas:.4g}"),  # Distributed: rate per replica
        "step_time_p50_ms": round(float(np.percentile(timed, 50) * 1e3), 3),
        "step_time_p90_ms": round(float(np.percentile(timed, 90) * 1e3), 3),
    }


def versions() -> dict:
    """The versions that made the run. Horovod's is its installed distribution's, read without importing it:
    a run that does not use it does not load it."""
    import keras
    import tensorflow as tf

    try:
        horovod_version = importlib.metadata.version("horovod")
    except importlib.metadata.PackageNotFoundError:
        horovod_version = None
    return {"python": platform.python_version(), "tensorflow": tf.__version__,
            "keras": keras.__version__, "horovod": horovod_version}


def machine() -> dict:
    """What ran it: the CPU's model, its cores, the GPUs TensorFlow sees, and the load average at the end
    (other work on a shared machine slows a run down)."""
    import tensorflow as tf

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "cores": os.cpu_count(), "gpus": len(tf.config.list_physical_devices("GPU")),
            "load_average": load and [round(value, 2) for value in load]}


def write_json(path: str, data: dict) -> None:
    """Write atomically and durably: a reader sees the old file or the whole new one, never half of
    it, also after a crash."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_file(path, "w") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
