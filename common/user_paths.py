"""Paths a user hands the project: what is there, the files of their folders, and outputs kept off them.

    what_is(path)                   FILE, FOLDER, MISSING, or what else is there in words ("a named pipe (FIFO)")
    list_files(folder, ...)         a folder's regular files (and links to them), and every other entry, named
    folder_problem / file_problem   one line for a path flag given the wrong kind of thing, else None
    output_problem(flag, out, ...)  one line when an output is, contains or lies inside one of the inputs
    flags_problem(inputs, ...)      both, for every output flag of a command: what each command checks
    make_folder(flag, path)         a folder the project creates, with its parents; one line if it cannot be made
                                    (folder_of(flag, file): the folder of an output file, named for messages)
    creatable_problem(flag, path)   the same question before any work starts, leaving nothing behind
    exit_if(problem)                a script's one `error:` line and exit status 2

Every reader of a user's folder (training's image folders and prepared data, prediction's inputs, data
preparation's sources) lists it with list_files: it takes regular files and symbolic links to regular files,
and names anything else (a FIFO, a socket, a device, a dangling link) so that the caller can say so in one
line. Entries are told apart with os.stat, never by opening them: opening a FIFO for reading waits for a
writer that may never come. Imports no project module: tasks/, tools/ and the recipes' scripts use it.
"""
from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass, field

FILE, FOLDER, MISSING = "a file", "a folder", "missing"


def what_is(path) -> str:
    """FILE for a regular file or a symbolic link to one, FOLDER likewise, MISSING when nothing is
    there, else what is there, in words. Follows symbolic links; never opens `path`."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "a dangling symbolic link" if os.path.islink(path) else MISSING
    except OSError as error:  # a loop of links, a folder above it that cannot be searched
        return f"unreadable ({error.strerror or type(error).__name__})"
    if stat.S_ISREG(mode):
        return FILE
    if stat.S_ISDIR(mode):
        return FOLDER
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def not_a_file(path, what: str) -> str:
    """The words for an entry of a folder that is not a regular file, for one line."""
    return f"{path} is {what}, not a regular file"


@dataclass
class Listing:
    files: list[str] = field(default_factory=list)  # regular files and links to them, sorted
    others: list[tuple[str, str]] = field(default_factory=list)  # (path, what_is) of every other entry, sorted


def list_files(folder, *, recursive: bool = False, suffixes=None, hidden: bool = True) -> Listing:
    """The entries of `folder` (and of its subfolders when `recursive`; symbolic links to folders are
    not followed) whose names end in one of `suffixes` (any case; None: every name), without names
    that start with "." unless `hidden`: the regular files, and the others with what each is.
    Subfolders are never listed as entries."""
    listing = Listing()
    for parent, subfolders, names in os.walk(folder):
        if not hidden:
            subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        if not recursive:
            subfolders[:] = []
        for name in names:
            if (not hidden and name.startswith(".")) or (suffixes and not name.lower().endswith(tuple(suffixes))):
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
    """None when `path` is a folder or nothing yet, else one line saying what it is instead."""
    what = what_is(path)
    if what in (FOLDER, MISSING):
        return None
    return f"{flag} {path} is {what}, not a folder; give a folder"


def file_problem(flag: str, path) -> str | None:
    """None when `path` is a regular file (or a link to one), else one line saying what is there instead."""
    what = what_is(path)
    if what == FILE:
        return None
    return f"{flag} {path} is {'no file or folder' if what == MISSING else what}, not a file; give a file"


def inside(path: str, folder: str) -> bool:
    """Whether the (real, absolute) `path` is `folder` or lies under it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def output_problem(flag: str, out, inputs) -> str | None:
    """One line when the output `out` of flag `flag` is, contains or lies inside one of `inputs`
    ({flag: path}, None values left out), compared as real paths (symbolic links resolved); else None."""
    real_out = os.path.realpath(out)
    for input_flag, given in inputs.items():
        if not given:
            continue
        real_in = os.path.realpath(given)
        if inside(real_out, real_in) or inside(real_in, real_out):
            how = "is" if real_out == real_in else "lies inside" if inside(real_out, real_in) else "contains"
            return (f"{flag} {out} {how} {input_flag} {given} ({real_out} and {real_in} overlap): the output "
                    f"would be written among the inputs; choose a {flag} outside {input_flag}")
    return None


def flags_problem(inputs, folders=None, files=None, creatable: bool = True) -> str | None:
    """The first problem of a command's output flags, as one line, else None: an output folder flag
    ({flag: path} `folders`) that names something other than a folder, an output file flag (`files`)
    that names something other than a regular file (a folder, a FIFO whose open would wait, a device),
    an output of either kind that is, contains or lies inside one of `inputs` ({flag: path}), or (unless
    not `creatable`) an output folder, or the folder of an output file, that cannot be made (creatable_problem).
    Paths that are None or empty are left out: flags not given."""
    folders = {flag: path for flag, path in (folders or {}).items() if path}
    files = {flag: path for flag, path in (files or {}).items() if path}
    for flag, path in folders.items():
        problem = folder_problem(flag, path)
        if problem:
            return problem
    for flag, path in files.items():
        what = what_is(path)
        if what not in (FILE, MISSING):
            return f"{flag} {path} is {what}, not a file; give the path of a file to write"
    for flag, path in {**folders, **files}.items():
        problem = output_problem(flag, path, inputs)
        if problem:
            return problem
    made = {**folders, **dict(folder_of(flag, path) for flag, path in files.items())} if creatable else {}
    return next((problem for flag, path in made.items() if (problem := creatable_problem(flag, path))), None)


WRITABLE_PLACE = "give a folder in a place you can write"


def folder_of(flag: str, path) -> tuple[str, str]:
    """How a message names the folder of the output file `path` of `flag`, and that folder: what
    make_folder and creatable_problem take for it."""
    return f"{flag} {path}: its folder", os.path.dirname(os.path.abspath(path))


def _cannot_make(flag: str, path, error: OSError) -> str:
    where = f" at {error.filename}" if error.filename and str(error.filename) != str(path) else ""
    return (f"{flag} {path} cannot be made ({error.strerror or type(error).__name__}{where}); "
            f"{WRITABLE_PLACE}")


def _missing_above(path) -> tuple[list[str], str]:
    """The folders that making `path` would create, the deepest first, and the nearest entry above them."""
    missing, parent = [], os.path.abspath(path)
    while what_is(parent) == MISSING and parent != os.path.dirname(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    return missing, parent


def make_folder(flag: str, path) -> str | None:
    """Make the folder `path` (a flag's value, or what the project names it) with its parents; None when it is
    there now, else one line naming it and why it cannot be made: a file in the way, a read-only or virtual
    file system (/proc), no permission. Every folder the project creates for a user is made here."""
    what = what_is(path)
    if what != MISSING:
        return folder_problem(flag, path)
    _, parent = _missing_above(path)
    above = what_is(parent)
    if above != FOLDER:
        return f"{flag} {path} cannot be made: {parent} is {above}, not a folder; {WRITABLE_PLACE}"
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        return _cannot_make(flag, path, error)
    return None


def creatable_problem(flag: str, path) -> str | None:
    """make_folder's answer before any work starts: None when `path` is a folder or can be made, else its one
    line. A missing folder is made to find out, and the folders made are removed again (only while empty),
    so nothing is left behind; a folder another process made meanwhile is its own."""
    if not path or what_is(path) == FOLDER:
        return None
    made, _ = _missing_above(path)
    # Tried twice: the workers of a job may check one new folder at once, and one may remove a parent
    # that another has just made; a folder another worker made meanwhile is fine.
    problem = make_folder(flag, path) and make_folder(flag, path)
    if problem and what_is(path) == FOLDER:
        problem = None
    for folder in made:  # the deepest first
        try:
            os.rmdir(folder)
        except OSError:
            break
    return problem


def exit_if(problem: str | None) -> None:
    """A script's command line: one `error:` line on stderr and exit status 2 (a user mistake) for a problem."""
    if problem:
        print(f"error: {problem}", file=sys.stderr, flush=True)
        sys.exit(2)
