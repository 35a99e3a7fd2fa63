"""Prompts: read from a JSON-lines, JSON or text file, rendered to token ids, sharded across processes,
drawn in shuffled passes.

A prompt is plain text or a conversation (a list of ``{"role", "content"}`` messages). JSONL rows may
carry other fields (``"answer": "42"``); they travel with the prompt to the reward functions as
keyword arguments.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import torch

from .config import ConfigError

RESERVED_COLUMNS = ("prompts", "responses")  # the reward functions' positional arguments


@dataclass
class PromptRow:
    """One prompt and the other fields of its JSONL row."""

    prompt: Union[str, list]  # text, or a conversation: [{"role": ..., "content": ...}, ...]
    columns: dict = field(default_factory=dict)
    line: int = 0  # 1-based line in the prompts file, for error messages
    file: str = field(default="", compare=False)  # the prompts file, for error messages

    @property
    def is_conversation(self) -> bool:
        return isinstance(self.prompt, list)

    def text(self) -> str:
        """The prompt as one string (the last message's content for a conversation), for logs."""
        return self.prompt if isinstance(self.prompt, str) else self.prompt[-1]["content"]


JSON_SUFFIXES = (".jsonl", ".json")  # any case: .JSONL, .Json
# read as text, a table would give its header as a prompt and each row's answer inside its prompt
TABLE_SUFFIXES = (".csv", ".tsv", ".parquet", ".arrow")
SUPPORTED_FORMS = ("JSON lines (.jsonl or .json: a string, {\"prompt\": ...} or {\"messages\": ...} per line), "
                   "a .json file holding one array of such rows, or a text file of one prompt per line")
_SEPARATORS = re.compile(r"[ \t\r\n,]*")


class Prompts(list):
    """The PromptRows of a prompts file, and how many blank (empty or all-whitespace) lines it skipped."""

    blank_lines: int = 0


def load_prompts(path: str) -> Prompts:
    """PromptRows from a JSON-lines file (.jsonl or .json), a .json file holding one array, or a text
    file (any other name: one prompt per line). A UTF-8 byte-order mark is dropped. Blank lines (empty or
    all-whitespace) between rows are skipped in both line forms, as a layout, and counted in
    ``blank_lines`` for the start-up line (:func:`loaded_line`); the newline that ends the last line is
    no blank line.

    JSON rows: a JSON string; ``{"prompt": "text" | [messages], ...}``; or ``{"messages": [...], ...}``
    (trailing assistant messages, a reference answer, are dropped from the prompt). A table (.csv, .tsv,
    .parquet, .arrow) is refused rather than read as lines of text.
    """
    file = Path(path)
    if file.is_dir():
        raise ConfigError(f"--prompts {path!r}: is a directory, not a file; give the prompts file itself")
    if not file.is_file():  # a FIFO or device exists: "no such file" sent the user looking for a typo
        if file.exists():
            raise ConfigError(f"--prompts {path!r}: is not a regular file (a FIFO, device or socket); give the prompts file itself")
        raise ConfigError(f"--prompts {path!r}: no such file")
    suffix = file.suffix.lower()
    if suffix in TABLE_SUFFIXES:
        raise ConfigError(f"--prompts {path!r}: a {suffix} file is not read; give {SUPPORTED_FORMS}")
    try:
        # utf-8-sig: editors on Windows start files with a BOM, which would otherwise open prompt 1. Bytes,
        # not read_text: its universal newlines would end a row at a lone \r too (below)
        text = file.read_bytes().decode("utf-8-sig")
    except OSError as e:
        raise ConfigError(f"--prompts {path!r}: cannot read: {e}") from None
    except UnicodeDecodeError as e:
        # e.object: the bytes after the BOM, which holds no newline, so the line count is the file's
        line = e.object.count(b"\n", 0, e.start) + 1
        column = e.start - e.object.rfind(b"\n", 0, e.start)
        raise ConfigError(f"--prompts {path}:{line}: byte 0x{e.object[e.start]:02x} at column {column} is not UTF-8 "
                          f"({e.reason}); save the file as UTF-8") from None
    rows, blank = Prompts(), 0
    if suffix == ".json" and text.lstrip().startswith("["):
        rows = Prompts(_parse_row(item, f"--prompts {path}:{number}", number) for item, number in _json_array(text, path))
    else:
        # rows end at "\n" (or "\r\n") only: str.splitlines() also breaks at \r, U+2028, U+2029, U+0085,
        # \x0b, \x0c and \x1c-\x1e, which a JSON string or a text prompt may hold, and would cut the row and
        # shift every later line number
        lines = text.split("\n")
        if lines[-1] == "":  # the newline that ends the last line
            lines.pop()
        for number, line in enumerate(lines, 1):
            if line.endswith("\r"):
                line = line[:-1]
            if not line.strip():  # a separator between prompts, not one: a row "   " of JSON lines is refused
                blank += 1
                continue
            if suffix in JSON_SUFFIXES:
                try:
                    item = json.loads(line)
                except ValueError as e:
                    hint = "; a .json file holds one row per line (JSON lines) or one array of rows" if suffix == ".json" else ""
                    raise ConfigError(f"--prompts {path}:{number}: not JSON ({e}){hint}") from None
                rows.append(_parse_row(item, f"--prompts {path}:{number}", number))
            else:
                rows.append(PromptRow(line, line=number))
    if not rows:
        raise ConfigError(f"--prompts {path!r}: no prompts in the file")
    names = sorted({k for r in rows for k in r.columns})
    for r in rows:  # every reward call gets every column; a row without one gets None
        r.columns = {k: r.columns.get(k) for k in names}
        r.file = str(path)
    rows.blank_lines = blank
    return rows


def loaded_line(rows: list, path: str) -> str:
    """The start-up line that says what a run trains on: ``prompts: 2 from ws.txt (1 blank line skipped)``."""
    blank = getattr(rows, "blank_lines", 0)
    skipped = f" ({blank} blank line{'s' if blank != 1 else ''} skipped)" if blank else ""
    return f"prompts: {len(rows)} from {path}{skipped}"


def prompts_sha256(rows: list) -> str:
    """sha256 of what a run reads from its prompts: each row's prompt (text or messages) and other fields,
    as canonical JSON. Recorded in checkpoints, it tells a resume that the file changed.

    The parsed rows rather than the file's bytes, so that nothing the run cannot see refuses a resume (line
    endings, a BOM, blank lines, JSON spacing or key order); rather than token ids, so that a changed
    column (the ``answer`` a reward function checks) is caught too, and the hash is the file's alone,
    not the tokenizer's."""
    h = hashlib.sha256()
    for r in rows:
        h.update(json.dumps([r.prompt, r.columns], sort_keys=True, ensure_ascii=True).encode() + b"\n")
    return h.hexdigest()


def _json_array(text: str, path: str) -> list:
    """(item, line of its first character) for each element of a JSON array: the line numbers that
    error messages name, as for JSON lines."""
    try:
        json.loads(text)  # the whole file must be one valid array before it is walked
    except ValueError as e:
        raise ConfigError(f"--prompts {path}: not JSON ({e})") from None
    decoder, out = json.JSONDecoder(), []
    pos, line, counted = text.index("[") + 1, 1, 0
    while True:
        pos = _SEPARATORS.match(text, pos).end()  # valid JSON: only whitespace and one comma lie between items
        if text[pos] == "]":
            return out
        line, counted = line + text.count("\n", counted, pos), pos
        item, pos = decoder.raw_decode(text, pos)
        out.append((item, line))


#: the fields other datasets hold a row's prompt in (TRL's "query", a corpus' "text"), and its conversation in
PROMPT_NAMES = ("query", "text", "question", "input", "instruction", "prompt_text", "content")
MESSAGES_NAMES = ("conversation", "conversations", "chat", "dialog", "dialogue")


def _fields_found(item: dict) -> str:
    """``, found 'query': rename it to 'prompt'``: the keys of a row with neither or both of 'prompt' and
    'messages', and the rename meant where one of them is a prompt or a conversation by another name (the
    row's only field, or a name other datasets use); the other fields are columns the rewards read."""
    keys = list(item)
    shown = ", ".join(repr(str(k))[:60] for k in keys[:8]) + (f", ... ({len(keys)} in all)" if len(keys) > 8 else "")
    if not keys:
        return ", found none (an empty object)"
    if "prompt" in item:  # both
        return ", found both: keep one"
    def conversation(value) -> bool:
        return isinstance(value, list) and bool(value) and all(isinstance(m, dict) for m in value)

    meant = [k for k in keys if str(k).lower() in PROMPT_NAMES + MESSAGES_NAMES] or (keys if len(keys) == 1 else [])
    for key in meant:
        value = item[key]
        if isinstance(value, str) or conversation(value):
            field = "messages" if conversation(value) else "prompt"
            return f", found {shown}: rename {str(key)!r} to {field!r}"
    return f", found {shown}"


def _parse_row(item, where: str, number: int) -> PromptRow:
    if isinstance(item, str):
        _check_text(item, where)
        return PromptRow(item, line=number)
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected a string or an object with 'prompt' or 'messages'")
    if ("prompt" in item) == ("messages" in item):
        raise ConfigError(f"{where}: expected exactly one of the fields 'prompt' and 'messages'{_fields_found(item)}")
    key = "prompt" if "prompt" in item else "messages"
    prompt = item[key]
    if isinstance(prompt, list):
        if not prompt:
            raise ConfigError(f"{where}: the conversation is empty; give at least one message")
        _check_messages(prompt, where)
        while key == "messages" and prompt and prompt[-1]["role"] == "assistant":
            prompt = prompt[:-1]
        if not prompt:
            raise ConfigError(f"{where}: the conversation has no message before the assistant's")
    elif not isinstance(prompt, str):
        raise ConfigError(f"{where}: '{key}' must be a string or a list of {{role, content}} messages")
    else:
        _check_text(prompt, where)
    columns = {k: v for k, v in item.items() if k != key}
    clash = [k for k in columns if k in RESERVED_COLUMNS]
    if clash:
        raise ConfigError(f"{where}: field '{clash[0]}' is reserved (the reward's positional argument); rename it")
    return PromptRow(prompt, columns, number)


def _check_text(prompt: str, where: str) -> None:
    """An empty JSON prompt (``""``, ``{"prompt": "  "}``) is a data bug (an empty column), refused as an
    empty conversation is, not trained on as a lone BOS. A blank line, in a text file or between JSON
    lines, holds no row at all and is skipped by load_prompts (and counted)."""
    if not prompt.strip():
        raise ConfigError(f"{where}: empty prompt; give it text, or remove the row")


def _check_messages(messages: list, where: str) -> None:
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise ConfigError(f"{where}: message {i} must be an object with string 'role' and 'content'")


def encode_prompts(tokenizer, rows: list, max_prompt_length: int, truncate: bool, what: str = "--prompts") -> list:
    """Token ids of each prompt (once per run).

    Text goes through the tokenizer with its special tokens (BOS where the tokenizer adds one, and not a
    second one before text that starts with it); a conversation through the tokenizer's chat template with
    the generation prompt (the template writes its own BOS). A prompt longer than ``max_prompt_length`` is an error naming its file and line, or, with
    ``truncate``, keeps its last tokens (and its BOS). A prompt of no tokens (text the tokenizer drops,
    without a BOS) is an error naming its file and line: generation needs a token to start from.
    """
    bos = tokenizer.bos_token_id
    out = []
    for row in rows:
        where = f"{what} {row.file}:{row.line}" if row.file else f"{what} line {row.line}"
        if row.is_conversation:
            if not getattr(tokenizer, "chat_template", None):
                raise ConfigError(f"{where}: a conversation, but the tokenizer has no chat template "
                                  f"(set 'chat_template' in its tokenizer_config.json, or give plain-text prompts)")
            try:
                text = tokenizer.apply_chat_template(row.prompt, add_generation_prompt=True, tokenize=False)
            except Exception as e:  # jinja2's TemplateError (the template's raise_exception), or a bug in it
                msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
                raise ConfigError(f"{where}: the tokenizer's chat template refused the conversation: "
                                  f"{type(e).__name__}: {msg}") from None
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            ids = tokenizer(row.prompt)["input_ids"]
            # text rendered by a chat template (apply_chat_template(tokenize=False)) starts with the BOS
            # already; the tokenizer would put a second one before it, which the model never saw in training
            if bos is not None and ids[:2] == [bos, bos]:
                plain = tokenizer(row.prompt, add_special_tokens=False)["input_ids"]
                if plain[:1] == [bos] and ids[1:1 + len(plain)] == plain:
                    ids = ids[1:]
        if len(ids) > max_prompt_length:
            if not truncate:
                e = ConfigError(f"{where}: {len(ids)} tokens, more than --max-prompt-length "
                                f"{max_prompt_length}; raise it, or pass --truncate-prompts to keep the last tokens")
                # where --config FILE set it, the CLI says this line in the file's words (cli.in_file_words)
                e.field = "max_prompt_length"
                at = f"{row.file}:{row.line}" if row.file else f"line {row.line}"
                e.field_line = (f"--max-prompt-length {max_prompt_length}: the prompt at {at} is {len(ids)} tokens; "
                                "raise --max-prompt-length, or pass --truncate-prompts to keep the last tokens")
                raise e
            keep_bos = ids[0] == tokenizer.bos_token_id and tokenizer.bos_token_id is not None
            ids = ids[:1] + ids[len(ids) - max_prompt_length + 1:] if keep_bos else ids[-max_prompt_length:]
        if not ids:
            raise ConfigError(f"{where}: empty prompt: the tokenizer gives it no tokens (and adds no BOS); give it "
                              f"text the tokenizer reads")
        out.append(ids)
    return out


class PromptSampler:
    """This process's shard (indices rank, rank + W, ...) of the prompts, in a fresh order every pass.

    Orders come from the global torch RNG (seeded per process), so the sampler state plus the RNG
    state in a checkpoint replay the same prompts after a resume.
    """

    def __init__(self, num_prompts: int, rank: int = 0, world_size: int = 1):
        self.shard = torch.arange(rank, num_prompts, world_size)
        if len(self.shard) == 0:
            raise ConfigError(f"--prompts: {num_prompts} prompts cannot be shared among {world_size} processes")
        self.order = self.shard[torch.randperm(len(self.shard))]
        self.pos = 0

    def next(self, n: int) -> list:
        """n prompt indices (a pass that runs out continues into a freshly shuffled one)."""
        out = []
        while len(out) < n:
            if self.pos == len(self.order):
                self.order, self.pos = self.shard[torch.randperm(len(self.shard))], 0
            take = min(n - len(out), len(self.order) - self.pos)
            out.extend(self.order[self.pos:self.pos + take].tolist())
            self.pos += take
        return out

    def state_dict(self) -> dict:
        return {"order": self.order.clone(), "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.order, self.pos = state["order"].clone(), int(state["pos"])
