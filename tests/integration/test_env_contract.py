"""`proxima train` and `check-env` on user envs that break a rule mid-run, or that Proxima reads in
a way the user should know of: the one line each gets (envs: contract_envs.py, next to this file)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from cli_helpers import run_main, without_spaces_line

HERE = Path(__file__).resolve().parent
NO_CKPT = "no checkpoint was written yet (--checkpoint-every N writes one every N iterations)"
SMALL = ["--seed", "1", "--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--total-timesteps", "32",
         "--eval-episodes", "0", "--run-dir", "D", "--no-progress"]


@pytest.fixture(autouse=True)
def envs_on_path(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.chdir(tmp_path)


def line_of(cls_name: str, text: str) -> int:
    """The line of contract_envs.py holding ``text`` inside class ``cls_name``."""
    import contract_envs

    lines, start = inspect.getsourcelines(getattr(contract_envs, cls_name))
    return start + next(i for i, row in enumerate(lines) if text in row)


# ------------------------------------------------------------------------------ mid-run contract breaks
@pytest.mark.parametrize("env_id, kwargs, vector, line", [
    ("WrongShapeAt", None, "sync",
     "env 1 returned an observation of shape (3,) at env step 3; observation_space declares shape (2,): return an array of "
     "that shape (check with: proxima check-env contract_envs:WrongShapeAt); global step 6"),
    ("WrongShapeAt", None, "async",
     "env 1 returned an observation of shape (3,) at env step 3; observation_space declares shape (2,): return an array of "
     "that shape (check with: proxima check-env contract_envs:WrongShapeAt); global step 6"),
    ("WrongShapeAt", '{"at": 5}', "sync",  # the step that ends the episode: its obs is the final obs
     "env 1 returned an observation of shape (3,) at env step 5; observation_space declares shape (2,): return an array of "
     "that shape (check with: proxima check-env contract_envs:WrongShapeAt --env-kwargs '{\"at\": 5}'); global step 10"),
    ("NoneInfoAt3", None, "sync",
     "env 1 returned info of type NoneType at env step 3; step() returns info as a dict (return {} for none) (check with: "
     "proxima check-env contract_envs:NoneInfoAt3); global step 6"),
    ("DictMissingKeyAt3", None, "sync",
     "env 1 returned an observation without the key 'vel' at env step 3; the observation space declares it: return "
     "obs['vel'] too (check with: proxima check-env contract_envs:DictMissingKeyAt3); global step 6"),
], ids=["shape", "shape async", "final obs shape", "info None", "dict key"])
def test_a_contract_break_mid_run_is_one_line_naming_env_and_step(capsys, env_id, kwargs, vector, line):
    """Was a ValueError/AttributeError traceback from Gymnasium's vector env or the final-obs packing
    (or check-env's first, unrelated, violation in its place)."""
    argv = ["train", f"contract_envs:{env_id}", *SMALL, "--vector", vector] + (["--env-kwargs", kwargs] if kwargs else [])
    code, _, err = run_main(argv, capsys)
    err = without_spaces_line(err)
    assert code == 2 and err == f"proxima train: error: env 'contract_envs:{env_id}': {line}; {NO_CKPT}\n", err
    assert not Path("D").exists()


def test_a_nan_observation_is_named_before_the_error_it_caused(capsys):
    """Env 1's NaN observation at its step 3 gives it a NaN action, on which its step 4 raises (it
    asserts its action space): the NaN is the cause, and is named first."""
    code, _, err = run_main(["train", "contract_envs:NaNObsStrictBox", *SMALL], capsys)
    # a Box-action env without a preset is told PPOConfig's defaults are discrete control's: a note before the error
    notes = [line for line in err.splitlines(keepends=True) if line.startswith("proxima: note: ")]
    assert [n.split(" has ")[0] for n in notes] == ["proxima: note: env 'contract_envs:NaNObsStrictBox'"], notes
    err = without_spaces_line("".join(line for line in err.splitlines(keepends=True) if line not in notes))
    at = line_of("NaNObsStrictBox", "assert self.action_space.contains")
    assert code == 2 and err == (
        "proxima train: error: non-finite observation from env 1 at global step 6 (env step 3); check the env's step() with: "
        "proxima check-env contract_envs:NaNObsStrictBox; the env's later error may follow from it: env 1 raised "
        f"AssertionError: invalid action [nan nan] (contract_envs.py:{at}) at env step 4 (action [nan nan]); {NO_CKPT}\n"), err


def test_an_exception_inside_numpy_names_the_users_line(capsys):
    code, _, err = run_main(["train", "contract_envs:RaisesInNumpy", *SMALL], capsys)
    err = without_spaces_line(err)
    at = line_of("RaisesInNumpy", "np.linalg.inv")
    assert code == 2
    assert re.fullmatch(rf"proxima train: error: env 'contract_envs:RaisesInNumpy': env 1 raised LinAlgError: Singular matrix "
                        rf"\(contract_envs\.py:{at}\) at env step 3 \(action [01]\); global step 6; {re.escape(NO_CKPT)}\n", err), err


def test_after_a_resume_the_env_step_counts_on_from_the_checkpoint(capsys, monkeypatch):
    """The resumed process's env 1 raises at its 3rd step: env step 16 + 3 of the run, global step 32 + 3 x 2."""
    argv = ["--seed", "1", "--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--eval-episodes", "0", "--no-progress"]
    code, _, err = run_main(["train", "contract_envs:RaisesWhenAsked", *argv, "--total-timesteps", "32", "--run-dir", "D",
                             "--checkpoint-every", "1"], capsys)
    assert code == 0, err
    monkeypatch.setenv("PROXIMA_TEST_RAISE", "1")
    code, _, err = run_main(["resume", "D", "--env", "contract_envs:RaisesWhenAsked", "--total-timesteps", "64", "--no-progress"], capsys)
    at = line_of("RaisesWhenAsked", "raise RuntimeError")
    last = err.strip().splitlines()[-1]
    assert code == 2 and re.fullmatch(
        rf"proxima resume: error: env 'contract_envs:RaisesWhenAsked': env 1 raised RuntimeError: asked to fail "
        rf"\(contract_envs\.py:{at}\) at env step 19 \(action [01]\); global step 38; last good checkpoint: "
        rf"D/checkpoints/step_000000000032\.pt", last), err


# ------------------------------------------------------------------------------ spaces Proxima reads its own way
def test_norm_obs_on_a_dict_of_uint8_vectors_stores_what_the_policy_saw(tmp_path):
    """The rollout buffer was uint8 (the env's tensor dtype) while the policy saw normalized floats:
    the update trained on the floats truncated to 0..255."""
    from proxima import ppo
    from proxima.config import PPOConfig
    from proxima.trainer import Trainer

    cfg = PPOConfig(env_id="contract_envs:DictU8", backend="gymnasium", num_envs=2, num_steps=8, total_timesteps=16,
                    norm_obs=True, progress=False, threads=1)
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    try:
        assert trainer.env.obs_dtype == torch.uint8 and trainer.rollout.obs.dtype == torch.float32
        seen = []
        step = trainer.agent.policy_step

        def spy(obs):
            seen.append(obs.clone())
            return step(obs)

        ppo.collect_rollout(trainer.env, spy, trainer.rollout, trainer.next_obs, trainer.obs_norm, None)
        assert all(o.dtype == torch.float32 for o in seen) and (seen[3] < 0).any()
        assert all(torch.equal(trainer.rollout.obs[t], seen[t]) for t in range(cfg.num_steps))
    finally:
        trainer.close()


def test_a_populations_rollout_under_norm_obs_holds_floats_for_uint8_vectors():
    from proxima.config import PPOConfig
    from proxima.population import Population, member_configs

    base = PPOConfig(env_id="contract_envs:DictU8", backend="gymnasium", num_envs=2, num_steps=8, total_timesteps=16,
                     norm_obs=True, progress=False, threads=1)
    pop = Population(member_configs(base, [1, 2], {}))
    try:
        assert pop.env.obs_dtype == torch.uint8 and pop.rollout.obs.dtype == torch.float32
    finally:
        pop.close()


def test_a_float64_box_action_reaches_a_strict_env_inside_its_bounds(capsys):
    """float32 bounds cast to float64 lay outside Box(-0.3, 0.3, float64): the env's assert failed at step 1."""
    import contract_envs
    import gymnasium as gym

    contract_envs.StrictF64Box.seen = []
    code, _, err = run_main(["train", "contract_envs:StrictF64Box", *SMALL], capsys)
    assert code == 0, err
    seen = np.array(contract_envs.StrictF64Box.seen)
    space = gym.spaces.Box(-0.3, 0.3, (2,), np.float64)
    assert seen.dtype == np.float64 and len(seen) >= 32 and all(space.contains(a) for a in seen)
    assert (np.abs(seen) == 0.3).any()  # clipped to a bound, exactly


@pytest.mark.parametrize("kwargs, noted", [('{"lo": 10.0, "hi": 20.0}', True), ('{"lo": -1.0, "hi": 1.0}', False)])
def test_an_action_range_far_from_the_policys_scale_gets_a_note(capsys, kwargs, noted):
    note = ("action_space Box(10.0, 20.0, (1,), float32): 0 lies outside its range [10, 20], so the early actions all clip "
            "to one bound and the policy may never learn; Proxima clips Box actions to the bounds but does not rescale them: "
            "wrap it in gymnasium.wrappers.RescaleAction: put def rescaled(**kw): return gymnasium.wrappers.RescaleAction("
            "contract_envs.Aim(**kw), np.float32(-1), np.float32(1)) in a module of yours and use MODULE:rescaled as the env")
    code, _, err = run_main(["train", "contract_envs:Aim", "--env-kwargs", kwargs, *SMALL], capsys)
    assert code == 0, err
    notes = [row for row in err.splitlines() if "RescaleAction" in row]
    assert notes == ([f"proxima: note: env 'contract_envs:Aim': {note}"] if noted else []), err
    code, out, _ = run_main(["check-env", "contract_envs:Aim", "--env-kwargs", kwargs], capsys)
    spaces = (f"spaces: obs Box(2,) float32 -> 2 features, MLP 64x64 tanh; action Box(1,) float32 [{'10, 20' if noted else '-1, 1'}] "
              "-> Gaussian, 1 dim, clipped to bounds")
    assert code == 0 and out.splitlines() == ([f"NOTE {note}"] if noted else []) + [spaces, "OK: contract_envs:Aim passes 20 checks"]


def test_a_reset_without_options_fails_check_env_as_it_fails_train(capsys):
    """check-env called reset(seed=...) only, so it passed an env train cannot reset."""
    code, out, _ = run_main(["check-env", "contract_envs:NoOptions"], capsys)
    assert code == 1 and out.splitlines() == [
        "FAIL reset: expected reset(seed=0, options=None) to work, as Gymnasium's vector envs (and so proxima train) call it; "
        "got TypeError: NoOptions.reset() got an unexpected keyword argument 'options' (declare the parameters: "
        "def reset(self, *, seed=None, options=None), calling super().reset(seed=seed) first (it seeds self.np_random))",
        "spaces: obs Box(2,) float32 -> 2 features, MLP 64x64 tanh; action Discrete(2) -> categorical over 2",
        "1 violation(s) in contract_envs:NoOptions"]
    code, _, err = run_main(["train", "contract_envs:NoOptions", *SMALL], capsys)
    err = without_spaces_line(err)
    assert code == 2 and err == (
        "proxima train: error: env 'contract_envs:NoOptions': env 0 raised TypeError: NoOptions.reset() got an unexpected "
        "keyword argument 'options' at reset (after env step 0); reset() must take options, as Gymnasium's vector envs call "
        "it: def reset(self, *, seed=None, options=None), calling super().reset(seed=seed) first (it seeds "
        "self.np_random)\n"), err


def test_debug_checks_check_each_dict_keys_bounds(capsys):
    code, _, err = run_main(["train", "contract_envs:DictOOB", "--debug-checks", *SMALL], capsys)
    err = without_spaces_line(err)
    assert code == 2 and err == (
        "proxima train: error: --debug-checks: observation [0.5, 5] of env 0 at global step 6 (env step 3) is outside the "
        f"observation space (obs['vel'] entry 1 = 5 > high 1); {NO_CKPT}\n"), err


def test_the_diagnosis_keeps_the_runs_own_error():
    """check-env's first violation (its own env and seed) may not be what stopped the run: the line
    keeps the run's exception too, not only the violation in its place."""
    from proxima.config import PPOConfig
    from proxima.run_setup import diagnose_failure

    error = diagnose_failure(ValueError("cannot reshape array of size 3 into shape (1,2)"),
                             PPOConfig(env_id="contract_envs:NoOptions"), None)
    assert str(error) == (
        "env 'contract_envs:NoOptions' breaks the env contract: reset: expected reset(seed=0, options=None) to work, as "
        "Gymnasium's vector envs (and so proxima train) call it; got TypeError: NoOptions.reset() got an unexpected keyword "
        "argument 'options' (declare the parameters: def reset(self, *, seed=None, options=None), calling "
        "super().reset(seed=seed) first (it seeds self.np_random)); see `proxima check-env "
        "contract_envs:NoOptions` (the run stopped on ValueError: cannot reshape array of size 3 into shape (1,2))")
