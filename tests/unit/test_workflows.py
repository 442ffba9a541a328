"""The GitHub Actions workflows, checked offline: GitHub's workflow schema (check-jsonschema), zizmor's
security audits, actionlint, and the house rules the tools do not know (every job has a time limit,
every remote action is pinned to a commit, the nightly jobs call `invoke nightly`, and every step
that needs GitHub is skipped under act). Each validator is shown to fail on a broken copy, so a pass
means something. Also the pure planner of ci/nightly/issues.py, which keeps one issue per failing
nightly entry.

The validators come from the `dev` extra (`bash ci/setup.sh`); tests/integration/test_nightly_workflow.py runs
the nightly workflow itself under act."""
import importlib.util
import json
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from helpers import REPO

WORKFLOWS = REPO / ".github" / "workflows"
ACTIONLINT_CONFIG = REPO / ".github" / "actionlint.yaml"
BIN = pathlib.Path(sys.executable).parent
SHA_PIN = re.compile(r"^[^@\s]+@[0-9a-f]{40}$")


def workflow_files() -> list[pathlib.Path]:
    return sorted(WORKFLOWS.glob("*.yml"))


def load(path) -> dict:
    # PyYAML reads the key `on` as True (YAML 1.1); put it back under its name.
    data = yaml.safe_load(pathlib.Path(path).read_text())
    if True in data:
        data["on"] = data.pop(True)
    return data


def tool(name: str, *args, cwd=REPO) -> subprocess.CompletedProcess:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `bash ci/setup.sh` (the dev extra installs {name})")
    return subprocess.run([str(path), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def schema_check(*paths):
    return tool("check-jsonschema", "--builtin-schema", "vendor.github-workflows", *map(str, paths))


def actionlint(*paths):
    # -shellcheck= and -pyflakes= : the same result whether or not those happen to be installed.
    return tool("actionlint", "-config-file", str(ACTIONLINT_CONFIG), "-shellcheck=", "-pyflakes=", *map(str, paths))


def zizmor(folder):
    return tool("zizmor", "--offline", str(folder))


def output(process) -> str:
    return f"exit {process.returncode}\n{process.stdout}\n{process.stderr}"


def broken_copy(tmp_path, name: str, old: str, new: str) -> pathlib.Path:
    """A copy of workflow NAME with OLD replaced by NEW once, in tmp_path/.github/workflows/."""
    text = (WORKFLOWS / name).read_text()
    assert old in text, f"{old!r} is no longer in {name}: update this negative control"
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text.replace(old, new, 1))
    return path


def steps(workflow: dict):
    for job_id, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            yield job_id, step


def test_there_are_workflows():
    assert {p.name for p in workflow_files()} >= {"ci.yml", "nightly.yml"}


# -- the validators -------------------------------------------------------------------------------

def test_every_workflow_matches_githubs_workflow_schema():
    process = schema_check(*workflow_files())
    assert process.returncode == 0, output(process)


def test_a_job_without_runs_on_fails_the_schema(tmp_path):
    broken = broken_copy(tmp_path, "nightly.yml", "    runs-on: ubuntu-24.04\n", "")
    process = schema_check(broken)
    assert process.returncode != 0, output(process)
    assert "runs-on" in process.stdout + process.stderr


def test_zizmor_finds_nothing():
    process = zizmor(WORKFLOWS)
    assert process.returncode == 0, output(process)
    assert "No findings" in process.stdout + process.stderr


@pytest.mark.parametrize("name, old, new, audit", [
    # A tag can be moved to other code; a commit cannot.
    ("ci.yml", "actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1", "actions/checkout@v7", "unpinned-uses"),
    # A branch name is attacker-chosen text; expanded into a script, it runs.
    ("ci.yml", 'run: sudo env "PATH=$PATH" "GITHUB_STEP_SUMMARY=$GITHUB_STEP_SUMMARY" bash .ci/run',
     'run: echo "${{ github.head_ref }}"', "template-injection"),
    ("nightly.yml", "    permissions:\n      contents: read\n      issues: write\n",
     "    permissions: write-all\n", "excessive-permissions"),
], ids=["unpinned", "injection", "write-all"])
def test_zizmor_fails_a_risky_copy(tmp_path, name, old, new, audit):
    broken_copy(tmp_path, name, old, new)
    process = zizmor(tmp_path / ".github" / "workflows")
    assert process.returncode != 0, output(process)
    assert audit in process.stdout, output(process)


def test_actionlint_passes():
    process = actionlint(*workflow_files())
    assert process.returncode == 0, output(process)


def test_actionlint_finds_a_needs_typo(tmp_path):
    broken = broken_copy(tmp_path, "nightly.yml", "    runs-on: [self-hosted, linux, x64, gpu]\n",
                         "    needs: cpuu\n    runs-on: [self-hosted, linux, x64, gpu]\n")
    process = actionlint(broken)
    assert process.returncode != 0, output(process)
    assert '"cpuu"' in process.stdout, output(process)


def test_actionlint_finds_a_missing_runs_on(tmp_path):
    broken = broken_copy(tmp_path, "nightly.yml", "    runs-on: ubuntu-24.04\n", "")
    process = actionlint(broken)
    assert process.returncode != 0, output(process)
    assert "runs-on" in process.stdout, output(process)


def test_actionlint_knows_the_gpu_label_only_from_its_config(tmp_path):
    """Without .github/actionlint.yaml the self-hosted label `gpu` is unknown: the config is used."""
    process = tool("actionlint", "-config-file", "/dev/null", "-shellcheck=", "-pyflakes=",
                   str(WORKFLOWS / "nightly.yml"))
    assert process.returncode != 0 and '"gpu"' in process.stdout, output(process)


# -- house rules ----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_every_job_has_a_time_limit(path):
    for job_id, job in load(path)["jobs"].items():
        assert isinstance(job.get("timeout-minutes"), int), f"{path.name}: job {job_id} has no timeout-minutes"


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_every_remote_action_is_pinned_to_a_commit_with_its_version_named(path):
    for job_id, step in steps(load(path)):
        uses = step.get("uses")
        if uses and not uses.startswith(("./", "docker://")):
            assert SHA_PIN.match(uses), f"{path.name}: job {job_id} uses {uses}: pin it to a full commit SHA"
    for line in path.read_text().splitlines():
        if re.match(r"\s*(- )?uses: [^.]", line):
            assert re.search(r"@[0-9a-f]{40}\s+# v\d", line), \
                f"{path.name}: say which version is pinned: {line.strip()}"


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_permissions_are_read_only_except_issues_for_the_issue_step(path):
    workflow = load(path)
    assert workflow["permissions"] == {"contents": "read"}
    for job_id, job in workflow["jobs"].items():
        files_issues = any("ci.nightly.issues" in step.get("run", "") for step in job.get("steps", []))
        expected = {"contents": "read", "issues": "write"} if files_issues else {"contents": "read"}
        assert job.get("permissions", workflow["permissions"]) == expected, f"{path.name}: job {job_id}"


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_no_expression_is_expanded_into_a_script(path):
    """Inputs and contexts reach scripts through env:, never as ${{ }} text inside run:."""
    for job_id, step in steps(load(path)):
        assert "${{" not in step.get("run", ""), f"{path.name}: job {job_id}, step {step.get('name')}"


def test_ci_runs_on_main_and_pull_requests_and_cancels_only_a_pull_requests_older_run():
    workflow = load(WORKFLOWS / "ci.yml")
    assert workflow["on"] == {"push": {"branches": ["main"]}, "pull_request": None}
    assert workflow["concurrency"] == {"group": "ci-${{ github.ref }}",
                                       "cancel-in-progress": "${{ github.event_name == 'pull_request' }}"}


def test_each_nightly_job_has_a_concurrency_group_of_its_own():
    """A workflow-wide group would hold tomorrow's cpu night behind a gpu job queued for an offline runner."""
    workflow = load(WORKFLOWS / "nightly.yml")
    assert "concurrency" not in workflow
    groups = {job_id: job["concurrency"]["group"] for job_id, job in workflow["jobs"].items()}
    assert groups == {job_id: f"nightly-{job_id}-${{{{ github.ref }}}}"
                      for job_id in ("cpu", "current", "gpu-images", "gpu", "issues")}
    assert all(job["concurrency"]["cancel-in-progress"] is False for job in workflow["jobs"].values())


def test_issues_are_filed_by_a_job_of_their_own_the_only_one_that_may_write():
    jobs = load(WORKFLOWS / "nightly.yml")["jobs"]
    job = jobs["issues"]
    assert job["runs-on"] == "ubuntu-24.04" and job["needs"] == ["cpu", "gpu"]
    assert job["if"] == "${{ always() && github.event_name == 'schedule' && github.actor != 'nektos/act' }}"
    assert job["permissions"] == {"contents": "read", "issues": "write"}
    assert [j for j, other in jobs.items() if other.get("permissions", {}).get("issues")] == ["issues"]
    download = next(step for step in job["steps"] if "download-artifact" in step.get("uses", ""))
    assert download["with"]["pattern"] == "nightly-report-*"
    run = next(step for step in job["steps"] if "ci.nightly.issues" in step.get("run", ""))
    assert download["with"]["path"] + "/nightly-report-*/report.json" in run["run"]
    uploaded = {step["with"]["name"] for j in ("cpu", "gpu") for step in jobs[j]["steps"]
                if "upload-artifact" in step.get("uses", "")}
    assert uploaded == {"nightly-report-cpu", "nightly-report-gpu"}
    assert not any("ci.nightly.issues" in step.get("run", "") for j in ("cpu", "gpu") for step in jobs[j]["steps"])


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_every_upload_overwrites_the_artifact_of_an_earlier_attempt(path):
    uploads = [step for _, step in steps(load(path)) if "upload-artifact" in step.get("uses", "")]
    assert all(step["with"].get("overwrite") is True for step in uploads), uploads


def test_the_gpu_job_runs_only_mains_code_on_a_clean_checkout_with_a_fresh_venv():
    """The self-hosted runner outlives its jobs: nothing one run leaves there may run in a later one."""
    gpu = load(WORKFLOWS / "nightly.yml")["jobs"]["gpu"]
    # A night, or a dispatch from main: a branch's dispatch skips the job.
    assert gpu["if"] == "${{ vars.NIGHTLY_GPU == 'true' && github.ref == 'refs/heads/main' }}"
    steps = gpu["steps"]
    # Nothing runs before the checkout, and the checkout deletes what is not tracked (.venv included).
    assert "actions/checkout" in steps[0]["uses"] and steps[0]["with"]["clean"] is True
    assert steps[1]["run"] == "bash ci/runner-preflight.sh" and "if" not in steps[1]
    setup = next(step for step in steps if step.get("run", "").startswith("bash ci/setup.sh"))
    assert setup["env"] == {"PIP_CACHE_DIR": "${{ runner.temp }}/pip-cache"}  # emptied around every job
    # Its folders are the workspace the checkout cleaned, never one kept elsewhere (vars.NIGHTLY_*, for act).
    assert "defaults" not in gpu and gpu["env"] == {"REPORT": "${{ github.workspace }}/nightly-report",
                                                    "HISTORY": "${{ github.workspace }}/nightly-history"}
    assert "clean: false" not in (WORKFLOWS / "nightly.yml").read_text()


@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.yml")) + sorted((REPO / "ci").glob("*.sh")),
                         ids=lambda p: p.name)
def test_debootstrap_is_installed_with_debians_archive_keys(path):
    """On Ubuntu (GitHub's runners) debootstrap cannot check bookworm's signatures without them."""
    for line in path.read_text().splitlines():
        if re.search(r"(apt-get install|missing\+=).*debootstrap", line):
            assert "debian-archive-keyring" in line or "debian-archive-keyring" in path.read_text(), line
    if "missing+=(debootstrap)" in path.read_text():
        assert "missing+=(debian-archive-keyring)" in path.read_text()


def test_both_nightly_jobs_run_invoke_nightly_with_their_tier():
    jobs = load(WORKFLOWS / "nightly.yml")["jobs"]
    assert set(jobs) == {"cpu", "current", "gpu-images", "gpu", "issues"}
    tiers = {}
    for job_id, job in jobs.items():
        if job_id in ("issues", "current", "gpu-images"):
            continue
        runs = [step["run"] for step in job["steps"] if "invoke nightly" in step.get("run", "")]
        assert len(runs) == 1, f"job {job_id} should call invoke nightly once"
        command = runs[0]
        for flag in ("--tier", "--out", "--history"):
            assert flag in command, f"job {job_id}: {command}"
        tiers[job_id] = re.search(r"--tier (\S+)", command).group(1)
        assert any(step.get("run", "").startswith("bash ci/setup.sh --horovod") for step in job["steps"])
        assert any("ci/docker-engine.sh" in step.get("run", "") for step in job["steps"])
    assert tiers == {"cpu": '"$TIER"', "gpu": "gpu"}
    assert jobs["cpu"]["env"]["TIER"] == "${{ inputs.tier || 'cpu' }}"
    assert jobs["cpu"]["runs-on"] == "ubuntu-24.04"
    assert jobs["gpu"]["runs-on"] == ["self-hosted", "linux", "x64", "gpu"]


def test_the_current_stack_is_tested_every_night_on_the_python_of_debian_13():
    job = load(WORKFLOWS / "nightly.yml")["jobs"]["current"]
    python = next(step for step in job["steps"] if "setup-python" in step.get("uses", ""))
    assert python["with"]["python-version"] == "3.13"
    assert [step["run"] for step in job["steps"] if "run" in step] == ["bash ci/test.sh --stack current"]


def test_nightly_runs_on_a_schedule_and_by_hand_with_a_tier():
    triggers = load(WORKFLOWS / "nightly.yml")["on"]
    assert triggers["schedule"][0]["cron"]
    tier = triggers["workflow_dispatch"]["inputs"]["tier"]
    assert tier["type"] == "choice" and tier["options"] == ["smoke", "cpu"] and tier["default"] == "cpu"


def test_every_step_that_needs_github_is_skipped_under_act():
    """act (tests/integration/test_nightly_workflow.py) sets env.ACT. Skipped under it: the remote actions, which
    would be cloned from GitHub (checkout, setup-python, cache restore and save, upload-artifact), and
    the issue step, which calls GitHub's API. Every other step runs under act."""
    for job_id, step in steps(load(WORKFLOWS / "nightly.yml")):
        needs_github = "uses" in step or "ci.nightly.issues" in step.get("run", "")
        skipped_under_act = "!env.ACT" in str(step.get("if", ""))
        assert needs_github == skipped_under_act, f"job {job_id}, step {step.get('name')}: if {step.get('if')}"
        if needs_github:
            assert "skipped under act" in step["name"]


def test_reports_are_published_even_when_the_night_is_red():
    for job_id, step in steps(load(WORKFLOWS / "nightly.yml")):
        run, uses = step.get("run", ""), step.get("uses", "")
        # The issue step runs in a job of its own, which runs `always()` after both nights.
        if "GITHUB_STEP_SUMMARY" in run or "upload-artifact" in uses or "cache/save" in uses:
            assert "always()" in step["if"], f"job {job_id}, step {step['name']}"
        if "ci.nightly.issues" in run:
            assert step["env"]["GH_TOKEN"] == "${{ github.token }}"


def test_history_is_restored_by_prefix_and_saved_under_a_key_of_its_own():
    for job_id, job in load(WORKFLOWS / "nightly.yml")["jobs"].items():
        if job_id in ("issues", "current", "gpu-images"):  # no history: these jobs run tests, not cells
            continue
        by_action = {step["uses"].split("@")[0]: step["with"] for step in job["steps"] if "uses" in step}
        restore, save = by_action["actions/cache/restore"], by_action["actions/cache/save"]
        assert restore["key"] == save["key"] and "github.run_id" in save["key"]
        assert save["key"].startswith(restore["restore-keys"])
        assert restore["path"] == save["path"] == "${{ env.HISTORY }}"


def test_ci_runs_the_readmes_test_command():
    runs = [step["run"] for _, step in steps(load(WORKFLOWS / "ci.yml")) if "run" in step]
    assert runs == ['sudo env "PATH=$PATH" "GITHUB_STEP_SUMMARY=$GITHUB_STEP_SUMMARY" bash .ci/run']
    assert "bash ci/test.sh" in (REPO / ".ci" / "run").read_text()
    assert "\nbash ci/test.sh\n" in (REPO / "README.md").read_text()
    assert set(load(WORKFLOWS / "ci.yml")["on"]) == {"push", "pull_request"}


# -- ci/nightly/issues.py -------------------------------------------------------------------------

def load_issues_module():
    spec = importlib.util.spec_from_file_location("nightly_issues", REPO / "ci" / "nightly" / "issues.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


issues = load_issues_module()
CELL = "mnist-cnn/horovodrun/docker/cpu"
README = "README.md: invoke run mnist-cnn --gpus 0 --runtime local -- --synthetic --epochs 1"


def night(**statuses) -> dict:
    """A report whose entries have the given statuses: night(**{CELL: "fail"})."""
    return {"tier": "cpu", "started": "2026-11-22T02:17:00+00:00", "passed": "fail" not in statuses.values(),
            "entries": [{"id": entry_id, "kind": "readme" if entry_id.startswith("README") else "cell",
                         "status": status, "reason": "exit status 1" if status == "fail" else "",
                         "command": "invoke run mnist-cnn ...", "attempts": 1}
                        for entry_id, status in statuses.items()]}


def test_a_new_failure_opens_one_issue():
    actions = issues.plan(night(**{CELL: "fail", README: "pass"}), [], run_url="https://example.org/run/1")
    assert [(a.verb, a.entry_id, a.number) for a in actions] == [("open", CELL, None)]
    assert actions[0].title == f"nightly: {CELL} fails"
    assert "exit status 1" in actions[0].body and "https://example.org/run/1" in actions[0].body
    argv = issues.gh_argv(actions[0])
    assert argv[:3] == ["gh", "issue", "create"] and argv[argv.index("--label") + 1] == "nightly"


def test_a_second_failing_night_comments_on_the_same_issue():
    first = issues.plan(night(**{CELL: "fail"}), [])
    opened = [{"number": 12, "title": first[0].title}]
    second = issues.plan(night(**{CELL: "fail"}), opened)
    assert [(a.verb, a.number) for a in second] == [("comment", 12)]
    assert issues.gh_argv(second[0])[:4] == ["gh", "issue", "comment", "12"]


def test_a_recovered_entry_closes_its_issue():
    actions = issues.plan(night(**{CELL: "pass"}), [{"number": 12, "title": f"nightly: {CELL} fails"}])
    assert [(a.verb, a.number) for a in actions] == [("close", 12)]
    assert issues.gh_argv(actions[0])[:4] == ["gh", "issue", "close", "12"]


def test_not_run_entries_neither_open_nor_close_issues():
    assert issues.plan(night(**{CELL: "not-run"}), []) == []
    assert issues.plan(night(**{CELL: "not-run"}), [{"number": 3, "title": f"nightly: {CELL} fails"}]) == []


def test_issues_of_entries_absent_tonight_and_foreign_issues_are_left_alone():
    gpu_cell = "mnist-cnn/horovodrun/docker/ngc"
    open_issues = [{"number": 4, "title": f"nightly: {gpu_cell} fails"}, {"number": 5, "title": "nightly is slow"}]
    assert issues.plan(night(**{CELL: "pass", README: "pass"}), open_issues) == []


def test_of_two_issues_for_one_entry_the_oldest_is_kept_up_to_date():
    title = f"nightly: {README} fails"
    actions = issues.plan(night(**{README: "fail"}), [{"number": 9, "title": title}, {"number": 7, "title": title}])
    assert [(a.verb, a.number) for a in actions] == [("comment", 7)]


def test_the_command_line_prints_the_gh_commands_when_dry(tmp_path):
    report, open_issues = tmp_path / "report.json", tmp_path / "open.json"
    report.write_text(json.dumps(night(**{CELL: "fail", README: "pass"})))
    open_issues.write_text(json.dumps([{"number": 2, "title": f"nightly: {README} fails"}]))
    process = subprocess.run([sys.executable, "-m", "ci.nightly.issues", str(report),
                              "--open-issues", str(open_issues), "--dry"], capture_output=True, text=True, timeout=60,
                             cwd=REPO)
    assert process.returncode == 0, output(process)
    lines = [line for line in process.stdout.splitlines() if line.startswith("gh ")]
    assert [line.split()[:3] for line in lines] == [["gh", "label", "create"], ["gh", "issue", "create"],
                                                    ["gh", "issue", "close"]]
    assert lines[2].startswith("gh issue close 2 ")


def test_the_command_line_lists_open_issues_and_runs_gh(tmp_path):
    """A stand-in `gh` on PATH answers `issue list` and records every other call."""
    (tmp_path / "open.json").write_text(json.dumps([{"number": 2, "title": f"nightly: {README} fails"}]))
    gh = tmp_path / "bin" / "gh"
    gh.parent.mkdir()
    gh.write_text(f"""#!/bin/sh
case "$1 $2" in
  "issue list") echo "$*" >> {tmp_path}/listed; cat {tmp_path}/open.json ;;
  *) echo "$1 $2 $3" >> {tmp_path}/calls ;;
esac
""")
    gh.chmod(0o755)
    report = tmp_path / "report.json"
    report.write_text(json.dumps(night(**{CELL: "fail", README: "pass"})))
    process = subprocess.run([sys.executable, "-m", "ci.nightly.issues", str(report)], cwd=REPO,
                             capture_output=True, text=True, timeout=60,
                             env={"PATH": f"{gh.parent}:/usr/bin:/bin"})
    assert process.returncode == 0, output(process)
    assert (tmp_path / "listed").read_text().split() == issues.LIST_ARGV[1:]
    assert (tmp_path / "calls").read_text().splitlines() == ["label create nightly", "issue create --title",
                                                              "issue close 2"]


def test_the_planner_reads_a_report_that_invoke_nightly_really_wrote():
    """docs/nightly/cpu/report.json, as the cpu night wrote it: a cell's command is a list of words.
    Its issue, open from an earlier night, is closed with a body that holds the command as one line."""
    import shlex

    report = json.loads((REPO / "docs" / "nightly" / "cpu" / "report.json").read_text())
    cell = next(e for e in report["entries"] if e["kind"] == "cell" and e["status"] == "pass")
    assert isinstance(cell["command"], list)
    actions = issues.plan(report, [{"number": 9, "title": issues.issue_title(cell["id"])}], "https://example/run")
    assert [(a.verb, a.number) for a in actions] == [("close", 9)]
    assert f"```\n{shlex.join(cell['command'])}\n```" in actions[0].body


# -- ci/runner-preflight.sh: what a self-hosted gpu runner needs -------------------------------------

def preflight(env=None, docker_runtimes=None) -> subprocess.CompletedProcess:
    """ci/runner-preflight.sh on a machine that is no runner (no RUNNER_* variables). With
    `docker_runtimes` (the JSON `docker info` prints for .Runtimes), a stand-in `docker` leads PATH,
    so the result does not depend on what this machine's Docker has."""
    import os
    import tempfile

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


# -- ci/setup.sh: the compiler Horovod is built with ------------------------------------------------

def compiler_choice(tmp_path, *tools) -> str:
    """ci/setup.sh --print-compiler with a PATH that holds only `dirname` and stand-ins for TOOLS."""
    import shutil

    folder = tmp_path / "-".join(tools or ("none",))
    folder.mkdir()
    (folder / "dirname").symlink_to(shutil.which("dirname"))
    for name in tools:
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
        (folder / name).chmod(0o755)
    process = subprocess.run(["/bin/bash", str(REPO / "ci" / "setup.sh"), "--print-compiler"], capture_output=True,
                             text=True, timeout=60, env={"PATH": str(folder)})
    assert process.returncode == 0, output(process)
    return process.stdout.strip()


def test_horovod_is_compiled_with_gcc_12_where_it_is_installed_else_with_the_default(tmp_path):
    assert compiler_choice(tmp_path, "gcc-12", "g++-12", "g++-13") == "gcc-12 g++-12"
    assert compiler_choice(tmp_path, "g++-13", "g++") == "default"
    assert compiler_choice(tmp_path, "g++-12") == "default"  # no C compiler of the same version
    assert compiler_choice(tmp_path) == "default"
