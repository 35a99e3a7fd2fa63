"""Evaluation from Python and the command line as a reviewer found it: load() takes the env id and the
trust switch (and a refusal names them, not the CLI's flags), Policy.act holds observations to their
shapes and refuses NaN/inf, evaluation runs under the run's thread count (its numbers are eval.json's),
evaluate() checks its arguments, and a report says when it averages evaluations of other lengths."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import proxima
from cli_helpers import fake_run_dir, one_error_line, run_main
from proxima.agent import Agent
from proxima.checkpoint import Policy
from proxima.envs import make_env
from proxima.envs.gym_adapter import UntrustedEnvError
from proxima.envs.spaces import obs_layout, tensor_space
from proxima.evaluate import evaluate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _policy(obs_space, act_space, env_id="E"):
    torch.manual_seed(0)
    return Policy(Agent(obs_space, act_space), None, {"env_id": env_id}, obs_space, act_space, "cpu")


def _cartpole():
    env = make_env("CartPole-v1", 1)
    spaces_ = env.single_observation_space, env.single_action_space
    env.close()
    return _policy(*spaces_, env_id="CartPole-v1")


# ------------------------------------------------------------------------------------ 1. load(env_id=, trust_env=)
@pytest.fixture(scope="module")
def module_run(tmp_path_factory):
    """A tiny run of a module:Class env (its recorded id would import user_envs)."""
    import sys

    sys.path.insert(0, str(FIXTURES))
    try:
        cfg = proxima.PPOConfig(env_id="user_envs:DiscreteFrom1", backend="gymnasium", num_envs=2, num_steps=16,
                                total_timesteps=64, eval_episodes=0, progress=False, checkpoint_every=0, threads=1)
        run_dir, _ = proxima.train(cfg, run_dir=tmp_path_factory.mktemp("mod") / "run", quiet=True)
    finally:
        sys.path.remove(str(FIXTURES))
    return Path(run_dir)


def test_load_takes_the_env_id_and_the_trust_switch_and_a_refusal_names_them(module_run, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(FIXTURES))
    with pytest.raises(UntrustedEnvError) as e:
        evaluate(proxima.load(module_run), episodes=2)
    message = str(e.value)
    assert "\n" not in message and "--env" not in message and "proxima eval" not in message
    assert message.endswith("not done for an env id read from a file: load it with proxima.load("
                            f"{str(proxima.load(module_run).path)!r}, env_id='user_envs:DiscreteFrom1') if you trust that "
                            "module (or with trust_env=True to trust this run's files)")
    named = proxima.load(module_run, env_id="user_envs:DiscreteFrom1")
    assert evaluate(named, episodes=2)["episodes"] == 2
    assert evaluate(proxima.load(module_run, trust_env=True), episodes=2)["episodes"] == 2
    # env_kwargs reach the env's constructor (DiscreteFrom1 takes none)
    with pytest.raises(Exception, match=r"DiscreteFrom1\(\) takes no arguments"):
        evaluate(proxima.load(module_run, env_id="user_envs:DiscreteFrom1", env_kwargs={"bogus": 1}), episodes=2)
    # the command line keeps its own words: its flags
    code, _, err = run_main(["eval", str(module_run), "--episodes", "2"], capsys)
    assert code == 2
    assert one_error_line(err, "proxima eval").endswith("not done for an env id read from a file: pass --env "
                                                         "user_envs:DiscreteFrom1 to `proxima eval` if you trust that module "
                                                         "(or --trust-run to trust this run's files)")


# ------------------------------------------------------------------------------------ 2. shapes
@pytest.mark.parametrize("shape", [(2, 2), (4, 1), (1, 2, 2), (1, 1, 4), (8,), (2, 8)])
def test_act_holds_observations_to_their_shape_not_their_element_count(shape):
    policy = _cartpole()
    with pytest.raises(ValueError) as e:
        policy.act(np.zeros(shape, np.float32))
    assert str(e.value) == (f"Policy.act: obs of shape {shape} does not hold (B, *(4,)) observations of CartPole-v1: give one "
                            "observation of shape (4,), or a batch of shape (B, 4)")


def test_act_takes_an_empty_batch():
    policy = _cartpole()
    out = policy.act(np.zeros((0, 4), np.float32))
    assert isinstance(out, np.ndarray) and out.shape == (0,) and out.dtype == np.int64
    out = policy.act(torch.zeros(0, 4))
    assert isinstance(out, torch.Tensor) and tuple(out.shape) == (0,)
    box = _policy(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))
    assert box.act(np.zeros((0, 3), np.float32)).shape == (0, 1)
    space = gym.spaces.Dict({"z": gym.spaces.Box(-1, 1, (5,), np.float32), "a": gym.spaces.Box(-1, 1, (2,), np.float32)})
    d = _policy(space, gym.spaces.Discrete(2))
    assert d.act({"z": np.zeros((0, 5), np.float32), "a": np.zeros((0, 2), np.float32)}).shape == (0,)
    assert d.act(np.zeros((0, 7), np.float32)).shape == (0,)  # packed
    with pytest.raises(ValueError, match=r"obs\['z'\] of shape \(5, 1\) is not one observation like obs\['a'\]"):
        d.act({"a": np.zeros(2, np.float32), "z": np.zeros((5, 1), np.float32)})  # its 5 values, not in the key's shape


def test_a_scalar_observation_of_one_env_is_a_batch_of_one():
    """A scalar Box (declared ()): (1,) from a one-env SyncVectorEnv is a batch of one, whose step takes (1,) actions."""
    declared = gym.spaces.Box(-1.0, 1.0, (), np.float32)
    flat = tensor_space(declared, obs_layout(declared))
    policy = _policy(flat, gym.spaces.Discrete(2))
    assert policy.act(np.zeros(1, np.float32)).shape == (1,)
    assert policy.act(np.zeros(3, np.float32)).shape == (3,) and policy.act(np.zeros((3, 1), np.float32)).shape == (3,)
    assert policy.act(np.float32(0.5)).shape == ()
    with pytest.raises(ValueError, match=r"give one observation of shape \(\), or a batch of shape \(B,\) or \(B, 1\)$"):
        policy.act(np.zeros((2, 2), np.float32))


# ------------------------------------------------------------------------------------ 3. NaN/inf
def test_act_refuses_non_finite_observations_naming_row_and_column():
    pend = _policy(gym.spaces.Box(-8, 8, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))
    with pytest.raises(ValueError) as e:
        pend.act(np.array([np.nan, 0, 0], np.float32))
    assert str(e.value) == ("Policy.act: non-finite observation value nan at column 0; a policy acts on finite observations "
                            "only (training and evaluation refuse them too): replace it, or find where it came from")
    with pytest.raises(ValueError, match=r"non-finite observation value inf at row 1, column 2; "):
        pend.act(torch.tensor([[0.0, 0, 0], [0, 0, float("inf")]]))
    assert pend.act(np.zeros((2, 3), np.int64)).shape == (2, 1)  # integers: never non-finite, not read


# ------------------------------------------------------------------------------------ 4. the run's threads
def test_eval_computes_with_the_runs_threads_and_matches_eval_json(tmp_path, capsys):
    run = tmp_path / "pend"
    code, _, err = run_main(["train", "Pendulum-v1", "--run-dir", str(run), "--num-envs", "4", "--num-steps", "64",
                             "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "256", "--eval-episodes",
                             "10", "--norm-obs", "--threads", "1", "--seed", "2", "--no-progress", "--quiet"], capsys)
    assert code == 0, err
    saved = json.loads((run / "eval.json").read_text())
    torch.set_num_threads(2)  # torch's default on a 2-core machine (conftest sets 1)
    try:
        code, out, err = run_main(["eval", str(run), "--json"], capsys)
        assert code == 0, err
        assert json.loads(out)["mean_return"] == saved["mean_return"]  # exactly: 2 threads gave other last bits
        assert torch.get_num_threads() == 2  # put back
        policy = proxima.load(run)
        seen = []
        act = policy.batched_act
        policy.batched_act = lambda *a, **k: seen.append(torch.get_num_threads()) or act(*a, **k)
        assert evaluate(policy, episodes=10)["returns"] == saved["returns"]
        assert set(seen) == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)


# ------------------------------------------------------------------------------------ 5. evaluate()'s arguments
@pytest.mark.parametrize("kwargs, line", [
    (dict(episodes=0), "evaluate: episodes=0: must be an integer of at least 1"),
    (dict(episodes=2.5), "evaluate: episodes=2.5: must be an integer of at least 1"),
    (dict(max_steps=0), "evaluate: max_steps=0: must be an integer of at least 1"),
    (dict(seed=2**64), f"evaluate: seed={2**64}: must be None (the run's seed + 1,000,000) or an integer from 0 to 2,148,483,647"),
    (dict(seed=-1), "evaluate: seed=-1: must be None (the run's seed + 1,000,000) or an integer from 0 to 2,148,483,647"),
])
def test_evaluate_checks_its_arguments(kwargs, line):
    with pytest.raises(ValueError) as e:
        evaluate(_cartpole(), **{"episodes": 2, **kwargs})
    assert str(e.value) == line


def test_eval_cli_keeps_its_flag_lines(tmp_path, capsys):
    code, _, err = run_main(["eval", str(tmp_path), "--episodes", "0"], capsys)
    assert code == 2 and one_error_line(err, "proxima eval") == "--episodes 0: must be at least 1"


# ------------------------------------------------------------------------------------ 6. report of several runs
def _fake_run(root: Path, name: str, episodes: int, mean: float) -> Path:
    d = fake_run_dir(root, name, returns=(1.0, 1.0))
    (d / "eval.json").write_text(json.dumps({"env_id": "Fake-v0", "episodes": episodes, "mean_return": mean, "std_return": 0.0,
                                             "returns": [mean] * episodes, "lengths": [5] * episodes, "deterministic": True}))
    return d


def test_report_says_when_it_averages_evaluations_of_other_lengths(tmp_path):
    from proxima.report import build_report

    runs = [_fake_run(tmp_path, "a", 3, 10.0), _fake_run(tmp_path, "b", 3, 20.0), _fake_run(tmp_path, "c", 10, 30.0)]
    text = build_report(runs, out=tmp_path / "r.md", episodes=0).read_text()
    assert ("Final eval of Fake-v0 over 3 runs (their evaluations ran 3, 3 and 10 episodes; each run's mean counts once): "
            "mean 20.00, std (n-1) 10.00, min 10.00, max 30.00.") in text
    same = build_report(runs[:2], out=tmp_path / "s.md", episodes=0).read_text()
    assert "Final eval of Fake-v0 over 2 runs: mean 15.00," in same  # equal counts: the line as before
