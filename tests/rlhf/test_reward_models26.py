"""Reward models with another tokenizer than the policy's: inputs longer than the model's positions are cut
(and counted), the policy's special tokens are not read as characters, and a tokenizer that cannot pad is
refused at load."""

import csv
import string
from types import SimpleNamespace

import pytest
import torch

from rlhf_assets import save_gpt2, save_reward_model, word_tokenizer

from proxima.rlhf import rewards as R
from proxima.rlhf.api import train_rlhf

POLICY_SPECIALS = ("[U]", "[A]")  # a chat template's markers, special tokens of the policy's tokenizer
TEMPLATE = "{% for m in messages %}[U] {{ m['content'] }} {% endfor %}{% if add_generation_prompt %}[A]{% endif %}"


def char_tokenizer(pad=True, eos=True, unk=True):
    """A tokenizer of single characters: a response of N policy words is about 5N of its tokens."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = [t for t, keep in (("<pad>", pad), ("<unk>", unk), ("<eos>", eos)) if keep] + ["<bos>"]
    vocab = {c: i for i, c in enumerate(specials + list(string.printable))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>" if unk else None))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>", pad_token="<pad>" if pad else None,
                                   eos_token="<eos>" if eos else None, unk_token="<unk>" if unk else None)


@pytest.fixture(scope="module")
def char_rm(tmp_path_factory):
    """A reward model of 48 positions that reads characters (save_reward_model: n_positions 48)."""
    return save_reward_model(tmp_path_factory.mktemp("char_rm") / "rm", tokenizer=char_tokenizer())


def cfg(tiny_cfg, tmp_path, **overrides):
    base = dict(batch_size=4, num_minibatches=2, update_epochs=1, steps=2, checkpoint_every=0, sample_every=0,
                run_dir=str(tmp_path / "run"))
    return tiny_cfg(**{**base, **overrides})


def test_a_response_longer_than_the_reward_models_positions_is_cut_and_counted(tiny_cfg, char_rm, tmp_path, capsys):
    # 12 characters of prompt + 16 new tokens fit the pre-check's 48 positions; 16 words are ~80 characters
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the food was\nthe movie is\n")
    run = train_rlhf(cfg(tiny_cfg, tmp_path, prompts=str(prompts), reward=str(char_rm), max_new_tokens=16))
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert [r["step"] for r in rows] == ["1", "2"]
    counts = [float(r["rewards/rm/truncated"]) for r in rows]
    assert sum(counts) > 0 and all(0 <= c <= 4 for c in counts)
    assert (run / "summary.json").is_file()
    notes = [line for line in capsys.readouterr().err.splitlines() if "positions" in line]
    assert len(notes) == 1 and notes[0].startswith("proxima rlhf: note: reward model ") and "truncated" in notes[0]


def test_a_cut_input_keeps_its_leading_special_tokens_and_its_end(char_rm):
    rm = R.RewardModel(str(char_rm), torch.device("cpu"))
    bos = rm.tokenizer.bos_token_id
    x = [bos] + list(range(10, 110))
    assert rm.fit(x) == [bos] + list(range(110 - 47, 110))
    assert rm.fit(x[:48]) == x[:48]


def test_a_reward_model_of_another_vocabulary_reads_no_policy_special_token(tiny_cfg, char_rm, tmp_path, monkeypatch):
    tok = word_tokenizer(extra_specials=POLICY_SPECIALS)
    tok.chat_template = TEMPLATE
    policy = save_gpt2(tmp_path / "policy", tokenizer=tok)
    prompts = tmp_path / "chat.jsonl"
    prompts.write_text('{"prompt": [{"role": "user", "content": "the food was"}]}\n'
                       '{"prompt": [{"role": "user", "content": "the movie is"}]}\n')
    seen = []
    encode = R.RewardModel.encode

    def spy(self, rows, responses, texts, where="before training"):
        ids = encode(self, rows, responses, texts, where)
        if where.startswith("at step"):
            seen.extend("".join(self.tokenizer.convert_ids_to_tokens(x)) for x in ids)
        return ids

    monkeypatch.setattr(R.RewardModel, "encode", spy)
    train_rlhf(cfg(tiny_cfg, tmp_path, policy=str(policy), prompts=str(prompts), reward=str(char_rm),
                   max_new_tokens=2))
    assert len(seen) == 8
    for text in seen:
        assert "the food was" in text or "the movie is" in text
        for special in POLICY_SPECIALS + ("[EOS]", "[PAD]"):
            assert special not in text, text


def test_the_same_vocabulary_keeps_the_policys_special_tokens(char_rm):
    rm, row = R.RewardModel(str(char_rm), torch.device("cpu")), SimpleNamespace(is_conversation=False)
    rm.read_with(char_tokenizer())
    assert rm.render(row, "x", "<bos>ab x") == "<bos>ab x"
    rm.read_with(word_tokenizer(extra_specials=POLICY_SPECIALS))
    assert rm.render(row, "x", "[U] ab [A] x [EOS]") == " ab  x "


@pytest.fixture(scope="module")
def rm_without_pad(tmp_path_factory):
    return save_reward_model(tmp_path_factory.mktemp("nopad") / "rm", tokenizer=char_tokenizer(pad=False, eos=False,
                                                                                               unk=False))


def test_a_reward_tokenizer_without_pad_eos_or_unk_is_refused_at_load(rm_without_pad):
    with pytest.raises(R.ConfigError, match=r"^--reward '.*rm': its tokenizer has no pad, eos or unk token; set "
                                            r"pad_token in tokenizer_config.json$"):
        R.RewardModel(str(rm_without_pad), torch.device("cpu"))


def test_the_cli_refuses_it_in_one_line_with_exit_2(assets, rm_without_pad, tmp_path, capsys):
    from proxima.cli import main

    run = tmp_path / "run"
    code = main(["rlhf", "--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"),
                 "--reward", str(rm_without_pad), "--run-dir", str(run), "--steps", "1", "--batch-size", "2",
                 "--num-minibatches", "1", "--max-new-tokens", "2", "--no-plot"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [f"proxima rlhf: error: --reward {str(rm_without_pad)!r}: its tokenizer has no pad, eos or unk "
                   f"token; set pad_token in tokenizer_config.json"]
    assert not run.exists()
