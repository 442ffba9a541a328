"""Prepare Cityscapes (or your own images and masks) for training: pair every image with its labels.

    python recipes/cityscapes-unet/prepare_data.py --source ~/cityscapes --out data/cityscapes
    python recipes/cityscapes-unet/prepare_data.py --format pairs --images DIR --masks DIR \
        --classes classes.yaml --out data/mine

With --format pairs, images and masks are paired by file stem and masks hold class ids or the
classes file's colours (see pairs.py); everything below holds for both formats.

--source holds the official release: the two downloaded zips (leftImg8bit_trainvaltest.zip,
gtFine_trainvaltest.zip) or the folders they extract to (leftImg8bit/, gtFine/); either half may be
a zip or a folder. The output (see layout.py) keeps each RGB PNG byte for byte and the label ids as
an 8-bit PNG, with a sorted index per split that also holds the views training takes of them
(labels.py: the 19 classes, the 7 categories), which data.py reads. PNG files were
chosen over TFRecord shards because data.py needs any example in any order (the global batches are
fixed by tf_recipes.data.sharded_order); the measurements are in README.md.

Every pair is decoded and checked. All problems are collected and reported together, naming each
file, and a split's index is written only when the whole split is clean, so a split with problems
is never mistaken for a complete dataset. Each output file is written under a temporary name and
renamed; a manifest per split records what every output was made from, so a re-run (also after an
interruption) only redoes pairs whose source changed.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import os
import pathlib
import sys
import time
import zipfile

import numpy as np
from PIL import Image

from tf_recipes import user_paths  # noqa: E402
from tf_recipes.atomic import write_atomically  # noqa: E402
import labels  # noqa: E402
import layout  # noqa: E402
import pairs as pairs_format  # noqa: E402

EXPECTED_LAYOUT = f"""\
expected in --source, either as downloaded or extracted (each half may be either):
  {layout.IMAGE_ZIP}   or  leftImg8bit/{{train,val}}/CITY/CITY_SEQ_FRAME{layout.IMAGE_SUFFIX}
  {layout.LABEL_ZIP}        or  gtFine/{{train,val}}/CITY/CITY_SEQ_FRAME{layout.LABEL_SUFFIX}
Cityscapes needs a (free) login: download both zips from https://www.cityscapes-dataset.com/downloads/
For a synthetic stand-in: python recipes/cityscapes-unet/make_fixture.py --out DIR"""


class UsageError(Exception):
    """A mistake in the command line or the source folder: reported without a traceback."""


# --- Reading the release: each half (images, labels) is a folder or a zip ----------------------

_OPEN_ZIPS: dict[pathlib.Path, zipfile.ZipFile] = {}


class Half:
    """One half of the release: 'leftImg8bit' or 'gtFine', as an extracted folder or a zip."""

    def __init__(self, source: pathlib.Path, top: str, zip_name: str):
        self.folder = source / top
        self.zip_path = source / zip_name
        self.top = top
        self.others: list[str] = []  # entries of the folder named like release files that are no regular file
        if self.folder.is_dir():
            self.kind = "folder"
        elif self.zip_path.is_file():
            self.kind = "zip"
        else:
            raise UsageError(f"found neither {self.zip_path.name} nor a {top}/ folder in {source}\n"
                             + EXPECTED_LAYOUT)

    def archive(self) -> zipfile.ZipFile:
        # One handle per process, kept open: reading the central directory of the real zips
        # (thousands of entries) for every pair would cost more than the pair itself.
        if self.zip_path not in _OPEN_ZIPS:
            try:
                _OPEN_ZIPS[self.zip_path] = zipfile.ZipFile(self.zip_path)
            except (OSError, zipfile.BadZipFile) as error:
                raise UsageError(f"cannot read {self.zip_path} as a zip ({error}); download it again") from None
        return _OPEN_ZIPS[self.zip_path]

    def listing(self) -> dict[str, list]:
        """Relative path ('leftImg8bit/train/...') -> signature, for every Cityscapes-named file."""
        if self.kind == "zip":
            return {info.filename: [info.file_size, info.CRC] for info in self.archive().infolist()
                    if layout.is_candidate(info.filename)}
        found = {}
        listing = user_paths.list_files(self.folder, recursive=True, suffixes=(".png",))
        for path in listing.files:
            name = pathlib.Path(path).relative_to(self.folder.parent).as_posix()
            if layout.is_candidate(name):
                stat = os.stat(path)
                found[name] = [stat.st_size, stat.st_mtime_ns]
        # Named as problems, never opened (a FIFO would block the run).
        self.others = [user_paths.not_a_file(path, what) for path, what in listing.others
                       if layout.is_candidate(path)]
        return found

    def read(self, name: str) -> bytes:
        if self.kind == "zip":
            return self.archive().read(name)
        return (self.folder.parent / name).read_bytes()

    def describe(self, name: str) -> str:
        """Where a file is, for messages: a path, or 'ZIP:member'."""
        if self.kind == "zip":
            return f"{self.zip_path}:{name}"
        return str(self.folder.parent / name)


def open_source(source: pathlib.Path) -> tuple[Half, Half]:
    if not source.is_dir():
        raise UsageError(f"--source {source} is not a folder\n" + EXPECTED_LAYOUT)
    return (Half(source, layout.IMAGE_DIR, layout.IMAGE_ZIP),
            Half(source, layout.LABEL_DIR, layout.LABEL_ZIP))


# --- The official release: pairing and one pair -------------------------------------------------

def pair_files(images: Half, labels_half: Half, splits):
    """Example ids per split that have both files, their source signatures, and the problems."""
    image_files, label_files = images.listing(), labels_half.listing()
    if not image_files and not label_files:
        raise UsageError(f"no Cityscapes image or label files in {images.describe('')} "
                         f"or {labels_half.describe('')}\n" + EXPECTED_LAYOUT)
    found = {split: {"image": {}, "label": {}} for split in splits}
    problems = images.others + labels_half.others
    for half, files in ((images, image_files), (labels_half, label_files)):
        for name, signature in files.items():
            parsed = layout.parse_member(name)
            if parsed is None:
                problems.append(f"not in the {half.top}/SPLIT/CITY/ layout: {half.describe(name)}")
            elif parsed[1] in found:
                kind, split, example_id = parsed
                found[split][kind][example_id] = signature
    pairs, signatures = {}, {}
    for split in splits:
        image_ids, label_ids = set(found[split]["image"]), set(found[split]["label"])
        for example_id in sorted(image_ids - label_ids):
            problems.append(f"image without label: {images.describe(layout.image_member(split, example_id))} "
                            f"(no {labels_half.describe(layout.label_member(split, example_id))})")
        for example_id in sorted(label_ids - image_ids):
            problems.append(f"label without image: {labels_half.describe(layout.label_member(split, example_id))} "
                            f"(no {images.describe(layout.image_member(split, example_id))})")
        if not image_ids & label_ids:
            unpaired = f" ({len(image_ids)} images, {len(label_ids)} labels, none with its partner)" \
                if image_ids | label_ids else ""
            raise UsageError(f"split {split!r} has no image and label pairs under "
                             f"{images.describe(f'{layout.IMAGE_DIR}/{split}/')} and "
                             f"{labels_half.describe(f'{layout.LABEL_DIR}/{split}/')}{unpaired}; "
                             "check --splits and --source")
        pairs[split] = sorted(image_ids & label_ids)
        signatures[split] = {example_id: [found[split]["image"][example_id], found[split]["label"][example_id]]
                             for example_id in pairs[split]}
    return pairs, signatures, problems


def decode(read, where: str, problems: list, kind: str = "PNG"):
    """(decoded PIL image, file bytes), or (None, None) after adding the reason to problems."""
    try:
        data = read()
        image = Image.open(io.BytesIO(data))
        image.load()  # decodes all pixel data: truncated or corrupt files fail here
    except Exception as error:  # zipfile and PIL raise several types; all mean "unreadable"
        problems.append(f"unreadable {kind}: {where} ({error})")
        return None, None
    return image, data


class CityscapesRelease:
    """--source: the official release, each half a zip or a folder; the label ids are kept as they are."""
    views = labels.cityscapes_views()
    values = sorted(labels.VALID_LABEL_IDS)  # the label ids a labelIds file may hold

    def __init__(self, source: pathlib.Path):
        self.images, self.labels = open_source(source)
        self.inputs = {"--source": source}  # what --out must stay out of

    def describe(self) -> str:
        return (f"reading images from {self.images.describe(layout.IMAGE_DIR)} ({self.images.kind}), "
                f"labels from {self.labels.describe(layout.LABEL_DIR)} ({self.labels.kind})")

    def pairs(self, splits):
        return pair_files(self.images, self.labels, splits)

    def image_file(self, split: str, example_id: str) -> str:
        return self.images.describe(layout.image_member(split, example_id))

    def locate(self, split: str, example_id: str):
        return None  # the member names follow from the split and id

    def load(self, split: str, example_id: str, located, problems: list):
        """(image PNG bytes, (height, width), category map) of a checked pair, or None."""
        image_name, label_name = layout.image_member(split, example_id), layout.label_member(split, example_id)
        found = []
        for half, name, mode, what in ((self.images, image_name, "RGB", "an 8-bit RGB PNG"),
                                       (self.labels, label_name, "L", "an 8-bit grayscale labelIds PNG")):
            image, data = decode(lambda half=half, name=name: half.read(name), half.describe(name), problems)
            if image is not None and (image.format != "PNG" or image.mode != mode):
                problems.append(f"not {what}: {half.describe(name)} is {image.format} mode {image.mode}")
                image = None
            found.append((image, data))
        (image, image_bytes), (label, _) = found
        if image is None or label is None:
            return None
        size = (image.height, image.width)
        if (label.height, label.width) != size:
            problems.append(f"size mismatch: {self.images.describe(image_name)} is {size[0]}x{size[1]} but "
                            f"{self.labels.describe(label_name)} is {label.height}x{label.width}")
            return None
        label_ids = np.asarray(label)
        unknown = labels.invalid_label_ids(label_ids)
        if unknown:
            problems.append(f"label ids outside 0..33 and 255: {self.labels.describe(label_name)} has "
                            f"{unknown[:8]} (is it a trainIds or instanceIds file?)")
            return None
        return image_bytes, size, label_ids


# --- One pair: load and check (per source), then write -------------------------------------------

def _write_atomically(path: pathlib.Path, data: bytes):
    """A pair's output, renamed into place but not fsynced (thousands of them): the index that lists
    them is written only after os.sync(), see prepare_split."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def process_pair(task):
    """Validate one pair and write its outputs; returns (example_id, size or None, problems)."""
    source, split, example_id, located, out, expect_size = task
    problems = []
    loaded = source.load(split, example_id, located, problems)
    if loaded is None:
        return example_id, None, problems
    image_bytes, size, label_map = loaded
    if expect_size and size != tuple(expect_size):
        problems.append(f"unexpected size: {source.image_file(split, example_id)} and its label are "
                        f"{size[0]}x{size[1]}, --expect-size is {expect_size[0]}x{expect_size[1]}")
        return example_id, None, problems
    encoded = io.BytesIO()
    Image.fromarray(label_map).save(encoded, format="PNG")
    _write_atomically(layout.prepared_image(out, split, example_id), image_bytes)
    _write_atomically(layout.prepared_labels(out, split, example_id), encoded.getvalue())
    return example_id, size, []


# --- One split: skip what is done, process the rest, write the index if clean ---------------------

def manifest_path(out: pathlib.Path, split: str) -> pathlib.Path:
    return out / split / "manifest.jsonl"


def read_manifest(out: pathlib.Path, split: str) -> dict:
    """example id -> {"source": ..., "size": ...} from earlier runs; the last line per id wins."""
    entries = {}
    try:
        lines = manifest_path(out, split).read_text().splitlines()
    except FileNotFoundError:
        return entries
    for line in lines:
        try:
            entry = json.loads(line)
            entries[entry["id"]] = entry
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by an interruption: that pair is simply redone
    return entries


def _indexed_examples(index: pathlib.Path):
    try:
        return json.loads(index.read_text()).get("examples")
    except (OSError, ValueError, AttributeError):
        return None


def _output_bytes(out: pathlib.Path, split: str, example_id: str):
    """[image, labels] byte sizes of a pair's prepared files, or None if either is missing."""
    try:
        return [layout.prepared_image(out, split, example_id).stat().st_size,
                layout.prepared_labels(out, split, example_id).stat().st_size]
    except FileNotFoundError:
        return None


def _up_to_date(entry: dict, out: pathlib.Path, split: str, example_id: str, signature) -> bool:
    """A pair's outputs exist, were made from this source, and still have the sizes written then
    (a file truncated or replaced since is redone)."""
    written = _output_bytes(out, split, example_id)
    return (entry.get("source") == signature and written is not None
            and entry.get("bytes", written) == written)


def prepare_split(source, split, example_ids, signatures, out, expect_size, workers, log):
    """Returns (problems, pairs written now, pairs already up to date)."""
    done = read_manifest(out, split)
    todo = [example_id for example_id in example_ids
            if not _up_to_date(done.get(example_id, {}), out, split, example_id, signatures[example_id])]
    index = layout.index_path(out, split)
    if not todo and _indexed_examples(index) == example_ids:
        return [], 0, len(example_ids)
    index.unlink(missing_ok=True)  # from here on the split is incomplete until proven clean
    problems, sizes = [], {}
    skipped = sorted(set(example_ids) - set(todo))
    valid = list(skipped)  # pairs whose outputs match their source: skipped or written now
    manifest_path(out, split).parent.mkdir(parents=True, exist_ok=True)
    manifest_path(out, split).touch()  # marks the folder as this script's (see foreign_output)
    tasks = [(source, split, example_id, source.locate(split, example_id), out, expect_size) for example_id in todo]
    workers = min(workers, len(tasks))
    # spawn, not fork: the caller may have started threads (TensorFlow does) that fork would copy.
    pool = multiprocessing.get_context("spawn").Pool(workers) if workers > 1 else None
    results = pool.imap_unordered(process_pair, tasks) if pool else map(process_pair, tasks)
    with pool or contextlib.nullcontext(), open(manifest_path(out, split), "a") as manifest:
        for count, (example_id, size, pair_problems) in enumerate(results, 1):
            problems.extend(pair_problems)
            if size:
                valid.append(example_id)
                done[example_id] = {"id": example_id, "source": signatures[example_id], "size": list(size),
                                    "bytes": _output_bytes(out, split, example_id)}
                manifest.write(json.dumps(done[example_id]) + "\n")
                manifest.flush()
            if count % 250 == 0:
                log(f"{split}: {count}/{len(todo)} pairs checked")
    for example_id in sorted(valid):
        sizes.setdefault(tuple(done[example_id]["size"]), []).append(example_id)
    if len(sizes) > 1:
        common_size = max(sizes, key=lambda size: len(sizes[size]))
        for size, ids in sorted(sizes.items()):
            if size != common_size:
                problems.extend(f"size differs from the split's {common_size[0]}x{common_size[1]}: "
                                f"{source.image_file(split, i)} is {size[0]}x{size[1]}"
                                for i in ids)
    if not problems:
        (height, width), = sizes
        os.sync()  # every pair's files on disk before the index that says they are complete
        write_atomically(manifest_path(out, split), "".join(json.dumps(done[i]) + "\n" for i in example_ids))
        write_atomically(index, json.dumps({
            "format": layout.INDEX_FORMAT, "split": split, "height": height, "width": width,
            "views": source.views, "default_view": "classes", "values": source.values, "examples": example_ids,
            # data.read_index compares these with the files before training
            "bytes": {i: done[i].get("bytes") or _output_bytes(out, split, i) for i in example_ids}},
            indent=1))
    return problems, len(valid) - len(skipped), len(skipped)


def foreign_output(out: pathlib.Path, split: str) -> pathlib.Path | None:
    """A path in --out that preparing `split` would overwrite or delete, but this script did not write:
    SPLIT.json that is no index of ours, or a SPLIT/ that is not empty and has no manifest."""
    index, folder = layout.index_path(out, split), out / split
    if index.exists() or index.is_symlink():
        try:
            if json.loads(index.read_text()).get("format") not in (layout.INDEX_FORMAT, *layout.OLD_INDEX_FORMATS):
                return index
        except (OSError, ValueError, AttributeError):
            return index
    if folder.exists() and not folder.is_dir():
        return folder
    if folder.is_dir() and any(folder.iterdir()) and not manifest_path(out, split).is_file():
        return folder
    return None


def prepare(source, out, splits=("train", "val"), workers=None, expect_size=None, log=print) -> list[str]:
    """Prepare the given splits of `source` (the release's folder, or a pairs.ImageMaskFolders);
    returns every problem found (empty when all splits are complete)."""
    for split in splits:  # each becomes OUT/SPLIT/ and OUT/SPLIT.json
        if not layout.SPLIT_NAME.fullmatch(split):
            raise UsageError(f"--splits: {split!r} is not a split name; use letters, digits, '-' and '_' only, "
                             "e.g. --splits train,val")
    if not hasattr(source, "load"):
        source = CityscapesRelease(pathlib.Path(source))
    out = pathlib.Path(out)
    problem = user_paths.flags_problem(source.inputs, {"--out": out})
    if problem:
        raise UsageError(problem)
    for split in splits:
        in_the_way = foreign_output(out, split)
        if in_the_way:
            raise UsageError(f"{in_the_way} is in --out {out} but was not written by prepare_data.py, and "
                             f"preparing split {split!r} would replace it; choose another --out")
    log(source.describe())
    pairs, signatures, problems = source.pairs(splits)
    workers = workers or os.cpu_count() or 1
    for split in splits:
        started = time.perf_counter()
        split_problems, written, skipped = prepare_split(
            source, split, pairs[split], signatures[split], out, expect_size, workers, log)
        problems.extend(split_problems)
        complete = layout.index_path(out, split).is_file()
        log(f"{split}: {len(pairs[split])} pairs, {written} written, {skipped} already up to date, "
            f"{len(split_problems)} problems, {time.perf_counter() - started:.1f} s: "
            + (f"complete ({layout.index_path(out, split)})" if complete else "NOT complete"))
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog=EXPECTED_LAYOUT + "\n\n--format pairs: " + pairs_format.EXPECTED_PAIRS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--format", choices=["cityscapes", "pairs"], default="cityscapes",
                        help="cityscapes: the official release (--source); pairs: your own --images and --masks")
    parser.add_argument("--source", help="cityscapes: folder with the two zips or the extracted tree")
    parser.add_argument("--images", help="pairs: folder of .jpg/.png photos (with train/ and val/, or flat)")
    parser.add_argument("--masks", help="pairs: folder of .png masks, same relative paths and stems as --images")
    parser.add_argument("--classes", help="pairs: YAML or JSON file of class names (and colours) in id order")
    parser.add_argument("--val-fraction", type=float, default=0.2,
                        help="pairs, flat folders: the share of stems that become val (default 0.2, seeded)")
    parser.add_argument("--size", default=None, metavar="HxW",
                        help="pairs: resize every image (bilinear) and mask (nearest) to this size, "
                             "for photos of mixed sizes")
    parser.add_argument("--out", required=True, help="folder for the prepared data (created if missing)")
    parser.add_argument("--splits", default="train,val",
                        help="comma-separated names of letters, digits, - and _ (default train,val)")
    parser.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    parser.add_argument("--expect-size", default=None, metavar="HxW",
                        help="reject pairs of any other size, e.g. 1024x2048 for real Cityscapes")
    args = parser.parse_args(argv)
    splits = [split.strip() for split in args.splits.split(",")]
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers {args.workers}: use 1 or more")
    sizes = {}
    for flag in ("expect_size", "size"):
        try:
            sizes[flag] = layout.parse_size(getattr(args, flag)) if getattr(args, flag) else None
        except ValueError as error:
            parser.error(f"--{flag.replace('_', '-')}: {error}")
    needed = ["source"] if args.format == "cityscapes" else ["images", "masks", "classes"]
    missing = [f"--{flag}" for flag in needed if not getattr(args, flag)]
    if missing:
        parser.error(f"--format {args.format} needs {' and '.join(missing)}")
    try:
        source = args.source if args.format == "cityscapes" else pairs_format.ImageMaskFolders(
            args.images, args.masks, args.classes, args.val_fraction, size=sizes["size"])
        problems = prepare(source, args.out, splits, args.workers, sizes["expect_size"])
    except (UsageError, pairs_format.PairsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # e.g. --out not writable, disk full
        print(f"error: cannot write the prepared data: {error}", file=sys.stderr)
        return 2
    if problems:
        print(f"\nprepare_data: {len(problems)} problems; splits with problems have no index and are "
              "not usable for training. Fix or remove these files and run again "
              "(pairs already prepared are kept):", file=sys.stderr)
        for problem in sorted(problems):
            print(f"  {problem}", file=sys.stderr)
        if args.format == "pairs" and any(problem.startswith("size differs") for problem in problems):
            print("  (photos of mixed sizes: add --size HxW to resize them all)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
