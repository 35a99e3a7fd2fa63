"""population_curves on a population logged before the rolling-return column (charts/episodic_return_100,
the default curve since session 44) draws its members' per-iteration return, as plot and report do
for single runs: called directly (the Python API), not only through the CLI."""

import json

import pytest

from proxima.plot import population_curves


def _old_member(d, returns, seed):
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(f"env_id: CartPole-v1\nseed: {seed}\n")
    rows = ["iteration,global_step,time,episodes,charts/episodic_return"]
    rows += [f"{i},{128 * i},{0.1 * i},1,{r}" for i, r in enumerate(returns, 1)]
    (d / "metrics.csv").write_text("\n".join(rows) + "\n")


def test_a_population_logged_before_the_rolling_column_draws_its_per_iteration_return(tmp_path):
    run = tmp_path / "old"
    entries = []
    for i, returns in enumerate([[10, 20, 30], [30, 40, 50]]):
        name = f"m{i:03d}-seed{i + 1}"
        _old_member(run / name, returns, i + 1)
        entries.append({"dir": name, "seed": i + 1, "settings": {}})
    (run / "population.json").write_text(json.dumps({"kind": "ppo-population", "env_id": "CartPole-v1", "members": 2,
                                                     "seeds": [1, 2], "member_dirs": entries}))
    env_id, metric, curves = population_curves(run, stat="mean", band="minmax")
    assert (env_id, metric) == ("CartPole-v1", "charts/episodic_return")
    assert len(curves) == 1 and list(curves[0].y) == pytest.approx([20.0, 30.0, 40.0])
