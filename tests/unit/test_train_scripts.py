"""Every recipe's train.py reads the same way: the same section headings in the same order, each part
under its heading, and no test hook (the faults and the download host are tf_recipes.test_hooks')."""
import ast
import re

import pytest

from helpers import RECIPES

SECTIONS = ["Command line", "Data", "Model", "Training"]
TRAIN_SCRIPTS = sorted(RECIPES.glob("*/train.py"))
HEADING = re.compile(r"^# ## (.+)$", re.M)
HOOK = re.compile(r"\bfault|_fault_|download_host", re.I)  # TF_RECIPES_FAULT_*, faults, TF_RECIPES_DOWNLOAD_HOST


def sections(source: str) -> list[tuple[str, int]]:
    """The `# ## HEADING` lines of a script: (heading, line number), in order."""
    return [(match.group(1).strip(), source.count("\n", 0, match.start()) + 1) for match in HEADING.finditer(source)]


def section_of(source: str, line: int) -> str | None:
    """The heading a line falls under."""
    above = [name for name, start in sections(source) if start < line]
    return above[-1] if above else None


def test_every_recipe_is_checked():
    assert {path.parent.name for path in TRAIN_SCRIPTS} >= {"mnist-cnn", "cassava-resnet", "cityscapes-unet"}


@pytest.mark.parametrize("path", TRAIN_SCRIPTS, ids=lambda path: path.parent.name)
def test_a_train_script_has_the_sections_in_order(path):
    assert [name for name, _ in sections(path.read_text())] == SECTIONS


@pytest.mark.parametrize("path", TRAIN_SCRIPTS, ids=lambda path: path.parent.name)
def test_the_parser_and_main_are_under_their_headings(path):
    source = path.read_text()
    defined = {node.name: node.lineno for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}
    assert section_of(source, defined["parse_args"]) == "Command line"
    assert section_of(source, defined["main"]) == "Training"
    first_main_guard = source.count("\n", 0, source.index('\nif __name__ == "__main__"')) + 2
    assert section_of(source, first_main_guard) == "Command line"  # the arguments, parsed before TensorFlow loads


@pytest.mark.parametrize("path", TRAIN_SCRIPTS, ids=lambda path: path.parent.name)
def test_a_train_script_names_no_test_hook(path):
    assert HOOK.findall(path.read_text()) == []


def test_the_section_reader_sees_order_and_place():
    source = "# ## Data\nx = 1\n\n# ## Command line\ndef parse_args(): pass\n"
    assert sections(source) == [("Data", 1), ("Command line", 4)]
    assert section_of(source, 2) == "Data" and section_of(source, 5) == "Command line"
    assert section_of(source, 1) is None
    hooks = [HOOK.findall(text) for text in ("default=1", "args.fault_overflow", "TF_RECIPES_DOWNLOAD_HOST",
                                             "TF_RECIPES_FAULT_SLOW_STEP", "test_hooks.faults()")]
    assert hooks == [[], ["fault"], ["DOWNLOAD_HOST"], ["_FAULT_"], ["fault"]]
