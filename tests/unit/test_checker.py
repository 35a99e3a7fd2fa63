"""``proxima check-env``: clean envs pass, each broken rule gives its violation with expected vs actual."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from proxima.check_env_cli import register
from proxima.envs.checker import ALL_CHECKS, Violation, Violations, check_env, format_violations

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(autouse=True)
def fixtures_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


def cli(*argv: str) -> int:
    """The CLI as `proxima` will wire it: register() on a subparsers object, then args.func(args)."""
    parser = argparse.ArgumentParser(prog="proxima")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return args.func(args)


# WindSeeded: step() draws from self.np_random, seeded by reset; ListReturns: reset and step return lists
# (train takes them); BoolMaskImage: a bool mask in a uint8 image Box (casts safely, train takes it as uint8)
CLEAN = ["CartPole-v1", "Pendulum-v1", "bad_envs:GoodEnv", "bad_envs:NeverEnds", "bad_envs:WindSeeded",
         "bad_envs:ListReturns", "bad_envs:BoolMaskImage", "LunarLander-v3"]


BOX3_D2 = "spaces: obs Box(3,) float32 -> 3 features, MLP 64x64 tanh; action Discrete(2) -> categorical over 2"
#: the spaces line a run of each clean env prints (spaces.spaces_line), which check-env prints before its OK line
SPACES = {
    "CartPole-v1": "spaces: obs Box(4,) float32 -> 4 features, MLP 64x64 tanh; action Discrete(2) -> categorical over 2",
    "Pendulum-v1": "spaces: obs Box(3,) float32 -> 3 features, MLP 64x64 tanh; action Box(1,) float32 [-2, 2] -> Gaussian, "
                   "1 dim, clipped to bounds",
    "bad_envs:GoodEnv": BOX3_D2, "bad_envs:NeverEnds": BOX3_D2, "bad_envs:WindSeeded": BOX3_D2, "bad_envs:ListReturns": BOX3_D2,
    "bad_envs:BoolMaskImage": "spaces: obs Box(36, 36, 3) uint8 -> image (3, 36, 36) 0..1 scaled to [0, 1], Nature CNN (512 "
                              "features), linear actor and critic heads; action Discrete(2) -> categorical over 2",
    "LunarLander-v3": "spaces: obs Box(8,) float32 -> 8 features, MLP 64x64 tanh; action Discrete(4) -> categorical over 4",
}


#: check-env's note on a Gymnasium env none of whose episodes ended in --steps (no TimeLimit)
ENDLESS_NOTE = ("no episode ended in {steps} steps (max_episode_steps = None): autoreset was not checked; no time limit: "
                "give more --steps if its episodes end later, else wrap it in gymnasium.wrappers.TimeLimit(env, "
                "max_episode_steps=N) in a module:function factory (or "
                "gymnasium.register it with max_episode_steps), or check that terminated can become true (an episode "
                "that never ends plays train's final evaluation to its 100,000-step cap)")


@pytest.mark.parametrize("target", CLEAN)
def test_clean_envs_pass(target, capsys):
    if target.startswith("LunarLander"):
        pytest.importorskip("Box2D")
    assert cli("check-env", target) == 0
    out, err = capsys.readouterr()
    # an image's OK line says how train reads it (review 34)
    reading = ("; observation: image (36, 36, 3) channels-last, 0..1 scaled to [0, 1], CNN encoder under --encoder auto"
               if target == "bad_envs:BoolMaskImage" else "")
    # an env none of whose episodes ended in the steps is told so, and autoreset is not counted as passed (review 47)
    note = ([f"NOTE {ENDLESS_NOTE.format(steps=200)}"] if target == "bad_envs:NeverEnds" else [])
    checks = 19 if note else 20
    assert out.strip().splitlines() == [*note, SPACES[target], f"OK: {target} passes {checks} checks{reading}"]
    assert err == ""


# (class, check, text in expected, text in actual)
BAD = [
    ("WrongShape", "obs shape", "shape (3,)", "shape (4,) at reset(seed=0)"),
    ("WrongDtype", "obs dtype", "dtype float32", "dtype float64 at reset(seed=0)"),
    ("OutOfBounds", "obs bounds", "obs[2] in [-1, 1]", "obs[2] = 1.5, above high[2] = 1, at step 3"),
    ("NaNObs", "obs finite", "finite observation values", "obs[1] = nan at step 5"),
    ("InfReward", "reward finite", "finite reward", "reward = inf at step 4"),
    ("OldGymStep", "step returns", "5 values (obs, reward, terminated, truncated, info)", "4 values at step 1: the old gym API"),
    ("NondeterministicReset", "reset determinism", "reset(seed=0) twice gives the same obs", "first ["),
    ("TextKeyObs", "spaces supported", "observation Box or Dict of Box", "not supported: Text observation space Text(1, 8, charset=0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz) at key 'note'"),
    ("FloatPixelsAtStep3", "obs dtype", "dtype uint8", "dtype float32 at step 3"),
    ("StepRaises", "step", "step(action) returns without raising", "at step 2 raised RuntimeError: boom at step 2"),
    ("ResetRaises", "reset", "reset(seed=0) returns (obs, info)", "reset(seed=0) raised KeyError: 'level'"),
    ("AutoresetRaises", "autoreset", "reset() works again after an episode ends", "reset() after the episode ended at step 10 raised RuntimeError: already finished"),
    ("ArrayReward", "reward type", "real scalar", "ndarray of shape (1,)"),
    ("OldGymReset", "reset returns", "a tuple (obs, info)", "the old gym API returned obs alone"),
    ("NoSpaces", "spaces declared", "gymnasium.spaces.Space", "observation_space missing (set it in __init__), action_space missing"),
    ("MutatesAction", "action not mutated", "unchanged", "changed it in place to [-1., -1.]"),
    ("ConstructorRaises", "build", "the constructor returns a gymnasium.Env", "ConstructorRaises() raised ValueError: missing config file"),
    ("NotAnEnv", "build", "a gymnasium.Env instance", "did not return a gymnasium.Env (got NotAnEnv)"),
    ("StepIgnoresSeed", "step determinism",
     "reset(seed=0) then step(1), twice, gives the same obs, reward, terminated and truncated (call super().reset(seed=seed) "
     "in reset() and draw randomness from self.np_random)", "at the first step after each reset(seed=0)"),
    ("WindIgnoresSeed", "step determinism", "call super().reset(seed=seed) in reset()",
     "self.np_random in another state after the second reset(seed=0) than after the first: step(1) drew from it in between "
     "and reset() did not re-seed it"),
    ("ObsAloneOf2", "reset returns", "a tuple (obs, info)",
     "ndarray of shape (2,) dtype float32 at reset(seed=0) (the old gym API returned obs alone; return obs, {})"),
    ("DictObsAloneOf2", "reset returns", "a tuple (obs, info)",
     "dict of 2 items at reset(seed=0) (the old gym API returned obs alone; return obs, {})"),
    ("ResetThree", "reset returns", "a tuple (obs, info)", "tuple of 3 values (ndarray, dict, int) at reset(seed=0) (and"),
]


@pytest.mark.parametrize("cls, check, expected, actual", BAD, ids=[b[0] for b in BAD])
def test_each_broken_rule_is_reported(cls, check, expected, actual):
    violations = check_env(f"bad_envs:{cls}")
    assert [v.check for v in violations] == [check], violations
    v = violations[0]
    assert expected in v.expected and actual in v.actual, v


def test_an_unbounded_box_action_space_passes_every_check():
    # was "spaces supported": Box action space needs finite bounds; the policy's Normal samples unbounded
    assert list(check_env("bad_envs:UnboundedAction")) == []


def test_int_flags_and_non_dict_info_are_both_reported():
    found = {v.check: v for v in check_env("bad_envs:IntFlags")}
    assert set(found) == {"terminated type", "info type"}
    assert found["terminated type"].actual.startswith("int 0 at step 1")
    assert found["info type"].actual.startswith("NoneType None at step 1")


def test_repeated_violation_is_reported_once_with_a_count():
    (v,) = check_env("bad_envs:NaNObs", steps=30)  # episodes of 10 steps: NaN at steps 5, 15, 25
    assert v.actual == "obs[1] = nan at step 5 (and 2 more times)"


def test_cli_report_for_a_bad_env(capsys):
    assert cli("check-env", "bad_envs:WrongDtype", "--steps", "20") == 1
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert lines[0].startswith("FAIL obs dtype: expected dtype float32 (observation_space.dtype); got dtype float64 at reset(seed=0)")
    assert lines[1:] == [BOX3_D2, "1 violation(s) in bad_envs:WrongDtype"]  # its spaces were read: their line too
    assert len(lines) == 3 and err == ""


def test_user_exceptions_never_print_a_traceback(capsys):
    for cls in ("StepRaises", "ResetRaises", "AutoresetRaises", "ConstructorRaises"):
        assert cli("check-env", f"bad_envs:{cls}") == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err


def test_unknown_id_exits_2_with_a_suggestion(capsys):
    assert cli("check-env", "CartPol-v1") == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("proxima check-env: error: unknown env id 'CartPol-v1'; did you mean CartPole-v1")


@pytest.mark.parametrize("target, text", [("no_such_module_xyz:Env", "cannot import module 'no_such_module_xyz'"), ("bad_envs:Missing", "has no attribute 'Missing'")])
def test_unresolvable_target_exits_2(target, text, capsys):
    assert cli("check-env", target) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("proxima check-env: error: ") and text in err and err.count("\n") == 1


def test_negative_steps_exit_2(capsys):
    assert cli("check-env", "CartPole-v1", "--steps", "-1") == 2
    assert "--steps must be >= 0" in capsys.readouterr().err


def test_step_budget_is_honoured():
    import bad_envs

    bad_envs.Counting.calls = 0
    assert check_env("bad_envs:Counting", steps=25) == []
    assert bad_envs.Counting.calls == 27  # episodes of 10: two resets inside the budget; + 2 (step determinism)
    bad_envs.Counting.calls = 0
    assert check_env("bad_envs:Counting", steps=7) == []
    assert bad_envs.Counting.calls == 10  # no episode ended: one reset() and one more step check autoreset; + 2
    bad_envs.Counting.calls = 0
    report = check_env("bad_envs:Counting", steps=0)
    assert report == [] and bad_envs.Counting.calls == 0
    assert "step" not in report.checks_run and "reset determinism" in report.checks_run
    assert "step determinism" not in report.checks_run


def test_float_pixels_in_0_1_get_the_scaling_fix_not_a_cast_to_zeros():
    (v,) = check_env("bad_envs:FloatPixelsAtStep3", steps=5)
    assert v.actual == ("dtype float32 at step 3 (does not cast safely to uint8; its values lie in [0, 1]: "
                        "return np.uint8 pixels 0..255 as (obs * 255).astype(np.uint8)) (and 2 more times)")


def test_an_image_returned_channels_first_gets_the_transpose():
    import bad_envs

    class ChannelsFirst(bad_envs.ImageObs):
        def _image(self):
            return super()._image().transpose(2, 0, 1)

    bad_envs.ChannelsFirst = ChannelsFirst
    try:
        (v,) = check_env("bad_envs:ChannelsFirst", steps=0)
    finally:
        del bad_envs.ChannelsFirst
    assert v.actual == ("shape (3, 36, 36) at reset(seed=0) (channels first where observation_space declares them last: "
                        "return obs.transpose(1, 2, 0)) (and 1 more time)")


def test_format_violations():
    assert format_violations("X-v0", []) == f"OK: X-v0 passes {len(ALL_CHECKS)} checks"
    noted = Violations([], ALL_CHECKS[:3], ["observation_space: a note"])
    assert format_violations("X-v0", noted).splitlines() == ["NOTE observation_space: a note", "OK: X-v0 passes 3 checks"]
    noted = Violations([Violation("obs shape", "shape (3,)", "shape (4,)")], ALL_CHECKS[:3], ["observation_space: a note"])
    assert format_violations("X-v0", noted).splitlines() == [
        "FAIL obs shape: expected shape (3,); got shape (4,)", "NOTE observation_space: a note", "1 violation(s) in X-v0"]
    # the spaces line, where the spaces were read: just before the last line, OK or the count, after notes and readings
    read = Violations([], ALL_CHECKS[:3], ["a note"], ["observation: an image"], "spaces: obs X; action Y")
    assert format_violations("X-v0", read).splitlines() == [
        "NOTE a note", "spaces: obs X; action Y", "OK: X-v0 passes 3 checks; observation: an image"]
    read = Violations([Violation("step", "no raise", "raised")], ALL_CHECKS[:3], ["a note"], ["observation: an image"],
                      "spaces: obs X; action Y")
    assert format_violations("X-v0", read).splitlines() == [
        "FAIL step: expected no raise; got raised", "NOTE a note", "observation: an image", "spaces: obs X; action Y",
        "1 violation(s) in X-v0"]
    vs = [Violation("obs shape", "shape (3,)", "shape (4,)\nat step 1"), Violation("step", "no raise", "raised")]
    text = format_violations("X-v0", vs)
    assert text.splitlines() == [
        "FAIL obs shape: expected shape (3,); got shape (4,) at step 1",
        "FAIL step: expected no raise; got raised",
        "2 violation(s) in X-v0",
    ]
    assert [f.name for f in dataclasses.fields(Violation)] == ["check", "expected", "actual"]


@pytest.mark.parametrize("cls", ["ImageObs", "DictObs"])
def test_image_and_dict_observation_spaces_pass_check_env(cls):
    violations = check_env(f"bad_envs:{cls}", steps=30)
    assert list(violations) == [] and "spaces supported" in violations.checks_run


def test_a_missing_extra_names_the_repository_install_command(monkeypatch, capsys):
    """PyPI's `proxima` is another package: the hint installs the extra from this repository."""
    import gymnasium as gym

    def missing(*a, **k):
        raise gym.error.DependencyNotInstalled('MuJoCo is not installed, run `pip install "gymnasium[mujoco]"`')

    monkeypatch.setattr(gym, "make", missing)
    assert cli("check-env", "HalfCheetah-v5") == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("proxima check-env: error: env 'HalfCheetah-v5' needs an optional dependency: install it from the "
                   "repository root with: .venv/bin/pip install -c requirements.lock -e '.[mujoco]'\n")


def test_a_dtype_fault_does_not_hide_nan_and_out_of_bounds_values(capsys):
    """float64 obs that leave [-1, 1] and turn NaN: all three faults, not only the dtype one."""
    assert cli("check-env", "bad_envs:Float64Drifting", "--steps", "40") == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "FAIL obs dtype: expected dtype float32 (observation_space.dtype); got dtype float64 at reset(seed=0) (does not cast "
        "safely to float32: return obs.astype(np.float32)) (and 43 more times)",
        "FAIL obs finite: expected finite observation values; got obs[1] = nan at step 30",
        "FAIL obs bounds: expected obs[0] in [-1, 1] (observation_space low/high); got obs[0] = 1.5, above high[0] = 1, at step 3 "
        "(and 36 more times)",
        f"NOTE {ENDLESS_NOTE.format(steps=40)}",
        BOX3_D2,
        "3 violation(s) in bad_envs:Float64Drifting",
    ]
    assert err == ""


# ------------------------------------------------------------------------------ step determinism
@pytest.mark.parametrize("seed", range(6))
def test_a_reset_that_never_seeds_a_slippery_step_is_caught_whatever_the_draws(seed):
    """Was OK: reset ignores its seed (a fixed start, so two resets agree) and step slips with probability
    0.3 from self.np_random, so two `train --seed 1` runs differed. Step 1 after each reset(seed=s)
    agrees 58% of the time; self.np_random's state after the two resets tells it every time."""
    violations = check_env("bad_envs:SlipIgnoresSeed", steps=5, seed=seed)
    assert [v.check for v in violations] == ["step determinism"], violations
    assert violations[0].expected.endswith("(call super().reset(seed=seed) in reset() and draw randomness from self.np_random)")


def test_step_determinism_compares_the_first_step_after_two_seeded_resets_and_is_not_repeated_for_a_reset_fault():
    (v,) = check_env("bad_envs:StepIgnoresSeed", steps=3)
    assert v.actual.startswith("obs first [") and v.actual.endswith("at the first step after each reset(seed=0)"), v
    report = check_env("bad_envs:NondeterministicReset", steps=3)  # its steps differ too: one cause, one violation
    assert [x.check for x in report] == ["reset determinism"] and "step determinism" not in report.checks_run
    assert "step determinism" in check_env("bad_envs:GoodEnv", steps=3).checks_run


# ------------------------------------------------------------------------------ lists and an obs returned alone
def test_lists_from_reset_and_step_are_taken_as_train_takes_them(capsys):
    """Was "step returns: expected 5 values ...; got 5 values at step 1", and for reset's [obs, info] the
    old-API hint plus a false obs shape violation; Gymnasium's vector envs (so train) unpack lists."""
    assert check_env("bad_envs:ListReturns", steps=30) == []


def test_an_obs_returned_alone_as_a_list_is_still_checked_as_the_obs():
    found = {v.check: v for v in check_env("bad_envs:ObsAloneAsList", steps=5)}
    assert set(found) == {"reset returns", "obs bounds"}, found
    assert found["reset returns"].actual.startswith("list of 2 items at reset(seed=0) (the old gym API returned obs alone")
    assert found["obs bounds"].actual.startswith("obs[1] = 2, above high[1] = 1, at reset(seed=0)")


# ------------------------------------------------------------------------------ --seed
@pytest.mark.parametrize("seed", ["-1", str(10**23), str(2**31)])
def test_a_seed_train_refuses_is_refused_in_train_s_words_with_exit_2(seed, capsys, tmp_path, monkeypatch):
    """-1 was FAIL reset (the env blamed for numpy's refusal, exit 1), 10**23 passed: train takes 0..2**31-1."""
    from cli_helpers import run_main

    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["check-env", "bad_envs:GoodEnv", "--seed", seed], capsys)
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    line = err.strip().removeprefix("proxima check-env: error: ")
    assert line == f"--seed {seed}: must be an integer from 0 to 2,147,483,647 (numpy seeds are 32-bit; ranks and evaluation add offsets)"
    code, _, err = run_main(["train", "CartPole-v1", "--seed", seed, "--dry-run"], capsys)
    assert code == 2 and err.strip() == f"proxima train: error: {line}"
    with pytest.raises(ValueError, match="must be an integer from 0 to 2,147,483,647"):
        check_env("bad_envs:GoodEnv", seed=int(seed))
    assert list(tmp_path.iterdir()) == []


def test_the_largest_seed_train_takes_is_checked():
    assert check_env("bad_envs:GoodEnv", steps=3, seed=2**31 - 1) == []


def test_step_determinism_leaves_out_an_env_registered_nondeterministic(monkeypatch):
    # Gymnasium's check skips such an env (real hardware, a remote simulator): it passed check-env before
    # the check existed and must still
    import gymnasium as gym

    import bad_envs

    monkeypatch.setitem(gym.registry, "ProximaNoisyTest-v0", gym.envs.registration.EnvSpec(
        "ProximaNoisyTest-v0", entry_point=bad_envs.StepIgnoresSeed, nondeterministic=True))
    report = check_env("ProximaNoisyTest-v0", steps=3)
    assert list(report) == [] and "step determinism" not in report.checks_run
    assert [v.check for v in check_env("bad_envs:StepIgnoresSeed", steps=3)] == ["step determinism"]
