"""The stacks' pip constraints files, one per stack (NAME.txt: ngc-25.02.txt, current.txt), and no code.

The source of truth for every install: ci/setup.sh, images/cpu and images/current install with them, and
the library ships them as package data (`tf_recipes.stacks`, read by `python -m tf_recipes.operations.constraints
NAME`), so that a recipe image built from its own folder installs with the same pins. This file only
makes the folder a package that an editable install can map.
"""
