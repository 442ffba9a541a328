"""prepare_data.py --format pairs: the user's own images, masks and classes file, as data.py reads
them, and cityscapes-unet trained on them with their own class count, through to predict.py."""
import json

import numpy as np
import pytest
from PIL import Image

from helpers import assert_ok, recipe_module, run_python
from seg_pairs_data import CLASSES, mask_image, write_pairs

layout = recipe_module("cityscapes-unet", "layout")
RECIPE = "recipes/cityscapes-unet"
NAMES = [c["name"] for c in CLASSES]


def prepare(src, out, *extra, classes="classes.yaml"):
    return run_python(f"{RECIPE}/prepare_data.py", "--format", "pairs", "--images", str(src / "images"),
                      "--masks", str(src / "masks"), "--classes", str(src / classes), "--out", str(out),
                      "--workers", "2", *extra)


def read_index(out, split):
    return json.loads(layout.index_path(out, split).read_text())


def assert_prepared(out, splits):
    """splits: split -> {example id: the class ids its mask was made from}."""
    for split, examples in splits.items():
        index = read_index(out, split)
        assert index["examples"] == sorted(examples)
        classes = index["views"]["classes"]
        assert classes["names"] == NAMES and classes["colours"] == [c["colour"] for c in CLASSES]
        assert classes["lookup"][:len(NAMES)] == list(range(len(NAMES)))  # no class marked ignore
        for stem, ids in examples.items():
            categories = np.asarray(Image.open(layout.prepared_labels(out, split, stem)))
            np.testing.assert_array_equal(categories, ids)
            image = Image.open(layout.prepared_image(out, split, stem))
            assert (image.format, image.mode, image.size) == ("PNG", "RGB", (64, 32))


def test_colour_masks_in_flat_folders_are_split_and_mapped_to_class_ids(tmp_path):
    written = write_pairs(tmp_path / "src", count=10, masks="colours")
    process = prepare(tmp_path / "src", tmp_path / "out")
    assert_ok(process)
    val = read_index(tmp_path / "out", "val")["examples"]
    assert len(val) == 2  # --val-fraction 0.2 of 10
    assert_prepared(tmp_path / "out", {"train": {s: ids for s, ids in written.items() if s not in val},
                                       "val": {s: written[s] for s in val}})
    again = prepare(tmp_path / "src", tmp_path / "out2")  # the draw is seeded: the same split every time
    assert read_index(tmp_path / "out2", "val")["examples"] == val
    rerun = prepare(tmp_path / "src", tmp_path / "out")
    assert_ok(again), assert_ok(rerun)
    assert "8 pairs, 0 written, 8 already up to date" in rerun.stdout


def test_class_id_masks_in_train_and_val_folders_with_a_json_classes_file(tmp_path):
    written = write_pairs(tmp_path / "src", count=8, masks="ids", split=True, classes_format="json")
    assert_ok(prepare(tmp_path / "src", tmp_path / "out", classes="classes.json"))
    assert_prepared(tmp_path / "out", {split: {s.removeprefix(f"{split}/"): ids for s, ids in written.items()
                                               if s.startswith(f"{split}/")} for split in ("train", "val")})


def test_every_broken_pair_is_named_and_no_split_is_marked_complete(tmp_path):
    src = tmp_path / "src"
    written = write_pairs(src, count=8, masks="ids", split=True)
    stems = sorted(written)
    ids = written[stems[0]].copy()
    ids[0, 0] = 7  # no such class
    mask_image(ids, "ids").save(src / "masks" / f"{stems[0]}.png")
    Image.fromarray(np.full((32, 64, 3), 255, np.uint8)).save(src / "masks" / f"{stems[1]}.png")  # a colour, no class
    (src / "masks" / f"{stems[2]}.png").unlink()
    (src / "images" / f"{stems[3]}.jpg").write_bytes(b"not a photo")
    process = prepare(src, tmp_path / "out", "--workers", "1")
    assert process.returncode == 1 and "Traceback" not in process.stderr
    for expected in (f"{stems[0]}.png holds class ids [7] outside 0..2",
                     f"{stems[1]}.png holds 1 colours that are no class in", "#ffffff",
                     f"image without mask: {src / 'images' / stems[2]}.jpg",
                     f"unreadable image: {src / 'images' / stems[3]}.jpg"):
        assert expected in process.stderr, process.stderr
    assert not layout.index_path(tmp_path / "out", "train").exists()


def test_mixed_sizes_are_refused_until_size_resizes_them(tmp_path):
    src = tmp_path / "src"
    write_pairs(src, count=6, masks="ids")
    write_pairs(tmp_path / "big", count=1, size=(48, 96), masks="ids", seed=1)
    for folder, suffix in (("images", ".jpg"), ("masks", ".png")):
        (tmp_path / "big" / folder / f"field_000{suffix}").rename(src / folder / f"other{suffix}")
    refused = prepare(src, tmp_path / "out")
    assert refused.returncode == 1 and "add --size HxW" in refused.stderr
    assert_ok(prepare(src, tmp_path / "out", "--size", "32x64"))
    for split in ("train", "val"):
        assert (read_index(tmp_path / "out", split)["height"], read_index(tmp_path / "out", split)["width"]) == (32, 64)


@pytest.mark.parametrize("classes_text,expected", [
    ("- sky\n- sky\n", "class names appear twice: sky"),
    ("- {name: sky, colour: [1, 2]}\n", "colour [1, 2] is neither"),
    ("[unclosed\n", "not valid YAML"),
    ("{}\n", "expected a list of classes"),
    ("- {name: sky, ignore: maybe}\n- grass\n", "ignore 'maybe' is neither true nor false"),
    ("- {name: sky, ignore: true}\n", "every class is marked ignore: true"),
])
def test_a_bad_classes_file_gets_one_line(tmp_path, classes_text, expected):
    write_pairs(tmp_path / "src", count=4, masks="ids")
    (tmp_path / "src" / "classes.yaml").write_text(classes_text)
    process = prepare(tmp_path / "src", tmp_path / "out")
    assert process.returncode == 2 and "Traceback" not in process.stderr
    assert process.stderr.strip().count("\n") == 0 and expected in process.stderr, process.stderr


def test_missing_flags_are_named(tmp_path):
    process = run_python(f"{RECIPE}/prepare_data.py", "--format", "pairs", "--images", str(tmp_path), "--out",
                         str(tmp_path / "out"))
    assert process.returncode == 2 and "--format pairs needs --masks and --classes" in process.stderr


def test_the_unet_trains_on_the_pairs_with_their_classes_and_predicts_in_their_colours(tmp_path):
    from export_checks import check_export
    src = tmp_path / "src"
    write_pairs(src, count=10, size=(64, 128), masks="colours")
    assert_ok(prepare(src, tmp_path / "data"))
    run = tmp_path / "run"
    assert_ok(run_python(f"{RECIPE}/train.py", "--preset", "tiny", "--data-dir", str(tmp_path / "data"),
                         "--max-steps", "4", "--results-dir", str(run)))
    results = json.loads((run / "results.json").read_text())
    assert results["classes"] == NAMES and len(results["final_metrics"]["val"]["iou_per_class"]) == 3
    assert "category_mean_iou" not in results["final_metrics"]["val"]  # own classes: no Cityscapes categories
    served = check_export(run, tmp_path, recipe="cityscapes-unet", build_args=(8, 2, 0.0, "none", 3), size=(64, 128),
                          channels=3, classes=NAMES)
    assert served["probabilities"].shape == (3, 64, 128, 3)
    classes = json.loads((run / "export" / "1" / "assets.extra" / "classes.json").read_text())
    assert [(c["name"], c["colour"]) for c in classes] == [(c["name"], c["colour"]) for c in CLASSES]

    process = run_python(f"{RECIPE}/predict.py", "--model", str(run / "export"), "--input", str(src / "images"),
                         "--out", str(tmp_path / "pred"))
    assert_ok(process)
    areas = json.loads((tmp_path / "pred" / "field_000.json").read_text())
    assert list(areas["class_fractions"]) == NAMES and abs(sum(areas["class_fractions"].values()) - 1) < 1e-6
    overlay = np.asarray(Image.open(tmp_path / "pred" / "field_000.png"))
    assert overlay.shape == (64, 128, 3)


def test_a_class_marked_ignore_counts_in_neither_loss_nor_metric_and_is_not_predicted(tmp_path):
    """classes.json marks grass `ignore: true`: the model learns sky and pond only, and grass pixels reach
    training and evaluation as IGNORE."""
    src = tmp_path / "src"
    written = write_pairs(src, count=8, size=(32, 64), masks="ids", classes_format="json")
    classes = [dict(c, ignore=True) if c["name"] == "grass" else c for c in CLASSES]
    (src / "classes.json").write_text(json.dumps(classes))
    assert_ok(prepare(src, tmp_path / "data", classes="classes.json"))
    data = recipe_module("cityscapes-unet", "data")
    view = data.view(tmp_path / "data")
    assert view["names"] == ["sky", "pond"]
    ignore = recipe_module("cityscapes-unet", "labels").IGNORE
    val_ids = read_index(tmp_path / "data", "val")["examples"]
    for (_, truth), stem in zip(data.make_eval_dataset(tmp_path / "data", batch_size=1).as_numpy_iterator(),
                                val_ids, strict=True):
        expected = np.array([0, ignore, 1])[written[stem]]  # sky 0, grass ignored, pond 1
        np.testing.assert_array_equal(truth[0], expected)
    run = tmp_path / "run"
    assert_ok(run_python(f"{RECIPE}/train.py", "--preset", "tiny", "--crop", "32x64", "--data-dir",
                         str(tmp_path / "data"), "--max-steps", "2", "--results-dir", str(run), "--no-export"))
    results = json.loads((run / "results.json").read_text())
    assert results["classes"] == ["sky", "pond"] and len(results["final_metrics"]["val"]["iou_per_class"]) == 2
