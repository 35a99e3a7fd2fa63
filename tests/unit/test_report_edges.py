"""Edges of `proxima plot` and `proxima report` on runs and populations a user really has: diverged
members, a row cut short by a kill, an eval.json of a timeline given up, a mistyped --out."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from proxima.logger import CSV_COLUMNS
from proxima.plot import collect_panels, group_runs, population_curves, read_metrics
from proxima.population_report import member_final_return
from proxima.report import final_eval, summarize
from tests.cli_helpers import one_error_line, run_main, snapshot

STEPS = [512, 1024, 1536, 2048, 2560, 3072, 3584, 4096]
BLANK = [None] * len(STEPS)
UPDATE = "non-finite loss, gradient or weights in its update; try a lower --lr or --max-grad-norm"


def _write_run(d: Path, returns, steps=STEPS, **config) -> Path:
    """A run directory by hand: config.yaml and metrics.csv, one row per step (None: an empty cell)."""
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("".join(f"{k}: {v}\n" for k, v in {"env_id": "Fake-v0", "seed": 1, **config}.items()))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i, (s, r) in enumerate(zip(steps, returns)):
            w.writerow({"iteration": i + 1, "global_step": s, "time": 0.1 * (i + 1), "episodes": 0 if r is None else 1,
                        "charts/episodic_return": "" if r is None else r, "losses/value_loss": "" if r is None else 1.0})
    return d


def _write_population(run: Path, members: list) -> Path:
    """A population directory by hand: members [(settings, returns, diverged iteration or None)]; a
    diverged member gets its population.json entry and its diverged.json, as population_run writes them."""
    entries = []
    for i, (settings, returns, diverged_at) in enumerate(members):
        name = f"m{i:03d}-seed{i + 1}" + "".join(f"-{k}{v}" for k, v in settings.items())
        _write_run(run / name, returns, seed=i + 1, **settings)
        entry = {"dir": name, "seed": i + 1, "settings": settings}
        if diverged_at is not None:
            record = {"iteration": diverged_at, "global_step": STEPS[diverged_at - 1], "reason": UPDATE}
            entry["diverged"] = record
            (run / name / "diverged.json").write_text(json.dumps({"member": name, **record}))
        entries.append(entry)
    (run / "population.json").write_text(json.dumps({"kind": "ppo-population", "env_id": "Fake-v0", "members": len(entries),
                                                     "seeds": [1, 2], "member_dirs": entries,
                                                     "total_timesteps_per_member": STEPS[-1], "wall_seconds": 1.0}))
    return run


def _returns(start: float) -> list:
    return [start + 10.0 * i for i in range(len(STEPS))]


# ------------------------------------------------------------------------------------ 1, 5: diverged members in curves
def test_a_setting_that_diverged_at_iteration_1_is_named_and_the_healthy_ones_are_drawn(tmp_path, capsys):
    # `train --seeds 1-2 --sweep lr=1e-3,1e18`: lr 1e18 diverges in the first update, its returns are blank
    pop = _write_population(tmp_path / "P", [({"lr": 0.001}, _returns(20), None), ({"lr": 0.001}, _returns(30), None),
                                             ({"lr": 1e18}, BLANK, 1), ({"lr": 1e18}, BLANK, 1)])
    env, name, curves = population_curves(pop, "charts/episodic_return")  # as written (the default rebuilds the rolling one)
    assert [c.label for c in curves] == ["lr=0.001: IQM, 95% CI \u2020 (2 members)", "lr=1e+18: not drawn (m002, m003 diverged at iteration 1)"]
    np.testing.assert_allclose(curves[0].y, np.array(_returns(25)))
    assert len(curves[1].x) == 0 and "diverged members left out" in curves[0].note
    code, out, err = run_main(["plot", str(pop)], capsys)
    assert (code, out.strip()) == (0, f"wrote {pop / 'curve.png'}"), err
    run = _write_run(tmp_path / "R", _returns(5))
    assert [title for title, *_ in collect_panels([pop, run], panels="per-setting")] == ["Fake-v0", "Fake-v0: population P"]  # not skipped
    for extra in ([], ["--x", "time"], ["--metric", "value_loss"]):
        code, _, err = run_main(["report", str(pop), "--episodes", "0", *extra], capsys)
        assert code == 0, err
        text = (pop / "report.md").read_text()
        assert "No learning curve" not in text and "](report_curve.png)" in text
        assert "Diverged members are left out of the curves, as of the table." in text


def test_a_member_that_diverged_later_is_left_out_of_the_curve_not_carried_forward(tmp_path):
    # m001 logged 400 before it diverged at iteration 4: carried forward it would lift the IQM to ~150
    high = [20.0, 24.0, 400.0] + [None] * 5
    pop = _write_population(tmp_path / "P", [({}, _returns(20), None), ({}, high, 4), ({}, _returns(30), None)])
    _, _, (curve,) = population_curves(pop, "charts/episodic_return")
    assert curve.label == "IQM, 95% CI \u2020 (2 of 3 members; m001 diverged at iteration 4)"
    np.testing.assert_allclose(curve.y, np.array(_returns(25)))  # the two healthy members' mean (IQM of 2) at every step


def test_among_several_directories_a_member_without_values_is_left_out_and_named(tmp_path, capsys):
    pop = _write_population(tmp_path / "P", [({}, _returns(20), None), ({}, BLANK, None), ({}, _returns(30), None)])
    run = _write_run(tmp_path / "R", _returns(5))
    panels = collect_panels([pop, run], panels="per-setting")
    (curve,) = panels[-1][2]
    assert curve.label == "IQM, 95% CI \u2020 (2 of 3 members; m001 no values)"
    assert f"proxima: note: leaving out {pop / 'm001-seed2'}: " in capsys.readouterr().err
    code, _, err = run_main(["plot", str(pop)], capsys)  # given alone too (review 34): left out, named, the others drawn
    assert code == 0 and f"proxima: note: leaving out {pop / 'm001-seed2'}: " in err, err


def test_a_diverged_members_own_report_says_so_at_the_top_and_does_not_evaluate_it(tmp_path, capsys):
    from proxima.population_report import member_divergence

    pop = _write_population(tmp_path / "P", [({}, _returns(20), None), ({}, [20.0, 24.0, 400.0] + [None] * 5, 4)])
    member = pop / "m001-seed2"
    code, _, err = run_main(["report", str(member)], capsys)  # --episodes 10: a healthy member would be evaluated
    assert code == 0, err
    text = (member / "report.md").read_text()
    top, results = text.split("## Results")
    assert f"**This population member diverged at iteration 4 ({UPDATE})**" in top
    assert f"| final eval return | not evaluated: the member diverged at iteration 4 ({UPDATE}) |" in results
    assert member_divergence(pop / "m000-seed1") is None
    # population.json is the record of the timeline trained: a diverged.json it does not list is stale
    (pop / "m000-seed1" / "diverged.json").write_text(json.dumps({"iteration": 2, "reason": "x"}))
    assert member_divergence(pop / "m000-seed1") is None
    copied = shutil.copytree(member, tmp_path / "alone")  # out of its population: its own diverged.json
    assert member_divergence(copied) == f"diverged at iteration 4 ({UPDATE})"


# ------------------------------------------------------------------------------------ 2: --out
@pytest.mark.parametrize("name", ["metrics.csv", "config.yaml", "eval.json", "meta.json", "curve.png",
                                  "checkpoints/step_000000004096.pt", "population.json"])
def test_report_out_is_a_md_file_so_it_never_overwrites_a_file_of_the_run(tmp_path, capsys, name):
    pop = _write_population(tmp_path / "P", [({}, _returns(20), None), ({}, _returns(30), None)])
    run = pop if name == "population.json" else pop / "m000-seed1"
    for f in ("eval.json", "meta.json", "curve.png", "checkpoints/step_000000004096.pt"):
        (run / f).parent.mkdir(exist_ok=True)
        (run / f).write_text("{}")
    before = snapshot(tmp_path)
    code, _, err = run_main(["report", str(run), "--out", str(run / name), "--episodes", "0"], capsys)
    assert code == 2
    assert one_error_line(err, "proxima report").startswith(f"--out {run / name}: not a .md file; the report is Markdown: give FILE.md")
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------------ 3: stale eval.json
def test_an_eval_json_of_a_later_step_than_the_newest_checkpoint_is_not_the_runs_result(tmp_path):
    # resumed from step 2048, killed before its first iteration ended: the newer checkpoints were set
    # aside and metrics.csv cut to 2048, but the eval.json of step 6144 stayed
    pop = _write_population(tmp_path / "P", [({}, _returns(20)[:4], None)])
    member = pop / "m000-seed1"
    (member / "checkpoints").mkdir()
    (member / "checkpoints" / "step_000000002048.pt").write_bytes(b"")
    (member / "eval.json").write_text(json.dumps({"mean_return": 111.6, "episodes": 10, "global_step": 6144}))
    assert final_eval(member, {}, {}, episodes=0) == {
        "error": "eval.json is of step 6,144, not of the run's last step (2,048), and --episodes 0"}
    assert member_final_return(member) == (50.0, "last training return")  # not 111.6 from "eval"
    (member / "eval.json").write_text(json.dumps({"mean_return": 111.6, "episodes": 10, "global_step": 2048}))
    assert final_eval(member, {}, {}, episodes=0)["source"] == "eval.json (end of training)"


# ------------------------------------------------------------------------------------ 4: a row cut short
def test_a_last_row_cut_short_by_a_kill_is_not_read(tmp_path):
    run = _write_run(tmp_path / "R", _returns(20))
    with open(run / "metrics.csv", "a") as f:
        f.write("9,46")  # `printf '9,46' >> metrics.csv`: killed while writing iteration 9's row
    metrics = read_metrics(run)
    assert metrics["global_step"].tolist() == STEPS
    s = summarize(metrics)
    assert (s["global_step"], s["iterations"], s["final"]) == (4096.0, 8.0, 90.0)


# ------------------------------------------------------------------------------------ 6: groups
def test_runs_that_differ_only_in_how_they_ran_are_one_group(tmp_path):
    a = _write_run(tmp_path / "a", _returns(20), keep_host_memory=True, flush_denormal=True, threads=1)
    b = _write_run(tmp_path / "b", _returns(30), keep_host_memory=False, flush_denormal=False, threads=2, seed=2)
    c = _write_run(tmp_path / "c", _returns(30), lr=0.01)
    assert list(group_runs([a, b, c]).values()) == [[a, b], [c]]


# ------------------------------------------------------------------------------------ 7: the population's curve
def test_a_population_report_written_elsewhere_puts_its_curve_next_to_it(tmp_path, capsys):
    pop = _write_population(tmp_path / "P", [({}, _returns(20), None), ({}, _returns(30), None)])
    out = tmp_path / "x" / "report.md"
    out.parent.mkdir()
    code, _, err = run_main(["report", str(pop), "--out", str(out), "--episodes", "0"], capsys)
    assert code == 0, err
    assert (tmp_path / "x" / "report_curve.png").is_file() and not (pop / "curve.png").exists()
    assert "](report_curve.png)" in out.read_text()
    code, _, err = run_main(["report", str(pop), "--episodes", "0"], capsys)  # in the run: report_curve.png, leaving curve.png to plot
    assert code == 0 and "](report_curve.png)" in (pop / "report.md").read_text() and (pop / "report_curve.png").is_file()


def test_a_population_report_makes_its_folder_even_when_no_curve_is_drawn(tmp_path, capsys):
    pop = _write_population(tmp_path / "P", [({}, BLANK, None)])  # no episode finished yet: no curve
    out = tmp_path / "new" / "r.md"
    code, _, err = run_main(["report", str(pop), "--out", str(out), "--episodes", "0"], capsys)
    assert code == 0, err
    assert "No learning curve: " in out.read_text() and not (tmp_path / "new" / "r_curve.png").exists()
