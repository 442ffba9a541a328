"""The seed workshop's Cityscapes sample in the official Cityscapes layout, label ids recovered from its colours.

    python ci/bench/seed_cityscapes.py --seed-dir 8data --out DIR --split train=0:80 --split val=80:100

The seed workshop (github.com/twittidai/TF2_Workshop) ships 100 real scenes in `8data/`: the photos as
`img/CITY_SEQ_FRAME_leftImg8bit.png` and the fine annotations as the release's colour maps,
`gt/CITY_SEQ_FRAME_gtFine_color.png`, but no label-id files. This writes, for each scene of each --split:
    DIR/leftImg8bit/SPLIT/CITY/CITY_SEQ_FRAME_leftImg8bit.png     the photo, copied byte for byte
    DIR/gtFine/SPLIT/CITY/CITY_SEQ_FRAME_gtFine_labelIds.png      uint8 label ids, from the colours
    DIR/gtFine/SPLIT/CITY/CITY_SEQ_FRAME_gtFine_instanceIds.png   uint16: the same label ids
so that `recipes/cityscapes-unet/prepare_data.py --source DIR` prepares it and cityscapesScripts'
evalPixelLevelSemanticLabeling scores predictions against it as against the release.

Each colour is mapped back through cityscapesScripts' own label table (cityscapesscripts.helpers.labels:
colour -> id). The table gives a few ids the same colour, and a colour map cannot tell them apart:
- black (0, 0, 0) is 'unlabeled', 'ego vehicle', 'rectification border', 'out of roi' and 'static' (ids 0-4),
  all void and left out of the evaluation: written as 0, which the evaluation treats alike;
- 'polegroup' (id 18) has the colour of 'pole' (id 17): written as pole (17). Polegroup is left out of the
  evaluation and pole is evaluated, so the few polegroup pixels of the release count as pole here;
- 'license plate' (id -1) has the colour of 'car' (id 26): written as car, as in the release, whose labelIds
  files hold the car's id under the plates.
A colour the table does not hold is an error naming the file. The instanceIds file is what the official
evaluation opens beside each labelIds file (its instance-weighted scores); a colour map holds no instances, so
it holds the label ids (no id of 1,000 or more, so no instance), as 16-bit grey like the release's: those
instance-weighted scores mean nothing here, the class and category IoU are the evaluation's own.

Scenes are sorted by name and each --split NAME=START:END takes the scenes at those positions (END
excluded), so a selection split, e.g. train=0:64 and val=64:80, can be cut from the training scenes alone;
two splits may not share a scene. DIR must be new or empty; it appears whole or not at all (the scenes are
written beside it, then renamed). No Cityscapes file is ever kept in this
repository: the Cityscapes licence forbids redistributing them.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import sys

import numpy as np
from PIL import Image

IMAGE_SUFFIX = "_leftImg8bit.png"
COLOUR_SUFFIX = "_gtFine_color.png"
LABEL_SUFFIX = "_gtFine_labelIds.png"
INSTANCE_SUFFIX = "_gtFine_instanceIds.png"
SCENE = re.compile(r"(?P<city>[A-Za-z]+)_\d+_\d+")  # CITY_SEQ_FRAME, e.g. aachen_000000_000019
SPLIT = re.compile(r"(?P<name>[A-Za-z0-9_-]+)=(?P<start>\d+):(?P<end>\d+)")
UNKNOWN = -1


class SeedError(Exception):
    """A mistake in the command line or in the sample: reported as one line, exit 2."""


def colour_table() -> np.ndarray:
    """int16 [2**24]: the label id of each packed colour (r << 16 | g << 8 | b), UNKNOWN where the table
    holds none. Where colours are shared, the lowest id that is not negative wins (see the docstring)."""
    from cityscapesscripts.helpers.labels import labels

    table = np.full(1 << 24, UNKNOWN, np.int16)
    for label in sorted((label for label in labels if label.id >= 0), key=lambda label: label.id, reverse=True):
        red, green, blue = label.color
        table[red << 16 | green << 8 | blue] = label.id  # in descending order: the lowest id is written last
    return table


def label_ids(colours: np.ndarray, table: np.ndarray, source) -> np.ndarray:
    """uint8 [H, W] label ids of an RGB colour map [H, W, 3]; a SeedError naming `source` for a colour that
    is no label's."""
    packed = (colours[..., 0].astype(np.int32) << 16) | (colours[..., 1].astype(np.int32) << 8) | colours[..., 2]
    ids = table[packed]
    unknown = ids == UNKNOWN
    if unknown.any():
        found = np.unique(packed[unknown])
        shown = ", ".join(f"({c >> 16}, {c >> 8 & 255}, {c & 255})" for c in found[:5])
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        raise SeedError(f"{source}: {int(unknown.sum())} pixels of {len(found)} colour(s) that cityscapesScripts' "
                        f"label table does not hold: {shown}{more}; give the release's gtFine_color maps")
    return ids.astype(np.uint8)


def scenes(seed_dir: pathlib.Path) -> list[str]:
    """The scenes of the sample, sorted by name, each with its photo and colour map."""
    images, colours = seed_dir / "img", seed_dir / "gt"
    for folder in (images, colours):
        if not folder.is_dir():
            raise SeedError(f"--seed-dir {seed_dir} has no {folder.name}/ folder; give the workshop's 8data/ "
                            "(img/*_leftImg8bit.png and gt/*_gtFine_color.png)")
    names = sorted(path.name[:-len(IMAGE_SUFFIX)] for path in images.glob(f"*{IMAGE_SUFFIX}"))
    if not names:
        raise SeedError(f"{images} holds no *{IMAGE_SUFFIX}")
    for name in names:
        if not SCENE.fullmatch(name):
            raise SeedError(f"{images / (name + IMAGE_SUFFIX)}: not named CITY_SEQ_FRAME{IMAGE_SUFFIX}")
        if not (colours / f"{name}{COLOUR_SUFFIX}").is_file():
            raise SeedError(f"{images / (name + IMAGE_SUFFIX)} has no {colours / (name + COLOUR_SUFFIX)}")
    return names


def split_spec(text: str) -> tuple[str, int, int]:
    match = SPLIT.fullmatch(text)
    if not match or int(match["start"]) >= int(match["end"]):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=START:END with START < END, e.g. train=0:80")
    return match["name"], int(match["start"]), int(match["end"])


def assigned(names: list[str], splits: list[tuple[str, int, int]]) -> dict[str, list[str]]:
    """{split: its scenes}; a SeedError for a slice past the end, a split named twice or a shared scene."""
    chosen, owner = {}, {}
    for split, start, end in splits:
        if split in chosen:
            raise SeedError(f"--split {split} is given twice")
        if end > len(names):
            raise SeedError(f"--split {split}={start}:{end}: the sample has {len(names)} scenes (0:{len(names)})")
        for position in range(start, end):
            if position in owner:
                raise SeedError(f"--split {split}={start}:{end} shares scene {position} ({names[position]}) "
                                f"with --split {owner[position]}")
            owner[position] = split
        chosen[split] = names[start:end]
    return chosen


def write_png(path: pathlib.Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path, format="PNG")


def convert(seed_dir: pathlib.Path, out: pathlib.Path, split: str, name: str, table: np.ndarray) -> None:
    city = SCENE.fullmatch(name)["city"]
    image_source, colour_source = seed_dir / "img" / f"{name}{IMAGE_SUFFIX}", seed_dir / "gt" / f"{name}{COLOUR_SUFFIX}"
    try:
        with Image.open(colour_source) as colour_map:
            colours = np.asarray(colour_map.convert("RGB"))
        with Image.open(image_source) as image:
            image_size = image.size
        photo = image_source.read_bytes()
    except OSError as error:
        raise SeedError(f"cannot read {colour_source} or {image_source}: {error}") from None
    if image_size != (colours.shape[1], colours.shape[0]):
        raise SeedError(f"{colour_source} is {colours.shape[1]}x{colours.shape[0]}, its photo {image_source} "
                        f"{image_size[0]}x{image_size[1]}")
    ids = label_ids(colours, table, colour_source)
    labels_dir, images_dir = out / "gtFine" / split / city, out / "leftImg8bit" / split / city
    write_png(labels_dir / f"{name}{LABEL_SUFFIX}", ids)
    write_png(labels_dir / f"{name}{INSTANCE_SUFFIX}", ids.astype(np.uint16))
    images_dir.mkdir(parents=True, exist_ok=True)
    (images_dir / f"{name}{IMAGE_SUFFIX}").write_bytes(photo)


def written(seed_dir: pathlib.Path, out: pathlib.Path, chosen: dict[str, list[str]]) -> None:
    """Every scene converted into a folder beside `out`, which becomes `out` only when all are: a failure
    leaves nothing behind."""
    staging = out.parent / f".{out.name}.partial-{os.getpid()}"
    table = colour_table()
    try:
        for split, names in chosen.items():
            for name in names:
                convert(seed_dir, staging, split, name, table)
            print(f"{split}: {len(names)} scenes ({names[0]} .. {names[-1]})", flush=True)
        if out.exists():
            out.rmdir()  # new or empty, checked before
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed-dir", required=True, type=pathlib.Path,
                        help="the workshop's 8data/ folder (img/ and gt/)")
    parser.add_argument("--out", required=True, type=pathlib.Path, help="a new or empty folder to write into")
    parser.add_argument("--split", action="append", type=split_spec, required=True, metavar="NAME=START:END",
                        help="scenes START..END-1 of the sorted sample into split NAME (repeat for each split)")
    args = parser.parse_args(argv)
    try:
        if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
            raise SeedError(f"--out {args.out} exists and is not an empty folder; give a new one")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        written(args.seed_dir, args.out, assigned(scenes(args.seed_dir), args.split))
        print(f"wrote the official layout in {args.out}", flush=True)
    except SeedError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
