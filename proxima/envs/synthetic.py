"""Synthetic torch-native tasks for benchmarks and tests, sized like the usual continuous tasks.

``LinearQuadratic-v0``: a stable random linear system ``s' = A s + B a`` with 17-dim observations
and 6-dim actions in [-1, 1] (HalfCheetah's sizes), reward ``-(|s|^2 + 0.1 |a|^2) / dim``,
1,000-step episodes. Cheap to step, so a benchmark on it measures the learner, not the simulator;
and it is learnable (drive the state to 0), so it is not a meaningless load.
"""

from __future__ import annotations

import math
from typing import Optional

import gymnasium as gym
import numpy as np
import torch

from .base import EnvError, NativeEnv

#: the least height or width of a frame an image env renders: a 36x36 observation shown as it is is a speck in a player
MIN_FRAME_SIDE = 144


def image_frame(image: torch.Tensor) -> np.ndarray:
    """An image observation as a video frame: (H, W, 3) uint8 numpy from an (H, W) or (H, W, C) uint8
    tensor (C 1: gray, repeated to 3 channels; C 3: RGB), each pixel repeated to a k x k block so the
    frame's smaller side is at least MIN_FRAME_SIDE (nearest-neighbour: the agent's pixels, unblurred)."""
    frame = image.detach().to("cpu")
    if frame.ndim == 2:
        frame = frame.unsqueeze(-1)
    if frame.shape[-1] == 1:
        frame = frame.expand(-1, -1, 3)
    k = max(1, -(-MIN_FRAME_SIDE // min(frame.shape[0], frame.shape[1])))
    return frame.repeat_interleave(k, 0).repeat_interleave(k, 1).contiguous().numpy()



class LinearQuadratic(NativeEnv):
    env_id = "LinearQuadratic-v0"
    max_episode_steps = 1000
    obs_dim, act_dim = 17, 6

    def __init__(self, num_envs: int, device="cpu", seed: Optional[int] = None):
        super().__init__(num_envs, device, seed)
        # fixed system matrices (same for every seed): the task is the same, only the episodes differ
        g = torch.Generator().manual_seed(1234)
        a = torch.randn(self.obs_dim, self.obs_dim, generator=g) / self.obs_dim ** 0.5
        self.A = (0.95 * a / torch.linalg.matrix_norm(a, ord=2)).to(self.device)  # spectral norm < 1: stable
        self.B = (0.3 * torch.randn(self.act_dim, self.obs_dim, generator=g)).to(self.device)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (self.obs_dim,), np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (self.act_dim,), np.float32)

    def _sample_initial_state(self, n):
        return {"s": self._uniform((n, self.obs_dim), -1.0, 1.0)}

    def _dynamics(self, action):
        a = action.reshape(self.num_envs, self.act_dim).clamp(-1.0, 1.0)
        s = self.state["s"] @ self.A + a @ self.B
        self.state["s"] = s
        reward = -(s.pow(2).sum(-1) + 0.1 * a.pow(2).sum(-1)) / self.obs_dim
        return reward, torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def _observe(self):
        return self.state["s"].clone()


class PixelQuadrant(NativeEnv):
    """``PixelQuadrant-v0``: which quadrant of a 36x36 RGB image holds the bright square?

    Observation (36, 36, 3) uint8 (HWC): dim noise 0..63 everywhere and a 10x10 square of 255 at a
    random place inside one quadrant; action Discrete(4), the quadrant (0 top-left, 1 top-right,
    2 bottom-left, 3 bottom-right); reward 1 for the right one, else 0; every episode is one step.
    A random policy earns 0.25 an episode; one that reads the pixels earns 1. The smallest task that
    the Nature-CNN path must solve (36x36 is the CNN's minimum), fast on a CPU.
    """

    env_id = "PixelQuadrant-v0"
    max_episode_steps = 1
    size, square = 36, 10
    supports_member_streams = False  # draws with randint from self.generator, not through _uniform
    render_fps = 4  # one-step episodes of two frames (the picture, then the same picture answered): 30 fps would flash them

    def __init__(self, num_envs: int, device="cpu", seed: Optional[int] = None):
        super().__init__(num_envs, device, seed)
        self.single_observation_space = gym.spaces.Box(0, 255, (self.size, self.size, 3), np.uint8)
        self.single_action_space = gym.spaces.Discrete(4)
        idx = torch.arange(self.size, device=self.device)
        self._rows, self._cols = idx.view(1, -1, 1), idx.view(1, 1, -1)
        #: one range for every number of a start: its remainders by 4 (quadrants), by the square's places in a
        #: quadrant and by 64 (noise levels) are each exactly uniform (576 for the 36x36 image's 9 places)
        self._draw_high = math.lcm(4, self.size // 2 - self.square + 1, 64)

    def _sample_initial_state(self, n):
        half, sq, size = self.size // 2, self.square, self.size
        # each env's start (quadrant, top, left, noise) drawn together as one row, as CartPole draws (n, 4): the
        # quadrants of all n, then their tops, ... gave env i a start that depended on n (evaluate's episodes=2
        # were not the first 2 of episodes=5)
        draw = torch.randint(0, self._draw_high, (n, 3 + size * size * 3), generator=self.generator, device=self.device,
                             dtype=torch.int16)
        quadrant = (draw[:, 0] % 4).long()
        top = (quadrant // 2) * half + draw[:, 1] % (half - sq + 1)
        left = (quadrant % 2) * half + draw[:, 2] % (half - sq + 1)
        # x % 64 as the low 6 bits, kept through uint8 (a % of every pixel took a third of a 256-env step)
        noise = draw[:, 3:].to(torch.uint8).bitwise_and_(63).reshape(n, size, size, 3)
        inside = ((self._rows >= top.view(-1, 1, 1)) & (self._rows < top.view(-1, 1, 1) + sq)
                  & (self._cols >= left.view(-1, 1, 1)) & (self._cols < left.view(-1, 1, 1) + sq))
        image = torch.where(inside.unsqueeze(-1), torch.full_like(noise, 255), noise)
        return {"quadrant": quadrant, "image": image}

    def _dynamics(self, action):
        reward = (action.reshape(self.num_envs).long() == self.state["quadrant"]).float()
        return reward, torch.ones(self.num_envs, dtype=torch.bool, device=self.device)

    def _observe(self):
        return self.state["image"].clone()

    def render(self, index: int = 0) -> np.ndarray:
        """Row ``index``'s observation as a (144, 144, 3) uint8 frame (image_frame: the 36x36 picture 4x)."""
        if not self.state:
            raise EnvError(f"{self.env_id}: call reset() before render()")
        if not -self.num_envs <= int(index) < self.num_envs:
            raise IndexError(f"{self.env_id}: render index {index} out of range for {self.num_envs} envs")
        return image_frame(self.state["image"][int(index)])
