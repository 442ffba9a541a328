"""File names: the official Cityscapes release, and the prepared data that training reads.

Official release (both zips hold these top-level folders, so extracting them into one folder gives
the same tree):
    leftImg8bit/{train,val,test}/CITY/CITY_SEQ_FRAME_leftImg8bit.png     RGB, 1024x2048
    gtFine/{train,val,test}/CITY/CITY_SEQ_FRAME_gtFine_labelIds.png      uint8 label ids

Prepared data (written by prepare_data.py, read by data.py):
    OUT/SPLIT/images/CITY/CITY_SEQ_FRAME.png       the original RGB PNG, byte for byte
    OUT/SPLIT/labels/CITY/CITY_SEQ_FRAME.png       uint8 label ids, as the release's labelIds files
    OUT/SPLIT.json      index: image size, the views training can take of the labels (labels.py:
                        `classes`, `categories`), the sorted example ids and the byte sizes of each
                        example's two files; written last, so it exists only for a complete split

An example id is "CITY/CITY_SEQ_FRAME", e.g. "aachen/aachen_000000_000019". With --format pairs
(pairs.py) it is the image's path relative to its split folder without the suffix, the image is
re-encoded as an RGB PNG unless it already is one, and the category map holds the user's class ids.
"""
from __future__ import annotations

import pathlib
import re

IMAGE_ZIP = "leftImg8bit_trainvaltest.zip"
LABEL_ZIP = "gtFine_trainvaltest.zip"
IMAGE_DIR = "leftImg8bit"
LABEL_DIR = "gtFine"
IMAGE_SUFFIX = "_leftImg8bit.png"
LABEL_SUFFIX = "_gtFine_labelIds.png"
INSTANCE_SUFFIX = "_gtFine_instanceIds.png"  # not read here; cityscapesScripts' evaluation opens it
PREDICTION_SUFFIX = "_pred_labelIds.png"  # train.py --predict-format labelids, as the evaluation finds them
FULL_SIZE = (1024, 2048)
INDEX_FORMAT = "cityscapes-labels-png/2"
OLD_INDEX_FORMATS = ("cityscapes-categories-png/1",)  # ours too: prepare_data.py replaces them

# A split is a folder and an index file in the prepared data: a plain name, never a path.
SPLIT_NAME = re.compile(r"[A-Za-z0-9_-]+")

# leftImg8bit/train/aachen/aachen_000000_000019_leftImg8bit.png -> image, train, aachen/aachen_...
# (a city of "." or "..", which only a zip can hold, would lead the prepared files out of their folder)
_MEMBER = re.compile(r"^(?P<top>leftImg8bit|gtFine)/(?P<split>[^/]+)/(?P<id>(?!\.\.?/)[^/]+/[^/]+?)"
                     r"(?P<suffix>_leftImg8bit\.png|_gtFine_labelIds\.png)$")


def image_member(split: str, example_id: str) -> str:
    return f"{IMAGE_DIR}/{split}/{example_id}{IMAGE_SUFFIX}"


def label_member(split: str, example_id: str) -> str:
    return f"{LABEL_DIR}/{split}/{example_id}{LABEL_SUFFIX}"


def instance_member(split: str, example_id: str) -> str:
    return f"{LABEL_DIR}/{split}/{example_id}{INSTANCE_SUFFIX}"


def is_candidate(relative_path: str) -> bool:
    """True for any path that names a Cityscapes image or labelIds file, wherever it sits."""
    return relative_path.endswith((IMAGE_SUFFIX, LABEL_SUFFIX))


def parse_member(relative_path: str):
    """('image' | 'label', split, example_id) for a path in the official layout, else None."""
    match = _MEMBER.match(relative_path)
    if not match or (match["top"] == IMAGE_DIR) != (match["suffix"] == IMAGE_SUFFIX):
        return None
    kind = "image" if match["top"] == IMAGE_DIR else "label"
    return kind, match["split"], match["id"]


def index_path(data_dir, split: str) -> pathlib.Path:
    return pathlib.Path(data_dir) / f"{split}.json"


def prepared_image(data_dir, split: str, example_id: str) -> pathlib.Path:
    return pathlib.Path(data_dir) / split / "images" / f"{example_id}.png"


def prepared_labels(data_dir, split: str, example_id: str) -> pathlib.Path:
    return pathlib.Path(data_dir) / split / "labels" / f"{example_id}.png"


def parse_size(text: str) -> tuple[int, int]:
    """'1024x2048' -> (1024, 2048): height x width, as Cityscapes sizes are usually written."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not match or 0 in (int(match[1]), int(match[2])):
        raise ValueError(f"size {text!r} is not HEIGHTxWIDTH, e.g. 1024x2048")
    return int(match[1]), int(match[2])
