"""train(callback=...): a Python caller sees every iteration's metrics as they are logged, and can
end the run early (an SB3 callback returning False) without losing it: a checkpoint, the trained
policy and a resume that trains on to the total."""
import csv
import math

import pytest

from proxima import PPOConfig, load, train
from proxima.config import ConfigError

TINY = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, threads=1,
            progress=False, eval_episodes=0, total_timesteps=64 * 6)


def _rows(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _same(a, b) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-5, abs=1e-9)


def test_the_callback_gets_each_iterations_logged_row_and_eval_values(tmp_path):
    seen = []
    run_dir, _ = train(PPOConfig(**{**TINY, "eval_every": 128, "eval_episodes": 1}), run_dir=tmp_path / "r",
                       quiet=True, evaluate_at_end=False, callback=seen.append)
    logged = _rows(run_dir)
    assert [r["iteration"] for r in seen] == [1, 2, 3, 4, 5, 6]
    assert [r["global_step"] for r in seen] == [64, 128, 192, 256, 320, 384]
    for row, line in zip(seen, logged):  # what the callback saw is what metrics.csv holds
        assert int(line["global_step"]) == row["global_step"]
        for name in ("charts/episodic_return", "losses/value_loss", "losses/entropy", "charts/learning_rate"):
            assert _same(row[name], float(line[name])), (name, row[name], line[name])
    evaluated = [r["global_step"] for r in seen if "eval/mean_return" in r]
    assert evaluated == [128, 256, 384]
    assert float(logged[1]["eval/mean_return"]) == pytest.approx(seen[1]["eval/mean_return"])


def test_returning_false_stops_after_that_iteration_with_a_checkpoint_and_a_resume_trains_on(tmp_path, capsys):
    seen = []

    def until_third(row):
        seen.append(row["iteration"])
        return row["iteration"] < 3

    run_dir, policy = train(PPOConfig(**TINY), run_dir=tmp_path / "r", callback=until_third)
    assert seen == [1, 2, 3]
    assert [p.name for p in sorted((run_dir / "checkpoints").glob("step_*.pt"))] == ["step_000000000192.pt"]
    assert policy.global_step == 192 and load(run_dir).global_step == 192
    assert len(_rows(run_dir)) == 3
    err = capsys.readouterr().err
    assert "stopped at global step 192 (iteration 3 of 6): the callback asked to stop" in err
    assert f"train(None, resume='{run_dir}')" in err
    # the stop is no part of the run: a resume without the callback trains to the total
    _, resumed = train(None, resume=run_dir, quiet=True, evaluate_at_end=False)
    assert resumed.global_step == 384 and len(_rows(run_dir)) == 6


@pytest.mark.parametrize("answer, stops", [(None, False), (True, False), (1, False), (0, True), (False, True)])
def test_only_a_falsy_answer_other_than_none_stops(tmp_path, answer, stops):
    _, policy = train(PPOConfig(**{**TINY, "total_timesteps": 128}), run_dir=tmp_path / "r", quiet=True,
                      evaluate_at_end=False, callback=lambda row: answer)
    assert policy.global_step == (64 if stops else 128)


def test_the_callbacks_own_exception_comes_back_as_it_was_raised_and_the_run_stays_resumable(tmp_path, monkeypatch):
    from proxima import run_setup

    def no_diagnosis(e, *args):  # a failure's diagnosis builds and steps the env again: not for the caller's error
        raise AssertionError(f"the env was diagnosed for the callback's {e!r}")

    monkeypatch.setattr(run_setup, "diagnose_failure", no_diagnosis)

    class Mine(Exception):
        pass

    def fails_at_the_third(row):
        if row["iteration"] == 3:
            raise Mine("my logger is down")

    config = PPOConfig(**{**TINY, "checkpoint_every": 2})
    with pytest.raises(Mine, match="my logger is down") as caught:
        train(config, run_dir=tmp_path / "r", quiet=True, callback=fails_at_the_third)
    assert type(caught.value) is Mine
    # the directory is free again (its lock released) and continues from the iteration-2 checkpoint
    _, policy = train(None, resume=tmp_path / "r", quiet=True, evaluate_at_end=False)
    assert policy.global_step == 384


def test_a_callback_that_is_not_callable_is_refused_before_the_run_starts(tmp_path):
    with pytest.raises(ConfigError, match=r"train\(callback=5\): expected a function of one argument"):
        train(PPOConfig(**TINY), run_dir=tmp_path / "r", callback=5)
    assert not (tmp_path / "r").exists()
