"""Evaluation: run a policy for a number of episodes and report the mean and std of the return."""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import sys
from pathlib import Path
from typing import Callable, Optional, Union

import torch

from .config import EVAL_SEED_OFFSET
from .config import MAX_EVAL_STEPS as MAX_STEPS
from .envs import EnvError, make_env
from .envs.base import native_failure
from .envs.gym_adapter import UntrustedEnvError  # noqa: F401 - what evaluate raises for a recorded module env


#: the default env seed of a policy whose config records no seed
FALLBACK_SEED = 12345


class EvaluationStopped(Exception):
    """``evaluate(stop=...)``: the stop check said yes before the episodes ended; no result exists
    (a mean over part of the episodes would be a number for an evaluation that never happened)."""


def load_run_policy(path, **kwargs):
    """checkpoint.load_policy(``path``, **kwargs) for ``proxima eval``. A run directory (or its
    checkpoints/ folder, checkpoint.source_path) whose newest checkpoint does not load (cut short,
    damaged) is refused as before, never evaluated from another step in its place, but the line names
    the newest one that does load, to evaluate by name, or, when none does, what to do then; another
    run's checkpoint copied into it is refused as a resume refuses it (checkpoint.load_run_newest, as
    proxima.load() and --init-from read a run directory)."""
    import shlex

    from .checkpoint import load_policy, load_run_newest
    from .rundir import expand_home as _expand_home

    # a shell expands ~ on the command line; a Python caller's path gets the same
    return load_run_newest(_expand_home(path), lambda p: load_policy(p, **kwargs), "evaluate",
                           lambda f: f"proxima eval {shlex.quote(str(f))}")


def default_seed(policy) -> int:
    """The env seed ``proxima eval`` uses by default: the run's seed + 1,000,000 (envs the run never
    trained on, and the numbers of its end-of-training eval.json)."""
    seed = (getattr(policy, "config", None) or {}).get("seed")
    return int(seed) + EVAL_SEED_OFFSET if isinstance(seed, int) and not isinstance(seed, bool) else FALLBACK_SEED


#: episode_seeds' seeds fit in 31 bits: each is a valid --seed of ``proxima check-env`` and ``train``
#: (config.MAX_SEED) and an int32 (EnvPool's)
_EPISODE_SEED_MASK = 2**31 - 1


def episode_seeds(seed: int, episodes: int) -> list[int]:
    """The env seeds of an evaluation's episodes on Gymnasium envs: ``episodes`` ints in 0..2**31 - 1,
    episode i played in env i from ``env.reset(seed=episode_seeds(seed, episodes)[i])``, so a plain
    Gymnasium loop replays it. ``seed`` is the evaluation's seed (eval.json's ``seed``,
    ``--seed``; default_seed). Drawn from numpy's ``SeedSequence(seed)``, whose words are hashed from
    the seed: two evaluation seeds give unrelated episode seeds (seeds s and s + 1, a population's
    members, share none but by a ~1e-8 chance), where episode i from ``seed + i`` gave seeds 1 and 2
    nine of their ten start states, and members' scores that were no independent samples.
    A prefix: ``episode_seeds(s, 20)[:10] == episode_seeds(s, 10)``, so an evaluation of 20 episodes
    contains the 10 of one of 10. ValueError (one line) for a negative or non-integer ``seed`` or
    ``episodes``."""
    import numpy as np

    if not _is_int(seed) or seed < 0:
        raise ValueError(f"episode_seeds: seed={seed!r}: must be an integer of at least 0")
    if not _is_int(episodes) or episodes < 0:
        raise ValueError(f"episode_seeds: episodes={episodes!r}: must be an integer of at least 0")
    words = np.random.SeedSequence(int(seed)).generate_state(int(episodes), dtype=np.uint32)
    return [int(w) & _EPISODE_SEED_MASK for w in words]


#: eval.json's ``episode_seeds`` of an evaluation on a Gymnasium or EnvPool env: its episodes were
#: seeded by :func:`episode_seeds` (:func:`pool_seed` for EnvPool). An eval.json of such an env without
#: it was written by an older Proxima, whose episode i started from ``seed + i`` (old_episode_seeds)
EPISODE_SEEDS = "SeedSequence"


def old_episode_seeds(data: dict) -> bool:
    """Whether an eval.json's episodes were seeded by the older rule (episode i from ``seed + i``):
    one without ``episode_seeds`` whose ``backend`` is not "native" (a native env's seeding did not
    change). One older still, recording no backend, is taken as it is (which env it ran is not known;
    as report.py takes one recording no global_step)."""
    backend = data.get("backend")
    return isinstance(backend, str) and backend != "native" and data.get("episode_seeds") != EPISODE_SEEDS


def pool_seed(seed: int) -> int:
    """The seed an evaluation builds EnvPool's pool with: ``episode_seeds(seed, 1)[0]``. EnvPool seeds
    its env i with the pool's seed + i, as Gymnasium's vector env does, so ``seed`` itself would give
    evaluation seeds s and s + 1 all but one start state in common; from this seed, two evaluations
    overlap only where their pool seeds lie within ``episodes`` of each other (a ~1e-8 chance for 10)."""
    return episode_seeds(seed, 1)[0]


def reset_seed(env, seed: int, episodes: int):
    """What an evaluation of seed ``seed`` resets its ``episodes`` envs with: :func:`episode_seeds`
    for Gymnasium's vector env (Atari's ALE included), which would seed its env i with ``seed + i``;
    :func:`pool_seed` for EnvPool (one seed for the pool, which make_eval_env builds it with);
    ``seed`` itself for a native env, whose one generator seeded ``seed`` draws the envs' start states
    as the rows of one draw (two seeds share no start state). Each built-in native env draws a start's
    numbers together, so env i's start is the same for any number of envs: episodes=3 are the first 3
    of episodes=10, as episode_seeds' prefix gives on Gymnasium's envs."""
    from .envs import GymnasiumEnv

    if isinstance(env, GymnasiumEnv):
        return episode_seeds(seed, episodes)
    return pool_seed(seed) if getattr(env, "backend", None) == "envpool" else seed


def default_episodes(policy) -> int:
    """The episodes ``proxima eval`` runs without --episodes, and evaluate() without ``episodes``:
    the run's eval_episodes (its config.yaml's, where the policy's file lies in RUN/checkpoints/;
    else the checkpoint's config), 10 where that is 0 or not recorded (report.run_eval_episodes)."""
    from .report import run_eval_episodes

    path = getattr(policy, "path", None)
    config = getattr(policy, "config", None)
    return run_eval_episodes(run_dir_named(path) if isinstance(path, (str, Path)) else None,
                             config if isinstance(config, dict) else None)


def run_dir_named(path: Union[str, Path]) -> Optional[Path]:
    """The run directory of ``path``: a run directory (RUN/checkpoints is RUN: checkpoint.source_path),
    or a checkpoint in RUN/checkpoints/; None for a loose checkpoint, which has no run files. Its
    config.yaml gives eval's episode count and its meta.json the run's kind, so eval and evaluate()
    read the same run. Relative as typed where ``path`` names its folder, so lines can print it so."""
    from .checkpoint import source_path

    path = source_path(path)
    if path.is_dir():
        return path
    # step_1.pt typed inside RUN/checkpoints/: its folder has a name only once made absolute
    folder = path.parent if path.parent.name else path.absolute().parent
    return folder.parent if folder.name == "checkpoints" else None


def run_backend(policy) -> str:
    """The env backend ``proxima eval`` uses by default: the one ``policy``'s run recorded in its config
    (what it trained and wrote eval.json on), "auto" for a policy whose config records none."""
    backend = (getattr(policy, "config", None) or {}).get("backend")
    return backend if isinstance(backend, str) else "auto"


#: what evaluate returns and where its env comes from, for a caller with SB3's evaluate_policy habits
SB3_EVALUATE_NOTE = ("evaluate plays the policy's own env (its run's env id; proxima.load(path, env_id=..., env_kwargs=...) "
                     "picks another) for episodes=N, and returns a dict (mean_return, std_return, returns, lengths, ...), "
                     "not SB3's (mean, std) tuple")


def _is_env(value) -> bool:
    """Whether ``value`` is an env object (Gymnasium's, its vector env's or Proxima's BatchedEnv): SB3's
    evaluate_policy(model, env) passes one where evaluate takes ``episodes``."""
    from .envs.base import BatchedEnv

    try:
        import gymnasium as gym

        kinds: tuple = (BatchedEnv, gym.Env, gym.vector.VectorEnv)
    except ImportError:
        kinds = (BatchedEnv,)
    return isinstance(value, kinds)


def _sb3_call(fn):
    """``fn`` (evaluate) refusing SB3's evaluate_policy(model, env, n_eval_episodes=N) call in one line that says
    what evaluate takes and returns (SB3_EVALUATE_NOTE), where Python said 'episodes=<TimeLimit...>: must be an
    integer' or a bare 'unexpected keyword argument'; its signature stays evaluate's (functools.wraps)."""
    import functools

    @functools.wraps(fn)
    def call(policy, *args, **kwargs):
        env = args[0] if args else kwargs.get("episodes")
        if _is_env(env):
            raise TypeError(f"evaluate: got an env ({_short(env)}) as its second argument, as SB3's evaluate_policy(model, env) "
                            f"takes one: {SB3_EVALUATE_NOTE}")
        if "n_eval_episodes" in kwargs:
            n = kwargs["n_eval_episodes"]
            raise TypeError(f"evaluate: n_eval_episodes={n!r} is SB3's evaluate_policy's name: give episodes={n!r}; "
                            f"{SB3_EVALUATE_NOTE}")
        return fn(policy, *args, **kwargs)

    return call


def _short(env) -> str:
    """An env object named by its id (its spec's, a BatchedEnv's env_id), else by its class."""
    name = getattr(getattr(env, "spec", None), "id", None) or getattr(env, "env_id", None)
    return f"{name!r}, a {type(env).__name__}" if isinstance(name, str) else type(env).__name__


@_sb3_call
@torch.no_grad()
def evaluate(policy, episodes: Optional[int] = None, deterministic: bool = True, seed: Optional[int] = None, backend: Optional[str] = None,
             max_steps: int = MAX_STEPS, video: Optional[str] = None, stop: Optional[Callable[[], bool]] = None) -> dict:
    """Run ``episodes`` episodes, one per env, each env's first episode (no bias towards short ones).
    ``episodes`` None (the default): :func:`default_episodes`, the run's --eval-episodes, as
    ``proxima eval`` without --episodes runs; a number given here wins.

    The policy's observation normalizer is applied frozen (its training statistics). Returns a
    dict with env_id, episodes, mean_return, std_return (the population standard
    deviation of the episode returns, ddof 0: np.std's and SB3's evaluate_policy's), returns, lengths, deterministic, seed (the env seed used,
    the default one included), backend (the one built: "auto" resolved, :func:`built_backend`) and
    max_steps (the step cap each episode ran under), ``env_normalizer_restarted`` (True) when the env wraps itself
    in gymnasium.wrappers.NormalizeObservation, whose statistics started afresh for the evaluation (so the
    policy saw other inputs than in training: normalizer_note), ``env_rewards_scaled`` (True) when the returns are
    of rewards the env's own gymnasium.wrappers.NormalizeReward scaled, with no RecordEpisodeStatistics inside it to
    record the game's (rewards_scaled_note), ``env_rewards_transformed`` (the wrappers' names, e.g. ["ClipReward"])
    when they are of rewards after the env's own gymnasium.wrappers.TransformReward or ClipReward, with no
    RecordEpisodeStatistics inside it (rewards_transformed_note), ``success_rate`` when the env reported info["is_success"] at the end of
    episodes (its mean over those, read as training reads it for charts/success_rate; ``success_episodes``: how many,
    when not all did: success_fields), ``env_kwargs`` when the env was given other
    constructor arguments than the run's (given_env_kwargs), and ``unfinished`` when some episodes had not
    ended after ``max_steps`` steps: those count as cut there, with their return so far, as a time
    limit would cut them; leaving them out would keep only the short episodes. ``seed`` seeds the envs
    (reset_seed: a Gymnasium env's episode i from ``episode_seeds(seed, episodes)[i]``, which a plain
    Gymnasium loop replays; a native env's one generator from ``seed``), numpy's global RNG, Python's
    ``random`` and torch's CPU generator (which an env may draw from: global_streams) and, with
    ``deterministic=False``, the action samples (one stream for all the envs: a stochastic episode
    depends on how many run beside it, so episode 0 of episodes=1 is not episode 0 of episodes=4,
    as deterministic episodes are); the caller's random states are left as they were;
    None: :func:`default_seed`, the run's seed + 1,000,000, as ``proxima eval`` (and the run's
    eval.json), so the numbers match the command line's.
    ``backend``: "auto", "native", "gymnasium" or "envpool" (make_env's) given here wins; None (the
    default): the backend the run recorded (:func:`run_backend`), as ``proxima eval`` without
    --backend and the run's eval.json use: "auto" would build CartPole's native env for a run trained
    on Gymnasium's, whose episodes (and returns) differ from the same seed.
    An env id read from the checkpoint that would import a module is refused (UntrustedEnvError)
    unless the policy was loaded with ``env_id=`` or ``trust_env=True`` (proxima.load,
    checkpoint.load_policy), in a line that names those arguments (the CLI's flags within
    :func:`command_line`).
    ``video``: a file for env 0's first episode (FrameRecorder says which frames; video.write_video
    the formats), checked with the env's first frame before any episode runs (a name that cannot be
    written: a VideoError naming ``video=``, or --video within command_line), written as the frames
    come at the env's render_fps (video.VideoFeed, video.render_fps); ``result["video"]`` is the path
    written. A video that cannot be finished is a VideoError that holds the result
    (write_episode_video); an evaluation that stops leaves no part of one (video.recording).
    A NaN/inf reward or observation from an env during its episode is a NonFiniteError naming the env
    index and the step (first_episodes): no result with a NaN mean is returned, nor written as JSON. ``stop``: checked before each step; once it
    returns true the evaluation is abandoned with EvaluationStopped (training's --eval-every: a
    SIGINT/SIGTERM must reach its checkpoint before torchrun's shutdown timeout kills the ranks).
    ``episodes`` and ``max_steps`` must be integers of at least 1 and ``seed`` None or one from 0 to
    MAX_SEED + EVAL_SEED_OFFSET, as the CLI's flags, and ``deterministic`` a bool (ValueError naming the argument). A policy from
    load_policy is evaluated under the run's torch thread count and flush-denormal mode (put back
    after: run_settings), so that its numbers are those of the run's own eval.json.
    """
    if episodes is None:
        episodes = default_episodes(policy)
    episodes, max_steps, seed = check_arguments(episodes, max_steps, seed)
    # a string is always true: deterministic="False" evaluated the deterministic policy without a word
    import numpy as np

    if not isinstance(deterministic, (bool, np.bool_)):
        raise ValueError(f"evaluate: deterministic={deterministic!r}: must be True or False")
    if not getattr(policy, "env_trusted", True):
        refuse_untrusted(policy)
    if seed is None:
        seed = default_seed(policy)
    if backend is None:
        backend = run_backend(policy)
    from .video import VideoError, check_video_path, recording

    if video is not None:  # a name that cannot be written fails now, not after the episodes
        from .rundir import expand_home as _expand_home

        given, video = video, _expand_home(video)  # "~/cartpole.mp4": the home directory's, not a folder named '~'
        try:
            check_video_path(video)
        except VideoError as e:
            if command_in_use() is not None or getattr(e, "reason", None) is None:
                raise  # proxima eval: its --video flag, as video.py words it
            # a library caller gave an argument, not a flag: named as episodes= and seed= are
            raise VideoError(f"evaluate: video={os.fspath(given)!r}: {e.reason}") from None
    # global_streams: an env drawing from np.random, random or torch plays the same episodes on every
    # call of one seed, and the caller's streams are put back; recording: headless SDL, and a SIGTERM
    # still removes the video's temp file
    with recording(video is not None), run_settings(policy), global_streams(seed):
        return _evaluate(policy, episodes, deterministic, seed, backend, max_steps, video, stop)


@contextlib.contextmanager
def global_streams(seed: int):
    """numpy's global RNG, Python's ``random`` and torch's CPU generator seeded from ``seed`` for the
    evaluation, the caller's states put back after (whether it returns or raises). An env that draws from
    np.random or random in reset() or step() (hand-written research code does) shares these streams under
    the sync vector env every evaluation builds: unseeded, each call drew other episodes, and none matched
    the run's eval.json, which training computes after its own draws. Seeded as the trainer seeds them
    (seed_everything) but from the evaluation's seed, so eval.json, ``proxima eval`` and evaluate() agree."""
    import random

    import numpy as np

    states = np.random.get_state(), random.getstate(), torch.random.default_generator.get_state()
    try:
        random.seed(seed)
        np.random.seed(seed)  # check_arguments keeps seed below 2**32, np.random.seed's bound
        # the CPU generator only: torch.manual_seed would reseed every CUDA device's too, which nothing puts back
        torch.random.default_generator.manual_seed(seed)
        yield
    finally:
        np.random.set_state(states[0])
        random.setstate(states[1])
        torch.random.default_generator.set_state(states[2])


def _evaluate(policy, episodes: int, deterministic: bool, seed: int, backend: str, max_steps: int,
              video: Optional[str], stop: Optional[Callable[[], bool]]) -> dict:
    env = make_eval_env(policy, episodes, backend, seed, render_mode="rgb_array" if video else None)
    recorder = None
    try:
        try:
            policy.check_env_spaces(env)  # a checkpoint evaluated on an env with other spaces: one line, not a shape error
            obs = env.reset(seed=reset_seed(env, seed, episodes))
            recorder = FrameRecorder(env, policy.env_id, video, feed=True) if video is not None else None
            devices = [policy.device] if policy.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices):  # stochastic actions drawn from ``seed``'s stream
                torch.manual_seed(seed)
                successes = [None] * episodes
                returns, lengths, finished = first_episodes(env, obs, lambda o: policy.batched_act(o, deterministic=deterministic),
                                                            max_steps, before_step=recorder.before_step if recorder else None,
                                                            env_id=policy.env_id, env_kwargs=eval_env_kwargs(policy), stop=stop,
                                                            successes=successes)
        finally:
            env.close()
        # what ran, recorded with the numbers: the seed and the backend each change the episodes played
        result = summarize(policy.env_id, returns, lengths, deterministic, finished, max_steps, seed=seed,
                           backend=built_backend(policy.env_id, backend, eval_env_kwargs(policy)))
        result.update(success_fields(successes))
        if "NormalizeObservation" in (getattr(env, "normalize_wrappers", None) or []):
            # the env's own wrapper normalized the observations with statistics that started afresh here, not
            # the training's: the policy saw other inputs than it trained on, and the numbers say less
            result["env_normalizer_restarted"] = True
        if getattr(env, "rewards_scaled", False) is True:
            # the returns summed are of the env's own NormalizeReward's scaled rewards (no RecordEpisodeStatistics
            # inside it gives the game's): not the game's score, and not comparable with a plain env's
            result["env_rewards_scaled"] = True
        transformed = getattr(env, "rewards_transformed", None)
        if transformed:  # likewise of a factory's own TransformReward/ClipReward (a clip, a scale): not the env's own
            result["env_rewards_transformed"] = list(transformed)
        given = given_env_kwargs(policy)
        if given is not None:  # numbers of another env than the run's: the result says which
            result = {"env_id": result["env_id"], "env_kwargs": given, **result}
        if video is not None:
            result["video"] = write_episode_video(recorder, video, result)
    except BaseException:
        if recorder is not None:  # a NaN, a stop, a Ctrl-C, SIGTERM: the video's temp file goes, not left beside --video
            recorder.abandon()
        raise
    return result


def _is_int(value) -> bool:
    import numbers

    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_arguments(episodes, max_steps, seed) -> tuple:
    """(episodes, max_steps, seed) as ints (seed may be None), or ValueError, one line naming the
    argument: what `proxima eval` checks of --episodes, --max-steps and --seed before it calls
    evaluate(), for a library caller (episodes=0 was a reshape error, seed=2**64 an overflow)."""
    from .config import MAX_SEED

    if not _is_int(episodes) or episodes < 1:
        raise ValueError(f"evaluate: episodes={episodes!r}: must be an integer of at least 1")
    if not _is_int(max_steps) or max_steps < 1:
        raise ValueError(f"evaluate: max_steps={max_steps!r}: must be an integer of at least 1")
    top = MAX_SEED + EVAL_SEED_OFFSET
    if seed is not None and (not _is_int(seed) or not 0 <= seed <= top):
        raise ValueError(f"evaluate: seed={seed!r}: must be None (the run's seed + {EVAL_SEED_OFFSET:,}) or an integer "
                         f"from 0 to {top:,}")
    return int(episodes), int(max_steps), None if seed is None else int(seed)


#: the command whose flags an untrusted env id's refusal names (command_line); None: a library caller's
_COMMAND: contextvars.ContextVar = contextvars.ContextVar("proxima_eval_command", default=None)


@contextlib.contextmanager
def command_line(command: str = "eval"):
    """Within it, evaluate()'s refusal of a recorded module:Class env id names the flags of
    ``proxima <command>`` (--env, --trust-run); outside it, load()'s arguments, which are what a
    library caller can give."""
    token = _COMMAND.set(command)
    try:
        yield
    finally:
        _COMMAND.reset(token)


def command_in_use() -> Optional[str]:
    """The ``proxima`` command whose words a refusal takes (command_line), None for a library caller."""
    return _COMMAND.get()


def refuse_untrusted(policy) -> None:
    """UntrustedEnvError when the env id ``policy`` read from its file would import a module, in the
    words of the caller who can allow it: the CLI's flags (gym_adapter.refuse_recorded_env) inside
    command_line(), else the arguments of proxima.load / checkpoint.load_policy."""
    from .envs.gym_adapter import imports_code, refuse_recorded_env

    source, command = policy.path or "checkpoint", _COMMAND.get()
    if command is not None:
        refuse_recorded_env(policy.env_id, source, command)
    elif imports_code(policy.env_id):
        module = policy.env_id.partition(":")[0]
        raise UntrustedEnvError(f"{source}: the recorded env '{policy.env_id}' would import and run module '{module}'; "
                                f"not done for an env id read from a file: load it with proxima.load({str(source)!r}, "
                                f"env_id={policy.env_id!r}) if you trust that module (or with trust_env=True to trust "
                                "this run's files)")


@contextlib.contextmanager
def run_settings(policy):
    """Torch's thread count and flush-denormal mode as the run had them while it evaluated
    (``policy.run_threads``, ``policy.run_flush_denormal``: load_policy reads them from the
    checkpoint), put back after. Both change the last bits of a float sum: `proxima eval` with
    torch's default threads gave -1219.33295288 where the run's eval.json holds -1219.33291303.
    Process-wide, as the Trainer sets them; a policy without them keeps the caller's."""
    threads, flush = getattr(policy, "run_threads", None), getattr(policy, "run_flush_denormal", None)
    undo = []
    if threads is not None and threads != torch.get_num_threads():
        undo.append(lambda before=torch.get_num_threads(): torch.set_num_threads(before))
        torch.set_num_threads(threads)
    if flush is not None:
        from .trainer import flush_denormal_on

        before = flush_denormal_on()
        if before != flush:
            undo.append(lambda: torch.set_flush_denormal(before))
            torch.set_flush_denormal(flush)
    try:
        yield
    finally:
        for put_back in reversed(undo):
            put_back()


def write_episode_video(recorder: "FrameRecorder", video: str, result: dict) -> str:
    """The video file of ``recorder``'s frames, finished (its VideoFeed's, or its list's written by
    video.write_video); a VideoError (frames that change shape, a full disk) comes after the
    episodes ran, so it names --video and the file and carries the evaluation: in its one line (what
    the command line prints) and as its ``result`` attribute (for library callers)."""
    from .video import VideoError, write_video

    try:
        return recorder.feed.finish() if recorder.feed is not None else write_video(recorder.frames, video, recorder.fps)
    except VideoError as e:
        why = str(e).removeprefix(f"{Path(video)}: ").removeprefix(f"{recorder.target}: ").removeprefix(f"--video {video}: ")
        error = VideoError(f"--video {video}: {why}; the evaluation itself ran: {format_result(result)}")
        error.result = result
        raise error from None


def eval_env_kwargs(policy) -> Optional[dict]:
    """The env kwargs the evaluation builds ``policy``'s env with (given, or the checkpoint's recorded ones)."""
    return getattr(policy, "env_kwargs", policy.config.get("env_kwargs"))


def given_env_kwargs(policy) -> Optional[dict]:
    """The env kwargs an evaluation records with its numbers (its result's ``env_kwargs``): those given
    in place of the run's recorded ones (proxima.load's ``env_kwargs=``, eval's --env-kwargs), ``{}``
    included when given for the run's own env; None where the recorded ones were used (the run's
    eval.json, which records none: its env is the run's) or another env id was given with none."""
    if getattr(policy, "env_kwargs_recorded", True):
        return None
    kwargs = getattr(policy, "env_kwargs", None)
    if not isinstance(kwargs, dict):
        return None
    if kwargs:
        return dict(kwargs)
    from .envs import same_env, same_game

    recorded = (getattr(policy, "config", None) or {}).get("env_id")
    own = isinstance(recorded, str) and (same_env(policy.env_id, recorded) or same_game(policy.env_id, recorded))
    return {} if own else None  # the run's own env not taking its recorded ones: {} was given


def make_eval_env(policy, episodes: int, backend: str, seed: int, render_mode: Optional[str] = None):
    """``episodes`` envs of the policy's env, built with its env_kwargs (checkpoint.Policy: given,
    or the checkpoint's recorded ones for the recorded env id). A build that fails with the recorded
    kwargs names the checkpoint they come from (not config.yaml, which eval never reads), so the
    user knows they can replace them."""
    kwargs = eval_env_kwargs(policy)
    check_eval_fits(policy, episodes, backend, kwargs)
    try:
        # training=False: Atari plays full games with raw rewards (no reward clipping), a lost life ending no
        # episode (EnvPool still builds with episodic_life, whose reset presses FIRE, and the step hides those ends)
        # EnvPool seeds its envs only as it builds them: built with the seed its reset takes (reset_seed), built once
        build_seed = pool_seed(seed) if built_backend(policy.env_id, backend, kwargs) == "envpool" else seed
        env = make_env(policy.env_id, episodes, device=policy.device, backend=backend, seed=build_seed,
                       render_mode=render_mode, training=False, env_kwargs=kwargs)
        env.check_actions = False  # actions from the policy, as the trainer's: no host read a step to check them
    except EnvError as e:
        caused = any(word in str(e) for word in [*kwargs, "argument"]) if kwargs else False  # by the kwargs, not a missing module
        if not caused or not getattr(policy, "env_kwargs_recorded", True):
            raise
        raise EnvError(f"{e} (env kwargs {json.dumps(kwargs)} recorded in {policy.path or 'the checkpoint'}; give others "
                       "with --env-kwargs JSON, or --env-kwargs '{}' for none)") from None
    if hasattr(env, "success_column"):  # a GymnasiumEnv: its note on an unusable info["is_success"] names what it feeds here
        env.success_column = "the evaluation's success_rate"
    return env


def built_backend(env_id: str, backend: str, env_kwargs) -> str:
    """The backend make_env builds for ``backend``: "auto" resolved as make_env resolves it
    (envs.auto_backend), any other as given. Only for an env this evaluation builds (its id named or
    trusted, refuse_untrusted): a module:Class's module is imported, as the build imports it."""
    from .envs import auto_backend

    return auto_backend(env_id, env_kwargs, imported_only=False) if backend == "auto" else backend


def check_eval_fits(policy, episodes: int, backend: str, env_kwargs) -> None:
    """EnvError (one line naming --episodes) when ``episodes`` envs cannot fit in the device's free
    memory: a lower bound (sizing.env_bytes per env), so that a count of 10**13 is refused before
    any allocation, not a traceback from the allocator (train checks --eval-episodes the same way)."""
    from math import prod

    from .envs.spaces import obs_layout
    from .sizing import env_bytes, free_memory, human_bytes

    space = getattr(policy, "observation_space", None)
    obs_size = prod(obs_layout(space, policy.env_id).shape) if space is not None else 1
    native = built_backend(policy.env_id, backend, env_kwargs) == "native"
    need, free = episodes * env_bytes(obs_size, native), free_memory(policy.device)
    if free is not None and need > free:
        raise EnvError(f"--episodes {episodes:,}: the evaluation builds one env per episode, ~{human_bytes(need)} on "
                       f"{policy.device}, {human_bytes(free)} free; lower --episodes")


#: how a Gymnasium env of the user's (module:Class) renders the frames of a video, as base.NativeEnv.render says it
#: for a native env
RENDER_HOW = ("; to record it, declare metadata = {'render_modes': ['rgb_array'], 'render_fps': 30} on its class, take "
              "render_mode=None in __init__ (self.render_mode = render_mode) and return an (H, W, 3) uint8 array from "
              "render() when it is 'rgb_array'")


class FrameRecorder:
    """The frames of env 0's first episode, for ``evaluate(video=...)``; env.render(0) is called only
    while that episode runs.

    An episode of L steps gives L + 1 frames, s0 (after reset) to the final state sL, as
    gymnasium.wrappers.RecordVideo records it. The backends reset a finished env inside their step,
    so the final frame is taken inside it: on the native envs (NativeEnv) each step's frame, in its
    ``before_autoreset`` hook (after the dynamics, before the reset); on Gymnasium's vector envs
    (Gymnasium's ALE too) s1..s(L-1) before each next step and sL in env 0's EnvCalls when its episode
    ends, before the vector env's same-step autoreset (GymnasiumEnv.on_episode_end). EnvPool's Atari
    resets a finished game inside its own compiled step, where nothing can be called: there the
    video has the L frames s0..s(L-1) and stops one frame before the final state.

    ``feed`` (evaluate): each frame goes to a video.VideoFeed that writes ``video`` as the frames come
    (at the env's video.render_fps), none kept; without it they are kept in ``frames``.
    """

    def __init__(self, env, env_id: str, video, feed: bool = False):
        from .envs import EnvError, GymnasiumEnv, NativeEnv
        from .video import VideoError, VideoFeed, check_frame, render_fps, video_target

        self.env, self.frames, self.steps, self.done, self.feed = env, [], 0, False, None
        try:
            first = env.render(0)
        except EnvError as e:  # the env's own reason (a missing pygame: Gymnasium's install hint)
            raise VideoError(f"--video {video}: {e}; evaluate without --video") from None
        if first is None:
            raise VideoError(f"--video {video}: env '{env_id}' renders no frames (no render_mode='rgb_array' "
                             f"support){RENDER_HOW if ':' in str(env_id) else ''}; evaluate without --video")
        try:  # before the episodes, not after them
            check_frame(first)
        except VideoError as e:
            raise VideoError(f"--video {video}: env '{env_id}' renders {e}; evaluate without --video") from None
        self.fps, self.target = render_fps(env), video_target(video) if feed else Path(video)
        if feed:  # its thread starts once the env gave a frame a video holds
            self.feed = VideoFeed(self.target, self.fps)
        self._keep(first)
        # NativeEnv.step calls before_autoreset between the dynamics and the same-step autoreset: the
        # state each step reached, the final one included (an env that overrides step() does not)
        self.in_step = isinstance(env, NativeEnv) and type(env).step is NativeEnv.step
        if self.in_step:
            env.before_autoreset = self._take_if_running  # this instance only; evaluate closes it
        elif isinstance(env, GymnasiumEnv):  # the final state of env 0's first episode, before its autoreset
            env.on_episode_end(0, self._take_if_running)

    def _take_if_running(self) -> None:
        if not self.done:  # the state this step reached, before a finished env is reset
            self._take()

    def _take(self) -> None:
        frame = self.env.render(0)
        if frame is not None:
            self._keep(frame)

    def _keep(self, frame) -> None:
        if self.feed is not None:
            self.feed.put(frame)
        else:
            self.frames.append(frame)

    def abandon(self) -> None:
        """The evaluation stopped: the video's temp file is removed (VideoFeed.abandon)."""
        if self.feed is not None:
            self.feed.abandon()

    def before_step(self, finished: torch.Tensor) -> None:
        self.done = bool(finished[0])
        if not self.done and not self.in_step and self.steps > 0:  # s_t before step t (s0 is taken)
            self._take()
        self.steps += 1


def first_episodes(env, obs: torch.Tensor, act, max_steps: int, before_step=None, env_id: Optional[str] = None,
                   env_kwargs: Optional[dict] = None, env_name=None, stop: Optional[Callable[[], bool]] = None,
                   successes: Optional[list] = None) -> tuple:
    """Step ``env`` (from ``obs``) with ``act(obs) -> action`` (the agent's actions: Discrete indices from 0,
    the env's ``action_offset`` added here) until every env finished its first
    episode or ``max_steps`` steps ran; returns (returns float64 (N,), lengths int64 (N,), finished
    bool (N,)) of those episodes (an unfinished one's sums so far). ``before_step(finished)`` is
    called before each step (video frames). An env that ``records_episodes`` (a Gymnasium env with its
    own RecordEpisodeStatistics) finishes at the first end that wrapper reports, with its figures: ends
    it did not see (lives lost under an EpisodicLife outside it) are stepped past, and an episode
    unfinished at ``max_steps`` has the env's (clipped) rewards summed over all its steps so far.

    A NaN/inf reward of an env in its first episode, or observation it is about to act on (the
    reset's included), raises NonFiniteError naming the field, the env index (``env_name(n)``,
    default ``env n``) and the evaluation step; with ``env_id`` the line ends with the check-env
    command (``env_kwargs``: the env's). Values after an env's first episode count for nothing and are
    not judged. Checked on the device each step and read with the per-step "all finished?" read.
    ``stop``: checked before each step; true raises EvaluationStopped. ``successes``: a list of N, whose item i
    becomes env i's first episode's info["is_success"] at its last step as a float in [0, 1] where the env
    reported a usable one (a GymnasiumEnv's ``episode_successes``, training's parsing), None left otherwise."""
    n = obs.shape[0]
    returns = torch.zeros(n, dtype=torch.float64, device=env.device)
    lengths = torch.zeros(n, dtype=torch.int64, device=env.device)
    finished = torch.zeros(n, dtype=torch.bool, device=env.device)
    # ``act`` gives the agent's indices, a BatchedEnv takes its space's values (start added); an env that is
    # not one (duck-typed, no action_offset) takes the actions as they come
    offset = getattr(env, "action_offset", None)
    check = _NonFiniteCheck(env_id, env_kwargs, env_name)
    check.reset(obs)
    # a Gymnasium env with its own RecordEpisodeStatistics: its episodes and figures (the game's score under a
    # ClipReward outside it), as training logs them. An end it did not report (a life lost under an EpisodicLife
    # outside it) does not finish the episode: the env's autoreset plays on in the same game. The rewards are
    # summed still, for the check and for an episode unfinished at max_steps
    recorded = getattr(env, "records_episodes", False)
    for step in range(1, max_steps + 1):
        if stop is not None and stop():
            raise EvaluationStopped(f"evaluation stopped before its step {step}")
        if before_step is not None:
            before_step(finished)
        action = act(obs)
        try:  # free unless the env raises: a native env's hook then gets the Gymnasium adapter's one line
            obs, reward, terminated, truncated, info = env.step(action if offset is None else action + offset)
        except Exception as e:
            native = native_failure(e, env_id or getattr(env, "env_id", type(env).__name__), f"evaluation step {step}")
            if native is not None:
                raise native from e
            raise
        bad_reward = ~finished & ~torch.isfinite(reward)
        returns += torch.where(finished, 0.0, reward.to(torch.float64))
        lengths += (~finished).to(torch.int64)
        ending = ~finished & (terminated | truncated)
        if recorded:  # only the wrapper's ends finish an episode (the adapter logs a length >= 1 at them alone)
            ending &= info["episode_length"] > 0
            returns = torch.where(ending, info["episode_return"].to(torch.float64), returns)
            lengths = torch.where(ending, info["episode_length"].to(torch.int64), lengths)
        reported = getattr(env, "episode_successes", None) if successes is not None else None
        if reported:  # a host read only at a step where an episode reported is_success
            first = ending.tolist()
            for i, value in reported.items():
                if first[i]:
                    successes[i] = value
        finished |= ending
        bad_obs = ~finished & ~_finite_rows(obs)  # acted on at the next step
        all_done, broken = torch.stack((finished.all(), bad_reward.any() | bad_obs.any())).tolist()  # one host read a step
        if broken:
            check.fail(step, reward, bad_reward, obs, bad_obs)
        if all_done:
            break
    return returns, lengths, finished


def _finite_rows(obs: torch.Tensor) -> torch.Tensor:
    """(N,) bool: every value of each env's observation is finite (integer observations always are)."""
    flat = obs.reshape(obs.shape[0], -1)
    if not flat.is_floating_point():
        return torch.ones(flat.shape[0], dtype=torch.bool, device=flat.device)
    return torch.isfinite(flat).all(-1)


class _NonFiniteCheck:
    """first_episodes' error lines: as training's guards word them (guards.py), with the evaluation's step."""

    def __init__(self, env_id: Optional[str], env_kwargs: Optional[dict], env_name):
        self.env_id, self.env_kwargs = env_id, env_kwargs
        self.name = env_name or (lambda i: f"env {i}")

    def _hint(self, call: str) -> str:
        if self.env_id is None:
            return ""
        from .envs.gym_adapter import check_env_cmd

        return f"; check the env's {call}() with: {check_env_cmd(self.env_id, self.env_kwargs)}"

    def reset(self, obs: torch.Tensor) -> None:
        if obs.is_floating_point():  # integer observations are always finite
            from .guards import check_reset

            check_reset(obs, None, self.env_id, self.env_kwargs, at="the evaluation's reset", name=self.name)

    def fail(self, step: int, reward: torch.Tensor, bad_reward: torch.Tensor, obs: torch.Tensor, bad_obs: torch.Tensor) -> None:
        from .guards import NonFiniteError, fmt_values

        # at one step the reward is named before the observation (a failure path: these reads cost nothing)
        field, values, bad = ("reward", reward, bad_reward) if bool(bad_reward.any()) else ("observation", obs, bad_obs)
        i = int(torch.nonzero(bad)[0, 0])
        value = fmt_values(values[i])
        raise NonFiniteError(f"non-finite {field} {value} from {self.name(i)} at evaluation step {step} (its first "
                             f"episode){self._hint('step')}")


def summarize(env_id: str, returns: torch.Tensor, lengths: torch.Tensor, deterministic: bool,
              finished: Optional[torch.Tensor] = None, max_steps: Optional[int] = None, seed: Optional[int] = None,
              backend: Optional[str] = None) -> dict:
    """The result dict of :func:`evaluate` from the episodes' returns and lengths (N,). An episode
    not ``finished`` after ``max_steps`` steps counts with its return so far (cut there, as a time
    limit would cut it) and is counted in ``unfinished``: dropping it would average the short
    episodes only, the bias one env per episode avoids. ``seed``, ``backend`` and ``max_steps``, where
    given, are recorded as they are (``max_steps`` whether or not an episode was cut)."""
    r, n = returns.cpu().numpy(), lengths.cpu().numpy()
    done = finished.cpu().numpy() if finished is not None else None
    unfinished = 0 if done is None else int((~done).sum())
    # std over the episodes divided by their number (ddof 0), as np.std and SB3's evaluate_policy give
    # it: the spread of these episodes, not an estimate for a sample of runs (report's std (n-1) is that)
    out = {"env_id": env_id, "episodes": int(r.shape[0]), "mean_return": float(r.mean()),
           "std_return": float(r.std()) if r.shape[0] > 1 else 0.0, "returns": [float(x) for x in r],
           "lengths": [int(x) for x in n], "deterministic": bool(deterministic)}
    if seed is not None:
        out["seed"] = int(seed)
    if backend is not None:
        out["backend"] = str(backend)
        if out["backend"] != "native":  # how its episodes were seeded: an older eval.json's were not (current_eval)
            out["episode_seeds"] = EPISODE_SEEDS
    if max_steps is not None:
        out["max_steps"] = int(max_steps)
    if unfinished:
        out["unfinished"] = unfinished
    return out


def success_fields(successes: list) -> dict:
    """``{"success_rate": ...}``, the mean of the first episodes' info["is_success"] (first_episodes'
    ``successes``) over those that reported one, with ``success_episodes`` (how many) when not every episode
    did; ``{}`` when none did (an env that never reports it, as charts/success_rate is blank for it)."""
    values = [v for v in successes if v is not None]
    if not values:
        return {}
    out = {"success_rate": float(sum(values) / len(values))}
    if len(values) < len(successes):
        out["success_episodes"] = len(values)
    return out


def success_note(result: dict) -> str:
    """``; success rate 0.80`` (``... over the 5 episodes that reported it``) for a result with a
    ``success_rate`` (success_fields), else "". Its counts are read as ``proxima report`` reads eval.json's
    (report._check_eval): a ``success_episodes`` that success_fields never writes (not a count, or not below
    ``episodes``: it is written only when fewer than all reported) or a rate of 0 episodes leaves the rate out
    (edited by hand), and a count without ``episodes`` to be below is not shown (the rate alone, as report.md's
    cell); a rate of -0.0 is 0.00."""
    import math

    rate, k, n = result.get("success_rate"), result.get("success_episodes"), result.get("episodes")
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not (math.isfinite(rate) and 0 <= rate <= 1):
        return ""  # none reported, or an eval.json edited by hand (1e308, nan, -5: no rate an evaluation writes)
    if _is_int(n) and n == 0:
        return ""  # no episode to report it: edited by hand
    if k is not None and not (_is_int(k) and 1 <= k and (not _is_int(n) or k < n)):
        return ""  # -3, 10 or 10**30 of a 10-episode evaluation: edited by hand, the rate with it
    over = f" over the {episodes_words(k)} that reported info['is_success']" if k is not None and _is_int(n) else ""
    return f"; success rate {rate + 0.0:.2f}{over}"  # + 0.0: -0.0 (no mean of 0s and 1s is negative) is 0.00


def current_eval(run_dir, global_step: int, episodes: int) -> Optional[dict]:
    """``run_dir``/eval.json when it already is the end-of-run evaluation a resume of a complete run
    would make: written at ``global_step`` with ``episodes`` deterministic episodes (the seed is the
    run's: the same numbers again). Else None: a missing, unreadable, edited (report.py's field
    checks) or other evaluation, and one of a Gymnasium or EnvPool env that an older Proxima seeded
    episode i of with ``seed + i`` (old_episode_seeds: evaluated again, from episode_seeds, so that a
    resumed population's members do not keep their overlapping start states). Only a regular file is
    read (the run directory is data)."""
    from .report import ReportError, _check_eval
    from .rundir import read_run_json

    path = Path(run_dir) / "eval.json"
    try:  # a regular file of at most 10 MB, no link out of the run, no nesting a parser recurses on (RunFileError)
        data = read_run_json(path, limit=10_000_000)
        if not isinstance(data, dict):
            return None
        _check_eval(path, data)
    except (OSError, UnicodeDecodeError, ValueError, ReportError):
        return None
    if edited_summary(data) is not None or old_episode_seeds(data):  # not what this evaluation measures: again
        return None
    same = (data.get("global_step") == global_step and data.get("episodes") == episodes and data.get("deterministic") is True
            and isinstance(data.get("mean_return"), (int, float)) and isinstance(data.get("std_return"), (int, float))
            and isinstance(data.get("env_id"), str))
    return data if same else None


def edited_summary(data: dict) -> Optional[str]:
    """``mean_return 500.00 and std_return 0.00 disagree with its returns (mean 116.40, std 97.53)`` when
    an eval.json's summary is not what its own ``returns`` give (evaluate's mean and ddof-0 std): the
    file was edited, and its headline is no measurement; None when they agree or there is nothing to
    compare (no returns, an older file, fields report.py's checks name)."""
    import math

    import numpy as np

    returns, mean, std = data.get("returns"), data.get("mean_return"), data.get("std_return")
    numbers = (int, float)
    if not (isinstance(returns, list) and returns and all(isinstance(v, numbers) and not isinstance(v, bool) for v in returns)
            and isinstance(mean, numbers) and isinstance(std, numbers)):
        return None
    try:  # an integer past a float's range (edited by hand) is no summary to compare: report.py's checks name it
        r, mean, std = np.asarray(returns, dtype=np.float64), float(mean), float(std)
    except OverflowError:
        return None
    if not (np.isfinite(r).all() and math.isfinite(mean) and math.isfinite(std)):
        return None
    want_mean, want_std = float(r.mean()), float(r.std()) if r.size > 1 else 0.0
    # summarize averages float32 returns in float32: its mean can be off by a few ulps of the largest
    # return, and its std by as much (a std of 0.0078 around 1e5 can come out 0.0). A slack of 8 ulps
    # of max|r| (scaled by log2 n for the sum), never under 1e-4, still catches a summary edited by hand
    ulps = 8 * max(1.0, math.log2(r.size)) * float(np.finfo(np.float32).eps) * float(np.abs(r).max())
    slack = max(1e-4, ulps)
    if all(math.isclose(got, want, rel_tol=1e-4, abs_tol=slack) for got, want in ((mean, want_mean), (std, want_std))):
        return None
    return (f"mean_return {mean:.2f} and std_return {std:.2f} disagree with its returns (mean {want_mean:.2f}, "
            f"std {want_std:.2f})")


def remove_stale_eval(run_dir) -> None:
    """Remove ``run_dir``/eval.json, the end-of-run evaluation of an earlier end that a resume has
    trained past: it no longer describes the run (the resumed run writes a new one at its end). A
    file that cannot be removed stays, with a note saying it describes an earlier step."""
    path = Path(run_dir) / "eval.json"
    if os.path.lexists(path) and not path.is_dir():
        try:
            path.unlink()
        except OSError as e:
            print(f"proxima: note: {path}: could not remove the earlier run's evaluation ({e.strerror or e}); "
                  "it describes an earlier step", file=sys.stderr)


def unfinished_note(result: dict) -> str:
    """"; 2 of them cut at 50 steps ..." for a result with episodes that had not ended, else ""."""
    k, limit = result.get("unfinished"), result.get("max_steps")
    if not k or not all(isinstance(v, int) and not isinstance(v, bool) for v in (k, limit)):
        return ""  # none cut, or an eval.json edited by hand (report.py names such fields)
    which = "all of them" if k == result.get("episodes") else f"{k} of them"
    note = f"; {which} cut at {limit:,} steps (--max-steps), with their return so far"
    if k == result.get("episodes"):
        if limit < MAX_STEPS:
            note += "; no episode ended: raise --max-steps"
        elif result.get("backend") == "native":  # a NativeEnv: no Gymnasium wrapper nor registration applies
            note += ("; no episode ended: give the env a time limit (max_episode_steps = N, a class attribute of the "
                     "NativeEnv), or check that _dynamics' terminated can become true")
        else:
            note += ("; no episode ended: give the env a time limit (gymnasium.wrappers.TimeLimit, or max_episode_steps "
                     "when registering it)")
    return note


def member_diverged(checkpoint, step: Optional[int] = None) -> Optional[dict]:
    """``{"iteration": 4, "text": "diverged at iteration 4 (non-finite loss, ...)"}`` when ``checkpoint``
    (the file evaluated) is of a population member that diverged (population_report.member_divergence:
    its population.json entry, else its diverged.json), else None. Its weights are its last finite ones,
    frozen since: a score of them is no result of training, which ``proxima eval RUN/<member dir>`` says.
    ``step``: the checkpoint's global step; one before the diverging iteration's (the record's
    global_step, the step that iteration ended at) holds weights that training made: None then."""
    import re

    from .checkpoint import run_dir_of
    from .population_report import divergence_record, member_divergence

    member = run_dir_of(checkpoint)
    text = member_divergence(member)
    if text is None:
        return None
    at_step = (divergence_record(member) or {}).get("global_step")
    if isinstance(step, int) and isinstance(at_step, int) and not isinstance(at_step, bool) and step < at_step:
        return None
    at = re.match(r"diverged at iteration (\d+)", text)  # diverged_text's words; "diverged" alone: no iteration recorded
    return {"iteration": int(at.group(1)) if at else None, "text": text}


def diverged_note(diverged: dict) -> str:
    """The line ``proxima eval`` prints under the score of a member that diverged (member_diverged)."""
    return (f"note: this population member {diverged['text']}: its checkpoints since hold its last finite weights, "
            "frozen, so this score is no result of training (its population's statistics leave it out)")


def json_numbers(value):
    """``value`` with every NaN or infinite float, however deep in dicts, lists and tuples, as None (JSON null)."""
    if isinstance(value, float):
        import math

        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_numbers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_numbers(v) for v in value]
    return value


def format_result(result: dict, step: Optional[int] = None) -> str:
    """``CartPole-v1: 500.00 +- 0.00 over 10 episodes (deterministic)``, ``Pendulum-v1 (env kwargs {"g": 50.0}):
    ...`` for an env given other kwargs than the run's (given_env_kwargs); ``step``: the global step of the
    checkpoint evaluated (``proxima eval``'s line: a run still training has several), said as a population
    member's line says it (population_eval.format_member)."""
    mode = "deterministic" if result["deterministic"] else "stochastic"
    at = f" at step {step:,}" if isinstance(step, int) and not isinstance(step, bool) else ""
    given = result.get("env_kwargs")
    kwargs = f" (env kwargs {json.dumps(given, default=repr)})" if isinstance(given, dict) else ""
    line = (f"{result['env_id']}{kwargs}: {result['mean_return']:.2f} +- {result['std_return']:.2f}{at} over "
            f"{episodes_words(result['episodes'])} ({mode})")
    return (line + success_note(result) + unfinished_note(result) + normalizer_note(result) + rewards_scaled_note(result)
            + rewards_transformed_note(result))


#: where the caveat of an env's own NormalizeObservation is explained
NORMALIZER_DOC = "docs/migrating.md#bring-your-make_env"


def normalizer_note(result: dict) -> str:
    """`` (the env's own NormalizeObservation restarted its statistics: see ...)`` for a result whose env wraps
    itself in gymnasium.wrappers.NormalizeObservation (``env_normalizer_restarted``): its running statistics are
    the env's, not the checkpoint's, so the evaluation started them afresh and its numbers under-report the
    policy; else ""."""
    if result.get("env_normalizer_restarted") is not True:
        return ""
    return f" (the env's own NormalizeObservation restarted its statistics: see {NORMALIZER_DOC})"


def rewards_scaled_note(result: dict) -> str:
    """`` (returns of the rewards the env's own NormalizeReward scaled, not the game's: see ...)`` for a result
    whose env scales its rewards with gymnasium.wrappers.NormalizeReward and records no episode figures inside it
    (``env_rewards_scaled``): the evaluation sums those scaled rewards; else ""."""
    if result.get("env_rewards_scaled") is not True:
        return ""
    return (f" (returns of the rewards the env's own NormalizeReward scaled, not the game's; a RecordEpisodeStatistics "
            f"inside it records the game's: see {NORMALIZER_DOC})")


def transformed_words(names) -> Optional[str]:
    """``TransformReward``, ``TransformReward and ClipReward``: the names of an ``env_rewards_transformed``
    (gym_adapter.rewards_transformed's); None for what is no list of names (an eval.json edited by hand)."""
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.isidentifier() for n in names):
        return None
    return " and ".join(names)


def rewards_transformed_note(result: dict) -> str:
    """`` (returns of the rewards after the env's own ClipReward, not the env's own; ...)`` for a result whose env
    clips or scales its rewards with gymnasium.wrappers.TransformReward or ClipReward and records no episode
    figures inside them (``env_rewards_transformed``): the evaluation sums the transformed rewards; else ""."""
    names = transformed_words(result.get("env_rewards_transformed"))
    if names is None:
        return ""
    it = "them" if " and " in names else "it"
    return (f" (returns of the rewards after the env's own {names}, not the env's own; a RecordEpisodeStatistics "
            f"inside {it} records the env's own: see {NORMALIZER_DOC})")


def episodes_words(n) -> str:
    """``1 episode``, ``2,000 episodes`` (as steps are written); ``? episodes`` for a count that is no
    integer (an eval.json edited by hand: report.py names the field)."""
    if not _is_int(n):
        return "? episodes"
    return f"{n:,} episode{'' if n == 1 else 's'}"


class _CallableModule(type(sys)):
    """This module as ``from proxima import evaluate`` gives it, callable as SB3's ``evaluate_policy``
    is: ``evaluate(policy, ...)`` is :func:`evaluate`. The import system binds ``proxima.evaluate`` to
    the module, so a function of that name in proxima/__init__.py would be replaced the first time
    anything imports the module; a callable module keeps ``from proxima.evaluate import evaluate``,
    ``proxima.evaluate.X`` and every monkeypatch of them (the call looks ``evaluate`` up each time)."""

    def __call__(self, *args, **kwargs):
        return self.evaluate(*args, **kwargs)

    @property
    def __signature__(self):  # inspect.signature and help() show evaluate()'s parameters, not (*args, **kwargs)
        import inspect

        return inspect.signature(self.evaluate)


sys.modules[__name__].__class__ = _CallableModule
