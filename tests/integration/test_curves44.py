"""A first-day review of curves and reports: plot draws the rolling return by default, a run that
--stop-return ended says so in its report, plot names runs of one seed, code spans are padded only
where CommonMark needs it."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest
import yaml

from tests.cli_helpers import TINY_RUN, fake_run_dir, run_main

pytest.importorskip("matplotlib")

from proxima.logger import ROLLING_RETURN  # noqa: E402
from proxima.plot import collect_panels  # noqa: E402
from proxima.report import _code, _md  # noqa: E402

PER_ITERATION = "charts/episodic_return"


def _run_with_columns(root, name, columns: dict, seed: int = 1):
    """A Fake-v0 run whose metrics.csv holds exactly ``columns`` ({name: values per row}) after its step."""
    d = root / name
    d.mkdir()
    (d / "config.yaml").write_text(yaml.safe_dump({"env_id": "Fake-v0", "seed": seed}))
    rows = len(next(iter(columns.values())))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["iteration", "global_step", "time", "episodes", *columns])
        for i in range(rows):
            w.writerow([i + 1, 100 * (i + 1), 0.1 * (i + 1), 4, *(v[i] for v in columns.values())])
    return d


# ------------------------------------------------------------------------------------ 1. the default curve
def test_plot_draws_the_rolling_return_by_default_not_the_per_iteration_one(tmp_path):
    run = _run_with_columns(tmp_path, "r", {PER_ITERATION: [120.0, 500.0, 130.0], ROLLING_RETURN: [120.0, 310.0, 250.0]})
    [(_, metric, [curve])] = collect_panels([run])
    assert metric == ROLLING_RETURN
    np.testing.assert_array_equal(curve.y, [120.0, 310.0, 250.0])


def test_a_run_logged_before_the_rolling_column_still_plots_its_per_iteration_return_with_a_note(tmp_path, capsys):
    old = _run_with_columns(tmp_path, "old", {PER_ITERATION: [10.0, 30.0]})
    code, out, err = run_main(["plot", str(old)], capsys)
    assert (code, out.strip()) == (0, f"wrote {old / 'curve.png'}"), err
    assert err == (f"proxima: note: {old}: no {ROLLING_RETURN} column (logged before Proxima kept the rolling return); "
                   f"drawing {PER_ITERATION}, the per-iteration return, for every curve\n")
    new = _run_with_columns(tmp_path, "new", {PER_ITERATION: [1.0, 2.0], ROLLING_RETURN: [1.0, 1.5]}, seed=2)
    [(_, metric, [curve])] = collect_panels([new, old])  # one metric for the figure: both comparable
    assert metric == PER_ITERATION and curve.label == "mean of 2 runs"


def test_plot_help_names_the_rolling_default(capsys):
    code, out, _ = run_main(["plot", "--help"], capsys)
    flat = " ".join(out.split())
    assert code == 0 and f"default {ROLLING_RETURN}, the rolling return: the mean of the most recent iterations' episodes, 100 or more" in flat


# ------------------------------------------------------------------------------------ 2. --stop-return in the report
def test_a_run_stopped_at_its_return_says_so_in_report_md_and_json_until_a_resume_trains_on(tmp_path, capsys):
    # ~8 s: a run, its resume and two reports, each tiny; the resume is what shows the fact stays true
    run = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "512", "--stop-return", "5",
                             "--stop-episodes", "2", "--run-dir", str(run)], capsys)
    assert code == 0, err
    # --no-progress (TINY_RUN): the line still says why the report's number differs
    [line] = [ln for ln in err.splitlines() if ln.startswith("proxima: stopped at global step ")]
    step, iteration, mean = re.match(r"proxima: stopped at global step ([\d,]+) \(iteration (\d+)\): the last 2\+ training "
                                     r"episodes averaged ([\d.]+) >= --stop-return 5 ", line).groups()
    assert line.endswith("(`proxima report`'s charts/episodic_return_100 averages the last 100, older episodes too, so it "
                         "can read lower)")
    step, iteration = int(step.replace(",", "")), int(iteration)
    code, _, err = run_main(["report", str(run), "--episodes", "0", "--json", str(tmp_path / "r.json")], capsys)
    assert code == 0, err
    [doc] = json.loads((tmp_path / "r.json").read_text())["runs"]
    stop = doc["stopped_at_return"]
    assert (stop["step"], stop["iteration"], stop["stop_return"], stop["stop_episodes"]) == (step, iteration, 5.0, 2)
    assert step < 512 and f"{stop['mean_return']:.1f}" == mean
    rows = [ln for ln in (run / "report.md").read_text().splitlines() if ln.startswith("| ended by --stop-return |")]
    assert rows == [f"| ended by --stop-return | at step {step:,} (iteration {iteration}): the last 2+ training episodes averaged "
                    f"{stop['mean_return']:.1f}, reaching 5; charts/episodic_return_100 averages the last 100, older episodes "
                    "too |"]

    code, _, err = run_main(["resume", str(run), "--stop-return", "none", "--quiet"], capsys)  # trains on to 512
    assert code == 0, err
    code, _, err = run_main(["report", str(run), "--episodes", "0", "--json", str(tmp_path / "r2.json")], capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "r2.json").read_text())["runs"][0]["stopped_at_return"] is None
    assert "ended by --stop-return" not in (run / "report.md").read_text()


# ------------------------------------------------------------------------------------ 3. runs of one seed
def test_plot_of_runs_of_one_seed_says_they_are_not_a_sample_of_seeds(tmp_path, capsys):
    runs = [fake_run_dir(tmp_path, name, returns=(1.0, 2.0)) for name in ("a", "b", "c")]  # all seed 1
    code, _, err = run_main(["plot", *map(str, runs), "--out", str(tmp_path / "c.png"), "--metric", PER_ITERATION], capsys)
    assert code == 0
    assert err == "proxima: note: Fake-v0: 3 runs of seed 1: not a sample of seeds; the spread is not across seeds.\n"
    [(_, _, [curve])] = collect_panels(runs, PER_ITERATION)
    assert curve.label == "mean of 3 runs, 1 seed"
    seeded = [fake_run_dir(tmp_path / "s", f"s{i}", seed=i) for i in (1, 2)]
    [(_, _, [curve])] = collect_panels(seeded, PER_ITERATION)
    assert curve.label == "mean of 2 runs"


# ------------------------------------------------------------------------------------ 4. code spans
def test_a_run_name_in_a_code_span_is_not_padded_unless_commonmark_needs_it():
    assert _md("CartPole-v1__1__20261207-072805") == "`CartPole-v1__1__20261207-072805`"
    assert _code("`x") == "`` `x ``" and _code("x`") == "`` x` ``"  # a backtick beside the fence would join it
    assert _code(" a ") == "`  a  `"  # CommonMark strips one space each side of such a span
    assert _code(" a") == "` a`" and _code("") == "`  `"
    assert _md("a|<img src=x onerror=alert(1)>`b\n") == "``a|<img src=x onerror=alert(1)>`b\\n``"
