"""What a run of the test suite ran, from the JUnit XML files pytest wrote, held against what it collected.

    python3 ci/suite_report.py --tier per-push --collected build/ci/collected-*.txt --junit build/ci/*.xml
    python3 ci/suite_report.py --tier full ... --report build/ci/report --wall 3900 --setup 480 \\
        --reference 0.68 --cpu 7000 --junit build/ci/*.xml

ci/test.sh runs it after the tests. It prints one line, the tally (collected, ran, passed, failed, skipped), and
exits 1 when the tier is green on less than it holds: a test that was collected and never reported (a worker
that died, a session that stopped early) or a test that skipped. A skip in a tier hides what it did not prove,
so there is none: what cannot run on a machine fails there, saying why (TF_RECIPES_STRICT=1).

The collected counts are files tests/conftest.py writes at the end of collection, one number each (the tests
a pytest session selected), when pytest's --collected-file names the file.

With --report DIR it also writes the run's report: report.json (date, commit, tier, the tally, the times and
the machine's reference loop, the slowest modules) and summary.md, the same in a few lines. `invoke nightly
--suite` keeps the full tier's in docs/nightly/suite/. Standard library only, like ci/durations.py."""
import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

try:
    from ci import durations
except ImportError:  # run as a script: this file's folder leads sys.path
    import durations


def tally(paths) -> dict:
    """{"ran", "passed", "failed", "skipped"} over every test case of the JUnit XML files `paths`.
    A case with an <error> (its fixture failed) counts as failed, an xfail as skipped."""
    counts = dict.fromkeys(("ran", "passed", "failed", "skipped"), 0)
    for path in paths:
        for case in ElementTree.parse(path).iter("testcase"):
            counts["ran"] += 1
            outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), None)
            counts["passed" if outcome is None else "skipped" if outcome == "skipped" else "failed"] += 1
    return counts


def collected(paths) -> int:
    """The sum of the counts in the files `paths` (each one number)."""
    return sum(int(pathlib.Path(path).read_text().strip()) for path in paths)


def problems(counts: dict, expected: int) -> list[str]:
    """Why the run is not green on all it holds; nothing when it is."""
    found = []
    if counts["ran"] < expected:
        found.append(f"{expected - counts['ran']} of the {expected} tests collected never reported a result")
    if counts["skipped"]:
        found.append(f"{counts['skipped']} skipped (a tier skips nothing: see the -ra lines above for why)")
    if not expected:
        found.append("no test was collected")
    return found


def commit() -> dict:
    def git(*args):
        process = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
        return process.stdout.strip() if process.returncode == 0 else None
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def summary_markdown(report: dict) -> str:
    counts, times = report["tests"], report["seconds"]
    git = report["git"]
    return "\n".join([
        f"# The {report['tier']} tier of the test suite",
        "",
        f"- **{report['verdict']}**: `{report['command']}` on {report['date']}, commit {git['commit']}"
        + (" (with uncommitted changes)" if git["dirty"] else ""),
        f"- {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped, of "
        f"{report['collected']} collected",
        f"- {times['wall']:.0f} s wall (set-up {times['setup']:.0f} s, tests {times['wall'] - times['setup']:.0f} s), "
        f"{times['cpu']:.0f} s of CPU, on {report['machine']['cores']} cores; the reference loop "
        f"{report['machine']['reference_loop_seconds']} s (the seconds one core takes for 10^7 Python additions)",
        "",
        "| module | seconds |",
        "|---|---|",
        *(f"| {module} | {seconds:.0f} |" for module, seconds in report["slowest_modules"]),
        "",
    ])


def write_report(folder: pathlib.Path, report: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("report.json", json.dumps(report, indent=2) + "\n"), ("summary.md", summary_markdown(report))):
        temporary = folder / f".{name}.tmp"
        with open(temporary, "w") as handle:  # a kept report is whole or absent: write, fsync, rename
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, folder / name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--junit", nargs="+", required=True, help="JUnit XML files pytest wrote (--junitxml)")
    parser.add_argument("--tier", required=True, help="the tier's name, for the line and the report")
    parser.add_argument("--collected", nargs="+", required=True, help="files tests/conftest.py wrote")
    parser.add_argument("--report", help="a folder for report.json and summary.md")
    parser.add_argument("--command", default="bash ci/test.sh", help="the command that ran, for the report")
    for name in ("wall", "setup", "cpu", "reference"):
        parser.add_argument(f"--{name}", type=float, default=0.0, help="seconds, for the report")
    args = parser.parse_args(argv)
    try:
        counts, expected = tally(args.junit), collected(args.collected)
    except (OSError, ValueError, ElementTree.ParseError) as error:
        print(f"ci/suite_report.py: cannot read what the tests ran: {error}", file=sys.stderr)
        return 1
    found = problems(counts, expected)
    verdict = f"; not green: {'; '.join(found)}" if found else ""
    print(f"[test] the {args.tier} tier: {expected} collected, {counts['ran']} ran: {counts['passed']} passed, "
          f"{counts['failed']} failed, {counts['skipped']} skipped{verdict}", file=sys.stderr)
    if args.report:
        slowest = sorted(durations.module_times(args.junit).items(), key=lambda item: -item[1])[:15]
        report = {
            "tier": args.tier, "command": args.command,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "git": commit(), "collected": expected, "tests": counts,
            "verdict": "green" if not found and not counts["failed"] else "red",
            "seconds": {"wall": args.wall, "setup": args.setup, "cpu": args.cpu},
            "machine": {"cores": os.cpu_count(), "reference_loop_seconds": args.reference},
            "slowest_modules": [[module, round(seconds, 1)] for module, seconds in slowest],
        }
        write_report(pathlib.Path(args.report), report)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
