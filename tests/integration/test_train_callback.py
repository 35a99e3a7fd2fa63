"""train(callback=...): a Python caller sees every iteration's metrics as they are logged, and can
end the run early (an SB3 callback returning False) without losing it: a checkpoint, the trained
policy and a resume that trains on to the total."""
import csv
import math
import sys

import pytest
import torch

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
    assert all("eval/mean_return" in r for r in seen)  # every metrics.csv column, NaN where its cell is blank
    evaluated = [r["global_step"] for r in seen if not math.isnan(r["eval/mean_return"])]
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
    with pytest.raises(ConfigError, match=r"train\(callback=5\): not callable; expected f\(row\) or f\(row, trainer\)"):
        train(PPOConfig(**TINY), run_dir=tmp_path / "r", callback=5)
    assert not (tmp_path / "r").exists()


def no_args():
    pass


@pytest.mark.parametrize("callback, shown", [
    (no_args, r"no_args\): its signature \(\) cannot be called"),
    (lambda row, trainer, extra: None, r"<lambda>\): its signature \(row, trainer, extra\) cannot be called"),
    (lambda row, *, every: None, r"<lambda>\): its signature \(row, \*, every\) cannot be called"),
])
def test_a_callback_of_another_signature_is_refused_in_one_line_before_the_run_starts(tmp_path, callback, shown):
    with pytest.raises(ConfigError, match=r"^train\(callback=" + shown + r" with one positional argument \(the row\) nor two "
                                          r"\(the row and the trainer\); expected f\(row\) or f\(row, trainer\)") as caught:
        train(PPOConfig(**TINY), run_dir=tmp_path / "r", callback=callback)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "r").exists()  # refused before anything was built or written


def test_the_callback_runs_after_the_iterations_due_checkpoint_and_a_two_parameter_one_gets_the_trainer(tmp_path):
    from proxima.trainer import Trainer

    run_dir = tmp_path / "r"
    seen = []

    def newest(row):  # one parameter: as before, the row alone
        seen.append((row["global_step"], sorted(p.name for p in (run_dir / "checkpoints").glob("step_*.pt"))[-1:]))

    train(PPOConfig(**{**TINY, "checkpoint_every": 2, "keep_checkpoints": 10}), run_dir=run_dir, quiet=True,
          evaluate_at_end=False, callback=newest)
    # every second iteration's checkpoint (and the last) is on disk when the callback sees that iteration
    assert seen == [(64, []), (128, ["step_000000000128.pt"]), (192, ["step_000000000128.pt"]),
                    (256, ["step_000000000256.pt"]), (320, ["step_000000000256.pt"]), (384, ["step_000000000384.pt"])]

    got = []

    def with_trainer(row, trainer):  # an SB3 CheckpointCallback: reaches the model and the checkpoint just written
        assert isinstance(trainer, Trainer) and trainer.run_dir == tmp_path / "t"
        saved = torch.load(trainer.last_checkpoint, weights_only=True)["agent"]
        got.append((row["iteration"], trainer.global_step, trainer.last_checkpoint.name,
                    all(torch.equal(saved[k], v) for k, v in trainer.agent.state_dict().items())))

    train(PPOConfig(**{**TINY, "checkpoint_every": 1, "total_timesteps": 128}), run_dir=tmp_path / "t", quiet=True,
          evaluate_at_end=False, callback=with_trainer)
    assert got == [(1, 64, "step_000000000064.pt", True), (2, 128, "step_000000000128.pt", True)]


def test_an_exception_in_the_callback_writes_a_checkpoint_of_that_iteration_first(tmp_path):
    class Down(Exception):
        pass

    def fails_at(n):
        def callback(row):
            if row["iteration"] == n:
                raise Down("wandb is down")
        return callback

    config = PPOConfig(**{**TINY, "checkpoint_every": 50})  # no periodic checkpoint in the run's 6 iterations
    with pytest.raises(Down):
        train(config, run_dir=tmp_path / "r", quiet=True, callback=fails_at(4))
    assert [p.name for p in sorted((tmp_path / "r" / "checkpoints").glob("step_*.pt"))] == ["step_000000000256.pt"]
    _, policy = train(None, resume=tmp_path / "r", quiet=True, evaluate_at_end=False)
    assert policy.global_step == 384 and len(_rows(tmp_path / "r")) == 6  # nothing trained twice, nothing lost
    # in a new run's first iteration too: a run that can be resumed, not a directory that blocks the same call
    with pytest.raises(Down):
        train(config, run_dir=tmp_path / "first", quiet=True, callback=fails_at(1))
    _, policy = train(None, resume=tmp_path / "first", quiet=True, evaluate_at_end=False)
    assert policy.global_step == 384


def _stopped_with_an_evaluation_due(run_dir):
    """A run stopped (as by SIGTERM) in iteration 2, whose --eval-every evaluation was then due: the
    checkpoint records it as pending, and metrics.csv's row 2 has no eval value yet."""
    from proxima.trainer import Trainer, TrainingInterrupted

    config = PPOConfig(**{**TINY, "eval_every": 128, "eval_episodes": 1})
    trainer = Trainer(config, run_dir=run_dir, quiet=True)
    try:
        with pytest.raises(TrainingInterrupted):
            trainer.run(stop_after=2)
    finally:
        trainer.close()
    assert _rows(run_dir)[-1]["eval/mean_return"] == ""


def test_a_resume_calls_back_with_the_row_its_pending_evaluation_logs_again(tmp_path):
    run_dir = tmp_path / "r"
    _stopped_with_an_evaluation_due(run_dir)
    seen = []
    train(None, resume=run_dir, quiet=True, evaluate_at_end=False, callback=seen.append)
    assert [r["iteration"] for r in seen] == [2, 3, 4, 5, 6]
    assert seen[0]["global_step"] == 128
    logged = _rows(run_dir)
    assert seen[0]["eval/mean_return"] == pytest.approx(float(logged[1]["eval/mean_return"]))


def test_a_stop_asked_on_the_pending_evaluations_row_ends_the_resume_there_recorded(tmp_path, capsys):
    run_dir = tmp_path / "r"
    _stopped_with_an_evaluation_due(run_dir)
    capsys.readouterr()
    seen = []

    def over_threshold(row):  # an eval-threshold early stop: the pending evaluation is the one that crosses it
        seen.append(row["iteration"])
        return "eval/mean_return" not in row

    _, policy = train(None, resume=run_dir, quiet=False, evaluate_at_end=False, callback=over_threshold)
    assert seen == [2] and policy.global_step == 128 and len(_rows(run_dir)) == 2  # nothing trained past it
    assert "stopped at global step 128 (iteration 2 of 6): the callback asked to stop" in capsys.readouterr().err
    files = sorted((run_dir / "checkpoints").glob("step_*.pt"))
    assert [p.name for p in files] == ["step_000000000128.pt"]
    state = torch.load(files[-1], weights_only=True)
    assert state.get("stopped_by_callback") is True and "eval_pending" not in state
    _, resumed = train(None, resume=run_dir, quiet=True, evaluate_at_end=False)  # trains on, the evaluation not run again
    assert resumed.global_step == 384 and [r["iteration"] for r in _rows(run_dir)] == [str(i) for i in range(1, 7)]
    assert "stopped_by_callback" not in torch.load(sorted((run_dir / "checkpoints").glob("step_*.pt"))[-1], weights_only=True)


def test_the_report_says_a_run_the_callback_stopped_is_short_of_its_total(tmp_path, capsys):
    from tests.cli_helpers import run_main

    run_dir = tmp_path / "r"
    # iteration 3 writes its periodic checkpoint before the callback asks to stop: written again, recording the stop
    train(PPOConfig(**{**TINY, "eval_episodes": 1, "checkpoint_every": 3}), run_dir=run_dir, quiet=True,
          callback=lambda row: row["iteration"] < 3)
    assert (run_dir / "eval.json").is_file()  # the end-of-run evaluation ran, as for a finished run
    code, _, err = run_main(["report", str(run_dir)], capsys)
    assert code == 0, err
    assert (f"| steps | 192 of 384 steps so far (stopped by train()'s callback; `proxima.train(None, resume='{run_dir}')` "
            "trains on) |") in (run_dir / "report.md").read_text()
    train(None, resume=run_dir, quiet=True)
    code, _, err = run_main(["report", str(run_dir)], capsys)
    assert code == 0, err
    assert "| steps | 384 |" in (run_dir / "report.md").read_text()


def test_a_signal_after_the_callbacks_stop_does_not_call_the_run_complete(tmp_path):
    import os
    import signal

    from proxima.trainer import TrainingInterrupted

    def interrupted_as_it_stops(row):  # Ctrl-C lands once the stop's checkpoint is written
        if row["iteration"] == 2:
            os.kill(os.getpid(), signal.SIGINT)
            return False

    with pytest.raises(TrainingInterrupted) as caught:
        train(PPOConfig(**TINY), run_dir=tmp_path / "r", quiet=True, callback=interrupted_as_it_stops)
    assert caught.value.checkpoint.name == "step_000000000128.pt"
    assert "training is complete" not in str(caught.value)  # 2 of 6 iterations: a resume trains on
    _, policy = train(None, resume=tmp_path / "r", quiet=True, evaluate_at_end=False)
    assert policy.global_step == 384


def _draws(row):  # what a user's callback may do: sample, shuffle, jitter, with the global generators
    import random

    import numpy as np

    torch.rand(3)
    np.random.rand(3)
    random.random()


def _final(run_dir) -> tuple:
    """The run's checkpoints (parameters, optimizer, RNG states: every tensor) and metrics.csv, clock aside."""
    saved = {p.name: torch.load(p, weights_only=True) for p in sorted((run_dir / "checkpoints").glob("step_*.pt"))}
    rows = [{c: v for c, v in r.items() if c not in ("time", "charts/SPS")} for r in _rows(run_dir)]
    return saved, rows


def _assert_same_run(a, b) -> None:
    (saved, rows), (expected, expected_rows) = a, b
    assert sorted(saved) == sorted(expected) and rows == expected_rows
    for name, state in expected.items():
        for key, value in state["agent"].items():
            assert torch.equal(saved[name]["agent"][key], value), (name, key)
        _assert_same_rng(saved[name]["rng"], state["rng"], name)


def _assert_same_rng(rng, want, name) -> None:
    import numpy as np

    assert torch.equal(rng["torch"], want["torch"]), name
    assert torch.equal(rng["numpy"][1], want["numpy"][1]) and rng["numpy"][2] == want["numpy"][2], name
    assert np.array_equal(np.asarray(rng["python"][1]), np.asarray(want["python"][1])), name


def test_a_callback_drawing_from_the_global_generators_leaves_the_training_as_it_is_without_one(tmp_path):
    # a checkpoint every iteration: each one after the first is written after a callback has drawn
    config = PPOConfig(**{**TINY, "total_timesteps": 192, "checkpoint_every": 1, "keep_checkpoints": 5})
    train(config, run_dir=tmp_path / "none", quiet=True, evaluate_at_end=False)
    expected = _final(tmp_path / "none")
    train(config, run_dir=tmp_path / "drawn", quiet=True, evaluate_at_end=False, callback=_draws)
    _assert_same_run(_final(tmp_path / "drawn"), expected)

    class Down(Exception):
        pass

    def draws_then_raises(row):  # the checkpoint its raise writes holds the RNG states the resume goes on from
        _draws(row)
        if row["iteration"] == 2:
            raise Down

    once = PPOConfig(**{**TINY, "total_timesteps": 192, "checkpoint_every": 50, "keep_checkpoints": 5})
    with pytest.raises(Down):
        train(once, run_dir=tmp_path / "raised", quiet=True, evaluate_at_end=False, callback=draws_then_raises)
    saved, _ = _final(tmp_path / "raised")
    _assert_same_rng(saved["step_000000000128.pt"]["rng"], expected[0]["step_000000000128.pt"]["rng"], "the raise's")
    train(None, resume=tmp_path / "raised", quiet=True, evaluate_at_end=False)
    last = "step_000000000192.pt"
    saved, rows = _final(tmp_path / "raised")
    for key, value in expected[0][last]["agent"].items():
        assert torch.equal(saved[last]["agent"][key], value), key
    assert rows == expected[1]


def test_a_stop_asked_on_the_last_iteration_is_no_stop_and_a_quiet_stop_prints_nothing(tmp_path, capsys):
    config = PPOConfig(**{**TINY, "total_timesteps": 128})
    _, policy = train(config, run_dir=tmp_path / "r", evaluate_at_end=False, callback=lambda row: row["iteration"] < 2)
    assert policy.global_step == 128
    assert "the callback asked to stop" not in capsys.readouterr().err  # the run ended at its total anyway
    assert "stopped_by_callback" not in torch.load(tmp_path / "r" / "checkpoints" / "step_000000000128.pt", weights_only=True)
    _, policy = train(config, run_dir=tmp_path / "q", quiet=True, evaluate_at_end=False, callback=lambda row: False)
    assert policy.global_step == 64
    assert capsys.readouterr().err == ""


def _checkpoints(run_dir) -> list:
    return [p.name for p in sorted((run_dir / "checkpoints").glob("step_*.pt"))]


@pytest.mark.parametrize("leaving", [SystemExit, KeyboardInterrupt])
def test_sys_exit_or_keyboardinterrupt_in_the_callback_comes_back_after_a_checkpoint_of_that_iteration(tmp_path, leaving):
    def leaves_at_the_second(row):
        if row["iteration"] == 2:
            if leaving is SystemExit:
                sys.exit(3)  # a script's callback ending the program
            raise KeyboardInterrupt("mine")

    config = PPOConfig(**{**TINY, "total_timesteps": 192, "checkpoint_every": 50})  # no periodic checkpoint
    with pytest.raises(leaving) as caught:
        train(config, run_dir=tmp_path / "r", quiet=True, evaluate_at_end=False, callback=leaves_at_the_second)
    assert type(caught.value) is leaving and caught.value.args == ((3,) if leaving is SystemExit else ("mine",))
    assert _checkpoints(tmp_path / "r") == ["step_000000000128.pt"]  # the 2 trained iterations kept
    _, policy = train(None, resume=tmp_path / "r", quiet=True, evaluate_at_end=False)
    assert policy.global_step == 192


def test_a_second_ctrl_c_in_the_callback_stops_at_once_without_that_iterations_checkpoint(tmp_path, capsys):
    import os
    import signal

    def interrupted_twice(row):  # SignalGuard's KeyboardInterrupt: it promised no checkpoint follows
        if row["iteration"] == 2:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

    config = PPOConfig(**{**TINY, "total_timesteps": 192, "checkpoint_every": 50})
    with pytest.raises(KeyboardInterrupt) as caught:
        train(config, run_dir=tmp_path / "r", evaluate_at_end=False, callback=interrupted_twice)
    from proxima import TrainingInterrupted

    assert not isinstance(caught.value, TrainingInterrupted)  # the immediate stop, not the first's checkpointed one
    assert "second interrupt, stopping now without this iteration's checkpoint" in capsys.readouterr().err
    assert _checkpoints(tmp_path / "r") == []


def test_an_answer_with_no_truth_value_is_a_one_line_type_error_after_the_checkpoint(tmp_path, monkeypatch):
    import numpy as np

    from proxima import run_setup

    def no_diagnosis(e, *args):  # the caller's answer, not the env, is at fault
        raise AssertionError(f"the env was diagnosed for {e!r}")

    monkeypatch.setattr(run_setup, "diagnose_failure", no_diagnosis)

    def scores(row):
        return np.array([1.0, 2.0]) if row["iteration"] == 2 else None

    config = PPOConfig(**{**TINY, "total_timesteps": 192, "checkpoint_every": 50})
    with pytest.raises(TypeError) as caught:
        train(config, run_dir=tmp_path / "r", quiet=True, evaluate_at_end=False, callback=scores)
    assert str(caught.value) == (
        "train(callback=test_an_answer_with_no_truth_value_is_a_one_line_type_error_after_the_checkpoint.<locals>.scores): "
        "returned a value of type ndarray, whose truth value is ambiguous; return False to stop, None or True to go on")
    assert _checkpoints(tmp_path / "r") == ["step_000000000128.pt"]


def test_a_second_parameter_with_a_default_keeps_it_rather_than_get_the_trainer(tmp_path):
    from proxima.trainer import callback_arity

    got = []

    def verbose_logger(row, verbose=False):
        got.append(verbose)

    train(PPOConfig(**{**TINY, "total_timesteps": 64}), run_dir=tmp_path / "r", quiet=True, evaluate_at_end=False,
          callback=verbose_logger)
    assert got == [False]
    assert callback_arity(lambda row, n=10: None) == 1
    assert callback_arity(lambda row, trainer, n=10: None) == 2  # the trainer still reaches a second parameter without one
