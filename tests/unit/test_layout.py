"""The house rules, checked on the code itself: commands/ is pure, tf_recipes.contract and
commands.choices import nothing, every name of the contract is used inside a training image (the
host side's own names are commands.choices'), no import loops (lazy imports included), every
package's docstring names what it holds, no constant of either is written twice, and no long function
but the ones kept on purpose."""
import ast
import pathlib

import pytest

from helpers import REPO

PACKAGES = ("common", "tools", "commands", "ci", "tasks")
# The folder whose modules install under another name: common/ is the library tf_recipes (pyproject.toml).
IMPORT_NAMES = {"common": "tf_recipes"}
# Modules that touch the world; a builder in commands/ may use none of them.
IMPURE_MODULES = {"subprocess", "shutil", "socket", "tempfile", "glob", "pathlib", "time", "datetime", "io",
                  "urllib", "http", "requests", "docker", "multiprocessing", "threading", "signal", "platform",
                  "sys", "invoke"}
IMPURE_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}
IMPURE_OS = {"environ", "getenv", "putenv", "listdir", "scandir", "walk", "makedirs", "mkdir", "remove", "unlink",
             "rmdir", "rename", "replace", "system", "popen", "chmod", "chdir", "getcwd", "stat", "kill", "getpid",
             "getuid", "getgid", "cpu_count", "getloadavg", "exists", "isfile", "isdir", "getmtime", "getsize",
             "abspath", "realpath", "expanduser", "expandvars", "access"}
# Functions over LONG lines (in the packages and in recipes/*/*.py) that read better whole, and why.
LONG = 60
KEPT_LONG = {
    "commands/launch.py::build_launch": "one branch per way of starting the processes, read side by side as a table",
    "commands/containers.py::build_docker_run_command": "NVIDIA's docker run flags, one by one in one place",
}


def project_modules() -> dict[str, pathlib.Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            parts = (IMPORT_NAMES.get(parts[0], parts[0]), *parts[1:])
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = project_modules()


def imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Project modules a module imports anywhere (at the top, in functions, lazily)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                names.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {name for name in names if name in MODULES}


def import_graph() -> dict[str, set[str]]:
    return {name: imported(ast.parse(path.read_text()), name, path.name == "__init__.py")
            for name, path in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module, or a module importing itself (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def impurities(source: str, where: str) -> list[str]:
    """What in a module's source reads or changes the world: impure imports, calls and os functions."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                top = module.split(".")[0]
                if top in IMPURE_MODULES:
                    found.append(f"{where}:{node.lineno}: imports {module}")
                elif top in ("tf_recipes", "tools", "ci", "tasks") and module != "tf_recipes.contract" \
                        and not (module == "tf_recipes" and [a.name for a in node.names] == ["contract"]):
                    found.append(f"{where}:{node.lineno}: imports {module} (only tf_recipes.contract is pure)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IMPURE_CALLS:
            found.append(f"{where}:{node.lineno}: calls {node.func.id}()")
        elif isinstance(node, ast.Attribute) and node.attr in IMPURE_OS:
            owner = node.value
            chain = owner.id if isinstance(owner, ast.Name) else (
                f"{owner.value.id}.{owner.attr}"
                if isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name) else "")
            if chain in ("os", "os.path"):
                found.append(f"{where}:{node.lineno}: uses {chain}.{node.attr}")
    return found


def test_commands_build_and_run_nothing():
    found = []
    for path in sorted((REPO / "commands").glob("*.py")):
        found += impurities(path.read_text(), str(path.relative_to(REPO)))
    assert found == [], "commands/ must stay pure (values in; argv, text or dicts out):\n" + "\n".join(found)


@pytest.mark.parametrize("source, what", [
    ("import subprocess\nsubprocess.run(['ls'])", "imports subprocess"),
    ("def f():\n    with open('x', 'w') as h:\n        h.write('y')", "calls open()"),
    ("import os\nHOME = os.environ['HOME']", "uses os.environ"),
    ("import os\ndef f(p):\n    return os.path.exists(p)", "uses os.path.exists"),
    ("import os\ndef f(p):\n    return os.listdir(p)", "uses os.listdir"),
    ("def f():\n    from tasks import host\n    return host.ROOT", "imports tasks"),
    ("from tf_recipes.launchers import create_launcher", "imports tf_recipes.launchers"),
])
def test_the_purity_check_catches_each_kind_of_impurity(source, what):
    found = impurities(source, "probe.py")
    assert found and what in found[0], found


@pytest.mark.parametrize("module", ["common/contract.py", "commands/choices.py"])
def test_the_contract_and_the_host_choices_import_nothing(module):
    tree = ast.parse((REPO / module).read_text())
    assert not [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


# -- tf_recipes.contract holds what a training image uses; the host side's own names are commands.choices' ---

IMAGE_SIDE = ("common", "recipes", "tools")  # what runs inside a recipe's image


def defined_names(tree: ast.Module) -> list[str]:
    """The names a module defines at its top: assignments, functions and classes."""
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [target.id for target in targets if isinstance(target, ast.Name)]
    return names


def names_used(tree: ast.AST) -> set[str]:
    """Every name a source reads: bare names, attributes (contract.X) and imported names."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            used |= {alias.name for alias in node.names}
    return used


def contract_names_unused_in_images(contract_source: str, image_sources: list[str]) -> list[str]:
    """The names the contract defines that no image-side source uses, and that no definition of the
    contract which is itself used there needs (STACK_FIRST_TENSORFLOW, through stack_of_tensorflow)."""
    tree = ast.parse(contract_source)
    used = set().union(*(names_used(ast.parse(source)) for source in image_sources))
    bodies = {node.name: names_used(node) for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    defined = defined_names(tree)
    kept, todo = set(), [name for name in defined if name in used]
    while todo:
        name = todo.pop()
        if name not in kept:
            kept.add(name)
            todo += [needed for needed in bodies.get(name, ()) if needed in defined]
    return [name for name in defined if name not in kept]


def test_every_name_of_the_contract_is_used_inside_a_training_image():
    sources = [path.read_text() for top in IMAGE_SIDE for path in sorted((REPO / top).rglob("*.py"))
               if path != REPO / "common" / "contract.py" and "__pycache__" not in path.parts]
    unused = contract_names_unused_in_images((REPO / "common" / "contract.py").read_text(), sources)
    assert unused == [], ("no module of common/, recipes/ or tools/ uses these names of common/contract.py: "
                          "what only tasks/, commands/ or ci/ use belongs in commands/choices.py")


def test_the_unused_name_check_sees_host_only_names_and_what_a_used_function_needs():
    contract = ("A = 1\nB = (1, 2)\nFIRST = {}\n\n\ndef pick(x):\n    return FIRST[x]\n\n\n"
                "class Oops(Exception):\n    pass\n")
    assert contract_names_unused_in_images(contract, ["from tf_recipes.contract import A\n", "contract.pick(1)\n"]) \
        == ["B", "Oops"]


def test_no_import_loops_lazy_imports_included():
    graph = import_graph()
    assert graph["tf_recipes.training"] >= {"tf_recipes.launchers", "tf_recipes.contract"}  # the scan sees imports
    assert "tf_recipes.contract" in graph["tf_recipes.cli"]
    assert cycles(graph) == []


def test_the_loop_finder_finds_a_loop():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", ["common", "tools", "commands", "ci", "ci/nightly", "ci/bench", "tasks"])
def test_each_package_docstring_names_everything_it_holds(package):
    folder = REPO / package
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    held = [p for p in folder.iterdir()
            if p.is_file() and p.name != "__init__.py" and p.suffix in (".py", ".sh", ".yaml")]
    held += [p for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    assert held
    missing = [p.name for p in held if p.stem not in docstring and p.name not in docstring]
    assert missing == [], f"{package}/__init__.py does not say that it holds {', '.join(missing)}"


def test_no_constant_of_the_contract_is_written_again():
    from commands import choices
    from tf_recipes import contract

    constants = {name: frozenset(value) for module in (contract, choices) for name, value in vars(module).items()
                 if name.isupper() and isinstance(value, (tuple, frozenset)) and len(value) > 1}
    statuses = {value for name, value in vars(contract).items() if name.startswith("EXIT_") and isinstance(value, int)
                and value > 4}
    found = []
    for name, path in MODULES.items():
        if name in ("tf_recipes.contract", "commands.choices"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts \
                    and all(isinstance(e, ast.Constant) for e in node.elts):
                values = frozenset(e.value for e in node.elts)
                found += [f"{path.relative_to(REPO)}:{node.lineno}: {c}" for c, v in constants.items() if values == v]
            elif isinstance(node, ast.Constant) and node.value in statuses and not isinstance(node.value, bool):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: exit status {node.value}")
    assert found == [], "write these as tf_recipes.contract's names:\n" + "\n".join(found)


def test_functions_are_short_but_for_the_ones_kept_whole():
    recipes = sorted((REPO / "recipes").glob("*/*.py"))
    assert any(path.name == "train.py" for path in recipes)  # the recipes are read too
    long = {}
    for path in [*MODULES.values(), *recipes]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONG:
                    long[f"{path.relative_to(REPO)}::{node.name}"] = lines
    assert set(long) - set(KEPT_LONG) == set(), f"over {LONG} lines: {long}"
    assert set(KEPT_LONG) <= set(long), "a kept long function is short now: drop it from KEPT_LONG"


def reached_from_recipe_scripts() -> set[str]:
    """The library's modules (common/, tf_recipes) some recipe script (train.py, predict.py,
    benchmark_input.py, ...) imports, directly or through another module (the recipe's own modules included)."""
    todo = []
    for train in sorted((REPO / "recipes").glob("*/*.py")):
        folder = train.parent
        own = {path.stem: path for path in folder.glob("*.py")}
        seen_own, pending = set(), [train]
        while pending:
            path = pending.pop()
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                    if isinstance(node, ast.ImportFrom) else [])
                for name in names:
                    if name in MODULES and name.startswith("tf_recipes."):
                        todo.append(name)
                    elif name in own and name not in seen_own:
                        seen_own.add(name)
                        pending.append(own[name])
    return library_closure(todo)


def library_closure(names) -> set[str]:
    """`names` and every library module they import, directly or not."""
    graph, closure, todo = import_graph(), set(), list(names)
    while todo:
        name = todo.pop()
        if name not in closure:
            closure.add(name)
            todo += [m for m in graph[name] if m.startswith("tf_recipes.")]
    return closure


def started_as_programs() -> set[str]:
    """The library's modules started as `python -m tf_recipes.NAME`: by the builders in commands/ (spawn; the
    preflight through commands.choices' names) and by the recipes' Dockerfiles (constraints)."""
    import re

    from commands import choices

    texts = [path.read_text() for path in [*sorted((REPO / "commands").glob("*.py")),
                                           *sorted((REPO / "recipes").glob("*/Dockerfile"))]]
    found = {value for value in vars(choices).values() if isinstance(value, str) and value in MODULES}
    for text in texts:
        found |= set(re.findall(r"""-m["', ]+(tf_recipes\.\w+)""", text))
    return {name for name in found if name in MODULES}


def test_common_holds_only_what_the_recipes_import_or_start():
    held = {name for name in MODULES if name.startswith("tf_recipes.")}
    reached = reached_from_recipe_scripts()
    assert {"tf_recipes.training", "tf_recipes.launchers", "tf_recipes.contract", "tf_recipes.predicting",
            "tf_recipes.pipeline_bench"} <= reached
    started = started_as_programs()
    assert {"tf_recipes.spawn", "tf_recipes.preflight", "tf_recipes.constraints"} <= started
    closure = library_closure([*reached, *started])
    assert held - closure == set(), \
        ("no recipe script imports these, directly or not, and nothing starts them as `python -m`: the library "
         "(common/) holds only what recipes need; the host side goes to tasks/ or commands/")


def test_the_library_imports_nothing_of_the_host_side():
    found = [f"{MODULES[name].relative_to(REPO)} imports {other}" for name, others in import_graph().items()
             if name.startswith("tf_recipes") for other in others if not other.startswith("tf_recipes")]
    assert found == [], "the library (common/) must not import tasks/, commands/, ci/ or tools/:\n" + "\n".join(found)


# -- no launcher is told apart by its name outside common/launchers.py and the contract ------------------

NAMING_LAUNCHERS = ("common/launchers.py", "common/contract.py")  # implement the launchers, or define them
NAME_COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)


def launcher_name_comparisons(source: str, where: str) -> list[str]:
    """Every comparison (==, !=, in, not in, is, a match case) of anything with a launcher's name: a
    constant, a tuple, list or set of them (also through set() or frozenset()), or a module-level name
    bound to one of those. Iterating over names, dict keys, arguments and help texts compare nothing.
    A trait whose values include a launcher name (collective: "horovod") may be compared with it
    when the other side names the trait (`launcher_trait(name, "collective") == "horovod"`)."""
    from tf_recipes import contract

    names = set(contract.LAUNCHERS)
    trait_values = {}  # a launcher name -> the traits that have it as a value
    for traits in contract.LAUNCHER_TRAITS.values():
        for trait, value in traits.items():
            if isinstance(value, str) and value in names:
                trait_values.setdefault(value, set()).add(trait)
    tree = ast.parse(source)
    bound = {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
             for target in node.targets if isinstance(target, ast.Name)}

    def launcher_names(node, resolve=True) -> set[str]:
        if resolve and isinstance(node, ast.Name) and node.id in bound:
            return launcher_names(bound[node.id], resolve=False)
        if isinstance(node, ast.Constant):
            return {node.value} & names if isinstance(node.value, str) else set()
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return set().union(*(launcher_names(e, resolve) for e in node.elts))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args \
                and node.func.id in ("set", "frozenset", "tuple", "list"):
            return launcher_names(node.args[0], resolve)
        return set()

    def names_a_trait(node, traits: set[str]) -> bool:
        return any(isinstance(n, ast.Name) and n.id in traits or isinstance(n, ast.Attribute) and n.attr in traits
                   or isinstance(n, ast.Constant) and n.value in traits for n in ast.walk(node))

    def compared(found: set[str], other) -> set[str]:
        """The launcher names of `found` that are not values of a trait the other side names."""
        return {name for name in found if not names_a_trait(other, trait_values.get(name, set()))}

    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
                if isinstance(op, NAME_COMPARISONS):
                    hits += [(node.lineno, name, ast.unparse(node))
                             for name in compared(launcher_names(left), right) | compared(launcher_names(right), left)]
        elif isinstance(node, ast.Match):
            for case in node.cases:
                for value in ast.walk(case.pattern):
                    if isinstance(value, ast.MatchValue):
                        hits += [(value.lineno, name, f"match {ast.unparse(node.subject)}: case {ast.unparse(value)}")
                                 for name in compared(launcher_names(value.value), node.subject)]
    return sorted({f"{where}:{line}: {text} (compares with {name!r})" for line, name, text in hits})


@pytest.mark.parametrize("source", [
    'if launcher == "single":\n    pass',
    'ok = "horovod" != launcher',
    'ok = launcher in ("single", "mirrored")',
    'ok = launcher not in {"horovod", "multiworker"}',
    'ok = launcher in ["mirrored"]',
    'ok = launcher in frozenset({"single"})',
    'ok = 0 < count and self.launcher.name is "horovod"',
    'ok = a <= b == "multiworker"',
    'SINGLE = "single"\ndef f(launcher):\n    return launcher == SINGLE',
    'ONE_NODE = ("single", "mirrored")\ndef f(launcher):\n    return launcher not in ONE_NODE',
    'picked = [row for row in rows if row["launcher"] != "single"]',
    'rows.sort(key=lambda row: row["launcher"] == "single")',
    'match launcher:\n    case "horovod":\n        pass',
    'match launcher:\n    case "single" | "mirrored":\n        pass\n    case _:\n        pass',
    'match job:\n    case {"launcher": "multiworker"}:\n        pass',
    'ok = launcher.name == "horovod" and collective == "ring"',
])
def test_the_launcher_name_check_catches_each_form(source):
    assert launcher_name_comparisons(source, "probe.py"), source


@pytest.mark.parametrize("source", [
    'parser.add_argument("--launcher", choices=LAUNCHERS, default="single", help="single, mirrored or horovod")',
    'colour = {"single": "grey", "horovod": "green"}[launcher]',
    'for launcher in ("multiworker", "horovod"):\n    files.append(launcher)',
    'plan = build_launch(recipe, "horovod", gpus=8)',
    'ok = launcher == "auto" or name in LAUNCHERS',
    'ok = launcher_trait(launcher, "collective") == "horovod"',
    'ok = contract.LAUNCHER_TRAITS[launcher]["collective"] != "horovod"',
    'collective = launcher_trait(launcher, "collective")\nok = collective == "horovod"',
    'match launcher_trait(launcher, "collective"):\n    case "horovod":\n        pass',
    'ok = launcher_trait(launcher, "peers_from") == "mpi"',
])
def test_the_launcher_name_check_leaves_what_compares_no_name(source):
    assert launcher_name_comparisons(source, "probe.py") == []


def test_no_launcher_name_is_compared_outside_the_launchers_and_the_contract():
    paths = [path for package in (*PACKAGES, "recipes") for path in sorted((REPO / package).rglob("*.py"))]
    assert any(path.name == "train.py" for path in paths)  # the recipes are read too
    found = []
    for path in paths:
        where = str(path.relative_to(REPO))
        if where not in NAMING_LAUNCHERS:
            found += launcher_name_comparisons(path.read_text(), where)
    assert found == [], ("read a trait of tf_recipes.contract.LAUNCHER_TRAITS (launcher_trait(launcher, TRAIT)) "
                         "instead of comparing launcher names:\n" + "\n".join(found))
