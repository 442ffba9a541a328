"""Run rendered Kubernetes pods as Docker containers: what the kubelet, a headless Service and the MPI
Operator would do with them, done by hand on one Docker engine.

A pod's container becomes `docker run` with the container's image, command, env and workingDir, its
hostPath volumes as bind mounts and its memory emptyDirs as tmpfs of their sizeLimit. The pod's and
the container's securityContext and the container's resources are applied as the kubelet would:
the user, group and fsGroup, no privilege escalation, the capabilities dropped and added, the
seccomp profile, a read-only root, the CPU and memory limits and requests. A field it cannot
apply is an error, never a silent drop: a pod that runs here ran with every restriction it renders.
The pod's DNS name becomes a network alias on a user-defined Docker network, whose DNS server
answers for it (as cluster DNS answers for a headless Service) and never for a container that does
not exist.
"""
from __future__ import annotations

import subprocess
import time


def docker(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


# Kubernetes quantities as Docker takes them.
BINARY_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity_bytes(quantity: str) -> int:
    for unit, factor in BINARY_UNITS.items():
        if quantity.endswith(unit):
            return int(quantity[:-len(unit)]) * factor
    raise ValueError(f"memory quantity {quantity!r} has no binary unit this emulation reads")


def cpu_count(quantity: str) -> float:
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def security_args(pod_context: dict, container_context: dict) -> list[str]:
    """`docker run` arguments for a pod's and its container's securityContext (the container's wins)."""
    known_pod = {"runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "fsGroupChangePolicy", "seccompProfile"}
    known_container = {"runAsNonRoot", "runAsUser", "runAsGroup", "allowPrivilegeEscalation", "capabilities",
                       "readOnlyRootFilesystem", "privileged", "seccompProfile"}
    for context, known in ((pod_context, known_pod), (container_context, known_container)):
        if set(context) - known:
            raise ValueError(f"securityContext fields {sorted(set(context) - known)} cannot be emulated")
    merged = {**pod_context, **container_context}
    argv = []
    if "runAsUser" in merged:
        argv += ["--user", f"{merged['runAsUser']}:{merged.get('runAsGroup', merged['runAsUser'])}"]
    if merged.get("runAsNonRoot") and merged.get("runAsUser", 0) == 0:
        raise ValueError("runAsNonRoot without a non-root runAsUser: the kubelet would refuse the image's root user")
    if "fsGroup" in pod_context:  # hostPath volumes keep their owner; the group is the process's
        argv += ["--group-add", str(pod_context["fsGroup"])]
    if merged.get("privileged"):
        raise ValueError("a privileged container is not emulated")
    if merged.get("allowPrivilegeEscalation") is False:
        argv += ["--security-opt", "no-new-privileges"]
    capabilities = merged.get("capabilities", {})
    argv += [arg for cap in capabilities.get("drop", []) for arg in ("--cap-drop", cap)]
    argv += [arg for cap in capabilities.get("add", []) for arg in ("--cap-add", cap)]
    if merged.get("readOnlyRootFilesystem"):
        argv.append("--read-only")
    profile = merged.get("seccompProfile", {}).get("type", "RuntimeDefault")
    if profile == "Unconfined":
        argv += ["--security-opt", "seccomp=unconfined"]
    elif profile != "RuntimeDefault":  # Docker's default profile is the runtime's default
        raise ValueError(f"seccompProfile {profile} cannot be emulated")
    return argv


def resource_args(resources: dict) -> list[str]:
    """`docker run` arguments for a container's CPU and memory limits and requests."""
    limits, requests = resources.get("limits", {}), resources.get("requests", {})
    unknown = (set(limits) | set(requests)) - {"cpu", "memory"}
    if unknown:
        raise ValueError(f"resources {sorted(unknown)} cannot be emulated (render the pod without GPUs)")
    argv = []
    if "cpu" in limits:
        argv += ["--cpus", str(cpu_count(str(limits["cpu"])))]
    if "cpu" in requests:  # the kubelet's cpu.shares for a request
        argv += ["--cpu-shares", str(max(2, int(cpu_count(str(requests["cpu"])) * 1024)))]
    if "memory" in limits:
        argv += ["--memory", str(quantity_bytes(limits["memory"])), "--memory-swap",
                 str(quantity_bytes(limits["memory"]))]
    if "memory" in requests:
        argv += ["--memory-reservation", str(quantity_bytes(requests["memory"]))]
    return argv


def pod_run_args(pod_spec: dict, *, name: str, hostname: str, network: str, aliases=(), env=None,
                 mounts=(), detach=True) -> list[str]:
    """`docker run` arguments for the first container of `pod_spec`."""
    (container,) = pod_spec["containers"]
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    argv = ["run", "--name", name, "--hostname", hostname, "--network", network]
    argv += ["-d"] if detach else ["--rm"]
    argv += security_args(pod_spec.get("securityContext", {}), container.get("securityContext", {}))
    argv += resource_args(container.get("resources", {}))
    for alias in aliases:
        argv += ["--network-alias", alias]
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "hostPath" in volume:
            spec = f"type=bind,source={volume['hostPath']['path']},target={mount['mountPath']}"
            argv += ["--mount", spec + (",readonly" if mount.get("readOnly") else "")]
        elif volume.get("emptyDir", {}).get("medium") == "Memory":
            size = volume["emptyDir"].get("sizeLimit")
            argv += ["--mount", f"type=tmpfs,destination={mount['mountPath']}"
                     + (f",tmpfs-size={quantity_bytes(size)}" if size else "")]
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
