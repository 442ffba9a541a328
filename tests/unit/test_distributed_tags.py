"""Each recipe's train.py labels the lines that exist because there is more than one replica: every call of
the launcher's interface and every test of `is_chief` carries `# Distributed: <what>` (or `# Horovod:`,
`# Strategy:`) on its statement or on the comment lines directly above it."""
import ast
import io
import re
import tokenize

import pytest

from helpers import RECIPES

pytestmark = pytest.mark.repository

LABEL = re.compile(r"#\s*(Distributed|Horovod|Strategy):\s*\S")
ON_THE_LAUNCHER = {"scope", "distribute_dataset", "eval_share", "input_shard", "barrier"}


def distributed_lines(tree: ast.AST) -> set[tuple[int, str]]:
    """(line, what) of each launcher call and each test of is_chief."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            owner = ast.unparse(node.func.value) if isinstance(node.func, ast.Attribute) else ""
            if name in ("create_launcher", "learning_rate") or (name in ON_THE_LAUNCHER and "launcher" in owner):
                found.add((node.func.end_lineno, f"{ast.unparse(node.func)}()"))
        elif isinstance(node, (ast.If, ast.IfExp)) and "is_chief" in ast.unparse(node.test):
            found.add((node.test.lineno, f"if {ast.unparse(node.test)}"))
    return found


def own_lines(node: ast.stmt) -> tuple[int, int]:
    """A simple statement's lines, or a compound statement's header (the lines up to its body)."""
    body = getattr(node, "body", None)
    return node.lineno, max(node.lineno, body[0].lineno - 1) if isinstance(body, list) and body else node.end_lineno


def unlabelled(source: str) -> list[str]:
    tree, lines = ast.parse(source), source.splitlines()
    notes = {token.start[0]: token.string for token in tokenize.generate_tokens(io.StringIO(source).readline)
             if token.type == tokenize.COMMENT}
    missing = []
    for line, what in sorted(distributed_lines(tree)):
        # The innermost statement that holds the line, and the comment lines directly above it.
        first, last = max(span for node in ast.walk(tree) if isinstance(node, ast.stmt)
                          and (span := own_lines(node))[0] <= line <= span[1])
        while first > 1 and lines[first - 2].lstrip().startswith("#"):
            first -= 1
        if not any(LABEL.match(notes.get(number, "")) for number in range(first, last + 1)):
            missing.append(f"line {line}: {what}")
    return missing


@pytest.mark.parametrize("train", sorted(RECIPES.glob("*/train.py")), ids=lambda path: path.parent.name)
def test_every_distributed_line_of_a_train_script_is_labelled(train):
    assert len(distributed_lines(ast.parse(train.read_text()))) >= 5  # create_launcher, scope, learning_rate, ...
    assert unlabelled(train.read_text()) == [], f"{train}: label these `# Distributed: <what>`"
