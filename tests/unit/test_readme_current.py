"""The README's task table and Layout are checked against what exists: every invoke task has a row
and every row names a task; every module and script on disk is named in the Layout, and every file
the Layout names exists. Adding a task or a module without listing it fails here."""
import re

import pytest

from helpers import REPO

README = (REPO / "README.md").read_text()
# Folders whose every module or script the Layout names, file by file.
LISTED = {"common": "*.py", "tools": "*.[ps][hy]", "commands": "*.py", "tasks": "*.py", "ci": "*.[ps][hy]",
          "ci/nightly": "*.py", "ci/bench": "*.py"}


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else len(README)]


def invoke_tasks() -> set[str]:
    from tasks import namespace
    return set(namespace.task_names)


def table_tasks() -> set[str]:
    return set(re.findall(r"^\| `invoke ([\w.-]+)", section("Tasks"), re.M))


def test_every_invoke_task_has_a_row_in_the_readme_task_table():
    assert invoke_tasks() - table_tasks() == set(), "add a row to the README's Tasks table"


def test_every_row_of_the_task_table_is_an_invoke_task():
    assert table_tasks() - invoke_tasks() == set(), "the README's Tasks table names a task invoke does not have"


def layout_block() -> str:
    return re.search(r"```text\n(.*?)```", section("Layout"), re.S).group(1)


def files_on_disk() -> dict[str, set[str]]:
    return {folder: {path.name for path in (REPO / folder).glob(pattern) if path.name != "__init__.py"}
            for folder, pattern in LISTED.items()}


def layout_entries() -> dict[str, str]:
    """The Layout's entries by their first word (`common/`, `ci/`, ...): a line that starts in the
    first column and the indented lines under it."""
    entries, current = {}, None
    for line in layout_block().splitlines():
        if line and not line[0].isspace():
            current = line.split()[0]
            entries[current] = ""
        entries[current] += line + "\n"
    return entries


@pytest.mark.parametrize("folder", sorted(LISTED))
def test_the_layout_names_every_module_and_script_of(folder):
    entry = layout_entries()[folder.split("/")[0] + "/"]  # ci/nightly and ci/bench are told under ci/
    unnamed = {name for name in files_on_disk()[folder] if not re.search(rf"(?<![\w.-]){re.escape(name)}\b", entry)}
    assert unnamed == set(), f"the README's Layout does not name {sorted(unnamed)} of {folder}/"


def test_every_file_the_layout_names_exists():
    on_disk = set().union(*files_on_disk().values())
    elsewhere = {path.name for pattern in ("recipes/*/*", "tests/*") for path in REPO.glob(pattern) if path.is_file()}
    named = set(re.findall(r"(?<![\w/.-])([\w-]+\.(?:py|sh))\b", layout_block()))
    assert named - on_disk - elsewhere == set(), "the README's Layout names files that do not exist"
