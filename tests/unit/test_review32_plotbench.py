"""Review 32: what plot, report, bench, the CLI's argv mending and benchmarks/tables promise, each
asserted where a mutation left it untested: curve order and ends, argument refusals, table cells."""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from proxima import bench, cli
from proxima.plot import PlotError, aggregate, load_curve, plot_runs, population_curves, read_metrics
from proxima.report import _planned_steps, _value, summarize
from tests.cli_helpers import error_line, fake_run_dir, run_main

ROOT = Path(__file__).resolve().parents[2]


def _tables():
    """benchmarks/tables.py of this checkout, under a name of its own (the scripts import it as ``tables``)."""
    spec = importlib.util.spec_from_file_location("review32_tables", ROOT / "benchmarks" / "tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tables = _tables()


# ------------------------------------------------------------------------------------ plot
def test_rows_merged_out_of_order_are_drawn_in_step_order(tmp_path):
    run = fake_run_dir(tmp_path, "run", steps=(384, 512, 128, 256), returns=(3.0, 4.0, 1.0, 2.0))
    x, y = load_curve(run, "charts/episodic_return")  # as written (the default rebuilds the rolling one)
    np.testing.assert_array_equal(x, [128, 256, 384, 512])
    np.testing.assert_array_equal(y, [1.0, 2.0, 3.0, 4.0])  # each return stays with its own row's step


def _population(run: Path, returns, steps) -> Path:
    """A one-setting population by hand: a member per row of ``returns`` (NaN: an iteration with no episode)."""
    entries = []
    for seed, member in enumerate(returns, start=1):
        name = f"m{len(entries):03d}-seed{seed}"
        fake_run_dir(run, name, steps, ["" if np.isnan(r) else repr(float(r)) for r in member], seed=seed)
        entries.append({"dir": name, "seed": seed, "settings": {}})
    (run / "population.json").write_text(json.dumps({"kind": "ppo-population", "env_id": "Fake-v0",
                                                     "members": len(entries), "member_dirs": entries}))
    return run


def test_a_setting_curve_ends_at_the_last_logged_step_even_without_an_episode_there(tmp_path):
    nan = float("nan")
    run = _population(tmp_path / "P", [[1.0, 2.0, nan, nan], [3.0, 4.0, nan, nan]], [100, 200, 300, 400])
    _, _, [curve] = population_curves(run, "charts/episodic_return", stat="mean")
    # the members trained to step 400: their last returns are carried there, not cut at step 200
    assert (curve.x[0], curve.y[0]) == (100.0, 2.0)
    assert (curve.x[-1], curve.y[-1]) == (400.0, 3.0)  # the mean of (2, 4), the members' last returns


def test_plot_refuses_smooth_0_and_writes_nothing(tmp_path):
    run = fake_run_dir(tmp_path, "run")
    out = tmp_path / "curve.png"
    with pytest.raises(PlotError, match=r"^--smooth 0: must be at least 1$"):
        plot_runs([run], out, smooth=0)
    assert not out.exists()


def test_aggregate_grid_spans_the_longest_runs_points():
    x1 = np.linspace(0.0, 49.0, 50)
    x0 = x1[:3]
    agg = aggregate([(x0, x0 * 2), (x1, x1 * 2)])
    assert len(agg["x"]) == 50  # not 3: the short run does not coarsen the long one's curve
    np.testing.assert_allclose(agg["x"], x1)
    np.testing.assert_allclose(agg["y"], x1 * 2)


def test_a_header_the_csv_module_refuses_is_named_as_the_header(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    long_name = "x" * (csv.field_size_limit() + 1)
    (d / "metrics.csv").write_text(f"iteration,global_step,{long_name}\n1,100,1.0\n2,200,2.0\n")
    with pytest.raises(PlotError, match=r"line 1, the header, is not CSV: field larger than field limit"):
        read_metrics(d)


# ------------------------------------------------------------------------------------ report
def test_a_loss_has_max_and_min_but_no_best():
    s = summarize({"global_step": np.array([1.0, 2.0]), "losses/value_loss": np.array([3.0, 1.0])}, "losses/value_loss")
    assert s["best"] is None and s["best_step"] is None
    assert (s["max"], s["min"]) == (3.0, 1.0)


def test_planned_steps_count_whole_iterations_of_every_process():
    config = {"total_timesteps": 1000, "num_envs": 4, "num_steps": 128}
    assert _planned_steps(config, {"world_size": 2}) == 0  # one iteration of 2 x 4 x 128 = 1,024 steps is past 1,000
    assert _planned_steps(config, {}) == 512
    assert _planned_steps({**config, "total_timesteps": 2600}, {"world_size": 2}) == 2048


def test_report_refuses_negative_episodes(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "run")
    code, _, err = run_main(["report", str(run), "--episodes", "-1"], capsys)
    error_line(code, err, "--episodes -1: must be 0 or more")
    assert not (run / "report.md").exists()


def test_report_refuses_an_infinite_threshold(tmp_path, capsys):
    code, _, err = run_main(["report", str(tmp_path), "--threshold", "inf"], capsys)
    error_line(code, err, "--threshold inf: must be a finite return")


def test_small_values_keep_three_significant_digits():
    assert _value(0.004) == "0.004"
    assert _value(-0.01234) == "-0.0123"
    assert _value(0.5) == "0.50"
    assert _value(0.0) == "0.00"


def test_eval_best_steps_name_every_step_that_reached_the_best():
    s = summarize({"global_step": np.array([1.0, 2.0, 3.0]), "eval/mean_return": np.array([5.0, 9.0, 9.0])})
    assert s["eval_best"] == 9.0 and s["eval_best_step"] == 2.0
    assert s["eval_best_steps"] == [2.0, 3.0]


def test_no_throughput_without_a_positive_time():
    steps = np.array([100.0, 200.0])
    no_time = summarize({"global_step": steps})
    zero_time = summarize({"global_step": steps, "time": np.array([0.0, 0.0])})
    assert "sps" not in no_time and "sps" not in zero_time
    assert no_time["global_step"] == zero_time["global_step"] == 200.0
    assert summarize({"global_step": steps, "time": np.array([1.0, 4.0])})["sps"] == 50.0


# ------------------------------------------------------------------------------------ bench
def test_train_x_gym_is_native_over_gymnasium():
    rows = bench.table_rows([bench.Line("native", 8, samples={"train": [200.0]}),
                             bench.Line("gymnasium", 8, samples={"train": [100.0]})])
    assert rows[0][-1] == "2.0x"
    assert rows[1][-1] == ""


def test_json_line_records_the_threads_asked():
    args = argparse.Namespace(env_id="CartPole-v1", threads=2, repeats=3, preset=None, train_only=False)
    cfg = SimpleNamespace(num_steps=16, update_epochs=1, num_minibatches=2, compile=False, cudagraphs=False, amp="none",
                          vector="sync", hidden_sizes=[64, 64], encoder="auto")
    d = bench.json_line(bench.Line("native", 4, samples={"train": [10.0]}), args, cfg, "cpu")
    assert d["threads"] == 2 and d["repeats"] == 3


def _bench_args(*flags):
    return cli.build_parser().parse_args(["bench", "CartPole-v1", "--num-envs", "4", *flags])


def test_bench_refuses_more_than_max_repeats():
    problem = bench.arguments_problem(_bench_args("--repeats", str(bench.MAX_REPEATS + 1)))
    assert problem == "--repeats 101: must be at most 100 (timed repeats of each measurement)"


def test_bench_refuses_a_negative_max_gym_envs():
    assert bench.arguments_problem(_bench_args("--max-gym-envs", "-1")) == "--max-gym-envs -1: must be 0 or more"


def test_gymnasium_at_exactly_max_gym_envs_is_measured(monkeypatch, capsys):
    import torch

    measured = []

    def fake_lines(args, backends, num_envs):
        measured.extend((backend, num_envs) for backend in backends)
        return [(bench.Line(backend, num_envs, samples={"env": [30.0], "rollout": [20.0], "train": [10.0]}), None, "cpu")
                for backend in backends]

    monkeypatch.setattr(bench, "bench_lines", fake_lines)
    threads = torch.get_num_threads()
    try:
        code, out, err = run_main(["bench", "CartPole-v1", "--num-envs", "4", "--max-gym-envs", "4",
                                   "--backend", "gymnasium", "--json"], capsys)
    finally:
        torch.set_num_threads(threads)  # bench sets --threads on this process
    assert code == 0, err
    [line] = [json.loads(ln) for ln in out.splitlines()]
    assert measured == [("gymnasium", 4)]
    assert line["skipped"] is None and line["train_sps"] == 10.0


def test_both_backends_only_where_a_native_env_exists():
    assert bench.backends_for("FrozenLake-v1", "both") == ["gymnasium"]
    assert bench.backends_for("CartPole-v1", "both") == ["native", "gymnasium"]


# ------------------------------------------------------------------------------------ cli argv mending
def test_words_after_double_dash_are_not_attached_as_negative_values():
    argv = ["train", "CartPole-v1", "--", "--stop-return", "-1e3"]
    assert cli._attach_negative_numbers(cli.build_parser(), argv) == argv
    # before "--" the same words are attached, so the check above is of the stop alone
    assert cli._attach_negative_numbers(cli.build_parser(), argv[:2] + argv[3:]) == [
        "train", "CartPole-v1", "--stop-return=-1e3"]


def test_words_after_double_dash_are_not_joined_as_list_values():
    argv = ["train", "--", "--hidden-sizes", "64", "64"]
    assert cli._join_list_values(cli.build_parser(), argv) == argv
    assert cli._join_list_values(cli.build_parser(), ["train", "--hidden-sizes", "64", "64"]) == [
        "train", "--hidden-sizes=64 64"]


def test_a_list_flag_written_with_equals_takes_the_next_numbers_too():
    joined = cli._join_list_values(cli.build_parser(), ["train", "--hidden-sizes=64", "32", "CartPole-v1"])
    assert joined == ["train", "--hidden-sizes=64 32", "CartPole-v1"]


# ------------------------------------------------------------------------------------ benchmarks/tables.py
def test_an_infinite_positive_number_is_refused():
    problem = tables.arg_problem(argparse.Namespace(seconds=math.inf, out=None), positive=("seconds",))
    assert problem == "--seconds inf: must be a positive number"


def test_an_infinite_finite_number_is_refused():
    problem = tables.arg_problem(argparse.Namespace(threshold=math.inf, out=None), finite=("threshold",))
    assert problem == "--threshold inf: must be a finite number"
    assert tables.arg_problem(argparse.Namespace(threshold=475.0, out=None), finite=("threshold",)) == ""


def test_median_range_shows_the_median_not_the_mean():
    assert tables.median_range([1.0, 2.0, 9.0]) == "2.0 (1.0-9.0)"


def test_distinct_drops_repeats_in_first_order():
    assert tables.distinct([4, 1, 4]) == [4, 1]
