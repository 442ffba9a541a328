"""ci/runner-preflight.sh: what a self-hosted gpu runner needs (the NVIDIA container runtime, a recent enough
runner, free disk, python3 with venv), each missing requirement named in a line of its own."""
import os
import pathlib
import subprocess
import tempfile

from helpers import REPO


def output(process) -> str:
    return f"exit {process.returncode}\n{process.stdout}\n{process.stderr}"


def preflight(env=None, docker_runtimes=None) -> subprocess.CompletedProcess:
    """ci/runner-preflight.sh on a machine that is no runner (no RUNNER_* variables). With
    `docker_runtimes` (the JSON `docker info` prints for .Runtimes), a stand-in `docker` leads PATH,
    so the result does not depend on what this machine's Docker has."""
    clean = {k: v for k, v in os.environ.items() if k not in ("RUNNER_VERSION", "RUNNER_WORKSPACE")}
    with tempfile.TemporaryDirectory() as folder:
        if docker_runtimes is not None:
            stand_in = pathlib.Path(folder) / "docker"
            stand_in.write_text("#!/bin/sh\n"
                                f"case \"$*\" in *Runtimes*) echo '{docker_runtimes}' ;; *) echo {folder} ;; esac\n")
            stand_in.chmod(0o755)
            clean["PATH"] = f"{folder}{os.pathsep}{clean['PATH']}"
        return subprocess.run(["bash", str(REPO / "ci" / "runner-preflight.sh")], capture_output=True, text=True,
                              timeout=60, env={**clean, **(env or {})})


RUNC_ONLY = '{"io.containerd.runc.v2":{"path":"runc"},"runc":{"path":"runc"}}'
WITH_NVIDIA = '{"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}'


def test_the_preflight_fails_without_the_nvidia_runtime_naming_each_missing_requirement_in_a_line():
    """A Docker without the NVIDIA runtime, on a machine that is no runner: both are named, one line each."""
    process = preflight(docker_runtimes=RUNC_ONLY)
    assert process.returncode == 1, output(process)
    missing = process.stderr.splitlines()
    assert all(line.startswith(("missing: ", "preflight: ")) for line in missing), missing
    assert any(line.startswith("missing: NVIDIA container toolkit: ") and "runc" in line for line in missing), missing
    assert any(line.startswith("missing: runner version: unknown") for line in missing), missing
    assert missing[-1] == f"preflight: {len(missing) - 1} requirement(s) missing on this runner"
    assert all(line.startswith("ok: ") for line in process.stdout.splitlines()), process.stdout
    # python3 with venv is here (it made .venv): said to be there, not missing.
    assert any(line.startswith("ok: python3 ") for line in process.stdout.splitlines()), process.stdout


def test_the_preflight_finds_the_nvidia_runtime_where_docker_lists_it():
    process = preflight({"RUNNER_VERSION": "2.327.1", "PREFLIGHT_MIN_FREE_GB": "0"}, docker_runtimes=WITH_NVIDIA)
    assert "ok: NVIDIA container toolkit: docker lists the nvidia runtime" in process.stdout.splitlines(), \
        output(process)
    assert not any("NVIDIA" in line for line in process.stderr.splitlines()), output(process)


def test_the_preflight_reads_the_runner_version_and_the_free_disk_it_wants():
    new_enough = preflight({"RUNNER_VERSION": "2.327.1"})
    assert "ok: runner version 2.327.1" in new_enough.stdout, output(new_enough)
    too_old = preflight({"RUNNER_VERSION": "2.326.9", "PREFLIGHT_MIN_FREE_GB": "100000000"})
    lines = too_old.stderr.splitlines()
    assert "missing: runner version: 2.326.9 is older than 2.327.1, which node24 actions need; " \
           "update the runner" in lines
    assert any(line.startswith("missing: disk: ") and "want 100000000" in line for line in lines), lines


def test_the_preflight_asks_a_runners_own_files_for_its_version(tmp_path):
    listener = tmp_path / "runner" / "bin" / "Runner.Listener"
    listener.parent.mkdir(parents=True)
    listener.write_text("#!/bin/sh\necho 2.328.0\n")
    listener.chmod(0o755)
    process = preflight({"RUNNER_WORKSPACE": str(tmp_path / "runner" / "_work" / "tf-recipes")})
    assert "ok: runner version 2.328.0" in process.stdout, output(process)

