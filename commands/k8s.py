"""Kubernetes manifests for a recipe, as plain dicts (render them with `render_yaml`).

Three ways to run a job of W workers with G GPUs each; the commands inside come from the same
builders as `invoke run` and `invoke sbatch` (commands/launch.py):

    mpijob  MPIJob kubeflow.org/v2beta1 (MPI Operator): horovod. Workers run sshd; the launcher pod
            runs `mpirun` (or `horovodrun`) over W x G slots, reaching the workers through the
            hostfile the operator writes to /etc/mpi/hostfile.
    tfjob   TFJob kubeflow.org/v1 (Training Operator v1, no longer maintained: kubernetes-sigs/kueue#12620):
            multiworker. The operator gives every worker TF_CONFIG, but only in a container named
            `tensorflow`, and none for one worker.
    job     batch/v1 Indexed Job + headless Service: multiworker, no operator; the recommended kind
            for multiworker. Each pod builds TF_CONFIG from JOB_COMPLETION_INDEX and its peers' names
            (common/tf_recipes/cluster.py).

Each multiworker pod is one worker process with all its G GPUs (MultiWorkerMirroredStrategy
mirrors over them); each horovod rank is one process with one GPU.

Stopping (common/tf_recipes/stopping.py): a pod that gets SIGTERM (deletion, eviction, preemption) makes every
worker stop at the same step; the chief checkpoints, and all exit with 143. The grace period leaves
time for that. 143 means "retry": TFJob `restartPolicy: ExitCode` restarts on 128-255 and fails on
1-127; the Indexed Job's `podFailurePolicy` ignores 143 and disruptions (the pod is recreated) and
any other failure fails the whole Job (`backoffLimit: 0`); the MPIJob launcher retries a failed
mpirun `backoffLimit` times. Every train.py gets --resume and a results folder named after the job,
so a restarted worker continues from the checkpoint.

Pod Security (docs/security.md): the Indexed Job's and the TFJob's pods meet the "restricted" profile
when their volumes are PersistentVolumeClaims: they run as `run_as_user` (not root; the images set
HOME=/tmp, so any UID works), without privilege escalation, with every capability dropped and the
runtime's default seccomp profile. The MPIJob's pods meet "baseline": the launcher runs as root with
every capability dropped (OpenSSH's client refuses a UID without a passwd entry, the images add no
user, and the operator's key in /root/.ssh is root's), and the workers run sshd as root with only the
four capabilities it needs. A hostPath volume meets neither profile. Every container requests CPU and
memory with limits equal to the requests (Guaranteed QoS, evicted last), and /dev/shm has a size limit.
"""
from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass

import yaml

from commands.choices import PREFLIGHT_MODULE
from commands.containers import CONTAINER_DATA_DIR, CONTAINER_RESULTS_DIR, CONTAINER_WORKDIR
from commands.launch import (LaunchError, build_launch, build_train_command, check_choice, launch_environment,
                             shell_join)
from tf_recipes import contract
from tf_recipes.contract import EXIT_STOPPED, LAUNCHERS, launcher_trait
from tf_recipes.operations import PREFLIGHT_DEFAULT_DEADLINE

KINDS = ("mpijob", "tfjob", "job")
KIND_LAUNCHER = {"mpijob": "horovod", "tfjob": "multiworker", "job": "multiworker"}
# The launchers that have a kind here (tf_recipes.contract's k8s_kind): the multi-node ones.
K8S_LAUNCHERS = tuple(name for name in LAUNCHERS if launcher_trait(name, "k8s_kind"))
WORKER_PORT = 2222  # the TFJob operator's default port; the Indexed Job uses the same
GRACE_PERIOD = 120  # seconds from SIGTERM to SIGKILL: time to reach the stop step and checkpoint
TTL_AFTER_FINISHED = 86400  # keep finished jobs (and their logs) a day
RETRIES = 3  # MPIJob launcher and TFJob: restarts before the job counts as failed
SSH_OPTIONS = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "ConnectionAttempts=10")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
RUN_AS_USER = 1000  # UID, GID and fsGroup of the multiworker pods: any non-root number works (HOME=/tmp)
CPUS_PER_GPU = 6  # default CPU request of a worker pod, per GPU (at least one GPU's worth)
MEMORY_PER_GPU_GI = 32  # default memory request and limit of a worker pod, GiB per GPU
SHM_PER_GPU_GI = 1  # default /dev/shm size limit, GiB per GPU (NVIDIA's 1g per container, per GPU here)
LAUNCHER_CPUS, LAUNCHER_MEMORY = 1, "2Gi"  # the MPIJob launcher runs mpirun and ssh only
# The node's own folders: a pod that mounts one can read or change the node (and its other pods).
SYSTEM_FOLDERS = ("/etc", "/proc", "/sys", "/dev", "/var/run", "/run", "/root", "/boot", "/usr", "/bin",
                  "/sbin", "/var/lib/kubelet", "/var/lib/containerd", "/var/lib/docker")
_SYSTEM_LIB = re.compile(r"/lib(32|64|x32)?(/|$)")
_MEMORY = re.compile(r"([1-9][0-9]*)(Mi|Gi|Ti)")
_MEMORY_UNITS = {"Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
# sshd as root: bind port 22, switch to its unprivileged user and chroot for privilege separation.
SSHD_CAPABILITIES = ["NET_BIND_SERVICE", "SETGID", "SETUID", "SYS_CHROOT"]
MPI_AUTHORIZED_KEYS = "/etc/ssh/mpi_authorized_keys"


def kind_for(launcher: str | None, kind: str | None) -> tuple[str, str]:
    """(launcher, kind) with defaults filled in; a LaunchError for a pair that cannot work."""
    if kind is not None:
        check_choice("kind", kind, KINDS)
    if launcher is not None:
        check_choice("launcher", launcher, K8S_LAUNCHERS)
    kind = kind or (launcher_trait(launcher, "k8s_kind") if launcher else "mpijob")
    launcher = launcher or KIND_LAUNCHER[kind]
    if KIND_LAUNCHER[kind] != launcher:
        choices = " or ".join(k for k, v in KIND_LAUNCHER.items() if v == launcher)
        raise LaunchError(f"--kind {kind} runs --launcher {KIND_LAUNCHER[kind]}, not {launcher}; "
                          f"for {launcher} use --kind {choices}")
    return launcher, kind


def volume(name: str, source: str | None, *, readonly: bool) -> dict | None:
    """A PersistentVolumeClaim (a name) or a hostPath (an absolute path) volume; None for no source."""
    if not source:
        return None
    if source.startswith("/"):
        path = host_folder(name, source)
        return {"name": name, "hostPath": {"path": path, "type": "Directory" if readonly else "DirectoryOrCreate"}}
    if not _DNS_LABEL.fullmatch(source) or len(source) > 253:
        raise LaunchError(f"--{name} {source!r} is neither an absolute host path nor a PersistentVolumeClaim "
                          "name (lower-case letters, digits and '-')")
    claim = {"claimName": source}
    if readonly:
        claim["readOnly"] = True
    return {"name": name, "persistentVolumeClaim": claim}


def host_folder(name: str, source: str) -> str:
    """`source` as a normalised absolute path; a LaunchError for / and the node's system folders."""
    path = posixpath.normpath("/" + source.lstrip("/"))
    system = next((folder for folder in SYSTEM_FOLDERS if path == folder or path.startswith(folder + "/")), None)
    lib = _SYSTEM_LIB.match(path)
    if path == "/" or system or lib:
        folder = system or (lib and lib[0].rstrip("/"))
        where = "the node's root folder" if path == "/" else f"in the node's system folder {folder}"
        raise LaunchError(f"--{name} {source!r} is {where}, which a pod must not mount: give a PersistentVolumeClaim "
                          f"name, or a folder of the job's own such as /srv/{name}")
    return path


def memory_bytes(flag: str, quantity: str) -> int:
    """Bytes of a memory quantity with a binary unit ("32Gi"); a LaunchError naming the flag otherwise."""
    match = _MEMORY.fullmatch(str(quantity))
    if not match:
        raise LaunchError(f"{flag} {quantity!r} must be a whole number with Mi, Gi or Ti, such as 32Gi")
    return int(match[1]) * _MEMORY_UNITS[match[2]]


def _container(name: str, image: str, command: list[str], *, resources: dict, env: dict | None = None, ports=None,
               mounts=None, capabilities=()) -> dict:
    """A container that gains no privilege and drops every capability but `capabilities`."""
    container = {"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
                 "workingDir": CONTAINER_WORKDIR, "command": list(command)}
    if env:
        container["env"] = [{"name": key, "value": str(value)} for key, value in env.items()]
    for key, value in (("ports", ports), ("resources", resources), ("volumeMounts", mounts)):
        if value:
            container[key] = value
    dropped = {"drop": ["ALL"], **({"add": list(capabilities)} if capabilities else {})}
    container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": dropped}
    return container


def _resources(cpus: int, memory: str, gpus: int = 0) -> dict:
    """Requests with limits equal to them (Guaranteed QoS), and the GPUs."""
    request = {"cpu": str(cpus), "memory": memory}
    return {"requests": dict(request), "limits": {**request, **({"nvidia.com/gpu": gpus} if gpus else {})}}


def _pod_security(run_as_user: int | None) -> dict:
    """The pod's securityContext: the runtime's default seccomp profile, and a non-root user when given."""
    context = {"seccompProfile": {"type": "RuntimeDefault"}}
    if run_as_user is None:
        return context
    # fsGroup makes the volumes group-writable for that group; OnRootMismatch skips the recursive
    # change when the volume's top folder already has it (a large dataset is not walked every start).
    return {"runAsNonRoot": True, "runAsUser": run_as_user, "runAsGroup": run_as_user, "fsGroup": run_as_user,
            "fsGroupChangePolicy": "OnRootMismatch", **context}


def _metadata(name: str, namespace: str | None, recipe: str) -> dict:
    meta = {"name": name, "labels": {"app.kubernetes.io/name": "tf-recipes", "tf-recipes/recipe": recipe}}
    if namespace:
        meta["namespace"] = namespace
    return meta


@dataclass(frozen=True)
class _Job:
    """What every kind of manifest shares: names, image, train.py's arguments and the pods' volumes."""
    recipe: str
    name: str
    meta: dict
    image: str
    workers: int
    gpus_per_worker: int
    train_args: list
    volumes: list
    mounts: list
    grace_period: int
    resources: dict
    run_as_user: int | None
    preflight: bool = False

    def preflight_args(self) -> list[str]:
        """`python -m tf_recipes.operations.preflight`'s arguments: the job's results folder, the default deadline."""
        return ["--deadline", str(PREFLIGHT_DEFAULT_DEADLINE),
                "--results-dir", f"{CONTAINER_RESULTS_DIR}/{self.name}"]

    def command(self, command: list[str], preflight: list[str]) -> list[str]:
        """The container's command, after the preflight check when asked for: `bash -c 'CHECK && exec COMMAND'`."""
        if not self.preflight:
            return list(command)
        return ["/bin/bash", "-c", f"{shell_join(preflight)} && exec {shell_join(command)}"]

    def pod(self, container: dict, **fields) -> dict:
        return {"terminationGracePeriodSeconds": self.grace_period, **fields,
                "securityContext": _pod_security(self.run_as_user), "containers": [container],
                "volumes": self.volumes}


def _check_request(kind: str, *, workers: int, gpus_per_worker: int, name: str, namespace: str | None,
                   image: str, grace_period: int, results: str | None, run_as_user: int | None,
                   cpus_per_worker: int, memory_per_worker: str, shm_size: str) -> None:
    if workers < 1 or gpus_per_worker < 0:
        raise LaunchError(f"--workers {workers} / --gpus-per-worker {gpus_per_worker}: need workers >= 1, gpus >= 0")
    if kind == "tfjob" and workers < 2:
        raise LaunchError(f"--kind tfjob with --workers {workers}: the operator gives a single worker no "
                          "TF_CONFIG; use --workers 2 or more, or --kind job")
    if not _DNS_LABEL.fullmatch(name) or len(name) > 50:  # pods append "-worker-N" or "-N"
        raise LaunchError(f"--name {name!r} must be a DNS label: lower-case letters, digits and '-', "
                          "at most 50 characters")
    if namespace is not None and not _DNS_LABEL.fullmatch(namespace):
        raise LaunchError(f"--namespace {namespace!r} must be a DNS label (lower-case letters, digits, '-')")
    if not image or any(c.isspace() for c in image):
        raise LaunchError(f"--image {image!r} must be an image reference without spaces")
    if not 1 <= grace_period <= 86400:
        raise LaunchError(f"--grace-period {grace_period} must be 1..86400 seconds")
    if results is None:
        raise LaunchError("--results is needed: a shared PersistentVolumeClaim name or an absolute host path")
    if run_as_user is not None and kind == "mpijob":
        raise LaunchError(f"--run-as-user {run_as_user} with --kind mpijob: its pods run as root (sshd and the "
                          "ssh client need it); the user applies to --kind job and tfjob")
    if run_as_user is not None and not 1 <= run_as_user <= 2**31 - 1:
        raise LaunchError(f"--run-as-user {run_as_user} must be a UID from 1 to 2147483647 (0 is root)")
    if cpus_per_worker < 1:
        raise LaunchError(f"--cpus-per-worker {cpus_per_worker} must be at least 1")
    memory, shm = memory_bytes("--memory-per-worker", memory_per_worker), memory_bytes("--shm-size", shm_size)
    if shm >= memory:
        raise LaunchError(f"--shm-size {shm_size} must be below --memory-per-worker {memory_per_worker}: /dev/shm "
                          "is memory and counts against the pod's limit")


def _volumes(data: str | None, results: str, shm_size: str) -> tuple[list, list]:
    """(volumes, mounts): data read-only at /data, results at /results, and /dev/shm in memory."""
    volumes = [v for v in (volume("data", data, readonly=True), volume("results", results, readonly=False)) if v]
    # /dev/shm for NCCL and MPI. Its pages count against the container's memory limit; past
    # sizeLimit the kubelet evicts the pod, naming the volume.
    volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}})
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"},
              {"name": "results", "mountPath": CONTAINER_RESULTS_DIR}]
    if data:
        mounts.insert(0, {"name": "data", "mountPath": CONTAINER_DATA_DIR, "readOnly": True})
    return volumes, mounts


def _train_args(train_args, name: str, data: str | None) -> list[str]:
    args = list(train_args)
    if "--resume" not in args:
        args.append("--resume")  # a restarted pod continues; with no checkpoint yet, step 0
    args += ["--results-dir", f"{CONTAINER_RESULTS_DIR}/{name}"]
    if data:
        args += ["--data-dir", CONTAINER_DATA_DIR]
    return args


def _run_policy() -> dict:
    return {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": TTL_AFTER_FINISHED, "backoffLimit": RETRIES}


def _mpijob(job: _Job, horovod_runner: str, ssh_auth_mount_path: str) -> list[dict]:
    plan = build_launch(job.recipe, "horovod", gpus=job.gpus_per_worker, train_args=job.train_args,
                        horovod_runner=horovod_runner, hostfile="/etc/mpi/hostfile",
                        hostfile_nodes=job.workers, ssh_options=SSH_OPTIONS)
    check = build_launch(job.recipe, "horovod", gpus=job.gpus_per_worker, train_args=job.preflight_args(),
                         horovod_runner=horovod_runner, hostfile="/etc/mpi/hostfile", hostfile_nodes=job.workers,
                         ssh_options=SSH_OPTIONS, module=PREFLIGHT_MODULE)
    launcher_container = _container("launcher", job.image, job.command(plan.argv, check.argv), env=plan.env,
                                    resources=_resources(LAUNCHER_CPUS, LAUNCHER_MEMORY))
    # The operator's key Secret is mounted in a world-writable folder, which sshd's StrictModes
    # refuses: the workers read authorized_keys from a root-only copy. Host keys may be missing from
    # an image.
    sshd = (f"install -m 600 {shlex.quote(ssh_auth_mount_path.rstrip('/') + '/authorized_keys')} "
            f"{MPI_AUTHORIZED_KEYS} && ssh-keygen -A && mkdir -p /run/sshd && "
            f"exec /usr/sbin/sshd -De -o AuthorizedKeysFile={MPI_AUTHORIZED_KEYS}")
    worker_container = _container("worker", job.image, ["/bin/bash", "-c", sshd], resources=job.resources,
                                  mounts=job.mounts, capabilities=SSHD_CAPABILITIES)
    return [{
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": job.meta,
        "spec": {
            "slotsPerWorker": max(job.gpus_per_worker, 1),
            "runPolicy": _run_policy(),
            "launcherCreationPolicy": "WaitForWorkersReady",
            "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": ssh_auth_mount_path,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "OnFailure",
                             "template": {"spec": {"securityContext": _pod_security(None),
                                                   "containers": [launcher_container]}}},
                "Worker": {"replicas": job.workers, "template": {"spec": job.pod(worker_container)}},
            },
        },
    }]


def _multiworker_command(job: _Job) -> list[str]:
    return job.command(build_train_command(job.recipe, "multiworker", job.train_args),
                       build_train_command(job.recipe, "multiworker", job.preflight_args(),
                                           module=PREFLIGHT_MODULE))


def _tfjob(job: _Job) -> list[dict]:
    command = _multiworker_command(job)
    container = _container("tensorflow", job.image, command, env=launch_environment(job.gpus_per_worker),
                           ports=[{"name": "tfjob-port", "containerPort": WORKER_PORT}],
                           resources=job.resources, mounts=job.mounts)
    return [{
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": job.meta,
        "spec": {
            "runPolicy": _run_policy(),
            "tfReplicaSpecs": {
                "Worker": {"replicas": job.workers, "restartPolicy": "ExitCode",
                           "template": {"spec": job.pod(container)}},
            },
        },
    }]


def _indexed_job(job: _Job, namespace: str | None, resolve_timeout: int) -> list[dict]:
    command = _multiworker_command(job)
    env = {**launch_environment(job.gpus_per_worker),
           contract.INDEXED_JOB_WORKERS: job.workers,
           contract.INDEXED_JOB_HOST_PATTERN: f"{job.name}-{{index}}.{job.name}",  # pod hostname . Service
           contract.INDEXED_JOB_PORT: WORKER_PORT,
           contract.INDEXED_JOB_RESOLVE_TIMEOUT: resolve_timeout}
    container = _container("worker", job.image, command, env=env,
                           ports=[{"name": "worker", "containerPort": WORKER_PORT}],
                           resources=job.resources, mounts=job.mounts)
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": _metadata(job.name, namespace, job.recipe),
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"job-name": job.name},
                 "ports": [{"name": "worker", "port": WORKER_PORT}]},
    }
    indexed = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": job.meta,
        "spec": {
            "completionMode": "Indexed", "completions": job.workers, "parallelism": job.workers,
            "backoffLimit": 0, "ttlSecondsAfterFinished": TTL_AFTER_FINISHED,
            "podFailurePolicy": {"rules": [
                {"action": "Ignore",
                 "onExitCodes": {"containerName": "worker", "operator": "In", "values": [EXIT_STOPPED]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            ]},
            "template": {
                "metadata": {"labels": dict(job.meta["labels"])},
                "spec": job.pod(container, subdomain=job.name, restartPolicy="Never"),
            },
        },
    }
    return [service, indexed]


def build_manifests(recipe: str, *, launcher: str | None = None, kind: str | None = None, workers: int = 2,
                    gpus_per_worker: int = 8, image: str, data: str | None = None,
                    results: str = "tf-recipes-results", namespace: str | None = None, name: str | None = None,
                    train_args=(), horovod_runner: str = "mpirun", grace_period: int = GRACE_PERIOD,
                    ssh_auth_mount_path: str = "/root/.ssh",
                    resolve_timeout: int = int(contract.INDEXED_JOB_DEFAULT_RESOLVE_TIMEOUT),
                    preflight: bool = False, run_as_user: int | None = None, cpus_per_worker: int | None = None,
                    memory_per_worker: str | None = None, shm_size: str | None = None) -> list[dict]:
    """The Kubernetes objects that run `recipe` on `workers` pods with `gpus_per_worker` GPUs each.

    `preflight`: every container that starts train.py first runs `python -m tf_recipes.operations.preflight` with
    the same launcher (the MPIJob's launcher pod a first mpirun, each multiworker pod a first
    process), as `bash -c 'CHECK && exec TRAIN'`; a broken cluster ends the pod with status 4.

    `data` and `results` are PersistentVolumeClaim names or absolute host paths; the data volume is
    mounted read-only at /data, the results volume at /results, and the job writes to
    /results/<name>. The results volume must be shared by all pods (ReadWriteMany) for --resume.
    A host path is refused for / and the node's system folders (SYSTEM_FOLDERS), and makes a pod
    meet no Pod Security profile; PersistentVolumeClaims keep the multiworker pods "restricted".

    `run_as_user` (default RUN_AS_USER) is the UID, GID and fsGroup of the job and tfjob pods; the
    MPIJob's run as root. Each worker pod requests `cpus_per_worker` CPUs and `memory_per_worker`
    (default CPUS_PER_GPU and MEMORY_PER_GPU_GI per GPU, at least one GPU's worth) with equal limits;
    `shm_size` bounds /dev/shm (default SHM_PER_GPU_GI per GPU) and must be below the memory.
    """
    launcher, kind = kind_for(launcher, kind)
    name = name or f"{recipe}-{launcher}"
    per_gpu = max(gpus_per_worker, 1)
    cpus_per_worker = CPUS_PER_GPU * per_gpu if cpus_per_worker is None else cpus_per_worker
    memory_per_worker = memory_per_worker or f"{MEMORY_PER_GPU_GI * per_gpu}Gi"
    shm_size = shm_size or f"{SHM_PER_GPU_GI * per_gpu}Gi"
    _check_request(kind, workers=workers, gpus_per_worker=gpus_per_worker, name=name, namespace=namespace,
                   image=image, grace_period=grace_period, results=results, run_as_user=run_as_user,
                   cpus_per_worker=cpus_per_worker, memory_per_worker=memory_per_worker, shm_size=shm_size)
    if kind != "mpijob" and run_as_user is None:
        run_as_user = RUN_AS_USER
    volumes, mounts = _volumes(data, results, shm_size)
    job = _Job(recipe, name, _metadata(name, namespace, recipe), image, workers, gpus_per_worker,
               _train_args(train_args, name, data), volumes, mounts, grace_period,
               _resources(cpus_per_worker, memory_per_worker, gpus_per_worker), run_as_user, preflight)
    if kind == "mpijob":
        return _mpijob(job, horovod_runner, ssh_auth_mount_path)
    if kind == "tfjob":
        return _tfjob(job)
    return _indexed_job(job, namespace, resolve_timeout)


def render_yaml(documents: list[dict], header: str = "") -> str:
    """YAML documents separated by ---, keys in the order the builders wrote them."""
    body = "---\n".join(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120)
                        for doc in documents)
    return header + body
