"""cityscapes-unet with a prepared dataset damaged after preparation: one line naming the file.

Files that no longer match the index (missing, another byte size, another image size, not a PNG)
are found before training, from sizes and PNG headers. A file whose bytes were damaged in place
(same size) or a label map with values that are no label id fails while training; the recipe then
re-reads the examples of the failing global step and names the file (Trainer.fit's
explain_input_error)."""
import io
import json
import shutil

import numpy as np
import pytest
from PIL import Image

from tf_recipes.data import global_order
from error_checks import assert_one_line_error
from helpers import assert_ok, read_results, recipe_module, run_python

layout = recipe_module("cityscapes-unet", "layout")
make_fixture = recipe_module("cityscapes-unet", "make_fixture")
prepare_data = recipe_module("cityscapes-unet", "prepare_data")
TRAIN = "recipes/cityscapes-unet/train.py"
SEED = 42  # train.py's default --seed: decides which examples global step 3 holds


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """The generated release in the official layout (what --source reads)."""
    root = tmp_path_factory.mktemp("cityscapes")
    make_fixture.make_fixture(root / "release", train=8, val=4, size=(64, 128))
    return root / "release"


@pytest.fixture(scope="module")
def prepared(release):
    assert prepare_data.prepare(release, release.parent / "prepared", workers=1, log=lambda message: None) == []
    return release.parent / "prepared"


@pytest.fixture
def damaged(prepared, tmp_path):
    """A copy of the prepared data to damage, and the example ids of its train split."""
    copy = tmp_path / "prepared"
    shutil.copytree(prepared, copy)
    return copy, json.loads(layout.index_path(copy, "train").read_text())["examples"]


def train(data_dir, results_dir, *extra):
    # 8 examples, global batch 2: 4 steps, one epoch, checkpointed only after step 4.
    return run_python(TRAIN, "--preset", "tiny", "--data-dir", str(data_dir), "--max-steps", "4",
                      "--log-every", "1", "--results-dir", str(results_dir), *extra, timeout=600)


def png(array) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def drop_sizes_from_index(data_dir):
    """The index as prepare_data.py wrote it before it recorded file sizes."""
    path = layout.index_path(data_dir, "train")
    index = json.loads(path.read_text())
    del index["bytes"]
    path.write_text(json.dumps(index))


def test_index_records_the_sizes_and_a_healthy_run_trains(prepared, tmp_path):
    index = json.loads(layout.index_path(prepared, "train").read_text())
    assert index["bytes"] == {
        i: [layout.prepared_image(prepared, "train", i).stat().st_size,
            layout.prepared_labels(prepared, "train", i).stat().st_size] for i in index["examples"]}
    assert_ok(train(prepared, tmp_path))
    assert read_results(tmp_path)["steps"] == 4


@pytest.mark.parametrize("damage", ["missing", "truncated", "another size", "not a png", "colour map"])
def test_a_file_that_no_longer_matches_the_index_is_named_before_training(damaged, tmp_path, damage):
    data_dir, examples = damaged
    image = layout.prepared_image(data_dir, "train", examples[5])
    categories = layout.prepared_labels(data_dir, "train", examples[5])
    if damage == "missing":
        victim, expected = categories, "is missing"
        victim.unlink()
    elif damage == "truncated":
        victim = categories
        size = victim.stat().st_size
        victim.write_bytes(victim.read_bytes()[:size // 2])
        expected = f"is {size // 2} bytes, the index says {size}"
    else:  # same-named replacements, checked by header; an older index without sizes
        drop_sizes_from_index(data_dir)
        if damage == "another size":
            victim, expected = image, "is 32x64, the index says 64x128"
            victim.write_bytes(png(np.zeros((32, 64, 3), np.uint8)))
        elif damage == "not a png":
            victim, expected = image, "is not a PNG file"
            buffer = io.BytesIO()
            Image.fromarray(np.zeros((64, 128, 3), np.uint8)).save(buffer, format="JPEG")
            victim.write_bytes(buffer.getvalue())
        else:  # the gtFine colour rendering instead of the category map
            victim, expected = categories, "is a 8-bit PNG of colour type 2, not 8-bit grayscale"
            victim.write_bytes(png(np.zeros((64, 128, 3), np.uint8)))
    process = train(data_dir, tmp_path / "out")
    assert_one_line_error(process, tmp_path / "out", f"{victim} {expected}", "files listed in",
                          "prepare_data.py --source CITYSCAPES_DIR --out")
    assert "step" not in process.stdout  # before training


def step_examples(count, global_batch, step):
    return global_order(count, global_batch, step, SEED, step - 1)


# 8 examples: single trains 4 steps of 2, mirrored (2 CPU replicas) 2 steps of 4; the damaged file
# sits in the global batch of the last step, after steps that succeed and before any checkpoint.
@pytest.mark.parametrize("launcher,replicas,steps", [("single", 1, 4), ("mirrored", 2, 2)])
def test_an_image_damaged_in_place_is_named_at_its_step(damaged, tmp_path, launcher, replicas, steps):
    data_dir, examples = damaged
    culprit = int(global_order(len(examples), 2 * replicas, steps, SEED, steps - 1)[-1])
    victim = layout.prepared_image(data_dir, "train", examples[culprit])
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the pixel data: same size, header intact
    victim.write_bytes(bytes(data))
    process = train(data_dir, tmp_path / "out", "--launcher", launcher, "--cpu-replicas", str(replicas),
                    "--max-steps", str(steps))
    assert_one_line_error(process, tmp_path / "out", f"{victim} cannot be read or decoded (",
                          f"example {culprit} ({examples[culprit]}) of the prepared train split, "
                          f"read for global step {steps};",
                          "delete that file and run `python recipes/cityscapes-unet/prepare_data.py")
    assert f"step {steps - 1:>6}/{steps}" in process.stdout, process.stdout  # the steps before it trained


def test_with_cache_a_damaged_image_is_named_before_training(damaged, tmp_path):
    data_dir, examples = damaged
    victim = layout.prepared_image(data_dir, "train", examples[6])
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    process = train(data_dir, tmp_path / "out", "--cache")
    assert_one_line_error(process, tmp_path / "out", f"{victim} cannot be read or decoded (",
                          f"example 6 ({examples[6]}) of the prepared train split, decoded for --cache")
    assert "step" not in process.stdout


def test_label_values_that_are_no_label_id_are_named_at_their_step(damaged, tmp_path):
    data_dir, examples = damaged
    drop_sizes_from_index(data_dir)  # else the new file's byte size gives it away before training
    culprit = int(global_order(len(examples), 2, 3, SEED, 2)[0])
    victim = layout.prepared_labels(data_dir, "train", examples[culprit])
    categories = np.asarray(Image.open(victim)).copy()
    categories[10:20, 10:20] = 40
    categories[30, 30] = 77  # ids Cityscapes does not define, as if a trainIds or colour file replaced it
    victim.write_bytes(png(categories))
    process = train(data_dir, tmp_path / "out")
    assert_one_line_error(process, tmp_path / "out", f"{victim} holds values [40, 77] that are no label of this data",
                          f"example {culprit} ", "read for global step 3;")
    assert "step      2/4" in process.stdout


def test_prepare_data_rewrites_a_file_truncated_since_preparation(release, damaged):
    """What the error message tells the user to do works: the file is written again."""
    data_dir, examples = damaged
    victim = layout.prepared_labels(data_dir, "train", examples[2])
    good = victim.read_bytes()
    victim.write_bytes(good[:len(good) // 2])
    assert prepare_data.prepare(release, data_dir, workers=1, log=lambda message: None) == []
    assert victim.read_bytes() == good


def test_a_val_image_damaged_in_place_is_named_by_the_evaluation(damaged, tmp_path):
    data_dir, _ = damaged
    val_examples = json.loads(layout.index_path(data_dir, "val").read_text())["examples"]
    victim = layout.prepared_image(data_dir, "val", val_examples[1])
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the pixel data: same size, header intact
    victim.write_bytes(bytes(data))
    process = train(data_dir, tmp_path / "out")
    assert process.returncode == 2, process.stderr[-4000:]
    assert "Traceback" not in process.stderr
    errors = [line for line in process.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"{victim} cannot be read or decoded (" in errors[0], process.stderr[-4000:]
    assert f"example 1 ({val_examples[1]}) of the prepared val split, read for evaluation" in errors[0]
    # Training finished and its checkpoint stands (a --resume evaluates again); no results.json.
    assert (tmp_path / "out" / "checkpoints" / "ckpt-4.index").is_file()
    assert not (tmp_path / "out" / "results.json").exists()
