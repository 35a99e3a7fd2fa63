"""Review s34 (Proxima from Python): evaluate() gives `proxima eval`'s numbers, and the lines that say
how to go on name train()'s and load()'s arguments for a Python caller (the CLI's lines unchanged)."""

from __future__ import annotations

import json
import os
import signal

import pytest

import proxima
from proxima import PPOConfig, load
from proxima import checkpoint as ckpt
from tests.cli_helpers import TINY_POP, TINY_RUN, error_line, run_main

TINY = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, eval_episodes=0,
            progress=False, threads=1)


def _tiny_config(run_dir, **kw) -> PPOConfig:
    return PPOConfig(**{**TINY, "total_timesteps": 64, "run_dir": str(run_dir), **kw})


@pytest.fixture(scope="module")
def gym_run(tmp_path_factory):
    """A finished 2-iteration CartPole run trained on Gymnasium's env (config.yaml: backend gymnasium)."""
    run = tmp_path_factory.mktemp("gym") / "run"
    assert proxima.cli.main(["train", "CartPole-v1", *TINY_RUN, "--backend", "gymnasium", "--total-timesteps", "128",
                             "--run-dir", str(run), "--quiet"]) == 0
    return run


# ------------------------------------------------------------------------------------ 1. evaluate's backend
def test_evaluate_gives_proxima_evals_numbers_for_a_run_trained_on_gymnasium(gym_run, capsys):
    from proxima.evaluate import evaluate

    code, out, err = run_main(["eval", str(gym_run), "--episodes", "4", "--json"], capsys)
    assert code == 0, err
    cli = json.loads(out)
    policy = load(gym_run)
    assert policy.config["backend"] == "gymnasium"
    ours = evaluate(policy, episodes=4)
    # the same env (the run's Gymnasium CartPole), seeds and policy: the same episodes, to the bit
    assert (ours["returns"], ours["lengths"]) == (cli["returns"], cli["lengths"])
    # a backend given still wins: the native env's episodes from the same seed are others
    native = evaluate(policy, episodes=4, backend="native")
    assert native["returns"] != ours["returns"]
    code, out, err = run_main(["eval", str(gym_run), "--episodes", "4", "--json", "--backend", "native"], capsys)
    assert code == 0 and json.loads(out)["returns"] == native["returns"], err


# ------------------------------------------------------------------------------------ 2a. a run directory in use
def test_a_non_empty_run_dir_from_python_names_trains_arguments_and_the_cli_keeps_its_flags(gym_run, capsys):
    from proxima.rundir import RunDirError

    with pytest.raises(RunDirError) as info:
        proxima.train(_tiny_config(gym_run), quiet=True)
    line = str(info.value)
    assert line.endswith(f": it holds another run; continue it with train(..., resume='auto') (or "
                         f"proxima.train(None, resume='{gym_run}')), start over with train(..., overwrite=True) (the old "
                         "directory is moved aside), or give train() another run_dir"), line
    assert "--" not in line.split(": it holds another run")[1], line

    # the command line's words, byte for byte as before
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--run-dir", str(gym_run)], capsys)
    line = error_line(code, err)
    assert line.endswith(f": it holds another run; continue it with --resume auto (or `proxima resume {gym_run}`), start "
                         "over with --overwrite (the old directory is moved aside), or choose another --run-dir"), line


def test_a_folder_holding_no_run_from_python_names_overwrite_true_which_then_moves_it_aside(tmp_path, capsys):
    from proxima.rundir import RunDirError

    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("mine\n")
    with pytest.raises(RunDirError) as info:
        proxima.train(_tiny_config(project), quiet=True)
    assert str(info.value) == (f"{project} is not empty (notes.txt...) and holds no Proxima run (no meta.json of one beside "
                               "its config.yaml or metrics.csv); give train() another run_dir, or train(..., "
                               "overwrite=True) to move it aside and start there")
    capsys.readouterr()
    run_dir, _ = proxima.train(_tiny_config(project), quiet=True, overwrite=True)
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("project.old-")]
    assert len(moved) == 1 and (moved[0] / "notes.txt").read_text() == "mine\n"
    assert f"proxima: overwrite=True: moved the old {project} to {moved[0]}" in capsys.readouterr().err
    assert ckpt.list_checkpoints(run_dir)


def test_a_run_that_wrote_no_checkpoint_from_python_is_started_over_with_resume_auto(tmp_path):
    from proxima.rundir import RunDirError

    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text('{"kind": "ppo"}')
    (run / "config.yaml").write_text("env_id: CartPole-v1\n")
    with pytest.raises(RunDirError) as info:
        proxima.train(_tiny_config(run), quiet=True)
    assert str(info.value) == (f"{run} is not empty (config.yaml, meta.json...): it holds another run, which wrote no "
                               "checkpoint; start over with train(..., resume='auto') or train(..., overwrite=True) "
                               "(either moves the old directory aside), or give train() another run_dir")


# ------------------------------------------------------------------------------------ 2b. a stop from Python
def test_a_python_run_stopped_by_sigint_says_the_train_call_that_continues_it_and_that_call_does(tmp_path, monkeypatch):
    from proxima import trainer as trainer_mod
    from proxima.signals import TrainingInterrupted

    real_iteration = trainer_mod.Trainer.train_iteration

    def iteration(self):
        if self.iteration == 0:
            os.kill(os.getpid(), signal.SIGINT)  # the loop finishes the iteration, writes its checkpoint, stops
        return real_iteration(self)

    monkeypatch.setattr(trainer_mod.Trainer, "train_iteration", iteration)
    run = tmp_path / "run"
    with pytest.raises(TrainingInterrupted) as info:
        proxima.train(_tiny_config(run, total_timesteps=128), quiet=True)
    first = ckpt.checkpoint_path(run, 64)
    call = f"proxima.train(None, resume='{run}')"
    assert str(info.value) == f"stopped by SIGINT; checkpoint: {first}; continue with: {call} (in a shell: proxima resume {run})"
    monkeypatch.undo()
    run_dir, _ = eval(call, {"proxima": proxima})  # the advice, as given, continues the run to its end
    assert run_dir.resolve() == run.resolve()
    assert [p.name for p in ckpt.list_checkpoints(run)][-1] == ckpt.checkpoint_path(run, 128).name


def test_the_python_continue_call_names_a_module_env_and_leaves_runs_train_cannot_resume_to_the_shell(tmp_path, monkeypatch):
    from proxima.signals import TrainingInterrupted, hold_python_caller

    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    run = tmp_path / "single"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("env_id: my_envs:Walker\nseed: 1\n")
    step = run / "checkpoints" / "step_000000000064.pt"
    release = hold_python_caller(True)
    try:
        assert str(TrainingInterrupted(signal.SIGTERM, step)) == (
            f"stopped by SIGTERM; checkpoint: {step}; continue with: proxima.train(None, resume='{run}', "
            f"env_id='my_envs:Walker') (in a shell: proxima resume --env my_envs:Walker {run})")
        (run / "meta.json").write_text('{"kind": "ppo", "world_size": 2}')  # two processes: train() here cannot resume it
        assert str(TrainingInterrupted(signal.SIGTERM, step)).endswith(f"continue with: proxima resume --env my_envs:Walker {run}")
        pop = tmp_path / "pop"  # a population resumes with train_population(), not train()
        (pop / "checkpoints").mkdir(parents=True)
        (pop / "population.json").write_text('{"kind": "ppo-population", "env_id": "CartPole-v1", "members": 2}')
        assert str(TrainingInterrupted(signal.SIGTERM, pop / "checkpoints" / "step_000000000064.pt")).endswith(
            f"continue with: proxima.train_population(None, resume='{pop}') (in a shell: proxima resume {pop})")
    finally:
        release()
    (run / "meta.json").unlink()
    # outside a Python caller's run (the CLI's): the command, as before
    assert str(TrainingInterrupted(signal.SIGTERM, step)).endswith(f"continue with: proxima resume --env my_envs:Walker {run}")


# ------------------------------------------------------------------------------------ 3. load() of a population
def test_load_of_a_population_names_load_of_a_real_member_folder_and_eval_keeps_its_command(tmp_path, capsys):
    pop = tmp_path / "pop"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", *TINY_POP, "--total-timesteps", "32",
                             "--eval-episodes", "0", "--quiet", "--run-dir", str(pop)], capsys)
    assert code == 0, err
    first = json.loads((pop / "population.json").read_text())["member_dirs"][0]["dir"]
    member = pop.resolve() / first
    step = ckpt.list_checkpoints(pop)[-1]
    with pytest.raises(ckpt.CheckpointError) as info:
        load(pop)
    assert str(info.value) == (f"{step}: a population checkpoint (--seeds/--sweep); load one member at a time, from one "
                               f"of its 2 member folders in {pop.resolve()}: proxima.load('{member}')")
    assert load(member).config["seed"] == 1  # the example loads
    code, _, err = run_main(["eval", str(step)], capsys)
    assert error_line(code, err).endswith(f"a population checkpoint (--seeds/--sweep); evaluate the members: proxima eval "
                                          f"{pop.resolve()}/<member dir>")
