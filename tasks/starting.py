"""`invoke new NAME --from RECIPE`: start a recipe of your own from one of these."""
from __future__ import annotations

import os
import shutil
import tempfile

from invoke import task

from commands import launch, launch_files, scaffold
from tf_recipes import atomic
from tasks import host

MATRIX = os.path.join("ci", "nightly", "matrix.yaml")


def source_files(folder: str) -> tuple[dict[str, bytes], set[str], list[str]]:
    """The files `invoke new` copies, {path relative to the folder: content}; those of them that are
    executable; and the folders it leaves out as not source (scaffold.copied), each ending in /."""
    files, executable, left_out = {}, set(), []
    for directory, subdirectories, names in os.walk(folder):
        relative_dir = os.path.relpath(directory, folder).replace(os.sep, "/")
        prefix = "" if relative_dir == "." else f"{relative_dir}/"
        for subdirectory in sorted(subdirectories):
            if not scaffold.copied(f"{prefix}{subdirectory}/file"):
                subdirectories.remove(subdirectory)
                left_out.append(f"{prefix}{subdirectory}/")
        subdirectories.sort()
        for filename in sorted(names):
            path, relative = os.path.join(directory, filename), f"{prefix}{filename}"
            if scaffold.copied(relative) and relative != "README.md" and os.path.isfile(path):
                with open(path, "rb") as handle:
                    files[relative] = handle.read()
                if os.stat(path).st_mode & 0o111:
                    executable.add(relative)
    return files, executable, left_out


def write_folder(target: str, files: dict[str, bytes], executable: set[str]) -> None:
    """All of `files` under `target`, or nothing: they are written beside it, then renamed into place."""
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}-", dir=os.path.dirname(target))
    try:
        for relative, content in files.items():
            path = os.path.join(staging, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(content)
            if relative in executable:
                os.chmod(path, 0o755)
        atomic.fsync_tree(staging)  # the files' data on disk before the rename publishes them
        os.rename(staging, target)
        atomic.fsync_directory(os.path.dirname(os.path.abspath(target)))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


@task(
    positional=["name"],
    auto_shortflags=False,
    help={
        "name": "the new recipe's name: lowercase letters, digits and hyphens (a folder, image and Kubernetes name)",
        "from": "the recipe to start from (mnist-cnn for a classifier on small images, cassava-resnet for "
                "transfer learning on photos, cityscapes-unet for segmentation)",
        "add-to-nightly": "also add the recipe to ci/nightly/matrix.yaml, as a copy of the source's entry",
        "dry": "list what would be written, write nothing",
    },
)
def new(c, name, from_="mnist-cnn", add_to_nightly=False, dry=False):
    """Create recipes/NAME from an existing recipe: renamed, with its own launch/ folder."""
    source = from_
    matrix_path = os.path.join(host.ROOT, MATRIX)
    host.help_for(name, "new")
    try:
        scaffold.check_name(name, host.recipes(), source)
        with open(matrix_path, encoding="utf-8", newline="") as handle:  # its lines as they are
            matrix_text = handle.read()
        entry = scaffold.matrix_entry(matrix_text, source, name)
        new_matrix = scaffold.add_to_matrix(matrix_text, source, name) if add_to_nightly else None
    except launch.LaunchError as error:
        host.fail(str(error))
    folder = os.path.join(host.ROOT, "recipes", source)
    copied, executable, left_out = source_files(folder)
    files = {path: scaffold.rename_file(path, content, source, name) for path, content in copied.items()}
    files["README.md"] = scaffold.readme(name, source, _title(folder), scaffold.distributed_labels(files)).encode(
        "utf-8")
    rendered = launch_files.launch_files(name)
    files.update({f"{launch_files.FOLDER}/{filename}": text.encode("utf-8") for filename, text in rendered.items()})
    executable |= {path for path in files if path.endswith((".sh", ".sbatch"))}
    target = os.path.join(host.ROOT, "recipes", name)
    for relative in sorted(files):
        print(f"{'would write' if dry else 'wrote'} recipes/{name}/{relative}")
    for relative in left_out:
        if relative != f"{launch_files.FOLDER}/" and not relative.endswith("__pycache__/"):
            print(f"left out recipes/{source}/{relative} (data, results, checkpoints and caches are not source)")
    if new_matrix is not None:
        print(f"{'would add' if dry else 'added'} {name} to {MATRIX}")
    if dry:
        return
    write_folder(target, files, executable)
    if new_matrix is not None:
        try:
            host.write_atomically(matrix_path, new_matrix)
        except BaseException:  # all or nothing: without its nightly entry, the new folder goes too
            shutil.rmtree(target, ignore_errors=True)
            raise
    print("\n".join(["", *scaffold.next_steps(name, source, entry, added=new_matrix is not None)]))


def _title(folder: str) -> str:
    """The first line of the source recipe's train.py docstring, e.g. 'MNIST CNN: the smallest recipe';
    empty when it has none."""
    try:
        with open(os.path.join(folder, "train.py"), encoding="utf-8") as handle:
            first = handle.read().split('"""', 2)[1].strip().splitlines()[0]
    except (IndexError, UnicodeDecodeError):
        return ""
    return first.rstrip(".")
