"""The reward: local sequence-classification models and Python functions, alone or weighted together.

Every reward is called on a :class:`RewardBatch` and every answer is checked (one real, finite number
per response; booleans and strings refused) before it reaches the loss:

    function  f(prompts, responses, **columns) -> list[float]
              prompts: the prompt of each row (a string, or a list of {role, content} messages);
              responses: the response texts before EOS; columns: the other fields of the prompts'
              JSONL rows, as lists (``answer=[...]``), passed when f names them or takes **kwargs.
    model     a frozen AutoModelForSequenceClassification with one label; the score is its logit at
              the last token of its input (the last position of the attention mask, so a final token
              that happens to be its pad id still counts). For a conversation it reads its own chat
              template when it has one; else, with the policy's vocabulary, the prompt and response with
              the policy's special tokens (chat template, BOS) and the stop token the policy emitted kept,
              and with another vocabulary the same text without them. An input longer than its positions
              keeps its leading special tokens and its last tokens. It runs micro_batch_size inputs per
              forward (0: the whole batch).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import math
import numbers
import os
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

from .config import ConfigError
from .models import (chat_template_sha256, load_pretrained, max_positions, tokenizer_from_dir, use_fused_gelu, vocabulary_sha256,
                     weights_fingerprint)


class RewardError(ConfigError):
    """A reward call failed or answered something that is not one real number per response."""


@dataclass
class RewardBatch:
    """What every reward sees for B responses."""

    rows: list  # B PromptRows: the prompt (text or messages), the other JSONL fields, the line number
    responses: list  # B response texts before EOS, special tokens dropped
    texts: list  # B prompt + response as the policy saw them, decoded with their special tokens (no padding, no EOS)
    step: int  # the PPO step being computed (1-based); 0 for the trial call before training
    # texts with the stop token each response emitted (decoded with it; a response cut at --max-new-tokens
    # has none): what a reward model of the policy's vocabulary reads. None: texts, as for the trial call
    texts_with_stop: Optional[list] = None

    def where(self) -> str:
        return "on the trial call before training" if self.step == 0 else f"at step {self.step}"

    def sample(self, i: int) -> str:
        return f"sample {i} (prompts line {self.rows[i].line}, response {self.responses[i][:60]!r})"


class Rewards:
    """Several rewards, weighted: ``(batch) -> (score (B,) float32, {name: (B,) float32})``."""

    def __init__(self, parts: list, weights: list):
        self.parts, self.weights = parts, weights
        self.names = _unique([p.name for p in parts])  # metric names (rewards/NAME/...): short, one per reward

    def __call__(self, batch: RewardBatch) -> tuple:
        # error lines name a reward by its spec (reward_label), as its own raise does: the bare function
        # name of the metrics would leave the user guessing which file a "reward score" was
        each = {name: validate_scores(part(batch), batch, reward_label(part)) for name, part in zip(self.names, self.parts)}
        total = sum(w * s for w, s in zip(self.weights, each.values()))
        bad = (~torch.isfinite(total)).nonzero().flatten().tolist()
        if bad:  # finite scores times a large weight, or added up, can still leave float32's range
            i = bad[0]
            terms = " + ".join(f"{w:g} x {reward_label(part)} ({s[i].item():g})"
                               for w, part, s in zip(self.weights, self.parts, each.values()))
            raise RewardError(f"rewards {batch.where()}: {batch.sample(i)}: the weighted sum {terms} is "
                              f"{total[i].item()} in float32 (largest about {F32_MAX:.1e}); lower --reward-weights "
                              f"or scale the rewards down")
        return total, each

    @property
    def models(self) -> list:
        return [p for p in self.parts if isinstance(p, RewardModel)]

    def read_with(self, policy_tokenizer) -> None:
        """Tell every reward model the policy's tokenizer (RewardModel.read_with)."""
        for m in self.models:
            m.read_with(policy_tokenizer)

    def take_truncations(self) -> dict:
        """{metric name: inputs cut to a reward model's positions since the last call}, one entry per
        reward model (0 included, so metrics.csv has the column from the first step)."""
        out = {}
        for name, part in zip(self.names, self.parts):
            if isinstance(part, RewardModel):
                out[f"rewards/{name}/truncated"], part.truncated = part.truncated, 0
        return out


def reward_label(part) -> str:
    """How every error line names a reward: ``SPEC`` for a function (``/abs/rew.py:good``, ``mod:fn``, the spec
    config.yaml records and a resume loads), ``model PATH`` for a reward model, as their own raises do."""
    return f"model {part.path}" if isinstance(part, RewardModel) else part.spec


def _unique(names: list) -> list:
    """Names for the logs: a name given twice gets #2, #3, skipping any suffix another reward's own
    name already has (``f#2``, ``f``, ``f`` gives ``f#2``, ``f``, ``f#3``): two equal names would
    merge two rewards into one entry of the scores and their weights would go to the wrong ones."""
    taken = set(names)
    count: dict = {}
    out = []
    for n in names:
        count[n] = count.get(n, 0) + 1
        if count[n] == 1:
            out.append(n)
            continue
        k = count[n]
        while f"{n}#{k}" in taken:
            k += 1
        count[n] = k
        taken.add(f"{n}#{k}")
        out.append(f"{n}#{k}")
    return out


F32_MAX = torch.finfo(torch.float32).max


def _shown(v) -> str:
    """``repr(v)`` in at most 40 characters (an int of 10**5000 digits has no repr at all)."""
    try:
        text = repr(v)
    except ValueError:  # ints past sys.get_int_max_str_digits()
        return f"an int of {v.bit_length()} bits"
    return text if len(text) <= 40 else text[:37] + "..."


def validate_scores(raw, batch: RewardBatch, name: str) -> torch.Tensor:
    """One real number per response, finite in float32 -> (B,) float32; otherwise a RewardError naming step
    and sample."""
    n = len(batch.responses)
    where = f"reward {name} {batch.where()}"
    if type(raw).__module__ == "numpy" and hasattr(raw, "tolist"):
        shape = getattr(raw, "shape", None)
        if isinstance(shape, tuple) and len(shape) > 1:  # tolist() would give rows of lists, refused as non-numbers
            raise RewardError(f"{where}: returned a {raw.dtype} numpy array of shape {shape}; expected ({n},) real "
                              f"numbers, one per response")
        raw = raw.tolist()  # numpy booleans and strings become Python ones, refused below
    if isinstance(raw, torch.Tensor):
        if raw.dtype == torch.bool or raw.is_complex() or raw.dim() != 1:
            raise RewardError(f"{where}: returned a {raw.dtype} tensor of shape {tuple(raw.shape)}; expected ({n},) "
                              f"real numbers, one per response")
        values = raw.tolist()
    elif isinstance(raw, (list, tuple)):
        values = list(raw)
    else:
        raise RewardError(f"{where}: returned {type(raw).__name__}; expected a list of {n} numbers, one per response")
    if len(values) != n:
        raise RewardError(f"{where}: returned {len(values)} scores for {n} responses")
    scores = []
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor) and v.numel() == 1 and v.dtype != torch.bool:
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise RewardError(f"{where}: {batch.sample(i)} got {v!r} ({type(v).__name__}); a reward returns real numbers, "
                              f"not booleans or strings")
        try:
            scores.append(float(v))
        except (OverflowError, ValueError) as e:  # 10**400, a Fraction as large: no float holds them
            raise RewardError(f"{where}: {batch.sample(i)} got {_shown(v)} ({type(v).__name__}), which is no float "
                              f"({e}); a reward returns numbers within float32's range (about {F32_MAX:.1e})") from None
    out = torch.tensor(scores, dtype=torch.float32)
    # checked in float32, where the loss is computed: 1e39 is a finite float64 but an infinite float32
    bad = (~torch.isfinite(out)).nonzero().flatten().tolist()
    if bad:
        i = bad[0]
        if not math.isfinite(scores[i]):
            raise RewardError(f"{where}: {batch.sample(i)} got the non-finite score {scores[i]}")
        raise RewardError(f"{where}: {batch.sample(i)} got {scores[i]:g}, past float32's largest number (about "
                          f"{F32_MAX:.1e}), where the loss is computed; scale the reward down")
    return out


#: the reward functions that ship with Proxima: naming one imports only Proxima's own code
BUILTIN_REWARDS = ("proxima.rlhf.demo:keyword_sentiment",)


def imports_code(spec) -> bool:
    """True for a reward spec whose loading imports and runs a module or file it names
    (``module:function``, ``path/to/file.py:function``) other than Proxima's own BUILTIN_REWARDS;
    False for a reward-model directory (weights, loaded without remote code) or a built-in reward."""
    spec = str(spec)
    if spec in BUILTIN_REWARDS or os.path.isdir(spec):
        return False
    module_name, sep, func_name = spec.rpartition(":")
    return bool(sep and module_name and func_name)


#: who named the reward a refusal speaks of: "python" while train_rlhf runs for a Python caller (the line
#: says ``RLHFConfig(reward='SPEC')``), else the command line or a run's record (``--reward 'SPEC'``); the
#: CLI sets "cli" before it calls train_rlhf, which sets "python" only where nobody set it
REWARD_CALLER: contextvars.ContextVar = contextvars.ContextVar("proxima_rlhf_reward_caller", default=None)


def named(spec) -> str:
    """The reward ``spec`` as its caller gave it: ``--reward 'SPEC'``, or ``RLHFConfig(reward='SPEC')`` from Python."""
    return f"RLHFConfig(reward={spec!r})" if REWARD_CALLER.get() == "python" else f"--reward {spec!r}"


def refuse_recorded_rewards(specs: list, source, how: str, origin: str = "a run's files") -> None:
    """ConfigError when a reward in ``specs``, read from ``source`` (a run's config.yaml, a --config
    file: ``origin`` in the message), would import and run code: a file is data, never code, until
    the user says otherwise (``how``: the flag or command that does; ``{spec}`` in it is the reward's spec)."""
    def shown(text: str) -> str:  # a value from a file, in one line of reasonable length
        return text if text.isprintable() and len(text) <= 200 else repr(text[:200])

    for spec in specs:
        if imports_code(spec):
            spec = str(spec)
            module = spec.rpartition(":")[0]
            what = f"the file {shown(module)}" if module.endswith(".py") else f"module '{shown(module)}'"
            raise ConfigError(f"{source}: the recorded reward '{shown(spec)}' would import and run {what}; not done for a "
                              f"reward read from {origin}: {how.format(spec=shown(spec))} if you trust that code")


def load_rewards(specs: list, weights: list, device: torch.device, dtype: torch.dtype = torch.float32,
                 bf16: bool = False, import_path: Optional[list] = None, micro_batch_size: int = 0) -> Rewards:
    """Every ``--reward`` spec loaded (a directory -> RewardModel, ``module:function`` -> RewardFunction)."""
    parts = [load_reward(s, device, dtype, bf16, import_path, micro_batch_size) for s in specs]
    return Rewards(parts, list(weights) or [1.0] * len(parts))


def load_reward(spec: str, device: torch.device, dtype: torch.dtype = torch.float32, bf16: bool = False,
                import_path: Optional[list] = None, micro_batch_size: int = 0):
    if os.path.isdir(spec):
        return RewardModel(spec, device, dtype, bf16, micro_batch_size)
    module_name, sep, func_name = spec.rpartition(":")
    if not sep or not module_name or not func_name:
        raise ConfigError(f"--reward {spec!r}: {_spec_hint(spec, list(import_path or [os.getcwd()]))}")
    # Proxima's own rewards never search the run's recorded folders: a resume without --trust-run
    # loads them, and a folder left on sys.path would be searched first for every later import
    # (sympy, PIL as the models load), so a run shipping sympy.py would run it
    search = None if _is_builtin(module_name) else list(import_path or [os.getcwd()])
    if module_name.endswith(".py"):  # its own folder first, as `python file.py` has: `from helpers import x` beside it
        search = [os.path.dirname(os.path.abspath(module_name))] + search
    return RewardFunction(_import_function(module_name, func_name, spec, search or []), spec, func_name, search)


def _spec_hint(spec: str, import_path: list) -> str:
    """Why ``spec`` (no ``:function``, not a directory) names no reward, and the spec meant: a reward file or
    module named without its function (``my_rewards.py``, ``my_rewards``) or with a dot before it
    (``my_rewards.brevity``), with the functions its source defines (read with ast: nothing of it runs)."""
    if spec.endswith(".py"):
        if not os.path.isfile(spec):
            return f"no such file {spec} (a reward is a reward-model directory, module:function or file.py:function)"
        return f"name the function: {spec}:FUNCTION{_defines(spec, 'it')}"
    module, dot, attr = spec.rpartition(".")
    for name, func in ((spec, None), (module, attr) if dot else (None, None)):
        source = _module_source(name, import_path) if name else None
        if source is not None and func is None:
            return f"name the function: {spec}:FUNCTION{_defines(source)}"
        if source is not None:
            return f"name the function after a colon: {module}:{attr}{_defines(source)}"
    return ("neither a reward-model directory nor module:function (or file.py:function)"
            + (f"; a function of module {module}: {module}:{attr}" if dot and module and attr else ""))


def _module_source(name: str, import_path: list) -> Optional[str]:
    """The source file of module ``name`` in ``import_path`` (``a.b`` -> a/b.py or a/b/__init__.py); None
    when it is not there (an installed module is not looked up: that would import its parents)."""
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", name):
        return None
    rel = os.path.join(*name.split("."))
    for folder in import_path:
        for candidate in (rel + ".py", os.path.join(rel, "__init__.py")):
            path = os.path.join(folder, candidate)
            if os.path.isfile(path):
                return path
    return None


#: bytes of a reward file read with ast for _defines' hint: ast holds about 400 bytes per byte of source (a
#: 1 MB file, 350 MB), so a bigger file is scanned for its ``def NAME(`` lines instead, up to HINT_SCAN_BYTES
HINT_AST_BYTES = 256 * 1024
HINT_SCAN_BYTES = 1 << 20
_TOP_DEF = re.compile(r"^(?:async[ \t]+)?def[ \t]+([^\W\d]\w*)[ \t]*[(\[]", re.M)


def _defines(source: str, shown: Optional[str] = None) -> str:
    """`` (my_rewards.py defines math_answer, brevity)``: the public functions the file ``source`` (``shown``
    as that, else by its path from here) defines at its top level, read with ast (importing would run its
    code); "" when there are none or it does not parse. A file over HINT_AST_BYTES, or one too deeply
    nested for ast (RecursionError), has its first HINT_SCAN_BYTES scanned for lines ``def NAME(``
    (``, ...`` after them when there is more of it): a hint takes a moment and little memory whatever the file."""
    import ast

    try:
        with open(source, "rb") as f:
            data = f.read(HINT_SCAN_BYTES + 1)
    except OSError:
        return ""
    names, cut = None, len(data) > HINT_SCAN_BYTES
    if len(data) <= HINT_AST_BYTES:
        try:
            tree = ast.parse(data)
            names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        except (SyntaxError, ValueError):
            return ""
        except (RecursionError, MemoryError):  # ``x = 1+1+...+1``, ``[[[...]]]``: the scan below still names them
            pass
    if names is None:
        text = data[:HINT_SCAN_BYTES].decode("utf-8", errors="replace")
        names = _TOP_DEF.findall(text.rsplit("\n", 1)[0] if cut else text)
    names = [n for n in names if not n.startswith("_")]
    if not names:
        return ""
    more = f", ... ({len(names)} in all)" if len(names) > 8 else ", ..." if cut else ""
    if shown is None:
        rel = os.path.relpath(source)
        shown = source if rel.startswith("..") else rel
    return f" ({shown} defines {', '.join(names[:8])}{more})"


def _is_builtin(module_name: str) -> bool:
    return module_name == "proxima" or module_name.startswith("proxima.")


@contextlib.contextmanager
def _searching(folders: Optional[list]):
    """``folders`` first on sys.path inside the block, taken out again after it: only the user's
    reward (its import, and each call, which may import a module next to it then) searches them."""
    added = [f for f in dict.fromkeys(folders or []) if f not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for folder in added:  # what the reward itself put on sys.path stays
            try:
                sys.path.remove(folder)
            except ValueError:
                pass


def _import_function(module_name: str, func_name: str, spec: str, import_path: list) -> Callable:
    try:
        if module_name.endswith(".py"):
            if not os.path.isfile(module_name):
                raise ConfigError(f"--reward {spec!r}: no such file {module_name}")
            # in sys.modules while it runs and after, as an import has it (dataclasses, typing and pickle look
            # a class's module up there), under a name of its own: a file named like a module (json.py, or
            # helpers.py that the reward imports as a module too) must not replace it
            # One name per file (its resolved path): loading it again (a notebook's next run) replaces the entry,
            # so the earlier copy, and whatever it loaded at import (a judge model), can be freed
            stem = re.sub(r"\W", "_", Path(module_name).stem)
            digest = hashlib.sha1(os.fsencode(os.path.realpath(module_name))).hexdigest()[:12]
            unique = f"_proxima_reward_file_{digest}_{stem}"
            mod_spec = importlib.util.spec_from_file_location(unique, module_name)
            module = importlib.util.module_from_spec(mod_spec)
            previous = sys.modules.get(unique)
            sys.modules[unique] = module
            try:
                with _searching(import_path):
                    _exec_source(mod_spec, module)
            except BaseException:
                if sys.modules.get(unique) is module:  # the copy that loaded before stays, as a failed reload keeps it
                    if previous is None:
                        del sys.modules[unique]
                    else:
                        sys.modules[unique] = previous
                raise
        elif _is_builtin(module_name):
            module = importlib.import_module(module_name)  # Proxima's own code: never re-executed (tests patch it)
        else:
            # the run's recorded directories first: a resume started elsewhere imports the same module
            with _searching(import_path):
                module = _fresh_import(module_name)
    except ConfigError:
        raise
    except SystemExit as e:  # a script that is also a reward module (argparse at import): not the CLI's exit
        raise ConfigError(f"--reward {spec!r}: importing it called sys.exit({e.code!r})") from None
    except Exception as e:  # any import failure of user code is bad input, reported in one line
        raise ConfigError(f"--reward {spec!r}: cannot import {module_name}: {type(e).__name__}: {e}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        source = module_name if module_name.endswith(".py") else getattr(module, "__file__", None)
        defines = _defines(source) if source and str(source).endswith(".py") else ""
        raise ConfigError(f"{named(spec)}: {module_name} has no function {func_name}{defines}")
    return func


def _fresh_import(name: str):
    """Module ``name`` executed from its source as it is on disk now, even when this process imported it
    before: importlib.import_module would hand back the sys.modules copy, so a reward fixed in place
    (``resume(run, trust_run=True)``, or a second train_rlhf in a notebook) would keep its old code.

    A module already imported is re-executed in the same module object, as importlib.reload does (whoever
    holds it, the user's notebook or a test, sees the new code), but from a cleared namespace, so a function
    deleted from the file is gone; if the new code fails, the module gets back its old namespace whole.
    Its parent packages and the helpers it imports come from sys.modules as any import does."""
    spec = _find_spec(name)
    if not isinstance(spec.loader, importlib.machinery.SourceFileLoader) or _installed(spec.origin):
        # built in, compiled, a namespace package, or a library's (not edited between runs, and run twice its
        # registries and classes that its other modules hold would clash): imported once, as always
        return importlib.import_module(name)
    fresh = importlib.util.module_from_spec(spec)  # __spec__, __file__, __path__ ... as the import system sets them
    old = sys.modules.get(name)
    if isinstance(old, types.ModuleType):
        saved = dict(old.__dict__)
        old.__dict__.clear()
        old.__dict__.update(fresh.__dict__)
        # a package's links to its submodules, set once when each was first imported: an `import pkg.helpers`
        # in the code run again finds the submodule in sys.modules and does not set the attribute again
        prefix = name + "."
        for sub_name, sub in list(sys.modules.items()):
            if sub_name.startswith(prefix) and "." not in sub_name[len(prefix):] and sub is not None:
                old.__dict__[sub_name[len(prefix):]] = sub
        try:
            _exec_source(spec, old)
        except BaseException:
            old.__dict__.clear()
            old.__dict__.update(saved)
            raise
        return old
    # in sys.modules while it runs, as an import has it (relative imports, dataclasses and pickle look it up there)
    sys.modules[name] = fresh
    try:
        _exec_source(spec, fresh)
    except BaseException:
        if sys.modules.get(name) is fresh:
            if old is None:
                del sys.modules[name]
            else:
                sys.modules[name] = old
        raise
    parent, _, leaf = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], leaf, fresh)
    return fresh


def _find_spec(name: str):
    """The spec the import system would find for ``name`` on the current sys.path, never the one of a copy
    in sys.modules (importlib.util.find_spec returns that). Parent packages are imported as usual."""
    parent, _, _ = name.rpartition(".")
    path = None
    if parent:
        path = getattr(importlib.import_module(parent), "__path__", None)
        if path is None:
            raise ModuleNotFoundError(f"No module named {name!r}; {parent!r} is not a package", name=name)
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, path) if find is not None else None
        if spec is not None:
            return spec
    raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def _installed(origin: str) -> bool:
    """Whether ``origin`` is a file of the Python installation: the standard library or a site-packages
    folder (an editable install's source lies outside them)."""
    import site
    import sysconfig

    folders = [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    with contextlib.suppress(AttributeError):  # site lacks these in some embedded interpreters
        folders += site.getsitepackages() + [site.getusersitepackages()]
    real = os.path.realpath(origin)
    return any(real.startswith(os.path.join(os.path.realpath(f), "")) for f in folders if f)


def _exec_source(spec, module) -> None:
    """Run a reward's source file in ``module``, compiled from the file as it is now: a __pycache__ entry
    is trusted by the file's mtime in whole seconds and its size, and a fix saved within the same second
    that keeps the size (1.0 -> 2.0) would run the old bytecode."""
    loader = spec.loader
    code = loader.source_to_code(loader.get_data(spec.origin), spec.origin)
    exec(code, module.__dict__)


class RewardFunction:
    """``f(prompts, responses, **columns)``; the columns passed are those f names (all with **kwargs)."""

    def __init__(self, func: Callable, spec: str, name: str, import_path: Optional[list] = None):
        self.func, self.spec, self.name = func, spec, name
        self.import_path = import_path  # searched during each call too (load_reward)
        try:
            signature = inspect.signature(func)
            params = signature.parameters.values()
        except Exception:  # a builtin or C function, or one whose __signature__ raises: called positionally, not inspected
            signature, params = None, []
        self._signature = signature
        self.all_columns = any(p.kind is p.VAR_KEYWORD for p in params)
        self.named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        # the columns f cannot do without: its parameters after (prompts, responses) that have no default
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:2]
        self.required = [p.name for p in params if p.default is p.empty and p not in positional
                         and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if params:
            self._check_signature(list(params))

    def _check_signature(self, params: list) -> None:
        """f must take (prompts, responses) as its first two positional arguments: TRL's signatures,
        f(completions, **kwargs) and f(*, prompts, completions, **kwargs), got a TypeError or a line about
        a 'prompts' column the prompts file lacks."""
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        takes_two = len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)
        trl = any(p.name == "completions" for p in params)
        # TRL's shape is completions first or keyword-only; f(prompts, responses, completions) is a reward that
        # takes a prompts-file column named completions (reference answers), which is ours to pass
        first_is_completions = [p.name for p in positional[:1]] == ["completions"]
        if takes_two and not first_is_completions:
            return
        second = "completions" if trl else "responses"
        keep = [p for p in params if p.name not in ("prompts", "completions", "responses") and p.kind is not p.VAR_POSITIONAL
                and (p.kind in (p.VAR_KEYWORD, p.KEYWORD_ONLY) or p.default is not p.empty)]
        tail = "".join(", " + ("**" if p.kind is p.VAR_KEYWORD else "") + p.name for p in keep)
        what = ("is TRL's signature; a reward is called as f(prompts, responses, **columns), positionally (TRL passes "
                "completions=)" if trl else "cannot be called as a reward is, f(prompts, responses, **columns), positionally")
        raise RewardError(f"--reward {self.spec!r}: {self.name}{self._signature} {what}: define "
                          f"def {self.name}(prompts, {second}{tail})")

    def __call__(self, batch: RewardBatch):
        # copies, one per response: a function that builds on its arguments (a judge appending the response
        # to the conversation) would otherwise change the run's prompts for every later step, the logs and the
        # other rewards, and with --samples-per-prompt > 1 the same list appears several times in one call
        columns = {k: [copy.deepcopy(r.columns[k]) for r in batch.rows] for k in batch.rows[0].columns
                   if self.all_columns or k in self.named}
        missing = [name for name in self.required if name not in batch.rows[0].columns]
        if missing:  # else Python's "missing 1 required positional argument", which does not say where columns come from
            have = sorted(batch.rows[0].columns)
            has = f"its rows have {', '.join(repr(c) for c in have)}" if have else "its rows hold a prompt and nothing else"
            raise RewardError(f"reward {self.spec} {batch.where()}: {self.name}() needs a column {missing[0]!r}, which "
                              f"the prompts file does not have ({has}); give each row an {missing[0]!r} field (JSON lines: "
                              f'{{"prompt": "...", "{missing[0]}": ...}}), or give the parameter a default')
        prompts = [copy.deepcopy(r.prompt) for r in batch.rows]
        try:
            with _searching(self.import_path):
                return self.func(prompts, list(batch.responses), **columns)
        except Exception as e:  # user code: one line naming the reward and the step
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
            # which sample raised is not known; an empty response (the trial call's, or a policy's EOS at once) is
            # the usual cause (a tokenizer gives no tokens, len() is 0), so the line names the first one
            empty = next((i for i, r in enumerate(batch.responses) if not r), None)
            named = "" if empty is None else (
                f"; {batch.sample(empty)} is empty, as a policy that emits EOS at once gives in training: the reward "
                "must score an empty response too (score prompt + response, or give '' a fixed score)")
            raise RewardError(f"reward {self.spec} {batch.where()}: raised {type(e).__name__}: {msg}{named}") from None


def wrapping_tokens(tokenizer) -> tuple:
    """(prefix, suffix): the ids the tokenizer's post-processor puts around a text, [CLS] and [SEP] for BERT,
    [BOS] and nothing for Llama, nothing for GPT-2; read off a probe encoded with and without them."""
    for probe in ("x", "a", "the", "hello", "0", "."):
        bare = tokenizer(probe, add_special_tokens=False)["input_ids"]
        full = tokenizer(probe)["input_ids"]
        if not bare:  # a vocabulary without the probe and without an unk token: nothing to locate
            continue
        for i in range(len(full) - len(bare) + 1):
            if full[i:i + len(bare)] == bare:
                return full[:i], full[i + len(bare):]
    bos = tokenizer.bos_token_id  # no probe could be located: at least the BOS a Llama-style tokenizer adds
    return ([bos] if bos is not None and tokenizer("x")["input_ids"][:1] == [bos] else []), []


class RewardModel:
    """A frozen AutoModelForSequenceClassification with one output; the score is its logit at the last token."""

    def __init__(self, path: str, device: torch.device, dtype: torch.dtype = torch.float32, bf16: bool = False,
                 micro_batch_size: int = 0):
        from transformers import AutoModelForSequenceClassification

        model = load_pretrained(AutoModelForSequenceClassification, path, "--reward", dtype)
        # a reward model reads text with the tokenizer it was trained with: it has no --tokenizer of its own
        self.tokenizer = tokenizer_from_dir(path, "--reward", "save the reward model's tokenizer into that directory")
        if model.config.num_labels != 1:
            labels = model.config.num_labels
            what = ("re-head it to num_labels=1 (the positive minus the negative logit), or give a file.py:function "
                    "reward that returns the classifier's logits[:, 1] (its positive class)" if labels == 2 else
                    "give a file.py:function reward that returns the classifier's logit of the class to reward")
            raise ConfigError(f"{named(path)}: the model has {labels} labels; a reward model has 1 (one score per "
                              f"text): {what}; docs/rlhf.md, 'A classifier as a reward', shows both")
        # a token id past the embedding would fail mid-run, in the first batch that holds it
        embedded = model.get_input_embeddings().num_embeddings
        if len(self.tokenizer) > embedded:
            raise ConfigError(f"--reward {path!r}: its tokenizer has {len(self.tokenizer)} tokens but the model embeds "
                              f"only {embedded}; the directory's tokenizer does not belong to its model")
        # checkpoints hold no reward model: a resume loads it from its folder again and checks it by these
        # (loop._check_same_reward_models), as a changed folder would change the objective
        self.fingerprint = weights_fingerprint(model)
        self.vocab_sha256 = vocabulary_sha256(self.tokenizer)
        self.template_sha256 = chat_template_sha256(self.tokenizer)
        self.model = use_fused_gelu(model).to(device).eval()
        self.model.requires_grad_(False)
        if self.tokenizer.pad_token_id is None:
            fallback = self.tokenizer.eos_token or self.tokenizer.unk_token
            if fallback is None:  # else the first batch of two fails in tokenizer.pad, a traceback at step 1
                raise ConfigError(f"--reward {path!r}: its tokenizer has no pad, eos or unk token; set pad_token in "
                                  f"tokenizer_config.json")
            self.tokenizer.pad_token = fallback
        # right padding, so the last real token is at attention_mask.sum(1) - 1 (__call__ reads it there);
        # transformers' own pooling takes the rightmost token that is not the pad id, one or more tokens
        # early when the input ends in that id (a sampled [PAD], or an EOS standing in for pad)
        self.tokenizer.padding_side = "right"
        self.model.config.pad_token_id = self.tokenizer.pad_token_id  # its pooling refuses a batch without one
        self.micro_batch_size = micro_batch_size  # inputs per forward, as --micro-batch-size bounds the policy's
        self.prefix, self.suffix = wrapping_tokens(self.tokenizer)
        bos = self.tokenizer.bos_token_id
        self.adds_bos = bos is not None and self.prefix[:1] == [bos]
        self.limit = max_positions(self.model.config)
        self.name, self.path, self.device, self.bf16 = Path(path).name, path, device, bf16
        self.truncated = 0  # inputs cut to self.limit since Rewards.take_truncations last read it
        self.noted = False  # the first cut is said once on stderr; the count goes to the metrics
        # None: the policy's tokenizer is not known (read_with), so its text is read as it is
        self.policy_specials: Optional[list] = None
        # the leading special tokens an input keeps when cut: BOS, a template's first markers
        self.special_ids = set(self.tokenizer.all_special_ids) | {
            i for i, t in self.tokenizer.added_tokens_decoder.items() if t.special}

    def read_with(self, policy_tokenizer) -> None:
        """With another vocabulary than the policy's, the policy's special tokens (``<|begin_of_text|>``,
        ``<|im_start|>``) would be read as characters, a dozen tokens of noise each: such a model reads the
        policy's text without them (what decode(skip_special_tokens=True) gives). The same vocabulary
        reads them as the tokens they are."""
        if vocabulary_sha256(policy_tokenizer) == self.vocab_sha256:
            self.policy_specials = []
            return
        specials = set(policy_tokenizer.all_special_tokens) | {
            t.content for t in policy_tokenizer.added_tokens_decoder.values() if t.special}
        # longest first: a special token that holds another is removed whole
        self.policy_specials = sorted((t for t in specials if t), key=len, reverse=True)

    def render(self, row, response: str, text: str, where: str = "before training") -> str:
        """The text the model reads: its own chat template for a conversation when it has one, else the
        policy's view of prompt + response (chat template and BOS included; without the policy's special
        tokens when its vocabulary is another, read_with). A template that raises
        (``raise_exception('System role not supported')``) is a RewardError naming the prompts line."""
        if row.is_conversation and getattr(self.tokenizer, "chat_template", None):
            try:
                return self.tokenizer.apply_chat_template(row.prompt + [{"role": "assistant", "content": response}],
                                                          tokenize=False)
            except Exception as e:  # jinja2's TemplateError, or any error of the template's own code
                msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
                raise RewardError(f"reward model {self.path} {where}: its chat template failed on prompts line "
                                  f"{row.line}: {type(e).__name__}: {msg}") from None
        for special in self.policy_specials or ():
            text = text.replace(special, "")
        return text

    def encode(self, rows: list, responses: list, texts: list, where: str = "before training") -> list:
        """Token ids per sample: what ``tokenizer(text)`` gives (its post-processor's [CLS] ... [SEP], or BOS),
        without doubling a leading or trailing special token the text already holds (the policy's BOS, the
        EOS it emitted, a template's BOS). A text from the model's own chat template gets only a missing BOS:
        the template places its special tokens, and apply_chat_template encodes without the post-processor's."""
        ids = self.tokenizer([self.render(r, s, t, where) for r, s, t in zip(rows, responses, texts)],
                             add_special_tokens=False)["input_ids"]
        templated = getattr(self.tokenizer, "chat_template", None)
        out = []
        for row, x in zip(rows, ids):
            if row.is_conversation and templated:
                prefix, suffix = ([self.tokenizer.bos_token_id] if self.adds_bos else []), []
            else:
                prefix, suffix = self.prefix, self.suffix
            if prefix and x[:len(prefix)] != prefix:
                x = prefix + x
            if suffix and x[len(x) - len(suffix):] != suffix:
                x = x + suffix
            out.append(x)
        return out

    def fit(self, x: list) -> list:
        """``x`` cut to the model's positions: its leading special tokens (BOS, a chat template's first
        markers) and its last tokens kept. The score is read at the last token, after the response,
        so the end stays whole and the prompt loses its beginning, as --truncate-prompts cuts one; a
        response longer than the room left loses its beginning too. Counting a response in the policy's
        tokens cannot bound it in another tokenizer's, so no length is refused: a refusal mid-run would
        come back at every resume, which samples the same response again."""
        if not self.limit or len(x) <= self.limit:
            return x
        head = 0
        while head < min(len(x), self.limit // 2) and x[head] in self.special_ids:
            head += 1
        return x[:head] + x[len(x) - (self.limit - head):]

    @torch.no_grad()
    def __call__(self, batch: RewardBatch) -> torch.Tensor:
        texts = batch.texts
        # the policy's vocabulary reads the EOS it emitted as the token it is (TRL keeps it too: a model trained
        # on "...response<eos>" scores there); another vocabulary reads text, and special tokens are no text
        if self.policy_specials == [] and batch.texts_with_stop is not None:
            texts = batch.texts_with_stop
        ids = self.encode(batch.rows, batch.responses, texts, batch.where())
        cut = [i for i, x in enumerate(ids) if self.limit and len(x) > self.limit]
        if cut and not self.noted and os.environ.get("RANK", "0") == "0":
            i = cut[0]
            print(f"proxima rlhf: note: reward model {self.path} {batch.where()}: {batch.sample(i)} is {len(ids[i])} "
                  f"tokens in its tokenizer, more than its {self.limit} positions; this and every longer input keeps its "
                  f"leading special tokens and its last tokens (the prompt's beginning is cut), counted in the metric "
                  f"rewards/<name>/truncated; lower --max-new-tokens for the model to read whole texts",
                  file=sys.stderr, flush=True)
            self.noted = True
        self.truncated += len(cut)
        ids = [self.fit(x) for x in ids]
        chunk = self.micro_batch_size or len(ids)
        return torch.cat([self._scores(ids[s:s + chunk]) for s in range(0, len(ids), chunk)])

    def _scores(self, ids: list) -> torch.Tensor:
        """(B,) float32 scores of inputs ``ids``: the head's output at each input's last real token."""
        padded = self.tokenizer.pad({"input_ids": ids}, return_tensors="pt").to(self.device)
        per_token = []
        head = getattr(self.model, "score", None)  # the per-token head of transformers' decoder classifiers
        hook = None
        if isinstance(head, torch.nn.Module):
            hook = head.register_forward_hook(lambda module, args, out: per_token.append(out))
        try:
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                logits = self.model(**padded).logits
        finally:
            if hook is not None:
                hook.remove()
        width = padded["input_ids"].shape[1]
        if len(per_token) == 1 and per_token[0].dim() == 3 and per_token[0].shape[1] == width:
            last = padded["attention_mask"].sum(1) - 1
            logits = per_token[0][torch.arange(len(ids), device=last.device), last]
        # else an encoder's classifier (a pooled first token): its logits need no position
        return logits[:, 0].float().cpu()
