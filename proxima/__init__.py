"""Proxima: PPO on PyTorch with the whole data path on the device.

Public API::

    from proxima import PPOConfig, train, load, make_env, evaluate
    run_dir, policy = train(PPOConfig(env_id="CartPole-v1", total_timesteps=100_000))
    policy = load(run_dir)             # the same policy, from a run directory or a checkpoint file
    action = policy.act(obs)           # obs: (B, obs_dim) tensor or numpy array
    result = evaluate(policy)          # a dict: mean_return, std_return, returns (episodes,), ...
    pop = train_population(config, seeds=range(1, 11), sweep={"lr": [3e-4, 1e-3]})  # proxima train --seeds/--sweep

``proxima.evaluate`` is the module proxima/evaluate.py, made callable (evaluate._CallableModule): the
import system binds the package's attribute to the submodule on its first import, so a function of
that name here would be replaced by it.
"""

from __future__ import annotations  # train()'s annotations as proxima.trainer.train's: the same signature

import os as _os  # os and sys: loaded with the interpreter, before any search of the current directory
import sys as _sys

# `python -m proxima ...` imports this package with the current directory first on sys.path; inside
# a stranger's run directory a shipped numpy.py or gymnasium.py would then run. The console script
# never searches it; an env module named on the command line (module:Class) is still found there
# (envs/gym_adapter.py). This comes before every other import, a stdlib one too (typing.py in the run
# directory would run otherwise); a proxima/ folder there is imported by Python before this file.
if _sys.argv[:1] == ["-m"] and _sys.path and _sys.path[0] in ("", _os.getcwd()):
    _sys.path.pop(0)

from . import _startup  # noqa: E402

if _startup.command_line():  # a stop while the command line's modules import: its one line, no traceback
    _startup.install()

from typing import Callable, Optional  # noqa: E402
from .config import ConfigError, PPOConfig, ProximaError  # noqa: E402
# a leading ~ in the paths the Python API takes; trainer and the CLI expand with it too
from .rundir import expand_home as _expand_home  # noqa: E402

__version__ = "0.1.0"
__all__ = ["PPOConfig", "ProximaError", "ConfigError", "EnvError", "CheckpointError", "UntrustedEnvError", "TrainingInterrupted", "train", "load", "make_env",
           "evaluate", "train_population", "__version__"]

#: imported on first use, as make_env: their modules import torch or gymnasium (see __getattr__);
#: TrainingInterrupted (what train() raises on Ctrl-C), EnvError and CheckpointError too, so the package's import
#: stays what it was. Each error a user can act on derives from ProximaError (config.py, imported with the package)
_LAZY = {"make_env": "envs", "UntrustedEnvError": "envs.gym_adapter", "TrainingInterrupted": "signals",
         "EnvError": "envs.base", "CheckpointError": "checkpoint"}


def __getattr__(name: str):
    # make_env and UntrustedEnvError (which load and evaluate raise) are imported on first use, not
    # with the package: importing them imports torch and gymnasium, and `proxima doctor` (this
    # package's import included) must run to diagnose either one that does not import (a CUDA wheel
    # missing libcudnn)
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value

    try:  # `import proxima; proxima.envs...`: a submodule, imported on first use as make_env is
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def train(config: Optional[PPOConfig] = None, run_dir=None, resume=None, argv=None, quiet: bool = False, evaluate_at_end: bool = True,
          overwrite: bool = False, env_id: Optional[str] = None, trust_run: bool = False, overrides: Optional[dict] = None,
          sources: Optional[dict] = None, callback: Optional[Callable] = None, **unexpected):
    """Train PPO; return (run_dir: pathlib.Path, policy): the run's policy as load(run_dir) gives it
    (``policy.agent`` is the network). Details: proxima.trainer.train.

    config: a PPOConfig (``PPOConfig(...)`` or ``proxima.presets.resolve(env_id, preset)``); None only
        with ``resume``, to continue a run with the config it recorded.
    run_dir: the run directory (instead of ``config.run_dir``; default runs/<env>__<seed>__<time>). A
        leading ``~`` in it, ``config.run_dir``, ``config.init_from`` or ``resume`` is the home directory.
    resume: a run directory or checkpoint file to continue from, or "auto": continue ``run_dir`` when
        it holds a checkpoint, else start it afresh (``proxima train --resume``).
    quiet: no progress bar, summary lines or advisory notes (errors, and notes of what the run does
        otherwise than asked, still print), as ``--quiet``.
    evaluate_at_end: end with the evaluation of ``eval_episodes`` episodes (eval.json) and ``plot``'s curve.png.
    overwrite: move a non-empty ``run_dir`` aside and start afresh in it, instead of refusing it.
    env_id, trust_run: the env of a resumed run whose recorded env id is ``module:Class`` (imported only
        when ``env_id`` names the same env, or with ``trust_run=True``).
    callback: ``callback(row)`` after each iteration, once its row is logged and its due checkpoint
        written: ``row`` a dict of ``iteration``, ``global_step`` and the metrics.csv row
        (``charts/episodic_return``, ``losses/value_loss``, ``eval/mean_return`` when evaluated, the
        evaluation a stopped run's resume runs first included, ...). A function whose second
        positional parameter has no default is called ``callback(row, trainer)``: the Trainer
        (``trainer.agent``, ``trainer.run_dir``, ``trainer.last_checkpoint``, ``trainer.cfg``), as SB3
        callbacks reach the model. Return False to stop the run after this iteration: it checkpoints
        (recording the stop, which ``proxima report`` shows) and ends as a finished run does (end
        evaluation, the return value); ``train(None, resume=run_dir)`` trains on to the total. Its
        exception (SystemExit and KeyboardInterrupt too) is raised as it came, after a checkpoint of
        that iteration; so is a TypeError for an answer with no truth value (a numpy array). A
        callback that takes neither one nor two positional arguments is a ConfigError before the run
        starts. Under torchrun rank 0's callback alone is called and every rank follows its answer;
        the other ranks may pass None (``callback=cb if rank == 0 else None``), and one given on other
        ranks but not on rank 0 is a ConfigError on every rank.
    argv, overrides, sources: the command line's (what it typed, and where each value came from); None
        from Python.
    **unexpected: no other keyword is taken; ``env=`` (an env object, as SB3's PPO takes one), with a config
        or without, is a TypeError line saying that the run builds its envs from ``config.env_id`` and which id
        to give; so is an env given as run_dir (``train(cfg, env)``, SB3's order).

    A core dependency that is not installed (tensorboard, matplotlib, pyyaml, tqdm) is one line naming it and
    the pip command that installs it, before anything is written: missing_package.MissingPackageError, an ImportError.
    """
    if unexpected:  # env=MyEnv(), as SB3 takes one: before config checks, whose lines would miss the point
        from .trainer import unexpected_train_argument

        raise TypeError(unexpected_train_argument(unexpected))
    if run_dir is not None and not isinstance(run_dir, (str, _os.PathLike)):  # train(cfg, env): SB3's PPO(policy, env)
        from .trainer import env_passed_as_run_dir

        env_given = env_passed_as_run_dir(run_dir)
        if env_given is not None:
            raise TypeError(env_given)
    # a leading ~ is the caller's home (no shell expanded it): never a directory named '~' in the cwd
    run_dir = _expand_home(run_dir)
    resume = _expand_home(resume) if not (isinstance(resume, str) and resume == "auto") else resume
    if config is None:
        _need_a_config(run_dir, resume)
    elif isinstance(config, PPOConfig):
        from .config import unknown_attribute

        refused = unknown_attribute(config)  # here too: a resume replaces the config with the run's, the attribute unread
        if refused is not None:
            raise refused
    if argv is None:  # the command line checked them as it started (cli.broken_import)
        from .missing_package import require_core

        require_core("train()")  # a ModuleNotFoundError from deep in the run's setup, after its directory was made
    from .trainer import train as _train

    return _train(config, run_dir=run_dir, resume=resume, argv=argv, quiet=quiet, evaluate_at_end=evaluate_at_end,
                  overwrite=overwrite, env_id=env_id, trust_run=trust_run, overrides=overrides, sources=sources,
                  callback=callback)


def _need_a_config(run_dir, resume) -> None:
    """ConfigError where train(None, ...) has no run to continue, and so no config to train with (it
    was an AttributeError deep in the run's setup)."""
    wanted = "a PPOConfig (PPOConfig(...) or proxima.presets.resolve(...))"
    if resume is None:
        raise ConfigError(f"train(config): expected {wanted}, got None; train(None, resume=RUN_DIR) continues a run with "
                          "its recorded config")
    if isinstance(resume, str) and resume == "auto":
        if run_dir is None:
            raise ConfigError(f"train(None, resume='auto'): give run_dir=RUN_DIR (the run to continue) and {wanted} for "
                              "the new run it starts when RUN_DIR holds no checkpoint")
        from .checkpoint import list_checkpoints

        if not list_checkpoints(run_dir):  # resume='auto' would start a new run, which needs a config
            raise ConfigError(f"train(None, resume='auto'): {run_dir} holds no checkpoint to continue, and a new run "
                              f"needs {wanted}")


def _best_of(path):
    """load(path, best=True)'s file: RUN/checkpoints/best.pt; CheckpointError, one line naming the run, for a
    checkpoint file given or a run without one (why, as ``proxima eval --best`` says it, in this call's words)."""
    from pathlib import Path

    from .checkpoint import CheckpointError, best_checkpoint_path, source_path

    run = source_path(Path(path))  # RUN/checkpoints: RUN's best.pt
    if not run.exists():  # load's own line for a path that is not there
        return path
    if not run.is_dir():
        raise CheckpointError(f"{path}: best=True takes a run directory (it loads RUN/checkpoints/best.pt); to load "
                              "this file, drop best=True")
    best = best_checkpoint_path(run)
    if not best.is_file():
        from .trainer import no_best_line

        line = no_best_line(run).replace("drop --best to evaluate its last", "drop best=True to load its newest")
        raise CheckpointError(line.replace("(written when training with --eval-every N)",
                                           "(written when training with eval_every=N, --eval-every N)"))
    return best


def train_population(config: Optional[PPOConfig], seeds=None, sweep: Optional[dict] = None, run_dir=None, resume=None,
                     quiet: bool = False, overwrite: bool = False, evaluate_at_end: bool = True, trust_run: bool = False):
    """Train a population, every member in one batched program, as ``proxima train ENV --seeds S --sweep
    F=v1,v2`` does (the same checks, files and errors: docs/populations.md). Returns a
    proxima.population_run.PopulationResult: ``run_dir`` (pathlib.Path: population.json, checkpoints/,
    one folder per member) and ``members``, one per member in population.json's order (settings outer,
    seeds inner), each with ``dir`` (a run directory: ``load(member.dir)`` is its policy), ``seed``,
    ``settings`` ({field: value} of the swept fields), ``eval_mean_return`` (its eval.json's mean; None
    without one) and ``diverged`` (None, or when and why); ``result.settings_table(threshold=None)`` is
    ``proxima report``'s table, one dict per setting (mean, IQM and their 95% CIs over members).

    config: a PPOConfig shared by every member; its ``seed`` and swept fields are replaced per member.
        None only with ``resume``, to continue a population with the config it recorded.
    seeds: the members' seeds: a range, list or tuple of distinct integers in 0..2**31 - 1
        (``range(1, 11)``), or --seeds's text (``"1-10"``); None: ``config.seed`` alone.
    sweep: {field: [values]} of the per-member fields, those proxima.population.PER_MEMBER_FIELDS lists (numbers,
        ``{"lr": [3e-4, 1e-3]}``, and switches, ``{"norm_adv": [True, False]}``): every combination is one
        setting, trained with every seed.
    run_dir: the population's directory (default runs/<env>__seeds<first>-<last>__<time>); ``~`` is the home directory.
    resume: a population's directory or one of its checkpoints/step_N.pt to continue (``proxima resume
        RUN``), or "auto": continue ``run_dir`` when it holds a checkpoint, else start it. With a config,
        the fields it sets other than PPOConfig's defaults are the flags a resume is given (total_timesteps
        extends the run); seeds and sweep, when given, must be the population's.
    quiet, overwrite, evaluate_at_end, trust_run: as for train() (``--quiet``, ``--overwrite``, the
        members' end-of-run evaluation, a recorded ``module:Class`` env on resume).

    Raises what the command line prints as its one error line: ConfigError (a refused seed, sweep or
    field, a run directory that holds files), EnvError, CheckpointError, NonFiniteError once every member
    diverged, all ProximaErrors; Ctrl-C finishes the iteration, writes a checkpoint and raises
    TrainingInterrupted (a KeyboardInterrupt), as train() does.
    """
    from .population_run import train_population_from_python
    from .config import check_switch

    for name, value in (("quiet", quiet), ("overwrite", overwrite), ("evaluate_at_end", evaluate_at_end), ("trust_run", trust_run)):
        check_switch(value, "train_population", name)
    from .run_setup import check_population_log_std_init

    check_population_log_std_init(config, sweep if isinstance(sweep, dict) else {}, python=True)  # one log_std_init for every member, not swept
    from .missing_package import require_core

    require_core("train_population()")  # as train(): one line before any directory, not a ModuleNotFoundError
    return train_population_from_python(config, seeds=seeds, sweep=sweep, run_dir=run_dir, resume=resume, quiet=quiet,
                                        overwrite=overwrite, evaluate_at_end=evaluate_at_end, trust_run=trust_run)


def load(path, device="cpu", env_id=None, trust_env=False, env_kwargs=None, best: bool = False):
    """Load a policy from a run directory (its newest checkpoint) or checkpoint file onto ``device`` ("cpu",
    "cuda", "cuda:1" or "auto", as --device takes them); see proxima.checkpoint.load_policy. ``best=True``:
    the run directory's checkpoints/best.pt instead, the checkpoint of its best evaluation (written by a run
    trained with ``eval_every``, --eval-every; ``proxima eval RUN --best``).

    Returns a proxima.checkpoint.Policy: ``policy.act(obs)`` the actions for ``obs`` ((B, *obs_shape) or
    (*obs_shape,), tensor or numpy array, the same kind back; deterministic unless
    ``deterministic=False``), ``policy.predict(obs)`` SB3's ``(actions, None)``, ``policy.agent`` the
    network (nn.Module), ``policy.config`` the run's recorded config (a dict), ``policy.env_id``,
    ``policy.observation_space`` (a vector Box as the float32 Box the policy takes, whatever dtype the env
    declared) and ``policy.action_space``; ``policy.as_module()`` the policy as one torch.nn.Module to
    export (torch.jit.trace, torch.export). A file that is no usable checkpoint
    raises CheckpointError (a ProximaError). A run directory (or RUN/checkpoints) is read as ``proxima eval``
    reads it: a damaged newest checkpoint is refused naming the run's newest sound one to load by name,
    and one whose env or size differs from the run's config.yaml (another run's, copied in) is refused.

    A run's recorded env id is data: a ``module:Class`` one is evaluated (proxima.evaluate.evaluate)
    only when named here, ``env_id="module:Class"``, or with ``trust_env=True`` (eval's --env and
    --trust-run). ``env_kwargs``: the env's constructor arguments instead of the recorded ones."""
    from .checkpoint import load_policy, load_run_newest
    from .device import resolve_device
    from .config import check_switch

    # trust_env='False' is a true string: it trusted the run's module env without a word
    trust_env, best = check_switch(trust_env, "load", "trust_env"), check_switch(best, "load", "best")

    # once, in this call's words (device='cpu'), not --device's: load_policy takes the torch.device as resolved
    device = resolve_device(device, arg="device")
    path = _expand_home(path)
    if best:
        path = _best_of(path)
    from .signals import hold_python_caller

    release = hold_python_caller(True)  # its lines name this call's arguments and PPOConfig's fields, never a flag
    try:
        # a run directory as eval reads it: the same lines, naming this call to make on a sound file
        return load_run_newest(path, lambda p: load_policy(p, device=device, env_id=env_id, trust_env=trust_env,
                                                           env_kwargs=env_kwargs),
                               "load", lambda f: f"proxima.load({str(f)!r})", env_args="env_id=, env_kwargs=")
    finally:
        release()
