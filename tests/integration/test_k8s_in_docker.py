"""The Kubernetes manifests `invoke k8s` renders, run for real in Docker with the CPU recipe images.

No API server can run here, so what Kubernetes and the operators do is done by hand (tests/integration/k8s_docker.py):

- MPIJob: an ssh key pair (ECDSA P-521, as the MPI Operator makes) mounted at sshAuthMountPath of
  every pod, /etc/mpi/hostfile with one `<job>-worker-<i>.<job>.<ns>.svc slots=N` line per worker,
  the OMPI_MCA_* variables the operator adds to the launcher, worker containers running the rendered
  sshd command on one Docker network, and a launcher container running the rendered mpirun command.
  Horovod then trains over ssh across the worker containers.
- Indexed Job: one container per index with the env the Job gives it (JOB_COMPLETION_INDEX), the
  hostname `<job>-<i>` and the DNS name `<job>-<i>.<job>` the headless Service makes; they form one
  MultiWorkerMirroredStrategy job from the rendered command alone. A missing peer never resolves, and
  the worker must give up within its deadline, naming it.

Every container runs with its pod's securityContext and resources applied (k8s_docker.pod_run_args):
the Indexed Job's pods as UID 1000 with every capability dropped and no privilege escalation, the
MPIJob's workers with only the capabilities sshd needs, each within its CPU and memory limits and
its /dev/shm size. The manifests are rendered for this 2-core machine (1 CPU, 6 GiB per worker).
"""
import json
import os
import time
import uuid

import numpy as np
import pytest

from commands.k8s import build_manifests
from helpers import read_results
from k8s_docker import docker, logs, pod_run_args, wait_for_exit

# In the full tier only: Kubernetes in Docker is the night's; every push validates the manifests
# (tests/unit/test_k8s_manifests.py).
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.full]
RUN_TIMEOUT = 600
MNIST_ARGS = ["--synthetic", "--max-steps", "8", "--log-every", "4"]
# What a worker pod asks for here; the rest of the manifest is as `invoke k8s` renders it.
SMALL_PODS = {"gpus_per_worker": 0, "cpus_per_worker": 1, "memory_per_worker": "6Gi", "shm_size": "1Gi"}


@pytest.fixture
def cluster():
    """A Docker network standing in for the cluster network; every container on it is removed after."""
    network = f"tfr-k8s-{uuid.uuid4().hex[:8]}"
    assert docker("network", "create", network).returncode == 0
    containers = []
    yield network, containers
    for name in containers:
        docker("rm", "-f", name)
    docker("network", "rm", network)


def start(containers, argv):
    containers.append(argv[argv.index("--name") + 1])
    process = docker(*argv)
    assert process.returncode == 0, process.stderr


def run_mpijob(cluster, tmp_path, image, recipe, train_args, data=None):
    network, containers = cluster
    name = f"{recipe}-{uuid.uuid4().hex[:6]}"
    results = tmp_path / "results"
    results.mkdir()
    (job,) = build_manifests(recipe, kind="mpijob", workers=2, image=image, data=data, results=str(results),
                             name=name, train_args=train_args, **SMALL_PODS)
    spec = job["spec"]
    namespace = job["metadata"].get("namespace", "default")

    # What the operator adds: an ssh key Secret, the hostfile ConfigMap and the launcher's variables.
    keys = tmp_path / "ssh"
    keys.mkdir()
    made = docker("run", "--rm", "--mount", f"type=bind,source={keys},target=/keys", "--entrypoint", "ssh-keygen",
                  image, "-q", "-t", "ecdsa", "-b", "521", "-N", "", "-f", "/keys/id_rsa")
    assert made.returncode == 0, made.stderr
    (keys / "authorized_keys").write_bytes((keys / "id_rsa.pub").read_bytes())
    for key in keys.iterdir():
        key.chmod(0o600)
    workers = [f"{name}-worker-{i}" for i in range(spec["mpiReplicaSpecs"]["Worker"]["replicas"])]
    config = tmp_path / "mpi"
    config.mkdir()
    (config / "hostfile").write_text("".join(f"{w}.{name}.{namespace}.svc slots={spec['slotsPerWorker']}\n"
                                             for w in workers))
    ssh_mount = (str(keys), spec["sshAuthMountPath"])

    worker_pod = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    for worker in workers:
        start(containers, pod_run_args(worker_pod, name=worker, hostname=worker, network=network,
                                       aliases=[f"{worker}.{name}.{namespace}.svc"], mounts=[ssh_mount]))
    # launcherCreationPolicy: WaitForWorkersReady. The workers are ready when sshd accepts connections.
    deadline = time.monotonic() + 120
    for worker in workers:
        while docker("exec", worker, "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/22").returncode != 0:
            assert time.monotonic() < deadline, logs(worker)
            time.sleep(0.5)

    launcher_pod = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    operator_env = {"K_MPI_JOB_ROLE": "launcher", "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                    "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
                    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
                    "OMPI_MCA_orte_set_default_slots": str(spec["slotsPerWorker"])}
    launcher = f"{name}-launcher"
    start(containers, pod_run_args(launcher_pod, name=launcher, hostname=launcher, network=network,
                                   aliases=[f"{launcher}.{name}.{namespace}.svc"], env=operator_env,
                                   mounts=[ssh_mount, (str(config), "/etc/mpi")]))
    status = wait_for_exit([launcher], RUN_TIMEOUT)[launcher]
    output = logs(launcher)
    assert status == 0, output[-6000:]
    assert_restricted(workers[0], worker_pod)
    assert_restricted(launcher, launcher_pod)
    return read_results(results / name), output


def assert_restricted(container_name: str, pod: dict) -> None:
    """The container ran with what its pod spec asks: user, capabilities, no new privileges, limits."""
    config = json.loads(docker("inspect", container_name).stdout)[0]
    host, spec = config["HostConfig"], pod["containers"][0]
    context = {**pod.get("securityContext", {}), **spec["securityContext"]}
    limits = spec["resources"]["limits"]
    assert host["CapDrop"] == context["capabilities"]["drop"] == ["ALL"]
    added = sorted(name.removeprefix("CAP_") for name in host["CapAdd"] or [])  # Docker writes CAP_NAME
    assert added == sorted(context["capabilities"].get("add", []))
    assert "no-new-privileges" in host["SecurityOpt"] and context["allowPrivilegeEscalation"] is False
    assert host["NanoCpus"] == int(float(limits["cpu"]) * 1e9) and host["Memory"] == host["MemorySwap"] > 0
    assert config["Config"]["User"] == (f"{context['runAsUser']}:{context['runAsGroup']}" if "runAsUser" in context
                                        else "")


def check_two_ranks_on_two_workers(results, output):
    assert (results["launcher"], results["workers"], results["replicas"], results["nodes"]) == \
        ("horovod", 2, 2, 2), results
    fingerprints = results["replica_fingerprints"]
    assert len(fingerprints) == 2 and fingerprints[0] == fingerprints[1], fingerprints
    print(f"{results['recipe']}: MPIJob in Docker, 2 worker containers, fingerprints {fingerprints}")


def test_mpijob_trains_mnist_with_horovod_over_ssh_on_its_mounted_data(cluster, tmp_path, mnist_image):
    # The Keras mnist.npz layout, generated (8 steps of 2 x 64 to an epoch): the data volume is mounted
    # read-only at /data in every pod.
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    np.savez(data / "mnist.npz", x_train=rng.integers(0, 256, (1024, 28, 28), dtype=np.uint8),
             y_train=rng.integers(0, 10, 1024).astype(np.uint8),
             x_test=rng.integers(0, 256, (64, 28, 28), dtype=np.uint8), y_test=rng.integers(0, 10, 64).astype(np.uint8))
    results, output = run_mpijob(cluster, tmp_path, mnist_image, "mnist-cnn", MNIST_ARGS[1:], data=str(data))
    assert (results["steps"], results["data"]) == (8, "mnist")
    assert results["final_metrics"]["test"]["examples"] == 64
    check_two_ranks_on_two_workers(results, output)


def start_indexed_job(cluster, tmp_path, image, indexes, resolve_timeout=600):
    network, containers = cluster
    name = f"mnist-{uuid.uuid4().hex[:6]}"
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    service, job = build_manifests("mnist-cnn", kind="job", workers=2, image=image, results=str(results),
                                   name=name, train_args=MNIST_ARGS, resolve_timeout=resolve_timeout, **SMALL_PODS)
    # The results host path is the site's, made writable by the pods' user (docs/clusters.md).
    os.chown(results, job["spec"]["template"]["spec"]["securityContext"]["runAsUser"], -1)
    pod = job["spec"]["template"]["spec"]
    subdomain = pod["subdomain"]
    assert subdomain == service["metadata"]["name"]
    names = []
    for index in indexes:
        hostname = f"{name}-{index}"  # what the Job controller names an Indexed Job's pod
        names.append(hostname)
        start(containers, pod_run_args(pod, name=hostname, hostname=hostname, network=network,
                                       aliases=[f"{hostname}.{subdomain}"], env={"JOB_COMPLETION_INDEX": str(index)}))
    return name, names, results, pod


def test_indexed_job_forms_one_multiworker_job_from_its_index_and_peer_names(cluster, tmp_path, mnist_image):
    name, names, results_dir, pod_spec = start_indexed_job(cluster, tmp_path, mnist_image, [0, 1])
    statuses = wait_for_exit(names, RUN_TIMEOUT)
    assert list(statuses.values()) == [0, 0], "\n".join(logs(n)[-3000:] for n in names)
    results = read_results(results_dir / name)
    assert (results["launcher"], results["workers"], results["replicas"], results["nodes"], results["steps"]) == \
        ("multiworker", 2, 2, 2, 8), results
    assert len(set(results["replica_fingerprints"])) == 1
    assert_restricted(names[0], pod_spec)
    assert os.stat(results_dir / name / "results.json").st_uid == pod_spec["securityContext"]["runAsUser"]
    print(f"Indexed Job in Docker: fingerprints {results['replica_fingerprints']}")


def test_indexed_job_with_a_missing_peer_fails_within_its_deadline_naming_it(cluster, tmp_path, mnist_image):
    started = time.monotonic()
    name, names, _, _ = start_indexed_job(cluster, tmp_path, mnist_image, [0], resolve_timeout=5)
    status = wait_for_exit(names, 120)[names[0]]
    elapsed = time.monotonic() - started
    output = logs(names[0])
    assert status == 4, output[-3000:]  # the cluster did not form
    assert f"peer(s) {name}-1.{name} did not resolve within 5 s" in output, output[-3000:]
    assert "Traceback" not in output
    print(f"missing peer: exit {status} after {elapsed:.0f} s (deadline 5 s plus start-up)")
    assert elapsed < 60
