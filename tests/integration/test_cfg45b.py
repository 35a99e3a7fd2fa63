"""Mutation review of s45's config, CLI and distributed commits, the parts that build an env or read a
trained run:

5. train(PPOConfig(env_id='Pendulum-v1', backend='gymnasium')) says the tuned preset it leaves out, not
   the Box-actions note of an env without presets;
6. --preset default of an env without presets: the note is advisory, --quiet drops it;
7. --preset default of CartPole-v0 (no presets, a sibling version with some): the sibling's note only;
8. --resume r7 --config r1/config.yaml: the 'not used' note is advisory, --quiet drops it;
12. `proxima resume RUN --nproc K` in a process torchrun started is refused, as train --nproc is."""

from __future__ import annotations

import shutil

import pytest

from proxima import PPOConfig, train
from tests.cli_helpers import error_line, run_main, tiny_cartpole_run

TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--total-timesteps", "32",
        "--eval-episodes", "0", "--quiet"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished one-process CartPole run (TINY_RUN, 128 steps)."""
    return tiny_cartpole_run(tmp_path_factory, "cfg45b")


# -- 5. a Gymnasium Pendulum from Python: the preset note, not the Box note -----------------------------------------

def test_python_gymnasium_pendulum_notes_its_unapplied_preset_not_box_actions_without_one(tmp_path, capsys):
    train(PPOConfig(env_id="Pendulum-v1", backend="gymnasium", total_timesteps=64, num_envs=4, num_steps=16,
                    update_epochs=1, num_minibatches=2, eval_episodes=0, progress=False, threads=1), run_dir=tmp_path / "r")
    err = capsys.readouterr().err
    assert "proxima: note: Pendulum-v1 has a tuned preset (default) that PPOConfig(...) does not apply: " in err, err
    assert "has Box actions and no preset" not in err, err  # it has one: the note above says which, and how


# -- 6. and 7. --preset default of an env without presets ------------------------------------------------------------

def test_preset_default_note_of_an_env_without_presets_is_dropped_by_quiet(capsys):
    argv = ["train", "tests.probe_envs:ConstantReward", "--preset", "default", "--total-timesteps", "1024", "--dry-run"]
    code, _, err = run_main(argv, capsys)
    assert code == 0 and "note: --preset default: tests.probe_envs:ConstantReward has no presets" in err, err
    code, _, err = run_main([*argv, "--quiet"], capsys)
    assert code == 0, err
    assert "--preset default" not in err, err  # an advisory note: --quiet drops it


def test_preset_default_of_cartpole_v0_leaves_the_note_to_its_sibling_version(capsys):
    code, _, err = run_main(["train", "CartPole-v0", "--preset", "default", "--total-timesteps", "1024", "--dry-run"], capsys)
    assert code == 0, err
    assert "--preset default:" not in err, err  # one note says it: the run's own, naming CartPole-v1's presets
    [note] = [line for line in err.splitlines() if "no preset for CartPole-v0" in line]
    assert note.startswith("proxima: note: no preset for CartPole-v0: ") and "CartPole-v1 has presets (" in note, note


# -- 8. the resume-elsewhere note under --quiet --------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """r1, a finished tiny run, and r7, a copy of it (how a run is continued elsewhere)."""
    root = tmp_path_factory.mktemp("cfg45b_elsewhere")
    from proxima import cli

    assert cli.main(["train", "CartPole-v1", *TINY, "--run-dir", str(root / "r1")]) == 0
    shutil.copytree(root / "r1", root / "r7")
    return root


def test_resume_elsewhere_note_is_dropped_by_quiet(two_runs, monkeypatch, capsys):
    monkeypatch.chdir(two_runs)
    argv = ["train", "--resume", "r7", "--config", "r1/config.yaml", "--dry-run"]
    code, _, err = run_main(argv, capsys)
    assert code == 0 and "is that run's own directory, not used" in err, err
    code, _, err = run_main([*argv, "--quiet"], capsys)
    assert code == 0, err
    assert "not used" not in err and "own directory" not in err, err


# -- 12. resume --nproc K under torchrun -------------------------------------------------------------------------

@pytest.mark.parametrize("torchrun_env", [{"TORCHELASTIC_RUN_ID": "job1"}, {"WORLD_SIZE": "1", "RANK": "0"}])
def test_resume_nproc_under_torchrun_is_refused(finished, monkeypatch, capsys, torchrun_env):
    for k, v in torchrun_env.items():
        monkeypatch.setenv(k, v)
    # --nproc 1 is the run's own count: outside torchrun it is taken (and the complete run trains nothing)
    code, out, err = run_main(["resume", str(finished), "--nproc", "1"], capsys)
    assert out == ""
    error_line(code, err, "--nproc: this process already runs under torchrun; drop --nproc (torchrun sets the process count)")
