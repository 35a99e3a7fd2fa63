"""Evaluation: run a policy for a number of episodes and report the mean and std of the return."""

from __future__ import annotations

from typing import Optional

import torch

from .envs import make_env


@torch.no_grad()
def evaluate(policy, episodes: int = 10, deterministic: bool = True, seed: int = 12345, backend: str = "auto",
             max_steps: int = 1_000_000, video: Optional[str] = None) -> dict:
    """Run ``episodes`` episodes, one per env, each env's first episode (no bias towards short ones).

    The policy's observation normalizer is applied frozen (its training statistics). Returns a
    dict with env_id, episodes, mean_return, std_return, returns, lengths, deterministic.
    An env id read from the checkpoint that would import a module is refused (UntrustedEnvError)
    unless the policy was loaded with ``env_id=`` or ``trust_env=True`` (checkpoint.load_policy).
    """
    if not getattr(policy, "env_trusted", True):
        from .envs.gym_adapter import refuse_recorded_env

        refuse_recorded_env(policy.env_id, policy.path or "checkpoint")
    # training=False: Atari plays full games with raw rewards (no episodic life, no reward clipping)
    env = make_env(policy.env_id, episodes, device=policy.device, backend=backend, seed=seed,
                   render_mode="rgb_array" if video else None, training=False, env_kwargs=policy.config.get("env_kwargs"))
    try:
        obs = env.reset(seed=seed)
        if video is not None and env.render(0) is None:
            from .video import VideoError

            raise VideoError(f"--video {video}: env '{policy.env_id}' renders no frames (no render_mode='rgb_array' "
                             "support); evaluate without --video")
        frames = []

        def record(finished: torch.Tensor) -> None:
            frame = env.render(0)
            if frame is not None and not bool(finished[0]):
                frames.append(frame)

        returns, lengths = first_episodes(env, obs, lambda o: policy.act(o, deterministic=deterministic), max_steps,
                                          before_step=record if video is not None else None)
    finally:
        env.close()
    result = summarize(policy.env_id, returns, lengths, deterministic)
    if video is not None:
        from .video import write_video

        result["video"] = write_video(frames, video) if frames else None
    return result


def first_episodes(env, obs: torch.Tensor, act, max_steps: int, before_step=None) -> tuple:
    """Step ``env`` (from ``obs``) with ``act(obs) -> action`` until every env finished its first
    episode; returns (returns float64 (N,), lengths int64 (N,)) of those episodes.
    ``before_step(finished)`` is called before each step (video frames)."""
    n = obs.shape[0]
    returns = torch.zeros(n, dtype=torch.float64, device=env.device)
    lengths = torch.zeros(n, dtype=torch.int64, device=env.device)
    finished = torch.zeros(n, dtype=torch.bool, device=env.device)
    for _ in range(max_steps):
        if before_step is not None:
            before_step(finished)
        obs, reward, terminated, truncated, _ = env.step(act(obs))
        returns += torch.where(finished, 0.0, reward.to(torch.float64))
        lengths += (~finished).to(torch.int64)
        finished |= terminated | truncated
        if bool(finished.all()):
            break
    return returns, lengths


def summarize(env_id: str, returns: torch.Tensor, lengths: torch.Tensor, deterministic: bool) -> dict:
    """The result dict of :func:`evaluate` from the episodes' returns and lengths."""
    r = returns.cpu().numpy()
    return {"env_id": env_id, "episodes": int(r.shape[0]), "mean_return": float(r.mean()),
            "std_return": float(r.std()) if r.shape[0] > 1 else 0.0, "returns": [float(x) for x in r],
            "lengths": [int(x) for x in lengths.cpu()], "deterministic": bool(deterministic)}


def format_result(result: dict) -> str:
    mode = "deterministic" if result["deterministic"] else "stochastic"
    return f"{result['env_id']}: {result['mean_return']:.2f} +- {result['std_return']:.2f} over {result['episodes']} episodes ({mode})"
