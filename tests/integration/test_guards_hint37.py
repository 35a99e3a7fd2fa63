"""The check-env command a non-finite env output suggests reaches the env step it came at."""
from __future__ import annotations

import shlex

import pytest

from proxima import cli
from tests.cli_helpers import FIXTURES, run_main


@pytest.fixture
def fixtures_path(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.chdir(tmp_path)


def test_a_nan_past_check_envs_default_steps_suggests_steps_that_reach_it(fixtures_path, capsys):
    """The hint was `proxima check-env bad_envs:NaNObsAtStep250`, whose default 200 steps print OK for
    the env that just failed; now it carries --steps 250, and that command finds the NaN."""
    code, _, err = run_main(["train", "bad_envs:NaNObsAtStep250", "--num-envs", "1", "--num-steps", "256",
                             "--num-minibatches", "2", "--total-timesteps", "256", "--eval-episodes", "0",
                             "--no-progress", "--run-dir", "r"], capsys)
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert "non-finite observation from env 0 at global step 250 (env step 250)" in line, line
    cmd = line.split("check the env's step() with: ")[1].split(";")[0]
    assert cmd == "proxima check-env bad_envs:NaNObsAtStep250 --steps 250", line
    argv = shlex.split(cmd)[1:]
    assert cli.main(argv) == 1  # the suggested command fails the env, as the run did
    assert "FAIL obs finite: expected finite observation values; got obs[0] = nan at step 250" in capsys.readouterr().out
