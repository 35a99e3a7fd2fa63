"""A user's own Gymnasium env, second review: flags and rewards of the wrong type (train and check-env
take the same rule), sys.exit() inside reset/step, a file path given as the env's module, an env
that edits its action in place, and what a failed run leaves behind."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from proxima.envs import EnvError, make_env
from proxima.envs.checker import check_env
from proxima.envs import gym_adapter
from cli_helpers import error_line, run_main

ROOT = Path(__file__).resolve().parents[2]
MODULE = "quirk2_envs"
SOURCE = textwrap.dedent('''
    import sys
    import numpy as np
    import gymnasium as gym
    from gymnasium import spaces


    class Base(gym.Env):
        """Episodes of 5 steps, reward 1; subclasses return one quirk."""
        observation_space = spaces.Box(-1, 1, (2,), np.float32)
        action_space = spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(2, np.float32), {}

        def step(self, a):
            self.t += 1
            return np.zeros(2, np.float32), self.reward(), self.flag(self.t >= 5), False, {}

        def reward(self):
            return 1.0

        def flag(self, done):
            return done


    class TermStr(Base):
        def flag(self, done):
            return "False"


    class TermNone(Base):
        def flag(self, done):
            return None


    class TermInt(Base):
        def flag(self, done):
            return int(done)


    class TermArray1(Base):
        def flag(self, done):
            return np.array([done])


    class RewardBool(Base):
        def reward(self):
            return True


    class RewardNpBool(Base):
        def reward(self):
            return np.bool_(True)


    class TermNpBool(Base):
        def flag(self, done):
            return np.bool_(done)


    class Term0d(Base):
        def flag(self, done):
            return np.array(done)


    class RewardInt0d(Base):
        def reward(self):
            return np.array(2)


    class ExitInStep(Base):
        def step(self, a):
            if self.t == 2:
                sys.exit("simulator license expired")
            return super().step(a)


    class ExitInReset(Base):
        def reset(self, *, seed=None, options=None):
            sys.exit(3)


    class Raises(Base):
        """Raises at its env step ``at`` (an exception, for the run-directory test)."""
        def __init__(self, at=3):
            self.at, self.n = at, 0

        def step(self, a):
            self.n += 1
            if self.n == self.at:
                raise RuntimeError("simulator lost")
            return super().step(a)


    class MutatesAction(Base):
        action_space = spaces.Box(-1, 1, (2,), np.float32)

        def step(self, a):
            a *= 0.0
            return super().step(a)
''')
#: (class, check-env's check that fails, or None where both take it)
TYPES = [("TermStr", "terminated type"), ("TermNone", "terminated type"), ("TermInt", "terminated type"),
         ("TermArray1", "terminated type"), ("RewardBool", "reward type"), ("RewardNpBool", "reward type"),
         ("TermNpBool", None), ("Term0d", None), ("RewardInt0d", None)]


@pytest.fixture(scope="module", autouse=True)
def envs_module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("quirks2")
    (folder / f"{MODULE}.py").write_text(SOURCE)
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(MODULE, None)


def _step_until_error(name: str, steps: int = 12):
    """The EnvError the adapter raises within ``steps`` vector steps of 2 envs, or None."""
    env = make_env(f"{MODULE}:{name}", 2, device="cpu", backend="gymnasium", seed=0)
    try:
        env.reset(seed=0)
        for _ in range(steps):
            env.step(torch.zeros(2, dtype=torch.long))
    except EnvError as e:
        return e
    finally:
        env.close()
    return None


@pytest.mark.parametrize("name, check", TYPES, ids=[t[0] for t in TYPES])
def test_train_and_check_env_take_the_same_flags_and_rewards(name, check):
    """"False" (a str) ended every episode after one step in training and None never ended one, while
    check-env failed them; a bool reward failed check-env and trained. One rule now, both sides."""
    found = [v.check for v in check_env(f"{MODULE}:{name}", steps=12)]
    error = _step_until_error(name)
    if check is None:
        assert found == [] and error is None, (found, error)
        return
    assert found == [check], found
    assert error is not None, f"train took what check-env refuses ({check})"
    what = check.split()[0]
    assert str(error).startswith(f"env '{MODULE}:{name}': env 0 returned {'a ' if what == 'reward' else ''}{what} of "), error
    assert " at env step 1; " in str(error) and f"(check with: proxima check-env {MODULE}:{name})" in str(error)
    assert (gym_adapter.FLAG_RULE if what == "terminated" else gym_adapter.REWARD_RULE) in str(error)


def test_the_flag_error_names_the_type_and_value_and_check_env_says_train_refuses_it_too(capsys):
    error, FLAG_RULE = _step_until_error("TermStr"), gym_adapter.FLAG_RULE
    assert str(error) == (f"env '{MODULE}:TermStr': env 0 returned terminated of type str ('False') at env step 1; "
                          f"step() returns terminated as {FLAG_RULE} (check with: proxima check-env {MODULE}:TermStr)")
    code, out, _ = run_main(["check-env", f"{MODULE}:TermStr", "--steps", "3"], capsys)
    assert code == 1
    assert out.splitlines()[0] == (f"FAIL terminated type: expected terminated: {FLAG_RULE}, which proxima train takes; "
                                   "got str 'False' at step 1 (and 2 more times)")


def test_sys_exit_in_step_is_one_line_and_exit_2_from_train(tmp_path, capsys):
    code, _, err = run_main(["train", f"{MODULE}:ExitInStep", "--backend", "gymnasium", "--num-envs", "2", "--num-steps", "8",
                             "--num-minibatches", "2", "--total-timesteps", "16", "--eval-episodes", "0", "--no-progress",
                             "--threads", "1", "--run-dir", str(tmp_path / "run")], capsys)
    line = error_line(code, err, f"env '{MODULE}:ExitInStep': env 0 ended the process with sys.exit('simulator license expired') "
                                 "(exit status 1) (quirk2_envs.py:", ") at env step 3 (action 0); raise an exception instead")
    assert line.startswith("proxima train: error: ")


def test_sys_exit_in_reset_is_one_line_from_the_adapter():
    with pytest.raises(EnvError) as e:
        make_env(f"{MODULE}:ExitInReset", 2, device="cpu", backend="gymnasium").reset(seed=0)
    assert str(e.value).startswith(f"env '{MODULE}:ExitInReset': env 0 ended the process with sys.exit(3) (exit status 3) "
                                   "(quirk2_envs.py:")
    assert "at reset (after env step 0); raise an exception instead" in str(e.value)


@pytest.mark.parametrize("name, check, where", [("ExitInStep", "step", ") at step 3 raised SystemExit: "),
                                                 ("ExitInReset", "reset", "reset(seed=0) raised SystemExit: ")])
def test_check_env_reports_sys_exit_as_a_violation(name, check, where, capsys):
    code, out, err = run_main(["check-env", f"{MODULE}:{name}", "--steps", "5"], capsys)
    assert (code, err) == (1, ""), err
    lines = out.splitlines()
    assert lines[-1] == f"1 violation(s) in {MODULE}:{name}"
    assert lines[0].startswith(f"FAIL {check}: ") and where in lines[0], lines[0]
    assert "sys.exit(" in lines[0] and "exit status" in lines[0]


@pytest.mark.parametrize("given, fix", [
    ("quirk2_path.py:Env", "use quirk2_path:Env"),
    ("sub/quirk2_path.py:Env", "use sub.quirk2_path:Env (a package: pkg.sub.envs:Name) or, with PYTHONPATH=sub, quirk2_path:Env"),
    ("./quirk2_path.py:Env", "use quirk2_path:Env"),
])
def test_a_file_path_as_the_module_gets_the_module_form(given, fix, tmp_path, monkeypatch, capsys):
    (tmp_path / "sub").mkdir()
    for where in (tmp_path, tmp_path / "sub"):
        (where / "quirk2_path.py").write_text(f"from {MODULE} import Base as Env\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # put back as it was: the import adds the current directory
    monkeypatch.delitem(sys.modules, "quirk2_path", raising=False)
    code, out, err = run_main(["check-env", given], capsys)
    line = error_line(code, err, f"'{given.partition(':')[0]}' is a file path", fix)
    assert "is it in the current directory" not in line and out == ""
    sys.modules.pop("quirk2_path", None)


def test_mutating_the_action_does_not_reach_the_rollout_and_check_env_says_so(capsys):
    """Each env gets a copy of its action (spaces.space_actions): an env that zeroes it leaves the rollout's
    actions as the agent sampled them; check-env still reports the edit, without claiming corruption."""
    from proxima import ppo
    from proxima.agent import Agent, action_dtype, action_shape
    from proxima.rollout import Rollout

    env = make_env(f"{MODULE}:MutatesAction", 2, device="cpu", backend="gymnasium", seed=0)
    try:
        torch.manual_seed(0)
        space = env.single_action_space
        agent = Agent(env.single_observation_space, space)
        rollout = Rollout(4, 2, env.obs_shape, action_shape(space), action_dtype(space), "cpu")
        sampled = []

        def policy_step(obs):
            action, logprob, value = agent.policy_step(obs)
            sampled.append(action.clone())
            return action, logprob, value

        ppo.collect_rollout(env, policy_step, rollout, env.reset(seed=0))
        assert torch.equal(rollout.actions, torch.stack(sampled)) and bool(rollout.actions.abs().gt(0).all())
    finally:
        env.close()
    code, out, _ = run_main(["check-env", f"{MODULE}:MutatesAction", "--steps", "3"], capsys)
    assert code == 1 and out.splitlines()[0].startswith("FAIL action not mutated: ")
    assert "corrupts the stored actions" not in out and "rollouts are safe" in out


def test_a_run_that_fails_after_its_first_iteration_keeps_what_it_wrote_as_the_readme_says(tmp_path, capsys):
    argv = ["train", f"{MODULE}:Raises", "--backend", "gymnasium", "--num-envs", "2", "--num-steps", "8",
            "--num-minibatches", "2", "--total-timesteps", "64", "--eval-episodes", "0", "--no-progress", "--threads", "1"]
    code, _, err = run_main([*argv, "--env-kwargs", '{"at": 3}', "--run-dir", str(tmp_path / "early")], capsys)
    error_line(code, err, "simulator lost")
    assert not (tmp_path / "early").exists()  # failed in its first iteration: nothing kept
    code, _, err = run_main([*argv, "--env-kwargs", '{"at": 20}', "--run-dir", str(tmp_path / "late")], capsys)
    error_line(code, err, "simulator lost", "env step 20")
    assert {"config.yaml", "metrics.csv"} <= {p.name for p in (tmp_path / "late").iterdir()}
    readme = " ".join((ROOT / "docs" / "cli.md").read_text().split())  # the README's command-line details
    status = readme[readme.index("Exit status: 0 done;"):]
    status = status[:status.index("143 after SIGTERM")]
    assert "no run directory is created" not in status
    assert "fails before its first iteration ends leaves no run directory" in status
    assert "one that fails later keeps what it wrote: `config.yaml`, `metrics.csv`" in status
