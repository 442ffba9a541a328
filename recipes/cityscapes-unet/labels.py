"""Cityscapes label ids -> the 8 official categories (categoryId in cityscapesScripts' labels.py).

The recipe trains on categories, not on the 19 train ids: 8 classes are enough to show the input
pipeline and the distribution at full resolution, and no Cityscapes pixel is ignored.

Encoding decisions for the uint8 `*_gtFine_labelIds.png` files:
- The official files hold ids 0..33 only. 'license plate' has id -1, and cityscapesScripts'
  json2labelImg skips negative ids, so plate pixels keep the id drawn below them (normally car, 26).
- If a tool does write -1 into a uint8 PNG it wraps to 255, so 255 maps to vehicle, like -1.
- Ids 34..254 do not exist in Cityscapes. They map to void (0) so the lookup never fails, but
  prepare_data.py reports any label file that contains them instead of mapping them quietly.
"""
from __future__ import annotations

import numpy as np

CATEGORY_NAMES = ("void", "flat", "construction", "object", "nature", "sky", "human", "vehicle")
NUM_CATEGORIES = len(CATEGORY_NAMES)
# Cityscapes' own colours of the categories, for prediction PNGs.
CATEGORY_COLOURS = ((0, 0, 0), (128, 64, 128), (70, 70, 70), (153, 153, 153), (107, 142, 35),
                    (70, 130, 180), (220, 20, 60), (0, 0, 142))

# labelId -> categoryId; categories are contiguous id ranges in the official table.
LABEL_TO_CATEGORY = {
    **{label_id: 0 for label_id in range(0, 7)},     # void: unlabeled .. ground
    **{label_id: 1 for label_id in range(7, 11)},    # flat: road, sidewalk, parking, rail track
    **{label_id: 2 for label_id in range(11, 17)},   # construction: building .. tunnel
    **{label_id: 3 for label_id in range(17, 21)},   # object: pole .. traffic sign
    **{label_id: 4 for label_id in range(21, 23)},   # nature: vegetation, terrain
    23: 5,                                           # sky
    24: 6, 25: 6,                                    # human: person, rider
    **{label_id: 7 for label_id in range(26, 34)},   # vehicle: car .. bicycle
    -1: 7,                                           # license plate
}

# Ids that may appear in a valid uint8 labelIds PNG: 0..33, and 255 (= -1 as uint8).
VALID_LABEL_IDS = frozenset(label_id % 256 for label_id in LABEL_TO_CATEGORY)


def _build_lookup() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint8)  # unknown ids -> void
    for label_id, category in LABEL_TO_CATEGORY.items():
        table[label_id % 256] = category  # -1 % 256 == 255
    table.setflags(write=False)
    return table


CATEGORY_LOOKUP = _build_lookup()


def to_categories(label_ids: np.ndarray) -> np.ndarray:
    """Map a uint8 labelIds array of any shape to categoryIds (uint8, 0..7), by table indexing."""
    if label_ids.dtype != np.uint8:
        raise TypeError(f"label ids must be uint8 as read from a labelIds PNG, got {label_ids.dtype}")
    return CATEGORY_LOOKUP[label_ids]


def invalid_label_ids(label_ids: np.ndarray) -> list[int]:
    """Ids present in the array that Cityscapes does not define (sorted); empty if all are valid."""
    present = np.flatnonzero(np.bincount(label_ids.ravel(), minlength=256))
    return [int(i) for i in present if int(i) not in VALID_LABEL_IDS]
