"""Review 32's surviving mutations of run_setup.py, debug.py and warnings_guard.py: the resume's notes
(rows missing from metrics.csv, a config.yaml that is not a mapping), the refusals' advice (which
identity field to set back, the stop line after a held signal, --stop-return, the CPU count), which
values a resume records (run_dir, eval_episodes, env_id), a failure's one line (a broken env, a denied
write), and the two guards (forbid_host_sync, quiet_warnings)."""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import shutil
import signal
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from proxima import run_setup
from proxima.config import ConfigError, PPOConfig
from tests.cli_helpers import TINY_RUN, error_line, run_main, tiny_cartpole_run


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A complete 2-iteration (128-step) CartPole run, copied by each test that changes it."""
    return tiny_cartpole_run(tmp_path_factory, "rs32")


def copy_of(finished, tmp_path, name: str = "run") -> Path:
    dst = tmp_path / name
    shutil.copytree(finished, dst)
    return dst


def recorded_yaml(run_dir) -> dict:
    return yaml.safe_load((Path(run_dir) / "config.yaml").read_text())


# -- note_missing_rows (survivors 1, 2, 3) --------------------------------------------------------

def write_metrics(run_dir: Path, rows) -> None:
    from proxima.logger import CSV_COLUMNS

    with open(run_dir / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for it, step in rows:
            w.writerow({"iteration": it, "global_step": step, "time": 0.1 * it, "episodes": 1})


def missing_note(tmp_path, capsys, iteration: int, rows=None) -> str:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if rows is not None:
        write_metrics(run_dir, rows)
    state = {"global_step": 64 * iteration, "iteration": iteration, "path": f"{run_dir}/checkpoints/step_x.pt"}
    run_setup.note_missing_rows(state, run_dir, trains=True)
    return capsys.readouterr().err


def test_a_missing_metrics_csv_is_noted_at_iteration_1(tmp_path, capsys):
    # a checkpoint at iteration 1 has a row to lose too (survivor 1: `iteration <= 1` said nothing)
    err = missing_note(tmp_path, capsys, 1)
    assert (f"metrics.csv is missing, the checkpoint {tmp_path}/run/checkpoints/step_x.pt is at iteration 1 (step 64): "
            "iteration 1 is missing from it (rows lost); the run logs on from iteration 2") in err


def test_a_deleted_metrics_csv_is_noted(tmp_path, capsys):
    # survivor 3: a FileNotFoundError returned without the note
    err = missing_note(tmp_path, capsys, 2)
    assert "metrics.csv is missing" in err
    assert "iterations 1-2 are missing from it (rows lost); the run logs on from iteration 3" in err


def test_one_missing_iteration_is_named_alone(tmp_path, capsys):
    # survivor 2: `last_iter == iteration` wrote "iterations 2-2 are missing"
    err = missing_note(tmp_path, capsys, 2, rows=[(1, 64)])
    assert "ends at iteration 1 (step 64)" in err
    assert "iteration 2 is missing from it (rows lost)" in err
    assert "iterations" not in err


# -- read_run_config (survivors 5, 6) -----------------------------------------------------------

def test_a_config_yaml_holding_a_list_is_noted_and_the_resume_trains(finished, tmp_path, capsys):
    run = copy_of(finished, tmp_path)
    (run / "config.yaml").write_text("- 1\n- 2\n")
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192"], capsys)
    assert code == 0, err
    assert "Traceback" not in err
    assert f"{run / 'config.yaml'}: not a mapping of field: value (a list); resume does not read it" in err
    assert recorded_yaml(run)["total_timesteps"] == 192  # rewritten from the checkpoint


# -- check_same_run (survivor 4) ----------------------------------------------------------------

def test_the_advice_names_the_first_identity_field_that_differs(tmp_path):
    state = {"path": "RUN/checkpoints/step_000000000128.pt",
             "config": {"env_id": "CartPole-v1", "num_envs": 8, "num_steps": 16, "seed": 5}}
    recorded = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, seed=1)
    with pytest.raises(ConfigError) as e:
        run_setup.check_same_run(state, tmp_path, recorded)
    assert "records num_envs 8 and seed 5 where" in str(e.value)
    assert str(e.value).endswith("or, if config.yaml was edited, set num_envs back to 8 there")


# -- keep_recorded_eval (survivors 7, 8) --------------------------------------------------------

def eval_json(run_dir: Path, step: int, episodes: int) -> None:
    run_dir.mkdir(exist_ok=True)
    (run_dir / "eval.json").write_text(json.dumps({"env_id": "CartPole-v1", "global_step": step, "episodes": episodes,
                                                   "deterministic": True, "mean_return": 9.0, "std_return": 0.0}))


@pytest.mark.parametrize("step, episodes, kept", [(128, 7, 7), (128, 0, 10), (64, 7, 10)])
def test_only_a_current_evaluation_of_episodes_sets_eval_episodes(tmp_path, step, episodes, kept):
    # (128, 7): the file is one the resume takes over; (128, 0): survivor 7 (`episodes >= 0`);
    # (64, 7): another step's evaluation, survivor 8 (current_eval dropped)
    eval_json(tmp_path / "run", step, episodes)
    config = PPOConfig(env_id="CartPole-v1", eval_episodes=10)
    run_setup.keep_recorded_eval(config, tmp_path / "run", {"global_step": 128}, None)
    assert config.eval_episodes == kept


# -- set_aside_timeline (survivor 9) ------------------------------------------------------------

def test_a_stop_held_during_set_aside_names_the_checkpoint_the_run_now_ends_at(tmp_path, monkeypatch):
    from proxima import checkpoint as ckpt
    from proxima import signals

    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    for n in range(1, 6):
        (folder / f"step_{n:012d}.pt").write_bytes(b"x")
    resumed = folder / f"step_{3:012d}.pt"

    def set_aside(checkpoint, step):  # step_4 and step_5 are the abandoned timeline
        aside = folder / "abandoned-now"
        aside.mkdir()
        for n in (4, 5):
            (folder / f"step_{n:012d}.pt").rename(aside / f"step_{n:012d}.pt")
        return aside

    @contextlib.contextmanager
    def sigint_held():
        yield
        raise signals.TrainingInterrupted(signal.SIGINT, None)

    monkeypatch.setattr(ckpt, "set_aside_newer", set_aside)
    monkeypatch.setattr(signals, "stops_held", sigint_held)
    with pytest.raises(signals.TrainingInterrupted) as e:
        run_setup.set_aside_timeline(resumed, 3)
    assert e.value.exit_code == 130
    assert str(e.value).endswith(f"the run now ends at it; {signals.checkpoint_line(resumed)}")
    assert f"continue with: proxima resume {tmp_path / 'run'}" in str(e.value)


# -- resolve_start's run_dir (survivor 10) ------------------------------------------------------

def test_a_resumed_copy_records_its_own_directory(finished, tmp_path, capsys):
    from proxima import checkpoint as ckpt

    copy = copy_of(finished, tmp_path, "copy")
    code, _, err = run_main(["resume", str(copy), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0, err
    assert Path(recorded_yaml(copy)["run_dir"]).resolve() == copy.resolve()
    # the checkpoint it wrote records the copy too, not the run it was copied from (survivor 10)
    newest = ckpt.list_checkpoints(copy)[-1]
    assert newest.name == "step_000000000192.pt"
    assert Path(torch.load(newest, weights_only=True)["config"]["run_dir"]).resolve() == copy.resolve()


# -- check_processes (survivor 11) --------------------------------------------------------------

def test_resume_is_advised_when_the_processes_equal_the_cpus(monkeypatch):
    from proxima import cpuinfo
    from proxima.checkpoint import CheckpointError

    monkeypatch.setattr(cpuinfo, "usable_cpus", lambda: 2)
    with pytest.raises(CheckpointError) as e:
        run_setup.check_processes({"world_size": 2, "path": "/r/run/checkpoints/step_000000000128.pt"}, 1)
    assert ("use the same --nproc (proxima resume /r/run starts 2; or proxima train --resume /r/run --nproc 2); "
            "to continue with another count") in str(e.value)


# -- refuse_loose_finished (survivor 12) --------------------------------------------------------

def test_a_loose_checkpoint_stopped_by_stop_return_names_it_at_the_least_total(monkeypatch):
    # total == step + one batch fits an iteration: the return target, not the total, ends it
    monkeypatch.setattr(run_setup, "stop_return_mean", lambda config, state: 150.0)
    config = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=192, stop_return=100.0)
    with pytest.raises(ConfigError) as e:
        run_setup.refuse_loose_finished("ck.pt", config, {"global_step": 128}, Path("NEW"))
    assert str(e.value) == ("ck.pt: the run stopped at --stop-return 100; give --stop-return none or a higher "
                            "target to continue it into NEW (nothing was written)")


# -- check_new_run_dir (survivor 13) ------------------------------------------------------------

def test_resume_auto_dry_run_refuses_a_directory_of_other_files(tmp_path, capsys):
    target = tmp_path / "dir"
    target.mkdir()
    (target / "foo.txt").write_text("mine")
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--resume", "auto", "--run-dir", str(target),
                             "--dry-run"], capsys)
    error_line(code, err, str(target), "foo.txt")
    assert (target / "foo.txt").read_text() == "mine"


# -- resumed_config's env_id (survivor 14) ------------------------------------------------------

def test_a_resume_that_trains_nothing_keeps_the_recorded_env_id(finished, tmp_path, capsys):
    run = copy_of(finished, tmp_path)
    code, _, err = run_main(["resume", str(run), "--env", "gymnasium.envs:CartPole-v1"], capsys)
    assert code == 0, err
    assert "the run is complete (128 steps)" in err
    assert recorded_yaml(run)["env_id"] == "CartPole-v1"


# -- diagnose_failure (survivors 15, 16, 17) ----------------------------------------------------

def diagnosed(monkeypatch, violations, raised: Exception) -> str:
    from proxima.envs import checker

    monkeypatch.setattr(checker, "check_env", lambda env_id, env_kwargs=None, **kw: list(violations))
    config = PPOConfig(env_id="Broken-v0", backend="gymnasium")
    return str(run_setup.diagnose_failure(raised, config, None))


def test_a_second_contract_violation_is_counted(monkeypatch):
    line = diagnosed(monkeypatch, ["reset returned a list", "step returned 4 values"], ValueError("bad"))
    assert line.startswith("env 'Broken-v0' breaks the env contract: reset returned a list (and 1 more); see `")
    assert line.endswith("(the run stopped on ValueError: bad)")


def test_a_long_exception_is_cut_in_the_line(monkeypatch):
    line = diagnosed(monkeypatch, ["reset returned a list"], ValueError("x" * 500))
    raised = line.split("(the run stopped on ")[1]
    assert raised == "ValueError: " + "x" * 185 + "...)"
    assert len(line) < 400


def test_a_permission_denied_write_is_a_write_error_with_the_last_checkpoint():
    from proxima.diskspace import StorageError

    e = PermissionError(errno.EACCES, "Permission denied", "/r/run/metrics.csv")
    out = run_setup.diagnose_failure(e, PPOConfig(env_id="CartPole-v1"), lambda: "the run's last checkpoint is step_64")
    assert isinstance(out, StorageError)
    assert "/r/run/metrics.csv" in str(out)
    assert str(out).endswith("; the run's last checkpoint is step_64")


# -- debug.forbid_host_sync (survivor 19) -------------------------------------------------------

def test_a_copy_to_the_meta_device_is_no_host_read():
    from proxima.debug import HostSyncError, forbid_host_sync

    with forbid_host_sync():
        moved = torch.zeros(2).to("meta")
        with pytest.raises(HostSyncError):
            torch.zeros(2).to("cpu")
    assert moved.device.type == "meta"


# -- warnings_guard.quiet_warnings (survivor 21) ------------------------------------------------

def test_quiet_warnings_drops_every_warning():
    from proxima.warnings_guard import quiet_warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_warnings():
            warnings.warn("dropped", UserWarning)
        warnings.warn("kept", UserWarning)
    assert [str(w.message) for w in caught] == ["kept"]
