"""A folder of photos in class-named subfolders (`--data-format image-folder`) as sorted lists of files and
labels, the same in every process: DIR/train/CLASS/*.jpg|*.jpeg|*.png and DIR/val/CLASS/..., or DIR/CLASS/...
split by --val-fraction (drawn from --seed). Label i is the i-th class name in sorted order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from tf_recipes import user_paths
from tf_recipes.contract import class_name_problem
from tf_recipes.data import DataError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
TRAIN, VAL = "train", "val"


@dataclass
class ImageFolder:
    """The photos of `root`: the class names (its subfolders, sorted: a class's id is its place in this
    list, in training, in results.json and in the export's labels.txt) and each split's files and labels."""

    root: str
    class_names: list[str]
    splits: dict[str, tuple[list[str], np.ndarray]] = field(default_factory=dict)  # split -> (paths, labels)

    @property
    def data_dir(self) -> str:
        return self.root

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def files(self, split: str) -> list[str]:
        return self.splits[split][0]

    def labels(self, split: str) -> np.ndarray:
        return self.splits[split][1]


def _classes(folder: str) -> dict[str, list[str]]:
    """Class name -> sorted image paths, for each subfolder; an empty class is a DataError."""
    classes = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not os.path.isdir(path):
            continue
        if class_name_problem(name):
            raise DataError(
                f"class folder {name!r} in {folder}: the name {class_name_problem(name)}, and "
                "each class name is one line of the export's labels.txt; rename the folder"
            )
        # Distributed: sorted, so every process lists the same files
        listing = user_paths.list_files(path, suffixes=IMAGE_SUFFIXES)
        for other, what in listing.others[:1]:  # never opened: a FIFO would block the run
            raise DataError(
                f"{user_paths.not_a_file(other, what)}, in class {name!r} of {folder}; "
                "replace it with the photo itself or remove it"
            )
        if not listing.files:
            raise DataError(
                f"class {name!r} in {folder} holds no .jpg, .jpeg or .png file; "
                "add its photos or remove the folder"
            )
        classes[name] = listing.files
    if not classes:
        raise DataError(f"{folder} holds no class subfolders; expected one folder of photos per class")
    return classes


def _as_split(classes: dict[str, list[str]], names: list[str]) -> tuple[list[str], np.ndarray]:
    paths = [path for name in names for path in classes.get(name, [])]
    labels = np.array([i for i, name in enumerate(names) for _ in classes.get(name, [])], np.int32)
    return paths, labels


def read_image_folder(data_dir: str, val_fraction: float | None = None, seed: int = 0) -> ImageFolder:
    """The folder's classes and its train and val splits (paths, labels), or a one-line DataError."""
    if not data_dir or not os.path.isdir(data_dir):
        raise DataError(
            f"--data-dir {data_dir} does not exist; --data-format image-folder needs a folder "
            "with train/ and val/ (or one folder of classes and --val-fraction)"
        )
    if val_fraction is not None:
        if not 0 < val_fraction < 1:
            raise DataError(f"--val-fraction {val_fraction} must be between 0 and 1")
        # Distributed: one split everywhere
        train, val, rng = _classes(data_dir), {}, np.random.default_rng(seed)
        for name, files in list(train.items()):
            order = rng.permutation(len(files))
            cut = max(1, int(round(len(files) * val_fraction)))
            if cut >= len(files):
                raise DataError(
                    f"class {name!r} in {data_dir} has {len(files)} photo(s): too few to keep "
                    f"some for training with --val-fraction {val_fraction}"
                )
            val[name] = sorted(files[i] for i in order[:cut])
            train[name] = sorted(files[i] for i in order[cut:])
    else:
        found = {split: os.path.join(data_dir, split) for split in (TRAIN, VAL)}
        for split, path in found.items():
            if not os.path.isdir(path):
                raise DataError(
                    f"{data_dir} has no {split}/ folder; give train/ and val/ of class "
                    "subfolders, or pass --val-fraction F to split one folder of classes"
                )
        train, val = _classes(found[TRAIN]), _classes(found[VAL])
        for name in sorted(set(train) - set(val)):
            raise DataError(
                f"class {name!r} is in {found[TRAIN]} but not in {found[VAL]}; add its validation photos"
            )
        for name in sorted(set(val) - set(train)):
            raise DataError(
                f"class {name!r} is in {found[VAL]} but not in {found[TRAIN]}; "
                "remove it or add training photos"
            )
    names = sorted(train)
    return ImageFolder(data_dir, names, {TRAIN: _as_split(train, names), VAL: _as_split(val, names)})


def unreadable(path: str, reason: str) -> DataError:
    return DataError(f"{path} cannot be decoded as an image ({reason}); replace or remove it")
