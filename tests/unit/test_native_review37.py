"""Review 37 (native envs, second pass): an _observe() that aliases the state, bench's 'both' on a
user's NativeEnv, missing hooks named, --env-kwargs that collide with num_envs/device/seed, --video's
line for a native env, member streams an env bypasses, and identical start states."""

from __future__ import annotations

import pytest
import torch

from cli_helpers import FIXTURES, run_main
from proxima.envs import EnvError, make_env


@pytest.fixture(autouse=True)
def fixture_envs(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


def _step(env):
    return env.step(torch.ones(env.num_envs, dtype=torch.int64))


# ------------------------------------------------------------------- 1. final_obs aliasing the state
@pytest.mark.parametrize("cls", ["AliasObs", "ViewObs"])
def test_observe_that_returns_state_memory_is_refused_at_the_first_step(cls):
    """final_obs was the state buffer the autoreset overwrote: a truncation bootstrapped from the next
    episode's start, with no error anywhere."""
    env = make_env(f"user_native_env:{cls}", 2, seed=0)
    env.reset()
    with pytest.raises(EnvError, match=r"_observe\(\) returned a tensor that shares memory with state\['"):
        _step(env)
    fine = make_env("user_native_env:Drift", 2, seed=0)  # a new tensor: steps, final_obs its own
    fine.reset()
    for _ in range(5):  # the 5th step truncates: final_obs holds the ended episode's last obs
        obs, _, _, truncated, info = _step(fine)
    assert truncated.all() and not torch.equal(info["final_obs"], obs)


def test_observe_that_returns_one_buffer_rewritten_in_place_is_refused_at_the_first_step():
    """One buffer outside the state, rewritten by each _observe(), would make final_obs the next episode's start."""
    env = make_env("user_native_env:BufferObs", 2, seed=0)
    env.reset()
    with pytest.raises(EnvError, match=r"_observe\(\) returned a tensor that shares memory with the next obs"):
        _step(env)


def test_check_env_fails_an_aliasing_observe(capsys):
    code, out, _ = run_main(["check-env", "user_native_env:AliasObs"], capsys)
    assert code != 0 and "FAIL step" in out and "_observe()" in out and "state['obs']" in out


# ------------------------------------------------------------------- 2. bench --backend both
def test_bench_both_on_a_user_native_class_measures_native_alone():
    from proxima import bench
    from proxima.cli import build_parser

    assert bench.backends_for("user_native_env:Drift", "both") == ["native"]  # was ['gymnasium']: refused
    both_note, arguments_problem = bench.both_note, bench.arguments_problem
    assert "measures the native env alone" in both_note("user_native_env:Drift", "both")
    assert both_note("CartPole-v1", "both") == ""  # a Gymnasium twin exists: no note
    assert both_note("user_native_env:Drift", "native") == ""  # 'both' not asked for: no false note
    assert "measures the native env alone" in both_note("user_native_env:Drift", "native, both")
    args = build_parser().parse_args(["bench", "user_native_env:Drift", "--num-envs", "4"])
    assert args.backend == "both" and arguments_problem(args) == ""


# ------------------------------------------------------------------- 3. missing hooks named
def test_a_missing_hook_names_itself(capsys):
    with pytest.raises(NotImplementedError, match=r"NoObserve must implement _sample_initial_state\(n\)"):
        make_env("user_native_env:NoObserve", 2, seed=0).reset()
    code, out, _ = run_main(["check-env", "user_native_env:NoObserve"], capsys)
    assert code != 0 and "must implement _sample_initial_state" in out and "docs/native_envs.md" in out


@pytest.mark.parametrize("cls, hook", [("NoDynamics", r"_dynamics\(action\)"), ("NoObserveHook", r"_observe\(\)")])
def test_a_missing_dynamics_or_observe_hook_names_itself(cls, hook):
    """A class lacking _dynamics or _observe gets a line naming the hook, not a bare NotImplementedError."""
    env = make_env(f"user_native_env:{cls}", 2, seed=0)
    with pytest.raises(NotImplementedError, match=rf"{cls} must implement {hook}"):
        env.reset()
        _step(env)


# ------------------------------------------------------------------- 4. --env-kwargs num_envs/device/seed
@pytest.mark.parametrize("key,flag", [("seed", "--seed"), ("num_envs", "--num-envs"), ("device", "--device")])
def test_env_kwargs_that_proxima_sets_are_refused_by_name(key, flag, capsys):
    with pytest.raises(EnvError) as e:  # make_env from Python is told its own arguments, not the flags (test_left50)
        make_env("user_native_env:Drift", 2, seed=0, env_kwargs={key: 5})
    line = str(e.value)
    assert line.startswith("env_kwargs: ") and repr(key) in line and f"make_env's {key}= argument" in line
    assert "multiple values" not in line and flag not in line
    code, _, err = run_main(["train", "user_native_env:Drift", "--env-kwargs", f'{{"{key}": 5}}',
                             "--num-envs", "2", "--num-steps", "32", "--total-timesteps", "64", "--dry-run"], capsys)
    assert code == 2 and "--env-kwargs" in err and flag in err, err  # the command line keeps its flags


# ------------------------------------------------------------------- 5. --video on a native env
def test_a_native_env_without_render_says_how_to_add_one():
    env = make_env("user_native_env:Drift", 2, seed=0)
    with pytest.raises(EnvError, match=r"render\(self, index\).*render_fps") as e:
        env.render(0)
    assert "render_mode" not in str(e.value)


# ------------------------------------------------------------------- 6. member streams, same starts
def test_check_env_fails_a_direct_generator_draw_that_claims_member_streams(capsys):
    code, out, _ = run_main(["check-env", "user_native_env:DirectGen"], capsys)
    assert code != 0 and "FAIL member streams" in out and "supports_member_streams = False" in out
    code, out, _ = run_main(["check-env", "user_native_env:Drift"], capsys)
    assert code == 0 and "member streams" not in out


def test_check_env_notes_identical_start_states(capsys):
    code, out, _ = run_main(["check-env", "user_native_env:SameStarts"], capsys)
    assert code == 0 and "NOTE every row of reset() gives the same obs" in out
    _, out, _ = run_main(["check-env", "user_native_env:Drift"], capsys)
    assert "same obs" not in out


# ------------------------------------------------------------------- 7. a refusal naming several fields
def test_a_several_field_refusal_is_the_files_only_when_no_field_was_typed():
    """A several-field refusal names the run's file only when no field was typed, else it stays the user's flag's."""
    from proxima.config import ConfigError
    from proxima.run_setup import recorded_refusal

    e = ConfigError("one batch is larger than the run")
    e.fields = ("a", "b")
    assert str(recorded_refusal(e, "CKPT", {})) == "CKPT: a, b: one batch is larger than the run"
    assert recorded_refusal(e, "CKPT", {"a": 1}) is None
    assert recorded_refusal(e, "CKPT", {"b": 1}) is None
