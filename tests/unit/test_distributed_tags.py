"""The lines that exist only because there is more than one replica say so: a label, a comment
`# Distributed: <what, in a few words>` on the line or on the comment line(s) directly above it
(`# Horovod: ...` or `# Strategy: ...` for a line of one launcher kind). Here every collective and
chief-only site in common/ and recipes/*/ must carry one, and so must every call of the launcher's
interface in a recipe's train.py (create_launcher, launcher.scope(), training.learning_rate,
launcher.distribute_dataset, launcher.eval_share, ...: LAUNCHER_CALLS; a benchmark beside it may drive
the loop on one device, where those calls distribute nothing). Each recipe README's "What
makes it distributed" section lists exactly the labels of its own folder's .py files, in order (train.py
first), then links to the library's launcher API (LIBRARY_LINK) for what happens inside common/, whose
labels stay where they are and are not listed in the READMEs.

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
`Distributed: the chief is worker 0`. A comment that starts with one of the three words but is not of
that form (`# distributed: x`, `#Horovod - x`) is refused, so the labels stay greppable.
`python tests/unit/test_distributed_tags.py RECIPE` prints the section's list as the README holds it.
"""
from __future__ import annotations

import ast
import io
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
LOOKS_LIKE_A_TAG = re.compile(r"#\s*(distributed|horovod|strategy)\b\s*[:\-]", re.I)
SECTION = "What makes it distributed"
# What a recipe's README links to for what the library does inside (docs/library.md, `## Launchers`).
LIBRARY_DOC = "docs/library.md"
LIBRARY_LINK = "../../docs/library.md#launchers"
# The launcher's interface as a recipe calls it: each call in a recipe's folder is a distributed line.
LAUNCHER_CALLS = {"create_launcher", "learning_rate", "scope", "distribute_dataset", "eval_share", "input_shard",
                  "barrier"}


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


def launcher_calls(tree: ast.AST) -> list[Site]:
    """Calls of the launcher's interface (LAUNCHER_CALLS): by name (create_launcher, training.learning_rate)
    or on an object named `launcher`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and called_name(node.func) in LAUNCHER_CALLS:
            owner = node.func.value if isinstance(node.func, ast.Attribute) else None
            if called_name(node.func) in ("create_launcher", "learning_rate") or (
                    owner is not None and "launcher" in ast.unparse(owner)):
                found.append(Site(node.func.end_lineno, f"launcher call {ast.unparse(node.func)}()"))
    return sorted(set(found), key=lambda site: (site.line, site.what))


def untagged_sites(source: str, recipe: bool = False) -> list[Site]:
    """The sites (and, in a recipe's folder, the launcher calls) without a tag."""
    tree = ast.parse(source)
    notes, lines = comments(source), source.splitlines()
    found = sites(tree) + (launcher_calls(tree) if recipe else [])
    return [site for site in found if not tagged(lines, notes, *statement_lines(tree, lines, site.line))]


def malformed_tags(source: str) -> list[int]:
    """Lines whose comment starts like a tag but is not one of the form `# Kind: text`."""
    return [line for line, comment in sorted(comments(source).items())
            if LOOKS_LIKE_A_TAG.match(comment) and not TAG.match(comment)]


def scanned_files() -> list[pathlib.Path]:
    return sorted(path for pattern in ("common/**/*.py", "recipes/*/*.py") for path in REPO.glob(pattern)
                  if "__pycache__" not in path.parts)


def relative(path: pathlib.Path) -> str:
    return str(path.relative_to(REPO))


# -- a recipe folder's labels, and its README's list of them ------------------------------------------

def folder_files(folder: pathlib.Path) -> list[pathlib.Path]:
    """The recipe's own .py files: train.py first, then the others by name."""
    return sorted(folder.glob("*.py"), key=lambda path: (path.name != "train.py", path.name))


def folder_labels(folder: pathlib.Path) -> list[tuple[str, str]]:
    """(file name, tag text) of every label in the folder's .py files, file by file, line by line."""
    return [(path.name, tag.text) for path in folder_files(folder) for tag in tags(path.read_text())]


def render_section(recipe: str) -> str:
    """The README's list as it should be: each file once, then its labels."""
    labels = folder_labels(REPO / "recipes" / recipe)
    return "".join((f"- [`{file}`]({file})\n" if index == 0 or labels[index - 1][0] != file else "") + f"  - {text}\n"
                   for index, (file, text) in enumerate(labels))


FILE_ITEM = re.compile(r"- \[`?([\w./-]+)`?\]\(([^)\s]+)\)\s*$")
TAG_ITEM = re.compile(r"\s+- ((?:%s): .+?)\s*$" % "|".join(KINDS))


def readme_section(readme: pathlib.Path) -> str:
    """The section's text up to its first subsection."""
    text = readme.read_text()
    match = re.search(rf"^## {SECTION}\n(.*?)(?=^##+ |\Z)", text, flags=re.M | re.S)
    assert match, f"{readme} has no '## {SECTION}' section"
    return match.group(1)


def listed_labels(readme: pathlib.Path) -> tuple[list[tuple[str, str]], list[str]]:
    """The section's list: (file, tag text) in order; and what is wrong with its form (an entry whose
    link is not the file it names, in the README's folder; a tag under no file)."""
    listing, problems, current = [], [], None
    for line in readme_section(readme).splitlines():
        if file_item := FILE_ITEM.match(line):
            current, link = file_item.groups()
            if link != current or not (readme.parent / current).is_file():
                problems.append(f"entry `{current}` links to {link}: name a file of the recipe's folder, "
                                "linked as itself")
        elif tag_item := TAG_ITEM.match(line):
            if current is None:
                problems.append(f"`{tag_item.group(1)}` is listed under no file")
            else:
                listing.append((current, tag_item.group(1)))
    return listing, problems


def readme_problems(folder: pathlib.Path, root: pathlib.Path = REPO) -> list[str]:
    """What keeps folder/README.md's section from listing exactly the folder's labels, in order, and
    from linking to the library's launcher API."""
    listing, problems = listed_labels(folder / "README.md")
    labels = folder_labels(folder)
    problems += [f"missing: `{file}`: {text}" for file, text in labels if (file, text) not in listing]
    problems += [f"stale: `{file}`: {text} is no label of that file" for file, text in listing
                 if (file, text) not in labels]
    if not problems and listing != labels:
        problems.append("the list holds the folder's labels in another order, or one twice")
    section = readme_section(folder / "README.md")
    if f"]({LIBRARY_LINK})" not in section:
        problems.append(f"no link to the library's launcher API ({LIBRARY_LINK})")
    library = root / LIBRARY_DOC
    if not library.is_file() or not re.search(r"^## Launchers\s*$", library.read_text(), flags=re.M):
        problems.append(f"{LIBRARY_DOC} has no `## Launchers` section for the link to land on")
    return problems


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


def test_the_launcher_interface_is_a_distributed_line_in_a_recipe():
    source = ("def main(args):\n    launcher = create_launcher(args.launcher)\n"
              "    with launcher.scope():\n        rate = training.learning_rate(1.0, launcher, True, 0)\n"
              "    data = launcher.distribute_dataset(make, 8)\n    share = launcher.eval_share(10)\n"
              "    shard = launcher.input_shard(8)\n    launcher.barrier()\n    other.scope()\n")
    found = [site.what for site in untagged_sites(source, recipe=True)]
    assert found == ["launcher call create_launcher()", "launcher call launcher.scope()",
                     "launcher call training.learning_rate()", "launcher call launcher.distribute_dataset()",
                     "launcher call launcher.eval_share()", "launcher call launcher.input_shard()",
                     "launcher call launcher.barrier()"]
    assert untagged_sites(source) == []  # outside a recipe's folder these are the library's own calls


def test_a_tag_is_written_one_way():
    assert malformed_tags("x = 1  # Distributed: fine\n# Horovod: fine too\ny = 2\n") == []
    assert malformed_tags("x = 1  # distributed: lower case\ny = 2  #Horovod - a dash\nz = 3  # Strategy:\n") \
        == [1, 2, 3]
    assert malformed_tags("x = 1  # a distributed run: not a tag\n") == []


def test_every_tag_of_the_shared_code_and_the_recipes_is_written_one_way():
    problems = [f"{relative(path)}:{line}: write it `# Distributed: text` (or Horovod:, Strategy:)"
                for path in scanned_files() for line in malformed_tags(path.read_text())]
    assert not problems, "\n".join(problems)


def test_every_launcher_call_in_a_train_script_is_tagged():
    problems = [f"{relative(path)}:{site.line}: {site.what} has no `# Distributed:` label"
                for path in sorted(REPO.glob("recipes/*/train.py"))
                for site in untagged_sites(path.read_text(), recipe=True)]
    assert not problems, "\n".join(problems)


def test_mnist_cnn_shows_its_distributed_lines():
    path = REPO / "recipes" / "mnist-cnn" / "train.py"
    tree = ast.parse(path.read_text())
    calls = {called_name(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert {"create_launcher", "scope", "learning_rate", "distribute_dataset", "eval_share"} <= calls
    assert len(tags(path.read_text())) >= 5


def make_recipe(root: pathlib.Path, train: str, listed: str) -> pathlib.Path:
    folder = root / "recipes" / "x"
    folder.mkdir(parents=True, exist_ok=True)
    (root / "docs").mkdir(exist_ok=True)
    (root / LIBRARY_DOC).write_text("# The library\n\n## Launchers\n\nText.\n")
    (folder / "train.py").write_text(train)
    (folder / "data.py").write_text("x = 1  # Distributed: c\n")
    (folder / "README.md").write_text(f"# x\n\n## {SECTION}\n\nText.\n\n{listed}\nInside: [the API]({LIBRARY_LINK}).\n"
                                      "\n## Performance\n  - Distributed: not this section\n")
    return folder


def test_the_readme_list_check_fails_when_a_label_or_a_bullet_is_added(tmp_path):
    train = "a = 1  # Distributed: a\n# Horovod: b\nb = 2\n"
    listed = ("- [`train.py`](train.py)\n  - Distributed: a\n  - Horovod: b\n"
              "- [`data.py`](data.py)\n  - Distributed: c\n")
    assert readme_problems(make_recipe(tmp_path, train, listed), tmp_path) == []
    # A label without a bullet, a bullet without a label, another order, a bad link, no library section.
    folder = make_recipe(tmp_path, train + "c = 3  # Distributed: new\n", listed)
    assert readme_problems(folder, tmp_path) == ["missing: `train.py`: Distributed: new"]
    folder = make_recipe(tmp_path, train, listed + "  - Distributed: gone\n")
    assert readme_problems(folder, tmp_path) == ["stale: `data.py`: Distributed: gone is no label of that file"]
    swapped = listed.replace("  - Distributed: a\n  - Horovod: b", "  - Horovod: b\n  - Distributed: a")
    folder = make_recipe(tmp_path, train, swapped)
    assert readme_problems(folder, tmp_path) == ["the list holds the folder's labels in another order, or one twice"]
    folder = make_recipe(tmp_path, train, listed.replace("](data.py)", "](../../common/data.py)"))
    assert len(readme_problems(folder, tmp_path)) == 1
    (tmp_path / LIBRARY_DOC).write_text("# The library\n")
    assert readme_problems(folder.parent / "x", tmp_path)[-1].startswith(f"{LIBRARY_DOC} has no")


@pytest.mark.parametrize("recipe", recipes_with_train())
def test_the_readme_lists_exactly_the_labels_of_its_folder(recipe):
    problems = readme_problems(REPO / "recipes" / recipe)
    assert not problems, (f"recipes/{recipe}/README.md, '## {SECTION}':\n" + "\n".join(problems)
                          + f"\n(`python tests/unit/test_distributed_tags.py {recipe}` prints the current list)")


if __name__ == "__main__":
    for name in sys.argv[1:] or recipes_with_train():
        print(render_section(name), end="")
