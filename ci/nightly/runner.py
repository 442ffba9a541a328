"""`invoke nightly`: build what the tier needs, run every cell and README command for real, check
them, judge speed against the history, and write the report (ci/nightly/report.py).

Every cell is a real `invoke run` in its own process group, within its time limit. A failed
attempt whose output shows an infrastructure error (ci.nightly.matrix.INFRASTRUCTURE_ERRORS) is
run once more; a wrong result never is.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

from ci.nightly import matrix as nightly
from ci.nightly import report as nightly_report
from tf_recipes import user_paths

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INVOKE = (sys.executable, "-m", "invoke")
SLIM_BASE = "python:3.11-slim-bookworm"
# What makes two runs the same night: GitHub keeps a workflow run's id across its re-runs.
NIGHT_ID_VARIABLE = "GITHUB_RUN_ID"


def say(message: str) -> None:
    print(f"[nightly] {message}", flush=True)


# -- running a command within a time limit -------------------------------------------------------

# Every command the night runs starts a session of its own and carries this variable, with a value
# of its own, in its environment, which every process it starts inherits: horovodrun's workers, in
# sessions of their own, still carry it. Once the command has ended, whatever is still in its session
# or carries its value outlived it and is killed.
RUN_TAG = "TF_RECIPES_NIGHTLY_RUN"
LEFTOVER_GRACE = 10.0  # seconds a finished command's processes get to exit on their own
STOPPED_GRACE = 5.0  # seconds the processes of a command stopped at its limit get to die of that signal


@dataclasses.dataclass
class Finished:
    status: int | None  # None: stopped at its time limit
    output: str
    outlived: list[str]  # "PID NAME" of each process that outlived the command and was killed


def command_processes(tag: str, session: int) -> dict[int, str]:
    """{pid: name} of the processes a command started: those whose environment holds RUN_TAG=tag,
    and those still in its session (`apptainer exec --cleanenv` empties the environment of what runs
    in the container, which stays in the session)."""
    needle = f"{RUN_TAG}={tag}".encode()
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            if fields[0] == "Z":  # a zombie holds nothing and is gone once its parent waits for it
                continue
            with open(f"/proc/{pid}/environ", "rb") as handle:
                tagged = needle in handle.read().split(b"\0")
            if tagged or int(fields[3]) == session:
                with open(f"/proc/{pid}/comm") as name:
                    found[int(pid)] = name.read().strip()
        except (OSError, IndexError, ValueError):  # gone meanwhile, or a kernel thread
            continue
    return found


def kill_leftovers(tag: str, session: int, grace: float) -> list[str]:
    """Wait up to `grace` seconds for the command's processes to end, then SIGKILL the rest and wait
    for them to go; "PID NAME" of each one killed."""
    deadline = time.monotonic() + grace
    left = command_processes(tag, session)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = command_processes(tag, session)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 30
    while left and command_processes(tag, session) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [f"{pid} {name}" for pid, name in left.items()]


def run_logged(argv, log_path: str, time_limit: float, env: dict | None = None, shell: bool = False) -> Finished:
    """Run in its own process group with output to `log_path`, within `time_limit` seconds.

    On the time limit: SIGTERM to the group (a training job checkpoints and stops), SIGKILL 60 s later.
    Then, whether it finished or was stopped, every process it started is gone (RUN_TAG)."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    tag = uuid.uuid4().hex
    with open(log_path, "w") as log:
        log.write(f"$ {argv if shell else nightly.quote(argv)}\n")
        log.flush()
        process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, shell=shell,
                                   executable="/bin/bash" if shell else None, start_new_session=True,
                                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {}), RUN_TAG: tag})
        try:
            status = process.wait(timeout=time_limit)
        except subprocess.TimeoutExpired:
            status = None
            for signum, grace in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
                try:
                    os.killpg(process.pid, signum)
                    process.wait(timeout=grace)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
            log.write(f"\n[nightly] time limit of {time_limit:.0f} s reached; stopped\n")
        # start_new_session: the command's pid is its session's id.
        # A stopped command's group had the signal, and its processes may not all be gone the moment its
        # shell is: they get STOPPED_GRACE to die of it before they count as having outlived it.
        outlived = kill_leftovers(tag, process.pid, STOPPED_GRACE if status is None else LEFTOVER_GRACE)
        if outlived:
            log.write(f"\n[nightly] {len(outlived)} of its processes outlived it and were killed: "
                      f"{', '.join(outlived)}\n")
    with open(log_path, errors="replace") as log:
        return Finished(status, log.read(), outlived)


def outlived_problem(finished: Finished) -> list[str]:
    """The problem of a command that left processes running (none when it left none)."""
    return [f"{len(finished.outlived)} of its processes outlived it and were killed "
            f"({', '.join(finished.outlived)})"] if finished.outlived else []


def with_one_retry(attempt) -> tuple[Finished, int, str | None]:
    """`attempt()` -> Finished; once more only if it failed with an infrastructure error.
    Returns the last attempt, the number of attempts and the infrastructure error that caused a retry."""
    finished = attempt()
    if finished.status not in (0, None):
        cause = nightly.infrastructure_error(finished.output)
        if cause:
            say(f"  infrastructure error ({cause}); retrying once")
            return attempt(), 2, cause
    return finished, 1, None


# -- what this machine has ---------------------------------------------------------------------

def gpu_count() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(line.startswith("GPU ") for line in listing.stdout.splitlines()) if listing.returncode == 0 else 0


def image_here(images: dict, image: str) -> bool:
    return subprocess.run([images["docker"], "image", "inspect", image], capture_output=True).returncode == 0


def image_here_or_pulled(images: dict, image: str) -> bool:
    return image_here(images, image) or subprocess.run(
        [images["docker"], "pull", "-q", image], capture_output=True).returncode == 0


def memlock_allowed(images: dict) -> bool:
    """NVIDIA's `--ulimit memlock=-1`, unless the host refuses to raise it (some sandboxes)."""
    image = next((i for i in (images["cpu_base"], images["debian_base"], SLIM_BASE) if image_here(images, i)), None)
    if image is None:
        return True
    return subprocess.run([images["docker"], "run", "--rm", "--ulimit", "memlock=-1", image, "true"],
                          capture_output=True).returncode == 0


def apptainer_works(apptainer: str = "apptainer") -> bool:
    """`apptainer version` answers (on Debian 12, the command `bash ci/apptainer.sh` writes)."""
    return shutil.which(apptainer) is not None and subprocess.run(
        [apptainer, "version"], capture_output=True).returncode == 0


def machine_facts(cells, images: dict, docker_answers: bool) -> dict:
    """What the night can use here. `images`: the configured image names (`invoke run`'s settings:
    ngc_base, cpu_base, debian_base, current_gpu_base, current_cpu_base) and the docker client."""
    facts = {"docker": docker_answers, "apptainer": apptainer_works(images.get("apptainer", "apptainer")),
             "gpus": gpu_count()}
    # The ngc base is NVIDIA's image, pulled; the gpu base (images/current, target gpu) is built here.
    for base, usable in (("ngc", lambda: image_here_or_pulled(images, images["ngc_base"])), ("gpu", lambda: True)):
        wanted = any(c.base == base and c.gpus <= facts["gpus"] for c in cells)
        facts[base] = bool(wanted and facts["docker"] and usable())
    return facts


# -- images and data ---------------------------------------------------------------------------

def cpu_base_choice(images: dict) -> str:
    """debian when the debootstrap base is here; else slim when python:3.11-slim-bookworm can be
    pulled (a GitHub runner); else debian, made by `invoke images.bootstrap` first."""
    if image_here(images, images["debian_base"]):
        return "debian"
    return "slim" if image_here_or_pulled(images, SLIM_BASE) else "bootstrap"


# The nightly's SIFs are made and used on the runner itself: zstd builds them about 3x faster than
# Apptainer's default gzip (commands.containers.SIF_COMPRESSION_ARGS).
SIF_COMPRESSION = "zstd"


def build_steps(cells, facts: dict, images: dict) -> list[tuple[str, list[str]]]:
    """(name, invoke arguments) of every image the runnable cells need, in order: an Apptainer cell's
    step builds the recipe's Docker image (from the cache when a Docker cell's step built it) and the
    SIF made from it, which a later night reuses while the image is unchanged."""
    runnable = [c for c in cells if not nightly.not_runnable(c, facts)]
    steps = []
    cpu_stacks = list(dict.fromkeys(c.stack for c in runnable
                                    if c.base == "cpu" and c.runtime in ("docker", "apptainer")))
    gpu_stacks = list(dict.fromkeys(c.stack for c in runnable if c.base == "gpu" and c.runtime != "local"))
    if cpu_stacks or gpu_stacks:
        choice = cpu_base_choice(images)
        if choice == "bootstrap":
            steps.append(("Debian base (debootstrap)", ["images.bootstrap"]))
        on = "slim" if choice == "slim" else "debian"
        steps += [(f"CPU base of {stack} on {on}", ["images.cpu", "--stack", stack, "--base", on])
                  for stack in cpu_stacks]
        steps += [(f"GPU base of {stack} on {on}", ["images.gpu", "--stack", stack, "--base", on])
                  for stack in gpu_stacks]
    for cell in {(c.recipe, c.stack, c.base, c.runtime): c for c in runnable if c.runtime != "local"}.values():
        sif = ["--sif-compression", SIF_COMPRESSION] if cell.runtime == "apptainer" else []
        steps.append((build_step_name(cell), ["build", cell.recipe, "--stack", cell.stack, "--base", cell.base,
                                              "--runtime", cell.runtime, *sif]))
    return steps


def build_step_name(cell) -> str:
    """The build step a cell's image comes from: `RECIPE:IMAGE (RUNTIME)`."""
    return f"{cell.recipe}:{cell.image} ({cell.runtime})"


def build_images(cells, facts: dict, images: dict, out: str) -> dict[str, str]:
    """Build every image the runnable cells need; {build step: why it failed} for those that failed."""
    failed = {}
    for name, args in build_steps(cells, facts, images):
        say(f"building {name}")
        log = os.path.join(out, "build", re.sub(r"[^\w.-]+", "-", name).strip("-") + ".log")
        finished, _, _ = with_one_retry(lambda args=args, log=log: run_logged([*INVOKE, *args], log, 3600))
        if finished.status != 0 or finished.outlived:
            why = "; ".join(outlived_problem(finished)) or f"status {finished.status}"
            failed[name] = f"building {name} failed ({why}); see {os.path.relpath(log, out)}"
            say(failed[name])
    return failed


def copy_data(copy: dict, data: str) -> str | None:
    """A data entry's `copy`: its files from the folder that the environment variable `env` names, else from
    `default` (relative to the repository), into `data`; None, or the one line saying where to put them."""
    folder = os.environ.get(copy["env"]) or os.path.normpath(os.path.join(ROOT, copy["default"]))
    named = f"as ${copy['env']} says" if os.environ.get(copy["env"]) else f"${copy['env']} unset, so {copy['default']}"
    missing = [name for name in copy["files"] if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        return (f"{', '.join(missing)} not found in {folder} ({named}): put {copy['what']} there, or name the "
                f"folder that holds {'them' if len(missing) > 1 else 'it'} in ${copy['env']}")
    os.makedirs(data, exist_ok=True)
    for name in copy["files"]:
        shutil.copyfile(os.path.join(folder, name), os.path.join(data, name))
    return None


def prepare_data(matrix, key: str, work: str, log_dir: str) -> tuple[str | None, str | None]:
    """Prepare the data of a cell's data key (its recipe, or RECIPE/quality) once, with host Python: copy
    its `copy` files, then run its data steps; (data dir or None, error or None)."""
    spec = matrix.data_spec(key)
    if not spec["data"] and not spec["copy"]:
        return None, None
    data = os.path.join(work, "data")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    if spec["copy"]:
        problem = copy_data(spec["copy"], data)
        if problem:
            return None, f"preparing its data failed: {problem}"
    for index, step in enumerate(spec["data"]):
        argv = [sys.executable if word == "python" else word.format(data=data, work=work) for word in step]
        name = key.replace("/", "-")
        finished = run_logged(argv, os.path.join(log_dir, f"data-{name}-{index}.log"), 900)
        if finished.status != 0 or finished.outlived:
            why = "; ".join(outlived_problem(finished)) or f"status {finished.status}"
            return None, f"preparing its data failed: {nightly.quote(argv)} ({why})"
    return data, None


# -- one cell ----------------------------------------------------------------------------------

def load_weights(path: str) -> dict:
    import h5py

    arrays = {}
    with h5py.File(path) as handle:
        handle.visititems(
            lambda name, item: arrays.update({name: item[()]}) if isinstance(item, h5py.Dataset) else None)
    return arrays


def read_results(results_dir: str) -> dict | None:
    try:
        with open(os.path.join(results_dir, "results.json")) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def remove_containers(cell, results_dir: str) -> None:
    """Containers a stopped cell may have left (named tf-recipes-RECIPE-RUN-PID by invoke run)."""
    prefix = f"tf-recipes-{cell.recipe}-{os.path.basename(results_dir)}"
    names = subprocess.run(["docker", "ps", "-aq", "--filter", f"name={prefix}"], capture_output=True, text=True)
    for container in names.stdout.split():
        subprocess.run(["docker", "rm", "-f", container], capture_output=True)


def cell_entry(cell, command: list[str], **fields) -> dict:
    """A cell's line in the report, before its checks."""
    quality = {"metric": cell.quality[0], "floor": cell.quality[1], "value": None} if cell.quality else {}
    return {"id": cell.id, "kind": cell.kind, "recipe": cell.recipe, "launcher": cell.launcher, "runtime": cell.runtime,
            "base": cell.base, "stack": cell.stack, "image": cell.image, "tier": cell.tier, "replicas": cell.replicas,
            "command": command, "attempts": 0,
            "images_per_sec": None, "ratio": None, "change": None, "problems": [], **quality, **fields}


def run_cell(cell, out: str, data_dir: str | None, env: dict) -> dict:
    folder = os.path.join(out, "cells", cell.id.replace("/", "-"))
    results_dir = os.path.join(folder, "results")
    argv = nightly.cell_command(cell, results_dir, data_dir, INVOKE)

    def attempt():
        shutil.rmtree(results_dir, ignore_errors=True)
        started = time.time()
        finished = run_logged(argv, os.path.join(folder, "log.txt"), cell.time_limit, env)
        if finished.status is None and cell.runtime == "docker":
            remove_containers(cell, results_dir)
        attempt.seconds = time.time() - started
        return finished

    finished, attempts, cause = with_one_retry(attempt)
    status = finished.status
    entry = cell_entry(cell, nightly.cell_command(cell, results_dir, data_dir, ("invoke",)), attempts=attempts,
                       retried_for=cause, duration_s=round(attempt.seconds, 1),
                       log=os.path.relpath(os.path.join(folder, "log.txt"), out))
    if status is None:
        entry["problems"].append(f"did not finish within its time limit of {cell.time_limit:.0f} s")
    elif status != 0:
        said = [line.split("error: ", 1)[1] for line in finished.output.splitlines() if "error: " in line][-1:]
        entry["problems"].append(f"exit status {status}" + (f": {said[0]}" if said else ""))
    else:
        results = read_results(results_dir)
        entry["problems"] += nightly.check_results(cell, results)
        if cell.quality:  # the metric on held-out data against its floor; a results.json without it fails
            entry["value"], problems = nightly.check_quality(results, *cell.quality)
            entry["problems"] += problems
        if results:
            entry["images_per_sec"] = results.get("images_per_sec")
        entry["_results"], entry["_results_dir"] = results, results_dir
    entry["problems"] += outlived_problem(finished)
    # What the checks read stays (results.json, final.weights.h5, the log); the checkpoints and the
    # export (about 0.8 GB for a cassava-resnet cell) would fill a runner's disk over 48 cells.
    for folder_made in ("checkpoints", "export"):
        shutil.rmtree(os.path.join(results_dir, folder_made), ignore_errors=True)
    return entry


def add_parity(entries: dict) -> None:
    """Each passing cell against its recipe's reference cell (which must itself have passed), and each
    passing Apptainer cell against its Docker twin, when that one ran and passed: the same launcher in
    the image the SIF was made from must train the same model."""
    for entry in entries.values():
        cell = entry["_cell"]
        if cell.quality:  # held to its floor, not to another cell
            continue
        twin = entries.get(cell.docker_id)
        if cell.runtime != "docker" and not entry["problems"] and twin and not twin["problems"]:
            # The same image under another runtime: the same arithmetic, so bit for bit.
            mine, theirs = (e["_results"]["replica_fingerprints"] for e in (entry, twin))
            problems = [] if mine == theirs else [f"replica fingerprints {mine}, the Docker cell's {theirs}"]
            problems += compare_weights(entry, twin)
            entry["problems"] += [f"against its Docker cell {cell.docker_id}: {problem}" for problem in problems]
            entry["parity_with_docker"] = cell.docker_id
        if cell.is_reference or entry["problems"] or not cell.parity:
            continue
        reference = entries.get(cell.reference_id)
        if reference is None or reference["problems"]:
            entry["problems"].append(f"no parity check: the reference cell {cell.reference_id} did not pass")
            continue
        entry["problems"] += compare_weights(entry, reference)
        entry["parity_with"] = cell.reference_id


def compare_weights(entry: dict, other: dict) -> list[str]:
    """nightly.check_parity of two finished cells' results and final weights."""
    try:
        mine, theirs = (load_weights(os.path.join(e["_results_dir"], "final.weights.h5")) for e in (entry, other))
    except OSError as error:
        return [f"cannot read final weights for the parity check: {error}"]
    return nightly.check_parity(entry["_results"], mine, other["_results"], theirs)


# -- README commands ---------------------------------------------------------------------------

def run_readme(command, out: str, index: int) -> dict:
    entry = {"id": command.id, "kind": "readme", "file": command.file, "attempts": 0, "problems": [],
             "log": os.path.join("readme", f"{index}.log"), "duration_s": 0.0}
    try:
        with open(os.path.join(ROOT, command.file)) as handle:
            line = nightly.find_readme_line(list(nightly.shell_lines(handle.read())), command)
    except (OSError, nightly.MatrixError) as error:
        entry.update(command="", problems=[str(error)])
        return entry
    entry["command"] = line
    # As a user runs it after the README's setup: with the environment's `invoke` and `python` first on PATH.
    venv = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    started = time.time()
    finished, attempts, cause = with_one_retry(
        lambda: run_logged(line, os.path.join(out, entry["log"]), command.time_limit, shell=True, env=venv))
    entry.update(attempts=attempts, retried_for=cause, duration_s=round(time.time() - started, 1))
    if finished.status is None:
        entry["problems"].append(f"did not finish within {command.time_limit:.0f} s")
    elif finished.status != 0:
        entry["problems"].append(f"exit status {finished.status}")
    entry["problems"] += outlived_problem(finished)
    return entry


# -- the night ---------------------------------------------------------------------------------

def read_history(folder: str | None) -> list[dict]:
    nights = []
    listing = user_paths.list_files(folder, suffixes=(".json",), hidden=False) if folder else user_paths.Listing()
    for path, what in listing.others:  # never opened: a FIFO would block the night
        say(f"warning: {user_paths.not_a_file(path, what)}; left out of the history")
    for path in listing.files:
        try:
            with open(path) as handle:
                night = json.load(handle)
            if isinstance(night, dict) and isinstance(night.get("cells"), dict):
                nights.append(night)
                continue
        except (OSError, ValueError):
            pass
        say(f"warning: {path} is not a night record; left out of the history")
    return sorted(nights, key=lambda n: n.get("started", ""))


def print_plan(matrix, cells, readme, out: str) -> None:
    """--dry: every cell's command and the README commands, nothing run."""
    for cell in cells:
        data = "DATA" if any(matrix.data_spec(cell.data_key).values()) else None
        results = os.path.join(out, "cells", cell.id.replace("/", "-"), "results")
        floor = f" (quality: {cell.quality[0]} >= {cell.quality[1]:g})" if cell.quality else ""
        print(f"# {cell.id}{floor}\n+ {nightly.quote(nightly.cell_command(cell, results, data))}")
    for command in readme:
        print(f"# README command: the line of {command.file} that contains {command.match!r}")


def prepare_all_data(matrix, cells, facts: dict, out: str) -> tuple[dict, dict]:
    """The data of each runnable cell's data key (a recipe, or RECIPE/quality), once: ({key: data dir},
    {key: why it failed})."""
    data_dirs, data_errors = {}, {}
    for key in dict.fromkeys(c.data_key for c in cells if not nightly.not_runnable(c, facts)):
        data_dirs[key], data_errors[key] = prepare_data(matrix, key, os.path.join(out, "work", key.replace("/", "-")),
                                                        os.path.join(out, "build"))
    return data_dirs, data_errors


def run_cells(matrix, cells, facts: dict, out: str, build_failed: dict, data_dirs: dict, data_errors: dict) -> dict:
    """{cell id: report entry} for every cell: run and checked. A tier's cells are what it proves, so
    a cell that cannot run here (no Apptainer, no GPU) fails, saying why; it is never skipped green."""
    env = {} if facts["memlock"] else {"INVOKE_TF_RECIPES_MEMLOCK": ""}
    entries = {}
    for index, cell in enumerate(cells, 1):
        why = nightly.not_runnable(cell, facts)
        broken = next((m for n, m in build_failed.items() if n.startswith(("CPU base", "Debian base"))
                       or n == build_step_name(cell)), None) or data_errors.get(cell.data_key)
        if why:
            data = "DATA" if any(matrix.data_spec(cell.data_key).values()) else None
            command = nightly.cell_command(cell, "RESULTS", data, ("invoke",))
            entry = cell_entry(cell, command, problems=[f"not run, though its tier is meant to run it: {why}"])
        elif broken:
            entry = cell_entry(cell, [], problems=[broken])
        else:
            say(f"{index}/{len(cells)} {cell.id}")
            entry = run_cell(cell, out, data_dirs.get(cell.data_key), env)
            rate = f", {entry['images_per_sec']:,.1f} img/s" if entry["images_per_sec"] else ""
            metric = f", {entry['metric']} {entry['value']:.4f} (floor {entry['floor']:g})" \
                if entry.get("value") is not None else ""
            say(f"  {'; '.join(entry['problems']) or 'finished'} ({entry['duration_s']:.0f} s{rate}{metric})")
        entry["_cell"] = cell
        entry["status"] = "fail" if entry["problems"] else "pass"
        entries[cell.id] = entry
    return entries


def judge(entries: dict, cells, nights: list[dict], tier: str, rule: dict) -> list[dict]:
    """Speed against history, then each entry's final status; the regressions found."""
    rates = {e["id"]: e.get("images_per_sec") for e in entries.values() if e["kind"] == "cell" and not e["problems"]}
    tonight = nightly.ratios(rates, cells)
    found = nightly.regressions(tonight, nights, tier, rule)
    for regression in found:
        entries[regression["cell"]]["problems"].append(nightly.regression_problem(regression, rule))
    for entry in entries.values():
        entry["status"] = "fail" if entry["problems"] else "pass"
        entry["reason"] = "; ".join(entry["problems"])
        if entry["id"] in tonight:
            entry["ratio"] = round(tonight[entry["id"]], 4)
            change = nightly.change_against_history(entry["id"], tonight[entry["id"]], nights, tier, rule["window"])
            entry["change"] = None if change is None else round(change, 4)
        for key in [k for k in entry if k.startswith("_")]:
            del entry[key]
        entry.pop("problems", None)
    return found


def history_name(record: dict) -> str:
    """A record's file name: by its night id when it has one (a re-run of the night replaces its
    record), else by its start time."""
    if record.get("night"):
        night = re.sub(r"[^\w.-]+", "-", str(record["night"]))
        return f"night-{night}-{record['tier']}.json"
    return datetime.datetime.fromisoformat(record["started"]).strftime("%Y%m%dT%H%M%SZ") + f"-{record['tier']}.json"


def write_history(history: str, record: dict) -> None:
    """Tonight's record in the history folder: one file per night and tier."""
    os.makedirs(history, exist_ok=True)
    with open(os.path.join(history, history_name(record)), "w") as handle:
        json.dump(record, handle, indent=1)


def run_night(matrix, tier: str, only: str | None, out: str, history: str | None, dry: bool,
              command_line: str, images: dict, docker_answers: bool) -> int:
    """The night: 0 when it is green, 1 when it is red. `images`: the configured image names and
    docker client (the settings `invoke run` uses), `docker_answers`: whether an engine answers."""
    cells, readme = nightly.plan_night(matrix, tier, only)
    if dry:
        print_plan(matrix, cells, readme, out)
        return 0
    facts = machine_facts(cells, images, docker_answers)
    if nightly.nothing_runnable(cells, facts, tier):
        raise nightly.NothingToRun(nightly.nothing_runnable(cells, facts, tier))
    started = datetime.datetime.now(datetime.timezone.utc)
    shutil.rmtree(os.path.join(out, "cells"), ignore_errors=True)
    shutil.rmtree(os.path.join(out, "readme"), ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    say(f"tier {tier}: {len(cells)} cells, {len(readme)} README commands; docker {'yes' if facts['docker'] else 'no'}, "
        f"apptainer {'yes' if facts['apptainer'] else 'no'}, GPUs {facts['gpus']}"
)

    build_failed = build_images(cells, facts, images, out)
    # Asked of an image the night has built: on a fresh machine there is none before.
    facts["memlock"] = memlock_allowed(images) if facts["docker"] else True
    if not facts["memlock"]:
        say("this host refuses --ulimit memlock=-1, so cells run without it")
    data_dirs, data_errors = prepare_all_data(matrix, cells, facts, out)
    entries = run_cells(matrix, cells, facts, out, build_failed, data_dirs, data_errors)
    add_parity(entries)
    for index, command in enumerate(readme):
        say(f"README: {command.match}")
        entries[command.id] = run_readme(command, out, index)
    night_id = os.environ.get(NIGHT_ID_VARIABLE) or None
    # An earlier attempt of this same night is replaced, not judged against nor plotted twice.
    nights = [n for n in read_history(history)
              if not (night_id and n.get("night") == night_id and n.get("tier") == tier)]
    found = judge(entries, cells, nights, tier, matrix.regression)

    finished = datetime.datetime.now(datetime.timezone.utc)
    report = nightly_report.build_report(
        matrix, tier, entries, found, facts, started=started, finished=finished, command=command_line,
        matrix_path=os.path.relpath(matrix.path, ROOT) if matrix.path.startswith(ROOT) else matrix.path)
    record = {**nightly_report.history_record(report), **({"night": night_id} if night_id else {})}
    if history:
        write_history(history, record)
    nightly_report.write_all(report, [*nights, record], out)
    counts = {s: sum(e["status"] == s for e in entries.values()) for s in ("pass", "fail")}
    say(f"{'green' if report['passed'] else 'RED'}: {counts['pass']} passed, {counts['fail']} failed, "
        f"in {report['duration_s']:.0f} s; report in {out}")
    for entry in entries.values():
        if entry["status"] == "fail":
            say(f"FAILED {entry['id']}: {entry['reason']}")
    return 0 if report["passed"] else 1
