"""One GitHub issue per failing nightly entry: opened the first night the entry fails, commented on
every further night it fails, closed the first night it passes again.

The nightly workflow (.github/workflows/nightly.yml) runs this after scheduled nights only, with the
`gh` CLI of the GitHub runner and GH_TOKEN set to the job's token (`issues: write`):

    python3 -m ci.nightly.issues nightly-report/report.json --run-url URL
    python3 -m ci.nightly.issues nightly-report/report.json --open-issues open.json --dry

An issue belongs to an entry through its title, `nightly: <entry id> fails`, and carries the label
`nightly`. A not-run entry (no GPU here, no Apptainer) says nothing about the code, so it neither
opens nor closes an issue; neither does an entry missing from the report (another tier's cell, or a
night run with --only). Standard library only: it runs before, and without, the .venv.
"""
import argparse
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass

LABEL = "nightly"
TITLE_PREFIX = "nightly: "
TITLE_SUFFIX = " fails"


@dataclass(frozen=True)
class Action:
    """What to do to one issue: `open` (number None), `comment` or `close`."""
    verb: str
    entry_id: str
    title: str
    body: str
    number: int | None = None


def issue_title(entry_id: str) -> str:
    return f"{TITLE_PREFIX}{entry_id}{TITLE_SUFFIX}"


def entry_id_of(title: str) -> str | None:
    """The entry an issue title names, or None for a title this script did not write."""
    if title.startswith(TITLE_PREFIX) and title.endswith(TITLE_SUFFIX):
        return title[len(TITLE_PREFIX):-len(TITLE_SUFFIX)] or None
    return None


def describe(report: dict, entry: dict, run_url: str) -> str:
    lines = [f"The nightly `{report.get('tier', '?')}` tier that started {report.get('started', '?')} "
             f"{'failed' if entry['status'] == 'fail' else 'passed'} `{entry['id']}`."]
    if entry["status"] == "fail":
        lines += ["", "Reason:", "", *(f"> {line}" for line in (entry.get("reason") or "(none given)").splitlines())]
    command = entry.get("command")
    if command:  # report.json holds a cell's command as a list of words, a README command as its line
        text = command if isinstance(command, str) else shlex.join(map(str, command))
        lines += ["", "Command:", "", "```", text, "```"]
    if entry.get("attempts"):
        lines += ["", f"Attempts: {entry['attempts']}"]
    if run_url:
        lines += ["", f"Run, with the report as an artifact: {run_url}"]
    return "\n".join(lines) + "\n"


def plan(report: dict, open_issues: list[dict], run_url: str = "") -> list[Action]:
    """The issue actions one night's report calls for, given the open `nightly` issues
    (`[{"number": N, "title": T}, ...]` as `gh issue list --json number,title` prints them)."""
    issue_of = {}
    for issue in sorted(open_issues, key=lambda issue: issue["number"]):
        entry_id = entry_id_of(issue["title"])
        if entry_id is not None:
            issue_of.setdefault(entry_id, issue["number"])  # the oldest, if someone opened a second
    actions = []
    for entry in report["entries"]:
        number = issue_of.get(entry["id"])
        title = issue_title(entry["id"])
        if entry["status"] == "fail":
            verb = "open" if number is None else "comment"
            actions.append(Action(verb, entry["id"], title, describe(report, entry, run_url), number))
        elif entry["status"] == "pass" and number is not None:
            actions.append(Action("close", entry["id"], title, describe(report, entry, run_url), number))
    return actions


def gh_argv(action: Action) -> list[str]:
    if action.verb == "open":
        return ["gh", "issue", "create", "--title", action.title, "--label", LABEL, "--body", action.body]
    if action.verb == "comment":
        return ["gh", "issue", "comment", str(action.number), "--body", action.body]
    if action.verb == "close":
        return ["gh", "issue", "close", str(action.number), "--comment", action.body]
    raise ValueError(f"unknown issue action {action.verb!r}: expected open, comment or close")


# `gh issue create --label` fails when the label does not exist; --force makes this idempotent.
LABEL_ARGV = ["gh", "label", "create", LABEL, "--force", "--color", "B60205",
              "--description", "Opened and closed by the nightly workflow (ci/nightly/issues.py)"]
# gh lists 30 issues unless told otherwise; a night with more failures would open duplicates.
LIST_ARGV = ["gh", "issue", "list", "--label", LABEL, "--state", "open", "--json", "number,title", "--limit", "1000"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="the night's report.json (written by `invoke nightly --out DIR`)")
    parser.add_argument("--run-url", default="", help="link to the workflow run, quoted in every issue")
    parser.add_argument("--open-issues", metavar="FILE",
                        help="JSON list of the open issues (as gh prints it) instead of asking gh")
    parser.add_argument("--dry", action="store_true", help="print the gh commands that change issues, run none")
    args = parser.parse_args(argv)

    with open(args.report) as handle:
        report = json.load(handle)
    if args.open_issues:
        with open(args.open_issues) as handle:
            open_issues = json.load(handle)
    else:
        open_issues = json.loads(subprocess.run(LIST_ARGV, check=True, capture_output=True, text=True).stdout)

    actions = plan(report, open_issues, args.run_url)
    commands = ([LABEL_ARGV] if any(a.verb == "open" for a in actions) else []) + [gh_argv(a) for a in actions]
    failed = 0
    for command in commands:
        print(shlex.join(command), flush=True)
        # One issue that gh cannot update must not keep the others from being updated.
        if not args.dry and subprocess.run(command).returncode != 0:
            failed += 1
    if not actions:
        print(f"nothing to do: no entry failed, and none of the {len(open_issues)} open {LABEL!r} issues' entries "
              "passed", flush=True)
    if failed:
        print(f"{failed} of {len(commands)} gh commands failed (see above)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
