"""A recipe carried away, as docs/starting.md tells it: recipes/mnist-cnn copied alone into an empty folder (no
common/, tools/ or stacks/ beside it), a fresh venv in which this repository is not installed (no editable
install, no path to it), the library and the folder's requirements installed with the docs' two commands,
and then, from that folder alone:

1. train on one device;
2. train multiworker with the library's process launcher (`python -m tf_recipes.operations.spawn`);
3. predict with the export (predict.py);
4. a SLURM script of launch/ runs its steps from the folder (srun stood in for: it records what it starts);
5. the image builds with the folder as the whole build context, on the CPU base image, and trains.

Nothing is downloaded: the venv is made without pip and gets the packages of the venv running the tests
(pip and setuptools among them), hard-linked, all but this repository's own distribution, and pip runs
with PIP_NO_INDEX. One venv and one image serve
every step.
"""
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import sysconfig

import pytest

from commands.containers import LIBRARY_SOURCES
from helpers import REPO, assert_ok, read_results, run_invoke

pytestmark = pytest.mark.slow
RECIPE = "mnist-cnn"
TAG = "tf-recipes/copied-mnist-cnn:test"
OWN = ("tf_recipes", "__editable__", "_tf_recipes", "tf-recipes")  # this repository's install in the test venv


# docs/starting.md's two lines, run in the copied folder with the checkout's path for /path/to/tf-recipes.
MAKE_WHEEL = "pip wheel --no-deps -w wheels /path/to/tf-recipes"
INSTALL = "pip install --find-links wheels -r requirements.txt"


def documented(*lines: str) -> list[str]:
    """The lines, each asserted to be a line of docs/starting.md's copy-out section."""
    section = (REPO / "docs" / "starting.md").read_text().split("\n## Copying a recipe out of the repository\n")[1]
    shown = section.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    missing = [line for line in lines if line not in shown]
    assert not missing, f"docs/starting.md shows {missing} no more: change it here too"
    return list(lines)


def seed_site_packages(venv: pathlib.Path) -> None:
    """The test venv's third-party packages, hard-linked into `venv` (nothing is copied or downloaded), but
    none of this repository's: not its distribution, not the editable finder that maps tf_recipes to common/."""
    source = pathlib.Path(sysconfig.get_paths()["purelib"])
    target = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    for entry in source.iterdir():
        if entry.name.startswith(OWN) or (target / entry.name).exists() or entry.name == "__pycache__":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, target / entry.name, symlinks=True, copy_function=os.link)
        else:
            os.link(entry, target / entry.name, follow_symlinks=False)


@pytest.fixture(scope="module")
def carried(tmp_path_factory):
    """(the copied recipe folder, the environment that runs in its venv), after the docs' two commands."""
    root = tmp_path_factory.mktemp("carried")
    checkout = root / "tf-recipes"  # where the user's tf-recipes checkout is: only what the wheel is built from
    checkout.mkdir()
    for name in LIBRARY_SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, checkout / name)
    folder = root / "my-project" / RECIPE
    shutil.copytree(REPO / "recipes" / RECIPE, folder,
                    ignore=shutil.ignore_patterns("__pycache__", "wheels", "data", "results", "checkpoints"))
    venv = root / "venv"
    assert_ok(subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], capture_output=True,
                             text=True, timeout=300))
    seed_site_packages(venv)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv), PIP_NO_INDEX="1",
               TF_CPP_MIN_LOG_LEVEL="2", HOME=str(root))

    def python(*code):
        return subprocess.run([str(venv / "bin" / "python"), "-c", *code], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=300)

    for name in ("tf_recipes", "common", "tools", "commands"):  # nothing of this repository is importable
        assert python(f"import {name}").returncode != 0, f"{name} is importable in the fresh venv"
    for line in documented(MAKE_WHEEL, INSTALL):
        words = shlex.split(line.replace("/path/to/tf-recipes", str(checkout)))
        if words[:2] == ["pip", "wheel"]:  # offline: the venv's setuptools builds it, none is downloaded
            words.insert(2, "--no-build-isolation")
        assert_ok(subprocess.run([str(venv / "bin" / "python"), "-m", *words], cwd=folder, env=env,
                                 capture_output=True, text=True, timeout=600))
    installed = python("import tf_recipes, importlib.metadata as m; print(tf_recipes.__file__); "
                       "print(m.distribution('tf-recipes').read_text('direct_url.json') or '')")
    assert_ok(installed)
    assert installed.stdout.startswith(str(venv)) and '"editable": true' not in installed.stdout, installed.stdout
    return folder, env


def run_in(folder, env, *argv, timeout=900):
    return subprocess.run(list(argv), cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_copied_folder_trains_predicts_and_runs_its_slurm_script(carried, tmp_path):
    folder, env = carried
    # 1. one device
    assert_ok(run_in(folder, env, "python", "train.py", "--synthetic", "--max-steps", "3", "--log-every", "1"))
    single = folder / "results" / RECIPE
    assert read_results(single)["steps"] == 3
    # 2. two workers, started by the library's process launcher
    assert_ok(run_in(folder, env, "python", "-m", "tf_recipes.operations.spawn", "--nproc", "2", "--", "python",
                     "train.py", "--launcher", "multiworker", "--synthetic", "--max-steps", "3", "--batch-size", "16",
                     "--results-dir", "results/multiworker"))
    assert read_results(folder / "results" / "multiworker")["replicas"] == 2
    # 3. predict with the export
    from PIL import Image

    Image.new("L", (28, 28), 0).save(tmp_path / "digit.png")
    assert_ok(run_in(folder, env, "python", "predict.py", "--model", str(single / "export"), "--input",
                     str(tmp_path / "digit.png"), "--out", str(tmp_path / "predictions")))
    assert len((tmp_path / "predictions" / "predictions.csv").read_text().splitlines()) == 2  # header, one image
    # 4. a SLURM script from launch/, submitted from the folder: it parses, and what it starts is here
    script = folder / "launch" / "slurm-multiworker.sbatch"
    assert_ok(run_in(folder, env, "bash", "-n", str(script)))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$SRUN_ARGS"\n')
    (fake / "srun").chmod(0o755)
    slurm = {**env, "PATH": f"{fake}{os.pathsep}{env['PATH']}", "SRUN_ARGS": str(tmp_path / "srun.args"),
             "SLURM_SUBMIT_DIR": str(folder), "SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "1"}
    assert_ok(run_in(folder, slurm, "bash", str(script)))
    started = (tmp_path / "srun.args").read_text().splitlines()
    program = started[started.index("python") + 1]
    assert program == "./train.py" and (folder / program).is_file(), started
    results = started[started.index("--results-dir") + 1]
    assert pathlib.Path(results).is_relative_to(folder) and pathlib.Path(results).is_dir()


@pytest.mark.docker
@pytest.mark.full  # the night's: every push builds and trains in mnist-cnn's image (test_apptainer.py)
def test_the_copied_folder_builds_its_image_alone_and_trains_in_it(carried, cpu_base):
    """`docker build` with the copied folder as the whole context, as `invoke build --base cpu` builds the
    recipe in the repository (its flags, the same Dockerfile), then one short training in the image."""
    folder, _ = carried
    dry = run_invoke("build", RECIPE, "--base", "cpu", "--dry")
    assert_ok(dry)
    line = next(line[2:] for line in dry.stdout.splitlines() if " build " in line and "DOCKER_BUILDKIT=1" in line)
    words = shlex.split(line)
    assert words[0] == "DOCKER_BUILDKIT=1", words
    env, argv = {"DOCKER_BUILDKIT": "1"}, words[1:]
    argv[argv.index("-f") + 1] = str(folder / "Dockerfile")
    argv[argv.index("-t") + 1] = TAG
    argv[-1] = str(folder)
    try:
        assert_ok(subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=2400))
        trained = subprocess.run([argv[0], "run", "--rm", TAG, "python", f"recipes/{RECIPE}/train.py", "--synthetic",
                                  "--max-steps", "2", "--results-dir", "/tmp/results"],
                                 capture_output=True, text=True, timeout=900)
        assert_ok(trained)
        assert "Traceback" not in trained.stderr
    finally:
        subprocess.run([argv[0], "rmi", "-f", TAG], capture_output=True)
