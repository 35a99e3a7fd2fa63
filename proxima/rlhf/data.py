"""Prompts: read from a JSONL or text file, sharded across processes, drawn in shuffled passes."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .config import ConfigError


def load_prompts(path: str) -> list:
    """A .jsonl file (one JSON string, or object with a 'prompt' field, per line) or text (one prompt per line)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"--prompts {path!r}: no such file")
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--prompts {path!r}: cannot read: {e}") from None
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if file.suffix == ".jsonl":
            try:
                item = json.loads(line)
            except ValueError as e:
                raise ConfigError(f"--prompts {path}:{number}: not JSON ({e})") from None
            if isinstance(item, dict):
                item = item.get("prompt")
            if not isinstance(item, str):
                raise ConfigError(f"--prompts {path}:{number}: expected a string or an object with a string 'prompt'")
            prompts.append(item)
        else:
            prompts.append(line.rstrip("\n"))
    if not prompts:
        raise ConfigError(f"--prompts {path!r}: no prompts in the file")
    return prompts


class PromptSampler:
    """This process's shard (indices rank, rank + W, ...) of the prompts, in a fresh order every pass.

    Orders come from the global torch RNG (seeded per process), so the sampler state plus the RNG
    state in a checkpoint replay the same prompts after a resume.
    """

    def __init__(self, num_prompts: int, rank: int = 0, world_size: int = 1):
        self.shard = torch.arange(rank, num_prompts, world_size)
        if len(self.shard) == 0:
            raise ConfigError(f"--prompts: {num_prompts} prompts cannot be shared among {world_size} processes")
        self.order = self.shard[torch.randperm(len(self.shard))]
        self.pos = 0

    def next(self, n: int) -> list:
        """n prompt indices (a pass that runs out continues into a freshly shuffled one)."""
        out = []
        while len(out) < n:
            if self.pos == len(self.order):
                self.order, self.pos = self.shard[torch.randperm(len(self.shard))], 0
            take = min(n - len(out), len(self.order) - self.pos)
            out.extend(self.order[self.pos:self.pos + take].tolist())
            self.pos += take
        return out

    def state_dict(self) -> dict:
        return {"order": self.order.clone(), "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.order, self.pos = state["order"].clone(), int(state["pos"])
