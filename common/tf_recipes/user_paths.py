"""Paths a user hands the project: what is there, the files of their folders, and outputs kept off them.
Entries are told apart with os.stat, never opened (a FIFO would wait for a writer); each *_problem
function returns one line for the user, or None. Imports no project module."""

from __future__ import annotations

import itertools
import os
import stat
import sys
from dataclasses import dataclass, field

FILE, FOLDER, MISSING = "a file", "a folder", "missing"
KINDS = ((stat.S_ISREG, FILE), (stat.S_ISDIR, FOLDER), (stat.S_ISFIFO, "a named pipe (FIFO)"))
KINDS += ((stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
WRITABLE_PLACE = "give a folder in a place you can write"


def what_is(path) -> str:
    """FILE, FOLDER (or a symbolic link to one), MISSING, or what else is there, in words; never opens
    `path`."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "a dangling symbolic link" if os.path.islink(path) else MISSING
    except OSError as error:  # a loop of links, a folder above it that cannot be searched
        return f"unreadable ({error.strerror or type(error).__name__})"
    return next((what for test, what in KINDS if test(mode)), "not a regular file")


def not_a_file(path, what: str) -> str:
    """The words for an entry of a folder that is not a regular file, for one line."""
    return f"{path} is {what}, not a regular file"


@dataclass
class Listing:
    files: list[str] = field(default_factory=list)  # regular files and links to them, sorted
    # (path, what_is) of every other entry, sorted
    others: list[tuple[str, str]] = field(default_factory=list)


def list_files(folder, *, recursive: bool = False, suffixes=None, hidden: bool = True) -> Listing:
    """A folder's regular files (and links to them) and its other entries, named, ending in one of
    `suffixes`."""
    listing, endings = Listing(), tuple(suffixes or ("",))  # without `suffixes`: every name ends in ""
    for parent, subfolders, names in os.walk(folder):
        subfolders[:] = [name for name in subfolders if recursive and (hidden or not name.startswith("."))]
        for name in names:
            if (not hidden and name.startswith(".")) or not name.lower().endswith(endings):
                continue
            path = os.path.join(parent, name)
            what = what_is(path)
            if what == FILE:
                listing.files.append(path)
            elif what != FOLDER:  # a link to a folder that os.walk saw as a name: not an entry
                listing.others.append((path, what))
    listing.files.sort()
    listing.others.sort()
    return listing


def folder_problem(flag: str, path) -> str | None:
    """A line when `path` is neither a folder nor nothing yet."""
    what = what_is(path)
    return None if what in (FOLDER, MISSING) else f"{flag} {path} is {what}, not a folder; give a folder"


def file_problem(flag: str, path) -> str | None:
    """A line when `path` is not a regular file (or a link to one)."""
    what = what_is(path)
    if what == FILE:
        return None
    return f"{flag} {path} is {'no file or folder' if what == MISSING else what}, not a file; give a file"


def inside(path: str, folder: str) -> bool:
    """Whether the (real, absolute) `path` is `folder` or lies under it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def output_problem(flag: str, out, inputs) -> str | None:
    """A line when the output `out` of `flag` is, contains or lies inside one of `inputs` ({flag: path})."""
    real_out = os.path.realpath(out)
    for input_flag, given in inputs.items():
        real_in = os.path.realpath(given) if given else None
        if given and (inside(real_out, real_in) or inside(real_in, real_out)):
            how = "is" if real_out == real_in else "lies inside" if inside(real_out, real_in) else "contains"
            return (
                f"{flag} {out} {how} {input_flag} {given} ({real_out} and {real_in} overlap): the output "
                f"would be written among the inputs; choose a {flag} outside {input_flag}"
            )
    return None


def flags_problem(inputs, folders=None, files=None, creatable: bool = True) -> str | None:
    """The first problem of a command's output `folders` and `files` ({flag: path}), as one line."""
    folders = {flag: path for flag, path in (folders or {}).items() if path}
    files = {flag: path for flag, path in (files or {}).items() if path}
    made = {**folders, **dict(folder_of(flag, path) for flag, path in files.items())} if creatable else {}
    problems = itertools.chain(
        (folder_problem(flag, path) for flag, path in folders.items()),
        (
            f"{flag} {path} is {what}, not a file; give the path of a file to write"
            for flag, path in files.items()
            if (what := what_is(path)) not in (FILE, MISSING)
        ),
        (output_problem(flag, path, inputs) for flag, path in {**folders, **files}.items()),
        # lazily: it makes (and removes) folders
        (creatable_problem(flag, path) for flag, path in made.items()),
    )
    return next((problem for problem in problems if problem), None)


def folder_of(flag: str, path) -> tuple[str, str]:
    """How a message names the folder of the output file `path` of `flag`, and that folder."""
    return f"{flag} {path}: its folder", os.path.dirname(os.path.abspath(path))


def _missing_above(path) -> tuple[list[str], str]:
    """The folders that making `path` would create, the deepest first, and the nearest entry above them."""
    missing, parent = [], os.path.abspath(path)
    while what_is(parent) == MISSING and parent != os.path.dirname(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    return missing, parent


def make_folder(flag: str, path) -> str | None:
    """Make the folder `path` with its parents, or a line saying why it cannot be made."""
    if what_is(path) != MISSING:
        return folder_problem(flag, path)
    parent = _missing_above(path)[1]
    if (above := what_is(parent)) != FOLDER:
        return f"{flag} {path} cannot be made: {parent} is {above}, not a folder; {WRITABLE_PLACE}"
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        where = f" at {error.filename}" if error.filename and str(error.filename) != str(path) else ""
        reason = error.strerror or type(error).__name__
        return f"{flag} {path} cannot be made ({reason}{where}); {WRITABLE_PLACE}"
    return None


def creatable_problem(flag: str, path) -> str | None:
    """make_folder's answer before any work starts, leaving nothing behind."""
    if not path or what_is(path) == FOLDER:
        return None
    made = _missing_above(path)[0]
    # Tried twice: a worker of a job may remove a parent another has just made.
    failed = make_folder(flag, path) and make_folder(flag, path)
    problem = None if what_is(path) == FOLDER else failed
    for folder in made:  # the deepest first
        try:
            os.rmdir(folder)
        except OSError:
            break
    return problem


def exit_if(problem: str | None) -> None:
    """A script's command line: one `error:` line on stderr and exit status 2 (a user mistake) for a
    problem."""
    if problem:
        print(f"error: {problem}", file=sys.stderr, flush=True)
        sys.exit(2)
