"""Edges of run directories and resumes a user really meets: two trainers racing for one new
directory, a --run-dir given as a symbolic link, a project folder given to --resume auto, and
checkpoints whose reward scaler, normalizer or optimizer state is damaged or whose weights no
longer fit the recorded config."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from proxima import checkpoint as ckpt
from proxima import rundir
from tests.cli_helpers import edit_checkpoint, error_line, run_main, snapshot

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
#: 4 envs x 16 steps = 64 steps an iteration; 3 iterations; one checkpoint per iteration
SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "192",
         "--checkpoint-every", "1", "--eval-episodes", "0", "--no-progress", "--quiet", "--threads", "1"]


# ------------------------------------------------------------------------------------ claiming a new run directory
def test_a_trainer_that_loses_the_race_for_a_new_run_dir_leaves_the_winners_run_alone(tmp_path, monkeypatch):
    """Trainer B checked that D does not exist; trainer A then creates D, takes its lock and writes its
    start-up files; B's lock then fails "in use" and must not remove what A made."""
    run_dir = tmp_path / "D"
    take_lock = rundir.RunLock.acquire

    def winner_first(lock):
        run_dir.mkdir()
        (run_dir / rundir.LOCK_NAME).write_text(json.dumps(rundir._owner()))  # a live trainer's lock
        (run_dir / "config.yaml").write_text("env_id: CartPole-v1\n")
        (run_dir / "checkpoints").mkdir()
        return take_lock(lock)

    monkeypatch.setattr(rundir.RunLock, "acquire", winner_first)
    with pytest.raises(rundir.RunDirError, match="is in use by pid"):
        rundir.RunSession().claim_fresh(run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == [rundir.LOCK_NAME, "checkpoints", "config.yaml"]


def test_a_run_dir_given_as_a_link_is_emptied_not_kept_or_unlinked_after_an_early_failure(tmp_path):
    target, link = tmp_path / "tgt", tmp_path / "lnk"
    target.mkdir()
    link.symlink_to(target)
    (tmp_path / "mine.txt").write_text("mine")
    session = rundir.RunSession()
    session.claim_fresh(link)
    (link / "config.yaml").write_text("env_id: CartPole-v1\n")
    (link / "checkpoints").mkdir()
    (link / "metrics.csv").write_text("global_step\n")
    session.discard_fresh()  # what train() does when the env fails at its first step
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert list(target.iterdir()) == []
    assert (tmp_path / "mine.txt").read_text() == "mine"
    again = rundir.RunSession()
    again.claim_fresh(link)  # a re-run is not refused as "not empty"
    again.release()


def test_a_broken_env_trained_into_a_linked_run_dir_leaves_the_target_empty(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tgt").mkdir()
    (tmp_path / "lnk").symlink_to("tgt")
    for _ in range(2):  # the second run meets the same directory, not a half run
        code, _, err = run_main(["train", "bad_envs:OldGymStep", "--run-dir", "lnk", *SMALL], capsys)
        error_line(code, err, "env 'bad_envs:OldGymStep' breaks the env contract")
        assert (tmp_path / "lnk").is_symlink() and list((tmp_path / "tgt").iterdir()) == []


def test_a_new_run_dir_this_session_made_is_removed_when_its_lock_cannot_be_written(tmp_path, monkeypatch):
    def full(path, text):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(rundir, "_write_new_file", full)
    with pytest.raises(Exception, match="could not take the run's lock"):
        rundir.RunSession().claim_fresh(tmp_path / "new")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------ --resume auto on a folder
def _project(folder: Path) -> Path:
    """A user's project: its own (Hydra) config.yaml, code and notes; no Proxima run."""
    (folder / "src").mkdir(parents=True)
    (folder / "config.yaml").write_text("defaults:\n  - model: big\n")
    (folder / "src" / "train.py").write_text("print('hi')\n")
    (folder / "notes.txt").write_text("mine\n")
    return folder


def test_resume_auto_refuses_a_project_holding_its_own_config_yaml(tmp_path, capsys):
    project = _project(tmp_path / "proj")
    before = snapshot(project)
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(project), "--resume", "auto", *SMALL], capsys)
    error_line(code, err, f"{project} is not empty (config.yaml, notes.txt, src...) and holds no Proxima run", "--overwrite")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"] and snapshot(project) == before


@pytest.mark.parametrize("files, is_run", [
    ({"meta.json": '{"kind": "ppo"}', "config.yaml": "", "metrics.csv": ""}, True),
    ({"meta.json": "", "config.yaml": ""}, True),  # killed while open_run_dir wrote meta.json
    ({"meta.json": '{"kind": "rlhf"}', "config.yaml": ""}, True),
    ({"population.json": '{"kind": "ppo-population"}'}, True),
    ({"config.yaml": "", "metrics.csv": ""}, False),
    ({"config.yaml": "", "checkpoints/": None}, False),  # a Lightning project's checkpoints/ folder
    ({"meta.json": '{"kind": "my-experiment"}', "config.yaml": ""}, False),
    ({"meta.json": '{"kind": "ppo"}'}, False),
    ({"meta.json": "[1, 2]", "config.yaml": ""}, False),
    ({"population.json": "{}"}, False),
])
def test_a_run_is_told_apart_from_a_folder_by_the_files_a_run_writes_at_start(files, is_run, tmp_path):
    for name, text in files.items():
        if name.endswith("/"):
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_text(text)
    assert rundir.holds_a_run(tmp_path) is is_run


# ------------------------------------------------------------------------------------ damaged resume state
@pytest.fixture(scope="module")
def normalized_run(tmp_path_factory) -> Path:
    """A finished CartPole run with --norm-obs and --norm-reward (checkpoints at 64, 128, 192)."""
    from proxima import cli

    run_dir = tmp_path_factory.mktemp("normalized") / "run"
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(run_dir), "--norm-obs", "--norm-reward", *SMALL]) == 0
    return run_dir


def _copy(run: Path, tmp_path: Path) -> Path:
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def _edit(field: str, key: str, change):
    """An edit of a checkpoint: ``state[field][key] = change(state[field][key])``."""
    def edit(state):
        state[field][key] = change(state[field][key])
    return edit


@pytest.mark.parametrize("edit, field, problem", [
    (_edit("reward_scaler", "rms.var", lambda v: v * math.nan), "reward_scaler.rms.var", "holds 1 non-finite value(s)"),
    (_edit("reward_scaler", "rms.var", lambda v: -v - 1), "reward_scaler.rms.var",
     "holds 1 negative value(s) of 1 (a variance is >= 0)"),
    (_edit("obs_normalizer", "rms.var", lambda v: -v - 1), "obs_normalizer.rms.var", "holds 4 negative value(s) of 4"),
    (_edit("optimizer", "state", lambda st: {**st, 0: {**st[0], "exp_avg": st[0]["exp_avg"] * math.inf}}),
     "optimizer.state.0.exp_avg", "holds 256 non-finite value(s)"),
])
def test_resume_names_the_damaged_tensor_of_a_checkpoint(edit, field, problem, normalized_run, tmp_path, capsys):
    run = _copy(normalized_run, tmp_path)
    path = edit_checkpoint(run, edit)
    # the file named: one line naming it and the tensor, nothing trained past it
    code, _, err = run_main(["resume", str(path), "--total-timesteps", "256"], capsys)
    error_line(code, err, f"{path}: {field} {problem}", "damaged or was edited")
    assert [p.name for p in ckpt.list_checkpoints(run)][-1] == path.name
    # the run directory: its newest sound checkpoint, the damaged one set aside as a torn one is
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256"], capsys)
    assert code == 0, err
    assert f"proxima: note: {path} is unusable ({field} {problem}" in err, err
    assert f"resuming from {path.with_name('step_000000000128.pt')} instead" in err, err
    assert path.with_name(path.name + ".corrupt").is_file()
    assert [p.name for p in ckpt.list_checkpoints(run)][-2:] == ["step_000000000192.pt", "step_000000000256.pt"]


def test_eval_refuses_a_negative_observation_variance(normalized_run, tmp_path, capsys):
    run = _copy(normalized_run, tmp_path)
    path = edit_checkpoint(run, _edit("obs_normalizer", "rms.var", lambda v: -v - 1))
    code, _, err = run_main(["eval", str(path), "--episodes", "1"], capsys)
    error_line(code, err, f"{path}: obs_normalizer.rms.var holds 4 negative value(s) of 4")


def test_resume_names_the_first_weight_whose_shape_differs_from_the_recorded_config(normalized_run, tmp_path, capsys):
    run = _copy(normalized_run, tmp_path)
    path = edit_checkpoint(run, lambda s: s["config"].__setitem__("hidden_sizes", [32, 32]))
    # the file itself: a run directory's resume sets such a file aside and continues from the one before
    code, _, err = run_main(["resume", str(path), "--total-timesteps", "256"], capsys)
    line = error_line(code, err, f"{path}: weights do not match the recorded config (agent.")
    assert "has shape (64, 4), the recorded config.hidden_sizes and spaces give (32, 4)" in line


def test_a_sound_normalized_checkpoint_still_resumes(normalized_run, tmp_path, capsys):
    run = _copy(normalized_run, tmp_path)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256"], capsys)
    assert code == 0, err
    assert ckpt.list_checkpoints(run)[-1].name == "step_000000000256.pt"
