"""CLI flags a review found taken wrongly (part B): a loose checkpoint of a complete run resumed into a
new directory, the advice for a run of more processes than CPUs, --dry-run's run-directory checks,
the "not empty" line of a resume, a repeated --config and empty paths, a start-up failure's hint,
flags that do nothing together, and e-notation integers outside PPOConfig. Each refusal is one line
(exit 2), and nothing is written."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from cli_helpers import TINY_RUN, tiny_cartpole_run, edit_checkpoint, one_error_line, run_main, snapshot

from proxima import checkpoint as ckpt
from proxima import cli

SMALL = TINY_RUN


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A complete 2-iteration CartPole run (128 steps)."""
    return tiny_cartpole_run(tmp_path_factory, "flags3")


@pytest.fixture
def loose(run, tmp_path):
    """A copy of the complete run's final checkpoint outside any run's checkpoints/ folder."""
    path = tmp_path / "loose.pt"
    shutil.copy(ckpt.list_checkpoints(run)[-1], path)
    return path


# ------------------------------------------------------------------------------------ 1. loose checkpoint, complete run
@pytest.mark.parametrize("command", [["resume"], ["train", "--resume"], ["train", "--dry-run", "--resume"]])
def test_a_complete_loose_checkpoint_is_refused_before_its_new_directory_is_made(loose, tmp_path, capsys, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    code, out, err = run_main([*command, "loose.pt", "--run-dir", "new"], capsys)
    assert one_error_line(err, f"proxima {command[0]}") == ("loose.pt: the run is complete (128 steps); give --total-timesteps "
                                                           "of at least 192 to extend it into new (nothing was written)")
    assert (code, out) == (2, "")
    assert snapshot(tmp_path) == before  # no new/ holding a config but no checkpoint


def test_a_loose_checkpoint_extended_into_a_new_directory_is_a_usable_run(loose, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["resume", "loose.pt", "--run-dir", "new", "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0, err
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "new")] == ["step_000000000192.pt"]


# ------------------------------------------------------------------------------------ 2. more processes than CPUs
@pytest.fixture
def run_of_two(run, tmp_path, monkeypatch):
    """A copy of the run whose checkpoint says 2 processes wrote it, on a machine of 1 CPU."""
    copy = tmp_path / "run2"
    shutil.copytree(run, copy)
    edit_checkpoint(copy, lambda state: state.update(world_size=2))
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    monkeypatch.chdir(tmp_path)
    return copy


def _record_command(run_dir, command: list) -> None:
    meta = json.loads((run_dir / "meta.json").read_text())
    meta["command"] = command
    (run_dir / "meta.json").write_text(json.dumps(meta))


def test_a_run_of_train_nproc_beyond_the_cpus_is_told_its_command_with_nproc(run_of_two, capsys):
    _record_command(run_of_two, ["proxima", "train", "--nproc", "2", "--run-dir", "run2"])
    code, out, err = run_main(["resume", "run2"], capsys)
    line = one_error_line(err, "proxima resume")
    assert line == ("run2: written by 2 processes, more than this machine's 1 CPU (proxima resume starts no more); "
                    "to run 2 here anyway: proxima resume run2 --nproc 2")
    assert (code, out) == (2, "")


def test_a_run_torchrun_started_keeps_the_torchrun_advice(run_of_two, capsys):
    _record_command(run_of_two, ["/x/proxima/__main__.py", "train", "--run-dir", "run2"])  # a rank's argv: no --nproc
    code, _, err = run_main(["resume", "run2"], capsys)
    assert "under the torchrun command that ran it (torchrun ... -m proxima resume run2" in one_error_line(err, "proxima resume")
    assert code == 2


@pytest.mark.parametrize("processes, launcher, expected", [
    (1, None, "p: written by 2 process(es), resumed with 1; use the same --nproc (proxima train --resume p --nproc 2)"),
    (3, True, "p: written by 2 process(es), resumed with --nproc 3; use the same count (--nproc 2)")])
def test_the_process_count_line_offers_proxima_resume_only_where_it_would_start(monkeypatch, processes, launcher, expected):
    from proxima.run_setup import check_processes

    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # `proxima resume` starts no more processes than CPUs
    with pytest.raises(ckpt.CheckpointError) as e:
        check_processes({"world_size": 2, "path": "p"}, processes, launcher)
    assert str(e.value).startswith(expected + "; to continue with another count, start a new run from its weights: ")


# ------------------------------------------------------------------------------------ 3. dry-run's run directory
@pytest.mark.parametrize("where, expected", [
    (["--run-dir", "afile"], "--run-dir afile: exists and is not a directory"),
    (["--run-dir", "afile/sub"], "--run-dir afile/sub: afile is a file, not a folder"),
    (["--config", "file.yaml"], "file.yaml: run_dir afile: exists and is not a directory"),
    (["--run-dir", "RUN"], "RUN is not empty (checkpoints, config.yaml")])
def test_dry_run_refuses_the_run_directories_the_run_refuses(run, tmp_path, capsys, monkeypatch, where, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "file.yaml").write_text("run_dir: afile\n")
    where = [str(run) if w == "RUN" else w for w in where]
    before = snapshot(tmp_path)
    code, out, err = run_main(["train", "--dry-run", "--threads", "1", *where], capsys)
    assert one_error_line(err, "proxima train").startswith(expected.replace("RUN", str(run)))
    assert (code, out) == (2, "")
    assert snapshot(tmp_path) == before


def test_dry_run_takes_a_run_directory_overwrite_moves_aside(run, capsys):
    code, out, err = run_main(["train", "--dry-run", "--threads", "1", "--run-dir", str(run), "--overwrite"], capsys)
    assert code == 0, err
    assert "env_id: CartPole-v1" in out


# ------------------------------------------------------------------------------------ 4. "not empty", from a resume
@pytest.mark.parametrize("command", [["resume"], ["train", "--resume"]])
def test_a_loose_checkpoint_into_a_run_is_told_what_resume_takes(run, loose, tmp_path, capsys, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    before = snapshot(run)
    code, _, err = run_main([*command, "loose.pt", "--run-dir", str(run), "--total-timesteps", "192", "--quiet"], capsys)
    line = one_error_line(err, f"proxima {command[0]}")
    assert line.endswith(f"it holds another run; a checkpoint continues in a new or empty directory: choose another "
                         f"--run-dir, or continue that run with `proxima resume {run}`")
    assert "--overwrite" not in line and "--resume auto" not in line
    assert code == 2
    assert snapshot(run) == before


# ------------------------------------------------------------------------------------ 5. --config twice, empty paths
@pytest.mark.parametrize("argv, prog, expected", [
    (["train", "--config", "a.yaml", "--config", "b.yaml", "--dry-run"], "train",
     "--config given 2 times (a.yaml, b.yaml); merge them into one file"),
    (["rlhf", "--config=a.yaml", "--config", "b.yaml"], "rlhf", "--config given 2 times (a.yaml, b.yaml); merge them into one file"),
    (["bench", "CartPole-v1", "--out", ""], "bench", "--out '': empty; give a path (an unset shell variable?)"),
    (["train", "--resume", "", "--dry-run"], "train", "--resume '': empty; give a path (an unset shell variable?)"),
    (["resume", ""], "resume", "RUN_DIR|CHECKPOINT '': empty; give a path (an unset shell variable?)"),
    (["train", "--config", "", "--dry-run"], "train", "--config '': empty; give a path (an unset shell variable?)")])
def test_a_repeated_config_or_an_empty_path_is_refused(tmp_path, capsys, monkeypatch, argv, prog, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.yaml").write_text("lr: 0.001\n")
    (tmp_path / "b.yaml").write_text("seed: 3\n")
    before = snapshot(tmp_path)
    code, out, err = run_main(argv, capsys)
    assert one_error_line(err, f"proxima {prog}") == expected
    assert (code, out) == (2, "")
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------------ 6. a start-up failure's hint
def test_a_failure_before_the_first_iteration_names_no_checkpoint_hint(tmp_path, capsys):
    code, _, err = run_main(["train", *SMALL, "--total-timesteps", "64", "--run-dir", "/proc/proxima-test/run"], capsys)
    line = one_error_line(err, "proxima train")
    assert "cannot create it" in line
    assert "checkpoint" not in line.split("cannot create it", 1)[1]
    assert code == 2


# ------------------------------------------------------------------------------------ 7. flags that do nothing together
def test_overwrite_with_a_resume_is_refused(run, capsys):
    before = snapshot(run)
    code, out, err = run_main(["train", "--resume", str(run), "--overwrite", "--total-timesteps", "192", "--quiet"], capsys)
    assert one_error_line(err, "proxima train") == (f"--overwrite with --resume {run}: the resume continues the run in place "
                                                    "and moves nothing aside; drop --overwrite, or drop --resume to start a "
                                                    "new run there")
    assert (code, out) == (2, "")
    assert snapshot(run) == before


def test_vector_with_the_native_backend_is_noted(capsys):
    code, _, err = run_main(["train", "--dry-run", "--threads", "1", "--backend", "native", "--vector", "async"], capsys)
    assert code == 0, err
    assert "proxima train: note: --vector async: applies to the gymnasium backend only; --backend native ignores it" in err


# ------------------------------------------------------------------------------------ 8. e-notation integers
def test_integer_options_outside_the_config_take_e_notation(run, capsys):
    args = cli.build_parser().parse_args(["check-env", "CartPole-v1", "--steps", "1e3", "--seed", "2e0"])
    assert (args.steps, args.seed) == (1000, 2)
    code, _, err = run_main(["eval", str(run), "--seed", "-1e3"], capsys)
    assert one_error_line(err, "proxima eval").startswith("--seed -1000: must be an integer from 0 to ")
    assert code == 2


def test_a_dry_run_refuses_what_the_real_run_refuses_for_populations_nproc_and_auto_vector(tmp_path, capsys, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", "busy", "--dry-run", "--threads", "1"], capsys)
    assert code == 2 and "busy is not empty" in err, err
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    code, _, err = run_main(["train", "CartPole-v1", "--nproc", "9", "--total-timesteps", "1e7", "--dry-run", "--threads", "1"],
                            capsys)
    assert code == 2 and "--nproc 9: must be at most 8" in err, err
    # --backend auto builds the native CartPole: --vector does nothing there, and the note says so
    code, _, err = run_main(["train", "CartPole-v1", "--vector", "async", "--dry-run", "--threads", "1"], capsys)
    assert code == 0 and "--vector async: applies to the gymnasium backend only; --backend auto (here: native) ignores it" in err, err


def test_report_and_check_env_read_numbers_and_env_kwargs_as_train_does(tmp_path, capsys):
    code, _, err = run_main(["report", str(tmp_path / "none"), "--smooth", "1e1", "--episodes", "1e1"], capsys)
    assert "invalid int value" not in err and "no such directory" in err, err  # e-notation read; the path refused
    code, _, err = run_main(["check-env", "CartPole-v1", "--env-kwargs", "x"], capsys)
    assert code == 2 and "--env-kwargs 'x'" in err and "field 'env_kwargs'" not in err, err


def test_the_python_api_refuses_an_empty_run_dir_or_resume_as_the_config_does(tmp_path, monkeypatch):
    from proxima import PPOConfig, train
    from proxima.config import ConfigError

    monkeypatch.chdir(tmp_path)
    for kwargs in ({"run_dir": ""}, {"run_dir": " "}, {"resume": ""}):
        with pytest.raises(ConfigError, match="empty; give a directory"):
            train(PPOConfig(env_id="CartPole-v1", total_timesteps=512, num_envs=4, threads=1, progress=False), **kwargs)
    assert list(tmp_path.iterdir()) == []  # nothing trained into the current directory
