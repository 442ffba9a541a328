"""Where a test run's time went: the seconds of each test module (its tests' set-up, call and teardown,
module fixtures included), summed from the JUnit XML files pytest wrote, the slowest first.

    python3 ci/durations.py build/ci/*.xml [--top N]     # ci/test.sh prints it before its last line

pytest's own --durations names single tests. A module whose fixture makes four runs for twenty short
tests shows up only here, and a module is what a change to the suite moves, shares or splits.
Standard library only, like ci/reaper.py."""
import argparse
import collections
import sys
import xml.etree.ElementTree as ElementTree


def module_of(classname: str) -> str:
    """tests.integration.test_x (or tests.integration.test_x.TestClass) -> tests/integration/test_x.py"""
    parts = classname.split(".")
    last = next((i for i, part in enumerate(parts) if part.startswith("test_")), len(parts) - 1)
    return "/".join(parts[:last + 1]) + ".py"


def module_times(paths) -> dict[str, float]:
    """{test module: seconds} over every test case of the JUnit XML files `paths`."""
    times = collections.Counter()
    for path in paths:
        for case in ElementTree.parse(path).iter("testcase"):
            times[module_of(case.get("classname", ""))] += float(case.get("time") or 0)
    return dict(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="JUnit XML files (pytest --junitxml)")
    parser.add_argument("--top", type=int, default=15, help="how many modules to list (default 15)")
    args = parser.parse_args(argv)
    try:
        times = module_times(args.files)
    except (OSError, ElementTree.ParseError) as error:
        print(f"ci/durations.py: cannot read the test times: {error}", file=sys.stderr)
        return 1
    ranked = sorted(times.items(), key=lambda item: -item[1])
    print(f"[durations] the {min(args.top, len(ranked))} slowest of {len(ranked)} test modules, "
          f"{sum(times.values()):.0f} s of test time in all (two workers run side by side):")
    for module, seconds in ranked[:args.top]:
        print(f"[durations] {seconds:7.0f} s  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
