"""A stack's pip constraints, as the library carries them: `python -m tf_recipes.operations.constraints STACK`
prints the file stacks/STACK.txt of the checkout the library was built from (package data,
`tf_recipes.stacks`).

A recipe image installs the library's wheel first, then the recipe's requirements with these pins, so
that a recipe folder builds its image with nothing from outside it (the Dockerfiles, docs/library.md).
"""

import sys
from importlib import resources

from tf_recipes.contract import EXIT_USER_ERROR


def stacks() -> list[str]:
    """The names of the stacks the library carries, sorted."""
    return sorted(
        entry.name.removesuffix(".txt")
        for entry in resources.files("tf_recipes.stacks").iterdir()
        if entry.name.endswith(".txt")
    )


def constraints(stack: str) -> str:
    """The text of stacks/STACK.txt; ValueError (one line) for a stack the library does not carry."""
    if stack not in stacks():
        raise ValueError(
            f"stack {stack!r} is not one this tf-recipes carries; use one of {', '.join(stacks())}"
        )
    return (resources.files("tf_recipes.stacks") / f"{stack}.txt").read_text()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    usage = f"python -m tf_recipes.operations.constraints STACK (one of {', '.join(stacks())})"
    if argv in (["--help"], ["-h"]):
        print(f"usage: {usage}")
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print(f"error: give one stack: {usage}", file=sys.stderr)
        return EXIT_USER_ERROR
    try:
        sys.stdout.write(constraints(argv[0]))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
