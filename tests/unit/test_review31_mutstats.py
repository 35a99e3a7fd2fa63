"""Review 31 (statistics and progress): a member's eval.json of an older step is named as such, a
population's ``eval --json`` stays strict JSON with a non-finite member, and the edges that
surviving mutations showed untested (ties, a return equal to the threshold, a cut count, a run
stopped at --stop-return, a 2-process run's planned steps, members at different steps)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import TINY_POP, fake_run_dir, run_main, tiny_population
from proxima.population_eval import _cut_note, evaluate_population
from proxima.population_report import (EVALUATED_NOW, FEW_MEMBERS_NOTE, member_statistics, summarize_settings,
                                       training_progress)
from proxima.report import build_report, run_progress, summarize


def _population(root: Path, metrics_steps: list, evals: dict, total: int = 1024) -> Path:
    """A population of seeds only whose member i logged ``metrics_steps[i]`` and has eval.json ``evals[i]``."""
    entries = []
    for i, steps in enumerate(metrics_steps):
        d = root / f"m{i:03d}-seed{i + 1}"
        d.mkdir(parents=True)
        rows = "".join(f"{k + 1},{s},50.0\n" for k, s in enumerate(steps))
        (d / "metrics.csv").write_text("iteration,global_step,charts/episodic_return\n" + rows)
        if i in evals:
            (d / "eval.json").write_text(json.dumps(evals[i]))
        entries.append({"dir": d.name, "seed": i + 1, "settings": {}})
    (root / "population.json").write_text(json.dumps({
        "kind": "ppo-population", "env_id": "CartPole-v1", "members": len(entries), "seeds": list(range(1, len(entries) + 1)),
        "member_dirs": entries, "wall_seconds": 1.0, "total_timesteps_per_member": total}))
    return root


def test_a_members_eval_json_of_an_older_step_is_named_so_not_missing(tmp_path, capsys):
    run = _population(tmp_path / "R", [[512, 1024]] * 3 + [[512, 1024, 1536]],
                      {i: {"mean_return": 100.0 * (i + 1), "global_step": 1024} for i in range(4)})
    [row] = summarize_settings(run)
    why = "eval.json of step 1,024, not the member's last step 1,536"
    assert row["left_out"] == [["m003-seed4", why]] and row["n"] == 3
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert f"1 member whose eval.json is not of its last step (m003-seed4: {why})" in text, text
    assert "without eval.json" not in text


@pytest.fixture(scope="module")
def pop(tmp_path_factory) -> Path:
    """Two members trained 64 steps, each with a checkpoint and no eval.json (--eval-episodes 0)."""
    return tiny_population(tmp_path_factory, "mutstats", 64)


@pytest.fixture
def second_member_inf(monkeypatch):
    """evaluate() of the second member evaluated returns a mean return of inf."""
    import proxima.evaluate as ev

    real, calls = ev.evaluate, []

    def fake(policy, **kw):
        result = real(policy, **kw)
        calls.append(1)
        if len(calls) == 2:
            result["mean_return"] = float("inf")
        return result

    monkeypatch.setattr(ev, "evaluate", fake)


def test_eval_json_of_a_population_with_an_infinite_member_is_strict_json_with_null(pop, second_member_inf, capsys):
    code, out, err = run_main(["eval", str(pop), "--episodes", "1", "--json"], capsys)
    assert code == 0 and err == "", err
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"bare {c} in --json output"))
    assert [m["mean_return"] is None for m in doc["members"]] == [False, True]
    [s] = doc["settings"]
    assert s["left_out"] == [["m001-seed2", "inf"]] and s["mean_returns"][1] is None and s["n"] == 1


def test_a_setting_of_one_member_counted_gets_no_ci_note(pop, second_member_inf):
    [s] = evaluate_population(pop, episodes=1)["settings"]
    assert s["n"] == 1 and s["mean_ci"] is None and s["ci_note"] is None
    [s] = evaluate_population(pop, episodes=1)["settings"]  # both finite now (the patch hit call 2 only)
    assert s["n"] == 2 and s["ci_note"] == FEW_MEMBERS_NOTE


def test_report_episodes_1_evaluates_a_member_without_eval_json(pop):
    [row] = summarize_settings(pop, episodes=1)
    assert row["sources"] == [EVALUATED_NOW] and row["n"] == 2 and row["kind"] == "eval"


def test_a_return_equal_to_the_threshold_counts_as_solved():
    stats = member_statistics(["a", "b", "c"], [475.0, 474.9, 500.0], threshold=475.0)
    assert stats["solved_count"] == 2 and stats["solved"] == pytest.approx(2 / 3)


def test_the_cut_note_counts_k_of_n_members():
    assert _cut_note({"cut_members": 1, "n": 3}, 100) == (
        "; 1 of the 3 members counted had episodes cut at 100 steps (--max-steps), with their return so far")
    assert _cut_note({"cut_members": 3, "n": 3}, 100).startswith("; all 3 members counted had")


def test_of_tied_best_returns_the_first_row_is_the_best():
    steps = np.array([512.0, 1024.0, 1536.0, 2048.0])
    ret = np.array([20.0, 500.0, 310.0, 500.0])
    s = summarize({"global_step": steps, "charts/episodic_return": ret, "eval/mean_return": ret})
    assert s["best_step"] == 1024.0 and s["max_step"] == 1024.0
    assert s["eval_best_step"] == 1024.0 and s["eval_best_steps"] == [1024.0, 2048.0]
    low = summarize({"global_step": steps, "charts/episodic_return": np.array([9.0, 1.0, 5.0, 1.0])})
    assert low["min_step"] == 1024.0


def test_an_inf_in_the_last_row_of_iteration_and_time_shows_the_last_finite_value():
    s = summarize({"global_step": np.array([512.0, 1024.0, 1536.0]), "iteration": np.array([1.0, 2.0, np.inf]),
                   "time": np.array([0.5, 1.0, np.inf])})
    assert s["iterations"] == 2.0 and s["time"] == 1.0 and s["sps"] == pytest.approx(1536.0)


def test_members_at_different_steps_report_the_slowests_progress(tmp_path):
    run = _population(tmp_path / "R", [[512], [512, 1024]], {}, total=2048)
    doc = json.loads((run / "population.json").read_text())
    assert training_progress(run, doc).startswith("512 of 2,048 steps each so far (stopped before its first checkpoint)")


def test_a_two_process_run_that_trained_its_total_is_not_so_far(tmp_path, capsys):
    # 2 processes x 2 envs x 128 steps = 512 a step of training: 1000 total is 512 trained, all of it
    run = fake_run_dir(tmp_path, "run", steps=(512,), returns=(1.0,), total_timesteps=1000, num_envs=2, num_steps=128)
    (run / "meta.json").write_text(json.dumps({"world_size": 2}))
    assert run_progress(run, 512, {"total_timesteps": 1000, "num_envs": 2, "num_steps": 128}, {"world_size": 2}) == (None, 512)
    build_report([run], episodes=0)
    text = (run / "report.md").read_text()
    assert "| steps | 512 |" in text and "so far" not in text, text


def test_a_run_stopped_at_stop_return_without_eval_is_not_so_far(tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run), "--total-timesteps", "51200", "--stop-return", "1",
                             "--stop-episodes", "1", "--eval-episodes", "0", "--checkpoint-every", "0",
                             *TINY_POP], capsys)
    assert code == 0 and "--stop-return 1" in err, err
    assert not (run / "eval.json").exists()
    build_report([run], episodes=0)
    text = (run / "report.md").read_text()
    [line] = [ln for ln in text.splitlines() if ln.startswith("| steps |")]
    assert "so far" not in line and "51,200" not in line, line


def test_eval_json_of_one_run_with_an_infinite_mean_is_strict_json_with_null(pop, monkeypatch, capsys):
    """As a population's: a single run's `eval --json` wrote a bare Infinity, which strict parsers refuse."""
    import proxima.evaluate as ev

    real = ev.evaluate
    monkeypatch.setattr(ev, "evaluate", lambda policy, **kw: {**real(policy, **kw), "mean_return": float("inf")})
    code, out, err = run_main(["eval", str(pop / "m000-seed1"), "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"bare {c} in --json output"))
    assert doc["mean_return"] is None and doc["episodes"] == 1
