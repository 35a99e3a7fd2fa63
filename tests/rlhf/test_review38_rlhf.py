"""Review 38: a tokenizer without EOS whose policy's generation_config names one, a new run whose step 1
diverges (a reward of 1e30), empty JSON prompts, and the float32 scores in samples.jsonl."""

import json
import shutil

import pytest

from proxima.rlhf import resume, train_rlhf
from proxima.rlhf.__main__ import main
from proxima.rlhf.config import ConfigError
from proxima.rlhf.data import load_prompts
from proxima.rlhf.trainer import RLHFTrainer
from rlhf_assets import save_llama, word_tokenizer
from tests.rlhf.test_input_edges import args as cli_args
from tests.rlhf.test_input_edges import one_line_error as one_line  # the same helpers: one copy


def drop_from_tokenizer_config(folder, *keys):
    config = json.loads((folder / "tokenizer_config.json").read_text())
    for key in keys:
        config.pop(key, None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


# 1: the generation_config's eos ids stand in for a tokenizer without EOS

def test_a_tokenizer_without_eos_or_pad_ends_and_pads_with_the_generation_config_eos(tiny_cfg, tmp_path,
                                                                                       mixed_length_prompts):
    """The model answers <eot> at once; <eot> is its generation_config's (and config's) eos id, and the
    tokenizer names neither an EOS nor a pad token: responses end there with no missing-EOS penalty, and the
    prompts are left-padded with <eot>, as generate pads with the first eos id."""
    tok = word_tokenizer(pad=False, extra_specials=["<eot>"])
    eot = tok.convert_tokens_to_ids("<eot>")
    policy = save_llama(tmp_path / "noeos", tok, always=eot, eos_token_id=eot, pad_token_id=None,
                        generation={"eos_token_id": [eot]})
    drop_from_tokenizer_config(policy, "eos_token", "pad_token")
    t = RLHFTrainer(tiny_cfg(policy=str(policy), prompts=str(mixed_length_prompts)))
    assert t.tokenizer_as_loaded.eos_token_id is None and t.tokenizer_as_loaded.pad_token_id is None  # released as stored
    assert t.tokenizer.eos_token_id == t.tokenizer.pad_token_id == eot and t.stop_ids == [eot]
    b = t.rollout()
    assert b["responses"].shape == (8, 1) and (b["responses"] == eot).all()  # generation stopped after one token
    assert b["has_eos"].all() and b["lengths"].tolist() == [1] * 8
    assert b["scores"].tolist() == [0.0] * 8  # no -1 missing-EOS penalty
    width = b["context_length"]
    query, padding = b["query_responses"][:, :width], b["attention_mask"][:, :width] == 0
    assert padding.any() and query[padding].eq(eot).all()


def test_neither_a_tokenizer_eos_nor_a_generation_config_eos_is_refused_with_the_fix(assets, tmp_path, capsys):
    folder = shutil.copytree(assets / "model", tmp_path / "noeos")
    drop_from_tokenizer_config(folder, "eos_token")
    for name in ("config.json", "generation_config.json"):
        if (folder / name).is_file():
            data = json.loads((folder / name).read_text())
            data["eos_token_id"] = None
            (folder / name).write_text(json.dumps(data))
    err = one_line(capsys, main(cli_args(assets, tmp_path / "run", "--policy", str(folder))))
    assert err == (f"proxima rlhf: error: --policy '{folder}': the tokenizer has no EOS token and the policy's "
                   f"generation_config.json names no eos_token_id, so responses could never end; set eos_token in "
                   f"the tokenizer's tokenizer_config.json or eos_token_id in the policy's generation_config.json"), err
    assert not (tmp_path / "run").exists()


# 2: a new run whose step 1 diverges keeps nothing

BIG_REWARD = "def big(prompts, responses):\n    return [1e30] * len(responses)\n"


def test_a_new_run_whose_first_step_diverges_keeps_nothing_and_blames_the_reward_scale(assets, tmp_path, capsys):
    (tmp_path / "rew.py").write_text(BIG_REWARD)
    run_dir = tmp_path / "big"
    argv = cli_args(assets, run_dir, "--reward", f"{tmp_path / 'rew.py'}:big")
    err = one_line(capsys, main(argv))
    assert "non-finite losses/value_loss (inf) at step 1" in err, err
    assert "the new run keeps nothing, so the same command runs again" in err, err
    assert "the scores reach 1e+30 in size (objective/scores): scale the reward down" in err, err
    assert not run_dir.exists()
    err = one_line(capsys, main(argv))  # the same command: the same failure, not "already holds a run"
    assert "non-finite losses/value_loss (inf) at step 1" in err and "already holds a run" not in err, err
    # a folder the user had before stays, with what it held, and nothing of the run
    run_dir.mkdir(parents=True)
    (run_dir / "notes.txt").write_text("mine")
    one_line(capsys, main(argv))
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]


def test_a_diverged_step_with_ordinary_scores_keeps_the_step_size_hint(tiny_cfg, tmp_path, monkeypatch):
    from proxima.rlhf import loop as rlhf_loop

    real = RLHFTrainer.train_step

    def step_1_goes_nan(self):
        metrics, samples = real(self)
        metrics["losses/value_loss"] = float("nan")
        return metrics, samples

    monkeypatch.setattr(RLHFTrainer, "train_step", step_1_goes_nan)
    with pytest.raises(rlhf_loop.DivergedError) as e:
        train_rlhf(tiny_cfg(steps=2, run_dir=str(tmp_path / "run")))
    assert str(e.value).endswith("; try a lower --lr or --max-grad-norm") and "scale the reward" not in str(e.value)
    assert not (tmp_path / "run").exists()


# 3: an empty JSON prompt is refused like blank text lines and an empty conversation

@pytest.mark.parametrize("row", ['{"prompt": ""}', '{"prompt": "  "}', '""', '{"messages": ""}'])
def test_an_empty_json_prompt_is_refused_with_its_line(tmp_path, row):
    file = tmp_path / "p.jsonl"
    file.write_text('{"prompt": "the food"}\n' + row + "\n")
    with pytest.raises(ConfigError) as e:
        load_prompts(str(file))
    assert str(e.value) == f"--prompts {file}:2: empty prompt; give it text, or remove the row"


def test_an_empty_prompt_in_a_json_array_names_its_line(tmp_path):
    file = tmp_path / "p.json"
    file.write_text('[\n  {"prompt": "the food"},\n  {"prompt": ""}\n]\n')
    with pytest.raises(ConfigError, match=rf"^--prompts {file}:3: empty prompt"):
        load_prompts(str(file))


def test_a_prompt_of_no_tokens_is_refused_not_replaced_by_a_special_token(tmp_path):
    """encode_prompts' own guard, for rows that did not come through load_prompts (the word tokenizer adds no BOS)."""
    from proxima.rlhf.data import PromptRow, encode_prompts

    row = PromptRow("", line=4)
    row.file = "p.txt"
    with pytest.raises(ConfigError, match=r"^--prompts p\.txt:4: empty prompt: the tokenizer gives it no tokens"):
        encode_prompts(word_tokenizer(), [row], 16, truncate=False)


# 4: samples.jsonl scores are float32's shortest repr

def test_samples_jsonl_scores_are_the_shortest_float32_repr(tiny_cfg, tmp_path):
    (tmp_path / "rew.py").write_text("def r(prompts, responses):\n    return [-1.3] * len(responses)\n")
    run_dir = train_rlhf(tiny_cfg(reward=f"{tmp_path / 'rew.py'}:r", steps=1, missing_eos_penalty=0.0,
                                  run_dir=str(tmp_path / "run")))
    lines = (run_dir / "samples.jsonl").read_text().splitlines()
    assert lines and all('"score": -1.3}' in line for line in lines), lines[0]
    assert resume(run_dir, steps=2, trust_run=True) == 0  # a resume reads the file back
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {r["step"] for r in rows} == {1, 2} and {r["score"] for r in rows} == {-1.3}


# 5 (mutation review): the divergence line's parts, the generation_config eos ids, a resume that diverges

def _stub_trainer(scores):
    import types

    import torch

    return types.SimpleNamespace(_last_scores=torch.tensor(scores), dist=types.SimpleNamespace(enabled=False),
                                 device=torch.device("cpu"))


def test_score_peak_is_the_largest_score_in_size_a_huge_negative_one_included():
    from proxima.rlhf import loop as rlhf_loop

    stub = _stub_trainer([-1e30, 2.0])
    assert RLHFTrainer.score_peak(stub) == pytest.approx(1e30, rel=1e-6)
    hint = rlhf_loop._divergence_hint(type("T", (), {"score_peak": lambda self: RLHFTrainer.score_peak(stub)})())
    assert hint.startswith("the scores reach 1e+30 in size (objective/scores): scale the reward down"), hint


@pytest.mark.parametrize("peak, scale", [(1e3, True), (999.0, False)])
def test_the_reward_scale_hint_starts_at_a_score_of_1000(peak, scale):
    from proxima.rlhf import loop as rlhf_loop

    hint = rlhf_loop._divergence_hint(type("T", (), {"score_peak": lambda self: peak})())
    if scale:
        assert hint.startswith("the scores reach 1e+03 in size (objective/scores): scale the reward down"), hint
    else:
        assert hint == "try a lower --lr or --max-grad-norm"


def _tokenizer_without_eos(folder):
    tok = word_tokenizer(pad=False, extra_specials=["<eot>", "<end>"])
    tok.save_pretrained(folder)
    drop_from_tokenizer_config(folder, "eos_token", "pad_token")
    return tok.convert_tokens_to_ids("<eot>"), tok.convert_tokens_to_ids("<end>"), len(tok)


def test_a_generation_config_eos_id_outside_the_vocabulary_is_refused(tmp_path):
    from proxima.rlhf.models import read_tokenizer

    eot, _, size = _tokenizer_without_eos(tmp_path / "tok")
    with pytest.raises(ConfigError) as e:
        read_tokenizer(str(tmp_path / "tok"), "--policy", [eot, size + 7])
    assert str(e.value) == (f"--policy {str(tmp_path / 'tok')!r}: the tokenizer has no EOS token, and the policy's "
                            f"generation_config.json eos_token_id {size + 7} is not a token of it ({size} tokens); set "
                            f"eos_token in the tokenizer's tokenizer_config.json")


def test_the_first_generation_config_eos_id_is_the_eos_and_pad_of_a_tokenizer_without_one(tmp_path):
    from proxima.rlhf.models import read_tokenizer, training_tokenizer

    eot, end, _ = _tokenizer_without_eos(tmp_path / "tok")
    tok = training_tokenizer(read_tokenizer(str(tmp_path / "tok"), "--policy", [eot, end]), [eot, end])
    assert tok.eos_token_id == eot and tok.pad_token_id == eot  # generate pads with the first


def test_a_tokenizer_with_its_own_eos_keeps_it_whatever_the_generation_config_lists():
    from proxima.rlhf.models import training_tokenizer

    tok = word_tokenizer(pad=False, extra_specials=["<eot>"])
    own, eot = tok.eos_token_id, tok.convert_tokens_to_ids("<eot>")
    assert own is not None and own != eot
    trained = training_tokenizer(tok, [eot, own])
    assert trained.eos_token_id == own and trained.pad_token_id == own


def test_generation_eos_ids_keep_id_0_and_their_order():
    import types

    from proxima.rlhf.models import generation_eos_ids

    model = types.SimpleNamespace(generation_config=types.SimpleNamespace(eos_token_id=[0, 5, 0, -1, True]))
    assert generation_eos_ids(model) == [0, 5]


def test_a_resume_whose_first_step_diverges_names_the_last_good_checkpoint_and_keeps_the_run_length(tiny_cfg, tmp_path):
    """The run already holds step 1: "the new run keeps nothing" would be false, and the --steps extension
    of a resume none of whose steps finished is taken back (config.yaml as summary.json: 1 step)."""
    import yaml

    from proxima.rlhf import loop as rlhf_loop

    reward = tmp_path / "rew.py"
    reward.write_text("def r(prompts, responses):\n    return [0.5] * len(responses)\n")
    run_dir = train_rlhf(tiny_cfg(reward=f"{reward}:r", steps=1, batch_size=4, num_minibatches=1, update_epochs=1,
                                  max_new_tokens=3, run_dir=str(tmp_path / "run")))
    reward.write_text(BIG_REWARD.replace("big", "r"))
    with pytest.raises(rlhf_loop.DivergedError) as e:
        resume(run_dir, steps=2, trust_run=True, quiet=True)
    assert "at step 2" in str(e.value) and "; last good checkpoint: " in str(e.value), str(e.value)
    assert str(e.value).count("step_000001.pt") == 1 and "keeps nothing" not in str(e.value), str(e.value)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["steps"] == 1
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 1
