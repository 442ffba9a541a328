"""Every recipe README follows one template: a `# NAME` title (the recipe's folder), then exactly these
`## ` sections in this order. Anything else a recipe has to say is a `### ` subsection of one of them
(Launch files under Quick start, data preparation under Your own data, Accuracy under Performance, ...).
Headings inside code blocks do not count."""
import re

import pytest

from commands.scaffold import README_SECTIONS, readme
from helpers import REPO

SECTIONS = README_SECTIONS
READMES = sorted((REPO / "recipes").glob("*/README.md"))


def headings(text: str) -> list[str]:
    """The Markdown headings of `text` (`#`, `##`, ... lines), outside fenced code blocks."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            found.append(line)
    return found


def problems(text: str, name: str) -> list[str]:
    found = headings(text)
    wrong = []
    if not found or found[0] != f"# {name}" or not text.startswith(f"# {name}\n"):
        wrong.append(f"the README must start with the title `# {name}`")
    if [line for line in found if line.startswith("# ")] != [f"# {name}"]:
        wrong.append("the title must be the only `# ` heading")
    sections = [line[3:] for line in found if line.startswith("## ")]
    if sections != list(SECTIONS):
        wrong.append(f"its `## ` sections are {sections}; the template is {list(SECTIONS)} (another section "
                     "becomes a `### ` subsection of the one it belongs to)")
    return wrong


def template(name: str, extra: str = "") -> str:
    return f"# {name}\n\n" + "".join(f"## {section}\n\ntext\n\n{extra if section == 'Flags' else ''}"
                                     for section in SECTIONS)


def test_the_check_accepts_the_template_and_finds_each_departure():
    assert problems(template("x"), "x") == []
    assert problems(template("x", "### Parameters\n\n```bash\n## not a heading\n# nor this\n```\n"), "x") == []
    assert problems(template("x"), "y")  # another title
    assert problems("intro\n\n" + template("x"), "x")  # text before the title
    assert problems(template("x").replace("## Flags", "## Parameters"), "x")  # a section renamed
    assert problems(template("x", "## Launch files\n\ntext\n"), "x")  # a section the template does not have
    assert problems(template("x").replace("## Tests\n\ntext\n\n", ""), "x")  # a section missing
    swapped = template("x").replace("## Overview", "## @").replace("## Feature matrix", "## Overview")
    assert problems(swapped.replace("## @", "## Feature matrix"), "x")  # out of order
    assert problems(template("x", "# Another title\n"), "x")


def test_there_are_recipe_readmes():
    assert {path.parent.name for path in READMES} >= {"mnist-cnn", "cassava-resnet", "cityscapes-unet"}


@pytest.mark.parametrize("readme", READMES, ids=lambda path: path.parent.name)
def test_the_recipe_readme_follows_the_template(readme):
    wrong = problems(readme.read_text(), readme.parent.name)
    assert not wrong, f"{readme.relative_to(REPO)}: " + "; ".join(wrong)


def test_the_readme_invoke_new_writes_follows_the_template():
    assert problems(readme("my-cnn", "mnist-cnn", "the MNIST CNN"), "my-cnn") == []
