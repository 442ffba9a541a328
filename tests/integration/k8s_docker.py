"""Run rendered Kubernetes pods as Docker containers: what the kubelet, a headless Service and the MPI
Operator would do with them, done by hand on one Docker engine.

A pod's container becomes `docker run` with the container's image, command, env and workingDir, its
hostPath volumes as bind mounts and its memory emptyDirs as tmpfs. The pod's DNS name becomes a network
alias on a user-defined Docker network, whose DNS server answers for it (as cluster DNS answers for
a headless Service) and never for a container that does not exist.
"""
from __future__ import annotations

import subprocess
import time


def docker(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def pod_run_args(pod_spec: dict, *, name: str, hostname: str, network: str, aliases=(), env=None,
                 mounts=(), detach=True) -> list[str]:
    """`docker run` arguments for the first container of `pod_spec`."""
    (container,) = pod_spec["containers"]
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    argv = ["run", "--name", name, "--hostname", hostname, "--network", network]
    argv += ["-d"] if detach else ["--rm"]
    for alias in aliases:
        argv += ["--network-alias", alias]
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "hostPath" in volume:
            spec = f"type=bind,source={volume['hostPath']['path']},target={mount['mountPath']}"
            argv += ["--mount", spec + (",readonly" if mount.get("readOnly") else "")]
        elif volume.get("emptyDir", {}).get("medium") == "Memory":
            argv += ["--mount", f"type=tmpfs,destination={mount['mountPath']}"]
        else:
            raise ValueError(f"volume {volume} cannot be emulated; render host paths")
    for source, target in mounts:  # what an operator injects (ssh keys, the hostfile)
        argv += ["--mount", f"type=bind,source={source},target={target},readonly"]
    for item in container.get("env", []) + [{"name": k, "value": v} for k, v in (env or {}).items()]:
        argv += ["-e", f"{item['name']}={item['value']}"]
    if "workingDir" in container:
        argv += ["-w", container["workingDir"]]
    command = container["command"]
    argv += ["--entrypoint", command[0], container["image"], *command[1:]]
    return argv


def wait_for_exit(names, timeout) -> dict[str, int]:
    """{container: exit status} once all have exited; raises TimeoutError naming the rest."""
    deadline = time.monotonic() + timeout
    statuses = {}
    while len(statuses) < len(names):
        for name in names:
            if name not in statuses:
                state = docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name).stdout.split()
                if state and state[0] == "exited":
                    statuses[name] = int(state[1])
        if time.monotonic() > deadline:
            raise TimeoutError(f"still running after {timeout} s: {sorted(set(names) - set(statuses))}")
        time.sleep(1)
    return statuses


def logs(name) -> str:
    process = docker("logs", name)
    return process.stdout + process.stderr
