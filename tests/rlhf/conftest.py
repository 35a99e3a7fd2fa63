"""Shared fixtures: a tiny word-level tokenizer and GPT-2 built locally (nothing is downloaded)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from proxima.rlhf.config import RLHFConfig  # noqa: E402
from proxima.rlhf.demo import build_model, build_tokenizer, prompts_list  # noqa: E402
from proxima.rlhf.models import quiet_transformers  # noqa: E402

quiet_transformers()


def make_assets(folder, n_layer=1, n_embd=32, seed=0):
    """An untrained tiny GPT-2 + tokenizer in folder/model, demo prompts in folder/prompts.txt."""
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, n_layer=n_layer, n_embd=n_embd, n_head=2, n_positions=48, seed=seed)
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    (folder / "prompts.txt").write_text("\n".join(prompts_list()) + "\n")
    return folder


@pytest.fixture(scope="session")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("rlhf_assets"))


@pytest.fixture
def tiny_cfg(assets):
    """A config small enough that a PPO step takes a few tens of milliseconds."""
    def make(**overrides):
        base = dict(policy=str(assets / "model"), prompts=str(assets / "prompts.txt"),
                    reward="proxima.rlhf.demo:keyword_sentiment", batch_size=8, num_minibatches=2, update_epochs=2,
                    max_new_tokens=6, temperature=1.0, lr=1e-3, steps=2, print_every=0, sample_every=1,
                    checkpoint_every=1, plot=False)
        base.update(overrides)
        return RLHFConfig(**base)

    return make
