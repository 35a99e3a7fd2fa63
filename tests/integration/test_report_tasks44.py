"""``proxima report A B --normalize --out F.md``: populations of different env ids (tasks) aggregated per
setting as rliable does: each member's final return normalized on its env's range, then IQM, mean, median
and optimality gap with stratified-bootstrap 95% CIs, and a performance profile. Populations built by hand
(eval.json files): nothing is trained or evaluated."""

from __future__ import annotations

import json

import numpy as np
import pytest

from proxima import aggregate as ag
from tests.cli_helpers import error_line, run_main
from tests.integration import test_review34_compare as cmp


def _tasks(tmp_path, cartpole=None, acrobot=None):
    """Two seeds-only populations: CartPole-v1 (returns 500, 250, 100) and Acrobot-v1 (-100, -400, -250)."""
    a = cmp._population(tmp_path / "A", cartpole or {None: [500.0, 250.0, 100.0]}, env_id="CartPole-v1")
    b = cmp._population(tmp_path / "B", acrobot or {None: [-100.0, -400.0, -250.0]}, env_id="Acrobot-v1")
    return a, b


#: the ranges the hand-scored tests use: CartPole-v1 0..500, Acrobot-v1 -500..0
HAND = ["--score-range", "CartPole-v1=0:500", "--score-range", "Acrobot-v1=-500:0"]


def _row(text: str, first: str) -> list:
    """The cells of the first table row of ``text`` whose first cell is ``first`` (the aggregate table's)."""
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_two_tasks_are_aggregated_with_stratified_intervals(tmp_path, capsys):
    a, b = _tasks(tmp_path)
    out, js = tmp_path / "agg.md", tmp_path / "agg.json"
    code, stdout, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), "--json", str(js), *HAND], capsys)
    assert code == 0, err
    text = out.read_text()
    tasks = [np.array([1.0, 0.5, 0.2]), np.array([0.8, 0.2, 0.5])]  # scored by hand on 0..500 and -500..0
    lo, hi = ag.stratified_ci(tasks, ag.aggregate_iqm)
    # IQM 0.5, mean = median = 3.2/6, gap 2.8/6 (tests/unit/test_aggregate44.py); 3 runs a task: intervals flagged
    row = _row(text, "(seeds only)")
    assert row[:4] == ["(seeds only)", "2", "3", "0.500"] and row[4] == f"[{lo:.3f}, {hi:.3f}] \u2020"
    assert row[5] == row[7] == "0.533" and row[9] == "0.467"
    assert "| CartPole-v1 | A | 0 | 500 | --score-range |" in text and "| Acrobot-v1 | B | -500 | 0 | --score-range |" in text
    assert "Scored on: CartPole-v1 0 to 500 (--score-range); Acrobot-v1 -500 to 0 (--score-range)." in text
    profile = _row(text.split("### Performance profile")[1], "(seeds only)")
    assert [c.split()[0] for c in profile[1:]] == ["0.67", "0.33", "0.33", "0.00"]
    assert "stratified percentile bootstrap, each task's runs resampled with replacement within that task, 10000" in text
    doc = json.loads(js.read_text())
    assert doc["kind"] == "tasks" and [t["score_range"] for t in doc["tasks"]] == [[0.0, 500.0], [-500.0, 0.0]]
    [r] = doc["rows"]
    assert r["iqm"] == pytest.approx(0.5) and r["iqm_ci"] == [lo, hi] and r["optimality_gap"] == pytest.approx(2.8 / 6)
    assert r["runs"] == {"CartPole-v1": 3, "Acrobot-v1": 3}
    assert [p["fraction"] for p in r["profile"]] == pytest.approx([4 / 6, 2 / 6, 2 / 6, 0.0])


def test_each_setting_is_aggregated_over_the_tasks(tmp_path, capsys):
    a, b = _tasks(tmp_path, {0.1: [0.0, 50.0], 0.2: [500.0, 450.0]}, {0.1: [-500.0, -450.0], 0.2: [0.0, -50.0]})
    out = tmp_path / "agg.md"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), *HAND], capsys)
    assert code == 0, err
    text = out.read_text()
    # lr=0.1 scores 0, 0.1, 0, 0.1: IQM 0.05, gap 0.95; lr=0.2 scores 1, 0.9, 1, 0.9: IQM 0.95, gap 0.05
    assert _row(text, "lr=0.1")[3] == "0.050" and _row(text, "lr=0.1")[9] == "0.950"
    assert _row(text, "lr=0.2")[3] == "0.950" and _row(text, "lr=0.2")[9] == "0.050"


def test_a_user_range_scores_an_env_without_a_built_in_one(tmp_path, capsys):
    a = cmp._population(tmp_path / "A", {None: [475.0, 475.0]}, env_id="CartPole-v1")
    f = cmp._population(tmp_path / "F", {None: [10.0, 30.0]}, env_id="Fake-v0")
    out = tmp_path / "agg.md"
    code, _, err = run_main(["report", str(a), str(f), "--normalize", "--out", str(out)], capsys)
    assert error_line(code, err).endswith(
        "--normalize: no score range for env Fake-v0 (F): give --score-range Fake-v0=LOW:HIGH, LOW a random policy's mean "
        "return (score 0) and HIGH a reference return (score 1); built in only for CartPole-v1, Acrobot-v1, "
        "MountainCar-v0, the envs with a Gymnasium reward_threshold")
    assert not out.exists()
    code, _, err = run_main(["report", str(a), str(f), "--normalize", "--score-range", "Fake-v0=10:50", "--out", str(out)], capsys)
    assert code == 0, err
    # scores 1, 1 and 0, 0.5: the mean of task means (1 + 0.25) / 2
    assert _row(out.read_text(), "(seeds only)")[5] == "0.625"
    assert "| Fake-v0 | F | 10 | 50 | --score-range |" in out.read_text()


@pytest.mark.parametrize("extra, needle", [
    (["--score-range", "Fake-v0"], "--score-range Fake-v0: give ENV=LOW:HIGH"),
    (["--score-range", "Fake-v0=5:5"], "--score-range Fake-v0=5:5: LOW and HIGH must be finite returns with LOW below HIGH"),
    (["--score-range", "Pong-v5=0:21"], "--score-range Pong-v5=...: no population here is of env Pong-v5"),
    (["--threshold", "475"], "--threshold 475: a return of one env, not of several tasks"),
])
def test_bad_ranges_and_a_threshold_are_refused(tmp_path, capsys, extra, needle):
    a, b = _tasks(tmp_path)
    out = tmp_path / "agg.md"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), *extra], capsys)
    assert needle in error_line(code, err) and not out.exists()


def test_populations_that_are_no_one_aggregate_are_refused(tmp_path, capsys):
    a, b = _tasks(tmp_path, acrobot={0.1: [-100.0, -200.0]})
    out = tmp_path / "agg.md"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out)], capsys)
    assert "these populations do not sweep the same settings: (seeds only) in A, not in B" in error_line(code, err)
    twin = cmp._population(tmp_path / "C", {None: [1.0, 2.0]}, env_id="CartPole-v1")
    code, _, err = run_main(["report", str(a), str(twin), "--normalize", "--out", str(out)], capsys)
    assert "--normalize takes one population per env id: A and C are both of CartPole-v1" in error_line(code, err)
    assert not out.exists()


def test_without_normalize_different_envs_are_still_refused(tmp_path, capsys):
    a, b = _tasks(tmp_path)
    code, _, err = run_main(["report", str(a), str(b), "--out", str(tmp_path / "cmp.md")], capsys)
    assert "these populations do not measure the same: env id CartPole-v1 (A) vs Acrobot-v1 (B)" in error_line(code, err)
    code, _, err = run_main(["report", str(a), str(b), "--score-range", "CartPole-v1=0:500", "--out", str(tmp_path / "cmp.md")],
                            capsys)
    assert "--score-range ENV=LOW:HIGH applies with --normalize" in error_line(code, err)


def test_a_task_whose_every_member_is_left_out_is_not_aggregated(tmp_path, capsys):
    a, b = _tasks(tmp_path)
    for d in b.iterdir():
        if d.is_dir():
            (d / "eval.json").write_text(json.dumps({"mean_return": float("nan"), "episodes": 20, "global_step": cmp.STEP}))
    out = tmp_path / "agg.md"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out)], capsys)
    assert code == 0, err
    text = out.read_text()
    assert _row(text, "(seeds only)")[3:] == ["\u2014"] * 8
    assert "- (seeds only): not aggregated: no final return on Acrobot-v1" in text
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), "--json", str(tmp_path / "a.json")],
                            capsys)
    [r] = json.loads((tmp_path / "a.json").read_text())["rows"]
    assert r["not_aggregated"] == ["Acrobot-v1"] and r["profile"] == [] and r["few"] is None
    assert [r[k] for k in ("iqm", "iqm_ci", "mean", "mean_ci", "median", "median_ci", "optimality_gap",
                           "optimality_gap_ci")] == [None] * 8


def test_the_built_in_ranges_score_a_random_policy_0_and_the_reward_threshold_1_unclipped(tmp_path, capsys):
    # CartPole-v1 22.65..475: 475, 22.65, 927.35 -> 1, 0, 2; Acrobot-v1 -498.59..-100: -100, -498.59, -299.295 -> 1, 0, 0.5
    a, b = _tasks(tmp_path, {None: [475.0, 22.65, 927.35]}, {None: [-100.0, -498.59, -299.295]})
    out, js = tmp_path / "agg.md", tmp_path / "agg.json"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), "--json", str(js)], capsys)
    assert code == 0, err
    text = out.read_text()
    # pooled 0 0 0.5 1 1 2: IQM (0 + 0.5 + 1 + 1) / 4; task means 1 and 0.5 (clipped at 1: 2/3 and 0.5, mean 0.583);
    # gap 1 - min(x, 1): 0 1 0 and 0 1 0.5 -> 2.5 / 6; above 1: the 2 alone
    row = _row(text, "(seeds only)")
    assert (row[3], row[5], row[7], row[9]) == ("0.625", "0.750", "0.750", "0.417")
    profile = _row(text.split("### Performance profile")[1], "(seeds only)")
    assert [c.split()[0] for c in profile[1:]] == ["0.67", "0.50", "0.50", "0.17"]
    assert ("Scored on: CartPole-v1 22.65 to 475 (built in: a random policy's mean / Gymnasium's reward_threshold); "
            "Acrobot-v1 -498.59 to -100 (built in: a random policy's mean / Gymnasium's reward_threshold). Scores are not "
            "clipped (above 1: above the reference); only the gap counts a score above 1 as 1.") in text
    assert ("| CartPole-v1 | A | 22.65 | 475 | built in: low a uniformly random policy's mean return, high Gymnasium's "
            "reward_threshold |") in text
    doc = json.loads(js.read_text())
    assert [(t["score_range"], t["range_source"]) for t in doc["tasks"]] == [([22.65, 475.0], "built in"),
                                                                             ([-498.59, -100.0], "built in")]
    assert doc["rows"][0]["scores"]["CartPole-v1"] == pytest.approx([1.0, 0.0, 2.0])


def _uneven(tmp_path):
    """CartPole-v1 of 5 runs (500, 400, 100, 50, 0) and Acrobot-v1 of 3, its m001 (-400) left out (a NaN eval)."""
    a, b = _tasks(tmp_path, {None: [500.0, 400.0, 100.0, 50.0, 0.0]})
    (b / "m001-seed2" / "eval.json").write_text(json.dumps({"mean_return": float("nan"), "episodes": 20, "global_step": cmp.STEP}))
    return a, b


def test_tasks_of_uneven_runs_read_as_such_with_each_statistics_own_interval(tmp_path, capsys):
    a, b = _uneven(tmp_path)
    out, js = tmp_path / "agg.md", tmp_path / "agg.json"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), "--json", str(js), *HAND], capsys)
    assert code == 0, err
    text = out.read_text()
    tasks = [np.array([1.0, 0.8, 0.2, 0.1, 0.0]), np.array([0.8, 0.5])]
    # pooled 0 .1 .2 .5 .8 .8 1, one dropped each end: 2.4 / 5; task means 0.42, 0.65; gap (2.9 + 0.7) / 7
    row = _row(text, "(seeds only)")
    assert row[:4] == ["(seeds only)", "2", "5 / 2 (of 5 / 3)", "0.480"]
    assert (row[5], row[7], row[9]) == ("0.535", "0.535", "0.514")
    doc = json.loads(js.read_text())
    [r] = doc["rows"]
    for k, cell in (("iqm", 4), ("mean", 6), ("median", 8), ("optimality_gap", 10)):
        lo, hi = ag.stratified_ci(tasks, ag.AGGREGATES[k])
        assert row[cell] == f"[{lo:.3f}, {hi:.3f}] \u2020" and r[f"{k}_ci"] == [lo, hi], k
    assert r["few"] is True and r["not_aggregated"] is None
    assert r["runs"] == {"CartPole-v1": 5, "Acrobot-v1": 2} and r["members"] == {"CartPole-v1": 5, "Acrobot-v1": 3}
    assert ("- (seeds only): the tasks have different numbers of runs (5 / 2 (of 5 / 3)): the pooled IQM, optimality gap "
            "and profile weigh a task by its runs; the mean and median weigh each alike.") in text
    assert f"- \u2020 a task has fewer than 5 runs: {'n < 5: percentile-bootstrap intervals cover well under 95%'}" in text
    # per task: CartPole-v1's IQM return (50 + 100 + 400) / 3 scores 0.367, its mean 210 scores 0.420; Acrobot-v1's
    # two runs -100, -250: IQM = mean -175, 0.650 (a range read high to low would give 0.350)
    assert "| CartPole-v1 | (seeds only) | 5 | 183.3 | 0.367 | 0.420 |" in text
    assert "| Acrobot-v1 | (seeds only) | 2 of 3 | -175.0 | 0.650 | 0.650 |" in text


@pytest.mark.parametrize("extra, needle", [
    (["--score-range", "CartPole-v1=nan:1"], "--score-range CartPole-v1=nan:1: LOW and HIGH must be finite returns with LOW "
     "below HIGH"),
    (["--score-range", "CartPole-v1=0:inf"], "--score-range CartPole-v1=0:inf: LOW and HIGH must be finite returns"),
    (["--score-range", "CartPole-v1=500:0"], "--score-range CartPole-v1=500:0: LOW and HIGH must be finite returns with LOW "
     "below HIGH"),
    (["--score-range", "CartPole-v1=0:500", "--score-range", "CartPole-v1=0:400"],
     "--score-range: env CartPole-v1 is given two ranges (0:500 and 0:400); give one"),
    (["--score-range", "=10:50"], "--score-range =10:50: no env id before '='; give ENV=LOW:HIGH"),
    (["--json", "agg.txt"], "agg.txt: not a .json file"),
    (["--device", "tpu"], "--device 'tpu': not a torch device (cpu, cuda, cuda:1, auto)"),
])
def test_bad_values_under_normalize_are_refused_with_one_line(tmp_path, capsys, monkeypatch, extra, needle):
    monkeypatch.chdir(tmp_path)
    a, b = _tasks(tmp_path)
    for ev in b.glob("*/eval.json"):  # --device is checked where a member would be evaluated
        ev.unlink()
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", "agg.md", *extra], capsys)
    assert needle in error_line(code, err) and not (tmp_path / "agg.md").exists()


def test_paths_and_returns_that_are_no_tasks_report_are_refused(tmp_path, capsys):
    a, b = _tasks(tmp_path)
    code, _, err = run_main(["report", str(a), str(b), "--normalize"], capsys)
    assert error_line(code, err).endswith("--normalize: give --out FILE.md for the report over the tasks")
    out = tmp_path / "agg.md"
    code, _, err = run_main(["report", str(a), str(a / "m000-seed1"), "--normalize", "--out", str(out)], capsys)
    assert f"{a / 'm000-seed1'}: a single run; --normalize aggregates populations" in error_line(code, err)
    code, _, err = run_main(["report", str(a), str(tmp_path / "nowhere"), "--normalize", "--out", str(out)], capsys)
    assert "nowhere" in error_line(code, err)
    for ev in b.glob("*/eval.json"):  # B's final returns are its last training returns, A's its eval returns
        ev.unlink()
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), "--episodes", "0"], capsys)
    assert ("these populations do not measure the same: final return deterministic eval return (A) vs last (stochastic) "
            "training return (B); give every population eval.json files") in error_line(code, err)
    assert not out.exists()


def test_settings_only_the_second_population_sweeps_are_refused(tmp_path, capsys):
    a, b = _tasks(tmp_path, {0.1: [500.0, 250.0]}, {0.1: [-100.0, -200.0], 0.2: [-300.0, -400.0]})
    out = tmp_path / "agg.md"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out)], capsys)
    assert "these populations do not sweep the same settings: lr=0.2 in B, not in A" in error_line(code, err)
    assert not out.exists()


def test_episodes_evaluates_the_members_without_eval_json(tmp_path, capsys, monkeypatch):
    import proxima.report

    calls = []

    def fake(member_dir, episodes, device="cpu"):
        calls.append((member_dir.name, episodes))
        return {"mean_return": -100.0, "std_return": 0.0, "episodes": episodes, "deterministic": True,
                "global_step": cmp.STEP, "source": "evaluated now"}

    monkeypatch.setattr(proxima.report, "evaluate_latest", fake)
    a, b = _tasks(tmp_path)
    for ev in b.glob("*/eval.json"):
        ev.unlink()
    out = tmp_path / "agg.md"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), "--episodes", "20", *HAND], capsys)
    assert code == 0, err
    assert sorted(calls) == [("m000-seed1", 20), ("m001-seed2", 20), ("m002-seed3", 20)]
    assert "| Acrobot-v1 | (seeds only) | 3 | -100.0 | 0.800 | 0.800 |" in out.read_text()
