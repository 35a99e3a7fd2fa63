"""A docs review's findings on the CLI (round 27): the command a stop line offers for a run of more
processes than this machine has CPUs works; --dry-run refuses a --run-dir the real run cannot move
aside; UntrustedEnvError is importable from proxima; --quiet's help says what still prints. The day-diff
review's: `proxima resume`'s refusal names the stop line's command (quoted, with a module env), --quiet
drops the --compile-mode note, a stop's message starts a new line only on a terminal."""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys

import pytest
import yaml
from cli_helpers import TINY_RUN, edit_checkpoint, one_error_line, run_main

import proxima
from proxima import checkpoint as ckpt
from proxima import cpuinfo
from proxima import cli


def help_text(command: str, capsys) -> str:
    """``proxima COMMAND --help`` as one line of words (argparse wraps at the terminal width)."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.fixture(scope="module")
def run256(tmp_path_factory):
    """A finished 4-iteration (256-step) CartPole run."""
    run_dir = tmp_path_factory.mktemp("review27") / "run"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "256", "--run-dir", str(run_dir), "--quiet"]) == 0
    return run_dir


def _as_processes(run_dir, world: int, command: list) -> None:
    """The run as `command` with ``world`` processes records it: every checkpoint's counters and pieces,
    meta.json's world_size and command."""
    def edit(state):
        state["world_size"], state["iteration"], state["ranks"] = world, state["iteration"] // world, [{}] * world

    edit_checkpoint(run_dir, edit)
    meta = json.loads((run_dir / "meta.json").read_text())
    meta.update(world_size=world, command=command)
    (run_dir / "meta.json").write_text(json.dumps(meta))


@pytest.fixture
def run_of_four(run256, tmp_path, monkeypatch):
    """A copy of the run as `train --nproc 4` writes it, on a machine of 2 CPUs (up to 8 processes may start)."""
    copy = tmp_path / "R"
    shutil.copytree(run256, copy)
    for older in ckpt.list_checkpoints(copy)[:-1]:  # the newest alone: each would need the edit
        older.unlink()
    _as_processes(copy, 4, ["proxima", "train", "--nproc", "4", "--run-dir", "R"])
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.chdir(tmp_path)
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    return copy


def _stop_line(checkpoint) -> str:
    from proxima.signals import TrainingInterrupted

    return str(TrainingInterrupted(signal.SIGINT, checkpoint))


# ------------------------------------------------------------------------------------ 1. the continue command works
@pytest.mark.parametrize("in_rank", [True, False])
def test_the_stop_line_of_a_run_of_more_processes_than_cpus_names_train_nproc_and_it_works(run_of_four, capsys, monkeypatch,
                                                                                            in_rank):
    if in_rank:  # a rank of `train --nproc 4` on one machine says it; else the count comes from meta.json
        monkeypatch.setenv("WORLD_SIZE", "4")
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    last = ckpt.list_checkpoints("R")[-1]  # as the run names it: R/checkpoints/step_N.pt
    line = _stop_line(last)
    assert line == f"stopped by SIGINT; checkpoint: {last}; continue with: proxima train --resume R --nproc 4"
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)

    # `proxima resume` still refuses a recorded count above the CPUs, naming the command typed with the count
    code, out, err = run_main(["resume", "R"], capsys)
    assert (code, out) == (2, "")
    assert one_error_line(err, "proxima resume").endswith("to run 4 here anyway: proxima resume R --nproc 4")

    command = shlex.split(line.rpartition("continue with: ")[2])
    assert command[:2] == ["proxima", "train"]
    code, out, err = run_main([*command[1:], "--total-timesteps", "512", "--dry-run"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out)["total_timesteps"] == 512


def test_the_not_empty_line_names_the_command_that_works_too(run_of_four, capsys):
    code, _, err = run_main(["train", "--run-dir", "R", "--dry-run"], capsys)
    assert code == 2
    assert "(or `proxima train --resume R --nproc 4`)" in one_error_line(err, "proxima train")


def test_a_run_torchrun_started_by_hand_is_told_its_torchrun_command(run_of_four):
    meta = json.loads((run_of_four / "meta.json").read_text())
    meta["command"] = ["/x/proxima/__main__.py", "train", "--run-dir", "R"]  # a rank's argv: no --nproc
    (run_of_four / "meta.json").write_text(json.dumps(meta))
    line = _stop_line(ckpt.list_checkpoints("R")[-1])
    assert line.endswith("continue with: proxima resume R, under the same torchrun command (4 processes)")


def test_a_run_the_cpus_can_start_keeps_proxima_resume(run_of_four, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    monkeypatch.setattr(cpuinfo, "CGROUP_ROOT", "/nonexistent-cgroup")  # a CI box's CPU quota must not count
    assert _stop_line(ckpt.list_checkpoints("R")[-1]).endswith("continue with: proxima resume R")


def test_resume_help_says_where_proxima_resume_stops_starting_processes(capsys):
    text = help_text("resume", capsys)
    assert ("resumes with K processes on this machine (started through torchrun) when K is at most its CPUs; beyond "
            "that, continue it with proxima train --resume RUN_DIR --nproc K") in text


# ------------------------------------------------------------------------------------ 2. --dry-run and a --run-dir that cannot move
@pytest.mark.parametrize("where, run_dir, expected", [
    ("R", ".", "--run-dir .: is the current directory, which cannot be moved aside; run from another directory (cd ..) "
               "or choose another --run-dir"),
    ("R/checkpoints", "..", "--run-dir ..: holds the current directory, which cannot be moved aside; run from another "
                            "directory (cd ..) or choose another --run-dir")])
def test_dry_run_refuses_overwrite_of_the_current_directory_as_the_run_does(run256, tmp_path, capsys, monkeypatch,
                                                                             where, run_dir, expected):
    shutil.copytree(run256, tmp_path / "R")
    monkeypatch.chdir(tmp_path / where)
    command = ["train", "Acrobot-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", run_dir, "--overwrite"]
    code, out, real = run_main(command, capsys)
    assert (code, out) == (2, "")
    assert one_error_line(real, "proxima train") == expected
    for extra in (["--dry-run"], ["--seeds", "1,2", "--dry-run"]):
        code, out, dry = run_main([*command, *extra], capsys)
        assert (code, out) == (2, "")
        assert one_error_line(dry, "proxima train") == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["R"]  # nothing moved aside


# ------------------------------------------------------------------------------------ 3. UntrustedEnvError
def test_untrusted_env_error_is_importable_from_proxima_and_evaluate():
    from proxima import UntrustedEnvError
    from proxima.envs.gym_adapter import UntrustedEnvError as where_defined
    from proxima.evaluate import UntrustedEnvError as from_evaluate, refuse_untrusted

    assert UntrustedEnvError is where_defined is from_evaluate
    assert "UntrustedEnvError" in proxima.__all__ and "UntrustedEnvError" in dir(proxima)
    assert all(hasattr(proxima, name) for name in proxima.__all__)

    class Recorded:  # what load() returns for a run whose recorded env would import a module
        path, env_id = "R/checkpoints/step_1.pt", "their_module:Env"

    with pytest.raises(proxima.UntrustedEnvError, match="would import and run module 'their_module'"):
        refuse_untrusted(Recorded())


def test_importing_proxima_still_imports_neither_torch_nor_gymnasium():
    code = ("import sys, proxima; assert 'torch' not in sys.modules and 'gymnasium' not in sys.modules; "
            "from proxima import UntrustedEnvError; assert issubclass(UntrustedEnvError, Exception)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


# ------------------------------------------------------------------------------------ 4. --quiet's help is true
QUIET_STAYS = "errors, notes of what the run does otherwise than asked (a directory moved aside, steps rounded to whole " \
              "iterations) and the 'run directory:' line still print"


@pytest.mark.parametrize("command", ["train", "resume"])
def test_quiet_help_names_what_still_prints(capsys, command):
    text = help_text(command, capsys)
    assert f"--quiet no progress bar or summary lines (final eval, resuming/stopped at step N) and no advisory notes " \
           f"(action scale, pixels, settings that do not apply); {QUIET_STAYS}" in text


def test_a_quiet_run_prints_what_its_help_says_and_nothing_else(run256, tmp_path, capsys, monkeypatch):
    shutil.copytree(run256, tmp_path / "R")
    monkeypatch.chdir(tmp_path)
    tiny = [a for a in TINY_RUN if a != "--no-progress"]
    code, out, err = run_main(["train", *tiny, "--eval-episodes", "2", "--total-timesteps", "100", "--run-dir", "R",
                               "--overwrite", "--quiet"], capsys)
    assert code == 0, err
    assert out == "run directory: R\n"  # no eval line
    lines = err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("proxima: note: --total-timesteps 100 is not a multiple of the batch")
    assert lines[1].startswith("proxima: --overwrite: moved the old R to ")


# ------------------------------------------------------------------------------------ day-diff review (fixes)
# 1. `proxima resume`'s refusal names the stop line's command: the path quoted, a module env's ENV_ID
@pytest.fixture
def run_of_four_spaced(run_of_four, tmp_path):
    """The run of four processes, in a directory whose name holds a space (beside it: a run named R)."""
    spaced = tmp_path / "R b"
    shutil.copytree(run_of_four, spaced)
    return spaced


def test_the_refusal_of_proxima_resume_names_the_command_typed_with_nproc_and_the_stop_lines_resumes(run_of_four_spaced,
                                                                                                         capsys):
    line = _stop_line(ckpt.list_checkpoints("R b")[-1])
    command = line.rpartition("continue with: ")[2]
    assert command == "proxima train --resume 'R b' --nproc 4"
    code, out, err = run_main(["resume", "R b", "--total-timesteps", "1024"], capsys)
    assert (code, out) == (2, "")
    assert one_error_line(err, "proxima resume") == (
        "R b: written by 4 processes, more than this machine's 2 CPUs (proxima resume starts no more); to run 4 here "
        "anyway: proxima resume 'R b' --total-timesteps 1024 --nproc 4")
    code, out, err = run_main([*shlex.split(command)[1:], "--total-timesteps", "512", "--dry-run"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out)["total_timesteps"] == 512


def test_the_refusal_names_a_module_env_and_the_checkpoint_it_was_given(run_of_four_spaced, capsys):
    config = run_of_four_spaced / "config.yaml"  # what env_flag reads: a module env is named, never imported
    config.write_text(config.read_text().replace("env_id: CartPole-v1", "env_id: my_envs:Walker"))
    line = _stop_line(ckpt.list_checkpoints("R b")[-1])
    assert line.endswith("continue with: proxima train my_envs:Walker --resume 'R b' --nproc 4")
    code, _, err = run_main(["resume", "R b"], capsys)
    assert code == 2
    assert one_error_line(err, "proxima resume").endswith("anyway: proxima resume 'R b' --env my_envs:Walker --nproc 4")
    last = ckpt.list_checkpoints("R b")[-1]
    code, _, err = run_main(["resume", str(last)], capsys)
    assert code == 2
    assert one_error_line(err, "proxima resume").endswith(
        f"anyway: proxima resume {shlex.quote(str(last))} --env my_envs:Walker --nproc 4")


def test_a_hand_started_torchrun_run_is_told_its_command_quoted(run_of_four_spaced, capsys):
    meta = json.loads((run_of_four_spaced / "meta.json").read_text())
    meta["command"] = ["/x/proxima/__main__.py", "train", "--run-dir", "R b"]  # no --nproc: torchrun by hand
    (run_of_four_spaced / "meta.json").write_text(json.dumps(meta))
    code, _, err = run_main(["resume", "R b"], capsys)
    assert code == 2
    assert "under the torchrun command that ran it (torchrun ... -m proxima resume 'R b', docs/distributed.md)" in \
        one_error_line(err, "proxima resume")


# 4. --quiet drops the --compile-mode note, as its help says; train and --dry-run alike
@pytest.mark.parametrize("dry_run", [False, True])
def test_the_compile_mode_note_prints_unless_quiet(tmp_path, capsys, monkeypatch, dry_run):
    monkeypatch.chdir(tmp_path)
    note = "proxima: note: --compile-mode max-autotune has no effect without --compile"
    base = ["train", *TINY_RUN, "--total-timesteps", "128", "--compile-mode", "max-autotune"]
    for quiet in (False, True):
        argv = base + (["--dry-run"] if dry_run else ["--run-dir", f"r{int(quiet)}"]) + (["--quiet"] if quiet else [])
        code, _, err = run_main(argv, capsys)
        assert code == 0, err
        assert (note in err.splitlines()) is not quiet, err


# 6. a stop's message begins with a newline only where a progress frame is redrawn in place
class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("stream, lead", [(io.StringIO, ""), (_Terminal, "\n")])
def test_the_stop_messages_start_a_new_line_only_on_a_terminal(monkeypatch, stream, lead):
    from proxima.signals import SignalGuard

    err = stream()
    monkeypatch.setattr(sys, "stderr", err)
    guard = SignalGuard(last_checkpoint=lambda: None)
    guard._handle(signal.SIGINT, None)
    assert err.getvalue() == (f"{lead}proxima: SIGINT received; writing a checkpoint after this iteration (interrupt "
                              "again to exit at once)\n")

    def exited(code):
        raise SystemExit(code)

    monkeypatch.setattr(os, "_exit", exited)
    with pytest.raises(SystemExit):
        guard._handle(signal.SIGINT, None)
    assert err.getvalue().endswith(f"once)\n{lead}proxima: second interrupt, exiting now (no checkpoint was written)\n")
