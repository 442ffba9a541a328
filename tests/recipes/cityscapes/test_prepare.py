"""prepare_data.py as a user runs it: from the zips or the tree, on broken data, and again."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from helpers import REPO, recipe_module

labels = recipe_module("cityscapes-unet", "labels")
layout = recipe_module("cityscapes-unet", "layout")
make_fixture = recipe_module("cityscapes-unet", "make_fixture")
PREPARE = "recipes/cityscapes-unet/prepare_data.py"


def run_prepare(*args):
    return subprocess.run([sys.executable, PREPARE, *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def fixture_ids(tmp_path_factory):
    """The same fixture (same seed) written once as a tree and once as the two zips."""
    root = tmp_path_factory.mktemp("cityscapes")
    ids = make_fixture.make_fixture(root / "tree", train=6, val=3, size=(32, 64), seed=3)
    make_fixture.make_fixture(root / "zips", train=6, val=3, size=(32, 64), seed=3, tree=False, zips=True)
    return root, ids


def read_png(path):
    return np.asarray(Image.open(path))


def assert_prepared_from_tree(out, tree, ids):
    for split in ("train", "val"):
        index = json.loads(layout.index_path(out, split).read_text())
        assert index["examples"] == sorted(ids[split])
        assert (index["height"], index["width"]) == (32, 64)
        for example_id in ids[split]:
            source_image = tree / layout.image_member(split, example_id)
            source_labels = read_png(tree / layout.label_member(split, example_id))
            assert layout.prepared_image(out, split, example_id).read_bytes() == source_image.read_bytes()
            # the label ids as released; the views that training takes of them are in the index
            np.testing.assert_array_equal(read_png(layout.prepared_labels(out, split, example_id)), source_labels)
        assert index["views"] == labels.cityscapes_views() and index["default_view"] == "classes"


def test_prepares_the_extracted_tree(fixture_ids, tmp_path):
    root, ids = fixture_ids
    result = run_prepare("--source", root / "tree", "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "(folder)" in result.stdout
    assert_prepared_from_tree(tmp_path / "out", root / "tree", ids)


def test_prepares_the_downloaded_zips(fixture_ids, tmp_path):
    root, ids = fixture_ids
    result = run_prepare("--source", root / "zips", "--out", tmp_path / "out", "--workers", 1)
    assert result.returncode == 0, result.stderr
    assert "(zip)" in result.stdout
    assert_prepared_from_tree(tmp_path / "out", root / "tree", ids)


def problem_lines(stderr):
    return [line.strip() for line in stderr.splitlines() if line.startswith("  ")]


def test_reports_every_broken_file_and_marks_nothing_complete(fixture_ids, tmp_path):
    root, ids = fixture_ids
    source = tmp_path / "broken"
    shutil.copytree(root / "tree", source)
    no_label, truncated, wrong_size = sorted(ids["train"])[:3]
    (source / layout.label_member("train", no_label)).unlink()
    image = source / layout.image_member("train", truncated)
    image.write_bytes(image.read_bytes()[:200])
    Image.new("L", (32, 16)).save(source / layout.label_member("train", wrong_size))
    # The real gtFine folders also hold colour and instance maps: those are not labelIds, not problems.
    colour = source / layout.label_member("train", no_label).replace("_labelIds.png", "_color.png")
    Image.new("RGB", (64, 32)).save(colour)

    result = run_prepare("--source", source, "--out", tmp_path / "out")

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    problems = problem_lines(result.stderr)
    assert len(problems) == 3, problems
    named = {example_id for example_id in ids["train"] + ids["val"]
             if any(example_id.split("/")[1] in line for line in problems)}
    assert named == {no_label, truncated, wrong_size}
    assert any(line.startswith("image without label") and no_label.split("/")[1] in line for line in problems)
    assert any(line.startswith("unreadable PNG") and truncated.split("/")[1] in line for line in problems)
    assert any(line.startswith("size mismatch") and wrong_size.split("/")[1] in line for line in problems)
    # The good train pairs may be on disk, but the split is not marked complete: no index.
    assert not layout.index_path(tmp_path / "out", "train").exists()
    assert "train: " in result.stdout and "NOT complete" in result.stdout
    assert layout.index_path(tmp_path / "out", "val").exists()  # val had no problems


def test_reports_labels_without_images_and_unknown_ids(fixture_ids, tmp_path):
    root, ids = fixture_ids
    source = tmp_path / "broken"
    shutil.copytree(root / "tree", source)
    orphan, odd_ids = sorted(ids["val"])[:2]
    (source / layout.image_member("val", orphan)).unlink()
    Image.fromarray(np.full((32, 64), 40, np.uint8)).save(source / layout.label_member("val", odd_ids))

    result = run_prepare("--source", source, "--out", tmp_path / "out", "--splits", "val")

    assert result.returncode == 1
    problems = problem_lines(result.stderr)
    assert len(problems) == 2, problems
    assert problems[0].startswith("label ids outside") and odd_ids.split("/")[1] in problems[0]
    assert problems[1].startswith("label without image") and orphan.split("/")[1] in problems[1]
    assert not layout.index_path(tmp_path / "out", "val").exists()


def test_expect_size_rejects_every_pair_of_another_size(fixture_ids, tmp_path):
    root, ids = fixture_ids
    result = run_prepare("--source", root / "tree", "--out", tmp_path / "out",
                         "--expect-size", "1024x2048", "--splits", "val", "--workers", 1)
    assert result.returncode == 1
    problems = problem_lines(result.stderr)
    assert len(problems) == len(ids["val"])
    assert all(line.startswith("unexpected size") and "32x64" in line for line in problems)


def test_rerun_skips_done_work_and_redoes_only_changed_pairs(fixture_ids, tmp_path):
    root, ids = fixture_ids
    source, out = tmp_path / "source", tmp_path / "out"
    shutil.copytree(root / "tree", source)
    assert run_prepare("--source", source, "--out", out).returncode == 0
    outputs = sorted((out / "train").rglob("*.png"))
    mtimes = [path.stat().st_mtime_ns for path in outputs]

    again = run_prepare("--source", source, "--out", out)
    assert again.returncode == 0
    assert "train: 6 pairs, 0 written, 6 already up to date" in again.stdout
    assert [path.stat().st_mtime_ns for path in outputs] == mtimes

    # Change one label and lose one output (as after an interrupted run): only those two are redone.
    changed, lost = sorted(ids["train"])[:2]
    Image.fromarray(np.full((32, 64), 23, np.uint8)).save(source / layout.label_member("train", changed))
    layout.prepared_labels(out, "train", lost).unlink()
    third = run_prepare("--source", source, "--out", out)
    assert third.returncode == 0, third.stderr
    assert "train: 6 pairs, 2 written, 4 already up to date" in third.stdout
    assert (read_png(layout.prepared_labels(out, "train", changed)) == 23).all()  # sky
    assert layout.prepared_labels(out, "train", lost).is_file()


@pytest.mark.parametrize("args,expected", [
    ([], "--format cityscapes needs --source"),
    (["--source", "/nonexistent/cityscapes"], "is not a folder"),
    (["--source", "EMPTY"], layout.IMAGE_ZIP),
    (["--source", "EMPTY", "--expect-size", "big"], "--expect-size"),
])
def test_user_mistakes_get_a_message_not_a_traceback(tmp_path, args, expected):
    args = [str(tmp_path) if arg == "EMPTY" else arg for arg in args]
    result = run_prepare(*args, "--out", tmp_path / "out")
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_half_zip_half_folder_is_accepted(fixture_ids, tmp_path):
    root, ids = fixture_ids
    shutil.copytree(root / "tree" / "leftImg8bit", tmp_path / "source" / "leftImg8bit")
    shutil.copy(root / "zips" / layout.LABEL_ZIP, tmp_path / "source")
    result = run_prepare("--source", tmp_path / "source", "--out", tmp_path / "out", "--workers", 1)
    assert result.returncode == 0, result.stderr
    assert json.loads(layout.index_path(tmp_path / "out", "train").read_text())["examples"] == sorted(ids["train"])
