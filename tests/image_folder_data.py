"""A generated image folder for the classification recipes' `--data-format image-folder` tests: real
JPEG and PNG files of varied sizes, one subfolder per class, in train/ and val/ (or one folder)."""
import pathlib

import numpy as np
from PIL import Image

CLASSES = ("apple", "banana", "cherry")  # three classes: not the count of any recipe's default dataset
COLOURS = ((220, 40, 40), (230, 220, 60), (120, 20, 60))


def write_photo(path: pathlib.Path, label: int, rng, size) -> None:
    """Noise with a class-coloured square; JPEG or PNG by the file's suffix."""
    width, height = size
    image = rng.integers(0, 100, (height, width, 3), dtype=np.uint8)
    image[height // 4:3 * height // 4, width // 4:3 * width // 4] = COLOURS[label]
    Image.fromarray(image).save(path)


def write_image_folder(root: pathlib.Path, per_class=(6, 2), classes=CLASSES, seed=0, split=True) -> pathlib.Path:
    """root/train/CLASS/*.jpg|png and root/val/CLASS/... (split=True), else root/CLASS/...; returns root."""
    rng = np.random.default_rng(seed)
    sizes = ((40, 30), (36, 48), (44, 44))
    parts = (("train", per_class[0]), ("val", per_class[1])) if split else (("", sum(per_class)),)
    for part, count in parts:
        for label, name in enumerate(classes):
            folder = root / part / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                suffix = ".png" if i % 3 == 2 else ".jpg"
                write_photo(folder / f"{name}-{i:03d}{suffix}", label % len(COLOURS), rng, sizes[i % len(sizes)])
    return root
