"""Rewards: local sequence-classification models and module:functions, alone or weighted; every call
checked; a reward that fails mid-run leaves a resumable checkpoint."""

import json
import math

import numpy as np
import pytest
import torch

from proxima.rlhf import resume, train_rlhf
from proxima.rlhf.__main__ import main
from proxima.rlhf.config import ConfigError
from proxima.rlhf.data import PromptRow, load_prompts
from proxima.rlhf.rewards import RewardBatch, RewardError, RewardFunction, load_reward, load_rewards, validate_scores
from proxima.rlhf.rundir import list_checkpoints, load_checkpoint, read_metrics
from proxima.rlhf.trainer import RLHFTrainer
from rlhf_assets import save_reward_model


def resume_refused(*args, **kwargs) -> str:
    """resume()'s refusal of bad input (it raises), as the one line `proxima resume` prints for it."""
    from proxima.checkpoint import CheckpointError
    from proxima.diskspace import StorageError

    with pytest.raises((ConfigError, StorageError, CheckpointError)) as e:
        resume(*args, **kwargs)
    return f"proxima resume: error: {e.value}"


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory):
    return save_reward_model(tmp_path_factory.mktemp("reward_model"))


def batch(responses, step=3, columns=None):
    rows = [PromptRow(f"prompt {i}", {k: v[i] for k, v in (columns or {}).items()}, line=i + 1)
            for i in range(len(responses))]
    return RewardBatch(rows, list(responses), [r.prompt + " " + s for r, s in zip(rows, responses)], step)


def test_reward_model_scores_do_not_depend_on_the_batch_padding(reward_model_dir):
    rm = load_reward(str(reward_model_dir), torch.device("cpu"))
    texts = ["the food was great .", "the room is really very dull and bland but fun overall ."]
    rows = [PromptRow(""), PromptRow("")]
    together = rm(RewardBatch(rows, ["", ""], texts, 1))
    alone = torch.cat([rm(RewardBatch(rows[:1], [""], [t], 1)) for t in texts])
    assert together.shape == (2,)
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)


def test_value_model_can_start_from_the_reward_model(tiny_cfg, reward_model_dir):
    t = RLHFTrainer(tiny_cfg(reward=str(reward_model_dir), value_init="reward"))
    rm = load_reward(str(reward_model_dir), torch.device("cpu"))
    torch.testing.assert_close(t.value.head.weight, rm.model.score.weight)
    metrics, _ = t.train_step()
    assert math.isfinite(metrics["objective/scores"])


# ---------------------------------------------------------------------------------------------
# item 5: every call validated
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("returned, words", [
    ([0.0, 1.0], "2 scores for 3 responses"),
    ([0.0, float("nan"), 1.0], "sample 1 (prompts line 2"),
    ([0.0, 1.0, "0.5"], "got '0.5' (str)"),
    ([True, False, True], "got True (bool)"),
    (np.array([True, False, True]), "got True (bool)"),
    (torch.tensor([True, False, True]), "torch.bool"),
    (torch.zeros(3, 1), "shape (3, 1)"),
    (1.0, "returned float"),
    ([None, 1.0, 2.0], "sample 0"),
])
def test_every_reward_answer_is_checked_and_the_error_names_step_and_sample(returned, words):
    with pytest.raises(RewardError) as e:
        validate_scores(returned, batch(["a", "b", "c"], step=7), "f")
    assert "at step 7" in str(e.value) and words in str(e.value)


@pytest.mark.parametrize("returned", [[0, 1.5, -2], np.array([0.0, 1.5, -2.0]), torch.tensor([0.0, 1.5, -2.0]),
                                      [np.float32(0), np.int64(1), torch.tensor(2.0)]])
def test_real_numbers_in_any_container_are_accepted(returned):
    scores = validate_scores(returned, batch(["a", "b", "c"]), "f")
    assert scores.dtype == torch.float32 and scores.shape == (3,)


def test_a_reward_that_raises_is_one_line_naming_the_reward_and_step():
    def broken(prompts, responses):
        raise KeyError("answer")

    with pytest.raises(RewardError, match=r"reward m:broken at step 3: raised KeyError: 'answer'"):
        RewardFunction(broken, "m:broken", "broken")(batch(["a"]))


def test_a_reward_function_that_fails_is_bad_input_before_the_run(tiny_cfg, tmp_path):
    (tmp_path / "broken_reward.py").write_text("def score(prompts, responses):\n    return 1.0\n")
    with pytest.raises(ConfigError, match="on the trial call before training: returned float"):
        RLHFTrainer(tiny_cfg(reward=str(tmp_path / "broken_reward.py") + ":score"))


FLAKY = """
import os
from proxima.rlhf.demo import keyword_sentiment
calls = 0
def score(prompts, responses):
    global calls
    calls += 1
    if calls == int(os.environ.get("FLAKY_FAIL_AT_CALL", "0")):
        return ["oops"] * len(responses)
    return keyword_sentiment(prompts, responses)
"""


def test_a_reward_failing_mid_run_exits_2_and_leaves_a_checkpoint_that_resumes_bit_identically(
        assets, tiny_cfg, tmp_path, capsys, monkeypatch):
    (tmp_path / "flaky.py").write_text(FLAKY)
    reward = f"{tmp_path / 'flaky.py'}:score"
    straight = train_rlhf(tiny_cfg(reward=reward, steps=4, checkpoint_every=0, run_dir=str(tmp_path / "straight")))

    monkeypatch.setenv("FLAKY_FAIL_AT_CALL", "4")  # call 1 is the trial call; call 4 is step 3
    run_dir = tmp_path / "failed"
    code = main(["--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"), "--reward", reward,
                 "--run-dir", str(run_dir), "--batch-size", "8", "--num-minibatches", "2", "--update-epochs", "2",
                 "--max-new-tokens", "6", "--temperature", "1.0", "--lr", "1e-3", "--steps", "4",
                 "--checkpoint-every", "0", "--print-every", "0", "--no-plot"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "at step 3" in err and "sample 0" in err and "'oops' (str)" in err and "proxima resume" in err
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_000002.pt"]
    assert not (run_dir / "summary.json").exists()

    monkeypatch.delenv("FLAKY_FAIL_AT_CALL")
    # the run's recorded reward is a file of code: imported only when trusted
    assert "would import and run the file" in resume_refused(run_dir)
    assert resume(run_dir, trust_run=True) == 0
    a, b = load_checkpoint(list_checkpoints(straight)[-1]), load_checkpoint(list_checkpoints(run_dir)[-1])
    assert a["step"] == b["step"] == 4
    assert all(torch.equal(a["policy"][k], b["policy"][k]) for k in a["policy"])
    assert read_metrics(run_dir)["step"] == [1.0, 2.0, 3.0, 4.0]
    assert read_metrics(run_dir)["objective/scores"] == read_metrics(straight)["objective/scores"]


# ---------------------------------------------------------------------------------------------
# item 4: JSONL columns as keyword arguments, several weighted rewards
# ---------------------------------------------------------------------------------------------
VERIFIER = '''
import re

def math_answer(prompts, responses, answer, **unused):
    """1.0 when the last number in the response equals the row's answer, else 0.0."""
    scores = []
    for response, expected in zip(responses, answer):
        numbers = re.findall(r"-?\\d+", response)
        scores.append(1.0 if numbers and numbers[-1] == str(expected) else 0.0)
    return scores

def brevity(prompts, responses):
    return [-len(r.split()) / 10 for r in responses]

seen = []
def spy(prompts, responses, answer, source):
    seen.append((list(prompts), list(answer), list(source)))
    return [0.0] * len(responses)
'''


@pytest.fixture
def verifier(tmp_path, monkeypatch):
    (tmp_path / "verifier_rewards.py").write_text(VERIFIER)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    import verifier_rewards

    return importlib.reload(verifier_rewards)


def test_a_math_verifier_sees_the_answer_column_of_each_row(verifier, tmp_path):
    (tmp_path / "math.jsonl").write_text('{"prompt": "2 + 3 =", "answer": 5}\n{"prompt": "7 - 9 =", "answer": -2}\n')
    rows = load_prompts(str(tmp_path / "math.jsonl"))
    rewards = load_rewards(["verifier_rewards:math_answer"], [], torch.device("cpu"), import_path=[str(tmp_path)])
    b = RewardBatch(rows * 2, ["it is 5", "it is 2", "4 or 6", "it is -2"], [""] * 4, step=1)
    total, parts = rewards(b)
    assert total.tolist() == [1.0, 0.0, 0.0, 1.0]
    assert list(parts) == ["math_answer"]


def test_several_rewards_are_weighted_and_each_is_logged_under_its_name(verifier, tiny_cfg, tmp_path):
    lines = [{"prompt": p, "answer": i % 3, "source": f"row{i}"} for i, p in
             enumerate((tiny_cfg().prompts and open(tiny_cfg().prompts).read().splitlines())[:8])]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    t = RLHFTrainer(tiny_cfg(prompts=str(tmp_path / "rows.jsonl"), reward_import_path=[str(tmp_path)],
                             reward=["verifier_rewards:brevity", "proxima.rlhf.demo:keyword_sentiment", "verifier_rewards:spy"],
                             reward_weights=[0.5, 2.0, 1.0], missing_eos_penalty=0.0))
    b = t.rollout()
    parts = b["reward_parts"]
    assert list(parts) == ["brevity", "keyword_sentiment", "spy"]
    torch.testing.assert_close(b["scores"], 0.5 * parts["brevity"] + 2.0 * parts["keyword_sentiment"])
    prompts, answers, sources = verifier.seen[-1]
    for p, a, s in zip(prompts, answers, sources):  # each row's own fields, in the batch's order
        i = int(s[3:])
        assert lines[i]["prompt"] == p and lines[i]["answer"] == a
    metrics, _ = t.train_step()
    assert {"rewards/brevity", "rewards/keyword_sentiment", "rewards/spy"} <= set(metrics)


def test_reward_weights_must_match_the_rewards(assets, tmp_path, capsys):
    code = main(["--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"),
                 "--reward", "proxima.rlhf.demo:keyword_sentiment", "--reward", "proxima.rlhf.demo:keyword_sentiment",
                 "--reward-weights", "1", "--run-dir", str(tmp_path / "run")])
    assert code == 2 and "--reward-weights" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
