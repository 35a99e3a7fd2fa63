"""Mutation-testing follow-up of test_ownenv47 (session 47's own-env review): what its tests left
unpinned. A bare module name's hint (Wrapper and own subclasses listed, VectorEnv and nested classes not,
a syntax error or a compiled module no crash, a module found in the current directory alone); Tuple/Dict
action advice (negative starts, a Dict of Discretes' factory, MultiDiscrete/MultiBinary entries of a mix,
an empty Tuple, a Text space) and the ClipAction note; success_rate over the episodes that reported it,
of each env's first episode only; the note's reset at a new train(); train(env=...) of a class, a
function, a wrapped env, a script's or a local class, and trainer.train's own refusal; check-env's reset
violations (reported once, a TypeError inside an unseeded reset kept as it is)."""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import re
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from proxima import PPOConfig
from proxima.envs import EnvError
from proxima.envs.checker import check_env
from proxima.envs.spaces import check_action_space, check_spaces
from proxima.evaluate import episode_seeds, success_note
from tests.cli_helpers import TINY_RUN, error_line, module_written_in, run_main
from tests.unit.test_ownenv47 import GYM_BASE

MOD = "own47m_env"

#: a torch-native env whose Box action range lies away from 0
NATIVE_BOX = '''
class NativeBox(NativeEnv):
    """a torch-native env whose Box action range [5, 10] lies away from 0"""

    max_episode_steps = 5

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
        self.single_action_space = gym.spaces.Box(5.0, 10.0, (1,), np.float32)

    def _sample_initial_state(self, n):
        return {"x": self._uniform((n,), -1.0, 1.0)}

    def _dynamics(self, action):
        return (torch.zeros(self.num_envs, device=self.device),
                torch.zeros(self.num_envs, dtype=torch.bool, device=self.device))

    def _observe(self):
        return self.state["x"].unsqueeze(1).clone()
'''

ENVS = '''
import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from proxima.envs import NativeEnv


''' + GYM_BASE + '''
class Partial(_Base):
    """3-step episodes; info["is_success"] (a numpy bool array of shape (1,): seed even) only where the
    episode's reset seed is not a multiple of 3; bad=True: the string 'False' there instead"""

    def __init__(self, bad=False):
        self.bad, self.seed0 = bad, 0

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.seed0 = seed
        return super().reset(seed=seed)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if truncated and self.seed0 % 3:
            info = {"is_success": "False" if self.bad else np.array([self.seed0 % 2 == 0])}
        return obs, reward, terminated, truncated, info


class FirstWins(_Base):
    """the first episode after a seeded reset succeeds, the later ones fail; 2 steps long where the seed
    is even, 7 where odd"""

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.seed0, self.ep = seed, 0
        else:
            self.ep = getattr(self, "ep", 0) + 1
        return super().reset(seed=seed)

    def step(self, action):
        self.t += 1
        end = self.t >= (2 if getattr(self, "seed0", 0) % 2 == 0 else 7)
        info = {"is_success": self.ep == 0} if end else {}
        return np.zeros(2, np.float32), 1.0, False, end, info


class NegTuple(_Base):
    action_space = spaces.Tuple((spaces.Discrete(3, start=-1), spaces.Discrete(2)))

    def step(self, action):
        self.last = action
        return super().step(0)


class DictDiscrete(_Base):
    action_space = spaces.Dict({"move": spaces.Discrete(3), "fire": spaces.Discrete(2, start=1)})

    def step(self, action):
        self.last = action
        return super().step(0)


class Scaled(_Base):
    action_space = spaces.Box(0.0, 2.0, (1,), np.float32)


def clipped(**kw):
    return gym.wrappers.ClipAction(Scaled(**kw))


def make_scaled(**kw):
    return Scaled(**kw)


class NoOptions(_Base):
    def reset(self, seed=None):  # a seed, no options
        return super().reset(seed=seed)


class InnerTypeError(_Base):
    """its own unseeded reset (the autoreset after an episode) fails inside with a TypeError"""

    def reset(self, *, seed=None, options=None):
        if seed is None:
            raise TypeError("helper() got an unexpected keyword argument 'options'")
        return super().reset(seed=seed)


''' + NATIVE_BOX



@pytest.fixture
def own_env(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, MOD, ENVS)


def _mod():
    return importlib.import_module(MOD)


def _train(capsys, run, target, *extra):
    return run_main(["train", f"{MOD}:{target}", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run), *extra], capsys)


# --- 1. a bare module name --------------------------------------------------------------------------------------------

HINT_MODULE = '''
import gymnasium as gym


class Wrap(gym.Wrapper):
    pass


class Vec(gym.vector.VectorEnv):
    pass


class Sub(Wrap):
    pass


class Plain:
    pass


def make():
    class Inner(gym.Env):
        pass

    return Inner()
'''


def _check_env_line(capsys, name: str) -> str:
    code, _, err = run_main(["check-env", name], capsys)
    return error_line(code, err)


def test_a_module_name_lists_wrappers_and_its_own_subclasses_not_vector_envs_or_nested_classes(own_env, tmp_path, capsys):
    (tmp_path / "own47m_hint.py").write_text(HINT_MODULE)
    line = _check_env_line(capsys, "own47m_hint")
    assert line.endswith("not an env id: name the env class in it, own47m_hint:ClassName, e.g. own47m_hint:Wrap (its env "
                         "classes: Wrap, Sub)")
    assert "own47m_hint" not in sys.modules  # read, not imported


def test_a_module_name_whose_file_has_a_syntax_error_or_no_env_class_gets_the_factory_wording(own_env, tmp_path, capsys):
    (tmp_path / "own47m_broken.py").write_text("import gymnasium as gym\n\n\nclass Broken(gym.Env):\n    def step(self\n")
    (tmp_path / "own47m_funcs.py").write_text("def make(**kw):\n    return None\n")
    for name in ("own47m_broken", "own47m_funcs"):
        line = _check_env_line(capsys, name)
        assert line == (f"proxima check-env: error: unknown env id '{name}'; '{name}' is a module ({tmp_path / name}.py), "
                        f"not an env id: name the env class in it, {name}:ClassName, or a factory function that returns "
                        f"one env, {name}:function")


def test_a_module_in_the_current_directory_alone_is_found(tmp_path, monkeypatch, capsys):
    # `proxima check-env myenvs` run from the folder of myenvs.py, which is not on sys.path (a console script's is its bin)
    (tmp_path / "own47m_cwd.py").write_text("import gymnasium as gym\n\n\nclass Walker(gym.Env):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    here = tmp_path.resolve()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".") and Path(p).resolve() != here])
    line = _check_env_line(capsys, "own47m_cwd")
    assert line.endswith("name the env class in it, own47m_cwd:ClassName, e.g. own47m_cwd:Walker (its env classes: Walker)")


def test_a_compiled_module_name_is_not_read_as_source(own_env, tmp_path, capsys):
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / f"own47m_ext{suffix}").write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe class Fake(gym.Env)")
    importlib.invalidate_caches()
    line = _check_env_line(capsys, "own47m_ext")
    assert "is a module" not in line
    assert line.startswith("proxima check-env: error: unknown env id 'own47m_ext'; see `proxima presets`")


# --- 2. Tuple and Dict action spaces --------------------------------------------------------------------------------

def _refusal(target: str) -> str:
    env = getattr(_mod(), target)()
    with pytest.raises(EnvError) as e:
        check_spaces(f"{MOD}:{target}", env.observation_space, env.action_space)
    return str(e.value)


def _factory_env(line: str):
    m = re.search(r"def multi\(\*\*kw\): (.*?) in a module of yours", line)
    assert m, line
    namespace = {"gymnasium": gym, "np": np, MOD: _mod()}
    exec(f"def multi(**kw):\n    {m.group(1)}", namespace)
    return namespace["multi"]()


def test_a_tuple_of_discretes_with_a_negative_start_keeps_the_starts(own_env):
    line = _refusal("NegTuple")
    assert "a Tuple of Discrete parts is MultiDiscrete([3, 2], start=[-1, 0]) (one categorical per part)" in line
    env = _factory_env(line)
    assert env.action_space == gym.spaces.MultiDiscrete([3, 2], start=[-1, 0])
    check_spaces("multi", env.observation_space, env.action_space)
    env.reset(seed=0)
    env.step(np.array([-1, 1]))
    assert tuple(int(x) for x in env.unwrapped.last) == (-1, 1)
    assert env.unwrapped.action_space.contains(tuple(env.unwrapped.last))


def test_a_dict_of_discretes_gets_a_factory_that_hands_the_env_a_dict(own_env):
    line = _refusal("DictDiscrete")
    # gymnasium sorts a Dict's keys: fire, move
    assert "a Dict of Discrete parts is MultiDiscrete([2, 3], start=[1, 0])" in line
    env = _factory_env(line)
    env.reset(seed=0)
    env.step(np.array([2, 0]))
    last = env.unwrapped.last
    assert isinstance(last, dict) and {k: int(v) for k, v in last.items()} == {"fire": 2, "move": 0}
    assert env.unwrapped.action_space.contains(last)


def test_a_mix_counts_multidiscrete_and_multibinary_parts_entry_by_entry():
    space = gym.spaces.Tuple((gym.spaces.MultiDiscrete([3, 3]), gym.spaces.MultiBinary(3), gym.spaces.Box(0.0, 1.0, (2,))))
    with pytest.raises(EnvError) as e:
        check_action_space(space, "X")
    assert "gymnasium.spaces.Box(-1.0, 1.0, (7,), np.float32)" in str(e.value)
    assert "mapping its 7 entries to the Tuple's parts" in str(e.value)


@pytest.mark.parametrize("space", [gym.spaces.Tuple(()), gym.spaces.Text(5)], ids=["empty-tuple", "text"])
def test_an_empty_tuple_or_a_text_space_is_refused_without_composite_advice(space):
    with pytest.raises(EnvError) as e:
        check_action_space(space, "X")
    assert str(e.value) == f"env 'X': not supported yet: action space {space} (Discrete, MultiDiscrete, MultiBinary, Box)"


def test_the_rescale_note_under_a_clip_action_names_no_factory(own_env):
    (note,) = [n for n in check_env(f"{MOD}:clipped", steps=5).notes if "RescaleAction" in n]
    assert note.endswith("nothing rescales them: wrap the env in gymnasium.wrappers.RescaleAction(env, np.float32(-1), "
                         "np.float32(1)) under its gymnasium.wrappers.ClipAction")
    assert "def rescaled" not in note


def test_train_names_the_rescale_factory_for_a_gymnasium_env_and_none_for_a_native_one(own_env, tmp_path, capsys):
    code, _, err = _train(capsys, tmp_path / "gym", "make_scaled")
    assert code == 0, err
    (note,) = [ln for ln in err.splitlines() if "RescaleAction" in ln]
    assert note.endswith(f"put def rescaled(**kw): return gymnasium.wrappers.RescaleAction({MOD}.make_scaled(**kw), "
                         "np.float32(-1), np.float32(1)) in a module of yours and use MODULE:rescaled as the env")
    code, _, err = _train(capsys, tmp_path / "native", "NativeBox")
    assert code == 0, err
    (note,) = [ln for ln in err.splitlines() if "RescaleAction" in ln]
    assert "def rescaled" not in note and "MODULE:" not in note


# --- 3. success_rate -----------------------------------------------------------------------------------------------

def _eval(capsys, run, target, episodes, seed, *extra):
    code, out, err = run_main(["eval", str(run), "--env", f"{MOD}:{target}", "--episodes", str(episodes), "--seed",
                               str(seed), *extra], capsys)
    assert code == 0, err
    return out, err


def test_success_rate_is_over_the_episodes_that_reported_is_success(own_env, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(capsys, run, "Partial", "--quiet")[0] == 0
    seeds = episode_seeds(7, 12)
    reported = [s for s in seeds if s % 3]
    assert 0 < len(reported) < len(seeds)  # some did not report
    rate = float(np.mean([s % 2 == 0 for s in reported]))
    assert 0 < rate < 1
    out, _ = _eval(capsys, run, "Partial", 12, 7, "--json")
    result = json.loads(out)
    assert result["success_rate"] == pytest.approx(rate)
    assert result["success_episodes"] == len(reported)
    out, _ = _eval(capsys, run, "Partial", 12, 7)
    assert (f"; success rate {rate:.2f} over the {len(reported)} episodes that reported info['is_success']"
            in out.splitlines()[0])


def test_success_rate_reads_each_envs_first_episode_only(own_env, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(capsys, run, "Partial", "--quiet")[0] == 0
    parity = {s % 2 for s in episode_seeds(7, 8)}
    assert parity == {0, 1}  # short first episodes that play on while the long ones finish
    out, _ = _eval(capsys, run, "FirstWins", 8, 7, "--json")
    result = json.loads(out)
    assert result["success_rate"] == 1.0 and "success_episodes" not in result


def test_a_new_train_notes_an_unusable_is_success_again(own_env, tmp_path, capsys):
    from proxima.envs import gym_adapter

    gym_adapter._SUCCESS_NOTE["said"] = True  # as an earlier run in this process left it
    code, _, err = _train(capsys, tmp_path / "run", "Partial", "--env-kwargs", '{"bad": true}', "--quiet")
    assert code == 0, err
    notes = [line for line in err.splitlines() if "is_success" in line]
    assert len(notes) == 1, err
    assert "= 'False' (str)" in notes[0] and notes[0].endswith("left out of charts/success_rate (this note is not repeated)")


def test_success_note_of_a_hand_edited_eval_json():
    assert success_note({"success_rate": True}) == ""
    assert success_note({"success_rate": 0.5, "success_episodes": True}) == ""  # no count an evaluation writes
    assert success_note({"success_rate": 0.5, "success_episodes": 3, "episodes": 5}) == (
        "; success rate 0.50 over the 3 episodes that reported info['is_success']")


# --- 4. train(config, env=...) ---------------------------------------------------------------------------------------

TAIL = ("Proxima builds num_envs copies of the env itself and records its id in the run to resume and evaluate it, "
        "so name it: PPOConfig(env_id={named}), a gymnasium.Env class or registered id, or 'module:function' of a "
        "factory that returns one env")


def _refused(env, train=None) -> str:
    import proxima

    with pytest.raises(TypeError) as e:
        (train or proxima.train)(PPOConfig(env_id="CartPole-v1", total_timesteps=64), env=env)
    return str(e.value)


def test_train_env_of_a_class_a_function_or_a_wrapped_env_names_its_module(own_env):
    mod = _mod()
    assert _refused(mod.Scaled) == f"train() takes no env= (the class Scaled): {TAIL.format(named=repr(f'{MOD}:Scaled'))}"
    assert _refused(mod.make_scaled) == (f"train() takes no env= (the function make_scaled): "
                                         f"{TAIL.format(named=repr(f'{MOD}:make_scaled'))}")
    wrapped = gym.wrappers.TimeLimit(mod.Scaled(), 5)
    assert _refused(wrapped) == f"train() takes no env= (a TimeLimit): {TAIL.format(named=repr(f'{MOD}:Scaled'))}"


def test_train_env_of_a_scripts_class_or_a_local_class_names_what_to_give(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing is written, even by a train() that took the env
    script = type("ScriptEnv", (gym.Env,), {"__module__": "__main__"})
    assert _refused(script) == f"train() takes no env= (the class ScriptEnv): {TAIL.format(named=repr('its_module:ScriptEnv'))}"

    class Local(gym.Env):
        pass

    assert _refused(Local()) == f"train() takes no env= (a Local): {TAIL.format(named=repr('module:ClassName'))}"


def test_trainer_train_refuses_env_itself(own_env):
    from proxima import trainer

    assert _refused(_mod().Scaled, train=trainer.train) == (
        f"train() takes no env= (the class Scaled): {TAIL.format(named=repr(f'{MOD}:Scaled'))}")


# --- 5. check-env's reset violations ------------------------------------------------------------------------------------

def test_a_reset_without_options_is_one_violation_reported_once(own_env):
    violations = check_env(f"{MOD}:NoOptions", steps=20)
    assert [(v.check, v.actual) for v in violations] == [
        ("reset", "TypeError: NoOptions.reset() got an unexpected keyword argument 'options' (declare the parameters: "
                  "def reset(self, *, seed=None, options=None), calling super().reset(seed=seed) first (it seeds "
                  "self.np_random))")]


def test_a_type_error_inside_an_unseeded_reset_is_reported_as_it_is(own_env):
    (violation,) = check_env(f"{MOD}:InnerTypeError", steps=20)
    assert violation.check == "autoreset"
    assert violation.actual.startswith("reset() after the episode ended at step 3 raised TypeError: helper() got an "
                                       "unexpected keyword argument 'options'")
