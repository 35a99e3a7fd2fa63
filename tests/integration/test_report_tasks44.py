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


def _row(text: str, first: str) -> list:
    """The cells of the first table row of ``text`` whose first cell is ``first`` (the aggregate table's)."""
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_two_tasks_are_aggregated_with_stratified_intervals(tmp_path, capsys):
    a, b = _tasks(tmp_path)
    out, js = tmp_path / "agg.md", tmp_path / "agg.json"
    code, stdout, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), "--json", str(js)], capsys)
    assert code == 0, err
    text = out.read_text()
    tasks = [np.array([1.0, 0.5, 0.2]), np.array([0.8, 0.2, 0.5])]  # scored by hand on 0..500 and -500..0
    lo, hi = ag.stratified_ci(tasks, ag.aggregate_iqm)
    # IQM 0.5, mean = median = 3.2/6, gap 2.8/6 (tests/unit/test_aggregate44.py); 3 runs a task: intervals flagged
    row = _row(text, "(seeds only)")
    assert row[:4] == ["(seeds only)", "2", "3", "0.500"] and row[4] == f"[{lo:.3f}, {hi:.3f}] \u2020"
    assert row[5] == row[7] == "0.533" and row[9] == "0.467"
    assert "| CartPole-v1 | A | 0 | 500 | built in: +1 per step" in text
    assert "| Acrobot-v1 | B | -500 | 0 | built in:" in text
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
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out)], capsys)
    assert code == 0, err
    text = out.read_text()
    # lr=0.1 scores 0, 0.1, 0, 0.1: IQM 0.05, gap 0.95; lr=0.2 scores 1, 0.9, 1, 0.9: IQM 0.95, gap 0.05
    assert _row(text, "lr=0.1")[3] == "0.050" and _row(text, "lr=0.1")[9] == "0.950"
    assert _row(text, "lr=0.2")[3] == "0.950" and _row(text, "lr=0.2")[9] == "0.050"


def test_a_user_range_scores_an_env_without_a_built_in_one(tmp_path, capsys):
    a = cmp._population(tmp_path / "A", {None: [500.0, 500.0]}, env_id="CartPole-v1")
    f = cmp._population(tmp_path / "F", {None: [10.0, 30.0]}, env_id="Fake-v0")
    out = tmp_path / "agg.md"
    code, _, err = run_main(["report", str(a), str(f), "--normalize", "--out", str(out)], capsys)
    assert "--normalize: no score range for env Fake-v0 (F): give --score-range Fake-v0=LOW:HIGH" in error_line(code, err)
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
