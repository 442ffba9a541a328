"""The Kubernetes manifests `invoke k8s` renders, checked without a cluster.

Custom resources (MPIJob, TFJob) against their CRD's openAPIV3Schema, copied from upstream into
tests/k8s/crds/; built-in kinds (Job, Service) with kubernetes-validate. An API server prunes unknown
fields instead of rejecting them, so a misspelled field would pass a plain schema check: every object
schema with `properties` (and no x-kubernetes-preserve-unknown-fields) gets additionalProperties:
false first. Each kind also has negative tests: a misspelled field and a wrong type must fail.
"""
import copy
import functools
import pathlib

import jsonschema
import kubernetes_validate
import pytest
import yaml

from commands.k8s import KINDS, build_manifests, render_yaml
from commands.launch import LaunchError
from helpers import REPO, run_invoke

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


def test_the_crd_copies_are_the_upstream_files():
    import subprocess
    provenance = (CRDS / "PROVENANCE.md").read_text()
    for name in CRD_FILES.values():
        blob = subprocess.run(["git", "hash-object", str(CRDS / name)], capture_output=True, text=True).stdout.strip()
        assert blob and blob in provenance, name
    assert "Apache" in provenance and "Apache License 2.0" in (CRDS / "README.md").read_text()


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
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in worker["volumes"]
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


def test_the_indexed_job_is_the_recommended_multiworker_kind_and_tfjob_is_marked_unmaintained():
    """TFJob's operator (Training Operator v1) is no longer maintained; the plain Indexed Job needs none."""
    from commands.k8s import kind_for

    assert kind_for("multiworker", None) == ("multiworker", "job")
    assert [d["kind"] for d in build_manifests("mnist-cnn", launcher="multiworker",
                                                                image="tf-recipes/mnist-cnn:ngc")] == ["Service", "Job"]
    docs = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "clusters.md").read_text()
    assert "recommended for multiworker" in docs and "kubernetes-sigs/kueue#12620" in docs
    tfjob_row = next(line for line in docs.splitlines() if line.startswith("| `tfjob`"))
    assert "no longer maintained" in tfjob_row
