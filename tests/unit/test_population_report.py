"""Population statistics (proxima/population_report.py): IQM, bootstrap CIs, fraction solved, report.md."""

from __future__ import annotations

import json

import numpy as np
import pytest

from proxima import cli
from proxima.population_eval import format_summary
from proxima.population_report import bootstrap_ci, iqm, member_statistics, summarize_settings


def test_iqm_trims_a_quarter_at_each_end_like_scipy_trim_mean():
    assert iqm(np.arange(1, 9)) == pytest.approx(4.5)  # drops 1, 2 and 7, 8
    assert iqm([0, 0, 0, 100]) == pytest.approx(0.0)  # drops one at each end
    assert iqm([1.0, 2.0, 9.0]) == pytest.approx(4.0)  # n=3: nothing to trim


def test_iqm_of_five_to_seven_members_cuts_one_at_each_end_as_trim_mean():
    def trim_mean(x):  # scipy.stats.trim_mean(x, 0.25) by hand: floor(n/4) values cut at each end of the sorted x
        x = np.sort(np.asarray(x, dtype=np.float64))
        k = len(x) // 4
        return float(x[k:len(x) - k].mean())

    assert iqm([100.0, 2.0, 3.0, 4.0, 1.0]) == pytest.approx(3.0)  # n=5: drops 1 and 100, not a fractional weight
    assert iqm([0.0, 1.0, 2.0, 3.0, 4.0, 50.0]) == pytest.approx(2.5)  # n=6: drops 0 and 50
    assert iqm([-9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 90.0]) == pytest.approx(3.0)  # n=7: drops -9 and 90
    rng = np.random.default_rng(3)
    for n in (5, 6, 7):
        for _ in range(20):
            x = rng.exponential(100.0, size=n)
            assert iqm(x) == pytest.approx(trim_mean(x), rel=1e-12)


def test_bootstrap_ci_is_reproducible_and_brackets_the_mean():
    x = np.array([10.0, 200.0, 480.0, 500.0, 500.0, 500.0, 350.0, 90.0])
    lo, hi = bootstrap_ci(x, np.mean)
    assert (lo, hi) == bootstrap_ci(x, np.mean)  # fixed seed
    assert x.min() <= lo < x.mean() < hi <= x.max()
    assert bootstrap_ci(np.full(5, 7.0), np.mean) == (7.0, 7.0)
    assert bootstrap_ci(np.array([184.3]), np.mean) is None  # one member: no interval, not [184.3, 184.3]


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
    assert "| lr=0.001 | 4 | 395.0 |" in text and "| 75% (3 of 4) |" in text
    assert "| lr=0.0003 | 4 | 35.0 |" in text
    assert ("95% CIs: percentile bootstrap over members, 10000 resamples, numpy default_rng(0); none (\u2014) for fewer than "
            "2 members. IQM: trimmed mean, floor(n/4) of the n values dropped at each end (rliable's; equals the mean for "
            "n < 4).") in text
    assert "middle 50%" not in text
    # n = 4 < 5: the interval is given, marked, and the footnote says why
    lo, hi = bootstrap_ci(np.array([500.0, 480.0, 100.0, 500.0]), np.mean)
    assert f"| lr=0.001 | 4 | 395.0 | [{lo:.1f}, {hi:.1f}] \u2020 | 490.0 |" in text
    assert ("- \u2020 n < 5: percentile-bootstrap intervals cover well under 95% (about 50-80% for n = 2-4); run more "
            "seeds.") in text


def test_one_member_gets_no_interval_and_five_no_mark(tmp_path):
    run = tmp_path / "R"
    _fake_population(run, {1e-3: [184.3], 3e-4: [10.0, 20.0, 30.0, 40.0, 50.0]})
    assert cli.main(["report", str(run)]) == 0
    text = (run / "report.md").read_text()
    assert "| lr=0.001 | 1 | 184.3 | \u2014 | 184.3 | \u2014 | \u2014 |" in text
    lo, hi = bootstrap_ci(np.array([10.0, 20.0, 30.0, 40.0, 50.0]), np.mean)
    assert f"| lr=0.0003 | 5 | 30.0 | [{lo:.1f}, {hi:.1f}] | 30.0 |" in text and "\u2020" not in text


def test_non_finite_members_are_named_left_out_and_not_solved(tmp_path):
    run = tmp_path / "R"
    _fake_population(run, {1e-3: [float("nan"), 500.0, 500.0, 100.0, 200.0, 300.0], 3e-4: [float("inf"), 1, 2, 3, 4, 5]})
    rows = summarize_settings(run, threshold=475)
    assert (rows[0]["n"], rows[0]["members"], rows[0]["solved_count"]) == (5, 6, 2)
    assert rows[0]["solved"] == pytest.approx(2 / 6)  # not 2/5: the NaN member did not reach 475
    assert rows[0]["left_out"] == [["m000-seed1-lr0.001", "NaN"]] and rows[1]["left_out"] == [["m006-seed1-lr0.0003", "inf"]]
    assert rows[0]["mean"] == pytest.approx(320.0)
    assert cli.main(["report", str(run), "--threshold", "475"]) == 0
    text = (run / "report.md").read_text()
    assert "| lr=0.001 | 5 of 6 | 320.0 |" in text and "| 33% (2 of 6) |" in text
    assert "- lr=0.001: left out: m000-seed1-lr0.001 (NaN)." in text
    assert "- lr=0.0003: left out: m006-seed1-lr0.0003 (inf)." in text
    assert "- lr=0.001: the 1 member left out counts as not reaching 475.0." in text


def test_members_without_eval_json_are_left_out_not_mixed_with_training_returns(tmp_path):
    run = tmp_path / "R"
    _fake_population(run, {1e-3: [100.0, 200.0, 300.0, 400.0]})
    missing = run / "m003-seed4-lr0.001"
    (missing / "eval.json").unlink()
    (missing / "metrics.csv").write_text("iteration,global_step,charts/episodic_return\n1,64,9000.0\n")
    [row] = summarize_settings(run, threshold=250, episodes=0)
    assert row["kind"] == "eval" and row["returns"] == [100.0, 200.0, 300.0]  # not the training return 9000
    assert row["left_out"] == [[missing.name, "no eval.json"]] and row["solved_count"] == 1
    assert cli.main(["report", str(run), "--episodes", "0", "--threshold", "250"]) == 0
    text = (run / "report.md").read_text()
    assert "| lr=0.001 | 3 of 4 | 200.0 |" in text
    assert (f"- lr=0.001: eval for 3 of 4; 1 member without eval.json ({missing.name}), left out rather than mixed with "
            f"training returns: run `proxima report {run} --episodes N` to evaluate them.") in text
    for ev in run.glob("*/eval.json"):  # none has an evaluation: the training return of every member, said so
        ev.unlink()
    [row] = summarize_settings(run, episodes=0)
    assert row["kind"] == "training" and row["n"] == 1 and [r[1] for r in row["left_out"]] == ["no result"] * 3
    assert row["returns"] == [9000.0]


def test_report_names_a_missing_member_directory(tmp_path, capsys):
    run = tmp_path / "R"
    _fake_population(run, {1e-3: [1.0, 2.0]})
    (run / "m001-seed2-lr0.001" / "eval.json").unlink()
    (run / "m001-seed2-lr0.001").rmdir()
    assert cli.main(["report", str(run)]) == 2
    assert "m001-seed2-lr0.001: member directory listed in population.json is missing" in capsys.readouterr().err
    assert not (run / "report.md").exists()


def test_eval_summary_lines_share_the_report_statistics_and_say_how_the_ci_is_made():
    base = {"resamples": 10_000, "rng": "numpy default_rng(0)"}
    one = {"label": "lr=0.001", **member_statistics(["a"], [184.3]), "members": ["a"], **base}
    few = {"label": "lr=0.0003", **member_statistics(["b", "c", "d"], [1.0, float("inf"), 3.0]), "members": ["b", "c", "d"], **base}
    text = format_summary({"env_id": "CartPole-v1", "settings": [one, few]})
    lo, hi = bootstrap_ci(np.array([1.0, 3.0]), np.mean)
    assert text.splitlines() == [
        "CartPole-v1 lr=0.001 (1 member): mean 184.30 \u2014, IQM 184.30 \u2014 (95% percentile-bootstrap CIs over "
        "members, 10000 resamples, numpy default_rng(0))",
        f"CartPole-v1 lr=0.0003 (2 of 3 members): mean 2.00 [{lo:.2f}, {hi:.2f}] \u2020, IQM 2.00 [{lo:.2f}, {hi:.2f}] "
        "\u2020 (95% percentile-bootstrap CIs over members, 10000 resamples, numpy default_rng(0)); left out: c (inf)",
        "\u2020 n < 5: percentile-bootstrap intervals cover well under 95% (about 50-80% for n = 2-4); run more seeds"]


def test_a_members_eval_line_names_episodes_cut_at_max_steps():
    from proxima.population_eval import format_member

    row = {"dir": "m000-seed1", "mean_return": 74.78, "std_return": 13.63, "episodes": 10, "deterministic": True,
           "unfinished": 3, "max_steps": 100}
    assert format_member(row) == ("m000-seed1: 74.78 +- 13.63 over 10 episodes (deterministic); 3 of them cut at 100 steps "
                                  "(--max-steps), with their return so far")


def test_a_last_training_return_of_inf_leaves_the_member_out_named_not_its_return_before(tmp_path):
    run = tmp_path / "R"
    _fake_population(run, {1e-3: [0.0, 0.0, 0.0]})
    for ev in run.glob("*/eval.json"):  # no evaluation: the table is the last training return
        ev.unlink()
    returns = {"m000-seed1-lr0.001": ["10", "inf"], "m001-seed2-lr0.001": ["20", ""], "m002-seed3-lr0.001": ["30", "40"]}
    for name, cells in returns.items():  # m001's empty last cell: no episode finished then, its 20 stands
        (run / name / "metrics.csv").write_text("iteration,global_step,charts/episodic_return\n"
                                                 + "".join(f"{i},{64 * i},{c}\n" for i, c in enumerate(cells, 1)))
    [row] = summarize_settings(run)
    assert row["kind"] == "training" and row["returns"] == [20.0, 40.0]  # not m000's 10 from before its inf
    assert row["left_out"] == [["m000-seed1-lr0.001", "inf"]]
    assert cli.main(["report", str(run)]) == 0
    assert "- lr=0.001: left out: m000-seed1-lr0.001 (inf)." in (run / "report.md").read_text()


def test_a_diverged_members_rows_leave_episodes_blank_so_its_report_counts_only_real_ones(tmp_path):
    import csv
    import types

    from proxima.logger import RunLogger
    from proxima.plot import read_metrics
    from proxima.population_run import _blank_diverged, _log_members
    from proxima.report import summarize

    dirs = [tmp_path / f"m00{i}" for i in range(3)]
    for d in dirs:
        d.mkdir()
    loggers = [RunLogger(d, 192, progress=False) for d in dirs]
    pop = types.SimpleNamespace(scheduled_lrs=[1e-3] * 3, diverged_at=[None, None, None], iteration=0)
    # m001 diverges in iteration 2, m002 in iteration 1 (before any row of its own)
    diverged = {1: [None, {"iteration": 2}], 2: [{"iteration": 1}, {"iteration": 1}]}
    for it in (1, 2):
        pop.iteration = it
        pop.diverged_at = [None] + [diverged[p][it - 1] for p in (1, 2)]
        values = {k: [1.0, 1.0, 1.0] for k in ("ep_return_sum", "ep_length_sum", "policy_loss", "value_loss", "entropy",
                                                 "approx_kl", "clipfrac", "explained_variance")}
        values.update(ep_count=[3.0, 3.0, 3.0], nonfinite=[False, False, False])
        _blank_diverged(values, pop)
        _log_members(loggers, values, pop, sps=100.0, elapsed=0.1 * it, step=64 * it)
    for lg in loggers:
        lg.close()
    cells = [[r["episodes"] for r in csv.DictReader(open(d / "metrics.csv"))] for d in dirs]
    assert cells == [["3", "3"], ["3", ""], ["", ""]]  # a frozen member's rows: blank, not 0 episodes
    # `proxima report RUN/<member>`'s "episodes finished": the ones it finished, "—" (None) for none logged, not 0
    assert [summarize(read_metrics(d))["episodes"] for d in dirs] == [6, 3, None]
