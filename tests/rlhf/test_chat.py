"""Chat: conversational JSONL rendered with the tokenizer's chat template, BOS as the tokenizer adds it,
and the reward model reading the template's special tokens (or its own template)."""

import json

import pytest
import torch

from proxima.rlhf.config import ConfigError
from proxima.rlhf.data import encode_prompts, load_prompts
from proxima.rlhf.demo import POSITIVE, SUBJECTS, VERBS, build_model
from proxima.rlhf.trainer import RLHFTrainer

CHAT_SPECIALS = ["[BOS]", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
# a reward model with another template: no BOS, roles as plain words
RM_TEMPLATE = "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} <|end|> {% endfor %}"


def chat_tokenizer(template=TEMPLATE):
    """The demo's word-level vocabulary plus chat tokens; the tokenizer adds BOS to plain text."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from proxima.rlhf.demo import CONJUNCTIONS, INTENSIFIERS, NEGATIVE, SPECIALS, TAILS

    words = sorted({w for phrase in SUBJECTS + VERBS + INTENSIFIERS + POSITIVE + NEGATIVE + CONJUNCTIONS + TAILS
                    for w in phrase.split()} | {".", ":", "user", "assistant", "system", "be", "kind"})
    vocab = {w: i for i, w in enumerate(SPECIALS + CHAT_SPECIALS + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="[BOS] $A", special_tokens=[("[BOS]", vocab["[BOS]"])])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]",
                                        bos_token="[BOS]", additional_special_tokens=CHAT_SPECIALS[1:])
    tokenizer.chat_template = template
    return tokenizer


@pytest.fixture(scope="module")
def chat_assets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chat")
    tok = chat_tokenizer()
    build_model(tok, n_layer=1, n_embd=32, n_head=2, n_positions=48).save_pretrained(folder / "model")
    tok.save_pretrained(folder / "model")
    rows = [{"messages": [{"role": "system", "content": "be kind"}, {"role": "user", "content": f"{s} {v}"},
                          {"role": "assistant", "content": "great ."}], "id": i}
            for i, (s, v) in enumerate(zip(SUBJECTS, VERBS * 4))]
    rows += [{"prompt": [{"role": "user", "content": f"{s} was"}], "id": 100 + i} for i, s in enumerate(SUBJECTS)]
    (folder / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def reward_model(folder, tok):
    from transformers import GPT2Config, GPT2ForSequenceClassification

    torch.manual_seed(3)
    GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_positions=48, n_embd=32, n_layer=1, n_head=2,
                                             num_labels=1, pad_token_id=tok.pad_token_id)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_conversations_are_rendered_with_the_template_and_its_generation_prompt(chat_assets):
    tok = chat_tokenizer()
    rows = load_prompts(str(chat_assets / "chat.jsonl"))
    assert [m["role"] for m in rows[0].prompt] == ["system", "user"]  # the reference answer is not prompted
    assert rows[0].columns == {"id": 0}
    ids = encode_prompts(tok, rows, 64, truncate=False)
    expected = "[BOS] <|system|> be kind <|end|> <|user|> the movie was <|end|> <|assistant|>"
    assert tok.convert_ids_to_tokens(ids[0]) == expected.split()
    assert all(x.count(tok.bos_token_id) == 1 and x[-1] == tok.convert_tokens_to_ids("<|assistant|>") for x in ids)


def test_plain_text_prompts_get_bos_as_the_tokenizer_adds_it(tmp_path):
    tok = chat_tokenizer()
    (tmp_path / "p.txt").write_text("the movie was\n")
    ids = encode_prompts(tok, load_prompts(str(tmp_path / "p.txt")), 64, truncate=False)
    assert tok.convert_ids_to_tokens(ids[0]) == ["[BOS]", "the", "movie", "was"]
    # truncation keeps the BOS and the last tokens
    ids = encode_prompts(tok, load_prompts(str(tmp_path / "p.txt")), 3, truncate=True)
    assert tok.convert_ids_to_tokens(ids[0]) == ["[BOS]", "movie", "was"]


def test_a_conversation_without_a_chat_template_is_refused_naming_the_line(chat_assets):
    tok = chat_tokenizer(template=None)
    with pytest.raises(ConfigError, match=r"chat\.jsonl:1: a conversation, but the tokenizer has no chat template"):
        encode_prompts(tok, load_prompts(str(chat_assets / "chat.jsonl")), 64, truncate=False)


@pytest.mark.parametrize("line, words", [('{"prompt": [{"role": "user"}]}', "message 0"),
                                          ('{"prompt": "a", "messages": []}', "exactly one"),
                                          ('{"messages": [{"role": "assistant", "content": "x"}]}', "no message before"),
                                          ('{"prompt": "a", "prompts": 1}', "reserved")])
def test_malformed_conversational_rows_are_named(tmp_path, line, words):
    (tmp_path / "bad.jsonl").write_text(line + "\n")
    with pytest.raises(ConfigError, match=words):
        load_prompts(str(tmp_path / "bad.jsonl"))


def capture_reward_model_inputs(t):
    rm = t.reward.models[0]
    seen = []
    encode = rm.encode

    def spy(*args):
        out = encode(*args)
        seen.extend(out)
        return out

    rm.encode = spy
    b = t.rollout()
    return b, seen


def test_the_reward_model_reads_exactly_the_tokens_the_policy_saw_template_and_bos_included(tiny_cfg, chat_assets, tmp_path):
    rm = reward_model(tmp_path / "rm", chat_tokenizer(template=None))  # same vocabulary, no template of its own
    t = RLHFTrainer(tiny_cfg(policy=str(chat_assets / "model"), prompts=str(chat_assets / "chat.jsonl"), reward=str(rm)))
    b, seen = capture_reward_model_inputs(t)
    context = b["context_length"]
    for i in range(len(seen)):
        prompt = [x for x, m in zip(b["query_responses"][i, :context].tolist(), b["attention_mask"][i, :context]) if m]
        n = int(b["lengths"][i])  # the stop token the policy emitted is read too (TRL keeps it)
        assert seen[i] == prompt + b["responses"][i, :n].tolist()
    assert all(x.count(t.tokenizer.bos_token_id) == 1 for x in seen)


def test_a_reward_model_with_its_own_template_reads_the_conversation_through_it(tiny_cfg, chat_assets, tmp_path):
    rm_tok = chat_tokenizer(template=RM_TEMPLATE)
    rm = reward_model(tmp_path / "rm", rm_tok)
    t = RLHFTrainer(tiny_cfg(policy=str(chat_assets / "model"), prompts=str(chat_assets / "chat.jsonl"), reward=str(rm)))
    b, seen = capture_reward_model_inputs(t)
    tokens = rm_tok.convert_ids_to_tokens(seen[0])
    assert tokens[0] == "[BOS]" and tokens.count("[BOS]") == 1  # its tokenizer adds BOS; its template does not
    assert "<|user|>" not in tokens and tokens[-1] == "<|end|>" and "assistant" in tokens


def test_a_chat_run_trains_and_logs_conversations(tiny_cfg, chat_assets):
    t = RLHFTrainer(tiny_cfg(policy=str(chat_assets / "model"), prompts=str(chat_assets / "chat.jsonl")))
    metrics, samples = t.train_step()
    assert metrics["objective/scores"] == metrics["objective/scores"]
    assert isinstance(samples[0]["prompt"], list)


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("name", ["p.jsonl", "p.json", "p.JSONL", "p.Json"])
def test_json_lines_are_read_as_json_whatever_the_suffix_case_and_a_bom_is_dropped(tmp_path, name):
    (tmp_path / name).write_bytes(BOM + b'{"prompt": "the movie was", "answer": "3"}\n"the food is"\n')
    rows = load_prompts(str(tmp_path / name))
    assert [(r.prompt, r.line, r.columns) for r in rows] == [("the movie was", 1, {"answer": "3"}),
                                                             ("the food is", 2, {"answer": None})]


def test_a_text_file_loses_its_bom_too(tmp_path):
    (tmp_path / "p.txt").write_bytes(BOM + b"the movie was\nthe food is\n")
    assert [r.prompt for r in load_prompts(str(tmp_path / "p.txt"))] == ["the movie was", "the food is"]


def test_a_json_file_holding_one_array_gives_a_prompt_per_element_named_by_its_line(tmp_path):
    (tmp_path / "p.json").write_text('[\n  {"prompt": "the movie was", "answer": 1},\n\n  "the food is" ,\n'
                                     '  {"messages": [{"role": "user", "content": "hi"}]}]\n')
    rows = load_prompts(str(tmp_path / "p.json"))
    assert [(r.prompt, r.line) for r in rows] == [("the movie was", 2), ("the food is", 4),
                                                  ([{"role": "user", "content": "hi"}], 5)]
    (tmp_path / "bad.json").write_text('[\n  "the movie was",\n  {"prompt": 3}\n]\n')
    with pytest.raises(ConfigError) as e:
        load_prompts(str(tmp_path / "bad.json"))
    assert str(e.value) == (f"--prompts {tmp_path / 'bad.json'}:3: 'prompt' must be a string or a list of "
                            f"{{role, content}} messages")
