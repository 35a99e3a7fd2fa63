"""Review 27: an env id without a preset, where another version of the env has one, is told so
(HalfCheetah-v4 trained PPOConfig's classic-control defaults without a word; the MuJoCo presets are
for -v5). It names each preset of the other version, and is left out once a --config file sets the
run's settings (the advice taken)."""

from __future__ import annotations

import pytest

from cli_helpers import run_main
from proxima.presets import other_version_note

NOTE = ("proxima: note: no preset for CartPole-v0: PPOConfig's defaults (4 envs x 128 steps, no normalization) and "
        "your flags; CartPole-v1 has presets (default, fast, gpu): `proxima presets CartPole-v1 NAME` prints one's settings "
        "(proxima/presets/classic.yaml); give the settings as flags or in --config FILE.yaml")


def test_an_older_version_of_a_preset_env_is_told_the_preset():
    assert other_version_note("HalfCheetah-v4") == (
        "no preset for HalfCheetah-v4: PPOConfig's defaults (4 envs x 128 steps, no normalization) and your flags; "
        "HalfCheetah-v5 has a preset (default): `proxima presets HalfCheetah-v5 default` prints its settings "
        "(proxima/presets/mujoco.yaml); give them as flags or in --config FILE.yaml")
    assert "LunarLander-v3 has a preset (default):" in other_version_note("LunarLander-v2")
    assert "CartPole-v1 has presets (default, fast, gpu):" in other_version_note("CartPole-v0")  # three, each named


@pytest.mark.parametrize("env_id", ["CartPole-v1", "ALE/Pong-v5", "BipedalWalker-v3", "mymodule:Env-v1", "NoVersion"])
def test_no_note_where_a_preset_applies_or_no_version_has_one(env_id):
    assert other_version_note(env_id) is None


def test_train_and_its_dry_run_print_the_note_unless_quiet(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v0", "--dry-run"], capsys)
    assert code == 0 and NOTE in err.splitlines()
    code, _, err = run_main(["train", "CartPole-v0", "--dry-run", "--quiet"], capsys)
    assert code == 0 and "no preset for" not in err
    code, _, err = run_main(["train", "CartPole-v0", "--total-timesteps", "512", "--threads", "1", "--run-dir", "r",
                             "--no-progress", "--eval-episodes", "0"], capsys)
    assert code == 0 and NOTE in err.splitlines()
    code, _, err = run_main(["train", "CartPole-v1", "--dry-run"], capsys)
    assert code == 0 and "no preset for" not in err


def test_no_note_once_a_config_file_sets_the_runs_settings(tmp_path, capsys, monkeypatch):
    """--config FILE is the note's own advice: a file that sets settings has taken it; one that names only the
    env (and the run directory) has not."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tuned.yaml").write_text("env_id: CartPole-v0\nnum_envs: 8\nnum_steps: 32\nnorm_obs: true\n")
    (tmp_path / "env_only.yaml").write_text("env_id: CartPole-v0\nrun_dir: r_env_only\n")
    run = ["--total-timesteps", "512", "--threads", "1", "--no-progress", "--eval-episodes", "0"]
    code, _, err = run_main(["train", "--config", "tuned.yaml", "--dry-run"], capsys)
    assert code == 0 and "no preset for" not in err, err
    code, _, err = run_main(["train", "--config", "tuned.yaml", *run, "--run-dir", "r_tuned"], capsys)
    assert code == 0 and "no preset for" not in err, err
    code, _, err = run_main(["train", "--config", "env_only.yaml", "--dry-run"], capsys)
    assert code == 0 and NOTE in err.splitlines(), err
    code, _, err = run_main(["train", "--config", "env_only.yaml", *run], capsys)
    assert code == 0 and NOTE in err.splitlines(), err
    # the file's values all replaced by flags: the file set nothing the run trains with
    code, _, err = run_main(["train", "--config", "tuned.yaml", "--num-envs", "4", "--num-steps", "128", "--no-norm-obs",
                             "--dry-run"], capsys)
    assert code == 0 and NOTE in err.splitlines(), err
