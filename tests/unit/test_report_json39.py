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
from proxima.report import STD_ACROSS_SAME_SEED, strict_json
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
                             "permutation_p": None, "direction": None, "better": None, "not_compared": None}]


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
    assert "population.json is a file Proxima writes in a run directory" in capsys.readouterr().err
    assert (run / "population.json").read_bytes() == before and not (run / "report.md").exists()
    notes = tmp_path / "notes.json"  # not a run's name, yet not ours either
    notes.write_text('{"mine": 1}')
    assert cli.main(["report", str(run), "--json", str(notes)]) == 2
    assert "exists and is not a file `proxima report --json` wrote" in capsys.readouterr().err
    assert notes.read_text() == '{"mine": 1}' and not (run / "report.md").exists()
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


# ---------------------------------------------------------------- --json never takes a run's own name, nor half-writes
@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    return tiny_cartpole_run(tmp_path_factory, "json_own")


@pytest.mark.parametrize("name", ["eval.json", "summary.json", "population.json"])
def test_json_refuses_a_name_a_single_run_writes_in_it_even_when_absent(single_run, capsys, name):
    run, before = single_run, sorted(os.listdir(single_run))
    assert not (run / name).exists()  # --eval-episodes 0: no eval.json yet; the run would read ours as its own
    assert cli.main(["report", str(run), "--json", str(run / name)]) == 2
    assert capsys.readouterr().err == (f"proxima report: error: --json {run / name}: {name} is a file Proxima writes in a "
                                       f"run directory ({run}); give another FILE.json (e.g. {run / 'report.json'})\n")
    assert sorted(os.listdir(run)) == before


@pytest.mark.parametrize("name, told", [("meta.json", "meta.json is a file Proxima writes in a run directory"),
                                        ("x.txt", "not a .json file")])
def test_a_single_runs_report_checks_json_before_writing_anything(single_run, capsys, name, told):
    run = single_run
    before = {p: (run / p).read_bytes() for p in os.listdir(run) if (run / p).is_file()}
    assert cli.main(["report", str(run), "--json", str(run / name)]) == 2
    assert told in capsys.readouterr().err
    assert {p: (run / p).read_bytes() for p in os.listdir(run) if (run / p).is_file()} == before


@pytest.mark.parametrize("where", ["summary.json", "m000-seed1-lr0.001/meta.json", "m001-seed2-lr0.001/eval.json"])
def test_json_refuses_a_name_a_population_or_its_member_writes(tmp_path, capsys, where):
    run = _pop(tmp_path)
    (run / "m000-seed1-lr0.001" / "meta.json").unlink(missing_ok=True)
    before = sorted(str(p) for p in run.rglob("*"))
    target = run / where
    assert cli.main(["report", str(run), "--json", str(target)]) == 2
    assert capsys.readouterr().err.startswith(f"proxima report: error: --json {target}: {target.name} is a file Proxima "
                                              f"writes in a run directory ({target.parent}); give another FILE.json")
    assert sorted(str(p) for p in run.rglob("*")) == before


@pytest.mark.parametrize("where", ["A/population.json", "A/summary.json", "B/eval.json"])
def test_two_populations_report_refuses_a_json_among_their_own_files(tmp_path, capsys, where):
    a, b = _pop(tmp_path, "A"), _pop(tmp_path, "B")
    population = (a / "population.json").read_bytes()
    assert cli.main(["report", str(a), str(b), "--out", str(tmp_path / "both.md"), "--json", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"proxima report: error: --json {tmp_path / where}: ") and err.count("\n") == 1
    assert (a / "population.json").read_bytes() == population
    assert not (tmp_path / "both.md").exists() and not (b / "eval.json").exists() and not (a / "summary.json").exists()


def test_json_in_a_folder_not_made_yet_is_made_as_out_is(tmp_path, capsys):
    """Before, the folder was missing at the JSON's write: exit 2, with report.md written all the same."""
    run = _pop(tmp_path)
    out = tmp_path / "new" / "deeper" / "r.json"
    assert cli.main(["report", str(run), "--json", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {run / 'report.md'} and {out}\n"
    assert json.loads(out.read_text())["kind"] == "population"


def test_a_failed_json_write_leaves_the_earlier_file_whole_and_no_temp_file(tmp_path, monkeypatch):
    import errno

    from proxima.report import ReportError, write_json

    out = tmp_path / "report.json"
    out.write_text('{"generator": "proxima report", "old": true}\n')

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ReportError, match=r"report\.json: could not write \(No space left on device"):
        write_json(out, {"new": list(range(1000))})
    assert out.read_text() == '{"generator": "proxima report", "old": true}\n'
    assert os.listdir(tmp_path) == ["report.json"]


# ---------------------------------------------------------------- a population's JSON: every number, three settings
def _three_settings(tmp_path):
    """lr=0.001 worst, lr=0.0003 best (not listed first), lr=0.0001 with a NaN member; seeds not in order."""
    run = tmp_path / "R3"
    _fake_population(run, {1e-3: [10., 20., 30., 40., 50.], 3e-4: [400., 420., 440., 460., 480.],
                           1e-4: [100., 110., 120., 130., NAN]})
    doc = json.loads((run / "population.json").read_text())
    for i, e in enumerate(doc["member_dirs"]):
        e["seed"] = [7, 3, 9, 1, 5][i % 5]
        ev = run / e["dir"] / "eval.json"
        ev.write_text(json.dumps({**json.loads(ev.read_text()), "global_step": 1000 + i, "episodes": 10 + i}))
    (run / "population.json").write_text(json.dumps(doc))
    return run


def test_a_populations_json_rows_and_comparison_match_summarize_settings(tmp_path):
    run = _three_settings(tmp_path)
    out = tmp_path / "r.json"
    assert cli.main(["report", str(run), "--threshold", "450", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = summarize_settings(run, threshold=450)
    assert doc["threshold"] == 450.0
    for got, r in zip(doc["settings"], rows, strict=True):
        assert got["member_dirs"] == [{"dir": d, "seed": s} for d, s in zip(r["dirs"], r["seeds"])]
        assert (got["solved"], got["solved_count"], got["returns"]) == (r["solved"], r["solved_count"], r["returns"])
    best = doc["settings"][1]
    assert [m["seed"] for m in best["member_dirs"]] == [7, 3, 9, 1, 5]
    assert (best["solved"], best["solved_count"]) == (0.4, 2)
    assert best["measured"]["m006-seed2-lr0.0003"] == {"global_step": 1006, "episodes": 16}
    c = doc["comparison"]
    assert (c["reference"], c["pairs"], c["alpha"]) == ("lr=0.0003", 6, 0.05)  # both directions of 3 settings' pairs
    assert [a["setting"] for a in c["against"]] == ["lr=0.001", "lr=0.0001"]
    assert c["against"][0]["permutation_p"] == pytest.approx(1 / 252)  # exact: 5 vs 5 members, all of X below Y
    assert (c["against"][0]["direction"], c["against"][0]["better"]) == ("Y > X", "Y")
    assert c["verdict"].startswith("Y = lr=0.0003: the highest IQM of the settings with no member left out; "
                                   "better than lr=0.001 (p = 0.004); not distinguishable from lr=0.0001 ")
    assert c["verdict"] in (run / "report.md").read_text()


# ---------------------------------------------------------------- a member of a live population
def test_a_member_of_a_live_population_in_its_first_iteration_is_in_progress_not_stopped(tmp_path, capsys):
    run = tmp_path / "P"
    _fake_population(run, {1e-3: [1.0, 2.0]})
    member = run / "m000-seed1-lr0.001"
    (member / "eval.json").unlink()
    (member / "config.yaml").write_text("env_id: CartPole-v1\nseed: 1\n")
    (member / "meta.json").write_text("{}")
    (member / "metrics.csv").write_text("global_step,iteration,time,charts/episodic_return\n")
    (run / ".proxima.lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))  # the population's
    with pytest.raises(Exception) as e:
        read_metrics(member)
    assert str(e.value) == (f"{member / 'metrics.csv'}: no rows yet: the run is in progress (locked by pid {os.getpid()}) "
                            "and has not finished its first iteration")


# ---------------------------------------------------------------- single runs' JSON: every field, and its Markdown cell
def _file_run(d, seed, lr, rows, ev, checkpoint=None):
    """A run directory from files: rows of (iteration, global_step, time, episodes, return, eval/mean_return)."""
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(f"env_id: CartPole-v1\nseed: {seed}\nlearning_rate: {lr}\n")
    (d / "meta.json").write_text("{}")
    lines = ["iteration,global_step,time,episodes,charts/episodic_return,eval/mean_return"]
    lines += [",".join("" if v is None else str(v) for v in row) for row in rows]
    (d / "metrics.csv").write_text("\n".join(lines) + "\n")
    (d / "eval.json").write_text(json.dumps(ev))
    if checkpoint is not None:  # only its name is read: the step the run reached
        (d / "checkpoints").mkdir()
        (d / "checkpoints" / f"step_{checkpoint:012d}.pt").write_bytes(b"not a checkpoint")
    return d


def _ev(returns, step, **more):
    return {"mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)), "episodes": len(returns),
            "returns": returns, "global_step": step, **more}


def test_single_runs_json_gives_every_number_of_the_results_table_and_the_groups_over_2_runs(tmp_path, capsys):
    # group lr=0.001 (both seed 1): "a" ends its metrics.csv at 300 before its checkpoint at 400, evaluated during
    # training; "b" has no row of iteration 3 and a blank last return. group lr=0.0003 (seeds 2, 3): "c", and "d",
    # a population's member.
    a = _file_run(tmp_path / "a", 1, 0.001, [(1, 100, 1.5, 2, 40.0, 20.0), (2, 200, 3.0, 3, 30.0, 80.0),
                                             (3, 300, 4.0, 5, 25.0, 60.0)],
                  _ev([90.0, 110.0], 400, lengths=[100, 200, 300, 500], unfinished=1, max_steps=500), checkpoint=400)
    b = _file_run(tmp_path / "b", 1, 0.001, [(1, 100, 2.0, 4, 10.0, None), (2, 200, 4.0, 1, 50.0, None),
                                             (4, 400, 8.0, 2, 30.0, None), (5, 500, 10.0, 0, None, None)],
                  _ev([140.0, 160.0, 150.0], 500))
    c = _file_run(tmp_path / "c", 2, 0.0003, [(1, 100, 1.0, 1, 5.0, None), (2, 200, 2.0, 1, 15.0, None)],
                  _ev([20.0, 20.0], 200))
    pop = tmp_path / "P"
    d = _file_run(pop / "d", 3, 0.0003, [(1, 100, 4.0, 2, 7.0, None), (2, 200, 5.0, 2, 9.0, None)], _ev([50.0], 200))
    (pop / "population.json").write_text(json.dumps({"kind": "ppo-population", "member_dirs": [{"dir": "d", "seed": 3}],
                                                     "total_timesteps_per_member": 800}))
    out, md_file = tmp_path / "runs.json", tmp_path / "runs.md"
    assert cli.main(["report", str(a), str(b), str(c), str(d), "--out", str(md_file), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    md = md_file.read_text()
    assert (doc["schema"], doc["generator"], doc["kind"], doc["metric"]) == (1, "proxima report", "runs",
                                                                            "charts/episodic_return")
    ra, rb, rc, rd = doc["runs"]
    common = {"env": "CartPole-v1", "diverged": None, "started_from": None, "stopped_at_return": None,
              "metric": "charts/episodic_return"}
    assert ra == common | {
        "name": "a", "dir": str(a), "steps": 300.0, "steps_reached": 400, "total_steps": None, "progress": None,
        "iterations": 3.0, "wall_time_s": 4.0, "steps_per_s": 75.0, "steps_per_s_per_member": False, "episodes": 10,
        "rows_missing": True, "final": {"value": 25.0, "step": None, "episodes": 5},
        "best": {"value": 40.0, "step": 100.0, "episodes": 2},
        "eval_during_training": {"last": 60.0, "best": 80.0, "best_step": 200.0, "best_pt": False},
        "final_eval": {"mean_return": 100.0, "std_return": 10.0, "episodes": 2, "deterministic": True, "global_step": 400,
                       "unfinished": 1, "returns": [90.0, 110.0], "mean_episode_length": 275.0,
                       "success_rate": None, "success_episodes": None, "source": "eval.json (end of training)"}}
    assert rb == common | {
        "name": "b", "dir": str(b), "steps": 500.0, "steps_reached": 500.0, "total_steps": None, "progress": None,
        "iterations": 5.0, "wall_time_s": 10.0, "steps_per_s": 50.0, "steps_per_s_per_member": False, "episodes": 7,
        "rows_missing": True, "final": {"value": 30.0, "step": 400.0, "episodes": 2},
        "best": {"value": 50.0, "step": 200.0, "episodes": 1},
        "final_eval": {"mean_return": 150.0, "std_return": pytest.approx(np.sqrt(200 / 3)), "episodes": 3,
                       "deterministic": True, "global_step": 500, "unfinished": None, "returns": [140.0, 160.0, 150.0],
                       "mean_episode_length": None, "success_rate": None, "success_episodes": None,
                       "source": "eval.json (end of training)"}}
    assert rc["rows_missing"] is False and rc["steps_per_s_per_member"] is False and rc["total_steps"] is None
    assert (rd["steps_per_s_per_member"], rd["total_steps"], rd["steps_per_s"], rd["rows_missing"]) == (True, 800, 40.0, False)
    # the same numbers in report.md's Results table, column by column (a, b, c, d)
    assert "| steps | 400 (300 in metrics.csv: rows missing) | 500 | 200 | 200 |" in md
    assert "| iterations | 3 (rows missing) | 5 | 2 | 2 |" in md
    assert "| throughput | 75 steps/s | 50 steps/s | 100 steps/s | 40 steps/s per member |" in md
    assert "| episodes finished | at least 10 (rows missing) | at least 7 (rows missing) | 2 | 4 |" in md
    assert ("| final charts/episodic_return | 25.00 (5 episodes) (rows missing) | 30.00 at step 400 (2 episodes) "
            "| 15.00 (1 episode) | 9.00 (2 episodes) |") in md
    assert "| best charts/episodic_return | 40.00 at step 100 (2 episodes) | 50.00 at step 200 (1 episode) |" in md
    assert "| eval return during training, last | 60.00 | \u2014 |" in md
    assert "| eval return during training, best | 80.00 at step 200 | \u2014 |" in md
    assert ("- **a**: mean return **100.00** \u00b1 10.00 over 2 episodes, deterministic policy at step 400; 1 of them cut "
            "at 500 steps (--max-steps), with their return so far; source: eval.json (end of training)\n") in md
    assert "- **b**: mean return **150.00** \u00b1 8.16 over 3 episodes, deterministic policy at step 500; source:" in md
    assert "  - mean episode length: 275.0" in md
    assert "metrics.csv has no rows of iteration 3 (between step 200 and step 400)" in md
    ga, gc = doc["groups"]
    assert ga == {"group": "CartPole-v1 (learning_rate=0.001)", "runs": 2, "mean": 125.0, "std": pytest.approx(np.sqrt(1250)), "min": 100.0,
                  "max": 150.0, "std_ddof": 1}
    assert gc == {"group": "CartPole-v1 (learning_rate=0.0003)", "runs": 2, "mean": 35.0, "std": pytest.approx(np.sqrt(450)), "min": 20.0,
                  "max": 50.0, "std_ddof": 1}
    assert (f"Final eval of {ga['group']} over 2 runs (their evaluations ran 2 and 3 episodes; each run's mean counts "
            f"once): mean 125.00, std (n-1) {np.sqrt(1250):.2f}, min 100.00, "
            "max 150.00. 2 runs of seed 1: not a sample of seeds; the spread is not across seeds.") in md
    assert f"Final eval of {gc['group']} over 2 runs (their evaluations ran 2 and 1 episodes; each run's mean counts once): mean 35.00, std (n-1) 21.21, min 20.00, max 50.00.\n" in md
    assert STD_ACROSS_SAME_SEED in md  # one group of one seed: the caption says so, though the other is of seeds
    # each group line a paragraph of its own: right after the notes' list Markdown read it as the last bullet
    md_lines = md.splitlines()
    starts = [i for i, line in enumerate(md_lines) if line.startswith("Final eval of ")]
    assert len(starts) == 2 and all(md_lines[i - 1] == "" for i in starts), md


def test_two_populations_verdict_names_only_the_rows_told_apart_and_notes_the_rows_not_compared(tmp_path):
    a = tmp_path / "R3"  # lr=0.0003 best; lr=0.001 all below it; lr=0.0001 of 4 members (a NaN)
    _fake_population(a, {1e-3: [10., 20., 30., 40., 50.], 3e-4: [400., 420., 440., 460., 480.],
                         1e-4: [100., 110., 120., 130., NAN]})
    b = tmp_path / "B"
    _fake_population(b, {1e-3: [NAN, NAN], 3e-4: [10., 20., 30., 40., 50.]})
    out, md_file = tmp_path / "both.json", tmp_path / "both.md"
    assert cli.main(["report", str(a), str(b), "--out", str(md_file), "--json", str(out)]) == 0
    doc, md = json.loads(out.read_text()), md_file.read_text()
    rows = {f"{r['population']}: {r['setting']}": r for r in doc["rows"]}
    assert doc["reference"] == "R3: lr=0.0003" and rows["R3: lr=0.0003"]["reference"] is True
    assert rows["B: lr=0.001"]["not_compared"] == "no member with a final return"
    assert "- B: lr=0.001: not compared: no member with a final return." in md
    # 4 rows with an IQM: 12 pairs, level 0.05/12; 5 vs 5 members all below Y: p = 1/252 = 0.004 reaches it
    assert doc["verdict"].startswith(
        "Y = R3: lr=0.0003: the first population's highest IQM of the settings with no member left out; "
        "better than R3: lr=0.001 (p = 0.004), B: lr=0.0003 (p = 0.004); not distinguishable from R3: lr=0.0001 "
        "(P(X > Y) 0.00; fewer than 5 members on a side: no claim) at these seeds. Run more seeds to tell them apart.")
    assert doc["verdict"] in md


# ---------------------------------------------------------------- a failed report replaces nothing: curve, JSON and report.md staged
def _reported(tmp_path, kind):
    """A run (or a population) reported once with --json: (run, its three files)."""
    from tests.cli_helpers import fake_run_dir

    run = fake_run_dir(tmp_path, "run") if kind == "run" else _pop(tmp_path)
    if kind == "population":  # members with a curve to draw
        metrics = (fake_run_dir(tmp_path / "src", "src") / "metrics.csv").read_bytes()
        for member in run.iterdir():
            if member.is_dir():
                (member / "metrics.csv").write_bytes(metrics)
    js = tmp_path / "numbers.json"
    assert cli.main(["report", str(run), "--episodes", "0", "--json", str(js)]) == 0
    return run, [run / "report.md", js, run / "report_curve.png"]


def _listing(tmp_path):
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))


@pytest.mark.parametrize("kind", ["run", "population"])
@pytest.mark.parametrize("point", ["curve", "json", "md"])
def test_a_report_that_fails_leaves_the_earlier_report_json_and_curve_byte_identical(tmp_path, monkeypatch, capsys,
                                                                                     kind, point):
    """Before, a report.md that failed unlinked the JSON that had replaced the earlier one (and the curve), and a
    JSON that failed unlinked the curve that had replaced the earlier one: the earlier report.md lost its image."""
    import errno

    from matplotlib.figure import Figure

    from proxima import atomic

    run, files = _reported(tmp_path, kind)
    (run / "report.md").write_text((run / "report.md").read_text() + "an earlier report\n")  # told apart from the next
    files[2].write_bytes(files[2].read_bytes() + b"an earlier curve")  # a new curve of the same runs has the same bytes
    before, listing = [f.read_bytes() for f in files], _listing(tmp_path)
    written = atomic.write_atomic

    def full(path, *args, **kwargs):
        if path.suffix == "." + point:
            raise OSError(errno.ENOSPC, "No space left on device")
        return written(path, *args, **kwargs)

    def interrupted(*args, **kwargs):  # Ctrl-C while the curve is drawn
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic, "write_atomic", full)
    monkeypatch.setattr(Figure, "savefig", interrupted if point == "curve" else Figure.savefig)
    argv = ["report", str(run), "--episodes", "0", "--json", str(files[1])]
    if point == "curve":
        assert cli.main(argv) == 130
    else:
        assert cli.main(argv) == 2
        target = files[0] if point == "md" else files[1]
        assert capsys.readouterr().err.startswith(f"proxima report: error: {target}: could not write (No space left")
    assert [f.read_bytes() for f in files] == before
    assert _listing(tmp_path) == listing  # no temporary left behind


@pytest.mark.parametrize("kind", ["run", "population"])
def test_a_first_report_that_fails_leaves_no_curve_nor_temporary(tmp_path, monkeypatch, capsys, kind):
    """Before, a population's report whose JSON failed left this call's curve behind."""
    import errno

    from proxima import atomic

    run = _reported(tmp_path, kind)[0]
    for f in (run / "report.md", run / "report_curve.png", tmp_path / "numbers.json"):
        f.unlink()
    listing = _listing(tmp_path)
    written = atomic.write_atomic

    def full(path, *args, **kwargs):
        if path.suffix == ".json":
            raise OSError(errno.ENOSPC, "No space left on device")
        return written(path, *args, **kwargs)

    monkeypatch.setattr(atomic, "write_atomic", full)
    assert cli.main(["report", str(run), "--episodes", "0", "--json", str(tmp_path / "numbers.json")]) == 2
    assert _listing(tmp_path) == listing


@pytest.mark.parametrize("kind", ["run", "population"])
def test_a_second_report_replaces_all_three_files_and_leaves_no_temporary(tmp_path, capsys, kind):
    run, files = _reported(tmp_path, kind)
    (run / "report.md").write_text("an earlier report\n")
    files[1].write_text('{"generator": "proxima report", "old": true}\n')
    files[2].write_bytes(b"old")
    listing = _listing(tmp_path)
    assert cli.main(["report", str(run), "--episodes", "0", "--json", str(files[1])]) == 0
    assert "](report_curve.png)" in files[0].read_text() and json.loads(files[1].read_text())["generator"] == "proxima report"
    assert files[2].read_bytes().startswith(b"\x89PNG")
    assert _listing(tmp_path) == listing


# ---------------------------------------------------------------- where --json may go
def test_a_single_runs_json_in_a_new_folder_makes_the_folder(tmp_path, capsys):
    from tests.cli_helpers import fake_run_dir

    run, out = fake_run_dir(tmp_path, "run"), tmp_path / "new" / "deeper" / "x.json"
    assert cli.main(["report", str(run), "--episodes", "0", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["kind"] == "runs"


def test_a_two_populations_json_in_a_new_folder_makes_the_folder(tmp_path, capsys):
    a, b = _pop(tmp_path, "A"), _pop(tmp_path, "B")
    out = tmp_path / "new" / "x.json"
    assert cli.main(["report", str(a), str(b), "--out", str(tmp_path / "both.md"), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["kind"] == "populations"


def test_json_refuses_a_runs_own_name_in_upper_case(single_run, capsys):
    run, before = single_run, sorted(os.listdir(single_run))
    assert cli.main(["report", str(single_run), "--json", str(run / "META.JSON")]) == 2
    assert "META.JSON is a file Proxima writes in a run directory" in capsys.readouterr().err
    assert sorted(os.listdir(run)) == before


def test_json_refuses_a_runs_own_name_reached_through_a_symlinked_folder(tmp_path, capsys):
    from tests.cli_helpers import fake_run_dir

    run = fake_run_dir(tmp_path, "run")
    (tmp_path / "link").symlink_to(run, target_is_directory=True)
    before = sorted(os.listdir(run))
    assert cli.main(["report", str(run), "--episodes", "0", "--json", str(tmp_path / "link" / "eval.json")]) == 2
    assert "eval.json is a file Proxima writes in a run directory" in capsys.readouterr().err
    assert sorted(os.listdir(run)) == before


def test_json_refuses_the_second_runs_own_name(tmp_path, capsys):
    from tests.cli_helpers import fake_run_dir

    a, b = fake_run_dir(tmp_path, "A"), fake_run_dir(tmp_path, "B")
    assert cli.main(["report", str(a), str(b), "--episodes", "0", "--out", str(tmp_path / "r.md"),
                     "--json", str(b / "eval.json")]) == 2
    assert "eval.json is a file Proxima writes in a run directory" in capsys.readouterr().err
    assert not (b / "eval.json").exists() and not (tmp_path / "r.md").exists()


@pytest.mark.parametrize("kind", ["run", "population", "populations"])
def test_a_folder_at_the_curves_name_is_no_curve_and_the_report_is_still_written(tmp_path, capsys, kind):
    """Since the curve was staged, plot_runs checked its temporary, not report_curve.png: a folder there made
    publish's rename fail (EISDIR), exit 2 and no report.md, where before the report said "No learning curve"."""
    run, files = _reported(tmp_path, "run" if kind == "run" else "population")
    for f in files:
        f.unlink()
    if kind == "populations":
        other, out = _pop(tmp_path, "B"), tmp_path / "both.md"
        argv, md, curve = ["report", str(run), str(other), "--out", str(out)], out, tmp_path / "both_curve.png"
    else:
        argv, md, curve = ["report", str(run), "--episodes", "0"], run / "report.md", run / "report_curve.png"
    curve.mkdir()
    (curve / "keep.txt").write_text("mine\n")
    listing = _listing(tmp_path)
    assert cli.main(argv) == 0, capsys.readouterr().err
    text = md.read_text()
    said = "No curve" if kind == "run" else "No learning curve"  # a single run's report words it so, as before
    assert f"{said}: {curve}: is a directory" in text and "_curve.png)" not in text
    assert curve.is_dir() and [p.name for p in curve.iterdir()] == ["keep.txt"]
    assert (curve / "keep.txt").read_text() == "mine\n"
    assert _listing(tmp_path) == sorted(listing + [str(md.relative_to(tmp_path))])  # no temporary left behind
