"""A review of writing one's own env (docs/native_envs.md): a native env that raises partway through
training or an evaluation ends with one line naming the hook, the user's line and the step (as a
Gymnasium env's does), and check-env's FAIL step names the step. check-env fails a native env whose observations lie outside
its single_observation_space, as it fails a Gymnasium env's."""

from __future__ import annotations

import pytest

from tests.cli_helpers import error_line, module_written_in, run_main

MODULE = '''
import gymnasium as gym, numpy as np, torch
from proxima.envs import NativeEnv


class PointMass(NativeEnv):
    max_episode_steps = 100

    def __init__(self, num_envs=1, device="cpu", seed=None, at=0):
        super().__init__(num_envs, device=device, seed=seed)
        self.at, self.calls = at, 0
        self.single_observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
        self.single_action_space = gym.spaces.Discrete(3)

    def _sample_initial_state(self, n):
        return {"x": self._uniform((n,), -5.0, 5.0), "v": torch.zeros(n, device=self.device)}

    def _dynamics(self, action):
        self.calls += 1
        if self.calls == self.at:
            raise RuntimeError("boom late")  # line 21
        push = action.reshape(self.num_envs).to(torch.float32) - 1.0
        v = 0.9 * self.state["v"] + 0.1 * push
        x = (self.state["x"] + v).clamp(-10.0, 10.0)
        self.state["x"], self.state["v"] = x, v
        terminated = (x.abs() < 0.1) & (v.abs() < 0.1)
        return torch.where(terminated, 1.0, -0.01 * x.abs()), terminated

    def _observe(self):
        return torch.stack([self.state["x"], self.state["v"]], dim=1)


class Yes(gym.Env):  # a Gymnasium env whose episodes end after 5 steps reporting is_success as a string
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t >= 5
        return np.zeros(2, np.float32), 1.0, done, False, ({"is_success": "yes"} if done else {})


class Far(PointMass):
    def _observe(self):  # a velocity column 50 beyond the declared Box(-10, 10)
        return torch.stack([self.state["x"], self.state["v"] + 60.0], dim=1)
'''

RUN = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--no-progress",
       "--threads", "1"]


@pytest.fixture
def user(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "own49", MODULE)


def test_a_native_env_that_raises_mid_run_ends_train_with_one_line_naming_step_and_checkpoint(user, capsys):
    # the 210th _dynamics call is env step 210 (2 envs: global step 420), in iteration 14 of 16 steps; beyond
    # check-env's 200 steps, which the failure's diagnosis runs (and then finds nothing)
    code, _, err = run_main(["train", "own49:PointMass", "--env-kwargs", '{"at": 210}', *RUN, "--total-timesteps", "448",
                             "--eval-episodes", "0", "--checkpoint-every", "1", "--run-dir", "runs/r"], capsys)
    line = error_line(code, err, "boom late")
    # was: a traceback through cli, trainer, graphs, ppo, guards and envs/base.py ending 'RuntimeError: boom late', exit 1
    assert line == ("proxima train: error: env 'own49:PointMass': native env raised RuntimeError: boom late in _dynamics "
                    "(own49.py:21) at env step 210; global step 420; last good checkpoint: "
                    "runs/r/checkpoints/step_000000000416.pt")


def test_a_native_env_that_raises_in_eval_ends_with_one_line_naming_the_evaluation_step(user, capsys):
    code, _, err = run_main(["train", "own49:PointMass", *RUN, "--total-timesteps", "32", "--eval-episodes", "0",
                             "--run-dir", "runs/ok"], capsys)
    assert code == 0, err
    code, _, err = run_main(["eval", "runs/ok", "--env", "own49:PointMass", "--env-kwargs", '{"at": 7}'], capsys)
    line = error_line(code, err, "boom late")
    assert line == ("proxima eval: error: env 'own49:PointMass': native env raised RuntimeError: boom late in _dynamics "
                    "(own49.py:21) at evaluation step 7")


def test_check_env_names_the_step_a_native_env_raised_at(user, capsys):
    code, out, err = run_main(["check-env", "own49:PointMass", "--env-kwargs", '{"at": 9}'], capsys)
    assert code == 1, out + err
    fails = [line for line in out.splitlines() if line.startswith("FAIL")]
    # was: '... got RuntimeError: boom late (own49.py:21)', no step (the Gymnasium checks say 'at step 7')
    assert fails == ["FAIL step: expected step() does not raise; got RuntimeError: boom late (own49.py:21) at step 9"]


def test_check_env_fails_a_native_env_whose_observations_leave_the_declared_box(user, capsys):
    code, out, err = run_main(["check-env", "own49:Far"], capsys)
    assert code == 1, out + err
    fails = [line for line in out.splitlines() if line.startswith("FAIL")]
    # was: 'OK: own49:Far passes 17 checks', while train --debug-checks stops at the first reset
    assert fails == ["FAIL obs bounds: expected obs[1] in [-10, 10] (single_observation_space low/high); got obs[1] = 60 "
                     "of env 0, above high[1] = 10, at reset (2 of 4 entries out of bounds)"]


def test_check_env_passes_a_native_env_within_its_box_and_counts_obs_bounds(user, capsys):
    code, out, err = run_main(["check-env", "own49:PointMass"], capsys)
    assert code == 0, out + err
    assert "OK: own49:PointMass passes 18 checks" in out  # 17 before "obs bounds"


def test_an_evaluation_of_a_native_env_with_no_time_limit_says_to_set_max_episode_steps():
    from proxima.evaluate import MAX_STEPS, format_result

    result = {"env_id": "own49:NoLimit", "episodes": 2, "mean_return": -3.0, "std_return": 1.0, "deterministic": True,
              "backend": "native", "max_steps": MAX_STEPS, "unfinished": 2}
    # was: '... give the env a time limit (gymnasium.wrappers.TimeLimit, or max_episode_steps when registering it)'
    assert format_result(result) == (
        f"own49:NoLimit: -3.00 +- 1.00 over 2 episodes (deterministic); all of them cut at {MAX_STEPS:,} steps (--max-steps), "
        "with their return so far; no episode ended: give the env a time limit (max_episode_steps = N, a class "
        "attribute of the NativeEnv), or check that _dynamics' terminated can become true")
    gym_line = format_result({**result, "env_id": "own49:make", "backend": "gymnasium"})
    assert gym_line.endswith("give the env a time limit (gymnasium.wrappers.TimeLimit, or max_episode_steps when "
                             "registering it)")


def test_check_env_notes_an_is_success_that_training_leaves_out_of_the_success_rate(user, capsys):
    code, out, err = run_main(["check-env", "own49:Yes"], capsys)
    assert code == 0, out + err
    notes = [line for line in out.splitlines() if line.startswith("NOTE")]
    # was: no note, while train notes "... is no bool or number in [0, 1]: such values are left out of charts/success_rate"
    assert notes == ["NOTE info['is_success'] = 'yes' (str) at step 5 is no bool or number in [0, 1]: training leaves "
                     "such values out of charts/success_rate (return a bool, or a number in [0, 1])"]
    assert out.splitlines()[-1] == "OK: own49:Yes passes 20 checks"


def test_a_population_whose_members_all_have_eval_json_prints_its_report_command_without_env(user, capsys):
    train = ["train", "own49:PointMass", "--seeds", "1-2", *RUN, "--total-timesteps", "32"]
    code, out, err = run_main([*train, "--eval-episodes", "2", "--run-dir", "runs/p"], capsys)
    assert code == 0, err
    # was: 'report: proxima report --env own49:PointMass runs/p', which then noted '--env ... did nothing'
    assert "report: proxima report runs/p" in out.splitlines()
    code, out, err = run_main(["report", "runs/p"], capsys)
    assert code == 0 and "did nothing" not in err, err
    # without an end-of-run evaluation the report evaluates the members: it needs --env to import the module
    code, out, err = run_main([*train, "--eval-episodes", "0", "--run-dir", "runs/q"], capsys)
    assert code == 0, err
    assert "report: proxima report --env own49:PointMass runs/q" in out.splitlines()


@pytest.fixture
def registering(tmp_path, monkeypatch):
    """trunc49.py (env classes) and ns49.py (registers 'myns49/Const-v0' at its import), beside the user."""
    (tmp_path / "trunc49.py").write_text(MODULE)
    yield from module_written_in(tmp_path, monkeypatch, "ns49", 'import gymnasium as gym\n\n'
                                 'gym.register("myns49/Const-v0", entry_point="trunc49:Yes", max_episode_steps=10)\n')
    import sys

    import gymnasium as gym

    sys.modules.pop("trunc49", None)
    gym.registry.pop("myns49/Const-v0", None)


def test_a_dotted_env_id_whose_module_defines_the_class_is_told_the_module_colon_class_form(registering, capsys):
    code, _, err = run_main(["check-env", "trunc49.Yes"], capsys)
    # was: "unknown env id 'trunc49.Yes'; ... given with that module, MODULE:trunc49.Yes", which failed again
    assert error_line(code, err, "trunc49") == ("proxima check-env: error: unknown env id 'trunc49.Yes'; did you mean "
                                                "trunc49:Yes? (an env of your own module is given as module:Name, with a colon)")
    code, out, err = run_main(["check-env", "trunc49:Yes"], capsys)
    assert code == 0, out + err
    code, _, err = run_main(["check-env", "trunc49.Nope"], capsys)  # no such name in it: the usual line
    assert "MODULE:trunc49.Nope" in error_line(code, err, "trunc49.Nope")


def test_a_module_id_missing_its_namespace_is_told_the_id_the_module_registered(registering, capsys):
    code, _, err = run_main(["check-env", "ns49:Const-v0"], capsys)
    # was: the same line with no suggestion
    assert error_line(code, err, "ns49") == (
        "proxima check-env: error: module 'ns49' has no attribute 'Const-v0', nor did importing it register an env id "
        "'Const-v0' (env 'ns49:Const-v0'); did you mean ns49:myns49/Const-v0?")
    code, out, err = run_main(["check-env", "ns49:myns49/Const-v0"], capsys)
    assert code == 0, out + err
