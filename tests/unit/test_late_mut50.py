"""Mutation-testing kills for c443b4a/c302070 (ppo.monitor_terms), ac8a8d4 (distributed._comparable),
7a64b52 (population_report schedule arithmetic, _trainable_total), 935db74 (plot.json_out_problem) and
f9bdb21 (diskspace._kind_of)."""
import json
import math
import os
from pathlib import Path

import torch

from proxima.distributed import settings_differ_line
from proxima.plot import JSON_GENERATOR, json_out_problem
from proxima.population_report import _trainable_total, schedule_recomputed_at
from proxima.ppo import monitor_terms


def _terms(logratio):
    logratio = torch.tensor(logratio)
    z = torch.zeros_like(logratio)
    return {"ratio": logratio.exp(), "logratio": logratio, "v_delta_clipped": z, "v_delta": z,
            "v_clipped": z, "v_unclipped": z}


def test_old_approx_kl_is_minus_logratio():
    out = monitor_terms(_terms([0.5, -0.25]), 0.2, False)
    assert torch.allclose(out["old_approx_kl"], torch.tensor([-0.5, 0.25]))
    assert torch.all(out["approx_kl"] >= 0)


# --- distributed: NaN, tuples and nested values compare as the same setting
def test_nan_against_nan_is_no_difference():
    assert settings_differ_line([{"ent_coef": math.nan}, {"ent_coef": math.nan}], python=False) is None


def test_tuple_against_same_list_is_no_difference():
    assert settings_differ_line([{"hidden_sizes": (64, 64)}, {"hidden_sizes": [64, 64]}], python=False) is None


def test_nested_nan_in_list_and_dict_is_no_difference():
    given = [{"env_kwargs": {"x": [math.nan, (1, 2)]}}, {"env_kwargs": {"x": [math.nan, [1, 2]]}}]
    assert settings_differ_line(given, python=False) is None
    assert settings_differ_line([{"hidden_sizes": [(1, math.nan)]}, {"hidden_sizes": [[1, math.nan]]}],
                                python=False) is None


def test_real_difference_still_warned():
    line = settings_differ_line([{"env_kwargs": {"x": math.nan}}, {"env_kwargs": {"x": 1.0}}], python=False)
    assert line and "--env-kwargs" in line and "rank 1" in line


# --- population_report: the learning-rate schedule check and config totals
def _member(tmp_path, rows):
    d = tmp_path / "m"
    d.mkdir()
    (d / "metrics.csv").write_text("iteration,global_step,charts/learning_rate\n"
                                   + "".join(f"{i},{s},{lr}\n" for i, s, lr in rows))
    return d


def test_schedule_fits_at_total_past_a_float(tmp_path):
    d = _member(tmp_path, [(1, 8, 0.001)])
    cfg = {"lr": 0.001, "num_envs": 1, "num_steps": 8, "anneal_lr": True}
    assert schedule_recomputed_at(d, cfg, 10 ** 400) is None


def test_schedule_iteration_i_trains_at_one_minus_i_minus_one_over_I(tmp_path):
    d = _member(tmp_path, [(1, 8, 0.001), (2, 16, 0.0005)])
    cfg = {"lr": 0.001, "num_envs": 1, "num_steps": 8, "anneal_lr": True}
    assert schedule_recomputed_at(d, cfg, 16) is None
    off = schedule_recomputed_at(d, cfg, 32)  # planned for 4 iterations: 0.00075 at iteration 2
    assert off is not None and off[0] == 16 and abs(off[2] - 0.00075) < 1e-9


def test_trainable_total_needs_one_batch():
    assert _trainable_total({"total_timesteps": 512, "num_envs": 4, "num_steps": 128})
    assert not _trainable_total({"total_timesteps": 511, "num_envs": 4, "num_steps": 128})
    assert not _trainable_total({"total_timesteps": 0, "num_envs": 4, "num_steps": 128})
    assert not _trainable_total({"total_timesteps": -5})
    assert _trainable_total({"total_timesteps": 1})


# --- plot.json_out_problem: a run's file name in a run or population directory
def _problem(path, run_dirs=()):
    return json_out_problem(Path(path), list(run_dirs), JSON_GENERATOR, "the curves' numbers", "curves.json",
                            "; give another FILE.json")


def test_earlier_export_named_meta_json_is_not_taken_for_a_run(tmp_path):
    out = tmp_path / "exports"
    out.mkdir()
    (out / "meta.json").write_text(json.dumps({"generator": JSON_GENERATOR}))
    assert _problem(out / "meta.json") is None


def test_member_of_a_population_refused(tmp_path):
    pop = tmp_path / "pop"
    pop.mkdir()
    (pop / "population.json").write_text("{}")
    line = _problem(pop / "m1" / "eval.json")
    assert line and "is a file Proxima writes in a run directory" in line


def test_member_of_a_plotted_run_dir_refused(tmp_path):
    run = tmp_path / "run"
    (run / "member").mkdir(parents=True)
    line = _problem(run / "member" / "eval.json", [run])
    assert line and "is a file Proxima writes in a run directory" in line
    assert _problem(tmp_path / "elsewhere" / "eval.json", [run]) is None


# --- diskspace: a character device is named as a device
def test_char_device_is_a_device():
    from proxima.diskspace import _kind_of

    if os.path.exists("/dev/null"):
        assert _kind_of(Path("/dev/null")) == "a device"
