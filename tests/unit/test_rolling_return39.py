"""Issue 39: charts/episodic_return_100, the rolling training return (SB3's rollout/ep_rew_mean): the mean
return of the episodes of the fewest most recent iterations holding >= 100 of them; blank until an episode
ended; continued exactly by a resume (rebuilt from metrics.csv); shown on the progress line; the report's
best/final training return where a run logged it."""

import csv
import io
import math

import pytest

from proxima import cli
from proxima.config import PPOConfig
from proxima.logger import CSV_COLUMNS, ROLLING_RETURN, RollingReturn, RunLogger
from proxima.report import build_report
from proxima.trainer import Trainer, TrainingInterrupted, train

#: 8 envs x 24 steps; CartPole's first episodes last ~23 steps: ~8 episodes an iteration, 100 by iteration ~12
STEPS = 192
ITERATIONS = 18
CLOCK = {"time", "charts/SPS"}


def _rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _recomputed(rows):
    """Per row, the window's mean recomputed the plain way: walk back from the row over the iterations
    that finished episodes until they hold 100; NaN before any."""
    out = []
    for i in range(len(rows)):
        total, weighted = 0, 0.0
        for r in reversed(rows[:i + 1]):
            if total >= 100:
                break
            n = int(r["episodes"])
            if n:
                total += n
                weighted += n * float(r["charts/episodic_return"])
        out.append(weighted / total if total else math.nan)
    return out


# ------------------------------------------------------------------------------------ the window's arithmetic
def test_the_window_is_the_fewest_recent_iterations_holding_100_episodes_weighted_by_their_counts():
    w = RollingReturn()
    assert math.isnan(w.mean) and w.episodes == 0  # blank until an episode ends
    assert math.isnan(w.add(0, math.nan))  # an iteration without episodes
    assert w.add(30, 1.0) == 1.0  # fewer than 100 in all: all of them
    assert w.add(50, 2.0) == pytest.approx((30 + 100) / 80)
    assert w.add(40, 3.0) == pytest.approx((30 + 100 + 120) / 120) and w.episodes == 120  # the 30 are needed for 100
    assert w.add(0, math.nan) == pytest.approx(250 / 120)  # no episode: the window stays
    # 30, 50, 40, 70: 50 + 40 + 70 = 160 and 40 + 70 = 110 hold 100 without the oldest ones; 70 alone does not
    assert w.add(70, 4.0) == pytest.approx((120 + 280) / 110) and w.episodes == 110
    assert w.add(100, 5.0) == 5.0 and w.episodes == 100  # one iteration of exactly 100
    assert w.add(250, 6.0) == 6.0 and w.episodes == 250  # an iteration's episodes are never split


def test_cells_no_run_logs_add_nothing_to_the_window():
    w = RollingReturn()
    w.add(4, 10.0)
    for count, mean in [(-3, 5.0), (2.5, 5.0), (3, math.inf), (3, math.nan), (math.nan, 5.0), ("x", 5.0)]:
        assert w.add(count, mean) == 10.0 and w.episodes == 4
    assert w.add_row({"episodes": "", "charts/episodic_return": ""}) == 10.0
    assert w.add_row({"episodes": "2", "charts/episodic_return": "oops"}) == 10.0
    assert w.add_row({"episodes": "4", "charts/episodic_return": "20.0"}) == 15.0



def test_returns_near_float64s_limit_give_their_finite_mean_and_never_raise():
    """A hand-edited metrics.csv: c * m or its sum overflows although the mean does not; the column
    must show that mean, and no arithmetic error may escape into the run's logging."""
    w = RollingReturn()
    assert w.add(100, 1e307) == 1e307  # 100 x 1e307 is inf
    w = RollingReturn()
    w.add(60, 1e307)
    assert w.add(60, -1e307) == 0.0  # inf + -inf: fsum's ValueError
    w = RollingReturn()
    w.add(1, 1e308)
    assert w.add(1, 1e308) == 1e308  # each product finite, their sum 2e308: fsum's OverflowError
    w = RollingReturn()
    w.add(30, 1.7976931348623157e308)
    assert w.add(70, -1.7976931348623157e308) == pytest.approx(-0.4 * 1.7976931348623157e308, rel=1e-15)


def test_stop_returns_window_is_the_rolling_window_over_sums_and_resumes_from_its_checkpoint_pairs():
    """--stop-return's window (trainer.ReturnTarget) is a RollingReturn fed return sums: the same iterations
    held, the same mean, and its (return sum, count) pairs (a checkpoint's return_window) rebuild it."""
    from proxima.trainer import ReturnTarget

    target, rolling = ReturnTarget(None, 100), RollingReturn(100)
    for count, mean in [(30, 1.0), (50, 2.0), (0, math.nan), (40, 3.0), (70, 4.0)]:
        target.add(count * mean if count else 0.0, count)
        rolling.add(count, mean)
    assert target.window == [(120.0, 40), (280.0, 70)] == rolling.sums()
    assert target.returns.mean == rolling.mean == 400 / 110
    assert ReturnTarget(3.6, 100).reached() is None and ReturnTarget(3.6, 100, target.window).reached() == 400 / 110
    # an old checkpoint's untrimmed [[sum, count], ...] lists: trimmed on the way in
    assert ReturnTarget(3.6, 100, [[30.0, 30], [120.0, 40], [280.0, 70]]).window == [(120.0, 40), (280.0, 70)]


def test_stop_return_waits_for_a_full_window_and_a_mean_equal_to_the_target_reaches_it():
    """--stop-return judges only a window holding --stop-episodes episodes (a first iteration of a few lucky
    episodes must not stop the run), and a mean exactly at the target reaches it."""
    from proxima.trainer import ReturnTarget

    target = ReturnTarget(1.0, 10)
    assert target.add(4 * 50.0, 4) is None and target.reached() is None  # 4 of 10 episodes, far above the target
    assert target.add(6 * 50.0, 6) == 50.0  # 10 of 10
    assert ReturnTarget(5.0, 100, [(500.0, 100)]).reached() == 5.0  # exactly 100 episodes, exactly the target
    assert ReturnTarget(5.0, 100, [(499.0, 99)]).reached() is None
    assert ReturnTarget(5.0, 100, [(499.0, 100)]).reached() is None  # 4.99 < 5


def test_stop_returns_window_of_sums_near_float64s_limit_gives_their_finite_mean():
    """add_sum keeps each iteration's mean (sum / count) for the overflow-safe mean: two iterations of 2
    episodes summing 1e308 each (2e308 in all overflows) average 5e307, not 1e308."""
    from proxima.trainer import ReturnTarget

    target = ReturnTarget(1e307, 4, [(1e308, 2), (1e308, 2)])
    assert target.returns.mean == pytest.approx(5e307, rel=1e-15)
    assert target.reached() == pytest.approx(5e307, rel=1e-15)
    assert ReturnTarget(6e307, 4, [(1e308, 2), (1e308, 2)]).reached() is None


@pytest.mark.parametrize("size", [0, -3])
def test_a_window_of_no_episodes_holds_the_newest_iteration_and_never_raises(size):
    """RollingReturn(size < 1) (a hand-edited checkpoint's stop_episodes, a Python caller) had its trim loop
    pop the only iteration, then read [0] of the empty window: IndexError on the first add."""
    from proxima.trainer import ReturnTarget

    w = RollingReturn(size)
    assert w.add(3, 2.0) == 2.0 and w.episodes == 3
    assert w.add(5, 4.0) == 4.0 and w.sums() == [(20.0, 5)]
    assert RollingReturn(size, [(6.0, 3), (20.0, 5)]).sums() == [(20.0, 5)]
    assert ReturnTarget(1.0, size).add(4.0, 2) == 2.0


# ------------------------------------------------------------------------------------ a real run and its resume
def _config(**overrides):
    values = dict(env_id="CartPole-v1", num_envs=8, num_steps=24, total_timesteps=ITERATIONS * STEPS, num_minibatches=1,
                  update_epochs=1, progress=False, checkpoint_every=4, eval_episodes=0, threads=1)
    values.update(overrides)
    return PPOConfig(**values)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("rolling") / "run"
    train(_config(), run_dir=run_dir, quiet=True, evaluate_at_end=False)
    return run_dir


def test_a_runs_column_is_the_mean_of_its_last_100_episodes_from_its_own_rows(uninterrupted):
    rows = _rows(uninterrupted)
    assert list(rows[0]) == CSV_COLUMNS and len(rows) == ITERATIONS
    logged = [float(r[ROLLING_RETURN]) for r in rows]
    assert logged == pytest.approx(_recomputed(rows), rel=1e-12)
    assert sum(int(r["episodes"]) for r in rows) > 130  # the window has dropped old iterations (below too)
    # the first row's is its own iteration's mean; the last is no longer the mean of every episode so far
    assert logged[0] == float(rows[0]["charts/episodic_return"])
    everything = sum(int(r["episodes"]) * float(r["charts/episodic_return"]) for r in rows) / sum(int(r["episodes"]) for r in rows)
    assert logged[-1] != pytest.approx(everything, rel=1e-9)


@pytest.mark.parametrize("stop_at", [15, 8])  # after the window first dropped an iteration (15), and before
def test_a_resumed_run_logs_the_column_an_uninterrupted_one_does(stop_at, uninterrupted, tmp_path):
    run_dir = tmp_path / "run"
    trainer = Trainer(_config(), run_dir=run_dir, quiet=True)
    try:
        with pytest.raises(TrainingInterrupted):
            trainer.run(stop_after=stop_at)
    finally:
        trainer.close()
    assert cli.main(["resume", str(run_dir), "--quiet"]) == 0
    rows, ref = _rows(run_dir), _rows(uninterrupted)
    if stop_at == 15:  # the resume's window is one that has dropped iterations: it must be rebuilt, not started afresh
        assert sum(int(r["episodes"]) for r in ref[:stop_at]) > 110
    assert [r["global_step"] for r in rows] == [r["global_step"] for r in ref]
    for row, want in zip(rows, ref):  # every digit: the window is rebuilt from the rows the resume kept
        assert {c: v for c, v in row.items() if c not in CLOCK} == {c: v for c, v in want.items() if c not in CLOCK}
    assert rows[-1][ROLLING_RETURN] != ""


def test_a_resume_rebuilds_the_window_from_rows_of_a_header_before_the_column(tmp_path):
    """A run logged before the column existed: its episodes and returns fill the window, so the
    resumed rows are what a run logging it all along would show."""
    old = [c for c in CSV_COLUMNS if c != ROLLING_RETURN]
    with open(tmp_path / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=old)
        w.writeheader()
        for i, (n, ret) in enumerate([(60, 10.0), (0, ""), (50, 20.0), (30, 99.0)]):
            w.writerow({"iteration": i + 1, "global_step": 64 * (i + 1), "episodes": n, "charts/episodic_return": ret})
    logger = RunLogger(tmp_path, 64 * 5, resume_step=64 * 3, progress=False)  # the fourth row goes
    assert math.isnan(logger.last_return)  # a logger made without rolling=True keeps no window
    logger.close()
    logger = RunLogger(tmp_path, 64 * 5, resume_step=64 * 3, progress=False, rolling=True)
    assert logger.last_return == pytest.approx((600 + 1000) / 110)
    logger.log(4, 256, {"episodes": 60, "charts/episodic_return": 30.0})
    logger.close()
    rows = _rows(tmp_path)
    assert list(rows[0]) == CSV_COLUMNS and [r[ROLLING_RETURN] for r in rows[:3]] == ["", "", ""]
    assert float(rows[3][ROLLING_RETURN]) == pytest.approx((1000 + 1800) / 110)  # 50 + 60 >= 100: the first 60 went
    # not the new iteration's alone (a window started afresh at the resume)
    assert float(rows[3][ROLLING_RETURN]) != pytest.approx(30.0)


# ------------------------------------------------------------------------------------ the progress line
def test_the_progress_line_shows_the_rolling_return_and_a_dash_before_any_episode(tmp_path, monkeypatch):
    stream = io.StringIO()  # no terminal: one whole line per update (LINE_SECONDS 0)
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setattr("proxima.logger.LINE_SECONDS", 0.0)
    logger = RunLogger(tmp_path, 300, progress=True, rolling=True)
    try:
        for i, (n, ret) in enumerate([(0, math.nan), (90, 10.0), (10, 110.0), (0, math.nan)]):
            logger.log(i + 1, 100 * (i + 1), {"episodes": n, "charts/episodic_return": ret, "charts/SPS": 100.0})
    finally:
        logger.close()
    lines = stream.getvalue().splitlines()
    assert [line.rsplit("| ", 1)[1] for line in lines] == ["return -", "return (90 ep) 10.0", "return (100 ep) 20.0", "return (100 ep) 20.0"], lines
    assert [r[ROLLING_RETURN] for r in _rows(tmp_path)] == ["", "10.0", "20.0", "20.0"]


# ------------------------------------------------------------------------------------ the report
def _run(tmp_path, name, returns, episodes, rolling=True):
    d = tmp_path / name
    d.mkdir()
    (d / "config.yaml").write_text("env_id: Fake-v0\nseed: 1\nnum_envs: 4\nnum_steps: 128\ntotal_timesteps: 2048\n")
    window = RollingReturn()
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i, (r, e) in enumerate(zip(returns, episodes)):
            w.writerow({"iteration": i + 1, "global_step": 512 * (i + 1), "time": 0.1 * (i + 1), "episodes": e,
                        "charts/episodic_return": r, ROLLING_RETURN: window.add(e, r) if rolling else ""})
    return d


def _cell(text, name, column=1):
    line = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
    return line.split(" | ")[column].rstrip(" |")


def test_the_report_takes_best_and_final_training_return_from_the_rolling_column(tmp_path):
    # a lucky iteration of 3 episodes at 213 was the report's "best"; the rolling mean weighs it by its 3
    d = _run(tmp_path, "R", [20.0, 213.0, 150.0, 181.0], [120, 3, 7, 1])
    text = build_report([d], out=tmp_path / "r.md", episodes=0).read_text()
    # (120 x 20 + 3 x 213 + 7 x 150 + 1 x 181) / 131 = 32.595..., the window's largest (its last)
    assert _cell(text, "best charts/episodic_return_100") == "32.60 at step 2,048 (last 131 episodes)"
    assert _cell(text, "final charts/episodic_return_100") == "32.60 (last 131 episodes)"
    assert "fewest most recent iterations that hold at least 100" in text
    assert "| best charts/episodic_return |" not in text


def test_a_report_of_an_old_run_beside_a_new_one_names_both_columns(tmp_path):
    new = _run(tmp_path, "new", [20.0, 213.0], [120, 3])
    old = _run(tmp_path, "old", [20.0, 213.0], [120, 3], rolling=False)  # logged before the column: as before
    text = build_report([new, old], out=tmp_path / "r.md", episodes=0).read_text()
    label = "best charts/episodic_return_100 or charts/episodic_return"
    assert _cell(text, label, 1) == "24.71 at step 1,024 (last 123 episodes)"  # (2400 + 639) / 123
    assert _cell(text, label, 2) == "213.00 at step 1,024 (3 episodes)"
