"""Names a user gives prepare_data.py that become paths or lines: split names (OUT/SPLIT/ and
OUT/SPLIT.json), what is already in --out, a zip's folder names, and class names (lines of the export's
labels.txt). A bad one is one `error:` line, exit 2, and leaves every file as it was."""
import json
import zipfile

import pytest

from error_checks import assert_one_line_error
from helpers import recipe_module, run_python
from seg_pairs_data import write_pairs

data = recipe_module("cityscapes-unet", "data")
layout = recipe_module("cityscapes-unet", "layout")
make_fixture = recipe_module("cityscapes-unet", "make_fixture")
pairs = recipe_module("cityscapes-unet", "pairs")
prepare_data = recipe_module("cityscapes-unet", "prepare_data")
PREPARE = "recipes/cityscapes-unet/prepare_data.py"
SOMEONES = b'{"someone": "else\'s file"}\n'


def run_prepare(*args):
    return run_python(PREPARE, *map(str, args), "--workers", "1", timeout=300)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    root = tmp_path_factory.mktemp("release")
    make_fixture.make_fixture(root, train=2, val=1, size=(32, 64), seed=1)
    return root


@pytest.mark.parametrize("split, hit", [
    ("{tmp}/elsewhere/victim", "elsewhere/victim.json"),  # an absolute path: its .json was deleted
    ("../victim", "victim.json"),  # out of --out
    ("..", "manifest.jsonl"),  # OUT/../manifest.jsonl
    ("", None),  # "train," : an empty name
], ids=["absolute", "parent", "dot-dot", "empty"])
def test_a_split_name_that_is_a_path_is_refused_and_touches_nothing(release, tmp_path, split, hit):
    split = split.format(tmp=tmp_path)
    if hit:
        (tmp_path / hit).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / hit).write_bytes(SOMEONES)
    out = tmp_path / "out"
    process = run_prepare("--source", release, "--out", out, "--splits", f"train,{split}")
    assert_one_line_error(process, out, f"--splits: {split!r} is not a split name")
    assert not out.exists()
    if hit:
        assert (tmp_path / hit).read_bytes() == SOMEONES


def test_a_cityscapes_split_with_no_pairs_names_the_split_and_where_it_looked(release, tmp_path):
    out = tmp_path / "out"
    process = run_prepare("--source", release, "--out", out, "--splits", "train,test")
    assert_one_line_error(process, out, "split 'test' has no image and label pairs under",
                          release / "leftImg8bit" / "test")
    assert not out.exists()  # not even the train split, which has pairs


@pytest.mark.parametrize("layout_kind", ["split", "flat"])
def test_a_pairs_split_with_no_pairs_names_the_split_and_where_it_looked(tmp_path, layout_kind):
    src, out = tmp_path / "src", tmp_path / "out"
    if layout_kind == "split":
        write_pairs(src, count=4, masks="ids", split=True)
        for folder in ("images", "masks"):
            (src / folder / "extra").mkdir()  # there, but empty
        splits, needle = "train,val,extra", f"split 'extra' has no image and mask pairs in {src / 'images' / 'extra'}"
    else:
        write_pairs(src, count=2, masks="ids")  # 20% of two photos is none
        splits, needle = "train,val", "split 'val' has no image and mask pairs in"
    process = run_python(PREPARE, "--format", "pairs", "--images", str(src / "images"), "--masks", str(src / "masks"),
                         "--classes", str(src / "classes.yaml"), "--out", str(out), "--splits", splits)
    assert_one_line_error(process, out, needle)
    assert not out.exists()


@pytest.mark.parametrize("in_the_way", ["train.json", "train/notes.txt"])
def test_a_file_in_out_that_it_did_not_write_is_left_as_it_was(release, tmp_path, in_the_way):
    out = tmp_path / "out"
    (out / in_the_way).parent.mkdir(parents=True, exist_ok=True)
    (out / in_the_way).write_bytes(SOMEONES)
    before = sorted(out.rglob("*"))
    process = run_prepare("--source", release, "--out", out)
    assert process.returncode == 2 and "Traceback" not in process.stderr, process.stderr
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {out / in_the_way.split('/')[0]} is in --out"), lines
    assert sorted(out.rglob("*")) == before and (out / in_the_way).read_bytes() == SOMEONES


def test_a_zip_member_under_a_dot_dot_folder_is_a_problem_not_a_path(tmp_path):
    make_fixture.make_fixture(tmp_path / "zips", train=2, val=1, size=(32, 64), tree=False, zips=True)
    ids = make_fixture.make_fixture(tmp_path / "tree", train=2, val=1, size=(32, 64))
    example = ids["train"][0]
    for zip_name, member in ((layout.IMAGE_ZIP, layout.image_member), (layout.LABEL_ZIP, layout.label_member)):
        with zipfile.ZipFile(tmp_path / "zips" / zip_name, "a") as archive:
            archive.writestr(member("train", "../escaped"), (tmp_path / "tree" / member("train", example)).read_bytes())
    out = tmp_path / "out"
    process = run_prepare("--source", tmp_path / "zips", "--out", out, "--splits", "train")
    assert process.returncode == 1 and "Traceback" not in process.stderr, process.stderr
    assert f"not in the leftImg8bit/SPLIT/CITY/ layout: {tmp_path / 'zips' / layout.IMAGE_ZIP}:" \
           f"{layout.image_member('train', '../escaped')}" in process.stderr
    assert sorted(p.name for p in (out / "train").iterdir()) == ["images", "labels", "manifest.jsonl"]


@pytest.mark.parametrize("suffix, text, name", [
    (".yaml", '- grass\n- "sky\\nline"\n', "sky\nline"),
    (".yaml", 'grass: [0, 0, 0]\n"sky\\rline": [1, 1, 1]\n', "sky\rline"),
    (".json", '{"classes": ["grass", "sky\\nline"]}', "sky\nline"),
], ids=["yaml-list", "yaml-mapping", "json"])
def test_a_class_name_with_a_line_break_is_refused_naming_the_file(tmp_path, suffix, text, name):
    src, out = tmp_path / "src", tmp_path / "out"
    write_pairs(src, count=4, masks="ids")
    classes = src / f"mine{suffix}"
    classes.write_text(text)
    process = run_python(PREPARE, "--format", "pairs", "--images", str(src / "images"), "--masks", str(src / "masks"),
                         "--classes", str(classes), "--out", str(out))
    assert_one_line_error(process, out, f"--classes {classes}, class 1: the name {name!r} holds a line break")
    assert not out.exists()


def test_a_class_name_with_a_line_break_in_a_prepared_index_is_refused_when_training_reads_it(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    write_pairs(src, count=5, masks="ids", split=True)
    source = pairs.ImageMaskFolders(src / "images", src / "masks", src / "classes.yaml")
    assert prepare_data.prepare(source, out, workers=1, log=lambda *_: None) == []
    index = json.loads(layout.index_path(out, "train").read_text())
    index["views"]["classes"]["names"][1] = "gra\nss"  # edited by hand, or written by some other tool
    layout.index_path(out, "train").write_text(json.dumps(index))
    with pytest.raises(data.DataError, match=rf"class 'gra\\nss' in {layout.index_path(out, 'train')}: the name holds"):
        data.view(out)
