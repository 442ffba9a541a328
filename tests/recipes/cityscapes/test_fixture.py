"""make_fixture.py: the official layout, every label id, valid PNGs, same seed -> same bytes."""
import subprocess
import sys
import zipfile

import numpy as np
from PIL import Image

from helpers import REPO, recipe_module

layout = recipe_module("cityscapes-unet", "layout")


def make(out, *args):
    return subprocess.run([sys.executable, "recipes/cityscapes-unet/make_fixture.py", "--out", str(out), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def test_tree_uses_every_label_id_and_pairs_every_image(tmp_path):
    result = make(tmp_path, "--train", "2", "--val", "1", "--size", "32x64")
    assert result.returncode == 0, result.stderr
    images = sorted((tmp_path / "leftImg8bit").rglob("*.png"))
    label_files = sorted((tmp_path / "gtFine").rglob("*_labelIds.png"))
    instance_files = sorted((tmp_path / "gtFine").rglob("*_instanceIds.png"))  # cityscapesScripts opens them
    assert len(images) == len(label_files) == len(instance_files) == 3
    seen = set()
    for path in images:
        relative = path.relative_to(tmp_path).as_posix()
        kind, split, example_id = layout.parse_member(relative)
        assert kind == "image" and split in ("train", "val")
        label = Image.open(tmp_path / layout.label_member(split, example_id))
        image = Image.open(path)
        assert (image.mode, image.size, label.mode, label.size) == ("RGB", (64, 32), "L", (64, 32))
        seen |= set(np.unique(np.asarray(label)).tolist())
    assert seen == set(range(34))


def test_zips_have_the_official_inner_layout_and_are_reproducible(tmp_path):
    for name in ("a", "b"):
        assert make(tmp_path / name, "--train", "1", "--val", "1", "--no-tree").returncode == 0
    assert not (tmp_path / "a" / "leftImg8bit").exists()
    for zip_name in (layout.IMAGE_ZIP, layout.LABEL_ZIP):
        assert (tmp_path / "a" / zip_name).read_bytes() == (tmp_path / "b" / zip_name).read_bytes()
    members = zipfile.ZipFile(tmp_path / "a" / layout.IMAGE_ZIP).namelist()
    assert "leftImg8bit/train/aachen/aachen_000000_000019_leftImg8bit.png" in members
    assert "gtFine/val/frankfurt/frankfurt_000000_000019_gtFine_labelIds.png" in \
        zipfile.ZipFile(tmp_path / "a" / layout.LABEL_ZIP).namelist()


def test_refuses_to_mix_with_an_existing_tree(tmp_path):
    assert make(tmp_path, "--train", "1", "--val", "0").returncode == 0
    again = make(tmp_path, "--train", "1", "--val", "0")
    assert again.returncode == 2 and "choose an empty --out" in again.stderr
