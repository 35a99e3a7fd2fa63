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
    with pytest.raises(EnvError, match=r"--env-kwargs: env 'pointmass:PointMass' takes no argument 'forse'"):
        make_env("pointmass:PointMass", 1, env_kwargs={"forse": 0.5})
    with pytest.raises(EnvError, match=r"torch-native env .* not --backend gymnasium"):
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
