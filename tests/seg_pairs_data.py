"""Generated segmentation data in the layout users hold: a folder of photos, a folder of masks with
the same stems, and a classes file. Three classes: sky over grass, with a pond (a disc) somewhere.
The photos are JPEG (as cameras write them), the masks PNGs of class ids or of the classes' colours."""
import json
import pathlib

import numpy as np
from PIL import Image

CLASSES = [{"name": "sky", "colour": [70, 130, 180]},
           {"name": "grass", "colour": [107, 142, 35]},
           {"name": "pond", "colour": [0, 0, 142]}]
PHOTO_COLOURS = np.array([(150, 190, 230), (60, 150, 40), (30, 60, 120)], np.int16)


def scene(rng, height, width) -> np.ndarray:
    """uint8 class ids [height, width]."""
    ids = np.ones((height, width), np.uint8)
    ids[:int(height * rng.uniform(0.3, 0.5))] = 0
    y, x = np.mgrid[:height, :width]
    cy, cx, radius = rng.uniform(0.6, 0.85) * height, rng.uniform(0.2, 0.8) * width, height * rng.uniform(0.1, 0.2)
    ids[(y - cy) ** 2 + (x - cx) ** 2 < radius ** 2] = 2
    return ids


def photo(rng, ids) -> np.ndarray:
    noise = rng.integers(-20, 21, (*ids.shape, 3))
    return np.clip(PHOTO_COLOURS[ids] + noise, 0, 255).astype(np.uint8)


def write_pairs(root, count=10, size=(32, 64), masks="colours", split=False, seed=0, classes_format="yaml"):
    """root/images/NAME.jpg, root/masks/NAME.png (under train/ and val/ when split), and
    root/classes.yaml (or .json). Returns {stem: class ids} of every pair."""
    root = pathlib.Path(root)
    rng = np.random.default_rng(seed)
    written = {}
    for number in range(count):
        folder = ("train/" if number < count * 3 // 4 else "val/") if split else ""
        stem = f"{folder}field_{number:03d}"
        ids = scene(rng, *size)
        for path, image in ((root / "images" / f"{stem}.jpg", Image.fromarray(photo(rng, ids))),
                            (root / "masks" / f"{stem}.png", mask_image(ids, masks))):
            path.parent.mkdir(parents=True, exist_ok=True)
            image.save(path, quality=95) if path.suffix == ".jpg" else image.save(path)
        written[stem] = ids
    write_classes(root / f"classes.{classes_format}", CLASSES)
    return written


def mask_image(ids, masks):
    if masks == "colours":
        return Image.fromarray(np.array([c["colour"] for c in CLASSES], np.uint8)[ids])
    return Image.fromarray(ids)  # 8-bit grayscale class ids


def write_classes(path, classes):
    path = pathlib.Path(path)
    if path.suffix == ".json":
        path.write_text(json.dumps({"classes": classes}, indent=1))
    else:  # YAML as people write it by hand
        path.write_text("".join(f"- name: {c['name']}\n  colour: [{', '.join(map(str, c['colour']))}]\n"
                                for c in classes))
