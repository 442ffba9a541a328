"""The Kubernetes manifests `invoke k8s` renders, checked without a cluster.

Custom resources (MPIJob, TFJob) against their CRD's openAPIV3Schema, copied from upstream into
tests/k8s/crds/; built-in kinds (Job, Service) with kubernetes-validate. An API server prunes unknown
fields instead of rejecting them, so a misspelled field would pass a plain schema check: every object
schema with `properties` (and no x-kubernetes-preserve-unknown-fields) gets additionalProperties:
false first. Each kind also has negative tests: a misspelled field and a wrong type must fail.

Every pod is also held to the Pod Security profile it claims (tests/pod_security.py): "restricted" for
the Indexed Job's and the TFJob's pods on PersistentVolumeClaims, "baseline" for the MPIJob's, which
run as root for ssh.
"""
import copy
import functools

import jsonschema
import kubernetes_validate
import pytest
import yaml

from commands.k8s import KINDS, MPI_AUTHORIZED_KEYS, SSHD_CAPABILITIES, build_manifests
from commands.launch import LaunchError
from helpers import REPO, run_invoke
from pod_security import pod_templates, violations

CRDS = REPO / "tests" / "k8s" / "crds"
CRD_FILES = {("kubeflow.org/v2beta1", "MPIJob"): "kubeflow.org_mpijobs.yaml",
             ("kubeflow.org/v1", "TFJob"): "kubeflow.org_tfjobs.yaml"}
KUBERNETES_VERSION = "1.31"  # podFailurePolicy is GA from 1.31
RECIPES = ["mnist-cnn", "cassava-resnet", "cityscapes-unet"]


def strict(schema):
    """A copy of an OpenAPI schema in which unknown fields are errors."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if ("properties" in node and node.get("type", "object") == "object"
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node.setdefault("additionalProperties", False)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


@functools.cache
def crd_validator(api_version, kind):
    crd = yaml.safe_load((CRDS / CRD_FILES[(api_version, kind)]).read_text())
    version = api_version.split("/")[1]
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return jsonschema.Draft7Validator(strict(served["schema"]["openAPIV3Schema"]))


def errors(document) -> list[str]:
    """Every reason the document is invalid; empty when it is valid."""
    key = (document.get("apiVersion"), document.get("kind"))
    if key in CRD_FILES:
        return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in crd_validator(*key).iter_errors(document)]
    try:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'/'.join(map(str, error.path))}: {error.message}"]
    return []


def manifests(recipe, kind, **kwargs):
    return build_manifests(recipe, kind=kind, image=f"tf-recipes/{recipe}:ngc", data=f"{recipe}-data", **kwargs)


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_of_every_recipe_is_valid(recipe, kind):
    documents = manifests(recipe, kind)
    assert [d["kind"] for d in documents] == {"mpijob": ["MPIJob"], "tfjob": ["TFJob"], "job": ["Service", "Job"]}[kind]
    for document in documents:
        assert errors(document) == [], document["kind"]


@pytest.mark.parametrize("kind", KINDS)
def test_variants_are_valid_too(kind):
    # CPU workers, host paths, a namespace, and the other Horovod runner.
    extra = {"horovod_runner": "horovodrun"} if kind == "mpijob" else {}
    for document in build_manifests("mnist-cnn", kind=kind, image="img:1", workers=3, gpus_per_worker=0,
                                    data="/srv/mnist", results="/srv/results", namespace="ml", **extra):
        assert errors(document) == [], document["kind"]


def path_set(document, path, value):
    node = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def misspell(document, path):
    node = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1][:-2] + path[-1][-1] + path[-1][-2]] = node.pop(path[-1])  # swap the last two letters


POD = ["spec", "template", "spec"]
MPI_WORKER = ["spec", "mpiReplicaSpecs", "Worker"]
TF_WORKER = ["spec", "tfReplicaSpecs", "Worker"]
NEGATIVE = {  # kind: (document index, a field to misspell, a field to give a wrong type)
    "MPIJob": ("mpijob", 0, ["spec", "slotsPerWorker"], MPI_WORKER + ["replicas"]),
    "MPIJob pod": ("mpijob", 0, MPI_WORKER + POD[1:] + ["terminationGracePeriodSeconds"],
                   MPI_WORKER + POD[1:] + ["containers", 0, "command"]),
    "TFJob": ("tfjob", 0, ["spec", "runPolicy", "cleanPodPolicy"], TF_WORKER + ["replicas"]),
    "TFJob container": ("tfjob", 0, TF_WORKER + POD[1:] + ["containers", 0, "volumeMounts"],
                        TF_WORKER + POD[1:] + ["containers", 0, "ports", 0, "containerPort"]),
    "Service": ("job", 0, ["spec", "publishNotReadyAddresses"], ["spec", "ports", 0, "port"]),
    "Job": ("job", 1, ["spec", "completionMode"], ["spec", "completions"]),
    "Job pod": ("job", 1, POD + ["subdomain"], POD + ["terminationGracePeriodSeconds"]),
    "Job pod security": ("job", 1, POD + ["securityContext", "runAsNonRoot"], POD + ["securityContext", "runAsUser"]),
    "TFJob container security": ("tfjob", 0, TF_WORKER + POD[1:] + ["containers", 0, "securityContext",
                                                                    "allowPrivilegeEscalation"],
                                 TF_WORKER + POD[1:] + ["securityContext", "fsGroup"]),
    "MPIJob worker resources": ("mpijob", 0, MPI_WORKER + POD[1:] + ["containers", 0, "resources", "requests"],
                                MPI_WORKER + POD[1:] + ["containers", 0, "securityContext", "capabilities"]),
}


@pytest.mark.parametrize("name", list(NEGATIVE))
def test_a_misspelled_field_fails(name):
    kind, index, field, _ = NEGATIVE[name]
    document = manifests("mnist-cnn", kind)[index]
    assert errors(document) == []
    misspell(document, field)
    assert errors(document), f"{name}: misspelled {field[-1]} passed"


@pytest.mark.parametrize("name", list(NEGATIVE))
def test_a_wrong_type_fails(name):
    kind, index, _, field = NEGATIVE[name]
    document = manifests("mnist-cnn", kind)[index]
    path_set(document, field, "two" if not isinstance(field[-1], str) or field[-1] != "command" else "python x")
    assert errors(document), f"{name}: a string in {field[-1]} passed"


# -- what the manifests say -------------------------------------------------------------------------

def test_mpijob_runs_mpirun_over_every_slot_and_frees_gpus():
    (job,) = manifests("cityscapes-unet", "mpijob", workers=4, gpus_per_worker=8)
    spec = job["spec"]
    assert spec["slotsPerWorker"] == 8 and spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 4
    assert spec["runPolicy"]["cleanPodPolicy"] == "Running"
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"][:3] == ["mpirun", "-np", "32"] and "/etc/mpi/hostfile" in launcher["command"]
    assert launcher["command"][-7:-3] == ["--launcher", "horovod", "--resume", "--results-dir"]
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert "sshd -De" in worker["containers"][0]["command"][-1]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in worker["volumes"]
    assert worker["terminationGracePeriodSeconds"] >= 60


def test_tfjob_names_its_container_tensorflow_and_retries_only_stops():
    (job,) = manifests("mnist-cnn", "tfjob", workers=2)
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["restartPolicy"] == "ExitCode"  # 128-255 (143: stopped with a checkpoint) retried
    assert worker["template"]["spec"]["containers"][0]["name"] == "tensorflow"
    with pytest.raises(LaunchError, match="single worker no TF_CONFIG"):
        manifests("mnist-cnn", "tfjob", workers=1)


def test_indexed_job_reaches_its_peers_through_the_headless_service():
    service, job = manifests("mnist-cnn", "job", workers=3)
    name = job["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["metadata"]["name"] == job["spec"]["template"]["spec"]["subdomain"] == name
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["template"]["spec"]["restartPolicy"] == "Never" and spec["backoffLimit"] == 0
    ignored = spec["podFailurePolicy"]["rules"][0]
    assert ignored["action"] == "Ignore" and ignored["onExitCodes"]["values"] == [143]
    env = {e["name"]: e["value"] for e in spec["template"]["spec"]["containers"][0]["env"]}
    assert env["TF_RECIPES_WORKERS"] == "3" and env["TF_RECIPES_WORKER_HOST_PATTERN"] == f"{name}-{{index}}.{name}"


@pytest.mark.parametrize("kwargs,message", [
    (dict(kind="tfjob", launcher="horovod"), "--kind tfjob runs --launcher multiworker, not horovod"),
    (dict(kind="pytorchjob"), "unknown kind 'pytorchjob'"),
    (dict(kind="job", name="My_Job"), "--name 'My_Job' must be a DNS label"),
    (dict(kind="job", data="my data"), "--data 'my data' is neither"),
    (dict(kind="job", workers=0), "--workers 0"),
])
def test_impossible_manifests_name_the_value(kwargs, message):
    with pytest.raises(LaunchError, match=message.replace("(", r"\(")):
        build_manifests("mnist-cnn", image="img", **kwargs)


def test_invoke_k8s_prints_valid_yaml_and_rejects_bad_values(tmp_path):
    process = run_invoke("k8s", "cassava-resnet", "--kind", "job", "--workers", "2", "--gpus-per-worker", "4",
                         "--data", "cassava", "--", "--epochs", "3")
    assert process.returncode == 0, process.stderr
    documents = list(yaml.safe_load_all(process.stdout))
    assert [d["kind"] for d in documents] == ["Service", "Job"]
    assert all(errors(d) == [] for d in documents)
    command = documents[1]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:4] == ["python", "recipes/cassava-resnet/train.py", "--launcher", "multiworker"]
    assert "--epochs" in command
    out = tmp_path / "job.yaml"
    written = run_invoke("k8s", "mnist-cnn", "--out", str(out))
    assert written.returncode == 0 and yaml.safe_load(out.read_text())["kind"] == "MPIJob"
    bad = run_invoke("k8s", "mnist-cnn", "--workers", "two")
    assert bad.returncode == 2 and "--workers 'two'" in bad.stderr and "Traceback" not in bad.stderr
    assert bad.stdout == ""


def test_multiworker_runs_as_a_plain_indexed_job_unless_another_kind_is_asked_for():
    """TFJob's operator (Training Operator v1) is no longer maintained; the plain Indexed Job needs none."""
    from commands.k8s import kind_for

    assert kind_for("multiworker", None) == ("multiworker", "job")
    assert [d["kind"] for d in build_manifests("mnist-cnn", launcher="multiworker",
                                                                image="tf-recipes/mnist-cnn:ngc")] == ["Service", "Job"]


# -- what the pods may do -----------------------------------------------------------------------------

# (kind, pod role): the Pod Security profile the pod meets with PersistentVolumeClaim volumes.
CLAIMS = {("job", "pod"): "restricted", ("tfjob", "Worker"): "restricted",
          ("mpijob", "Launcher"): "baseline", ("mpijob", "Worker"): "baseline"}
# What keeps the MPIJob's pods from "restricted": root (ssh), and the workers' four capabilities for sshd.
ROOT = "containers[{}]: runAsNonRoot must be true, in the pod's or the container's securityContext (restricted)"
MPI_SHORT_OF_RESTRICTED = {
    "Launcher": [ROOT.format("launcher")],
    "Worker": [ROOT.format("worker"),
               "containers[worker].securityContext.capabilities.add: ['SETGID', 'SETUID', 'SYS_CHROOT'] are not "
               "allowed; at most NET_BIND_SERVICE (restricted)"],
}


def pods(documents) -> dict:
    """{(kind, role): pod template} of every pod the documents make."""
    kinds = {"MPIJob": "mpijob", "TFJob": "tfjob", "Job": "job"}
    return {(kinds[d["kind"]], role): template for d in documents for role, template in pod_templates(d).items()}


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_pod_meets_the_profile_it_claims(recipe, kind):
    found = pods(manifests(recipe, kind, results="tf-recipes-results"))
    assert set(found) == {key for key in CLAIMS if key[0] == kind}
    for (_, role), template in found.items():
        assert violations(template, CLAIMS[kind, role]) == [], role
        if CLAIMS[kind, role] == "baseline":
            assert violations(template, "restricted") == MPI_SHORT_OF_RESTRICTED[role]


def test_the_multiworker_pods_run_as_the_given_user():
    for kind in ("job", "tfjob"):
        (template,) = pods(manifests("mnist-cnn", kind)).values()
        context = template["spec"]["securityContext"]
        assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (1000, 1000, 1000)
        assert context["runAsNonRoot"] is True
        (template,) = pods(manifests("mnist-cnn", kind, run_as_user=4242)).values()
        assert template["spec"]["securityContext"]["runAsUser"] == 4242
        assert violations(template, "restricted") == []
    with pytest.raises(LaunchError, match="--run-as-user 0 must be a UID from 1"):
        manifests("mnist-cnn", "job", run_as_user=0)
    with pytest.raises(LaunchError, match="--run-as-user 1000 with --kind mpijob: its pods run as root"):
        manifests("mnist-cnn", "mpijob", run_as_user=1000)


def test_a_host_path_keeps_a_pod_out_of_every_profile():
    (template,) = pods(manifests("mnist-cnn", "job", results="/srv/results")).values()
    for profile in ("baseline", "restricted"):
        assert violations(template, profile) == ["volumes[results]: hostPath volumes are not allowed (/srv/results)"]


def test_mpijob_workers_run_sshd_with_strict_modes_and_four_capabilities():
    (job,) = manifests("mnist-cnn", "mpijob")
    command = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"][-1]
    assert "StrictModes" not in command  # sshd's default, yes: it checks the keys' owner and modes
    # The Secret's folder is world-writable, so sshd reads a root-only copy of authorized_keys.
    keys = f"{job['spec']['sshAuthMountPath']}/authorized_keys"
    assert command.startswith(f"install -m 600 {keys} {MPI_AUTHORIZED_KEYS} && ")
    assert command.endswith(f"exec /usr/sbin/sshd -De -o AuthorizedKeysFile={MPI_AUTHORIZED_KEYS}")
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["securityContext"] == {"allowPrivilegeEscalation": False,
                                         "capabilities": {"drop": ["ALL"], "add": SSHD_CAPABILITIES}}
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.mark.parametrize("kind", KINDS)
def test_every_container_requests_cpu_and_memory_with_equal_limits(kind):
    for (_, role), template in pods(manifests("cityscapes-unet", kind, gpus_per_worker=8)).items():
        (container,) = template["spec"]["containers"]
        resources = container["resources"]
        assert set(resources["requests"]) == {"cpu", "memory"}, role
        assert {k: v for k, v in resources["limits"].items() if k != "nvidia.com/gpu"} == resources["requests"]
        expected = {"cpu": "1", "memory": "2Gi"} if role == "Launcher" else {"cpu": "48", "memory": "256Gi"}
        assert resources["requests"] == expected, role  # defaults: 6 CPUs and 32Gi per GPU


def test_cpu_memory_and_shm_follow_the_gpus_and_the_flags():
    def worker(**kwargs):
        (template,) = pods(manifests("mnist-cnn", "job", **kwargs)).values()
        spec = template["spec"]
        shm = next(v["emptyDir"] for v in spec["volumes"] if v["name"] == "dshm")
        return spec["containers"][0]["resources"]["requests"], shm

    assert worker() == ({"cpu": "48", "memory": "256Gi"}, {"medium": "Memory", "sizeLimit": "8Gi"})
    assert worker(gpus_per_worker=0) == ({"cpu": "6", "memory": "32Gi"}, {"medium": "Memory", "sizeLimit": "1Gi"})
    assert worker(cpus_per_worker=16, memory_per_worker="100Gi", shm_size="512Mi") == \
        ({"cpu": "16", "memory": "100Gi"}, {"medium": "Memory", "sizeLimit": "512Mi"})


@pytest.mark.parametrize("kwargs,message", [
    (dict(memory_per_worker="100GB"), "--memory-per-worker '100GB' must be a whole number with Mi, Gi or Ti"),
    (dict(shm_size="1.5Gi"), "--shm-size '1.5Gi' must be a whole number"),
    (dict(memory_per_worker="8Gi", shm_size="8Gi"), "--shm-size 8Gi must be below --memory-per-worker 8Gi"),
    (dict(cpus_per_worker=0), "--cpus-per-worker 0 must be at least 1"),
])
def test_impossible_resources_name_the_value(kwargs, message):
    with pytest.raises(LaunchError, match=message):
        manifests("mnist-cnn", "job", **kwargs)


SYSTEM_PATHS = ["/", "/etc", "/etc/kubernetes", "/proc", "/sys", "/dev", "/var/run", "/run/containerd", "/root",
                "/boot", "/usr", "/usr/lib", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
                "/var/lib/kubelet/pods", "/var/lib/containerd", "/var/lib/docker", "//etc", "/srv/../etc/", "/srv/.."]


@pytest.mark.parametrize("path", SYSTEM_PATHS)
@pytest.mark.parametrize("volume", ["data", "results"])
def test_system_folders_are_refused_as_host_paths(volume, path):
    with pytest.raises(LaunchError) as error:
        build_manifests("mnist-cnn", kind="job", image="img", **{volume: path})
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"--{volume} {path!r} is ")
    assert "PersistentVolumeClaim" in message


def test_other_host_paths_are_normalised_and_the_data_stays_read_only():
    (template,) = pods(build_manifests("mnist-cnn", kind="job", image="img", data="/srv//mnist/",
                                       results="/library/results")).values()
    spec = template["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["data"]["hostPath"] == {"path": "/srv/mnist", "type": "Directory"}
    assert volumes["results"]["hostPath"] == {"path": "/library/results", "type": "DirectoryOrCreate"}
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["data"]["readOnly"] is True and "readOnly" not in mounts["results"]
    (template,) = pods(manifests("mnist-cnn", "job")).values()
    claim = next(v for v in template["spec"]["volumes"] if v["name"] == "data")["persistentVolumeClaim"]
    assert claim == {"claimName": "mnist-cnn-data", "readOnly": True}


def test_invoke_k8s_takes_the_pod_flags_and_refuses_a_system_folder_in_one_line():
    process = run_invoke("k8s", "mnist-cnn", "--kind", "tfjob", "--run-as-user", "4242", "--cpus-per-worker", "16",
                         "--memory-per-worker", "100Gi", "--shm-size", "4Gi")
    assert process.returncode == 0, process.stderr
    (document,) = yaml.safe_load_all(process.stdout)
    assert errors(document) == []
    spec = document["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    assert spec["securityContext"]["runAsUser"] == 4242
    assert spec["containers"][0]["resources"]["requests"] == {"cpu": "16", "memory": "100Gi"}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}} in spec["volumes"]
    refused = run_invoke("k8s", "mnist-cnn", "--results", "/")
    assert refused.returncode == 2 and refused.stdout == "" and "Traceback" not in refused.stderr
    assert refused.stderr.splitlines() == [
        "error: --results '/' is the node's root folder, which a pod must not mount: give a PersistentVolumeClaim "
        "name, or a folder of the job's own such as /srv/results"]


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_launch_files_meet_the_profile_their_header_names(recipe):
    for name in ("k8s-mpijob.yaml", "k8s-tfjob.yaml", "k8s-indexed-job.yaml"):
        text = (REPO / "recipes" / recipe / "launch" / name).read_text()
        (profile,) = {p for p in ("baseline", "restricted") if f'Pod Security profile "{p}"' in text}
        templates = [t for d in yaml.safe_load_all(text) for t in pod_templates(d).values()]
        assert templates and all(violations(t, profile) == [] for t in templates), name

