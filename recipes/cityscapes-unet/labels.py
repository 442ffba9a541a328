"""What the recipe trains and scores: Cityscapes' label table, read from cityscapesScripts.

The prepared label maps hold Cityscapes' label ids as the release's `*_gtFine_labelIds.png` do (0..33).
Training and scoring see them through a *view*, as the benchmark defines it
(cityscapesscripts.helpers.labels, the field's own table; nothing of it is copied here):
- `classes` (the default): the 19 evaluation classes, by trainId; every label that is `ignoreInEval`
  (void, parking, rail track, guard rail, bridge, tunnel, polegroup, caravan, trailer, ...) is IGNORE,
  in the loss and in the metric. Each class belongs to one of the 7 categories (flat .. vehicle), and
  the category IoU is computed from the same predictions, as `evalPixelLevelSemanticLabeling` does.
- `categories`: the 7 categories themselves, trained directly; void and every ignored label is IGNORE.

A view is plain data (names, colours, a 256-entry lookup from stored value to training index or
IGNORE, the label id each training index is written back as), stored in the prepared index, so
data.py, the export and the benchmark's baseline read it without this module.

Encoding decisions for the uint8 label-id files:
- 'license plate' has id -1, and cityscapesScripts' json2labelImg skips negative ids, so plate pixels
  keep the id drawn below them (normally car). A -1 written into a uint8 PNG wraps to 255: IGNORE.
- Ids 34..254 do not exist in Cityscapes; prepare_data.py reports any file holding them.
"""
from __future__ import annotations

import numpy as np
from cityscapesscripts.helpers.labels import labels as CITYSCAPES_LABELS

IGNORE = 255  # the stored and training value of a pixel that counts in neither the loss nor the metric
VIEWS = ("classes", "categories")

# Ids that may appear in a valid uint8 labelIds PNG: the table's, and 255 (= -1 as uint8).
VALID_LABEL_IDS = frozenset(label.id % 256 for label in CITYSCAPES_LABELS)
# The 7 evaluated categories in categoryId order (void, category 0, is never evaluated).
CATEGORIES = tuple(sorted({(label.categoryId, label.category) for label in CITYSCAPES_LABELS
                           if not label.ignoreInEval}))
CATEGORY_NAMES = tuple(name for _, name in CATEGORIES)
_CATEGORY_INDEX = {category_id: index for index, (category_id, _) in enumerate(CATEGORIES)}


def _lookup(to_index) -> list[int]:
    table = [IGNORE] * 256
    for label in CITYSCAPES_LABELS:
        if label.id >= 0 and not label.ignoreInEval:
            table[label.id] = to_index(label)
    return table


def cityscapes_views() -> dict:
    """The two views of Cityscapes label ids (`classes` and `categories`), as the prepared index stores them."""
    evaluated = sorted((label for label in CITYSCAPES_LABELS if not label.ignoreInEval),
                       key=lambda label: label.trainId)
    classes = {
        "names": [label.name for label in evaluated],
        "colours": [list(label.color) for label in evaluated],
        "lookup": _lookup(lambda label: label.trainId),
        "label_ids": [label.id for label in evaluated],
        # the category of each class: the category IoU is scored from the class predictions
        "groups": list(CATEGORY_NAMES),
        "group_of": [_CATEGORY_INDEX[label.categoryId] for label in evaluated],
    }
    # A category is written back as the label id of its first evaluated class (flat -> road, ...)
    first_of = {}
    for label in evaluated:
        first_of.setdefault(label.categoryId, label)
    categories = {
        "names": list(CATEGORY_NAMES),
        "colours": [list(first_of[category_id].color) for category_id, _ in CATEGORIES],
        "lookup": _lookup(lambda label: _CATEGORY_INDEX[label.categoryId]),
        "label_ids": [first_of[category_id].id for category_id, _ in CATEGORIES],
    }
    return {"classes": classes, "categories": categories}


def pairs_view(names, colours, ignored) -> dict:
    """The view of --format pairs masks (class ids 0..N-1): the classes not `ignored`, in file order."""
    kept = [i for i, name in enumerate(names) if name not in ignored]
    table = [IGNORE] * 256
    for index, class_id in enumerate(kept):
        table[class_id] = index
    return {"names": [names[i] for i in kept], "colours": [list(colours[i]) for i in kept], "lookup": table}


def invalid_label_ids(label_ids: np.ndarray) -> list[int]:
    """Ids present in the array that Cityscapes does not define (sorted); empty if all are valid."""
    present = np.flatnonzero(np.bincount(label_ids.ravel(), minlength=256))
    return [int(i) for i in present if int(i) not in VALID_LABEL_IDS]
