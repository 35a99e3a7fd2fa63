"""Checkpoint fields a reviewer found unchecked: a tensor stored as a view larger than its data (a
150 KB file that asks for 32 GB when read), a best_eval of NaN (a resumed run would never write
best.pt again), and the population a member's checkpoint points to when the population was trained
from a relative --run-dir or has been moved. Each is one line naming the file and the field (exit 2),
or, for the population, the directory that holds the member now."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from cli_helpers import edit_checkpoint, error_line, run_main
from proxima import checkpoint as ckpt
from proxima import cli, train_state

#: 4 envs x 16 steps = 64 steps an iteration; 2 iterations, a checkpoint each
SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "128",
         "--checkpoint-every", "1", "--eval-episodes", "0", "--threads", "1", "--no-progress", "--quiet"]
POP = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "64",
       "--eval-episodes", "0", "--threads", "1", "--no-progress", "--quiet"]
#: 2**33 elements: 32 GB of float32 (64 GB of float64) were any check to read the view whole
HUGE = 2**33


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(run_dir), "--norm-obs", *SMALL]) == 0
    return run_dir


@pytest.fixture
def run_dir(trained, tmp_path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


# ------------------------------------------------------------------ 1. views larger than their data
def _expand(like: torch.Tensor, *shape) -> torch.Tensor:
    """One element of ``like``'s dtype seen as ``shape`` (stride 0): what torch.save stores as one value."""
    return torch.zeros(1, dtype=like.dtype).expand(*(shape or like.shape))


@pytest.mark.parametrize("field, edit", [
    # the weight's own shape: before, eval accepted it and acted with one repeated weight
    ("agent.critic.0.weight", lambda s: s["agent"].__setitem__("critic.0.weight", _expand(s["agent"]["critic.0.weight"]))),
    ("agent.critic.0.weight", lambda s: s["agent"].__setitem__("critic.0.weight", _expand(s["agent"]["critic.0.weight"], HUGE, 1))),
    ("spaces.observation.low", lambda s: s["spaces"]["observation"].update(
        low=_expand(s["spaces"]["observation"]["low"], HUGE), high=_expand(s["spaces"]["observation"]["high"], HUGE), shape=[HUGE])),
    ("obs_normalizer.rms.var", lambda s: s["obs_normalizer"].__setitem__("rms.var", _expand(s["obs_normalizer"]["rms.var"]))),
], ids=["weight-own-shape", "weight-32GB", "space-bounds-64GB", "normalizer-var"])
def test_eval_refuses_a_tensor_that_is_a_view_larger_than_its_data(run_dir, capsys, field, edit):
    if field.startswith("obs_normalizer"):
        keys = torch.load(ckpt.list_checkpoints(run_dir)[-1], weights_only=True)["obs_normalizer"]
        assert "rms.var" in keys, sorted(keys)
    path = edit_checkpoint(run_dir, edit)
    assert path.stat().st_size < 1_000_000  # the file stays small: it stores one value for the view
    code, _, err = run_main(["eval", str(run_dir), "--episodes", "1"], capsys)
    line = error_line(code, err, str(path), f"{field} is a view larger than its data")
    assert "Traceback" not in err and "allocate" not in line


def test_resume_names_the_key_path_of_a_view_in_the_optimizer_state_and_keeps_partial_views(run_dir, capsys):
    first, newest = ckpt.list_checkpoints(run_dir)
    # a view of part of a larger storage holds no more than the file stores: still a checkpoint
    state = torch.load(first, weights_only=True)
    w = state["agent"]["actor.0.weight"]
    state["agent"]["actor.0.weight"] = torch.cat([w.reshape(-1), torch.zeros(7)])[: w.numel()].view(w.shape)
    # and a transposed one (not contiguous) spans exactly its storage: no larger than its data either
    state["agent"]["critic.0.weight"] = state["agent"]["critic.0.weight"].t().contiguous().t()
    torch.save(state, first)
    loaded = ckpt.load_checkpoint(first)["agent"]
    assert torch.equal(loaded["actor.0.weight"], w) and not loaded["critic.0.weight"].is_contiguous()

    def edit(s):
        exp_avg = s["optimizer"]["state"][0]["exp_avg"]
        s["optimizer"]["state"][0]["exp_avg"] = _expand(exp_avg)

    edit_checkpoint(run_dir, edit)
    code, _, err = run_main(["resume", str(newest), "--total-timesteps", "192"], capsys)
    error_line(code, err, f"{newest}: optimizer.state.0.exp_avg is a view larger than its data")


# ------------------------------------------------------------------ 2. best_eval NaN
@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_resume_refuses_a_non_finite_best_eval(run_dir, capsys, value):
    path = edit_checkpoint(run_dir, lambda s: s.__setitem__("best_eval", value))
    code, _, err = run_main(["resume", str(path), "--total-timesteps", "192"], capsys)
    error_line(code, err, str(path), f"best_eval is {value!r}, not a finite mean return")
    assert ckpt.list_checkpoints(run_dir)[-1] == path  # nothing trained


def test_a_best_pt_holding_nan_is_replaced_by_the_next_evaluation(run_dir):
    best = ckpt.best_checkpoint_path(run_dir)
    state = torch.load(ckpt.list_checkpoints(run_dir)[-1], weights_only=True)
    state["best_eval"] = float("nan")
    torch.save(state, best)
    # NaN read as a best would never be beaten (mean > nan is False): read as no best at all
    assert train_state.best_on_disk(run_dir) is None
    state["best_eval"] = 12.5
    torch.save(state, best)
    assert train_state.best_on_disk(run_dir) == 12.5


# ------------------------------------------------------------------ 3. a member's population, moved or relative
@pytest.fixture(scope="module")
def population(tmp_path_factory) -> Path:
    """A 2-seed population trained with a relative --run-dir (``pop``) from its parent folder."""
    where = tmp_path_factory.mktemp("population")
    cwd = os.getcwd()
    os.chdir(where)
    try:
        assert cli.main(["train", "CartPole-v1", "--seeds", "1,2", "--run-dir", "pop", *POP]) == 0
    finally:
        os.chdir(cwd)
    return where / "pop"


def _member(run: Path) -> Path:
    return run / json.loads((run / "population.json").read_text())["member_dirs"][0]["dir"]


def test_a_member_of_a_population_trained_with_a_relative_run_dir_names_its_absolute_path(population, tmp_path, capsys,
                                                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the folder it was trained from, where "pop" would mean something else
    member = _member(population)
    assert ckpt.load_checkpoint(member)["population"] == "pop"  # recorded as given
    code, _, err = run_main(["resume", str(member)], capsys)
    line = error_line(code, err, "holds its weights only")
    assert f"resume the whole population: proxima resume {population.resolve()}, " in line, line


def test_a_member_of_a_moved_population_names_where_it_is_now_and_a_copied_out_member_the_recorded_one(population, tmp_path,
                                                                                                        capsys):
    moved = Path(shutil.copytree(population, tmp_path / "moved"))
    member = _member(moved)
    newest = ckpt.list_checkpoints(member)[-1]
    for target in (member, newest):
        code, _, err = run_main(["resume", str(target)], capsys)
        line = error_line(code, err, "holds its weights only")
        assert f"resume the whole population: proxima resume {moved.resolve()}, " in line, line
    # a member copied out of its population: no population.json above it, and the recorded path ("pop") held
    # only where it was trained: the line says the population is not next to it (test_ckpt_review45.py)
    alone = Path(shutil.copytree(member, tmp_path / "alone" / member.name))
    code, _, err = run_main(["resume", str(alone)], capsys)
    assert "its population (trained with --run-dir pop) is not next to it" in error_line(code, err)
