"""Mutation review of review 42's commits (875ccb4, c80a81a, 6c54477): a --config file's existing relative paths
accepted, the stop text of each row its own, reward models named 'model PATH', learning_rate before lr refused,
samples' scores as float32 reads them, a null path: the ordinary error."""

import json

import pytest
import torch

from proxima.rlhf.__main__ import main
from proxima.rlhf.config import ConfigError
from proxima.rlhf.rewards import RewardError, RewardFunction, RewardModel, Rewards
from proxima.rlhf.trainer import RLHFTrainer
from tests.cli_helpers import one_error_line
from tests.rlhf import test_rlhf42 as r42

PROG = "proxima rlhf"


def test_existing_relative_paths_in_a_config_file_are_read_from_the_working_directory(assets, tmp_path, monkeypatch):
    """Catches every relative path refused as missing (only absolute ones let through)."""
    (tmp_path / "model").symlink_to(assets / "model")
    (tmp_path / "p.txt").write_text("the food was\n")
    (tmp_path / "rew.py").write_text("def good(prompts, responses):\n    return [1.0] * len(responses)\n")
    (tmp_path / "c.yaml").write_text("policy: model\nprompts: p.txt\nreward: [rew.py:good]\n")
    monkeypatch.chdir(tmp_path)
    cfg = r42._config(["--config", "c.yaml", "--trust-run"])
    assert (cfg.policy, cfg.prompts, cfg.reward) == ("model", "p.txt", ["rew.py:good"])


def test_a_null_path_in_a_config_file_gets_the_ordinary_error_not_a_traceback(tmp_path, monkeypatch, capsys):
    """tokenizer: null is the default (the policy's own), a None that reaches the relative-path check; catches the
    guard against non-string items removed (os.path.isabs(None): a TypeError traceback)."""
    (tmp_path / "c.yaml").write_text('tokenizer: null\nreward: [""]\n')
    monkeypatch.chdir(tmp_path)
    assert main(["--config", "c.yaml"]) == 2
    assert one_error_line(capsys.readouterr().err, PROG) == (
        "--policy is required (a Hugging Face causal LM folder); give --policy PATH (or --config FILE.yaml with "
        "policy:), or try the offline demo: proxima rlhf --demo")


@pytest.mark.parametrize("text", ["learning_rate: 3.0e-4\nlr: 1.0e-5\n", "lr: 1.0e-5\nlearning_rate: 3.0e-4\n"])
def test_learning_rate_and_lr_in_either_order_get_the_alias_line(tmp_path, text):
    """Catches only the later key checked for an alias (learning_rate first read as 'lr given twice')."""
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError) as e:
        r42._config(["--config", str(tmp_path / "c.yaml")])
    assert str(e.value) == f"{tmp_path / 'c.yaml'}: both 'learning_rate' and 'lr' given (learning_rate is lr's other name); keep one"


class _NanModel(RewardModel):
    """A RewardModel answering NaN, without a model to load."""

    def __init__(self, path):
        self.path, self.name = path, path.rsplit("/", 1)[-1]

    def __call__(self, batch):
        return torch.full((len(batch.responses),), float("nan"))


class _HugeModel(_NanModel):
    def __call__(self, batch):
        return torch.full((len(batch.responses),), 3e38)


def test_a_reward_model_is_named_model_and_its_path_in_error_lines():
    """Catches reward_label giving the bare path or the short name of a RewardModel."""
    with pytest.raises(RewardError) as e:
        Rewards([_NanModel("/tmp/G/rm")], [1.0])(r42._batch(0))
    assert str(e.value) == ("reward model /tmp/G/rm on the trial call before training: sample 0 (prompts line 1, "
                            "response 'good') got the non-finite score nan")
    fn = RewardFunction(lambda p, r: [3e38], "m:a", "a")
    with pytest.raises(RewardError) as e:
        Rewards([_HugeModel("/tmp/G/rm"), fn], [1.0, 1.0])(r42._batch(2))
    assert "the weighted sum 1 x model /tmp/G/rm (3e+38) + 1 x m:a (3e+38) is inf" in str(e.value), str(e.value)


def test_each_row_keeps_its_own_stop_text_and_samples_show_float32_scores(tiny_cfg, monkeypatch):
    """Rows EOS, EOS, cut (no palindrome): catches the eos flags misaligned with the rows for texts_with_stop,
    and a float32 score 0.3 logged widened (0.30000001192092896)."""
    t = RLHFTrainer(tiny_cfg(batch_size=3, num_minibatches=1, max_new_tokens=4, samples_logged=3, missing_eos_penalty=0.0))
    tok = t.tokenizer
    eos, pad, word = tok.eos_token_id, tok.pad_token_id, tok.convert_tokens_to_ids("good")
    sampled = torch.tensor([[word, eos, pad, pad], [eos, pad, pad, pad], [word, word, word, word]])
    monkeypatch.setattr("proxima.rlhf.trainer.generate", lambda *a, **k: sampled)
    seen, real = [], t.reward
    monkeypatch.setattr(t, "reward", lambda batch: seen.append(batch) or (torch.full((3,), 0.3), real(batch)[1]))
    b = t.rollout()
    batch = seen[-1]
    assert [s == p + " " + tok.eos_token for s, p in zip(batch.texts_with_stop, batch.texts)] == [True, True, False]
    assert batch.texts_with_stop[2] == batch.texts[2] and tok.eos_token not in batch.texts_with_stop[2]
    assert [json.dumps(s["score"]) for s in b["texts"]] == ["0.3"] * 3


def test_a_missing_relative_reward_file_whose_path_holds_a_colon_is_named_whole(tmp_path, monkeypatch, capsys):
    """The function follows the last colon; catches the split at the first one (the file then goes unchecked)."""
    (tmp_path / "c.yaml").write_text('reward: ["d:x/rew.py:good"]\n')
    monkeypatch.chdir(tmp_path)
    assert main(["--config", "c.yaml", "--trust-run"]) == 2
    assert one_error_line(capsys.readouterr().err, PROG) == (
        "c.yaml: reward 'd:x/rew.py': no such file or directory (relative paths in a --config file are read from the "
        f"working directory, {tmp_path})")
