"""Review 29 (CPU accel flags): under --amp bf16 the GAE bootstrap V(final_obs) (graphs._Parts.advantages'
value_of) ran outside autocast, in float32, while the rollout's values (V(s_t+1) for the other steps)
came from bf16 hidden layers: one GAE, two precisions. Every no-grad pass of the first hidden layer now
runs under autocast."""

from __future__ import annotations

import torch

import proxima
from proxima.config import PPOConfig


def test_every_no_grad_hidden_layer_pass_runs_under_autocast_with_amp_bf16(tmp_path, monkeypatch):
    calls = []
    forward = torch.nn.Linear.forward

    def traced(self, x):
        if not torch.is_grad_enabled() and tuple(self.weight.shape) == (64, 4):  # CartPole's first hidden layer
            calls.append(torch.is_autocast_enabled("cpu"))
        return forward(self, x)

    monkeypatch.setattr(torch.nn.Linear, "forward", traced)
    proxima.train(PPOConfig(env_id="CartPole-v1", amp="bf16", num_envs=4, num_steps=32, total_timesteps=128,
                            eval_episodes=0, threads=1, progress=False, run_dir=str(tmp_path / "r")), quiet=True)
    # one iteration: 32 rollout steps and the bootstrap at least, none outside autocast
    assert len(calls) >= 33 and all(calls), (len(calls), calls.count(False))
