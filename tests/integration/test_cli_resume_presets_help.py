"""`proxima resume` of a checkpoint file (--run-dir shown in --help), Gymnasium's ALE/<Game>-v5 ids taking
EnvPool's presets, and `proxima rlhf --help` showing its defaults."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from cli_helpers import run_main

from proxima import checkpoint as ckpt
from proxima import cli, presets
from proxima.config import ConfigError, PPOConfig


def help_text(command: str, capsys) -> str:
    """``proxima COMMAND --help`` (exit 0) as one line of words (argparse wraps at the terminal width)."""
    code, out, _ = run_main([command, "--help"], capsys)
    assert code == 0
    return " ".join(out.split())


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A 2-iteration CartPole run (512 steps), made in-process."""
    folder = tmp_path_factory.mktemp("resume_file")
    run_dir = folder / "a"
    assert cli.main(["train", "CartPole-v1", "--total-timesteps", "512", "--num-envs", "4", "--num-steps", "64",
                     "--run-dir", str(run_dir), "--quiet", "--eval-episodes", "1", "--threads", "1"]) == 0
    return run_dir


def test_resume_help_shows_run_dir_for_a_loose_checkpoint_and_the_positional_as_either(capsys):
    text = help_text("resume", capsys)
    assert ("RUN_DIR|CHECKPOINT run directory (continued from its newest usable checkpoint), or a checkpoint file: one "
            "in RUN/checkpoints/ continues RUN from it, a loose one needs --run-dir DIR") in text
    assert ("--run-dir RUN_DIR a loose checkpoint file only (one not in a run's checkpoints/ folder): the run directory "
            "to continue it in, new or empty; a run directory resumes in itself, and another --run-dir is refused") in text
    assert "An RLHF run (proxima rlhf) takes only --steps, --trust-run and --quiet; any other flag is refused." in text


def test_a_loose_checkpoint_resumes_only_with_run_dir(tiny_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ck").mkdir()
    shutil.copy(ckpt.list_checkpoints(tiny_run)[-1], tmp_path / "ck" / "loose.pt")
    code, out, err = run_main(["resume", "ck/loose.pt", "--quiet"], capsys)
    assert (code, out) == (2, "")
    assert err == ("proxima resume: error: ck/loose.pt: a checkpoint file outside a run's checkpoints/ folder; give "
                   "--run-dir DIR (a new or empty directory) for the run it continues\n")
    assert not (tmp_path / "runs").exists()
    code, out, err = run_main(["resume", "ck/loose.pt", "--run-dir", "runs/loose2", "--total-timesteps", "768",
                               "--quiet"], capsys)
    assert code == 0, err
    assert out == "run directory: runs/loose2\n"
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "runs" / "loose2")] == ["step_000000000768.pt"]


def test_a_run_directory_refuses_another_run_dir(tiny_run, capsys):
    code, _, err = run_main(["resume", str(tiny_run), "--run-dir", str(tiny_run.parent / "b"), "--quiet"], capsys)
    assert code == 2 and err.startswith(f"proxima resume: error: --run-dir {tiny_run.parent / 'b'}: a run resumes in its "
                                        "own directory")
    assert not (tiny_run.parent / "b").exists()


def test_ale_ids_take_the_presets_of_envpools_id():
    pong = presets.resolve("Pong-v5", None, PPOConfig())
    ale = presets.resolve("ALE/Pong-v5", None, PPOConfig())
    assert ale.env_id == "ALE/Pong-v5"  # the id itself is kept: Gymnasium builds it
    assert (ale.num_envs, ale.num_steps, ale.clip_coef, ale.encoder, ale.total_timesteps) == (8, 128, 0.1, "cnn", 10_000_000)
    assert {k: v for k, v in ale.to_dict().items() if k != "env_id"} == {k: v for k, v in pong.to_dict().items() if k != "env_id"}
    assert presets.preset_names("ALE/Breakout-v5") == ["default"]
    assert presets.resolve("ALE/NoSuchGame-v5", None, PPOConfig()).num_envs == PPOConfig().num_envs
    with pytest.raises(ConfigError, match=r"preset='fast': no such preset for ALE/Pong-v5 \(available: default;"):
        presets.resolve("ALE/Pong-v5", "fast", PPOConfig())


def test_presets_command_lists_pongs_preset_for_the_ale_id(capsys):
    code, out, _ = run_main(["presets", "ALE/Pong-v5", "--json"], capsys)
    rows = json.loads(out)
    assert code == 0 and [(r["env_id"], r["preset"], r["steps"]) for r in rows] == [("Pong-v5", "default", 10_000_000)]
    code, _, err = run_main(["presets", "ALE/NoSuchGame-v5"], capsys)
    assert code == 2 and err.startswith("proxima presets: error: no presets for 'ALE/NoSuchGame-v5'; envs with presets: ")
    assert "ALE/<Game>-v5 has <Game>-v5's" in help_text("presets", capsys)


def test_train_dry_run_of_an_ale_id_resolves_pongs_preset_before_building_the_env(monkeypatch, capsys):
    seen = {}

    def stop(cfg, world_size=1, resumed=False):  # run_setup.preflight would build the env (proxima[atari])
        seen["cfg"] = cfg
        raise ConfigError("stopped by the test")

    monkeypatch.setattr("proxima.run_setup.preflight", stop)
    code, _, err = run_main(["train", "ALE/Pong-v5", "--dry-run"], capsys)
    assert code == 2 and "stopped by the test" in err
    cfg = seen["cfg"]
    assert (cfg.env_id, cfg.num_envs, cfg.clip_coef, cfg.encoder) == ("ALE/Pong-v5", 8, 0.1, "cnn")


@pytest.mark.parametrize("flag, shown", [
    ("--steps STEPS", "(default: 100; --demo: 150)"),
    ("--lr LR", "(default: 1e-05; --demo: 0.0002)"),
    ("--batch-size BATCH_SIZE", "(default: 16; --demo: 32)"),
    ("--kl-coef KL_COEF", "(default: 0.05; --demo: 0.1)"),
    ("--update-epochs UPDATE_EPOCHS", "(default: 4)"),
    ("--clip-vloss, --no-clip-vloss", "(default: true)"),
    ("--advantage ADVANTAGE", "One of: gae, grpo, rloo. (default: gae)"),
    ("--value-lr VALUE_LR", "(default: lr). (--demo: 0.001)"),
    ("--demo-pretrain-steps N", "(default: 200)"),
])
def test_rlhf_help_shows_the_defaults_and_the_demos_own(flag, shown, capsys):
    text = help_text("rlhf", capsys)
    part = text[text.index(flag + " ") + len(flag):]
    nxt = re.search(r" --[a-z-]+( [A-Z_]+ |, --no-)", part)  # where the next flag's entry starts
    assert shown in part[:nxt.start() if nxt else None], part[:300]


def test_rlhf_help_shows_every_fields_own_default_and_the_demos(capsys):
    """Every flag whose help names a default names RLHFConfig's value (and demo_config's where it
    differs): read from the configs, so a changed default cannot leave --help behind."""
    from proxima.rlhf.cli import _shown
    from proxima.rlhf.config import FIELDS, RLHFConfig
    from proxima.rlhf.demo import demo_config

    # one entry per flag: a line starting "  --flag", up to the next such line, joined
    code, out, _ = run_main(["rlhf", "--help"], capsys)
    assert code == 0
    entries = {m.group(1): " ".join(m.group(0).split())
               for m in re.finditer(r"^  (--[a-z0-9-]+)[^\n]*(?:\n(?!  -)[^\n]*)*", out, re.M)}
    plain, demo, checked = RLHFConfig(), demo_config(), 0
    for name in FIELDS:
        part = entries["--" + name.replace("_", "-")]
        if f"(default: {_shown(getattr(plain, name))}" in part:
            checked += 1
        if getattr(demo, name) != getattr(plain, name):
            assert f"--demo: {_shown(getattr(demo, name))})" in part, (name, part[:300])
    assert checked >= len(FIELDS) // 2, checked
