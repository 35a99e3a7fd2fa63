"""Report leftovers, review 49: the final evaluation's success rate in report.md and --json (an env that reports
info['is_success']), and nothing else where no run's did."""

from __future__ import annotations

import json

from proxima import cli
from tests.cli_helpers import fake_run_dir

EVAL = {"mean_return": 2.0, "std_return": 0.0, "episodes": 10, "returns": [2.0] * 10, "global_step": 200}


def _run_with_eval(root, name: str, **fields):
    run = fake_run_dir(root, name)
    (run / "eval.json").write_text(json.dumps({**EVAL, **fields}))
    return run


def _row(text: str, label: str) -> list:
    """The cells of report.md's Results row ``label`` (after the label), or [] where there is none."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == label:
            return cells[1:]
    return []


def test_report_shows_the_final_eval_success_rate_blank_for_a_run_whose_env_reported_none(tmp_path, capsys):
    a = _run_with_eval(tmp_path, "a", success_rate=0.8)
    b = _run_with_eval(tmp_path, "b")  # no episode reported info['is_success']: no rate, not a rate of 0
    c = _run_with_eval(tmp_path, "c", success_rate=0.5, success_episodes=4)
    out, js = tmp_path / "r.md", tmp_path / "r.json"
    assert cli.main(["report", str(a), str(b), str(c), "--out", str(out), "--json", str(js)]) == 0
    assert _row(out.read_text(), "final eval success rate") == ["0.80", "\u2014", "0.50 over 4 of 10 episodes"]
    evals = [r["final_eval"] for r in json.loads(js.read_text())["runs"]]
    assert [(e["success_rate"], e["success_episodes"]) for e in evals] == [(0.8, 10), (None, None), (0.5, 4)]


def test_report_has_no_success_rate_row_when_no_run_reported_one(tmp_path, capsys):
    run = _run_with_eval(tmp_path, "a")
    assert cli.main(["report", str(run)]) == 0
    text = (run / "report.md").read_text()
    assert "success rate" not in text and _row(text, "final eval return")


def test_report_refuses_an_eval_json_success_rate_outside_0_to_1_in_one_line(tmp_path, capsys):
    run = _run_with_eval(tmp_path, "a", success_rate=1.5)
    assert cli.main(["report", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"proxima report: error: {run / 'eval.json'}: success_rate is not a rate from 0 to 1 (1.5)"]
    assert not (run / "report.md").exists()
