"""Review 29, the trainer and the Python API: what train() returns refuses the nn.Module methods that
would hand back its bare network (A), the package docstring and exports (B, C), the note on a total
that is not whole iterations wherever the total came from (D), an --eval-every that never fires (E),
and the end-of-run evaluation that repeats the last iteration's --eval-every one (F)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

import proxima
from cli_helpers import run_main
from proxima import checkpoint as ckpt
from proxima.config import PPOConfig

SMALL = dict(num_envs=4, num_steps=16, threads=1, progress=False)
FLAGS = ["--num-envs", "4", "--num-steps", "16", "--threads", "1", "--no-progress"]
BATCH_NOTE = "is not a multiple of the batch (64 steps = num_envs x num_steps)"


# --- A. TrainedPolicy: the nn.Module methods that return or convert the module --------------------------------
@pytest.fixture(scope="module")
def pendulum_run(tmp_path_factory):
    """A norm_obs Pendulum run (its policy differs from the bare Agent on raw observations)."""
    run = tmp_path_factory.mktemp("a") / "R"
    run_dir, trained = proxima.train(PPOConfig(env_id="Pendulum-v1", norm_obs=True, total_timesteps=256, eval_episodes=0,
                                               run_dir=str(run), **SMALL), quiet=True)
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32) * 3
    return run_dir, trained, obs


@pytest.mark.parametrize("name", ["to", "cpu", "cuda", "train", "apply", "requires_grad_", "share_memory", "to_empty"])
def test_module_methods_are_refused_naming_policy_agent(pendulum_run, name):
    _, trained, obs = pendulum_run
    before = trained.act(obs)
    # was: the bare Agent (under norm_obs other actions from raw observations). The dtype methods (float,
    # double, half, bfloat16, type) have their own line: test_review29_dayfix.py
    with pytest.raises(AttributeError) as e:
        getattr(trained, name)
    line = str(e.value)
    assert line == (f"TrainedPolicy.{name}(): the policy is no torch.nn.Module; call policy.agent.{name}() for the bare "
                    "network (it acts on normalized observations, without the policy's normalizer and action shaping), "
                    "or load(run_dir, device=...) for the policy on another device")
    assert "\n" not in line
    np.testing.assert_array_equal(trained.act(obs), before)


def test_eval_returns_the_policy_and_the_policy_still_acts_as_loaded(pendulum_run):
    run_dir, trained, obs = pendulum_run
    assert trained.eval() is trained  # was: the Agent
    assert not trained.agent.training
    loaded = proxima.load(run_dir)
    np.testing.assert_array_equal(trained.eval().act(obs), loaded.act(obs))
    # the bare network on raw observations acts otherwise (norm_obs): what trained.eval() used to hand back
    raw = trained.agent.act(torch.as_tensor(obs)) if hasattr(trained.agent, "act") else None
    if raw is not None:
        assert not np.allclose(np.asarray(raw.detach()), trained.act(obs))
    assert len(list(trained.parameters())) == len(list(trained.agent.parameters()))  # other attributes still answer


def test_deepcopy_is_an_independent_policy(pendulum_run):
    _, trained, obs = pendulum_run
    before = trained.act(obs)
    twin = copy.deepcopy(trained)
    assert type(twin) is type(trained) and twin.agent is not trained.agent
    np.testing.assert_array_equal(twin.act(obs), before)
    with torch.no_grad():
        for p in twin.agent.parameters():
            p.zero_()
    np.testing.assert_array_equal(trained.act(obs), before)  # the original's network untouched
    assert not np.array_equal(twin.act(obs), before)


# --- B, C. the package docstring and TrainingInterrupted -------------------------------------------------------
def test_package_docstring_names_the_policy_train_returns():
    assert "run_dir, policy = train(PPOConfig(" in proxima.__doc__
    assert "run_dir, agent" not in proxima.__doc__


def test_training_interrupted_is_exported_from_proxima():
    from proxima import TrainingInterrupted
    from proxima.signals import TrainingInterrupted as where_defined
    from proxima.trainer import TrainingInterrupted as trainers

    assert TrainingInterrupted is where_defined is trainers
    assert issubclass(TrainingInterrupted, BaseException) and not issubclass(TrainingInterrupted, Exception)
    assert "TrainingInterrupted" in proxima.__all__ and "TrainingInterrupted" in dir(proxima)
    readme = (Path(__file__).resolve().parents[2] / "docs" / "python_api.md").read_text()  # the README's Python API
    assert "raises `proxima.TrainingInterrupted`" in readme


# --- D. the whole-iterations note, wherever the total came from ------------------------------------------------
def test_a_total_from_a_config_file_gets_the_note(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.yaml").write_text("total_timesteps: 150\neval_episodes: 0\n")
    code, _, err = run_main(["train", "CartPole-v1", "--config", "f.yaml", "--run-dir", "R", "--quiet", *FLAGS], capsys)
    assert code == 0, err
    assert f"proxima: note: --config f.yaml: total_timesteps 150 {BATCH_NOTE}: training 128 steps (2 iterations)\n" in err
    assert ckpt.load_checkpoint(tmp_path / "R")["global_step"] == 128


def test_a_resume_with_a_typed_total_gets_the_note_naming_the_step_it_trains_to(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "128", "--eval-episodes", "0", "--run-dir", "R",
                             *FLAGS], capsys)
    assert code == 0 and "note" not in err, err  # whole iterations: nothing to say
    code, _, err = run_main(["resume", "R", "--total-timesteps", "300", "--quiet"], capsys)
    assert code == 0, err
    assert f"proxima: note: --total-timesteps 300 {BATCH_NOTE}: the run trains to step 256 (4 iterations)\n" in err
    assert ckpt.load_checkpoint(tmp_path / "R")["global_step"] == 256
    assert yaml.safe_load((tmp_path / "R" / "config.yaml").read_text())["total_timesteps"] == 300  # the total as given
    # the run's own total again from its config.yaml: noted when it was given, not at every resume
    code, _, err = run_main(["train", "--config", "R/config.yaml", "--resume", "auto", "--quiet"], capsys)
    assert code == 0, err
    assert "is not a multiple" not in err


def test_a_python_total_gets_the_note_in_python_words(tmp_path, capsys):
    proxima.train(PPOConfig(env_id="CartPole-v1", total_timesteps=150, eval_episodes=0, run_dir=str(tmp_path / "R"),
                            **SMALL), quiet=True)
    err = capsys.readouterr().err
    assert f"proxima: note: PPOConfig.total_timesteps = 150 {BATCH_NOTE}: training 128 steps (2 iterations)\n" in err


def test_a_preset_or_default_total_goes_without_the_note(capsys):
    from proxima.presets import resolve
    from proxima.trainer import _note_given_total

    preset = resolve("CartPole-v1", None, PPOConfig())
    assert preset.total_timesteps % (preset.num_envs * preset.num_steps)  # not whole: the case at hand
    for python, cfg in ((False, preset), (True, preset), (True, PPOConfig())):
        _note_given_total(cfg, 1, False, None, None if python else {}, {}, python=python)
    assert capsys.readouterr().err == ""
    own = copy.copy(preset)
    own.total_timesteps = 1000  # set by the user after the preset: the user's total
    _note_given_total(own, 1, False, None, None, None, python=True)
    assert "PPOConfig.total_timesteps = 1,000 is not a multiple" in capsys.readouterr().err


# --- E. an --eval-every larger than the run --------------------------------------------------------------------
def test_eval_every_beyond_the_run_is_noted_and_eval_best_says_no_evaluation_ran(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "128", "--eval-every", "5000", "--eval-episodes",
                             "1", "--run-dir", "R", "--quiet", *FLAGS], capsys)
    assert code == 0, err
    assert ("proxima: note: --eval-every 5,000 is more than the 128 steps the run trains: no evaluation runs during "
            "training and no checkpoints/best.pt is written (the end-of-run evaluation, eval.json, still runs)\n") in err
    assert not (tmp_path / "R" / "checkpoints" / "best.pt").exists() and (tmp_path / "R" / "eval.json").is_file()
    code, out, err = run_main(["eval", "R", "--best"], capsys)
    # was: "no checkpoints/best.pt (written when training with --eval-every N)", of a run trained with it
    assert (code, out) == (2, "")
    assert err == ("proxima eval: error: R: no checkpoints/best.pt: the run was trained with --eval-every 5,000 but only "
                   "to step 128, so no evaluation ran; drop --best to evaluate its last checkpoint\n")


def test_eval_best_of_a_run_without_eval_every_keeps_its_advice(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "64", "--eval-episodes", "0", "--run-dir", "R",
                             "--quiet", *FLAGS], capsys)
    assert code == 0 and "note" not in err, err
    code, _, err = run_main(["eval", "R", "--best"], capsys)
    assert code == 2
    assert err == "proxima eval: error: R: no checkpoints/best.pt (written when training with --eval-every N)\n"


def test_a_python_eval_every_beyond_the_run_is_noted_in_python_words(tmp_path, capsys):
    proxima.train(PPOConfig(env_id="CartPole-v1", total_timesteps=64, eval_every=1000, eval_episodes=1,
                            run_dir=str(tmp_path / "R"), **SMALL), quiet=True)
    assert "proxima: note: PPOConfig.eval_every = 1,000 is more than the 64 steps the run trains" in capsys.readouterr().err


# --- F. the end-of-run evaluation of the step the last --eval-every evaluation ran at ------------------------------
def _counting_evaluate(monkeypatch) -> list:
    import proxima.evaluate as evaluate_module

    calls, real = [], evaluate_module.evaluate

    def counted(policy, *args, **kwargs):
        calls.append(kwargs.get("seed"))
        return real(policy, *args, **kwargs)

    monkeypatch.setattr(evaluate_module, "evaluate", counted)
    return calls


def test_the_last_iterations_evaluation_is_eval_json_and_not_run_twice(tmp_path, monkeypatch):
    calls = _counting_evaluate(monkeypatch)
    run_dir, _ = proxima.train(PPOConfig(env_id="Pendulum-v1", total_timesteps=256, num_envs=4, num_steps=32, eval_every=128,
                                         eval_episodes=2, threads=1, progress=False, run_dir=str(tmp_path / "R")), quiet=True)
    assert len(calls) == 2  # steps 128 and 256; was 3: the end-of-run evaluation ran step 256's again
    saved = json.loads((run_dir / "eval.json").read_text())
    assert saved["global_step"] == 256 and saved["episodes"] == 2
    last_row = (run_dir / "metrics.csv").read_text().splitlines()
    header, row = last_row[0].split(","), last_row[-1].split(",")
    assert float(row[header.index("eval/mean_return")]) == saved["mean_return"]
    # the numbers are still `proxima eval`'s, bit for bit (README): the reuse changed none of them
    monkeypatch.undo()
    policy = proxima.load(run_dir)
    again = proxima.evaluate.evaluate(policy, episodes=2, backend=policy.config["backend"])
    assert again["returns"] == saved["returns"] and again["mean_return"] == saved["mean_return"]


def test_an_end_that_is_no_eval_every_step_is_evaluated_afresh(tmp_path, monkeypatch):
    calls = _counting_evaluate(monkeypatch)
    run_dir, _ = proxima.train(PPOConfig(env_id="Pendulum-v1", total_timesteps=384, num_envs=4, num_steps=32, eval_every=256,
                                         eval_episodes=2, threads=1, progress=False, run_dir=str(tmp_path / "R")), quiet=True)
    assert len(calls) == 2  # step 256's, then the end's at 384
    assert json.loads((run_dir / "eval.json").read_text())["global_step"] == 384


def test_a_loop_evaluation_of_other_settings_is_not_reused():
    from proxima.trainer import _loop_eval_at_end, flush_denormal_on

    result = {"mean_return": 1.0}
    done = {"global_step": 256, "episodes": 2, "seed": 1_000_000, "backend": "auto", "device": torch.device("cpu"),
            "threads": torch.get_num_threads(), "flush_denormal": flush_denormal_on(), "result": result}
    trainer = SimpleNamespace(loop_eval=done, global_step=256, cfg=SimpleNamespace(eval_episodes=2, backend="auto"))
    policy = SimpleNamespace(run_threads=None, run_flush_denormal=None, device=torch.device("cpu"))
    assert _loop_eval_at_end(trainer, policy, 1_000_000) == result
    for change in ({"global_step": 128}, {"episodes": 3}, {"seed": 7}, {"backend": "gymnasium"},
                   {"threads": torch.get_num_threads() + 1}, {"flush_denormal": not flush_denormal_on()}):
        trainer.loop_eval = {**done, **change}
        assert _loop_eval_at_end(trainer, policy, 1_000_000) is None, change
    trainer.loop_eval = None
    assert _loop_eval_at_end(trainer, policy, 1_000_000) is None
