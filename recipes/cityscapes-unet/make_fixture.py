"""Write a small synthetic dataset in the official Cityscapes layout, for tests, demos and benchmarks.

    python recipes/cityscapes-unet/make_fixture.py --out /tmp/cityscapes-fixture
    python recipes/cityscapes-unet/make_fixture.py --out /tmp/cs --size 1024x2048 --train 24 --val 0 --zip

Each scene is a street-like layout (sky, buildings, road) plus a grid of objects, one per cell, so
objects never cover each other. Across all scenes every label id 0..33 appears at least once; as in
the release, a license plate (id -1) is not drawn into the labelIds maps. Pixel colours are the label's own
colour in Cityscapes' table, with noise, so a model has something to learn. Beside each labelIds map
it writes the `_gtFine_instanceIds.png` that cityscapesScripts' evaluation opens (the label ids: no
instances). The output is a pure function of the arguments: the same seed gives the same bytes.
"""
from __future__ import annotations

import argparse
import io
import math
import pathlib
import sys
import zipfile

import numpy as np
from PIL import Image

import labels
import layout
from tf_recipes import user_paths

CITIES = {"train": ("aachen", "bochum", "cologne"), "val": ("frankfurt", "lindau", "munster")}
# Each label id's colour in Cityscapes' table (grey for ids it does not define), so the fixture looks
# like a street when viewed and every class has its own appearance.
LABEL_COLOURS = np.full((256, 3), 128, np.int16)
for _label in labels.CITYSCAPES_LABELS:
    LABEL_COLOURS[_label.id % 256] = _label.color
ZIP_DATE = (2016, 2, 1, 0, 0, 0)  # fixed, so zips are byte-identical for the same seed


def scene_labels(rng: np.random.Generator, height: int, width: int, object_ids) -> np.ndarray:
    """A uint8 labelIds map: sky, buildings, sidewalk, road, then one object per grid cell."""
    ids = np.empty((height, width), np.uint8)
    horizon = int(height * rng.uniform(0.25, 0.4))
    street = int(height * rng.uniform(0.55, 0.65))
    ids[:horizon] = 23                                    # sky
    ids[horizon:street] = 11                              # building
    ids[street:] = 7                                      # road
    ids[street:street + max(1, height // 16)] = 8         # sidewalk
    cols = max(1, math.ceil(math.sqrt(len(object_ids) * width / height)))
    rows = max(1, math.ceil(len(object_ids) / cols))
    cell_h, cell_w = height // rows, width // cols
    for cell, label_id in enumerate(object_ids):
        top, left = (cell // cols) * cell_h, (cell % cols) * cell_w
        h = max(1, int(cell_h * rng.uniform(0.4, 0.9)))
        w = max(1, int(cell_w * rng.uniform(0.4, 0.9)))
        y = top + int(rng.integers(0, cell_h - h + 1))
        x = left + int(rng.integers(0, cell_w - w + 1))
        ids[y:y + h, x:x + w] = label_id
    return ids


def scene_image(rng: np.random.Generator, ids: np.ndarray) -> np.ndarray:
    """RGB uint8: the label's colour, shaded top to bottom, with noise."""
    per_id = LABEL_COLOURS
    height = ids.shape[0]
    shade = np.linspace(-15, 15, height, dtype=np.float32)[:, None, None]
    noise = rng.integers(-3, 4, size=ids.shape + (3,), dtype=np.int16)
    image = per_id[ids] + shade.astype(np.int16) + noise
    return np.clip(image, 0, 255).astype(np.uint8)


def encode_png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def make_fixture(out, train: int = 6, val: int = 3, size=(64, 128), seed: int = 0,
                 tree: bool = True, zips: bool = False) -> dict[str, list[str]]:
    """Write the fixture under `out`; return the example ids ("CITY/CITY_SEQ_FRAME") per split."""
    out = pathlib.Path(out)
    height, width = size
    counts = {"train": train, "val": val}
    total = train + val
    # Deal shuffled decks of all 34 ids over the scenes: the first deck alone covers every id.
    per_scene = max(6, math.ceil(34 / max(total, 1)))
    deck_rng = np.random.default_rng([seed, 0])
    deck = np.concatenate([deck_rng.permutation(34) for _ in range(-(-total * per_scene // 34))])
    members: list[tuple[str, bytes]] = []
    written: dict[str, list[str]] = {}
    scene = 0
    for split_number, (split, count) in enumerate(counts.items()):
        written[split] = []
        for index in range(count):
            rng = np.random.default_rng([seed, 1 + split_number, index])
            city = CITIES[split][index % len(CITIES[split])]
            example_id = f"{city}/{city}_{index // len(CITIES[split]):06d}_000019"
            object_ids = deck[scene * per_scene:(scene + 1) * per_scene]
            scene += 1
            ids = scene_labels(rng, height, width, object_ids)
            members.append((layout.image_member(split, example_id), encode_png(scene_image(rng, ids))))
            members.append((layout.label_member(split, example_id), encode_png(ids)))
            members.append((layout.instance_member(split, example_id), encode_png(ids.astype(np.uint16))))
            written[split].append(example_id)
    if tree:
        for name, data in members:
            path = out / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    if zips:
        out.mkdir(parents=True, exist_ok=True)
        for zip_name, top in ((layout.IMAGE_ZIP, layout.IMAGE_DIR), (layout.LABEL_ZIP, layout.LABEL_DIR)):
            with zipfile.ZipFile(out / zip_name, "w", zipfile.ZIP_DEFLATED) as archive:
                archive.writestr(zipfile.ZipInfo("README", ZIP_DATE),
                                 "Synthetic fixture in the Cityscapes layout; not Cityscapes data.\n")
                for name, data in members:
                    if name.startswith(top + "/"):
                        archive.writestr(zipfile.ZipInfo(name, ZIP_DATE), data,
                                         compress_type=zipfile.ZIP_DEFLATED)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder to write into (created if missing)")
    parser.add_argument("--train", type=int, default=6, help="training pairs (default 6)")
    parser.add_argument("--val", type=int, default=3, help="validation pairs (default 3)")
    parser.add_argument("--size", default="64x128",
                        help="HEIGHTxWIDTH of every image (default 64x128; Cityscapes is 1024x2048)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--zip", action="store_true",
                        help=f"also write {layout.IMAGE_ZIP} and {layout.LABEL_ZIP}, as downloaded")
    parser.add_argument("--no-tree", action="store_true", help="write only the zips (implies --zip)")
    args = parser.parse_args(argv)
    try:
        size = layout.parse_size(args.size)
    except ValueError as error:
        parser.error(f"--size: {error}")
    if size[0] < 16 or size[1] < 32:
        parser.error(f"--size {args.size} is too small to hold every label id; use at least 16x32")
    if args.train < 0 or args.val < 0 or args.train + args.val == 0:
        parser.error("--train and --val must be >= 0 and not both 0")
    out = pathlib.Path(args.out)
    user_paths.exit_if(user_paths.flags_problem({}, {"--out": args.out}))
    existing = [name for name in (layout.IMAGE_DIR, layout.LABEL_DIR, layout.IMAGE_ZIP, layout.LABEL_ZIP)
                if (out / name).exists()]
    if existing:
        parser.error(f"{out} already holds {', '.join(existing)}; choose an empty --out "
                     "so old files do not mix with new ones")
    written = make_fixture(out, args.train, args.val, size, args.seed,
                           tree=not args.no_tree, zips=args.zip or args.no_tree)
    forms = [form for form, on in (("tree", not args.no_tree), ("zips", args.zip or args.no_tree)) if on]
    print(f"wrote {len(written['train'])} train and {len(written['val'])} val pairs "
          f"({size[0]}x{size[1]}) as {' and '.join(forms)} under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
