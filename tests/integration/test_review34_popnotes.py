"""Review 34 (populations' notes, float64 docs, --config advice): train --seeds/--sweep and its --dry-run gave the
old "use --backend gymnasium" line for a preset's native backend and none of a single run's notes (--clip-obs
without --norm-obs, the float64 offset, Gymnasium's normalization wrappers, --hidden-sizes with a CNN); the
README said train notes a float64 offset where it cannot judge one (one env, --dry-run); and a refusal of a
--config FILE's device or total_timesteps advised flags the user never typed."""

from pathlib import Path

import pytest

from tests.cli_helpers import TINY_POP, error_line, module_written_in, run_main

ENVS = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class BigOffset(gym.Env):
    """a float64 observation 1e6 + 0.01 * N(0, 1): float32 rounds it flat"""
    observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = spaces.Discrete(2)

    def _obs(self):
        return np.array([1e6 + 0.01 * self.np_random.normal()])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, a):
        self.t += 1
        return self._obs(), 0.0, False, self.t >= 8, {}


def normobs():
    return gym.wrappers.NormalizeObservation(gym.make("CartPole-v1"))


class Frames(gym.Env):
    action_space = spaces.Discrete(2)
    observation_space = spaces.Box(0, 255, (36, 36, 3), np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((36, 36, 3), np.uint8), {}

    def step(self, a):
        return np.zeros((36, 36, 3), np.uint8), 0.0, False, True, {}


def stack():
    return gym.wrappers.FrameStackObservation(Frames(), 4)
'''
MODULE = "rev34popnotes_envs"
POP = ["--seeds", "1-2", *TINY_POP, "--total-timesteps", "32", "--eval-episodes", "0"]


@pytest.fixture(autouse=True)
def envs_module(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, MODULE, ENVS)


def notes(err: str) -> list:
    return [line for line in err.splitlines() if line.startswith("proxima: note: ")]


# --- 1. a population refuses and notes as a single run does, once -----------------------------------

@pytest.mark.parametrize("dry", [False, True])
def test_a_population_names_the_preset_that_chose_the_native_backend(capsys, dry):
    code, out, err = run_main(["train", "Pendulum-v1", "--env-kwargs", '{"g": 9.81}', *POP, "--run-dir", "P",
                               *(["--dry-run"] if dry else [])], capsys)
    line = error_line(code, err, "the preset Pendulum-v1/default chose --backend native",
                      "add --backend gymnasium (or auto)")
    assert "; use --backend" not in line and out == ""
    assert not Path("P").exists()


def test_a_population_run_prints_a_single_runs_notes_once(capsys):
    code, _, err = run_main(["train", f"{MODULE}:BigOffset", *POP, "--clip-obs", "5", "--clip-reward", "3",
                             "--run-dir", "P"], capsys)
    assert code == 0, err
    got = notes(err)
    assert got.count("proxima: note: --clip-obs 5 has no effect without --norm-obs") == 1, err
    assert got.count("proxima: note: --clip-reward 3 has no effect without --norm-reward") == 1, err
    # the population's env: 2 members x 2 envs, whose first observations show the offset
    offset = [n for n in got if "obs[0] is float64" in n and "across the 4 envs' first observations" in n]
    assert len(offset) == 1, err
    code, _, err = run_main(["train", f"{MODULE}:BigOffset", *POP, "--clip-obs", "5", "--run-dir", "Q", "--quiet"], capsys)
    assert code == 0 and notes(err) == [], err  # --quiet drops the advisory notes, as for a single run


def test_a_population_dry_run_prints_the_notes_of_the_env_it_built(capsys):
    code, out, err = run_main(["train", f"{MODULE}:normobs", *POP, "--clip-obs", "3", "--dry-run"], capsys)
    assert code == 0 and out.startswith('{"members": 2'), err
    got = notes(err)
    assert "proxima: note: --clip-obs 3 has no effect without --norm-obs" in got, err
    assert len([n for n in got if "is wrapped in gymnasium.wrappers.NormalizeObservation" in n]) == 1, err
    code, out, err = run_main(["train", f"{MODULE}:stack", *POP, "--hidden-sizes", "32", "--dry-run"], capsys)
    assert code == 0, err
    assert [n for n in notes(err) if n.startswith("proxima: note: --hidden-sizes 32 has no effect with the CNN encoder")], err
    code, out, err = run_main(["train", f"{MODULE}:normobs", *POP, "--clip-obs", "3", "--dry-run", "--quiet"], capsys)
    assert code == 0 and notes(err) == [], err


# --- 3. the float64 note: what train can judge, and what the README says -----------------------------

def test_train_notes_a_float64_offset_where_it_can_judge_it_and_the_readme_says_where(capsys):
    base = ["train", f"{MODULE}:BigOffset", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
            "--threads", "1", "--no-progress", "--eval-episodes", "0", "--total-timesteps", "32"]
    code, _, err = run_main([*base, "--num-envs", "2", "--run-dir", "two"], capsys)
    assert code == 0 and [n for n in notes(err) if "is float64" in n], err
    for extra in (["--num-envs", "1", "--run-dir", "one"], ["--num-envs", "2", "--dry-run"]):
        code, _, err = run_main([*base, *extra], capsys)
        assert code == 0 and not [n for n in notes(err) if "is float64" in n], (extra, err)
    # the README promised `train` notes it: it now names the runs that cannot judge it
    # the README's env notes, now docs/environments.md
    readme = " ".join((Path(__file__).resolve().parents[2] / "docs" / "environments.md").read_text().split())
    assert "which `check-env` and `train` note" not in readme
    clause = readme[readme.index("loses its variation in that cast"):][:400]
    assert "`--num-envs 1`" in clause and "`--dry-run`" in clause and "first observations" in clause, clause


# --- 4. a --config FILE's value is refused with advice to edit the file ------------------------------

def test_a_config_files_device_is_refused_with_the_file_to_edit(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the refusal under test, on a GPU machine too
    Path("c.yaml").write_text("device: cuda\n")
    code, out, err = run_main(["train", "CartPole-v1", "--config", "c.yaml", "--dry-run"], capsys)
    line = error_line(code, err, "c.yaml: device 'cuda': CUDA is not usable here", "edit device in c.yaml (cpu)")
    assert "--device" not in line
    code, out, err = run_main(["train", "CartPole-v1", "--device", "cuda", "--dry-run"], capsys)
    error_line(code, err, "--device 'cuda': CUDA is not usable here", "use --device cpu")  # typed: a flag's advice


def test_a_config_files_total_is_refused_with_the_file_to_edit(capsys):
    Path("c.yaml").write_text("total_timesteps: 10\n")
    code, out, err = run_main(["train", "CartPole-v1", "--config", "c.yaml", "--num-steps", "64", "--dry-run"], capsys)
    line = error_line(code, err, "c.yaml: total_timesteps: ", "is larger than total_timesteps 10",
                      "raise total_timesteps in c.yaml")
    assert "--total-timesteps" not in line
    assert "--num-steps 64" in line and "lower --num-envs or --num-steps" in line  # typed and default: flags
    code, out, err = run_main(["train", "CartPole-v1", "--total-timesteps", "10", "--dry-run"], capsys)
    error_line(code, err, "is larger than --total-timesteps 10", "raise --total-timesteps")
