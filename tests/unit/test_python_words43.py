"""A diverged run's line from Python names PPOConfig's fields throughout (the checkpoint advice and
what to try), never a flag the script did not type; the CLI's names the flags."""
import pytest

import proxima
from proxima import PPOConfig
from tests.cli_helpers import run_main

DIVERGING = dict(env_id="Pendulum-v1", total_timesteps=1024, num_envs=2, num_steps=256, lr=1e30, progress=False,
                 eval_episodes=0)


def test_a_diverged_run_from_python_names_fields_not_flags(tmp_path):
    with pytest.raises(proxima.ProximaError) as e:
        proxima.train(PPOConfig(**DIVERGING, run_dir=str(tmp_path / "run")), quiet=True)
    line = str(e.value)
    assert line.startswith("non-finite loss or gradient in the update at global step 512 (iteration 1); "), line
    assert line.endswith("(PPOConfig(checkpoint_every=N) writes one every N iterations); try a lower lr or "
                         "max_grad_norm, or norm_obs/norm_reward"), line
    assert " --" not in line


def test_the_same_run_from_the_cli_names_the_flags(tmp_path, capsys):
    code, _, err = run_main(["train", "Pendulum-v1", "--total-timesteps", "1024", "--num-envs", "2", "--num-steps", "256",
                             "--lr", "1e30", "--eval-episodes", "0", "--no-progress", "--run-dir", str(tmp_path / "r")],
                            capsys)
    assert code == 2
    assert err.rstrip().endswith("(--checkpoint-every N writes one every N iterations); try a lower --lr or "
                                 "--max-grad-norm, or --norm-obs/--norm-reward"), err
