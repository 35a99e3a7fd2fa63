"""Typed configuration: one dataclass, one docstring per field, turned into CLI flags.

Every field of :class:`PPOConfig` is a flag of ``proxima train`` (``lr`` -> ``--lr``,
``num_envs`` -> ``--num-envs``); the ``help`` text of the field is its docstring and its
``--help`` line. :func:`validate` turns a config into a list of actionable errors before anything
is created on disk.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import shlex
import sys
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Optional


# The container image's pins (docker/Dockerfile): requirements.lock's versions. Its presence says
# that this Proxima is the image's, which has no repository checkout and no .venv.
IMAGE_CONSTRAINTS = "/usr/local/share/proxima/constraints.txt"


def _in_image() -> bool:
    return os.path.isfile(IMAGE_CONSTRAINTS)


def _extra_requirements(extra: str) -> list:
    """The requirements of the installed Proxima's extra `extra` ("": its core dependencies), without
    their markers (the image is Linux, the only platform a marker names), e.g. ['gymnasium[mujoco]<2,>=1.1']."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        reqs = requires("proxima") or []
    except PackageNotFoundError:
        return []
    out = []
    for req in reqs:
        spec, _, marker = req.partition(";")
        named = re.search(r"""\bextra\s*==\s*["']([^"']*)["']""", marker)
        if (named.group(1) if named else "") == extra:
            out.append(spec.strip())
    return out


def pip(from_repository: bool = False) -> str:
    """The pip of the running interpreter: ``.venv/bin/pip`` when that is the working directory's venv
    (README's wording; ``from_repository``: or the venv of the checkout holding this package, for a
    command run from the repository root), else ``<sys.executable> -m pip``; a bare ``pip`` may belong to
    another Python and install where this one never looks (and a venv moved or named otherwise has no .venv/bin/pip)."""
    from pathlib import Path

    venvs = [Path.cwd() / ".venv"] + ([Path(__file__).resolve().parent.parent / ".venv"] if from_repository else [])
    try:
        if any(Path(sys.prefix).resolve() == v.resolve() and (v / "bin" / "pip").exists() for v in venvs):
            return ".venv/bin/pip"
    except OSError:
        pass
    return f"{shlex.quote(sys.executable)} -m pip"


def extra_install(extra: str) -> str:
    """The command that installs Proxima's optional dependency group `extra` (README, Makefile);
    ``extra=""``: its core dependencies (a tensorboard or matplotlib that went missing).

    Not `pip install 'proxima[extra]'`: PyPI's `proxima` is an unrelated package. Proxima is
    installed from its repository, editable, with the pinned versions of requirements.lock. In the
    container image, which has neither, the extra's own requirements with the image's constraints
    (docker/README.md, "Env families in the image").
    """
    reqs = _extra_requirements(extra) if _in_image() else []
    if reqs:  # never `proxima[extra]` (the unrelated PyPI package) when the extra names nothing
        return f"pip install -c {IMAGE_CONSTRAINTS} " + " ".join(f"'{r}'" for r in reqs)
    return f"{pip(from_repository=True)} install -c requirements.lock -e " + (f"'.[{extra}]'" if extra else ".")


def install_hint(extra: str) -> str:
    """'install it from the repository root with: <command>': the one wording of every install hint
    (in the container image: 'install it in this container with: <command>')."""
    if _in_image():
        return f"install it in this container with: {extra_install(extra)}"
    return f"install it from the repository root with: {extra_install(extra)}"


class ProximaError(Exception):
    """The base of the errors Proxima raises for what a user can change (a config, an env, a checkpoint,
    a run directory): ``except proxima.ProximaError`` in a sweep catches each refused run, not a bug."""


class ConfigError(ProximaError, ValueError):
    """A config value a user must change; the message names the field and what to do.

    ``fields``: the fields a line names other than by its start (``--num-envs``), where it is about
    several (one batch larger than --total-timesteps), for the CLI to say which came from a file."""

    fields: tuple = ()


def check_switch(value: Any, call: str, name: str) -> bool:
    """``value`` as a bool, or a ConfigError naming ``call``'s argument ``name``: a string is always true, so
    ``overwrite='False'`` moved a run aside and ``trust_env='False'`` trusted a module env without a word.
    Taken: a bool, numpy's bool and the ints 0 and 1 (as PPOConfig's switches take them), and a numpy array or
    torch tensor of one element holding one of those (``torch.tensor(True)``); a float or another int is refused."""
    import sys

    np, torch = sys.modules.get("numpy"), sys.modules.get("torch")  # one not imported: none of its values here
    arrays = ((np.generic, np.ndarray) if np is not None else ()) + ((torch.Tensor,) if torch is not None else ())
    held = value
    if arrays and isinstance(value, arrays):
        try:  # a meta or nested tensor has no value to read: torch's own error, refused below instead
            masked = np is not None and np.ma.is_masked(value)  # a masked-out True holds no value
            if not masked and (value.numel() if hasattr(value, "numel") else value.size) == 1:
                held = value.item()  # np.bool_ -> bool, torch.tensor(1) -> 1, np.float64 -> float (refused below)
        except (RuntimeError, TypeError, ValueError, NotImplementedError):
            pass
    if isinstance(held, bool) or (type(held) is int and held in (0, 1)):
        return bool(held)
    try:  # the refusal is one line whatever the value's repr does (a quantized tensor's spans lines, another raises)
        shown = " ".join(repr(value).split())
    except Exception:
        shown = f"<{type(value).__name__}>"
    raise ConfigError(f"{call}: {name}={shown}: must be True or False")


def _f(default: Any, doc: str, **kw: Any) -> Any:
    if isinstance(default, (list, dict, tuple)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": doc, **kw})
    return field(default=default, metadata={"help": doc, **kw})


#: what --compile and --amp bf16 did to small MLPs' training speed on a CPU, without a figure: the runs
#: against today's eager are in no recorded table (docs/performance.md, "When each switch helps"). The
#: help below, train's and bench's notes (trainer._speed_clause) and doctor's hints say it in these words
CPU_COMPILE_SPEED = "compiled small MLPs trained slower than eager in our runs (docs/performance.md)"
CPU_BF16_SPEED = "small MLPs trained slower in bf16 than in fp32 in our runs (docs/performance.md)"


@dataclass
class PPOConfig:
    """Everything a PPO run needs. Defaults are the classic-control settings of docs/ppo_notes.md."""

    # --- environment ---
    env_id: str = _f("CartPole-v1", "Environment: a Gymnasium id (CartPole-v1), module:ClassName of your own gymnasium.Env, or module:EnvId (imports module, which registers EnvId with Gymnasium).")
    backend: str = _f("auto", "Env implementation: auto (native torch env when one exists, EnvPool for Atari ids like Pong-v5 when installed), native, gymnasium, or envpool (Atari).", choices=("auto", "native", "gymnasium", "envpool"))
    vector: str = _f("sync", "Gymnasium vectorization: sync (one process) or async (one subprocess per env).", choices=("sync", "async"))
    num_envs: int = _f(4, "Parallel environments N (per process).")
    env_kwargs: dict = _f({}, "Keyword arguments of the env's constructor as JSON, e.g. '{\"continuous\": true}' (Gymnasium envs and native module:Class envs, whose num_envs, device and seed come from --num-envs, --device and --seed; recorded in config.yaml).", metavar="JSON")
    # --- rollout / optimisation ---
    total_timesteps: int = _f(500_000, "Environment steps to train for, counted over all envs and processes.")
    num_steps: int = _f(128, "Steps T per env per rollout; the batch is T x N (x processes).")
    lr: float = _f(2.5e-4, "Adam learning rate (eps 1e-5).")
    anneal_lr: bool = _f(True, "Anneal the learning rate linearly to 0 over the run.")
    gamma: float = _f(0.99, "Discount factor, in (0, 1].")
    gae_lambda: float = _f(0.95, "GAE lambda, in [0, 1].")
    num_minibatches: int = _f(4, "Minibatches per epoch; must divide the batch T x N.")
    update_epochs: int = _f(4, "Epochs over each batch.")
    norm_adv: bool = _f(True, "Normalize advantages per minibatch.")
    clip_coef: float = _f(0.2, "PPO clip epsilon for the surrogate (and the value loss, unless vf_clip_coef is set).")
    clip_vloss: bool = _f(True, "Clip the value loss (CleanRL's detail 9): each update moves a sample's value at most vf_clip_coef from the rollout's.")
    vf_clip_coef: Optional[float] = _f(None, "Value clip range with clip_vloss, in the value's (return's) units: with returns in the hundreds, 0.2 barely lets the value move per update (none = the policy's clip_coef, as CleanRL; SB3's clip_range_vf range, but in CleanRL's max of the clipped and unclipped errors, where SB3 takes the clipped error alone).")
    ent_coef: float = _f(0.01, "Entropy bonus coefficient.")
    vf_coef: float = _f(0.5, "Value loss coefficient.")
    max_grad_norm: float = _f(0.5, "Global gradient-norm clip (torch.nn.utils.clip_grad_norm_, as CleanRL and SB3 always clip): the largest L2 norm of all the agent's gradients together per minibatch step; a huge value such as 1e30 leaves them unclipped.")
    target_kl: Optional[float] = _f(None, "Stop the epoch loop after the minibatch whose approx_kl exceeds this; that minibatch's step is kept, as CleanRL's per-epoch check keeps its epoch's (none = never). SB3 stops at approx_kl > 1.5 x its target_kl: to match SB3's target_kl T, give 1.5*T.")
    bootstrap_truncation: bool = _f(True, "Bootstrap truncated episodes from V(final_obs); --no-bootstrap-truncation gives ppo2's behaviour.")
    # --- network / normalization ---
    hidden_sizes: list = _f([64, 64], "Hidden layer widths of the actor and of the critic MLP (separated by commas or spaces), on the MLP encoder or a Dict's encoders; no effect with the CNN encoder of a single image observation (Atari, PixelQuadrant-v0), whose actor and critic are linear heads on its 512 features.")
    activation: str = _f("tanh", "Hidden activation of the actor and critic MLP: tanh or relu; no effect with the CNN encoder of a single image observation (linear heads; the CNN uses ReLU).", choices=("tanh", "relu"))
    log_std_init: float = _f(0.0, "Initial log std of a Box action's Normal, learned from there (SB3's log_std_init; 0: std 1, CleanRL's; -2: std 0.14). Box actions only (refused for others); one value for every member of a --seeds population (not swept); --init-from starts from the checkpoint's.")
    encoder: str = _f("auto", "Observation encoder: cnn (Nature CNN, for uint8 image observations), mlp, or auto (cnn when the observation holds images of at least 36x36, else mlp); config.yaml records the one used.", choices=("auto", "cnn", "mlp"))
    norm_obs: bool = _f(False, "Running observation normalization, clipped to [-clip_obs, clip_obs].")
    norm_reward: bool = _f(False, "Scale rewards by the std of the running discounted return, clipped to [-clip_reward, clip_reward].")
    clip_obs: float = _f(10.0, "Clip bound of normalized observations.")
    clip_reward: float = _f(10.0, "Clip bound of scaled rewards (with --norm-reward only; a huge value such as 1e30 leaves them unclipped).")
    # --- run ---
    seed: int = _f(1, "Random seed (envs, network init, sampling).")
    device: str = _f("cpu", "Torch device: cpu, cuda, cuda:1, or auto (cuda when a tiny op runs there, else cpu: with a note when a GPU is visible but fails; config.yaml keeps auto, so a resume picks again on its machine).")
    threads: int = _f(1, "CPU threads for the learner. With 2 or more on the CPU, a discrete-action MLP agent's actor and critic run side by side on two threads for batches of 2,048 rows or more (1.34x, later 1.31x, the training steps/s of 1 thread at 4,096 CartPole envs on a 2-core AVX-512 AMD EPYC, benchmarks/results/threads-cpu.md; at 2, the same numbers as 1 thread), each with threads // 2 intra-op threads; other agents use them as torch intra-op threads, which on small batches can be tens of times slower than 1 thread when other processes share the cores (train and bench say so in a note).")
    flush_denormal: bool = _f(True, "Flush denormal floats to zero on CPU (x86 FTZ/DAZ, as XLA does): arithmetic on values below ~1e-38 is many times slower and changes nothing that matters to PPO.")
    keep_host_memory: bool = _f(True, "Keep freed tensor memory in the process (glibc malloc; CPU runs) instead of returning it to the OS, from which every new large tensor would page-fault back in (at 4,096 CartPole envs 9,122 page faults an iteration without it against 2 with it; 1.12x training steps/s before the CPU MLP kernel, 1.05x (0.64-1.19) with it: benchmarks/results/hostmem-cpu.md). The process holds its peak memory until it exits.")
    deterministic: bool = _f(True, "Reproducible numbers: torch deterministic algorithms on CUDA, and with --compile (CPU too) inductor's random numbers drawn from torch's generator, so a compiled run samples what the eager run samples. Eager CPU runs are bit-identical for a fixed thread count either way.")
    compile: bool = _f(False, f"torch.compile the acting step and the update step. On a CPU {CPU_COMPILE_SPEED}, and the first launch compiles for about a minute: measure with proxima bench ENV_ID --compile.")
    compile_mode: str = _f("default", "torch.compile mode (only with --compile). reduce-overhead adds only CUDA graphs: on a CPU it compiles in the default mode (config.yaml keeps the mode asked).", choices=("default", "reduce-overhead", "max-autotune"))
    cudagraphs: bool = _f(False, "Capture rollout and update steps as CUDA graphs (CUDA only).")
    amp: str = _f("none", f"Mixed precision for forward passes: none, bf16 or fp16 (fp16 uses a GradScaler, CUDA only). On a CPU {CPU_BF16_SPEED}.", choices=("none", "bf16", "fp16"))
    run_dir: Optional[str] = _f(None, "Run directory (default runs/<env>__<seed>__<time>).")
    init_from: Optional[str] = _f(None, "Start a new run from the weights (and --norm-obs statistics) of this checkpoint, or of a run directory's newest: fresh optimizer, learning-rate schedule, counters and RNGs (fine-tuning, training on at another --lr). The spaces and the network (--hidden-sizes, --activation, encoder, --norm-obs) must be the checkpoint's. none: a fresh network.", metavar="PATH")
    checkpoint_every: int = _f(50, "Write a checkpoint every N iterations (0: none by iteration count; --checkpoint-minutes and the end of the run still write them).")
    checkpoint_minutes: float = _f(10.0, "Also write a checkpoint when this many minutes have passed since the last one (0: off).")
    keep_checkpoints: int = _f(3, "Keep the last K periodic checkpoints (0: keep every one).")
    stop_return: Optional[float] = _f(None, "Stop training early once the mean return of the last --stop-episodes training episodes (the sampling policy's, over all envs and processes) reaches this value; the run then ends as at --total-timesteps (final checkpoint, evaluation). none: train for --total-timesteps. Single runs: a population trains every member for --total-timesteps.")
    stop_episodes: int = _f(20, "Episodes --stop-return averages over: the fewest recent iterations that hold at least this many.")
    eval_episodes: int = _f(10, "Episodes of the deterministic policy evaluated at the end, and at each --eval-every (0: skip).")
    eval_every: int = _f(0, "Also evaluate every N env steps during training: eval/* in TensorBoard and metrics.csv, the best policy kept as checkpoints/best.pt (0: off).")
    progress: bool = _f(True, "Show a progress bar.")
    debug_checks: bool = _f(False, "Validate every action and observation against the spaces (slow).")
    plot: bool = _f(False, "Write curve.png into the run directory at the end.")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(PPOConfig)}


def attributes_doc(cls) -> str:
    """An "Attributes:" section of a config dataclass's fields, one line each (name (type): help; default),
    from each field's metadata["help"], the text --help shows, in field words (python_words): help(PPOConfig) and
    Jupyter's ``?`` show it too."""
    lines = ["", "", "Attributes:"]
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        lines.append(f"    {f.name} ({kind}, default {default!r}): {python_forms(f.name, python_words(f.metadata.get('help', '')))}")
    return "\n".join(lines)


#: a field's help in the words of the command line and a YAML file, and those of a PPOConfig built in Python
#: (python_forms), where a dict, a list and None are given as such: PPOConfig refuses the text forms
PYTHON_FORMS = (
    (" as JSON, e.g. '{\"continuous\": true}'", " as a dict, e.g. {'continuous': True}"),
    (" (separated by commas or spaces)", " (a list of ints, e.g. [64, 64])"),
)


def python_forms(name: str, text: str) -> str:
    """Field ``name``'s help ``text`` with the value forms a flag takes written as Python's: a JSON object
    as a dict, widths separated by commas as a list of ints, ``none`` as None (an optional field's)."""
    for flag_form, python_form in PYTHON_FORMS:
        text = text.replace(flag_form, python_form)
    if name in OPTIONAL_NUMBERS or name in PATH_FIELDS:
        text = re.sub(r"\bnone\b", "None", text)
    return text


def python_expected(name: str) -> str:
    """expected_text in the words of a PPOConfig built in Python: None, never the flags' none (amp's
    choice 'none' is a string, and stays one)."""
    if name in OPTIONAL_NUMBERS:
        return "a number or None"
    if name in PATH_FIELDS:
        return re.sub(r"\bnone\b", "None", expected_text(name))
    return expected_text(name)



class UnknownFieldError(ConfigError, TypeError):
    """``PPOConfig(learning_rate=...)``: a ConfigError with the field meant, and still the TypeError
    that an unexpected keyword argument was before."""


#: the population flags of ``proxima train``, which a Python caller may take for PPOConfig keywords
POPULATION_FLAGS = {"seeds": "--seeds 1-3", "sweep": "--sweep lr=1e-3,3e-4"}
#: the same, as proxima.train_population's arguments
POPULATION_ARGS = {"seeds": "seeds=range(1, 4)", "sweep": "sweep={'lr': [1e-3, 3e-4]}"}


def _refuse_unknown_keywords(init):
    @functools.wraps(init)  # inspect.signature (Jupyter's Shift-Tab) still shows every field
    def __init__(self, *args, **kwargs):
        unknown = [name for name in kwargs if name not in FIELDS]
        population = [name for name in unknown if name in POPULATION_FLAGS]
        if population:  # difflib says 'seed', which would train one member, silently: wherever the keyword stands
            name = population[0]
            others = [n for n in unknown if n != name]
            more = f" (also not PPOConfig fields: {', '.join(others)})" if others else ""
            raise UnknownFieldError(f"PPOConfig({name}={_short_repr(kwargs[name])}): not a PPOConfig field: a population's "
                                    f"{name} is an argument of proxima.train_population(config, {POPULATION_ARGS[name]}) "
                                    f"(proxima train ENV_ID {POPULATION_FLAGS[name]}, docs/populations.md){more}")
        if unknown:
            name = unknown[0]
            more = f" (and {len(unknown) - 1} more: {', '.join(unknown[1:])})" if len(unknown) > 1 else ""
            note = foreign_value_note(name, kwargs[name], kwargs)
            raise UnknownFieldError(f"PPOConfig({name}={_short_repr(kwargs[name])}): not a PPOConfig field"
                                    f"{f' ({note})' if note else did_you_mean(name)}{more}")
        init(self, *args, **kwargs)
    return __init__


PPOConfig.__init__ = _refuse_unknown_keywords(PPOConfig.__init__)

#: fields a resumed run may change (docs/reliability.md): how long it runs, how often it saves and
#: evaluates, what it prints, where and how it runs (compile and cudagraphs are execution switches:
#: a checkpoint moves between eager, compiled and graphed runs, and a graphed run resumes on a CPU).
#: Every other field is the run's identity; changing it on resume would make the checkpoint's state
#: describe a different run, so resume refuses it.
RESUME_SAFE = ("total_timesteps", "stop_return", "stop_episodes", "checkpoint_every", "checkpoint_minutes", "keep_checkpoints", "eval_episodes", "eval_every",
               "progress", "plot", "threads", "keep_host_memory", "device", "debug_checks", "compile", "compile_mode", "cudagraphs",
               "run_dir")

#: what a field a run's recorded config lacks (a checkpoint or config.yaml of an older Proxima, from
#: before the field) means: the value that version ran as, which need not be today's default. A
#: resume continues the run as it trained, and refuses a flag only against what the run really did
#: (a run from before --flush-denormal never flushed, so --no-flush-denormal changes nothing).
#: Resume-safe fields too: the run goes on as it ran until a flag changes them. Every field added
#: after the first version is here (tests/unit/test_review31_oldckpt.py holds the table to that).
ABSENT_MEANS = {
    "env_kwargs": {},  # envs were built without keyword arguments
    "encoder": "mlp",  # flat-Box observations only, always an MLP (checkpoint._agent_maker reads it too)
    "flush_denormal": False,  # torch's default: denormals kept
    "keep_host_memory": False,  # glibc's default: freed memory returned to the OS
    "checkpoint_minutes": 0.0,  # checkpoints by iteration count only
    "stop_return": None,
    "stop_episodes": 20,  # read only with stop_return
    "eval_every": 0,
    "init_from": None,  # a fresh network
    "vf_clip_coef": None,  # the value loss clipped with clip_coef
    "log_std_init": 0.0,  # a Box action's log std started at 0 (std 1)
}


def recorded_config(values: dict, source: str) -> PPOConfig:
    """The config a run recorded (a checkpoint's ``config``, its config.yaml): ``values`` as from_dict
    reads them, a field they lack taken from ABSENT_MEANS rather than today's default."""
    import copy

    base = dataclasses.replace(PPOConfig(), **{k: copy.deepcopy(v) for k, v in ABSENT_MEANS.items()})
    return from_dict(values, base, source=source)


#: other names of fields, accepted on the command line (--learning-rate for --lr) and as a YAML key
#: (SB3's and the zoo's learning_rate: means there what lr means here); a file giving both is refused
ALIASES = {"learning_rate": "lr"}

#: other spellings of SB3's batch_size and CleanRL's minibatch_size: a minibatch's size in steps as they are
BATCH_SIZE_SPELLINGS = ("batchsize", "mini_batch_size", "minibatchsize", "mini_batchsize")

#: Stable-Baselines3's and CleanRL's names (a few of baselines' ppo2) of PPO fields: suggested, never
#: accepted (unlike ALIASES), as each means there only roughly what its field means here; difflib alone
#: suggests a wrong field for some (clip_range -> clip_reward, policy_kwargs -> env_kwargs)
FOREIGN_NAMES = {
    "n_steps": "num_steps", "nsteps": "num_steps", "n_envs": "num_envs", "n_epochs": "update_epochs",
    "noptepochs": "update_epochs", "num_epochs": "update_epochs", "batch_size": "num_minibatches",
    "minibatch_size": "num_minibatches", "nminibatches": "num_minibatches", "clip_range": "clip_coef",
    "cliprange": "clip_coef", "clip_range_vf": "vf_clip_coef", "lam": "gae_lambda", "normalize_advantage": "norm_adv",
    "net_arch": "hidden_sizes", "policy_kwargs": "hidden_sizes", "activation_fn": "activation",
    "torch_deterministic": "deterministic", "cuda": "device", "total_steps": "total_timesteps",
    "n_timesteps": "total_timesteps", "normalize": "norm_obs", "env": "env_id", "gym_id": "env_id", "exp_name": "run_dir",
    # SB3's EvalCallback and CheckpointCallback: difflib alone said eval_every with no word of the units
    "eval_freq": "eval_every", "save_freq": "checkpoint_every",
    # batch_size as typed elsewhere (batch-size is batch_size once dashes are read as underscores)
    **{name: "num_minibatches" for name in BATCH_SIZE_SPELLINGS},
}

#: what to give where a foreign name's value is not its field's (SB3's batch_size is a minibatch's size
#: in steps: copied into num_minibatches, it would train another run than the one meant). One text per
#: name for a config file and the command line alike: ``{field}`` and ``{field=value}`` are written in
#: field words (FOREIGN_NOTES) or flag words (cli.FOREIGN_FLAG_NOTES) by foreign_note, so the two cannot drift
FOREIGN_NOTE_TEMPLATES = {
    "batch_size": "it counts minibatches: {num_envs} x {num_steps} / your minibatch size",
    "minibatch_size": "it counts minibatches: {num_envs} x {num_steps} / your minibatch size",
    **{name: "it counts minibatches: {num_envs} x {num_steps} / your minibatch size" for name in BATCH_SIZE_SPELLINGS},
    "clip_range_vf": "{vf_clip_coef=X} with {clip_vloss=True} (the default) clips differently: CleanRL's max of the "
                     "clipped and unclipped squared errors, where SB3 takes the clipped one alone; SB3's "
                     "clip_range_vf=None is {clip_vloss=False}",
    "policy_kwargs": "net_arch=[64, 64] is {hidden_sizes=[64, 64]}, activation_fn is {activation='tanh' or 'relu'}, "
                     "log_std_init is {log_std_init=X}; ortho_init has no counterpart (layers are initialized "
                     "orthogonally): drop it, results will differ where it was set",
    "cuda": "{device='cuda'}",
    "normalize": "the zoo's normalize: true is {norm_obs=True} and {norm_reward=True}",
    "exp_name": "the run's directory, by default runs/<env>__<seed>__<time>",
    "eval_freq": "SB3's EvalCallback eval_freq counts steps of each env; {eval_every} counts all envs' steps: "
                 "eval_freq x {num_envs}",
    "save_freq": "SB3's CheckpointCallback save_freq counts steps of each env; {checkpoint_every} counts iterations "
                 "of {num_envs} x {num_steps} steps: save_freq / {num_steps}; {keep_checkpoints=0} keeps every "
                 "checkpoint (the default keeps the last 3)",
    "net_arch": "one list for both the actor's and the critic's hidden layers, e.g. {hidden_sizes=[64, 64]}; separate "
                "pi/vf sizes (dict(pi=[..], vf=[..])) are not supported",
}

_SETTING = re.compile(r"\{(\w+)(?:=([^{}]*))?\}")


def _flag_words(field: str, value: Optional[str]) -> str:
    """``{field=value}`` as typed on the command line: --flag (True), --no-flag (False), --flag 64,64
    ([64, 64]), --flag tanh or relu ('tanh' or 'relu'), --flag X (a placeholder)."""
    flag = "--" + field.replace("_", "-")
    if value is None or value == "True":
        return flag
    if value == "False":
        return "--no-" + flag[2:]
    words = [v.strip().strip("'\"") for v in value.split(" or ")]
    return f"{flag} " + " or ".join(w[1:-1].replace(" ", "") if w.startswith("[") else w for w in words)


def foreign_note(template: str, flags: bool = False) -> str:
    """A FOREIGN_NOTE_TEMPLATES text with its ``{field}`` / ``{field=value}`` settings in field words
    (``vf_clip_coef=X``, a config file's or a script's) or, ``flags``, in flag words (``--vf-clip-coef X``)."""
    if flags:
        return _SETTING.sub(lambda m: _flag_words(m[1], m[2]), template)
    return _SETTING.sub(lambda m: m[1] if m[2] is None else f"{m[1]}={m[2]}", template)


#: FOREIGN_NOTE_TEMPLATES in field words: a config file's or a script's unknown name
FOREIGN_NOTES = {name: foreign_note(text) for name, text in FOREIGN_NOTE_TEMPLATES.items()}

#: SB3's off-policy algorithms' settings, which a zoo file of DQN/SAC/TD3 holds
OFF_POLICY_NAMES = ("learning_starts", "gradient_steps", "train_freq", "buffer_size", "tau", "target_update_interval",
                    "exploration_fraction", "exploration_initial_eps", "exploration_final_eps", "optimize_memory_usage",
                    "replay_buffer_class", "replay_buffer_kwargs", "policy_delay", "target_policy_noise",
                    "target_noise_clip", "action_noise")

#: SB3's and the zoo's settings that no field here stands for, with what Proxima does instead (cli's
#: --use-sde etc. say the same: difflib sent --use-sde to --seed)
FOREIGN_UNSUPPORTED = {
    "use_sde": "no gSDE here: a Box action is drawn from a Normal whose log std is a learned parameter, "
               "independent of the state; drop it",
    "sde_sample_freq": "no gSDE here (see use_sde); drop it",
    "env_wrapper": "no wrapper field: wrap the env in your own gymnasium.Env class and train it as ENV_ID "
                   "module:ClassName; drop it",
    "frame_stack": "Atari ids always stack the last 4 frames (docs/atari.md); for another env stack them in your own "
                   "gymnasium.Env class, trained as ENV_ID module:ClassName; drop it",
    "ortho_init": "layers are always initialized orthogonally (CleanRL's layer_init; SB3's ortho_init=True): an entry's "
                  "ortho_init: false starts from other weights, so results will differ; drop it",
    # difflib sent verbose to overwrite, a flag that moves the run directory aside
    "verbose": "no verbosity setting: drop it; training prints its progress, --quiet (train(quiet=True)) prints "
               "less, --no-progress (progress: false) drops the progress bar",
    # SB3's DQN/SAC/TD3 settings: difflib sent learning_starts to lr and gradient_steps to num_steps
    **{name: "an off-policy setting (SB3's DQN, SAC, TD3: replay buffer, target network, exploration schedule) that "
             "PPO, on-policy, has no use for; drop it" for name in OFF_POLICY_NAMES},
}

_TRACKING = ("no Weights & Biases here: every run writes TensorBoard events and metrics.csv into its run directory "
             "(tensorboard --logdir runs)")

_HUB = "no Hugging Face Hub upload here: upload the run directory (its checkpoints) yourself"

#: SB3's and CleanRL's settings of logging and video that no field or flag of train stands for: what to do
#: instead (cli's --track etc., a file's track:, PPOConfig(track=...) alike)
FOREIGN_ADVICE = {
    "capture_video": "to record an episode of the trained policy: proxima eval RUN_DIR --video FILE.mp4",
    "video": "to record an episode of the trained policy: proxima eval RUN_DIR --video FILE.mp4",  # eval's, not train's
    "track": _TRACKING, "wandb_project_name": _TRACKING, "wandb_entity": _TRACKING,
    "tensorboard_log": "every run writes its TensorBoard events into its run directory (--run-dir DIR)",
    # CleanRL's ppo*.py: difflib sent --save-model to --compile-mode and --gae to --gae-lambda
    "save_model": "every run writes checkpoints into its run directory (a final one, and one each "
                  "--checkpoint-every iterations), save_model or not",
    "upload_model": _HUB, "hf_entity": _HUB,
    "gae": "GAE is always on (CleanRL's gae: false is --gae-lambda 1.0 here)",
}

#: FOREIGN_ADVICE's switches given a false value (--capture-video False, a dump's track: false): nothing to turn off here
FOREIGN_OFF_ADVICE = {"capture_video": "no video is recorded while training", "track": "nothing is sent to Weights & Biases",
                      "gae": "GAE is always on: CleanRL's gae: false (its plain discounted returns) is "
                             "--gae-lambda 1.0 here (gae_lambda: 1.0 in a file)"}

#: SB3's policy classes, the value of every zoo entry's ``policy:`` (a `proxima rlhf` file's policy is a model)
SB3_POLICY_NOTE = ("SB3's policy class: drop it; the policy here is an MLP actor-critic sized by hidden_sizes and "
                   "activation, encoder: cnn for CnnPolicy")

#: CleanRL's settings that its ppo.py computes from others at startup (a dump of its args holds them):
#: never settings to copy. num_updates is its older name of num_iterations; difflib sent them to
#: num_envs and num_steps. One text for a file and the command line (foreign_note's words)
DERIVED_NOTE_TEMPLATES = {
    name: "derived ({total_timesteps} / ({num_envs} x {num_steps})): drop it" for name in ("num_iterations", "num_updates")}
DERIVED_NOTES = {name: foreign_note(text) for name, text in DERIVED_NOTE_TEMPLATES.items()}

#: keys that only a dump of CleanRL's args holds (vars(args) as YAML): such a file's batch_size is
#: CleanRL's num_envs x num_steps, not SB3's minibatch size
CLEANRL_KEYS = ("exp_name", "torch_deterministic", "minibatch_size", "num_iterations", "num_updates",
                "wandb_project_name", "wandb_entity", "capture_video")


def _cleanrl_file(values: dict) -> bool:
    """Whether ``values`` look like a dump of CleanRL's args: a key only it has (CLEANRL_KEYS), or a
    batch_size that is num_envs x num_steps (CleanRL's derived batch, where SB3's is a minibatch)."""
    if any(key in values for key in CLEANRL_KEYS):
        return True
    sizes = [values.get(key) for key in ("batch_size", "num_envs", "num_steps")]
    return all(_whole_number(v) for v in sizes) and sizes[0] == sizes[1] * sizes[2]


def _whole_number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _yaml_word(value: Any) -> str:
    """``value`` as a YAML line writes it: true, 0.2, [64, 64]."""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)


def _python_literal(value: Any) -> Any:
    """A zoo entry's Python text (``"dict(net_arch=[64, 64], activation_fn=nn.ReLU)"``,
    ``"{'norm_obs': True}"``) read without running it: a dict of its keywords, with each value a literal,
    or a dotted name as text (``nn.ReLU``); a mapping given as YAML as it is; None for anything else.
    Read with ast, never eval, and only short text: it comes from a file a stranger may have written."""
    import ast

    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or len(value) > 2000:
        return None
    try:
        tree = ast.parse(value.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None

    def read(node):
        if isinstance(node, (ast.Name, ast.Attribute)):
            return ast.unparse(node)  # nn.ReLU, th.nn.Tanh: a name, kept as text
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
            return {k.arg: read(k.value) for k in node.keywords if k.arg is not None}
        if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
            return {k.value: read(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, (ast.List, ast.Tuple)):
            return [read(v) for v in node.elts]
        return ast.literal_eval(node)

    try:
        read_value = read(tree)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
    return read_value if isinstance(read_value, dict) else None


def _activation_of(name: Any) -> Optional[str]:
    """``nn.ReLU`` (torch's class, as SB3's activation_fn names it) as the activation field's word: relu;
    None for one with no counterpart (nn.ELU) or no name."""
    if not isinstance(name, str):
        return None
    word = name.rsplit(".", 1)[-1].lower()
    return word if word in FIELDS["activation"].metadata.get("choices", ()) else None


#: the widest hidden layer a net_arch is echoed with as hidden_sizes: the widest a checkpoint's network is rebuilt
#: with (checkpoint._MAX_WIDTH); a wider one (a 1,900-digit width) is no setting to copy
MAX_HIDDEN_WIDTH = 2**20
#: the most hidden layers a run takes: the most a checkpoint's network is rebuilt with (checkpoint._MAX_LAYERS)
MAX_HIDDEN_LAYERS = 64


def _widths(value: Any) -> bool:
    """Whether ``value`` is a list of hidden layer widths to echo as hidden_sizes: 1 to MAX_HIDDEN_WIDTH each."""
    return isinstance(value, list) and bool(value) and all(_whole_number(v) and v <= MAX_HIDDEN_WIDTH for v in value)


def _sizes_note(net_arch: Any) -> Optional[str]:
    """What SB3's net_arch is here: ``hidden_sizes: [256, 256]``, or separate pi/vf sizes (a dict, or
    SB3's older ``[dict(pi=.., vf=..)]``) saying that one list sizes both; None for no such value."""
    if isinstance(net_arch, list) and len(net_arch) == 1 and isinstance(net_arch[0], dict):
        net_arch = net_arch[0]
    if _widths(net_arch):
        return f"hidden_sizes: {net_arch}"
    if isinstance(net_arch, dict) and set(net_arch) <= {"pi", "vf"} and net_arch:
        pi, vf = net_arch.get("pi"), net_arch.get("vf")
        if pi == vf and _widths(pi):
            return f"hidden_sizes: {pi} (pi and vf alike)"
        if pi == vf:  # no widths to compare: not "separate" sizes
            return None
        return (f"separate pi/vf sizes ({_short_word(net_arch)}) are not supported: one hidden_sizes list sizes both the "
                "actor's and the critic's hidden layers")
    return None


def _activation_note(name: Any) -> Optional[str]:
    meant = _activation_of(name)
    if meant:
        return f"activation: {meant}"
    if isinstance(name, str):
        return f"{_cut(name)} has no counterpart: activation is tanh or relu"
    return None


#: policy_kwargs' keys with no field here, shorter than FOREIGN_UNSUPPORTED's (said inside policy_kwargs' note)
POLICY_KWARGS_UNSUPPORTED = {
    "ortho_init": "not supported (layers are always initialized orthogonally; false: results will differ): drop it",
}


def _policy_kwargs_note(value: Any) -> Optional[str]:
    """policy_kwargs' own values as fields (``hidden_sizes: [256, 256], activation: relu``), each key with
    no counterpart to drop; None where the value cannot be read (the general note stands)."""
    kwargs = _python_literal(value)
    if not kwargs:
        return None
    said, drop = [], []
    for key, item in kwargs.items():
        if key == "net_arch":
            said.append(_sizes_note(item) or f"net_arch {_short_word(item)}: hidden_sizes is one list of widths")
        elif key == "activation_fn":
            said.append(_activation_note(item) or "activation: tanh or relu")
        elif key == "log_std_init":  # a field of its own: the Normal head's initial log std
            said.append(f"log_std_init: {_short_word(item)}")
        elif key in POLICY_KWARGS_UNSUPPORTED:
            said.append(f"{key} {_short_word(item)}: {POLICY_KWARGS_UNSUPPORTED[key]}")
        else:
            drop.append(_cut(str(key)))
    if drop:
        shown = drop if len(drop) <= 8 else [*drop[:7], f"and {len(drop) - 7} more"]
        said.append(f"{', '.join(shown)}: no counterpart here; drop {'them' if len(drop) > 1 else 'it'}")
    return "; ".join(said)


def _normalize_note(value: Any) -> Optional[str]:
    """The zoo's normalize as norm_obs and norm_reward, following its value: true (both), false (neither:
    PPOConfig's defaults), or VecNormalize's keywords (``"{'norm_obs': True, 'norm_reward': False}"``,
    each left out true, as VecNormalize's defaults), its clips as clip_obs and clip_reward."""
    if isinstance(value, bool):
        if value:
            return "normalize: true is norm_obs: true and norm_reward: true"
        return ("normalize: false is norm_obs: false and norm_reward: false, PPOConfig's defaults: drop it (give them "
                "where a preset turns them on)")
    kwargs = _python_literal(value)
    if kwargs is None:
        return None
    words = [f"norm_obs: {_yaml_word(bool(kwargs.get('norm_obs', True)))}",
             f"norm_reward: {_yaml_word(bool(kwargs.get('norm_reward', True)))}"]
    words += [f"{key}: {_short_word(kwargs[key])}" for key in ("clip_obs", "clip_reward") if key in kwargs]
    note = f"normalize: {_short_repr(value) if isinstance(value, str) else _short_word(value)} is {', '.join(words)}"
    return note + ("; its gamma is the run's gamma" if "gamma" in kwargs else "")


def _schedule_note(key: str, value: Any) -> Optional[str]:
    """A schedule (``lin_0.2``) under SB3's clip names or learning_rate: the number to give, and what stands
    for the schedule here (anneal_lr for the rate; nothing for a clip)."""
    if not (isinstance(value, str) and value.startswith("lin_")):
        return None
    field = ALIASES.get(key) or FOREIGN_NAMES.get(key, key)
    number = _cut(value[4:])
    if field == "lr":
        return f"lr: {number} with anneal_lr: true"
    if field in ("clip_coef", "vf_clip_coef"):
        return f"{field + '; ' if field != key else ''}no schedule for it here: {field}: {number}"
    return None


def _minibatches_here(values: dict, size: Any) -> Optional[int]:
    """num_minibatches for a minibatch of ``size`` steps in ``values``' batch (num_envs x num_steps or SB3's
    n_envs x n_steps): 1 where the size is the batch or more; None where the file does not say or it
    does not divide."""
    envs = values.get("num_envs", values.get("n_envs"))
    steps = values.get("num_steps", values.get("n_steps"))
    if not all(_whole_number(v) for v in (envs, steps, size)):
        return None
    batch = envs * steps
    return 1 if size >= batch else (batch // size if batch % size == 0 else None)


def value_note(key: Any, value: Any, values: dict) -> Optional[str]:
    """What to give for an unknown ``key`` where its value or the rest of the file says more than its
    name's note (FOREIGN_NOTES): CleanRL's derived keys in a dump of its args, the zoo's normalize and
    policy_kwargs as their values set, a schedule's number. None: the name's note stands."""
    if not isinstance(key, str):
        return None
    if key in DERIVED_NOTES:
        return DERIVED_NOTES[key]
    if nesting_depth(value) > MAX_NESTING:  # a Python value nested past the stack: its repr would recurse
        return None
    if key == "batch_size" and _cleanrl_file(values):
        return "derived (num_envs x num_steps): drop it"
    if key == "minibatch_size" and _cleanrl_file(values):
        size = values.get("minibatch_size")
        given = values.get("batch_size")
        count = given // size if _whole_number(given) and _whole_number(size) and given % size == 0 else \
            _minibatches_here(values, size)
        here = f" (= {count} here)" if count else ""
        give = "" if "num_minibatches" in values else f"; give num_minibatches{': ' + str(count) if count else ''}"
        return f"derived: num_minibatches = batch_size / minibatch_size{here}: drop it{give}"
    if key == "batch_size" or key in BATCH_SIZE_SPELLINGS:
        if _minibatches_here(values, value) != 1:  # the name's note's formula gives the count
            return None
        # the rollout or more (the zoo's MountainCarContinuous: 1 x 8 steps, 256): the formula would give a fraction;
        # in the names the file gave (Proxima's num_envs beside SB3's batch_size)
        envs, steps = ("num_envs" if "num_envs" in values else "n_envs"), ("num_steps" if "num_steps" in values else "n_steps")
        return f"num_minibatches: 1 here: it counts minibatches, 1 when batch_size >= {envs} x {steps}"
    if key == "normalize":
        return _normalize_note(value)
    if key == "policy_kwargs":
        return _policy_kwargs_note(value)
    if key == "net_arch":  # as inside policy_kwargs: widths, pi and vf alike; separate sizes keep the name's note
        note = _sizes_note(value)
        return note if note and note.startswith("hidden_sizes") else None
    if key == "activation_fn":
        return _activation_note(value)
    schedule = _schedule_note(key, value)
    if schedule and key in FOREIGN_NOTES:  # clip_range_vf: lin_0.2: the number, then how it clips
        return f"{schedule}; {FOREIGN_NOTES[key]}"
    return schedule


def from_dict(values: dict, base: Optional[PPOConfig] = None, source: str = "config") -> PPOConfig:
    """Build a config from a plain dict (preset YAML, config.yaml), rejecting unknown keys.

    Which source set each field is kept on the config (``source_of``), so a message about a value
    the user did not type can name where it came from (``--preset gpu``, the --config file)."""
    refused = unknown_attribute(base) if isinstance(base, PPOConfig) else None
    if refused is not None:  # dataclasses.replace would drop it: the run would train with the field's value
        raise refused
    cfg = dataclasses.replace(base) if base is not None else PPOConfig()
    sources = dict(getattr(base, "_sources", None) or {})
    typed_as = {ALIASES[key]: key for key in values if isinstance(key, str) and key in ALIASES}  # lr: learning_rate
    values = _aliases_read(values, source)
    unknown = [key for key in values if key not in FIELDS]
    # an rlhf file given to train keeps its one line below, which says where the file goes
    if len(unknown) > 1 and all(_zoo_entry(key, values[key]) for key in unknown):  # a whole zoo file: one entry is needed
        raise ConfigError(f"{source}: {', '.join(repr(key) for key in unknown)} are rl-zoo entries (env ids): keep your "
                          "env's, its keys at the top level of the file, and give the id as ENV_ID")
    if len(unknown) > 1 and not all(_rlhf_field(key) and key not in FOREIGN_NAMES for key in unknown):
        # a zoo entry holds several (n_envs, n_steps, batch_size, n_epochs, policy): all in one line
        raise ConfigError(f"{source}: unknown fields: {', '.join(_unknown_hint(key, values[key], values) for key in unknown)}"
                          f"{_values_to_change(values, typed_as)}")
    schedules = [f"{typed_as.get(key, key)}: {_cut(value)}{_foreign_value_hint(key, value)}" for key, value in values.items()
                 if key in FIELDS and isinstance(value, str) and _foreign_value_hint(key, value)]
    if not unknown and len(schedules) > 1:  # the zoo's lr and clip_range schedules: every change in one line
        raise ConfigError(f"{source}: schedules no field takes: {', '.join(schedules)}")
    for key, value in values.items():
        if key not in FIELDS:
            misplaced = _misplaced_key(key, value)
            if misplaced is not None:
                raise ConfigError(f"{source}: {misplaced}")
            if key == "policy" and _sb3_policy(value):  # every zoo entry's: not RLHFConfig's policy model
                raise ConfigError(f"{source}: unknown field 'policy': {value!r} is {SB3_POLICY_NOTE}")
            if key in FOREIGN_UNSUPPORTED:
                raise ConfigError(f"{source}: unknown field '{key}': {FOREIGN_UNSUPPORTED[key]}")
            note = value_note(key, value, values) or _cuda_in_file(key, value) or foreign_value_note(key, value, values)
            if note:  # the value's own translation (normalize: false, policy_kwargs' net_arch), CleanRL's derived keys
                raise ConfigError(f"{source}: unknown field '{key}' ({note})")
            if _rlhf_field(key) and key in FOREIGN_NAMES:  # SB3's batch_size, and RLHFConfig's: the file may be either's
                raise ConfigError(f"{source}: unknown field '{key}'{did_you_mean(key)}; it is also a `proxima rlhf` "
                                  "setting (RLHFConfig): a file of those goes to `proxima rlhf --config`")
            if _rlhf_field(key):  # a `proxima rlhf` file given to train: a close PPO name would mislead
                raise ConfigError(f"{source}: unknown field '{key}': it is a `proxima rlhf` setting (RLHFConfig), not "
                                  "a PPO one; give the file to `proxima rlhf --config`, or drop the line for `proxima train`")
            raise ConfigError(f"{source}: unknown field '{key}'{did_you_mean(str(key))}")  # YAML keys may be numbers or null
        try:
            setattr(cfg, key, coerce(key, value, source))
        except ConfigError as e:  # learning_rate: lin_0.001 is refused as the user wrote it, not as field 'lr'
            said = f"{source}: field '{key}' "
            if key in typed_as and str(e).startswith(said):
                e.args = (f"{source}: field '{typed_as[key]}' ({key}'s other name) {str(e)[len(said):]}", *e.args[1:])
            raise
        sources[key] = (source, getattr(cfg, key))
    cfg._sources = sources  # not a field: asdict/config.yaml leave it out
    # the other name a file gave a field by (lr: learning_rate): a refusal of the value names it so (cli._name_in_file)
    names = {name: key for name, key in (getattr(base, "_names_in_file", None) or {}).items() if name not in values}
    cfg._names_in_file = {**names, **typed_as}
    return cfg


def _values_to_change(values: dict, typed_as: dict) -> str:
    """``; and a value to change: learning_rate (lr: 0.001 with anneal_lr: true)``: the known keys of a file
    refused for its unknown ones whose value is a schedule no field takes (the zoo's lin_0.001), so the one
    line names every change; "" for none."""
    said = [f"{typed_as.get(key, key)} ({_schedule_note(key, value)})" for key, value in values.items()
            if key in FIELDS and _schedule_note(key, value)]
    if not said:
        return ""
    return f"; and {'a value' if len(said) == 1 else 'values'} to change: {', '.join(said)}"


def _aliases_read(values: dict, source: str) -> dict:
    """``values`` with ALIASES' keys as their fields (learning_rate: 3e-4 is lr: 3e-4), in the file's order;
    ConfigError for a file that gives a field under both names (which would win is a guess)."""
    for alias, name in ALIASES.items():
        if alias in values and name in values:
            raise ConfigError(f"{source}: both '{alias}' and '{name}' given ({alias} is {name}'s other name); keep one")
    return {ALIASES.get(key, key) if isinstance(key, str) else key: value for key, value in values.items()}


def _sb3_policy(value: Any) -> bool:
    """Whether ``value`` names one of SB3's policy classes (MlpPolicy, CnnPolicy, MultiInputPolicy)."""
    return isinstance(value, str) and value.endswith("Policy")


def foreign_value_note(key: Any, value: Any, values: dict) -> Optional[str]:
    """What to give for another library's unknown ``key`` (a file's, a PPOConfig keyword's): its value's
    note (value_note), SB3's policy class, a setting no field stands for (FOREIGN_UNSUPPORTED); None for
    another key, whose close field (did_you_mean, close_field) is the hint."""
    note = value_note(key, value, values)
    if note:
        return note
    if key == "policy" and _sb3_policy(value):
        return SB3_POLICY_NOTE
    if isinstance(key, str) and key in FOREIGN_UNSUPPORTED:
        return FOREIGN_UNSUPPORTED[key]
    if isinstance(key, str) and key in FOREIGN_OFF_ADVICE and (value is False or value is None):  # track: false
        return f"{FOREIGN_OFF_ADVICE[key]}; drop it"
    if isinstance(key, str) and key in FOREIGN_ADVICE:
        return f"{FOREIGN_ADVICE[key]}; drop it"
    return None


def _cuda_in_file(key: Any, value: Any) -> Optional[str]:
    """CleanRL's cuda (a dump of its args) as a file gives the device: ``device: cuda``, ``device: cpu`` for
    cuda: false; None for another key (FOREIGN_NOTES' device='cuda' is a script's words)."""
    if key not in ("cuda", "no_cuda"):
        return None
    return f"device: {'cuda' if (value is not False) == (key == 'cuda') else 'cpu'}"


def _unknown_hint(key: Any, value: Any, values: Optional[dict] = None) -> str:
    """``n_envs (num_envs)``: an unknown key with, in brackets, what to give instead (from_dict's line of several);
    ``values``: the whole file, whose other keys say what some keys mean (value_note)."""
    note = foreign_value_note(key, value, values or {key: value}) or _cuda_in_file(key, value)
    if note:
        hint = note
    elif _misplaced_key(key, value) is not None:
        hint = _misplaced_key(key, value)
    elif _rlhf_field(key) and key not in FOREIGN_NAMES:
        hint = "a `proxima rlhf` setting"
    else:
        close = close_field(str(key))
        note = FOREIGN_NOTES.get(str(key).strip().lstrip("-").replace("-", "_").lower())
        hint = (close + (f": {note}" if note else "")) if close else ""
    return f"{key} ({hint})" if hint else str(key)


def _flag_text(value: Any) -> Optional[str]:
    """``value`` as a flag's argument a user can paste (``1-3``, ``1,2,3``, ``0.001``), or None for a
    value no flag takes as written (a mapping, text with spaces or control characters)."""
    if isinstance(value, (list, tuple)):
        items = [_flag_text(v) for v in value]
        return ",".join(items) if items and None not in items and all("," not in v for v in items) else None
    if isinstance(value, bool) or value is None or isinstance(value, dict):
        return None
    text = str(value)
    return text if text and all(c.isprintable() and not c.isspace() for c in text) else None


def _misplaced_key(key: Any, value: Any) -> Optional[str]:
    """Why a key other tools' config files hold (Hydra's ``preset:``, a zoo's ``seeds:``, a preset
    file's ``config:`` nesting) is no field here, with where its setting goes; None for any other key.
    difflib alone sends ``sweep`` to 'seed' and says nothing of ``preset``."""
    if key == "preset":
        return f"'preset' is not a config field: pass --preset {_flag_text(value) or 'NAME'} on the command line"
    if key == "seeds":
        return f"'seeds' is a flag of train, not a config field: --seeds {_flag_text(value) or '1-3'}"
    if key == "sweep":
        flags = []
        if isinstance(value, dict) and value:  # {lr: [1e-3, 3e-4]}: --sweep lr=0.001,0.0003
            for name, values in value.items():
                text = _flag_text(values if isinstance(values, (list, tuple)) else [values])
                flags.append(f"--sweep {name}={text}" if isinstance(name, str) and text is not None else None)
        example = " ".join(flags) if flags and None not in flags else "--sweep lr=1e-3,3e-4"
        return f"'sweep' is a flag of train, not a config field: {example}"
    if key == "config" and isinstance(value, dict):
        return ("'config' is not a config field: put the fields at the top level (the preset files' config: nesting "
                "is not a config file's)")
    if _zoo_entry(key, value):
        return f"{_zoo_entry_is(key)}: an rl-zoo entry's keys go at the top level of the file; give the id as ENV_ID"
    return None


#: an env id as rl-zoo's hyperparameter files key their entries (CartPole-v1, ALE/Pong-v5, MiniGrid-Empty-5x5-v0)
_ENV_ID_KEY = re.compile(r"^(?:[A-Za-z][\w.-]*/)?[A-Za-z][\w.-]*-v\d+$")


def _zoo_entry(key: Any, value: Any) -> bool:
    """Whether ``key: value`` is an rl-zoo entry pasted as it is (``CartPole-v1:`` with its settings
    indented under it): a mapping (or nothing) under an env id, or under the zoo's ``atari`` entry."""
    if not isinstance(key, str) or not (value is None or isinstance(value, dict)):
        return False
    if key == "atari" or _ENV_ID_KEY.match(key):
        return True
    try:
        from gymnasium.envs.registration import registry
    except ImportError:
        return False
    return key in registry


def _zoo_entry_is(key: str) -> str:
    if key == "atari":
        return "'atari' is rl-zoo's entry for every Atari env id (e.g. Breakout-v5)"
    return f"'{key}' is an env id"


def _rlhf_field(key: Any) -> bool:
    """Whether ``key`` names a field of RLHFConfig (kl_coef, policy) that PPOConfig does not have."""
    if not isinstance(key, str):
        return False
    from .rlhf.config import FIELDS as RLHF_FIELDS  # here: rlhf.config imports this module

    return key in RLHF_FIELDS and key not in FIELDS


def close_field(word: str, names=None) -> Optional[str]:
    """The field a misspelt key means: an alias (learning_rate -> lr) or another library's name
    (n_steps -> num_steps, FOREIGN_NAMES), a dashed flag name, or the nearest field or such name
    (difflib). ``names``: the fields to choose from (default PPOConfig's; rlhf.config passes
    RLHFConfig's), of ALIASES and FOREIGN_NAMES those that name one of them."""
    names = list(FIELDS if names is None else names)
    aliases = {alias: name for alias, name in {**FOREIGN_NAMES, **ALIASES}.items() if name in names}
    key = word.strip().lstrip("-").replace("-", "_").lower()
    if key in names:
        return key
    if key in aliases:
        return aliases[key]
    close = _close(key, names + list(aliases))
    return aliases.get(close, close) if close else None


def did_you_mean(word: str) -> str:
    """`` (did you mean 'lr'?)`` for an unknown PPOConfig key, keyword or attribute ``word`` (close_field),
    with what to give where another library's name means something else (FOREIGN_NOTES); "" for none."""
    key = word.strip().lstrip("-").replace("-", "_").lower()
    if key in DERIVED_NOTES:  # CleanRL's num_iterations: no field to give, difflib's num_envs least of all
        return f" ({DERIVED_NOTES[key]})"
    close = close_field(word)
    if not close:
        return ""
    note = FOREIGN_NOTES.get(word.strip().lstrip("-").replace("-", "_").lower())
    return f" (did you mean '{close}'?" + (f" {note})" if note else ")")


def _cut(text: str) -> str:
    """``text`` as a refusal echoes a value: 60 characters at most, a longer one cut with "..."."""
    return text if len(text) <= 60 else text[:57] + "..."


def _short_repr(value: Any) -> str:
    return _cut(repr(value))


def _short_word(value: Any) -> str:
    """_yaml_word, cut as _short_repr cuts."""
    return _cut(_yaml_word(value))


def unknown_attribute(cfg: PPOConfig) -> Optional[ConfigError]:
    """The refusal of an attribute set on ``cfg`` that is no field (``cfg.learning_rate = 1e-2``): the
    run reads fields only, so it would train with the field's value, saying nothing. Names with a
    leading underscore are the code's own bookkeeping (from_dict's ``_sources``), never a field misspelt."""
    unknown = [name for name in vars(cfg) if name not in FIELDS and not name.startswith("_")]
    if not unknown:
        return None
    name = unknown[0]
    more = f" (and {len(unknown) - 1} more: {', '.join(unknown[1:])})" if len(unknown) > 1 else ""
    return ConfigError(f"PPOConfig.{name} = {_short_repr(getattr(cfg, name))}: not a PPOConfig field, so the run "
                       f"would ignore it{did_you_mean(name)}{more}")


def source_of(cfg: PPOConfig, name: str) -> Optional[str]:
    """Where field ``name``'s value came from (from_dict's ``source``: a preset, a --config file)
    while the field still holds that value; None when a flag or the code set it, or the default."""
    source, value = (getattr(cfg, "_sources", None) or {}).get(name, (None, None))
    return source if source is not None and same_value(getattr(cfg, name), value) else None


def same_value(a: Any, b: Any) -> bool:
    """``a == b``, where a NaN equals a NaN (``.nan`` from a file still holds the file's value)."""
    if a is b or a == b:
        return True
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)


def preset_of(cfg: PPOConfig, name: str) -> Optional[str]:
    """The preset's name ('gpu') when field ``name`` still holds the value a preset set, else None."""
    source = source_of(cfg, name) or ""
    return (source.rpartition("/")[2] or None) if source.startswith("preset ") else None


def preset_applied(cfg: PPOConfig) -> Optional[str]:
    """The preset the config was built from, as ``ENV/NAME`` (``Pendulum-v1/default``: presets.resolve's
    source of its fields) while one of its fields still holds the preset's value; ``none`` for ``--preset
    none``; None when no preset applies (an env without one, a PPOConfig built in Python)."""
    for name in FIELDS:
        source = source_of(cfg, name) or ""
        if source.startswith("preset "):
            return source[len("preset "):]
    return "none" if getattr(cfg, "_preset", None) == "none" else None


def as_given(name: str, value, python: bool, quote: bool = False) -> str:
    """``value`` of field or argument ``name`` as its user gave it: from Python the keyword argument
    (``preset='fast'``, ``lr=0.01``), which is all a script or notebook wrote; else the flag typed
    (``--preset fast``; ``quote``: ``--preset 'fast'``), the words the CLI's lines keep."""
    if python:
        return f"{name}={value!r}"
    return f"--{name.replace('_', '-')} " + (repr(value) if quote else str(value))


def cpu_preset_hint(cfg: PPOConfig, python: bool = False) -> str:
    """'on a CPU use --preset fast': a preset of the same env that needs no CUDA, else --device cpu.
    ``python``: in a Python caller's words (``preset='fast'``, as_given)."""
    try:
        from .presets import all_presets

        presets = all_presets().get(cfg.env_id, {})
    except Exception:  # noqa: BLE001 - only a hint
        presets = {}
    cpu = [n for n, body in presets.items() if not str((body.get("config") or {}).get("device", "cpu")).startswith("cuda")
           and not (body.get("config") or {}).get("cudagraphs")]
    for name in ("fast", "default", *sorted(cpu)):
        if name in cpu:
            return f"on a CPU use {as_given('preset', name, python)}"
    return "on a CPU set device='cpu', cudagraphs=False" if python else "on a CPU add --device cpu --no-cudagraphs"


_NO_ALIAS_LOADER = None

#: a YAML 1.2 float with an exponent (``1e-3``, ``1e1``, ``1.0e3``, ``.5E-2``): YAML 1.1, which PyYAML
#: reads, wants a dot and a signed exponent (``1.0e-3``), so these were strings, which an env's
#: keyword argument received as such. A plain scalar only: a quoted ``'1e1'`` stays a string.
YAML12_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$")

#: Integers: YAML 1.2 core schema's decimal without a leading zero, and ``0x1F``. YAML 1.1's other
#: forms, which PyYAML reads, reread what a user typed without a word: ``010`` as octal 8, ``1:30`` as
#: base-60 90, ``2024_01_15`` as 20240115. A leading zero stays text too (``run_dir: 007``, an env
#: keyword ``level: 08``, which dump_yaml of versions before 2026-12-05 wrote unquoted): an integer
#: field reads the text as decimal (``seed: 010`` is 10), a name keeps it as typed. ``0o17`` stays text
#: for the same reason.
YAML12_INT = re.compile(r"^(?:[-+]?(?:0|[1-9][0-9]*)|0x[0-9a-fA-F]+)$")
#: YAML 1.2 core schema's floats (no ``_``, no base 60), ``.inf`` and ``.nan`` included, with a point or
#: an exponent (``08`` is no float either: text, as above)
YAML12_FLOATS = re.compile(r"^(?:[-+]?(?:(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+)"
                           r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")


def yaml_alias_error():
    """The exception class load_yaml raises for a file it refuses as data (a yaml.YAMLError): an
    alias, a merge key (``<<``), or a key given twice in one mapping. Its message is one clause,
    without the file's name."""
    return _no_alias_loader().DataError


def _no_alias_loader():
    global _NO_ALIAS_LOADER
    if _NO_ALIAS_LOADER is None:
        import yaml

        class DataError(yaml.YAMLError):
            """A YAML file read as data holds what Proxima refuses to read (an alias, a key twice)."""

        class AliasError(DataError):
            """A YAML alias (``*name``) in a file read as data."""

        class DuplicateKeyError(DataError):
            """A mapping that gives one key twice: PyYAML keeps the last silently, so a value added at
            the top of a copied config.yaml would lose to the file's own line further down."""

        class MergeKeyError(DataError):
            """A merge key (``<<: {...}``): its mapping's keys are added without the check for a key
            given twice, and the first or last of them wins depending on where it nests."""

        class NoAliasLoader(yaml.SafeLoader):
            """yaml.SafeLoader that refuses aliases: nested aliases make a few hundred bytes stand for
            billions of values, which printing or comparing the result never finishes. It also refuses
            a key given twice in one mapping (any depth: env_kwargs too) and a merge key (``<<``), and
            reads numbers as YAML 1.2's core schema does (YAML12_INT, YAML12_FLOATS)."""

            def compose_node(self, parent, index):
                if self.check_event(yaml.events.AliasEvent):
                    event = self.peek_event()
                    raise AliasError(f"holds a YAML alias (*{event.anchor}, line {event.start_mark.line + 1}); "
                                     "a file Proxima writes holds none, and aliases are not read: write the value out")
                return super().compose_node(parent, index)

            def construct_mapping(self, node, deep=False):
                if isinstance(node, yaml.MappingNode):
                    seen = {}
                    for key_node, _ in node.value:
                        if isinstance(key_node, yaml.ScalarNode) and key_node.tag == "tag:yaml.org,2002:merge":
                            raise MergeKeyError(f"holds a YAML merge key (<<, line {key_node.start_mark.line + 1}); "
                                                "a file Proxima writes holds none, and merge keys are not read: "
                                                "write each field out once")
                        if not isinstance(key_node, yaml.ScalarNode):
                            continue  # a list or mapping as a key: PyYAML's own error (unhashable)
                        key, line = self.construct_object(key_node), key_node.start_mark.line + 1
                        if key in seen:
                            where = f"both on line {line}" if seen[key] == line else f"lines {seen[key]} and {line}"
                            raise DuplicateKeyError(f"'{key}' given twice ({where})")
                        seen[key] = line
                return super().construct_mapping(node, deep=deep)

        def construct_int(loader, node):  # YAML 1.2's forms only (YAML12_INT): SafeLoader's reads 010 as octal
            text = loader.construct_scalar(node)
            if text.startswith("0o"):
                return int(text[2:], 8)
            return int(text, 16) if text.startswith("0x") else int(text, 10)

        _yaml12_numbers(NoAliasLoader)
        NoAliasLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
        NoAliasLoader.DataError = DataError
        NoAliasLoader.MergeKeyError = MergeKeyError
        NoAliasLoader.AliasError = AliasError
        NoAliasLoader.DuplicateKeyError = DuplicateKeyError
        _NO_ALIAS_LOADER = NoAliasLoader
    return _NO_ALIAS_LOADER


def _yaml12_numbers(cls) -> None:
    """Make loader or dumper class ``cls`` resolve plain scalars to int and float as YAML 1.2's core
    schema does (YAML12_INT, YAML12_FLOATS) instead of YAML 1.1's rules: its own copy of the
    resolvers, PyYAML's classes are left as they are."""
    cls.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
        for first, resolvers in cls.yaml_implicit_resolvers.items()}
    # int before float: a float's pattern matches every integer too
    cls.add_implicit_resolver("tag:yaml.org,2002:int", YAML12_INT, list("-+0123456789"))
    cls.add_implicit_resolver("tag:yaml.org,2002:float", YAML12_FLOATS, list("-+0123456789."))


def load_yaml(stream):
    """``yaml.safe_load`` of a run file or config file, which is data: an alias (``*name``), a merge
    key (``<<``) or a key given twice in one mapping raises yaml_alias_error() (a yaml.YAMLError)
    instead of being expanded or silently keeping the last (or the first). Proxima writes its YAML with
    dump_yaml (yaml.safe_dump) of plain values, which never holds any of them.

    Numbers are read by YAML 1.2's core schema, not PyYAML's YAML 1.1: integers are decimal or ``0x1F``;
    floats ``1.5``, ``1e-3`` (YAML 1.1 wants ``1.0e-3``), ``.inf``, ``.nan``. A leading zero (``010``,
    ``007``), ``0o17``, YAML 1.1's base 60 (``1:30``) and underscores (``1_000``) stay the strings typed:
    a number field reads a decimal one as decimal (``seed: 010`` is 10, never octal 8) and refuses the
    others with its own line, a name (run_dir, an env keyword argument) keeps them. Booleans are YAML 1.1's still (``yes``, ``on``).
    Collections nested deeper than Python's stack (thousands of '[') are a yaml.YAMLError too, so
    every reader's own line reports them."""
    import yaml

    try:
        return yaml.load(stream, Loader=_no_alias_loader())  # noqa: S506 - a SafeLoader subclass
    except RecursionError:  # PyYAML composes nested collections recursively
        raise yaml.YAMLError("nested too deeply") from None


_DUMPER = None


def dump_yaml(data) -> str:
    """``yaml.safe_dump(data, sort_keys=False)`` that quotes a string load_yaml reads as a number
    (``'1e1'``, ``'08'``, ``'0o17'``) as well as those YAML 1.1 reads as one (``'1:30'``), so a string
    written to config.yaml (an env keyword argument, a run_dir) reads back as the same string under
    either. A SafeDumper subclass of our own: PyYAML's shared dumper is left as it is."""
    import yaml

    global _DUMPER
    if _DUMPER is None:
        class ConfigDumper(yaml.SafeDumper):
            pass

        ConfigDumper.add_implicit_resolver("tag:yaml.org,2002:float", YAML12_FLOAT, list("-+0123456789."))
        # after YAML 1.1's own, which still decide how a str is quoted; these only add quotes
        ConfigDumper.add_implicit_resolver("tag:yaml.org,2002:int", YAML12_INT, list("-+0123456789"))
        ConfigDumper.add_implicit_resolver("tag:yaml.org,2002:float", YAML12_FLOATS, list("-+0123456789."))
        _DUMPER = ConfigDumper
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=False)


def _is_stream(path: str) -> bool:
    """Whether ``path`` names the user's own stream (/dev/stdin, /dev/fd/N, /proc/self/fd/N: process
    substitution), not a file in a folder: a FIFO planted in a run directory is still refused."""
    text = os.path.normpath(str(path))
    return text == "/dev/stdin" or text.startswith(("/dev/fd/", "/proc/self/fd/"))


def yaml_error_where(e: Exception) -> str:
    """`` at line L, column C: PROBLEM`` of a PyYAML syntax error: its first line is only the context
    (``while scanning for the next token``), which names neither the place nor what is wrong there
    (a tab, a bad indent). `` (FIRST LINE)`` for an error without a place (nested too deeply)."""
    problem, mark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
    if problem and mark is not None:
        text = f" at line {mark.line + 1}, column {mark.column + 1}: {' '.join(str(problem).split())}"
        if "'\\t'" in text:  # the most common hand-edit mistake; PyYAML's words do not say what to do
            text += " (YAML indents and separates with spaces, never tabs)"
        return text
    lines = str(e).splitlines()
    return f" ({lines[0] if lines else type(e).__name__})"


def load_config_file(path: str) -> dict:
    """``--config FILE.yaml``: a mapping of PPOConfig fields; ConfigError naming the file otherwise.
    Read as a run's files are (rundir.read_run_text): ``--config RUN/config.yaml`` names a file in a
    run directory, which is data, so a FIFO planted there is refused rather than waited on forever,
    and a file past rundir.TEXT_MAX_BYTES is not read whole. A link is followed: the user named it."""
    import yaml

    from .rundir import TEXT_MAX_BYTES, RunFileError, read_run_text

    try:
        if _is_stream(path):  # `--config <(...)`, `--config /dev/stdin`: a pipe the user's shell made, read to its end
            with open(path, "rb") as f:
                data = f.read(TEXT_MAX_BYTES + 1)
            if len(data) > TEXT_MAX_BYTES:
                raise ConfigError(f"--config {path}: more than {TEXT_MAX_BYTES:,} bytes; give a YAML file of field: value lines")
            text = data.decode("utf-8")
        else:
            text = read_run_text(path, TEXT_MAX_BYTES, follow=True)
        values = load_yaml(text)
    except RunFileError as e:
        raise ConfigError(f"--config {path}: {e.why}; give a YAML file of field: value lines") from None
    except OSError as e:
        raise ConfigError(f"--config {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"--config {path}: not UTF-8 text (byte {e.start}); save it as UTF-8 YAML") from None
    except yaml_alias_error() as e:
        raise ConfigError(f"--config {path}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {path}: not valid YAML{yaml_error_where(e)}") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"--config {path}: expected a mapping of field: value, got {type(values).__name__}")
    return values


def _close(word: str, options) -> Optional[str]:
    import difflib

    m = difflib.get_close_matches(word, list(options), n=1)
    return m[0] if m else None


#: fields that hold a number or None (``none`` on the command line and in YAML)
OPTIONAL_NUMBERS = ("target_kl", "stop_return", "vf_clip_coef")
#: fields that hold a path or None
PATH_FIELDS = ("run_dir", "init_from")

#: coerce's ``source`` for a value typed on the command line (PPO's cli, rlhf/cli.py): a refusal
#: names the flag as the user wrote it, not a field of a file
FLAG_SOURCES = ("flag", "command line")


def value_refused(name: str, value: Any, source: str, why: str) -> ConfigError:
    """The one line refusing ``value`` of field ``name``: ``--num-envs 'x': expected an integer`` for a
    flag, ``FILE: field 'num_envs' got 'x', expected an integer`` for a file (PPO and RLHF alike).
    ``why``: ``expected ...``, or a clause of its own (``empty; give ...``)."""
    if source in FLAG_SOURCES:
        return ConfigError(f"--{name.replace('_', '-')} {value!r}: {why}")
    return ConfigError(f"{source}: field '{name}' got {value!r}" + (", " if why.startswith("expected ") else ": ") + why)


def _json_object_example(name: str, text: str, source: str) -> str:
    """How a JSON-object field is spelled, for its 'not valid JSON' line: ``--env-kwargs
    '{"continuous": false}'`` from the KEY=VALUE pairs typed (``continuous=false``: the spelling of
    other tools, which JSON refuses at column 1), else a generic object; as a file's field for a file."""
    import json
    import re
    import shlex

    pairs = [p for p in re.split(r"[,\s]+", text.strip()) if p]
    example = {"size": 8, "continuous": False}
    # a pasted file is no KEY=VALUE list to echo back: the line stays short
    if pairs and len(text) <= 200 and all(re.fullmatch(r"[A-Za-z_][\w.-]*=\S.*", p) for p in pairs):
        words = {"True": True, "False": False, "None": None}  # Python's spellings, typed as often as JSON's
        example = {}
        for pair in pairs:
            key, _, raw = pair.partition("=")
            try:
                example[key] = words[raw] if raw in words else json.loads(raw, parse_constant=str)  # NaN: no JSON number
            except ValueError:  # a bare word: a string to JSON only in quotes
                example[key] = raw
    text = json.dumps(example)
    if source in FLAG_SOURCES:
        return f"--{name.replace('_', '-')} {shlex.quote(text)}"
    return f"{name}: {text}"


def is_blank(value: Any) -> bool:
    """An empty or whitespace-only string: an unset shell variable or a stray quote, never a value
    (``none`` unsets an optional field): read as "no value" it trained into the default run
    directory or dropped a preset's --stop-return without a word."""
    return isinstance(value, str) and not value.strip()


def parse_int(text: str) -> int:
    """An integer typed as text: ``4096``, ``4_096``, or a whole number in e-notation (``1e3``,
    ``2.5e3``), as every integer flag and field takes it; ValueError for a fraction or other text."""
    text = text.replace("_", "")
    if any(c in text for c in ".eE"):
        number = float(text)
        if not number.is_integer():  # inf and nan are not either
            raise ValueError(f"not a whole number: {text!r}")
        return int(number)
    return int(text)


def int_arg(text: str) -> int:
    """argparse ``type=`` of an integer option outside PPOConfig (``plot --smooth``): parse_int, so
    ``1e3`` is taken there as by the config flags; argparse's own line for anything else."""
    import argparse

    try:
        return parse_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None


def field_default(name: str) -> Any:
    """Field ``name``'s default, a fresh copy of a mutable one (its default_factory's)."""
    f = FIELDS[name]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def expected_text(name: str) -> str:
    """What field ``name`` takes, as its refusals say it."""
    f = FIELDS[name]
    default = field_default(name)
    if name in OPTIONAL_NUMBERS:
        return "a number or none"
    if name == "run_dir":
        return "a directory, or none for the default"
    if name == "init_from":
        return "a checkpoint file or run directory, or none"
    if name == "device":
        return "a device: cpu, cuda, cuda:1 or auto"
    if f.metadata.get("choices"):
        return "one of " + ", ".join(f.metadata["choices"])
    return _type_name(default)


#: how deeply lists and mappings may nest in a field's value (env_kwargs, the one free-form field):
#: far more than any env's keyword arguments need. A file or checkpoint is data, and a value nested
#: thousands deep would end every recursive walk of it (plain, json.dumps, yaml.safe_dump) in a
#: RecursionError traceback rather than a line
MAX_NESTING = 32
#: values (lists, mappings and what they hold, counted as written out) a checkpoint's env_kwargs may
#: hold (checkpoint._nesting_ok): its pickle can share one list many times over, which nests few levels
#: but writes out as billions
MAX_NESTED_VALUES = 1_000_000


def nesting_depth(value: Any, limit: int = MAX_NESTING, max_values: Optional[int] = MAX_NESTED_VALUES) -> int:
    """How deeply lists, tuples and mappings nest in ``value`` (0 for a scalar, 1 for ``[1, 2]``),
    counted without recursion and never past ``limit + 1`` levels or ``max_values`` values (then
    ``limit + 1``; None: no count, for a value parsed from text, which shares nothing): a value nested
    past Python's stack, or one list shared many times over, is measured in bounded time."""
    deepest, seen, stack = 0, 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        seen += 1
        if max_values is not None and seen > max_values:
            return limit + 1
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        depth += 1
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children)
    return deepest


def _nested_too_deep(name: str, value: Any, source: str) -> Optional[ConfigError]:
    """too_deep_error's line for a value of field ``name`` nested past MAX_NESTING (or too big to
    walk); None when it is fine."""
    # depth alone: a value parsed from text, or the user's own object, shares nothing to count (a
    # checkpoint's pickled value is counted where the checkpoint is checked, checkpoint._nesting_ok)
    return too_deep_error(name, source) if nesting_depth(value, max_values=None) > MAX_NESTING else None


def too_deep_error(name: str, source: str) -> ConfigError:
    """The one line refusing a value of field ``name`` nested past MAX_NESTING: it names the field and
    where the value came from, never the value (its repr would recurse too)."""
    why = f"nests lists or mappings more than {MAX_NESTING} levels deep, more than any keyword argument needs"
    if source in FLAG_SOURCES:
        return ConfigError(f"--{name.replace('_', '-')}: {why}; give a flatter value")
    if source == "PPOConfig":
        return ConfigError(f"PPOConfig.{name}: {why}; give a flatter value")
    return ConfigError(f"{source}: field '{name}' {why}; the file was damaged or edited (give a flatter value)")


def coerce(name: str, value: Any, source: str = "config") -> Any:
    """Convert a YAML/CLI value to the field's type; raise ConfigError naming the field."""
    default = field_default(name)
    refused = _nested_too_deep(name, value, source)  # before plain(), which walks it recursively
    if refused is not None:
        raise refused
    value = given = plain(value)  # the refusal names the value as given, not as split or parsed so far
    if is_blank(value) and name != "env_id":  # env_id '' is validate's (ENV_ID has no flag)
        raise value_refused(name, value, source, f"empty; give {expected_text(name)}")
    try:
        if name in OPTIONAL_NUMBERS or name in PATH_FIELDS:
            if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
                return None
            if name in PATH_FIELDS and not isinstance(value, str):
                _refuse_unquoted(name, given, source)
                raise ValueError  # a YAML list or mapping is not a path; a number only from a file
            if isinstance(value, bool):
                raise ValueError
            if name in PATH_FIELDS and source in FLAG_SOURCES and any(unicodedata.category(c) == "Cc" for c in str(value)):
                # $'a\nb' (a pasted newline, a stray escape) names a path no line prints as typed (--run-dir made
                # a directory so); only typed: a recorded run_dir names a directory that exists already
                named = "a directory name" if name == "run_dir" else "the path of a checkpoint file or run directory"
                raise value_refused(name, value, source, "holds a control character (a newline, tab or escape); "
                                    f"give {named} without one")
            return str(value) if name in PATH_FIELDS else float(value)
        if isinstance(default, bool):
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
                return value.lower() in ("true", "1", "yes", "on")
            if type(value) is int and value in (0, 1):  # a YAML file's unquoted 1 or 0, as its '1' or '0'
                return bool(value)
            raise ValueError
        if isinstance(default, int):
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            if isinstance(value, str):
                return parse_int(value)
            return int(value)
        if isinstance(default, float):
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if isinstance(default, dict):
            if isinstance(value, str):
                import json

                try:
                    value = json.loads(value, object_pairs_hook=_json_object_once)
                except _RepeatedKey as e:  # json.loads kept the last value silently; a YAML file's is refused too
                    raise value_refused(name, given, source, f"key {e.key!r} given twice; give each key once") from None
                except json.JSONDecodeError as e:
                    raise value_refused(name, value, source, f"not valid JSON ({e.msg} at column {e.colno}); "
                                        f"e.g. {_json_object_example(name, value, source)}") from None
                except RecursionError:  # '[' nested past Python's stack
                    raise too_deep_error(name, source) from None
                refused = _nested_too_deep(name, value, source)
                if refused is not None:
                    raise refused
                if value is None:  # text that is not an object, as [1] and "s" are; taken as {} it hid a typo
                    raise value_refused(name, given, source, "give a JSON object, {} for none")
            if value is None:
                return {}
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise ValueError
            _check_json_values(name, value, source)
            return dict(value)
        if isinstance(default, list):
            if isinstance(value, str):  # "64,64", "64 64", "64, 64", or "[64, 64]" as config.yaml's dry run prints it
                text = value.strip()
                text = text[1:-1] if text[:1] + text[-1:] in ("[]", "()") else text
                value = [v for v in re.split(r"[,\s]+", text) if v]
            elif type(value) is int and source != "PPOConfig":  # a file's `hidden_sizes: 64`, as --hidden-sizes 64
                value = [value]
            if not isinstance(value, (list, tuple)):
                raise ValueError
            return [_whole(v) for v in value]
        if isinstance(default, str):
            if not isinstance(value, str):
                if name == "env_id":
                    _refuse_unquoted(name, given, source)
                raise ValueError
            return value
    except ConfigError:  # already the precise line (not valid JSON); a ValueError too
        raise
    except (TypeError, ValueError, OverflowError):
        pass
    raise value_refused(name, given, source, f"expected {expected_text(name)}{_foreign_value_hint(name, given)}")


def _foreign_value_hint(name: str, value: Any, python: bool = False) -> str:
    """What SB3's and the zoo's values that no field here takes are: a schedule string (``lin_3e-4``:
    the lr's linear decay is anneal_lr; no clip schedule), net_arch's separate pi/vf sizes; "" else.
    ``python``: the settings as a PPOConfig keyword (``lr=3e-4``), not as a file's or a flag's value."""
    if name == "hidden_sizes" and isinstance(value, dict):
        return " (separate pi/vf sizes are not supported: one list sizes both the actor's and the critic's hidden layers)"
    if not (isinstance(value, str) and value.startswith("lin_")):
        return ""
    if name == "lr":
        lr, anneal = (f"lr={value[4:]}", "anneal_lr=True") if python else (f"lr {value[4:]}", "anneal_lr true")
        return (f" (the zoo's {value}, a linear decay to 0, is {lr} with {anneal}, PPOConfig's default; "
                "SB3's lr is constant unless lin_)")
    if name in ("clip_coef", "vf_clip_coef"):
        return f" (no schedule for {name}: it stays constant; give {name + '=' if python else ''}{value[4:]})"
    return ""


def _refuse_unquoted(name: str, value: Any, source: str) -> None:
    """ConfigError for a name (run_dir, env_id) that a YAML file gave as a number, boolean or date:
    its str() may not be what was typed (``1.10`` is 1.1, ``1e3`` is 1000.0), so it is
    refused with the fix rather than turned into another name. Nothing for a flag's value (always
    text), a list or mapping (the caller's own refusal), or PPOConfig (_check_types names the type)."""
    import datetime

    if source in FLAG_SOURCES or source == "PPOConfig" or value is None or isinstance(value, (list, tuple, dict)):
        return
    if isinstance(value, bool):
        kind, why, example = "a boolean", " (YAML reads an unquoted yes, on or true as one)", "..."
    elif isinstance(value, int):  # 0x1F and +7 are ints too: the digits typed may not be str()'s
        kind, why, example = "a number", "", "..."
    elif isinstance(value, float):
        kind, why, example = "a number", " (YAML reads an unquoted 1.10 as 1.1, 1e3 as 1000.0)", "..."
    elif isinstance(value, datetime.date):  # a datetime too
        kind, why, example = "a date", " (YAML reads an unquoted 2024-01-15 as one)", str(value)
    else:
        return
    raise ConfigError(f"{source}: field '{name}' got {value!r}, {kind}, not text{why}; "
                      f"quote it{' as you wrote it' if example == '...' else ''} ({name}: '{example}')")


class _RepeatedKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _json_object_once(pairs: list) -> dict:
    """json.loads's object_pairs_hook: a JSON object, refusing a key given twice at any depth."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _RepeatedKey(key)
        out[key] = value
    return out


def plain(value: Any) -> Any:
    """``value`` with numpy scalars (np.float64 from np.logspace, np.int64, np.bool_, np.str_) and
    0-d arrays and tensors (``torch.logspace(-4, -2, 3)[1]``) made the Python values they hold, in
    lists, tuples and dict values too: yaml.safe_dump, which writes config.yaml, refuses their types,
    and np.bool_ is no bool. Anything else is returned as is."""
    import sys

    np, torch = sys.modules.get("numpy"), sys.modules.get("torch")  # one not imported: none of its values here
    scalars = tuple(t for t in ((np.generic, np.ndarray) if np is not None else ()) + ((torch.Tensor,) if torch else ()))
    if not scalars:
        return value
    if isinstance(value, scalars):
        return value.item() if value.ndim == 0 else value  # a numpy scalar's ndim is 0 too
    if isinstance(value, (list, tuple)) and any(isinstance(v, (*scalars, list, tuple, dict)) for v in value):
        return [plain(v) for v in value] if isinstance(value, list) else tuple(plain(v) for v in value)
    if isinstance(value, dict) and any(isinstance(v, (*scalars, list, tuple, dict)) for v in value.values()):
        return {k: plain(v) for k, v in value.items()}
    return value


def _check_json_values(name: str, value: dict, source: str) -> None:
    """ConfigError naming the key whose value JSON cannot hold: a YAML file may give a date
    (``2020-01-01``), ``!!binary`` or ``!!set``, which config.yaml, meta.json and the env's recorded
    kwargs could not write later (a TypeError after training, not a line now)."""
    import datetime
    import json

    for key, item in value.items():
        try:
            json.dumps(item)
        except (TypeError, ValueError, RecursionError):
            where = f"--{name.replace('_', '-')}" if source == "flag" else f"{source}: field '{name}'"
            example = f" ({key}: '{item}')" if isinstance(item, datetime.date) else ""
            raise ConfigError(f"{where}: key '{key}' holds {type(item).__name__} {item!r}, which JSON cannot hold; "
                              f"quote the value in the YAML file to pass a string{example}") from None


def _whole(v: Any) -> int:
    """One integer of a list field: 64, "64", "1e3" (as an integer field takes it) or 64.0, never
    64.7 (truncated) or true (1)."""
    if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
        raise ValueError
    return parse_int(v) if isinstance(v, str) else int(v)


def _type_name(default: Any, python: bool = False) -> str:
    """What a field of ``default``'s type takes, in a flag's or file's words, or (``python``) in those of
    a PPOConfig built in Python, where a list and a dict are given as such, not as text."""
    if isinstance(default, bool):
        return "True or False" if python else "true or false"
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, list):
        return "a list of ints, e.g. [64, 64]" if python else "a comma-separated list of integers"
    if isinstance(default, dict):
        if python:
            return "a dict of keyword arguments, e.g. {'continuous': True} ({} for none)"
        return "a JSON object of keyword arguments, e.g. {\"k\": 1}"
    return "a string"


#: steps an evaluation runs at most (evaluate.evaluate, ``proxima eval --max-steps``): beyond any
#: time-limited episode (a full Atari game is at most 27,000 steps) and short enough that an env
#: without a time limit does not hang the end of a run
MAX_EVAL_STEPS = 100_000
#: the end-of-training evaluation's env seed is the run's seed plus this (``proxima eval``'s default too)
EVAL_SEED_OFFSET = 1_000_000

#: float32's rounding of any positive number up to this one (2**-150, half its smallest subnormal) is 0
FLOAT32_ROUNDS_TO_ZERO = 2.0 ** -150
#: float32's smallest normal value (torch.finfo(torch.float32).tiny): with denormals flushed, anything below is 0
FLOAT32_TINY = 2.0 ** -126
#: the largest finite float32 (torch.finfo(torch.float32).max, without importing torch): a float field
#: above it becomes inf in the run's float32 tensors
FLOAT32_MAX = 3.4028234663852886e38

#: the largest --seed: numpy takes seeds below 2**32, and a run adds 10,000 per rank and 1,000,000 for evaluation
MAX_SEED = 2**31 - 1

#: --threads may be at most this many times the CPUs this process may use (cpuinfo.usable_cpus: the
#: affinity mask and a cgroup quota count, as a container's `--cpus` does): more only contend, and a
#: huge count (a typo, or a number recorded in a run's files) makes torch's thread pool crash the process
THREADS_PER_CPU = 4


def max_threads() -> int:
    from .cpuinfo import usable_cpus

    return THREADS_PER_CPU * usable_cpus()


def threads_limit_text(resume_may_change: bool = False) -> str:
    """Why a --threads value is refused (PPO and RLHF say it alike)."""
    from .cpuinfo import cpus_text, usable_cpus

    cpus = usable_cpus()
    return (f"must be at most {THREADS_PER_CPU * cpus} ({THREADS_PER_CPU} x {cpus_text(cpus)}); "
            f"more threads than cores only slow torch down; give --threads {THREADS_PER_CPU * cpus} or fewer"
            + (" (resume may change it)" if resume_may_change else ""))


def _check_types(cfg: PPOConfig) -> None:
    """Each field holds its type (a PPOConfig built in Python is not coerced as flags and YAML are):
    ConfigError naming the field, before anything is built or written. Ints pass for floats, a
    path for run_dir; a string never passes for a number or a bool (NaN is validate's to refuse).
    A numpy scalar is replaced in ``cfg`` by the Python value it holds (``plain``): config.yaml
    could not record it, nor a path (``run_dir=Path(...)``), which is replaced by its str. A whole float
    for an integer field (``num_envs=4.0``, ``hidden_sizes=[64.0]``) is replaced by its int, a fraction
    refused: torch refuses float sizes, and config.yaml would record ``4.0``. A tuple of widths
    (``hidden_sizes=(32, 32)``) is replaced by the list config.yaml records."""
    for name in FIELDS:
        value = getattr(cfg, name)
        if name in PATH_FIELDS and isinstance(value, os.PathLike):
            # as a str: config.yaml (yaml.safe_dump) cannot write a Path, and it is written after the env is built
            setattr(cfg, name, os.fsdecode(value))
            continue
        torch = sys.modules.get("torch")  # not imported: the value cannot be a torch.device
        if name == "device" and torch is not None and isinstance(value, torch.device):
            # as load and make_env take one; its str ('cuda:1') is what config.yaml records and flags spell
            setattr(cfg, name, str(value))
            continue
        refused = _nested_too_deep(name, value, "PPOConfig")  # before plain(), which walks it recursively
        if refused is not None:
            raise refused
        if plain(value) is not value:  # numpy scalars (a sweep over np.logspace): the Python values they hold
            value = plain(value)
            setattr(cfg, name, value)
        if is_blank(value) and name != "env_id":
            raise ConfigError(f"PPOConfig.{name} = {value!r}: empty; give {python_expected(name)}")
        default = field_default(name)
        try:
            coerced = coerce(name, value, "PPOConfig")
            # a tuple of widths holds what the list does (from_dict takes one too); its items are still compared
            same = same_value(coerced, list(value) if isinstance(default, list) and isinstance(value, tuple) else value)
        except ConfigError:
            same = False
        wrong_kind = isinstance(value, str) and not isinstance(default, str) and name not in PATH_FIELDS
        if not same or wrong_kind or (isinstance(value, bool) and not isinstance(default, bool)):
            if name in OPTIONAL_NUMBERS or FIELDS[name].metadata.get("choices") or name in (*PATH_FIELDS, "device"):
                expected = python_expected(name)
            else:
                expected = _type_name(default, python=True)
            raise ConfigError(f"PPOConfig.{name} = {value!r}: expected {expected}{_schedule_hint(name, value)}"
                              f"{_foreign_value_hint(name, value, python=True)}")
        # 4.0 == 4, so ``same`` let a whole float through; the run must get the int (float fields
        # keep an int as given: 1 for lr computes as 1.0 does). 0 == False too: a bool field given 0
        # or 1 gets the bool, which config.yaml and report.md record as false/true, not 0/1
        if isinstance(default, (list, int)):
            if repr(coerced) != repr(value):
                setattr(cfg, name, coerced)


def _schedule_hint(name: str, value: Any) -> str:
    """What stands for a schedule given as a function (SB3's ``learning_rate=lambda progress: ...``) to a
    number field: the lr's linear decay is anneal_lr; no other field takes one."""
    default = field_default(name)
    number = name in OPTIONAL_NUMBERS or (isinstance(default, (int, float)) and not isinstance(default, bool))
    if not callable(value) or isinstance(value, type) or not number:
        return ""
    if name == "lr":
        return ("; a schedule (a function of the progress, as SB3's learning_rate takes) is not taken: give the "
                "starting rate, which anneal_lr=True (the default) decays linearly to 0 over the run")
    return "; a schedule (a function) is not taken: give one number"


#: a flag in a line of validate's (``--num-envs 4``, ``--no-norm-adv``), for python_words
_FLAG_IN_LINE = re.compile(r"--(no-)?([a-z][a-z0-9-]*)(?: (-?[0-9][0-9_.e+-]*))?")


def python_words(line: str) -> str:
    """``line`` with each PPOConfig flag it names written as the field a Python caller sets:
    ``--num-envs 4`` -> ``num_envs=4``, ``--no-norm-adv`` -> ``norm_adv=False``, ``--gamma`` -> ``gamma``;
    other flags (``--preset``) as they are."""
    def field(m: "re.Match") -> str:
        name = m.group(2).replace("-", "_")
        if name not in FIELDS or (m.group(1) and not isinstance(FIELDS[name].default, bool)):
            return m.group(0)
        if m.group(1):
            return f"{name}=False" + (f" {m.group(3)}" if m.group(3) else "")
        return f"{name}={m.group(3)}" if m.group(3) else name
    return _FLAG_IN_LINE.sub(field, line)


#: the largest |log_std_init| validate takes: exp(20) is 4.9e8, exp(-20) 2.1e-9
LOG_STD_INIT_BOUND = 20.0


def validate(cfg: PPOConfig, world_size: int = 1, resume: bool = False, python: bool = False) -> None:
    """Raise ConfigError with one actionable line for the first invalid value. ``resume``: the config
    a resume continues with (a refused --threads then says that the resume may change it). ``python``:
    the config was built in Python, not from flags: the line names ``PPOConfig.gamma = 1.5``, as a
    wrong type's does, and each field it mentions as the field (python_words), not the flag."""

    def bad(name: str, why: str) -> None:
        if python:
            raise ConfigError(f"PPOConfig.{name} = {getattr(cfg, name)!r}: {python_words(why)}")
        raise ConfigError(f"--{name.replace('_', '-')} {getattr(cfg, name)!r}: {why}")

    def several(line: str, fields: tuple) -> ConfigError:  # a line about several fields (cli names those from a file)
        e = ConfigError(python_words(line) if python else line)
        e.fields = fields
        return e

    if not isinstance(cfg, PPOConfig):  # from_dict is this module's function: PPOConfig has no such method
        if isinstance(cfg, str):  # train("CartPole-v1"): the id meant as the env
            raise ConfigError(f"expected a PPOConfig, got str {_short_repr(cfg)}: give PPOConfig(env_id={_short_repr(cfg)}) "
                              f"(or proxima.presets.resolve({_short_repr(cfg)}) with its default preset, as proxima train applies it)")
        raise ConfigError(f"expected a PPOConfig, got {type(cfg).__name__} (PPOConfig(**fields), or "
                          "proxima.config.from_dict(mapping) for a mapping)")
    refused = unknown_attribute(cfg)
    if refused is not None:
        raise refused
    _check_types(cfg)
    for name, f in FIELDS.items():
        choices = f.metadata.get("choices")
        if choices and getattr(cfg, name) not in choices:
            meant = _activation_of(getattr(cfg, name)) if name == "activation" else None  # SB3's activation_fn: nn.Tanh
            bad(name, f"must be one of {', '.join(choices)}" + (f" ({getattr(cfg, name)} is {meant})" if meant else ""))
    for name in ("lr", "gamma", "gae_lambda", "clip_coef", "ent_coef", "vf_coef", "max_grad_norm", "clip_obs", "clip_reward"):
        if not math.isfinite(getattr(cfg, name)):
            bad(name, "must be a finite number")
        # the run uses these in float32 (the learning rate tensor, a population's per-member coefficients,
        # the clips of float32 observations and rewards): beyond its range a value turns inf there, and
        # the run crashes (the learning rate's fill) or trains into NaN weights
        if getattr(cfg, name) > FLOAT32_MAX:  # below 0 each is refused further on
            bad(name, f"must be at most {FLOAT32_MAX:.4g} (float32's largest value, which the run computes in)")
    if cfg.target_kl is not None and not (math.isfinite(cfg.target_kl) and cfg.target_kl > 0):
        bad("target_kl", "must be a positive number or none")
    if cfg.init_from is not None and not resume and not os.path.exists(cfg.init_from):  # before the env is built
        bad("init_from", "no such file or directory (a checkpoint file or a run directory)")
    if cfg.target_kl is not None and cfg.target_kl > FLOAT32_MAX:
        bad("target_kl", f"must be at most {FLOAT32_MAX:.4g} (float32's largest value, which the run computes in), or none for no limit")
    if cfg.vf_clip_coef is not None:  # as clip_coef: a clamp bound in the run's float32
        if not (math.isfinite(cfg.vf_clip_coef) and cfg.vf_clip_coef > 0):
            bad("vf_clip_coef", "must be a positive number, or none for the policy's clip_coef")
        if cfg.vf_clip_coef > FLOAT32_MAX:
            bad("vf_clip_coef", f"must be at most {FLOAT32_MAX:.4g} (float32's largest value, which the run computes in), "
                                "or none for the policy's clip_coef")
        # as clip_coef's: a value this small is 0 in the run's float32 (every value frozen at the rollout's)
        if cfg.flush_denormal and cfg.vf_clip_coef < FLOAT32_TINY:
            bad("vf_clip_coef", f"must be at least {FLOAT32_TINY:.4g} (float32's smallest normal value: smaller ones are 0 "
                                "in the run, which flushes denormals; --no-flush-denormal keeps them)")
        if cfg.vf_clip_coef <= FLOAT32_ROUNDS_TO_ZERO:
            bad("vf_clip_coef", f"must be above {FLOAT32_ROUNDS_TO_ZERO:.4g} (smaller values are 0 in float32, which the run computes in)")
        if not cfg.clip_vloss:  # a range of a clip that is off would change nothing: say so rather than ignore it
            bad("vf_clip_coef", "sets the value clip range, but --no-clip-vloss turns value clipping off; "
                                "give only one of them")
    if cfg.stop_return is not None and not math.isfinite(cfg.stop_return):
        bad("stop_return", "must be a finite number or none")
    if not (math.isfinite(cfg.log_std_init) and abs(cfg.log_std_init) <= LOG_STD_INIT_BOUND):
        # exp of it is the std, in float32: beyond +-20 (std 5e8 or 2e-9) a run only meets inf, 0 or NaN log-probs
        bad("log_std_init", f"must be a number in [-{LOG_STD_INIT_BOUND:g}, {LOG_STD_INIT_BOUND:g}] (the std is exp of it: "
                            "-2 is std 0.14, 0 std 1)")
    for name in ("num_envs", "num_steps", "num_minibatches", "update_epochs", "total_timesteps", "threads", "stop_episodes"):
        if getattr(cfg, name) < 1:
            bad(name, "must be at least 1")
    if cfg.threads > max_threads():
        bad("threads", threads_limit_text(resume_may_change=resume))
    if not (math.isfinite(cfg.checkpoint_minutes) and cfg.checkpoint_minutes >= 0):
        bad("checkpoint_minutes", "must be 0 (off) or a positive number of minutes")
    if cfg.eval_every and not cfg.eval_episodes:
        bad("eval_every", "needs --eval-episodes of 1 or more")
    for name in ("checkpoint_every", "eval_episodes", "eval_every"):
        if getattr(cfg, name) < 0:
            bad(name, "must be 0 or more")
    if cfg.keep_checkpoints < 0:
        bad("keep_checkpoints", "must be 0 (keep every checkpoint) or more")
    if not 0.0 < cfg.gamma <= 1.0:
        bad("gamma", "must be in (0, 1]")
    if not 0.0 <= cfg.gae_lambda <= 1.0:
        bad("gae_lambda", "must be in [0, 1]")
    for name in ("lr", "clip_coef", "max_grad_norm"):
        if getattr(cfg, name) <= 0:
            bad(name, "must be positive")
        # a value this small is 0 in the run's float32 tensors: the run would not train, or clip everything;
        # with flush_denormal (the default) every float32 below the smallest normal one is 0 too
        if cfg.flush_denormal and 0 < getattr(cfg, name) < FLOAT32_TINY:
            bad(name, f"must be at least {FLOAT32_TINY:.4g} (float32's smallest normal value: smaller ones are 0 in the "
                      "run, which flushes denormals; --no-flush-denormal keeps them)")
        if getattr(cfg, name) <= FLOAT32_ROUNDS_TO_ZERO:
            bad(name, f"must be above {FLOAT32_ROUNDS_TO_ZERO:.4g} (smaller values are 0 in float32, which the run computes in)")
    for name in ("ent_coef", "vf_coef"):
        if getattr(cfg, name) < 0:
            bad(name, "must be 0 or more")
    if cfg.clip_obs <= 0 or cfg.clip_reward <= 0:
        bad("clip_obs" if cfg.clip_obs <= 0 else "clip_reward", "must be positive")
    if not cfg.hidden_sizes or any(h < 1 for h in cfg.hidden_sizes):
        bad("hidden_sizes", "must be one or more positive widths, e.g. 64,64")
    # a network wider or deeper than a checkpoint is rebuilt with would train and then not load its own checkpoints
    if len(cfg.hidden_sizes) > MAX_HIDDEN_LAYERS or any(h > MAX_HIDDEN_WIDTH for h in cfg.hidden_sizes):
        bad("hidden_sizes", f"at most {MAX_HIDDEN_LAYERS} layers of at most {MAX_HIDDEN_WIDTH:,} units each "
                            "(the largest network a checkpoint loads into)")
    batch = cfg.num_envs * cfg.num_steps
    # before the minibatch checks: --num-steps 1e23 is the mistake, not the --num-minibatches that does not divide it
    if cfg.total_timesteps < batch * world_size:
        procs = f" x {world_size} processes" if world_size > 1 else ""
        raise several(f"one batch (--num-envs {cfg.num_envs} x --num-steps {cfg.num_steps}{procs} = {batch * world_size:,} steps) "
                      f"is larger than --total-timesteps {cfg.total_timesteps}: lower --num-envs or --num-steps, or raise "
                      "--total-timesteps", ("num_envs", "num_steps", "total_timesteps"))
    if batch % cfg.num_minibatches:
        # the count the user chose (a flag, a file, Python) gets the nearest that do; cli words the others: PPOConfig's
        # default with the counts that do (_name_default), a preset's value with the flag that overrides it
        chosen = preset_of(cfg, "num_minibatches") is None and (
            python or source_of(cfg, "num_minibatches") is not None or cfg.num_minibatches != field_default("num_minibatches"))
        bad("num_minibatches", f"must divide the batch num_envs x num_steps = {batch}" + (nearest_minibatches(cfg) if chosen else ""))
    if batch < 2:  # torch's var of one sample warns and is NaN
        raise several(f"one batch (--num-envs {cfg.num_envs} x --num-steps {cfg.num_steps}) is 1 step; the update logs the "
                      "batch's explained variance, which needs at least 2: raise --num-steps or --num-envs", ("num_envs", "num_steps"))
    if batch // cfg.num_minibatches < 2 and cfg.norm_adv:  # a minibatch's std; its other terms are per-sample means
        # a copied SB3 batch_size first: --no-norm-adv would train minibatches of 1 sample, not the run meant
        bad("num_minibatches", f"gives minibatches of {batch // cfg.num_minibatches} sample{_sb3_batch_size_clause(cfg)}; "
                               f"advantage normalization needs at least 2 ({norm_adv_fix()})")
    if not 0 <= cfg.seed <= MAX_SEED:
        bad("seed", f"must be an integer from 0 to {MAX_SEED:,} (numpy seeds are 32-bit; ranks and evaluation add offsets)")
    if not cfg.env_id.strip():  # no --env-id flag: ENV_ID on the command line, env_id in a file or PPOConfig
        raise ConfigError(f"env_id {cfg.env_id!r}: must name an environment (e.g. CartPole-v1)")
    preset = preset_of(cfg, "device")
    if preset and isinstance(cfg.device, str) and cfg.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():  # not --device cuda: the user chose the preset (--preset, resolve's preset=), name it
            raise ConfigError(f"{as_given('preset', preset, python)} needs CUDA, which is not usable here (run `proxima doctor`); "
                              f"{cpu_preset_hint(cfg, python)}")


#: the smallest num_minibatches taken for SB3's batch_size copied as it is (the zoo's are 32 and up): a count of 2 or
#: 4 that is the whole batch is a small test's, whose line stays about the minibatch count alone
SB3_BATCH_SIZE_FROM = 8


def _sb3_batch_size_clause(cfg: PPOConfig) -> str:
    """``; did you copy SB3's batch_size ...``: for a num_minibatches that is the whole batch (minibatches of one
    step), which SB3's batch_size of the rollout (a minibatch's size in steps) copied as it is gives; "" else."""
    batch = cfg.num_envs * cfg.num_steps
    if cfg.num_minibatches != batch or batch < SB3_BATCH_SIZE_FROM:
        return ""
    return (f"; did you copy SB3's batch_size (a minibatch size)? num_minibatches = num_envs x num_steps / batch_size, "
            f"1 when batch_size >= num_envs x num_steps (1 here for {cfg.num_minibatches})")


def one_sample_minibatch_note(cfg: PPOConfig, python: bool = False) -> Optional[str]:
    """A new run's note when each minibatch is one sample under --no-norm-adv (legal, so not validate's refusal
    with advantage normalization): SB3's batch_size (a minibatch size) copied as num_minibatches trains so without
    a word, one gradient step per sample. None otherwise, and for a batch under SB3_BATCH_SIZE_FROM (a small test's).
    ``python``: named as PPOConfig's fields (as_given), not the flags."""
    batch = cfg.num_envs * cfg.num_steps
    if cfg.norm_adv or cfg.num_minibatches != batch or batch < SB3_BATCH_SIZE_FROM:
        return None
    no_norm = "norm_adv=False" if python else "--no-norm-adv"
    return (f"{as_given('num_minibatches', cfg.num_minibatches, python)} with {no_norm}: each minibatch is 1 sample (the batch "
            f"is num_envs {cfg.num_envs} x num_steps {cfg.num_steps} = {batch:,}), {batch:,} gradient steps an epoch; SB3's "
            f"batch_size copied as num_minibatches does this: num_minibatches = num_envs x num_steps / batch_size "
            f"({as_given('num_minibatches', 1, python)} for SB3's batch_size {cfg.num_minibatches}); keep it if 1-sample "
            "minibatches are meant")


def norm_adv_fix(swept: bool = False, python: bool = False) -> str:
    """What validate's line on minibatches of 1 sample under advantage normalization advises: fewer minibatches,
    or --no-norm-adv. ``swept``: in a population that sweeps norm_adv (population_run), whose --no-norm-adv the
    sweep refuses (both set norm_adv): fewer minibatches, or norm_adv=false swept alone. ``python``: the words
    of train_population's caller (sweep={'norm_adv': [...]})."""
    if not swept:
        return python_words("lower --num-minibatches, or add --no-norm-adv") if python else \
            "lower --num-minibatches, or add --no-norm-adv"
    # not 'drop true from the sweep': a sweep of true alone would be left empty
    if python:
        return "lower num_minibatches, or sweep norm_adv over [False] alone"
    return "lower --num-minibatches, or sweep norm_adv=false alone"


def minibatch_counts(cfg: PPOConfig) -> list:
    """The minibatch counts validate takes for ``cfg``'s batch: its divisors (up to 4,096), with minibatches of 2
    samples or more under advantage normalization (a minibatch's std)."""
    batch = cfg.num_envs * cfg.num_steps
    return [d for d in range(1, min(batch, 4096) + 1) if batch % d == 0 and (batch // d >= 2 or not cfg.norm_adv)]


def nearest_minibatches(cfg: PPOConfig) -> str:
    """``; the nearest counts that do: 2 or 4 (minibatches of 128 or 64)`` for a num_minibatches that does
    not divide the batch (3 of 256, SB3's batch_size 100 turned into a count): the counts just below and
    above it, with the minibatch size each gives, which is what an SB3 user compares with batch_size."""
    batch, wanted = cfg.num_envs * cfg.num_steps, cfg.num_minibatches
    counts = minibatch_counts(cfg)
    near = [d for d in counts if d < wanted][-1:] + [d for d in counts if d > wanted][:1]
    if not near:
        return ""
    ors = lambda items: " or ".join(f"{i:,}" for i in items)  # noqa: E731
    which = "counts that do" if len(near) > 1 else "count that does"
    return f"; the nearest {which}: {ors(near)} (minibatches of {ors(batch // c for c in near)})"


def batch_size(cfg: PPOConfig) -> int:
    return cfg.num_envs * cfg.num_steps


def num_iterations(cfg: PPOConfig, world_size: int = 1) -> int:
    return cfg.total_timesteps // (batch_size(cfg) * world_size)


# once at import, from the fields' own help: one text for --help and help(), so the two cannot drift
PPOConfig.__doc__ = (PPOConfig.__doc__ or "") + attributes_doc(PPOConfig)
