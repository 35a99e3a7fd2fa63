"""Mutation testers' findings in session 47's deploy (3c2ab65) and migration-hint (e7f029c) work: a torch.export
.pt2 given to proxima.load, the (obs, info) pair of a Dict env whose info holds the observation's keys, a 1-tuple
of a dict, policy.as_module's actions beside act's above the mlp_cpu kernel's rows; migration notes for a value
nested past Python's stack, long values and keys, widths no network takes, bench's --num-iterations, net_arch's
equal pi/vf at the top level and the batch_size note in the names the file used.

Nothing trains: policies are untrained Agents, configs are only loaded, commands stop at argument parsing."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import proxima
from proxima.agent import Agent
from proxima.checkpoint import CheckpointError, Policy
from proxima.config import ConfigError, from_dict
from tests.cli_helpers import error_line, run_main

VEC = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
DICT = gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float64),
                        "vel": gym.spaces.Box(-5.0, 5.0, (3,), np.float32)})
PAIR = "Policy.act: obs is a (obs, info) pair as env.reset() returns it: pass obs (obs, info = env.reset())"


def make_policy(obs_space, action_space) -> Policy:
    torch.manual_seed(0)
    return Policy(Agent(obs_space, action_space), None, {"env_id": "Left-v0"}, obs_space, action_space, "cpu")


def act_refusal(policy, obs) -> str:
    with pytest.raises(ValueError) as e:
        policy.act(obs)
    return str(e.value)


def refusal(values: dict) -> str:
    with pytest.raises(ConfigError) as e:
        from_dict(values, source="f.yml")
    return str(e.value)


# --- A1. a torch.export program is another format, not a corrupted checkpoint ----------------------------------------
def test_a_torch_export_program_is_named_with_the_call_that_loads_it(tmp_path):
    path = tmp_path / "policy.pt2"  # what docs/python_api.md's 'Exporting the policy' writes
    torch.export.save(torch.export.export(torch.nn.Linear(4, 2), (torch.zeros(2, 4),)), str(path))
    with pytest.raises(CheckpointError) as e:
        proxima.load(path)
    assert str(e.value) == (f"{path}: not a Proxima checkpoint (a torch.export program (.pt2): load it with "
                            "torch.export.load)")


# --- A2. (obs, info) whose info holds every observation key; a 1-tuple --------------------------------------------
def test_an_info_holding_the_observation_keys_and_more_is_the_reset_pair():
    policy = make_policy(DICT, gym.spaces.Discrete(3))
    obs = {"pos": np.zeros(2), "vel": np.ones(3)}
    assert act_refusal(policy, (obs, {"pos": 0.5, "vel": 1.0, "x": 3})) == PAIR  # not a batch of 2 observations
    assert act_refusal(policy, (obs, dict(obs))).startswith("Policy.act: obs is a tuple of 2 dicts: give one dict")


def test_a_one_tuple_of_a_dict_is_one_dict_in_a_tuple():
    policy = make_policy(DICT, gym.spaces.Discrete(3))
    obs = {"pos": np.zeros(2), "vel": np.ones(3)}
    assert act_refusal(policy, (obs,)) == ("Policy.act: obs is a tuple of 1 dict: give the dict itself (obs[0]); a "
                                           "batch is one dict of stacked arrays ({key: (B, ...)})")
    assert act_refusal(policy, [obs]).startswith("Policy.act: obs is a list of 1 dict: give the dict itself")


# --- A3. as_module: act's actions exactly up to kernel_rows, within float32 rounding above -----------------------
def test_the_module_is_act_exactly_up_to_the_kernels_rows_and_within_rounding_above():
    policy = make_policy(VEC, gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    module = policy.as_module()
    rows = policy.agent.actor.kernel_rows
    assert rows == 4096  # 64-wide layers, as docs/python_api.md says
    obs = np.random.default_rng(47).uniform(-1, 1, (rows + 1000, 3)).astype(np.float32)
    small = torch.from_numpy(obs[:rows])
    assert torch.equal(module(small), torch.from_numpy(policy.act(obs[:rows])))
    got, want = module(torch.from_numpy(obs)), torch.from_numpy(policy.act(obs))
    assert not torch.equal(got, want)  # mlp_cpu's kernel: another float32 rounding (the docs say so) ...
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)  # ... and no more


# --- B4. a value nested past Python's stack --------------------------------------------------------------------------
def test_a_net_arch_nested_past_the_stack_is_one_config_error():
    deep = [64]
    for _ in range(1200):
        deep = [deep]
    line = refusal({"policy_kwargs": {"net_arch": deep}})  # RecursionError from the notes' repr before
    assert line.startswith("f.yml: unknown field 'policy_kwargs' (did you mean 'hidden_sizes'? net_arch=[64, 64] is ")
    assert refusal({"normalize": {"clip_obs": deep}}).startswith("f.yml: unknown field 'normalize' (did you mean")


# --- B5. echoed values and keys are cut as refusals cut them ---------------------------------------------------------
def test_long_mapping_values_and_keys_are_cut_short():
    line = refusal({"normalize": {"clip_obs": "x" * 5000}})
    assert line == ("f.yml: unknown field 'normalize' (normalize: {'clip_obs': '" + "x" * 43 + "... is norm_obs: true, "
                    "norm_reward: true, clip_obs: '" + "x" * 56 + "...)")
    assert refusal({"policy_kwargs": {"k" * 5000: 1}}) == (
        "f.yml: unknown field 'policy_kwargs' (" + "k" * 57 + "...: no counterpart here; drop it)")
    many = refusal({"policy_kwargs": {f"key{i}": 1 for i in range(1000)}})
    assert many.endswith("key5, key6, and 993 more: no counterpart here; drop them)") and len(many) < 200


# --- B6. widths no network takes are not hidden_sizes ----------------------------------------------------------------
def test_a_width_beyond_any_network_is_not_echoed_as_hidden_sizes():
    line = refusal({"policy_kwargs": "dict(net_arch=[" + "9" * 1900 + "])"})
    assert line == ("f.yml: unknown field 'policy_kwargs' (net_arch [" + "9" * 56 + "...: hidden_sizes is one list "
                    "of widths)")
    assert "hidden_sizes: [" not in refusal({"policy_kwargs": {"net_arch": {"pi": [2**21], "vf": [2**21]}}})
    assert refusal({"policy_kwargs": {"net_arch": [2**20]}}) == "f.yml: unknown field 'policy_kwargs' (hidden_sizes: [1048576])"


# --- B7. bench's derived-key hint ------------------------------------------------------------------------------------
def test_bench_names_num_iterations_as_derived(capsys):
    code, _, err = run_main(["bench", "CartPole-v1", "--num-iterations", "5"], capsys)
    assert error_line(code, err) == ("proxima bench: error: unrecognized arguments: --num-iterations 5; "
                                     "--num-iterations: derived (--total-timesteps / (--num-envs x --num-steps)): "
                                     "drop it (see proxima bench --help)")


# --- B8. net_arch's pi/vf: the same at the top level as in policy_kwargs -------------------------------------------
def test_equal_pi_and_vf_are_hidden_sizes_at_the_top_level_as_in_policy_kwargs():
    assert refusal({"net_arch": {"pi": [64], "vf": [64]}}) == "f.yml: unknown field 'net_arch' (hidden_sizes: [64] (pi and vf alike))"
    assert refusal({"policy_kwargs": {"net_arch": {"pi": [64], "vf": [64]}}}) == (
        "f.yml: unknown field 'policy_kwargs' (hidden_sizes: [64] (pi and vf alike))")
    different = refusal({"net_arch": {"pi": [64], "vf": [32]}})
    assert "separate pi/vf sizes" in different and "are not supported" in different
    assert "separate pi/vf sizes" in refusal({"policy_kwargs": {"net_arch": {"pi": [64], "vf": [32]}}})


# --- B9. the batch_size note in the file's own names -----------------------------------------------------------------
@pytest.mark.parametrize("envs, steps", [("num_envs", "num_steps"), ("n_envs", "n_steps"), ("num_envs", "n_steps")])
def test_the_one_minibatch_note_names_the_files_keys(envs, steps):
    line = refusal({envs: 4, steps: 128, "batch_size": 1024})
    assert line.endswith(f"(num_minibatches: 1 here: it counts minibatches, 1 when batch_size >= {envs} x {steps})")
