"""The outer loop of an RLHF run: steps, logging, checkpoints, signals and the final summary.

Everything here is once per step or rarer; the PPO step itself is ``RLHFTrainer.train_step``.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import stat
from pathlib import Path
from typing import Optional

import torch

from . import dist as D
from . import fsdp
from . import rundir
from ..diskspace import StorageError, write_error
from .. import rundir as run_files
from ..signals import REPEAT_WINDOW, SignalGuard, TrainingInterrupted, checkpoint_line
from .config import ConfigError, reward_specs
from .data import loaded_line
from .models import original_config
from .rewards import RewardError, imports_code

CHECKPOINT_FORMAT = rundir.CHECKPOINT_FORMAT


class DivergedError(ConfigError):
    """The update went non-finite (a loss, a ratio, a gradient norm, the weights): the run stops
    before it logs or saves anything of that step; the message names the last good checkpoint."""


class RankGuard(SignalGuard):
    """The loop's SignalGuard, except that torchrun's SIGTERM after another rank failed (D.teardown_signal) is
    no stop: this rank ends at once with its one line (D.PeerEnded, then D.lost_contact's line), not with a
    "SIGTERM received" line and a checkpoint whose collectives fail, nor waiting for its next collective, which
    torchrun's SIGKILL 30 s later would not let a slow reward or generation reach."""

    def _handle(self, signum, frame):
        if D.teardown_signal(signum):
            D.leave_at_teardown()
            return
        super()._handle(signum, frame)


def run(t, run_dir: Path, resumed: bool = False) -> dict:
    """Train ``t`` (an RLHFTrainer) until cfg.steps; return summary.json's content. Rank 0 writes the files."""
    with naming_last_good(run_dir):
        return _run(t, run_dir, resumed)


def _run(t, run_dir: Path, resumed: bool) -> dict:
    cfg, main = t.cfg, t.dist.is_main
    t.reward.take_truncations()  # the trial call's cuts belong to no step
    if main and cfg.print_every:  # what the run trains on, blank lines the file skipped included
        print(loaded_line(t.prompts, cfg.prompts), flush=True)
    logger = rundir.MetricsLogger(run_dir, resume_step=t.step if resumed else None) if main else None
    saved: list = []  # the checkpoints this run wrote: a second interrupt says whether one is on disk
    # SIGINT/SIGTERM: finish the step, write a checkpoint, stop (exit 128 + signum); a second one exits
    # at once; under torchrun the same signal again within REPEAT_WINDOW is the same stop (signals.SignalGuard)
    guard = RankGuard(lambda: saved[-1] if saved else (rundir.list_checkpoints(run_dir) or [None])[-1],
                      REPEAT_WINDOW if t.dist.enabled else 0.0)
    stop = guard.__enter__()
    try:
        while t.step < cfg.steps:
            before = random_state(t)
            try:
                metrics, samples = t.train_step()  # adds the step's seconds to t.seconds (one clock with the metrics)
            except RewardError as e:
                raise RewardError(f"{e}; {_checkpoint_after_reward_failure(t, run_dir, before, resumed)}") from None
            metrics.update(_truncations(t))
            _stop_if_diverged(t, run_dir, metrics, resumed)  # the same averaged metrics on every process: all stop together
            t.finished_step = t.step
            if main:
                logger.log(t.step, metrics)
                if cfg.sample_every and (t.step == 1 or t.step % cfg.sample_every == 0):
                    logger.log_samples(t.step, samples)
                if cfg.print_every and (t.step == 1 or t.step % cfg.print_every == 0):
                    print(progress_line(t.step, cfg.steps, metrics), flush=True)
            stopping = D.any_across(bool(stop.signum), t.dist, t.device)  # all processes stop at the same step
            if stopping or t.step == cfg.steps or (cfg.checkpoint_every and t.step % cfg.checkpoint_every == 0):
                save_checkpoint(t, run_dir)
                saved.append(run_dir / "checkpoints" / f"step_{t.step:06d}.pt")  # rundir.save_checkpoint's name
                # a signal while the checkpoint was written: stop now, not after one more step
                stopping = stopping or D.any_across(bool(stop.signum), t.dist, t.device)
            if stopping:
                signum = max(D.gather_objects(int(stop.signum), t.dist))  # the rank that got none: the others'
                raise TrainingInterrupted(signum, saved[-1], stop_line(saved[-1], needs_trust(cfg)))
        if logger is not None:
            logger.close()  # every log on disk before the final files
            logger = None
        return finish(t, run_dir)
    finally:
        guard.__exit__()
        if logger is not None:  # an error is on its way (a full disk already, most often): it is the one to report
            with contextlib.suppress(StorageError):
                logger.close()


@contextlib.contextmanager
def naming_last_good(run_dir: Path):
    """A file of the run that could not be written (StorageError: a full disk) is one line that also names
    the last good checkpoint, which `proxima resume` continues from."""
    try:
        yield
    except StorageError as e:
        raise StorageError(f"{e}; {_last_good(run_dir)}") from None


def needs_trust(cfg) -> bool:
    """Whether a resume of a run of ``cfg`` needs --trust-run (trust_run=True): its config.yaml records a
    reward that imports code, which api.check_resume refuses otherwise. None (not known): False."""
    return cfg is not None and any(imports_code(spec) for spec in reward_specs(cfg))


def _multi_node() -> Optional[str]:
    """The process count of a torchrun job spread over several machines, else None."""
    world = os.environ.get("WORLD_SIZE", "1")
    return world if world.isdigit() and int(world) > 1 and os.environ.get("LOCAL_WORLD_SIZE", world) != world else None


def _torchrun_only(run_dir: Path) -> Optional[str]:
    """The process count of a run that only its own torchrun command resumes: one across several machines
    (_multi_node), or one of more processes than this machine's CPUs, where api.resume_processes refuses
    `proxima resume` (signals.resume_route "torchrun", which decides the stop line too); else None."""
    world = _multi_node()
    if world:
        return world
    from ..signals import recorded_world, resume_route

    ranks = os.environ.get("WORLD_SIZE", "1")  # a rank's own count; else (the API after the job) meta.json's
    count = int(ranks) if ranks.isdigit() and int(ranks) > 1 else recorded_world(Path(run_dir))
    try:
        return str(count) if count > 1 and resume_route(Path(run_dir), count) == "torchrun" else None
    except Exception:  # noqa: BLE001 - advice on the way out must come out whatever the run's files hold
        return None


def resume_command(run_dir: Path, trust_run: bool = False) -> str:
    """`proxima resume [--trust-run] RUN`, the path shell-quoted (one with a space or `$(...)` pastes as itself)."""
    quoted = shlex.quote(str(run_dir))
    return f"proxima resume --trust-run {quoted}" if trust_run else f"proxima resume {quoted}"


def python_call(run_dir: Path) -> str:
    """The API's form of `proxima resume --trust-run RUN`."""
    return f"resume({str(run_dir)!r}, trust_run=True)"


def resume_advice(run_dir: Path, trust_run: bool = False) -> str:
    """The command that continues the run: `proxima resume RUN`, which starts as many processes on this
    machine as the run trains with (meta.json's world_size; api.resume_processes); a run across
    several machines, or of more processes than this machine's CPUs, resumes under its own torchrun
    command (_torchrun_only). ``trust_run`` (:func:`needs_trust`): the resume is refused without
    --trust-run, so the advice names it."""
    world = _torchrun_only(run_dir)
    if world:
        return f"`{resume_command(run_dir, trust_run)}` under the same torchrun command ({world} processes)"
    if trust_run:
        return f"`{resume_command(run_dir, True)}` (`{python_call(run_dir)}` in Python)"
    return f"`{resume_command(run_dir)}`"


def stop_line(checkpoint: Optional[Path], trust_run: bool) -> str:
    """signals.checkpoint_line (``checkpoint: ...; continue with: proxima resume RUN``), naming --trust-run
    and the Python call when the resume needs them."""
    line = checkpoint_line(checkpoint)
    head = f"checkpoint: {checkpoint}; continue with: proxima resume "
    if not trust_run or checkpoint is None or not line.startswith(head):
        return line
    run_dir = Path(checkpoint).parent.parent  # an RLHF checkpoint is RUN/checkpoints/step_N.pt
    return f"{head}--trust-run {line[len(head):]}" + ("" if _torchrun_only(run_dir) else f" ({python_call(run_dir)} in Python)")


def _last_good(run_dir: Path) -> str:
    checkpoints = rundir.list_checkpoints(run_dir)
    return f"last good checkpoint: {checkpoints[-1]}" if checkpoints else "no checkpoint was written yet (--checkpoint-every)"


def _truncations(t) -> dict:
    """{rewards/<name>/truncated: inputs of this step cut to that reward model's positions, on all
    processes} (a collective under torchrun, on every process, as each step is)."""
    counts = t.reward.take_truncations()
    if counts and t.dist.enabled:
        gathered = D.gather_objects(counts, t.dist)
        counts = {k: sum(c[k] for c in gathered) for k in counts}
    return {k: float(v) for k, v in counts.items()}


def _stop_if_diverged(t, run_dir: Path, metrics: dict, resumed: bool = False) -> None:
    """DivergedError naming the first non-finite metric of step ``t.step`` (rewards are checked as they arrive)."""
    bad = next((name for name, value in metrics.items() if not math.isfinite(value)), None)
    if bad is not None:
        # a new run none of whose steps finished is taken back whole by its caller (api's discard_fresh)
        kept = ("the new run keeps nothing, so the same command runs again" if not resumed and t.finished_step == 0
                else _last_good(run_dir))
        raise DivergedError(f"non-finite {bad} ({metrics[bad]}) at step {t.step}: the update diverged and nothing of this "
                            f"step was saved; {kept}; {_divergence_hint(t)}")


#: a |score| from which the hint blames the reward's scale before the step size: the value loss squares
#: returns of that size, and its gradients overflow long before the scores do
HUGE_SCORE = 1e3


def _divergence_hint(t) -> str:
    """What to change: the reward's scale when the scores are huge (a reward of 1e30 is finite in float32,
    but its square in the value loss is not), else the step size."""
    peak = t.score_peak()  # a collective: every process diverged at the same step (averaged metrics)
    if peak >= HUGE_SCORE:
        return (f"the scores reach {peak:.3g} in size (objective/scores): scale the reward down (to about -10..10), "
                f"or try a lower --lr or --max-grad-norm")
    return "try a lower --lr or --max-grad-norm"


def _weights_finite(t) -> bool:
    """Every trained weight finite, on every process (a collective under torchrun: sharded weights)."""
    bad = False
    for model in t.trained_models():
        for p in model.parameters():
            x = p.to_local() if hasattr(p, "to_local") else p
            if not bool(torch.isfinite(x).all()):
                bad = True
                break
    return not D.any_across(bad, t.dist, t.device)


def _refuse_nonfinite_weights(t, run_dir: Path, what: str) -> None:
    if not _weights_finite(t):
        raise DivergedError(f"non-finite weights after step {t.step}: not writing {what}; {_last_good(run_dir)}; "
                            "try a lower --lr or --max-grad-norm")


def _checkpoint_after_reward_failure(t, run_dir: Path, before: dict, resumed: bool = False) -> str:
    """The reward runs in the rollout, before the update touches a weight: with the RNG and prompt order
    set back to the start of the failed step, the state is exactly that after the last finished step, and
    a checkpoint of it resumes as if the failed step never began. Under torchrun the other processes are
    in a collective, so only the last periodic checkpoint is named. A new run none of whose steps finished
    writes none: its caller takes it back whole (api's discard_fresh), as for step 1 diverging."""
    if not resumed and t.finished_step == 0:
        return "the new run keeps nothing, so the same command runs again once the reward is fixed"
    if not t.dist.enabled:
        set_random_state(t, before)
        save_checkpoint(t, run_dir)
        return f"checkpoint of step {t.step} written; fix the reward and continue with {resume_advice(run_dir, needs_trust(t.cfg))}"
    checkpoints = rundir.list_checkpoints(run_dir)
    if checkpoints:
        return f"continue from {checkpoints[-1].name} with {resume_advice(run_dir, needs_trust(t.cfg))}"
    return "no checkpoint was written yet (--checkpoint-every)"


def finish(t, run_dir: Path) -> dict:
    """Write policy/, then curve.png, then summary.json, the last file: a run with a readable summary.json of
    its last step and a whole policy/ is finished (:func:`is_finished`); a resume finishes any other."""
    _refuse_nonfinite_weights(t, run_dir, "policy/")
    checksums = D.gather_objects(parameter_checksum(t.trained_models()), t.dist)
    local_numel = D.gather_objects(fsdp.local_numel(t.trained_models()), t.dist)
    full_policy = fsdp.full_model_state(t.policy) if t.cfg.fsdp else None  # collective: before the rank test
    if not t.dist.is_main:
        return {}
    _save_policy(t, full_policy, run_dir)
    extra = {"advantage": t.cfg.advantage, "world_size": t.dist.world_size, "fsdp": t.cfg.fsdp,
             "param_checksums": checksums, "ranks_in_sync": len(set(checksums)) == 1, "kl_coef_last": t.kl_ctl.value,
             "param_numel_full": t.param_numel_full, "param_numel_per_rank": local_numel, "final_step": t.step}
    if t.cfg.plot:
        rundir.plot_curves(run_dir)
    return rundir.write_summary(run_dir, t.seconds, extra)


def _save_policy(t, full_policy, run_dir: Path) -> None:
    """The trained policy in Hugging Face format (with LoRA: the adapter, or with --merge-lora the model with
    the adapter merged in, loadable without peft) and the tokenizer as it was loaded, written whole into
    .policy.partial/ and then renamed to policy/: a kill mid-save never leaves a half-written policy/ that
    looks finished. A policy/ already there (from before `proxima resume --steps N`) is set aside as
    .policy.old/ for the two renames, so it is replaced, never lost to a failed save.

    A write that fails (disk full) is a StorageError naming policy/; .policy.partial/ is removed then, to
    give back its room, and the run's last checkpoint (written before) is what `proxima resume` writes
    policy/ from (:func:`is_finished`)."""
    final, partial, old = run_dir / "policy", run_dir / ".policy.partial", run_dir / ".policy.old"
    try:
        for stale in (partial, old):  # left by a kill during an earlier save
            _remove_entry(stale)
        base = t.policy.get_base_model() if hasattr(t.policy, "get_base_model") else t.policy
        dtype = rundir.release_dtype(base, getattr(t.cfg, "release_dtype", "auto"))
        if full_policy is not None:
            _save_unsharded(t.policy, full_policy, partial, dtype)
        elif t.cfg.lora and not t.cfg.merge_lora:
            with original_config(base):  # the release keeps the dropout rates training switched off
                t.policy.save_pretrained(partial)  # the adapter, in the dtype it trained in
        else:
            tied = rundir.embeddings_tied(t.policy)
            policy = t.policy.merge_and_unload() if t.cfg.lora else t.policy
            with original_config(base) as config, rundir.release_config(config, dtype, tied):
                policy.save_pretrained(partial, state_dict=rundir.release_state(policy.state_dict(), dtype))
                config.dtype = str(dtype).removeprefix("torch.")  # save_pretrained wrote the dtype they trained in
                config.save_pretrained(partial)
        rundir.add_torch_dtype(partial)
        rundir.write_release_tokenizer(t.tokenizer_as_loaded, partial)
        _fsync_tree(partial)
        if os.path.lexists(final):
            os.replace(final, old)
        os.replace(partial, final)
        _remove_entry(old)
    except Exception as e:
        error = _os_error(e)
        if error is None:
            raise
        with contextlib.suppress(OSError):
            _remove_entry(partial)
        kept = "the previous policy/ is kept; " if final.exists() else ""
        advice = resume_advice(run_dir, needs_trust(t.cfg))
        raise write_error(final, error, suffix=f"; {kept}{advice} writes it from the last checkpoint") from None


def _remove_entry(path: Path) -> None:
    """Remove whatever is at ``path`` (policy/ set aside, or a save's leftover), as it is there: a real
    directory with its contents; anything else (a file, a FIFO, a symbolic link, wherever it points) is
    unlinked, never opened or followed. rmtree would wait forever on a FIFO, and fail on a file or a link,
    and that failure would recur at every resume."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _os_error(e: Exception) -> Optional[OSError]:
    """The OSError behind a failed write: ``e`` itself, or the one safetensors reports only in its message
    (SafetensorError: 'Error while serializing: I/O error: No space left on device (os error 28)')."""
    if isinstance(e, OSError):
        return e
    found = re.search(r"\(os error (\d+)\)", str(e))
    return OSError(int(found.group(1)), os.strerror(int(found.group(1)))) if found else None


def _fsync_tree(folder: Path) -> None:
    """Every file of ``folder`` on disk before the rename that publishes it (a power loss after the rename
    must not leave empty files under the final name)."""
    for f in folder.rglob("*"):
        if f.is_file():
            with open(f, "rb") as handle:
                os.fsync(handle.fileno())


def policy_complete(folder: Path) -> bool:
    """A saved policy: its config (or adapter config), its weight files whole, and a tokenizer. For runs
    whose policy/ was written in place (before the rename above), a kill mid-save left some missing or cut short.
    A file that is not what a save writes (a FIFO, a header or index edited or damaged) makes it incomplete too:
    a resume writes policy/ again from the last checkpoint, never reading more than a header's worth."""
    if not ((folder / "config.json").is_file() or (folder / "adapter_config.json").is_file()):
        return False
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        return False
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(run_files.read_run_text(index, run_files.TEXT_MAX_BYTES))["weight_map"]
            shards = set(weight_map.values())
        except (OSError, ValueError, KeyError, AttributeError, TypeError, RecursionError):
            return False
        # shard names are file names of this folder, as save_pretrained writes them
        if not shards or not all(isinstance(s, str) and s and Path(s).name == s and s not in (".", "..") for s in shards):
            return False
        return all(_safetensors_whole(folder / shard) for shard in shards)
    files = [folder / n for n in ("model.safetensors", "adapter_model.safetensors") if (folder / n).is_file()]
    return bool(files) and all(_safetensors_whole(f) for f in files)


#: the largest header the safetensors library reads (its MAX_HEADER_SIZE); a save writes far less
_SAFETENSORS_HEADER_MAX = 100_000_000


def _safetensors_whole(file: Path) -> bool:
    """The file is as long as its header says: 8-byte header size, JSON header, then the tensor data. Opened
    without waiting on a FIFO planted at the name; a header size beyond the file (or the library's limit) is a
    damaged file, not a read of that many bytes."""
    try:
        with run_files.open_run_file(file) as f:  # OSError (a FIFO, a folder, gone): not whole
            size = os.fstat(f.fileno()).st_size
            n = int.from_bytes(f.read(8), "little")
            if n > min(size - 8, _SAFETENSORS_HEADER_MAX):
                return False
            header = json.loads(f.read(n))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        return size == 8 + n + end
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
        return False


def is_finished(run_dir: Path, step: int) -> bool:
    """Whether the run's final files for ``step`` are all there: summary.json (written last) readable and of
    this step, and a complete policy/. Otherwise a resume at its last step writes them again."""
    try:
        summary = json.loads(run_files.read_run_text(run_dir / "summary.json", run_files.TEXT_MAX_BYTES))
    except (OSError, ValueError, RecursionError):  # RunFileError (a FIFO, a huge file) is an OSError: unreadable
        return False
    if not isinstance(summary, dict) or summary.get("final_step", summary.get("steps")) != step:
        return False
    return policy_complete(run_dir / "policy")


def _save_unsharded(sharded: torch.nn.Module, state: dict, folder: Path, dtype: torch.dtype = None) -> None:
    """A sharded policy's full weights into a plain model of its class, saved in Hugging Face format in
    ``dtype`` (default: the weights') with the original's generation_config (sampling defaults, end-of-turn
    ids) and config values, its embeddings tied only where the trained policy's are."""
    from transformers import AutoModelForCausalLM

    tied = rundir.embeddings_tied(sharded)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(sharded.config, trust_remote_code=False)
    model.load_state_dict(rundir.release_state(state, dtype) if dtype is not None else state, strict=False, assign=True)
    if tied:  # tie_weights() on an untied policy would replace its trained lm_head with the embedding
        model.tie_weights()
    # from_config builds a default generation_config from the config alone
    if getattr(sharded, "generation_config", None) is not None:
        model.generation_config = copy.deepcopy(sharded.generation_config)
    with original_config(sharded, model.config) as config, \
            rundir.release_config(config, dtype or next(iter(model.parameters())).dtype, tied):
        model.save_pretrained(folder)


# ---------------------------------------------------------------------------------------------
# checkpoints: everything a resume needs to continue as if never stopped
# ---------------------------------------------------------------------------------------------
def random_state(t) -> dict:
    """This process's RNG states and place in the prompt order."""
    cuda_rng = torch.cuda.get_rng_state(t.device) if t.device.type == "cuda" else None
    return {"rng": torch.get_rng_state(), "cuda_rng": cuda_rng, "sampler": t.sampler.state_dict()}


def set_random_state(t, state: dict) -> None:
    torch.set_rng_state(state["rng"])
    if state.get("cuda_rng") is not None and t.device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda_rng"], t.device)
    t.sampler.load_state_dict(state["sampler"])


def save_checkpoint(t, run_dir: Path) -> None:
    """Trainable weights, both optimizers, beta, counters, and every process's RNG and prompt order."""
    _refuse_nonfinite_weights(t, run_dir, f"the checkpoint of step {t.step}")
    ranks = D.gather_objects(random_state(t), t.dist)
    if t.cfg.fsdp:  # collectives: every process gathers, rank 0 keeps the full state
        models = {"policy": fsdp.full_model_state(t.policy), "opt_policy": fsdp.full_optimizer_state(t.policy, t.opt_policy),
                  "value": fsdp.full_model_state(t.value) if t.critic else {},
                  "opt_value": fsdp.full_optimizer_state(t.value, t.opt_value) if t.critic else {}}
    if not t.dist.is_main:
        return
    if not t.cfg.fsdp:
        models = {"policy": trainable_state(t.policy), "opt_policy": t.opt_policy.state_dict(),
                  "value": trainable_state(t.value) if t.critic else {},
                  "opt_value": t.opt_value.state_dict() if t.critic else {}}
    state = {"format": CHECKPOINT_FORMAT, "step": t.step, "seconds": t.seconds, "ranks": ranks, "fsdp": t.cfg.fsdp,
             **models, "kl": t.kl_ctl.state_dict(), "prompts": {"count": len(t.prompts), "sha256": t.prompts_sha256},
             "initial_policy": {"weights": t.policy_fingerprint, "vocab_sha256": t.vocab_sha256,
                                "chat_template_sha256": t.template_sha256},
             "reward_models": [{"path": m.path, "weights": m.fingerprint, "vocab_sha256": m.vocab_sha256,
                                "chat_template_sha256": m.template_sha256} for m in t.reward.models]}
    rundir.save_checkpoint(run_dir, t.step, state, t.cfg.keep_checkpoints)


def load_checkpoint(t, file: Path, state: dict = None) -> None:
    """Restore ``t`` from checkpoint ``file`` (``state``: its content, when the caller loaded it already). Everything
    is checked before anything is restored: the file's own fields (rundir.check_checkpoint, unless the caller's
    loader ran it), then that it fits this run (_check_fits); a ConfigError naming the file and the field otherwise."""
    state = rundir.load_checkpoint(file) if state is None else state
    if state.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"{file}: not a Proxima RLHF checkpoint")
    if isinstance(state.get("ranks"), list) and len(state["ranks"]) != t.dist.world_size:
        written, run = len(state["ranks"]), Path(file).parent.parent
        command = resume_command(run, needs_trust(getattr(t, "cfg", None)))  # a stand-in trainer may carry no cfg
        how = (f"`{command}` starts {written} on this machine" if written > 1
               else f"`{command}` resumes it in one process, without torchrun")
        raise ConfigError(f"{file}: written by {written} process(es), resumed with {t.dist.world_size}; use the same "
                          f"count ({how})")
    if bool(state.get("fsdp", False)) != t.cfg.fsdp:
        raise ConfigError(f"{file}: written with fsdp {bool(state.get('fsdp'))}, resumed with fsdp {t.cfg.fsdp}")
    if not isinstance(state, rundir.CheckedState):
        state = rundir.check_checkpoint(file, state)
    _check_same_prompts(t, file, state)
    _check_same_initial_policy(t, file, state)
    _check_same_reward_models(t, file, state)
    _check_fits(t, file, state)
    models = [(t.policy, t.opt_policy, "policy")] + ([(t.value, t.opt_value, "value")] if t.critic else [])
    for model, opt, name in models:
        if t.cfg.fsdp:
            fsdp.load_full_model_state(model, state[name])
            fsdp.load_full_optimizer_state(model, opt, state["opt_" + name])
        else:
            load_trainable_state(model, state[name], file)
            opt.load_state_dict(state["opt_" + name])
    t.kl_ctl.load_state_dict(state["kl"])
    set_random_state(t, state["ranks"][t.dist.rank])
    t.step, t.seconds = int(state["step"]), float(state["seconds"])


def _check_fits(t, file: Path, state: dict) -> None:
    """ConfigError naming the file and the field unless the checkpoint's weights, optimizer states, prompt order
    and RNG fit the models, optimizers, prompts and device of ``t`` (built from config.yaml): a weight of another
    shape would fail in copy_, one of another dtype be cast without a word, an optimizer moment of another shape
    be read out of bounds by the fused Adam kernel."""
    models = [(t.policy, t.opt_policy, "policy")] + ([(t.value, t.opt_value, "value")] if t.critic else [])
    for model, opt, name in models:
        params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        _check_names(model, state[name], file)
        for n, p in params.items():
            w = state[name][n]
            if tuple(w.shape) != tuple(p.shape) or w.dtype != p.dtype:
                raise ConfigError(f"{file}: {name}.{n} is a {str(w.dtype).replace('torch.', '')} tensor of shape "
                                  f"{tuple(w.shape)}, the model built from config.yaml has {str(p.dtype).replace('torch.', '')} "
                                  f"{tuple(p.shape)}; the checkpoint is not this run's, or was edited")
        # torch.optim numbers the parameters in the model's order; FSDP's full state names them
        rundir.check_optimizer(file, "opt_" + name, state["opt_" + name], params, values=False)
        saved, own = state["opt_" + name]["param_groups"][0], opt.param_groups[0]
        for key, value in own.items():  # amsgrad, capturable, fused ...: what this run's optimizer was built with
            if key in ("params", "lr", "betas", "eps", "initial_lr") or key not in saved:
                continue
            if not _same_setting(saved[key], value):
                raise ConfigError(f"{file}: opt_{name}.param_groups[0].{key} is {rundir._shown(saved[key])}, this run's optimizer has "
                                  f"{value!r}; the checkpoint is not this run's, or was edited")
    n = len(t.prompts)
    for i, rank in enumerate(state["ranks"]):
        order = rank["sampler"]["order"]
        if len(order) and int(order.max()) >= n:
            raise ConfigError(f"{file}: ranks[{i}].sampler.order draws prompt index {int(order.max())} of {n} prompts; "
                              "the checkpoint is damaged or was edited")
    cuda = state["ranks"][t.dist.rank].get("cuda_rng")
    if cuda is not None and t.device.type == "cuda":
        try:  # a fresh generator on the device: the size and invariants checked, nothing of this process changed
            torch.Generator(device=t.device).set_state(cuda)
        except (RuntimeError, ValueError, TypeError) as e:
            raise ConfigError(f"{file}: ranks[{t.dist.rank}].cuda_rng is not a CUDA RNG state torch accepts "
                              f"({str(e).splitlines()[0][:120]}); the checkpoint is damaged or was edited") from None


def _same_setting(saved, own) -> bool:
    """Whether an optimizer setting read from a checkpoint (a plain value, or whatever an edit put there) is ``own``."""
    return isinstance(saved, (bool, int, float, str, type(None))) and saved == own


def _check_same_prompts(t, file: Path, state: dict) -> None:
    """The checkpoint's place in the prompt order indexes the prompts it was written with: a prompts file
    that changed since would replay other prompts, or fail with an IndexError at the first step. Checked
    before the resume restores or rewrites anything. A checkpoint from before the count and hash were
    recorded is checked for indices in range only."""
    n, where = len(t.prompts), f"--prompts {t.cfg.prompts}"
    todo = "(the file changed); restore it or start a new run"
    recorded = state.get("prompts")
    if isinstance(recorded, dict):
        if recorded.get("count") != n:
            raise ConfigError(f"{where}: {n} prompts, but checkpoint {file.stem} was written with "
                              f"{recorded.get('count')} {todo}")
        if recorded.get("sha256") != t.prompts_sha256:
            raise ConfigError(f"{where}: its {n} prompts differ from those checkpoint {file.stem} was written with "
                              f"{todo}")
        return
    for rank in state["ranks"]:
        order = rank["sampler"]["order"]
        if len(order) and int(order.max()) >= n:
            raise ConfigError(f"{where}: {n} prompts, but checkpoint {file.stem} draws prompt {int(order.max()) + 1} "
                              f"{todo}")


def _check_same_initial_policy(t, file: Path, state: dict) -> None:
    """A checkpoint holds the trained weights only: the frozen reference (with LoRA, the base under the
    adapter) and the tokenizer are loaded again from their folders. A folder that changed since (the
    release published over the SFT model) would continue against another reference and KL, unnoticed:
    refused before anything is restored. A checkpoint from before this record resumes unchecked."""
    recorded = state.get("initial_policy")
    if not isinstance(recorded, dict):
        return
    _check_same_model(recorded, t.policy_fingerprint, t.vocab_sha256, t.template_sha256, f"--policy {t.cfg.policy}",
                      t.tokenizer_source, file)


def _check_same_model(recorded: dict, weights: str, vocab_sha256: str, template_sha256: str, folder: str, tokenizer: str,
                      file: Path) -> None:
    """ConfigError naming ``folder`` (or ``tokenizer``) when the weights (or the tokenizer's vocabulary or
    chat template) loaded now differ from those ``recorded`` in checkpoint ``file``. (The chat template
    is recorded since 2026-12-03: an older checkpoint's is not checked.)"""
    if recorded.get("weights") != weights:
        raise ConfigError(f"{folder}: its weights differ from those checkpoint {file.stem} was written with; restore "
                          f"them or start a new run")
    if recorded.get("vocab_sha256") != vocab_sha256:
        raise ConfigError(f"{tokenizer}: its tokenizer's vocabulary differs from the one checkpoint {file.stem} was "
                          f"written with; restore it or start a new run")
    if "chat_template_sha256" in recorded and recorded["chat_template_sha256"] != template_sha256:
        raise ConfigError(f"{tokenizer}: its tokenizer's chat template differs from the one checkpoint {file.stem} was "
                          f"written with (conversation prompts would render as other texts); restore it or start a new run")


def _check_same_reward_models(t, file: Path, state: dict) -> None:
    """Nor does a checkpoint hold a reward model (nor, with --value-init reward, the frozen part of the value
    model, the base under its LoRA adapter, which is loaded from the first one's folder): each is loaded
    from its --reward folder again, and one that changed since would score, and train, against another
    objective. Checked in the order of the --reward specs, before anything is restored; reward functions
    (module:function) are not recorded. A checkpoint from before this record resumes unchecked."""
    recorded = state.get("reward_models")
    if not isinstance(recorded, list):
        return
    models = t.reward.models
    if len(recorded) != len(models):
        raise ConfigError(f"--reward: checkpoint {file.stem} was written with {len(recorded)} reward model(s), this "
                          f"resume loads {len(models)}; restore the --reward folders or start a new run")
    for entry, m in zip(recorded, models):
        entry = entry if isinstance(entry, dict) else {}
        _check_same_model(entry, m.fingerprint, m.vocab_sha256, m.template_sha256, f"--reward {m.path}", f"--reward {m.path}",
                          file)


def trainable_state(model: torch.nn.Module) -> dict:
    return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters() if p.requires_grad}


def _check_names(model: torch.nn.Module, state: dict, file: Path) -> None:
    expected = {name for name, p in model.named_parameters() if p.requires_grad}
    if set(state) != expected:
        raise ConfigError(f"{file}: its parameters do not match the model built from config.yaml "
                          f"({len(set(state) ^ expected)} names differ)")


def load_trainable_state(model: torch.nn.Module, state: dict, file: Path) -> None:
    _check_names(model, state, file)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, tensor in state.items():
            params[name].copy_(tensor)


def parameter_checksum(models: list) -> str:
    """sha256 of every parameter's bytes: equal across processes iff their weights are bit-identical."""
    h = hashlib.sha256()
    for m in models:
        for name, p in m.named_parameters():
            h.update(name.encode())
            h.update(fsdp.full_tensor(p.detach()).float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def progress_line(step: int, steps: int, m: dict) -> str:
    # the values as metrics.csv logs them: the done line's means come from there, and must round the same way
    m = {k: rundir.as_logged(v) for k, v in m.items()}
    return (f"step {step}/{steps}  score {m['objective/scores']:+.3f}  kl {m['objective/kl']:.3f}  "
            f"beta {m['objective/kl_coef']:.3g}  len {m['val/response_length']:.1f}  eos {m['val/eos_rate']:.2f}  "
            f"ratio {m['val/ratio']:.3f}  {m['charts/seconds_per_step']:.3f} s/step")
