"""`proxima rlhf --demo`: RLHF end to end, offline, on a laptop CPU in about a minute.

1. A word-level tokenizer and a tiny GPT-2 (2 layers, 64 wide) are built locally (nothing downloaded).
2. The model is pretrained briefly on generated reviews ("the food was really good but bland .")
   whose adjectives are positive or negative with equal odds, so it starts out neutral on average.
3. PPO fine-tunes it against :func:`keyword_sentiment` (or any ``--reward module:function``):
   the score should climb from about 0 towards 1 while the KL to the pretrained model stays bounded.

Everything the run needs (model, tokenizer, prompts) is written under ``<run_dir>/demo/``, so the
run can be resumed like any other.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path

from .config import ConfigError, RLHFConfig, validate

SUBJECTS = ["the movie", "the film", "the food", "the service", "the book", "the game", "the show", "the hotel",
            "the music", "the staff", "the story", "the room", "the concert", "the coffee", "the trip", "the app"]
VERBS = ["was", "is", "felt", "seemed", "looked"]
INTENSIFIERS = ["really", "very", "quite", "so", "truly"]
POSITIVE = ["great", "wonderful", "excellent", "amazing", "lovely", "fantastic", "good", "superb", "delightful",
            "brilliant", "charming", "fun"]
NEGATIVE = ["terrible", "awful", "boring", "bad", "horrible", "dull", "poor", "disappointing", "bland", "mediocre",
            "ugly", "slow"]
CONJUNCTIONS = ["and", "but", "yet"]
TAILS = ["overall", "i think", "to me", "honestly"]
SPECIALS = ["[PAD]", "[UNK]", "[EOS]"]
_POS, _NEG = set(POSITIVE), set(NEGATIVE)


def keyword_sentiment(prompts: list, responses: list) -> list:
    """Built-in demo reward in [-1, 1]: (positive - negative adjectives) / (all sentiment adjectives), 0 if none."""
    scores = []
    for response in responses:
        words = response.split()
        pos, neg = sum(w in _POS for w in words), sum(w in _NEG for w in words)
        scores.append((pos - neg) / max(pos + neg, 1))
    return scores


def demo_config() -> RLHFConfig:
    """The demo's defaults (flags and --config still override them)."""
    return RLHFConfig(
        reward=["proxima.rlhf.demo:keyword_sentiment"], steps=150, batch_size=32, num_minibatches=2, update_epochs=4,
        max_new_tokens=12, temperature=1.0, lr=2e-4, value_lr=1e-3, kl_coef=0.1, max_prompt_length=8,
        sample_every=20, print_every=10, checkpoint_every=0, plot=True,
    )


# ---------------------------------------------------------------------------------------------
# corpus, tokenizer, model
# ---------------------------------------------------------------------------------------------
def make_sentence(rng: random.Random) -> str:
    def adjective() -> str:
        words = POSITIVE if rng.random() < 0.5 else NEGATIVE
        return (rng.choice(INTENSIFIERS) + " " if rng.random() < 0.4 else "") + rng.choice(words)

    parts = [rng.choice(SUBJECTS), rng.choice(VERBS), adjective()]
    if rng.random() < 0.6:
        parts += [rng.choice(CONJUNCTIONS), adjective()]
    if rng.random() < 0.3:
        parts.append(rng.choice(TAILS))
    return " ".join(parts) + " ."


def prompts_list() -> list:
    return [f"{s} {v}" for s in SUBJECTS for v in VERBS]


def build_tokenizer():
    """A word-level tokenizer over the demo's vocabulary (PreTrainedTokenizerFast, saved with the model)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for phrase in SUBJECTS + VERBS + INTENSIFIERS + POSITIVE + NEGATIVE + CONJUNCTIONS + TAILS
                    for w in phrase.split()} | {"."})
    vocab = {w: i for i, w in enumerate(SPECIALS + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]")
    tokenizer.padding_side = "left"
    return tokenizer


def build_model(tokenizer, n_layer: int = 2, n_embd: int = 64, n_head: int = 4, n_positions: int = 64, seed: int = 0):
    """A fresh GPT-2 sized for the demo vocabulary, with dropout off."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=len(tokenizer), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer,
                        n_head=n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config)


def pretrain(model, tokenizer, sentences: list, steps: int, batch_size: int = 32, lr: float = 5e-3, seed: int = 0) -> float:
    """Next-token training on ``sentences`` (each followed by EOS); returns the last loss."""
    import torch

    g = torch.Generator().manual_seed(seed)
    encoded = [tokenizer(s, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for s in sentences]
    width = max(len(e) for e in encoded)
    ids = torch.full((len(encoded), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(encoded), width), -100, dtype=torch.long)  # -100: padding is not a target
    for i, e in enumerate(encoded):
        ids[i, :len(e)] = torch.tensor(e)
        labels[i, :len(e)] = torch.tensor(e)
    attention = (labels != -100).long()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    loss = float("nan")
    for step in range(steps):
        idx = torch.randint(len(encoded), (batch_size,), generator=g)
        for group in opt.param_groups:  # linear decay keeps the end of pretraining stable
            group["lr"] = lr * (1 - step / steps)
        out = model(input_ids=ids[idx], attention_mask=attention[idx], labels=labels[idx])
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()
        loss = out.loss.detach()
    return float(loss)


def build_assets(folder: Path, pretrain_steps: int, seed: int, corpus_size: int = 4000) -> None:
    """Tokenizer + pretrained model in folder/model, prompts in folder/prompts.txt."""
    rng = random.Random(seed)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=seed)
    sentences = [make_sentence(rng) for _ in range(corpus_size)]
    print(f"demo: pretraining a 2-layer, 64-wide GPT-2 ({sum(p.numel() for p in model.parameters()):,} parameters) "
          f"for {pretrain_steps} steps on {corpus_size} generated reviews", flush=True)
    loss = pretrain(model, tokenizer, sentences, pretrain_steps, seed=seed)
    print(f"demo: pretraining loss {loss:.3f}", flush=True)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    (folder / "prompts.txt").write_text("\n".join(prompts_list()) + "\n")


def run_demo(cfg: RLHFConfig = None, pretrain_steps: int = 200) -> Path:
    """Build the demo's model and prompts, then train_rlhf; returns the run directory.

    Bad input (a config value, a --device this machine lacks, a --reward that does not import) fails
    before anything is written or pretrained. A stop (SIGINT/SIGTERM: TrainingInterrupted, signals.OutsideLoop)
    or an error before PPO's first step, during the pretraining too, keeps nothing: the demo's files go with
    the run's, and the run directory with the folders above it that the demo made.

    Under torchrun every process calls this: rank 0 alone picks the run directory and builds the demo's files in
    it; the others wait for it in a collective (which fails at once when rank 0 fails and leaves the process group,
    or after the group's timeout) and train on what it wrote.
    """
    import torch
    import torch.distributed as tdist

    from ..device import resolve_device
    from ..signals import TrainingInterrupted, stops_held
    from . import dist as D, rundir
    from .api import _RankOutside, train_rlhf
    from .config import reward_specs
    from .rewards import load_rewards

    cfg = cfg or demo_config()

    def placed(run_dir: Path) -> RLHFConfig:
        assets = run_dir / "demo"
        return dataclasses.replace(cfg, policy=str(assets / "model"), tokenizer=None, prompts=str(assets / "prompts.txt"),
                                   run_dir=str(run_dir))

    given = cfg.run_dir
    run_dir = Path(given) if given else rundir.default_run_dir(cfg.seed, "rlhf-demo")
    claimed, existed, demo_existed, new_parents = False, True, True, []  # what a failure takes back (below): nothing yet
    d = None
    # SIGINT/SIGTERM before PPO's loop (train_rlhf installs its own): TrainingInterrupted at once; torchrun's
    # SIGTERM after another rank failed: that rank's end (dist.PeerEnded), said as lost contact
    outside = _RankOutside()
    try:
        outside.__enter__()
        cfg = placed(run_dir)
        validate(cfg)
        # --device cuda on a machine without CUDA: one line now, not after the pretraining
        device = resolve_device(cfg.device)
        d = D.init_distributed(device.type)  # the group train_rlhf joins again (one group: it finds this one)
        if not given:  # the name rank 0 will claim, so every rank checks the same directory
            run_dir = Path(D.broadcast_object(str(run_dir) if d.is_main else None, d))
            cfg = placed(run_dir)
        rundir.check_new_run_dir(run_dir)
        if given and (run_dir / "demo").exists():  # where the demo writes its model and prompts: never over a user's
            raise ConfigError(f"--run-dir {given}: holds a demo/ entry, where the demo writes its model and prompts; "
                              "choose another --run-dir (or move demo/ away)")
        # a bad --reward is reported before the pretraining
        load_rewards(reward_specs(cfg), cfg.reward_weights, torch.device("cpu"), import_path=cfg.reward_import_path)
        # every rank checked before rank 0 writes (an all-gather: a broadcast lets rank 0 go on at once): a rank
        # still checking would find rank 0's demo/ and refuse it
        D.gather_objects(None, d)
        if d.is_main:
            existed = run_dir.exists()
            demo_existed = (run_dir / "demo").exists()  # a user's own demo/ in a --run-dir that was there: never removed
            # the folders above the run directory that the demo creates (runs/, or a --run-dir's new parents): taken
            # back too on failure, when empty; deepest first
            new_parents = [p for p in run_dir.absolute().parents if not p.exists()]
            with stops_held():  # a stop meanwhile is raised once what the demo may take back is known here
                if not given:  # one atomic mkdir: a demo started in the same second gets base-2
                    run_dir = rundir.claim_run_dir(run_dir)
                claimed = True  # a given --run-dir: the demo's own folder (or demo/ in it, when it existed), from here on
        torch.set_num_threads(cfg.threads)
        if d.is_main:
            build_assets(run_dir / "demo", pretrain_steps, cfg.seed)
        # the other ranks wait here for the finished files, and the directory rank 0 claimed (base-2 in a busy second)
        run_dir = Path(D.broadcast_object(str(run_dir) if d.is_main else None, d))
        cfg = placed(run_dir)
        run = train_rlhf(cfg)
        outside.__exit__()
        return run
    except BaseException as e:
        outside.held += 1  # another signal while the demo's files are taken back is recorded, not raised (api.train_rlhf)
        # stopped or failed before the run wrote its files (the pretraining, input the trainer refuses: a prompt
        # longer than the model's positions, a LoRA target that is not there), or train_rlhf took them back (a
        # stop or an error before its first step): take back the demo's own files too. A run that trained keeps all.
        # Only rank 0 claimed anything.
        if claimed and not (run_dir / "config.yaml").exists():
            if not existed or not given:
                shutil.rmtree(run_dir, ignore_errors=True)
            elif not demo_existed:
                shutil.rmtree(run_dir / "demo", ignore_errors=True)
            for folder in new_parents:
                try:
                    folder.rmdir()  # only an empty one: another run may have been started there meanwhile
                except OSError:
                    break
        outside.__exit__()
        # still in the group when train_rlhf was not reached (or refused the config before joining it; it leaves the
        # group itself otherwise): leave it, so that the ranks waiting for this one end now with their line
        ended = D.end_after_failure(d, e) if d is not None and d.enabled and tdist.is_initialized() else e
        if ended is not e:  # a lost rank's line, or quiet when rank 0 says the same error
            raise ended from None
        if isinstance(e, TrainingInterrupted) and e.checkpoint is None and e.what is None:
            # OutsideLoop's, during the pretraining: it says nothing of where it landed (train_rlhf's stops say)
            raise TrainingInterrupted(e.signum, None, "before training started; nothing was kept") from None
        raise
