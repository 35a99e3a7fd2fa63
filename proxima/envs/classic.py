"""Torch-native, batched versions of Gymnasium's classic-control tasks.

Each class follows Gymnasium's dynamics, rewards, termination, time limit, reset distribution and
spaces (gymnasium/envs/classic_control, checked against Gymnasium 1.4), vectorized over N envs as
tensor ops. State is kept in ``dtype`` (float32 by default; float64 for parity checks against
Gymnasium, which steps in float64 numpy). Expressions are written in Gymnasium's order of
operations so that float64 runs round the same way (MountainCarContinuous within a float32 ulp a
step: Gymnasium keeps its state in float32 and mixes float32 and float64 arithmetic); see
tests/unit/test_env_parity.py.

Actions: Discrete envs take integer actions (N,) (or (N, 1)) of any integer dtype (uint8 too);
Box envs take (N, 1) (or (N,)) and clip them to the action space inside ``_dynamics`` as Gymnasium
does. An env from make_env refuses an action outside the space (NativeEnv.check_actions: out of
range, fractional or NaN) with an EnvError; the trainer turns that check off (a host sync a step),
and an env built by its class does not check: there an out-of-range discrete action gives an
out-of-range force.
"""

from __future__ import annotations

import math
from typing import Optional

import gymnasium as gym
import numpy as np
import torch

from . import render as _render
from .base import EnvError, NativeEnv


class _ClassicEnv(NativeEnv):
    """Shared constructor (dtype) and render() plumbing of the classic-control envs."""

    def __init__(self, num_envs: int, device="cpu", seed: Optional[int] = None, dtype=torch.float32):
        super().__init__(num_envs, device, seed)
        if dtype not in (torch.float32, torch.float64):
            raise EnvError(f"{type(self).__name__}: dtype must be torch.float32 or torch.float64, got {dtype}")
        self.dtype = dtype

    def _host_row(self, key: str, index: int) -> np.ndarray:
        """State row ``index`` of ``self.state[key]`` as float64 numpy (render only; syncs)."""
        if not self.state:
            raise EnvError(f"{self.env_id}: call reset() before render()")
        if not -self.num_envs <= int(index) < self.num_envs:
            raise IndexError(f"{self.env_id}: render index {index} out of range for {self.num_envs} envs")
        return self.state[key][int(index)].detach().to("cpu").to(torch.float64).numpy()

    def _flat_action(self, action: torch.Tensor) -> torch.Tensor:
        """(N,) view of a (N,) or (N, 1) action tensor, on this env's device."""
        return torch.as_tensor(action, device=self.device).reshape(self.num_envs)

    def _index_action(self, action: torch.Tensor) -> torch.Tensor:
        """(N,) integer action as int64 (no copy when it is already): ``a - 1`` or ``a * 2 - 1`` in a
        uint8 action wraps 0 to 255, a valid action (Gymnasium takes uint8 ones) turned into a huge force."""
        a = self._flat_action(action)
        return a if a.is_floating_point() else a.long()

    def _box_action(self, action: torch.Tensor) -> torch.Tensor:
        # Keep the action's own float dtype: Gymnasium computes with the float32 action as given
        # (NumPy 2 keeps float32 * python-float in float32), and torch promotes the same way.
        a = self._flat_action(action)
        return a if a.is_floating_point() else a.to(self.dtype)


class CartPole(_ClassicEnv):
    """CartPole-v1: push the cart left (0) or right (1) to keep the pole up; +1 per step, 500 steps."""

    env_id = "CartPole-v1"
    max_episode_steps = 500
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masscart + masspole
    polemass_length = masspole * length
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(self, num_envs: int, device="cpu", seed: Optional[int] = None, dtype=torch.float32):
        super().__init__(num_envs, device, seed, dtype)
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold * 2, np.inf], dtype=np.float32)  # as Gymnasium 1.x
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(2)

    def _sample_initial_state(self, n):
        return {"s": self._uniform((n, 4), -0.05, 0.05).to(self.dtype)}

    def _dynamics(self, action):
        s = self.state["s"]
        x, x_dot, theta, theta_dot = s.unbind(-1)
        # +-force_mag as arithmetic on the action: a Python number inside torch.where becomes a new
        # tensor every step (a host-to-device copy on CUDA)
        force = (self._index_action(action) * 2 - 1).to(s.dtype) * self.force_mag
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        # Gymnasium's grouping: polemass_length * square(theta_dot), masspole * square(costheta)
        temp = (force + self.polemass_length * (theta_dot * theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * (costheta * costheta) / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        # Gymnasium's default "euler" integrator: positions use the old velocities
        s = torch.stack(
            (x + self.tau * x_dot, x_dot + self.tau * xacc, theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc), -1
        )
        self.state["s"] = s
        x, theta = s[:, 0], s[:, 2]
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold)
        # +1 on every step, the terminal one included (Gymnasium's default, non-Sutton-Barto reward)
        reward = torch.ones(self.num_envs, dtype=torch.float32, device=self.device)
        return reward, terminated

    def _observe(self):
        return self.state["s"].to(torch.float32, copy=True)  # never alias the state

    def render(self, index: int = 0):
        x, _, theta, _ = self._host_row("s", index)
        return _render.render_cartpole(float(x), float(theta), self.x_threshold, self.length)


def _wrap(x: torch.Tensor, m: float, M: float) -> torch.Tensor:
    """Gymnasium's acrobot wrap(): while x > M: x -= M - m; while x < m: x += M - m (batched)."""
    diff = M - m
    x = torch.where(x > M, x - diff * torch.ceil((x - M) / diff), x)
    return torch.where(x < m, x + diff * torch.ceil((m - x) / diff), x)


class Acrobot(_ClassicEnv):
    """Acrobot-v1: torque -1/0/+1 (actions 0/1/2) on the middle joint to swing the tip above the
    line; -1 per step, 0 on the step that reaches it (terminated); 500 steps."""

    env_id = "Acrobot-v1"
    max_episode_steps = 500
    dt = 0.2
    LINK_LENGTH_1 = 1.0
    LINK_LENGTH_2 = 1.0
    LINK_MASS_1 = 1.0
    LINK_MASS_2 = 1.0
    LINK_COM_POS_1 = 0.5
    LINK_COM_POS_2 = 0.5
    LINK_MOI = 1.0
    MAX_VEL_1 = 4 * math.pi
    MAX_VEL_2 = 9 * math.pi

    def __init__(self, num_envs: int, device="cpu", seed: Optional[int] = None, dtype=torch.float32):
        super().__init__(num_envs, device, seed, dtype)
        high = np.array([1.0, 1.0, 1.0, 1.0, self.MAX_VEL_1, self.MAX_VEL_2], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(low=-high, high=high, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(3)

    def _sample_initial_state(self, n):
        # Gymnasium draws uniform(-0.1, 0.1, 4) and stores it as float32
        return {"s": self._uniform((n, 4), -0.1, 0.1).to(self.dtype)}

    def _dsdt(self, s: tuple, a: torch.Tensor) -> tuple:
        """Gymnasium's "book" dynamics; scalar sub-expressions grouped exactly as there."""
        m1 = self.LINK_MASS_1
        m2 = self.LINK_MASS_2
        l1 = self.LINK_LENGTH_1
        lc1 = self.LINK_COM_POS_1
        lc2 = self.LINK_COM_POS_2
        I1 = self.LINK_MOI
        I2 = self.LINK_MOI
        g = 9.8
        theta1, theta2, dtheta1, dtheta2 = s
        cos, sin, pi = torch.cos, torch.sin, math.pi
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos(theta2)) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * cos(theta2)) + I2
        phi2 = m2 * lc2 * g * cos(theta1 + theta2 - pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * cos(theta1 - pi / 2)
            + phi2
        )
        ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin(theta2) - phi2) / (m2 * lc2**2 + I2 - d2**2 / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return dtheta1, dtheta2, ddtheta1, ddtheta2

    def _dynamics(self, action):
        s = self.state["s"]
        torque = (self._index_action(action) - 1).to(s.dtype)  # AVAIL_TORQUE = [-1, 0, +1]; torque noise 0
        # One classic RK4 step over [0, dt] (Gymnasium's rk4 with t = [0, dt]): four evaluations.
        y0 = s.unbind(-1)
        dt = self.dt - 0
        dt2 = dt / 2.0
        k1 = self._dsdt(y0, torque)
        k2 = self._dsdt(tuple(y + dt2 * k for y, k in zip(y0, k1)), torque)
        k3 = self._dsdt(tuple(y + dt2 * k for y, k in zip(y0, k2)), torque)
        k4 = self._dsdt(tuple(y + dt * k for y, k in zip(y0, k3)), torque)
        ns = [y + dt / 6.0 * (a + 2 * b + 2 * c + d) for y, a, b, c, d in zip(y0, k1, k2, k3, k4)]
        ns[0] = _wrap(ns[0], -math.pi, math.pi)
        ns[1] = _wrap(ns[1], -math.pi, math.pi)
        ns[2] = ns[2].clamp(-self.MAX_VEL_1, self.MAX_VEL_1)
        ns[3] = ns[3].clamp(-self.MAX_VEL_2, self.MAX_VEL_2)
        s = torch.stack(ns, -1)
        self.state["s"] = s
        terminated = -torch.cos(s[:, 0]) - torch.cos(s[:, 1] + s[:, 0]) > 1.0
        reward = terminated.to(torch.float32) - 1.0  # -1, or 0 on the step that reaches the goal
        return reward, terminated

    def _observe(self):
        s = self.state["s"]
        return torch.stack((torch.cos(s[:, 0]), torch.sin(s[:, 0]), torch.cos(s[:, 1]), torch.sin(s[:, 1]), s[:, 2], s[:, 3]), -1).to(torch.float32)

    def render(self, index: int = 0):
        theta1, theta2, _, _ = self._host_row("s", index)
        return _render.render_acrobot(float(theta1), float(theta2), self.LINK_LENGTH_1, self.LINK_LENGTH_2)


class MountainCar(_ClassicEnv):
    """MountainCar-v0: accelerate left/none/right (0/1/2) to reach the flag at 0.5; -1 per step; 200 steps."""

    env_id = "MountainCar-v0"
    max_episode_steps = 200
    min_position, max_position, max_speed = -1.2, 0.6, 0.07
    goal_position, goal_velocity = 0.5, 0.0
    force, gravity = 0.001, 0.0025

    def __init__(self, num_envs: int, device="cpu", seed: Optional[int] = None, dtype=torch.float32):
        super().__init__(num_envs, device, seed, dtype)
        low = np.array([self.min_position, -self.max_speed], dtype=np.float32)
        high = np.array([self.max_position, self.max_speed], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(3)

    def _sample_initial_state(self, n):
        position = self._uniform((n,), -0.6, -0.4).to(self.dtype)
        return {"s": torch.stack((position, torch.zeros_like(position)), -1)}

    def _dynamics(self, action):
        s = self.state["s"]
        position, velocity = s.unbind(-1)
        push = (self._index_action(action) - 1).to(s.dtype) * self.force
        velocity = velocity + (push + torch.cos(3 * position) * (-self.gravity))
        velocity = velocity.clamp(-self.max_speed, self.max_speed)
        position = (position + velocity).clamp(self.min_position, self.max_position)
        velocity = torch.where((position == self.min_position) & (velocity < 0), torch.zeros_like(velocity), velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        self.state["s"] = torch.stack((position, velocity), -1)
        return -torch.ones_like(terminated, dtype=torch.float32), terminated  # -1 per step

    def _observe(self):
        return self.state["s"].to(torch.float32, copy=True)  # never alias the state

    def render(self, index: int = 0):
        position, _ = self._host_row("s", index)
        return _render.render_mountain_car(float(position), self.goal_position, self.min_position, self.max_position)


class MountainCarContinuous(_ClassicEnv):
    """MountainCarContinuous-v0: force in [-1, 1] (clipped); reward -0.1 * action^2 per step (of the
    action as given, unclipped, as in Gymnasium) plus 100 on reaching x >= 0.45; 999 steps."""

    env_id = "MountainCarContinuous-v0"
    max_episode_steps = 999
    min_action, max_action = -1.0, 1.0
    min_position, max_position, max_speed = -1.2, 0.6, 0.07
    goal_position, goal_velocity = 0.45, 0.0
    power = 0.0015

    def __init__(self, num_envs: int, device="cpu", seed: Optional[int] = None, dtype=torch.float32):
        super().__init__(num_envs, device, seed, dtype)
        low = np.array([self.min_position, -self.max_speed], dtype=np.float32)
        high = np.array([self.max_position, self.max_speed], dtype=np.float32)
        self.single_action_space = gym.spaces.Box(low=self.min_action, high=self.max_action, shape=(1,), dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(low=low, high=high, dtype=np.float32)

    _sample_initial_state = MountainCar._sample_initial_state  # same start distribution

    def _dynamics(self, action):
        s = self.state["s"]
        position, velocity = s.unbind(-1)
        a = self._box_action(action)
        force = a.clamp(self.min_action, self.max_action)
        velocity = (velocity + (force * self.power - 0.0025 * torch.cos(3 * position))).to(s.dtype)
        velocity = velocity.clamp(-self.max_speed, self.max_speed)
        position = (position + velocity).clamp(self.min_position, self.max_position)
        velocity = torch.where((position == self.min_position) & (velocity < 0), torch.zeros_like(velocity), velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        # Gymnasium keeps this env's state as float32 between steps
        self.state["s"] = torch.stack((position, velocity), -1).to(torch.float32).to(s.dtype)
        # (float64 Python arithmetic in Gymnasium: 100 * terminated - pow(action, 2) * 0.1)
        reward = terminated.to(s.dtype) * 100.0 - (a.to(s.dtype) ** 2) * 0.1
        return reward.to(torch.float32), terminated

    # same state layout and picture as MountainCar
    _observe = MountainCar._observe
    render = MountainCar.render


class Pendulum(_ClassicEnv):
    """Pendulum-v1: torque in [-2, 2] (clipped) to swing up and hold; reward -(angle^2 + 0.1 *
    velocity^2 + 0.001 * torque^2) of the clipped torque; never terminates; 200 steps."""

    env_id = "Pendulum-v1"
    max_episode_steps = 200
    max_speed, max_torque, dt, g, m, l = 8, 2.0, 0.05, 10.0, 1.0, 1.0

    def __init__(self, num_envs: int, device="cpu", seed: Optional[int] = None, dtype=torch.float32):
        super().__init__(num_envs, device, seed, dtype)
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        self.single_action_space = gym.spaces.Box(low=-self.max_torque, high=self.max_torque, shape=(1,), dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(low=-high, high=high, dtype=np.float32)
        # the start's bounds (th, thdot), made once: a tensor built in _sample_initial_state would be a
        # host-to-device copy in every step's autoreset
        self._start_high = torch.tensor([math.pi, 1.0], dtype=torch.float32, device=self.device)

    def _sample_initial_state(self, n):
        # each env's (th, thdot) drawn together, as Gymnasium draws uniform(-high, high) of shape (2,) and as
        # CartPole draws (n, 4): th for all n, then thdot for all n, gave env i a start that depended on n
        return {"s": self._uniform((n, 2), -self._start_high, self._start_high).to(self.dtype)}

    def _dynamics(self, action):
        s = self.state["s"]
        th, thdot = s.unbind(-1)
        g, m, l, dt = self.g, self.m, self.l, self.dt
        u = self._box_action(action).clamp(-self.max_torque, self.max_torque)
        angle = torch.remainder(th + math.pi, 2 * math.pi) - math.pi  # angle_normalize
        costs = angle**2 + 0.1 * thdot**2 + 0.001 * (u * u)
        newthdot = thdot + (3 * g / (2 * l) * torch.sin(th) + 3.0 / (m * l**2) * u) * dt
        newthdot = newthdot.clamp(-self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        self.state["s"] = torch.stack((newth, newthdot), -1).to(s.dtype)
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return (-costs).to(torch.float32), terminated

    def _observe(self):
        th, thdot = self.state["s"].unbind(-1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), -1).to(torch.float32)

    def render(self, index: int = 0):
        th, _ = self._host_row("s", index)
        return _render.render_pendulum(float(th))


#: env id -> native class. make_env() consults this first when backend is auto or native.
NATIVE_ENVS: dict[str, type[NativeEnv]] = {
    "CartPole-v1": CartPole,
    "Acrobot-v1": Acrobot,
    "MountainCar-v0": MountainCar,
    "MountainCarContinuous-v0": MountainCarContinuous,
    "Pendulum-v1": Pendulum,
}
