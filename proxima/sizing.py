"""Refuse a run that cannot fit before anything is allocated: ``--num-envs 10**9`` is one line,
``--num-envs 1000000000: needs ~X GB on cpu, Y GB free``, not a minute of swapping and an OOM kill.

The estimate counts what grows with the batch T x N: the rollout buffers (obs and final_obs,
actions, log-probs, values, rewards, flags), the update's per-sample tensors (advantages, returns,
bootstrap values, the permutation), the critic's activations in the bootstrap pass (ppo.next_values:
one chunk of whole steps off the CPU, the last step on it; ``bootstrap_bytes`` counts only what the
update's minibatch activations, which reuse that memory, do not already) and the envs' own state
(torch-native: a few numbers per env; Gymnasium: a Python object per env, counted as 20 KB), and
check_fits adds the evaluation's envs (one per --eval-episodes episode, built while the buffers
are held). The observation is sized as the env's tensor is, read from one env that check_fits
builds (``env.obs_shape``: a Dict's keys packed side by side; uint8 images and all-uint8 Dicts at
one byte an entry unless --norm-obs stores floats), and the network as the config builds it for
that observation (``--encoder``: the Nature CNN's weights and feature maps for an image, the MLPs
on its features). It is a lower bound of the real footprint, so only runs that surely cannot fit
are refused.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch

from .config import ConfigError, PPOConfig
from .diskspace import human_bytes

#: bytes of one Gymnasium env instance (a Python object with its spaces and RNG), a conservative guess
GYM_ENV_BYTES = 20_000
#: bytes of one ``--vector async`` worker process of its own (forked: what it does not share with the
#: run; measured ~5 MB private, ~20 MB PSS, per Pendulum-v1 worker), a lower bound
ASYNC_WORKER_BYTES = 4 << 20


def free_memory(device: torch.device) -> Optional[int]:
    """Bytes free on ``device`` (cuda: mem_get_info; cpu: MemAvailable of /proc/meminfo, or less where
    a cgroup memory limit leaves less: cpuinfo.cgroup_free_memory), None if unknown."""
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except Exception:
            return None
    from .cpuinfo import cgroup_free_memory

    host = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    host = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    # a container (`docker --memory`) sees the host's MemAvailable: past its own limit the kernel
    # SIGKILLs the run without a word, so the limit is what must fit
    known = [v for v in (host, cgroup_free_memory()) if v is not None]
    return min(known) if known else None


class EnvSizes(tuple):
    """What a probe learns of the env: ``(obs_size, act_size, native)`` as a tuple (what callers
    unpack: obs_size is the per-env obs tensor's element count, a Dict's keys packed), plus
    ``layout`` (envs.spaces.ObsLayout: the obs tensor's dtype, its images) for check_fits."""

    def __new__(cls, obs_size: int, act_size: int, native: bool, layout=None):
        self = super().__new__(cls, (int(obs_size), int(act_size), bool(native)))
        self.layout = layout
        self.processes = []  # the async worker processes of the env the sizes were read from (env_sizes)
        return self

    @property
    def workers(self) -> int:
        """How many of ``processes`` still run (their env not closed)."""
        return sum(map(_running, self.processes))


def obs_bytes(cfg: PPOConfig, layout) -> int:
    """Bytes per obs element in the rollout buffers: 1 for uint8 tensors (images, all-uint8 Dicts)
    unless --norm-obs stores them normalized as float32 (trainer.py), else 4."""
    return 1 if layout is not None and layout.dtype == torch.uint8 and not cfg.norm_obs else 4


def estimate_bytes(cfg: PPOConfig, obs_size: int, act_size: int, native: bool, layout=None,
                   device: Optional[torch.device] = None) -> int:
    """Lower bound of the memory a run needs (bytes) beside network_bytes: per-sample buffers x T x N
    + per-env state x N, plus what the bootstrap pass's critic activations on ``device`` take beyond
    one minibatch's activations (``bootstrap_bytes``; None: as off the CPU).
    ``layout`` (the env's ObsLayout; None: float32 obs, an MLP): the obs buffers' element size, and
    the critic's activations (hidden layers, none for a single image; the CNN's feature maps)."""
    return (rollout_bytes(cfg, obs_size, act_size, layout) + bootstrap_bytes(cfg, layout, device)
            + cfg.num_envs * env_bytes(obs_size, native))


def rollout_bytes(cfg: PPOConfig, obs_size: int, act_size: int, layout=None) -> int:
    """The per-sample buffers x T x N of estimate_bytes: the rollout's and the update's, which no
    --num-minibatches shrinks (only a minibatch's activations shrink with more of them)."""
    per_sample = (2 * obs_size * obs_bytes(cfg, layout)  # obs, final_obs (float32; uint8 pixels)
                  + act_size * 8              # actions (int64 or float32)
                  + 4 * 4 + 2                 # logprobs, values, rewards, raw_rewards; terminated, dones
                  + 3 * 4 + 8)                # advantages, returns, next values; the minibatch permutation
    return cfg.num_steps * cfg.num_envs * per_sample


def bootstrap_rows(cfg: PPOConfig, device: Optional[torch.device] = None) -> int:
    """Rows of one critic call of ppo.next_values on ``device``. Off the CPU (and for None) it
    evaluates every step, ``ppo.bootstrap_steps`` whole steps of num_envs rows a call: at most one
    minibatch's rows, at least one step's. On the CPU it surely evaluates only the last step,
    num_envs rows; the truncated steps come in such chunks too, but only where episodes were
    truncated, which no config promises, so a lower bound leaves them out."""
    from .ppo import bootstrap_steps

    if device is not None and torch.device(device).type == "cpu":
        return cfg.num_envs
    return bootstrap_steps(cfg.num_steps, cfg.num_envs, minibatch_rows(cfg)) * cfg.num_envs


def bootstrap_bytes(cfg: PPOConfig, layout=None, device: Optional[torch.device] = None) -> int:
    """What the bootstrap pass's critic activations (``bootstrap_rows`` on ``device``, each its hidden
    layers and the Nature CNN's input and feature maps) take beyond one minibatch's activations
    (network_terms: both MLPs and the CNN over minibatch_rows). The pass ends before the update
    starts, whose activations then reuse its memory: the run holds the larger of the two, never
    their sum. Nonzero only when a call's rows exceed a minibatch's (num_minibatches > num_steps:
    one step of N rows)."""
    per_row = sum(_mlp_hidden(cfg, layout)) + _cnn_activations(cfg, layout)
    return max(0, bootstrap_rows(cfg, device) * per_row - _minibatch_activations(cfg, layout) // 4) * 4


def _minibatch_activations(cfg: PPOConfig, layout) -> int:
    """network_terms's activations: one minibatch through both MLPs and the CNN (bytes)."""
    return minibatch_rows(cfg) * (2 * sum(_mlp_hidden(cfg, layout)) + _cnn_activations(cfg, layout)) * 4


def env_bytes(obs_size: int, native: bool) -> int:
    """Lower bound of one env's state: a few obs-sized tensors (torch-native), or a Gymnasium object."""
    return obs_size * 4 * 4 + 64 if native else GYM_ENV_BYTES


def eval_bytes(cfg: PPOConfig, obs_size: int, native: bool) -> int:
    """Lower bound of the evaluation's envs: evaluate.evaluate builds one env per --eval-episodes
    episode, at --eval-every and at the end, while the run still holds its buffers."""
    return cfg.eval_episodes * env_bytes(obs_size, native)


def network_bytes(cfg: PPOConfig, obs_size: int, act_size: int, layout=None) -> int:
    """Lower bound of the actor's and critic's memory (bytes): float32 weights, their gradients and
    Adam's two moments (4 copies), plus one minibatch's activations (hidden layers of both MLPs,
    the CNN's feature maps) for the encoder the config gives (``layout`` None: a flat obs, MLPs)."""
    return sum(network_terms(cfg, obs_size, act_size, layout))


def network_terms(cfg: PPOConfig, obs_size: int, act_size: int, layout=None) -> tuple[int, int]:
    """network_bytes in its two parts: (weights with gradients and Adam state, one minibatch's activations)."""
    from .nets import CNN_FEATURES, cnn_takes

    sizes = _mlp_hidden(cfg, layout)
    feat, params, per_row = obs_size, 0, 0
    cnn = layout is not None and _encoder(cfg, layout) == "cnn"
    if layout is not None and (layout.is_dict or layout.has_image or cnn):  # cnn: a float image in [0, 1] too
        feat = 0
        for part in layout.parts:  # nets.DictEncoder: Nature CNN per image of 36x36 and up under cnn, else the key flattened
            if cnn and cnn_takes(part):
                p, acts = _cnn_terms(part)
                params, per_row, feat = params + p, per_row + acts, feat + CNN_FEATURES
            else:
                feat += part.size
    for out in (act_size, 1):  # the actor's head, then the critic's
        layers = [feat, *sizes, out]
        params += sum(a * b + b for a, b in zip(layers[:-1], layers[1:]))
    return 4 * 4 * params, minibatch_rows(cfg) * (2 * sum(sizes) + per_row) * 4


def _cnn_activations(cfg: PPOConfig, layout) -> int:
    """Float activations per row of the Nature CNNs the config builds for ``layout`` (0 without one)."""
    from .nets import cnn_takes

    if layout is None or _encoder(cfg, layout) != "cnn":
        return 0
    return sum(_cnn_terms(part)[1] for part in layout.parts if cnn_takes(part))


def _encoder(cfg: PPOConfig, layout) -> str:
    """'cnn' or 'mlp': the encoder the run would build (nets.resolve_encoder); an encoder it would
    refuse is refused later, by the Trainer, with its own line."""
    from .nets import resolve_encoder

    try:
        return resolve_encoder(cfg.encoder, layout)
    except ConfigError:
        return "mlp"


def _mlp_hidden(cfg: PPOConfig, layout) -> list:
    """The hidden widths of the actor and critic: none for a single image through the CNN, uint8 or a
    float one in [0, 1] (linear heads on its features, as CleanRL's ppo_atari), else --hidden-sizes."""
    if layout is not None and not layout.is_dict and _encoder(cfg, layout) == "cnn":
        return []
    return list(cfg.hidden_sizes)


def _cnn_terms(part) -> tuple[int, int]:
    """(parameters, activations per row) of nets.NatureCNN for the image ``part``: conv 8/4, 4/2, 3/1
    (32, 64, 64 channels), then a 512-wide linear layer; the activations are the float input and
    the three feature maps."""
    from .nets import CNN_FEATURES

    params, acts, flat = _cnn_convs(part)
    return params + flat * CNN_FEATURES + CNN_FEATURES, acts + CNN_FEATURES


def _cnn_convs(part) -> tuple[int, int, int]:
    """(parameters, activations per row, flattened features) of nets.NatureCNN's three convolutions for the
    image ``part``: the features are the inputs of its 512-wide linear layer, 64 x h' x w'."""
    from .nets import cnn_chw

    c, h, w = cnn_chw(part)  # a frame stack (N, H, W, C): N * C channels
    params, acts, size = 0, c * h * w, (h, w)
    for c_in, c_out, k, stride in ((c, 32, 8, 4), (32, 64, 4, 2), (64, 64, 3, 1)):
        size = tuple((d - k) // stride + 1 for d in size)
        params += c_in * c_out * k * k + c_out
        acts += c_out * size[0] * size[1]
    return params, acts, 64 * size[0] * size[1]


def minibatch_rows(cfg: PPOConfig) -> int:
    return cfg.num_envs * cfg.num_steps // max(cfg.num_minibatches, 1)


def check_fits(cfg: PPOConfig, device: torch.device, probe=None, processes: int = 1) -> None:
    """Raise ConfigError when the run surely does not fit in the free memory of ``device``.

    processes: the ranks of ``--nproc K`` (the launcher's check); on the CPU they share the machine's
    memory, each with its own buffers and networks, so K of them must fit (on CUDA each has a GPU).

    probe(): (obs_size, act_size, native) of the env (env_sizes of a built env, or env_probe, which
    builds one), called whenever the free memory is known: no size of the run without the env's
    bounds its cost, since one observation may hold any number of values (an Atari frame stack
    28,224, a camera millions). Without a probe the env is sized as 1 value each way: a lower bound
    that refuses absurd --num-envs before any env is built (train() checks so, then the Trainer
    again with the env it built, before the agent and buffers exist).

    ``--vector async`` forks a worker process per Gymnasium env (per rank): more than RLIMIT_NPROC
    or pid_max allows, or more than the host's free memory holds at ASYNC_WORKER_BYTES each beside
    the run, is refused naming --num-envs and --vector (the probe is then called even when the
    device's free memory is unknown; workers of an env still open are not counted again).
    """
    free = free_memory(device)
    sizes = probe() if probe is not None and (free is not None or cfg.vector == "async") else None
    workers = max(0, processes * async_workers(cfg, None if sizes is None else sizes[2]) - getattr(sizes, "workers", 0))
    check_process_count(cfg, workers, processes)
    if free is None:
        check_workers_memory(cfg, workers, device, 0)
        return
    sizes = sizes if sizes is not None else (1, 1, True)
    obs_size, act_size, native = sizes
    layout = getattr(sizes, "layout", None)
    evals = eval_bytes(cfg, obs_size, native)  # held with the run's buffers: they add up
    buffers = estimate_bytes(cfg, obs_size, act_size, native, layout, device) + evals
    nets = network_bytes(cfg, obs_size, act_size, layout)
    if buffers + nets <= free:
        ranks = processes if device.type == "cpu" else 1
        need = ranks * (buffers + nets) - (ranks - 1) * evals  # rank 0 alone evaluates at the end
        if ranks <= 1 or need <= free:
            # the workers live in the host's memory, beside the run's buffers when those are there too
            check_workers_memory(cfg, workers, device, need if device.type == "cpu" else 0)
            return
        raise ConfigError(f"--nproc {ranks}: {ranks} processes on {device} each hold their own buffers and networks, "
                          f"~{human_bytes(buffers + nets)} each, ~{human_bytes(need)} in all, {human_bytes(free)} free; "
                          "lower --nproc, --num-envs or --num-steps")
    if nets >= buffers:  # the networks are what does not fit: name the flags of their larger part
        weights, activations = network_terms(cfg, obs_size, act_size, layout)
        if activations > weights:  # one minibatch's rows through both MLPs
            lower = "--num-envs or --num-steps" if cfg.num_steps > 1 else "--num-envs"
            head = (f"one minibatch (--num-envs {cfg.num_envs} x --num-steps {cfg.num_steps} / --num-minibatches "
                    f"{cfg.num_minibatches} = {minibatch_rows(cfg):,} rows) needs ~{human_bytes(activations)} of "
                    f"activations on {device} (~{human_bytes(buffers + nets)} in all), {human_bytes(free)} free; ")
            # more minibatches shrink only the activations: name them only if they are enough
            most = dataclasses.replace(cfg, num_minibatches=most_minibatches(cfg))
            least = (estimate_bytes(most, obs_size, act_size, native, layout, device) + evals
                     + network_bytes(most, obs_size, act_size, layout))
            if least <= free:
                raise ConfigError(f"{head}raise --num-minibatches, or lower {lower}")
            # what does not fit at any count: the batch's buffers (and, at one step a run, the bootstrap
            # pass's critic activations over N rows), never the minibatch that more minibatches shrink
            flags = _rows_flags(most, layout, device, least)
            held = rollout_bytes(most, obs_size, act_size, layout)
            what = "the rollout buffers"
            if "--hidden-sizes" in flags:
                held, what = held + bootstrap_bytes(most, layout, device), "the rollout buffers and the bootstrap pass"
            raise ConfigError(f"{head}lower {flags}: {what} alone need ~{human_bytes(held)} (at any --num-minibatches)")
        if 2 * cnn_weight_bytes(cfg, layout) > weights:  # the CNN's (the image size), not the MLPs' (--hidden-sizes)
            raise ConfigError(cnn_refusal(cfg, layout, device, weights, nets, free))
        raise ConfigError(f"--hidden-sizes {','.join(map(str, cfg.hidden_sizes))}: the actor and critic need ~{human_bytes(nets)} "
                          f"on {device} (weights, gradients, Adam state, activations), {human_bytes(free)} free; lower --hidden-sizes")
    if evals >= buffers / 2:  # the evaluation's envs are what does not fit (--eval-episodes 10**11)
        raise ConfigError(f"--eval-episodes {cfg.eval_episodes:,}: the evaluation builds one env per episode, ~{human_bytes(evals)} "
                          f"on {device} (~{human_bytes(buffers + nets)} in all), {human_bytes(free)} free; lower --eval-episodes")
    raise ConfigError(f"--num-envs {cfg.num_envs} x --num-steps {cfg.num_steps}: needs ~{human_bytes(buffers + nets)} on {device}, "
                      f"{human_bytes(free)} free; lower {_rows_flags(cfg, layout, device, buffers)}")


def _rows_flags(cfg: PPOConfig, layout, device: torch.device, need: int) -> str:
    """The flags to lower when the batch's rows are what does not fit (``need`` bytes): --num-envs,
    --num-steps unless it is 1 already, and --hidden-sizes where the bootstrap pass's critic
    activations, which grow with the layer widths too, are half of it or more."""
    flags = ["--num-envs"] + (["--num-steps"] if cfg.num_steps > 1 else [])
    if bootstrap_rows(cfg, device) * sum(_mlp_hidden(cfg, layout)) * 4 >= need / 2:
        flags.append("--hidden-sizes")
    return ", ".join(flags[:-1]) + " or " + flags[-1] if len(flags) > 1 else flags[0]


def most_minibatches(cfg: PPOConfig) -> int:
    """The largest --num-minibatches config.validate accepts for this batch: one that divides
    num_envs x num_steps and, with --norm-adv, leaves minibatches of 2 rows or more (the smallest
    prime factor of the batch, which is the smaller of its factors')."""
    batch = cfg.num_envs * cfg.num_steps
    if not cfg.norm_adv:
        return max(batch, 1)
    factors = [_smallest_factor(n) for n in (cfg.num_envs, cfg.num_steps) if n > 1]
    return batch // min(factors) if factors else 1


def _smallest_factor(n: int) -> int:
    """The smallest prime factor of n > 1; trial division up to 10**6, above which n is taken as
    prime (a count of that size surely does not fit anyway, whatever the minibatches)."""
    if n % 2 == 0:
        return 2
    d = 3
    while d * d <= n and d <= 10**6:
        if n % d == 0:
            return d
        d += 2
    return n


def async_workers(cfg: PPOConfig, native: Optional[bool] = None) -> int:
    """Worker processes one run's env forks: ``--vector async`` gives each Gymnasium env its own,
    forked at once; the native and EnvPool envs ignore --vector. ``native``: what the probe read
    from a built env (None: from --backend, as make_env resolves it)."""
    if cfg.vector != "async":
        return 0
    if native is None:
        from .envs import auto_backend

        # every caller builds this env next (a resumed run's id only once named or trusted): its module may be imported
        native = (cfg.backend if cfg.backend != "auto"
                  else auto_backend(cfg.env_id, cfg.env_kwargs, imported_only=False)) != "gymnasium"
    return 0 if native else cfg.num_envs


def process_limit() -> Optional[tuple]:
    """(processes, what bounds them) this user may start: RLIMIT_NPROC's soft limit or the kernel's
    pid_max, the lower; None when neither is known or bounded."""
    import resource

    limits = []
    try:
        soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        if soft != resource.RLIM_INFINITY and soft > 0:
            limits.append((int(soft), "the RLIMIT_NPROC limit (ulimit -u)"))
    except (AttributeError, OSError, ValueError):
        pass
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            limits.append((int(f.read().split()[0]), "the kernel's pid_max"))
    except (OSError, ValueError, IndexError):
        pass
    return min(limits) if limits else None


def _async_flags(cfg: PPOConfig) -> str:
    return f"--num-envs {cfg.num_envs} with --vector async (one worker process per env)"


def check_process_count(cfg: PPOConfig, workers: int, processes: int = 1) -> None:
    """ConfigError when the async workers of the run (all its ranks) are more processes than this
    user may start: forking them would fail part way, each fork a traceback."""
    limit = process_limit() if workers > 0 else None
    if limit is not None and workers >= limit[0]:
        ranks = f" for --nproc {processes}" if processes > 1 else ""
        raise ConfigError(f"{_async_flags(cfg)}: {workers:,} processes{ranks}, more than {limit[1]} allows ({limit[0]:,}); "
                          "use --vector sync (one process) or lower --num-envs")


def check_workers_memory(cfg: PPOConfig, workers: int, device: torch.device, held: int) -> None:
    """ConfigError when the async workers (ASYNC_WORKER_BYTES each), with ``held`` bytes the run
    keeps in host memory beside them, surely do not fit in the host's free memory (whatever
    ``device`` trains on: the workers are CPU processes)."""
    if workers <= 0:
        return
    free = free_memory(torch.device("cpu"))
    need = workers * ASYNC_WORKER_BYTES
    if free is not None and need + held > free:
        beside = f" beside the run's ~{human_bytes(held)}" if held else ""
        raise ConfigError(f"{_async_flags(cfg)}: {workers:,} processes need ~{human_bytes(need)} of memory (~"
                          f"{human_bytes(ASYNC_WORKER_BYTES)} each){beside}, {human_bytes(free)} free; use --vector sync "
                          "(one process) or lower --num-envs")


#: cnn_refusal's and cnn_size_note's fix for images far beyond the Nature CNN's size
DOWNSCALE = "downscale the env's images (the Nature CNN was made for 84x84)"
#: the inputs of the Nature CNN's linear layer for the 84x84 frames it was made for: 64 x 7 x 7
NATURE_FLAT = 3136
#: cnn_size_note speaks above this many times NATURE_FLAT: at 10x the linear layer alone is 16M weights
#: (~190 MB a checkpoint with Adam's moments), past any image a run needs at that size; full, unresized
#: Atari frames (210x160: 22,528 inputs, 7.2x), which runs do train on, stay below it
CNN_NOTE_RATIO = 10


def cnn_size_note(cfg: PPOConfig, layout, encoder: Optional[str] = None) -> Optional[str]:
    """A note for a run whose Nature CNN reads images far beyond its 84x84 (a linear layer of more than
    CNN_NOTE_RATIO x NATURE_FLAT inputs): such a run fits and trains, silently, a network of ~100M parameters
    (a 400x600 render frame stack: 108M, a 1.3 GB checkpoint, 2 steps/s on a CPU), where one resize makes it
    the 1.7M of Atari's; None for any other run (check_fits refuses those that do not fit at all).
    ``encoder``: the one resolved (None: resolved here from cfg.encoder)."""
    from .nets import cnn_image, cnn_takes

    if layout is None or (encoder or _encoder(cfg, layout)) != "cnn":
        return None
    parts = [part for part in layout.parts if cnn_takes(part)]
    flat = max((_cnn_convs(part)[2] for part in parts), default=0)
    if flat <= CNN_NOTE_RATIO * NATURE_FLAT:
        return None
    from .nets import CNN_FEATURES

    params = sum(_cnn_terms(part)[0] for part in parts)
    ckpt = 3 * 4 * params  # float32 weights and Adam's two moments
    kept = _kept_checkpoints(cfg, ckpt)
    images = ", ".join(str(cnn_image(part)[1]) for part in parts)
    return (f"{images} images through the Nature CNN: its linear layer is {flat:,} x {CNN_FEATURES} "
            f"({flat / NATURE_FLAT:.0f}x the {NATURE_FLAT:,} x {CNN_FEATURES} of an 84x84 frame), ~{params / 1e6:.0f}M parameters, "
            f"~{human_bytes(ckpt)} a checkpoint{kept}, and slow steps; {DOWNSCALE}: wrap the env in "
            f"gymnasium.wrappers.ResizeObservation(env, (84, 84)) (it needs opencv) before any frame stack")


def _kept_checkpoints(cfg: PPOConfig, ckpt: int) -> str:
    """cnn_size_note's disk figure for checkpoints of ``ckpt`` bytes: the --keep-checkpoints K periodic
    ones, and under --eval-every checkpoints/best.pt, a whole checkpoint beside them (trainer._evaluate_now
    writes the same state there); "" for one checkpoint on disk."""
    best = cfg.eval_every > 0
    plus = " plus --eval-every's best.pt" if best else ""
    if cfg.keep_checkpoints == 0:
        return f" (--keep-checkpoints 0 keeps every one{plus})"
    if cfg.keep_checkpoints == 1 and not best:
        return ""
    kept = f"--keep-checkpoints {cfg.keep_checkpoints}" if cfg.keep_checkpoints > 1 else "one kept"
    return f" ({kept}{plus}: ~{human_bytes((cfg.keep_checkpoints + best) * ckpt)})"


def cnn_weight_bytes(cfg: PPOConfig, layout) -> int:
    """The Nature CNNs' part of network_terms's weights (4 copies of float32 parameters); 0 without one."""
    from .nets import cnn_takes

    if layout is None or _encoder(cfg, layout) != "cnn":
        return 0
    return 4 * 4 * sum(_cnn_terms(part)[0] for part in layout.parts if cnn_takes(part))


def cnn_refusal(cfg: PPOConfig, layout, device: torch.device, weights: int, nets: int, free: int) -> str:
    """The line for a CNN that does not fit, its weights the larger part: the Nature CNN's linear layer
    has 64 x h' x w' x 512 weights (h', w': the image's height and width over about 8), so the image
    size is what to lower; fewer rows (--num-envs, --num-steps) help only when the weights alone fit."""
    from .nets import cnn_image, cnn_takes

    images = ", ".join(str(cnn_image(part)[1]) for part in layout.parts if cnn_takes(part))
    fix = DOWNSCALE
    if weights < free:
        fix += ", or lower --num-envs or --num-steps" if cfg.num_steps > 1 else ", or lower --num-envs"
    return (f"{images} images through the Nature CNN: the actor and critic need ~{human_bytes(nets)} on {device} "
            f"(~{human_bytes(weights)} of weights, gradients and Adam state, which grow with the image size), "
            f"{human_bytes(free)} free; {fix}")


def env_sizes(env, env_id: str) -> EnvSizes:
    """The sizes check_fits needs, read from a built env (one of the run's own, or preflight's)."""
    from .envs.spaces import obs_layout

    # the obs tensor's shape, not the space's: a Dict space has none (its keys are packed)
    obs = int(math.prod(env.obs_shape))
    act = int(math.prod(env.single_action_space.shape or (1,)))
    sizes = EnvSizes(obs, act, env.backend != "gymnasium", obs_layout(env.single_observation_space, env_id))
    # an env kept open (the Trainer's) has forked its async workers already: free memory counts them,
    # and check_fits must not count them again; a probe's env closed since (preflight's) has none left
    sizes.processes = list(getattr(getattr(env, "envs", None), "processes", None) or ())
    return sizes


def _running(process) -> bool:
    try:
        return process.is_alive()
    except ValueError:  # closed
        return False


def env_probe(cfg: PPOConfig):
    """A probe for check_fits that builds one env of its own to read its sizes (populations and
    bench, which build theirs later; a run checks with the env it built, Trainer)."""

    def probe() -> EnvSizes:
        from .envs import make_env

        env = make_env(cfg.env_id, 1, "cpu", cfg.backend, cfg.vector, seed=cfg.seed, env_kwargs=cfg.env_kwargs)
        try:
            return env_sizes(env, cfg.env_id)
        finally:
            env.close()

    return probe
