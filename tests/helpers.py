"""Test helpers: run what a user runs (invoke, train scripts), read what it wrote, import a
recipe's modules (recipe_module), and make a shared thing once among processes (made_once)."""
import contextlib
import fcntl
import importlib.abc
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tf_recipes.contract import RESULT_FIELDS  # noqa: E402,F401 (what every results.json must hold)
from tf_recipes.contract import STACK_LAUNCHERS  # noqa: E402


def installed_stack() -> str:
    """The stack of the TensorFlow beside the Python running the tests (stacks/NAME.txt): its CUDA build
    or tensorflow-cpu, as `invoke run --runtime local` reads it."""
    from tasks import host
    return host.installed_stack()


def stack_launchers(*launchers: str) -> list[str]:
    """Those of `launchers` that the installed stack has (no horovod on the current stack)."""
    return [name for name in launchers if name in STACK_LAUNCHERS[installed_stack()]]


def run_invoke(*args, timeout=900, env=None) -> subprocess.CompletedProcess:
    """`invoke ARGS` from the repository root, as a user types it; output captured as text."""
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def run_python(*args, timeout=900, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})})


def read_results(results_dir) -> dict:
    with open(os.path.join(results_dir, "results.json")) as handle:
        return json.load(handle)


def results_beside(data_dir: pathlib.Path) -> pathlib.Path:
    """A results folder next to a data folder: train.py refuses one inside its --data-dir."""
    return data_dir.with_name(data_dir.name + "-results")


def assert_ok(process: subprocess.CompletedProcess) -> None:
    assert process.returncode == 0, (
        f"exit {process.returncode}\n--- stdout ---\n{process.stdout[-4000:]}\n"
        f"--- stderr ---\n{process.stderr[-6000:]}")


# ci/test.sh's background builds (ci/prepare-images.sh) take the same locks, with flock(1).
LOCKS = REPO / "build" / "locks"


@contextlib.contextmanager
def made_once(name: str):
    """Hold build/locks/NAME.lock while making NAME (an image, a SIF): the two pytest workers and
    ci/prepare-images.sh each make it under the lock, so one builds and the others find it built."""
    LOCKS.mkdir(parents=True, exist_ok=True)
    with open(LOCKS / f"{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def horovod_available() -> bool:
    return subprocess.run([sys.executable, "-c", "import horovod.tensorflow"], capture_output=True).returncode == 0


# -- a recipe's modules ------------------------------------------------------------------------------

def recipe_module_name(recipe: str, name: str) -> str:
    """The name recipes/RECIPE/NAME.py is imported under: `cityscapes_unet_data` for ("cityscapes-unet",
    "data"). Recipes share file names (train.py, benchmark_input.py), so the recipe is part of it."""
    return f"{recipe.replace('-', '_')}_{name}"


def recipe_module(recipe: str, name: str):
    """recipes/RECIPE/NAME.py, imported once under recipe_module_name(RECIPE, NAME).

    The recipe's scripts import their sibling modules by plain name (`import input_pipeline`,
    `from labels import NUM_CATEGORIES`). While the module executes, such an import gets the
    sibling through recipe_module too, so a test and the recipe share one module object (a test's
    monkeypatch is seen by the recipe), and no plain name like `train` or `data` is left in
    sys.modules for another recipe to pick up. The recipe folder is on sys.path only meanwhile.
    (An import of a sibling inside a function, run later, is not covered: run such code as a script.)"""
    module_name = recipe_module_name(recipe, name)
    if module_name in sys.modules:
        return sys.modules[module_name]
    path = RECIPES / recipe / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # before it runs: dataclasses and circular imports look it up
    siblings = _Siblings(recipe)
    saved_path = list(sys.path)
    sys.path.insert(0, str(path.parent))
    sys.meta_path.insert(0, siblings)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    finally:
        sys.meta_path.remove(siblings)
        sys.path[:] = saved_path  # the scripts put their folder (and the repository) first themselves
    return module


class _Loaded(importlib.abc.Loader):
    """Hands the import system a module recipe_module has loaded already."""

    def __init__(self, module):
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        pass


class _Siblings(importlib.abc.MetaPathFinder):
    """`import NAME` of one of the recipe's own modules -> recipe_module(recipe, NAME)."""

    def __init__(self, recipe: str):
        self.recipe = recipe
        self.names = {path.stem for path in (RECIPES / recipe).glob("*.py")}

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names:
            return None
        module = recipe_module(self.recipe, fullname)
        return importlib.util.spec_from_file_location(module.__name__, module.__file__, loader=_Loaded(module))
