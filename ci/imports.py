"""What each recipe's train.py pulls in of the library: the tf_recipes modules it imports, directly, through
the recipe's own modules and through each other (an import inside a function counts too), with their lines.

    python -m ci.imports            # one line per recipe, then its modules' code lines; exit 1 past a
                                    # recipe's budget (BUDGETS)

Read from the source (nothing is imported or run), so it answers in a second, without TensorFlow.
"""
from __future__ import annotations

import argparse
import ast
import io
import pathlib
import tokenize

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "common" / "tf_recipes"


def imported_names(path: pathlib.Path) -> set[str]:
    """Every module name an import statement of `path` names (`from a import b` gives a and a.b)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def library_file(name: str) -> pathlib.Path | None:
    """tf_recipes.x -> common/tf_recipes/x.py (tf_recipes -> its __init__.py); None for anything else."""
    parts = name.split(".")
    if parts[0] != "tf_recipes":
        return None
    path = LIBRARY.joinpath(*parts[1:]) if len(parts) > 1 else LIBRARY
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def pulled_in(train: pathlib.Path) -> list[pathlib.Path]:
    """The library files `train` pulls in, the package's __init__.py included, sorted."""
    found, todo, seen = {LIBRARY / "__init__.py"}, [train], {train}
    while todo:
        for name in imported_names(todo.pop()):
            local = train.parent / f"{name.split('.')[0]}.py"
            target = library_file(name) or (local if local.is_file() else None)
            if target and target not in seen:
                seen.add(target)
                todo.append(target)
                if target.is_relative_to(LIBRARY):
                    found.add(target)
    return sorted(found)


def lines(path: pathlib.Path) -> int:
    return len(path.read_text().splitlines())


def code_lines(path: pathlib.Path) -> int:
    """Lines that hold code: not blank, not only a comment, not part of a docstring. A budget weighs these,
    so that a module gets smaller when its code gets simpler, never by deleting what explains it."""
    text = path.read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
                isinstance(body[0].value.value, str):
            docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    code = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in NOT_CODE:
            code.update(range(token.start[0], token.end[0] + 1))
    return len(code - docstrings)


NOT_CODE = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.COMMENT}
# Each recipe's most code lines of the library (code_lines): a ceiling that rises only with a feature, by what
# docs/library.md ("What a run imports") says it cost
# Counted on the library as `ruff format` leaves it (tests/unit/test_house_rules.py keeps it so), so that a
# change is weighed as code, never by how densely it is written
BUDGETS = {"mnist-cnn": 2463, "cassava-resnet": 2463, "cityscapes-unet": 2367}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    over = []
    for train in sorted(ROOT.glob("recipes/*/train.py")):
        files = pulled_in(train)
        total, code = sum(lines(path) for path in files), sum(code_lines(path) for path in files)
        budget = BUDGETS[train.parent.name]
        print(f"{train.parent.name}: {len(files)} modules, {total} lines, {code} of them code (budget {budget})")
        print("  " + ", ".join(f"{path.stem} {code_lines(path)}" for path in files))
        if code > budget:
            over.append(train.parent.name)
    library = list(LIBRARY.rglob("*.py"))
    print(f"library common/tf_recipes: {sum(lines(path) for path in library)} lines, "
          f"{sum(code_lines(path) for path in library)} of them code"
          + (f"; over budget: {', '.join(over)}" if over else ""))
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
