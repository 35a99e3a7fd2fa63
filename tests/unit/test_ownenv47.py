"""Bringing your own Gymnasium env (session 47's review): an env whose episodes never end gets check-env's
note and no autoreset pass; an old-gym reset(self) is told its fix; evaluation reports success_rate from
info["is_success"] (eval.json, `proxima eval`, --json), and the note on an unusable value is printed once,
worded for the evaluation in `proxima eval`; train(env=...) names env_id; Tuple/Dict action spaces, a
factory returning a vector env, --video of an env that cannot render, the RescaleAction note and a bare
module name each say what to do."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import numpy as np
import pytest

from proxima import PPOConfig
from proxima.envs import EnvError
from proxima.envs.checker import check_env
from proxima.envs.spaces import check_spaces
from proxima.evaluate import episode_seeds
from tests.cli_helpers import TINY_RUN, error_line, module_written_in, run_main

ENV_MODULE = "own47_env"

#: a 3-step Gymnasium env with a Box(2,) observation and Discrete(2) actions, which the envs below refine
GYM_BASE = '''
class _Base(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 1.0, False, self.t >= 3, {}


'''

OWN_ENVS = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


''' + GYM_BASE + '''
class Endless(_Base):
    """terminated and truncated are never true"""

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


class OldReset(_Base):
    def reset(self):  # gym 0.21: no seed, no options
        self.t = 0
        return np.zeros(2, np.float32), {}


class Goal(_Base):
    """3-step episodes; the last step's is_success is True where the episode's reset seed is even
    (report=False: no key; bad: that value instead)"""

    def __init__(self, report=True, bad=None):
        self.report, self.bad, self.seed0 = report, bad, 0

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.seed0 = seed
        return super().reset(seed=seed)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if truncated and self.report:
            info = {"is_success": self.bad if self.bad is not None else np.bool_(self.seed0 % 2 == 0)}
        return obs, reward, terminated, truncated, info


class TupleAct(_Base):
    action_space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))

    def step(self, action):
        self.last = action
        return super().step(0)


class DictBoxAct(_Base):
    action_space = spaces.Dict({"arm": spaces.Box(-1.0, 1.0, (2,), np.float32), "grip": spaces.Box(0.0, 1.0, (3,), np.float32)})

    def step(self, action):
        self.last = action
        return super().step(0)


class MixedAct(_Base):
    action_space = spaces.Tuple((spaces.Discrete(3), spaces.Box(0.0, 1.0, (2,), np.float32)))


class Scaled(_Base):
    action_space = spaces.Box(0.0, 2.0, (1,), np.float32)


def vec(**kw):
    return gym.vector.SyncVectorEnv([lambda: Endless()])
'''


@pytest.fixture
def own_env(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, ENV_MODULE, OWN_ENVS)


def _train(capsys, run, target, *extra):
    return run_main(["train", f"{ENV_MODULE}:{target}", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run), *extra],
                    capsys)


def _factory(line: str, name: str) -> str:
    """The ``def NAME(**kw): ...`` a refusal or note spells out, as the user would paste it."""
    m = re.search(rf"def {name}\(\*\*kw\): (.*?) in a module of yours", line)
    assert m, line
    body = m.group(1).replace("; return", "\n    return").replace("env = ", "\n    env = ", 1)
    return f"def {name}(**kw):\n    " + body.strip() if "\n" in body else f"def {name}(**kw):\n    {body}"


def _build_factory(line: str, name: str):
    import importlib

    namespace = {"gymnasium": gym, "np": np, ENV_MODULE: importlib.import_module(ENV_MODULE)}
    exec(_factory(line, name), namespace)
    return namespace[name]()


# --- 1. episodes that never end -----------------------------------------------------------------------------------

def test_check_env_of_an_env_whose_episodes_never_end_notes_it_and_does_not_pass_autoreset(own_env, capsys):
    violations = check_env(f"{ENV_MODULE}:Endless", steps=50)
    assert list(violations) == []
    assert "autoreset" not in violations.checks_run
    assert violations.notes == [
        "no episode ended in 50 steps (max_episode_steps = None): autoreset was not checked; no time limit: give more "
        "--steps if its episodes end later, else wrap it in gymnasium.wrappers.TimeLimit(env, max_episode_steps=N) in a "
        "module:function factory (or gymnasium.register it "
        "with max_episode_steps), or check that terminated can become true (an episode that never ends plays train's "
        "final evaluation to its 100,000-step cap)"]
    code, out, _ = run_main(["check-env", f"{ENV_MODULE}:Endless", "--steps", "50"], capsys)
    assert code == 0
    assert out.splitlines()[0].startswith("NOTE no episode ended in 50 steps")
    assert out.splitlines()[-1] == f"OK: {ENV_MODULE}:Endless passes {len(violations.checks_run)} checks"


def test_check_env_of_a_registered_env_with_a_time_limit_beyond_the_steps_says_give_more_steps():
    violations = check_env("CartPole-v1", steps=5, seed=0)
    # a random CartPole episode can end in 5 steps only by falling: seed 0's does not
    assert "autoreset" not in violations.checks_run
    assert violations.notes[-1].endswith("autoreset was not checked; give --steps above 500")


# --- 2. an old-gym reset(self) -----------------------------------------------------------------------------------

RESET_FIX = "def reset(self, *, seed=None, options=None), calling super().reset(seed=seed) first (it seeds self.np_random)"


def test_check_env_of_a_reset_without_seed_names_the_signature_to_declare(own_env):
    (violation,) = check_env(f"{ENV_MODULE}:OldReset")
    assert violation.check == "reset"
    assert violation.actual == ("TypeError: OldReset.reset() got an unexpected keyword argument 'seed' "
                                f"(declare the parameters: {RESET_FIX})")


def test_train_of_a_reset_without_seed_names_the_signature_to_declare(own_env, tmp_path, capsys):
    code, _, err = _train(capsys, tmp_path / "run", "OldReset")
    line = error_line(code, err, "unexpected keyword argument 'seed'")
    assert line.endswith(f"; reset() must take seed, as Gymnasium's vector envs call it: {RESET_FIX}")


# --- 3. success_rate in evaluations -------------------------------------------------------------------------------

def _rate(seed: int, episodes: int) -> float:
    """Goal's success rate over an evaluation of ``seed``: episode i is a success where its reset seed is even."""
    return float(np.mean([s % 2 == 0 for s in episode_seeds(seed, episodes)]))


def test_eval_json_and_proxima_eval_report_the_success_rate_of_is_success(own_env, tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = _train(capsys, run, "Goal", "--eval-episodes", "8", "--seed", "3", "--quiet")
    assert code == 0, err
    saved = json.loads((run / "eval.json").read_text())
    assert saved["success_rate"] == _rate(1_000_003, 8)
    assert "success_episodes" not in saved  # every episode reported

    code, out, err = run_main(["eval", str(run), "--env", f"{ENV_MODULE}:Goal", "--episodes", "12", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["success_rate"] == _rate(1_000_003, 12)
    code, out, err = run_main(["eval", str(run), "--env", f"{ENV_MODULE}:Goal", "--episodes", "12"], capsys)
    assert code == 0, err
    assert f"; success rate {_rate(1_000_003, 12):.2f}" in out.splitlines()[0]


def test_an_env_that_reports_no_is_success_has_no_success_rate(own_env, tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = _train(capsys, run, "Goal", "--eval-episodes", "2", "--env-kwargs", '{"report": false}', "--quiet")
    assert code == 0, err
    saved = json.loads((run / "eval.json").read_text())
    assert "success_rate" not in saved and "success_episodes" not in saved
    code, out, _ = run_main(["eval", str(run), "--env", f"{ENV_MODULE}:Goal", "--episodes", "2"], capsys)
    assert code == 0 and "success" not in out


def test_an_unusable_is_success_is_noted_once_by_train_and_worded_for_the_evaluation_by_eval(own_env, tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = _train(capsys, run, "Goal", "--eval-episodes", "2", "--env-kwargs", '{"bad": "yes"}', "--quiet")
    assert code == 0, err
    notes = [line for line in err.splitlines() if "is_success" in line]
    assert len(notes) == 1, err  # training's; not again by the end-of-run evaluation
    assert notes[0].endswith("such values are left out of charts/success_rate (this note is not repeated)")
    assert "success_rate" not in json.loads((run / "eval.json").read_text())

    from proxima.envs import gym_adapter

    gym_adapter.reset_success_note()  # another process, as `proxima eval` is
    code, _, err = run_main(["eval", str(run), "--env", f"{ENV_MODULE}:Goal", "--episodes", "2"], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "is_success" in line]
    assert notes == [f"proxima: note: env '{ENV_MODULE}:Goal': env 0's info['is_success'] = 'yes' (str) at env step 3 is "
                     "no bool or number in [0, 1]: such values are left out of the evaluation's success_rate (this note "
                     "is not repeated)"]


# --- 4. train(config, env=...) -------------------------------------------------------------------------------------

def test_train_with_an_env_object_names_env_id_and_why(own_env):
    import importlib

    import proxima

    cls = importlib.import_module(ENV_MODULE).Goal
    with pytest.raises(TypeError) as e:
        proxima.train(PPOConfig(env_id="CartPole-v1"), env=cls())
    assert str(e.value) == (
        "train() takes no env= (a Goal): Proxima builds num_envs copies of the env itself and records its id in the run "
        f"to resume and evaluate it, so name it: PPOConfig(env_id='{ENV_MODULE}:Goal'), a gymnasium.Env class or "
        "registered id, or 'module:function' of a factory that returns one env")
    with pytest.raises(TypeError, match=r"PPOConfig\(env_id='CartPole-v1'\)"):
        proxima.train(PPOConfig(env_id="CartPole-v1"), env=gym.make("CartPole-v1"))
    with pytest.raises(TypeError, match="^train\\(\\) got an unexpected keyword argument 'total_steps'$"):
        proxima.train(PPOConfig(env_id="CartPole-v1"), total_steps=64)


# --- 5. Tuple and Dict action spaces ---------------------------------------------------------------------------------

def _refusal(target: str) -> str:
    import importlib

    env = getattr(importlib.import_module(ENV_MODULE), target)()
    with pytest.raises(EnvError) as e:
        check_spaces(f"{ENV_MODULE}:{target}", env.observation_space, env.action_space)
    return str(e.value)


def test_a_tuple_of_discretes_is_refused_with_its_multidiscrete_and_a_factory_that_works(own_env):
    line = _refusal("TupleAct")
    assert "a Tuple of Discrete parts is MultiDiscrete([2, 3]) (one categorical per part)" in line
    env = _build_factory(line, "multi")  # the factory the line spells out, pasted into a module
    assert env.action_space == gym.spaces.MultiDiscrete([2, 3])
    check_spaces("multi", env.observation_space, env.action_space)
    env.reset(seed=0)
    env.step(np.array([1, 2]))
    assert env.unwrapped.last == (1, 2)


def test_a_dict_of_boxes_is_refused_with_its_concatenated_box_and_a_factory_that_works(own_env):
    line = _refusal("DictBoxAct")
    assert "its Box parts concatenate into one Box([-1. -1.  0.  0.  0.], 1.0, (5,), float32)" in line
    env = _build_factory(line, "flat")
    check_spaces("flat", env.observation_space, env.action_space)
    env.reset(seed=0)
    env.step(np.array([0.5, -0.5, 0.1, 0.2, 0.3], np.float32))
    assert {k: v.tolist() for k, v in env.unwrapped.last.items()} == {"arm": [0.5, -0.5], "grip": pytest.approx([0.1, 0.2, 0.3])}


def test_mixed_action_parts_are_refused_with_split_it_in_the_env(own_env):
    line = _refusal("MixedAct")
    assert "its parts mix kinds that one policy head cannot sample together: split it in the env" in line
    assert "gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)" in line  # the Discrete as one entry, the Box's 2


# --- 6. a factory that returns a vector env ----------------------------------------------------------------------------

def test_a_factory_returning_a_vector_env_is_told_to_return_one_env(own_env):
    (violation,) = check_env(f"{ENV_MODULE}:vec")
    assert violation.check == "build"
    assert violation.actual == (f"'{ENV_MODULE}:vec' did not return a gymnasium.Env (got SyncVectorEnv); return one env: "
                                "Proxima builds --num-envs copies itself (--vector async for subprocesses)")


# --- 7. --video of an env that cannot render ----------------------------------------------------------------------------

def test_eval_video_of_an_env_without_rendering_says_how_to_add_it(own_env, tmp_path, capsys):
    run = tmp_path / "run"
    assert _train(capsys, run, "Goal", "--quiet")[0] == 0
    code, _, err = run_main(["eval", str(run), "--env", f"{ENV_MODULE}:Goal", "--episodes", "1", "--video",
                             str(tmp_path / "v.mp4")], capsys)
    line = error_line(code, err, "renders no frames")
    assert line.endswith("; to record it, declare metadata = {'render_modes': ['rgb_array'], 'render_fps': 30} on its "
                         "class, take render_mode=None in __init__ (self.render_mode = render_mode) and return an (H, W, 3) "
                         "uint8 array from render() when it is 'rgb_array'; evaluate without --video")
    assert not (tmp_path / "v.mp4").exists()


# --- 8. where RescaleAction goes for a module:Class env ----------------------------------------------------------------

def test_the_rescale_note_of_a_class_spells_out_the_factory_that_wraps_it(own_env):
    violations = check_env(f"{ENV_MODULE}:Scaled", steps=5)
    (note,) = [n for n in violations.notes if "RescaleAction" in n]
    assert note.endswith(f"wrap it in gymnasium.wrappers.RescaleAction: put def rescaled(**kw): return gymnasium.wrappers."
                         f"RescaleAction({ENV_MODULE}.Scaled(**kw), np.float32(-1), np.float32(1)) in a module of yours "
                         "and use MODULE:rescaled as the env")
    env = _build_factory(note, "rescaled")
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float32)


# --- 9. a bare module name ----------------------------------------------------------------------------------------------

def test_check_env_of_a_module_name_names_its_env_classes(own_env, capsys):
    code, _, err = run_main(["check-env", ENV_MODULE], capsys)
    line = error_line(code, err)
    assert line.startswith(f"proxima check-env: error: unknown env id '{ENV_MODULE}'; '{ENV_MODULE}' is a module (")
    assert line.endswith(f"not an env id: name the env class in it, {ENV_MODULE}:ClassName, e.g. {ENV_MODULE}:Endless (its "
                         "env classes: Endless, OldReset, Goal, TupleAct, DictBoxAct, MixedAct, Scaled)")
