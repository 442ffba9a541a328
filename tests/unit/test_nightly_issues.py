"""ci/nightly/issues.py: the pure planner that keeps one GitHub issue per failing nightly entry (open,
comment, close), and its command line, dry and against a stand-in `gh`."""
import importlib.util
import json
import shlex
import subprocess
import sys

from helpers import REPO


def output(process) -> str:
    return f"exit {process.returncode}\n{process.stdout}\n{process.stderr}"


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
    report = json.loads((REPO / "docs" / "nightly" / "cpu" / "report.json").read_text())
    cell = next(e for e in report["entries"] if e["kind"] == "cell" and e["status"] == "pass")
    assert isinstance(cell["command"], list)
    actions = issues.plan(report, [{"number": 9, "title": issues.issue_title(cell["id"])}], "https://example/run")
    assert [(a.verb, a.number) for a in actions] == [("close", 9)]
    assert f"```\n{shlex.join(cell['command'])}\n```" in actions[0].body
