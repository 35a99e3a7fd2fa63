"""Resume defects a review found (docs/reliability.md, "Resume" and "Checkpoints"):

1. another run's checkpoint in RUN/checkpoints/ was resumed silently, rewriting the run's config.yaml
   for another env and appending its rows to metrics.csv; a metrics.csv that ends before the
   checkpoint's step was continued without a word about the iterations it lacks;
2. a newest checkpoint damaged or edited so that it still unpickles (counters that disagree, a
   next_obs of another shape, a hidden_sizes its weights do not fit) stopped every resume of the run
   directory, where a truncated one falls back to the one before;
3. an env whose spaces changed since the run trained was reported as weights that do not fit the
   file's config;
4. a run whose checkpoints were removed was said to have stopped before its first checkpoint;
5. ``train --config RUN/config.yaml --resume auto`` noted ``--compile-mode default has no effect``;
6. an edited (or unparseable) config.yaml was dropped and rewritten without a word."""

from __future__ import annotations

import csv
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import error_line, run_main, snapshot

from proxima import checkpoint as ckpt
from proxima.config import PPOConfig
from proxima.trainer import train

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths in the lines")

#: 6 iterations of 2 envs x 32 steps, a checkpoint every 2: step 128, 256 and 384 (the end)
BASE = dict(env_id="CartPole-v1", num_envs=2, num_steps=32, total_timesteps=384, num_minibatches=2, update_epochs=1,
            checkpoint_every=2, keep_checkpoints=5, eval_episodes=0, threads=1, progress=False, seed=1)


def _train(run_dir: Path, **overrides) -> Path:
    train(PPOConfig(**{**BASE, **overrides}, run_dir=str(run_dir)), quiet=True)
    return run_dir


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """{name: run directory}: a CartPole run of 6 iterations, and a Pendulum run of the same sizes."""
    root = tmp_path_factory.mktemp("runs")
    return {"cartpole": _train(root / "cartpole"),
            "pendulum": _train(root / "pendulum", env_id="Pendulum-v1", total_timesteps=128)}


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the CartPole run to change."""
    return Path(shutil.copytree(trained["cartpole"], tmp_path / "run", symlinks=True))


def _rows(run_dir: Path) -> list:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(r["iteration"]) for r in csv.DictReader(f)]


def _settings(path: Path) -> list:
    """config.yaml's lines but run_dir, which a resume sets to where the (copied) run now is."""
    return [ln for ln in path.read_text().splitlines() if not ln.startswith("run_dir:")]


def _notes(err: str, needle: str) -> list:
    return [ln for ln in err.splitlines() if ln.startswith("proxima: note: ") and needle in ln]


# ------------------------------------------------------------------------------------ 1. another run's checkpoint
def test_another_runs_checkpoint_in_checkpoints_is_refused_naming_both_envs_and_the_file(run, trained, capsys):
    foreign = run / "checkpoints" / "step_000000000512.pt"  # the newest, as the reviewer's copy was
    shutil.copy(ckpt.list_checkpoints(trained["pendulum"])[-1], foreign)
    before = snapshot(run)
    for argv in (["resume", str(run), "--total-timesteps", "576"],
                 ["resume", str(foreign), "--total-timesteps", "576"],  # named by path: it would rewrite the run too
                 ["train", "--resume", str(run), "--dry-run"]):
        code, _, err = run_main(argv, capsys)
        line = error_line(code, err, f"{foreign}: records env_id 'Pendulum-v1' where {run / 'config.yaml'} says "
                          "'CartPole-v1': not this run's checkpoint; move it out of", "--run-dir NEW_DIR",
                          "set env_id back to 'Pendulum-v1'")
        assert line.startswith(f"proxima {argv[0]}: error: "), line
    assert snapshot(run) == before  # config.yaml, metrics.csv and the checkpoints as they were

    foreign.unlink()  # as the line says: the run resumes from its own newest checkpoint
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "448"], capsys)
    assert code == 0, err
    assert _rows(run) == [1, 2, 3, 4, 5, 6, 7]


def test_a_seed_or_size_other_than_config_yaml_is_refused_too(run, capsys):
    path = ckpt.list_checkpoints(run)[-1]
    state = torch.load(path, weights_only=True)
    state["config"]["seed"] = 7
    torch.save(state, path)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "448"], capsys)
    error_line(code, err, f"{path}: records seed 7 where {run / 'config.yaml'} says 1: not this run's checkpoint")


def test_a_metrics_csv_that_ends_before_the_checkpoint_gets_a_note_naming_the_missing_iterations(run, capsys):
    lines = (run / "metrics.csv").read_text().splitlines(keepends=True)
    (run / "metrics.csv").write_text("".join(lines[:3]))  # the header and iterations 1-2: rows 3-6 lost
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "448"], capsys)
    assert code == 0, err
    notes = _notes(err, "metrics.csv ends at iteration 2")
    assert notes == [f"proxima: note: {run / 'metrics.csv'} ends at iteration 2 (step 128), the checkpoint "
                     f"{run / 'checkpoints' / 'step_000000000384.pt'} is at iteration 6 (step 384): iterations 3-6 are "
                     "missing from it (rows lost); the run logs on from iteration 7"], err
    assert _rows(run) == [1, 2, 7]


def test_a_whole_metrics_csv_gets_no_note(run, capsys):
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "448"], capsys)
    assert code == 0, err
    assert not _notes(err, "metrics.csv"), err


# ------------------------------------------------------------------------------------ 2. a damaged newest checkpoint that unpickles
def _next_obs_of_another_shape(state):
    state["next_obs"] = torch.zeros(2, 5)


EDITS = {
    "counters": (lambda s: s.update(iteration=3), "global_step 384 does not match iteration 3"),
    "next_obs": (_next_obs_of_another_shape, "next_obs is a float32 tensor of shape (2, 5); its num_envs (2) and "
                 "spaces.observation give float32 (2, 4)"),
    "hidden_sizes": (lambda s: s["config"].update(hidden_sizes=[32, 32]), "weights do not match the recorded config "
                     "(agent.critic.0.weight has shape (64, 4), the recorded config.hidden_sizes and spaces give (32, 4))"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_newest_checkpoint_falls_back_in_a_run_directory_and_is_refused_named(run, capsys, edit):
    change, why = EDITS[edit]
    newest = ckpt.list_checkpoints(run)[-1]
    state = torch.load(newest, weights_only=True)
    change(state)
    torch.save(state, newest)

    code, _, err = run_main(["resume", str(newest)], capsys)  # named: no fallback, the file's own line
    error_line(code, err, f"{newest}: {why.split(';')[0]}")
    assert newest.is_file()

    code, _, err = run_main(["resume", str(run)], capsys)
    assert code == 0, err
    previous = run / "checkpoints" / "step_000000000256.pt"
    notes = _notes(err, "is unusable")
    assert len(notes) == 1 and notes[0].startswith(f"proxima: note: {newest} is unusable ({why}"), err
    assert notes[0].endswith(f"; resuming from {previous} instead (the bad file is kept as step_000000000384.pt.corrupt)")
    assert (run / "checkpoints" / "step_000000000384.pt.corrupt").is_file()
    assert ckpt.load_checkpoint(run)["global_step"] == 384  # trained on from 256 to the end again
    code, _, err = run_main(["resume", str(run)], capsys)  # and later resumes do not fail on it
    assert code == 0 and "the run is complete" in err, err


# ------------------------------------------------------------------------------------ 3. an env whose spaces changed
SIZED_ENV = '''
import os

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Sized(gym.Env):
    """Observations of FIX25_OBS values (read when the env is made): a user's env that changed."""

    def __init__(self):
        n = int(os.environ.get("FIX25_OBS", "3"))
        self.observation_space = spaces.Box(-1.0, 1.0, (n,), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(self.observation_space.shape, np.float32), float(action), False, self.t >= 8, {}
'''


def test_an_env_whose_observations_changed_is_named_not_the_checkpoint(tmp_path, monkeypatch, capsys):
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "fix25_sized_env.py").write_text(SIZED_ENV)
    monkeypatch.syspath_prepend(str(mods))
    monkeypatch.delitem(sys.modules, "fix25_sized_env", raising=False)
    monkeypatch.setenv("FIX25_OBS", "3")
    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", "fix25_sized_env:Sized", "--total-timesteps", "64", "--num-envs", "2", "--num-steps",
                             "32", "--threads", "1", "--no-progress", "--eval-episodes", "0", "--run-dir", str(run_dir)], capsys)
    assert code == 0, err
    monkeypatch.setenv("FIX25_OBS", "5")
    code, _, err = run_main(["resume", str(run_dir), "--env", "fix25_sized_env:Sized", "--total-timesteps", "128"], capsys)
    error_line(code, err, f"{run_dir / 'checkpoints' / 'step_000000000064.pt'}: env 'fix25_sized_env:Sized' now observes "
               "(5,), the run was trained on (3,); resume it with the env it was trained on")
    assert "weights do not match" not in err


def test_an_edited_observation_space_is_the_checkpoints_fault(run, capsys):
    newest = ckpt.list_checkpoints(run)[-1]
    state = torch.load(newest, weights_only=True)
    obs = state["spaces"]["observation"]
    obs.update(shape=[5], low=torch.full((5,), -1.0, dtype=torch.float64), high=torch.full((5,), 1.0, dtype=torch.float64))
    torch.save(state, newest)
    why = ("weights do not match the recorded config (agent.critic.0.weight has shape (64, 4), the recorded "
           "config.hidden_sizes and spaces give (64, 5))")
    code, _, err = run_main(["resume", str(newest), "--total-timesteps", "448"], capsys)
    error_line(code, err, f"{newest}: {why}")  # as eval refuses it, the file named (it was accepted)
    code, _, err = run_main(["resume", str(run)], capsys)
    assert code == 0 and f"{newest} is unusable ({why})" in err, err


# ------------------------------------------------------------------------------------ 4. checkpoints that are gone
@pytest.mark.parametrize("removed", ["checkpoints folder", "step files", "all but best.pt"])
def test_a_run_whose_checkpoints_were_removed_is_not_said_to_have_stopped_before_its_first(run, capsys, removed):
    folder = run / "checkpoints"
    if removed == "all but best.pt":
        shutil.copy(folder / "step_000000000384.pt", folder / "best.pt")
    if removed == "checkpoints folder":
        shutil.rmtree(folder)
    else:
        for p in ckpt.list_checkpoints(run):
            p.unlink()
    for command in ("resume", "eval"):
        code, _, err = run_main([command, str(run)], capsys)
        line = error_line(code, err, f"{run}: its checkpoints are missing (metrics.csv logs 6 iteration(s), to step 384",
                          f"put them back in {folder} to evaluate or resume it, if there are any, or ")
        # rows alone also follow a save that failed (its run said no checkpoint was written): not "removed or moved"
        assert ("removed or moved)" in line) == (removed == "all but best.pt"), line
        assert "before its first checkpoint" not in line
    if removed != "all but best.pt":
        assert line.endswith(f"train it again from the start: proxima train --config {run / 'config.yaml'} --resume auto "
                             "(its files are moved aside)"), line
        return
    best = f"proxima resume {folder / 'best.pt'}"
    assert ", and checkpoints/best.pt is there" in line and f"resume from its best.pt: {best} (proxima eval" in line, line
    code, _, err = run_main(shlex.split(best)[1:] + ["--total-timesteps", "448"], capsys)  # the command it names works
    assert code == 0, err
    assert _rows(run) == [1, 2, 3, 4, 5, 6, 7]


def test_rows_before_the_first_checkpoint_still_read_as_a_run_that_stopped_before_it(run, capsys):
    """A kill before the first checkpoint leaves rows too: only rows at or past a due checkpoint show one was written."""
    shutil.rmtree(run / "checkpoints")
    lines = (run / "metrics.csv").read_text().splitlines(keepends=True)
    (run / "metrics.csv").write_text("".join(lines[:2]))  # iteration 1 of a run that checkpoints every 2
    code, _, err = run_main(["resume", str(run)], capsys)
    error_line(code, err, f"{run}: the run stopped before its first checkpoint")


# ------------------------------------------------------------------------------------ 5. the recovery command's note
def test_train_config_resume_auto_of_a_runs_own_config_yaml_notes_no_compile_mode(run, capsys):
    code, _, err = run_main(["train", "--config", str(run / "config.yaml"), "--resume", "auto", "--total-timesteps", "448"],
                            capsys)
    assert code == 0, err
    assert "--compile-mode" not in err, err
    code, _, err = run_main(["resume", str(run), "--compile-mode", "max-autotune"], capsys)  # a mode that is dropped: still noted
    assert code == 0 and "proxima: note: --compile-mode max-autotune has no effect without --compile" in err, err


# ------------------------------------------------------------------------------------ 6. an edited config.yaml
def test_an_edited_config_yaml_gets_a_note_naming_the_field_and_the_flag_and_is_rewritten(run, capsys):
    path = run / "config.yaml"
    original = _settings(path)
    path.write_text(path.read_text().replace("total_timesteps: 384", "total_timesteps: 8192").replace("lr: 0.00025", "lr: 0.001"))
    code, _, err = run_main(["resume", str(run)], capsys)
    assert code == 0, err
    assert _notes(err, str(path)) == [
        f"proxima: note: {path}: total_timesteps 8192 (and lr) differs from the checkpoint's 384; resume reads the config "
        "from the checkpoint, not config.yaml, and rewrites config.yaml from it; give it as a flag: proxima resume "
        f"{run} --total-timesteps 8192"], err
    assert _settings(path) == original

    path.write_text(path.read_text().replace("total_timesteps: 384", "total_timesteps: 448"))  # the same value typed: nothing to say
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "448"], capsys)
    assert code == 0 and not _notes(err, str(path)), err


def test_an_unparseable_config_yaml_gets_a_note_that_it_is_not_read(run, capsys):
    path = run / "config.yaml"
    original = _settings(path)
    path.write_text("env_id: [CartPole-v1\n")
    code, _, err = run_main(["resume", str(run)], capsys)
    assert code == 0, err
    notes = _notes(err, str(path))
    assert len(notes) == 1 and notes[0].startswith(f"proxima: note: {path}: not valid YAML at line ") and notes[0].endswith(
        f"; resume does not read it (the config is the checkpoint's, changed by flags: proxima resume {run} "
        "--total-timesteps N) and rewrites it"), err
    assert _settings(path) == original
