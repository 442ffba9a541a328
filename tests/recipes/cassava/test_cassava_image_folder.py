"""cassava-resnet on the user's own photos: `--data-format image-folder` (tests/image_folder_data.py)
goes through the same decode-once cache and sharded order as TFDS cassava."""
import os

import numpy as np
import pytest

from tf_recipes.data import DataError, InputShard
from tf_recipes.image_folder import read_image_folder
from error_checks import assert_one_line_error, without_tf_log
from helpers import RECIPES, assert_ok, read_results, recipe_module, run_python
from image_folder_data import CLASSES, write_image_folder, write_photo

TRAIN = str(RECIPES / "cassava-resnet" / "train.py")
input_pipeline = recipe_module("cassava-resnet", "input_pipeline")


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("photos"), per_class=(6, 2))


def test_classes_come_from_the_folders_sorted(photos):
    folder = read_image_folder(str(photos))
    assert folder.class_names == sorted(CLASSES)
    assert len(folder.files("train")) == 18 and len(folder.files("val")) == 6
    assert sorted(set(folder.labels("train").tolist())) == [0, 1, 2]
    assert all(f"/train/{CLASSES[label]}/" in path
               for path, label in zip(folder.files("train"), folder.labels("train"), strict=True))


def test_val_fraction_splits_one_folder_the_same_way_for_a_seed(tmp_path):
    root = write_image_folder(tmp_path, per_class=(6, 2), split=False)
    first, again, other = (read_image_folder(str(root), 0.25, seed) for seed in (1, 1, 2))
    assert first.files("val") == again.files("val") and first.files("val") != other.files("val")
    assert len(first.files("val")) == 6 and not set(first.files("val")) & set(first.files("train"))


def test_a_launcher_split_of_the_cache_gives_the_same_global_batches(photos, tmp_path, monkeypatch):
    """One pipeline, or two pipelines sharing the cache folder (each decoding half of the chunks):
    the same cached bytes, and the two pipelines' batches put side by side are the single one's."""
    monkeypatch.setattr(input_pipeline, "CHUNK", 4)
    folder = read_image_folder(str(photos))
    single = input_pipeline.cache_split(folder, "train", 32, str(tmp_path / "one"), InputShard(1, 0, 4, 4))
    two = [input_pipeline.cache_split(folder, "train", 32, str(tmp_path / "two"), InputShard(2, p, 2, 4))
           for p in range(2)]
    all_indices = np.arange(len(single))
    for arrays in two:
        np.testing.assert_array_equal(arrays.gather(all_indices)[0], single.gather(all_indices)[0])
        np.testing.assert_array_equal(arrays.labels, folder.labels("train"))

    def batches(arrays, shard):
        return list(input_pipeline.make_train_dataset(arrays, shard, 3, seed=5).as_numpy_iterator())

    whole = batches(single, InputShard(1, 0, 4, 4))
    halves = [batches(arrays, InputShard(2, p, 2, 4)) for p, arrays in enumerate(two)]
    for step, (images, labels) in enumerate(whole):
        np.testing.assert_array_equal(images, np.concatenate([halves[0][step][0], halves[1][step][0]]))
        np.testing.assert_array_equal(labels, np.concatenate([halves[0][step][1], halves[1][step][1]]))


def test_an_unreadable_photo_is_named(photos, tmp_path):
    root = write_image_folder(tmp_path / "data", per_class=(3, 1))
    bad = root / "train" / "banana" / "banana-001.jpg"
    bad.write_bytes(b"not a photo")
    folder = read_image_folder(str(root))
    with pytest.raises(DataError, match=f"{bad} cannot be decoded as an image"):
        input_pipeline.cache_split(folder, "train", 32, str(tmp_path / "cache"), InputShard(1, 0, 2, 2))


def damaged_folder(root, damage):
    """An image folder with one class mistake: DAMAGED's keys."""
    root = write_image_folder(root, per_class=(2, 1))
    if damage == "line-break":
        for split in ("train", "val"):
            (root / split / "banana").rename(root / split / "ban\nana")
    elif damage == "empty":
        for path in (root / "train" / "banana").iterdir():
            path.unlink()
    elif damage == "no-val":
        for path in (root / "val" / "cherry").iterdir():
            path.unlink()
        (root / "val" / "cherry").rmdir()
    else:
        (root / "val" / "durian").mkdir()
        write_photo(root / "val" / "durian" / "d.png", 0, np.random.default_rng(0), (32, 32))
    return root


DAMAGED = {
    "empty": "class 'banana' in {root}/train holds no .jpg, .jpeg or .png file",
    "no-val": "class 'cherry' is in {root}/train but not in {root}/val",
    "val-only": "class 'durian' is in {root}/val but not in {root}/train",
    # Two classes would be three lines of the export's labels.txt, and every label after it shifted.
    "line-break": "class folder 'ban\\nana' in {root}/train: the name holds a line break",
}


@pytest.mark.parametrize("damage", DAMAGED)
def test_a_class_mistake_is_named_when_the_folder_is_read(tmp_path, damage):
    root = damaged_folder(tmp_path / "data", damage)
    with pytest.raises(DataError) as raised:
        read_image_folder(str(root))
    assert DAMAGED[damage].format(root=root) in str(raised.value) and "\n" not in str(raised.value)


def test_a_class_mistake_is_one_line_of_train_py_before_anything_is_written(tmp_path):
    """The same error, as the command line shows it: one line, and no results folder."""
    root = damaged_folder(tmp_path / "data", "no-val")
    process = run_python(TRAIN, "--data-format", "image-folder", "--data-dir", str(root), "--weights", "none",
                         "--image-size", "32", "--max-steps", "1", "--results-dir", str(tmp_path / "out"),
                         timeout=300)
    assert_one_line_error(process, tmp_path / "out", DAMAGED["no-val"].format(root=root))


def test_trains_on_an_image_folder_with_its_own_classes(photos, tmp_path):
    out = tmp_path / "out"
    process = run_python(TRAIN, "--data-format", "image-folder", "--data-dir", str(photos), "--weights", "none",
                         "--image-size", "32", "--batch-size", "4", "--max-steps", "2",
                         "--cache-dir", str(tmp_path / "cache"), "--results-dir", str(out), timeout=600)
    assert_ok(process)
    results = read_results(out)
    assert results["classes"] == sorted(CLASSES) and results["data"] == "image-folder"
    labels = out / "export" / "1" / "assets.extra" / "labels.txt"
    assert labels.read_text().splitlines() == sorted(CLASSES)  # the export's too
    assert "ERROR" not in without_tf_log(process.stdout + process.stderr)


@pytest.mark.parametrize("name", ["app\rle", "tab\tbed", "   ", b"caf\xe9"], ids=["return", "tab", "blank", "not-utf8"])
def test_a_class_folder_whose_name_is_not_one_line_is_named_with_its_folder(tmp_path, name):
    root = write_image_folder(tmp_path / "data", per_class=(2, 1), split=False)
    os.rename(root / "apple", os.path.join(os.fsencode(root), name) if isinstance(name, bytes) else root / name)
    name = os.fsdecode(name)
    with pytest.raises(DataError) as raised:
        read_image_folder(str(root), 0.5)
    assert str(raised.value).startswith(f"class folder {name!r} in {root}: the name ")
    assert "\n" not in str(raised.value)


def test_the_export_refuses_a_class_name_that_is_not_one_line_of_labels_txt():
    from tf_recipes import export
    spec = export.ExportSpec(task=export.CLASSIFICATION, class_names=["apple", "ban\nana"], image_size=(32, 32),
                             channels=3, build=lambda: None)
    with pytest.raises(DataError, match=r"class name 'ban\\nana' holds a line break .* labels.txt"):
        spec.checked()  # when the Trainer is made, before the first step
