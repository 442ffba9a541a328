"""cassava-resnet's scripts with paths a careless user gives them: a TFDS folder that is a file, a training
cache inside the data and weights that are a FIFO are refused in one line before anything is written (the
FIFO in a subprocess with a timeout, so that a reader that blocks fails the test instead of hanging it)."""
import os
import sys

import pytest

from error_checks import assert_one_error_line
from helpers import recipe_module, run_python


def test_download_refuses_a_data_dir_that_is_a_file(tmp_path, monkeypatch, capsys):
    data = tmp_path / "tensorflow_datasets"
    data.write_text("mine\n")
    monkeypatch.setattr(sys, "argv", ["download_cassava.py", "--data-dir", str(data)])
    with pytest.raises(SystemExit) as stopped:
        recipe_module("cassava-resnet", "download_cassava").main()
    assert stopped.value.code == 2 and f"error: --data-dir {data} is a file, not a folder" in capsys.readouterr().err
    assert data.read_text() == "mine\n"


def test_training_refuses_a_cache_inside_the_data_before_it_loads_tensorflow(tmp_path):
    process = run_python("recipes/cassava-resnet/train.py", "--data-dir", str(tmp_path), "--cache-dir",
                         str(tmp_path / "cache"), "--max-steps", "1", "--no-export", timeout=120)
    assert_one_error_line(process, f"--cache-dir {tmp_path / 'cache'} lies inside --data-dir {tmp_path}")
    assert os.listdir(tmp_path) == []


def test_weights_that_are_a_fifo_are_named_and_never_opened(tmp_path):
    os.mkfifo(tmp_path / "weights.h5")
    process = run_python("recipes/cassava-resnet/train.py", "--synthetic", "--weights", str(tmp_path / "weights.h5"),
                         "--max-steps", "1", "--no-export", "--results-dir", str(tmp_path / "out"), timeout=120)
    assert_one_error_line(process, f"--weights {tmp_path / 'weights.h5'}: a named pipe (FIFO), not a file")
