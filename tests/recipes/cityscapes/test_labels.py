"""The labelId -> categoryId table, checked against the rows of cityscapesScripts' labels.py."""
import numpy as np
import pytest

from helpers import recipe_module

labels = recipe_module("cityscapes-unet", "labels")

# (name, id, category, categoryId), copied row by row from cityscapesScripts/helpers/labels.py.
OFFICIAL_ROWS = [
    ("unlabeled", 0, "void", 0),
    ("ego vehicle", 1, "void", 0),
    ("rectification border", 2, "void", 0),
    ("out of roi", 3, "void", 0),
    ("static", 4, "void", 0),
    ("dynamic", 5, "void", 0),
    ("ground", 6, "void", 0),
    ("road", 7, "flat", 1),
    ("sidewalk", 8, "flat", 1),
    ("parking", 9, "flat", 1),
    ("rail track", 10, "flat", 1),
    ("building", 11, "construction", 2),
    ("wall", 12, "construction", 2),
    ("fence", 13, "construction", 2),
    ("guard rail", 14, "construction", 2),
    ("bridge", 15, "construction", 2),
    ("tunnel", 16, "construction", 2),
    ("pole", 17, "object", 3),
    ("polegroup", 18, "object", 3),
    ("traffic light", 19, "object", 3),
    ("traffic sign", 20, "object", 3),
    ("vegetation", 21, "nature", 4),
    ("terrain", 22, "nature", 4),
    ("sky", 23, "sky", 5),
    ("person", 24, "human", 6),
    ("rider", 25, "human", 6),
    ("car", 26, "vehicle", 7),
    ("truck", 27, "vehicle", 7),
    ("bus", 28, "vehicle", 7),
    ("caravan", 29, "vehicle", 7),
    ("trailer", 30, "vehicle", 7),
    ("train", 31, "vehicle", 7),
    ("motorcycle", 32, "vehicle", 7),
    ("bicycle", 33, "vehicle", 7),
    ("license plate", -1, "vehicle", 7),
]


def test_table_has_every_official_id():
    assert sorted(labels.LABEL_TO_CATEGORY) == sorted(row[1] for row in OFFICIAL_ROWS)
    assert len(OFFICIAL_ROWS) == 35


@pytest.mark.parametrize("name,label_id,category,category_id", OFFICIAL_ROWS)
def test_each_id_maps_to_its_official_category(name, label_id, category, category_id):
    assert labels.LABEL_TO_CATEGORY[label_id] == category_id, name
    assert labels.CATEGORY_NAMES[category_id] == category
    # The vectorised path, with the id as it is stored in a uint8 PNG (-1 wraps to 255).
    stored = np.array([[label_id % 256]], dtype=np.uint8)
    assert labels.to_categories(stored).tolist() == [[category_id]], name


def test_255_is_the_license_plate_and_unknown_ids_are_void():
    assert labels.to_categories(np.array([255], np.uint8)).tolist() == [7]
    unknown = np.arange(34, 255, dtype=np.uint8)
    assert (labels.to_categories(unknown) == 0).all()
    assert labels.invalid_label_ids(unknown) == list(range(34, 255))
    assert labels.invalid_label_ids(np.array([0, 33, 255], np.uint8)) == []


def test_lookup_keeps_shape_and_dtype():
    ids = np.random.default_rng(0).integers(0, 34, size=(4, 6), dtype=np.uint8)
    out = labels.to_categories(ids)
    assert out.shape == (4, 6) and out.dtype == np.uint8
    expected = [[labels.LABEL_TO_CATEGORY[int(i)] for i in row] for row in ids]
    assert out.tolist() == expected


def test_rejects_wider_integer_arrays():
    with pytest.raises(TypeError, match="uint8"):
        labels.to_categories(np.array([-1, 7]))
