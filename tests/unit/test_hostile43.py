"""Opening someone else's run directory (security review 43): a shipped stdlib module never runs under
`python -m proxima`, and what a run's files hold reaches the terminal and report.md escaped, never live."""

import json
import os
import subprocess
import sys

import pytest

from proxima import population_eval, population_report, report
from proxima.population_report import PopulationError
from tests.cli_helpers import error_line, fake_run_dir, run_main, tiny_cartpole_run

TITLE = "\x1b]0;T\x07"  # an OSC sequence: retitles the terminal when printed raw
TAG = "<img src=x onerror=alert(1)>"


def test_python_m_proxima_runs_no_stdlib_module_shipped_in_the_current_directory(tmp_path):
    names = ("typing", "json", "dataclasses", "argparse", "enum", "pathlib")
    for name in names:
        (tmp_path / f"{name}.py").write_text(f"open({str(tmp_path / ('ran_' + name))!r}, 'w')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    proc = subprocess.run([sys.executable, "-m", "proxima", "--version"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("proxima "), proc.stderr
    assert sorted(p.name for p in tmp_path.glob("ran_*")) == []


def _population(tmp_path, settings: dict, **doc) -> "os.PathLike":
    run = tmp_path / "pop"
    (run / "m000-seed1").mkdir(parents=True)
    entry = {"dir": "m000-seed1", "seed": 1, "settings": settings}
    (run / "population.json").write_text(json.dumps({"kind": "ppo-population", "member_dirs": [entry], **doc}))
    return run


def test_population_settings_key_no_sweep_writes_is_refused_naming_file_and_member(tmp_path):
    run = _population(tmp_path, {"lr" + TITLE + TAG: 0.1})
    with pytest.raises(PopulationError) as e:
        population_report.read_settings(run)
    assert str(e.value).startswith(f"{run / 'population.json'}: member entry 'm000-seed1' has setting 'lr\\x1b]0;T\\x07<img")
    assert "not a field a population sweeps (lr, ent_coef," in str(e.value) and "\x1b" not in str(e.value)


def test_population_setting_value_not_a_number_is_refused(tmp_path):
    with pytest.raises(PopulationError, match=r"member entry 'm000-seed1' has setting lr = 'v\\x1b.*', not a number$"):
        population_report.read_settings(_population(tmp_path, {"lr": "v" + TITLE}))
    assert population_report.read_settings(_population(tmp_path / "ok", {"lr": 0.001, "target_kl": None}))[0].label == \
        "lr=0.001, target_kl=none"


def test_population_eval_summary_escapes_the_checkpoint_env_id():
    setting = {"members": ["m000-seed1"], "n": 1, "label": "", "left_out": [], "mean": 1.0, "mean_ci": None, "few": True,
               "iqm": 1.0, "iqm_ci": None, "resamples": 10, "rng": "r", "cut_members": 0}
    text = population_eval.format_summary({"env_id": "CartPole-v1" + TITLE, "settings": [setting], "members": []})
    assert text.startswith("CartPole-v1\\x1b]0;T\\x07 (1 member, seeds only): mean 1.00")
    assert "\x1b" not in text and "\x07" not in text


def test_population_report_md_shows_population_json_values_in_code_spans(tmp_path):
    run = _population(tmp_path, {}, env_id="CartPole-v1" + TITLE + TAG, members=1, seeds=[1],
                      sweep={"lr" + TAG: ["<b>x</b>"]}, command=["proxima", "train", "`x` " + TITLE])
    first = population_report._first_line(run, json.loads((run / "population.json").read_text()), [])
    assert first.startswith("`CartPole-v1\\x1b]0;T\\x07<img src=x onerror=alert(1)>`: 1 member (1 seed x 0 settings)")
    assert population_report._sweep_text({"lr" + TAG: ["<b>x</b>"]}) == "`lr<img src=x onerror=alert(1)>` = `<b>x</b>`"
    lines = population_report.provenance_section(run, json.loads((run / "population.json").read_text()))
    assert lines[2] == "- command: ``proxima train '`x` \\x1b]0;T\\x07'`` (population.json)"
    assert not any("\x1b" in line or "\x07" in line for line in lines)


def test_md_and_cell_write_control_characters_as_escapes():
    assert report._md("abc") == "abc"
    assert report._md("abc" + TITLE) == "`abc\\x1b]0;T\\x07`"  # its escapes' backslashes shown as they are
    assert report._md("\x1b[31m<b>") == "`\\x1b[31m<b>`"
    assert report._cell({"k" + TITLE: "v\nw"}) == "`k\\x1b]0;T\\x07`=`v\\nw`"
    assert report._keyed_rows([{"<b>k</b>": 1}]) == [["`<b>k</b>`", 1]]


def _report_md(tmp_path, monkeypatch, ev: dict) -> str:
    run = fake_run_dir(tmp_path, "run", note="\x1b[31mred" + TITLE)
    monkeypatch.setattr(report, "final_eval", lambda *a, **k: ev)
    report.build_report([run], quiet=True)
    return (run / "report.md").read_text()


def test_report_md_escapes_eval_json_backend_and_the_could_not_evaluate_line(tmp_path, monkeypatch):
    ev = {"mean_return": 1.0, "std_return": 0.0, "episodes": 1, "returns": [1.0], "source": "eval.json",
          "backend": "native\n\n<script>alert(6)</script>\n"}
    md = _report_md(tmp_path / "a", monkeypatch, ev)
    assert "  - backend `native\\n\\n<script>alert(6)</script>\\n`" in md.splitlines()
    assert "\x1b" not in md and "| note | `\\x1b[31mred\\x1b]0;T\\x07` |" in md.splitlines()
    md = _report_md(tmp_path / "b", monkeypatch, {"error": "could not evaluate: env id '<script>x</script>' unknown"})
    assert "- `could not evaluate: env id '<script>x</script>' unknown`" in md.splitlines()


def test_eval_refuses_a_checkpoints_folder_linked_out_of_the_run(tmp_path_factory, capsys):
    run = tiny_cartpole_run(tmp_path_factory, "h43link")
    elsewhere = run.parent / "elsewhere"
    (run / "checkpoints").rename(elsewhere)
    (run / "checkpoints").symlink_to(elsewhere)
    code, out, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    line = error_line(code, err, f"{run / 'checkpoints'}: is a symbolic link (or lies under one) to {elsewhere}, "
                                 f"outside the run directory {run}; Proxima does not read a run through it")
    assert line.endswith("and try again") and "return" not in out  # nothing evaluated
