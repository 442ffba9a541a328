"""Keep the docs true: every command of the shell blocks of README.md, docs/*.md and recipes/*/README.md
is run as written, or dry-run as written, or named in NOT_RUN_HERE with the reason.

- An `invoke` command is dry-run here with `--dry` added: it parses its flags and prints the commands,
  script or manifests it would run or write. A doc that makes a recipe with `invoke new NAME --from
  SOURCE` and then runs NAME is dry-run on SOURCE (NAME exists only once `invoke new` really ran).
- Every other command is run as written by tests/integration/test_documented_commands.py (it trains,
  or writes data): the command must be one of that file's strings, word for word.
- A command that cannot run there is in NOT_RUN_HERE, with why. The list is short on purpose.

A command that is none of these fails, naming its file and line. And every script, module or file the
docs name exists."""
import ast
import pathlib
import re
import shlex

import pytest

from ci.nightly import matrix as nightly
from helpers import REPO, installed_stack, run_invoke, stack_launchers

pytestmark = pytest.mark.repository

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "recipes").glob("*/README.md"))]
INVOKE = ("invoke", "inv", ".venv/bin/invoke")
PACKAGES = ("ci", "common", "commands", "tasks", "tools")  # a `-m MODULE` of these must exist
# The tests that run documented commands as written, each through its own `documented(...)`.
RUN_AS_WRITTEN_BY = (REPO / "tests" / "integration" / "test_documented_commands.py",
                     REPO / "tests" / "integration" / "test_copy_out.py")

# Documented commands that are neither dry-run nor run here, each with the reason.
NOT_RUN_HERE = {
    "python recipes/cityscapes-unet/train.py --preset cpu --data-dir data/cityscapes --results-dir results/cs "
    "--predict-dir results/cs/predicted --predict-format labelids":
        "the cpu preset's 600 steps on the real release; tests/integration/test_cityscapes_launchers.py runs the "
        "same --predict-dir and --predict-format labelids under every launcher on the generated release",
    "CITYSCAPES_DATASET=~/datasets/cityscapes CITYSCAPES_RESULTS=results/cs/predicted CITYSCAPES_EXPORT_DIR=results/cs "
    "csEvalPixelLevelSemanticLabeling":
        "needs the run above; tests/cityscapes_data.py's official_evaluation runs csEvalPixelLevelSemanticLabeling "
        "with these three variables on every launcher test's predictions",
    "bash ci/setup.sh":
        "sets up the machine this suite runs on (.venv, TensorFlow, Horovod's build); CI runs it before the suite",
    "bash ci/test.sh":
        "the test suite's per-push tier, this file included",
    "bash ci/test.sh --full":
        "the test suite's full tier, this file included (every night)",
    ".venv/bin/python -m ci.bench.host_overhead --batch-size 1 --steps 1500 --rounds 5 "
    "--json docs/bench/host-overhead.json":
        "the kept measurement: as written it replaces docs/bench/host-overhead.json",
    "python recipes/cassava-resnet/benchmark_input.py --photos 1024 --rounds 5 --epochs 3 --steps 3 "
    "--json docs/bench/cassava-resnet/input-benchmark-2cpu.json":
        "the kept measurement: as written it replaces docs/bench/cassava-resnet/input-benchmark-2cpu.json",
    "python recipes/cityscapes-unet/benchmark_input.py --work-dir build/cityscapes-benchmark --rounds 3 --epochs 3 "
    "--json docs/bench/cityscapes-unet/input-benchmark-2026-11-22.json":
        "the kept measurement: as written it replaces docs/bench/cityscapes-unet/input-benchmark-2026-11-22.json",
    "python recipes/cityscapes-unet/train.py --benchmark --batch-size 1 --max-steps 6 --warmup-steps 2 --log-every 1":
        "six steps of the full preset's UNet-S5-D16 on 512x1024 crops (a step of 2 crops took 126 s on the 2-core "
        "machine, the README's measurement, The full preset), over the few minutes all documented runs may take",
    "python recipes/cassava-resnet/train.py --launcher mirrored --cpu-replicas 2 --synthetic --weights none "
    "--image-size 64 --max-steps 10":
        "ResNet50 on 2 replicas: 92 s on the shared 2-core machine, nearly all of it tracing the step, "
        "over the few minutes all documented runs may take",
    "python -m tf_recipes.operations.spawn --nproc 2 -- python recipes/cassava-resnet/train.py --launcher multiworker "
    "--synthetic --weights none --image-size 64 --max-steps 10":
        "ResNet50 in 2 processes: 3 min 45 s on the 2-core machine shared with other jobs, over the few minutes "
        "all documented runs may take",
}


def refused_by_this_stack(args) -> bool:
    """A `--runtime local` command whose --launcher the installed stack does not have."""
    launcher = args[args.index("--launcher") + 1] if "--launcher" in args[:-1] else None
    local = "--runtime" in args[:-1] and args[args.index("--runtime") + 1] == "local"
    return bool(launcher and local and not stack_launchers(launcher))


def shell_lines(doc: pathlib.Path):
    """(line number, command) for each command of the doc's shell blocks (nightly.shell_lines:
    continuation lines joined, prompts and comments dropped), with && chains split."""
    physical = doc.read_text().splitlines()
    at = 0
    for line in nightly.shell_lines(doc.read_text()):
        while at < len(physical) and not line.startswith(
                physical[at].strip().removeprefix("$ ").removesuffix("\\").strip() or "\0"):
            at += 1
        assert at < len(physical), f"{doc}: cannot find the line of {line!r}"
        at += 1
        for part in line.split("&&"):
            yield at, part.strip()


def is_invoke(line: str) -> bool:
    words = shlex.split(line, comments=True)
    return bool(words) and words[0] in INVOKE


def name(doc: pathlib.Path) -> str:
    return str(doc.relative_to(REPO))


def invoke_commands():
    for doc in DOCS:
        made = {}  # recipes the doc makes with `invoke new`: name -> source
        for number, line in shell_lines(doc):
            if is_invoke(line):
                args = shlex.split(line, comments=True)[1:]
                if args[:1] == ["new"] and "--from" in args:
                    made[args[1]] = args[args.index("--from") + 1]
                elif len(args) > 1 and args[1] in made:
                    args = [args[0], made[args[1]], *args[2:]]
                yield pytest.param(args, id=f"{name(doc)}:{number}: {line[:90]}")


def other_lines():
    """(doc, line number, command) of every command that is not an invoke command."""
    return [(doc, number, line) for doc in DOCS for number, line in shell_lines(doc) if not is_invoke(line)]


def run_as_written() -> set[str]:
    """The commands the tests of RUN_AS_WRITTEN_BY run: the strings each passes to its `documented(...)`,
    written there or named by a module constant (read, not imported: the unit tier imports no training
    tier)."""
    found = set()
    for path in RUN_AS_WRITTEN_BY:
        found |= documented_in(ast.parse(path.read_text()))
    return found


def documented_in(tree) -> set[str]:
    constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for target in node.targets if isinstance(target, ast.Name)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "documented":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.add(arg.value)
                elif isinstance(arg, ast.Name) and arg.id in constants:
                    found.add(constants[arg.id])
    return found


def dry(args):
    """Insert --dry before the `--` that starts the train arguments (or at the end)."""
    if "--dry" in args:
        return args
    split = args.index("--") if "--" in args else len(args)
    return args[:split] + ["--dry"] + args[split:]


@pytest.mark.parametrize("args", list(invoke_commands()))
def test_invoke_command_dry_runs(args):
    process = run_invoke(*dry(args), timeout=60)
    if refused_by_this_stack(args):
        # --runtime local runs the installed stack; the current one has no horovod and says so in a line.
        assert process.returncode == 2 and process.stderr.count("\n") == 1, process.stderr
        assert f"does not run on the {installed_stack()} stack" in process.stderr
        return
    assert process.returncode == 0, process.stdout + process.stderr
    # It printed what it would run or write: commands, a batch script, Kubernetes manifests, files.
    assert "+ " in process.stdout or "would write " in process.stdout or \
        process.stdout.startswith(("#!/bin/bash", "apiVersion: "))


def test_every_other_command_is_run_as_written_or_says_why_not():
    run = run_as_written()
    runners = " or ".join(str(path.relative_to(REPO)) for path in RUN_AS_WRITTEN_BY)
    problems = []
    for doc, number, line in other_lines():
        if line in run and line in NOT_RUN_HERE:
            problems.append(f"{name(doc)}:{number}: `{line}` is run as written, so it is not one of NOT_RUN_HERE")
        elif line not in run and line not in NOT_RUN_HERE:
            problems.append(f"{name(doc)}:{number}: `{line}` is neither an invoke command (dry-run here) nor run as "
                            f"written by {runners}: run it there, or add it to "
                            "NOT_RUN_HERE with the reason, or write it as prose")
    assert not problems, "\n".join(problems)


def test_files_scripts_and_modules_named_in_the_docs_exist():
    problems = []
    for doc in DOCS:
        for number, line in shell_lines(doc):
            words = shlex.split(line, comments=True)
            for i, word in enumerate(words):
                if re.fullmatch(r"(ci|recipes|images|common|tests)/[\w./-]+\.(sh|py)", word):
                    if not (REPO / word).is_file():
                        problems.append(f"{name(doc)}:{number}: {word} does not exist")
                elif i and words[i - 1] == "-m" and word.split(".")[0] in PACKAGES:
                    module = REPO / word.replace(".", "/")
                    if not (module.with_suffix(".py").is_file() or (module / "__init__.py").is_file()):
                        problems.append(f"{name(doc)}:{number}: module {word} does not exist")
    assert not problems, "\n".join(problems)
