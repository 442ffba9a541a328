"""A recipe of one's own, started the two ways people start one:

- `invoke new my-cnn --from mnist-cnn --add-to-nightly` in a copy of this repository: the new recipe
  trains the same model under all four launchers on the host, builds its CPU image and trains in it,
  passes `invoke launch-files --check` and is in `invoke nightly --dry`;
- a recipe folder copied out of the repository: tests/integration/test_copy_out.py.

And the README's two journeys, run as written in a copy of the repository: "Start your own recipe"
(invoke new, a folder of photos, multiworker, predict) and "Use the trained model" (your own images
and masks, cityscapes-unet, predict).
"""
import csv
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest

from ci.nightly import matrix as nightly
from helpers import REPO, assert_ok, read_results, recipe_module
from tf_recipes import image_folder
from image_folder_data import CLASSES, write_image_folder
from test_mnist_launchers import WEIGHT_ATOL, load_weights

pytestmark = pytest.mark.slow
NAME = "my-cnn"
PARITY = ["--synthetic", "--max-steps", "10", "--no-dropout", "--log-every", "5", "--warmup-steps", "0"]
LAUNCHERS = {"single": ["--launcher", "single", "--", "--batch-size", "32"],
             "mirrored": ["--launcher", "mirrored", "--cpu-replicas", "2", "--", "--batch-size", "16"],
             "multiworker": ["--launcher", "multiworker", "--cpu-replicas", "2", "--", "--batch-size", "16"],
             "horovod": ["--launcher", "horovod", "--cpu-replicas", "2", "--", "--batch-size", "16"]}


def checkout_files() -> list[str]:
    """The files of this checkout as a clone would have them (tracked and new, not ignored)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    return [path for path in listed.split("\0") if path and os.path.isfile(REPO / path)]


def copy_checkout(root):
    for path in checkout_files():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / path, root / path)
    return root


def invoke_in(root, *args, env=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=root, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A copy of the repository with recipes/my-cnn made by `invoke new`."""
    root = copy_checkout(tmp_path_factory.mktemp("checkout") / "tf-recipes")
    process = invoke_in(root, "new", NAME, "--from", "mnist-cnn", "--add-to-nightly")
    assert_ok(process)
    return root, process


def test_the_new_recipe_is_the_source_renamed_with_next_steps(repo):
    root, process = repo
    folder = root / "recipes" / NAME
    assert 'RECIPE = "my-cnn"' in (folder / "train.py").read_text()
    assert "ARG RECIPE=my-cnn" in (folder / "Dockerfile").read_text()
    assert (folder / "README.md").read_text().startswith("# my-cnn\n")
    assert not [path for path in folder.rglob("*") if path.is_file() and "mnist-cnn" in path.read_text()
                and path.name != "README.md"]
    assert "next steps:" in process.stdout and f"invoke run {NAME}" in process.stdout
    again = invoke_in(root, "new", NAME, "--from", "mnist-cnn")
    assert again.returncode == 2 and again.stderr.strip() == f"error: recipes/{NAME} exists already; choose " \
                                                            "another name or delete that folder"


def test_its_launch_files_are_current(repo):
    root, _ = repo
    process = invoke_in(root, "launch-files", "--check")
    assert_ok(process)
    assert NAME in process.stdout


def test_it_is_in_the_nightly(repo):
    root, _ = repo
    process = invoke_in(root, "nightly", "--tier", "cpu", "--only", NAME, "--dry")
    assert_ok(process)
    for launcher in ("single", "mirrored", "multiworker", "horovodrun", "mpirun"):
        assert f"{NAME}/{launcher}/docker/cpu" in process.stdout, launcher
    assert "mnist-cnn/" not in process.stdout


@pytest.fixture(scope="module")
def launcher_runs(repo, request):
    root, _ = repo
    runs = {}
    for launcher, args in LAUNCHERS.items():
        if launcher == "horovod":
            request.getfixturevalue("require_horovod")
        flags, train = args[:args.index("--")], args[args.index("--") + 1:]
        results = root / "results" / launcher
        process = invoke_in(root, "run", NAME, "--gpus", "0", *flags, "--runtime", "local", "--results-dir",
                            str(results), "--", *PARITY, *train)
        assert_ok(process)
        runs[launcher] = results
    return runs


# The night's: the new recipe is mnist-cnn renamed, whose parity every push proves (test_mnist_launchers.py).
@pytest.mark.full
@pytest.mark.parametrize("launcher", ["mirrored", "multiworker", "horovod"])
def test_it_trains_the_same_model_under_every_launcher(launcher_runs, launcher):
    results = read_results(launcher_runs[launcher])
    assert (results["recipe"], results["launcher"], results["replicas"], results["global_batch"]) == \
        (NAME, launcher, 2, 32)
    assert len(set(results["replica_fingerprints"])) == 1
    single, split = load_weights(launcher_runs["single"]), load_weights(launcher_runs[launcher])
    assert single.keys() == split.keys() and single
    for key in single:
        np.testing.assert_allclose(split[key], single[key], rtol=0, atol=WEIGHT_ATOL, err_msg=key)


@pytest.mark.docker
@pytest.mark.full  # the night's: every push builds and trains in mnist-cnn's image (test_apptainer.py)
def test_it_builds_its_cpu_image_and_trains_in_it(repo, cpu_base, engine, tmp_path):
    root, _ = repo
    build = invoke_in(root, "build", NAME, "--base", "cpu", timeout=1800)
    assert_ok(build)
    labels = subprocess.run(["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", f"tf-recipes/{NAME}:cpu"],
                            capture_output=True, text=True)
    assert '"org.tf-recipes.recipe":"my-cnn"' in labels.stdout
    process = invoke_in(root, "run", NAME, "--gpus", "0", "--runtime", "docker", "--base", "cpu", "--results-dir",
                        str(tmp_path), "--", "--synthetic", "--max-steps", "3", env=engine)
    assert_ok(process)
    assert read_results(tmp_path)["recipe"] == NAME
    subprocess.run(["docker", "image", "rm", f"tf-recipes/{NAME}:cpu"], capture_output=True)


# -- the README's journey: invoke new -> train on a folder of photos under multiworker -> predict ------

def readme_section(title) -> list[list[str]]:
    """The shell lines of a section of README.md, as words."""
    text = (REPO / "README.md").read_text()
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return [shlex.split(line) for line in nightly.shell_lines(section)]


@pytest.fixture(scope="module")
def journey(tmp_path_factory):
    """A fresh copy of the repository, a generated folder of photos where the README puts one, and
    the README's lines run there as written."""
    root = copy_checkout(tmp_path_factory.mktemp("journey") / "tf-recipes")
    lines = readme_section("Start your own recipe")
    data = next(words[words.index("--data-dir") + 1] for words in lines if "--data-dir" in words)
    write_image_folder(root / data, per_class=(16, 4))
    for words in lines:
        assert words[0] == "invoke", words
        assert_ok(invoke_in(root, *words[1:]))
    return root, lines


def test_the_readme_journey_runs_as_written(journey):
    root, lines = journey
    assert [words[1] for words in lines] == ["new", "run", "predict"]
    run, predict = lines[1], lines[2]
    results = root / run[run.index("--results-dir") + 1]
    assert read_results(results)["launcher"] == "multiworker" and read_results(results)["replicas"] == 2
    out = root / predict[predict.index("--out") + 1]
    with open(out / "predictions.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))

    # The in-memory model: the new recipe's own model and loader, and the run's final weights.
    train, loader = (load_recipe_module(root / "recipes" / NAME, name) for name in ("train", "data"))
    data = root / run[run.index("--data-dir") + 1]
    _, _, images, _, class_names = loader.load_image_folder(str(data), None, 0)
    assert class_names == sorted(CLASSES) and read_results(results)["classes"] == class_names
    model = train.build_model(num_classes=len(class_names))
    model.load_weights(results / "final.weights.h5")
    probabilities = model.predict(images[..., None], verbose=0)  # raw pixels: the model scales them
    val_files = image_folder.read_image_folder(str(data)).files(image_folder.VAL)
    by_file = {os.path.normpath(os.path.join(root, row["file"])): row  # relative to where predict ran
               for row in rows}
    assert len(val_files) == len(rows) == len(probabilities)
    for path, expected in zip(val_files, probabilities, strict=True):
        row = by_file[path]
        assert row["class"] == class_names[int(np.argmax(expected))], path
        assert abs(float(row["probability"]) - float(np.max(expected))) < 1e-5, path


def load_recipe_module(folder, name):
    """The new recipe's module `name`, with its folder on sys.path while it loads (for its own imports,
    such as train.py's `import data`); sys.path and the modules loaded from the folder are left as before."""
    saved_path, saved_modules = list(sys.path), set(sys.modules)
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(f"my_cnn_{name}", folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved_path
        for key in set(sys.modules) - saved_modules:
            if str(folder) in str(getattr(sys.modules[key], "__file__", "")):
                del sys.modules[key]
    return module


# -- the README's other journey: your own images and masks -> cityscapes-unet -> predict ----------

def test_the_readme_own_segmentation_data_journey_runs_as_written(tmp_path):
    """prepare_data.py --format pairs on generated photos and masks where the README puts them, then
    its invoke lines; each class-area JSON must be what the trained model predicts on that photo."""
    import json

    import tensorflow as tf
    from PIL import Image
    from seg_pairs_data import CLASSES, write_pairs

    root = copy_checkout(tmp_path / "tf-recipes")
    lines = readme_section("Use the trained model")
    prepare, run, predict = lines
    images = prepare[prepare.index("--images") + 1]
    assert prepare[prepare.index("--masks") + 1] == os.path.join(os.path.dirname(images), "masks")
    write_pairs(root / os.path.dirname(images), count=12, size=(64, 128), masks="colours")
    assert (prepare[0], run[0], predict[0]) == ("python", "invoke", "invoke")
    assert_ok(subprocess.run([sys.executable, *prepare[1:]], cwd=root, capture_output=True, text=True, timeout=600))
    for words in (run, predict):
        assert_ok(invoke_in(root, *words[1:]))

    results = root / run[run.index("--results-dir") + 1]
    names = [c["name"] for c in CLASSES]
    assert read_results(results)["classes"] == names
    model = recipe_module("cityscapes-unet", "model").build_unet(8, 2, 0.0, "none", len(names))  # --preset tiny
    model.load_weights(results / "final.weights.h5")
    out = root / predict[predict.index("--out") + 1]
    photos = sorted((root / images).glob("*.jpg"))
    assert sorted(p.name for p in out.glob("*.json")) == sorted(p.stem + ".json" for p in photos)
    for photo in photos:
        decoded = tf.io.decode_jpeg(tf.io.read_file(str(photo)), channels=3)
        predicted = np.argmax(model(tf.cast(decoded[None], tf.float32), training=False)[0], axis=-1)
        expected = np.bincount(predicted.ravel(), minlength=len(names)) / predicted.size
        areas = json.loads((out / f"{photo.stem}.json").read_text())["class_fractions"]
        np.testing.assert_allclose([areas[name] for name in names], expected, atol=1e-3, err_msg=photo.name)
        assert Image.open(out / f"{photo.stem}.png").size == (128, 64)
