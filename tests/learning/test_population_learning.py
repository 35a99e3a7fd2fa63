"""Learning test (slow): a population of the fast CartPole preset learns in every member's own directory."""

from __future__ import annotations

import json

import pytest

from proxima import cli

pytestmark = pytest.mark.slow


def test_fast_cartpole_population_of_four_learns(tmp_path):
    run = tmp_path / "R"
    assert cli.main(["train", "CartPole-v1", "--preset", "fast", "--seeds", "1-4", "--run-dir", str(run), "--quiet",
                     "--threads", "1"]) == 0
    evals = [m["eval_mean_return"] for m in json.loads((run / "population.json").read_text())["member_dirs"]]
    assert len(evals) == 4
    # the preset solves most single seeds; a population must not learn worse: most members >= 475,
    # every member far above a random policy (~20)
    assert sum(e >= 475 for e in evals) >= 2, evals
    assert min(evals) > 150, evals
