"""Keep the READMEs true: every invoke command they show parses and builds its commands (--dry),
and every script or file they name exists."""
import pathlib
import re
import shlex

import pytest

from commands import nightly
from helpers import REPO, run_invoke

READMES = [REPO / "README.md", *sorted((REPO / "recipes").glob("*/README.md"))]


def shell_lines(readme: pathlib.Path):
    """Commands in ```bash blocks, with continuation lines joined; && chains split."""
    for line in nightly.shell_lines(readme.read_text()):
        yield from (part.strip() for part in line.split("&&"))


def invoke_commands():
    for readme in READMES:
        for line in shell_lines(readme):
            words = shlex.split(line, comments=True)
            if words and words[0] in ("invoke", "inv", ".venv/bin/invoke"):
                yield pytest.param(words[1:], id=f"{readme.relative_to(REPO)}: {line[:90]}")


def dry(args):
    """Insert --dry before the `--` that starts the train arguments (or at the end)."""
    if "--dry" in args:
        return args
    split = args.index("--") if "--" in args else len(args)
    return args[:split] + ["--dry"] + args[split:]


@pytest.mark.parametrize("args", list(invoke_commands()))
def test_readme_invoke_command_parses(args):
    process = run_invoke(*dry(args), timeout=60)
    assert process.returncode == 0, process.stdout + process.stderr
    # It printed what it would run: commands, a batch script or Kubernetes manifests.
    assert "+ " in process.stdout or process.stdout.startswith(("#!/bin/bash", "apiVersion: "))


def test_readmes_show_invoke_commands():
    assert len(list(invoke_commands())) >= 5


def test_files_and_scripts_named_in_readmes_exist():
    for readme in READMES:
        for line in shell_lines(readme):
            for word in shlex.split(line, comments=True):
                if re.fullmatch(r"(ci|recipes|images|common|tests)/[\w./-]+\.(sh|py)", word):
                    assert (REPO / word).is_file(), f"{readme.name} names {word}, which does not exist"
