"""Make the recipe's modules (labels, data, ...) importable; its folder name has a dash."""
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "cityscapes-unet"
for path in (str(REPO), str(RECIPE)):
    if path not in sys.path:
        sys.path.insert(0, path)
