"""Pixels end to end: the Nature CNN solves an image task, runs record the encoder, Dict envs train,
and bad pixel input stops the CLI with one line. Atari itself is in test_pixels_atari.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from proxima.checkpoint import load_policy
from proxima.config import PPOConfig
from proxima.evaluate import evaluate
from proxima.trainer import train
from cli_helpers import run_main, without_spaces_line

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_cnn_solves_the_pixel_quadrant_task_in_seconds(tmp_path):
    # a random policy earns 0.25 an episode; reading the bright square earns 1.0 (about 5 s here)
    cfg = PPOConfig(env_id="PixelQuadrant-v0", num_envs=16, num_steps=8, total_timesteps=3072, lr=1e-3,
                    eval_episodes=0, progress=False, checkpoint_every=0, threads=1)
    run_dir, agent = train(cfg, run_dir=tmp_path / "run", quiet=True)
    assert agent.encoder_kind == "cnn"
    result = evaluate(load_policy(run_dir), episodes=200, seed=7)
    assert result["mean_return"] >= 0.95, result["mean_return"]


def test_train_records_the_encoder_in_config_yaml_and_eval_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["train", "PixelQuadrant-v0", "--encoder", "mlp", "--num-envs", "4", "--num-steps", "8", "--total-timesteps", "64",
            "--run-dir", "D", "--no-progress", "--eval-episodes", "4", "--hidden-sizes", "16"]
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    config = yaml.safe_load((tmp_path / "D" / "config.yaml").read_text())
    assert config["encoder"] == "mlp"
    auto = argv[:2] + argv[4:]
    auto[auto.index("D")] = "E"
    assert run_main(auto, capsys)[0] == 0
    assert yaml.safe_load((tmp_path / "E" / "config.yaml").read_text())["encoder"] == "cnn"
    code, out, _ = run_main(["eval", "E", "--episodes", "3", "--json"], capsys)
    assert code == 0 and json.loads(out)["episodes"] == 3


def test_dict_env_with_an_image_and_a_vector_trains_and_evaluates(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    cfg = PPOConfig(env_id="bad_envs:ImageDictObs", backend="gymnasium", num_envs=2, num_steps=16, total_timesteps=64,
                    eval_episodes=0, progress=False, checkpoint_every=0, threads=1)
    run_dir, agent = train(cfg, run_dir=tmp_path / "run", quiet=True)
    assert agent.encoder_kind == "cnn" and set(agent.agent.encoder.encoders) == {"image", "vec"}
    policy = load_policy(run_dir, env_id="bad_envs:ImageDictObs")  # a module env from a file is named by the caller
    result = evaluate(policy, episodes=2, seed=3, backend="gymnasium")
    assert result["lengths"] == [10, 10]


@pytest.mark.parametrize("argv, needle", [
    (["train", "CartPole-v1", "--encoder", "cnn"], "--encoder cnn needs an image observation"),
    (["train", "PixelQuadrant-v0", "--norm-obs"], "--norm-obs: this env's observations hold an image"),
    (["train", "bad_envs:TextKeyObs", "--backend", "gymnasium"], "not supported: Text observation space"),
    (["train", "bad_envs:FloatPixelsAtStep3", "--backend", "gymnasium", "--num-envs", "2", "--num-steps", "4",
      "--total-timesteps", "8", "--num-minibatches", "2"], "env 0 returned an image of dtype float32 shape (36, 36, 3) at env step 3"),
])
def test_bad_pixel_input_exits_2_with_one_line_and_no_run_directory(argv, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(FIXTURES))
    code, _, err = run_main(argv + ["--run-dir", "D", "--no-progress"], capsys)
    assert code == 2 and "Traceback" not in err
    lines = without_spaces_line(err).rstrip("\n").split("\n")
    assert len(lines) == 1 and needle in lines[0], err
    if "step 3" not in needle:  # a failure mid-run keeps the run directory it had started
        assert not (tmp_path / "D").exists()


def test_stopped_and_resumed_pixel_run_is_bit_identical(tmp_path):
    """uint8 next_obs and the native image env's state go through the checkpoint: a run stopped after
    iteration 1 and resumed ends with the same parameters as one run of 2 iterations (CPU)."""
    import torch

    from proxima import checkpoint as ckpt
    from proxima.trainer import Trainer, TrainingInterrupted

    def cfg():
        return PPOConfig(env_id="PixelQuadrant-v0", num_envs=4, num_steps=8, total_timesteps=64, num_minibatches=2,
                         update_epochs=2, progress=False, checkpoint_every=1, eval_episodes=0, threads=1)

    train(cfg(), run_dir=tmp_path / "whole", quiet=True, evaluate_at_end=False)
    trainer = Trainer(cfg(), run_dir=tmp_path / "legs", quiet=True)
    try:
        with pytest.raises(TrainingInterrupted):
            trainer.run(stop_after=1)
    finally:
        trainer.close()
    state = ckpt.load_checkpoint(tmp_path / "legs")
    assert state["next_obs"].dtype == torch.uint8 and state["env"]["state"]["image"].dtype == torch.uint8
    train(None, run_dir=tmp_path / "legs", resume="auto", quiet=True, evaluate_at_end=False)
    whole, legs = ckpt.load_checkpoint(tmp_path / "whole"), ckpt.load_checkpoint(tmp_path / "legs")
    assert whole["global_step"] == legs["global_step"] == 64
    for name, tensor in whole["agent"].items():
        assert torch.equal(tensor, legs["agent"][name]), name
