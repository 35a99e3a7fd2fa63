"""Resume lines a Python caller reads name what a script writes (PPOConfig fields, proxima.train),
never a flag it did not type: the config.yaml edit note and the optimizer-lr refusal."""
import contextlib
import glob
import io

import pytest
import torch

import proxima
from proxima import PPOConfig


def _run(tmp_path):
    rd = str(tmp_path / "run")
    proxima.train(PPOConfig(env_id="CartPole-v1", total_timesteps=512, num_envs=2, num_steps=128, anneal_lr=False,
                            run_dir=rd, threads=1), quiet=True)
    return rd


def test_a_config_yaml_edit_note_from_python_names_the_config_not_flags(tmp_path):
    rd = _run(tmp_path)
    with open(rd + "/config.yaml") as f:
        text = f.read()
    with open(rd + "/config.yaml", "w") as f:
        f.write(text.replace("total_timesteps: 512", "total_timesteps: 4096"))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        proxima.train(None, resume=rd, quiet=True)
    [note] = [ln for ln in err.getvalue().splitlines() if "differs from the checkpoint's" in ln]
    assert "total_timesteps 4096 differs from the checkpoint's 512" in note, note
    assert f"give it in the config: proxima.train(PPOConfig(env_id=..., total_timesteps=4096), resume={rd!r})" in note, note
    assert "--" not in note and "proxima resume" not in note, note


def test_an_edited_optimizer_lr_refusal_from_python_names_anneal_lr_the_field(tmp_path):
    rd = _run(tmp_path)
    [path] = sorted(glob.glob(rd + "/checkpoints/*.pt"))[-1:]
    ckpt = torch.load(path, weights_only=True)
    ckpt["optimizer"]["param_groups"][0]["lr"] = 0.001
    torch.save(ckpt, path)
    with pytest.raises(proxima.CheckpointError) as e:
        proxima.train(None, resume=rd, quiet=True)
    line = str(e.value)
    assert "optimizer.param_groups[0].lr is 0.001; the run's recorded lr is 0.00025 (with anneal_lr=False it stays so)" in line
    assert "--anneal-lr" not in line
