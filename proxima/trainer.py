"""The outer loop: wires env, agent, optimizer, LR schedule, normalizers, logging, checkpoints,
signals and evaluation around the four functions of ppo.py. The algorithm itself lives there; what
a checkpoint holds and the run directory's files live in train_state.py.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import random
import os
import secrets
import signal
import sys
import time
import functools
from functools import partial
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from . import checkpoint as ckpt
from . import graphs, hostmem, ppo, side_thread, train_state
from . import _expand_home as expand_home
from .adam import Adam
from .agent import Agent, action_dtype, action_shape
from .config import _short_repr as short_repr
from .config import (MAX_SEED, ConfigError, PPOConfig, as_given, check_switch, batch_size, cpu_preset_hint, num_iterations, preset_of,
                     python_words, validate)
from .envs import BatchedEnv, EnvError, make_env
from .envs.base import native_failure
from .envs.gym_adapter import hold_env_module_path
from .normalize import ObsNormalizer, RewardScaler
from .guards import DebugCheckError, EnvGuard, NonFiniteError, check_reset
from .rollout import Rollout
from .shared_change import SharedChange
from .signals import (REPEAT_WINDOW, OutsideLoop, SignalGuard, TrainingInterrupted, checkpoint_line, from_python,
                      hold_fresh_run, hold_python_caller, loop_stopped, workers_stopped)
from .sizing import check_fits, env_sizes
from .train_state import default_run_dir


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def flush_denormal_on() -> bool:
    """Whether this thread flushes denormal floats to zero (torch.set_flush_denormal has no getter)."""
    return float(torch.tensor([1e-39], dtype=torch.float32) * 1.0) == 0.0  # a float32 denormal (not one in float64)


def _float32_default():
    callers = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    return lambda: torch.set_default_dtype(callers)


#: float32 as torch's default dtype while a run goes on, whatever the caller set (a notebook's
#: torch.set_default_dtype(torch.float64)): what the run makes without naming a dtype (the agent, the
#: learning rate, the native envs' state) is meant as float32, as the observations are, so the run
#: computes and draws as in a float32 process. Process-wide, as torch's default dtype is; the
#: caller's comes back when the last run going on ends. ``hold_float32()`` returns the release.
hold_float32 = SharedChange(_float32_default).hold


def _run_settings(method):
    """``method`` of a Trainer runs with float32 as the default dtype and a module:Class env's folder on
    sys.path (hold_float32, hold_env_module_path), released when it returns: held per call, not for the
    Trainer's life, so that one never closed (a test's, a notebook's) does not keep them for the process."""
    @functools.wraps(method)
    def held(self, *args, **kwargs):
        releases = [hold_float32(), hold_env_module_path()]
        try:
            return method(self, *args, **kwargs)
        finally:
            for release in reversed(releases):
                release()
    return held


# ------------------------------------------------------------------------------------------------
class Trainer:
    """Owns the state of one run (TrainState of DESIGN.md) and runs its iterations."""

    def __init__(self, cfg: PPOConfig, run_dir: Optional[Path] = None, resume_state: Optional[dict] = None,
                 argv: Optional[list] = None, quiet: bool = False):
        from . import distributed

        self.dist = distributed.context()
        validate(cfg, self.dist.world_size, resume=resume_state is not None, python=argv is None)
        self.cfg, self.quiet = cfg, quiet
        self.device = _device_for(self.dist, cfg.device, argv is None)  # under torchrun: cuda:LOCAL_RANK or cpu
        with _python_words(argv is None):
            # before anything process-wide is changed
            check_device_flags(cfg, self.device, self.dist.world_size, resumed=resume_state is not None)
        # the caller's process-wide settings this trainer changes, each a callable that puts the caller's
        # value back: close() calls them (a notebook or sweep runs on in the same process)
        self._undo = [partial(torch.set_num_threads, torch.get_num_threads()), partial(torch.set_flush_denormal, flush_denormal_on())]
        self.env, self.side = None, None
        # the caller's random, numpy and torch streams, before the run seeds its own: close() puts them
        # back, as train() does (a random search drawing each trial's lr goes on from where it was)
        self._caller_rng = ckpt.rng_state()
        # run() claims the run directory as train() does, unless train() holds it (it sets this)
        self._dir_claimed, self._claimed_once, self._from_checkpoint = False, False, resume_state is not None
        try:
            self._build(run_dir, resume_state, argv)
        except BaseException:  # Ctrl-C in a notebook too: no env workers, side thread or changed settings outlive the error
            self.close()
            raise

    @_run_settings
    def _build(self, run_dir: Optional[Path], resume_state: Optional[dict], argv: Optional[list]) -> None:
        """The rest of __init__: env, agent, optimizer, buffers and the iteration's parts (close() undoes it on an error)."""
        cfg = self.cfg
        # one thread until the agent is built: its orthogonal initialization (a QR) computes other bits
        # with two, and the initial parameters should not depend on --threads; cfg.threads is set below
        torch.set_num_threads(1)
        # 1.2x more training steps/s at 4,096 CartPole envs on this project's Xeon (docs/performance.md);
        # process-wide, so set either way (a run computes as its config says, whatever mode the caller
        # left) and put back by close() (a no-op where the CPU has no such mode)
        self._flush_denormal = torch.set_flush_denormal(bool(cfg.flush_denormal)) and bool(cfg.flush_denormal)
        if cfg.keep_host_memory and self.device.type == "cpu":  # process-wide, one-way (hostmem.py)
            hostmem.keep_freed_memory()
        if self.device.type == "cuda":
            # CPU kernels used here are deterministic for a fixed thread count already (the resume and
            # seed tests check it bit for bit); the switch itself costs seconds of imports (torch._inductor)
            if cfg.compile:  # the switch imports torch._dynamo, which sets torch's /tmp cache unless one is set first
                from .accel import claim_cache_dir

                claim_cache_dir()
            self._undo.append(partial(torch.use_deterministic_algorithms, torch.are_deterministic_algorithms_enabled(),
                                      warn_only=torch.is_deterministic_algorithms_warn_only_enabled()))
            torch.use_deterministic_algorithms(cfg.deterministic, warn_only=True)
        rank_seed = cfg.seed + 10_000 * self.dist.rank  # each rank its own envs and samples
        seed_everything(rank_seed)
        from .run_setup import check_preset_backend

        check_preset_backend(cfg)  # before make_env, whose line would tell to use a --backend the user never gave
        self.env: BatchedEnv = make_env(cfg.env_id, cfg.num_envs, self.device, cfg.backend, cfg.vector, seed=rank_seed,
                                         env_kwargs=cfg.env_kwargs)
        self.env.check_actions = False  # actions from the policy's distribution: no host sync a step to check them
        with _python_words(argv is None):
            check_fits(cfg, self.device, lambda: env_sizes(self.env, cfg.env_id))  # before the agent and buffers exist
            from .run_setup import check_log_std_init

            check_log_std_init(cfg, self.env.single_action_space, init_from=resume_state is None)
        obs_space, act_space = self.env.single_observation_space, self.env.single_action_space
        self.agent = Agent(obs_space, act_space, cfg.hidden_sizes, cfg.activation, cfg.encoder,
                           cfg.log_std_init).to(self.device)
        from .run_setup import check_norm_obs

        check_norm_obs(cfg, self.agent.has_pixels)  # the library's own guard (preflight checks it first for the CLI)
        cfg.encoder = self.agent.encoder_kind  # config.yaml and checkpoints record the encoder used, not "auto"
        self.model = self.dist.wrap(self.agent)
        # detail 3 (eps 1e-5); the learning rate is a tensor annealed in place, so a compiled or
        # graph-captured update step sees a new value without recompiling. torch's fused Adam
        # kernel (one multi-tensor kernel per step; on CUDA the unfused capturable Adam was 36% of
        # an iteration's host time), its step counter and learning rate on the device so a graph
        # can record it, called by adam.Adam: torch.optim's class costs every launch 1.2 s of imports
        self.optimizer = Adam(self.agent.parameters(), lr=torch.tensor(cfg.lr, device=self.device), eps=1e-5,
                              capturable=self.device.type == "cuda")
        # the schedule's learning rate as the Python float the tensor is filled from: the logged value
        # (charts/learning_rate), exact where the float32 tensor holds 0.01 as 0.009999999776...
        self.scheduled_lr: float = float(cfg.lr)
        self.obs_norm = ObsNormalizer(self.env.obs_shape, cfg.clip_obs).to(self.device) if cfg.norm_obs else None
        self.reward_scaler = RewardScaler(cfg.num_envs, cfg.gamma, cfg.clip_reward).to(self.device) if cfg.norm_reward else None
        self.init_from_record: Optional[dict] = None  # meta.json's init_from: the checkpoint a new run started from
        if cfg.init_from is not None and resume_state is None:  # a resume reads the run's own weights
            from .init_from import load_initial_policy

            initial = load_initial_policy(self, cfg.init_from, quiet=self.quiet, python=argv is None,
                                          run_dir=run_dir if run_dir is not None else cfg.run_dir)
            # the file itself, absolute: config.yaml replays from any directory, and names these weights
            # after the source run is extended or rotates its checkpoints
            cfg.init_from = str(initial.checkpoint)
        # the buffers hold the obs as the network saw it: normalized floats under --norm-obs, even where the
        # env's tensors are uint8 (a Dict of uint8 vectors: a uint8 buffer would store them truncated)
        self.rollout = Rollout(cfg.num_steps, cfg.num_envs, self.env.obs_shape, action_shape(act_space), action_dtype(act_space), self.device,
                               obs_dtype=torch.float32 if cfg.norm_obs else self.env.obs_dtype)
        self.num_iterations = num_iterations(cfg, self.dist.world_size)
        self.steps_per_iteration = batch_size(cfg) * self.dist.world_size
        self.iteration, self.global_step, self.elapsed = 0, 0, 0.0
        self.stopped_at_return: Optional[float] = None  # run(): the window's mean once --stop-return ended it
        self.stopped_by_callback = False  # run(): train()'s callback asked to stop before the total
        # run(): iterations trained by this process, and the training episodes that ended in them
        self.iterations_run, self.episodes_ended = 0, 0
        self.last_checkpoint: Optional[Path] = None  # the newest checkpoint written or resumed from (a callback reads it)
        self.callback_error: Optional[BaseException] = None  # run(): the callback's own exception, when it raised
        self.return_window: list = []  # ReturnTarget.window: the recent iterations' (return sum, episodes), as checkpoints hold it
        self.autocast, self.scaler = self._amp_setup()
        # --threads 2 and more: actor and critic side by side, each with threads // 2 intra-op threads
        # (side_thread.py: the same numbers as one thread at --threads 2); else all intra-op threads
        self.side = side_thread.SideThread(cfg.threads // 2, self._flush_denormal) if side_thread.pairs(cfg, self.device, self.model) else None
        torch.set_num_threads(cfg.threads if self.side is None else cfg.threads // 2)
        self.policy_step = self.agent.policy_step if self.side is None else side_thread.paired_policy_step(self.agent, self.side)
        if self.autocast is not None:
            self.policy_step = _autocast_fn(self.agent.policy_step, self.autocast)
        self.grad_step = ppo.make_grad_step(self.model, self.optimizer, cfg, self.autocast, self.scaler, self.side)
        if cfg.compile:
            from .accel import accelerate

            # compile_options reads the mode: the one that runs here (compile_mode_run), while config.yaml and
            # checkpoints keep the one asked (resume-safe: a checkpoint moved to CUDA compiles in it)
            asked, cfg.compile_mode = cfg.compile_mode, compile_mode_run(cfg, self.device)
            try:
                self.policy_step, self.grad_step = accelerate(self)
            finally:
                cfg.compile_mode = asked
        if cfg.target_kl is not None:  # ranks average approx_kl, so all take the same early-stop decision
            self.grad_step = self.dist.sync_kl(self.grad_step)
        # a static buffer from here on: every later write copies into it (a captured graph holds it)
        self.next_obs = self.env.reset(seed=rank_seed).clone()
        if self.obs_norm is not None:
            self.obs_norm.count_reset(self.next_obs)
        # the iteration's three parts, eager or replayed as CUDA graphs (graphs.py)
        self.parts, self._rollout, self._advantages, self._update = graphs.build_parts(self)
        self.eval_pending: Optional[dict] = None  # run(): an --eval-every evaluation a stop left due (_pending_eval)
        if resume_state is not None:
            train_state.restore(self, resume_state)
            self.eval_pending = _pending_eval(resume_state)
            # a Gymnasium env's error names its env step: count on from where the run was, not from 0
            continue_steps = getattr(self.env, "continue_step_count", None)
            if continue_steps is not None:
                continue_steps(self.global_step // (cfg.num_envs * self.dist.world_size))
        # rank 0's (time-stamped) default, the same path on every rank
        self.run_dir = Path(self.dist.from_main(lambda: Path(expand_home(run_dir)) if run_dir is not None else Path(expand_home(cfg.run_dir)) if cfg.run_dir else default_run_dir(cfg)))
        # best.pt is replaced only by a better policy, also after a crash left it newer than the checkpoint; a
        # resume from an explicitly older one has set such a best.pt aside (checkpoint.set_aside_newer)
        if resume_state is not None and self.dist.is_main:
            on_disk = train_state.best_on_disk(self.run_dir)
            if on_disk is not None and (self.best_eval is None or on_disk > self.best_eval):
                self.best_eval = on_disk
        self.argv = argv
        self.logger = None

    # --- amp -------------------------------------------------------------------------------------
    def _amp_setup(self):
        if self.cfg.amp == "none":
            return None, None
        dtype = torch.bfloat16 if self.cfg.amp == "bf16" else torch.float16
        dev = self.device.type

        cache = not self.cfg.cudagraphs  # autocast's weight-cast cache must not outlive a graph capture

        def autocast():
            return torch.autocast(device_type=dev, dtype=dtype, cache_enabled=cache)

        scaler = torch.amp.GradScaler(dev) if self.cfg.amp == "fp16" else None
        return autocast, scaler

    # --- state (train_state.py) ---------------------------------------------------------------
    def state_dict(self) -> dict:
        """The whole TrainState (train_state.capture)."""
        return train_state.capture(self)

    def save(self) -> Optional[Path]:
        """Write a checkpoint (train_state.save; under torchrun every rank calls it at the same iteration).
        The checkpoint of a stop that abandoned a due --eval-every evaluation also records it as
        ``eval_pending`` ({global_step, row}: the iteration's metrics row without its eval values), so
        the resume runs it first (run) and logs that row whole."""
        return train_state.save(self)

    # --- one iteration ---------------------------------------------------------------------------
    @_run_settings
    def train_iteration(self) -> dict:
        """One iteration: rollout, advantages, update (graphs.py: eager calls or CUDA-graph replays).

        Returns the iteration's metrics as tensors (static buffers, overwritten by the next
        iteration: read them before calling this again, as Trainer.run does)."""
        cfg, ro = self.cfg, self.rollout
        if cfg.anneal_lr:  # detail 4
            frac = 1.0 - self.iteration / self.num_iterations
            self.scheduled_lr = frac * cfg.lr
            self.optimizer.param_groups[0]["lr"].fill_(self.scheduled_lr)
        guard = self._env_guard()
        guard.begin(self.global_step)
        # a Gymnasium env counts the episodes that reported info["is_success"] on the host; native envs report
        # none and have no such method, so their iteration (a CUDA graph's too) gains nothing
        take_successes = getattr(self.env, "take_successes", None)
        if take_successes is not None:
            take_successes()  # what steps outside an iteration counted is no iteration's
        if cfg.compile and not getattr(self, "_compile_noted", False):
            self._note_compiling()
        try:  # once an iteration, outside the rollout's step loop: free unless something raises
            self._rollout()
            self.global_step += self.steps_per_iteration
            guard.check_rollout(ro.raw_rewards, cfg.env_id)  # one host sync per iteration
            self.model.train()
            self._advantages()
            self._update()
        except Exception as e:
            # a native env's hook that raised: one EnvError line, which the loop ends with the global step and
            # the last good checkpoint, as a Gymnasium env's (the rows step together: no env index to name)
            native = native_failure(e, cfg.env_id, f"env step {guard.step0 // (guard.N * guard.ws) + guard.t + 1}")
            if native is not None:
                raise native from e
            failure = _compile_failure(e) if cfg.compile else None
            if failure is None:
                raise
            # a failure the start-up check (_check_compile) could not foresee: one line, not inductor's
            # hundred lines of traceback (the CLI prints a ConfigError's message alone, exit 2)
            raise ConfigError(f"--compile: torch.compile failed to build a compiled step ({failure}); run without --compile "
                              "(a resume: --no-compile), or run `proxima doctor` to see what the compiler lacks") from e
        out = dict(self.parts.metrics)
        if not cfg.clip_vloss:  # no clipped branch to take: blank, not a 0 that reads as "never clipped"
            out.pop("vf_clipfrac", None)
        out["explained_variance"] = self.parts.explained_variance
        # Box actions: the head's std after the update, the rollout's clipped share (tensors, read with the rest)
        out.update(ppo.action_metrics(ro.actions, self.env.action_bounds, getattr(self.agent, "actor_logstd", None)))
        out["ep_return_sum"], out["ep_length_sum"], out["ep_count"] = ro.ep_return_sum, ro.ep_length_sum, ro.ep_count
        if take_successes is not None:  # tensors beside the others: reduce_metrics sums them across ranks
            hits, reported = take_successes()
            out["success_sum"] = torch.tensor(float(hits), device=ro.ep_count.device)
            out["success_count"] = torch.tensor(float(reported), device=ro.ep_count.device)
        self.iteration += 1
        return out

    def _note_compiling(self) -> None:
        """One note before the first compiled iteration: inductor compiles both steps there, and on a CPU
        the first launch showed nothing for a minute, then "SPS 2"."""
        self._compile_noted = True
        if self.dist.is_main and not getattr(self, "quiet", False):  # --quiet: no notes that change nothing
            from .accel import compiling_note  # which case this launch is: an empty cache or cached kernels

            note, python = compiling_note(), from_python()
            if python:
                note = note.replace("--compile:", f"{switch_words('compile', True)}:", 1)
            if self.device.type == "cpu":  # train's one --compile note on a CPU: its speed there comes with it
                note = f"{note}; {compile_speed_clause(self.cfg)}"
            print(f"proxima: note: {note}", file=sys.stderr, flush=True)

    def _env_guard(self) -> EnvGuard:
        guard = getattr(self, "_guard", None)
        if guard is None or guard.env is not self.env:
            guard = self._guard = EnvGuard(self)
        return guard

    def _nonfinite_advice(self) -> str:
        """What to try after a non-finite loss or gradient, in the caller's words (flags, or PPOConfig's
        fields from Python: config.python_words)."""
        advice = self._nonfinite_flags_advice()
        return python_words(advice) if from_python() else advice

    def _nonfinite_flags_advice(self) -> str:
        """_nonfinite_advice in flag words. Rewards far beyond unit scale (legal, finite: an env paying
        1e20) overflow the value loss's float32 squares whatever the learning rate, so the batch's
        largest |reward| is named when it is large; read only once the update has failed."""
        general = "try a lower --lr or --max-grad-norm, or --norm-obs/--norm-reward"
        try:
            biggest = float(self.rollout.raw_rewards.abs().max())
        except Exception:  # noqa: BLE001 - the stop's line must come out whatever the buffer holds
            return general
        if not biggest > 1e6:  # NaN too: the env guard names a non-finite reward itself
            return general
        size = f"{biggest:.0e}".replace("e+", "e")
        if self.cfg.norm_reward:
            return f"rewards reach ~{size}: scale them down in the env, or try a lower --lr or --max-grad-norm"
        return f"rewards reach ~{size}: --norm-reward (or scale them down in the env)"

    def _last_good(self, last=None) -> str:
        last = last or getattr(self, "last_checkpoint", None)
        if last:
            return f"last good checkpoint: {last}"
        flag = "PPOConfig(checkpoint_every=N)" if from_python() else "--checkpoint-every N"  # the words the caller set it in
        return f"no checkpoint was written yet ({flag} writes one every N iterations)"

    # --- the loop --------------------------------------------------------------------------------
    def trains(self) -> bool:
        """Whether run() trains an iteration: not for a resume of a complete run, nor of one that
        --stop-return ended (its restored window still reaches the target)."""
        reached = ReturnTarget(self.cfg.stop_return, self.cfg.stop_episodes, self.return_window).reached()
        return self.iteration < self.num_iterations and reached is None

    @_run_settings
    def run(self, resumed: bool = False, stop_after: Optional[int] = None, callback: Optional[Callable] = None) -> Path:
        """_run, with the run directory claimed for its length (_claim_run_dir)."""
        session = self._claim_run_dir(resumed)
        try:
            return self._run(resumed, stop_after, callback)
        finally:
            if session is not None:
                session.release()

    def _claim_run_dir(self, resumed: bool):
        """A Trainer used directly takes its run directory as train() does (rundir.RunSession), or raises
        RunDirError: a new run refuses one in use or holding files (another run's checkpoints would be
        replaced and its metrics.csv doubled); a resume (``resume_state`` or ``resumed``), and a later
        run() of this Trainer, lock the directory as it is. The RunSession to release, or None under
        train(), which holds the directory itself for the trainer's life."""
        if self._dir_claimed:
            return None
        from .rundir import RunSession

        session = RunSession()
        release_words = hold_python_caller(self.argv is None)  # a refusal names train()'s arguments, not flags
        try:
            if resumed or self._from_checkpoint or self._claimed_once:
                self.dist.from_main(lambda: session.lock_existing(self.run_dir))
            else:
                self.dist.from_main(lambda: session.claim_fresh(self.run_dir))
        finally:
            release_words()
        self._claimed_once = True
        return session

    def _run(self, resumed: bool = False, stop_after: Optional[int] = None, callback: Optional[Callable] = None) -> Path:
        """Train until ``num_iterations``; checkpoint every ``checkpoint_every`` iterations and at the end.

        ``callback(row)`` or ``callback(row, trainer)`` (callback_arity): called on rank 0 (the process that
        logs) after each iteration's row is logged and its due checkpoint written (``last_checkpoint``),
        with a new dict of ``iteration``, ``global_step`` and the row's metrics.csv columns (``eval/*``
        when an evaluation ran; also for the row a resume's pending evaluation logs again). A falsy
        return other than None ends the run after this iteration, with a checkpoint that records it
        (``stopped_by_callback``; a resume trains on to the total); its exception (SystemExit and
        KeyboardInterrupt too), or a TypeError for an answer with no truth value, propagates, marked
        by ``callback_error``, once a checkpoint of this iteration is written. Under torchrun rank 0
        alone may pass it (_agree_on_callback).

        SIGINT/SIGTERM: finish the iteration, checkpoint, raise TrainingInterrupted (exit 128+signum); a
        second SIGINT exits at once, or raises KeyboardInterrupt in a run started from Python (no argv). An
        --eval-every evaluation due in that iteration is not run (or abandoned, under way): its row is
        logged without eval values, best.pt is untouched, and the checkpoint records the evaluation as
        pending; a resume runs it first (_run_pending_eval), so metrics.csv, TensorBoard, best.pt and
        best_eval end as an uninterrupted run's.
        NaN/inf from an env (an --eval-every evaluation's too), in the loss or in the gradients, or in
        the weights after the update: NonFiniteError naming the last good checkpoint (nothing is
        written for the bad iteration); an exception from the env's code:
        EnvError naming the env, its step and the last good checkpoint. ``stop_after`` (a test hook) acts as a
        SIGINT arriving during iteration ``stop_after`` (counted from the start of the run).
        """
        cfg = self.cfg
        if self._agree_on_callback(callback) and callback is None:
            callback = _goes_on  # a rank other than 0 given none: it still joins each iteration's agreement on the answer
        self.callback_takes_trainer = callback is not None and callback_arity(callback) == 2
        self._saved_at = time.monotonic()
        self.best_eval = getattr(self, "best_eval", None)  # restored from the checkpoint on resume
        last_ckpt = getattr(self, "last_checkpoint", None)
        # from self.return_window (restored from a checkpoint: a run that had stopped there does not train on);
        # each iteration's window goes back to it for the checkpoints below to record
        target = ReturnTarget(cfg.stop_return, cfg.stop_episodes, self.return_window)
        self.return_window = target.window  # trimmed, as it always was before a checkpoint recorded it
        # a run already at its total never stopped for --stop-return, whatever a new target says of its window
        self.stopped_at_return = target.reached() if self.iteration < self.num_iterations else None
        # a resume of a complete run (or of one --stop-return ended) trains nothing: no logger, so no
        # empty TensorBoard file per resume, unless rows logged after the checkpoint must go
        from .logger import logged_past

        trains = self.trains()
        pending = self.eval_pending if resumed else None
        if resumed and self.dist.is_main:  # a log the resume's logger would refuse: refused before anything is rewritten
            from .logger import check_logs_readable

            check_logs_readable(self.run_dir)
        train_state.open_run_dir(self, resumed, trains)
        if self.dist.is_main and (not resumed or trains or pending is not None
                                  or logged_past(self.run_dir / "metrics.csv", self.global_step)):
            # a pending evaluation's row is logged again whole: the logger drops the one the stop logged
            self.logger = _make_logger(self, resumed, relog=pending is not None)
        try:
            # under torchrun a rank gets one stop twice (directly and from torchrun): signals.SignalGuard. A run
            # started from Python (no argv: a notebook) survives a second Ctrl-C as a KeyboardInterrupt
            # run_dir: a resume's loose FILE (last_ckpt until this run's first checkpoint) is not this run's
            with SignalGuard(lambda: last_ckpt, REPEAT_WINDOW if self.dist.enabled else 0.0,
                             second_raises=self.argv is None, run_dir=self.run_dir) as stop:
                t_start = time.perf_counter() - self.elapsed
                try:
                    check_reset(self.next_obs, self.global_step, cfg.env_id, cfg.env_kwargs)
                    self._env_guard().check_reset(self.next_obs, self.global_step)  # --debug-checks: against the space too
                except (NonFiniteError, DebugCheckError) as e:
                    raise type(e)(f"{e}; {self._last_good(last_ckpt)}") from None
                if pending is not None:
                    last_ckpt = self._run_pending_eval(pending, stop, last_ckpt, callback)
                while self.iteration < self.num_iterations and self.stopped_at_return is None and not self.stopped_by_callback:
                    t_iter = time.perf_counter()
                    self.dist.check_test_failure(self.iteration)  # test hook, off unless PROXIMA_TEST_FAIL_RANK is set
                    try:
                        out = self.train_iteration()
                    except (NonFiniteError, DebugCheckError, EnvError) as e:  # EnvError: the user's env raised mid-run
                        stopped = workers_stopped(stop, cfg.vector, last_ckpt) if isinstance(e, EnvError) else None
                        if stopped is not None:
                            raise stopped from None
                        cause = e.__cause__  # the user's env's own exception, for a Python API user's traceback
                        if isinstance(e, EnvError) and not isinstance(e, DebugCheckError):
                            e = self._env_failure(e)
                        raise type(e)(f"{e}; {self._last_good(last_ckpt)}") from cause
                    if stop_after is not None and self.iteration >= stop_after and not stop.signum:
                        stop.signum = signal.SIGINT  # the test hook: as if SIGINT arrived during this iteration
                    metrics = self.dist.reduce_metrics(out)
                    self.dist.sync_normalizers(self.obs_norm, self.reward_scaler)  # one network: every rank normalizes alike
                    if metrics["nonfinite"]:
                        raise NonFiniteError(f"non-finite loss or gradient in the update at global step {self.global_step} "
                                             f"(iteration {self.iteration}); {self._last_good(last_ckpt)}; "
                                             f"{self._nonfinite_advice()}")
                    if metrics.get("nonfinite_weights"):  # the update's last Adam step overflowed: never saved
                        raise NonFiniteError(f"non-finite weights after the update's last optimizer step at global step "
                                             f"{self.global_step} (iteration {self.iteration}); {self._last_good(last_ckpt)}; "
                                             f"try a lower {'lr' if from_python() else '--lr'}")
                    self.elapsed = time.perf_counter() - t_start
                    sps = self.steps_per_iteration / max(time.perf_counter() - t_iter, 1e-9)
                    row = _metric_row(metrics, sps, self.scheduled_lr, self.elapsed)
                    # --stop-return: every rank reads the same all-reduced episode sums, so all stop here. Added
                    # before an evaluation, whose best.pt holds the window: resumed from, it stops where this run does
                    self.stopped_at_return = target.add(float(metrics["ep_return_sum"]), int(metrics["ep_count"]))
                    self.return_window = target.window
                    self.iterations_run += 1
                    self.episodes_ended += int(metrics["ep_count"])
                    if self._eval_due():  # every rank: rank 0 evaluates, all write best.pt (their pieces)
                        try:
                            evaluated = self._evaluate_now(stop)
                        except (NonFiniteError, EnvError) as e:  # before this iteration's row, best.pt or checkpoint
                            raise type(e)(f"{e}; in the --eval-every evaluation at global step {self.global_step}; "
                                          f"{self._last_good(last_ckpt)}") from None
                        if not evaluated:  # abandoned for a stop: the stop's checkpoint (below) records it as due
                            self.eval_pending = {"global_step": self.global_step, "row": dict(row)}
                        row.update(evaluated)
                    if self.logger is not None:
                        self.logger.log(self.iteration, self.global_step, row)
                    if resumed and self.dist.is_main and not getattr(self, "_stale_eval_gone", False):
                        self._drop_stale_eval()
                    periodic = (cfg.checkpoint_every and self.iteration % cfg.checkpoint_every == 0) or self._checkpoint_due()
                    signum = self.dist.agree_stop(stop.signum)  # all ranks stop at the same iteration
                    done = self.iteration == self.num_iterations or self.stopped_at_return is not None
                    saved = bool(periodic or signum or done)
                    if saved:
                        stop.final = done  # a signal from here on lands after the last iteration
                        last_ckpt = self.last_checkpoint = self.save() or last_ckpt
                        self._saved_at = time.monotonic()
                    # after this iteration's checkpoint: the callback (an SB3-style one copying it) finds it on disk
                    if callback is not None:
                        last_ckpt = self._call_back_then_save(callback, row, saved, stop_asked=not (signum or done),
                                                              last_ckpt=last_ckpt)
                    if signum:
                        raise loop_stopped(signum, last_ckpt, complete=done)
                    if self.stopped_at_return is not None or self.stopped_by_callback:
                        break
                self.dist.dump_parameters(self.agent, self.iteration, self.global_step, self.run_dir)  # test hook (PROXIMA_DEBUG_DUMP_PARAMS)
                # a signal during the final checkpoint (or after it) would be dropped as the guard exits, and the
                # run go on through its whole end-of-run evaluation: it stops here, after that checkpoint, as a
                # stop in the loop does (a resume of the complete run evaluates). Every rank leaves the loop
                # at the same iteration, so all of them call this collective once
                signum = self.dist.agree_stop(stop.signum)
                if signum:  # a callback's stop is short of the total: a resume trains on
                    raise loop_stopped(signum, last_ckpt, complete=not self.stopped_by_callback)
        finally:
            if self.logger is not None:
                self.logger.close()
        return self.run_dir

    def _agree_on_callback(self, callback: Optional[Callable]) -> bool:
        """Whether the loop calls back, the same on every rank: under torchrun each iteration's answer
        is agreed in a collective that every rank must join, and ``callback=cb if rank == 0 else
        None`` is how a script logs from rank 0 alone. One all-reduce (none for a single process).
        Rank 0's callback is the one called, so one given only on other ranks would never be: a
        ConfigError on every rank (all of them stop, none waits for the others)."""
        given = callback is not None
        if not self.dist.enabled:
            return given
        agreed = self.dist.agree_stop(2 if given and self.dist.is_main else int(given))  # MAX: 2 when rank 0 has one
        if agreed == 1:
            raise ConfigError("train(callback=...): given on another rank but not on rank 0, whose callback alone is called "
                              "under torchrun; pass it on rank 0 (or on every rank)")
        return agreed == 2

    def _call_back(self, callback: Callable, row: dict) -> int:
        """``callback`` (run's) called on rank 0 with ``row``: CALLBACK_GOES_ON, CALLBACK_STOPS (a falsy
        answer other than None) or CALLBACK_FAILED (it raised, SystemExit and KeyboardInterrupt too, or
        answered with something that has no truth value: ``callback_error``), the same on every rank
        (one stopping alone would leave the others waiting in a collective). A second Ctrl-C landing in
        it is raised at once, as anywhere in the loop: SignalGuard has said no checkpoint follows."""
        answer = CALLBACK_GOES_ON
        if self.dist.is_main:
            from .logger import CSV_COLUMNS

            # every metrics.csv column, NaN where its cell is blank (eval/* off an evaluation's row): a
            # script reads row["eval/mean_return"] on any row, as docs/python_api.md promises
            row = {**dict.fromkeys(CSV_COLUMNS, math.nan), **row, "iteration": self.iteration,
                   "global_step": self.global_step}
            cfg, recorded = self.cfg, copy.deepcopy(self.cfg)  # once per iteration, and only with a callback
            try:
                with self._rng_kept():
                    try:
                        said = callback(row, self) if getattr(self, "callback_takes_trainer", False) else callback(row)
                    except BaseException:  # a failed callback changes nothing, before any checkpoint records it
                        self._config_put_back(cfg, recorded)
                        raise
                live = self._live_refusal()
                changed = self._config_put_back(cfg, recorded, keep=LIVE_FIELDS if live is None else ())
                if changed:
                    self._config_put_back(cfg, recorded)  # a refused change leaves no field changed
                    raise ConfigError(_config_changed_line(callback, changed, live))
                self._take_live_fields(callback, recorded)
                self._log_custom_metrics(callback, row, CSV_COLUMNS)
                stops = said is not None and not _truth(said, callback)
            except BaseException as e:  # noqa: BLE001 - the caller's sys.exit too: checkpointed, then raised as it came
                if _second_interrupt(e):
                    raise
                self.callback_error = e  # train() raises it as it came: no env diagnosis, no wrapping
                answer = CALLBACK_FAILED
            else:
                answer = CALLBACK_STOPS if stops else CALLBACK_GOES_ON
        return self.dist.agree_stop(answer) if self.dist.enabled else answer

    def _config_put_back(self, cfg: PPOConfig, recorded: PPOConfig, keep=()) -> list:
        """The fields of ``cfg`` (the run's config) a callback changed from ``recorded`` (its copy from before
        the call), but those in ``keep`` (LIVE_FIELDS where the run may take them), as (name, recorded
        value, new value), each set back; a config it put in place of ``trainer.cfg`` is replaced by the
        run's. The run never read such a change (the envs, buffers, network and schedule were built from
        the config it started with) but a checkpoint would record it, and its resume then refuse the run
        as damaged."""
        import dataclasses

        changed = []
        if self.cfg is not cfg:
            changed.append(("cfg", cfg, self.cfg))
            self.cfg = cfg
        for f in dataclasses.fields(PPOConfig):
            was, now = getattr(recorded, f.name), getattr(cfg, f.name, None)
            if f.name not in keep and not _same_value(was, now):
                changed.append((f.name, was, now))
                setattr(cfg, f.name, was)
        return changed

    def _live_refusal(self) -> Optional[str]:
        """Why this run cannot take a callback's change of LIVE_FIELDS, or None where it trains with it from
        the next iteration (the eager update reads them from trainer.cfg at each call)."""
        if self.dist.enabled:  # the callback runs on rank 0 alone: the ranks' updates would differ (or hang)
            return f"a run of {self.dist.world_size} processes calls the callback on rank 0 alone"
        if self.cfg.cudagraphs:
            return "--cudagraphs replays an update captured with the values it started with"
        if self.cfg.compile:
            return "--compile built the update with the values it started with"
        return None

    def _take_live_fields(self, callback: Callable, recorded: PPOConfig) -> None:
        """A callback's change of LIVE_FIELDS (an SB3-style schedule: ``trainer.cfg.ent_coef = ...``), checked
        as PPOConfig checks the field (put back, with one ConfigError line naming the callback, when
        invalid); the learning rate reaches the optimizer at once where no --anneal-lr schedule sets it each
        iteration. The checkpoint records the config the run trains with, so a resume goes on with it."""
        changed = [name for name in LIVE_FIELDS if not _same_value(getattr(recorded, name), getattr(self.cfg, name))]
        if not changed:
            return
        try:
            validate(self.cfg, self.dist.world_size, python=True)
        except ConfigError as e:
            self._config_put_back(self.cfg, recorded)
            raise ConfigError(f"train(callback={_callback_name(callback)}): {e}") from None
        if "lr" in changed and not self.cfg.anneal_lr:
            self.scheduled_lr = float(self.cfg.lr)
            self.optimizer.param_groups[0]["lr"].fill_(self.scheduled_lr)

    def _log_custom_metrics(self, callback: Callable, row: dict, columns: list) -> None:
        """The keys a callback added to ``row`` that are no metrics.csv column, written to TensorBoard at
        this global step as scalars (metrics.csv keeps the columns it started with); TypeError naming
        the key for a value that is no number. Called only with a callback: no cost in the loop without."""
        custom = {}
        for key, value in row.items():
            if key in columns:
                continue
            name = _callback_name(callback)
            if not isinstance(key, str):
                raise TypeError(f"train(callback={name}): added the key {short_repr(key)} to the row; a key it adds is a "
                                "TensorBoard tag: give a str (e.g. 'custom/my_metric')")
            number = _scalar(value)
            if number is None:
                raise TypeError(f"train(callback={name}): row[{key!r}] is a {type(value).__name__}; a key the callback adds "
                                "is logged to TensorBoard as a scalar: give a number (int, float, or a one-element tensor)")
            custom[key] = number
        if custom and self.logger is not None:
            self.logger.scalars(self.global_step, custom)

    @contextlib.contextmanager
    def _rng_kept(self):
        """The process's global RNGs (Python, numpy, torch and this run's CUDA device) put back as they
        were afterwards, even on a raise: the run draws its sampling and minibatch order from them, so a
        callback's own draws (a torch.rand, an eval with noise) would otherwise change the training."""
        devices = [self.device] if self.device.type == "cuda" else []  # not every GPU: a CPU run starts no CUDA
        python, numpy_state = random.getstate(), np.random.get_state()
        with torch.random.fork_rng(devices=devices):
            try:
                yield
            finally:
                random.setstate(python)
                np.random.set_state(numpy_state)

    def _call_back_then_save(self, callback: Callable, row: dict, saved: bool, stop_asked: bool, last_ckpt):
        """Call ``callback`` with this iteration's ``row`` (``saved``: its checkpoint is written). A stop
        it asks for (``stop_asked``: the run is not ending anyway) is recorded in a checkpoint at this
        step (``stopped_by_callback``: the report tells it from a finished run; a resume, which trains
        on, writes none), written again if one was; its exception (a SystemExit or KeyboardInterrupt
        too: every rank learns of it first, none is left waiting) is raised as it came once a
        checkpoint at this step is on disk: no iteration since the last periodic one is lost. Returns
        the last checkpoint."""
        answer = self._call_back(callback, row)
        if answer == CALLBACK_STOPS and stop_asked:
            self.stopped_by_callback = True
            last_ckpt = self.last_checkpoint = self.save() or last_ckpt
            self._saved_at = time.monotonic()
        elif answer == CALLBACK_FAILED:
            if not saved:
                try:
                    last_ckpt = self.last_checkpoint = self.save() or last_ckpt
                except Exception as e:  # noqa: BLE001 - the caller's own error is the one to see, a full disk noted
                    if self.dist.is_main:
                        print(f"proxima: note: no checkpoint after the callback's error: {e}", file=sys.stderr)
            if self.callback_error is None:  # another rank than rank 0: it stops with it, naming its cause
                self.callback_error = CallbackFailed(f"rank 0's train() callback raised at global step {self.global_step:,}; "
                                                     f"{self._last_good(last_ckpt)}")
            raise self.callback_error
        return last_ckpt

    def _drop_stale_eval(self) -> None:
        """A resumed run has trained past the final evaluation of its earlier end (eval.json): that
        file no longer describes the run and is removed (finish_run writes a new one at the end)."""
        from .evaluate import remove_stale_eval

        self._stale_eval_gone = True
        remove_stale_eval(self.run_dir)

    def _run_pending_eval(self, pending: dict, stop, last_ckpt, callback: Optional[Callable] = None):
        """A resume from the checkpoint of a stop that left an --eval-every evaluation due (Trainer.save's
        ``eval_pending``): run it now, on the state it was due on (the checkpoint's: the evaluation's
        own seed, and the training RNGs put back after it, make it the uninterrupted run's), log that
        iteration's row again with its eval values, write best.pt if it is a new best, and write the
        checkpoint at that step again without the pending entry, with the best_eval it leads to; then
        ``callback`` gets that row (its eval values are what an eval-threshold stop waits for): a stop
        it asks for ends the resume there, before any training, recorded in that checkpoint
        (_call_back_then_save). Returns the last checkpoint. A resume that no longer evaluates
        (--eval-every 0) drops it, and the callback is not called again with the row it already had;
        a stop during it logs the row as it was and stops with the checkpoint still recording it."""
        self.eval_pending = None
        if not self.cfg.eval_every:
            if self.logger is not None:
                self.logger.log(self.iteration, self.global_step, dict(pending["row"]))
            return last_ckpt
        row = dict(pending["row"])
        try:
            evaluated = self._evaluate_now(stop)
        except (NonFiniteError, EnvError) as e:
            raise type(e)(f"{e}; in the --eval-every evaluation at global step {self.global_step} (due when the run "
                          f"was stopped); {self._last_good(last_ckpt)}") from None
        row.update(evaluated)
        if self.logger is not None:
            self.logger.log(self.iteration, self.global_step, row)
        if not evaluated:  # stopped again: the checkpoint resumed from still records the evaluation as due
            signum = self.dist.agree_stop(stop.signum)
            held = None if last_ckpt is None else Path(last_ckpt).absolute().parent
            if held is not None and held.name == "checkpoints" and held.parent.resolve() == Path(self.run_dir).resolve():
                raise TrainingInterrupted(signum, last_ckpt)
            # a loose FILE resumed into a new --run-dir is not this run's checkpoint: name no run, as SignalGuard does
            raise TrainingInterrupted(signum, None, f"during the --eval-every evaluation due at step {self.global_step}; "
                                      f"no checkpoint was written in {self.run_dir} ({last_ckpt} is unchanged)")
        if self.logger is not None:
            self.logger.flush()
        last_ckpt = self.last_checkpoint = self.save() or last_ckpt
        self._saved_at = time.monotonic()
        if callback is not None:
            # a run that is complete (or --stop-return ended) has nothing left that a stop would spare
            ending = self.iteration >= self.num_iterations or self.stopped_at_return is not None
            last_ckpt = self._call_back_then_save(callback, row, saved=True, stop_asked=not ending, last_ckpt=last_ckpt)
        return last_ckpt

    def _env_failure(self, e: EnvError) -> Exception:
        """The error for an env that raised (or broke the contract) mid-rollout: a NaN/inf the envs
        returned earlier in this rollout first (the guard's flags, read once check_rollout would
        have, at the iteration's end: a NaN observation gives NaN actions, and an env that asserts
        its action space then raises on those), else ``e`` with the run's global step (the env's
        own step count is that env's)."""
        guard = self._env_guard()
        nonfinite = guard.nonfinite_so_far(self.rollout.raw_rewards, self.cfg.env_id)
        message = str(e)
        if nonfinite is not None:
            prefix = f"env '{self.cfg.env_id}': "
            later = message[len(prefix):] if message.startswith(prefix) else message
            return NonFiniteError(f"{nonfinite}; the env's later error may follow from it: {later}")
        return EnvError(f"{message}; global step {guard.global_step_at(guard.t)}")

    def _eval_due(self) -> bool:
        """--eval-every N: this iteration crossed a multiple of N env steps."""
        every = self.cfg.eval_every
        return bool(every) and (self.global_step - self.steps_per_iteration) // every != self.global_step // every

    @_run_settings
    def _evaluate_now(self, stop=None) -> dict:
        """Evaluate a frozen copy of the current policy (``eval_episodes`` deterministic episodes, the
        end-of-run seed) on rank 0; a new best mean return is written to checkpoints/best.pt. Training's
        RNG streams are saved and put back, so a run with evaluations trains exactly as one without.

        Under torchrun every rank calls this at the same iteration: the others wait for rank 0's
        evaluation in a collective without the hang timeout (from_main(patient=True): an evaluation
        may take longer than PROXIMA_DIST_TIMEOUT), and best.pt holds every rank's pieces, as a
        periodic checkpoint does, so it resumes with each rank's own envs.

        ``stop`` (the loop's signals.Stop): once rank 0's has a signal the evaluation is abandoned
        and {} returned: no eval value in the row, best.pt untouched, and the loop goes on to the
        stop's checkpoint (under torchrun, before the shutdown timeout kills the ranks), which
        records the evaluation as pending for the resume."""
        mean, std, self.best_eval, improved, success = self.dist.from_main(
            lambda: (*self._evaluate_on_main(stop), self._eval_success_rate()), patient=True)
        if mean is None:
            return {}
        if improved:
            state = train_state.capture(self)
            if self.dist.enabled:
                from .distributed import RANK_KEYS

                state["ranks"] = self.dist.gather_to_main({k: state[k] for k in RANK_KEYS})
            # rank 0 writes; an error (disk full) stops every rank with the same line
            self.dist.from_main(lambda: ckpt.atomic_torch_save(ckpt.with_entry_point(state), ckpt.best_checkpoint_path(self.run_dir)))
        # eval/success_rate: blank (NaN) where no episode reported info["is_success"], as charts/success_rate is
        return {"eval/mean_return": mean, "eval/std_return": std, "eval/success_rate": success}

    def _eval_success_rate(self) -> float:
        """Rank 0's last --eval-every evaluation's success_rate (evaluate.success_fields: the mean of
        info["is_success"] over its episodes that reported one), NaN where none did."""
        rate = (getattr(self, "loop_eval", None) or {}).get("result", {}).get("success_rate")
        return float(rate) if rate is not None else math.nan

    def _evaluate_on_main(self, stop=None) -> tuple:
        """(mean return, std, best mean so far, whether this one is a new best): rank 0's evaluation;
        (None, None, best so far, False) when ``stop`` holds a signal before it ends (_evaluate_now)."""
        from .evaluate import EvaluationStopped, evaluate

        stopped = (lambda: bool(stop.signum)) if stop is not None else None
        cfg, rng, seed = self.cfg, ckpt.rng_state(), self.cfg.seed + 1_000_000
        try:
            if stopped is not None and stopped():
                raise EvaluationStopped("stopped before the evaluation began")
            norm = copy.deepcopy(self.obs_norm) if self.obs_norm is not None else None
            policy = ckpt.Policy(copy.deepcopy(self.agent), norm, cfg.to_dict(), self.env.single_observation_space,
                                 self.env.single_action_space, self.device)
            result = evaluate(policy, episodes=cfg.eval_episodes, seed=seed, backend=cfg.backend, stop=stopped)
        except EvaluationStopped:
            # under --quiet too (its help): an evaluation asked for and not run is the run doing otherwise than asked
            print(f"proxima: note: the --eval-every evaluation at global step {self.global_step:,} was abandoned "
                  "for the stop; no eval value is logged for this iteration until the run is resumed (its checkpoint "
                  "records the evaluation as due, and the resume runs it first)", file=sys.stderr)
            return None, None, self.best_eval, False
        finally:
            ckpt.set_rng_state(rng)
        # what it ran under, for finish_run: a run that ends at this step would evaluate the same policy again
        self.loop_eval = {"global_step": self.global_step, "episodes": cfg.eval_episodes, "seed": seed, "backend": cfg.backend,
                          "device": self.device, "threads": torch.get_num_threads(), "flush_denormal": flush_denormal_on(),
                          "result": result}
        mean = float(result["mean_return"])
        # a NaN best would compare false with every later mean and be refused in every later checkpoint
        improved = math.isfinite(mean) and (self.best_eval is None or mean > self.best_eval)
        return mean, float(result["std_return"]), mean if improved else self.best_eval, improved

    def _checkpoint_due(self) -> bool:
        """--checkpoint-minutes: a checkpoint is due when that long has passed since the last one (rank
        0's clock decides for all ranks, so they save at the same iteration)."""
        minutes = self.cfg.checkpoint_minutes
        if not minutes:
            return False
        due = time.monotonic() - self._saved_at >= 60.0 * minutes
        return bool(self.dist.from_main(lambda: due)) if self.dist.enabled else due

    def close(self) -> None:
        """End the env (its worker processes) and the side thread, and put back the caller's process-wide
        settings (thread count, flush-denormal mode). Also called by a failed __init__, on what it had
        built. (--compile changes no inductor setting to put back: accel.compile_options.)

        Drops what refers back to the trainer (the EnvGuard, the iteration's parts): without that cycle
        the trainer and its env are freed as soon as the caller lets go of them (train() returns), an
        async env's pipes and shared memory with them, not whenever the cycle collector next runs (a
        sweep of async runs ran out of file descriptors). The agent, its state and save() stay usable.

        A Trainer used directly also puts back the caller's random, numpy and torch RNG streams as they
        were before it was built (the run seeds them from ``seed``), as train() does when it returns."""
        self._guard = None
        self.parts = self._rollout = self._advantages = self._update = None
        try:
            if self.env is not None:
                self.env.close()
        finally:
            if self.side is not None:
                self.side.close()
            while self._undo:  # the last change first
                self._undo.pop()()
            caller_rng, self._caller_rng = getattr(self, "_caller_rng", None), None
            if caller_rng is not None:  # once: a second close() must not rewind the caller's later draws
                ckpt.set_rng_state(caller_rng)


def callback_arity(callback) -> int:
    """How train() calls ``callback``: 2 for ``f(row, trainer)`` (it names two positional parameters, the
    second without a default, and can be called with two), else 1 for ``f(row)``: ``f(row, verbose=False)``
    keeps its default rather than get the Trainer. ConfigError (one line, before the run starts) for
    what is not callable or cannot be called with one positional argument nor two: found out only after a
    whole iteration otherwise. A callable whose signature Python cannot read (some builtins) is taken as
    ``f(row)``."""
    import inspect

    wanted = ("expected f(row) or f(row, trainer): a function of the iteration's metrics (a dict), and optionally "
              "the Trainer, that returns False to stop the run, or None")
    if not callable(callback):
        raise ConfigError(f"train(callback={short_repr(callback)}): not callable; {wanted}")
    try:
        signature = inspect.signature(callback)
    except (TypeError, ValueError):
        return 1
    positional = [p for p in signature.parameters.values()
                  if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for arity in (2, 1):
        if arity == 2 and (len(positional) < 2 or positional[1].default is not inspect.Parameter.empty):
            continue  # f(row, *rest), print(*args) or f(row, n=10): called with the row alone
        try:
            signature.bind(*[None] * arity)
        except TypeError:
            continue
        return arity
    name = _callback_name(callback)
    raise ConfigError(f"train(callback={name}): its signature {signature} cannot be called with one positional argument "
                      f"(the row) nor two (the row and the trainer); {wanted}")


#: Trainer._call_back's answers, agreed as the largest over ranks: a failure outranks a stop
CALLBACK_GOES_ON, CALLBACK_STOPS, CALLBACK_FAILED = 0, 1, 2


def _goes_on(row) -> None:
    """The callback of a torchrun rank other than 0 given none while rank 0 has one: never called
    (rank 0's alone is), it makes the rank answer "go on" in each iteration's agreement."""


def _same_value(a, b) -> bool:
    """Whether a config field holds the same value before and after a callback (NaN equal to NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _scalar(value) -> Optional[float]:
    """``value`` as the float a TensorBoard scalar holds (int, float, bool, a numpy number, a one-element
    real tensor), or None for anything else."""
    import numbers

    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        return float(value.item())
    if isinstance(value, np.ndarray) and value.size == 1 and np.issubdtype(value.dtype, np.number) \
            and not np.issubdtype(value.dtype, np.complexfloating):
        return float(value.item())
    return None


#: the fields a callback may change mid-run (SB3-style schedules: ``trainer.cfg.ent_coef = ...``): the eager
#: update reads them from trainer.cfg at each call (ppo.update, make_grad_step, grad_cpu.BlockGradients; lr
#: through the --anneal-lr schedule or the optimizer), so the change trains from the next iteration and the
#: checkpoint records it. Not under --compile/--cudagraphs or several processes (Trainer._live_refusal).
LIVE_FIELDS = ("lr", "ent_coef", "vf_coef", "clip_coef", "vf_clip_coef", "max_grad_norm", "target_kl", "update_epochs")


def _callback_name(callback) -> str:
    """How a refusal names a callback: its qualified name, else its repr cut short."""
    return getattr(callback, "__qualname__", None) or short_repr(callback)


def _config_changed_line(callback, changed: list, live: Optional[str] = None) -> str:
    """The one line refusing a callback's change of ``trainer.cfg`` (Trainer._config_put_back's ``changed``);
    ``live``: why this run takes no change of LIVE_FIELDS either (Trainer._live_refusal), else None."""
    from .config import RESUME_SAFE

    name = _callback_name(callback)
    if changed[0][0] == "cfg":
        return (f"train(callback={name}): it replaced trainer.cfg; the run trains with the config it started with, which "
                "is put back (the checkpoints record it); to train with another config, stop the run (return False) and "
                "start a new one, train(PPOConfig(..., init_from=RUN_DIR)) to start from its weights")
    said = ", ".join(f"trainer.cfg.{f} ({short_repr(was)} -> {short_repr(now)})" for f, was, now in changed)
    given = ", ".join(f"{f}={short_repr(now)}" for f, _, now in changed)
    if all(f in RESUME_SAFE for f, _, _ in changed):
        instead = f"stop the run (return False) and resume it with the new value: train(PPOConfig(..., {given}), resume=RUN_DIR)"
    else:
        instead = (f"stop the run (return False) and start a new one from its weights: "
                   f"train(PPOConfig(..., {given}, init_from=RUN_DIR))")
    if live is not None and any(f in LIVE_FIELDS for f, _, _ in changed):
        why = f"{live}, so the change would not train"
    else:
        why = (f"the run was built with the config it started with (a callback may change {', '.join(LIVE_FIELDS)} "
               "alone), so the change would not train")
    return (f"train(callback={name}): it changed {said}; {why} and is put back (the checkpoints record the run's "
            f"config); to train with it, {instead}")


def _truth(said, callback) -> bool:
    """The callback's answer as a bool; TypeError (one line) for one with no truth value (a numpy
    array or tensor of several elements), which would otherwise fail inside the trainer as its error."""
    try:
        return bool(said)
    except Exception as e:
        name = _callback_name(callback)
        raise TypeError(f"train(callback={name}): returned a value of type {type(said).__name__}, whose truth value is "
                        "ambiguous; return False to stop, None or True to go on") from e


def _second_interrupt(e: BaseException) -> bool:
    """Whether ``e`` is SignalGuard's KeyboardInterrupt for a second Ctrl-C (a run started from Python),
    not one the callback raised itself: its traceback runs through the guard's handler."""
    import traceback

    return isinstance(e, KeyboardInterrupt) and any(
        frame.f_code is SignalGuard._handle.__code__ for frame, _ in traceback.walk_tb(e.__traceback__))


def _compile_failure(e: BaseException) -> Optional[str]:
    """"ExceptionType: first line" of a torch.compile failure (dynamo's BackendCompilerFailed, inductor's
    InductorError around it, or a C++ build error of inductor's that escaped unwrapped), else None.
    Read from the already imported modules: a run that never compiled has nothing to match."""
    dynamo_exc, inductor_exc = sys.modules.get("torch._dynamo.exc"), sys.modules.get("torch._inductor.exc")
    kinds = tuple(k for k in (getattr(dynamo_exc, "BackendCompilerFailed", None), getattr(inductor_exc, "CppCompileError", None),
                              getattr(inductor_exc, "InvalidCxxCompiler", None)) if isinstance(k, type))
    if not kinds or not isinstance(e, kinds):
        return None
    inner = getattr(e, "inner_exception", None) or e
    # dynamo wraps whatever compiling raised: an out-of-memory while inductor autotunes is no compiler's
    # fault, and "run without --compile" would hide it; it propagates as itself (the caller re-raises)
    cause, seen = inner, 0
    while cause is not None and seen < 8:
        if isinstance(cause, torch.OutOfMemoryError) or (isinstance(cause, RuntimeError) and "out of memory" in str(cause).lower()):
            return None
        cause, seen = getattr(cause, "inner_exception", None) or cause.__cause__, seen + 1
    output = getattr(inner, "output", None)  # CppCompileError: the compiler's own words, under its command line
    lines = [line.strip() for line in (output if isinstance(output, str) else "").splitlines() if line.strip()]
    said = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")
    text = str(inner).strip().splitlines()
    first = text[0].strip() if text else ""
    return f"{type(inner).__name__}: {first}" + (f": {said}" if said else "") if first else type(inner).__name__


class CallbackFailed(RuntimeError):
    """Raised under torchrun by the ranks other than rank 0 when rank 0's train() callback raised (rank 0
    raises the callback's own exception)."""


def _pending_eval(state: dict) -> Optional[dict]:
    """A checkpoint's ``eval_pending`` (Trainer.save), or None (none due, or a checkpoint written before
    it was recorded). CheckpointError naming the file when it is not what a stop writes: the
    checkpoint's own global step and a row of numbers."""
    pending = state.get("eval_pending")
    if pending is None:
        return None
    row = pending.get("row") if isinstance(pending, dict) else None
    if (not isinstance(pending, dict) or pending.get("global_step") != state.get("global_step") or not isinstance(row, dict)
            or not all(isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in row.items())):
        raise ckpt.CheckpointError(f"{state.get('path', 'checkpoint')}: eval_pending is {ckpt._one_line(repr(pending), 60)}, "
                                   "not the --eval-every evaluation a stop left due ({global_step: the checkpoint's, row: "
                                   "{metric: number}}); the checkpoint is damaged or was edited")
    return {"global_step": int(pending["global_step"]), "row": dict(row)}


class ReturnTarget:
    """--stop-return: whether the mean return of the last ``episodes`` training episodes reached
    ``target`` (None: no target, the window is only kept). The window is a logger.RollingReturn of
    ``episodes`` fed each iteration's return sum and count (the rolling return's window and trim rule).
    It is part of the TrainState (a checkpoint's ``return_window``, ``window``'s pairs, given back as
    ``window`` here): a resumed run judges the episodes an uninterrupted one would, and one that stopped
    stays stopped."""

    def __init__(self, target: Optional[float], episodes: int, window=()):
        from .logger import RollingReturn

        self.target = None if target is None else float(target)
        self.returns = RollingReturn(episodes, window or ())

    @property
    def window(self) -> list:
        """[(return sum, episode count)] of the window's iterations, oldest first (the trainer's return_window)."""
        return self.returns.sums()

    def add(self, return_sum: float, count: int) -> Optional[float]:
        """Add one iteration's episodes; ``reached()`` after it."""
        self.returns.add_sum(return_sum, count)
        return self.reached()

    def reached(self) -> Optional[float]:
        """The window's mean return when it holds enough episodes and reaches the target, else None."""
        if self.target is None or self.returns.episodes < self.returns.size:
            return None
        mean = self.returns.mean
        return mean if mean >= self.target else None


def _device_for(dist, name: str, python: bool) -> torch.device:
    """dist.device_for(name), with a device that cannot be used refused in the caller's words: from
    Python (``python``) ``device='cuda': ...; use device='cpu'``, as load() and make_env say (resolve_device's
    arg=); python_words would only strip the flag's dashes (``device 'cuda': ...; use device cpu``)."""
    if python:
        from .device import resolve_device

        resolve_device(name, arg="device")
    return dist.device_for(name)


@contextlib.contextmanager
def _python_words(python: bool):
    """A ConfigError of the device and size checks, for a config built in Python (``python``: no argv),
    with each flag it names written as the PPOConfig field (config.python_words), as validate(python=True)
    words its own lines: a notebook user set ``num_envs=4096``, never typed ``--num-envs``."""
    try:
        yield
    except ConfigError as e:
        if not python:
            raise
        raise ConfigError(python_words(str(e))) from None


def check_device_flags(cfg: PPOConfig, device: torch.device, world_size: int = 1, resumed: bool = False) -> None:
    """The flags that need a CUDA device (--cudagraphs, --amp fp16), and what --compile needs on the
    CPU, against ``device``: one line each (the Trainer, and ``train --dry-run``). ``resumed``: the
    config is a checkpoint's, whose --compile the user never typed (_check_compile's advice)."""
    _check_cudagraphs(cfg, device, world_size)
    if cfg.amp == "fp16" and device.type != "cuda":
        raise ConfigError("--amp fp16 needs a CUDA device (GradScaler); use --amp bf16 on CPU")
    _check_compile(cfg, device, resumed)


def _check_compile(cfg: PPOConfig, device: torch.device, resumed: bool = False) -> None:
    """--compile on the CPU: inductor builds C++ kernels with the compiler it finds (doctor.inductor_cxx,
    a PATH lookup as inductor's own) against Python.h (doctor.python_headers, a file lookup), and
    without either, or with a compiler that is there but cannot build (doctor.cxx_problem: a one-line
    test build, about half a second, once per process), it fails inside the first rollout, a hundred
    lines of traceback later.
    On CUDA the kernels are triton's: not checked here. The compile cache is checked on both (--dry-run
    too): a folder inductor cannot create ends in an unrelated traceback (accel.compile_cache_problem)."""
    if not cfg.compile:
        return
    from .accel import compile_cache_problem

    # a resume compiles because its checkpoint recorded --compile: there is no typed flag to drop
    drop = "or add --no-compile (the run was compiled)" if resumed else "or drop --compile"
    problem = compile_cache_problem(keep=False)
    if problem:
        raise ConfigError(f"--compile: {problem}, {drop}")
    if device.type != "cpu":
        return
    from .doctor import inductor_cxx, python_headers

    found, why = inductor_cxx()
    if found is None:
        raise ConfigError(f"--compile: torch.compile on the CPU needs a C++ compiler ({why}); {drop}")
    cxx = found
    found, why = python_headers()
    if found is None:
        raise ConfigError(f"--compile: torch.compile on the CPU needs Python's C headers ({why}); {drop}")
    from .doctor import cxx_problem

    why = cxx_problem(cxx, found)
    if why:
        raise ConfigError(f"--compile: torch.compile on the CPU needs a working C++ compiler ({why}); "
                          f"fix it or set CXX to one that works, {drop}")


def _check_cudagraphs(cfg: PPOConfig, device: torch.device, world_size: int) -> None:
    """--cudagraphs and what it cannot be combined with: one line each, naming the flag."""
    if not cfg.cudagraphs:
        return
    if device.type != "cuda":
        preset = preset_of(cfg, "cudagraphs")
        python = from_python()  # train()'s words: a script set cudagraphs=True (or preset='gpu') and device='cpu'
        if preset:  # the user chose the preset (--preset, resolve's preset=), not --cudagraphs
            hint, off = cpu_preset_hint(cfg, python), "set cudagraphs=False" if python else "add --no-cudagraphs"
            hint = f"{hint}, or {off}" if "preset" in hint else off
            raise ConfigError(f"{as_given('preset', preset, python)} turns on {'cudagraphs' if python else '--cudagraphs'}, "
                              f"which needs a CUDA device (got {as_given('device', cfg.device, python)}); {hint}")
        raise ConfigError(f"{'cudagraphs' if python else '--cudagraphs'} needs a CUDA device "
                          f"(got {as_given('device', cfg.device, python)})")
    if cfg.debug_checks:
        raise ConfigError("--debug-checks reads every step on the host, which a CUDA graph cannot record; drop --cudagraphs or --debug-checks")
    if cfg.amp == "fp16":
        raise ConfigError("--amp fp16 checks its GradScaler on the host each step, which a CUDA graph cannot record; use --amp bf16 with --cudagraphs")
    if world_size > 1:
        raise ConfigError("--cudagraphs is not supported under torchrun yet (gradients are all-reduced outside the graph); drop --cudagraphs")
    if cfg.compile and cfg.compile_mode != "default":
        from .accel import compile_cache_problem, mode_options

        # a mode is refused for what its inductor options turn on, as torch defines the mode (max-autotune
        # turns on CUDA graphs too); an unwritable cache folder is left to _check_compile to name, as
        # importing inductor there dies in an unrelated traceback
        if not compile_cache_problem(keep=False) and mode_options(cfg.compile_mode).get("triton.cudagraphs"):
            raise ConfigError(f"--compile-mode {cfg.compile_mode} records inductor's own CUDA graphs inside Proxima's (--cudagraphs); "
                              "use --compile-mode default, or drop --cudagraphs")


def _autocast_fn(fn, autocast):
    """fn run under autocast (--amp); the rollout buffers store its outputs as float32."""

    def wrapped(*args):
        with autocast():
            return fn(*args)

    return wrapped


def _make_logger(trainer: "Trainer", resumed: bool, relog: bool = False):
    """``relog``: the checkpoint's own iteration is logged again (a pending evaluation), so its row and
    events go too."""
    from .logger import RunLogger

    total = trainer.num_iterations * trainer.steps_per_iteration
    show = trainer.cfg.progress and not trainer.quiet
    step = trainer.global_step - (trainer.steps_per_iteration if relog else 0)
    # rolling: charts/episodic_return_100 (population members' loggers keep it too: population_run)
    # config: the hyperparameters text (rank 0's logger, the only one): the fields this run trains with
    return RunLogger(trainer.run_dir, total, resume_step=step if resumed else None, progress=show, rolling=True,
                     config=trainer.cfg.to_dict())


def _metric_row(m: dict, sps: float, lr: float, elapsed: float) -> dict:
    """One iteration's row of metrics.csv and the callback. ``lr``: the schedule's float64 learning
    rate (Trainer.scheduled_lr), not the optimizer's float32 tensor, whose reading would round it."""
    count = m["ep_count"]
    return {
        "time": round(elapsed, 3), "episodes": int(count),
        "charts/episodic_return": m["ep_return_sum"] / count if count else math.nan,
        "charts/episodic_length": m["ep_length_sum"] / count if count else math.nan,
        # of the finished episodes whose last step reported info["is_success"]; blank where none did (native envs never)
        "charts/success_rate": m["success_sum"] / m["success_count"] if m.get("success_count") else math.nan,
        "charts/SPS": sps, "charts/learning_rate": float(lr),
        "losses/policy_loss": m["policy_loss"], "losses/value_loss": m["value_loss"], "losses/entropy": m["entropy"],
        "losses/approx_kl": m["approx_kl"], "losses/clipfrac": m["clipfrac"], "losses/explained_variance": m["explained_variance"],
        "losses/minibatch_updates": _count(m.get("minibatch_updates", math.nan)),
        # blank where not measured: vf_clipfrac without --clip-vloss, action_* for discrete actions
        "losses/old_approx_kl": m.get("old_approx_kl", math.nan), "losses/grad_norm": m.get("grad_norm", math.nan),
        "losses/vf_clipfrac": m.get("vf_clipfrac", math.nan), "charts/action_std": m.get("action_std", math.nan),
        "charts/action_clip_frac": m.get("action_clip_frac", math.nan),
    }


def _count(value: float):
    """A step count read back as a float (ranks' equal counts averaged, in float32): the whole number
    it is; NaN (not measured) as it came."""
    return int(round(value)) if math.isfinite(value) else math.nan


# ------------------------------------------------------------------------------------------------
def train(config: Optional[PPOConfig] = None, run_dir=None, resume=None, argv=None, quiet: bool = False, evaluate_at_end: bool = True,
          overwrite: bool = False, env_id: Optional[str] = None, trust_run: bool = False, overrides: Optional[dict] = None,
          sources: Optional[dict] = None, callback: Optional[Callable] = None, **unexpected):
    """Train PPO. Returns (run_dir, policy): a TrainedPolicy, which acts on raw observations as
    ``load(run_dir)`` does (the run's frozen observation normalizer applied); ``policy.agent`` is the
    trained network. ``run_dir`` is a Path in the form the caller named the directory (``run_dir``,
    ``config.run_dir``, or ``resume``'s directory; relative when given relative; a leading ``~``
    expanded, as everywhere the API takes a path), a fresh run's and a resumed one's alike, as ``proxima train`` and ``proxima resume`` print it; else the real path.

    A run directory belongs to one run (proxima/rundir.py): a new run refuses a directory that
    holds files unless ``overwrite`` (the old one is moved aside); the trainer holds the directory's
    lock for its life, so a second trainer or a resume of a live run stops with "run R is in use by
    pid P". A new run that fails before finishing its first iteration leaves no directory behind
    (a KeyboardInterrupt from the env's code included). ``config`` is not changed (the run works on a
    copy), and the global random, numpy and torch RNG streams are as the caller left them when this
    returns or raises.

    resume: None (fresh run), a checkpoint file or run directory to continue from ("auto" resumes
    from ``run_dir`` when it holds a checkpoint, else starts it afresh). A resumed run continues in
    the checkpoint's run directory with the checkpoint's config; ``overrides`` ({field: value}, the
    flags a user typed) may change only config.RESUME_SAFE fields (total_timesteps extends the run),
    any other that differs is refused; from Python (``overrides`` None) the fields where ``config``
    differs from PPOConfig's defaults count as the ones typed; ``sources`` ({field: '--preset NAME' or
    '--config FILE'}) names where an override the user did not type came from, and a resume that such
    a value changes says so in a note listing each change. A run directory's newest checkpoint that cannot be loaded is
    set aside and the one before it used. An env id read from a checkpoint that would import a
    module (``module:Class``) is refused unless ``env_id`` names the same env or ``trust_run``.

    callback: ``f(row)`` or ``f(row, trainer)``, called after each iteration once its metrics.csv row
    is logged and its due checkpoint written (Trainer.run's ``callback``). ``row``: a dict of
    ``iteration``, ``global_step`` and the row's columns (``eval/mean_return`` when an evaluation ran,
    the one a stopped run's resume runs first included). ``trainer``, passed to a function whose second
    positional parameter has no default: the Trainer, for SB3-style callbacks that reach the model:
    ``trainer.agent`` (the network, training: read it, do not step it), ``trainer.obs_norm``,
    ``trainer.run_dir``, ``trainer.last_checkpoint`` (the newest checkpoint file, this iteration's
    when one was due) and ``trainer.cfg``. A falsy return other than None stops the run there, with a
    checkpoint that records the stop (``proxima report`` says so), the end-of-run evaluation and the
    return as for a finished run; ``train(None, resume=run_dir)`` trains on. Its exception (SystemExit
    and KeyboardInterrupt too) is raised as it came, after a checkpoint of that iteration is written;
    so is a TypeError for an answer with no truth value (a numpy array). A callback that cannot be
    called with one or two positional arguments is a ConfigError before the run starts. Under torchrun
    rank 0's callback alone is called, and the other ranks may pass None (``callback=cb if rank == 0
    else None``); one given on other ranks but not on rank 0 is a ConfigError on every rank.

    Under torchrun every process calls this (docs/distributed.md): rank 0 finds and loads the
    checkpoint and sends it to the others, so all ranks restore the same one; rank 0 alone writes
    the run directory and runs the final evaluation. A rank that fails prints
    ``proxima: rank R failed: <error>`` before its traceback; torchrun then ends the others. An
    error of rank 0's own work (loading the checkpoint, the run directory) is raised on every rank
    but reported by rank 0 alone (distributed.DistContext.from_main).
    """
    from . import distributed
    from .envs.gym_adapter import reset_success_note
    from .run_setup import diagnose_failure, resolve_start
    from .rundir import RunSession
    from .signals import WORKERS_ENDED

    if unexpected:  # env=MyEnv() (SB3's PPO(policy, env)): one line saying what names the env instead
        raise TypeError(unexpected_train_argument(unexpected))
    for name, value in (("quiet", quiet), ("evaluate_at_end", evaluate_at_end), ("overwrite", overwrite),
                        ("trust_run", trust_run)):  # overwrite='False' is a true string: it moved the old run aside
        check_switch(value, "train", name)
    if resume is not None and not isinstance(resume, (str, os.PathLike)):  # resume=True: not pathlib's TypeError
        raise ConfigError(f"train: resume={short_repr(resume)}: give resume='auto' or a run directory or checkpoint path")
    if argv is None and env_id is not None and resume is None:  # a new run trains config.env_id: env_id= went unread
        raise ConfigError(f"train: env_id={short_repr(env_id)} names the env of a resumed run (with resume=); a new run "
                          f"trains config.env_id: give PPOConfig(env_id={short_repr(env_id)})")
    if (argv is None and env_id is not None and isinstance(config, PPOConfig) and config.env_id != PPOConfig().env_id
            and config.env_id != env_id):
        raise ConfigError(f"train: env_id={short_repr(env_id)} and PPOConfig(env_id={short_repr(config.env_id)}) name "
                          "two envs; give one of them")
    env_given = env_passed_as_run_dir(run_dir)
    if env_given is not None:  # train(cfg, env), SB3's PPO(policy, env) order: not os.fspath's TypeError on the env
        raise TypeError(env_given)
    reset_success_note()  # an unusable info["is_success"] is noted once a run, its end-of-run evaluation included
    if config is not None and not isinstance(config, PPOConfig):
        validate(config)  # its one line for train(dict) or train("CartPole-v1"), not an AttributeError mid-setup
    if isinstance(config, PPOConfig) and not isinstance(config.env_id, str):  # before a run directory is named after it
        raise ConfigError(env_id_refusal(config.env_id))
    if callback is not None:  # before the run: not a TypeError after its first iteration
        callback_arity(callback)
    for name, value in (("run_dir", run_dir), ("resume", resume)):  # as PPOConfig(run_dir='') is refused
        if isinstance(value, (str, os.PathLike)) and not os.fspath(value).strip():
            raise ConfigError(f"train({name}={os.fspath(value)!r}): empty; give a directory (or None)")
    # a leading ~ is the caller's home, as a shell expands it: never a directory named '~' in the cwd
    run_dir = expand_home(run_dir)
    resume = expand_home(resume) if resume != "auto" else resume
    if config is None:  # train() or train(None) with no run to continue: not an AttributeError mid-setup
        from . import _need_a_config

        _need_a_config(run_dir, resume)
    if config is not None:  # the run resolves fields (encoder "auto") in its own copy: the caller's may train the next env
        config = copy.copy(config)  # shallow: nothing writes into a field's list or dict (copy.copy keeps _sources)
        config.run_dir, config.init_from = expand_home(config.run_dir), expand_home(config.init_from)
    random_seed = config is not None and config.seed is None  # seed=None (SB3's): drawn below, recorded in config.yaml
    if resume is not None and config is not None and overrides is None:
        overrides = set_fields(config)  # the Python API's resume: its config is not silently dropped
        if random_seed:  # no seed asked of a resume: it keeps its recorded one (a fresh resume='auto' run draws one)
            overrides.pop("seed", None)
        # its env and directory too, as the CLI's typed ENV_ID and --run-dir: a sweep reusing a run_dir
        # must not resume the recorded env under another env's label, nor a run_dir go unused.
        # run_dir= wins over PPOConfig.run_dir, as a typed --run-dir over a --config file's (a new run's rule)
        asked_dir = run_dir if run_dir is not None else config.run_dir
        if run_dir is None and _records_run_dir(resume, config.run_dir):
            # a config read from the run's config.yaml (or its checkpoint's, the same value) names the run as it was
            # started, often relative to another directory: it is that run's, as `train --config RUN/config.yaml
            # --resume RUN` takes it from anywhere
            asked_dir = None
        if asked_dir is not None:
            overrides["run_dir"] = os.fspath(asked_dir)
        # env_id: asked when not PPOConfig's default (set_fields's rule), and always under resume="auto",
        # where the config describes the run to train or go on with
        if env_id is None and (resume == "auto" or config.env_id != PPOConfig().env_id):
            env_id = config.env_id
    # the run seeds the global random, numpy and torch RNGs for its own draws; the caller's streams
    # (a random search's next draw) go on from where they were once train() returns or raises
    caller_rng = ckpt.rng_state()
    named = _named_run_dirs(config, run_dir, resume)  # before resolve_start makes a resumed run's a real path
    dctx = distributed.context()
    if random_seed:  # rank 0's draw for every rank; from the OS, so the caller's RNG streams do not move
        config.seed = dctx.from_main(lambda: secrets.randbelow(MAX_SEED + 1))
    session = RunSession()  # rank 0's lock on the run directory
    trainer, resumed, out_dir = None, False, None
    looping = False  # trainer.run has started
    resumed_from = None  # the checkpoint a resume continues from (stopped_outside: the target it holds)

    def stopped_outside(e: TrainingInterrupted) -> TrainingInterrupted:
        """The stop to raise for a signal outside the loop's own checkpointed stop, saying where it landed."""
        last = getattr(trainer, "last_checkpoint", None)
        if out_dir is not None:  # training had finished: the end-of-run evaluation or --plot was cut short
            import shlex

            from .evaluate import current_eval
            from .signals import eval_command

            episodes = trainer.cfg.eval_episodes
            if episodes > 0 and current_eval(out_dir, trainer.global_step, episodes) is None:
                return TrainingInterrupted(e.signum, last, f"during the end-of-run evaluation; training is complete "
                                           f"(checkpoint: {last}); `{eval_command(out_dir)}` evaluates it")
            # eval.json is this run's (or none was asked for): the stop landed after it, in --plot's drawing
            done = "eval.json is written" if episodes > 0 else "--eval-episodes 0 asked for no evaluation"
            where, redo = ("while drawing curve.png", f"; `proxima plot {shlex.quote(str(out_dir))}` draws it") \
                if trainer.cfg.plot else ("after the end-of-run evaluation", "")
            return TrainingInterrupted(e.signum, last, f"{where}; training is complete (checkpoint: {last}) and {done}{redo}")
        if trainer is None and session.created is None and (resumed or session.lock is not None):
            # a resume stopped as it set up (rank 0: its run locked, the checkpoint being read; every rank:
            # the env and agent being built): the run is untouched
            where = session.lock.run_dir if session.lock is not None else run_dir
            listed = ckpt.list_checkpoints(where) if where is not None else []
            last = listed[-1] if listed else None
            return TrainingInterrupted(e.signum, last, "before training started; the run is as its last checkpoint left it; "
                                       + checkpoint_line(last))
        if trainer is None and resume is not None and not dctx.is_main:
            # a torchrun rank still learning from rank 0 what the resume continues (a resume changes nothing
            # before it trains): rank 0, which holds the run's lock and reads its checkpoints, names the checkpoint
            return TrainingInterrupted(e.signum, None, "before training started; the run is as its last checkpoint left it")
        if trainer is None or (trainer.iteration == 0 and not resumed):
            session.discard_fresh()  # a new run stopped before it trained: nothing is kept, no half run
            return TrainingInterrupted(e.signum, None, "before training started; nothing was kept")
        # a resume that extends the run (--total-timesteps M) wrote M into config.yaml; until its first checkpoint
        # the checkpoint resumed from holds the old target, which a plain resume would train to
        extended = trainer.cfg.total_timesteps if resumed and last is not None and last == resumed_from else None
        return TrainingInterrupted(e.signum, last, "outside an iteration; the run is as its last checkpoint left it; "
                                   + extended_checkpoint_line(last, extended, getattr(trainer, "checkpoint_config", None)))

    # before the config is resolved: a failure's diagnosis (it builds the env) and the final evaluation too
    # from Python, the lines that say how to go on (a stop's, a refused run directory's) name train()'s arguments
    held = [hold_float32(), hold_env_module_path(), hold_python_caller(argv is None)]
    try:
        try:
            outside = OutsideLoop()  # a signal before or after the loop: TrainingInterrupted at once, handled below
            outside.__enter__()
            own = config.to_dict() if config is not None else None  # this rank's settings, before rank 0's replace them
            state, config, run_dir, resumed, restart = dctx.from_main(
                lambda: resolve_start(config, run_dir, resume, session, env_id, trust_run, overrides, sources, quiet))
            # a torchrun rank started with other flags (two torchruns of a multi-node job) trains with rank 0's settings
            differ = distributed.settings_differ_line(dctx.gather_to_main(own)) if dctx.enabled else None
            if differ is not None and dctx.is_main:
                print(differ, file=sys.stderr)
            if random_seed and not resumed and not quiet and dctx.is_main:
                print(f"proxima: note: seed=None: drew seed {config.seed} (recorded in config.yaml; "
                      f"seed={config.seed} repeats the run)", file=sys.stderr)
            if not resumed:  # before validate's arithmetic, which the flags fixed for it would not make train
                from .envs.gym_adapter import check_extra_installed

                check_extra_installed(config.env_id, config.backend)
            # from Python (no argv) a refusal names PPOConfig's field, not the flag the CLI user would type
            validate(config, dctx.world_size, resume=resumed, python=argv is None)
            # before any env is built: the sizes as a lower bound (an absurd --num-envs); the Trainer checks
            # again with the env it builds, before the agent and buffers, so no env is built only to be sized
            device = _device_for(dctx, config.device, argv is None)
            with _python_words(argv is None):
                # the device flags' refusals (--preset gpu on a CPU) before any note below: a refused command
                # prints its error line alone (the Trainer checks again; cxx_problem is cached per process)
                check_device_flags(config, device, dctx.world_size, resumed=resumed)
                check_fits(config, device)
            # under --quiet too: a warning that the run trains other than asked, not a summary line
            if dctx.is_main:
                _note_given_total(config, dctx.world_size, resumed, state, overrides, sources, python=argv is None)
            typed = overrides if overrides is not None else set_fields(config)
            if dctx.is_main and not quiet and resumed:  # advice on a setting that does not apply: --quiet drops it (its --help)
                _note_compile_mode(config, typed)
            trainer = Trainer(config, run_dir=run_dir, resume_state=state, argv=argv, quiet=quiet)
            # this session holds the directory and this function puts the caller's RNG streams back: the
            # Trainer's own claim and restore (for one used directly) stand aside
            trainer._dir_claimed, trainer._caller_rng = True, None
            resumed_from = trainer.last_checkpoint if resumed else None
            if not resumed:  # the env built: now take the directory (nothing is written before this)
                # a default name another run took since rank 0 chose it moves on to its next -N suffix:
                # every rank trains in the directory rank 0 claimed. resolve_start records a run_dir that was
                # given in config.run_dir and leaves it None only for the name it chose: a path the caller
                # named is theirs, refused when taken, never moved on
                trainer.run_dir = Path(dctx.from_main(
                    lambda: session.claim_fresh(trainer.run_dir, overwrite, restart, next_free=config.run_dir is None)))
                held.append(hold_fresh_run(session))  # a second signal before its first checkpoint keeps nothing either
                if not quiet and dctx.is_main:
                    # named at the start, as SB3's "Logging to": a default run's name was otherwise seen only at its end
                    print(f"proxima: run directory: {_as_named(trainer.run_dir, named)}", file=sys.stderr)
                    note_run(config, typed, argv is None, trainer.env.single_observation_space,
                             trainer.env.single_action_space, trainer.cfg.encoder, unpaired=_unpaired(trainer))
                    _note_rewards_scaled(trainer)
            if trainer.dist.is_main and (not resumed or trainer.trains()):  # under --quiet too, as the note above
                if resumed:
                    _note_lr_schedule(trainer.cfg, trainer.dist.world_size, state)
                pending = trainer.eval_pending if resumed else None
                _note_eval_every(trainer.cfg, trainer.dist.world_size, python=argv is None, resumed=resumed,
                                 run_dir=trainer.run_dir, pending_step=pending["global_step"] if pending else None)
            # a resume of a complete run, or of one --stop-return ended, trains nothing and its note says so
            # (run_setup.apply_resume_overrides): "resuming at step N" would claim otherwise
            if not quiet and trainer.dist.is_main and (not resumed or trainer.trains()):
                note_switches(trainer, python=argv is None)  # --compile-mode, --amp bf16 on a CPU; unpaired --threads
            if resumed and trainer.trains() and not quiet and trainer.dist.is_main:
                _note_resumed_wrappers(trainer)
                _note_rewards_scaled(trainer)
                print(f"proxima: resuming {trainer.run_dir} at global step {trainer.global_step:,} (iteration {trainer.iteration})", file=sys.stderr)
            looping = True
            out_dir = trainer.run(resumed=resumed, callback=callback)
            if trainer.stopped_by_callback and not quiet and trainer.dist.is_main:
                print(f"proxima: stopped at global step {trainer.global_step:,} (iteration {trainer.iteration} of "
                      f"{trainer.num_iterations}): the callback asked to stop; train(None, resume={str(trainer.run_dir)!r}) "
                      "trains on to the total", file=sys.stderr)
            if trainer.stopped_at_return is not None and not quiet and trainer.dist.is_main:
                print(stop_return_line(config, trainer.global_step, trainer.iteration, trainer.stopped_at_return,
                                       python=argv is None), file=sys.stderr)
            if dctx.enabled:  # the last collective was the final checkpoint; leave the process group
                distributed.shutdown()
            if evaluate_at_end and trainer.dist.is_main:
                finish_run(trainer, quiet)
        except TrainingInterrupted as e:
            outside.__exit__()
            if e.checkpoint is not None:  # the loop's own clean stop, after its checkpoint
                raise
            if e.what is not None:  # the loop's own stop before any checkpoint, saying where it landed (workers_stopped)
                if trainer is not None and trainer.iteration == 0 and not resumed:
                    session.discard_fresh()  # in a new run's first iteration: nothing trained, nothing is kept
                    raise TrainingInterrupted(e.signum, None, f"{WORKERS_ENDED} (the run's first); nothing was kept") from None
                raise
            raise stopped_outside(e) from None  # OutsideLoop's: it says nothing of where it landed
        except Exception as e:
            if trainer is not None and e is trainer.callback_error:
                raise  # the caller's own code failed, not the run: as it came (the run as its last checkpoint left it)
            if distributed.lost_peer(e):  # torchrun's SIGTERM for the job follows the other rank's failure
                outside.hold_for_failure()
            if trainer is None or trainer.iteration == 0:
                session.discard_fresh()  # a new run that failed before its first iteration leaves nothing behind
            try:  # the diagnosis builds and steps the user's env: a stop may land there
                # a failure before the loop (taking the run's directory, building the env) is no training
                # failure: --checkpoint-every's hint about a checkpoint to go back to does not apply
                problem = diagnose_failure(e, config, trainer._last_good if looping else None)
            except TrainingInterrupted as stop:
                outside.__exit__()
                raise stopped_outside(stop) from None
            # a lost peer's line names the checkpoint a resume continues from, as a stop's does
            dctx.report_failure(problem, checkpoint=trainer.last_checkpoint if looping else distributed.NOT_TRAINING)
            if problem is not e:
                raise problem from None
            raise
        except BaseException:  # KeyboardInterrupt raised by the env's own code (a notebook), SystemExit: as it came
            if trainer is None or trainer.iteration == 0:
                session.discard_fresh()  # as for an error: no half-written run blocks the same call again
            raise
        finally:
            outside.__exit__()
            if trainer is not None:
                trainer.close()
    finally:
        session.release()
        ckpt.set_rng_state(caller_rng)
        for release in reversed(held):
            release()
    return _as_named(out_dir, named), trained_policy(trainer)


def extended_checkpoint_line(checkpoint: Optional[Path], total: Optional[int], recorded: Optional[dict]) -> str:
    """signals.checkpoint_line for a resume stopped before its first checkpoint, whose command carries
    ``--total-timesteps total`` (from Python, ``proxima.train(proxima.PPOConfig(total_timesteps=N), resume=RUN)``)
    where ``total`` differs from the checkpoint's config ``recorded``: the resume wrote it into config.yaml,
    the checkpoint holds the old one, which a plain resume trains to (as a population's stop line says:
    population_run._extended_line)."""
    if not isinstance(recorded, dict) or recorded.get("total_timesteps") == total:
        total = None
    return checkpoint_line(checkpoint, total)


def unexpected_train_argument(unexpected: dict, positional: bool = False) -> str:
    """The line refusing keyword arguments train() does not take: for ``env=`` (an env object, class or
    factory, as SB3's PPO takes one), what names the env instead and why; else Python's own words.
    ``positional``: the env came as train's second argument, run_dir (env_passed_as_run_dir)."""
    if "env" not in unexpected:
        from .config import FIELDS

        name = next(iter(unexpected))
        if name in FIELDS:  # SB3's model.learn(total_timesteps=N) habit: the run's length is the config's
            return (f"train() got an unexpected keyword argument {name!r}: {name} is a PPOConfig field: "
                    f"PPOConfig(..., {name}={'N' if name == 'total_timesteps' else 'X'})")
        return f"train() got an unexpected keyword argument {name!r}"
    env = unexpected["env"]
    import inspect

    spec_id = getattr(getattr(env, "spec", None), "id", None)
    cls = env if inspect.isclass(env) or inspect.isfunction(env) else type(getattr(env, "unwrapped", env))
    module = cls.__module__ if cls.__module__ != "__main__" else "its_module"  # a script's class: moved to a module
    named = (repr(spec_id) if isinstance(spec_id, str) and not inspect.isclass(env)
             else f"'{module}:{cls.__qualname__}'" if "<" not in cls.__qualname__ else "'module:ClassName'")
    given = (f"the class {env.__qualname__}" if inspect.isclass(env) else f"the function {env.__qualname__}"
             if inspect.isfunction(env) else f"a {type(env).__name__}")
    given = f"env ({given} as run_dir, its second argument)" if positional else f"env= ({given})"
    return (f"train() takes no {given}: Proxima builds num_envs copies of the env itself and records "
            f"its id in the run to resume and evaluate it, so name it: PPOConfig(env_id={named}), a gymnasium.Env "
            "class or registered id, or 'module:function' of a factory that returns one env")


def env_passed_as_run_dir(run_dir) -> Optional[str]:
    """unexpected_train_argument's line for an env given as train's second positional argument, run_dir
    (SB3's ``PPO(policy, env)`` order: ``train(cfg, gym.make(...))``): a gymnasium.Env or vector env, or
    a gymnasium.Env class; None for anything else (a path, or what train refuses as a run_dir itself)."""
    import inspect

    import gymnasium as gym

    if run_dir is None or isinstance(run_dir, (str, os.PathLike)):
        return None
    if isinstance(run_dir, (gym.Env, gym.vector.VectorEnv)) or (inspect.isclass(run_dir) and issubclass(run_dir, gym.Env)):
        return unexpected_train_argument({"env": run_dir}, positional=True)
    return None


def env_id_refusal(env_id, call: Optional[str] = None) -> str:
    """The line refusing a PPOConfig.env_id that is not a string: an env object (SB3's ``PPO("MlpPolicy",
    env)``), a class or a factory function. The run builds its envs itself, num_envs of them and again for
    each evaluation, so it takes what names the env: its id, or ``module:Class`` for a class or factory.
    ``call``: the function given it instead of PPOConfig ("make_env"), which builds its envs as the run does."""
    import inspect

    from .config import _short_repr as short_repr

    given = f"{call}(env_id={short_repr(env_id)})" if call else f"PPOConfig.env_id = {short_repr(env_id)}"
    head = f"{given}: takes an env id string ('CartPole-v1') or 'module:Class'"
    if inspect.isclass(env_id) or inspect.isfunction(env_id):
        kind = "class" if inspect.isclass(env_id) else "function"
        return f"{head}, not the {kind} itself; give '{env_id.__module__}:{env_id.__qualname__}'"
    spec = getattr(env_id, "spec", None)
    if isinstance(getattr(spec, "id", None), str):
        kwargs = getattr(spec, "kwargs", None)
        extra = " (and env_kwargs= for its arguments)" if kwargs else ""
        return f"{head}, not an env object: {call or 'the run'} builds its own envs; give its id {spec.id!r}{extra}"
    if hasattr(env_id, "step") and hasattr(env_id, "reset"):
        return f"{head}, not an env object: {call or 'the run'} builds its own envs; give 'its_module:ClassName' of its class"
    return f"{head}; for a class, give 'its_module:ClassName'"


def _records_run_dir(resume, given) -> bool:
    """Whether ``given`` (PPOConfig.run_dir) is the run_dir that the run ``resume`` (a path) names as its
    own in its config.yaml, as written when the run started (relative to that run's working directory)."""
    if resume is None or resume == "auto" or not isinstance(given, (str, os.PathLike)):
        return False
    from .run_setup import read_run_config, resumed_run_dir

    try:
        _, target = resumed_run_dir(resume)
        recorded, _ = read_run_config(target) if target is not None else (None, None)
    except Exception:  # noqa: BLE001 - a resume that cannot be read: resolve_start raises its own line for it
        return False
    return recorded is not None and isinstance(recorded.run_dir, str) and Path(recorded.run_dir) == Path(given)


def _named_run_dirs(config: Optional[PPOConfig], run_dir, resume) -> list:
    """The run directories as the caller named them, for train() to return the run's in that form: a
    resume's own is a real path (the lock is taken on it), a fresh run's as given, and a caller that
    resumes and trains ``runs/x`` in one script got one of each (os.path.samefile decides which applies)."""
    named = []
    if resume is not None and resume != "auto":
        path = Path(resume)
        named.append(path.parent.parent if path.parent.name == "checkpoints" and not path.is_dir() else path)
    given = run_dir if run_dir is not None else getattr(config, "run_dir", None)
    if given is not None:
        named.append(Path(given))
    return named


def _as_named(out_dir, named: list):
    """``out_dir`` in the first form of ``named`` that is the same directory; else as it is."""
    if out_dir is None:
        return out_dir
    for path in named:
        try:
            if os.path.samefile(path, out_dir):
                return path
        except OSError:
            continue
    return out_dir


class TrainedPolicy(ckpt.Policy):
    """What train() returns: the run's policy as ``load(run_dir)`` gives it, in memory. The bare Agent
    it returned before acted on observations as the network sees them: under ``norm_obs`` a raw
    observation (an env's) gave other actions than the saved policy's, without a word. Here ``act``
    and ``batched_act`` apply the run's frozen observation normalizer, in eval mode, and ``act``
    shapes, clips and offsets the actions as the env's action space, as a loaded policy does.

    ``agent`` is the trained network (it acts on normalized observations), in eval mode as a loaded
    policy's (``agent.train()`` to train it further). Its other attributes (``parameters()``,
    ``state_dict()``, ``encoder_kind``) answer through this object too, but it is no nn.Module: calling
    the network, isinstance checks and torch.compile want ``.agent``. What ckpt.Policy refuses, this
    object refuses in the same AttributeError naming ``.agent``: the Module methods that return the
    module or convert it (``to``, ``cpu``, ``cuda``, ``train``, ``apply``, ... : MODULE_ONLY; the dtype
    ones, DTYPE_ONLY, say the policy computes in float32), the Agent's methods that take observations
    (``get_value``, ``get_action_and_value``, ``features``, ``forward``, ``policy``, ``policy_step``:
    TAKES_OBS) and its submodules (``encoder``, ``actor``, ``critic``: SUBMODULES), which want them
    normalized (``obs_normalizer(obs, update=False)``). ``eval()`` returns the policy. ``act`` takes raw
    observations, where the Agent's took normalized ones."""

    def __getattr__(self, name: str):
        agent = self.__dict__.get("agent")  # absent while copy or pickle rebuild an instance: no recursion
        if agent is None or name.startswith("__"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        line = self._refusal(name)
        if line is not None:
            raise AttributeError(line)
        try:
            return getattr(agent, name)
        except AttributeError:
            raise AttributeError(f"{type(self).__name__!r} object (nor its agent) has no attribute {name!r}") from None


def trained_policy(trainer: Trainer) -> TrainedPolicy:
    """``trainer``'s policy, built as checkpoint.load_policy builds one from its last checkpoint (the
    same normalizer, spaces, env id and kwargs, thread count and flush-denormal mode for evaluate())."""
    cfg = trainer.cfg
    last = getattr(trainer, "last_checkpoint", None)
    config = cfg.to_dict()
    policy = TrainedPolicy(trainer.agent, trainer.obs_norm, config, trainer.env.single_observation_space,
                           trainer.env.single_action_space, trainer.device, str(last) if last is not None else None,
                           env_backend=trainer.env.backend)
    policy.env_entry_point = ckpt.with_entry_point({"config": config}).get("env_entry_point")
    policy.run_threads = ckpt._run_threads({"config": config, "world_size": trainer.dist.world_size}, trainer.agent,
                                           policy.device)
    policy.run_flush_denormal = bool(cfg.flush_denormal)
    policy.global_step = int(trainer.global_step)  # the step its weights are of, as load_policy records it
    return policy


def set_fields(config: PPOConfig) -> dict:
    """{field: value} where ``config`` differs from PPOConfig's defaults (env_id and run_dir aside):
    what a Python caller asked of a resume, as the flags a CLI user typed."""
    import dataclasses

    default = PPOConfig()
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(PPOConfig)
            if f.name not in ("env_id", "run_dir") and getattr(config, f.name) != getattr(default, f.name)}


def _note_whole_iterations(cfg: PPOConfig, world_size: int, given: Optional[str] = None, resumed: bool = False) -> None:
    """A note on stderr when the run's total is not a whole number of iterations: what trains (train,
    --quiet included, and train --dry-run, whose config shows the total as given). ``given``: the
    total as the user gave it (``--config f.yaml: total_timesteps 5,000``, ``PPOConfig.total_timesteps
    = 5,000``); None: the typed flag. ``resumed``: the step the run trains to, not a count from 0."""
    per = batch_size(cfg) * world_size
    if cfg.total_timesteps % per:
        steps = num_iterations(cfg, world_size) * per
        n = steps // per
        its = f"{n:,} iteration{'' if n == 1 else 's'}"
        trains = f"the run trains to step {steps:,} ({its})" if resumed else f"training {steps:,} steps ({its})"
        print(f"proxima: note: {given or f'--total-timesteps {cfg.total_timesteps:,}'} is not a multiple of the batch "
              f"({per:,} steps = num_envs x num_steps{' x processes' if world_size > 1 else ''}): {trains}", file=sys.stderr)


def _note_given_total(cfg: PPOConfig, world_size: int, resumed: bool, state: Optional[dict], overrides: Optional[dict],
                      sources: Optional[dict], python: bool) -> None:
    """_note_whole_iterations for a total the user gave: typed, from a --config file, set in a PPOConfig
    (not its default), or asked of a resume. A preset's total over its own batch (Pendulum-v1's 300,000 over
    4,096-step batches trains 299,008) is the preset's choice, not the user's, and goes without it (the run's
    start names the preset, and its progress line the total it trains); so does a resume's of the run's own total from
    a file (``--config RUN/config.yaml --resume auto``): noted when the run was given it. Nor is a
    resume's total noted when it is the run's recorded one, or when the resume trains nothing (a complete
    run: its own note says so, and "the run trains to step N" would contradict it)."""
    from .config import same_value, source_of

    name = "total_timesteps"
    if resumed and isinstance(state, dict):
        from .run_setup import resume_trains

        recorded = state.get("config")
        if ((isinstance(recorded, dict) and same_value(recorded.get(name), cfg.total_timesteps))
                or not resume_trains(cfg, state)):
            return
    where = (sources or {}).get(name)  # a resume's (or --resume auto's) override the user did not type
    if overrides is not None and name in overrides:
        recorded = (state or {}).get("config")
        if where is not None and (where.startswith("--preset ") or (
                resumed and isinstance(recorded, dict) and same_value(recorded.get(name), cfg.total_timesteps))):
            return
    elif resumed:
        return  # the run's recorded total, noted when the run was given it
    else:
        source = source_of(cfg, name)
        preset_total = (source is None and not python) or (source or "").startswith("preset ")
        default_total = source is None and cfg.total_timesteps == PPOConfig().total_timesteps
        if preset_total or default_total:
            # a preset's (or the default's) total over the batch it comes with is its own choice (every README
            # example would carry a note); over a batch the user set, it is theirs to know what trains
            # (--num-envs 2048 trains 262,144 of 300,000)
            if not _batch_set_by_user(cfg, world_size, overrides, python):
                return
            shown = f"total_timesteps {cfg.total_timesteps:,}"
            given = (f"{source}: {shown}" if (source or "").startswith("preset ")
                     else f"PPOConfig's default {shown}" if python else f"the default --total-timesteps {cfg.total_timesteps:,}")
            _note_whole_iterations(cfg, world_size, given, resumed)
            return
        where = f"--config {source}" if source is not None else None
    given = (f"{where}: total_timesteps {cfg.total_timesteps:,}" if where is not None
             else f"PPOConfig.total_timesteps = {cfg.total_timesteps:,}" if python else None)
    _note_whole_iterations(cfg, world_size, given, resumed)


def _batch_set_by_user(cfg: PPOConfig, world_size: int, overrides: Optional[dict], python: bool) -> bool:
    """Whether the user set the batch: more than one process, or num_envs or num_steps typed (in
    ``overrides``), from a --config file, or set in a PPOConfig (``python``: a value not PPOConfig's
    default), not a preset's nor the default."""
    from .config import source_of

    if world_size > 1:
        return True
    default = PPOConfig()
    for name in ("num_envs", "num_steps"):
        source = source_of(cfg, name)
        if source is not None:
            if not source.startswith("preset "):
                return True  # a --config file's
        elif (overrides is not None and name in overrides) or (python and getattr(cfg, name) != getattr(default, name)):
            return True
    return False


def stop_return_line(cfg: PPOConfig, step: int, iteration: int, mean: float, python: bool = False) -> str:
    """The line of a run --stop-return ended: its window (the last --stop-episodes+ episodes) said
    apart from the rolling return (ROLLING_RETURN, the last ROLLING_EPISODES), which the progress bar
    (where one is drawn) and `proxima report` give and which, of a longer window holding older episodes,
    reads lower at the same moment (with --no-progress too: the report still gives it); ``python``:
    worded by field (``stop_return=500``), as train() was called."""
    from .logger import ROLLING_EPISODES, ROLLING_RETURN

    target = f"stop_return={cfg.stop_return:g}" if python else f"--stop-return {cfg.stop_return:g}"
    shown = "the progress bar's and `proxima report`'s return" if cfg.progress else f"`proxima report`'s {ROLLING_RETURN}"
    if cfg.stop_episodes < ROLLING_EPISODES:  # stop_return_line: the rolling window also holds older, lower episodes
        why = f" ({shown} averages the last {ROLLING_EPISODES}, older episodes too, so it can read lower)"
    elif cfg.stop_episodes > ROLLING_EPISODES:
        why = f" ({shown} averages only the last {ROLLING_EPISODES})"
    else:
        why = ""
    return (f"proxima: stopped at global step {step:,} (iteration {iteration}): the last {cfg.stop_episodes}+ "
            f"training episodes averaged {mean:.1f} >= {target}{why}")


def _note_lr_schedule(cfg: PPOConfig, world_size: int, state: dict) -> None:
    """A note on stderr (--quiet included) when a resume of ``state`` changes the number of iterations of a
    run under --anneal-lr: the linear schedule is recomputed over the new total (docs/reliability.md), so
    the rate jumps from the last iteration's, up when the run is extended, and nothing else says so (a
    late rise can undo a converged run, as RLHF's own note warns of the KL). Not when the recorded
    iterations are the new ones: the schedule is the same."""
    recorded, done = state.get("config"), state.get("iteration")
    if not cfg.anneal_lr or not isinstance(recorded, dict) or not isinstance(done, int) or done < 1:
        return
    per = batch_size(cfg) * world_size
    planned, total = recorded.get("total_timesteps"), num_iterations(cfg, world_size)
    if not isinstance(planned, int) or planned // per < 1 or planned // per == total:
        return
    before, after = cfg.lr * (1 - (done - 1) / (planned // per)), cfg.lr * (1 - done / total)
    said = "anneal_lr=True" if from_python() else "--anneal-lr"  # train(PPOConfig(...), resume=...): the field it set
    print(f"proxima: note: {said}: the learning rate schedule is recomputed over the resume's total "
          f"({cfg.total_timesteps:,} steps) as if the run had been planned for it, reaching 0 after its last iteration, at step {total * per:,}: "
          f"iteration {done + 1} trains at lr {after:.3g}, iteration {done} trained at {before:.3g}", file=sys.stderr)


def _note_checkpoint_every(cfg: PPOConfig, world_size: int, python: bool, resumed: bool = False) -> None:
    """A note on stderr when --checkpoint-every, which counts iterations (where --eval-every counts
    steps), is more than the run's iterations: no periodic checkpoint would be written, and nothing
    else says so. The default is never noted (a short run is not asked for one), as --compile-mode's."""
    import dataclasses

    every, total = cfg.checkpoint_every, num_iterations(cfg, world_size)
    default = {f.name: f.default for f in dataclasses.fields(PPOConfig)}["checkpoint_every"]
    if not every or every <= total or every == default:
        return
    flag = "PPOConfig.checkpoint_every =" if python else "--checkpoint-every"
    runs = f"the {total:,} iteration{'' if total == 1 else 's'} the run trains to" if resumed \
        else f"the run's {total:,} iteration{'' if total == 1 else 's'}"
    minutes = cfg.checkpoint_minutes
    also = f" (and one every {minutes:g} minutes: --checkpoint-minutes {minutes:g})" if minutes else ""
    print(f"proxima: note: {flag} {every:,} is more than {runs} (it counts iterations, not steps): only the final "
          f"checkpoint is written{' in this resume' if resumed else ''}{also}", file=sys.stderr)


def _note_eval_every(cfg: PPOConfig, world_size: int, python: bool, resumed: bool = False, run_dir=None,
                     pending_step: Optional[int] = None) -> None:
    """A note on stderr when --eval-every is more than the steps the run trains: no evaluation would
    run, no best.pt be written, and nothing else says so (proxima eval --best found no best.pt). On a
    resume (``resumed``), of ``run_dir``: earlier evaluations may have written best.pt, which then stays,
    and ``pending_step``, an evaluation a stop left due (Trainer.eval_pending), still runs. Its callers
    (train, the dry run) get --checkpoint-every's note beyond the run from here too: the same case."""
    _note_checkpoint_every(cfg, world_size, python, resumed)
    every, total = cfg.eval_every, num_iterations(cfg, world_size) * batch_size(cfg) * world_size
    if not every or every <= total:
        return
    flag = "PPOConfig.eval_every =" if python else "--eval-every"
    if not resumed:
        print(f"proxima: note: {flag} {every:,} is more than the {total:,} steps the run trains: no evaluation runs during "
              "training and no checkpoints/best.pt is written (the end-of-run evaluation, eval.json, still runs)", file=sys.stderr)
        return
    has_best = run_dir is not None and ckpt.best_checkpoint_path(run_dir).is_file()
    due = f" but the one a stop left due at step {pending_step:,}" if pending_step is not None else ""
    if has_best:
        best = "; checkpoints/best.pt changes only if that one scores a new best" if due else "; checkpoints/best.pt stays as it is"
    else:
        best = "" if due else "; no checkpoints/best.pt is written"
    print(f"proxima: note: {flag} {every:,} is more than the {total:,} steps the run trains to: no further evaluation runs "
          f"in this resume{due}{best} (the end-of-run evaluation, eval.json, still runs)", file=sys.stderr)


#: the preset's fields the start line names before "and N more"
PRESET_LINE_FIELDS = 5


def _note_preset(cfg: PPOConfig, python: bool = False) -> None:
    """One line on stderr at a new run's start naming the preset its config came from and the fields it set
    that neither --config FILE nor a flag replaced, where they differ from PPOConfig's defaults (the first
    PRESET_LINE_FIELDS: 'proxima: preset Pendulum-v1/default: backend native, gamma 0.95, ... and 3 more
    (...)'); none under --preset none, or where the preset keeps PPOConfig's own values (CartPole-v1's
    default). A run's flags can leave a preset's gamma or backend in place unseen otherwise."""
    import shlex

    from .config import FIELDS, preset_applied, source_of
    from .presets import ATARI_FAMILY, presets_for

    preset = preset_applied(cfg)
    if preset in (None, "none"):
        return
    env, _, name = preset.rpartition("/")
    note = (presets_for(cfg.env_id).get(name) or {}).get("note")
    if note:  # the preset's own word (its YAML's note:), said whatever fields it set
        print(f"proxima: note: preset {preset}: {note}", file=sys.stderr)
    default = PPOConfig()
    kept = [field for field in (presets_for(cfg.env_id).get(name) or {}).get("config", {})
            if field in FIELDS and source_of(cfg, field) == f"preset {preset}"
            and getattr(cfg, field) != getattr(default, field)]
    if not kept:
        return
    said = ", ".join(f"{field} {_preset_value(getattr(cfg, field))}{_whole_batches(cfg) if field == 'total_timesteps' else ''}"
                     for field in kept[:PRESET_LINE_FIELDS])
    more = len(kept) - PRESET_LINE_FIELDS
    more = f" and {more} more" if more > 0 else ""
    off = (f"proxima.presets.resolve({cfg.env_id!r}, 'none')" if python else "--preset none")
    # a generic Atari id takes the family's template preset: name the game trained, and the template after it
    named = f"{cfg.env_id} (the Atari preset {preset})" if env == ATARI_FAMILY else preset
    # `proxima presets ENV NAME` prints the preset's fields (ENV alone, the table); the game's id finds the template's
    listed = f"{shlex.quote(cfg.env_id if env == ATARI_FAMILY else env)} {shlex.quote(name)}"
    print(f"proxima: preset {named}: {said}{more} (proxima presets {listed} lists them; {off} for "
          "PPOConfig's defaults)", file=sys.stderr)


def _whole_batches(cfg: PPOConfig) -> str:
    """The start line's tail after a preset's total_timesteps the run does not train as given: it trains whole
    iterations of every process's batch (WORLD_SIZE under torchrun, as cli.say_run_trained), ' (549,888: whole
    batches)' of CartPole-v1/fast's 550,000 over 96 x 16 steps; "" when the total is whole batches."""
    world = os.environ.get("WORLD_SIZE", "1")
    world = int(world) if world.isdigit() and int(world) > 0 else 1
    trained = num_iterations(cfg, world) * batch_size(cfg) * world
    return f" ({trained:,}: whole batches)" if trained != cfg.total_timesteps else ""


def _preset_value(value) -> str:
    """A preset's value as the start line shows it: true/false, 300,000, 0.0005, 64,64."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def note_run(cfg: PPOConfig, typed: dict, python: bool = False, obs=None, action_space=None, encoder: Optional[str] = None,
             population: bool = False, unpaired: bool = False) -> None:
    """A new run's advisory notes (--quiet drops them all), once its env is built: train's, from the env
    it trains on; train --dry-run's, from the one env its checks built; a population's (train
    --seeds/--sweep and its --dry-run), once for all its members, from the members' config (``cfg``,
    with the file's and preset's sources: config.source_of). ``typed``: the flags given (a Python
    caller's fields other than the defaults, ``python``: then named as PPOConfig's); ``obs``: the
    observation space, or the dry run's ObsLayout (_note_pixels); ``action_space``, ``encoder``: the
    env's and the resolved encoder, None where the dry run built no such env. ``unpaired``: train's Trainer
    has a side thread that no batch reaches (note_switches says so): --threads above the CPUs is advised alike."""
    from .run_setup import backend_line

    _note_preset(cfg, python)
    line = backend_line(cfg)  # Atari: auto's pick depends on what is installed, and the backends reset differently
    if line:
        print(f"proxima: {line}", file=sys.stderr)
    _note_compile_mode(cfg, typed, population)
    _note_threads(cfg, python, unpaired)
    unapplied = _note_unapplied_preset(cfg) if python else False
    _note_other_version(cfg, obs, box_note=not unapplied)
    if action_space is not None:
        _note_action_scale(cfg.env_id, action_space)
    if obs is not None:
        _note_pixels(cfg.env_id, obs, encoder, typed, python)
        _note_cnn_size(cfg, obs, encoder)
    if python:  # the CLI says it before the run is built (cli.py), once, in its flags' words
        from .config import one_sample_minibatch_note

        note = one_sample_minibatch_note(cfg, python=True)
        if note:
            print(f"proxima: note: {note}", file=sys.stderr)


def _note_threads(cfg: PPOConfig, python: bool = False, unpaired: bool = False) -> None:
    """A note on stderr when --threads is above the CPUs this process may use but within the limit
    validate allows (config.max_threads): such a run computes the same numbers, only slower, and
    ran without a word while one thread more than the limit was refused as slowing torch down. Under
    torchrun it counts the processes on this machine (LOCAL_WORLD_SIZE); under the --nproc launcher
    (launch.COMMAND_ENV) nothing: the launcher said it once for all its processes."""
    from .launch import COMMAND_ENV, under_torchrun

    if COMMAND_ENV in os.environ:
        return
    local = os.environ.get("LOCAL_WORLD_SIZE", "1")
    note = threads_note(cfg.threads, int(local) if under_torchrun() and local.isdigit() else 1, python, unpaired)
    if note:
        print(f"proxima: note: {note}", file=sys.stderr)


def threads_note(threads: int, processes: int = 1, python: bool = False, unpaired: bool = False) -> str:
    """The text of _note_threads's note (after ``note: ``) for ``threads`` intra-op threads in each of
    ``processes`` processes on this machine, "" when they fit the CPUs this process may use. Several
    processes (--nproc K) are noted only from --threads 2 up: one thread is the least each runs.
    train's ranks, the --nproc launcher and proxima bench say it alike. ``unpaired``: the Trainer's side
    thread pairs no batch (unpaired_threads_note): fewer threads gain nothing there, dropping them or pairing does."""
    from .cpuinfo import cpus_text, usable_cpus

    cpus, total = usable_cpus(), threads * processes
    if total <= cpus or (processes > 1 and threads < 2):
        return ""
    fewer = max(1, cpus // processes)
    flag, fewer = (f"PPOConfig.threads={threads}", f"threads={fewer}") if python else (f"--threads {threads}", f"--threads {fewer}")
    if processes > 1:
        flag = f"{flag} in each of {processes} processes ({total} threads)"
    if unpaired:
        drop = "threads" if python else "--threads"
        return f"{flag} is more than {cpus_text(cpus)} and no batch here pairs: drop {drop}, or train with more envs to pair them"
    return f"{flag} is more than {cpus_text(cpus)}: the threads take turns on them, which is usually slower than {fewer}"


def compile_mode_run(cfg: PPOConfig, device: torch.device) -> str:
    """The torch.compile mode a run on ``device`` compiles in: cfg.compile_mode, except reduce-overhead off
    CUDA, whose only option is inductor's CUDA graphs (triton.cudagraphs), which a CPU has none of: it ran
    as the default mode there, but under a cache key of its own, so a launch compiled everything again
    (minutes on a CPU) for nothing. The default mode runs instead (cpu_switch_notes says so)."""
    if cfg.compile_mode == "reduce-overhead" and torch.device(device).type != "cuda":
        return "default"
    return cfg.compile_mode


def cpu_switch_notes(cfg: PPOConfig, device: torch.device, bench: bool = False, python: bool = False,
                     compile_note: bool = True) -> list:
    """The notes (after ``note: ``) on the switches that make small MLPs slower on a CPU: --compile (and
    its reduce-overhead mode, which compiles in the default mode there: compile_mode_run) and --amp bf16;
    [] off the CPU. ``bench``: proxima bench's words, which measure the switch rather than advise to.
    ``python``: the switch named as the PPOConfig field a Python caller set (``PPOConfig.amp='bf16'``);
    bench's command stays a command. ``compile_note=False``: --compile's speed is left to the note before
    the first compiled iteration (Trainer._note_compiling: compile_speed_clause), so a run says it once."""
    notes = []
    if torch.device(device).type != "cpu":
        return notes
    if cfg.compile and cfg.compile_mode != compile_mode_run(cfg, device):
        mode = f"PPOConfig.compile_mode={cfg.compile_mode!r}" if python else f"--compile-mode {cfg.compile_mode}"
        notes.append(f"{mode}: CUDA graphs, which a CPU has none of: compiling in the default mode")
    if cfg.compile and compile_note:
        notes.append(f"{switch_words('compile', python)}: {compile_speed_clause(cfg, bench)}")
    if cfg.amp == "bf16":
        notes.append(f"{switch_words('amp', python)}: {_speed_clause(cfg, 'amp', bench)}")
    return notes


def switch_words(name: str, python: bool) -> str:
    """How a note names the CPU switch ``name`` ('compile', 'amp') as its caller set it: the flag, or
    the PPOConfig field from Python."""
    if python:
        return "PPOConfig.compile=True" if name == "compile" else "PPOConfig.amp='bf16'"
    return "--compile" if name == "compile" else "--amp bf16"


def compile_speed_clause(cfg: PPOConfig, bench: bool = False) -> str:
    """What --compile does to a small MLP's speed on a CPU, and how to measure it (cpu_switch_notes'
    note, and the tail of train's one --compile note on a CPU)."""
    return _speed_clause(cfg, "compile", bench)


def _speed_clause(cfg: PPOConfig, name: str, bench: bool) -> str:
    import shlex

    from .config import CPU_BF16_SPEED, CPU_COMPILE_SPEED  # config's help and doctor's hints say them too

    speed = CPU_COMPILE_SPEED if name == "compile" else CPU_BF16_SPEED
    flag = switch_words(name, False)  # bench is a command: its flags stay flags
    then = (f"compare with the same bench without {flag}" if bench else
            f"measure with proxima bench {shlex.quote(cfg.env_id)} {flag}")
    # our runs, not this machine: no figure, since none of those runs is in a recorded table
    return f"on a CPU, {speed}; {then}"


def vector_note(vector: str, backend: str, ran: list) -> str:
    """The note that --vector changes nothing (after ``note: ``): the backends ``ran`` that --backend
    ``backend`` builds (auto's pick, bench's list) hold no gymnasium one; "" when one is gymnasium.
    train and proxima bench say it alike."""
    if "gymnasium" in ran:
        return ""
    here = ",".join(ran)
    chosen = f"--backend {backend}" if backend == here else f"--backend {backend} (here: {here})"
    return f"--vector {vector}: applies to the gymnasium backend only; {chosen} ignores it"


def note_switches(trainer: "Trainer", python: bool = False) -> None:
    """train's and resume's notes at the start of training (not --quiet): cpu_switch_notes (but for
    --compile's speed, which the note before the first compiled iteration ends with), and --threads that
    pair no batch (unpaired_threads_note), and several intra-op threads on only small batches
    (bench.small_batch_threads_note). ``python``: a Python caller's, naming PPOConfig's fields."""
    from .bench import small_batch_threads_note

    cfg = trainer.cfg
    for note in cpu_switch_notes(cfg, trainer.device, python=python, compile_note=False):
        print(f"proxima: note: {note}", file=sys.stderr)
    if _unpaired(trainer):
        print(f"proxima: note: {unpaired_threads_note(cfg, python)}", file=sys.stderr)
    intra_op = cfg.threads if trainer.side is None else cfg.threads // 2  # as Trainer.__init__ set them
    note = small_batch_threads_note(cfg, intra_op, trainer.device, python)
    if note:
        print(f"proxima: note: {note}", file=sys.stderr)


def _unpaired(trainer: "Trainer") -> bool:
    """Whether ``trainer`` has a side thread that no batch reaches (bench.paired_batches)."""
    from .bench import paired_batches

    return trainer.side is not None and not paired_batches(trainer.cfg, True)


def unpaired_threads_note(cfg: PPOConfig, python: bool = False) -> str:
    """The note (after ``note: ``) on --threads N whose side thread no batch reaches (bench.paired_batches
    False): the Trainer halved the intra-op threads to N // 2 for it, and every batch runs on them alone,
    since neither the rollout's num_envs rows nor a minibatch's reaches side_thread.MIN_ROWS. bench's
    table says it in a cell (bench.unpaired_threads)."""
    from .side_thread import MIN_ROWS

    n = cfg.threads // 2
    asked = f"PPOConfig.threads={cfg.threads}" if python else f"--threads {cfg.threads}"
    drop = "threads" if python else "--threads"
    rows = f"num_envs >= {MIN_ROWS:,} or num_envs x num_steps / num_minibatches >= {MIN_ROWS:,}"
    # --threads 2 unpaired is --threads 1; from 4 up dropping it would also drop the n intra-op threads it runs
    advice = f"drop {drop}, or train with more envs ({rows})" if n == 1 else f"train with more envs ({rows}) to pair them"
    return (f"{asked}: no batch reaches {MIN_ROWS:,} rows, so the paired side thread is not used "
            f"({n} intra-op thread{'s' if n > 1 else ''}); {advice}")


def _note_compile_mode(cfg: PPOConfig, typed: dict, population: bool = False) -> None:
    """A note on stderr when --compile-mode was given but the run does not compile: the mode would
    otherwise be dropped without a word; so, by the same rule, for --clip-obs without --norm-obs and
    --clip-reward without --norm-reward. Not refused: compile_mode is resume-safe, and a run compiled
    with a mode resumes with --no-compile, its recorded mode kept for a later --compile. The default
    mode is never noted: a run that does not compile drops nothing by it, and every run's config.yaml
    records it, so ``train --config RUN/config.yaml --resume auto`` (whose file values count as given)
    would note it for every run. (Told apart by value, since a resume's values no longer say whether
    a flag or the file gave them.)"""
    import dataclasses

    defaults = {f.name: f.default for f in dataclasses.fields(PPOConfig)}
    if population and "compile_mode" in typed:  # ``population``: a new one or a resume, which never compiles
        print(f"proxima: note: --compile-mode {cfg.compile_mode} has no effect: a population (--seeds/--sweep) does not compile",
              file=sys.stderr)
    elif "compile_mode" in typed and not cfg.compile and cfg.compile_mode != defaults["compile_mode"]:
        print(f"proxima: note: --compile-mode {cfg.compile_mode} has no effect without --compile", file=sys.stderr)
    # the clip bounds apply to what the normalizers give: without them the values pass unclipped; --stop-episodes
    # sizes --stop-return's window, which without a target never runs (by the same rule; a population's
    # own note names --stop-episodes, population_run.note_single_run_only)
    for name, flag, needs, on in (("clip_obs", "--clip-obs", "--norm-obs", cfg.norm_obs),
                                  ("clip_reward", "--clip-reward", "--norm-reward", cfg.norm_reward),
                                  ("stop_episodes", "--stop-episodes", "--stop-return", population or cfg.stop_return is not None)):
        if name in typed and not on and getattr(cfg, name) != defaults[name]:
            print(f"proxima: note: {flag} {getattr(cfg, name):g} has no effect without {needs}", file=sys.stderr)


def _note_unapplied_preset(cfg: PPOConfig) -> bool:
    """A note on stderr when a Python caller's config leaves out its env's tuned default preset, which the
    CLI applies (presets.unapplied_note): ``train(PPOConfig(env_id="Pendulum-v1"))`` trained PPOConfig's
    classic-control defaults without a word. Whether it was said."""
    from .presets import unapplied_note

    note = unapplied_note(cfg)
    if note:
        print(f"proxima: note: {note}", file=sys.stderr)
    return note is not None


def _note_other_version(cfg: PPOConfig, obs=None, box_note: bool = True) -> None:
    """A note on stderr when the env has no preset but another version of it has (presets.other_version_note).
    None when a --config file set any of the run's settings (env_id and run_dir aside): the note's advice,
    already taken; a file's values are told apart from a preset's by their source (config.source_of).
    ``box_note``: _note_built_env's."""
    from .config import source_of
    from .presets import other_version_note

    _note_built_env(cfg, obs, box_note)  # here: note_run calls this once the env is built, and gives it the config
    for name in getattr(cfg, "_sources", None) or {}:
        source = source_of(cfg, name) if name not in ("env_id", "run_dir") else None
        if source is not None and not source.startswith("preset "):
            return
    note = other_version_note(cfg.env_id)
    if note:
        print(f"proxima: note: {note}", file=sys.stderr)


def _preset_in_use(cfg: PPOConfig) -> Optional[str]:
    """'ENV/NAME' of the preset that set a field of ``cfg`` still holding its value, else None."""
    from .config import source_of

    for name in getattr(cfg, "_sources", None) or {}:
        source = source_of(cfg, name)
        if source is not None and source.startswith("preset "):
            return source[len("preset "):]
    return None


def _note_built_env(cfg: PPOConfig, obs=None, box_note: bool = True) -> None:
    """Notes on stderr on what the Gymnasium env the run built showed (gym_adapter.built_env): Gymnasium's
    normalization wrappers in a factory, whose statistics no checkpoint holds; a ``__main__:Class`` env,
    which no process but the script's own can build (eval, resume, report); a float64 observation whose
    variation the float32 cast loses (across the envs' first observations: none to judge with one env, as
    with --num-envs 1 or train --dry-run's env, which no step or reset is spent on for it); a Box action space where the
    preset in use was tuned on the env id's Discrete one (--env-kwargs '{"continuous": true}' on
    LunarLander-v3), named with the preset of the continuous twin when there is one. ``obs``: note_run's (the
    observation space or the dry run's ObsLayout), which tells an image observation, refused --norm-obs.
    ``box_note``: False where _note_unapplied_preset said the env's own preset is left out (its Box note would
    say it has none)."""
    import gymnasium as gym

    from .envs.gym_adapter import built_env, normalize_wrappers_note, registered_action_space

    built = built_env(cfg.env_id, cfg.env_kwargs)
    if built is None:  # a native env, or none built
        return
    if built["wrappers"]:
        note = normalize_wrappers_note(cfg.env_id, built["wrappers"], cfg.norm_obs, cfg.norm_reward)
        print(f"proxima: note: {note}", file=sys.stderr)
    for note in built["spread"] + built.get("notes", []):  # notes: gym_adapter.script_env_note's (a __main__:Class env)
        print(f"proxima: note: {note}", file=sys.stderr)
    preset = _preset_in_use(cfg)
    if (box_note and preset is None and isinstance(built["action_space"], gym.spaces.Box) and not cfg.norm_obs
            and cfg.ent_coef == PPOConfig.ent_coef):
        # PPOConfig's defaults are classic control's (Discrete): a Box-action env without a preset trains
        # with them unless told, where every shipped continuous preset differs
        from .envs.spaces import ObsLayout, obs_layout

        layout = obs if isinstance(obs, ObsLayout) or obs is None else obs_layout(obs, cfg.env_id)
        # an image (CarRacing-v3's pixels) is scaled to [0, 1] by the network, and --norm-obs of one is refused
        # (run_setup.check_norm_obs, by the same ObsLayout.has_image): advising it would cost the user a failed run
        flags = ("--ent-coef 0 --norm-reward (and --norm-obs, which this env's image observations do not take: the "
                 "network scales their pixels to [0, 1])" if layout is not None and layout.has_image
                 else "--ent-coef 0 --norm-obs --norm-reward")
        if built["wrappers"]:  # the note above says to drop them for the flags: both at once would normalize twice
            flags += " (in place of the env's own normalization wrappers, as the note above says, never on top of them)"
        print(f"proxima: note: env '{cfg.env_id}' has Box actions and no preset, so it trains with PPOConfig's defaults, "
              f"tuned for discrete classic control (ent_coef 0.01, no normalization); continuous-control presets use {flags} "
              "(`proxima presets Pendulum-v1 default` shows one), except LunarLanderContinuous-v3's, which keeps ent_coef 0.01",
              file=sys.stderr)
    if preset is None or not cfg.env_kwargs or not isinstance(built["action_space"], gym.spaces.Box):
        return
    tuned_on = preset.rpartition("/")[0]
    if not isinstance(registered_action_space(tuned_on), (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return
    from .presets import all_presets

    twins = sorted(e for e in all_presets() if e != tuned_on and e.replace("Continuous", "") == tuned_on)
    if twins:
        twin, body = twins[0], all_presets()[twins[0]]
        named = "default" if "default" in body else sorted(body)[0]
        fix = (f"{twin} is that env with Box actions and has a preset of its own ({named}: {body[named]['description']}): "
               f"train {twin} instead")
    else:
        fix = "give the settings of a continuous-control preset as flags (`proxima presets` lists them)"
    print(f"proxima: note: env '{cfg.env_id}' with --env-kwargs {json.dumps(cfg.env_kwargs)} has a Box action space, but "
          f"the preset in use ({preset}) was tuned on {tuned_on}'s Discrete one; {fix}", file=sys.stderr)


def _note_action_scale(env_id: str, action_space) -> None:
    """A note on stderr when a Box action space is far from the policy's unit scale (spaces.action_scale_note)."""
    from .envs.gym_adapter import native_only, user_native_class
    from .envs.spaces import action_scale_note

    try:  # a torch-native env (no gymnasium.Env to wrap) gets the fix in its _dynamics, not RescaleAction's
        native = native_only(env_id) or user_native_class(env_id, imported_only=True) is not None
        gymnasium_env = not native
    except Exception:  # noqa: BLE001 - a note never stops the run
        native, gymnasium_env = False, False
    note = action_scale_note(action_space, env_id if gymnasium_env else None, native=native)
    if note:
        print(f"proxima: note: env '{env_id}': {note}", file=sys.stderr)


def _note_pixels(env_id: str, obs, encoder: Optional[str] = None, typed: Optional[dict] = None, python: bool = False) -> None:
    """A note on stderr for each key whose pixels the run reads as a vector (spaces.image_notes, check-env's
    note): an MLP on 0..255 values flattened unscaled (a grayscale (H, W), a frame stack (N, H, W, C))
    saturates its first tanh layer, and nothing else in the run's output or config.yaml shows it.
    ``obs``: the env's observation space (train's), or its ObsLayout (train --dry-run's, from the env it
    built), for which a line also says how each image is read (nets.image_readings: layout, scaling and,
    given ``encoder``, the encoder), as nothing else in a dry run shows it. ``encoder``: the resolved one
    (cnn, mlp); with ``typed`` (the flags the user gave), _note_cnn_heads' note."""
    from .envs.spaces import ObsLayout, image_notes, obs_layout
    from .nets import image_readings

    layout = obs if isinstance(obs, ObsLayout) else obs_layout(obs, env_id)
    for note in image_notes(layout, encoder):
        print(f"proxima: note: env '{env_id}': {note}", file=sys.stderr)
    if isinstance(obs, ObsLayout):
        for line in image_readings(layout, encoder):
            print(f"proxima: {line}", file=sys.stderr)
    if encoder is not None and typed is not None:
        _note_cnn_heads(layout, encoder, typed, python)


def _note_cnn_heads(layout, encoder: str, typed: dict, python: bool = False) -> None:
    """A note on stderr when --hidden-sizes or --activation was given for a run whose encoder is the CNN of a
    single image: its actor and critic are linear heads on the CNN's features, so both would otherwise be
    dropped without a word (config.yaml still records them). Only the given ones (``typed``: the typed
    flags, or a Python caller's PPOConfig fields other than the defaults), as --compile-mode's note."""
    from .nets import CNN_FEATURES

    if encoder != "cnn" or layout.is_dict:  # a single image under the CNN: uint8, or a float one in [0, 1]
        return
    given = []
    if "hidden_sizes" in typed:
        sizes = ",".join(str(h) for h in typed["hidden_sizes"])
        given.append(f"PPOConfig.hidden_sizes = [{sizes.replace(',', ', ')}]" if python else f"--hidden-sizes {sizes}")
    if "activation" in typed:
        given.append(f"PPOConfig.activation = {typed['activation']!r}" if python else f"--activation {typed['activation']}")
    if given:
        print(f"proxima: note: {' and '.join(given)} {'have' if len(given) > 1 else 'has'} no effect with the CNN encoder of a "
              f"single image: its actor and critic are linear heads on the CNN's {CNN_FEATURES} features", file=sys.stderr)


def _note_cnn_size(cfg: PPOConfig, obs, encoder: Optional[str]) -> None:
    """A note on stderr when the CNN reads images far beyond its 84x84 (sizing.cnn_size_note): a run that fits
    would otherwise build a network of ~100M parameters and GB checkpoints without a word."""
    from .envs.spaces import ObsLayout, obs_layout
    from .sizing import cnn_size_note

    layout = obs if isinstance(obs, ObsLayout) else obs_layout(obs, cfg.env_id)
    note = cnn_size_note(cfg, layout, encoder)
    if note:
        print(f"proxima: note: env '{cfg.env_id}': {note}", file=sys.stderr)


def no_best_line(run) -> str:
    """``proxima eval RUN --best``'s line for a run directory without checkpoints/best.pt: why, by what
    the run records (config.yaml's eval_every, metrics.csv's last step; both data, read as the run's
    files are, and a file that cannot be read says nothing), so that a run trained with --eval-every
    is not told to train with it."""
    from .config import load_yaml
    from .report import CONFIG_MAX_BYTES
    from .rundir import read_run_text

    best = ckpt.best_checkpoint_path(run)
    if best.is_dir():  # a FIFO or folder where best.pt belongs: no "no evaluation wrote one"
        return f"{best} is a directory, not a checkpoint"
    if best.exists() and not best.is_file():
        return f"{best} is not a regular file, not a checkpoint"
    try:
        recorded = load_yaml(read_run_text(Path(run) / "config.yaml", CONFIG_MAX_BYTES))
    except Exception:  # noqa: BLE001 - any damage: nothing recorded to say why
        recorded = None
    every = recorded.get("eval_every") if isinstance(recorded, dict) else None
    if not ckpt._is_int(every) or every < 1:
        return f"{run}: no checkpoints/best.pt (written when training with --eval-every N)"
    try:
        last = max((step for _, step in ckpt.logged_steps(run)), default=None)
    except (OSError, ValueError):
        last = None
    if last is not None and last < every:
        return (f"{run}: no checkpoints/best.pt: the run was trained with --eval-every {every:,} but only to step {last:,}, "
                "so no evaluation ran; drop --best to evaluate its last checkpoint")
    return (f"{run}: no checkpoints/best.pt: the run records --eval-every {every:,} but no evaluation wrote one (one a "
            "stop left due runs when the run is resumed); drop --best to evaluate its last checkpoint")


def _loop_eval_at_end(trainer: Trainer, policy, seed: int) -> Optional[dict]:
    """The result of the --eval-every evaluation the last iteration ran (Trainer.loop_eval), when it is
    the one the end-of-run evaluation would make: at the run's last step (its policy is the last
    checkpoint's), with the same episodes, seed, backend and device, under the thread count and
    flush-denormal mode evaluate() takes for ``policy`` (they change the last bits). Else None."""
    done = getattr(trainer, "loop_eval", None)
    if done is None:
        return None
    threads = policy.run_threads if policy.run_threads is not None else torch.get_num_threads()
    flush = policy.run_flush_denormal if policy.run_flush_denormal is not None else flush_denormal_on()
    same = (done["global_step"] == trainer.global_step and done["episodes"] == trainer.cfg.eval_episodes
            and done["seed"] == seed and done["backend"] == trainer.cfg.backend and done["device"] == policy.device
            and done["threads"] == threads and done["flush_denormal"] == flush)
    return dict(done["result"]) if same else None


def _note_rewards_scaled(trainer: Trainer) -> None:
    """A note on stderr when the env's own gymnasium.wrappers.NormalizeReward scales the rewards the run's
    episode returns sum, with no RecordEpisodeStatistics inside it to record the game's (gym_adapter's
    rewards_scaled, which an evaluation's result says too: evaluate.rewards_scaled_note), and likewise when its own
    TransformReward or ClipReward transforms them (rewards_transformed; evaluate.rewards_transformed_note)."""
    from .evaluate import NORMALIZER_DOC, transformed_words

    if getattr(trainer.env, "rewards_scaled", False) is True:
        print("proxima: note: charts/episodic_return (the return shown, and --stop-return's) sums the rewards your "
              "env's own NormalizeReward scaled, not the game's: apply RecordEpisodeStatistics before it (CleanRL's "
              f"order) for the game's returns (see {NORMALIZER_DOC})", file=sys.stderr)
    names = transformed_words(getattr(trainer.env, "rewards_transformed", None))
    if names is not None:  # a factory's own TransformReward/ClipReward (gym_adapter.rewards_transformed)
        print(f"proxima: note: charts/episodic_return (the return shown, and --stop-return's) sums the rewards after your "
              f"env's own {names}, not the env's own: apply RecordEpisodeStatistics before "
              f"{'them' if ' and ' in names else 'it'} (CleanRL's order) for the env's own returns (see {NORMALIZER_DOC})",
              file=sys.stderr)


def _note_resumed_wrappers(trainer: Trainer) -> None:
    """A note on stderr when a resumed run's env wraps itself in Gymnasium's normalization wrappers
    (gym_adapter.normalize_wrappers, the train-time note's): no checkpoint holds their statistics, so they
    start afresh here and the policy meets inputs (or rewards) scaled otherwise than before the stop."""
    names = getattr(trainer.env, "normalize_wrappers", None)
    if names:
        wrappers = " and ".join(f"gymnasium.wrappers.{n}" for n in names)
        what = " and ".join(w for n, w in (("NormalizeObservation", "observations normalized"),
                                           ("NormalizeReward", "rewards scaled")) if n in names)
        print(f"proxima: note: the statistics of the env's own {wrappers} restart with this resume (no checkpoint "
              f"holds them): the run meets {what} otherwise than before the stop until they settle", file=sys.stderr)


def _built_env_limit(env) -> Optional[int]:
    """The time limit of the Gymnasium envs the run built (a ``module:function`` factory's gymnasium.make,
    a TimeLimit it wrapped itself), which neither env_kwargs nor a registration of the id tells: the
    first env's TimeLimit where the envs are in this process (SyncVectorEnv), else that of the env
    GymnasiumEnv built here to read the spaces (AsyncVectorEnv: asking a worker pickles its env's spec,
    which fails on a factory's lambdas and prints the worker's traceback). None where none is kept
    or reading raised (user env code)."""
    import gymnasium as gym

    from .envs.gym_adapter import time_limit_of

    vector = getattr(env, "envs", None)  # a GymnasiumEnv's vector env; a native env has none
    try:
        if isinstance(vector, gym.vector.SyncVectorEnv):
            return time_limit_of(vector.envs[0])
        if isinstance(vector, gym.vector.AsyncVectorEnv):
            return getattr(env, "probe_time_limit", None)
    except Exception:  # noqa: BLE001 - user env code raised: no limit known, the note stays
        return None
    return None


def _episode_limit(trainer: Trainer) -> Optional[int]:
    """The step limit of the run's env episodes (env_kwargs' max_episode_steps, a native env's own, the
    built Gymnasium envs' (_built_env_limit), or the Gymnasium registration's), or None where none is
    known (a module:Class env, an endless one)."""
    cfg = trainer.cfg
    limit = (cfg.env_kwargs or {}).get("max_episode_steps") or getattr(trainer.env, "max_episode_steps", None)
    if not limit:
        limit = _built_env_limit(trainer.env)
    if not limit:
        try:
            import gymnasium

            limit = gymnasium.spec(cfg.env_id).max_episode_steps
        except Exception:  # noqa: BLE001 - an id Gymnasium does not know: no limit known, the note stays
            limit = None
    return int(limit) if isinstance(limit, (int, np.integer)) and not isinstance(limit, bool) and limit > 0 else None


def finish_run(trainer: Trainer, quiet: bool) -> None:
    """Final evaluation (written to eval.json; the last iteration's --eval-every evaluation's result where
    it is the same evaluation, _loop_eval_at_end) and the optional learning-curve plot."""
    from .evaluate import MAX_STEPS, current_eval, evaluate, format_result

    cfg = trainer.cfg
    done = current_eval(trainer.run_dir, trainer.global_step, cfg.eval_episodes)
    if done is not None:  # a resume of a complete run: the same evaluation (same policy, seed, episodes) is on disk
        if not quiet:
            print(f"eval {format_result(done, step=trainer.global_step)} (eval.json)")
    elif cfg.eval_episodes > 0:
        limit = _episode_limit(trainer)
        # an env with a step limit under the cap ends every evaluation episode there: the tiny run simply
        # did not reach it, and "give the env a time limit" would be wrong advice
        if trainer.iterations_run and not trainer.episodes_ended and not quiet and (limit is None or limit >= MAX_STEPS):
            # an env that never ends its episodes: each evaluation episode runs to the step cap, silently for minutes
            steps = trainer.iterations_run * trainer.steps_per_iteration
            print(f"proxima: note: no training episode ended in the {steps:,} steps trained; the end-of-run evaluation "
                  f"plays {cfg.eval_episodes} episode{'s' if cfg.eval_episodes != 1 else ''} of up to {MAX_STEPS:,} steps "
                  "each, which may take long (--eval-episodes 0 skips it; give the env a time limit)", file=sys.stderr)
        # this run's own last checkpoint, with the env id the user gave it (not one read back from disk)
        last = getattr(trainer, "last_checkpoint", None) or ckpt.list_checkpoints(trainer.run_dir)[-1]
        try:
            policy = ckpt.load_policy(last, device=trainer.device, env_id=cfg.env_id)
            seed = cfg.seed + 1_000_000
            result = _loop_eval_at_end(trainer, policy, seed)
            if result is None:
                result = evaluate(policy, episodes=cfg.eval_episodes, seed=seed, backend=cfg.backend)
        except (EnvError, NonFiniteError, ckpt.CheckpointError) as e:
            # the eval envs could not be built, raised (or broke the env contract) or returned NaN/inf
            # mid-episode, or do not fit the policy read back: training itself is done, and the line says so
            raise type(e)(f"{e}; training finished, its checkpoints are kept ({last})") from None
        path = trainer.run_dir / "eval.json"
        # the step it evaluates: a reader tells a final evaluation from one a later resume left behind
        result = {**result, "global_step": int(trainer.global_step)}
        try:
            from .atomic import write_atomic

            # whole or not at all, never through a planted link; strict JSON (evaluate refuses NaN/inf values)
            write_atomic(path, json.dumps(result, indent=2, allow_nan=False))
        except OSError as e:
            from .diskspace import write_error

            raise write_error(path, e, suffix=f"; the run's checkpoints are kept ({last})") from None
        if not quiet:  # the step as `proxima eval` says it
            print(f"eval {format_result(result, step=trainer.global_step)}")
    if cfg.plot:
        from .plot import PlotError, plot_runs

        try:
            plot_runs([trainer.run_dir], trainer.run_dir / "curve.png")
        except PlotError as e:  # e.g. no episode finished: the run itself is fine
            print(f"proxima: note: no curve.png: {e}", file=sys.stderr)
