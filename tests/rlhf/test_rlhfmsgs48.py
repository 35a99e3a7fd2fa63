"""RLHF messages a TRL user met (review 48): each says what to type or rename, in the words of where the value came from."""

import json
import re
import shlex
from pathlib import Path

import pytest
import torch
import yaml

from proxima.rlhf import train_rlhf
from proxima.rlhf.__main__ import main
from proxima.rlhf.config import ConfigError
from proxima.rlhf.data import load_prompts
from proxima.rlhf.rewards import RewardModel, load_reward
from tests.cli_helpers import run_main

ROOT = Path(__file__).resolve().parents[2]

REWARDS_PY = '''
def math_answer(prompts, responses, answer, **unused):
    return [0.0 for _ in responses]

def brevity(prompts, responses):
    return [-len(r.split()) / 10 for r in responses]
'''


def error_line(capsys, code):
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    return err.splitlines()[-1]


def write_yaml(path, **values):
    path.write_text(yaml.safe_dump(values))
    return str(path)


def test_a_config_files_code_reward_refusal_gives_every_recorded_reward_shell_quoted(tmp_path, capsys):
    # a command-line --reward list replaces the file's: advice naming only the file reward dropped rm_other
    rm = tmp_path / "my rm"  # a space: the advice must be typed as it is shown
    rm.mkdir()
    rewards = tmp_path / "my_rewards.py"
    rewards.write_text(REWARDS_PY)
    config = write_yaml(tmp_path / "c1.yaml", reward=[str(rm), f"{rewards}:brevity"])
    line = error_line(capsys, main(["--config", config, "--steps", "1", "--run-dir", str(tmp_path / "n2")]))
    flags = f"--reward {shlex.quote(str(rm))} --reward {rewards}:brevity"
    assert f"give every recorded reward on the command line ({flags}), or pass --trust-run" in line, line
    assert shlex.split(flags) == ["--reward", str(rm), "--reward", f"{rewards}:brevity"]


def test_a_command_line_reward_list_that_drops_a_config_files_reward_says_which(tmp_path, capsys):
    rm = tmp_path / "rm_other"
    rm.mkdir()
    rewards = tmp_path / "my_rewards.py"
    rewards.write_text(REWARDS_PY)
    config = write_yaml(tmp_path / "c1.yaml", reward=[str(rm), f"{rewards}:brevity"])
    # --lr -1 stops the run at validate, after the flags and the file are read
    code = main(["--config", config, "--reward", f"{rewards}:brevity", "--lr", "-1", "--run-dir", str(tmp_path / "n")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert (f"proxima rlhf: note: --reward replaces the rewards of --config {config}; not used: {rm} "
            "(repeat --reward for each reward to keep)") in err, err
    assert "not used" not in err.split(str(rm))[1], err  # the file reward given again is not listed


def test_a_command_line_reward_list_that_keeps_every_file_reward_adds_no_note(tmp_path, capsys):
    rm = tmp_path / "rm_other"
    rm.mkdir()
    config = write_yaml(tmp_path / "c1.yaml", reward=[str(rm)])
    code = main(["--config", config, "--reward", str(rm) + "/", "--lr", "-1", "--run-dir", str(tmp_path / "n")])
    err = capsys.readouterr().err
    assert code == 2 and "note: --reward replaces" not in err, err


def test_max_new_tokens_from_the_config_file_is_named_by_its_key_and_the_file(assets, tmp_path, capsys):
    config = write_yaml(tmp_path / "y1.yaml", policy=str(assets / "model"), prompts=str(assets / "prompts.txt"),
                        reward="proxima.rlhf.demo:keyword_sentiment", max_new_tokens=60, batch_size=4)
    line = error_line(capsys, main(["--config", config, "--steps", "1", "--run-dir", str(tmp_path / "r")]))
    assert re.fullmatch(rf"proxima rlhf: error: {re.escape(config)}: max_new_tokens 60: the longest prompt \(line \d+, "
                        rf"(\d+) tokens\) \+ 60 new tokens = \d+, more than the policy's 48 positions; edit "
                        rf"max_new_tokens in {re.escape(config)} \(\d+\)",
                        line), line
    # typed, it is the flag
    line = error_line(capsys, main(["--config", config, "--max-new-tokens", "60", "--run-dir", str(tmp_path / "r")]))
    assert line.startswith("proxima rlhf: error: --max-new-tokens 60: the longest prompt"), line


def test_max_prompt_length_from_the_config_file_is_named_by_its_key_and_the_file(assets, tmp_path, capsys):
    config = write_yaml(tmp_path / "y5.yaml", policy=str(assets / "model"), prompts=str(assets / "prompts.txt"),
                        reward="proxima.rlhf.demo:keyword_sentiment", max_prompt_length=1, batch_size=4)
    line = error_line(capsys, main(["--config", config, "--steps", "1", "--run-dir", str(tmp_path / "r")]))
    assert re.fullmatch(rf"proxima rlhf: error: {re.escape(config)}: max_prompt_length 1: the prompt at "
                        rf"{re.escape(str(assets / 'prompts.txt'))}:1 is \d+ tokens; raise max_prompt_length in "
                        rf"{re.escape(config)}, or pass --truncate-prompts to keep the last tokens", line), line
    line = error_line(capsys, main(["--config", config, "--max-prompt-length", "1", "--run-dir", str(tmp_path / "r")]))
    assert re.fullmatch(rf"proxima rlhf: error: --prompts {re.escape(str(assets / 'prompts.txt'))}:1: \d+ tokens, more "
                        r"than --max-prompt-length 1; raise it, or pass --truncate-prompts to keep the last tokens",
                        line), line


def test_a_two_label_classifier_as_reward_model_says_how_to_use_it(tmp_path):
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from proxima.rlhf.demo import build_tokenizer

    tok = build_tokenizer()
    model = GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_positions=48, n_embd=32, n_layer=1,
                                                     n_head=2, num_labels=2, pad_token_id=tok.pad_token_id))
    model.save_pretrained(tmp_path / "rm_2label")
    tok.save_pretrained(tmp_path / "rm_2label")
    with pytest.raises(ConfigError) as e:
        RewardModel(str(tmp_path / "rm_2label"), torch.device("cpu"))
    assert str(e.value) == (
        f"--reward {str(tmp_path / 'rm_2label')!r}: the model has 2 labels; a reward model has 1 (one score per text): "
        "re-head it to num_labels=1 (the positive minus the negative logit), or give a file.py:function reward that "
        "returns the classifier's logits[:, 1] (its positive class); docs/rlhf.md, 'A classifier as a reward', "
        "shows both")
    doc = (ROOT / "docs" / "rlhf.md").read_text()
    assert "#### A classifier as a reward" in doc and "logits[0, 1]" in doc and "m.config.num_labels = 1" in doc


def test_a_reward_file_without_the_function_lists_the_ones_it_defines(tmp_path, tiny_cfg, capsys):
    rewards = tmp_path / "my_rewards.py"
    rewards.write_text(REWARDS_PY)
    spec = f"{rewards}:score"
    with pytest.raises(ConfigError) as e:
        load_reward(spec, torch.device("cpu"))
    assert str(e.value).startswith(f"--reward {spec!r}: {rewards} has no function score (")
    assert str(e.value).endswith("defines math_answer, brevity)")
    # from Python, the field of RLHFConfig, not a flag
    with pytest.raises(ConfigError) as e:
        train_rlhf(tiny_cfg(reward=spec, run_dir=str(tmp_path / "py")))
    assert str(e.value).startswith(f"RLHFConfig(reward={spec!r}): {rewards} has no function score ("), str(e.value)
    # and the command line after it (the same process) says --reward again
    cfg = tiny_cfg()
    line = error_line(capsys, main(["--policy", cfg.policy, "--prompts", cfg.prompts, "--reward", spec,
                                    "--run-dir", str(tmp_path / "cli")]))
    assert line.startswith(f"proxima rlhf: error: --reward {spec!r}: {rewards} has no function score ("), line


def test_the_docs_python_example_names_a_function_of_the_docs_reward_file():
    doc = (ROOT / "docs" / "rlhf.md").read_text()
    names = re.findall(r'reward="my_rewards(?:\.py)?:(\w+)"', doc)
    assert names, "the Python example names no reward of my_rewards"
    reward_file = doc.split("# my_rewards.py\n", 1)[1].split("```", 1)[0]
    for name in names:
        assert f"def {name}(" in reward_file, name


@pytest.mark.parametrize("row, found", [
    ({"query": "the food was"}, "found 'query': rename 'query' to 'prompt'"),
    ({"text": "the food was", "answer": 3}, "found 'text', 'answer': rename 'text' to 'prompt'"),
    ({"conversation": [{"role": "user", "content": "hi"}]}, "found 'conversation': rename 'conversation' to 'messages'"),
    ({"src": "the food was", "answer": 3}, "found 'src', 'answer'"),
    ({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, "found both: keep one"),
])
def test_a_prompts_row_without_prompt_or_messages_names_its_keys_and_the_rename(tmp_path, row, found):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(ConfigError) as e:
        load_prompts(str(path))
    assert str(e.value) == f"--prompts {path}:1: expected exactly one of the fields 'prompt' and 'messages', {found}"


def test_fp16_says_rlhf_offers_bf16_only(capsys):
    code, _, err = run_main(["rlhf", "--fp16"], capsys)
    assert code == 2
    assert ("--fp16 is TRL's; fp16 mixed precision is not offered for RLHF: use --bf16 (bf16 autocast, float32 "
            "weights) or --dtype bfloat16 (bf16 weights); drop it") in err, err
    assert "did you mean --bf16" not in err, err
