"""Review 33 of proxima/rlhf/rewards.py: an empty --reward-weights weighs every reward, duplicated names
keep every reward's score, **kwargs gets every column, one-line errors, NaN named as such, a 2-label
classifier refused, one BOS, the cut count at exactly the model's positions, texts_with_stop only for the
policy's vocabulary, nested special tokens removed whole, the reward file's folder searched first, and a
module whose edit fails to import keeps its old namespace."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tiny local models only: nothing may be downloaded
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from proxima.rlhf.config import ConfigError  # noqa: E402
from proxima.rlhf.data import PromptRow  # noqa: E402
from proxima.rlhf.rewards import (RewardBatch, RewardError, RewardFunction, RewardModel, Rewards,  # noqa: E402
                                  load_reward, load_rewards, validate_scores)
from tests.cli_helpers import error_line, imports_taken_back, run_main  # noqa: E402
from tests.rlhf import test_reward_models26 as m26  # noqa: E402
from tests.rlhf import test_review28_inputs as m28  # noqa: E402

CPU = torch.device("cpu")


def batch(texts, responses=None, columns=None, texts_with_stop=None, step=3):
    rows = [PromptRow(t, {k: v[i] for k, v in (columns or {}).items()}, line=i + 1) for i, t in enumerate(texts)]
    return RewardBatch(rows, list(responses or texts), list(texts), step, texts_with_stop)


def constant(name, value):
    return RewardFunction(lambda prompts, responses: [value] * len(responses), f"m:{name}", name)


@pytest.fixture
def clean_imports():
    """sys.path and sys.modules as they were: the modules these tests write are taken out again."""
    yield from imports_taken_back("r33")


# --- weights and names -------------------------------------------------------------------------------------
def test_no_reward_weights_weigh_every_reward_one(tmp_path):
    path = tmp_path / "two_r33.py"
    path.write_text("def one(prompts, responses):\n    return [1.0] * len(responses)\n\n"
                    "def ten(prompts, responses):\n    return [10.0] * len(responses)\n")
    rewards = load_rewards([f"{path}:one", f"{path}:ten"], [], CPU)
    total, each = rewards(batch(["a", "b"]))
    assert rewards.weights == [1.0, 1.0]
    assert total.tolist() == [11.0, 11.0] and list(each) == ["one", "ten"]


def test_two_rewards_of_the_same_name_both_count_under_their_own_names():
    total, each = Rewards([constant("f", 1.0), constant("f", 2.0)], [1.0, 1.0])(batch(["a"]))
    assert total.tolist() == [3.0]
    assert {k: v.tolist() for k, v in each.items()} == {"f": [1.0], "f#2": [2.0]}


def test_a_suffix_another_reward_already_has_is_skipped():
    # "f#2" is taken by the first reward's own name: the second "f" is f#3, and each weight meets its reward
    parts = [constant("f#2", 1.0), constant("f", 2.0), constant("f", 4.0)]
    total, each = Rewards(parts, [1.0, 10.0, 100.0])(batch(["a"]))
    assert total.tolist() == [421.0]
    assert {k: v.tolist() for k, v in each.items()} == {"f#2": [1.0], "f": [2.0], "f#3": [4.0]}


# --- reward functions ----------------------------------------------------------------------------------------
def test_a_kwargs_reward_gets_every_column_of_its_rows():
    seen = {}

    def f(prompts, responses, **kw):
        seen.update(kw)
        return [float(a == "4") for a in kw["answer"]]

    scores = RewardFunction(f, "m:f", "f")(batch(["2+2", "3+3"], ["4", "6"],
                                                  {"answer": ["4", "7"], "source": ["x", "y"]}))
    assert scores == [1.0, 0.0]
    assert seen == {"answer": ["4", "7"], "source": ["x", "y"]}


def test_a_multiline_exception_is_reported_in_its_first_line():
    def f(prompts, responses):
        raise ValueError("a\nb")

    with pytest.raises(RewardError) as e:
        RewardFunction(f, "m:f", "f")(batch(["x"]))
    assert str(e.value) == "reward m:f at step 3: raised ValueError: a"


@pytest.mark.parametrize("value, shown", [(float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf")])
def test_a_non_finite_score_is_called_non_finite_not_too_large(value, shown):
    with pytest.raises(RewardError) as e:
        validate_scores([1.0, value], batch(["a", "b"], step=5), "g")
    assert str(e.value) == (f"reward g at step 5: sample 1 (prompts line 2, response 'b') got the non-finite "
                            f"score {shown}")


def test_the_reward_files_own_folder_is_searched_before_the_import_path(tmp_path, clean_imports, monkeypatch):
    # as `python score.py` has it: the helpers beside the file win over a same-named one elsewhere
    rw, extra = tmp_path / "rw", tmp_path / "extra"
    rw.mkdir()
    extra.mkdir()
    (rw / "helpers_r33.py").write_text("VALUE = 1.0\n")
    (extra / "helpers_r33.py").write_text("VALUE = 2.0\n")
    (rw / "score.py").write_text("import helpers_r33\n\ndef fn(prompts, responses):\n"
                                 "    return [helpers_r33.VALUE] * len(responses)\n")
    monkeypatch.chdir(extra)
    for import_path in ([str(extra)], None):  # --reward-import-path, or the cwd when none is given
        sys.modules.pop("helpers_r33", None)
        total, _ = load_rewards([f"{rw / 'score.py'}:fn"], [], CPU, import_path=import_path)(batch(["a"]))
        assert total.tolist() == [1.0], import_path


def test_a_module_whose_edit_fails_to_import_keeps_its_old_functions(tmp_path, clean_imports):
    module = tmp_path / "keep_r33.py"
    module.write_text("SCALE = 3.0\n\ndef score(prompts, responses):\n    return [SCALE] * len(responses)\n")
    first = load_reward("keep_r33:score", CPU, import_path=[str(tmp_path)])
    held = sys.modules["keep_r33"]
    module.write_text("def other(prompts, responses):\n    return []\n\nraise RuntimeError('broken edit')\n")
    with pytest.raises(ConfigError, match=r"cannot import keep_r33: RuntimeError: broken edit"):
        load_reward("keep_r33:score", CPU, import_path=[str(tmp_path)])
    assert sys.modules["keep_r33"] is held
    assert held.score is first.func and held.SCALE == 3.0 and not hasattr(held, "other")
    assert first(batch(["a"])) == [3.0]  # the old function still finds its module's globals


# --- reward models -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def char_rm(tmp_path_factory):
    """A reward model of 48 positions that reads single characters (no BOS added)."""
    from rlhf_assets import save_reward_model

    return save_reward_model(tmp_path_factory.mktemp("r33_char_rm") / "rm", tokenizer=m26.char_tokenizer())


@pytest.fixture(scope="module")
def two_label_rm(tmp_path_factory):
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from proxima.rlhf.demo import build_tokenizer

    folder = tmp_path_factory.mktemp("r33_two_labels") / "sentiment"
    tok = build_tokenizer()
    model = GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_positions=48, n_embd=32, n_layer=1,
                                                     n_head=2, num_labels=2, pad_token_id=tok.pad_token_id))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_a_classifier_of_two_labels_is_refused_at_load(two_label_rm):
    with pytest.raises(ConfigError, match=r"^--reward '.*sentiment': the model has 2 labels; a reward model has 1 \(one score per text\): re-head it"):
        RewardModel(str(two_label_rm), CPU)


def test_the_cli_refuses_a_two_label_reward_model_with_exit_2(two_label_rm, tmp_path, capsys):
    from rlhf_assets import save_gpt2

    policy = save_gpt2(tmp_path / "policy")
    (tmp_path / "p.txt").write_text("the movie was\nthe food was\n")
    run = tmp_path / "run"
    code, _, err = run_main(["rlhf", "--policy", str(policy), "--prompts", str(tmp_path / "p.txt"),
                             "--reward", str(two_label_rm), "--run-dir", str(run), "--steps", "1", "--batch-size", "2",
                             "--num-minibatches", "1", "--max-new-tokens", "2", "--no-plot"], capsys)
    line = error_line(code, err, "the model has 2 labels; a reward model has 1")
    assert line.startswith(f"proxima rlhf: error: --reward {str(two_label_rm)!r}: the model has 2 labels; a reward model "
                           "has 1 (one score per text): re-head it to num_labels=1"), line  # the advice: test_rlhfmsgs48
    assert not run.exists()


@pytest.fixture(scope="module")
def bos_rm(tmp_path_factory):
    """A reward model whose tokenizer adds [BOS] to plain text, as Llama's does."""
    from rlhf_assets import save_reward_model

    return save_reward_model(tmp_path_factory.mktemp("r33_bos_rm") / "rm", tokenizer=m28.chat_tokenizer())


def test_text_that_starts_with_the_bos_gets_no_second_one(bos_rm):
    rm = RewardModel(str(bos_rm), CPU)
    bos = rm.tokenizer.bos_token_id
    assert rm.adds_bos
    rows = [PromptRow("the movie was"), PromptRow("the movie was")]
    with_bos, without = rm.encode(rows, ["good", "good"], ["[BOS] the movie was good", "the movie was good"])
    assert with_bos == without and with_bos.count(bos) == 1 and with_bos[0] == bos
    # the policy's text already holds the BOS: scored as the same input as the text without it
    a = rm(batch(["[BOS] the movie was good"]))
    b = rm(batch(["the movie was good"]))
    assert a.tolist() == b.tolist()


def test_an_input_of_exactly_the_models_positions_is_not_counted_as_cut(char_rm, capsys):
    rm = RewardModel(str(char_rm), CPU)
    rewards = Rewards([rm], [1.0])
    assert rm.limit == 48
    rewards(batch(["x" * 48]))
    assert rewards.take_truncations() == {"rewards/rm/truncated": 0}
    assert "positions" not in capsys.readouterr().err
    rewards(batch(["x" * 49, "x" * 48]))
    assert rewards.take_truncations() == {"rewards/rm/truncated": 1}
    assert "is 49 tokens in its tokenizer, more than its 48 positions" in capsys.readouterr().err


def test_a_reward_model_never_told_the_policys_tokenizer_reads_texts_not_texts_with_stop(char_rm):
    rm = RewardModel(str(char_rm), CPU)  # read_with not called, as from the Python API alone
    plain = rm(batch(["the food was good"])).tolist()
    stop = rm(batch(["the food was good<eos>"])).tolist()
    assert plain != stop  # else the check below could not tell the two apart
    assert rm(batch(["the food was good"], texts_with_stop=["the food was good<eos>"])).tolist() == plain
    rm.read_with(m26.char_tokenizer())  # the same vocabulary: the stop token it emitted is read
    assert rm(batch(["the food was good"], texts_with_stop=["the food was good<eos>"])).tolist() == stop


def test_a_policy_special_token_holding_another_is_removed_whole(char_rm):
    from rlhf_assets import word_tokenizer

    rm = RewardModel(str(char_rm), CPU)
    rm.read_with(word_tokenizer(extra_specials=("<a>", "<a>b")))
    row = PromptRow("p")
    assert rm.render(row, "X", "<a>bX") == "X"
    assert rm.render(row, "X", "<a>b<a>X[EOS]") == "X"
