"""Review 27: an env id without a preset, where another version of the env has one, is told so
(HalfCheetah-v4 trained PPOConfig's classic-control defaults without a word; the MuJoCo presets are
for -v5)."""

from __future__ import annotations

import pytest

from cli_helpers import run_main
from proxima.presets import other_version_note

NOTE = ("proxima: note: no preset for CartPole-v0: PPOConfig's defaults (4 envs x 128 steps, no normalization) and "
        "your flags; CartPole-v1 has one (`proxima presets CartPole-v1`, its settings in proxima/presets/classic.yaml): "
        "give them as flags or in --config FILE.yaml")


def test_an_older_version_of_a_preset_env_is_told_the_preset():
    assert other_version_note("HalfCheetah-v4").startswith("no preset for HalfCheetah-v4: PPOConfig's defaults")
    assert "HalfCheetah-v5 has one (`proxima presets HalfCheetah-v5`, its settings in proxima/presets/mujoco.yaml)" in \
        other_version_note("HalfCheetah-v4")
    assert "LunarLander-v3 has one" in other_version_note("LunarLander-v2")


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
