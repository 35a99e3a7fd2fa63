"""Review 29, the day's fixes reviewed: TrainedPolicy's dtype methods no longer advise converting the
policy's own network (which broke policy.act) (1), the Agent's methods that take observations are refused
rather than fed raw ones (2), load()'s policy has eval() too (3), a resume that trains nothing from another
working directory leaves config.yaml alone (4), the report's git row sees uncommitted changes a resume ran
on the same commit (5), the whole-iterations and --eval-every notes in --dry-run as the run prints them, and
not when the resume trains nothing (6), and the --eval-every note of a resume of a run that has a best.pt (7)."""

from __future__ import annotations

import contextlib
import copy
import io
import json

import numpy as np
import pytest
import torch
import yaml

import proxima
from cli_helpers import run_main, snapshot
from proxima import checkpoint as ckpt
from proxima.config import PPOConfig

# the same tiny settings and norm_obs Pendulum run as test_review29_trainer.py's (pytest runs its fixture here too)
from tests.unit import test_review29_trainer as trainer_tests  # noqa: E402

SMALL, FLAGS, BATCH_NOTE = trainer_tests.SMALL, trainer_tests.FLAGS, trainer_tests.BATCH_NOTE
pendulum_run = trainer_tests.pendulum_run

NOT_WHOLE = "is not a multiple of the batch"


# --- 1. the dtype methods -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, dtype", [("double", torch.float64), ("half", torch.float16), ("bfloat16", torch.bfloat16)])
def test_dtype_methods_say_the_policy_computes_in_float32_and_the_advice_keeps_act_working(pendulum_run, name, dtype):
    _, trained, obs = pendulum_run
    before = trained.act(obs)
    with pytest.raises(AttributeError) as e:
        getattr(trained, name)
    line = str(e.value)
    dtype_name = str(dtype).removeprefix("torch.")
    # was: "call policy.agent.double() for the bare network", after which policy.act raised
    # "RuntimeError: mat1 and mat2 must have the same dtype"
    assert line == (f"TrainedPolicy.{name}(): the policy is no torch.nn.Module and computes in float32; for a {dtype_name} "
                    f"network use a copy, copy.deepcopy(policy.agent).{name}(), on observations normalized by "
                    f"policy.obs_normalizer(obs, update=False) cast to {dtype_name} (policy.agent.{name}() itself would make "
                    "policy.act fail on a dtype mismatch)")
    assert "\n" not in line
    if dtype is torch.float64:  # the advice, followed: a float64 network, and the policy still acts as it did
        net = getattr(copy.deepcopy(trained.agent), name)()
        x = trained.obs_normalizer(torch.as_tensor(obs), update=False).to(dtype)
        torch.testing.assert_close(net.get_value(x).float(), trained.agent.get_value(x.float()))
    np.testing.assert_array_equal(trained.act(obs), before)


def test_float_and_type_are_refused_in_the_same_words(pendulum_run):
    _, trained, _ = pendulum_run
    with pytest.raises(AttributeError) as e:
        trained.float
    assert str(e.value) == ("TrainedPolicy.float(): the policy is no torch.nn.Module and computes in float32 already "
                            "(policy.agent is a float32 network): nothing to convert")
    with pytest.raises(AttributeError) as e:
        trained.type
    assert "copy.deepcopy(policy.agent).type(dtype)" in str(e.value)
    assert "call policy.agent.type() for the bare network" not in str(e.value)


# --- 2. the Agent's methods that take observations --------------------------------------------------------------
@pytest.mark.parametrize("name", ["get_value", "get_action_and_value", "features", "forward", "policy_step"])
def test_methods_that_take_observations_are_refused_naming_the_normalizer(pendulum_run, name):
    _, trained, obs = pendulum_run
    with pytest.raises(AttributeError) as e:  # was: the Agent's method, reading raw observations as normalized ones
        getattr(trained, name)
    assert str(e.value) == (f"TrainedPolicy.{name}(): policy.agent's {name}() takes normalized observations, the policy "
                            f"raw ones; call policy.agent.{name}(policy.obs_normalizer(obs, update=False)), obs a tensor "
                            "on policy.device")


def test_the_advice_gives_the_values_of_the_policys_inputs(pendulum_run):
    _, trained, obs = pendulum_run
    with pytest.raises(AttributeError) as e:
        trained.policy
    assert "policy.agent.policy(policy.agent.features(policy.obs_normalizer(obs, update=False)))" in str(e.value)
    x = torch.as_tensor(obs)
    right = trained.agent.get_value(trained.obs_normalizer(x, update=False))
    raw = trained.agent.get_value(x)  # what trained.get_value(obs) gave: the values of other inputs
    assert not torch.allclose(right, raw)
    # the normalized inputs are the ones act() acts on
    with torch.no_grad():
        acted = torch.clamp(trained.agent.act(trained.obs_normalizer(x, update=False)), -2.0, 2.0)
    assert torch.equal(trained.batched_act(x), acted)
    assert len(list(trained.parameters())) == len(list(trained.agent.parameters()))  # other attributes still answer


def test_a_policy_without_a_normalizer_refuses_them_too_saying_so(tmp_path):
    _, trained = proxima.train(PPOConfig(env_id="CartPole-v1", total_timesteps=64, eval_episodes=0,
                                         run_dir=str(tmp_path / "R"), **SMALL), quiet=True)
    assert trained.obs_normalizer is None
    with pytest.raises(AttributeError) as e:
        trained.get_value
    assert str(e.value) == ("TrainedPolicy.get_value(): the policy does not pass observations to its network's get_value() "
                            "(under norm_obs it takes normalized ones); call policy.agent.get_value(obs), obs a tensor on "
                            "policy.device (this run has no observation normalizer)")


# --- 3. load()'s policy has eval() ------------------------------------------------------------------------------
def test_a_loaded_policy_has_eval_returning_itself(pendulum_run):
    run_dir, trained, obs = pendulum_run
    loaded = proxima.load(run_dir)
    loaded.agent.train()
    assert loaded.eval() is loaded  # was: AttributeError ('Policy' object has no attribute 'eval')
    assert not loaded.agent.training and not loaded.obs_normalizer.training
    np.testing.assert_array_equal(loaded.eval().act(obs), trained.eval().act(obs))


# --- 4. a resume that trains nothing, from another working directory --------------------------------------------
def test_a_complete_runs_resume_from_elsewhere_leaves_its_files_alone(tmp_path, monkeypatch, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "64", "--eval-episodes", "1", "--run-dir", "cw1",
                             "--quiet", *FLAGS], capsys)
    assert code == 0, err
    run = tmp_path / "a" / "cw1"
    assert yaml.safe_load((run / "config.yaml").read_text())["run_dir"] == "cw1"
    before = snapshot(run)
    monkeypatch.chdir(tmp_path / "b")
    code, _, err = run_main(["resume", str(run)], capsys)
    assert code == 0, err
    assert "the run is complete (64 steps)" in err
    # was: run_dir: cw1 -> its absolute path (cw1 resolved here, in b/, named another directory)
    assert snapshot(run) == before
    # the documented exception: another --eval-episodes records its count, run_dir as it was
    assert run_main(["resume", str(run), "--eval-episodes", "2"], capsys)[0] == 0
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert (config["eval_episodes"], config["run_dir"]) == (2, "cw1")


# --- 5. the report's git row ------------------------------------------------------------------------------------
def test_the_report_shows_a_resume_that_ran_uncommitted_changes_on_the_same_commit(tmp_path, capsys):
    from proxima.report import build_report

    run = tmp_path / "r"
    assert run_main(["train", "CartPole-v1", "--total-timesteps", "64", "--eval-episodes", "0", "--run-dir", str(run),
                     "--quiet", *FLAGS], capsys)[0] == 0
    assert run_main(["resume", str(run), "--total-timesteps", "128", "--quiet"], capsys)[0] == 0
    meta = json.loads((run / "meta.json").read_text())
    meta.update(git_commit="e433af9", git_dirty=False)
    meta["resumes"][0].update(git_commit="e433af9", git_dirty=True)
    (run / "meta.json").write_text(json.dumps(meta))

    def row() -> str:
        text = build_report([run], episodes=0).read_text()
        return next(line for line in text.splitlines() if line.startswith("| git commit |"))

    # was: "| git commit | e433af9 |", as if the resume ran the commit's code
    assert row() == "| git commit | e433af9 -> e433af9 (uncommitted changes) from step 64 |"
    meta["resumes"][0]["git_dirty"] = False
    (run / "meta.json").write_text(json.dumps(meta))
    assert row() == "| git commit | e433af9 |"
    meta["git_dirty"] = True  # started with edits, resumed clean on the same commit
    (run / "meta.json").write_text(json.dumps(meta))
    assert row() == "| git commit | e433af9 (uncommitted changes) -> e433af9 from step 64 |"


# --- 6. the notes of --dry-run, and the total's note of a resume that trains nothing --------------------------------
@pytest.fixture
def complete_run(tmp_path, monkeypatch, capsys):
    """R: a CartPole run given --total-timesteps 150, which trained 128 steps (2 whole iterations) and is complete."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "150", "--eval-episodes", "0", "--run-dir", "R",
                             *FLAGS], capsys)
    assert code == 0, err
    assert f"--total-timesteps 150 {BATCH_NOTE}: training 128 steps (2 iterations)" in err
    return tmp_path / "R"


def test_a_resumes_dry_run_gets_the_whole_iterations_note(complete_run, capsys):
    before = snapshot(complete_run)
    code, out, err = run_main(["train", "--resume", "R", "--total-timesteps", "300", "--dry-run"], capsys)
    assert code == 0, err
    # was: no note; the resume itself prints this one
    assert f"proxima: note: --total-timesteps 300 {BATCH_NOTE}: the run trains to step 256 (4 iterations)\n" in err
    assert yaml.safe_load(out)["total_timesteps"] == 300 and snapshot(complete_run) == before


def test_a_resume_that_trains_nothing_gets_no_total_note(complete_run, capsys):
    for argv in (["resume", "R", "--total-timesteps", "150"], ["train", "--resume", "R", "--total-timesteps", "150",
                                                               "--dry-run"]):
        code, _, err = run_main(argv, capsys)
        assert code == 0, err
        assert "the run is complete (128 steps)" in err
        # was: then "--total-timesteps 150 is not a multiple ...: the run trains to step 128 (2 iterations)"
        assert NOT_WHOLE not in err, argv


def test_a_new_runs_dry_run_gets_the_eval_every_note(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "128", "--eval-every", "5000", "--run-dir", "R",
                             "--dry-run", *FLAGS], capsys)
    assert code == 0, err
    # was: nothing (the run itself prints it)
    assert ("proxima: note: --eval-every 5,000 is more than the 128 steps the run trains: no evaluation runs during "
            "training and no checkpoints/best.pt is written (the end-of-run evaluation, eval.json, still runs)\n") in err
    assert not (tmp_path / "R").exists()


# --- 7. the --eval-every note of a resume whose run has a best.pt -------------------------------------------------
def test_a_resume_of_a_run_with_best_pt_says_it_stays(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "128", "--eval-every", "64", "--eval-episodes", "1",
                             "--run-dir", "R", "--quiet", *FLAGS], capsys)
    assert code == 0, err
    best = tmp_path / "R" / "checkpoints" / "best.pt"
    written = best.read_bytes()
    note = ("proxima: note: --eval-every 100,000 is more than the 256 steps the run trains to: no further evaluation runs "
            "in this resume; checkpoints/best.pt stays as it is (the end-of-run evaluation, eval.json, still runs)\n")
    for argv in (["train", "--resume", "R", "--total-timesteps", "256", "--eval-every", "100000", "--dry-run"],
                 ["resume", "R", "--total-timesteps", "256", "--eval-every", "100000", "--quiet"]):
        code, _, err = run_main(argv, capsys)
        assert code == 0, err
        # was: "no evaluation runs during training and no checkpoints/best.pt is written", of a run that has one
        assert note in err, argv
    assert best.read_bytes() == written
    assert ckpt.load_checkpoint(tmp_path / "R")["global_step"] == 256


def test_a_resume_with_an_evaluation_left_due_says_that_one_runs(tmp_path):
    from proxima.trainer import _note_eval_every

    cfg = PPOConfig(env_id="CartPole-v1", total_timesteps=256, eval_every=100_000, **SMALL)
    (tmp_path / "checkpoints").mkdir()
    lines = []
    for has_best in (False, True):
        if has_best:
            (tmp_path / "checkpoints" / "best.pt").write_bytes(b"x")
        for pending in (None, 128):
            with contextlib.redirect_stderr(io.StringIO()) as err:
                _note_eval_every(cfg, 1, python=False, resumed=True, run_dir=tmp_path, pending_step=pending)
            lines.append(err.getvalue().split("to: ", 1)[1].rstrip("\n"))
    tail = " (the end-of-run evaluation, eval.json, still runs)"
    assert lines == [f"no further evaluation runs in this resume; no checkpoints/best.pt is written{tail}",
                     f"no further evaluation runs in this resume but the one a stop left due at step 128{tail}",
                     f"no further evaluation runs in this resume; checkpoints/best.pt stays as it is{tail}",
                     "no further evaluation runs in this resume but the one a stop left due at step 128; "
                     f"checkpoints/best.pt changes only if that one scores a new best{tail}"]
