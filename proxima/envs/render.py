"""A tiny numpy rasterizer for the native classic-control envs: rgb_array frames without pygame.

Frames follow Gymnasium's layouts (sizes, scales, colours) closely enough to recognise the task in
a video; they are not pixel-identical to pygame's anti-aliased drawing. World coordinates are
y-up, as in Gymnasium's drawing code; the Canvas flips them to image rows. Off the hot path: the
envs hand one env's state over as Python floats.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

Color = tuple[int, int, int]
#: frames a second of each native env's video (a frame a step): Gymnasium's metadata["render_fps"] of the
#: env whose frames these copy, so a video plays at the speed Gymnasium's own does (a fixed 30 played
#: CartPole's 50 steps a second 0.6x slow); tests/unit/test_review28_video.py holds them to Gymnasium's
RENDER_FPS = {"CartPole-v1": 50, "Acrobot-v1": 15, "MountainCar-v0": 30, "MountainCarContinuous-v0": 30,
              "Pendulum-v1": 30}
WHITE: Color = (255, 255, 255)
BLACK: Color = (0, 0, 0)


class Canvas:
    """An (H, W, 3) uint8 image with y-up drawing primitives (pixel centres at integer + 0.5)."""

    def __init__(self, width: int, height: int, background: Color = WHITE):
        self.width, self.height = int(width), int(height)
        self.image = np.empty((self.height, self.width, 3), dtype=np.uint8)
        self.image[...] = background

    def _grid(self, x0: float, x1: float, y0: float, y1: float):
        """Pixel-centre coordinates (y-up) of the pixels in a world box, clipped to the canvas."""
        c0, c1 = max(int(math.floor(x0)), 0), min(int(math.ceil(x1)) + 1, self.width)
        r0, r1 = max(int(math.floor(y0)), 0), min(int(math.ceil(y1)) + 1, self.height)
        if c0 >= c1 or r0 >= r1:
            return None
        xs = np.arange(c0, c1, dtype=np.float64) + 0.5
        ys = np.arange(r0, r1, dtype=np.float64) + 0.5
        return c0, r0, xs[None, :], ys[:, None]

    def _paint(self, c0: int, r0: int, mask: np.ndarray, color: Color) -> None:
        h, w = mask.shape
        # y-up row r0 + i is image row height - 1 - (r0 + i)
        rows = self.height - 1 - (r0 + np.arange(h))
        block = self.image[rows[-1] : rows[0] + 1, c0 : c0 + w]  # rows ascending in the image
        block[mask[::-1]] = color

    def polygon(self, points: Sequence[tuple[float, float]], color: Color) -> None:
        """Fill a polygon (even-odd rule)."""
        pts = np.asarray(points, dtype=np.float64)
        grid = self._grid(pts[:, 0].min(), pts[:, 0].max(), pts[:, 1].min(), pts[:, 1].max())
        if grid is None:
            return
        c0, r0, xs, ys = grid
        inside = np.zeros((ys.shape[0], xs.shape[1]), dtype=bool)
        for (xa, ya), (xb, yb) in zip(pts, np.roll(pts, -1, axis=0)):
            if ya == yb:
                continue
            crosses = (ya > ys) != (yb > ys)  # (h, 1)
            x_at = xa + (ys - ya) * (xb - xa) / (yb - ya)  # (h, 1)
            inside ^= crosses & (xs < x_at)
        self._paint(c0, r0, inside, color)

    def circle(self, cx: float, cy: float, radius: float, color: Color) -> None:
        grid = self._grid(cx - radius, cx + radius, cy - radius, cy + radius)
        if grid is None:
            return
        c0, r0, xs, ys = grid
        self._paint(c0, r0, (xs - cx) ** 2 + (ys - cy) ** 2 <= radius * radius, color)

    def line(self, xa: float, ya: float, xb: float, yb: float, color: Color, width: float = 1.0) -> None:
        """A segment drawn as every pixel within width/2 of it (at least one pixel wide)."""
        half = max(width, 1.0) / 2.0
        grid = self._grid(min(xa, xb) - half, max(xa, xb) + half, min(ya, yb) - half, max(ya, yb) + half)
        if grid is None:
            return
        c0, r0, xs, ys = grid
        dx, dy = xb - xa, yb - ya
        length2 = dx * dx + dy * dy
        t = np.zeros(1) if length2 == 0 else np.clip(((xs - xa) * dx + (ys - ya) * dy) / length2, 0.0, 1.0)
        dist2 = (xs - (xa + t * dx)) ** 2 + (ys - (ya + t * dy)) ** 2
        self._paint(c0, r0, dist2 <= half * half + 0.25, color)

    def polyline(self, points: Sequence[tuple[float, float]], color: Color, width: float = 1.0) -> None:
        for (xa, ya), (xb, yb) in zip(points[:-1], points[1:]):
            self.line(xa, ya, xb, yb, color, width)


def _rotate(points, angle: float, dx: float = 0.0, dy: float = 0.0):
    c, s = math.cos(angle), math.sin(angle)
    return [(x * c - y * s + dx, x * s + y * c + dy) for x, y in points]


def render_cartpole(x: float, theta: float, x_threshold: float = 2.4, length: float = 0.5) -> np.ndarray:
    """CartPole, 600x400: the cart on its track and the pole, as in Gymnasium's frame."""
    width, height = 600, 400
    canvas = Canvas(width, height)
    scale = width / (x_threshold * 2)
    polewidth, polelen, cartwidth, cartheight = 10.0, scale * (2 * length), 50.0, 30.0
    cartx, carty, axleoffset = x * scale + width / 2.0, 100.0, cartheight / 4.0
    canvas.line(0, carty, width, carty, BLACK)
    l, r, t, b = -cartwidth / 2, cartwidth / 2, cartheight / 2, -cartheight / 2
    canvas.polygon([(l + cartx, b + carty), (l + cartx, t + carty), (r + cartx, t + carty), (r + cartx, b + carty)], BLACK)
    l, r, t, b = -polewidth / 2, polewidth / 2, polelen - polewidth / 2, -polewidth / 2
    pole = _rotate([(l, b), (l, t), (r, t), (r, b)], -theta, cartx, carty + axleoffset)
    canvas.polygon(pole, (202, 152, 101))
    canvas.circle(cartx, carty + axleoffset, polewidth / 2, (129, 132, 203))
    return canvas.image


def render_acrobot(theta1: float, theta2: float, link_length_1: float = 1.0, link_length_2: float = 1.0) -> np.ndarray:
    """Acrobot, 500x500: two links hanging from the centre, the goal line above."""
    dim = 500
    canvas = Canvas(dim, dim)
    bound = link_length_1 + link_length_2 + 0.2
    scale, offset = dim / (bound * 2), dim / 2
    # Gymnasium draws in a y-down-then-flipped frame; in y-up world terms the links hang down
    # from the pivot at theta = 0 and the goal line is one link length above it.
    canvas.line(-2.2 * scale + offset, 1 * scale + offset, 2.2 * scale + offset, 1 * scale + offset, BLACK)
    p0 = (offset, offset)
    p1 = (offset + link_length_1 * math.sin(theta1) * scale, offset - link_length_1 * math.cos(theta1) * scale)
    p2 = (p1[0] + link_length_2 * math.sin(theta1 + theta2) * scale, p1[1] - link_length_2 * math.cos(theta1 + theta2) * scale)
    for (xa, ya), (xb, yb) in ((p0, p1), (p1, p2)):
        canvas.line(xa, ya, xb, yb, (0, 204, 204), width=0.2 * scale)
        canvas.circle(xa, ya, 0.1 * scale, (204, 204, 0))
    return canvas.image


def render_mountain_car(position: float, goal_position: float, min_position: float = -1.2, max_position: float = 0.6) -> np.ndarray:
    """MountainCar, 600x400: the hill curve, the car on it and the goal flag."""
    width, height = 600, 400
    canvas = Canvas(width, height)
    scale = width / (max_position - min_position)

    def h(xs):
        return np.sin(3 * xs) * 0.45 + 0.55

    xs = np.linspace(min_position, max_position, 100)
    canvas.polyline(list(zip((xs - min_position) * scale, h(xs) * scale)), BLACK, width=2.0)
    carwidth, carheight, clearance = 40, 20, 10
    angle = math.cos(3 * position)
    l, r, t, b = -carwidth / 2, carwidth / 2, carheight, 0
    dx, dy = (position - min_position) * scale, clearance + float(h(position)) * scale
    canvas.polygon(_rotate([(l, b), (l, t), (r, t), (r, b)], angle, dx, dy), BLACK)
    for wx in (carwidth / 4, -carwidth / 4):
        (cx, cy), = _rotate([(wx, 0)], angle, dx, dy)
        canvas.circle(cx, cy, carheight / 2.5, (128, 128, 128))
    flagx = (goal_position - min_position) * scale
    flagy1 = float(h(goal_position)) * scale
    flagy2 = flagy1 + 50
    canvas.line(flagx, flagy1, flagx, flagy2, BLACK)
    canvas.polygon([(flagx, flagy2), (flagx, flagy2 - 10), (flagx + 25, flagy2 - 5)], (204, 204, 0))
    return canvas.image


def render_pendulum(theta: float) -> np.ndarray:
    """Pendulum, 500x500: the rod from the centre (theta = 0 points up), and the axle."""
    dim = 500
    canvas = Canvas(dim, dim)
    bound = 2.2
    scale, offset = dim / (bound * 2), dim // 2
    rod_length, rod_width = 1 * scale, 0.2 * scale
    end = (offset - rod_length * math.sin(theta), offset + rod_length * math.cos(theta))
    canvas.line(offset, offset, end[0], end[1], (204, 77, 77), width=rod_width)
    canvas.circle(end[0], end[1], rod_width / 2, (204, 77, 77))
    canvas.circle(offset, offset, 0.05 * scale, BLACK)
    return canvas.image
