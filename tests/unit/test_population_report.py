"""Population statistics (proxima/population_report.py): IQM, bootstrap CIs, fraction solved, report.md."""

from __future__ import annotations

import json

import numpy as np
import pytest

from proxima import cli
from proxima.population_report import bootstrap_ci, iqm, summarize_settings


def test_iqm_trims_a_quarter_at_each_end_like_scipy_trim_mean():
    assert iqm(np.arange(1, 9)) == pytest.approx(4.5)  # drops 1, 2 and 7, 8
    assert iqm([0, 0, 0, 100]) == pytest.approx(0.0)  # drops one at each end
    assert iqm([1.0, 2.0, 9.0]) == pytest.approx(4.0)  # n=3: nothing to trim


def test_bootstrap_ci_is_reproducible_and_brackets_the_mean():
    x = np.array([10.0, 200.0, 480.0, 500.0, 500.0, 500.0, 350.0, 90.0])
    lo, hi = bootstrap_ci(x, np.mean)
    assert (lo, hi) == bootstrap_ci(x, np.mean)  # fixed seed
    assert x.min() <= lo < x.mean() < hi <= x.max()
    assert bootstrap_ci(np.full(5, 7.0), np.mean) == (7.0, 7.0)


def _fake_population(root, returns_by_lr: dict):
    entries = []
    for lr, returns in returns_by_lr.items():
        for seed, ret in enumerate(returns, start=1):
            d = root / f"m{len(entries):03d}-seed{seed}-lr{lr}"
            d.mkdir(parents=True)
            (d / "eval.json").write_text(json.dumps({"mean_return": ret}))
            entries.append({"dir": d.name, "seed": seed, "settings": {"lr": lr}})
    (root / "population.json").write_text(json.dumps({"kind": "ppo-population", "env_id": "CartPole-v1", "members": len(entries),
                                                      "seeds": [1, 2, 3, 4], "member_dirs": entries, "wall_seconds": 1.0,
                                                      "total_timesteps_per_member": 1000}))


def test_report_of_a_population_gives_per_setting_statistics(tmp_path, capsys):
    run = tmp_path / "R"
    _fake_population(run, {1e-3: [500.0, 480.0, 100.0, 500.0], 3e-4: [20.0, 30.0, 40.0, 50.0]})
    rows = summarize_settings(run, threshold=475)
    assert [r["settings"] for r in rows] == [{"lr": 1e-3}, {"lr": 3e-4}]
    assert rows[0]["mean"] == pytest.approx(395.0) and rows[0]["iqm"] == pytest.approx(490.0)
    assert rows[0]["solved"] == pytest.approx(0.75) and rows[1]["solved"] == 0.0
    assert cli.main(["report", str(run), "--threshold", "475"]) == 0
    text = (run / "report.md").read_text()
    assert "| lr=0.001 | 4 | 395.0 |" in text and "| 75% |" in text
    assert "| lr=0.0003 | 4 | 35.0 |" in text


def test_report_names_a_missing_member_directory(tmp_path, capsys):
    run = tmp_path / "R"
    _fake_population(run, {1e-3: [1.0, 2.0]})
    (run / "m001-seed2-lr0.001" / "eval.json").unlink()
    (run / "m001-seed2-lr0.001").rmdir()
    assert cli.main(["report", str(run)]) == 2
    assert "m001-seed2-lr0.001: member directory listed in population.json is missing" in capsys.readouterr().err
    assert not (run / "report.md").exists()
