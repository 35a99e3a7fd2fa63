"""Fresh-eyes review 50 (A): the command "## More seeds" gives trains a population that pools with the one it
extends, its --total-timesteps the members' config.yaml's (the total typed, or a resume's), not population.json's
whole-iteration total_timesteps_per_member, which a pool of the two would refuse."""

from __future__ import annotations

import json
import shlex
import sys

import yaml

from cli_helpers import run_main

TRAIN = ["--num-envs", "2", "--num-steps", "64", "--eval-episodes", "1", "--quiet"]  # 128 steps an iteration


def _proxima(monkeypatch, capsys, argv: list) -> None:
    """``proxima ARGV`` in this process, sys.argv set as population.json records it; exit 0 asserted."""
    monkeypatch.setattr(sys, "argv", ["proxima", *argv])
    code, _, err = run_main(argv, capsys)
    assert code == 0, err


def _more_seeds_command(monkeypatch, capsys, run, out) -> list:
    """The words of the train command in ``proxima report RUN``'s "## More seeds"."""
    _proxima(monkeypatch, capsys, ["report", str(run), "--episodes", "0", "--out", str(out)])
    more = out.read_text().split("## More seeds")[1].split("\n## ")[0]
    steps = [line for line in more.splitlines() if line.startswith("- `proxima train ")]
    assert len(steps) == 1, more
    return shlex.split(steps[0][len("- `"):-1])


def _configs_total(run) -> set:
    return {yaml.safe_load(p.read_text())["total_timesteps"] for p in run.glob("m*/config.yaml")}


def _total_flag(words: list) -> str:
    return words[words.index("--total-timesteps") + 1]


def test_more_seeds_of_a_total_not_a_whole_number_of_iterations_trains_the_typed_total_and_pools(
        tmp_path, monkeypatch, capsys):
    a = tmp_path / "A"
    _proxima(monkeypatch, capsys, ["train", "CartPole-v1", "--seeds", "0-1", *TRAIN, "--total-timesteps", "200",
                                   "--run-dir", str(a)])
    assert json.loads((a / "population.json").read_text())["total_timesteps_per_member"] == 128  # 1 iteration
    assert _configs_total(a) == {200}
    words = _more_seeds_command(monkeypatch, capsys, a, tmp_path / "a.md")
    assert _total_flag(words) == "200"  # was 128: config.yaml 128 in A-seeds2-9, 200 in A, which A+A2 refuses
    _proxima(monkeypatch, capsys, words[1:])
    _proxima(monkeypatch, capsys, ["report", f"{a}+{a}-seeds2-9", "--episodes", "0", "--out", str(tmp_path / "p.md")])
    assert "10 members (10 seeds x 1 setting), pooled from 2 populations" in (tmp_path / "p.md").read_text()


def test_more_seeds_after_a_resume_that_extended_the_total_trains_the_resumes_typed_total_and_pools(
        tmp_path, monkeypatch, capsys):
    """--no-anneal-lr: the resume recomputes no schedule, so the next seeds are trained, not every seed afresh."""
    a = tmp_path / "A"
    _proxima(monkeypatch, capsys, ["train", "CartPole-v1", "--seeds", "0-1", *TRAIN, "--no-anneal-lr",
                                   "--total-timesteps", "128", "--run-dir", str(a)])
    _proxima(monkeypatch, capsys, ["resume", str(a), "--total-timesteps", "300", "--quiet"])
    assert json.loads((a / "population.json").read_text())["total_timesteps_per_member"] == 256  # 2 iterations
    assert _configs_total(a) == {300}  # the resume rewrote the members' config.yaml with the total it was given
    words = _more_seeds_command(monkeypatch, capsys, a, tmp_path / "a.md")
    assert _total_flag(words) == "300"  # was 256
    assert words[words.index("--seeds") + 1] == "2-9"
    _proxima(monkeypatch, capsys, words[1:])
    _proxima(monkeypatch, capsys, ["report", f"{a}+{a}-seeds2-9", "--episodes", "0", "--out", str(tmp_path / "p.md")])
    assert "10 members (10 seeds x 1 setting), pooled from 2 populations" in (tmp_path / "p.md").read_text()
