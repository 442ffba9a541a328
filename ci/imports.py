"""What each recipe's train.py pulls in of the library: the tf_recipes modules it imports, directly, through
the recipe's own modules and through each other (an import inside a function counts too), with their lines.

    python -m ci.imports            # one line per recipe, then its modules; exit 1 past --limit

Read from the source (nothing is imported or run), so it answers in a second, without TensorFlow.
"""
from __future__ import annotations

import argparse
import ast
import pathlib

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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=2750, help="most library lines a train.py may pull in")
    args = parser.parse_args(argv)
    over = []
    for train in sorted(ROOT.glob("recipes/*/train.py")):
        files = pulled_in(train)
        total = sum(lines(path) for path in files)
        print(f"{train.parent.name}: {len(files)} modules, {total} lines")
        print("  " + ", ".join(f"{path.stem} {lines(path)}" for path in files))
        if total > args.limit:
            over.append(train.parent.name)
    library = sum(lines(path) for path in LIBRARY.glob("*.py"))
    print(f"library common/tf_recipes: {library} lines; limit {args.limit} per recipe"
          + (f", exceeded by {', '.join(over)}" if over else ""))
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
