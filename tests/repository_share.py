"""How much of the test code checks the repository itself rather than what the code does: the lines of
tests/**/*.py, the lines of the files marked `repository` (a module-level `pytestmark` that is, or lists,
`pytest.mark.repository`), and their share. Exits 1 when the share is above LIMIT percent.

    python tests/repository_share.py [--files]

--files also lists the marked files with their lines."""
import ast
import pathlib
import sys

TESTS = pathlib.Path(__file__).resolve().parent
LIMIT = 15.0  # percent


def is_marked_repository(source: str) -> bool:
    """Whether a module's `pytestmark` is pytest.mark.repository or a list or tuple holding it."""
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) and node.value is not None else []
        if any(isinstance(target, ast.Name) and target.id == "pytestmark" for target in targets):
            marks = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            if any(ast.unparse(mark) == "pytest.mark.repository" for mark in marks):
                return True
    return False


def measure(root: pathlib.Path = TESTS) -> tuple[int, dict[str, int]]:
    """(lines of every root/**/*.py, {marked file: its lines})."""
    total, marked = 0, {}
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        lines = len(source.splitlines())
        total += lines
        if is_marked_repository(source):
            marked[str(path.relative_to(root.parent))] = lines
    return total, marked


def main(argv: list[str]) -> int:
    total, marked = measure()
    repository = sum(marked.values())
    share = 100.0 * repository / total if total else 0.0
    if "--files" in argv:
        for name, lines in sorted(marked.items(), key=lambda item: -item[1]):
            print(f"{lines:6d}  {name}")
    print(f"test lines (tests/**/*.py): {total}")
    print(f"lines of files marked repository: {repository}")
    print(f"share: {share:.1f}% (limit {LIMIT:g}%)")
    return 1 if share > LIMIT else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
