"""RLHF configuration: one dataclass, one docstring per field, every field a ``proxima rlhf`` flag.

Defaults follow the RLHF section of docs/ppo_notes.md (gamma 1, lambda 0.95, vf_coef 0.1, clip 0.2,
a fixed missing-EOS penalty) and TRL's PPO where the notes are silent (temperature 0.7, 4 epochs,
kl_coef 0.05). :func:`validate` checks everything that can be checked without loading a model,
before anything is written to disk.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import shlex
from dataclasses import dataclass, field
from typing import Any, Optional

from ..config import (ALIASES as PPO_ALIASES, FLAG_SOURCES, ConfigError, UnknownFieldError, _short_repr, close_field, is_blank,
                      parse_int, plain, value_refused)

__all__ = ["RLHFConfig", "ConfigError", "FIELDS", "from_dict", "coerce", "validate", "check_kl_horizon", "reward_specs"]


def _f(default: Any, doc: str, kind: type = None, optional: bool = False, choices: tuple = (), repeat: bool = False,
       item: type = str) -> Any:
    """A field: ``repeat`` list fields take the flag once per item (a string is one item, never split on
    commas); ``item`` is the type of a list's items."""
    kind = kind or type(default)
    meta = {"help": doc, "kind": kind, "optional": optional, "choices": choices, "repeat": repeat, "item": item}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class RLHFConfig:
    """Everything an RLHF run needs (per process; torchrun multiplies the batch by the process count)."""

    # --- models and data ---
    policy: str = _f("", "Policy: a local Hugging Face causal-LM directory, or a config.json file for a fresh model (random weights).")
    tokenizer: Optional[str] = _f(None, "Tokenizer directory (default: the policy's directory).", str, optional=True)
    reward: list = _f([], "Reward: a local AutoModelForSequenceClassification directory, or module:function(prompts, responses, **columns) -> list[float] (module may be path/to/file.py); repeat the flag for several rewards.", list, repeat=True)
    reward_weights: list = _f([], "Weights of the rewards, comma separated, in --reward order (default: 1 each); the score is their weighted sum.", list, item=float)
    reward_import_path: list = _f([], "Directories, comma separated, searched first to import module:function rewards and the modules a file.py:function reward imports (after the file's own folder; default: the current directory, recorded absolute so that a resume works from anywhere).", list)
    value_init: str = _f("policy", "Initialize the value model from the policy's backbone or the reward model's (needs the same vocabulary).", choices=("policy", "reward"))
    prompts: str = _f("", "Prompts: JSON lines (.jsonl or .json: per line a string, {\"prompt\": text or [messages], ...} or {\"messages\": [{\"role\": ..., \"content\": ...}, ...], ...}, trailing assistant messages dropped; other fields go to reward functions), a .json file holding one array of such rows, or a text file with one prompt per line (blank lines skipped). .csv, .tsv, .parquet and .arrow files are refused.")
    max_prompt_length: int = _f(128, "Longest prompt in tokens (after the chat template); a longer one is an error naming its line, unless truncate_prompts.")
    truncate_prompts: bool = _f(False, "Cut prompts longer than max_prompt_length to their last tokens instead of refusing them.")
    # --- generation ---
    max_new_tokens: int = _f(32, "Response length limit in tokens; generation stops early once every response has emitted EOS.")
    temperature: float = _f(0.7, "Sampling temperature; the same value divides the logits before every log-prob.")
    top_k: int = _f(0, "Must stay 0 (off) in training: PPO's log-probs, ratio and KL are those of softmax(logits / "
                       "temperature), and responses sampled from the k most likely tokens only would be off-policy data.")
    top_p: float = _f(1.0, "Must stay 1.0 (off) in training, as --top-k.")
    missing_eos_penalty: float = _f(1.0, "Subtracted from the score of a response that never emits EOS (0: off).")
    # --- reward shaping and KL ---
    kl_coef: float = _f(0.05, "KL penalty coefficient beta (the initial value when adaptive_kl).")
    kl_estimator: str = _f("k1", "Per-token KL estimator: k1 (log p - log q) or k3 ((q/p - 1) - log(q/p), non-negative).", choices=("k1", "k3"))
    adaptive_kl: bool = _f(False, "Adapt kl_coef towards kl_target (Ziegler et al. 2019) instead of keeping it fixed.")
    kl_target: float = _f(6.0, "Adaptive KL: target KL per response (summed over its tokens).")
    kl_horizon: int = _f(10000, "Adaptive KL: horizon, counted in responses (all processes together): after each step beta is multiplied by 1 + clip(KL / kl_target - 1, -0.2, 0.2) x responses per update / horizon, so the horizon must be above 0.2 x the responses per update (batch_size x processes), or beta could reach 0 or turn negative.")
    whiten_rewards: bool = _f(False, "Whiten the per-token rewards under the response mask before GAE.")
    # --- advantages ---
    advantage: str = _f("gae", "Advantage estimator: gae (PPO with a value model), grpo (group-normalized) or rloo (leave-one-out); grpo and rloo use no critic.", choices=("gae", "grpo", "rloo"))
    samples_per_prompt: int = _f(1, "Responses sampled per prompt (grpo and rloo need at least 2).")
    gamma: float = _f(1.0, "Discount over response tokens.")
    gae_lambda: float = _f(0.95, "GAE lambda over response tokens.")
    # --- optimisation ---
    steps: int = _f(100, "PPO iterations (one rollout of batch_size responses and its update each).")
    batch_size: int = _f(16, "Responses per rollout per process (prompts x samples_per_prompt).")
    num_minibatches: int = _f(1, "Minibatches per epoch; must divide batch_size.")
    micro_batch_size: int = _f(0, "Responses per forward/backward inside a minibatch (gradient accumulation), and per forward of the policy, reference, value and reward models scoring a rollout; 0: the whole minibatch (the whole batch in the rollout).")
    update_epochs: int = _f(4, "Epochs over each rollout.")
    lr: float = _f(1e-5, "Policy learning rate (Adam, eps 1e-5).")
    value_lr: Optional[float] = _f(None, "Value model learning rate (default: lr).", float, optional=True)
    anneal_lr: bool = _f(False, "Anneal both learning rates linearly to 0 over the run.")
    clip_coef: float = _f(0.2, "PPO clip epsilon of the policy ratio.")
    vf_clip_coef: float = _f(0.2, "Clip range of the value prediction around its rollout value.")
    clip_vloss: bool = _f(True, "Clip the value loss.")
    vf_coef: float = _f(0.1, "Value loss coefficient (advantage gae only: grpo and rloo have no value model). It scales the value model's gradient before that model's own gradient-norm clip; its own Adam ignores a constant scale, so it changes the value update only through the clip (--max-grad-norm) and Adam's eps. It never touches the policy's gradient; --value-lr sets the value model's step size.")
    ent_coef: float = _f(0.0, "Entropy bonus coefficient.")
    max_grad_norm: float = _f(1.0, "Gradient-norm clip, applied to the policy and to the value model separately.")
    # --- efficiency switches ---
    bf16: bool = _f(False, "bf16 autocast for all model forwards (log-probs and losses stay float32).")
    dtype: str = _f("float32", "dtype of the weights (and so of Adam's state), whatever dtype the checkpoint is stored in: float32 master weights keep the small updates that bfloat16 rounds away; use --bf16 for fast compute.", choices=("float32", "bfloat16"))
    release_dtype: str = _f("auto", "dtype of the released policy/ (full models; a LoRA adapter keeps its own): auto is the dtype --policy's config.json says it is stored in (--dtype when it says none), so a bfloat16 checkpoint trained with float32 master weights is released in bfloat16; checkpoints keep --dtype.", choices=("auto", "float32", "bfloat16", "float16"))
    gradient_checkpointing: bool = _f(False, "Gradient checkpointing in the policy and value model.")
    lora: bool = _f(False, "Train LoRA adapters (peft); the reference is then the policy with its adapter switched off.")
    lora_r: int = _f(16, "LoRA rank.")
    lora_alpha: int = _f(32, "LoRA alpha.")
    lora_target_modules: list = _f([], "Modules to adapt, comma separated, or all-linear (every linear layer but the output layer); empty: peft's default for the architecture.", list)
    merge_lora: bool = _f(False, "With lora: save the final policy with its adapter merged, as a standalone Hugging Face model (default: the adapter only).")
    fsdp: bool = _f(False, "Shard the policy, value model and frozen reference with FSDP2 across the torchrun processes: each holds 1/N of their parameters, gradients and Adam state.")
    # --- run ---
    seed: int = _f(1, "Random seed (model init, prompt order, sampling).")
    device: str = _f("cpu", "Torch device: cpu, cuda, cuda:1, or auto.")
    threads: int = _f(1, "torch intra-op threads.")
    run_dir: Optional[str] = _f(None, "Run directory (default runs/rlhf__<seed>__<time>, with --demo runs/rlhf-demo__<seed>__<time>, with a -2, -3, ... suffix if taken).", str, optional=True)
    print_every: int = _f(10, "Print a progress line every N steps (0: quiet).")
    sample_every: int = _f(10, "Log sample generations as text every N steps (0: never).")
    samples_logged: int = _f(4, "Number of generations in each logged sample.")
    checkpoint_every: int = _f(50, "Write a checkpoint every N steps (0: none by step count; the end of the run, a stop by SIGINT or SIGTERM, and a reward function that fails in a run of one process still write one).")
    keep_checkpoints: int = _f(3, "Keep the last K checkpoints.")
    plot: bool = _f(True, "Write curve.png (reward and KL) into the run directory at the end.")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(RLHFConfig)}


def _refuse_unknown_keywords(init):
    """RLHFConfig(learning_rate=...) is PPOConfig's UnknownFieldError naming the field meant (TRL's names
    first: per_device_train_batch_size, fp16), where it was a bare TypeError."""
    @functools.wraps(init)  # inspect.signature still shows every field
    def __init__(self, *args, **kwargs):
        unknown = [name for name in kwargs if name not in FIELDS]
        if unknown:
            name = unknown[0]
            more = f" (and {len(unknown) - 1} more: {', '.join(unknown[1:])})" if len(unknown) > 1 else ""
            hint = unknown_key_hint(name)
            if not hint:
                close = close_field(name, FIELDS)  # PPO's: an alias (learning_rate -> lr) too
                hint = f" (did you mean '{close}'?)" if close else ""
            raise UnknownFieldError(f"RLHFConfig({name}={_short_repr(kwargs[name])}): not an RLHFConfig field{hint}{more}")
        init(self, *args, **kwargs)
    return __init__


RLHFConfig.__init__ = _refuse_unknown_keywords(RLHFConfig.__init__)

#: other names of fields, as for PPO's files and flags (config.ALIASES): a YAML learning_rate: is lr:, and
#: --learning-rate is --lr; a file giving both is refused
ALIASES = {alias: name for alias, name in PPO_ALIASES.items() if name in FIELDS}

_BATCH = ("the gradients of each minibatch (--batch-size / --num-minibatches responses) accumulate over its --micro-batch-size "
          "chunks, so TRL's per_device_train_batch_size P, gradient_accumulation_steps G and num_mini_batches M are "
          "--micro-batch-size = P, --num-minibatches = M and --batch-size = PxGxM")
_NO_EVAL = ("no evaluation pass here: every --sample-every steps the run logs generations (samples.jsonl, TensorBoard) "
            "and every step its metrics; drop it")
_NO_WARMUP = "no learning-rate warmup here: the rate starts at --lr (and decays linearly to 0 with --anneal-lr); drop it"
_REFERENCE = ("the reference is the policy's frozen copy, loaded again from --policy (with --lora, the policy with its adapter "
              "switched off); nothing else sets it: drop it")

#: TRL's names (PPOConfig, its OnPolicyConfig and transformers' TrainingArguments, as TRL's ppo.py script takes
#: them as flags) -> (the RLHFConfig field that holds the same setting, or None where none does; what to know or
#: do instead). Read by `proxima rlhf`'s "did you mean" (cli._foreign_hint), by a --config file's unknown-key line
#: (from_dict) and by resume (trl_hint); docs/rlhf.md's "TRL's flags" table lists them (a test compares the two).
TRL_NAMES = {
    "per_device_train_batch_size": ("micro_batch_size", "responses per forward/backward; TRL's rollout per process, "
                                    "per_device_train_batch_size x gradient_accumulation_steps x num_mini_batches, is --batch-size"),
    "gradient_accumulation_steps": (None, _BATCH),
    "local_rollout_forward_batch_size": ("micro_batch_size", "the rollout's forwards score --micro-batch-size responses each"),
    "num_mini_batches": ("num_minibatches", ""),
    "num_ppo_epochs": ("update_epochs", ""),
    "ppo_epochs": ("update_epochs", ""),
    "total_episodes": ("steps", "the run's responses are --steps x --batch-size x processes"),
    "num_train_epochs": ("steps", "one step is one rollout of --batch-size responses and its update"),
    "max_steps": ("steps", ""),
    "response_length": ("max_new_tokens", ""),
    "stop_token": (None, "responses stop at the tokenizer's EOS and the eos_token_id(s) of the policy's "
                         "generation_config.json; to stop at another token add its id there, and drop it"),
    "stop_token_id": (None, "responses stop at the tokenizer's EOS and the eos_token_id(s) of the policy's "
                            "generation_config.json; to stop at another token add its id there, and drop it"),
    "sft_model_path": ("policy", "a local model directory"),
    "model_name_or_path": ("policy", "a local model directory"),
    "reward_model_path": ("reward", "a reward-model directory, or module:function; repeat it for several"),
    "ref_model": (None, _REFERENCE),
    "ref_model_path": (None, _REFERENCE),
    "ref_adapter_name": (None, _REFERENCE),
    "dataset_name": (None, "prompts come from a local file: --prompts FILE (.jsonl, .json, or text with one prompt a line)"),
    "dataset_train_split": (None, "prompts come from a local file: --prompts FILE (.jsonl, .json, or text with one prompt a line)"),
    "output_dir": ("run_dir", ""),
    "save_steps": ("checkpoint_every", "a checkpoint every N steps (and at the end); --keep-checkpoints K keeps the last K"),
    "save_total_limit": ("keep_checkpoints", ""),
    "logging_steps": ("print_every", "a progress line every N steps; metrics.csv and TensorBoard get every step"),
    "report_to": (None, "TensorBoard events and metrics.csv are always written into the run directory, and nothing is "
                        "sent elsewhere; drop it"),
    "learning_rate": ("lr", ""),
    "lr_scheduler_type": ("anneal_lr", "linear decay to 0; without it the rate is constant"),
    "cliprange": ("clip_coef", ""),
    "cliprange_value": ("vf_clip_coef", ""),
    "lam": ("gae_lambda", ""),
    "init_kl_coef": ("kl_coef", ""),
    "adap_kl_ctrl": ("adaptive_kl", ""),
    "kl_penalty": ("kl_estimator", "k1 or k3"),
    "use_peft": ("lora", ""),
    "per_device_eval_batch_size": (None, _NO_EVAL),
    "eval_steps": (None, _NO_EVAL),
    "eval_strategy": (None, _NO_EVAL),
    "num_sample_generations": ("sample_every", "logs generations every N steps"),
    "fp16": (None, "fp16 mixed precision is not offered for RLHF: use --bf16 (bf16 autocast, float32 weights) or "
                   "--dtype bfloat16 (bf16 weights); drop it"),
    # named here so that they win over difflib, which sent --warmup-steps to --steps and
    # --resume-from-checkpoint to --keep-checkpoints
    "warmup_steps": (None, _NO_WARMUP),
    "warmup_ratio": (None, _NO_WARMUP),
    "weight_decay": (None, "Adam's weight decay is not offered (it is 0); drop it"),
    "adam_epsilon": (None, "Adam's epsilon is not offered (it is 1e-5, as PPO's); drop it"),
    "resume_from_checkpoint": (None, "a run is continued by `proxima resume RUN`, from its config.yaml and latest "
                                     "checkpoint; drop it"),
    "trust_remote_code": (None, "refused by design: models load with their own transformers classes only, never "
                                "code from the model's folder; drop it"),
    "model_name": ("policy", "a local model directory"),
    "push_to_hub": (None, "nothing is uploaded: upload RUN/policy (a Hugging Face model folder) yourself; drop it"),
}


def trl_hint(key: str) -> Optional[tuple]:
    """(field or None, note) for TRL's name ``key`` (dashes or underscores, any case) that is no field here;
    None otherwise."""
    name = str(key).strip().lstrip("-").replace("-", "_").lower()
    return None if name in FIELDS else TRL_NAMES.get(name)


#: what an RLHF run's resume takes (cli.cmd_resume): its other settings are the run's config.yaml
RESUME_TAKES = "an RLHF run's resume takes only --steps N, --trust-run and --quiet"


def rlhf_resume_flag_line(flag: str, run: os.PathLike) -> str:
    """`proxima resume RUN FLAG` of an RLHF run, FLAG a PPO flag: one line saying what the resume takes, and
    for a flag that is proxima rlhf's too (--lr, --seed, --device) the new run that changes it."""
    name = flag.lstrip("-").replace("-", "_")
    if ALIASES.get(name, name) in FIELDS:
        config = shlex.quote(os.path.join(os.fspath(run), "config.yaml"))
        return (f"{flag}: {run} is an RLHF run, whose settings its config.yaml records: {RESUME_TAKES} (a new run with "
                f"other settings: proxima rlhf --config {config} {flag} ...)")
    return f"{flag}: {run} is an RLHF run; PPO flags do not apply to it (an RLHF resume takes only --steps N, --trust-run and --quiet)"


def flag_hint(key: str, command: str, known: list, value: Optional[str] = None) -> Optional[tuple]:
    """What the unknown flag ``key`` (dashes as underscores) is, for cli._foreign_hint: on ``proxima rlhf``
    TRL's name as ("flag", the flag here, a note) or ("advice", what to do); on ``proxima resume`` a setting
    of ``proxima rlhf`` that no resume takes (--print-every), as advice naming what a resume does take.
    None for any other flag. ``value``: the word after the flag (--resume RUN's run), where there is one."""
    name = str(key).replace("-", "_").lower()
    if command == "rlhf" and name == "resume":  # train's --resume; an RLHF run has its own command for it
        run = shlex.quote(value) if isinstance(value, str) and value else "RUN"
        return ("advice", f"proxima rlhf takes no --resume: continue the run with `proxima resume {run} [--steps N]`")
    if command == "rlhf":
        hint = trl_hint(name)
        if hint is None:
            return None
        field, note = hint
        flag = "--" + field.replace("_", "-") if field else None
        if flag in known:
            return ("flag", flag, f"TRL's --{key.replace('_', '-')}" + (f"; {note}" if note else ""))
        return ("advice", f"--{key.replace('_', '-')} is TRL's; {note}")
    from ..config import FOREIGN_NAMES, FOREIGN_UNSUPPORTED

    if command == "resume" and name not in FOREIGN_NAMES and name not in FOREIGN_UNSUPPORTED:  # SB3's --batch-size: PPO's hint
        trl = trl_hint(name)
        field = (trl or (name,))[0] or name
        flag = "--" + field.replace("_", "-")
        if trl is not None and field == "steps":  # TRL's --max-steps is --steps (what an RLHF resume extends), not --num-steps
            return ("flag", flag, f"TRL's --{key.replace('_', '-')}" + (f"; {trl[1]}" if trl[1] else ""))
        # an RLHF setting, fixed for the run: a TRL name too, whose flag here (--save-steps: --checkpoint-every) is
        # PPO's on resume, which an RLHF run's resume refuses
        if field in FIELDS and (flag not in known or trl is not None):
            return ("advice", f"--{key.replace('_', '-')} is a setting of proxima rlhf, recorded in the run's config.yaml: "
                              f"{RESUME_TAKES} (a new run with other settings: proxima rlhf --config RUN/config.yaml "
                              f"{flag} ...)")
    return None


def _as_keys(text: str) -> str:
    """A TRL note in a --config file's words: --micro-batch-size is micro_batch_size there."""
    import re

    return re.sub(r"--([a-z][a-z-]*)", lambda m: m.group(1).replace("-", "_"), text)


def unknown_key_hint(key: str) -> str:
    """`` (did you mean 'max_new_tokens'? TRL's response_length)`` for an unknown key of a --config file that
    is TRL's name, ``(TRL's gradient_accumulation_steps: ...)`` for one no field stands for; "" otherwise."""
    hint = trl_hint(key)
    if hint is None:
        return ""
    field, note = hint
    if field is None:
        return f" (TRL's {key}: {_as_keys(note)})"
    return f" (did you mean '{field}'? TRL's {key}" + (f": {_as_keys(note)})" if note else ")")


#: the lowest --temperature: the logits are divided by it, and below this float32 logits can overflow
MIN_TEMPERATURE = 1e-3

# Fixed caps on the sizes that multiply into memory, checked before anything loads (the model, so its
# vocabulary and width, is not known yet). Generation samples the whole batch at once: each token step
# holds batch x vocabulary float32 logits (65,536 responses of a 32K-token vocabulary: 8.6 GB) and the
# KV cache holds every token of every response in every layer. Published RLHF recipes use 64 to 1,024
# responses a step and contexts up to 128K tokens, so these are far above any run that fits, and far
# below the sizes (10**12) that would allocate for minutes and end in a MemoryError.
#: --batch-size: responses per rollout per process (num_minibatches, micro_batch_size and
#: samples_per_prompt must divide it, so they are bounded by it too)
MAX_BATCH_SIZE = 1 << 16
#: --max-prompt-length and --max-new-tokens, each (the policy's positions bound them later too)
MAX_SEQUENCE_TOKENS = 1 << 20
#: batch_size x (max_prompt_length + max_new_tokens): the tokens of one rollout, each held as ids, masks,
#: per-token log-probs, values and advantages, and in the KV cache while generating
MAX_ROLLOUT_TOKENS = 1 << 26
#: --lora-r: the adapter's A and B matrices grow with it; a rank above the model's width adds nothing
MAX_LORA_R = 1 << 16


def from_dict(values: dict, base: Optional[RLHFConfig] = None, source: str = "config") -> RLHFConfig:
    """Apply a plain dict (YAML file, flags) on top of ``base``; unknown keys are errors."""
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: expected a mapping of field: value, got {type(values).__name__}")
    cfg = dataclasses.replace(base) if base is not None else RLHFConfig()
    seen: dict = {}
    for key, value in values.items():
        written, key = key, str(key).replace("-", "_")
        key = ALIASES.get(key, key)
        if key in seen:  # batch-size and batch_size: YAML's duplicate-key check sees two keys, the later one won
            alias = next((str(k).replace("-", "_") for k in (seen[key], written) if str(k).replace("-", "_") in ALIASES), None)
            if alias is not None:  # PPO's line (config._aliases_read): which one was meant is a guess
                raise ConfigError(f"{source}: both '{alias}' and '{key}' given ({alias} is {key}'s other name); keep one")
            raise ConfigError(f"{source}: field '{key}' is given twice ({seen[key]!r} and {written!r}); keep one")
        seen[key] = written
        if key not in FIELDS:
            trl = unknown_key_hint(key)
            if trl:
                raise ConfigError(f"{source}: unknown field '{key}'{trl}")
            close = close_field(key, FIELDS)  # PPO's: an alias (learning_rate -> lr) too
            raise ConfigError(f"{source}: unknown field '{key}'" + (f" (did you mean '{close}'?)" if close else ""))
        setattr(cfg, key, coerce(key, value, source))
    return cfg


_NONE = ("none", "null")
_BOOL = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


def coerce(name: str, value: Any, source: str = "config") -> Any:
    """Convert a YAML or flag value to the field's type; raise ConfigError naming the field."""
    meta = FIELDS[name].metadata
    kind = meta["kind"]
    if is_blank(value):  # as PPO's coerce: "" is an unset variable, not "none" or the default
        raise value_refused(name, value, source, f"empty; give {_expected(name)}" + (" or none" if meta["optional"] else ""))
    if meta["optional"] and (value is None or (isinstance(value, str) and value.lower() in _NONE)):
        return None
    if (kind is str and isinstance(value, (int, float)) and not isinstance(value, bool)
            and source not in FLAG_SOURCES and source != "RLHFConfig"):
        # a file's unquoted 0123 or 1e3 is a number by the time it is here: str() would name another path
        raise value_refused(name, value, source, "a number, not text (YAML reads unquoted digits as a number); "
                            f"quote it as you wrote it ({name}: '...')")
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in _BOOL:
                return _BOOL[value.lower()]
        elif kind is int and not isinstance(value, bool):
            if isinstance(value, str):
                return parse_int(value.strip())  # exact, however many digits; 1e3 too
            if float(value).is_integer():
                return int(value)
        elif kind is float and not isinstance(value, bool):
            return float(value)
        elif kind is list:
            items = value
            if isinstance(value, str):
                items = [value] if meta["repeat"] else [v.strip() for v in value.split(",") if v.strip()]
            if isinstance(items, (list, tuple)):
                if meta["item"] is float:
                    if not any(isinstance(v, bool) for v in items):
                        return [float(v) for v in items]
                elif all(isinstance(v, str) for v in items):
                    return list(items)
        elif kind is str and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    except (TypeError, ValueError, OverflowError):
        pass
    raise value_refused(name, value, source, f"expected {_expected(name)}")


def _expected(name: str) -> str:
    meta = FIELDS[name].metadata
    if meta["choices"]:
        return "one of " + ", ".join(meta["choices"])
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            list: "a comma-separated list" + (" of numbers" if meta["item"] is float else "")}[meta["kind"]]


def value_error(name: str, line: str) -> ConfigError:
    """ConfigError ``line`` refusing field ``name``'s value, which it names as the flag (``--lr -1.0: ...``);
    ``field`` keeps the name, so the CLI names a --config file's key where the file set it (cli.in_file_words)."""
    e = ConfigError(line)
    e.field = name
    return e


def _critic(cfg: RLHFConfig) -> bool:
    """Whether the run trains a value model (--advantage gae; grpo and rloo have none)."""
    return cfg.advantage == "gae"


def _no_critic(what: str, fix: str) -> str:
    """IGNORED_WITHOUT's line for a setting of the value model, which grpo/rloo do not have."""
    return f"{what}, which --advantage {{advantage}} does not have; {fix}, or use --advantage gae"


#: (field, what reads it, why it is refused otherwise): a value other than the default, given without
#: what reads it, would change nothing and be recorded in config.yaml as if it had (defaults pass, so a
#: config.yaml a run wrote, which records every field, still loads)
IGNORED_WITHOUT = (
    ("kl_target", lambda c: c.adaptive_kl, "only --adaptive-kl reads it (without it beta stays --kl-coef every step); "
                                           "add --adaptive-kl, or drop --kl-target"),
    ("kl_horizon", lambda c: c.adaptive_kl, "only --adaptive-kl reads it (without it beta stays --kl-coef every step); "
                                            "add --adaptive-kl, or drop --kl-horizon"),
    ("lora_r", lambda c: c.lora, "needs --lora; add --lora, or drop --lora-r"),
    ("lora_alpha", lambda c: c.lora, "needs --lora; add --lora, or drop --lora-alpha"),
    ("lora_target_modules", lambda c: c.lora, "needs --lora; add --lora, or drop --lora-target-modules"),
    # grpo and rloo train no value model (trainer.critic): its settings are read under gae only. --value-lr
    # is not here: --demo sets it (1e-3), and README's `proxima rlhf --demo --advantage grpo` must start
    ("value_init", _critic, _no_critic("starts the value model", "drop --value-init")),
    ("vf_coef", _critic, _no_critic("weighs the loss of the value model", "drop --vf-coef")),
    ("vf_clip_coef", _critic, _no_critic("clips the predictions of the value model", "drop --vf-clip-coef")),
    ("clip_vloss", _critic, _no_critic("turns off the clipping of the loss of the value model",
                                       "leave --clip-vloss at its default (on)")),
)


def default(name: str) -> Any:
    """Field ``name``'s default value."""
    f = FIELDS[name]
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def validate(cfg: RLHFConfig, new_run: bool = True) -> None:
    """Raise ConfigError with one actionable line for the first invalid value. ``new_run`` False: the
    config.yaml of a run being resumed, whose settings nothing reads (IGNORED_WITHOUT) are let pass."""

    def bad(name: str, why: str) -> None:
        flag, value = f"--{name.replace('_', '-')}", getattr(cfg, name)
        # a switch is its flag alone: --merge-lora, --no-clip-vloss
        shown = f"--no-{flag[2:]}" if value is False else flag if value is True else f"{flag} {value!r}"
        e = value_error(name, f"{shown}: {why}")
        e.field_line = f"{flag} {value!r}: {why}"  # in a --config file's words (cli.in_file_words): merge_lora True
        raise e

    for f in dataclasses.fields(cfg):  # numpy/torch scalars (a sweep in Python): config.yaml records plain values
        setattr(cfg, f.name, plain(getattr(cfg, f.name)))
    cfg.reward = reward_specs(cfg)
    what = {"policy": "a Hugging Face causal LM folder", "reward": "a reward model folder, file.py:function or module:function",
            "prompts": "a .jsonl, .json or text file of prompts"}
    for name in ("policy", "reward", "prompts"):
        if not getattr(cfg, name):  # named, never quoted: '' or [] would read as a value the user gave
            flag = f"--{name}"
            raise ConfigError(f"{flag} is required ({what[name]}); give {flag} {'SPEC' if name == 'reward' else 'PATH'} (or --config FILE.yaml with "
                              f"{name}:), or try the offline demo: proxima rlhf --demo")
    # the Python API (RLHFConfig(steps=4.0)) skips from_dict: the same conversions here, so a whole float is
    # its int (config.yaml would record 4.0, range() refuses it) and a wrong type is one line, not a TypeError later
    for name, f in FIELDS.items():
        value = getattr(cfg, name)
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        elif f.metadata["kind"] is list and not isinstance(value, (str, bytes)) and hasattr(value, "__iter__"):
            # a pathlib.Path wherever a string goes (docs/rlhf.md), a numpy array of weights
            value = [os.fspath(v) if isinstance(v, os.PathLike) else plain(v) for v in value]
        if value is not None or not f.metadata["optional"]:
            setattr(cfg, name, coerce(name, value, "RLHFConfig"))
    if cfg.reward_weights and len(cfg.reward_weights) != len(cfg.reward):
        bad("reward_weights", f"needs one weight per --reward ({len(cfg.reward)})")
    if any(not math.isfinite(w) for w in cfg.reward_weights):
        bad("reward_weights", "must be finite numbers")
    if cfg.fsdp and cfg.lora:
        bad("fsdp", "is not supported with --lora (the adapter-off reference shares the sharded policy); use one of them")
    if cfg.merge_lora and not cfg.lora:
        bad("merge_lora", "needs --lora")
    for name, f in FIELDS.items():
        choices = f.metadata["choices"]
        if choices and getattr(cfg, name) not in choices:
            bad(name, f"must be one of {', '.join(choices)}")
        if f.metadata["kind"] is float and getattr(cfg, name) is not None and not math.isfinite(getattr(cfg, name)):
            bad(name, "must be a finite number")
    for name in ("max_prompt_length", "max_new_tokens", "steps", "batch_size", "num_minibatches", "update_epochs",
                 "samples_per_prompt", "threads", "keep_checkpoints", "samples_logged", "lora_r", "lora_alpha", "kl_horizon"):
        if getattr(cfg, name) < 1:
            bad(name, "must be at least 1")
    for name, cap, what in (("batch_size", MAX_BATCH_SIZE, "responses per rollout per process, all generated at once"),
                            ("max_prompt_length", MAX_SEQUENCE_TOKENS, "tokens"),
                            ("max_new_tokens", MAX_SEQUENCE_TOKENS, "tokens"),
                            ("lora_r", MAX_LORA_R, "a rank above the model's width adds nothing")):
        if getattr(cfg, name) > cap:
            bad(name, f"must be at most {cap:,} ({what}); lower it")
    tokens = cfg.batch_size * (cfg.max_prompt_length + cfg.max_new_tokens)
    if tokens > MAX_ROLLOUT_TOKENS:  # each within its cap, their product is the rollout's memory
        bad("batch_size", f"x (max_prompt_length {cfg.max_prompt_length} + max_new_tokens {cfg.max_new_tokens}) = "
                          f"{tokens:,} tokens in one rollout, more than the {MAX_ROLLOUT_TOKENS:,} a process can hold "
                          "(ids, log-probs, values and the KV cache of every token); lower --batch-size, "
                          "--max-prompt-length or --max-new-tokens")
    from ..config import max_threads, threads_limit_text

    if cfg.threads > max_threads():  # a huge count (typed, or recorded in a run's config.yaml) crashes torch
        bad("threads", threads_limit_text(resume_may_change=False))
    for name in ("micro_batch_size", "print_every", "sample_every", "checkpoint_every", "kl_coef",
                 "missing_eos_penalty", "vf_coef", "ent_coef"):
        if getattr(cfg, name) < 0:
            bad(name, "must be 0 or more")
    # one rule for --temperature, 0 and negatives included: the lower bound below, not "positive"
    if cfg.temperature < MIN_TEMPERATURE:  # logits / temperature would overflow float32
        bad("temperature", f"must be at least {MIN_TEMPERATURE:g} (lower overflows the logits; a small value such as 0.01 "
                           "samples almost greedily)")
    for name in ("lr", "clip_coef", "vf_clip_coef", "max_grad_norm", "kl_target"):
        if getattr(cfg, name) <= 0:
            bad(name, "must be positive")
    from ..config import MAX_SEED

    if not 0 <= cfg.seed <= MAX_SEED:
        bad("seed", f"must be an integer from 0 to {MAX_SEED:,}")
    if cfg.value_lr is not None and cfg.value_lr <= 0:
        bad("value_lr", "must be positive")
    # TRL's PPO/RLOO trainers sample with top_k 0 and top_p 1 for the same reason: the log-probs (rollout,
    # reference, update) score the unfiltered softmax, so filtered samples would double the logged KL
    # and make every ratio that of another policy than the one that sampled
    if cfg.top_k != 0:
        bad("top_k", "must be 0 in training: PPO's log-probs and KL assume sampling from the whole softmax(logits / "
                     "temperature); a lower --temperature samples more greedily and stays on-policy")
    if cfg.top_p != 1.0:
        bad("top_p", "must be 1.0 in training: PPO's log-probs and KL assume sampling from the whole softmax(logits / "
                     "temperature); a lower --temperature samples more greedily and stays on-policy")
    if not 0.0 < cfg.gamma <= 1.0:
        bad("gamma", "must be in (0, 1]")
    if not 0.0 <= cfg.gae_lambda <= 1.0:
        bad("gae_lambda", "must be in [0, 1]")
    if cfg.advantage in ("grpo", "rloo") and cfg.samples_per_prompt < 2:
        bad("samples_per_prompt", f"--advantage {cfg.advantage} compares several responses to one prompt: use 2 or more")
    if cfg.batch_size % cfg.samples_per_prompt:
        bad("batch_size", f"must be a multiple of samples_per_prompt ({cfg.samples_per_prompt})")
    if cfg.batch_size % cfg.num_minibatches:
        bad("num_minibatches", f"must divide batch_size ({cfg.batch_size})")
    mb_size = cfg.batch_size // cfg.num_minibatches
    if cfg.micro_batch_size and mb_size % cfg.micro_batch_size:
        bad("micro_batch_size", f"must divide the minibatch size batch_size / num_minibatches = {mb_size}")
    if cfg.value_init == "reward" and cfg.advantage == "gae" and not any(os.path.isdir(r) for r in cfg.reward):
        bad("value_init", "'reward' needs a --reward that is a reward-model directory")
    # a setting nothing would read (after its own range checks): refused, as --merge-lora without --lora; a run an
    # earlier version started may record one (its resume ignores it again, as that run did)
    for name, needs, why in IGNORED_WITHOUT if new_run else ():
        if getattr(cfg, name) != default(name) and not needs(cfg):
            bad(name, why.format(advantage=cfg.advantage))
    check_kl_horizon(cfg)


def check_kl_horizon(cfg: RLHFConfig, world_size: int = 1, recorded: Optional[os.PathLike] = None) -> None:
    """--adaptive-kl multiplies beta by 1 + e * n / horizon with e in [-0.2, 0.2] and n the responses of one
    update over all ``world_size`` processes: a horizon of 0.2 * n or less can send beta to 0 (where it stays)
    or below it (a KL bonus), so it is refused. validate() knows one process; the trainer checks the count.
    ``recorded``: the config.yaml a resume continues (api.check_resume), which the line names: `proxima
    resume` takes no --kl-horizon, and a run an earlier version started may record such a horizon."""
    if not cfg.adaptive_kl:
        return
    n = cfg.batch_size * world_size
    if cfg.kl_horizon * 5 <= n and recorded is not None:
        # still refused: a beta of 0 or below would train another run than the one recorded
        raise ConfigError(f"{recorded}: records kl_horizon {cfg.kl_horizon} with adaptive_kl (allowed by earlier "
                          f"versions), with which each step multiplies beta by as little as 1 - 0.2 x {n} responses per "
                          f"update (batch_size {cfg.batch_size} x {world_size} process{'es' if world_size > 1 else ''}) / "
                          f"{cfg.kl_horizon}, which is 0 or negative; set kl_horizon: {n // 5 + 1} or more there (the "
                          f"smallest allowed for {n} responses per update) to continue, or start a new run")
    if cfg.kl_horizon * 5 <= n:  # horizon <= 0.2 * n, in integers
        each = f" (--batch-size {cfg.batch_size} x {world_size} process{'es' if world_size > 1 else ''})"
        raise value_error("kl_horizon", f"--kl-horizon {cfg.kl_horizon}: with --adaptive-kl each step multiplies beta by "
                          f"as little as 1 - 0.2 x {n} responses per update{each} / {cfg.kl_horizon}, which is 0 or "
                          f"negative; use --kl-horizon {n // 5 + 1} or more (the smallest allowed for {n} responses per update)")


def reward_specs(cfg: RLHFConfig) -> list:
    """cfg.reward as a list of strings (the Python API also takes one string or path, and paths in the list)."""
    def spec(value):
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    if isinstance(cfg.reward, (str, os.PathLike)):
        return [spec(cfg.reward)] if spec(cfg.reward) else []
    given = [cfg.reward] if callable(cfg.reward) else cfg.reward if isinstance(cfg.reward, (list, tuple)) else []
    func = next((r for r in given if callable(r)), None)
    if func is not None:  # a TRL habit (reward_funcs=[f]); without this, a TypeError or a "comma-separated list" line
        name = getattr(func, "__qualname__", None) or type(func).__name__
        raise ConfigError(f"RLHFConfig(reward=...): got the Python object {name}; pass its name as a string, "
                          "'file.py:function' or 'module:function', or a reward-model folder: the run records its "
                          "reward in config.yaml so that a resume can find it again, which an object cannot be")
    return [spec(r) for r in cfg.reward or []]
