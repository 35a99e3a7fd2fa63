"""A user's own torch-native env (a NativeEnv subclass named module:Class): built natively by train,
eval, resume, --seeds and check-env, with the trust rules of a Gymnasium module:Class; its hooks'
dtypes checked once; max_episode_steps 0 meaning no time limit; docs/native_envs.md's example run as
written. Also check-env's hint reaching the failing step, and a missing info told as such."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import torch

from proxima.envs import EnvError, make_env
from tests.cli_helpers import FIXTURES, TINY_POP, TINY_RUN, error_line, run_main

DOC = Path(__file__).resolve().parents[2] / "docs" / "native_envs.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


@pytest.fixture
def doc_module(tmp_path, monkeypatch):
    """docs/native_envs.md's example written as pointmass.py in the current directory, as the doc says."""
    (code,) = _blocks("python")
    (tmp_path / "pointmass.py").write_text(code)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    import sys

    sys.modules.pop("pointmass", None)


@pytest.fixture
def fixtures_path(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


def _doc_commands() -> list[list[str]]:
    (block,) = _blocks("text")
    return [shlex.split(line)[1:] for line in block.splitlines() if line.startswith("proxima ")]


def test_doc_example_runs_natively_on_check_env_train_eval_resume(doc_module, capsys):
    check, train, evaluate, resume, _ = _doc_commands()
    code, out, err = run_main(check, capsys)
    assert code == 0 and "OK: pointmass:PointMass passes" in out, out + err
    tiny = [*TINY_RUN, "--total-timesteps", "64"]
    assert run_main(train + tiny, capsys)[0] == 0
    state = torch.load(sorted((doc_module / "runs/pm/checkpoints").glob("*.pt"))[-1], weights_only=False)
    # built natively (its state saved for the resume), recorded under the id the user gave
    assert state["env_backend"] == "native" and state["env"] is not None, state["env_backend"]
    assert state["config"]["env_id"] == "pointmass:PointMass"
    # the run directory is data: its recorded module:Class is imported only when the user names it
    code, _, err = run_main(["eval", "runs/pm", "--episodes", "2"], capsys)
    error_line(code, err, "would import and run module 'pointmass'", "--env pointmass:PointMass")
    code, out, err = run_main(evaluate + ["--episodes", "2"], capsys)
    assert code == 0 and "pointmass:PointMass:" in out and "over 2 episodes" in out, out + err
    code, out, err = run_main(resume[:-1] + ["128", *TINY_RUN], capsys)
    assert code == 0 and "resuming" in out + err and "global step 64" in out + err, out + err
    assert len(list((doc_module / "runs/pm/checkpoints").glob("*.pt"))) >= 2


def test_doc_example_population_trains_one_member_per_seed(doc_module, capsys):
    population = _doc_commands()[-1]
    i = population.index("--total-timesteps")
    argv = population[:i] + ["--total-timesteps", "64", "--seeds", "1-2", *TINY_POP] + population[i + 2:]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    members = sorted(p.name for p in (doc_module / "runs/pm4").iterdir() if p.is_dir() and p.name.startswith("m0"))
    assert members == ["m000-seed1", "m001-seed2"]


def test_env_kwargs_go_to_the_constructor_and_gymnasium_backend_is_refused(doc_module):
    env = make_env("pointmass:PointMass", 3, seed=0, env_kwargs={"force": 0.5})
    assert env.backend == "native" and env.force == 0.5 and env.env_id == "pointmass:PointMass"
    assert tuple(env.reset().shape) == (3, 2)
    # a script's own make_env call: make_env's argument, never a flag or PPOConfig's field (reviews 49, 50)
    with pytest.raises(EnvError, match=r"^env_kwargs: env 'pointmass:PointMass' takes no argument 'forse'"):
        make_env("pointmass:PointMass", 1, env_kwargs={"forse": 0.5})
    with pytest.raises(EnvError, match=r"torch-native env .* not backend='gymnasium'"):
        make_env("pointmass:PointMass", 1, backend="gymnasium")


def test_max_episode_steps_0_is_no_time_limit(fixtures_path):
    env = make_env("user_native_env:NoLimit", 2, seed=0)
    env.reset()
    for _ in range(8):  # Drift never terminates: any end is the time limit's
        _, _, terminated, truncated, info = env.step(torch.ones(2, dtype=torch.long))
        assert not truncated.any() and not terminated.any() and not info["episode_length"].any()
    limited = make_env("user_native_env:Drift", 2, seed=0)  # 5 steps: truncated at the 5th
    limited.reset()
    ends = [bool(limited.step(torch.ones(2, dtype=torch.long))[3].all()) for _ in range(5)]
    assert ends == [False] * 4 + [True]


@pytest.mark.parametrize("cls, call, words", [
    ("F64Obs", "reset", "the observations of _observe() (first reset): dtype torch.float64, expected torch.float32"),
    ("F64Reward", "step", "the reward of _dynamics(): dtype torch.float64, expected torch.float32"),
])
def test_a_float64_hook_output_is_one_env_error_naming_the_field(fixtures_path, cls, call, words):
    env = make_env(f"user_native_env:{cls}", 2, seed=0)
    with pytest.raises(EnvError) as e:
        env.reset()
        env.step(torch.ones(2, dtype=torch.long))
    assert f"env 'user_native_env:{cls}': {words}" in str(e.value)


def test_check_env_checks_a_native_env(fixtures_path, capsys):
    code, out, err = run_main(["check-env", "user_native_env:Drift"], capsys)
    assert code == 0 and "OK: user_native_env:Drift passes" in out, out + err
    code, out, err = run_main(["check-env", "user_native_env:F64Obs"], capsys)
    assert code == 1 and "FAIL reset:" in out and "dtype torch.float64, expected torch.float32" in out, out + err
    code, out, err = run_main(["check-env", "user_native_env:NanAt3"], capsys)
    assert code == 1 and "FAIL obs finite:" in out and "at step 3" in out, out + err


def test_train_error_hint_reproduces_a_failure_past_200_steps(fixtures_path, tmp_path, capsys):
    code, _, err = run_main(["train", "user_native_env:ShapeAt250", "--num-envs", "1", "--num-steps", "128",
                             "--num-minibatches", "1", "--update-epochs", "1", "--eval-episodes", "0", "--threads", "1",
                             "--total-timesteps", "256", "--seed", "3", "--run-dir", str(tmp_path / "run"), "--no-progress"],
                            capsys)
    line = error_line(code, err, "at env step 250", "check with: proxima check-env user_native_env:ShapeAt250 --steps 250 --seed 3")
    suggested = shlex.split(line.partition("check with: ")[2].partition(")")[0])
    code, out, _ = run_main(suggested[1:], capsys)
    assert code == 1 and "FAIL obs shape" in out, out  # what it suggests finds the fault, where 200 steps pass


def test_a_missing_info_is_not_called_the_old_gym_api(fixtures_path, capsys):
    code, out, _ = run_main(["check-env", "user_native_env:NoInfo"], capsys)
    assert code == 1 and "info is missing: return obs, reward, terminated, truncated, info ({})" in out, out
    assert "old gym API" not in out
    code, out, _ = run_main(["check-env", "user_native_env:OldApi"], capsys)
    assert code == 1 and "the old gym API (obs, reward, done, info)" in out, out


# --- the trust rule and imported_only: a run directory's recorded module is not imported unless named or trusted ---

MARKED = '''
import os
import gymnasium as gym
import numpy as np
import torch
from proxima.envs import NativeEnv

open(os.environ["PROXIMA_TEST_MARKER"], "a").write("imported\\n")


class Marked(NativeEnv):
    max_episode_steps = 8

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)

    def _sample_initial_state(self, n):
        return {"x": self._uniform((n,), -1.0, 1.0)}

    def _dynamics(self, action):
        return torch.zeros(self.num_envs, device=self.device), torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def _observe(self):
        return self.state["x"].unsqueeze(1).clone()
'''


@pytest.fixture(scope="module")
def marked_runs(tmp_path_factory):
    """A run and a two-member population of marked:Marked, a native env whose module appends a line to
    $PROXIMA_TEST_MARKER when imported; trained once, the module then taken out of sys.modules."""
    import os
    import sys

    folder = tmp_path_factory.mktemp("marked")
    (folder / "marked.py").write_text(MARKED)
    marker = folder / "imported.txt"
    saved_env, saved_path, cwd = os.environ.get("PROXIMA_TEST_MARKER"), sys.path[:], os.getcwd()
    os.environ["PROXIMA_TEST_MARKER"] = str(marker)
    sys.path.insert(0, str(folder))
    os.chdir(folder)
    try:
        tiny = ["--total-timesteps", "64", "--no-progress"]
        for argv in (["train", "marked:Marked", *TINY_RUN, *tiny, "--run-dir", "runs/m"],
                     ["train", "marked:Marked", "--seeds", "1-2", *TINY_POP, *tiny, "--run-dir", "runs/pop"]):
            try:
                code = __import__("proxima.cli", fromlist=["main"]).main(argv)
            except SystemExit as e:
                code = e.code
            assert code == 0, argv
        yield folder, marker
    finally:
        os.chdir(cwd)
        sys.path[:] = saved_path
        sys.modules.pop("marked", None)
        if saved_env is None:
            os.environ.pop("PROXIMA_TEST_MARKER", None)
        else:
            os.environ["PROXIMA_TEST_MARKER"] = saved_env


@pytest.fixture
def marked(marked_runs, monkeypatch):
    """The trained runs' folder as the current directory, the module importable but not imported, no marker yet."""
    import sys

    folder, marker = marked_runs
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PROXIMA_TEST_MARKER", str(marker))
    sys.modules.pop("marked", None)
    marker.unlink(missing_ok=True)
    yield folder, marker
    sys.modules.pop("marked", None)


def test_resume_of_a_native_run_refuses_its_module_unless_named_or_trusted(marked, capsys):
    folder, marker = marked
    assert torch.load(sorted((folder / "runs/m/checkpoints").glob("*.pt"))[-1], weights_only=False)["env_backend"] == "native"
    code, _, err = run_main(["train", "--resume", "runs/m", "--total-timesteps", "128", "--no-progress"], capsys)
    error_line(code, err, "would import and run module 'marked'")
    code, _, err = run_main(["train", "--seeds", "1-2", "--resume", "runs/pop", "--total-timesteps", "128", "--no-progress"],
                            capsys)
    error_line(code, err, "would import and run module 'marked'")
    assert not marker.exists(), marker.read_text()  # refused before any import of the run's code


def test_report_plot_and_a_refused_dry_run_resume_do_not_import_the_recorded_module(marked, capsys):
    import json
    import shutil

    folder, marker = marked
    # a run whose meta.json records no env_backend (an older Proxima's): plot resolves its backend from the id alone
    shutil.rmtree(folder / "runs/old", ignore_errors=True)
    shutil.copytree(folder / "runs/m", folder / "runs/old")
    meta = json.loads((folder / "runs/old/meta.json").read_text())
    assert meta.pop("env_backend") == "native"
    (folder / "runs/old/meta.json").write_text(json.dumps(meta))
    for argv in (["report", "runs/m"], ["report", "runs/old"], ["plot", "runs/m", "runs/old", "--out", str(folder / "m.png")]):
        code, out, err = run_main(argv, capsys)
        assert code == 0, out + err
        assert not marker.exists(), (argv, marker.read_text())
    code, _, err = run_main(["train", "--resume", "runs/m", "--dry-run", "--total-timesteps", "128"], capsys)
    error_line(code, err, "would import and run module 'marked'")
    assert not marker.exists(), marker.read_text()


def test_vector_async_is_noted_and_forks_no_workers_for_a_typed_native_module(doc_module, capsys):
    import sys

    from proxima.config import PPOConfig
    from proxima.sizing import async_workers

    sys.modules.pop("pointmass", None)  # typed, not yet imported: auto_backend must import it to see a NativeEnv
    assert async_workers(PPOConfig(env_id="pointmass:PointMass", vector="async", num_envs=3)) == 0
    sys.modules.pop("pointmass", None)
    from proxima.evaluate import built_backend

    assert built_backend("pointmass:PointMass", "auto", None) == "native"  # eval's memory estimate: native sizes
    sys.modules.pop("pointmass", None)
    code, out, err = run_main(["train", "pointmass:PointMass", "--vector", "async", *TINY_RUN, "--total-timesteps", "64",
                               "--run-dir", "runs/va", "--no-progress"], capsys)
    assert code == 0, out + err
    assert "note: --vector async: applies to the gymnasium backend only; --backend auto (here: native) ignores it" in err, err


def test_a_gymnasium_module_class_still_counts_its_async_workers(fixtures_path):
    from proxima.config import PPOConfig
    from proxima.sizing import async_workers

    assert async_workers(PPOConfig(env_id="user_native_env:ShapeAt250", vector="async", num_envs=3)) == 3


# --- check-env's hint: the failing env's own seed, and the flags' caps ---

def test_train_error_hint_names_the_failing_envs_seed(fixtures_path, tmp_path, capsys):
    code, _, err = run_main(["train", "user_native_env:ShapeAt250Even", "--num-envs", "2", "--num-steps", "128",
                             "--num-minibatches", "1", "--update-epochs", "1", "--eval-episodes", "0", "--threads", "1",
                             "--total-timesteps", "512", "--seed", "3", "--run-dir", str(tmp_path / "run"), "--no-progress"],
                            capsys)
    # env 1 failed: the vector env reset it with seed 3 + 1
    line = error_line(code, err, "at env step 250", "check-env user_native_env:ShapeAt250Even --steps 250 --seed 4")
    suggested = shlex.split(line.partition("check with: ")[2].partition(")")[0])
    code, out, _ = run_main(suggested[1:], capsys)
    assert code == 1 and "FAIL obs shape" in out, out


def test_check_env_flags_caps_steps_and_drops_an_out_of_range_seed():
    from proxima.config import MAX_SEED
    from proxima.envs.gym_adapter import CHECK_STEPS, MAX_CHECK_STEPS, check_env_flags

    assert check_env_flags(CHECK_STEPS, 1) == ""  # check-env's default steps reach it already
    assert check_env_flags(CHECK_STEPS + 1, 1) == f" --steps {CHECK_STEPS + 1} --seed 1"
    assert check_env_flags(5 * MAX_CHECK_STEPS, 3) == f" --steps {MAX_CHECK_STEPS} --seed 3"
    assert check_env_flags(300, MAX_SEED + 1) == " --steps 300"


# --- NativeEnv's checks of its hooks, once ---

def _drift(**attrs):
    import sys

    sys.path.insert(0, str(FIXTURES))
    try:
        from user_native_env import Drift
    finally:
        sys.path.remove(str(FIXTURES))
    return type("Env", (Drift,), attrs)


@pytest.mark.parametrize("limit", [-1, True, 2.5])
def test_a_bad_max_episode_steps_is_refused_at_reset(limit):
    env = _drift(max_episode_steps=limit)(2, seed=0)
    with pytest.raises(EnvError, match=re.escape(f"env 'Env': max_episode_steps = {limit!r}; set it to the time limit")):
        env.reset()


def test_a_wrong_obs_shape_is_named():
    env = _drift(_observe=lambda self: torch.zeros(self.num_envs, 3))(2, seed=0)
    with pytest.raises(EnvError, match=re.escape("shape (2, 3), expected (2, 1) (num_envs first)")):
        env.reset()


def test_an_obs_on_another_device_is_named():
    env = _drift(_observe=lambda self: torch.zeros(self.num_envs, 1, device="meta"))(2, seed=0)
    with pytest.raises(EnvError, match=re.escape("on meta, expected the env's device cpu; create it on self.device")):
        env.reset()


def test_a_first_step_obs_of_another_dtype_is_named(fixtures_path):
    env = make_env("user_native_env:FirstStepF64", 2, seed=0)
    env.reset()
    with pytest.raises(EnvError, match=re.escape("_observe() (first step): dtype torch.float64, expected torch.float32")):
        env.step(torch.ones(2, dtype=torch.long))


@pytest.mark.parametrize("dynamics, words", [
    (lambda self, a: (torch.zeros(self.num_envs), torch.zeros(self.num_envs, dtype=torch.bool), {}),
     "_dynamics() returned 3 values; return (reward, terminated)"),
    (lambda self, a: (torch.zeros(self.num_envs), torch.zeros(self.num_envs)),
     "the terminated of _dynamics(): dtype torch.float32, expected torch.bool"),
])
def test_a_bad_dynamics_output_is_named(dynamics, words):
    env = _drift(_dynamics=dynamics)(2, seed=0)
    env.reset()
    with pytest.raises(EnvError, match=re.escape(words)):
        env.step(torch.ones(2, dtype=torch.long))


# --- build_user_native's refusals, and resolve_env_fn's of a native class ---

def test_build_user_native_refuses_bad_spaces_and_constructors():
    import gymnasium as gym

    from proxima.envs.gym_adapter import build_user_native
    from proxima.envs.spaces import check_spaces

    Drift = _drift()

    def with_obs_space(space):
        def __init__(self, num_envs=1, device="cpu", seed=None):
            Drift.__init__(self, num_envs, device, seed)
            self.single_observation_space = space
        return type("Env", (Drift,), {"__init__": __init__})

    space = gym.spaces.Dict({"a": gym.spaces.Discrete(2)})
    with pytest.raises(EnvError) as want:
        check_spaces("m:Env", space, gym.spaces.Discrete(3))
    with pytest.raises(EnvError) as got:
        build_user_native(with_obs_space(space), "m:Env", 2, "cpu", 0)
    assert str(got.value) == str(want.value)

    with pytest.raises(EnvError, match=re.escape("env 'm:Env': single_action_space is missing; set it in __init__")):
        def no_action(self, num_envs=1, device="cpu", seed=None):
            Drift.__init__(self, num_envs, device, seed)
            del self.single_action_space
        build_user_native(type("Env", (Drift,), {"__init__": no_action}), "m:Env", 2, "cpu", 0)

    def bare(self, **kwargs):  # no num_envs: the positional count is refused
        Drift.__init__(self, 1)
    with pytest.raises(EnvError, match=re.escape("a native env's constructor takes (num_envs, device='cpu', seed=None)")):
        build_user_native(type("Env", (Drift,), {"__init__": bare}), "m:Env", 2, "cpu", 0)


def test_resolve_env_fn_refuses_a_native_class(fixtures_path):
    from proxima.envs.gym_adapter import resolve_env_fn

    with pytest.raises(EnvError, match=re.escape("'user_native_env:Drift' is a torch-native env (a BatchedEnv subclass)")):
        resolve_env_fn("user_native_env:Drift")


# --- check-env of a native env ---

@pytest.mark.parametrize("cls, words", [
    ("GlobalRng", "FAIL reset determinism"),
    ("ZeroLength", "FAIL build: expected ZeroLength(num_envs, device, seed) builds a native env with supported spaces; "
                   "got env 'user_native_env:ZeroLength': ZeroLength overrides step()"),  # refused since review 47
])
def test_check_env_fails_a_native_env(fixtures_path, capsys, cls, words):
    code, out, err = run_main(["check-env", f"user_native_env:{cls}", "--steps", "5"], capsys)
    assert code == 1 and words in out, out + err


def test_check_env_of_a_native_env_with_a_mistyped_kwarg_exits_2(doc_module, capsys):
    code, _, err = run_main(["check-env", "pointmass:PointMass", "--env-kwargs", '{"forse": 1}'], capsys)
    error_line(code, err, "takes no argument 'forse'")
