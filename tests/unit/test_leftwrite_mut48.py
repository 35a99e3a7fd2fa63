"""Mutation survivors of review 48's leftovers and write errors (b34f675, 7d17904, 7c8b79e, 52912c6, a2b9f5d,
4b7fa91, b0d215f): the exact lines a user reads.

(1) trainer.extended_checkpoint_line: the command a stopped extending resume names (the run's folder, the
extension, train()'s call with env_id from Python, the shell command under several processes);
(2) bench's training-flag hint: only for a preset's setting bench lacks (--clip-reward yes, --seed and --n-steps
not), SB3's --n-timesteps named as train's --total-timesteps, and never for another command;
(3) file size limits: a checkpoint cut by the limit that cannot be sized again, an events rewrite's size only
where room ran out, the abandoned timeline's wording, an events file left with no event removed, an unlimited
RLIMIT_FSIZE where RLIM_INFINITY is not -1 (macOS);
(4) report's steps row: the checkpoint named only for a stopped run with finite steps, 'from there' only after
'continues it'.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import pytest

from proxima import signals
from proxima.trainer import extended_checkpoint_line


# ------------------------------------------------------------------ (1) extended_checkpoint_line
def _run(tmp_path: Path, env_id: str = "CartPole-v1", world: int = 1) -> Path:
    run = tmp_path / "my run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(f"env_id: {env_id}\ntotal_timesteps: 128\n")
    if world > 1:
        (run / "meta.json").write_text(json.dumps({"world_size": world}))
    return run / "checkpoints" / "step_000000000064.pt"


@pytest.fixture
def python_caller():
    release = signals.hold_python_caller(True)
    yield
    release()


def test_the_extended_line_names_the_runs_folder_and_the_new_total(tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ck = _run(tmp_path)
    q = shlex.quote(str(ck.parent.parent))
    assert extended_checkpoint_line(ck, 128, {"total_timesteps": 64}) == (
        f"checkpoint: {ck}; continue with: proxima resume {q} --total-timesteps 128")
    # the checkpoint holds the total already, or no config was read: the plain line
    plain = f"checkpoint: {ck}; continue with: proxima resume {q}"
    assert extended_checkpoint_line(ck, 128, {"total_timesteps": 128}) == plain
    assert extended_checkpoint_line(ck, 128, None) == plain
    assert extended_checkpoint_line(ck, None, {"total_timesteps": 64}) == plain


def test_from_python_the_extended_line_is_trains_call_with_the_module_env(tmp_path, monkeypatch, python_caller):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ck = _run(tmp_path, env_id="tiny48m:Tiny")
    run = ck.parent.parent
    assert extended_checkpoint_line(ck, 256, {"total_timesteps": 64}) == (
        f"checkpoint: {ck}; continue with: proxima.train(proxima.PPOConfig(total_timesteps=256), resume={str(run)!r}, "
        f"env_id='tiny48m:Tiny') (in a shell: proxima resume --env tiny48m:Tiny {shlex.quote(str(run))} "
        "--total-timesteps 256)")


def test_from_python_under_several_processes_the_extended_line_is_the_shell_command(tmp_path, monkeypatch, python_caller):
    ck = _run(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    line = extended_checkpoint_line(ck, 256, {"total_timesteps": 64})
    assert "proxima.train(" not in line and line.endswith(" --total-timesteps 256"), line
    # a run recorded with more processes than this machine can start: its own torchrun command, not train()
    monkeypatch.delenv("WORLD_SIZE")
    ck = _run(tmp_path / "big", world=100000)
    line = extended_checkpoint_line(ck, 256, {"total_timesteps": 64})
    assert "proxima.train(" not in line and line.endswith(", under the same torchrun command (100000 processes)"), line
    assert " --total-timesteps 256, under" in line, line


# ------------------------------------------------------------------ (2) bench's training flag hint
from tests.cli_helpers import run_main  # noqa: E402

BENCH_LINES = [
    (["--n-timesteps", "1000"], "--n-timesteps: bench measures each size for --seconds S, not a number of steps; proxima "
                                "train takes --total-timesteps"),
    (["--clip-reward", "5"], "--clip-reward: bench trains its preset's settings and takes no --clip-reward: --preset NAME "
                             "picks another preset (`proxima presets ENV_ID` lists them); proxima train takes it"),
    (["--n-steps", "128"], "did you mean --num-steps?"),  # a flag bench has: SB3's name's own hint, no 'takes no'
    (["--seed", "3"], "--seed: bench takes no --seed: it measures steps per second, which the seed does not change "
                      "(every line trains with its preset's seed); proxima train takes it"),  # not difflib's --seconds
]


@pytest.mark.parametrize("flags, says", BENCH_LINES, ids=lambda v: v[0] if isinstance(v, list) else "")
def test_bench_names_trains_flag_only_for_a_presets_setting_it_lacks(flags, says, capsys):
    code, out, err = run_main(["bench", "CartPole-v1", *flags], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1] == (f"proxima bench: error: unrecognized arguments: {' '.join(flags)}; {says} "
                                            "(see proxima bench --help)"), err


def test_another_command_given_a_training_flag_does_not_speak_of_bench(capsys):
    code, _, err = run_main(["eval", "--lr", "0.1", "somewhere"], capsys)
    assert code == 2 and "bench" not in err and "preset" not in err, err


def test_bench_given_a_run_setting_outside_a_presets_says_no_takes_no(capsys):
    code, _, err = run_main(["bench", "CartPole-v1", "--stop-return", "5"], capsys)  # not a preset's setting
    assert code == 2 and "takes no" not in err, err


# ------------------------------------------------------------------ (3) file size limits: checkpoint, events rewrite
import errno  # noqa: E402

from proxima import checkpoint as ckpt_module  # noqa: E402
from proxima import diskspace, logger as logger_module  # noqa: E402
from proxima.diskspace import StorageError  # noqa: E402

LIMITED = ("; this process may write files of at most 8.0 KiB (its file size limit: ulimit -f, or a scheduler's): raise "
           "the limit (or choose a folder on another filesystem) and try again")


def test_a_checkpoint_cut_by_the_limit_that_cannot_be_sized_says_the_limit_stopped_it(tmp_path, monkeypatch):
    monkeypatch.setattr(diskspace, "file_size_limit", lambda: 8192)
    path = tmp_path / "checkpoints" / "step_000000000512.pt"
    writer = ckpt_module._RecordingWriter(None)
    writer.written = 8192  # torch.save got this far; the object cannot be serialized again to size it
    line = ckpt_module._write_failure({"f": lambda: 0}, path, OSError(errno.EFBIG, "File too large"), writer)
    assert line == (f"{path}: could not write checkpoint (File too large){LIMITED}; the checkpoint needs more than the "
                    "8.0 KiB written before the limit stopped it; there is no earlier checkpoint")


def _events_run(tmp_path: Path) -> Path:
    from proxima.logger import RunLogger

    run = tmp_path / "ev"
    logger = RunLogger(run, 4 * 128, progress=False)
    for i in range(1, 5):
        logger.log(i, i * 128, {"charts/episodic_return": 10.0 + i, "losses/value_loss": 1.0 / i, "episodes": 1})
    logger.close()
    return run


def test_an_events_rewrite_that_fails_for_another_reason_says_no_size(tmp_path, monkeypatch):
    run = _events_run(tmp_path)
    (events,) = run.glob("events.out.tfevents.*")

    def refused(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(logger_module, "atomic_open", refused)
    with pytest.raises(StorageError) as e:
        logger_module._drop_events_after(run, 2 * 128)
    assert str(e.value) == (f"{events}: could not rewrite TensorBoard events without the steps a resume trains again "
                            "(Input/output error)")


def test_an_events_rewrite_on_a_full_disk_says_the_size_it_needs(tmp_path, monkeypatch):
    run = _events_run(tmp_path)
    (events,) = run.glob("events.out.tfevents.*")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(logger_module, "atomic_open", full)
    monkeypatch.setattr(diskspace, "free_bytes", lambda path: 0)
    aside = tmp_path / "aside"
    aside.mkdir()
    with pytest.raises(StorageError) as e:
        logger_module._drop_events_after(run, 2 * 128, dest=aside)
    assert str(e.value).startswith(f"{events}: could not set aside the abandoned timeline's logs (No space left on "
                                   "device; 0 B free there); free some space"), str(e.value)
    assert re.search(r"; the rewrite needs \d+ B$", str(e.value)), str(e.value)


def test_a_resume_before_every_logged_step_removes_the_events_file(tmp_path):
    run = _events_run(tmp_path)
    changed, kept = logger_module._drop_events_after(run, 0)
    assert changed == 1 and not list(run.glob("events.out.tfevents.*"))  # only its header was left: no file


# ------------------------------------------------------------------ (4) report's steps row
from proxima.report import MISSING, _steps_cell  # noqa: E402

KILLED = {"global_step": 3584, "total": 20480, "checkpoint": 3072}


def test_the_steps_row_names_the_checkpoint_only_for_a_stopped_run_with_finite_steps():
    assert _steps_cell(KILLED, "in progress: locked by pid 7") == "3,584 of 20,480 steps so far (in progress: locked by pid 7)"
    assert _steps_cell(KILLED, "stopped by train()'s callback; `x` trains on") == (
        "3,584 of 20,480 steps logged so far; last checkpoint at 3,072 (stopped by train()'s callback; `x` trains on)")
    assert _steps_cell(dict(KILLED, global_step=math.inf), "stopped; `proxima resume r` continues it") == (
        f"{MISSING} of 20,480 steps so far (stopped; `proxima resume r` continues it)")


def test_an_unlimited_file_size_is_none_where_rlim_infinity_is_the_largest_number(monkeypatch):
    import resource

    big = 2 ** 63 - 1  # macOS's RLIM_INFINITY, where Linux's reads -1
    monkeypatch.setattr(resource, "RLIM_INFINITY", big)
    monkeypatch.setattr(resource, "getrlimit", lambda what: (big, big))
    assert diskspace.file_size_limit() is None
    monkeypatch.setattr(resource, "getrlimit", lambda what: (4096, big))
    assert diskspace.file_size_limit() == 4096
