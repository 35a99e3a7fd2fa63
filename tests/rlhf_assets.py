"""Tiny Hugging Face checkpoints written to disk for the RLHF tests (offline, seconds to build).

A module of its own, not a conftest: tests/ and tests/rlhf/ both have a conftest, and
`from conftest import ...` would pick whichever was imported first (as distributed_helpers.py)."""

import torch

from proxima.rlhf.demo import build_model, build_tokenizer


def save_gpt2(folder, dtype=torch.float32, n_positions=48, seed=0, tokenizer=None, **save_kwargs):
    tok = tokenizer or build_tokenizer()
    model = build_model(tok, n_layer=1, n_embd=32, n_head=2, n_positions=n_positions, seed=seed).to(dtype)
    model.save_pretrained(folder, **save_kwargs)
    tok.save_pretrained(folder)
    return folder


def save_reward_model(folder, head_name="score", tokenizer=None):
    from safetensors.torch import save_file
    from transformers import GPT2Config, GPT2ForSequenceClassification

    tok = tokenizer or build_tokenizer()
    torch.manual_seed(3)
    model = GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_positions=48, n_embd=32, n_layer=1,
                                                     n_head=2, num_labels=1, pad_token_id=tok.pad_token_id))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    if head_name != "score":  # a checkpoint whose head has another name than transformers' class expects
        state = {k.replace("score.", f"{head_name}."): v.contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def word_tokenizer(reverse=False, pad=True, extra_specials=(), extra_words=()):
    """The demo's word-level tokenizer; ``reverse`` numbers its words in the opposite order (as many tokens,
    other ids), ``pad=False`` leaves it without a pad token (and right padding), as many released ones are."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from proxima.rlhf.demo import SPECIALS

    demo = build_tokenizer().get_vocab()
    words = sorted((w for w in demo if w not in SPECIALS), key=demo.get, reverse=reverse) + list(extra_words)
    vocab = {w: i for i, w in enumerate(SPECIALS + list(extra_specials) + words)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token="[EOS]",
                                  pad_token="[PAD]" if pad else None,
                                  additional_special_tokens=list(extra_specials) or None)
    tok.padding_side = "left" if pad else "right"
    return tok


def save_llama(folder, tokenizer=None, seed=0, generation=None, always=None, **config):
    """A 1-layer, 32-wide Llama: RoPE and a float ``attention_dropout`` read at every forward, the code paths
    GPT-2 does not take. ``generation``: generation_config.json fields; ``always``: a token id the model is
    rigged to answer every time (an instruct model ending its turn at once)."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tok = tokenizer or build_tokenizer()
    fields = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=48, tie_word_embeddings=False,
                  bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**{**fields, **config}))
    if always is not None:
        with torch.no_grad():  # residual dimension 0 large, untouched by the layer, and read only by `always`'s logit
            model.model.embed_tokens.weight[:, 0] = 100.0
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight[0].zero_()
                layer.mlp.down_proj.weight[0].zero_()
            model.model.norm.weight.zero_()
            model.model.norm.weight[0] = 1.0
            model.lm_head.weight.zero_()
            model.lm_head.weight[always, 0] = 30.0
    if generation is not None:
        model.generation_config = GenerationConfig(**generation)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def finished_tiny_rlhf_run(folder):
    """A finished 1-step RLHF run on a tiny GPT-2 written under ``folder`` (model/, prompts.txt, run/ with its real
    meta.json, config.yaml, summary.json and checkpoints/step_000001.pt); returns the run directory."""
    from pathlib import Path

    from proxima.rlhf import api
    from proxima.rlhf.config import RLHFConfig
    from proxima.rlhf.demo import prompts_list

    folder = Path(folder)
    save_gpt2(folder / "model")
    (folder / "prompts.txt").write_text("\n".join(prompts_list()) + "\n")
    cfg = RLHFConfig(policy=str(folder / "model"), prompts=str(folder / "prompts.txt"),
                     reward="proxima.rlhf.demo:keyword_sentiment", batch_size=4, num_minibatches=1, update_epochs=1,
                     max_new_tokens=4, steps=1, print_every=0, sample_every=0, checkpoint_every=1, plot=False,
                     run_dir=str(folder / "run"), threads=1)
    return api.train_rlhf(cfg)
