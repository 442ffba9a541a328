"""Keep the docs true: every shell line of README.md, docs/*.md and recipes/*/README.md either is an
`invoke` command, which is dry-run here (it parses and builds its commands), or is named in RUN_BY
with the test that really runs it. A shell line that is neither fails, naming the file and line: name
the test that runs it, or write it as prose. And every script, module or file the docs name exists."""
import ast
import pathlib
import re
import shlex

import pytest

from ci.nightly import matrix as nightly
from helpers import REPO, installed_stack, run_invoke, stack_launchers


def refused_by_this_stack(args) -> bool:
    """A `--runtime local` command whose --launcher the installed stack does not have."""
    launcher = args[args.index("--launcher") + 1] if "--launcher" in args[:-1] else None
    local = "--runtime" in args[:-1] and args[args.index("--runtime") + 1] == "local"
    return bool(launcher and local and not stack_launchers(launcher))

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "recipes").glob("*/README.md"))]
INVOKE = ("invoke", "inv", ".venv/bin/invoke")

# Every shell line of the docs that is not an invoke command: a distinctive part of the line -> the
# test (file::function) that runs it, and how. Exactly one entry must match each such line.
RUN_BY = {
    # README.md
    "bash ci/setup.sh": (
        "tests/integration/test_quickstart_debian.py::test_the_readme_quick_start_works_on_a_fresh_debian",
        "runs the README's quick start line as written in fresh Debian 12 and 13 root file systems"),
    "bash ci/test.sh": (
        "tests/unit/test_workflows.py::test_ci_runs_the_readmes_test_command",
        "CI runs it on every push and pull request (ci.yml -> .ci/run -> bash ci/test.sh); the test checks that chain"),
    "prepare_data.py --format pairs --images data/my-scenes/images": (
        "tests/integration/test_new_recipe.py::test_the_readme_own_segmentation_data_journey_runs_as_written",
        "runs the README's 'Use the trained model' lines as written, on generated photos and masks"),
    # docs/benchmarks.md
    "-m ci.bench.host_overhead": (
        "tests/integration/test_host_overhead.py::test_the_benchmark_runs_and_reports_every_loop",
        "the same module with fewer steps and rounds"),
    # docs/starting.md
    "~/my-project": (
        "tests/integration/test_new_recipe.py::test_a_recipe_folder_and_common_copied_out_of_the_repository_train",
        "copies recipes/mnist-cnn and common/ into an empty folder in this layout and runs train.py there"),
    # docs/using.md
    "saved_model_cli show --all --dir": (
        "tests/integration/test_mnist_launchers.py::test_the_chief_exports_a_savedmodel_that_serves_the_trained_model",
        "tests/export_checks.py runs saved_model_cli show --all on the export of each launcher's run"),
    # docs/running.md
    "tensorboard --logdir results/": (
        "tests/integration/test_tensorboard.py::test_tensorboard_lists_the_scalars_of_a_run",
        "tensorboard --logdir on a results folder, then its scalars read back over HTTP"),
    # recipes/mnist-cnn/README.md
    "python recipes/mnist-cnn/train.py --launcher mirrored --cpu-replicas 2": (
        "tests/integration/test_mnist_launchers.py::test_launcher_trains_and_writes_results",
        "invoke run --launcher mirrored --runtime local starts this command"),
    "-- python recipes/mnist-cnn/train.py --launcher multiworker": (
        "tests/integration/test_mnist_launchers.py::test_launcher_trains_and_writes_results",
        "invoke run --launcher multiworker --runtime local starts this command"),
    # recipes/cassava-resnet/README.md
    "python recipes/cassava-resnet/generated_cassava.py": (
        "tests/integration/test_containers.py::test_cassava_trains_inside_the_container",
        "its cassava_data fixture runs the script with fewer photos"),
    "python recipes/cassava-resnet/train.py --launcher mirrored --cpu-replicas 2": (
        "tests/integration/test_cassava_launchers.py::test_two_replicas_train_in_sync_and_write_results",
        "invoke run --launcher mirrored --runtime local starts this command, on a generated TFDS directory"),
    "-- python recipes/cassava-resnet/train.py --launcher multiworker": (
        "tests/integration/test_cassava_launchers.py::test_two_replicas_train_in_sync_and_write_results",
        "invoke run --launcher multiworker --runtime local starts this command, on a generated TFDS directory"),
    "python recipes/cassava-resnet/benchmark_input.py --photos 1024": (
        "tests/recipes/cassava/test_cassava_readme.py::test_the_benchmark_runs_and_reports_every_figure",
        "the same script on 40 generated photos, 1 round"),
    # recipes/cityscapes-unet/README.md
    "prepare_data.py --source ~/datasets/cityscapes": (
        "tests/recipes/cityscapes/test_prepare.py::test_prepares_the_downloaded_zips",
        "the same script on generated zips in the official layout (Cityscapes needs an account)"),
    "make_fixture.py --out /tmp/cs-release --zip --no-tree --train 8 --val 4": (
        "tests/integration/test_cityscapes_launchers.py::test_trains_under_every_launcher_and_resumes_exactly",
        "its prepared fixture runs this command into a temporary folder"),
    "prepare_data.py --source /tmp/cs-release": (
        "tests/integration/test_cityscapes_launchers.py::test_trains_under_every_launcher_and_resumes_exactly",
        "its prepared fixture runs this command into a temporary folder"),
    "python recipes/cityscapes-unet/train.py --benchmark": (
        "tests/recipes/cityscapes/test_train.py::test_benchmark_mode_measures_generated_full_size_batches",
        "--benchmark at full size with the tiny preset"),
    "make_fixture.py --out /tmp/cityscapes-fixture --zip": (
        "tests/recipes/cityscapes/test_fixture.py::test_zips_have_the_official_inner_layout_and_are_reproducible",
        "the script writing the zips into a temporary folder"),
    "prepare_data.py --source /tmp/cityscapes-fixture": (
        "tests/recipes/cityscapes/test_prepare.py::test_prepares_the_downloaded_zips",
        "the script on the fixture's zips"),
    "python recipes/cityscapes-unet/benchmark_input.py --work-dir": (
        "tests/recipes/cityscapes/test_benchmark_input.py::test_the_benchmark_reads_the_given_data_dir_and_reports_every_figure",
        "the same script on a small prepared fixture (--data-dir), 1 round"),
}


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


# Docs whose commands start with `invoke new NAME --from SOURCE` and then use the new recipe: the test
# that runs those lines as written, in a copy of the repository. Here they are dry-run on SOURCE.
JOURNEYS = {"README.md": "tests/integration/test_new_recipe.py::test_the_readme_journey_runs_as_written",
            "docs/starting.md": "tests/integration/test_new_recipe.py::test_the_new_recipe_is_the_source_renamed_with_next_steps"}


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


def test_a_doc_that_makes_a_recipe_names_the_test_that_runs_its_journey():
    for doc in DOCS:
        if any(is_invoke(line) and shlex.split(line, comments=True)[1:2] == ["new"] for _, line in shell_lines(doc)):
            assert name(doc) in JOURNEYS, f"{name(doc)} makes a recipe with invoke new: add its journey test to JOURNEYS"
    for test in JOURNEYS.values():
        path, function = test.split("::")
        assert function in defined_functions(REPO / path), test


def other_lines():
    """(doc, line number, command) of every shell line that is not an invoke command."""
    return [(doc, number, line) for doc in DOCS for number, line in shell_lines(doc) if not is_invoke(line)]


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


def test_the_docs_are_read_and_show_invoke_commands():
    assert {name(doc) for doc in DOCS} >= {"README.md", "docs/running.md", "docs/correctness.md",
                                           "docs/containers.md", "docs/clusters.md", "docs/stopping.md",
                                           "docs/nightly.md", "docs/benchmarks.md", "recipes/mnist-cnn/README.md"}
    assert len(list(invoke_commands())) >= 5


def test_every_other_shell_line_is_run_by_a_named_test():
    problems = []
    for doc, number, line in other_lines():
        entries = [part for part in RUN_BY if part in line]
        if not entries:
            problems.append(f"{name(doc)}:{number}: `{line}` is neither an invoke command nor in RUN_BY: "
                            "add the test that runs it to RUN_BY, or write it as prose")
        elif len(entries) > 1:
            problems.append(f"{name(doc)}:{number}: `{line}` matches {len(entries)} RUN_BY entries: {entries}")
    assert not problems, "\n".join(problems)


def defined_functions(path: pathlib.Path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_every_run_by_entry_names_a_real_test_and_a_doc_line():
    lines = [line for _, _, line in other_lines()]
    problems = []
    for part, (test, _how) in RUN_BY.items():
        file, _, function = test.partition("::")
        path = REPO / file
        if not path.is_file():
            problems.append(f"{part!r}: {file} does not exist")
        elif not function.startswith("test_") or function not in defined_functions(path):
            problems.append(f"{part!r}: {file} defines no test {function}")
        if not any(part in line for line in lines):
            problems.append(f"{part!r}: no shell line of the docs contains it (remove the entry)")
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
                elif i and words[i - 1] == "-m" and word.split(".")[0] in ("ci", "common", "commands", "tasks"):
                    module = REPO / word.replace(".", "/")
                    if not (module.with_suffix(".py").is_file() or (module / "__init__.py").is_file()):
                        problems.append(f"{name(doc)}:{number}: module {word} does not exist")
    assert not problems, "\n".join(problems)
