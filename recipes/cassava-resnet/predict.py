"""cassava-resnet: predict with an exported model: each leaf photo's disease (or healthy): predictions.csv with top-k.

    python recipes/cassava-resnet/predict.py --model RESULTS/export --input FILE_OR_FOLDER --out DIR

or `invoke predict cassava-resnet --model RESULTS/export --input FILE_OR_FOLDER --out DIR`. Reads only the export
(written at the end of train.py, see docs/using.md): its newest version RESULTS/export/N, or the version
folder given as --model; never this recipe's training code.
"""
from tf_recipes.operations import predicting

if __name__ == "__main__":
    predicting.main(__doc__.split("\n")[0], "classification")
