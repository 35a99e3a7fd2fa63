"""The advice to train a population again names the directory it was given: a copied or moved population's
recorded command names the original's --run-dir, which --overwrite would move aside (an intact population)."""

from __future__ import annotations

import shlex

import pytest

from proxima import population_run


@pytest.mark.parametrize("recorded", [["--run-dir", "runs/popA"], ["--run-dir=runs/popA"], []])
def test_train_again_trains_into_the_directory_given(monkeypatch, tmp_path, recorded):
    command = ["proxima", "train", "CartPole-v1", "--seeds", "1-3", *recorded, "--total-timesteps", "4096"]
    monkeypatch.setattr(population_run, "read_population_doc", lambda run_dir: {"command": command})
    line = population_run._train_again(tmp_path / "popC")
    words = shlex.split(line.split("train it again: ", 1)[1].split(" (the old directory", 1)[0])
    assert "runs/popA" not in line and "--run-dir=runs/popA" not in words
    assert words[words.index("--run-dir") + 1] == str(tmp_path / "popC") and words.count("--run-dir") == 1
    assert words[:5] == ["proxima", "train", "CartPole-v1", "--seeds", "1-3"] and words[-1] == "--overwrite"
    assert "--total-timesteps" in words and words[words.index("--total-timesteps") + 1] == "4096"
