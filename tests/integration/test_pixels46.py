"""A CNN far beyond its 84x84 (review 46): a run on 220x220 frames trains, with one note at its start
that names the checkpoint size the run then writes."""

from __future__ import annotations

import re

import pytest

from proxima import sizing
from tests.cli_helpers import module_written_in, run_main

ENV = '''
import gymnasium as gym, numpy as np
from gymnasium import spaces


class Big(gym.Env):
    """220x220 grayscale frames: the Nature CNN's linear layer 36,864 x 512, 11.8x Nature's 3,136 x 512."""
    observation_space = spaces.Box(0, 255, (220, 220, 1), np.uint8)
    action_space = spaces.Discrete(2)
    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((220, 220, 1), np.uint8), {}
    def step(self, a):
        self.t += 1
        return np.full((220, 220, 1), 255 * int(a), np.uint8), float(a), False, self.t >= 4, {}
'''


@pytest.fixture
def big46(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "big46", ENV)


def test_a_run_on_frames_far_beyond_84x84_notes_once_the_checkpoint_size_it_writes(big46, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sizing, "free_memory", lambda device: 64 << 30)  # it fits: the note, not the refusal
    run = tmp_path / "run"
    code, _, err = run_main(["train", "big46:Big", "--num-envs", "1", "--num-steps", "4", "--num-minibatches", "1",
                             "--total-timesteps", "4", "--keep-checkpoints", "1", "--eval-episodes", "1", "--run-dir", str(run)], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "images through the Nature CNN" in line]
    assert len(notes) == 1, err
    assert notes[0].startswith("proxima: note: env 'big46:Big': (220, 220, 1) images through the Nature CNN: its linear "
                               "layer is 36,864 x 512 (12x the 3,136 x 512 of an 84x84 frame), ~19M parameters, ")
    assert "ResizeObservation(env, (84, 84))" in notes[0]
    said = re.search(r"~([\d.]+) MiB a checkpoint", notes[0])
    assert said, notes[0]
    (written,) = (run / "checkpoints").glob("*.pt")
    mb = written.stat().st_size / 2**20
    assert abs(mb - float(said.group(1))) / mb < 0.02, (mb, notes[0])  # weights and Adam's moments: the file itself
