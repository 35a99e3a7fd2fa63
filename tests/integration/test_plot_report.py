"""`proxima plot` and `proxima report`: curves of one and several runs, aggregation, errors, the report."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

import proxima
from proxima import PPOConfig
from proxima.cli import main
from proxima.logger import CSV_COLUMNS
from proxima.plot import PlotError, aggregate, load_curve, moving_average, plot_runs
from proxima.report import ReportError, build_report

PIL = pytest.importorskip("PIL.Image")
STEPS = 2048


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two short CartPole runs (seeds 1, 2): the first through `proxima train --plot`, the second via the library."""
    root = tmp_path_factory.mktemp("runs")
    first = root / "cartpole-s1"
    rc = main(["train", "CartPole-v1", "--total-timesteps", str(STEPS), "--num-envs", "4", "--num-steps", "128",
               "--eval-episodes", "2", "--seed", "1", "--no-progress", "--quiet", "--run-dir", str(first), "--plot"])
    assert rc == 0
    second, _ = proxima.train(PPOConfig(total_timesteps=STEPS, num_envs=4, num_steps=128, progress=False,
                                        eval_episodes=2, seed=2, run_dir=str(root / "cartpole-s2")), quiet=True)
    return [first, Path(second)]


def _assert_png(path: Path) -> None:
    assert path.is_file()
    with PIL.open(path) as im:
        assert im.format == "PNG"
        assert im.size[0] > 0 and im.size[1] > 0


#: what these synthetic runs' returns are logged as (the plot's default is the rolling return rebuilt from them)
PER_ITERATION = "charts/episodic_return"


def _fake_run(root: Path, name: str, steps, returns, env_id="Fake-v0", times=None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(f"env_id: {env_id}\nseed: 1\n")
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i, (s, r) in enumerate(zip(steps, returns)):
            t = times[i] if times is not None else 0.1 * (i + 1)
            w.writerow({"iteration": i + 1, "global_step": s, "time": t, "episodes": 1,
                        "charts/episodic_return": "" if r is None else r, "losses/value_loss": 1.0 / (i + 1)})
    return d


# ------------------------------------------------------------------------------------ plot
def test_train_plot_flag_writes_curve(runs):
    _assert_png(runs[0] / "curve.png")
    assert not (runs[1] / "curve.png").exists()  # --plot is off by default


def test_plot_one_and_several_runs(runs, tmp_path, capsys):
    out = tmp_path / "one.png"
    assert main(["plot", str(runs[1]), "--out", str(out)]) == 0
    _assert_png(out)
    both = tmp_path / "sub" / "both.png"
    assert main(["plot", *map(str, runs), "--out", str(both), "--x", "time", "--smooth", "3", "--band", "std"]) == 0
    _assert_png(both)
    assert plot_runs(runs, tmp_path / "loss.png", metric="losses/value_loss") == tmp_path / "loss.png"
    _assert_png(tmp_path / "loss.png")
    assert "wrote" in capsys.readouterr().out


def test_aggregate_mean_and_band_on_synthetic_runs(tmp_path):
    a = _fake_run(tmp_path, "a", [100, 200], [0.0, 10.0])
    b = _fake_run(tmp_path, "b", [100, 200], [10.0, 20.0])
    agg = aggregate([load_curve(a, PER_ITERATION), load_curve(b, PER_ITERATION)])
    np.testing.assert_allclose(agg["x"], [100, 200])
    np.testing.assert_allclose(agg["mean"], [5.0, 15.0])
    np.testing.assert_allclose(agg["lo"], [0.0, 10.0])
    np.testing.assert_allclose(agg["hi"], [10.0, 20.0])
    std = aggregate([load_curve(a, PER_ITERATION), load_curve(b, PER_ITERATION)], band="std")
    np.testing.assert_allclose(std["lo"], [5.0 - 50 ** 0.5, 15.0 - 50 ** 0.5])  # mean -+ sample std (ddof 1: 7.07)
    np.testing.assert_allclose(std["hi"], [5.0 + 50 ** 0.5, 15.0 + 50 ** 0.5])
    one = aggregate([load_curve(a, PER_ITERATION), load_curve(_fake_run(tmp_path, "a1", [100], [4.0]), PER_ITERATION)],
                    band="std")
    np.testing.assert_allclose(one["lo"], [2.0 - 8 ** 0.5, 10.0])  # past the one-row run's end a single run: no spread, no NaN
    np.testing.assert_allclose(one["hi"], [2.0 + 8 ** 0.5, 10.0])

    # different x values: the steps logged (empty cells skipped), each run's last value carried forward
    c = _fake_run(tmp_path, "c", [0, 100, 200, 300], [0.0, None, 20.0, 30.0])
    d = _fake_run(tmp_path, "d", [0, 150, 300], [10.0, 25.0, 40.0])
    agg = aggregate([load_curve(c, PER_ITERATION), load_curve(d, PER_ITERATION)])
    np.testing.assert_allclose(agg["x"], [0, 150, 200, 300])
    np.testing.assert_allclose(agg["mean"], [5.0, (0.0 + 25.0) / 2, (20.0 + 25.0) / 2, 35.0])
    np.testing.assert_allclose(agg["lo"], [0.0, 0.0, 20.0, 30.0])

    # wall-time axis and smoothing
    e = _fake_run(tmp_path, "e", [1, 2, 3], [1.0, 2.0, 6.0], times=[0.5, 1.0, 1.5])
    x, y = load_curve(e, PER_ITERATION, x="time", smooth=2)
    np.testing.assert_allclose(x, [0.5, 1.0, 1.5])
    np.testing.assert_allclose(y, [1.0, 1.5, 4.0])
    np.testing.assert_allclose(moving_average(np.array([3.0, 1.0]), 1), [3.0, 1.0])

    # grouping by env: two envs -> two panels, still one valid PNG
    other = _fake_run(tmp_path, "other", [100, 200], [1.0, 2.0], env_id="Other-v0")
    _assert_png(plot_runs([a, b, other], tmp_path / "groups.png"))


def test_plot_errors_exit_2_one_line_no_file(runs, tmp_path, capsys):
    out = tmp_path / "never.png"
    assert main(["plot", str(runs[0]), "--metric", "no_such_metric", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("proxima plot: error: unknown metric 'no_such_metric'") and "\n" not in err
    assert "losses/value_loss" in err and "charts/episodic_return" in err  # lists what is available

    assert main(["plot", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "notarun").mkdir()
    assert main(["plot", str(tmp_path / "notarun"), "--out", str(out)]) == 2
    assert "not a run directory" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.csv").write_text(",".join(CSV_COLUMNS) + "\n")
    assert main(["plot", str(empty), "--out", str(out)]) == 2
    assert "no rows" in capsys.readouterr().err
    nan_only = _fake_run(tmp_path, "nan", [1, 2], [None, None])
    assert main(["plot", str(nan_only), "--out", str(out)]) == 2
    assert "no values of charts/episodic_return" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob("*.tmp"))
    with pytest.raises(PlotError):
        plot_runs([runs[0]], out, metric="nope")


# ------------------------------------------------------------------------------------ report
def test_report_one_run(runs, capsys):
    run = runs[0]
    assert main(["report", str(run)]) == 0
    report = run / "report.md"
    text = report.read_text()
    cfg_values = {"env_id": "CartPole-v1", "total_timesteps": str(STEPS), "num_steps": "128", "seed": "1", "lr": "0.00025"}
    for field, value in cfg_values.items():
        assert re.search(rf"^\| {field} \| {re.escape(value)} \|$", text, re.M), f"config {field} missing"
    meta = json.loads((run / "meta.json").read_text())
    for pkg in ("proxima", "torch", "python", "gymnasium"):
        assert re.search(rf"^\| {pkg} \| {re.escape(meta['versions'][pkg])} \|$", text, re.M)
    ev = json.loads((run / "eval.json").read_text())
    assert f"{ev['mean_return']:.2f}" in text and "eval.json" in text
    assert "](report_curve.png)" in text
    _assert_png(run / "report_curve.png")
    assert f"| steps | {STEPS:,} |" in text
    for section in ("## Results", "## Learning curve", "## Final evaluation", "## Config", "## Versions and machine"):
        assert section in text
    assert "wrote" in capsys.readouterr().out


def test_report_evaluates_without_eval_json_and_combines_runs(runs, tmp_path):
    copy = tmp_path / "noeval"
    import shutil

    shutil.copytree(runs[1], copy)
    (copy / "eval.json").unlink()
    out = tmp_path / "reports" / "both.md"
    assert main(["report", str(runs[0]), str(copy), "--out", str(out), "--episodes", "2"]) == 0
    text = out.read_text()
    assert "evaluated now from step_" in text and "over 2 episodes" in text
    assert "](both_curve.png)" in text
    _assert_png(out.parent / "both_curve.png")
    assert "| **seed** | 1 | 2 |" in text  # differing config fields are marked
    assert not (copy / "eval.json").exists()  # the report does not change the run


def test_report_takes_eval_json_of_the_last_step_and_evaluates_anew_when_it_is_older(runs, tmp_path):
    import shutil

    from proxima.report import final_eval

    ev = json.loads((runs[0] / "eval.json").read_text())
    assert ev["global_step"] == STEPS  # the step it evaluated: the last checkpoint's
    assert final_eval(runs[0], {}, {}, episodes=2)["source"] == "eval.json (end of training)"
    copy = tmp_path / "stale"
    shutil.copytree(runs[0], copy)
    (copy / "eval.json").write_text(json.dumps({**ev, "global_step": STEPS // 2, "mean_return": -1.0}))
    fresh = final_eval(copy, {}, {}, episodes=2)  # a resumed run stopped early: its eval.json is of before
    assert fresh["source"].startswith("evaluated now from step_") and fresh["mean_return"] != -1.0


def test_report_errors(runs, tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("proxima report: error: ") and err.count("\n") == 1
    assert main(["report", *map(str, runs)]) == 2  # several runs need --out
    assert "--out" in capsys.readouterr().err
    assert main(["report", str(runs[0]), "--metric", "bogus", "--out", str(tmp_path / "r.md")]) == 2
    assert "unknown metric 'bogus'" in capsys.readouterr().err
    assert not (tmp_path / "r.md").exists()
    with pytest.raises(ReportError, match="^no run directories given$"):
        build_report([])


# ------------------------------------------------------------------------------------ groups (issue 17, item 7)
def _set_config(run_dir: Path, **fields) -> Path:
    import yaml

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**cfg, **fields}))
    return run_dir


def test_runs_are_grouped_by_env_and_settings_not_seed_or_length(tmp_path):
    from proxima.plot import group_runs

    # without lr annealing only the length differs (with it, --total-timesteps sets the lr's schedule: test_plot_grouping35)
    a1 = _set_config(_fake_run(tmp_path, "a1", [100, 200], [1.0, 2.0]), lr=0.00025, seed=1, anneal_lr=False, total_timesteps=200)
    a2 = _set_config(_fake_run(tmp_path, "a2", [100, 200, 300], [1.0, 2.0, 3.0]), lr=0.00025, seed=2, anneal_lr=False,
                     total_timesteps=300)
    fast = _set_config(_fake_run(tmp_path, "fast", [100, 200], [5.0, 6.0]), lr=0.001, seed=1, anneal_lr=False)
    other = _fake_run(tmp_path, "other", [100, 200], [1.0, 2.0], env_id="Other-v0")
    groups = group_runs([a1, fast, a2, other])
    assert groups == {"Fake-v0 (lr=0.00025)": [a1, a2], "Fake-v0 (lr=0.001)": [fast], "Other-v0": [other]}


def test_a_group_is_drawn_to_the_end_of_its_longest_run(tmp_path):
    short = _fake_run(tmp_path, "short", [100, 200, 300], [0.0, 10.0, 20.0])
    long = _fake_run(tmp_path, "long", [100, 200, 300, 400, 500, 600], [10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
    agg = aggregate([load_curve(short, PER_ITERATION), load_curve(long, PER_ITERATION)])
    assert agg["x"][0] == 100 and agg["x"][-1] == 600
    assert agg["count"][0] == 2 and agg["count"][-1] == 1
    np.testing.assert_allclose(agg["mean"][[0, -1]], [5.0, 60.0])  # past 300 only the long run counts
    np.testing.assert_allclose(agg["lo"][-1], 60.0)


def test_plot_and_report_of_mixed_directories_skip_non_ppo_runs_with_a_line(tmp_path, capsys):
    ppo_a = _fake_run(tmp_path, "a", [100, 200], [1.0, 2.0])
    ppo_b = _fake_run(tmp_path, "b", [100, 200], [3.0, 4.0])
    rlhf = tmp_path / "rlhf"
    rlhf.mkdir()
    (rlhf / "meta.json").write_text(json.dumps({"kind": "rlhf"}))
    (rlhf / "metrics.csv").write_text("step,reward\n1,0.5\n")
    (tmp_path / "notes").mkdir()
    out = tmp_path / "all.png"
    assert main(["plot", str(ppo_a), str(rlhf), str(tmp_path / "notes"), str(ppo_b), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"proxima: note: skipping {rlhf}: {rlhf}: an RLHF run (proxima rlhf), not a PPO run: its trained policy is {rlhf / 'policy'}" in err
    assert f"proxima: note: skipping {tmp_path / 'notes'}: " in err and err.count("skipping") == 2
    _assert_png(out)
    assert main(["plot", str(rlhf), str(tmp_path / "notes"), "--out", str(out)]) == 2  # nothing left to draw


def test_multi_run_report_never_averages_different_envs(tmp_path):
    dirs = []
    for name, env, ret in (("a1", "Fake-v0", 10.0), ("a2", "Fake-v0", 20.0), ("b1", "Other-v0", 500.0), ("b2", "Other-v0", 700.0)):
        d = _fake_run(tmp_path, name, [100, 200], [1.0, 2.0], env_id=env)
        (d / "eval.json").write_text(json.dumps({"env_id": env, "episodes": 2, "mean_return": ret, "std_return": 0.0,
                                                 "returns": [ret, ret], "lengths": [5, 5], "deterministic": True}))
        dirs.append(d)
    text = build_report(dirs, out=tmp_path / "r.md", episodes=0).read_text()
    assert "Final eval of Fake-v0 over 2 runs: mean 15.00, std (n-1) 7.07, min 10.00, max 20.00." in text
    assert "Final eval of Other-v0 over 2 runs: mean 600.00, std (n-1) 141.42, min 500.00, max 700.00." in text
    assert "over 4 runs" not in text


# ------------------------------------------------------------------------------------ one run named twice
def test_a_run_named_twice_is_one_run(runs, tmp_path, monkeypatch, capsys):
    from proxima.plot import collect_panels

    panels = collect_panels([runs[1], runs[1] / ".", str(runs[1])])
    assert len(panels) == 1 and len(panels[0][2]) == 1
    curve = panels[0][2][0]
    assert "runs" not in curve.label and curve.lo is None  # the run's own curve, not a "mean of 3 runs"
    monkeypatch.chdir(runs[1].parent)
    assert main(["plot", runs[1].name, f"./{runs[1].name}", "--out", str(tmp_path / "twice.png")]) == 0
    _assert_png(tmp_path / "twice.png")
    assert main(["report", str(runs[1]), str(runs[1]), "--out", str(tmp_path / "twice.md"), "--episodes", "0"]) == 0
    assert f"|  | {runs[1].name} |\n|---|---|\n" in (tmp_path / "twice.md").read_text()  # one column


# ------------------------------------------------------------------------------------ evaluate()'s default seed
def test_evaluate_defaults_to_the_seed_of_proxima_eval_and_the_runs_eval_json(runs, capsys):
    from proxima.evaluate import evaluate

    saved = json.loads((runs[0] / "eval.json").read_text())  # end of training: 2 episodes, seed 1 + 1,000,000
    result = evaluate(proxima.load(runs[0]), episodes=2)
    assert main(["eval", str(runs[0]), "--episodes", "2", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    # the CLI adds what places the numbers: the checkpoint evaluated and its step
    from proxima.checkpoint import list_checkpoints

    assert (cli.pop("global_step"), cli.pop("checkpoint")) == (2048, str(list_checkpoints(runs[0])[-1]))
    assert cli == result
    assert (result["returns"], result["lengths"]) == (saved["returns"], saved["lengths"])


def test_a_run_with_one_logged_return_is_drawn_as_a_point_with_a_note(tmp_path, monkeypatch, capsys):
    """One finished episode so far: a lone value is no visible line; it is drawn as a marker and said."""
    from matplotlib.axes import Axes

    run = _fake_run(tmp_path, "one", [512, 1024, 1536], [None, 21.0, None])
    markers = []
    real_plot = Axes.plot

    def plot(self, *args, **kwargs):
        markers.append(kwargs.get("marker"))
        return real_plot(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", plot)
    assert main(["plot", str(run), "--metric", PER_ITERATION]) == 0  # the rolling return fills every later row
    out, err = capsys.readouterr()
    assert err == ("proxima: note: Fake-v0: only one logged value of charts/episodic_return (21 at global step 1,024), drawn as "
                   "a single point; a longer run draws a curve\n")
    assert out == f"wrote {run / 'curve.png'}\n" and markers == ["o"]
    _assert_png(run / "curve.png")


def test_report_names_evaluation_episodes_cut_at_max_steps():
    from proxima.report import _eval_line

    ev = {"mean_return": 30.0, "std_return": 16.33, "episodes": 3, "deterministic": True, "unfinished": 1, "max_steps": 50}
    assert _eval_line(ev) == ("30.00 \u00b1 16.33 over 3 episodes (deterministic); 1 of them cut at 50 steps (--max-steps), "
                              "with their return so far")
