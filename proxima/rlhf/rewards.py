"""The reward: a local sequence-classification model, or a Python function.

Both are called the same way, ``reward(prompts, responses, texts) -> (B,) float32 tensor``: a function
gets the prompt strings and the response texts before EOS; a reward model reads ``texts``, the
prompt and response tokens decoded together, with its own tokenizer (which may even have another
vocabulary than the policy's).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
from pathlib import Path
from typing import Callable

import torch

from .config import ConfigError
from .models import use_fused_gelu


def load_reward(spec: str, device: torch.device, bf16: bool = False) -> Callable:
    """A directory -> RewardModel; ``module:function`` or ``path/to/file.py:function`` -> RewardFunction."""
    if os.path.isdir(spec):
        return RewardModel(spec, device, bf16)
    module_name, sep, func_name = spec.rpartition(":")
    if not sep or not module_name or not func_name:
        raise ConfigError(f"--reward {spec!r}: neither a reward-model directory nor module:function")
    return RewardFunction(_import_function(module_name, func_name, spec), spec)


def _import_function(module_name: str, func_name: str, spec: str) -> Callable:
    try:
        if module_name.endswith(".py"):
            if not os.path.isfile(module_name):
                raise ConfigError(f"--reward {spec!r}: no such file {module_name}")
            mod_spec = importlib.util.spec_from_file_location(Path(module_name).stem, module_name)
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:  # `proxima` as a console script does not put the cwd on the path
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except ConfigError:
        raise
    except Exception as e:  # any import failure of user code is bad input, reported in one line
        raise ConfigError(f"--reward {spec!r}: cannot import {module_name}: {type(e).__name__}: {e}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ConfigError(f"--reward {spec!r}: {module_name} has no function {func_name}")
    return func


class RewardFunction:
    """Wraps ``f(prompts: list[str], responses: list[str]) -> list[float]`` and checks what it returns."""

    def __init__(self, func: Callable, spec: str):
        self.func, self.spec = func, spec

    def __call__(self, prompts: list, responses: list, texts: list = None) -> torch.Tensor:
        scores = self.func(list(prompts), list(responses))
        scores = [float(s) for s in scores]
        if len(scores) != len(responses):
            raise ValueError(f"reward {self.spec}: returned {len(scores)} scores for {len(responses)} responses")
        bad = [i for i, s in enumerate(scores) if not math.isfinite(s)]
        if bad:
            raise ValueError(f"reward {self.spec}: non-finite score {scores[bad[0]]} for response {bad[0]}: {responses[bad[0]]!r}")
        return torch.tensor(scores, dtype=torch.float32)


class RewardModel:
    """A frozen AutoModelForSequenceClassification with one output; the score is its logit at the last token."""

    def __init__(self, path: str, device: torch.device, bf16: bool = False):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            self.model = use_fused_gelu(AutoModelForSequenceClassification.from_pretrained(path)).to(device).eval()
            self.tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--reward {path!r}: cannot load a sequence-classification model: {str(e).splitlines()[0]}") from None
        if self.model.config.num_labels != 1:
            raise ConfigError(f"--reward {path!r}: the model has {self.model.config.num_labels} labels; a reward model has 1")
        self.model.requires_grad_(False)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
        # right padding: the classifier reads the last non-pad token
        self.tokenizer.padding_side = "right"
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.device, self.bf16 = device, bf16

    @torch.no_grad()
    def __call__(self, prompts: list, responses: list, texts: list) -> torch.Tensor:
        batch = self.tokenizer(texts, return_tensors="pt", padding=True).to(self.device)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = self.model(**batch).logits
        return logits[:, 0].float().cpu()
