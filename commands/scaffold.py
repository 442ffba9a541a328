"""`invoke new NAME --from RECIPE`: a new recipe folder made from an existing one, as texts.

A recipe's name is a folder name, a Docker image name (tf-recipes/NAME:cpu), a Kubernetes object
name (NAME-multiworker, NAME-multiworker-0.NAME-multiworker, ...) and a results folder, so it must
be valid as all of them: lowercase letters, digits and single hyphens, starting with a letter.

Everything here turns texts into texts; tasks/starting.py reads the source folder and writes the
new one.
"""
from __future__ import annotations

import re

from commands.launch import LaunchError

# A DNS-1035 label (Kubernetes Services and the Indexed Job's subdomain), which is also a valid
# Docker repository component and a folder name. The manifests name a job NAME-multiworker, which
# commands/k8s.py allows up to 50 characters (its pods append -worker-N): so at most 38.
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
MAX_NAME = 50 - len("-multiworker")

# Left out of the copy: what a run or an editor leaves behind, and the launch/ folder, which is
# rendered again for the new name.
SKIPPED = ("launch/", "__pycache__/", ".ipynb_checkpoints/")
SKIPPED_SUFFIXES = (".pyc", ".pyo")


def check_name(name: str, existing: list[str], source: str) -> None:
    """A LaunchError naming the value and the rule, for a name a new recipe cannot have."""
    if source not in existing:
        raise LaunchError(f"--from {source!r} is not a recipe; choose one of: {', '.join(existing)}")
    if not NAME_PATTERN.fullmatch(name) or len(name) > MAX_NAME:
        raise LaunchError(f"recipe name {name!r} is not valid: use lowercase letters, digits and single "
                          f"hyphens, starting with a letter, at most {MAX_NAME} characters (it names a folder, "
                          "a Docker image and Kubernetes objects), e.g. my-cnn")
    if name in existing:
        raise LaunchError(f"recipes/{name} exists already; choose another name or delete that folder")


def copied(path: str) -> bool:
    """Whether a file of the source recipe (path relative to its folder, with /) is copied."""
    return not (path.startswith(SKIPPED) or any(f"/{part}" in f"/{path}" for part in SKIPPED[1:])
                or path.endswith(SKIPPED_SUFFIXES))


def rename(text: str, source: str, name: str) -> str:
    """`text` with every mention of the source recipe (mnist-cnn, and mnist_cnn as a Python or
    Keras name) turned into the new one."""
    return text.replace(source, name).replace(source.replace("-", "_"), name.replace("-", "_"))


def readme(name: str, source: str, title: str) -> str:
    """The new recipe's README: what it started from and the commands that run it."""
    return f"""# {name}

Started from [`{source}`](../{source}/README.md) ({title}) with `invoke new {name} --from {source}`.
Its `train.py` is that recipe's, renamed; edit its data and model sections to make it yours, and
keep the launcher lines as they are: they are what makes it run the same under every launcher.

## Run it

```bash
invoke run {name} --gpus 0 --runtime local -- --max-steps 20
invoke run {name} --gpus 0 --cpu-replicas 2 --launcher multiworker --runtime local -- --max-steps 20
invoke build {name} --base cpu
invoke run {name} --gpus 0 --runtime docker --base cpu -- --max-steps 20
invoke run {name} --gpus 8 --runtime docker --dry
```

`python recipes/{name}/train.py --help` lists its flags. The `launch/` folder holds its SLURM
scripts and Kubernetes manifests, rendered for this name by `invoke launch-files --recipe {name}`.
"""


def matrix_entry(matrix_text: str, source: str, name: str) -> str:
    """The lines of ci/nightly/matrix.yaml's `recipes:` map for the new recipe: a copy of the
    source recipe's entry, renamed."""
    lines = matrix_text.splitlines(keepends=True)
    start = _entry_start(lines, source)
    end = start + 1
    while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
        end += 1
    while not lines[end - 1].strip():
        end -= 1
    return rename("".join(lines[start:end]), source, name)


def _entry_start(lines: list[str], source: str) -> int:
    in_recipes = False
    for index, line in enumerate(lines):
        if line.rstrip() == "recipes:":
            in_recipes = True
        elif in_recipes and line.rstrip() == f"  {source}:":
            return index
        elif in_recipes and line.strip() and not line.startswith(" "):
            break
    raise LaunchError(f"ci/nightly/matrix.yaml has no entry for {source} under recipes:")


TIER_LIST = re.compile(r"^(    recipes: \[)([^\]]*)(\])$")


def add_to_matrix(matrix_text: str, source: str, name: str) -> str:
    """ci/nightly/matrix.yaml with the new recipe added: its entry after the source's, and its name
    in every tier that runs the source. Comments and order are kept."""
    if re.search(rf"^  {re.escape(name)}:$", matrix_text, flags=re.M):
        raise LaunchError(f"ci/nightly/matrix.yaml has an entry for {name} already")
    entry = matrix_entry(matrix_text, source, name)
    lines = matrix_text.splitlines(keepends=True)
    start = _entry_start(lines, source)
    after = start + len(matrix_entry(matrix_text, source, source).splitlines())
    lines[after:after] = entry.splitlines(keepends=True)
    for index, line in enumerate(lines):
        match = TIER_LIST.match(line.rstrip("\n"))
        if match and source in [part.strip() for part in match.group(2).split(",")]:
            lines[index] = f"{match.group(1)}{match.group(2)}, {name}{match.group(3)}\n"
    return "".join(lines)


def next_steps(name: str, source: str, entry: str, added: bool) -> list[str]:
    """What to do after `invoke new`, as lines to print."""
    steps = [f"created recipes/{name} from recipes/{source}, with its launch/ folder rendered for {name}", "",
             "next steps:",
             f"  1. edit recipes/{name}/train.py: its data and model sections",
             f"  2. try it:  invoke run {name} --gpus 0 --runtime local -- --max-steps 20",
             f"  3. its image:  invoke build {name} --base cpu"]
    if added:
        steps += [f"  4. it is in the nightly (ci/nightly/matrix.yaml): invoke nightly --tier cpu --only {name} --dry",
                  "     and the matrix table of docs/nightly.md is now: invoke nightly --table"]
    else:
        steps += ["  4. add it to the nightly: rerun with --add-to-nightly, or add to ci/nightly/matrix.yaml under "
                  "`recipes:`", *[f"     {line}" for line in entry.splitlines()],
                  f"     and {name} to the `recipes: [...]` list of each tier that runs {source}"]
    steps.append(f"  5. after editing a builder or a name:  invoke launch-files --recipe {name}")
    return steps
