"""Review 28 (exact resume): a stop in an iteration due an --eval-every evaluation leaves it pending
and the resume runs it first; an explicit older checkpoint sets the abandoned timeline's best.pt
aside; a resume that a --preset changes says so; damaged checkpoints say what to do; --vector on a
native run's resume is noted, not refused."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
import torch

from cli_helpers import error_line, run_main
from proxima import checkpoint as ckpt
from proxima.config import PPOConfig
from proxima.trainer import Trainer, TrainingInterrupted, train

STEPS = 64  # 4 envs x 16 steps per iteration
ITERATIONS = 5


def _config(**overrides) -> PPOConfig:
    values = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=ITERATIONS * STEPS, num_minibatches=2,
                  update_epochs=1, lr=0.005, progress=False, checkpoint_every=1, keep_checkpoints=100, eval_episodes=2,
                  eval_every=STEPS, threads=1)
    values.update(overrides)
    return PPOConfig(**values)


def _rows(run: Path) -> list:
    with open(run / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k not in ("time", "charts/SPS")} for r in csv.DictReader(f)]


def _tb_eval(run: Path) -> list:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    points = []
    for path in sorted(run.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for v in event.summary.value:
                if v.tag.startswith("eval/"):
                    points.append((v.tag, event.step, float(tensor_util.make_ndarray(v.tensor))))
    return points


def _state(path: Path) -> dict:
    state = torch.load(path, weights_only=True)
    for volatile in ("elapsed", "versions"):
        state.pop(volatile)
    state["config"].pop("run_dir")
    return state


def _same(a, b, where="state"):
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), (where, set(a) ^ set(b))
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


# ------------------------------------------------------------------ 1. the evaluation a stop left due
@pytest.mark.parametrize("k", [3, ITERATIONS])  # mid-run, and in the last iteration (the resume then trains nothing)
def test_a_stop_in_an_iteration_due_an_evaluation_leaves_it_pending_and_the_resume_runs_it_first(k, tmp_path, capsys):
    reference, run = tmp_path / "A", tmp_path / "B"
    train(_config(), run_dir=reference, quiet=True, evaluate_at_end=False)
    trainer = Trainer(_config(), run_dir=run)
    try:
        with pytest.raises(TrainingInterrupted):
            trainer.run(stop_after=k)  # a SIGINT during iteration k, before its evaluation
    finally:
        trainer.close()
    stopped_err = capsys.readouterr().err
    stopped = torch.load(ckpt.checkpoint_path(run, k * STEPS), weights_only=True)
    assert _rows(run)[-1]["eval/mean_return"] == ""

    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    assert code == 0, err

    assert _rows(run) == _rows(reference)  # eval/mean_return of iteration k included
    assert all(r["eval/mean_return"] != "" for r in _rows(run))
    assert _tb_eval(run) == _tb_eval(reference)
    _same(_state(ckpt.best_checkpoint_path(run)), _state(ckpt.best_checkpoint_path(reference)), "best.pt")
    names = [p.name for p in ckpt.list_checkpoints(reference)]
    assert [p.name for p in ckpt.list_checkpoints(run)] == names
    for name in names:  # best_eval in every checkpoint, k's rewritten without its pending entry
        _same(_state(run / "checkpoints" / name), _state(reference / "checkpoints" / name), name)
    assert stopped.get("eval_pending", {}).get("global_step") == k * STEPS
    assert f"evaluation at global step {k * STEPS} was abandoned for the stop; no eval value is logged for this " \
           "iteration until the run is resumed" in stopped_err, stopped_err


def test_a_stop_during_the_pending_evaluation_keeps_it_pending(tmp_path, monkeypatch, capsys):
    """SIGINT while the resume runs the evaluation the stop left due: exit 130, the checkpoint still records
    it, metrics.csv keeps the row (without eval values); the next resume runs it and ends as the reference."""
    import os
    import signal

    from proxima import evaluate as evaluate_mod

    reference, run = tmp_path / "A", tmp_path / "B"
    train(_config(), run_dir=reference, quiet=True, evaluate_at_end=False)
    trainer = Trainer(_config(), run_dir=run, quiet=True)
    try:
        with pytest.raises(TrainingInterrupted):
            trainer.run(stop_after=2)
    finally:
        trainer.close()
    real, acts = evaluate_mod.first_episodes, {"n": 0}

    def first_episodes(env, obs, act, *args, **kwargs):
        def act_then_stop(o):
            acts["n"] += 1
            if acts["n"] == 3:
                os.kill(os.getpid(), signal.SIGINT)  # the loop's SignalGuard only records it
            return act(o)

        return real(env, obs, act_then_stop, *args, **kwargs)

    monkeypatch.setattr(evaluate_mod, "first_episodes", first_episodes)
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    assert code == 130, err
    stopped = ckpt.checkpoint_path(run, 2 * STEPS)
    assert err.strip().splitlines()[-1].startswith(f"proxima: stopped by SIGINT; checkpoint: {stopped}; ")
    assert torch.load(stopped, weights_only=True)["eval_pending"]["global_step"] == 2 * STEPS
    assert [r["eval/mean_return"] != "" for r in _rows(run)] == [True, False]
    monkeypatch.undo()
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    assert code == 0, err
    assert _rows(run) == _rows(reference) and _tb_eval(run) == _tb_eval(reference)
    _same(_state(ckpt.best_checkpoint_path(run)), _state(ckpt.best_checkpoint_path(reference)), "best.pt")


def test_a_checkpoint_without_eval_pending_resumes_and_a_damaged_one_is_named(tmp_path, capsys):
    run = tmp_path / "run"
    trainer = Trainer(_config(total_timesteps=3 * STEPS), run_dir=run, quiet=True)
    try:
        with pytest.raises(TrainingInterrupted):
            trainer.run(stop_after=2)
    finally:
        trainer.close()
    path = ckpt.checkpoint_path(run, 2 * STEPS)
    state = torch.load(path, weights_only=True)
    state["eval_pending"] = {"global_step": 64, "row": {}}  # another step's: edited
    torch.save(state, path)
    code, _, err = run_main(["resume", str(path)], capsys)
    line = error_line(code, err, str(path), "eval_pending is", "the checkpoint is damaged or was edited")
    assert "Traceback" not in line
    del state["eval_pending"]  # as an older Proxima wrote it
    torch.save(state, path)
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    assert code == 0, err
    assert [r["global_step"] for r in _rows(run)] == [str(STEPS * i) for i in (1, 2, 3)]
    assert _rows(run)[1]["eval/mean_return"] == ""  # nothing recorded it as due: nothing evaluated again


# ------------------------------------------------------------------ 2. best.pt of an abandoned timeline
EVALS = [10.0, 30.0, 20.0, 50.0, 40.0, 45.0]  # iteration i's eval mean: best.pt at iteration 4


@pytest.fixture
def scripted_evals(monkeypatch):
    """--eval-every's evaluations return EVALS[i] for the i-th call (``calls["n"]`` sets where a resume
    picks up); the training itself is real and bit-identical across a resume."""
    from proxima import evaluate as evaluate_mod

    calls = {"n": 0}

    def evaluate(policy, episodes=10, seed=None, backend="auto", stop=None, **kwargs):
        mean = EVALS[calls["n"]] if calls["n"] < len(EVALS) else 0.0  # past them: the end-of-run evaluation
        calls["n"] += 1
        return {"env_id": "CartPole-v1", "episodes": episodes, "mean_return": mean, "std_return": 0.0, "returns": [mean],
                "lengths": [1], "deterministic": True}

    monkeypatch.setattr(evaluate_mod, "evaluate", evaluate)
    return calls


def test_resuming_an_explicit_older_checkpoint_sets_the_newer_best_pt_aside(tmp_path, scripted_evals, capsys):
    reference, run = tmp_path / "A", tmp_path / "B"
    train(_config(total_timesteps=6 * STEPS), run_dir=reference, quiet=True, evaluate_at_end=False)
    shutil.copytree(reference, run)
    scripted_evals["n"] = 2
    code, _, err = run_main(["resume", str(ckpt.checkpoint_path(run, 2 * STEPS)), "--quiet"], capsys)
    assert code == 0, err
    for i in range(1, 7):  # best_eval from the resumed checkpoint alone: 30 at step 192, not the abandoned 50
        name = ckpt.checkpoint_path(run, i * STEPS).name
        assert (torch.load(run / "checkpoints" / name, weights_only=True)["best_eval"]
                == torch.load(reference / "checkpoints" / name, weights_only=True)["best_eval"] == max(EVALS[:i])), name
    abandoned = list((run / "checkpoints").glob("abandoned-*"))
    assert len(abandoned) == 1 and (abandoned[0] / "best.pt").is_file()
    assert torch.load(abandoned[0] / "best.pt", weights_only=True)["global_step"] == 4 * STEPS
    assert ("step_000000000384.pt) and best.pt (its step 256; the resumed run's best is step_000000000128.pt's, or starts afresh where no best.pt holds it) "
            f"to {abandoned[0]}, with ") in err, err
    _same(_state(ckpt.best_checkpoint_path(run)), _state(ckpt.best_checkpoint_path(reference)), "best.pt")


def test_resuming_the_run_directory_keeps_a_best_pt_newer_than_its_checkpoint(tmp_path, scripted_evals, capsys):
    """A crash after best.pt was written, before the next checkpoint: best.pt stays, its value the best."""
    run = tmp_path / "run"
    train(_config(total_timesteps=6 * STEPS), run_dir=run, quiet=True, evaluate_at_end=False)
    for i in (4, 5, 6):
        ckpt.checkpoint_path(run, i * STEPS).unlink()
    before = ckpt.best_checkpoint_path(run).read_bytes()
    scripted_evals["n"] = 3
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    assert code == 0, err
    assert not list((run / "checkpoints").glob("abandoned-*"))
    assert ckpt.best_checkpoint_path(run).read_bytes() == before  # 50 again is no new best
    assert torch.load(ckpt.checkpoint_path(run, 4 * STEPS), weights_only=True)["best_eval"] == 50.0


# ------------------------------------------------------------------ 3. what a --preset changes on resume
def _fast_run(tmp_path, capsys, *extra) -> Path:
    run = tmp_path / "PF"
    code, _, err = run_main(["train", "CartPole-v1", "--preset", "fast", "--num-envs", "4", "--total-timesteps", "64",
                             "--eval-episodes", "1", "--no-progress", "--run-dir", str(run), *extra], capsys)
    assert code == 0, err
    return run


def test_a_resume_that_a_preset_changes_lists_each_change_and_its_source(tmp_path, capsys):
    run = _fast_run(tmp_path, capsys)
    code, out, err = run_main(["train", "CartPole-v1", "--preset", "fast", "--num-envs", "4", "--resume", "auto",
                               "--run-dir", str(run), "--total-timesteps", "128", "--dry-run"], capsys)
    assert code == 0, err
    lr_note = "proxima: note: --anneal-lr: the learning rate schedule is recomputed over the resume's total (128 steps)"
    lines = err.splitlines()
    assert lines[0] == (f"proxima: note: {ckpt.checkpoint_path(run, 64)}: the resume changes eval_episodes 1 -> 20 "
                        "(--preset fast), total_timesteps 64 -> 128 (--total-timesteps)")
    assert len(lines) == 2 and lines[1].startswith(lr_note)
    code, out, err = run_main(["train", "CartPole-v1", "--num-envs", "4", "--resume", "auto", "--run-dir", str(run),
                               "--total-timesteps", "128", "--dry-run"], capsys)
    # typed flags alone: no list of changes the user did not ask for, only what the longer total does to the lr
    assert code == 0 and len(err.splitlines()) == 1 and err.startswith(lr_note), err


def test_a_refused_preset_value_says_the_preset_changed_and_how_to_continue_the_run(tmp_path, capsys):
    run = _fast_run(tmp_path, capsys, "--lr", "0.004")  # as if the preset's lr was 0.004 when the run trained
    code, _, err = run_main(["train", "CartPole-v1", "--preset", "fast", "--num-envs", "4", "--resume", "auto",
                             "--run-dir", str(run), "--dry-run"], capsys)
    line = error_line(code, err)
    assert line == (f"proxima train: error: --preset fast: lr 0.008: cannot change when resuming (the run was trained with "
                    f"0.004); the preset's value differs from the run's (the preset changed since the run trained, or the "
                    f"run set lr itself): `proxima resume {run}` continues the run with its own config")
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "4", "--resume", "auto", "--run-dir", str(run),
                             "--lr", "0.005", "--dry-run"], capsys)
    assert "--lr 0.005: cannot change when resuming (the run was trained with 0.004); safe to change on resume: " in err


# ------------------------------------------------------------------ 4. damaged checkpoints: what to do
def _damaged_run(tmp_path, capsys) -> Path:
    run = tmp_path / "C"
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--total-timesteps", "192",
                             "--checkpoint-every", "1", "--eval-episodes", "1", "--no-progress", "--run-dir", str(run)], capsys)
    assert code == 0, err
    newest = ckpt.checkpoint_path(run, 192)
    newest.write_bytes(newest.read_bytes()[:1000])
    return run


def test_damaged_checkpoints_say_what_to_do(tmp_path, capsys):
    run = _damaged_run(tmp_path, capsys)
    newest, sound = ckpt.checkpoint_path(run, 192), ckpt.checkpoint_path(run, 128)
    code, _, err = run_main(["resume", str(newest), "--total-timesteps", "256"], capsys)
    assert error_line(code, err).endswith(f"{newest}: truncated checkpoint (1000 bytes, the end of the archive is missing); "
                                          f"resuming the run directory instead (proxima resume {run}) continues from its "
                                          f"newest sound checkpoint, {sound}")

    # eval evaluates no other step in its place (read-only: nothing renamed), but names the one to evaluate
    code, out, err = run_main(["eval", str(run), "--episodes", "1", "--json"], capsys)
    assert error_line(code, err).endswith(f"{newest}: truncated checkpoint (1000 bytes, the end of the archive is missing); "
                                          f"the run's newest sound checkpoint is {sound}: evaluate it with proxima eval "
                                          f"{sound} (proxima resume {run} continues from it and sets the damaged one aside)")
    assert newest.is_file() and out == ""
    code, _, err = run_main(["train", "CartPole-v1", "--resume", str(run), "--dry-run"], capsys)
    assert code == 0 and f"{newest} is unusable (truncated checkpoint" in err and "(the bad file is left as it is)" in err

    for path in ckpt.list_checkpoints(run):
        path.write_bytes(path.read_bytes()[:1000])
    again = (f"restore a copy of {run / 'checkpoints'} if you have one, or start over with proxima train --config "
             f"{run / 'config.yaml'} --run-dir {run} --overwrite (the old run is moved aside)")
    code, _, err = run_main(["resume", str(newest)], capsys)
    assert error_line(code, err).endswith(f"; no other checkpoint of {run} loads either: {again}")
    for argv in (["resume", str(run)], ["eval", str(run)], ["train", "CartPole-v1", "--resume", str(run), "--dry-run"]):
        code, _, err = run_main(argv, capsys)
        assert error_line(code, err).endswith(f"; none of the 2 older checkpoint(s) loads either; {again}"), argv
    assert [p.name for p in ckpt.list_checkpoints(run)] == [f"step_{s:012d}.pt" for s in (64, 128, 192)]


# ------------------------------------------------------------------ 5. --vector on a native run's resume
def test_vector_on_the_resume_of_a_native_run_is_noted_not_refused(tmp_path, capsys):
    run = tmp_path / "F"
    code, _, err = run_main(["train", "Pendulum-v1", "--num-envs", "2", "--num-steps", "16", "--total-timesteps", "32",
                             "--eval-episodes", "1", "--no-progress", "--run-dir", str(run)], capsys)
    assert code == 0, err
    code, _, err = run_main(["train", "Pendulum-v1", "--resume", str(run), "--vector", "async", "--total-timesteps", "64",
                             "--dry-run"], capsys)
    assert code == 0, err
    assert ("proxima: note: --vector async: applies to the gymnasium backend only; the run's backend (native) "
            "ignores it\n") in err
    assert "the learning rate schedule is recomputed over the resume's total (64 steps)" in err  # as the resume says
    code, _, err = run_main(["resume", str(run), "--vector", "async", "--total-timesteps", "64", "--quiet"], capsys)
    assert code == 0 and "--vector" not in err, err  # the extended total's learning-rate note prints under --quiet
    assert "vector: sync" in (run / "config.yaml").read_text()
