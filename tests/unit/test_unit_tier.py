"""The unit tier stays fast in kind: no file in tests/unit is marked `docker` or `slow`, asks for
Horovod, or imports the modules that start and signal training jobs or run containers
(tests/integration/jobs.py, k8s_docker.py) or the test modules of another tier. Such a test belongs
in tests/recipes or tests/integration; `bash ci/test.sh --fast` runs tests/unit alone.

And the recipes tier needs nothing the set-up makes after .venv: ci/test.sh runs it with the unit tier
beside the rest of the set-up, before Horovod is built and while the Docker engine, the SLURM cluster
and Apptainer are being installed. So no file in tests/recipes is marked `docker`, asks for Horovod,
or imports what runs containers or SLURM jobs (docker_images.py, k8s_docker.py) or an integration test
module."""
import ast
import pathlib

UNIT = pathlib.Path(__file__).resolve().parent
TESTS = UNIT.parent
SLOW_MARKERS = {"docker", "slow"}
JOB_MODULES = {"jobs", "k8s_docker"}
HOROVOD_FIXTURE = "require_horovod"  # training in several processes


def other_tiers_test_modules() -> set[str]:
    return {path.stem for tier in ("recipes", "integration") for path in (TESTS / tier).rglob("test_*.py")}


def problems(source: str) -> list[str]:
    """What in one file's source does not belong in the unit tier."""
    found = []
    foreign = JOB_MODULES | other_tiers_test_modules()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in SLOW_MARKERS and name_of(node.value) == "mark":
            found.append(f"line {node.lineno}: marked {node.attr}")
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: imports {alias.name}" for alias in node.names
                      if alias.name.split(".")[0] in foreign]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] in foreign:
            found.append(f"line {node.lineno}: imports {node.module}")
        elif (isinstance(node, ast.arg) and node.arg == HOROVOD_FIXTURE) or (
                isinstance(node, ast.Call) and name_of(node.func) in ("getfixturevalue", "usefixtures")
                and any(isinstance(arg, ast.Constant) and arg.value == HOROVOD_FIXTURE for arg in node.args)):
            found.append(f"line {node.lineno}: asks for Horovod")
    return found


def name_of(node) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)


def test_the_check_finds_what_does_not_belong():
    assert problems("import pytest\npytestmark = [pytest.mark.docker, pytest.mark.slow]\n") == [
        "line 2: marked docker", "line 2: marked slow"]
    assert problems("from pytest import mark\n@mark.slow\ndef test_x(): pass\n") == ["line 2: marked slow"]
    assert problems("from jobs import Job\nimport k8s_docker\n") == [
        "line 1: imports jobs", "line 2: imports k8s_docker"]
    assert problems("from test_mnist_launchers import load_weights\n") == ["line 1: imports test_mnist_launchers"]
    assert problems("def test_x(require_horovod): pass\n") == ["line 1: asks for Horovod"]
    assert problems("def test_x(request):\n    request.getfixturevalue('require_horovod')\n") == [
        "line 2: asks for Horovod"]
    assert problems("import pytest\npytestmark = pytest.mark.usefixtures('require_horovod')\n") == [
        "line 2: asks for Horovod"]
    assert problems("import pytest\nfrom helpers import run_invoke\n@pytest.mark.parametrize('x', [1])\n"
                    "def test_x(x, tmp_path): run_invoke('run', 'mnist-cnn', '--dry')\n") == []


INTEGRATION = {path.stem for path in (TESTS / "integration").rglob("test_*.py")}
SET_UP_MODULES = {"docker_images", "k8s_docker"}


def needs_the_set_up(source: str) -> list[str]:
    """What in a recipes-tier file needs Horovod, a Docker engine or the SLURM cluster."""
    found = [problem for problem in problems(source) if "marked docker" in problem or "asks for Horovod" in problem]
    for node in ast.walk(ast.parse(source)):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        found += [f"line {node.lineno}: imports {name}" for name in names
                  if name.split(".")[0] in SET_UP_MODULES | INTEGRATION]
    return sorted(found, key=lambda line: int(line.split()[1].rstrip(":")))


def test_the_recipes_check_finds_what_needs_the_set_up():
    assert needs_the_set_up("import pytest\npytestmark = [pytest.mark.docker, pytest.mark.slow]\n") == [
        "line 2: marked docker"]
    assert needs_the_set_up("from docker_images import docker\nfrom test_slurm_cluster import slurm_cluster\n"
                            "from jobs import Job\n") == ["line 1: imports docker_images",
                                                         "line 2: imports test_slurm_cluster"]
    assert needs_the_set_up("def test_x(require_horovod): pass\n") == ["line 1: asks for Horovod"]


def test_no_recipes_test_needs_horovod_docker_or_slurm():
    files = sorted((TESTS / "recipes").rglob("*.py"))
    assert len(files) > 10
    found = {str(path.relative_to(TESTS)): needs_the_set_up(path.read_text()) for path in files}
    assert not {name: lines for name, lines in found.items() if lines}, \
        "ci/test.sh runs tests/recipes before the set-up ends: move these to tests/integration"


def test_no_unit_test_is_marked_slow_or_docker_or_runs_jobs():
    files = sorted(UNIT.rglob("*.py"))
    assert len(files) > 10
    found = {str(path.relative_to(TESTS)): problems(path.read_text()) for path in files}
    assert not {name: lines for name, lines in found.items() if lines}, \
        "move these to tests/recipes or tests/integration"
