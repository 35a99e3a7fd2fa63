"""Rewards: a local sequence-classification model, or a module:function; checked before a run starts."""

import pytest
import torch

from proxima.rlhf.config import ConfigError
from proxima.rlhf.demo import build_tokenizer
from proxima.rlhf.rewards import RewardFunction, load_reward
from proxima.rlhf.trainer import RLHFTrainer


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory):
    from transformers import GPT2Config, GPT2ForSequenceClassification

    folder = tmp_path_factory.mktemp("reward_model")
    tok = build_tokenizer()
    torch.manual_seed(3)
    model = GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_positions=48, n_embd=32, n_layer=1,
                                                     n_head=2, num_labels=1, pad_token_id=tok.pad_token_id))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_reward_model_scores_do_not_depend_on_the_batch_padding(reward_model_dir):
    rm = load_reward(str(reward_model_dir), torch.device("cpu"))
    texts = ["the food was great .", "the room is really very dull and bland but fun overall ."]
    together = rm(["", ""], ["", ""], texts)
    alone = torch.cat([rm([""], [""], [t]) for t in texts])
    assert together.shape == (2,)
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)


def test_value_model_can_start_from_the_reward_model(tiny_cfg, reward_model_dir):
    t = RLHFTrainer(tiny_cfg(reward=str(reward_model_dir), value_init="reward"))
    rm = load_reward(str(reward_model_dir), torch.device("cpu"))
    torch.testing.assert_close(t.value.head.weight, rm.model.score.weight)
    metrics, _ = t.train_step()
    assert metrics["objective/scores"] == metrics["objective/scores"]


def test_reward_function_must_return_one_finite_score_per_response():
    with pytest.raises(ValueError, match="2 scores for 3"):
        RewardFunction(lambda p, r: [0.0, 1.0], "f")(["a"] * 3, ["b"] * 3)
    with pytest.raises(ValueError, match="non-finite"):
        RewardFunction(lambda p, r: [float("nan")], "f")(["a"], ["b"])


def test_a_reward_function_that_fails_is_bad_input_before_the_run(tiny_cfg, tmp_path, monkeypatch):
    (tmp_path / "broken_reward.py").write_text("def score(prompts, responses):\n    return 1.0\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="--reward"):
        RLHFTrainer(tiny_cfg(reward="broken_reward.py:score"))
