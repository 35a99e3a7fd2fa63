"""Review 29, the policy's attributes: train()'s TrainedPolicy no longer passes the Agent's submodules
(``encoder``, ``actor``, ``critic``), which take normalized observations or their features, through to raw
ones (1), and load()'s Policy refuses what TrainedPolicy refuses, in the same line, where it gave a bare
AttributeError (2); both still copy and pickle (3)."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import proxima
from proxima import checkpoint as ckpt
from proxima.agent import Agent
from proxima.config import PPOConfig

SMALL = dict(num_envs=4, num_steps=16, threads=1, progress=False)
NORM = "policy.obs_normalizer(obs, update=False)"


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    """A norm_obs CartPole run: its network on raw observations gives other values than on the policy's inputs."""
    run = tmp_path_factory.mktemp("a") / "R"
    run_dir, trained = proxima.train(PPOConfig(env_id="CartPole-v1", norm_obs=True, total_timesteps=128, eval_episodes=0,
                                               run_dir=str(run), **SMALL), quiet=True)
    obs = torch.as_tensor(np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32) * 3)
    return run_dir, trained, obs


def feature_line(cls: str, name: str) -> str:
    return (f"{cls}.{name}: policy.agent's {name} takes the features of normalized observations, the policy raw ones; "
            f"call policy.agent.{name}(policy.agent.features({NORM})), obs a tensor on policy.device")


# --- 1. the Agent's submodules ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["critic", "actor"])
def test_trained_policy_refuses_the_heads_and_the_advice_gives_the_policys_values(cartpole_run, name):
    _, trained, obs = cartpole_run
    with pytest.raises(AttributeError) as e:  # was: the Agent's head, fed the raw observation as a feature
        getattr(trained, name)
    assert str(e.value) == feature_line("TrainedPolicy", name)
    head = getattr(trained.agent, name)
    with torch.no_grad():
        advised = head(trained.agent.features(trained.obs_normalizer(obs, update=False)))
        raw = head(obs)  # what trained.critic(obs) gave
    assert not torch.allclose(advised, raw)
    if name == "critic":
        torch.testing.assert_close(advised.squeeze(-1), trained.agent.get_value(trained.obs_normalizer(obs, update=False)))
    else:  # the actions act() takes are the advised head's
        assert torch.equal(advised.argmax(-1), trained.batched_act(obs))
    assert trained.encoder_kind == "mlp" and trained.kind == "discrete"  # the Agent's other attributes still answer
    assert len(list(trained.parameters())) == len(list(trained.agent.parameters()))


def test_a_flat_box_policy_refuses_encoder_saying_there_is_none(cartpole_run):
    _, trained, _ = cartpole_run
    assert trained.agent.encoder is None
    with pytest.raises(AttributeError) as e:  # was: None, the README listing encoder among what answers
        trained.encoder
    assert str(e.value) == ("TrainedPolicy.encoder: policy.agent has no encoder (None: its features are its observations); "
                            f"call policy.agent.features({NORM}), obs a tensor on policy.device")


def test_without_a_normalizer_the_submodules_answer_for_inspection():
    """The submodules are refused only under an obs normalizer: without one the policy's inputs are the
    network's, and `policy.encoder.encoders` (inspection, as the pixel tests do) must keep working."""
    from proxima.trainer import TrainedPolicy

    space = gym.spaces.Dict({"a": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "b": gym.spaces.Box(-1.0, 1.0, (3,), np.float32)})
    act = gym.spaces.Discrete(2)
    agent = Agent(space, act)
    assert isinstance(agent.encoder, torch.nn.Module)
    agent.add_module("aux", torch.nn.Linear(4, 1))  # an Agent of another make: a head of its own
    policy = TrainedPolicy(agent, None, {"env_id": "X-v0"}, space, act, "cpu")
    assert policy.encoder is agent.encoder and policy.aux is agent.aux and policy.critic is agent.critic
    with pytest.raises(AttributeError) as e:  # the methods that take observations stay refused
        policy.get_value
    assert str(e.value).startswith("TrainedPolicy.get_value(): the policy does not pass observations to its network's")
    assert policy.nvec == [2] and policy.encoder_kind == "mlp"  # plain attributes still answer


def test_readme_no_longer_lists_encoder_among_what_answers():
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "python_api.md").read_text().split())  # README's API
    assert "(`parameters()`, `state_dict()`, `encoder`) answer through the policy" not in text
    assert "`policy_step()`), nor, under `norm_obs`, its submodules (`encoder`, `actor`, `critic`): they want them normalized" in text
    assert "`load(run_dir)`'s policy answers these names in the same words" in text


# --- 2. load()'s Policy -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["to", "cuda", "double", "float", "get_value", "policy", "critic", "actor", "encoder"])
def test_a_loaded_policy_refuses_in_trained_policys_words(cartpole_run, name):
    run_dir, trained, _ = cartpole_run
    loaded = proxima.load(run_dir)
    assert type(loaded) is ckpt.Policy
    with pytest.raises(AttributeError) as e:  # was: "'Policy' object has no attribute 'to'"
        getattr(loaded, name)
    with pytest.raises(AttributeError) as t:
        getattr(trained, name)
    line = str(e.value)
    assert line == str(t.value).replace("TrainedPolicy.", "Policy.", 1)
    assert line.startswith(f"Policy.{name}") and "policy.agent" in line and "\n" not in line
    if name == "critic":
        assert line == feature_line("Policy", "critic")


def test_a_loaded_policy_keeps_its_own_attributes_and_passes_nothing_else_through(cartpole_run):
    run_dir, trained, obs = cartpole_run
    loaded = proxima.load(run_dir)
    assert loaded.eval() is loaded and isinstance(loaded.agent, Agent) and loaded.obs_normalizer is not None
    assert loaded.env_id == "CartPole-v1" and loaded.device == torch.device("cpu") and loaded.config["norm_obs"] is True
    assert torch.equal(loaded.batched_act(obs), trained.batched_act(obs))
    loaded.check_env_spaces(gym.make("CartPole-v1"))
    for name in ("parameters", "kind", "nope"):  # no delegation: TrainedPolicy passes these, Policy never did
        with pytest.raises(AttributeError) as e:
            getattr(loaded, name)
        # a name the network has (TrainedPolicy answers it) says where it is; any other is Python's own line
        where = f"; the network's is policy.agent.{name}" if name != "nope" else ""
        assert str(e.value) == f"'Policy' object has no attribute {name!r}{where}"
    assert getattr(loaded, "to", None) is None  # refusals are AttributeErrors: hasattr/getattr defaults hold


# --- 3. copies and pickles ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["trained", "loaded"])
@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copies_and_pickles_of_both_act_alike_and_refuse_alike(cartpole_run, which, how):
    run_dir, trained, obs = cartpole_run
    policy = trained if which == "trained" else proxima.load(run_dir)
    twin = copy.deepcopy(policy) if how == "deepcopy" else pickle.loads(pickle.dumps(policy))
    assert type(twin) is type(policy) and twin.agent is not policy.agent
    assert torch.equal(twin.batched_act(obs), policy.batched_act(obs))
    with pytest.raises(AttributeError) as e:
        twin.critic
    assert str(e.value) == feature_line(type(policy).__name__, "critic")


def test_a_pixel_policys_encoder_answers_and_its_refusals_say_nothing_of_norm_obs(tmp_path):
    """Review 29d: an image run cannot have --norm-obs, yet the refusals spoke of it; and its encoder, whose
    input is the policy's own raw pixels, was refused (the pixel tests read policy.encoder.encoders)."""
    run = tmp_path / "pix"
    _, trained = proxima.train(PPOConfig(env_id="PixelQuadrant-v0", num_envs=2, num_steps=16, total_timesteps=32,
                                         eval_episodes=0, threads=1, progress=False, run_dir=str(run)), quiet=True)
    assert trained.encoder is trained.agent.encoder
    with pytest.raises(AttributeError) as e:
        proxima.load(run).get_value
    assert "norm_obs" not in str(e.value) and "policy.agent.get_value(obs)" in str(e.value), e.value
