"""Review 47, deploying a trained policy from Python: Gymnasium's (obs, info) pair and a list of Dict
observations are one-line ValueErrors (1); ``policy.as_module()`` is a torch.nn.Module that torch.jit.trace and
torch.export take and that acts as ``policy.act`` does (2); ``load(run, best=True)`` loads best.pt (3); an SB3
zip or a TorchScript file is "not a Proxima checkpoint", not a corrupted one (4); ``policy.save`` says where
the saved model is (5); the repr shows a Discrete/MultiDiscrete start (6); check_env_spaces names the env
it was given (8)."""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import proxima
from proxima import PPOConfig, tanh_cpu
from proxima.agent import Agent
from proxima.checkpoint import CheckpointError, Policy
from proxima.envs.spaces import obs_layout, pack_numpy

TINY = dict(num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, threads=1, progress=False)
#: numpy's tanh (PROXIMA_CPU_TANH=numpy) is not torch's: there the module's Box actions may differ in the last bits
EXACT = tanh_cpu.MODE != "numpy"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A CartPole run with --eval-every (so a best.pt) and a Pendulum --norm-obs run, trained once."""
    root = tmp_path_factory.mktemp("deploy47")
    proxima.train(PPOConfig(env_id="CartPole-v1", total_timesteps=128, eval_every=64, eval_episodes=1, **TINY),
                  run_dir=root / "cartpole", quiet=True, evaluate_at_end=False)
    proxima.train(PPOConfig(env_id="Pendulum-v1", total_timesteps=64, norm_obs=True, eval_episodes=0, **TINY),
                  run_dir=root / "pendulum", quiet=True, evaluate_at_end=False)
    return root


def assert_same_actions(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    if EXACT or not got.is_floating_point():
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


# --- 1. (obs, info) pairs and lists of dicts ------------------------------------------------------------------------
def test_a_reset_pair_is_one_line_naming_the_unpacking(runs):
    policy = proxima.load(runs / "cartpole")
    env = gym.make("CartPole-v1")
    line = "obs is a (obs, info) pair as env.reset() returns it: pass obs (obs, info = env.reset())"
    with pytest.raises(ValueError) as e:
        policy.act(env.reset(seed=0))
    assert str(e.value) == f"Policy.act: {line}"
    with pytest.raises(ValueError) as e:
        policy.predict(env.reset(seed=0))
    assert str(e.value) == f"Policy.predict: {line}"
    obs, _ = env.reset(seed=0)
    assert policy.act(obs) in (0, 1)  # the observation alone still acts


def dict_policy(action_space: gym.spaces.Space) -> Policy:
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float64),
                             "vel": gym.spaces.Box(-5.0, 5.0, (3,), np.float32)})
    torch.manual_seed(0)
    return Policy(Agent(space, action_space), None, {"env_id": "Dicty-v0"}, space, action_space, "cpu")


def test_a_list_of_dict_observations_asks_for_one_dict_of_stacked_arrays():
    policy = dict_policy(gym.spaces.Discrete(3))
    rows = [{"pos": np.zeros(2), "vel": np.ones(3)}, {"pos": np.ones(2), "vel": np.zeros(3)}]
    with pytest.raises(ValueError) as e:
        policy.act(rows)
    assert str(e.value) == ("Policy.act: obs is a list of 2 dicts: give one dict of stacked arrays ({key: (B, ...)}), "
                            "{k: np.stack([o[k] for o in obs]) for k in obs[0]}")
    with pytest.raises(ValueError) as e:  # a Dict env's reset pair: its info shares no key with the observation
        policy.predict((rows[0], {"seed": 0}))
    assert "obs is a (obs, info) pair as env.reset() returns it" in str(e.value)
    stacked = {k: np.stack([o[k] for o in rows]) for k in rows[0]}
    assert policy.act(stacked).shape == (2,)


# --- 2. as_module: trace and export act as policy.act ---------------------------------------------------------------
def random_obs(n: int, dim: int) -> torch.Tensor:
    return torch.randn(n, dim, generator=torch.Generator().manual_seed(47)) * 3


@pytest.mark.parametrize("run,dim", [("cartpole", 4), ("pendulum", 3)])
def test_the_traced_and_exported_module_act_as_policy_act(runs, run, dim, tmp_path):
    policy = proxima.load(runs / run)
    module = policy.as_module()
    assert isinstance(module, torch.nn.Module) and not module.training
    assert all(p.device.type == "cpu" for p in module.parameters())
    obs = random_obs(300, dim)
    want = policy.act(obs)
    assert_same_actions(module(obs), want)
    torch.jit.trace(module, obs[:2]).save(str(tmp_path / "policy_ts.pt"))  # docs/python_api.md's files
    assert_same_actions(torch.jit.load(str(tmp_path / "policy_ts.pt"))(obs), want)
    exported = torch.export.export(module, (obs[:2],), dynamic_shapes={"obs": {0: torch.export.Dim("batch")}})
    torch.export.save(exported, tmp_path / "policy.pt2")
    assert_same_actions(torch.export.load(tmp_path / "policy.pt2").module()(obs), want)
    if run == "pendulum":  # the normalizer is applied, and the actions clipped to the bounds
        assert policy.obs_normalizer is not None and module.obs_normalizer is not None
        assert float(want.abs().max()) <= 2.0


def test_the_docs_export_block_writes_files_that_act_as_policy_act(runs, tmp_path, monkeypatch):
    page = (Path(__file__).resolve().parents[2] / "docs" / "python_api.md").read_text()
    block, = [b for b in re.findall(r"^```python\n(.*?)^```", page, flags=re.S | re.M) if "as_module()" in b]
    (tmp_path / "runs").mkdir()
    shutil.copytree(runs / "cartpole", tmp_path / "runs" / "cartpole")
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(block, ns)
    obs = random_obs(300, 4)
    want = ns["policy"].act(obs)
    assert torch.equal(torch.jit.load("policy_ts.pt")(obs), want)
    assert torch.equal(torch.export.load("policy.pt2").module()(obs), want)


def test_the_module_holds_copies_of_the_weights(runs):
    policy = proxima.load(runs / "pendulum")
    module = policy.as_module()
    obs = random_obs(8, 3)
    before = module(obs)
    with torch.no_grad():
        for p in policy.agent.parameters():
            p.add_(1.0)
    policy.obs_normalizer.rms.mean.add_(1.0)
    assert torch.equal(module(obs), before)


def test_the_module_offsets_shapes_and_types_actions_as_the_action_space():
    spaces = [gym.spaces.Discrete(3, start=1), gym.spaces.MultiDiscrete([2, 3], start=[1, -1]),
              gym.spaces.MultiBinary((2, 2)), gym.spaces.Box(-0.5, 0.5, (2, 2), np.float64),
              gym.spaces.Box(-1, 2, (3,), np.int32)]
    for space in spaces:
        policy = dict_policy(space)
        with torch.no_grad():
            policy.agent.actor[-1].weight.mul_(300.0)  # Box means far past the bounds: the clip is exercised
        obs = {"pos": np.random.default_rng(1).uniform(-1, 1, (64, 2)), "vel": np.random.default_rng(2).normal(0, 3, (64, 3))}
        want = torch.as_tensor(policy.act(obs))
        packed = torch.as_tensor(pack_numpy(obs, obs_layout(policy.observation_space), 64))
        module = policy.as_module()
        assert module.keys == ["pos", "vel"]
        assert_same_actions(torch.jit.trace(module, packed[:2])(packed), want)
    assert int(want.min()) == -1 and int(want.max()) == 2  # the int Box's rounded actions reach both bounds


# --- 3. load(run, best=True) ----------------------------------------------------------------------------------------
def test_load_best_loads_the_runs_best_checkpoint(runs):
    policy = proxima.load(runs / "cartpole", best=True)
    assert Path(policy.path) == runs / "cartpole" / "checkpoints" / "best.pt"
    assert proxima.load(runs / "cartpole" / "checkpoints", best=True).path == policy.path


def test_load_best_without_a_best_checkpoint_names_the_run_and_eval_every(runs):
    with pytest.raises(CheckpointError) as e:
        proxima.load(runs / "pendulum", best=True)
    assert str(e.value) == f"{runs / 'pendulum'}: no checkpoints/best.pt (written when training with eval_every=N, --eval-every N)"
    step = sorted((runs / "pendulum" / "checkpoints").glob("step_*.pt"))[-1]
    with pytest.raises(CheckpointError) as e:
        proxima.load(step, best=True)
    assert str(e.value) == (f"{step}: best=True takes a run directory (it loads RUN/checkpoints/best.pt); to load this "
                            "file, drop best=True")


# --- 4. another format's zip ----------------------------------------------------------------------------------------
FOREIGN = ("not a Proxima checkpoint (a zip archive of another format, such as a Stable-Baselines3 model or a "
           "TorchScript file)")


def test_an_sb3_model_and_a_torchscript_file_are_not_proxima_checkpoints(tmp_path):
    sb3 = tmp_path / "sb3_model.zip"
    with zipfile.ZipFile(sb3, "w", zipfile.ZIP_DEFLATED) as z:  # SB3's layout: deflated JSON 'data', 'policy.pth'
        z.writestr("data", '{"policy_class": {":type:": "<class \'abc.ABCMeta\'>"}}')
        z.writestr("policy.pth", b"\x00" * 256)
        z.writestr("_stable_baselines3_version", "2.3.2")
    script = tmp_path / "policy_ts.pt"
    torch.jit.trace(torch.nn.Linear(4, 2), torch.zeros(1, 4)).save(str(script))
    for path in (sb3, script):
        with pytest.raises(CheckpointError) as e:
            proxima.load(path)
        assert str(e.value) == f"{path}: {FOREIGN}"


def test_a_damaged_proxima_zip_is_still_corrupted(runs, tmp_path):
    step = sorted((runs / "cartpole" / "checkpoints").glob("step_*.pt"))[-1]
    bad = tmp_path / "step_000000000128.pt"
    shutil.copy(step, bad)
    with zipfile.ZipFile(step) as src, zipfile.ZipFile(bad, "w", zipfile.ZIP_DEFLATED) as z:  # recompressed records
        for name in src.namelist():
            z.writestr(name, src.read(name))
    with pytest.raises(CheckpointError) as e:
        proxima.load(bad)
    assert str(e.value).startswith(f"{bad}: corrupted checkpoint (record '")


# --- 5, 6, 8: save, repr, check_env_spaces --------------------------------------------------------------------------
def test_policy_save_says_where_the_saved_model_is(runs):
    policy = proxima.load(runs / "pendulum")
    with pytest.raises(AttributeError) as e:
        policy.save("x")
    assert str(e.value) == (f"Policy.save(): a policy is saved by its run as it trains: {policy.path} is the saved "
                            "model, and load(path) reloads it (a run directory: its newest); copy that file to keep it "
                            "(the run keeps only its newest checkpoints), or export the network with policy.as_module()")


def test_the_repr_shows_a_start_other_than_0():
    assert "actions=Discrete(3, start=1)," in repr(dict_policy(gym.spaces.Discrete(3, start=1)))
    assert "actions=MultiDiscrete([2, 3], start=[1, 0])," in repr(dict_policy(gym.spaces.MultiDiscrete([2, 3], start=[1, 0])))
    assert "actions=Discrete(3)," in repr(dict_policy(gym.spaces.Discrete(3)))
    assert "actions=MultiDiscrete([2, 3])," in repr(dict_policy(gym.spaces.MultiDiscrete([2, 3])))


class _Unregistered(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)


def test_check_env_spaces_names_the_env_it_was_given(runs):
    policy = proxima.load(runs / "cartpole")
    with pytest.raises(proxima.checkpoint.EnvMismatchError) as e:
        policy.check_env_spaces(gym.make("Acrobot-v1"))
    assert str(e.value).endswith("; env 'Acrobot-v1' has Box(..., (6,), float32) and Discrete(3)")
    with pytest.raises(proxima.checkpoint.EnvMismatchError) as e:
        policy.check_env_spaces(_Unregistered())
    assert str(e.value).endswith("; env '_Unregistered' has Box(..., (3,), float32) and Discrete(2)")
