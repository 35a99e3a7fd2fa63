"""A reward may take a prompts-file column named ``completions`` (reference answers): only TRL's shapes,
completions first or keyword-only, are TRL's signature (mutation round rlhf_mut50 found the column refused)."""
import pytest

from proxima.rlhf.data import PromptRow
from proxima.rlhf.rewards import RewardBatch, RewardError, RewardFunction


def with_reference(prompts, responses, completions):
    return [float(r == c) for r, c in zip(responses, completions)]


def with_reference_kw(prompts, responses, *, completions=None):
    return [float(completions is not None and r == c) for r, c in zip(responses, completions or [None] * len(responses))]


def trl_reversed(completions, prompts, **kwargs):
    return [0.0] * len(completions)


@pytest.mark.parametrize("func", [with_reference, with_reference_kw])
def test_a_column_named_completions_reaches_the_reward(func):
    rows = [PromptRow("p", {"completions": "yes"}, line=1), PromptRow("q", {"completions": "no"}, line=2)]
    batch = RewardBatch(rows, ["yes", "maybe"], ["pyes", "qmaybe"], step=0)
    assert RewardFunction(func, f"r.py:{func.__name__}", func.__name__)(batch) == [1.0, 0.0]


def test_completions_as_the_first_argument_is_still_trls_signature():
    with pytest.raises(RewardError, match=r"is TRL's signature; a reward is called as f\(prompts, responses"):
        RewardFunction(trl_reversed, "r.py:trl_reversed", "trl_reversed")
