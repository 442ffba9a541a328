"""prepare_data.py with the paths a careless user gives it: an --out on its inputs is refused before
anything is written, and an entry of an input folder that is no regular file (a FIFO, a dangling
link) is named, never opened, so the run cannot hang on it. Every run here that meets a FIFO is a
subprocess with a timeout, so that a reader that does block fails the test instead of hanging it."""
import os
import subprocess
import sys

import pytest

from error_checks import assert_one_error_line
from helpers import REPO, recipe_module
from seg_pairs_data import write_pairs

make_fixture = recipe_module("cityscapes-unet", "make_fixture")
layout = recipe_module("cityscapes-unet", "layout")
PREPARE = "recipes/cityscapes-unet/prepare_data.py"


def run_prepare(*args, timeout=120):
    return subprocess.run([sys.executable, PREPARE, "--workers", "1", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def snapshot(folder):
    return sorted(os.path.relpath(os.path.join(parent, name), folder)
                  for parent, folders, files in os.walk(folder) for name in folders + files)


@pytest.fixture
def release(tmp_path):
    source = tmp_path / "cityscapes"
    make_fixture.make_fixture(source, train=2, val=1, size=(16, 32), seed=1)
    return source


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_an_out_on_the_source_is_refused_and_the_source_left_as_it_was(release, where):
    out = {"same": release, "inside": release / "prepared", "around": release.parent}[where]
    before = snapshot(release.parent)
    process = run_prepare("--source", release, "--out", out)
    how = {"same": "is", "inside": "lies inside", "around": "contains"}[where]
    assert_one_error_line(process, f"--out {out} {how} --source {release}")
    assert snapshot(release.parent) == before


@pytest.mark.parametrize("flag", ["--images", "--masks"])
def test_an_out_on_the_users_photos_or_masks_is_refused(tmp_path, flag):
    write_pairs(tmp_path / "mine", count=4, size=(16, 32))
    target = tmp_path / "mine" / flag[2:]
    before = snapshot(tmp_path / "mine")
    process = run_prepare("--format", "pairs", "--images", tmp_path / "mine" / "images", "--masks",
                          tmp_path / "mine" / "masks", "--classes", tmp_path / "mine" / "classes.yaml",
                          "--out", target / "prepared")
    assert_one_error_line(process, f"lies inside {flag} {target}")
    assert snapshot(tmp_path / "mine") == before


def test_an_out_that_is_a_file_is_refused(release, tmp_path):
    out = tmp_path / "prepared.txt"
    out.write_text("mine\n")
    assert_one_error_line(run_prepare("--source", release, "--out", out), f"--out {out} is a file, not a folder")
    assert out.read_text() == "mine\n"


def test_a_fifo_named_like_a_release_file_is_named_and_never_opened(release, tmp_path):
    example = "aachen/aachen_000000_000019"
    image = release / layout.image_member("train", example)
    image.unlink()
    os.mkfifo(image)
    process = run_prepare("--source", release, "--out", tmp_path / "out")
    assert process.returncode == 1, process.stdout + process.stderr
    assert f"{image} is a named pipe (FIFO), not a regular file" in process.stderr
    assert "Traceback" not in process.stderr


def test_a_fifo_or_a_dangling_link_among_the_masks_is_named(tmp_path):
    write_pairs(tmp_path, count=10, size=(16, 32))
    masks = tmp_path / "masks"
    (masks / "field_000.png").unlink()
    os.mkfifo(masks / "field_000.png")
    (masks / "field_001.png").unlink()
    (masks / "field_001.png").symlink_to(tmp_path / "gone.png")
    process = run_prepare("--format", "pairs", "--images", tmp_path / "images", "--masks", masks,
                          "--classes", tmp_path / "classes.yaml", "--out", tmp_path / "out")
    assert process.returncode == 1, process.stdout + process.stderr
    assert f"{masks / 'field_000.png'} is a named pipe (FIFO), not a regular file" in process.stderr
    assert f"{masks / 'field_001.png'} is a dangling symbolic link, not a regular file" in process.stderr


def test_a_classes_file_that_is_a_fifo_is_refused_without_waiting(tmp_path):
    write_pairs(tmp_path, count=4, size=(16, 32))
    classes = tmp_path / "classes.fifo"
    os.mkfifo(classes)
    process = run_prepare("--format", "pairs", "--images", tmp_path / "images", "--masks", tmp_path / "masks",
                          "--classes", classes, "--out", tmp_path / "out", timeout=60)
    assert_one_error_line(process, f"--classes {classes} is a named pipe (FIFO), not a file")
    assert not (tmp_path / "out").exists()


def test_training_names_a_fifo_in_place_of_a_prepared_file(release, tmp_path):
    """The prepared data is read by every training process: a FIFO in it is named by the index check."""
    data = tmp_path / "prepared"
    assert recipe_module("cityscapes-unet", "prepare_data").prepare(release, data, workers=1, log=lambda _: None) == []
    example = sorted((data / "train" / "labels").rglob("*.png"))[0]
    example.unlink()
    os.mkfifo(example)
    check = ("import sys; sys.path[:0] = ['recipes/cityscapes-unet', '.']; import data\n"
             "try:\n    data.read_index(sys.argv[1], 'train')\nexcept data.DataError as error:\n    print(error)")
    process = subprocess.run([sys.executable, "-c", check, str(data)], cwd=REPO, capture_output=True, text=True,
                             timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert f"{example} is a named pipe (FIFO), not a regular file" in process.stdout, process.stdout + process.stderr


def test_make_fixture_refuses_an_out_that_is_a_file(tmp_path):
    out = tmp_path / "fixture"
    out.write_text("mine\n")
    process = subprocess.run([sys.executable, "recipes/cityscapes-unet/make_fixture.py", "--out", str(out)], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
    assert process.returncode == 2 and f"--out {out} is a file, not a folder" in process.stderr, process.stderr
    assert "Traceback" not in process.stderr and out.read_text() == "mine\n"


def test_the_input_benchmark_keeps_its_work_and_report_off_the_data(release, capsys):
    benchmark_input = recipe_module("cityscapes-unet", "benchmark_input")
    for extra, needle in ((["--work-dir", release / "work"], f"--work-dir {release / 'work'} lies inside --data-dir"),
                          (["--json", release / "report.json"], f"--json {release / 'report.json'} lies inside")):
        with pytest.raises(SystemExit) as stopped:
            benchmark_input.main(["--data-dir", str(release), *map(str, extra), "--rounds", "1"])
        assert stopped.value.code == 2 and needle in capsys.readouterr().err
    assert not (release / "work").exists() and not (release / "report.json").exists()


def test_training_refuses_a_predict_dir_inside_the_data(release, tmp_path):
    process = subprocess.run([sys.executable, "recipes/cityscapes-unet/train.py", "--data-dir", str(release),
                              "--predict-dir", str(release / "predictions"), "--max-steps", "1"], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert_one_error_line(process, f"--predict-dir {release / 'predictions'} lies inside --data-dir {release}")
    assert not (release / "predictions").exists()
