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


def drop_from_tokenizer_config(folder, *keys):
    config = json.loads((folder / "tokenizer_config.json").read_text())
    for key in keys:
        config.pop(key, None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def cli_args(assets, run_dir, *extra):
    return ["--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"),
            "--reward", "proxima.rlhf.demo:keyword_sentiment", "--run-dir", str(run_dir), "--batch-size", "4",
            "--num-minibatches", "1", "--max-new-tokens", "4", "--update-epochs", "1", "--steps", "1",
            "--print-every", "0", "--no-plot", *extra]


def one_line(capsys, code) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("proxima rlhf: error: "), err
    return err


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
