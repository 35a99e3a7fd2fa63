"""Checkpoints and run directories from someone else are data: a resume writes only the run directory
whose checkpoints/ holds the file, never through a planted link; a checkpoint's counters, RNG and env
state, weights and config are checked before they are used (one line naming the file and the field,
exit 2, nothing written); only regular files are checkpoints."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from cli_helpers import edit_checkpoint, one_error_line, run_main, snapshot
from proxima import checkpoint as ckpt

SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "128",
         "--eval-episodes", "2", "--threads", "1", "--no-progress", "--quiet"]
MORE = ["--total-timesteps", "192", "--quiet"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    from proxima import cli

    run_dir = tmp_path_factory.mktemp("trained") / "run"
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(run_dir), "--checkpoint-every", "1", *SMALL]) == 0
    assert len(ckpt.list_checkpoints(run_dir)) == 2
    return run_dir


@pytest.fixture
def run_dir(trained, tmp_path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run", symlinks=True))





# ------------------------------------------------------------------ a loose checkpoint file
def test_loose_checkpoint_never_writes_the_recorded_run_dir(run_dir, tmp_path, capsys):
    loose = tmp_path / "downloads" / "model.pt"
    loose.parent.mkdir()
    state = torch.load(ckpt.list_checkpoints(run_dir)[-1], weights_only=True)
    state["config"]["run_dir"] = str(run_dir)  # the run it was copied from
    torch.save(state, loose)
    before = snapshot(run_dir)
    code, _, err = run_main(["train", "--resume", str(loose), *MORE], capsys)
    assert code == 2
    assert one_error_line(err, "proxima train") == (f"{loose}: a checkpoint file outside a run's checkpoints/ folder; give "
                                                    "--run-dir DIR (a new or empty directory) for the run it continues")
    new = tmp_path / "new"
    code, _, err = run_main(["train", "--resume", str(loose), "--run-dir", str(new), *MORE], capsys)
    assert code == 0, err
    assert snapshot(run_dir) == before  # the recorded run is untouched
    assert [p.name for p in ckpt.list_checkpoints(new)] == ["step_000000000192.pt"]
    assert f"run_dir: {new}" in (new / "config.yaml").read_text()
    meta = json.loads((new / "meta.json").read_text())  # the new run's own record: how it was started
    assert meta["kind"] == "ppo" and meta["versions"]["torch"] == torch.__version__
    # a non-empty --run-dir is refused as for a new run
    code, _, err = run_main(["train", "--resume", str(loose), "--run-dir", str(run_dir), *MORE], capsys)
    assert code == 2 and "is not empty" in one_error_line(err, "proxima train")
    assert snapshot(run_dir) == before


# ------------------------------------------------------------------ links planted in the run
def test_eval_json_link_is_replaced_not_followed(run_dir, tmp_path, capsys):
    from proxima import trainer as trainer_mod

    victim = tmp_path / "victim"
    victim.write_text("PRECIOUS")
    (run_dir / "eval.json").unlink()
    os.symlink(victim, run_dir / "eval.json")
    # the write itself: replaces the link, never the file it points to
    from proxima.atomic import write_atomic

    write_atomic(run_dir / "eval.json", "{}")
    assert victim.read_text() == "PRECIOUS" and not (run_dir / "eval.json").is_symlink()
    assert trainer_mod  # imported for its finish_run (covered by the resume tests below)


def test_prune_refuses_a_checkpoints_link_out_of_the_run(run_dir, tmp_path):
    other = Path(shutil.copytree(run_dir, tmp_path / "other"))
    shutil.rmtree(run_dir / "checkpoints")
    os.symlink(other / "checkpoints", run_dir / "checkpoints")
    before = snapshot(other)
    with pytest.raises(ckpt.CheckpointError, match="outside the run directory"):
        ckpt.prune_checkpoints(run_dir, 1)
    assert snapshot(other) == before


def test_checkpoint_temp_name_link_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("PRECIOUS")
    (tmp_path / "checkpoints").mkdir()
    for pid in range(os.getpid() - 2, os.getpid() + 3):  # the names an older writer used
        os.symlink(victim, tmp_path / "checkpoints" / f".step_000000000064.pt.{pid}.tmp")
    ckpt.atomic_torch_save({"x": torch.zeros(2)}, ckpt.checkpoint_path(tmp_path, 64))
    assert victim.read_text() == "PRECIOUS"


# ------------------------------------------------------------------ counters, RNG, env state
BAD_FIELDS = [
    ("iteration", lambda s: s.__setitem__("iteration", "x"), "iteration is 'x', not an integer >= 0"),
    ("iteration_neg", lambda s: s.__setitem__("iteration", -3), "iteration is -3, not an integer >= 0"),
    ("global_step_nan", lambda s: s.__setitem__("global_step", float("nan")), "global_step is nan, not an integer >= 0"),
    ("global_step_neg", lambda s: s.__setitem__("global_step", -64), "global_step is -64, not an integer >= 0"),
    ("global_step_off", lambda s: s.__setitem__("global_step", 64),
     "global_step 64 does not match iteration 2 (each iteration trains num_envs x num_steps x processes = 64 steps); "
     "the checkpoint is damaged or was edited"),
    ("world_size", lambda s: s.__setitem__("world_size", "2"), "world_size is '2', not an integer >= 1"),
    ("elapsed", lambda s: s.__setitem__("elapsed", "x"), "elapsed is 'x', not a number of seconds >= 0"),
    ("next_obs_missing", lambda s: s.pop("next_obs"), "incomplete checkpoint (missing 'next_obs')"),
    ("next_obs_bcast", lambda s: s.__setitem__("next_obs", torch.zeros(4)),
     # named, the file is checked against itself before anything is set aside (load_resumable's load_sound)
     "next_obs is a float32 tensor of shape (4,); its num_envs (4) and spaces.observation give float32 (4, 4); "
     "the checkpoint is damaged or was edited"),
    ("env_elapsed", lambda s: s["env"].__setitem__("elapsed", torch.zeros(3)), "env.elapsed is a"),
    ("env_generator", lambda s: s["env"].__setitem__("generator", torch.zeros(5, dtype=torch.uint8)),
     "env.generator is a uint8 tensor of shape (5,)"),
    ("rng_python", lambda s: s["rng"].__setitem__("python", (1, 2)), "rng is not a recorded RNG state ("),
    ("rng_numpy", lambda s: s["rng"].__setitem__("numpy", [1]), "rng is not a recorded RNG state ("),
    ("rng_torch", lambda s: s["rng"].__setitem__("torch", torch.zeros(3, dtype=torch.uint8)), "rng is not a recorded RNG state ("),
    ("nan_weights", lambda s: s["agent"]["actor.0.weight"].fill_(float("nan")),
     "agent.actor.0.weight holds 256 non-finite value(s) (NaN or inf) of 256"),
]
#: refused when the file is loaded or checked against itself (load_sound: counters, next_obs): a run directory's
#: resume sets that file aside and continues from the one before (newest_that_loads), so these resume the file itself
WHOLE_FILE = {"nan_weights", "iteration", "iteration_neg", "global_step_nan", "global_step_neg", "global_step_off",
              "world_size", "elapsed", "next_obs_bcast"}


@pytest.mark.parametrize("name,edit,expected", BAD_FIELDS, ids=[b[0] for b in BAD_FIELDS])
def test_resume_refuses_a_bad_field(run_dir, capsys, name, edit, expected):
    path = edit_checkpoint(run_dir, edit)
    before = snapshot(run_dir)
    code, _, err = run_main(["resume", str(path if name in WHOLE_FILE else run_dir), *MORE], capsys)
    assert code == 2
    line = one_error_line(err, "proxima resume")
    assert line.startswith(f"{path}: {expected}"), line
    assert snapshot(run_dir) == before


# ------------------------------------------------------------------ weights and config before allocation
EVAL_BAD = [
    ("space_overflow", lambda s: s["spaces"].__setitem__("action", {"type": "Discrete", "n": 10**30}),
     "spaces.action: not a recorded space ('n' is 1000000000000000000000000000000, not an integer >= 1 of at most 2,147,483,647)"),
    ("hidden_bigint", lambda s: s["config"].__setitem__("hidden_sizes", [10**30]), "config.hidden_sizes is [1"),
    ("hidden_20k", lambda s: s["config"].__setitem__("hidden_sizes", [20000, 20000]),
     "weights do not match the recorded config (agent.critic.0.weight has shape (64, 4), the recorded config.hidden_sizes "
     "and spaces give (20000, 4))"),
    ("seed_huge", lambda s: s["config"].__setitem__("seed", 10**30), "config.seed is 1000000000000000000000000000000, not an integer"),
    ("nan_normalizer", lambda s: s.__setitem__("obs_normalizer", {"mean": torch.full((4,), float("inf"))}),
     "obs_normalizer.mean holds 4 non-finite value(s)"),
]


@pytest.mark.parametrize("name,edit,expected", EVAL_BAD, ids=[b[0] for b in EVAL_BAD])
def test_eval_refuses_before_building(run_dir, capsys, name, edit, expected):
    path = edit_checkpoint(run_dir, edit)
    code, _, err = run_main(["eval", str(run_dir), "--episodes", "1"], capsys)
    assert code == 2
    line = one_error_line(err, "proxima eval")
    assert line.startswith(f"{path}: {expected}"), line


# ------------------------------------------------------------------ not regular files
def test_fifo_named_like_a_checkpoint_is_skipped(run_dir, capsys):
    fifo = run_dir / "checkpoints" / "step_000000099999.pt"
    os.mkfifo(fifo)
    assert fifo not in ckpt.list_checkpoints(run_dir)
    code, out, err = run_main(["eval", str(run_dir), "--episodes", "1"], capsys)  # would block forever on open()
    assert code == 0, err
    with pytest.raises(ckpt.CheckpointError, match="is a FIFO"):
        ckpt.load_checkpoint(fifo)


def test_dangling_link_and_directory_are_named_as_such(run_dir, capsys):
    for p in ckpt.list_checkpoints(run_dir):
        p.unlink()
    link = run_dir / "checkpoints" / "step_000000000128.pt"
    os.symlink("/nonexistent/x.pt", link)
    code, _, err = run_main(["eval", str(run_dir)], capsys)
    assert code == 2
    assert one_error_line(err, "proxima eval") == (f"{link}: is a symbolic link to /nonexistent/x.pt, which does not exist; "
                                                   f"{run_dir} has no checkpoint file to load")
    link.unlink()
    link.mkdir()
    code, _, err = run_main(["resume", str(run_dir), *MORE], capsys)
    assert code == 2
    assert one_error_line(err, "proxima resume") == (f"{link}: is a directory, not a checkpoint file; "
                                                     f"{run_dir} has no checkpoint file to load")


def test_stale_best_temp_files_are_removed(run_dir, capsys):
    folder = run_dir / "checkpoints"
    (folder / ".best.pt.99999.tmp").write_bytes(b"x" * 100)
    (folder / ".step_000000000999.pt.99999.tmp").write_bytes(b"x" * 100)
    code, _, err = run_main(["resume", str(run_dir), *MORE], capsys)
    assert code == 0, err
    assert not list(folder.glob(".*.tmp"))


# ------------------------------------------------------------------ eval.json and older checkpoints
def test_eval_json_records_its_step_and_a_resume_drops_the_stale_one(run_dir, capsys):
    assert json.loads((run_dir / "eval.json").read_text())["global_step"] == 128
    # a resume that trains and then fails before its end: the earlier final evaluation is gone
    code, _, err = run_main(["resume", str(run_dir), "--total-timesteps", "192", "--eval-episodes", "0", "--quiet"], capsys)
    assert code == 0, err
    assert not (run_dir / "eval.json").exists()
    code, _, err = run_main(["resume", str(run_dir), "--total-timesteps", "256", "--eval-episodes", "2", "--quiet"], capsys)
    assert code == 0, err
    assert json.loads((run_dir / "eval.json").read_text())["global_step"] == 256


def test_resume_from_an_older_checkpoint_sets_the_newer_aside(run_dir, capsys):
    older, newer = ckpt.list_checkpoints(run_dir)
    code, _, err = run_main(["train", "--resume", str(older), "--total-timesteps", "192", "--keep-checkpoints", "2",
                             "--quiet"], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "newer one(s)" in line]
    assert len(notes) == 1 and notes[0].startswith("proxima: note: resuming from step_000000000064.pt"), err
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step_000000000128.pt", "step_000000000192.pt"]
    aside = list((run_dir / "checkpoints").glob("abandoned-*/step_000000000128.pt"))
    assert len(aside) == 1  # the abandoned timeline's checkpoint is kept, out of the way
    steps = [line.split(",")[1] for line in (run_dir / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == ["64", "128", "192"]
