"""The lines that exist only because there is more than one replica say so: a comment
`# Distributed: <what, in a few words>` on the line or on the comment line(s) directly above it
(`# Horovod: ...` or `# Strategy: ...` for a line of one launcher kind). Here every collective and
chief-only site in common/ and recipes/*/ must carry one, and each recipe README's "What makes it
distributed" section lists exactly the tags of the files its train.py runs. mnist-cnn's lists them
all; another recipe's may leave the common/ modules that mnist-cnn's train.py runs too to that list,
by linking to it (MNIST_LIST), and then lists the tags of its own files and of any other module.

A site is
  - a call of a collective: all_reduce, allreduce, allgather, broadcast, broadcast_variables (and
    their grouped_/_object forms), reduce or gather on a strategy, experimental_distribute_dataset,
    distribute_datasets_from_function, experimental_distribute_values_from_function;
  - any call through Horovod (`hvd.X(...)`, `self.hvd.X(...)`);
  - a `.shard(...)` call;
  - an `if`, `elif` or conditional expression whose test names `is_chief` or a rank (`rank`,
    `local_rank`, `hvd.rank()`, ...).
Its line is the line of the called name or of the test. It is tagged when a tag is a comment of the
statement that holds it (any of its lines) or of the comment lines directly above that statement
(a blank line or a line of code ends them).

The tag's text is the rest of its comment line: `# Distributed: the chief is worker 0` has the text
`Distributed: the chief is worker 0`. `python tests/unit/test_distributed_tags.py RECIPE` prints the
section's list as the README holds it.
"""
from __future__ import annotations

import ast
import io
import os
import pathlib
import re
import sys
import tokenize
from dataclasses import dataclass

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
TAG = re.compile(r"#\s*((?:Distributed|Horovod|Strategy):\s*\S.*?)\s*$")
KINDS = ("Distributed", "Horovod", "Strategy")
COLLECTIVE = re.compile(r"(grouped_)?(all_?reduce|all_?gather|broadcast)(_variables|_object)?"
                        r"|experimental_distribute_dataset|distribute_datasets_from_function"
                        r"|experimental_distribute_values_from_function")
ON_A_STRATEGY = {"reduce", "gather"}  # collectives only when called on a strategy (tf.gather is not one)
SECTION = "What makes it distributed"
MNIST = "mnist-cnn"  # the recipe whose README lists the tags of every common/ module it runs
MNIST_LIST = "../mnist-cnn/README.md#what-makes-it-distributed"  # how another recipe's README links to it


# -- the scanner -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Site:
    line: int
    what: str


@dataclass(frozen=True)
class Tag:
    line: int
    text: str  # "Distributed: ..." as written after the `#`


def called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def through_horovod(func: ast.expr) -> bool:
    """`hvd.X`, `self.hvd.X`, `hvd.X.Y`: a call that goes through the Horovod module."""
    node = func.value if isinstance(func, ast.Attribute) else None
    while node is not None:
        if getattr(node, "id", None) == "hvd" or getattr(node, "attr", None) == "hvd":
            return True
        node = node.value if isinstance(node, ast.Attribute) else None
    return False


def names_a_chief_or_rank(test: ast.expr) -> bool:
    for node in ast.walk(test):
        word = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if word and (word == "is_chief" or {"rank", "ranks"} & set(word.lower().split("_"))):
            return True
    return False


def sites(tree: ast.AST) -> list[Site]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = called_name(node.func)
            line = node.func.end_lineno
            if through_horovod(node.func):
                found.append(Site(line, f"Horovod call {ast.unparse(node.func)}()"))
            elif name and COLLECTIVE.fullmatch(name):
                found.append(Site(line, f"collective {name}()"))
            elif name in ON_A_STRATEGY and isinstance(node.func, ast.Attribute) \
                    and "strategy" in ast.unparse(node.func.value).lower():
                found.append(Site(line, f"strategy {name}()"))
            elif name == "shard" and isinstance(node.func, ast.Attribute):
                found.append(Site(line, "dataset .shard()"))
        elif isinstance(node, (ast.If, ast.IfExp)) and names_a_chief_or_rank(node.test):
            kind = "if" if isinstance(node, ast.If) else "conditional expression"
            found.append(Site(node.test.lineno, f"{kind} on {ast.unparse(node.test)}"))
    return sorted(set(found), key=lambda site: (site.line, site.what))


def own_lines(statement: ast.stmt, lines: list[str]) -> tuple[int, int]:
    """(first, last) line of a statement's own text: all of a simple statement, the header of a
    compound one (up to its body, without the comment lines before the body)."""
    body = getattr(statement, "body", None)
    if not isinstance(body, list) or not body:
        return statement.lineno, statement.end_lineno
    last = body[0].lineno - 1
    while last > statement.lineno and (not lines[last - 1].strip() or lines[last - 1].lstrip().startswith("#")):
        last -= 1
    return statement.lineno, max(last, statement.lineno)


def statement_lines(tree: ast.AST, lines: list[str], line: int) -> tuple[int, int]:
    """(first, last) line of the innermost statement whose own text holds `line`."""
    best = None
    for node in ast.walk(tree):  # breadth first: a nested statement comes after the one holding it
        if isinstance(node, ast.stmt):
            first, last = own_lines(node, lines)
            if first <= line <= last and (best is None or last - first <= best[1] - best[0]):
                best = (first, last)
    return best or (line, line)


def comments(source: str) -> dict[int, str]:
    """Line -> the comment on it."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string
    return found


def tags(source: str) -> list[Tag]:
    return [Tag(line, match.group(1)) for line, comment in sorted(comments(source).items())
            if (match := TAG.match(comment))]


def tagged(source_lines: list[str], notes: dict[int, str], first: int, last: int) -> bool:
    if any(TAG.match(notes.get(line, "")) for line in range(first, last + 1)):
        return True
    line = first - 1
    while line >= 1 and source_lines[line - 1].lstrip().startswith("#"):  # the comment lines directly above
        if TAG.match(notes.get(line, "")):
            return True
        line -= 1
    return False


def untagged_sites(source: str) -> list[Site]:
    tree = ast.parse(source)
    notes, lines = comments(source), source.splitlines()
    return [site for site in sites(tree) if not tagged(lines, notes, *statement_lines(tree, lines, site.line))]


def scanned_files() -> list[pathlib.Path]:
    return sorted(path for pattern in ("common/**/*.py", "recipes/*/*.py") for path in REPO.glob(pattern)
                  if "__pycache__" not in path.parts)


def relative(path: pathlib.Path) -> str:
    return str(path.relative_to(REPO))


# -- the files a recipe's train.py runs --------------------------------------------------------------

def imported_files(path: pathlib.Path, recipe_folder: pathlib.Path) -> set[pathlib.Path]:
    """The project files `path` imports anywhere (lazily too): common/ modules and the recipe's own."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] == "common":
                for candidate in (REPO.joinpath(*parts).with_suffix(".py"), REPO.joinpath(*parts, "__init__.py")):
                    if candidate.is_file():
                        found.add(candidate)
                found.add(REPO / "common" / "__init__.py")  # importing common.X runs the package first
            elif len(parts) == 1 and (recipe_folder / f"{module}.py").is_file():
                found.add(recipe_folder / f"{module}.py")
    return found


def files_run_by(recipe: str) -> list[pathlib.Path]:
    """recipes/RECIPE/train.py and every project file it imports, directly or not."""
    folder = REPO / "recipes" / recipe
    seen, todo = set(), [folder / "train.py"]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += imported_files(path, folder) - seen
    return sorted(seen, key=lambda path: (path.parent != folder, relative(path)))


def expected_section(recipe: str, leave_to_mnist: bool = False) -> dict[str, list[str]]:
    """File (relative to the repository) -> its tags' texts, first line first, each text once; with
    `leave_to_mnist`, without the files mnist-cnn's list holds."""
    left = set(files_run_by(MNIST)) - {REPO / "recipes" / MNIST / "train.py"} if leave_to_mnist else set()
    listing = {}
    for path in files_run_by(recipe):
        texts = list(dict.fromkeys(tag.text for tag in tags(path.read_text())))
        if texts and path not in left:
            listing[relative(path)] = texts
    return listing


def render_section(recipe: str) -> str:
    lines = []
    for file, texts in expected_section(recipe, leave_to_mnist=recipe != MNIST).items():
        lines.append(f"- [`{file}`]({os.path.relpath(REPO / file, REPO / 'recipes' / recipe)})")
        lines += [f"  - {text}" for text in texts]
    return "\n".join(lines) + "\n"


# -- the README's list --------------------------------------------------------------------------------

FILE_ITEM = re.compile(r"- \[`?([\w./-]+)`?\]\(([^)\s]+)\)\s*$")
TAG_ITEM = re.compile(r"\s+- ((?:%s): .+?)\s*$" % "|".join(KINDS))


def readme_section(readme: pathlib.Path) -> str:
    """The section's text up to its first subsection."""
    text = readme.read_text()
    match = re.search(rf"^## {SECTION}\n(.*?)(?=^##+ |\Z)", text, flags=re.M | re.S)
    assert match, f"{readme} has no '## {SECTION}' section"
    return match.group(1)


def listed_tags(readme: pathlib.Path, root: pathlib.Path = REPO) -> tuple[dict[str, list[str]], list[str]]:
    """The section's list: file -> tag texts under it; and what is wrong with its form (an entry
    whose link is not the file it names, relative to the README; a tag under no file)."""
    listing, problems, current = {}, [], None
    for line in readme_section(readme).splitlines():
        if file_item := FILE_ITEM.match(line):
            current, link = file_item.groups()
            target = (readme.parent / link).resolve()
            if target != (root / current).resolve() or not target.is_file():
                problems.append(f"entry `{current}` links to {link}, which is not that file")
            listing.setdefault(current, [])
        elif tag_item := TAG_ITEM.match(line):
            if current is None:
                problems.append(f"`{tag_item.group(1)}` is listed under no file")
            else:
                listing[current].append(tag_item.group(1))
    return listing, problems


def recipes_with_train() -> list[str]:
    return sorted(path.parent.name for path in (REPO / "recipes").glob("*/train.py"))


# -- tests ----------------------------------------------------------------------------------------------

PROBES = {
    "strategy.reduce": "def f(strategy, v):\n    return strategy.reduce('SUM', v, axis=None)\n",
    "self.strategy.gather": "def f(self, v):\n    return self.strategy.gather(v, axis=0)\n",
    "all_reduce": "def f(ctx, t):\n    return ctx.all_reduce('MEAN', t)\n",
    "allgather": "def f(h, t):\n    return h.allgather(t)\n",
    "broadcast_variables": "def f(h, v):\n    broadcast_variables(v, root_rank=0)\n",
    "experimental_distribute_dataset": "def f(s, d):\n    return s.experimental_distribute_dataset(d)\n",
    "distribute_datasets_from_function": "def f(s, fn):\n    return s.distribute_datasets_from_function(fn)\n",
    "experimental_distribute_values_from_function":
        "def f(s, fn):\n    return s.experimental_distribute_values_from_function(fn)\n",
    "hvd.init": "import horovod.tensorflow as hvd\nhvd.init()\n",
    "self.hvd.size": "def f(self):\n    return self.hvd.size()\n",
    "shard": "def f(d):\n    return d.map(len).shard(2, 0)\n",
    "if is_chief": "def f(launcher):\n    if launcher.is_chief:\n        print('chief')\n",
    "elif rank": "def f(a, rank):\n    if a:\n        pass\n    elif rank == 0:\n        pass\n",
    "conditional expression": "def f(local_rank):\n    return 1 if local_rank == 0 else 2\n",
}


@pytest.mark.parametrize("kind", sorted(PROBES))
def test_the_scanner_finds_an_untagged_site_of_each_kind(kind):
    source = PROBES[kind]
    found = untagged_sites(source)
    assert len(found) == 1, (kind, found)
    line = found[0].line
    lines = source.splitlines()
    indent = re.match(r"\s*", lines[line - 1]).group(0)
    # Tagged on its line, or by the comment line directly above: then nothing is left.
    on_line = lines[:line - 1] + [lines[line - 1] + "  # Distributed: the probe"] + lines[line:]
    above = lines[:line - 1] + [f"{indent}# Strategy: the probe"] + lines[line - 1:]
    assert untagged_sites("\n".join(on_line) + "\n") == [], kind
    assert untagged_sites("\n".join(above) + "\n") == [], kind


def test_a_tag_counts_only_on_the_statement_or_the_comment_lines_directly_above_it():
    site = "    outputs = strategy.reduce('SUM', v,\n                              axis=None)\n"
    assert untagged_sites("def f(strategy, v):\n" + site) != []
    # A comment on a later line of the same statement, and a block of comments ending in the tag's line.
    assert untagged_sites("def f(strategy, v):\n    outputs = strategy.reduce('SUM', v,\n"
                          "                              axis=None)  # Distributed: summed\n") == []
    assert untagged_sites("def f(strategy, v):\n    # Horovod: the sum\n    # of every rank\n" + site) == []
    # A blank line or a line of code between the tag and the site ends it; so does a tag in a string.
    assert len(untagged_sites("def f(strategy, v):\n    # Distributed: summed\n\n" + site)) == 1
    assert len(untagged_sites("def f(strategy, v):\n    # Distributed: summed\n    v = v + 1\n" + site)) == 1
    assert len(untagged_sites("def f(strategy, v):\n    '# Distributed: summed'\n" + site)) == 1
    # A tag on an `if` covers its test, not its body.
    body = "def f(launcher, hvd):\n    if launcher.is_chief:  # Distributed: chief only\n        hvd.init()\n"
    assert [site.line for site in untagged_sites(body)] == [3]
    # Only the three kinds are tags.
    note = "def f(launcher):\n    # Note: chief only\n    if launcher.is_chief:\n        pass\n"
    assert len(untagged_sites(note)) == 1


def test_the_scanner_leaves_what_is_not_distributed_alone():
    source = ("import functools\nimport tensorflow as tf\n"
              "def f(parts, images, index, ranking, launcher):\n"
              "    functools.reduce(lambda a, b: a + b, parts)\n"
              "    tf.gather(images, index)\n"
              "    if ranking or launcher.name == 'single':\n"
              "        pass\n"
              "    hvd_like = 'hvd.init()'\n")
    assert untagged_sites(source) == []


def test_tags_are_read_with_their_text():
    source = "x = 1  # Distributed: the chief is worker 0\n# Horovod: one GPU per process, by local rank  \n"
    assert tags(source) == [Tag(1, "Distributed: the chief is worker 0"),
                            Tag(2, "Horovod: one GPU per process, by local rank")]


def test_the_scan_covers_the_shared_code_and_every_recipe():
    files = {relative(path) for path in scanned_files()}
    assert {"common/launchers.py", "common/training.py", "common/data.py", "recipes/mnist-cnn/train.py",
            "recipes/cassava-resnet/input_pipeline.py", "recipes/cityscapes-unet/data.py"} <= files
    # The real code has sites of most kinds, so a scanner that finds nothing fails here.
    everything = [site.what for path in scanned_files() for site in sites(ast.parse(path.read_text()))]
    assert any(what.startswith("Horovod call") for what in everything)
    assert any(what.startswith("strategy reduce") for what in everything)
    assert any(what.startswith("if on") and "is_chief" in what for what in everything)
    assert any(what == "dataset .shard()" for what in everything)


def test_without_their_tags_the_real_launchers_fail_the_scan():
    source = (REPO / "common" / "launchers.py").read_text()
    untagged = untagged_sites(re.sub(r"#\s*(Distributed|Horovod|Strategy):", "# Note:", source))
    assert len(untagged) >= 10, untagged  # its collectives, Horovod calls and chief-only tests


def test_every_collective_and_chief_only_site_is_tagged():
    problems = [f"{relative(path)}:{site.line}: {site.what} has no `# Distributed:` (or `# Horovod:`, "
                "`# Strategy:`) tag on its line or the comment line directly above"
                for path in scanned_files() for site in untagged_sites(path.read_text())]
    assert not problems, "\n".join(problems)


def test_the_files_a_recipe_runs_are_found_through_its_imports():
    files = {relative(path) for path in files_run_by("mnist-cnn")}
    assert {"recipes/mnist-cnn/train.py", "common/training.py", "common/launchers.py", "common/data.py",
            "common/contract.py", "common/stopping.py", "common/tf_config.py", "common/indexed_job.py"} <= files
    assert "recipes/cassava-resnet/input_pipeline.py" in {relative(path) for path in files_run_by("cassava-resnet")}
    assert not {file for file in files if file.startswith(("tools/", "commands/", "tasks/"))}


def test_the_readme_list_parser_sees_entries_and_bad_links(tmp_path):
    folder = tmp_path / "recipes" / "x"
    folder.mkdir(parents=True)
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "data.py").write_text("")
    readme = folder / "README.md"
    readme.write_text(f"# x\n\n## {SECTION}\n\nText.\n\n- [`common/data.py`](../../common/data.py)\n"
                      "  - Distributed: a\n  - Horovod: b\n- [`common/none.py`](../../common/data.py)\n"
                      "  - Strategy: c\n\n## Performance\n  - Distributed: not this section\n")
    listing, problems = listed_tags(readme, root=tmp_path)
    assert listing == {"common/data.py": ["Distributed: a", "Horovod: b"], "common/none.py": ["Strategy: c"]}
    assert len(problems) == 1 and "common/none.py" in problems[0]


@pytest.mark.parametrize("recipe", recipes_with_train())
def test_the_readme_lists_every_tag_of_the_files_its_train_py_runs(recipe):
    readme = REPO / "recipes" / recipe / "README.md"
    listing, problems = listed_tags(readme)
    leave_to_mnist = recipe != MNIST and f"]({MNIST_LIST})" in readme_section(readme)
    expected = expected_section(recipe, leave_to_mnist)
    for file in set(listing) - set(expected):  # listed though left to mnist-cnn's list: then listed right
        expected[file] = expected_section(recipe).get(file, [])
    run = {relative(path) for path in files_run_by(recipe)}
    for file, texts in expected.items():
        for text in texts:
            if text not in listing.get(file, []):
                problems.append(f"missing: `{file}`: {text}")
    for file, texts in listing.items():
        if file not in run:
            problems.append(f"`{file}` is listed, but recipes/{recipe}/train.py does not run it")
            continue
        for text in texts:
            if text not in expected.get(file, []):
                problems.append(f"stale: `{file}`: {text} is no tag of that file")
        if len(texts) != len(set(texts)):
            problems.append(f"`{file}` lists a tag twice")
    assert not problems, (f"recipes/{recipe}/README.md, '## {SECTION}':\n" + "\n".join(problems)
                          + f"\n(`python tests/unit/test_distributed_tags.py {recipe}` prints the current list)")


if __name__ == "__main__":
    for name in sys.argv[1:] or recipes_with_train():
        print(render_section(name), end="")
