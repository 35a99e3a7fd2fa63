"""The mean return of a uniformly random policy on each env with a built-in score range (aggregate.SCORE_RANGES's
low, rliable's score 0): N episodes per env in Gymnasium, episode i reset with seed i and its actions drawn from
the action space seeded i, so the figures are reproducible.

    python benchmarks/random_scores.py [--episodes 1000]

prints one line per env: its mean return over the episodes, their standard deviation, and Gymnasium's
registered reward_threshold (the range's high where there is one).
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

ENVS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1")


def random_returns(env_id: str, episodes: int) -> np.ndarray:
    """(episodes,) float64: each episode's return under uniformly random actions, episode i seeded i."""
    env = gym.make(env_id)
    returns = np.zeros(episodes)
    for i in range(episodes):
        env.reset(seed=i)
        env.action_space.seed(i)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            returns[i] += float(reward)
            done = terminated or truncated
    env.close()
    return returns


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=1000, help="episodes per env (default 1000)")
    args = p.parse_args()
    for env_id in ENVS:
        r = random_returns(env_id, args.episodes)
        print(f"{env_id}: mean {r.mean():.2f} std {r.std():.2f} over {r.size} episodes; "
              f"reward_threshold {gym.spec(env_id).reward_threshold}", flush=True)


if __name__ == "__main__":
    main()
