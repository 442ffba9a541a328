"""`invoke new NAME --from RECIPE`: a new recipe folder made from an existing one, as texts.

A recipe's name is a folder name, a Docker image name (tf-recipes/NAME:cpu), a Kubernetes object
name (NAME-multiworker, NAME-multiworker-0.NAME-multiworker, ...) and a results folder, so it must
be valid as all of them: lowercase letters, digits and single hyphens, starting with a letter.

The copy names the new recipe wherever the source's files name theirs (a path recipes/NAME/, an
image, ARG RECIPE, the RECIPE string, an invoke command, a title), and nowhere else: in Python files
only strings and comments change, so a copy parses whenever its source did; binary files are copied
byte for byte. The nightly entry is added by inserting lines into ci/nightly/matrix.yaml, never by
rewriting it. Everything here turns texts into texts; tasks/starting.py reads the source folder and
writes the new one.
"""
from __future__ import annotations

import bisect
import re
import tokenize

import yaml

from commands.launch import LaunchError

# A DNS-1035 label (Kubernetes Services and the Indexed Job's subdomain), which is also a valid
# Docker repository component and a folder name. The manifests name a job NAME-multiworker, which
# commands/k8s.py allows up to 50 characters (its pods append -worker-N): so at most 38.
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
MAX_NAME = 50 - len("-multiworker")

# Left out of the copy, as not source: at the top of a recipe folder, launch/ (rendered again for the
# new name), the data and results a run reads and writes, and wheels/ (the library's wheel `invoke build`
# puts there); at any depth, checkpoints and caches.
SKIPPED_TOP = ("launch", "data", "results", "wheels")
SKIPPED_ANYWHERE = ("checkpoints", "__pycache__", ".ipynb_checkpoints", ".pytest_cache")
SKIPPED_SUFFIXES = (".pyc", ".pyo")

# Where a recipe's files name their recipe: what comes before the name, and what must follow it.
# BOUNDED: any character that cannot be part of a name (nor of its Python form, with _).
BOUNDED = "(?![A-Za-z0-9_-])"
CLOSING_QUOTE = "(?=[\"'])"
KERAS_NAME = r"\bname=[\"']"
NAMING_PLACES = (
    (r"recipes/", BOUNDED),                 # its folder (recipes/NAME/train.py), its image (tf-recipes/NAME:TAG)
    (r"results/", BOUNDED),                 # its results folder
    (r"\bRECIPE=", BOUNDED),                # the Dockerfile's ARG RECIPE=NAME
    (r"\bRECIPE = [\"']", CLOSING_QUOTE),   # train.py's RECIPE = "NAME"
    (KERAS_NAME, CLOSING_QUOTE),            # its Keras model's name="NAME", in the Python form
    (r"\binvoke [a-z][a-z.-]* ", BOUNDED),  # invoke run NAME, invoke build NAME, invoke predict NAME
    (r"--recipe[ =]", BOUNDED),             # invoke launch-files --recipe NAME
    (r"^# ", r"(?= recipe\b)"),             # the Dockerfile's title: # NAME recipe image
    (r'^"""', "(?=:)"),                     # a script's title: """NAME: predict with ...
)
# The label of a line that exists because of distribution:
# a comment `# Distributed: ...` (or `# Horovod: ...`, `# Strategy: ...`); its text is the rest of the comment.
LABEL = re.compile(r"#\s*((?:Distributed|Horovod|Strategy):\s*\S.*?)\s*$")

# A name with a hyphen is no word and no Python name, so a string that is it, or begins with it as a
# word, names the recipe too: Trainer(launcher, "cassava-resnet"), "cassava-resnet input pipeline".
HYPHENATED_PLACES = ((r"[\"']", r"(?=[\"' :)])"),)


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
    folders = path.split("/")[:-1]
    return not ((folders and folders[0] in SKIPPED_TOP) or any(part in SKIPPED_ANYWHERE for part in folders)
                or path.endswith(SKIPPED_SUFFIXES))


def as_text(content: bytes) -> str | None:
    """A file's content as text, or None for a binary file (not UTF-8, or with NUL bytes), which is
    copied byte for byte."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\0" in text else text


def rename(text: str, source: str, name: str, within: list[tuple[int, int]] | None = None) -> str:
    """`text` with each mention of the source recipe in one of the NAMING_PLACES (mnist-cnn, and
    mnist_cnn as a Python or Keras name) turned into the new name; with `within`, (start, end)
    offsets in order, only mentions inside them. Other words that contain the name, or equal it
    elsewhere, are left alone."""
    python_source, python_name = source.replace("-", "_"), name.replace("-", "_")
    every = "|".join(map(re.escape, {source, python_source}))
    places = [(before, every, after) for before, after in NAMING_PLACES]
    places += [(before, re.escape(source), after) for before, after in HYPHENATED_PLACES if "-" in source]
    pattern = re.compile("|".join(f"({before})({names}){after}" for before, names, after in places), flags=re.M)
    starts = [start for start, _ in within or []]

    def renamed(match: re.Match) -> str:
        place = next(index for index in range(1, len(places) * 2, 2) if match.group(index) is not None)
        found = match.group(place + 1)
        if within is not None:
            span = bisect.bisect_right(starts, match.start(place + 1)) - 1
            if span < 0 or match.end(place + 1) > within[span][1]:
                return match.group(0)
        python_form = found == python_source and (found != source or places[place // 2][0] == KERAS_NAME)
        return match.group(place) + (python_name if python_form else name)
    return pattern.sub(renamed, text)


def rename_python(text: str, source: str, name: str) -> str:
    """A Python file renamed in its strings and comments only: its code is never touched, so the
    copy parses whenever the source did. (A file that does not tokenize is renamed as text.)"""
    try:
        within = _strings_and_comments(text)
    except (tokenize.TokenError, SyntaxError):
        within = None
    return rename(text, source, name, within)


def rename_file(path: str, content: bytes, source: str, name: str) -> bytes:
    """A copied file's content: text renamed (Python files in their strings and comments only),
    binary files as they are."""
    text = as_text(content)
    if text is None:
        return content
    renamed = rename_python(text, source, name) if path.endswith(".py") else rename(text, source, name)
    return renamed.encode("utf-8")


def distributed_labels(files: dict[str, bytes]) -> list[tuple[str, str]]:
    """(file, label text) of every distributed label in a recipe folder's own .py files (`files`: path in
    the folder -> content), train.py first and then by name, line by line: what its README lists."""
    found = []
    for path in sorted((p for p in files if p.endswith(".py") and "/" not in p), key=lambda p: (p != "train.py", p)):
        lines = [line for line in re.split(r"(?<=\n)", as_text(files[path]) or "") if line]
        try:
            notes = [token.string for token in tokenize.generate_tokens(iter(lines).__next__)
                     if token.type == tokenize.COMMENT]
        except (tokenize.TokenError, SyntaxError):
            continue  # not Python the tests could read either
        found += [(path, match.group(1)) for note in notes if (match := LABEL.match(note))]
    return found


def labels_list(labels: list[tuple[str, str]]) -> str:
    """The Markdown list of a recipe README's "What makes it distributed": each file, then its labels."""
    lines, current = [], None
    for file, text in labels:
        if file != current:
            lines.append(f"- [`{file}`]({file})")
            current = file
        lines.append(f"  - {text}")
    return "\n".join(lines) + "\n" if lines else ""


def _strings_and_comments(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets in `text` of its string literals (f-strings whole) and comments."""
    lines = [line for line in re.split(r"(?<=\n)", text) if line]  # as tokenize reads them
    line_starts = [0]
    for line in lines:
        line_starts.append(line_starts[-1] + len(line))
    fstring_start, fstring_end = getattr(tokenize, "FSTRING_START", None), getattr(tokenize, "FSTRING_END", None)
    spans, opened, depth = [], None, 0
    for token in tokenize.generate_tokens(iter(lines).__next__):
        start = line_starts[token.start[0] - 1] + token.start[1]
        end = line_starts[token.end[0] - 1] + token.end[1]
        if token.type == fstring_start:  # Python 3.12+: an f-string is many tokens
            opened, depth = (start if depth == 0 else opened), depth + 1
        elif token.type == fstring_end:
            depth -= 1
            if depth == 0:
                spans.append((opened, end))
        elif depth == 0 and token.type in (tokenize.STRING, tokenize.COMMENT):
            spans.append((start, end))
    return spans


# Every recipe README's `## ` sections, in this order; anything else is a `### ` subsection of one of them.
README_SECTIONS = ("Overview", "Feature matrix", "Quick start", "Your own data", "Flags", "What makes it distributed",
                   "Results", "Performance", "Tests")


RESULTS_SECTION = """## Results

Not measured yet: what it reaches on its held-out data, and how soon. `--eval-every N` records the learning
curve in `results.json` and TensorBoard, and `--target METRIC=VALUE` the time to a quality target.
"""


def readme(name: str, source: str, title: str, labels: list[tuple[str, str]] = ()) -> str:
    """The new recipe's README in the template of every recipe README (README_SECTIONS): its origin, the
    commands that run it, where each part is to be filled in; `labels` under "What makes it distributed"."""
    what = f" ({title})" if title else ""
    origin = f"../{source}/README.md"
    return f"""# {name}

## Overview

Started from [`{source}`]({origin}){what} with `invoke new {name} --from {source}`.
Its `train.py` and modules are that recipe's, renamed; edit where it reads its data (its data module and
the data section of `train.py`) and its model to make it yours, and keep the launcher lines as they
are: they are what makes it run the same under every launcher.

## Feature matrix

The launchers and runtimes of [`{source}`]({origin}#feature-matrix), until this recipe changes how it
trains. Record here which of them you have run it under.

## Quick start

```bash
invoke run {name} --gpus 0 --runtime local -- --max-steps 20
invoke run {name} --gpus 0 --cpu-replicas 2 --launcher multiworker --runtime local -- --max-steps 20
invoke build {name} --base cpu
invoke run {name} --gpus 0 --runtime docker --base cpu -- --max-steps 20
invoke run {name} --gpus 8 --runtime docker --dry
```

The `launch/` folder holds its SLURM scripts and Kubernetes manifests, rendered for this name by
`invoke launch-files --recipe {name}`.

## Your own data

What `{source}` reads is in [its README]({origin}#your-own-data); this recipe's data module (`data.py` or
`input_pipeline.py`) and the data section of `train.py` are where it reads its own.

## Flags

`python recipes/{name}/train.py --help` lists them.

## What makes it distributed

Every line of this folder that exists only because there is more than one replica carries a
`# Distributed: ...` label where it stands (`grep -n "# Distributed:" *.py`); these are all of them, as
`{source}` had them. `tests/unit/test_distributed_tags.py` fails when a launcher call or a test of `is_chief`
in `train.py` carries no label.

{labels_list(labels)}
What happens inside the library: [the library's launcher API](../../docs/library.md#launchers).

{RESULTS_SECTION}
## Performance

Not measured yet: `invoke bench {name}` measures its throughput under each launcher.

## Tests

None of its own yet; the tests of `{source}` show what to prove (training, every launcher's
weights, resume).
"""


MATRIX = "ci/nightly/matrix.yaml"
NO_ENTRY = ("add an entry for {name} under `recipes:` in ci/nightly/matrix.yaml yourself (global_batch, args, "
            "reference, time_limit; as the other recipes there) and {name} to the tiers that should run it")


def matrix_entry(matrix_text: str, source: str, name: str) -> str | None:
    """The lines of ci/nightly/matrix.yaml's `recipes:` map for the new recipe: a copy of the
    source recipe's entry with the key renamed and the body as rename() has it; None when the source
    has no entry."""
    recipes = _matrix_nodes(matrix_text)[1]
    found = _entry(recipes, source)
    if found is None:
        return None
    key, value = found
    first, last = key.start_mark.line, max(key.start_mark.line, _last_line(value))
    if key.style is not None or key.end_mark.line != first:
        raise LaunchError(f"{MATRIX}: the key of {source}'s entry is not a plain name on one line; "
                          + NO_ENTRY.format(name=name))
    lines = matrix_text.splitlines(keepends=True)
    head = lines[first][:key.start_mark.column] + name + rename(lines[first][key.end_mark.column:], source, name)
    entry = head + rename("".join(lines[first + 1:last + 1]), source, name)
    return entry if entry.endswith("\n") else entry + "\n"


def add_to_matrix(matrix_text: str, source: str, name: str) -> str:
    """ci/nightly/matrix.yaml with the new recipe added: its entry after the source's, and its name
    at the end of every tier's recipe list that has the source. Everything else is kept byte for
    byte (the edits only insert), and a result that says more than that is refused."""
    root, recipes = _matrix_nodes(matrix_text)
    if _entry(recipes, name) is not None:
        raise LaunchError(f"{MATRIX} has an entry for {name} already")
    entry = matrix_entry(matrix_text, source, name)
    if entry is None:
        raise LaunchError(f"{MATRIX} has no entry for {source} to copy: leave out --add-to-nightly and "
                          + NO_ENTRY.format(name=name))
    last = _last_line(_entry(recipes, source)[1])
    after_entry = sum(len(line) for line in matrix_text.splitlines(keepends=True)[:last + 1])
    insertions = [(after_entry, entry if matrix_text[after_entry - 1:after_entry] == "\n" else "\n" + entry)]
    insertions += [_tier_insertion(matrix_text, listed, name) for listed in _tier_lists(root, source)]
    added = matrix_text
    for offset, text in sorted(insertions, reverse=True):
        added = added[:offset] + text + added[offset:]
    _check_only_added(matrix_text, added, source, name)
    return added


def _matrix_nodes(matrix_text: str) -> tuple[yaml.Node, yaml.MappingNode]:
    """The matrix as YAML nodes (which know their lines) and its `recipes:` map."""
    try:
        root = yaml.compose(matrix_text)
    except yaml.YAMLError as error:
        raise LaunchError(f"{MATRIX} is not valid YAML ({str(error).splitlines()[0]}); fix it first") from None
    found = _entry(root, "recipes")
    if found is None or not isinstance(found[1], yaml.MappingNode) or found[1].flow_style:
        raise LaunchError(f"{MATRIX} has no `recipes:` map with one entry per line; fix it first")
    return root, found[1]


def _entry(mapping, key: str):
    """(key node, value node) of `key` in a mapping node, or None."""
    if isinstance(mapping, yaml.MappingNode):
        for key_node, value_node in mapping.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                return key_node, value_node
    return None


def _last_line(node: yaml.Node) -> int:
    """The last line (from 0) that holds some of `node`: a block collection ends where the text of
    the next key begins, so its last child is asked instead."""
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.flow_style and node.value:
        children = [part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode) else node.value
        return max(_last_line(child) for child in children)
    return node.end_mark.line if node.end_mark.column else node.end_mark.line - 1


def _tier_lists(root: yaml.Node, source: str) -> list[yaml.SequenceNode]:
    """The `recipes:` lists of the tiers that run `source`."""
    tiers = _entry(root, "tiers")
    lists = [_entry(tier, "recipes") for _, tier in (tiers[1].value if tiers and isinstance(tiers[1], yaml.MappingNode)
                                                    else [])]
    return [found[1] for found in lists if found and isinstance(found[1], yaml.SequenceNode)
            and any(isinstance(item, yaml.ScalarNode) and item.value == source for item in found[1].value)]


def _tier_insertion(matrix_text: str, listed: yaml.SequenceNode, name: str) -> tuple[int, str]:
    """(offset, text) that appends `name` to a tier's recipe list: `[a, b]` or `- a` lines."""
    last = listed.value[-1]
    if listed.flow_style:
        return last.end_mark.index, f", {name}"
    line_start = matrix_text.rfind("\n", 0, last.start_mark.index) + 1
    dash = matrix_text[line_start:last.start_mark.index]
    line_end = matrix_text.find("\n", last.end_mark.index)
    if not isinstance(last, yaml.ScalarNode) or not re.fullmatch(r" *- +", dash) or line_end < 0:
        raise LaunchError(f"{MATRIX}: a tier's `recipes:` list is in a form this cannot extend; leave out "
                          f"--add-to-nightly and add {name} to it yourself")
    return line_end + 1, f"{dash}{name}\n"


def _check_only_added(before_text: str, after_text: str, source: str, name: str) -> None:
    """A LaunchError unless `after_text` is `before_text` plus the renamed entry and tier names."""
    def renamed(value):
        if isinstance(value, str):
            return rename(value, source, name)
        if isinstance(value, list):
            return [renamed(item) for item in value]
        return {key: renamed(item) for key, item in value.items()} if isinstance(value, dict) else value

    expected = yaml.safe_load(before_text)
    expected["recipes"][name] = renamed(expected["recipes"][source])
    for tier in (expected.get("tiers") or {}).values():
        if isinstance(tier, dict) and source in (tier.get("recipes") or []):
            tier["recipes"].append(name)
    try:
        matches = yaml.safe_load(after_text) == expected
    except yaml.YAMLError:
        matches = False
    if not matches:
        raise LaunchError(f"{MATRIX}: adding {name} as a copy of {source} would change more than its own "
                          f"lines; leave out --add-to-nightly and " + NO_ENTRY.format(name=name))


def next_steps(name: str, source: str, entry: str | None, added: bool) -> list[str]:
    """What to do after `invoke new`, as lines to print."""
    steps = [f"created recipes/{name} from recipes/{source}, with its launch/ folder rendered for {name}", "",
             "next steps:",
             f"  1. edit recipes/{name}: its data module (data.py or input_pipeline.py) and train.py's model",
             f"  2. try it:  invoke run {name} --gpus 0 --runtime local -- --max-steps 20",
             f"  3. its image:  invoke build {name} --base cpu"]
    if added:
        steps += [f"  4. it is in the nightly (ci/nightly/matrix.yaml): invoke nightly --tier cpu --only {name} --dry",
                  "     and the matrix table of docs/nightly.md is now: invoke nightly --table"]
    elif entry is None:
        steps += [f"  4. to run it in the nightly ({source} has no entry there to copy): " + NO_ENTRY.format(name=name)]
    else:
        steps += ["  4. add it to the nightly: rerun with --add-to-nightly, or add to ci/nightly/matrix.yaml under "
                  "`recipes:`", *[f"     {line}" for line in entry.splitlines()],
                  f"     and {name} to the `recipes: [...]` list of each tier that runs {source}"]
    steps.append(f"  5. after editing a builder or a name:  invoke launch-files --recipe {name}")
    return steps
