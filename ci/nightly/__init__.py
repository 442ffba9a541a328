"""The nightly container CI: every recipe built and trained under every launcher, every night.

- `matrix.yaml`: the cells (recipe x launcher x runtime x base, by tier) and the README commands;
- `matrix.py`: pure: loading and checking the matrix, the cells' commands, the checks of their
  results, the regression rule;
- `runner.py`: the night, step by step: build the images, prepare data, run and check every cell and
  README command, judge speed against history, write the report (what `invoke nightly` calls);
- `report.py`: report.json, junit.xml, summary.md, history.png and the README matrix table;
- `issues.py`: one GitHub issue per failing entry (`python -m ci.nightly.issues`, from the workflow).
"""
