"""The four roles: policy, reference, value model (and, in rewards.py, the reward).

policy     any local ``AutoModelForCausalLM``: a directory with weights, or a config for a fresh model
reference  a frozen copy of the initial policy; with LoRA, the policy itself with its adapter off
value      a separate backbone with a scalar head, from the policy's or the reward model's backbone

Every model has dropout switched off (docs/ppo_notes.md: no dropout): with dropout the rollout and the
update would score the same tokens differently and the ratio would not start at 1.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import inspect
import json
import os
import pickle
import re
import warnings
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch import nn

from .config import ConfigError
from ..warnings_guard import catch_warnings

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
# files that look like weights: a directory holding some of these but none of WEIGHT_FILES (a sharded
# checkpoint without its index, a renamed file) must not fall back to a fresh model
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def quiet_transformers() -> None:
    """Command-line runs: no per-load progress bars or advisory warnings from transformers.

    Quieting is safe because every load goes through :func:`load_pretrained`, which turns transformers'
    load report (missing, unexpected, mismatched keys) into an error instead of a warning.
    """
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


@contextlib.contextmanager
def transformers_quieted():
    """quiet_transformers() for the Python API's runs (train_rlhf, resume), as the command line is:
    a notebook gets no "Loading weights" and "Writing model shards" bars per run, and its own
    transformers verbosity and progress-bar setting back when the run returns or raises."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    quiet_transformers()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()


def _policy_source(spec: str) -> tuple:
    """('pretrained', dir, dir) | ('config', config dict, None); ConfigError for anything else.

    A fresh (randomly initialized) policy comes only from a config.json named explicitly: a directory
    is a checkpoint, and a checkpoint without loadable weights is an error, never a random model.
    """
    path = Path(spec)
    if path.is_file() and path.suffix == ".json":
        return "config", _read_json(path), None
    if path.is_dir():
        check_weights_present(path, "--policy")
        return "pretrained", str(path), str(path)
    if re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", spec) and not spec.endswith(".json"):  # gpt2, org/name
        raise ConfigError(f"--policy {spec!r}: no such directory; a Hugging Face Hub id is never downloaded: give a local "
                          f"directory (one saved with save_pretrained, or a snapshot of the Hub's model)")
    raise ConfigError(f"--policy {spec!r}: no such directory or .json config file")


def check_weights_present(path: Path, what: str) -> None:
    """A Hugging Face directory must hold a weight file transformers reads as a whole (or its shard index)."""
    if any((path / f).exists() for f in WEIGHT_FILES):
        return
    if (path / "adapter_config.json").is_file():  # a LoRA run's policy/: the adapter's weights only
        todo = ("pass its base model as --policy, or train with --merge-lora to release a full model" if what == "--policy"
                else "give a full model (a LoRA run with --merge-lora releases one)")
        raise ConfigError(f"{what} {str(path)!r}: a LoRA adapter (adapter_config.json), not a full model; {todo}")
    stray = sorted(p.name for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    if stray:
        raise ConfigError(f"{what} {str(path)!r}: holds {', '.join(stray[:3])}{' ...' if len(stray) > 3 else ''} but no "
                          f"{' or '.join(WEIGHT_FILES[:2])}; a sharded checkpoint needs its index file")
    hint = f"; to start from random weights pass {path / 'config.json'}" if (path / "config.json").exists() and what == "--policy" else ""
    raise ConfigError(f"{what} {str(path)!r}: no weights ({WEIGHT_FILES[0]} or {WEIGHT_FILES[1]}){hint}")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"--policy: cannot read {path}: {e}") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise ConfigError(f"--policy: {path} is not a Hugging Face config (no 'model_type')")
    return data


def _names(keys) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")


def load_pretrained(auto_class, path: str, what: str, dtype: torch.dtype, **kwargs) -> nn.Module:
    """``auto_class.from_pretrained(path)`` in ``dtype`` that never invents a weight.

    Missing keys (initialized at random by transformers), unexpected keys (ignored by it) and shape
    mismatches are a ConfigError naming them; so is a corrupt or truncated weight file. ``dtype``
    float32 gives trainable models fp32 master weights and optimizer state whatever the stored dtype
    (a bf16 checkpoint updated in bf16 rounds small steps away).
    """
    check_weights_present(Path(path), what)
    try:
        model, info = auto_class.from_pretrained(path, dtype=dtype, output_loading_info=True,
                                                 trust_remote_code=False, **kwargs)
    except Exception as e:  # corrupt safetensors, a truncated file, a bad config: one line naming the directory
        if _needs_custom_code(e):
            raise _refuse_custom_code(path, what, "use a model of an architecture transformers ships") from None
        if isinstance(e, pickle.UnpicklingError):  # torch's own message advises weights_only=False: never passed on
            raise _refuse_pickle(path, what, e) from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ConfigError(f"{what} {path!r}: cannot load {auto_class.__name__}: {type(e).__name__}: {first}") from None
    problems = [f"{label} {_names(info.get(key) or ())}" for key, label in
                (("missing_keys", "missing"), ("unexpected_keys", "unexpected"), ("mismatched_keys", "mismatched"))
                if info.get(key)]
    problems += [str(m).splitlines()[0] for m in info.get("error_msgs") or ()]
    if problems:
        raise ConfigError(f"{what} {path!r}: the weights do not fit {type(model).__name__} ({'; '.join(problems)}); "
                          f"refusing to start from random or dropped weights")
    check_finite(model, what, path)
    return model


def _refuse_pickle(path: str, what: str, e: Exception) -> ConfigError:
    """The one line for a pytorch_model.bin that torch's weights_only unpickler refused, in PPO's words
    (checkpoint.py): the GLOBAL it references (posix.system: code that would run as the file loads), or
    the file is damaged; torch's advice to retry with weights_only=False would run that code."""
    found = re.search(r"GLOBAL ([\w.]+)", f"{e} {e.__cause__ or ''} {e.__context__ or ''}")
    if found:
        return ConfigError(f"{what} {path!r}: refused to load its weights: the file references {found.group(1)}, which "
                           "would run code when unpickled; model weights hold only tensors (do not open it with "
                           "weights_only=False unless you trust its source; a model.safetensors copy holds no code)")
    last = [line.strip() for line in str(e).splitlines() if line.strip() and "weights_only" not in line]
    why = (last[-1] if last else type(e).__name__)[:120]
    return ConfigError(f"{what} {path!r}: corrupted weights (unpickling failed: {why}); use another copy of the model")


def _needs_custom_code(e: Exception) -> bool:
    """Whether ``e`` is transformers refusing a folder whose auto_map names its own Python code: under
    trust_remote_code=False it raises this ValueError instead of asking on stdin."""
    return isinstance(e, ValueError) and "trust_remote_code" in str(e)


def _refuse_custom_code(path: str, what: str, hint: str) -> ConfigError:
    """The one line for a model or tokenizer folder that transformers could load only by importing its .py
    files. A folder is data (a run's config.yaml may name one it ships), so its code is never run: with
    trust_remote_code left unset, transformers would ask on stdin, and a "y" piped in would import it."""
    found = []
    for name in ("config.json", "tokenizer_config.json"):
        file = Path(path) / name
        try:
            if file.is_file() and "auto_map" in json.loads(file.read_text(encoding="utf-8")):
                found.append(name)
        except (OSError, ValueError, TypeError):
            continue
    where = f" (auto_map in {' and '.join(found)})" if found else ""
    return ConfigError(f"{what} {path!r}: holds custom code{where}, which Proxima does not run; {hint}")


def check_finite(model: nn.Module, what: str, path: str) -> None:
    """A NaN or infinity stored in a checkpoint is refused at load, naming the tensor: found after the
    first update, it would be blamed on the update (a diverged run) instead of the file."""
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p).all()):
            bad = int((~torch.isfinite(p)).sum())
            raise ConfigError(f"{what} {path!r}: weight {name} holds {bad} non-finite value(s) (NaN or inf); the "
                              f"checkpoint is damaged, use another copy")


def max_positions(config) -> Optional[int]:
    """The longest sequence a model's position embeddings (or RoPE's trained range) cover; None if unknown."""
    for name in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def load_policy(spec: str, seed: int, dtype: torch.dtype = torch.float32, fits=None) -> tuple:
    """(model, tokenizer_dir or None). A fresh model (from a config.json) is initialized under ``seed``.

    The tokenizer directory is the policy's own, or None when it holds no tokenizer files (then
    --tokenizer must name one); the model must be causal (:func:`check_causal`). ``fits(n_params)``,
    when given, is called with the model's parameter count before any weight is allocated (counted on
    the meta device) and raises ConfigError when the run cannot hold it (:func:`check_model_fits`)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    kind, source, folder = _policy_source(spec)
    if fits is not None:
        n_params = parameter_count(source if kind == "pretrained" else dict(source))
        if n_params is not None:
            fits(n_params)
    if kind == "pretrained":
        check_generation_config(Path(source), "--policy")
        model = load_pretrained(AutoModelForCausalLM, source, "--policy", dtype)
        folder = folder if has_tokenizer_files(Path(folder)) else None
        try:  # transformers has just read it
            stored = stored_dtype(json.loads((Path(source) / "config.json").read_text(encoding="utf-8")))
        except (OSError, ValueError, AttributeError):
            stored = None
    else:
        # the build's warnings ("Initializing zero-element tensors" for an empty dimension) are shown only for
        # a model that passes its checks: a refused one is the error's one line
        with catch_warnings(record=True) as caught:
            try:
                config_dict = dict(source)
                config = AutoConfig.for_model(config_dict.pop("model_type"), **config_dict)
                _check_sizes(config, config_dict)
                torch.manual_seed(seed)
                model = AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=False)
                _check_forward(model)
            except _UnusableModel as e:
                raise ConfigError(f"--policy {spec!r}: {e}") from None
            except Exception as e:  # huggingface_hub's StrictDataclassFieldValidationError (a mistyped field) is a bare Exception
                lines = [line.strip() for line in str(e).splitlines() if line.strip()] or [type(e).__name__]
                # that error names the field on its first line and what is wrong with it on the second
                first = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
                raise ConfigError(f"--policy {spec!r}: cannot build a causal LM: {first}") from None
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        stored = stored_dtype(source)
    # from_pretrained rewrites config.dtype to the training dtype: the release (--release-dtype auto) needs the stored one
    setattr(model, SOURCE_DTYPE, stored)
    disable_dropout(model)
    check_causal(model, spec)
    return use_fused_gelu(model), folder


SOURCE_DTYPE = "_proxima_source_dtype"  # model attribute: the dtype --policy's config.json says it is stored in
_STORED_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def stored_dtype(config: dict) -> Optional[torch.dtype]:
    """The dtype a Hugging Face config.json records (``dtype``, or 4.x's ``torch_dtype``); None when it records none
    of float32, bfloat16 and float16."""
    name = (config.get("dtype") or config.get("torch_dtype")) if isinstance(config, dict) else None
    return _STORED_DTYPES.get(name.removeprefix("torch.")) if isinstance(name, str) else None


def parameter_count(source) -> Optional[int]:
    """Parameters of the causal LM that ``source`` (a model folder, or a config.json's dict) describes,
    counted on the meta device: nothing is allocated, so a config.json asking for 40 GB costs nothing.
    None when the config cannot be built this way: the real load then reports what is wrong with it."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        with catch_warnings(record=True):
            if isinstance(source, dict):
                fields = dict(source)
                config = AutoConfig.for_model(fields.pop("model_type"), **fields)
            else:
                config = AutoConfig.from_pretrained(source, trust_remote_code=False)
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
        return sum(p.numel() for p in model.parameters())  # tied weights counted once, as they are stored
    except Exception:
        return None


def check_model_fits(spec: str, n_params: int, dtype: torch.dtype, copies: int, what: str, device: torch.device,
                     processes: int = 1, lora: bool = False) -> None:
    """ConfigError when ``copies`` copies of a model of ``n_params`` parameters in ``dtype`` (``what``
    names them) surely do not fit in the free memory of ``device``, or one copy (loaded on the host first)
    not in the host's. ``processes``: ranks on one host that each hold their own copies (CPU); only a
    lower bound is counted (no activations, no KV cache), so only runs that cannot fit are refused."""
    from .. import sizing
    from ..diskspace import human_bytes

    one = n_params * torch.empty((), dtype=dtype).element_size()
    host = sizing.free_memory(torch.device("cpu"))
    need, free = one * copies * processes, host
    if device.type != "cpu":
        free = sizing.free_memory(device)
        if host is not None and one > host:
            need, free, copies, what, device = one, host, 1, "loaded on the host first", torch.device("cpu")
    if free is None or need <= free:
        return
    dtype_name = str(dtype).replace("torch.", "")
    ranks = f" in each of {processes} processes" if processes > 1 else ""
    raise ConfigError(f"--policy {spec!r}: {n_params:,} parameters, {human_bytes(one)} in {dtype_name}; the run holds "
                      f"{copies} {'copy' if copies == 1 else 'copies'}{ranks} ({what}), ~{human_bytes(need)} on {device}, {human_bytes(free)} free; "
                      f"use a smaller model{'' if lora else ', --lora'} or a device with more memory")


class _UnusableModel(Exception):
    """A config.json whose model cannot train (the message names the field, or the failed forward)."""


def _check_sizes(config, fields: dict) -> None:
    """_UnusableModel for a config (built from the config.json ``fields``) with no tokens or no layers.

    transformers builds some such nonsense without complaint: a vocab_size 0 (an empty embedding; the
    causality probe would divide by it), a negative layer count (no layers, until the first KV cache
    fails on its length, mid-run). The sizes are read through the config's standard names (vocab_size,
    num_hidden_layers), which every architecture maps to its own field (GPT-2: n_layer); the message
    names the field as the file spells it."""
    for standard, what in (("vocab_size", "tokens"), ("num_hidden_layers", "layers")):
        value = getattr(config, standard, None)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            mapped = getattr(config, "attribute_map", {}).get(standard, standard)
            field = next((name for name in (mapped, standard) if name in fields), mapped)
            raise _UnusableModel(f'"{field}" is {value}; a causal LM needs 1 or more {what}')


def _check_forward(model: nn.Module) -> None:
    """_UnusableModel unless a model built from a config.json has tokens and runs a forward the way
    generation does (with a KV cache): whatever else its config got wrong fails here, at load, not at the
    first rollout."""
    vocab = model.get_input_embeddings().num_embeddings
    if vocab < 1:  # a vocabulary size under another name than vocab_size (_check_sizes)
        raise _UnusableModel(f"its input embedding holds {vocab} tokens; a causal LM needs 1 or more")
    ids = torch.arange(1, 3, device=next(model.parameters()).device).remainder(vocab)[None]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise _UnusableModel(f"a forward pass on 2 tokens with a KV cache failed: {type(e).__name__}: {first}") from None
    finally:
        model.train(was_training)


def check_generation_config(folder: Path, what: str) -> None:
    """A generation_config.json that does not load is a ConfigError naming it: transformers would replace it
    with defaults built from config.json, dropping an instruct model's end-of-turn ids from the stop ids and
    from the released policy/."""
    from transformers import GenerationConfig

    if not (folder / "generation_config.json").is_file():
        return
    try:
        GenerationConfig.from_pretrained(folder)
    except Exception as e:  # OSError for a truncated file, TypeError or ValueError for content
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ConfigError(f"{what} {str(folder)!r}: cannot load generation_config.json ({type(e).__name__}: {first}); "
                          f"restore it from the model's original files") from None


def weights_fingerprint(model: nn.Module) -> str:
    """A cheap identity of ``model``'s weights, for a resume to check the frozen ones it loads again: each
    parameter's name, shape, dtype and the sum of its bytes as 32-bit integers (wrapping), hashed.

    Integer sums are exact in any order, so the same weights give the same value on any device and thread
    count. A native int32 sum reads ~3 GB/s on one core (seconds for 7B float32 weights), 15-20x the
    speed of a float64 sum or of hashing every byte (loop.parameter_checksum)."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        raw = p.detach().contiguous().view(-1).view(torch.uint8)
        try:
            total = int(raw.view(torch.int32).sum(dtype=torch.int32))
        except RuntimeError:  # a byte count (or storage offset) not a multiple of 4
            total = int(raw.sum(dtype=torch.int64))
        h.update(f"{name} {tuple(p.shape)} {p.dtype} {total};".encode())
    return h.hexdigest()[:16]


def vocabulary_sha256(tokenizer) -> str:
    """sha256 of a tokenizer's token -> id map (added tokens included)."""
    vocab = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()


def chat_template_sha256(tokenizer) -> str:
    """sha256 of a tokenizer's chat template (None, one template, or named ones): conversation prompts
    are rendered through it, so another template trains on other texts with the same vocabulary."""
    template = getattr(tokenizer, "chat_template", None)
    return hashlib.sha256(json.dumps(template, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


def check_causal(model: nn.Module, spec: str) -> None:
    """ConfigError unless the logits at a position ignore every later token, probed with two forwards of 4
    tokens that differ in the last one only.

    PPO scores each response token by the logits at the position before it, computed in one forward over
    prompt + response: a model that attends to later tokens (BertLMHeadModel with is_decoder false, which
    AutoModelForCausalLM builds from a BERT checkpoint) would see the token it is asked to predict. The
    config alone cannot tell (transformers 4.x gives every config is_decoder false, GPT-2's included);
    a causal model's earlier logits are the same to float rounding, a bidirectional one's differ.
    """
    vocab = model.get_input_embeddings().num_embeddings
    device = next(model.parameters()).device
    ids = torch.arange(1, 5, device=device).remainder(vocab)[None]
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % vocab
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            a, b = (model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False).logits[0, :-1].float()
                    for x in (ids, changed))
    except Exception as e:  # a model that cannot run a plain forward would fail at the first rollout
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ConfigError(f"--policy {spec!r}: a forward pass on 4 tokens failed: {type(e).__name__}: "
                          f"{first}") from None
    finally:
        model.train(was_training)
    leak = float((a - b).abs().max())
    if leak > 1e-4 * float(a.abs().max()) + 1e-6:
        hint = " (is_decoder is false in its config)" if getattr(model.config, "is_decoder", None) is False else ""
        raise ConfigError(f"--policy {spec!r}: {type(model).__name__} is not causal{hint}: its logits at earlier "
                          f"positions change when only a later token does (by {leak:.2g}); PPO needs a causal LM, "
                          f"whose logits at each position see only the tokens before it")


def load_tokenizer(path: Optional[str], what: str = "--tokenizer", eos_ids: Sequence[int] = ()):
    """A tokenizer that left-pads, with a pad token (the EOS token when the tokenizer has none)."""
    return training_tokenizer(read_tokenizer(path, what, eos_ids), eos_ids)


def read_tokenizer(path: Optional[str], what: str = "--tokenizer", eos_ids: Sequence[int] = ()):
    """The tokenizer of ``path`` as it is stored (the one saved with the trained policy). It must have an EOS,
    or ``eos_ids`` (the policy's generation_config eos ids, :func:`generation_eos_ids`) must name one: both
    end a response, as for Hugging Face's generate, which stops on the generation_config's ids alone.

    ``path`` None: --tokenizer was not given and the policy has no tokenizer of its own (a config.json, or
    a directory without tokenizer files: :func:`load_policy`)."""
    if not path:
        raise ConfigError(f"--policy: no tokenizer of its own (a directory without {TOKENIZER_FILES_SHOWN}, or a "
                          f"config.json) and no --tokenizer; give --tokenizer DIR")
    if not os.path.isdir(path):
        raise ConfigError(f"{what} {path!r}: need a local tokenizer directory (pass --tokenizer DIR)")
    tok = tokenizer_from_dir(path, what, "give --tokenizer DIR (the policy's tokenizer)")
    if tok.eos_token_id is None:
        if not eos_ids:
            raise ConfigError(f"{what} {path!r}: the tokenizer has no EOS token and the policy's generation_config.json "
                              f"names no eos_token_id, so responses could never end; set eos_token in the tokenizer's "
                              f"tokenizer_config.json or eos_token_id in the policy's generation_config.json")
        outside = [i for i in eos_ids if tok.convert_ids_to_tokens(i) is None]
        if outside:  # training_tokenizer takes the first as the EOS (and pad) token: it must be one of the tokenizer's
            raise ConfigError(f"{what} {path!r}: the tokenizer has no EOS token, and the policy's generation_config.json "
                              f"eos_token_id {outside[0]} is not a token of it ({len(tok)} tokens); set eos_token in "
                              f"the tokenizer's tokenizer_config.json")
    # read now, not when policy/ is written: the folder may have changed by then (a resume days later)
    setattr(tok, TOKENIZER_SOURCE, TokenizerFiles(Path(path), tokenizer_state(tok)))
    return tok


TOKENIZER_SOURCE = "_proxima_tokenizer_files"  # tokenizer attribute: the files it was read from (TokenizerFiles)
#: the files a tokenizer is read from besides those _is_tokenizer_file names
_TOKENIZER_SIDE_FILES = ("special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json")
_TEMPLATES_DIR = "additional_chat_templates"


class TokenizerFiles(dict):
    """{relative path: bytes} of the tokenizer files of a folder, and ``state``, what the tokenizer read from them
    held (tokenizer_state): policy/ gets these bytes while the tokenizer still holds that. transformers 5's
    save_pretrained rewrites them (another tokenizer_class, the chat template moved to its own file, new keys)
    into files a 4.x stack may not load."""

    def __init__(self, folder: Path, state: str):
        super().__init__()
        self.state = state
        names = [p for p in folder.iterdir() if p.is_file() and (_is_tokenizer_file(p.name) or p.name in _TOKENIZER_SIDE_FILES)]
        if (folder / _TEMPLATES_DIR).is_dir():
            names += [p for p in (folder / _TEMPLATES_DIR).iterdir() if p.is_file()]
        for p in names:
            self[p.relative_to(folder).as_posix()] = p.read_bytes()

    def __deepcopy__(self, memo):  # the trainer's copy of the tokenizer shares them: never changed, possibly large
        return self


def tokenizer_state(tok) -> str:
    """A hash of what a saved tokenizer holds: vocabulary, special tokens, chat template, padding side."""
    h = hashlib.sha256(f"{vocabulary_sha256(tok)} {chat_template_sha256(tok)} {tok.padding_side}".encode())
    h.update(json.dumps(tok.special_tokens_map, sort_keys=True, default=str).encode())
    return h.hexdigest()


#: the files a tokenizer is saved as (tokenizer.json, tokenizer_config.json, a slow tokenizer's vocabulary
#: and merges, a sentencepiece or tiktoken model)
TOKENIZER_FILES_SHOWN = "tokenizer.json, tokenizer_config.json, vocab..."
_TOKENIZER_PREFIXES = ("tokenizer", "vocab", "merges", "spiece", "sentencepiece", "spm", "bpe")
_TOKENIZER_SUFFIXES = (".model", ".spm", ".tiktoken", ".codes")


def has_tokenizer_files(folder: Path) -> bool:
    """Whether ``folder`` holds some file a tokenizer is saved as. Without one, transformers 5.x builds an
    empty GPT2Tokenizer (one token, its <|endoftext|>) instead of failing."""
    try:
        return any(p.is_file() and _is_tokenizer_file(p.name) for p in folder.iterdir())
    except OSError:
        return False


def _is_tokenizer_file(name: str) -> bool:
    name = name.lower()
    return name.startswith(_TOKENIZER_PREFIXES) or name.endswith(_TOKENIZER_SUFFIXES) or "vocab" in name


def tokenizer_from_dir(path: str, what: str, hint: str):
    """``AutoTokenizer.from_pretrained(path)``, or a ConfigError naming ``what`` and the file at fault: no
    tokenizer files (``hint`` says what to do), a file the tokenizers library cannot parse (it raises a plain
    Exception), or a tokenizer with an empty vocabulary."""
    from transformers import AutoTokenizer

    if not has_tokenizer_files(Path(path)):
        raise ConfigError(f"{what} {path!r}: no tokenizer files ({TOKENIZER_FILES_SHOWN}); {hint}")
    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except Exception as e:  # the Rust tokenizers library raises a bare Exception for a malformed tokenizer.json
        if _needs_custom_code(e):
            raise _refuse_custom_code(path, what, "use a tokenizer of a class transformers ships") from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{what} {path!r}: cannot load the tokenizer ({_bad_tokenizer_file(Path(path))}): "
                          f"{first}") from None
    try:
        empty = tok.vocab_size == 0
    except Exception:  # a tokenizer class without the property: not the empty one transformers builds
        empty = False
    if empty:
        raise ConfigError(f"{what} {path!r}: the tokenizer has an empty vocabulary; {hint}")
    return tok


def _bad_tokenizer_file(folder: Path) -> str:
    """The tokenizer file that does not parse, for an error message: tokenizer.json or tokenizer_config.json
    when one of them is the culprit, else the tokenizer files present."""
    from tokenizers import Tokenizer

    if (folder / "tokenizer.json").is_file():
        try:
            Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception:
            return "tokenizer.json"
    if (folder / "tokenizer_config.json").is_file():
        try:
            json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return "tokenizer_config.json"
    names = sorted(p.name for p in folder.iterdir() if p.is_file() and _is_tokenizer_file(p.name))
    return ", ".join(names) or "its tokenizer files"


def training_tokenizer(tok, eos_ids: Sequence[int] = ()):
    """A copy of ``tok`` that left-pads, with a pad token (its EOS when it has none). A copy: the released
    tokenizer keeps its own special tokens and padding side, since a pad token equal to EOS would make a
    later fine-tuning's collator mask every EOS label, and the model would never learn to stop.

    A tokenizer without an EOS takes the first of ``eos_ids`` (the policy's generation_config eos ids) as
    its EOS, as generate pads with it: what reads the training tokenizer's EOS (the stop ids, the
    missing-EOS penalty, the pad token) then sees the id the policy ends on."""
    tok = copy.deepcopy(tok)
    if tok.eos_token_id is None and eos_ids:
        tok.eos_token = tok.convert_ids_to_tokens(int(eos_ids[0]))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def end_ids(model: nn.Module) -> tuple:
    """(config's eos ids, generation_config's eos ids), each a set: an int or a list in either file.

    Instruct models list their end-of-turn tokens there (Gemma's <end_of_turn>, Llama 3's <|eot_id|>,
    Qwen's <|im_end|>), often beside a tokenizer whose EOS is another token."""
    def ids(value) -> set:
        values = value if isinstance(value, (list, tuple)) else [value]
        return {int(v) for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0}

    generation = getattr(model, "generation_config", None)
    return ids(getattr(model.config, "eos_token_id", None)), ids(getattr(generation, "eos_token_id", None))


def generation_eos_ids(model: nn.Module) -> list:
    """The eos ids of the policy's generation_config in their order (the first is what generate pads with
    when there is no pad token); transformers fills a missing generation_config.json from config.json."""
    value = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    values = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0 and v not in out:
            out.append(v)
    return out


ORIGINAL_CONFIG = "_proxima_original_config"  # model attribute: config values changed for training only


def _is_drop_rate(name: str, value) -> bool:
    """A float attribute that is a dropout-like probability: attention_dropout, resid_pdrop, layerdrop,
    drop_path_rate. Only plain floats: the same names also hold nn.Dropout modules or flags."""
    return type(value) is float and value != 0.0 and "drop" in name.lower()


def disable_dropout(model: nn.Module) -> None:
    """Every source of training-mode randomness set to zero: nn.Dropout modules, and the float rates
    that Llama, Qwen, Mistral or Gemma attention (``self.attention_dropout``, passed to the attention
    kernel in train mode) and OPT's layerdrop read at each forward, on the modules and on the config
    (some models read it there). The config's original values are kept on the model for the saved
    policy (:func:`original_config`): the release keeps the user's settings for further training."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        for name, value in list(vars(module).items()):
            if _is_drop_rate(name, value):
                setattr(module, name, 0.0)
    config = getattr(model, "config", None)
    if config is None:
        return
    original = dict(getattr(model, ORIGINAL_CONFIG, {}))
    for name, value in list(vars(config).items()):
        if _is_drop_rate(name, value):
            original.setdefault(name, value)
            setattr(config, name, 0.0)
    setattr(model, ORIGINAL_CONFIG, original)


@contextlib.contextmanager
def original_config(model: nn.Module, config=None):
    """While the block runs, ``config`` (default: the model's) holds the values :func:`disable_dropout`
    changed, as the user gave them; for saving the trained policy."""
    config = model.config if config is None else config
    original = getattr(model, ORIGINAL_CONFIG, {})
    training = {name: getattr(config, name) for name in original}
    for name, value in original.items():
        setattr(config, name, value)
    try:
        yield config
    finally:
        for name, value in training.items():
            setattr(config, name, value)


class TanhGELU(nn.Module):
    """GPT-2's "gelu_new", 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as PyTorch's single fused kernel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(x, approximate="tanh")


def use_fused_gelu(model: nn.Module) -> nn.Module:
    """Swap transformers' Python NewGELUActivation (seven elementwise ops, each saved for backward) for the
    same function in one kernel: equal to float rounding, and ~15% off a small GPT-2's forward + backward."""
    from transformers.activations import NewGELUActivation

    for parent in list(model.modules()):
        for name, child in parent.named_children():
            if type(child) is NewGELUActivation:
                setattr(parent, name, TanhGELU())
    return model


def make_reference(policy: nn.Module, lora: bool) -> Optional[nn.Module]:
    """A copy of the initial policy that is never trained, or None under LoRA (the reference is then the
    adapter-off policy)."""
    if lora:
        return None
    # its parameters keep requires_grad: no optimizer holds them and it runs only under no_grad (the rollout).
    # torch's matmul picks its path by the weight's requires_grad even then (lm_head on the hidden states
    # that logits_to_keep slices), so a frozen copy scored the same weights 6e-8 off the policy: a KL of
    # -1e-7 at step 0 rather than 0
    ref = copy.deepcopy(policy)
    return ref.eval()


def apply_lora(model: nn.Module, cfg, task_type: str, value_backbone: bool = False):
    """``model`` with LoRA adapters on --lora-target-modules; ConfigError naming the flag (and, for the value
    model's backbone, that it gets its own adapter with the same targets) when a target is not there."""
    from peft import LoraConfig, get_peft_model

    targets = list(cfg.lora_target_modules) or None
    if targets == ["all-linear"]:  # peft's shorthand: every linear layer except the output layer
        targets = "all-linear"
    lora_cfg = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, bias="none", task_type=task_type,
                          target_modules=targets)
    try:
        with catch_warnings():
            # third-party internals with nothing for the user to do, so not shown (this call's only): peft's note
            # that it turned fan_in_fan_out on for GPT-2's Conv1D layers, which it handles itself, and the
            # deprecation of the transformers attribute that peft reads (with or without --gradient-checkpointing)
            warnings.filterwarnings("ignore", message="fan_in_fan_out is set to False", category=UserWarning)
            warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
            return get_peft_model(model, lora_cfg)
    except ValueError as e:
        why = str(e).splitlines()[0]
        if value_backbone:  # peft blames "the base model": here the value model's, which the policy's flag also adapts
            why = (f"not in the value model's backbone ({type(model).__name__}), which gets its own adapter with the "
                   f"same targets (peft: {why}); name modules both models have, or use a critic-free --advantage "
                   f"(grpo, rloo)")
        raise ConfigError(f"--lora-target-modules {cfg.lora_target_modules!r}: {why}") from None


def enable_checkpointing(model: nn.Module) -> None:
    """Gradient (activation) checkpointing, non-reentrant so that frozen inputs (LoRA) still get gradients."""
    kwargs = {"use_reentrant": False}
    try:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers 5.x renamed it
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    except ValueError as e:  # "JetMoeForCausalLM does not support activation checkpointing."
        raise ConfigError(f"--gradient-checkpointing: {str(e).splitlines()[0].rstrip('.')}; drop the flag") from None


class ValueModel(nn.Module):
    """A transformer backbone and a scalar head: (B, L) token ids -> (B, L) float32 values."""

    def __init__(self, backbone: nn.Module, head: nn.Linear):
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               use_cache=False).last_hidden_state
        # the head is in the backbone's dtype; under autocast the matmul runs in bf16 whatever the inputs.
        # A copy, not squeeze's view: FSDP2 warns at every forward of a module that returns a view (an
        # in-place op on it would skip its pre-backward hook)
        return self.head(hidden.to(self.head.weight.dtype)).squeeze(-1).to(torch.float32, copy=True)


def make_value_model(init: str, policy: nn.Module, reward_dir: Optional[str], seed: int,
                     dtype: torch.dtype = torch.float32) -> ValueModel:
    """Value model from a copy of the policy's backbone (fresh head) or from the reward model (its head too).

    The head is created in the backbone's parameter dtype (``dtype``, float32 by default) so that a model
    stored in bf16 never meets a float32 head.
    """
    if init == "reward":
        from transformers import AutoModelForSequenceClassification

        rm = load_pretrained(AutoModelForSequenceClassification, reward_dir, "--value-init reward", dtype, num_labels=1)
        if rm.config.vocab_size != policy.config.vocab_size:
            raise ConfigError(f"--value-init reward: the reward model's vocabulary ({rm.config.vocab_size}) differs "
                              f"from the policy's ({policy.config.vocab_size}); use --value-init policy")
        backbone = rm.base_model
        score = getattr(rm, "score", None)
        if not (isinstance(score, nn.Linear) and score.out_features == 1):
            raise ConfigError(f"--value-init reward: {reward_dir!r} has no one-output 'score' head to start the value "
                              f"head from; use --value-init policy")
    else:
        backbone, score = copy.deepcopy(policy.base_model), None
    hidden = backbone.config.hidden_size
    torch.manual_seed(seed + 1)
    head = nn.Linear(hidden, 1, dtype=next(backbone.parameters()).dtype)
    nn.init.normal_(head.weight, std=1.0 / (hidden + 1) ** 0.5)
    nn.init.zeros_(head.bias)
    if isinstance(score, nn.Linear) and score.out_features == 1:
        with torch.no_grad():
            head.weight.copy_(score.weight)
            if score.bias is not None:
                head.bias.copy_(score.bias)
    disable_dropout(backbone)
    return ValueModel(use_fused_gelu(backbone), head)


@functools.lru_cache(maxsize=None)
def accepts_logits_to_keep(model_class: type) -> bool:
    return "logits_to_keep" in inspect.signature(model_class.forward).parameters


def response_logits(model: nn.Module, input_ids, attention_mask, position_ids, num_response_tokens: int,
                    temperature: float) -> torch.Tensor:
    """Logits that predicted each response token, divided by the sampling temperature.

    input_ids (B, P + R) = prompt then response. Returns (B, R, V) float32: position P - 1 + t predicts
    response token t. Dividing by the temperature here is what makes these log-probs those of the
    distribution the tokens were sampled from (docs/ppo_notes.md: otherwise the KL goes negative).
    """
    r = num_response_tokens
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    kwargs = {"logits_to_keep": r + 1} if accepts_logits_to_keep(type(base)) else {}
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False, **kwargs).logits[:, -(r + 1):-1].float()
    if temperature == 1.0:
        return logits
    # without autograd (the rollout's scoring) divide the (B, R, V) logits, the step's largest tensor,
    # where they lie; with it, out of place: a model may keep its logits for the backward (a final
    # soft-cap's tanh does)
    return logits / temperature if torch.is_grad_enabled() else logits.div_(temperature)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token]: (B, R, V), (B, R) -> (B, R), without materializing the log-softmax."""
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def logprobs_and_entropy(logits: torch.Tensor, tokens: torch.Tensor, entropy_grad: bool = False) -> tuple:
    """(log-probs of ``tokens`` (B, R), entropy per position (B, R)) from one log-softmax of (B, R, V) logits.

    The entropy carries a gradient only when ``entropy_grad`` (an entropy bonus is on); otherwise it is
    a metric and costs no backward.
    """
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy = -(logp.exp() * logp).sum(-1)
    return picked, entropy
