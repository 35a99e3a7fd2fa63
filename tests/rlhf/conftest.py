"""Shared fixtures: a tiny word-level tokenizer and GPT-2 built locally (nothing is downloaded)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

import warm_python  # noqa: E402

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


def torchrun(*args):
    """``torchrun --nproc-per-node 2 -m ARGS`` on CPU (gloo); fails the test with the stderr tail."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONFAULTHANDLER": "1"}
    proc = warm_python.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                            "-m", *args], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


def two_process_config(assets, run_dir, **overrides) -> dict:
    """A 2-step run small enough for two CPU processes, a checkpoint every step."""
    cfg = {"policy": str(assets / "model"), "prompts": str(assets / "prompts.txt"),
           "reward": "proxima.rlhf.demo:keyword_sentiment", "batch_size": 4, "num_minibatches": 2, "micro_batch_size": 1,
           "update_epochs": 1, "max_new_tokens": 4, "steps": 2, "lr": 1e-3, "print_every": 0, "sample_every": 1,
           "checkpoint_every": 1, "plot": False, "run_dir": str(run_dir)}
    cfg.update(overrides)
    return cfg


def train_two_processes(folder, name, cfg):
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    torchrun("proxima.rlhf", "--config", str(folder / f"{name}.yaml"))
    return folder / name


@pytest.fixture(scope="session")
def ddp_run(assets, tmp_path_factory):
    """One data-parallel run on two CPU processes, shared by the tests that inspect or compare with it."""
    folder = tmp_path_factory.mktemp("ddp")
    return train_two_processes(folder, "ddp", two_process_config(assets, folder / "ddp"))


@pytest.fixture(scope="session")
def two_processes():
    """The helpers above, for test modules: (torchrun, two_process_config, train_two_processes)."""
    return torchrun, two_process_config, train_two_processes


MIXED_LENGTH_PROMPTS = ["the", "the movie", "the movie was", "the food was really", "the food was really good",
                        "the food was really good and", "honestly", "the hotel seemed quite lovely overall"]


@pytest.fixture(scope="session")
def mixed_length_prompts(tmp_path_factory):
    """A prompts file of 8 lines of 1 to 6 demo words (one token each): a batch of 8 holds every one of
    them, left-padded by 0 to 5 tokens."""
    path = tmp_path_factory.mktemp("mixed_prompts") / "prompts.txt"
    path.write_text("\n".join(MIXED_LENGTH_PROMPTS) + "\n")
    return path


@pytest.fixture(scope="session")
def llama_policy(tmp_path_factory):
    """A tiny Llama (RoPE) policy with the demo tokenizer, saved once per session (rlhf_assets.save_llama)."""
    from rlhf_assets import save_llama

    return save_llama(tmp_path_factory.mktemp("llama") / "model")
