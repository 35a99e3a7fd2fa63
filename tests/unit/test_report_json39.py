"""`proxima report --json FILE.json`: the numbers of report.md's tables as strict JSON; and report/plot of a run
with a metrics.csv header and no row tell one still in its first iteration from one killed in it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from proxima import cli
from proxima.plot import read_metrics
from proxima.population_report import summarize_settings
from proxima.report import strict_json
from tests.cli_helpers import tiny_cartpole_run
from tests.unit.test_population_report import _fake_population

NAN = float("nan")


def _pop(tmp_path, name="R"):
    run = tmp_path / name
    _fake_population(run, {1e-3: [500.0, 480.0, 100.0, 500.0, 470.0], 3e-4: [20.0, 30.0, 40.0, 50.0, NAN]})
    return run


def test_a_populations_json_holds_the_numbers_of_its_table_and_comparison(tmp_path, capsys):
    run = _pop(tmp_path)
    out = tmp_path / "numbers.json"
    assert cli.main(["report", str(run), "--threshold", "475", "--json", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {run / 'report.md'} and {out}\n"
    text = out.read_text()
    doc = json.loads(text)
    json.dumps(doc, allow_nan=False)  # strict: no NaN/Infinity tokens
    assert ": NaN" not in text and (doc["schema"], doc["kind"], doc["generator"]) == (1, "population", "proxima report")
    assert doc["proxima_version"] == __import__("proxima").__version__
    rows = summarize_settings(run, threshold=475)
    a, b = doc["settings"]
    assert (a["setting"], a["members"], a["n"], a["mean"], a["iqm"]) == ("lr=0.001", 5, 5, 410.0, rows[0]["iqm"])
    assert a["mean_ci"] == list(rows[0]["mean_ci"]) and a["iqm_ci"] == list(rows[0]["iqm_ci"])
    assert (a["solved"], a["solved_count"], a["left_out"]) == (0.6, 3, [])
    assert (b["n"], b["mean"], b["few"]) == (4, 35.0, True)
    assert b["left_out"] == [{"member": "m009-seed5-lr0.0003", "why": "NaN"}]
    md = (run / "report.md").read_text()
    # the Markdown shows the same numbers, rounded
    assert f"| lr=0.001 | 5 | 410.0 | [{a['mean_ci'][0]:.1f}, {a['mean_ci'][1]:.1f}] | {a['iqm']:.1f} |" in md
    c = doc["comparison"]
    assert c["reference"] == "lr=0.001" and c["verdict"] in md
    assert c["against"] == [{"setting": "lr=0.0003", "p_improvement": 0.0, "p_improvement_ci": [0.0, 0.0], "few": True,
                             "permutation_p": None, "not_compared": None}]


def test_an_all_nan_setting_is_null_in_the_json_not_nan(tmp_path):
    run = tmp_path / "R"
    _fake_population(run, {1e-3: [1.0, 2.0], 3e-4: [NAN, NAN]})
    out = tmp_path / "r.json"
    assert cli.main(["report", str(run), "--json", str(out)]) == 0
    row = json.loads(out.read_text())["settings"][1]
    assert (row["n"], row["mean"], row["iqm"], row["mean_ci"]) == (0, None, None, None)


def test_strict_json_turns_nan_and_inf_into_null_and_numpy_into_python():
    got = strict_json({"a": NAN, "b": [float("inf"), -float("inf"), 1.5], "c": np.float32(2.5), "d": (np.int64(3),)})
    assert got == {"a": None, "b": [None, None, 1.5], "c": 2.5, "d": [3]}
    json.dumps(got, allow_nan=False)


def test_two_populations_json_has_a_row_per_population_setting_with_its_p_against_the_reference(tmp_path):
    a, b = _pop(tmp_path, "A"), _pop(tmp_path, "B")
    out = tmp_path / "both.json"
    assert cli.main(["report", str(a), str(b), "--out", str(tmp_path / "both.md"), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["kind"] == "populations" and doc["reference"] == "A: lr=0.001"
    assert [(r["population"], r["setting"]) for r in doc["rows"]] == [
        ("A", "lr=0.001"), ("A", "lr=0.0003"), ("B", "lr=0.001"), ("B", "lr=0.0003")]
    assert doc["rows"][0]["reference"] is True and doc["rows"][2]["p_improvement"] == 0.5  # same returns: a tie
    assert "| B | lr=0.001 | 5 | 410.0 |" in (tmp_path / "both.md").read_text()


@pytest.mark.parametrize("name", ["numbers.txt", "numbers"])
def test_a_json_path_not_ending_json_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys, name):
    run = _pop(tmp_path)
    assert cli.main(["report", str(run), "--json", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err == (f"proxima report: error: --json {tmp_path / name}: not a .json file; give FILE.json "
                   "(the report's numbers as JSON)\n")
    assert not (run / "report.md").exists() and not (tmp_path / name).exists()


def test_json_never_replaces_a_runs_own_file(tmp_path, capsys):
    run = _pop(tmp_path)
    before = (run / "population.json").read_bytes()
    assert cli.main(["report", str(run), "--json", str(run / "population.json")]) == 2
    assert "exists and is not a file `proxima report --json` wrote" in capsys.readouterr().err
    assert (run / "population.json").read_bytes() == before and not (run / "report.md").exists()
    out = tmp_path / "r.json"
    assert cli.main(["report", str(run), "--json", str(out)]) == 0
    assert cli.main(["report", str(run), "--json", str(out)]) == 0  # its own earlier file is replaced


def test_a_single_runs_json_holds_its_results_table(tmp_path_factory, capsys):
    run = tiny_cartpole_run(tmp_path_factory, "json1")
    out = run.parent / "run.json"
    assert cli.main(["report", str(run), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["kind"] == "runs" and doc["groups"] == []
    r = doc["runs"][0]
    m = read_metrics(run)
    ev = r["final_eval"]  # no eval.json (--eval-episodes 0): evaluated now, as the Markdown says
    assert (r["steps"], r["iterations"], r["wall_time_s"]) == (128.0, 2.0, float(m["time"][-1]))
    assert ev["source"] == "evaluated now from step_000000000128.pt (no eval.json)" and ev["global_step"] == 128
    assert ev["episodes"] == len(ev["returns"]) == 10 and ev["mean_return"] == pytest.approx(np.mean(ev["returns"]))
    assert r["progress"] is None and r["best"]["step"] in m["global_step"].tolist() and r["final"]["value"] is not None
    md = (run / "report.md").read_text()
    assert f"| wall time | {r['wall_time_s']:,.1f} s |" in md
    assert f"{ev['mean_return']:.2f} \u00b1 {ev['std_return']:.2f} over {ev['episodes']} episodes" in md


# ---------------------------------------------------------------- a metrics.csv with a header and no row
def _started_run(tmp_path, pid: int):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("env_id: CartPole-v1\nseed: 1\n")
    (run / "meta.json").write_text("{}")
    (run / "metrics.csv").write_text("global_step,iteration,time,charts/episodic_return\n")
    (run / ".proxima.lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname()}))
    return run


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("command", ["report", "plot"])
def test_a_run_killed_in_its_first_iteration_says_it_stopped_with_evals_restart_command(tmp_path, capsys, command):
    run = _started_run(tmp_path, _dead_pid())
    assert cli.main(["eval", str(run)]) == 2
    told = capsys.readouterr().err.strip().split(f"{run}: ", 1)[1]
    assert told.startswith("the run stopped before its first checkpoint") and "--resume auto" in told
    assert cli.main([command, str(run)]) == 2
    err = capsys.readouterr().err
    assert err == (f"proxima {command}: error: {run / 'metrics.csv'}: no rows (the run logged no iteration, and no process "
                   f"is training it): {told}\n")
    assert not [p.name for p in run.iterdir() if p.name.endswith((".md", ".png"))]


@pytest.mark.parametrize("command", ["report", "plot"])
def test_a_run_still_in_its_first_iteration_says_it_is_in_progress(tmp_path, capsys, command):
    run = _started_run(tmp_path, os.getpid())
    assert cli.main([command, str(run)]) == 2
    err = capsys.readouterr().err
    assert err == (f"proxima {command}: error: {run / 'metrics.csv'}: no rows yet: the run is in progress (locked by pid "
                   f"{os.getpid()}) and has not finished its first iteration\n")
