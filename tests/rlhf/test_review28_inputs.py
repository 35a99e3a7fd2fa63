"""Review 28 of the RLHF inputs: what a reward function is handed, scores past float32, file.py rewards
that define classes, tables and directories as --prompts, a second BOS, and errors naming FILE:LINE."""

import json
import pickle
import sys

import numpy as np
import pytest
import torch

from proxima.rlhf import train_rlhf
from proxima.rlhf.__main__ import main
from proxima.rlhf.config import ConfigError, RLHFConfig
from proxima.rlhf.data import PromptRow, encode_prompts, load_prompts
from proxima.rlhf.rewards import RewardBatch, RewardError, RewardFunction, Rewards, load_reward, validate_scores
from proxima.rlhf.rundir import list_checkpoints, read_metrics
from rlhf_assets import save_gpt2, word_tokenizer

CHAT_SPECIALS = ["[BOS]", "<|user|>", "<|assistant|>", "<|end|>"]
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def chat_tokenizer(template=TEMPLATE):
    """The demo's words plus chat tokens, a chat template, and a BOS the tokenizer adds to plain text."""
    from tokenizers import processors

    tok = word_tokenizer(extra_specials=CHAT_SPECIALS)
    tok.bos_token = "[BOS]"
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", tok.convert_tokens_to_ids("[BOS]"))])
    tok.chat_template = template
    return tok


def batch(rows, step=3):
    return RewardBatch(rows, ["good"] * len(rows), ["x good"] * len(rows), step)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


# ---------------------------------------------------------------------------------------------
# 1. a reward function gets copies of the prompts and columns
# ---------------------------------------------------------------------------------------------
def test_a_reward_function_that_changes_its_arguments_changes_no_row_and_no_other_sample():
    row = PromptRow([{"role": "user", "content": "the movie was"}], {"seen": []}, line=1)
    calls = []

    def judge(prompts, responses, seen):
        calls.append([len(m) for m in prompts])
        for msgs, r, s in zip(prompts, responses, seen):
            msgs.append({"role": "assistant", "content": r})  # builds the judged conversation in place
            s.append(r)
        return [float(len(m)) for m in prompts]

    f = RewardFunction(judge, "m:judge", "judge")
    # --samples-per-prompt 2: the same row twice in one call
    assert f(batch([row, row])) == [2.0, 2.0]
    assert f(batch([row, row])) == [2.0, 2.0]
    assert calls == [[1, 1], [1, 1]]
    assert row.prompt == [{"role": "user", "content": "the movie was"}] and row.columns == {"seen": []}


JUDGE = '''
def judge(prompts, responses):
    for msgs, r in zip(prompts, responses):
        msgs.append({"role": "assistant", "content": r})
    return [float(len(m)) for m in prompts]
'''


def test_a_judge_that_appends_to_its_conversation_leaves_the_prompts_of_later_steps_and_the_logs_alone(tmp_path):
    tok = chat_tokenizer()
    save_gpt2(tmp_path / "model", tokenizer=tok)
    rows = [{"prompt": [{"role": "user", "content": f"the {w} was"}]} for w in ("movie", "food")]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "judge.py").write_text(JUDGE)
    run = train_rlhf(RLHFConfig(policy=str(tmp_path / "model"), prompts=str(tmp_path / "chat.jsonl"),
                          reward=f"{tmp_path / 'judge.py'}:judge", batch_size=4, num_minibatches=1, update_epochs=1,
                          samples_per_prompt=2, max_new_tokens=3, steps=3, print_every=0, sample_every=1,
                          samples_logged=4, checkpoint_every=0, plot=False, run_dir=str(tmp_path / "run")))
    assert read_metrics(run)["rewards/judge"] == [2.0, 2.0, 2.0]  # one user message + the reply, every step
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 12 and all(len(s["prompt"]) == 1 for s in samples)


# ---------------------------------------------------------------------------------------------
# 2. scores checked in float32; a number no float holds is a RewardError
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("returned, words", [
    ([1.0, 1e39], "sample 1 (prompts line 2, response 'good') got 1e+39, past float32's largest number"),
    (np.array([1.0, 1e39]), "sample 1 (prompts line 2, response 'good') got 1e+39, past float32's largest"),
    (torch.tensor([1.0, 1e39], dtype=torch.float64), "got 1e+39, past float32's largest number"),
    ([1.0, 10 ** 400], "sample 1 (prompts line 2, response 'good') got 1000000000000000000000000000000000000... "
                       "(int), which is no float (int too large to convert to float)"),
    ([1.0, 10 ** 5000], "got an int of 16610 bits (int), which is no float"),
])
def test_a_score_past_float32_is_a_reward_error_naming_reward_step_and_sample(returned, words):
    rows = [PromptRow("a", line=1), PromptRow("b", line=2)]
    with pytest.raises(RewardError) as e:
        validate_scores(returned, batch(rows, step=7), "big")
    assert str(e.value).startswith("reward big at step 7: ") and words in str(e.value), str(e.value)


def test_a_weighted_sum_past_float32_is_a_reward_error():
    rows = [PromptRow("a", line=1), PromptRow("b", line=2)]
    a = RewardFunction(lambda p, r: [1.0, 3e38], "m:a", "a")
    b = RewardFunction(lambda p, r: [1.0, 3e38], "m:b", "b")
    with pytest.raises(RewardError) as e:
        Rewards([a, b], [1.0, 0.5])(batch(rows, step=4))
    assert str(e.value).startswith("rewards at step 4: sample 1 (prompts line 2, response 'good'): the weighted sum "
                                   "1 x m:a (3e+38) + 0.5 x m:b (3e+38) is inf in float32"), str(e.value)
    assert "lower --reward-weights" in str(e.value)


LATE = '''
calls = 0
def score(prompts, responses):
    global calls
    calls += 1
    return [BIG if calls >= 4 else 0.0 for _ in responses]  # call 1 is the trial call; call 4 is step 3
'''


@pytest.mark.parametrize("big, words", [("1e39", "got 1e+39, past float32's largest number"),
                                        ("10 ** 400", "(int), which is no float")])
def test_a_score_past_float32_mid_run_exits_2_naming_the_reward_after_a_checkpoint_of_the_last_step(
        assets, tmp_path, capsys, big, words):
    (tmp_path / "late.py").write_text(f"BIG = {big}\n" + LATE)
    run_dir = tmp_path / "run"
    code = main(["--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"),
                 "--reward", f"{tmp_path / 'late.py'}:score", "--run-dir", str(run_dir), "--batch-size", "4",
                 "--num-minibatches", "1", "--update-epochs", "1", "--max-new-tokens", "3", "--steps", "4",
                 "--checkpoint-every", "0", "--print-every", "0", "--no-plot"])
    err = one_error_line(capsys)
    assert code == 2 and f"reward {tmp_path / 'late.py'}:score at step 3: sample 0" in err and words in err, err
    assert "checkpoint of step 2 written" in err, err
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_000002.pt"]


# ---------------------------------------------------------------------------------------------
# 3. a file.py:function reward is a module in sys.modules
# ---------------------------------------------------------------------------------------------
CLASSES = '''
from __future__ import annotations

import enum
import pickle
from dataclasses import dataclass


class Kind(enum.Enum):
    LONG = 1


@dataclass
class Rubric:
    weight: float = 1.0


def score(prompts, responses):
    pickle.loads(pickle.dumps(Kind.LONG))
    return [Rubric().weight * len(r.split()) for r in responses]
'''


@pytest.mark.parametrize("name", ["dc_rewards_r28.py", "json.py"])  # json.py: must not replace the standard module
def test_a_reward_file_defining_a_dataclass_and_an_enum_loads_and_pickles(tmp_path, name):
    (tmp_path / name).write_text(CLASSES)
    f = load_reward(f"{tmp_path / name}:score", torch.device("cpu"))
    assert f(batch([PromptRow("a", line=1)])) == [1.0]
    rubric = f.func.__globals__["Rubric"]
    assert pickle.loads(pickle.dumps(rubric(2.0))) == rubric(2.0)
    assert sys.modules["json"] is json
    before = {k for k in sys.modules if k.startswith("_proxima_reward_file_")}
    again = load_reward(f"{tmp_path / name}:score", torch.device("cpu"))  # a second load: run afresh, same name
    assert again.func is not f.func and again(batch([PromptRow("a", line=1)])) == [1.0]
    assert again.func.__module__ == f.func.__module__ and sys.modules[again.func.__module__].score is again.func
    # loading the file again replaces its entry: a notebook's runs do not pile up copies (and what they loaded)
    assert {k for k in sys.modules if k.startswith("_proxima_reward_file_")} == before


def test_a_reward_file_that_fails_on_its_second_load_leaves_the_first_copy_in_place(tmp_path):
    path = tmp_path / "r28_reload.py"
    path.write_text("def score(prompts, responses):\n    return [1.0] * len(responses)\n")
    f = load_reward(f"{path}:score", torch.device("cpu"))
    path.write_text("raise RuntimeError('broken edit')\n")
    with pytest.raises(ConfigError, match="broken edit"):
        load_reward(f"{path}:score", torch.device("cpu"))
    assert sys.modules[f.func.__module__].score is f.func


# ---------------------------------------------------------------------------------------------
# 4, 6, 7. --prompts files: tables, directories, bytes that are no UTF-8, FILE:LINE
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["a.csv", "a.TSV", "a.parquet", "a.arrow"])
def test_a_table_as_prompts_is_refused_naming_the_forms_read(tmp_path, name):
    (tmp_path / name).write_text("prompt,answer\nthe movie was,good\n")
    with pytest.raises(ConfigError) as e:
        load_prompts(str(tmp_path / name))
    suffix = name[1:].lower()
    assert str(e.value) == (f"--prompts {str(tmp_path / name)!r}: a {suffix} file is not read; give JSON lines "
                            f"(.jsonl or .json: a string, {{\"prompt\": ...}} or {{\"messages\": ...}} per line), a .json "
                            f"file holding one array of such rows, or a text file of one prompt per line")


def test_a_csv_on_the_command_line_exits_2_in_one_line_and_writes_nothing(assets, tmp_path, capsys):
    (tmp_path / "a.csv").write_text("prompt,answer\nthe movie was,good\n")
    code = main(["--policy", str(assets / "model"), "--prompts", str(tmp_path / "a.csv"),
                 "--reward", "proxima.rlhf.demo:keyword_sentiment", "--run-dir", str(tmp_path / "run")])
    err = one_error_line(capsys)
    assert code == 2 and err.startswith("proxima rlhf: error: --prompts ") and "a .csv file is not read" in err, err
    assert not (tmp_path / "run").exists()


def test_a_directory_as_prompts_says_it_is_a_directory(tmp_path):
    with pytest.raises(ConfigError, match="is a directory, not a file"):
        load_prompts(str(tmp_path))


def test_a_byte_that_is_no_utf8_is_named_by_its_line(tmp_path):
    data = b'{"prompt": "a"}\n' * 500 + b'{"prompt": "it\x92s"}\n'
    for name, prefix in (("p.jsonl", b""), ("bom.jsonl", b"\xef\xbb\xbf")):
        (tmp_path / name).write_bytes(prefix + data)
        with pytest.raises(ConfigError) as e:
            load_prompts(str(tmp_path / name))
        assert str(e.value) == (f"--prompts {tmp_path / name}:501: byte 0x92 at column 15 is not UTF-8 (invalid start "
                                f"byte); save the file as UTF-8")


def test_too_long_and_template_less_prompts_are_named_by_file_and_line(tmp_path):
    tok = chat_tokenizer()
    (tmp_path / "p.txt").write_text("the movie\nthe movie was really good\n")
    with pytest.raises(ConfigError) as e:
        encode_prompts(tok, load_prompts(str(tmp_path / "p.txt")), 4, truncate=False)
    assert str(e.value).startswith(f"--prompts {tmp_path / 'p.txt'}:2: 6 tokens, more than --max-prompt-length 4")
    (tmp_path / "c.jsonl").write_text('"the movie"\n{"prompt": [{"role": "user", "content": "the movie"}]}\n')
    with pytest.raises(ConfigError) as e:
        encode_prompts(chat_tokenizer(template=None), load_prompts(str(tmp_path / "c.jsonl")), 64, truncate=False)
    assert str(e.value).startswith(f"--prompts {tmp_path / 'c.jsonl'}:2: a conversation, but the tokenizer has no chat "
                                   f"template")


@pytest.mark.parametrize("row", ['{"prompt": []}', '{"messages": []}'])
def test_an_empty_conversation_is_called_empty(tmp_path, row):
    (tmp_path / "e.jsonl").write_text('"the movie"\n' + row + "\n")
    with pytest.raises(ConfigError) as e:
        load_prompts(str(tmp_path / "e.jsonl"))
    assert str(e.value) == f"--prompts {tmp_path / 'e.jsonl'}:2: the conversation is empty; give at least one message"


def test_a_numpy_score_array_of_the_wrong_shape_gets_the_shape_message():
    rows = [PromptRow("a", line=1), PromptRow("b", line=2)]
    with pytest.raises(RewardError) as e:
        validate_scores(np.ones((2, 1)), batch(rows), "f")
    assert str(e.value) == ("reward f at step 3: returned a float64 numpy array of shape (2, 1); expected (2,) real "
                            "numbers, one per response")


def test_prompts_help_names_every_row_form(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    at = text.index("--prompts PROMPTS Prompts:")
    doc = text[at:text.index("--max-prompt-length", at)]
    assert '{"messages": [{"role": ..., "content": ...}, ...], ...}' in doc, doc
    assert ".json file holding one array of such rows" in doc and "text file with one prompt per line" in doc, doc


# ---------------------------------------------------------------------------------------------
# 5. text that starts with the BOS gets no second one
# ---------------------------------------------------------------------------------------------
def test_plain_text_rendered_by_a_chat_template_keeps_one_bos(tmp_path):
    tok = chat_tokenizer()
    rendered = tok.apply_chat_template([{"role": "user", "content": "the movie was"}], add_generation_prompt=True,
                                       tokenize=False)
    (tmp_path / "p.txt").write_text(rendered + "\nthe movie was\n[BOS] [BOS] the food\n")
    ids = encode_prompts(tok, load_prompts(str(tmp_path / "p.txt")), 64, truncate=False)
    assert [tok.convert_ids_to_tokens(x) for x in ids] == [
        ["[BOS]", "<|user|>", "the", "movie", "was", "<|end|>", "<|assistant|>"],
        ["[BOS]", "the", "movie", "was"],  # a BOS still added to text without one
        ["[BOS]", "[BOS]", "the", "food"],  # two written in the text: the tokenizer's is the one dropped
    ]


@pytest.mark.parametrize("steps, words", [("5", "expected an integer number of steps"), (True, "expected an integer"),
                                          (2.0, "expected an integer"), (0, "must be at least 1")])
def test_resume_from_python_refuses_steps_that_are_no_count_before_reading_the_run(tmp_path, steps, words):
    from proxima.rlhf import resume

    with pytest.raises(ConfigError, match=rf"^resume\(steps={steps!r}\): {words}"):
        resume(tmp_path / "no-such-run", steps=steps)  # refused first: the directory is not even looked at
