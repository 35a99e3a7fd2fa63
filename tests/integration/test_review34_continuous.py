"""Review 34 of continuous control: a float64 observation on a large offset, whose variation the float32
cast before --norm-obs erases, gets a note (check-env, naming the entry; train, from its envs' first
observations); LunarLander-v3 made continuous by --env-kwargs is told of LunarLanderContinuous-v3's preset;
Gymnasium's NormalizeObservation/NormalizeReward in a factory are told to give way to --norm-obs/--norm-reward;
--clip-obs/--clip-reward without their normalizer are noted; the progress line shows no 'return nan'; and
--env-kwargs on a native env whose backend a preset chose names the preset."""

import json
import math

import pytest

from tests.cli_helpers import TINY_RUN, error_line, module_written_in, run_main

#: BigOffset: a float64 observation OFFSET + SCALE * N(0, 1) (after the review's myenvs.BigOffset);
#: DictOffset: a Dict whose 'pos' holds a plain signal at entry 0 and an offset one at entry 1;
#: normobs/normrew: Pendulum in Gymnasium's normalization wrappers, as a user's factory builds it
ENVS = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class BigOffset(gym.Env):
    def __init__(self, offset=1e6, scale=0.01):
        self.observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float64)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.offset, self.scale = offset, scale

    def _obs(self):
        return np.array([self.offset + self.scale * self.np_random.normal()])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, a):
        self.t += 1
        return self._obs(), 0.0, False, self.t >= 20, {}


class DictOffset(BigOffset):
    def __init__(self):
        super().__init__()
        self.observation_space = spaces.Dict({"n": spaces.Box(0, 9, (1,), np.int32),
                                              "pos": spaces.Box(-np.inf, np.inf, (2,), np.float64)})

    def _obs(self):
        x = self.np_random.normal(size=2)
        return {"n": np.array([3], np.int32), "pos": np.array([x[0], self.offset + self.scale * x[1]])}


def normobs():
    return gym.wrappers.NormalizeObservation(gym.make("Pendulum-v1"))


def normrew():
    return gym.wrappers.NormalizeReward(gym.make("Pendulum-v1"))
'''
MODULE = "rev34cont_envs"


@pytest.fixture(autouse=True)
def envs_module(tmp_path, monkeypatch):
    """The env module in tmp_path, importable; sys.path and sys.modules put back afterwards."""
    yield from module_written_in(tmp_path, monkeypatch, MODULE, ENVS)


def notes(err: str, needle: str) -> list:
    return [line for line in err.splitlines() if "note" in line.lower() and needle in line]


# --- 1. float64 observations that float32 rounds flat --------------------------------------------------

def test_check_env_notes_a_float64_offset_signal_float32_erases(capsys):
    code, out, err = run_main(["check-env", f"{MODULE}:BigOffset", "--steps", "40"], capsys)
    assert code == 0, out + err  # a note, not a violation
    [line] = notes(out, "float32")
    assert line.startswith("NOTE obs[0] is float64") and "0.0625 apart" in line, line  # float32's step at 1e6
    assert "subtract the offset" in line and "TransformObservation" in line, line
    assert out.splitlines()[-1].startswith("OK: "), out
    assert out.splitlines()[-2] == ("spaces: obs Box(1,) float64 -> 1 features, as float32, MLP 64x64 tanh; action Box(1,) float32 "
                                    "[-1, 1] -> Gaussian, 1 dim, clipped to bounds"), out  # and the spaces line before it


def test_check_env_names_the_dict_key_and_entry_and_spares_a_plain_float64_signal(capsys):
    code, out, _ = run_main(["check-env", f"{MODULE}:DictOffset", "--steps", "40"], capsys)
    assert code == 0, out
    [line] = notes(out, "float32")  # entry 0 (N(0, 1) in float64) keeps its variation in float32: no note of it
    assert line.startswith("NOTE obs['pos'][1] is float64"), line
    # the same env's signal at offset 0: float32 keeps it, so no note at all
    code, out, _ = run_main(["check-env", f"{MODULE}:BigOffset", "--steps", "40", "--env-kwargs", '{"offset": 0.0}'], capsys)
    assert code == 0 and not notes(out, "float32"), out


def test_the_rule_is_float32s_step_against_one_percent_of_the_spread():
    """At 1000 float32's values are 6.1e-5 apart: a std of 1e-3 (step 6% of it) is noted, one of 1e-2 (0.6%) is not."""
    import numpy as np

    from proxima.envs.gym_adapter import Float64Spread

    rng = np.random.default_rng(0)
    for std, lost in ((1e-3, True), (1e-2, False)):
        spread = Float64Spread()
        spread.add(1000.0 + std * rng.standard_normal((500, 1)))
        assert bool(spread.lost()) is lost, (std, spread.lost())
        if lost:
            [(i, mean, seen, step, one)] = spread.lost()
            assert i == 0 and not one and math.isclose(step, 6.103515625e-05) and math.isclose(seen, std, rel_tol=0.1)


def test_train_notes_it_from_the_envs_first_observations(capsys):
    code, _, err = run_main(["train", f"{MODULE}:BigOffset", *TINY_RUN, "--norm-obs", "--total-timesteps", "64",
                             "--run-dir", "run"], capsys)
    assert code == 0, err
    [line] = notes(err, "float32")
    assert "env 'rev34cont_envs:BigOffset': obs[0] is float64" in line and "across the 4 envs' first observations" in line
    assert "float32 values are all 1e+06" in line, line
    assert f"proxima check-env {MODULE}:BigOffset" in line, line


# --- 2. a preset tuned on a Discrete env, for the env made continuous by --env-kwargs --------------------

def test_lunarlander_made_continuous_is_told_of_the_continuous_preset(capsys):
    pytest.importorskip("Box2D")
    code, out, err = run_main(["train", "LunarLander-v3", "--env-kwargs", '{"continuous": true}', "--dry-run"], capsys)
    assert code == 0, err
    [line] = notes(err, "LunarLanderContinuous-v3")
    assert "Box action space" in line and "preset in use (LunarLander-v3/default)" in line, line
    assert "Discrete" in line and "norm obs+reward" in line and "train LunarLanderContinuous-v3 instead" in line, line
    # a preset tuned on a Box env (Pendulum's) for the same env with kwargs: nothing to say
    code, _, err = run_main(["train", "Pendulum-v1", "--backend", "gymnasium", "--env-kwargs", '{"g": 9.81}', "--dry-run"],
                            capsys)
    assert code == 0 and not notes(err, "Box action space"), err


# --- 3. Gymnasium's normalization wrappers in a factory ---------------------------------------------------

def test_normalization_wrappers_in_a_factory_get_a_note(capsys):
    code, _, err = run_main(["train", f"{MODULE}:normobs", "--norm-obs", "--dry-run"], capsys)
    assert code == 0, err
    [line] = notes(err, "NormalizeObservation")
    assert "not saved in checkpoints" in line and "normalizes a second time" in line, line
    assert line.endswith("use --norm-obs, whose statistics are checkpointed"), line
    code, _, err = run_main(["train", f"{MODULE}:normrew", "--dry-run"], capsys)  # without --norm-reward: not twice
    [line] = notes(err, "NormalizeReward")
    assert "second time" not in line and "use --norm-reward" in line, line
    code, out, _ = run_main(["check-env", f"{MODULE}:normrew", "--steps", "5"], capsys)
    assert notes(out, "gymnasium.wrappers.NormalizeReward"), out


# --- 4. clip bounds without their normalizer ---------------------------------------------------------------

def test_clip_flags_without_their_normalizer_are_noted(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--clip-obs", "5", "--clip-reward", "3", "--dry-run"], capsys)
    assert code == 0, err
    assert notes(err, "--clip-obs 5 has no effect without --norm-obs"), err
    assert notes(err, "--clip-reward 3 has no effect without --norm-reward"), err
    code, _, err = run_main(["train", "CartPole-v1", "--clip-obs", "5", "--norm-obs", "--clip-reward", "3", "--dry-run"], capsys)
    assert code == 0 and not notes(err, "--clip-obs") and notes(err, "--clip-reward 3"), err
    code, _, err = run_main(["train", "CartPole-v1", "--dry-run"], capsys)  # not given: nothing to say
    assert code == 0 and not notes(err, "--clip-"), err


# --- 5. the progress line before any episode ended ----------------------------------------------------------

def test_progress_line_shows_no_nan_return_before_an_episode_ends(tmp_path, capsys):
    from proxima.logger import RunLogger

    log = RunLogger(tmp_path / "r", total_steps=32, progress=True)  # stderr no terminal: LineProgress's lines
    log.bar.interval = log.bar._due = 0.0  # a line for every iteration
    log.log(1, 16, {"charts/SPS": 100.0, "charts/episodic_return": math.nan})
    log.log(2, 32, {"charts/SPS": 100.0, "charts/episodic_return": 12.5})
    log.close()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("step ")]
    assert lines[0].endswith("| SPS 100 | return -") and "nan" not in lines[0], lines
    assert lines[-1].endswith("| return 12.5"), lines


# --- 6. --env-kwargs on a native env a preset chose ----------------------------------------------------------

def test_env_kwargs_on_a_native_backend_the_preset_chose_names_the_preset(capsys):
    for extra in ([], ["--dry-run"]):
        code, _, err = run_main(["train", "Pendulum-v1", "--env-kwargs", '{"g": 9.81}', *TINY_RUN, "--run-dir", "run",
                                 *extra], capsys)
        error_line(code, err, "the native 'Pendulum-v1' takes no constructor arguments",
                   "the preset Pendulum-v1/default chose --backend native", "add --backend gymnasium (or auto)")
    # typed by the user: make_env's own line, which names no preset
    code, _, err = run_main(["train", "Pendulum-v1", "--backend", "native", "--env-kwargs", json.dumps({"g": 9.81}),
                             "--dry-run"], capsys)
    assert "preset" not in error_line(code, err, "use --backend gymnasium (or auto)")
