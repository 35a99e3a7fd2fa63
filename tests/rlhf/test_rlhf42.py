"""Review 42 (a TRL user offline): blank lines of a prompts file counted at start-up, a --config file's
relative paths blamed on the file and key, samples.jsonl showing what the reward read, rewards named by
their spec in every error line, learning_rate as lr in an RLHF YAML."""

import json

import pytest
import torch

from proxima.rlhf.__main__ import main
from proxima.rlhf.config import ConfigError
from proxima.rlhf.data import PromptRow, load_prompts, loaded_line
from proxima.rlhf.rewards import RewardBatch, RewardError, RewardFunction, Rewards
from proxima.rlhf.trainer import RLHFTrainer
from tests.cli_helpers import one_error_line

PROG = "proxima rlhf"


# 1: blank lines are a layout, skipped and counted; the start-up line says how many prompts were loaded

def test_whitespace_only_lines_of_a_text_file_are_skipped_and_counted(tmp_path):
    (tmp_path / "ws.txt").write_text("the food was\n   \nthe service is\n\n")
    rows = load_prompts(str(tmp_path / "ws.txt"))
    assert [(r.prompt, r.line) for r in rows] == [("the food was", 1), ("the service is", 3)]
    assert loaded_line(rows, "ws.txt") == "prompts: 2 from ws.txt (2 blank lines skipped)"


def test_the_newline_ending_the_last_prompt_is_no_blank_line(tmp_path):
    (tmp_path / "p.txt").write_text("the food was\nthe service is\n")
    assert loaded_line(load_prompts(str(tmp_path / "p.txt")), "p.txt") == "prompts: 2 from p.txt"


def test_a_run_says_how_many_prompts_it_loaded_and_logs_what_each_response_held(assets, tmp_path, capsys):
    (tmp_path / "ws.txt").write_text("the food was\n   \nthe service is\n")
    run_dir = tmp_path / "run"
    code = main(["--policy", str(assets / "model"), "--prompts", str(tmp_path / "ws.txt"), "--reward",
                 "proxima.rlhf.demo:keyword_sentiment", "--steps", "1", "--batch-size", "4", "--num-minibatches", "1",
                 "--update-epochs", "1", "--max-new-tokens", "4", "--run-dir", str(run_dir), "--no-plot"])
    out = capsys.readouterr().out
    assert code == 0 and out.splitlines()[0] == f"prompts: 2 from {tmp_path / 'ws.txt'} (1 blank line skipped)", out
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert [list(r) for r in rows] == [["step", "prompt", "response", "response_raw", "response_tokens", "eos", "score"]] * 4
    assert all(1 <= r["response_tokens"] <= 4 and (r["eos"] or r["response_tokens"] == 4) for r in rows), rows


# 3: samples keep the special tokens and the EOS the policy sampled, with the token count

def test_samples_show_the_special_tokens_and_eos_the_reward_was_paid_for(tiny_cfg, monkeypatch):
    t = RLHFTrainer(tiny_cfg(batch_size=3, num_minibatches=1, max_new_tokens=4, samples_logged=3))
    pad, unk, eos = t.tokenizer.pad_token_id, t.tokenizer.unk_token_id, t.tokenizer.eos_token_id
    word = t.tokenizer.convert_tokens_to_ids("good")
    sampled = torch.tensor([[pad, pad, eos, word], [word, word, word, word], [unk, eos, pad, pad]])
    monkeypatch.setattr("proxima.rlhf.trainer.generate", lambda *a, **k: sampled)
    texts = t.rollout()["texts"]
    got = [(s["response"], s["response_raw"], s["response_tokens"], s["eos"]) for s in texts]
    assert got == [("", "[PAD] [PAD] [EOS]", 3, True), ("good good good good", "good good good good", 4, False),
                   ("", "[UNK] [EOS]", 2, True)]


# 4: one naming of a reward, the spec as given, in every error line

def _batch(step):
    return RewardBatch([PromptRow("the food was", line=1)], ["good"], ["the food was good"], step=step)


def test_a_non_finite_score_names_the_reward_by_its_spec_as_its_own_raise_does():
    nan = RewardFunction(lambda p, r: [float("nan")], "/tmp/G/rew.py:nan", "nan")
    boom = RewardFunction(lambda p, r: 1 / 0, "/tmp/G/rew.py:boom", "boom")
    with pytest.raises(RewardError) as e:
        Rewards([nan], [1.0])(_batch(0))
    assert str(e.value) == ("reward /tmp/G/rew.py:nan on the trial call before training: sample 0 (prompts line 1, "
                            "response 'good') got the non-finite score nan")
    with pytest.raises(RewardError) as e:
        Rewards([boom], [1.0])(_batch(0))
    assert str(e.value).startswith("reward /tmp/G/rew.py:boom on the trial call before training: raised ZeroDivisionError")


def test_a_weighted_sum_past_float32_names_the_rewards_by_their_specs():
    a = RewardFunction(lambda p, r: [3e38], "m:a", "a")
    b = RewardFunction(lambda p, r: [3e38], "/x/b.py:a", "a")
    with pytest.raises(RewardError) as e:
        Rewards([a, b], [1.0, 1.0])(_batch(2))
    assert "the weighted sum 1 x m:a (3e+38) + 1 x /x/b.py:a (3e+38) is inf" in str(e.value), str(e.value)


# 2: a relative path in a --config file is read from the working directory; its error names the file and key

def test_a_missing_relative_path_in_a_config_file_names_the_file_key_and_working_directory(tmp_path, monkeypatch, capsys):
    (tmp_path / "G").mkdir()
    (tmp_path / "G" / "p.txt").write_text("the food was\n")
    (tmp_path / "G" / "c2.yaml").write_text("policy: /nowhere/model\nprompts: p.txt\nreward: proxima.rlhf.demo:keyword_sentiment\n")
    monkeypatch.chdir(tmp_path)
    assert main(["--config", "G/c2.yaml"]) == 2
    assert one_error_line(capsys.readouterr().err, PROG) == (
        f"G/c2.yaml: prompts 'p.txt': no such file or directory (relative paths in a --config file are read from the "
        f"working directory, {tmp_path}); the file's folder has one: give prompts: G/p.txt")


def test_a_missing_relative_reward_file_in_a_config_file_is_blamed_on_the_file(tmp_path, monkeypatch, capsys):
    (tmp_path / "c.yaml").write_text("policy: /nowhere/model\nprompts: /p.txt\nreward: [rew.py:good]\n")
    (tmp_path / "rew.py").write_text("def good(prompts, responses):\n    return [1.0] * len(responses)\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["--config", "../c.yaml", "--trust-run"]) == 2
    assert one_error_line(capsys.readouterr().err, PROG) == (
        "../c.yaml: reward 'rew.py': no such file or directory (relative paths in a --config file are read from the "
        f"working directory, {tmp_path / 'elsewhere'}); the file's folder has one: give reward: ../rew.py:good")


def test_a_flag_given_over_the_file_is_not_checked_as_the_files(tmp_path, monkeypatch, capsys):
    (tmp_path / "c.yaml").write_text("policy: /nowhere/model\nprompts: p.txt\nreward: proxima.rlhf.demo:keyword_sentiment\n")
    (tmp_path / "q.txt").write_text("the food was\n")
    monkeypatch.chdir(tmp_path)
    assert main(["--config", "c.yaml", "--prompts", "q.txt"]) == 2
    assert one_error_line(capsys.readouterr().err, PROG) == "--policy '/nowhere/model': no such directory or .json config file"


# 5: learning_rate is lr's other name in an RLHF YAML and as a flag, as for PPO

def _config(args):
    import argparse

    from proxima.rlhf import cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return cli.build_config(parser.parse_args(["rlhf", *args]))


def test_learning_rate_in_an_rlhf_yaml_is_lr(tmp_path):
    (tmp_path / "c.yaml").write_text("learning_rate: 3.0e-4\n")
    assert _config(["--config", str(tmp_path / "c.yaml")]).lr == 3e-4
    assert _config(["--learning-rate", "2e-5"]).lr == 2e-5


def test_an_rlhf_yaml_giving_learning_rate_and_lr_is_refused(tmp_path):
    (tmp_path / "c.yaml").write_text("lr: 1.0e-5\nlearning-rate: 3.0e-4\n")
    with pytest.raises(ConfigError) as e:
        _config(["--config", str(tmp_path / "c.yaml")])
    assert str(e.value) == f"{tmp_path / 'c.yaml'}: both 'learning_rate' and 'lr' given (learning_rate is lr's other name); keep one"


@pytest.mark.parametrize("flags", [["--lr", "1e-5", "--learning-rate", "2e-5"], ["--learning-rate", "2e-5", "--lr", "1e-5"]])
def test_rlhf_lr_and_learning_rate_flags_together_are_refused_as_in_a_file(flags, capsys):
    """argparse would keep the last of the two names typed, silently; `proxima train` refuses them."""
    with pytest.raises(SystemExit) as e:
        main(["--demo", *flags])
    assert e.value.code == 2
    assert one_error_line(capsys.readouterr().err, PROG) == (
        "both --learning-rate and --lr given (--learning-rate is --lr's other name); keep one")
    assert _config(["--lr", "1e-5", "--lr", "2e-5"]).lr == 2e-5  # one name typed twice: the last, as argparse
