"""Your own segmentation data: a folder of images and a folder of masks, paired by file stem.

    python recipes/cityscapes-unet/prepare_data.py --format pairs \
        --images DIR --masks DIR --classes classes.yaml --out data/mine

IMAGES holds JPEG or PNG photos, MASKS one PNG per photo with the same relative path and stem
(`street/0001.jpg` <-> `street/0001.png`). Either both hold `train/` and `val/` folders, or both
are flat and `--val-fraction` of the stems (a seeded draw) become val. A mask is either
- a grayscale or palette PNG whose pixel values are class ids 0..N-1, or
- an RGB(A) PNG whose colours are the classes' colours in the classes file.

The classes file (YAML or JSON) lists the classes in id order, each a name with an optional
colour (required for RGB masks; otherwise it only colours the prediction PNGs):

    - {name: unlabeled, colour: [0, 0, 0], ignore: true}
    - {name: road, colour: "#804080"}
    - sky

or a mapping `name: colour`. A class marked `ignore: true` (unlabeled, void, a border) counts in
neither the loss nor the metric, and the model does not predict it. prepare_data.py writes the
layout data.py reads (layout.py), with the class names and palette in the index, so the model,
results.json, the export and predict.py's PNGs all get the user's classes.
"""
from __future__ import annotations

import hashlib
import io
import json
import pathlib
import re

import numpy as np
from PIL import Image

from tf_recipes import user_paths
from tf_recipes.contract import class_name_problem

import labels

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
MASK_SUFFIX = ".png"
EXPECTED_PAIRS = """\
expected: --images DIR of .jpg/.png photos and --masks DIR of .png masks with the same stems,
either both with train/ and val/ folders or both flat (then --val-fraction of them become val);
--classes FILE (YAML or JSON) lists the class names in id order, with colours for RGB masks"""


class PairsError(Exception):
    """A mistake in the command line, the classes file or the folders: one line, no traceback."""


# --- The classes file ----------------------------------------------------------------------------

def _colour(value, where: str):
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"#[0-9a-fA-F]{6}", value.strip()):
        text = value.strip()
        return tuple(int(text[i:i + 2], 16) for i in (1, 3, 5))
    if (isinstance(value, (list, tuple)) and len(value) == 3
            and all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in value)):
        return tuple(value)
    raise PairsError(f"{where}: colour {value!r} is neither [R, G, B] with values 0..255 nor '#rrggbb'")


def read_classes(path) -> tuple[list[str], list, set[str]]:
    """(names, colours or None per class, the names marked `ignore: true`) from a YAML or JSON classes
    file, in id order."""
    path = pathlib.Path(path)
    problem = user_paths.file_problem("--classes", path)
    if problem:  # checked, not opened: reading a FIFO would block
        raise PairsError(problem)
    try:
        text = path.read_text()
    except OSError as error:
        raise PairsError(f"--classes {path}: cannot be read ({error.strerror or error})") from None
    try:
        if path.suffix.lower() == ".json":
            content = json.loads(text)
        else:
            import yaml  # YAML is a superset of JSON: .yaml, .yml and anything else
            content = yaml.safe_load(text)
    except Exception as error:  # json and yaml raise their own error types
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise PairsError(f"--classes {path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'} "
                         f"({first})") from None
    if isinstance(content, dict) and "classes" in content:
        content = content["classes"]
    if isinstance(content, dict):
        content = [{"name": name, "colour": colour} for name, colour in content.items()]
    if not isinstance(content, list) or not content:
        raise PairsError(f"--classes {path}: expected a list of classes (names, or name and colour); "
                         "see `prepare_data.py --help`")
    names, colours, ignored = [], [], set()
    for number, entry in enumerate(content):
        where = f"--classes {path}, class {number}"
        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
            raise PairsError(f"{where}: {entry!r} has no name; write `- NAME` or `- {{name: NAME, colour: [R, G, B]}}`")
        name = entry["name"].strip()
        if class_name_problem(name):
            raise PairsError(f"{where}: the name {name!r} {class_name_problem(name)}; each class name is one line "
                             "of the export's labels.txt, so give it a name on one line")
        names.append(name)
        colours.append(_colour(entry.get("colour", entry.get("color")), where))
        if entry.get("ignore", False) not in (True, False):
            raise PairsError(f"{where}: ignore {entry['ignore']!r} is neither true nor false")
        if entry.get("ignore"):
            ignored.add(name)
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise PairsError(f"--classes {path}: class names appear twice: {', '.join(duplicates)}")
    if len(names) > 255:
        raise PairsError(f"--classes {path}: {len(names)} classes; masks are 8-bit, so at most 255")
    given = [colour for colour in colours if colour is not None]
    if len(set(given)) != len(given):
        raise PairsError(f"--classes {path}: two classes share a colour, so an RGB mask would be ambiguous")
    if len(ignored) == len(names):
        raise PairsError(f"--classes {path}: every class is marked ignore: true; leave at least one to learn")
    return names, colours, ignored


def palette_for(colours) -> list[tuple[int, int, int]]:
    """The classes' colours, with distinct generated ones for classes the file gives none."""
    taken = {colour for colour in colours if colour is not None}
    generated = ((int(i * 97) % 256, int(i * 57 + 80) % 256, int(i * 151 + 160) % 256) for i in range(1, 10**4))
    palette = []
    for colour in colours:
        if colour is None:
            colour = next(c for c in generated if c not in taken)
            taken.add(colour)
        palette.append(colour)
    return palette


# --- The two folders -----------------------------------------------------------------------------

def _listing(folder: pathlib.Path, suffixes, problems: list) -> dict[str, list[pathlib.Path]]:
    """Relative stem ('street/0001') -> files, for every regular file with one of the suffixes (hidden ones
    left out); an entry with such a suffix that is no regular file (a FIFO, a dangling link) is a problem."""
    listing = user_paths.list_files(folder, recursive=True, suffixes=suffixes, hidden=False)
    problems.extend(user_paths.not_a_file(path, what) for path, what in listing.others)
    found = {}
    for path in map(pathlib.Path, listing.files):
        found.setdefault(path.relative_to(folder).with_suffix("").as_posix(), []).append(path)
    return found


def _signature(path: pathlib.Path) -> list:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


class ImageMaskFolders:
    """The `--format pairs` source for prepare_data.prepare: pairs by stem, loads and checks one pair."""

    def __init__(self, images, masks, classes_file, val_fraction: float = 0.2, seed: int = 0, size=None):
        self.images, self.masks = pathlib.Path(images), pathlib.Path(masks)
        for flag, folder in (("--images", self.images), ("--masks", self.masks)):
            if not folder.is_dir():
                raise PairsError(f"{flag} {folder} is not a folder\n" + EXPECTED_PAIRS)
        if not 0 < val_fraction < 1:
            raise PairsError(f"--val-fraction {val_fraction}: use a fraction between 0 and 1, e.g. 0.2")
        self.classes_file = pathlib.Path(classes_file)
        self.categories, colours, ignored = read_classes(classes_file)
        self.colours = colours
        self.palette = palette_for(colours)
        self.views = {"classes": labels.pairs_view(self.categories, self.palette, ignored)}
        self.values = list(range(len(self.categories)))  # the class ids a mask may hold
        self.val_fraction, self.seed, self.size = val_fraction, seed, tuple(size) if size else None
        # Every output depends on the classes and --size too: changing them redoes every pair.
        settings = [self.categories, colours, sorted(ignored), self.size]
        self.settings = hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]
        self.files: dict = {}  # (split, example id) -> (image file, mask file), filled by pairs()
        self.inputs = {"--images": images, "--masks": masks, "--classes": classes_file}  # what --out stays out of

    def __getstate__(self):  # sent to every worker with every pair: each task carries its own files
        return {**self.__dict__, "files": {}}

    def describe(self) -> str:
        return (f"reading images from {self.images}, masks from {self.masks}, "
                f"{len(self.categories)} classes from {self.classes_file}")

    def _splits_of(self, splits):
        """split -> (image folder, mask folder, stems or None for all)."""
        if all((self.images / split).is_dir() for split in splits):
            return {split: (self.images / split, self.masks / split) for split in splits}, None
        if sorted(splits) != ["train", "val"]:
            raise PairsError(f"--images {self.images} has no {'/, '.join(splits)}/ folders; "
                             "flat folders are split into train and val only (--splits train,val)")
        return {split: (self.images, self.masks) for split in splits}, True

    def pairs(self, splits):
        folders, flat = self._splits_of(splits)
        problems, pairs, signatures = [], {}, {}
        stems_of = {}
        for split, (image_folder, mask_folder) in folders.items():
            if flat and split != "train":
                continue  # one flat listing, split below
            if not mask_folder.is_dir():
                raise PairsError(f"split {split!r}: no mask folder {mask_folder} for the images in {image_folder}; "
                                 "check --splits and --masks")
            images = _listing(image_folder, IMAGE_SUFFIXES, problems)
            masks = _listing(mask_folder, (MASK_SUFFIX,), problems)
            for stem in sorted({**images, **masks}):
                if len(images.get(stem, [])) > 1:
                    problems.append(f"two images with the stem {stem}: {', '.join(map(str, images[stem]))}; "
                                    "keep one")
            for stem in sorted(set(images) - set(masks)):
                problems.append(f"image without mask: {images[stem][0]} (no {mask_folder / stem}{MASK_SUFFIX})")
            for stem in sorted(set(masks) - set(images)):
                problems.append(f"mask without image: {masks[stem][0]} "
                                f"(no {image_folder / stem}.jpg, .jpeg or .png)")
            stems_of[split] = {stem: (images[stem][0], masks[stem][0]) for stem in set(images) & set(masks)
                               if len(images[stem]) == 1}
        if flat:
            both = stems_of["train"]
            ordered = sorted(both)
            permuted = np.random.default_rng(self.seed).permutation(len(ordered))
            chosen = permuted[:round(len(ordered) * self.val_fraction)]
            val = {ordered[i] for i in chosen}
            stems_of = {"train": {s: f for s, f in both.items() if s not in val},
                        "val": {s: f for s, f in both.items() if s in val}}
        for split in splits:
            found = stems_of[split]
            if not found:
                raise PairsError(f"split {split!r} has no image and mask pairs in {folders[split][0]} and "
                                 f"{folders[split][1]}"
                                 + (f" (--val-fraction {self.val_fraction} of them)" if flat and split == "val" else "")
                                 + "; check --splits, --images and --masks")
            pairs[split] = sorted(found)
            signatures[split] = {}
            for stem, (image, mask) in found.items():
                self.files[split, stem] = (image, mask)
                signatures[split][stem] = [_signature(image), _signature(mask), self.settings]
        return pairs, signatures, problems

    def image_file(self, split: str, example_id: str) -> str:
        return str(self.files[split, example_id][0])

    def locate(self, split: str, example_id: str):
        return self.files[split, example_id]

    def load(self, split: str, example_id: str, located, problems: list):
        """(image PNG bytes, (height, width), class id map) of a checked pair, or None."""
        image_path, mask_path = located
        try:
            image, image_bytes = Image.open(image_path), image_path.read_bytes()
            image.load()
        except Exception as error:  # PIL raises several types; all mean "unreadable"
            problems.append(f"unreadable image: {image_path} ({error})")
            return None
        try:
            mask = Image.open(mask_path)
            mask.load()
        except Exception as error:
            problems.append(f"unreadable mask: {mask_path} ({error})")
            return None
        if image.format not in ("JPEG", "PNG") or mask.format != "PNG":
            problems.append(f"not a JPEG or PNG photo with a PNG mask: {image_path} is {image.format}, "
                            f"{mask_path} is {mask.format}")
            return None
        if mask.size != image.size:
            problems.append(f"size mismatch: {image_path} is {image.height}x{image.width} but "
                            f"{mask_path} is {mask.height}x{mask.width}")
            return None
        ids = self._class_ids(mask, mask_path, problems)
        if ids is None:
            return None
        keep_bytes = image.format == "PNG" and image.mode == "RGB" and not self.size
        if self.size and (image.height, image.width) != self.size:
            height, width = self.size
            image = image.convert("RGB").resize((width, height), Image.Resampling.BILINEAR)
            ids = np.asarray(Image.fromarray(ids).resize((width, height), Image.Resampling.NEAREST))
        if not keep_bytes:
            encoded = io.BytesIO()
            image.convert("RGB").save(encoded, format="PNG")
            image_bytes = encoded.getvalue()
        return image_bytes, (ids.shape[0], ids.shape[1]), ids

    def _class_ids(self, mask: Image.Image, path, problems: list):
        count = len(self.categories)
        if mask.mode in ("RGB", "RGBA"):
            if any(colour is None for colour in self.colours):
                missing = [name for name, colour in zip(self.categories, self.colours, strict=True) if colour is None]
                problems.append(f"{path} is an RGB mask, but {self.classes_file} gives no colour for "
                                f"{', '.join(missing[:4])}: give every class a colour, or save masks of class ids")
                return None
            rgb = np.asarray(mask.convert("RGB")).astype(np.uint32)
            codes = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]
            known = {(r << 16) | (g << 8) | b: i for i, (r, g, b) in enumerate(self.colours)}
            present, inverse = np.unique(codes, return_inverse=True)
            unknown = [int(code) for code in present if int(code) not in known]
            if unknown:
                shown = ", ".join(f"#{code:06x}" for code in unknown[:4])
                problems.append(f"{path} holds {len(unknown)} colours that are no class in "
                                f"{self.classes_file}: {shown}")
                return None
            lookup = np.array([known[int(code)] for code in present], np.uint8)
            return lookup[inverse.reshape(codes.shape)]
        if mask.mode not in ("L", "P", "I", "I;16", "1"):
            problems.append(f"{path}: a mask of mode {mask.mode}; save class ids as an 8-bit grayscale PNG "
                            "or class colours as RGB")
            return None
        ids = np.asarray(mask).astype(np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= count):
            values = np.unique(ids[(ids < 0) | (ids >= count)])[:5].tolist()
            problems.append(f"{path} holds class ids {values} outside 0..{count - 1} "
                            f"(the {count} classes of {self.classes_file})")
            return None
        return ids.astype(np.uint8)
