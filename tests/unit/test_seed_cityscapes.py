"""ci/bench/seed_cityscapes.py: the seed workshop's colour maps back to Cityscapes label ids, in the official
layout that prepare_data.py --source reads; what it cannot map, or may not write, is one line."""
import numpy as np
import pytest
from cityscapesscripts.helpers.labels import name2label
from PIL import Image

from ci.bench import seed_cityscapes
from helpers import assert_ok, run_python

BLACK = (0, 0, 0)  # the colour of ids 0-4, all void
SHAPE = (16, 32)


def colour(name: str) -> tuple:
    return name2label[name].color


def write_scene(root, name, colours: np.ndarray, seed: int) -> bytes:
    """seed/img/NAME_leftImg8bit.png (noise) and seed/gt/NAME_gtFine_color.png; returns the photo's bytes."""
    (root / "img").mkdir(parents=True, exist_ok=True)
    (root / "gt").mkdir(parents=True, exist_ok=True)
    photo = np.random.default_rng(seed).integers(0, 256, (*colours.shape[:2], 3), dtype=np.uint8)
    Image.fromarray(photo).save(root / "img" / f"{name}_leftImg8bit.png")
    Image.fromarray(colours).save(root / "gt" / f"{name}_gtFine_color.png")
    return (root / "img" / f"{name}_leftImg8bit.png").read_bytes()


def colour_map(rows: list[tuple]) -> np.ndarray:
    """A map of horizontal bands, one colour each."""
    bands = np.array_split(np.arange(SHAPE[0]), len(rows))
    image = np.zeros((*SHAPE, 3), np.uint8)
    for band, rgb in zip(bands, rows, strict=True):
        image[band] = rgb
    return image


def test_colours_become_the_label_ids_of_the_table_in_the_official_layout(tmp_path):
    seed, out = tmp_path / "8data", tmp_path / "cs"
    # pole's grey is also polegroup's, car's blue also the license plate's, black all of ids 0-4
    bands = [BLACK, colour("road"), colour("polegroup"), colour("license plate"), colour("sky"),
             colour("rail track")]
    expected = [0, name2label["road"].id, name2label["pole"].id, name2label["car"].id, name2label["sky"].id,
                name2label["rail track"].id]
    names = ["bochum_000000_000001", "aachen_000003_000019", "aachen_000001_000019"]
    photos = {name: write_scene(seed, name, colour_map(bands[i:] + bands[:i]), i) for i, name in enumerate(names)}
    assert seed_cityscapes.main(["--seed-dir", str(seed), "--out", str(out), "--split", "train=0:2",
                                 "--split", "val=2:3"]) == 0

    ordered = sorted(names)  # positions count in the sorted sample
    for split, name in (("train", ordered[0]), ("train", ordered[1]), ("val", ordered[2])):
        city = name.split("_")[0]
        image = out / "leftImg8bit" / split / city / f"{name}_leftImg8bit.png"
        assert image.read_bytes() == photos[name]
        i = names.index(name)
        with Image.open(out / "gtFine" / split / city / f"{name}_gtFine_labelIds.png") as labels:
            assert labels.mode == "L"
            ids = np.asarray(labels)
        assert np.array_equal(ids, colour_map([(v, v, v) for v in expected[i:] + expected[:i]])[..., 0])
        with Image.open(out / "gtFine" / split / city / f"{name}_gtFine_instanceIds.png") as instances:
            assert instances.mode == "I;16" and np.array_equal(np.asarray(instances), ids)
    assert {path.name for path in tmp_path.iterdir()} == {"8data", "cs"}  # no staging folder left

    # prepare_data.py reads the layout as the release's
    prepared = tmp_path / "prepared"
    assert_ok(run_python("recipes/cityscapes-unet/prepare_data.py", "--source", str(out), "--out", str(prepared)))
    for split, name in (("train", ordered[0]), ("val", ordered[2])):
        city = name.split("_")[0]
        with Image.open(prepared / split / "labels" / city / f"{name}.png") as stored, \
                Image.open(out / "gtFine" / split / city / f"{name}_gtFine_labelIds.png") as written:
            assert np.array_equal(np.asarray(stored), np.asarray(written))


@pytest.mark.parametrize("problem", ["unknown colour", "out not empty", "shared scene", "past the end"])
def test_what_cannot_be_written_is_one_line(tmp_path, problem):
    seed, out = tmp_path / "8data", tmp_path / "cs"
    bands = [colour("road"), colour("sky")]
    write_scene(seed, "aachen_000000_000019", colour_map(bands), 0)
    if problem == "unknown colour":
        write_scene(seed, "aachen_000001_000019", colour_map([colour("road"), (1, 2, 3)]), 1)
    splits = {"shared scene": ["train=0:1", "val=0:1"], "past the end": ["train=0:3"]}.get(problem, ["train=0:2"])
    if problem == "out not empty":
        out.mkdir()
        (out / "keep.txt").write_text("mine")
    process = run_python("ci/bench/seed_cityscapes.py", "--seed-dir", str(seed), "--out", str(out),
                         *[arg for split in splits for arg in ("--split", split)])
    assert process.returncode == 2 and "Traceback" not in process.stderr
    (message,) = process.stderr.strip().splitlines()
    assert message.startswith("error: ")
    unknown = SHAPE[0] // 2 * SHAPE[1]  # the second band
    assert {"unknown colour": f"aachen_000001_000019_gtFine_color.png: {unknown} pixels of 1 colour(s)",
            "out not empty": f"--out {out} exists and is not an empty folder",
            "shared scene": "--split val=0:1 shares scene 0 (aachen_000000_000019) with --split train",
            "past the end": "the sample has 1 scenes"}[problem] in message
    if problem == "unknown colour":
        assert "(1, 2, 3)" in message
    if problem == "out not empty":
        assert [path.name for path in out.iterdir()] == ["keep.txt"]
    else:  # nothing written, not even the scene before the unknown colour
        assert not out.exists() and [path.name for path in tmp_path.iterdir()] == ["8data"]
