"""Presets as a user meets them: the Python note's call, the exported YAML's env, an env id's case."""
import os
import subprocess
import sys

import pytest

from proxima import PPOConfig
from proxima.config import ConfigError
from proxima.presets import resolve, unapplied_note


def _proxima(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "proxima", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_unapplied_note_names_no_total_the_caller_never_set():
    note = unapplied_note(PPOConfig(env_id="Pendulum-v1"))
    assert "`cfg = proxima.presets.resolve('Pendulum-v1')` applies it" in note
    assert "total_timesteps" not in note  # PPOConfig's 500,000 is not the CLI's 300,000


def test_unapplied_note_keeps_the_callers_own_total():
    note = unapplied_note(PPOConfig(env_id="Pendulum-v1", total_timesteps=100000))
    assert "cfg.total_timesteps = 100000` applies it" in note


def test_preset_of_a_miscased_env_id_says_the_env_id_first():
    with pytest.raises(ConfigError) as e:
        resolve("cartpole-v1", "fast", python=False)
    assert str(e.value).startswith("unknown env id 'cartpole-v1'; did you mean CartPole-v1?")


def test_exported_preset_names_its_env_so_another_env_id_is_noted(tmp_path):
    out = _proxima("presets", "CartPole-v1", "fast")
    assert out.returncode == 0, out.stderr
    assert "\nenv_id: CartPole-v1\n" in out.stdout
    (tmp_path / "f.yaml").write_text(out.stdout)
    run = _proxima("train", "Pendulum-v1", "--config", "f.yaml", "--dry-run", cwd=tmp_path)
    assert "ENV_ID Pendulum-v1 overrides --config f.yaml's env_id CartPole-v1" in run.stderr


def test_atari_family_export_names_a_real_game_and_no_env_id():
    out = _proxima("presets", "<Game>-v5", "default")
    assert out.returncode == 0, out.stderr
    assert "`proxima train ALE/SpaceInvaders-v5 --config FILE.yaml`" in out.stdout
    assert "env_id" not in out.stdout and "<Game>-v5 --config" not in out.stdout


def test_resume_with_a_preset_says_a_preset_is_chosen_when_a_run_starts(tmp_path):
    out = _proxima("resume", "runs/cartpole", "--preset", "default", cwd=tmp_path)
    assert out.returncode == 2
    assert ("unrecognized arguments: --preset default; a resume keeps the run's settings; a preset is chosen when a run "
            "starts: `proxima train ENV_ID --preset NAME --run-dir NEW`") in out.stderr
    assert "--progress" not in out.stderr


def test_mountaincar_default_run_says_at_its_start_the_preset_is_not_known_to_solve_it(tmp_path):
    from proxima.presets import all_presets

    assert "not known to solve" in all_presets()["MountainCar-v0"]["default"]["note"]  # the preset's data, not code
    run = _proxima("train", "MountainCar-v0", "--dry-run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert ("proxima: note: preset MountainCar-v0/default: not known to solve MountainCar-v0 (every episode -200); "
            "rl-zoo's tuned PPO uses --norm-obs --norm-reward, --num-envs 16 and --gae-lambda 0.98") in run.stderr
    off = _proxima("train", "MountainCar-v0", "--preset", "none", "--dry-run", cwd=tmp_path)
    assert off.returncode == 0 and "not known to solve" not in off.stderr


def test_presets_table_shows_the_total_a_run_trains_where_whole_batches_cut_it():
    out = _proxima("presets")
    assert out.returncode == 0, out.stderr
    (row,) = [line for line in out.stdout.splitlines() if line.startswith("MountainCarContinuous-v0 ")]
    assert "500,000 (491,520 trained)" in row  # 64 envs x 256 steps: 30 whole batches
