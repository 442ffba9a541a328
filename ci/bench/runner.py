"""`invoke bench`'s runs: each a real training run on this machine, its images/s read from the
results.json it wrote; then the recipe's input benchmark, and the report.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess

from ci.bench import plan, report as bench_report
from ci.bench.plan import Measurement
from commands import launch
from tf_recipes.contract import RESULTS_FILE


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
    results_path = os.path.join(run.results_dir, RESULTS_FILE)
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


def machine_info() -> dict:
    """CPU count and model, platform; what the figures depend on."""
    model = ""
    try:
        with open("/proc/cpuinfo") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "processor": model or platform.processor() or platform.machine(),
            "platform": platform.platform(), "python": platform.python_version()}




def show(argv, env=None) -> None:
    print(launch.echo_line(argv, env), flush=True)


def input_command_here(recipe: str, root: str, json_path: str, extra_args, python: str) -> list[str] | None:
    """The recipe's input benchmark, or None when the recipe has none."""
    if not os.path.isfile(os.path.join(root, "recipes", recipe, plan.INPUT_BENCHMARK)):
        return None
    return plan.input_benchmark_command(recipe, json_path, extra_args, python=python)


def run_input_benchmark(recipe: str, command, json_path: str, out: str, root: str) -> dict:
    """Run the recipe's input benchmark (if it has one) and read the report it wrote."""
    if command is None:
        return bench_report.input_section(recipe, None, None)
    show(command)
    with open(os.path.join(out, "input-benchmark.log"), "w") as log:
        status = subprocess.call(command, cwd=root, stdout=log, stderr=subprocess.STDOUT,
                                 env={**os.environ, "PYTHONPATH": root, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if status:
        return bench_report.input_section(recipe, command, json_path, status=status)
    try:
        with open(json_path) as handle:
            return bench_report.input_section(recipe, command, json_path, report=json.load(handle))
    except (OSError, ValueError) as error:
        return bench_report.input_section(recipe, command, json_path, error=str(error))


def run_bench(recipe: str, runs, *, rounds: int, gpus: int, train_args, out: str, root: str, input_command,
              command: str, date: str, git_revision: str, keep_runs: bool) -> tuple[dict, dict, list[dict]]:
    """Every planned run in order, then the input benchmark; writes bench.md, bench.json and bench.png
    to `out`. Returns the report, the paths written and the failed runs' records (their logs are kept)."""
    runs_dir = os.path.join(out, "runs")
    os.makedirs(runs_dir, exist_ok=True)
    load_before = [round(value, 2) for value in os.getloadavg()]
    records = []
    for index, run in enumerate(runs, 1):
        show(run.argv, run.env)
        record = run_measurement(run, root, os.path.join(runs_dir, f"{run.name}.log"))
        records.append(record)
        measured = f"{record['images_per_sec']:,.1f} img/s" if not record.get("error") else f"FAILED: {record['error']}"
        print(f"[{index}/{len(runs)}] round {run.round}/{rounds} {run.launcher} x{run.replicas}: {measured}",
              flush=True)
    input_section = run_input_benchmark(recipe, input_command, os.path.join(out, "input-benchmark.json"), out, root)
    machine = {**machine_info(),
               "load_average": {"before": load_before, "after": [round(value, 2) for value in os.getloadavg()]}}
    report = bench_report.build_report(recipe, records, command=command, date=date, machine=machine, gpus=gpus,
                                       rounds=rounds, train_args=train_args, input_section=input_section)
    report["git_revision"] = git_revision
    paths = bench_report.write_outputs(report, out)
    failed = [record for record in records if record.get("error")]
    if not failed and not keep_runs:
        shutil.rmtree(runs_dir, ignore_errors=True)
    return report, paths, failed
