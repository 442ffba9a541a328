"""The library as pip installs it: `pip install .` (not editable) into a fresh venv puts one top-level name,
tf_recipes, into site-packages (never common, commands or tools), with the stacks' constraints inside."""
import os
import pathlib
import shutil
import subprocess
import sys

from commands.containers import LIBRARY_SOURCES, build_library_wheel_command
from helpers import REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def built_wheel(source: pathlib.Path, wheels: pathlib.Path) -> pathlib.Path:
    """The wheel `invoke build` makes of `source` (the same builder), in `wheels`."""
    argv, env = build_library_wheel_command(str(source), str(wheels), python=sys.executable)
    built = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("*.whl")
    return wheel


def test_pip_install_puts_only_tf_recipes_into_a_fresh_venv(tmp_path):
    source = tmp_path / "tf-recipes"  # a copy, so the build leaves nothing in the checkout
    source.mkdir()
    for name in LIBRARY_SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    # pip install . builds the wheel, then installs it: the two steps apart, since the fresh venv has no setuptools.
    wheel = built_wheel(source, tmp_path / "wheels")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                                "--quiet", "--no-deps", "--no-index", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    site = pathlib.Path(next(venv.glob("lib/python*/site-packages")))
    dist_info = next(site.glob("tf_recipes-*.dist-info"))
    top_level = {path.split("/")[0] for path in
                 (line.split(",")[0] for line in (dist_info / "RECORD").read_text().splitlines())
                 if not path.startswith(("..", dist_info.name))}
    assert top_level == {"tf_recipes"}, top_level
    assert (dist_info / "top_level.txt").read_text().split() == ["tf_recipes"]
    assert not {"common", "commands", "tools"} & {path.name for path in site.iterdir()}
    assert (site / "tf_recipes" / "stacks" / "ngc-25.02.txt").read_text() == \
        (REPO / "stacks" / "ngc-25.02.txt").read_text()
    version = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sys, tf_recipes; print(tf_recipes.__version__, 'tensorflow' in sys.modules)"],
                             capture_output=True, text=True, timeout=60)
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert version.stdout.split() == [declared, "False"], version.stderr
    # Built again a while later (other file times), the wheel is the same byte for byte: an image build that
    # mounts it keeps its cached install layer until the library's sources change.
    for path in source.rglob("*"):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    assert built_wheel(source, tmp_path / "again").read_bytes() == wheel.read_bytes()

