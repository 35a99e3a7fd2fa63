"""The Atari --env-kwargs values, same_game, the backend checks of eval/resume and the compiled-step
copies, at the level of the functions (review 36's mutation survivors): no backend is built."""

from __future__ import annotations

import types

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima import accel, run_setup
from proxima.config import PPOConfig
from proxima.envs import EnvError, atari, same_game


@pytest.mark.parametrize("kwargs, want", [
    ({"repeat_action_probability": True}, "repeat_action_probability for the Atari id 'Pong-v5' must be a number from 0 to 1"),
    ({"max_episode_steps": 0}, "max_episode_steps for the Atari id 'Pong-v5' must be an integer from 1 to 536,870,911"),
    ({"max_episode_steps": True}, "max_episode_steps for the Atari id 'Pong-v5' must be an integer from 1 to 536,870,911"),
    ({"max_episode_steps": 10**12}, "must be an integer from 1 to 536,870,911 \\(agent steps\\), got 1000000000000"),
    ({"full_action_space": "false"}, "full_action_space for the Atari id 'Pong-v5' must be true or false"),
    ({"full_action_space": 1}, "full_action_space for the Atari id 'Pong-v5' must be true or false"),
])
def test_an_atari_setting_of_the_wrong_kind_is_refused(kwargs, want):
    """true is no probability (1.0: every frame repeats the last action) nor a step count (1-step
    episodes); the string "false" is truthy (all 18 actions)."""
    with pytest.raises(EnvError, match=want):
        atari.atari_settings("Pong-v5", kwargs)


def test_numpy_numbers_from_python_are_numbers_and_kept_as_python_ones():
    got = atari.atari_settings("Pong-v5", {"max_episode_steps": np.int64(100), "repeat_action_probability": 1})
    assert got["max_episode_steps"] == 100 and type(got["max_episode_steps"]) is int
    assert got["repeat_action_probability"] == 1.0 and type(got["repeat_action_probability"]) is float


def test_same_game_matches_spellings_of_one_game_only():
    assert same_game("ALE/tennis-v5", "ALE/Tennis-v5")  # no backend installed: names outside KNOWN_GAMES as typed
    assert not same_game("CartPole-v1", "MyEnv-v0")  # two ids that are no games are not "one game"
    assert not same_game("CartPole-v1", "CartPole-v1")  # same_env's business, not this


def test_a_users_own_lower_case_v5_id_is_theirs():
    gym.register("pong-v5", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    try:
        assert atari.game_name("pong-v5") is None
    finally:
        gym.registry.pop("pong-v5")
    assert atari.game_name("pong-v5") == "Pong"


def test_a_backend_gymnasium_resume_and_a_non_atari_eval_are_left_to_their_builds(monkeypatch):
    monkeypatch.setattr(atari, "has_ale", lambda: False)
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    # typed --backend gymnasium when it trained: make_env's line names the packages, not "(--backend auto)"
    assert run_setup.resumed_backend(PPOConfig(env_id="Pong-v5", backend="gymnasium"),
                                     {"env_backend": "gymnasium", "path": "x"}) is None
    policy = types.SimpleNamespace(config={"backend": "envpool"}, env_id="CartPole-v1", path="p")
    run_setup.check_eval_backend(policy, None)  # no game: nothing to say about EnvPool


def test_each_compiled_step_is_a_code_object_of_its_own_in_a_region_of_its_own(monkeypatch):
    class Owner:
        def step(self, x):
            return x + 1

    def f(x):
        return x

    f.marker = 1
    copy = accel.own_code(f)
    assert copy.__code__ is not f.__code__ and copy.__code__.co_code == f.__code__.co_code and copy.marker == 1
    owner = Owner()
    bound = accel.own_code(owner.step)
    assert bound.__self__ is owner and bound.__func__.__code__ is not Owner.step.__code__ and bound(1) == 2
    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: seen.append(kw) or fn)
    trainer = types.SimpleNamespace(cfg=PPOConfig(compile=True), policy_step=lambda obs: obs, model=None,
                                    optimizer=types.SimpleNamespace(step=lambda: None), autocast=None, scaler=None,
                                    dist=types.SimpleNamespace(world_size=1))
    monkeypatch.setattr(accel.ppo, "make_grad_step", lambda *a, **k: (lambda mb: mb))
    monkeypatch.setattr(accel, "setup_compile_cache", lambda: None)
    accel.accelerate(trainer)
    assert len(seen) == 2 and all(kw.get("isolate_recompiles") is True for kw in seen)


def test_check_env_tells_a_bad_atari_setting_before_the_missing_ale(monkeypatch, capsys):
    """As train does: installing ale-py would not fix a wrong key, so the key is what the line names."""
    from tests.cli_helpers import error_line, run_main

    monkeypatch.setattr(atari, "has_ale", lambda: False)
    code, _, err = run_main(["check-env", "ALE/Pong-v5", "--env-kwargs", '{"bogus": 1}'], capsys)
    assert "takes only repeat_action_probability" in error_line(code, err) and "needs ale-py" not in err
