"""Hostile run files in reports: numbers past a float's range or not finite, integers of more digits than
int() converts, a cpu_tanh of another type, a member's lr or logged lr no schedule gives. A single run's bad
eval.json is one error line (exit 2); a member's is set aside with a note; meta.json is read as not recorded."""

import json
import re
import shutil

import pytest

from tests.cli_helpers import error_line, run_main

TINY = ["--total-timesteps", "512", "--num-envs", "2", "--num-steps", "64", "--eval-episodes", "2", "--no-plot", "--quiet"]
HUGE = int("1" + "0" * 400)  # past a float's range: float() raises OverflowError
GIANT = "1" + "0" * 4400  # more digits than int() converts (4,300): json.loads raises ValueError


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{"r1": a 512-step CartPole run with --eval-every, "pop1": a population of seeds 0 and 1}."""
    from proxima import cli

    root = tmp_path_factory.mktemp("hostile48")

    for name, extra in (("r1", ["--eval-every", "256"]), ("pop1", ["--seeds", "0,1"])):
        try:
            code = cli.main(["train", "CartPole-v1", *TINY, *extra, "--run-dir", str(root / name)])
        except SystemExit as e:
            code = e.code
        assert code in (0, None), name
    return root


def _copy(runs, name, tmp_path):
    dst = tmp_path / name
    shutil.copytree(runs / name, dst)
    return dst


def _edit_json(path, text_from, text_to):
    text = path.read_text()
    assert text_from in text
    path.write_text(text.replace(text_from, text_to, 1))


def _set_field(path, field, raw: str):
    """Write ``raw`` (JSON text, of any size) as the value of eval.json's top-level ``field``."""
    doc = json.loads(path.read_text())
    doc[field] = "@@"
    path.write_text(json.dumps(doc, indent=2).replace('"@@"', raw))


def _report(run, tmp_path, capsys, *flags):
    return run_main(["report", str(run), "--out", str(tmp_path / "r.md"), *flags], capsys)


# ---------------------------------------------------------------------------------------------- single run
@pytest.mark.parametrize("raw", [str(HUGE), "NaN", "Infinity", "-Infinity"])
def test_a_run_whose_eval_json_mean_return_is_not_a_finite_number_is_one_error_line(runs, tmp_path, capsys, raw):
    run = _copy(runs, "r1", tmp_path)
    _set_field(run / "eval.json", "mean_return", raw)
    code, _, err = _report(run, tmp_path, capsys)
    line = error_line(code, err, f"{run / 'eval.json'}: mean_return is not a finite number")
    assert len(line) < 300, line


def test_a_run_whose_eval_json_returns_hold_an_int_past_a_float_is_one_error_line(runs, tmp_path, capsys):
    run = _copy(runs, "r1", tmp_path)
    _set_field(run / "eval.json", "returns", f"[{HUGE}, 1.0]")
    code, _, err = _report(run, tmp_path, capsys)
    error_line(code, err, f"{run / 'eval.json'}: returns is not a list of finite numbers")


def test_a_run_whose_eval_json_global_step_is_a_bool_is_one_error_line(runs, tmp_path, capsys):
    run = _copy(runs, "r1", tmp_path)
    _set_field(run / "eval.json", "global_step", "true")
    code, _, err = _report(run, tmp_path, capsys)
    error_line(code, err, f"{run / 'eval.json'}: global_step is not a step", "(True)")


def test_an_eval_json_integer_of_more_digits_than_int_converts_is_one_error_line(runs, tmp_path, capsys):
    run = _copy(runs, "r1", tmp_path)
    _set_field(run / "eval.json", "episodes", GIANT)
    code, _, err = _report(run, tmp_path, capsys)
    error_line(code, err, f"{run / 'eval.json'}: not valid JSON", "4300")


def test_a_meta_json_integer_of_more_digits_than_int_converts_is_read_as_not_recorded(runs, tmp_path, capsys):
    run = _copy(runs, "r1", tmp_path)
    _set_field(run / "meta.json", "world_size", GIANT)
    code, _, err = _report(run, tmp_path, capsys)
    assert code == 0, err
    text = (tmp_path / "r.md").read_text()
    assert f"{run / 'meta.json'}: not valid JSON" in text and "treated as not recorded" in text


def test_edited_summary_says_nothing_of_a_summary_past_a_float(runs):
    from proxima.evaluate import edited_summary

    assert edited_summary({"returns": [1.0, 3.0], "mean_return": HUGE, "std_return": 1.0}) is None
    assert edited_summary({"returns": [HUGE, 3.0], "mean_return": 2.0, "std_return": 1.0}) is None
    assert edited_summary({"returns": [1.0, 3.0], "mean_return": 2.5, "std_return": 1.0}).startswith("mean_return 2.50")


@pytest.mark.parametrize("raw", ["5", "true", '["torch"]'])
def test_a_cpu_tanh_of_another_type_is_shown_as_not_recorded(runs, tmp_path, capsys, raw):
    run = _copy(runs, "r1", tmp_path)
    doc = json.loads((run / "meta.json").read_text())
    doc["machine"]["cpu_tanh"] = json.loads(raw)
    (run / "meta.json").write_text(json.dumps(doc))
    code, _, err = _report(run, tmp_path, capsys)
    assert code == 0, err
    rows = [ln for ln in (tmp_path / "r.md").read_text().splitlines() if ln.startswith("| cpu tanh")]
    assert rows == ["| cpu tanh | not recorded |"], rows


# ---------------------------------------------------------------------------------------------- population
def _set_aside_note(text: str) -> str:
    """The note on a member's eval.json the report could not use (--episodes 0: left out, not evaluated again)."""
    notes = [ln for ln in text.splitlines() if "eval.json could not be read" in ln and "left out" in ln]
    assert len(notes) == 1, text
    return notes[0]


# (a member's NaN or inf mean_return is a non-finite member the table leaves out and names, test_population_report's)
@pytest.mark.parametrize("raw", [str(HUGE)])
def test_a_member_eval_json_mean_return_not_finite_is_set_aside_with_a_note(runs, tmp_path, capsys, raw):
    pop = _copy(runs, "pop1", tmp_path)
    _set_field(pop / "m000-seed0" / "eval.json", "mean_return", raw)
    code, _, err = _report(pop, tmp_path, capsys, "--episodes", "0")
    assert code == 0, err
    note = _set_aside_note((tmp_path / "r.md").read_text())
    assert "m000-seed0/eval.json: mean_return is not a finite number" in note, note


def test_a_member_eval_json_of_more_digits_than_int_converts_is_set_aside_with_a_note(runs, tmp_path, capsys):
    pop = _copy(runs, "pop1", tmp_path)
    _set_field(pop / "m000-seed0" / "eval.json", "episodes", GIANT)
    code, _, err = _report(pop, tmp_path, capsys, "--episodes", "0")
    assert code == 0, err
    note = _set_aside_note((tmp_path / "r.md").read_text())
    assert "m000-seed0/eval.json: not valid JSON" in note, note


def test_a_member_eval_json_global_step_true_is_set_aside_not_counted_as_an_older_file(runs, tmp_path, capsys):
    pop = _copy(runs, "pop1", tmp_path)
    _set_field(pop / "m001-seed1" / "eval.json", "global_step", "true")
    code, _, err = _report(pop, tmp_path, capsys, "--episodes", "0")
    assert code == 0, err
    text = (tmp_path / "r.md").read_text()
    assert "without a step" not in text and "step not recorded" not in text, text
    assert "m001-seed1/eval.json: global_step is not a step" in _set_aside_note(text)


def test_a_member_meta_json_of_more_digits_than_int_converts_is_a_note(runs, tmp_path, capsys):
    pop = _copy(runs, "pop1", tmp_path)
    _set_field(pop / "m001-seed1" / "meta.json", "world_size", GIANT)
    code, _, err = _report(pop, tmp_path, capsys, "--episodes", "0")
    assert code == 0, err
    notes = [ln for ln in (tmp_path / "r.md").read_text().splitlines() if "m001-seed1/meta.json" in ln]
    assert len(notes) == 1 and notes[0].startswith("- note: ") and "not valid JSON" in notes[0], notes


def test_a_member_cpu_tanh_of_another_type_is_shown_as_not_recorded(runs, tmp_path, capsys):
    pop = _copy(runs, "pop1", tmp_path)
    for m in ("m000-seed0", "m001-seed1"):
        doc = json.loads((pop / m / "meta.json").read_text())
        doc["machine"]["cpu_tanh"] = ["torch"]
        (pop / m / "meta.json").write_text(json.dumps(doc))
    code, _, err = _report(pop, tmp_path, capsys, "--episodes", "0")
    assert code == 0, err
    rows = [ln for ln in (tmp_path / "r.md").read_text().splitlines() if ln.startswith("| cpu tanh")]
    assert rows == ["| cpu tanh | not recorded |"], rows


def test_a_member_lr_past_a_float_gives_no_schedule_note(runs, tmp_path, capsys):
    from proxima.population_report import schedule_recomputed_at

    pop = _copy(runs, "pop1", tmp_path)
    config = {"lr": HUGE, "anneal_lr": True, "num_envs": 2, "num_steps": 64}
    assert schedule_recomputed_at(pop / "m000-seed0", config, 512) is None
    assert schedule_recomputed_at(pop / "m000-seed0", {**config, "lr": 2.5e-4}, 512) is None  # the run's own rows fit
    # an lr the logged rows (of 2.5e-4) do not anneal from is still named: the guard is on values, not on the note
    step, logged, planned = schedule_recomputed_at(pop / "m000-seed0", {**config, "lr": 1e-3}, 512)
    assert step == 512 and logged == pytest.approx(2.5e-4 * 0.25) and planned == pytest.approx(1e-3 * 0.25)


def test_a_logged_lr_outside_any_annealing_makes_no_recomputed_note(runs, tmp_path, capsys):
    pop = _copy(runs, "pop1", tmp_path)
    csv = pop / "m000-seed0" / "metrics.csv"
    lines = csv.read_text().splitlines()
    col = lines[0].split(",").index("charts/learning_rate")
    cells = lines[1].split(",")
    cells[col] = "1e308"
    csv.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    code, _, err = _report(pop, tmp_path, capsys, "--episodes", "0")
    assert code == 0, err
    text = (tmp_path / "r.md").read_text()
    assert "logged lr" not in text and "recomputed" not in text, re.findall(r".*logged lr.*", text)
