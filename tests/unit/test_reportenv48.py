"""Review 48, report and plot. (1) `proxima report` evaluates a module:Class run without eval.json as
`proxima eval` does: its --env ENV_ID / --trust-run let it import the env the run records (the same
load and checks as eval's, so the same number); without them the report's cell names report's own flags,
and one note on stderr says the cell was not filled. A population's members are evaluated with the same
flags. (2) `proxima plot` of a few single runs with --band ci marks their CI as a population's of as few
members: `95% bootstrap CI of the IQM \u2020` and `\u2020 < 5 runs: covers well under 95%`."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from proxima.plot import collect_panels
from tests.cli_helpers import TINY_ENV, TINY_POP, TINY_RUN, fake_run_dir, module_written_in, run_main

ENV = "tiny48env:Tiny"
REFUSAL = (f"the recorded env '{ENV}' would import and run module 'tiny48env'; not done for an env id read from a file: "
           f"pass --env {ENV} to `proxima report` if you trust that module (or --trust-run to trust this run's files)")
#: the cell of a deterministic evaluation over the run's default 10 episodes (--eval-episodes 0)
EVALUATED = re.compile(r"\| final eval return \| (-?\d+\.\d\d) \u00b1 \d+\.\d\d over 10 episodes \(deterministic\) of the "
                       r"policy at step 128 \|")


@pytest.fixture
def env_module(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "tiny48env", TINY_ENV)


@pytest.fixture
def run(env_module, tmp_path, capsys):
    """A finished 128-step run of the module env, with no eval.json (--eval-episodes 0)."""
    run_dir = tmp_path / "runs" / "sp1"
    code, _, err = run_main(["train", ENV, *TINY_RUN, "--total-timesteps", "128", "--run-dir", str(run_dir), "--quiet"],
                            capsys)
    assert code == 0, err
    assert not (run_dir / "eval.json").exists()
    return run_dir


def _cell(run_dir) -> str:
    [line] = [ln for ln in (run_dir / "report.md").read_text().splitlines() if ln.startswith("| final eval return |")]
    return line


def _eval_mean(run_dir, capsys) -> float:
    code, out, err = run_main(["eval", str(run_dir), "--env", ENV, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)["mean_return"]


def test_report_without_trust_names_its_own_flags_in_the_cell_and_in_one_note(run, capsys):
    code, out, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    assert out == f"wrote {run / 'report.md'}\n"
    cell = _cell(run)
    assert REFUSAL in cell and "proxima eval" not in cell, cell
    assert err.splitlines() == [f"proxima: note: {run}: final eval return not filled in the report (could not evaluate: "
                                f"{run}/checkpoints/step_000000000128.pt: {REFUSAL})"]


def test_report_of_several_runs_not_evaluated_says_so_in_one_note(run, tmp_path, capsys):
    copy = tmp_path / "runs" / "sp2"
    shutil.copytree(run, copy)
    code, _, err = run_main(["report", str(run), str(copy), "--out", str(tmp_path / "both.md")], capsys)
    assert code == 0, err
    notes = [ln for ln in err.splitlines() if "not filled" in ln]
    assert notes == [f"proxima: note: 2 runs' final eval return not filled in the report (first, {run}: could not evaluate: "
                     f"{run}/checkpoints/step_000000000128.pt: {REFUSAL})"]


@pytest.mark.parametrize("flags", [["--env", ENV], ["--trust-run"]])
def test_report_env_or_trust_run_fills_the_cell_with_evals_number(run, capsys, flags):
    code, _, err = run_main(["report", str(run), *flags], capsys)
    assert code == 0, err
    match = EVALUATED.search(_cell(run))
    assert match, _cell(run)
    assert float(match.group(1)) == pytest.approx(_eval_mean(run, capsys), abs=0.005)  # eval's load and env, eval's number
    assert "note" not in err and f"evaluated {run}: " in err


def test_report_env_of_another_env_is_not_built_and_is_noted(run, capsys):
    code, _, err = run_main(["report", str(run), "--env", "tiny48env:Other"], capsys)
    assert code == 0, err
    assert REFUSAL in _cell(run)  # the run is evaluated on its own env or not at all
    assert ("proxima report: note: --env tiny48env:Other did nothing: no run evaluated here records that env (a run with "
            "an eval.json of its last step is not evaluated again)") in err.splitlines()


def test_population_report_evaluates_module_env_members_with_trust_run(env_module, tmp_path, capsys):
    pop = tmp_path / "pop"
    code, _, err = run_main(["train", ENV, "--seeds", "1-2", "--run-dir", str(pop), "--total-timesteps", "64",
                             "--eval-episodes", "0", "--quiet", *TINY_POP], capsys)
    assert code == 0, err
    code, _, err = run_main(["report", str(pop)], capsys)
    assert code == 0, err
    assert f"pass --env {ENV} to `proxima report`" in err
    assert "Final return per member: last training return." in (pop / "report.md").read_text()
    code, _, err = run_main(["report", str(pop), "--trust-run"], capsys)
    assert code == 0, err
    assert "Final return per member: evaluated now from the latest checkpoint (no eval.json). Evaluated at step 64, over 10 " \
           "episodes per member." in (pop / "report.md").read_text()
    evaluated = [ln.split(": ", 1)[0] for ln in err.splitlines() if ln.startswith("evaluated ")]
    assert evaluated == [f"evaluated {pop / 'm000-seed1'}", f"evaluated {pop / 'm001-seed2'}"]
    assert "could not be evaluated" not in err


def _runs(root, n: int, **config) -> list:
    return [fake_run_dir(root, f"r{seed}", steps=(100, 200), returns=(seed, 2.0 * seed), seed=seed, **config)
            for seed in range(1, n + 1)]


@pytest.mark.parametrize("n", [2, 4])
def test_plot_ci_of_few_single_runs_carries_the_small_sample_caveat(tmp_path, n):
    [(_, _, [curve])] = collect_panels(_runs(tmp_path, n), band="ci", stat="iqm")
    assert curve.label == f"IQM of {n} runs"
    assert curve.band_label == "95% bootstrap CI of the IQM \u2020"
    assert curve.note == "\u2020 < 5 runs: covers well under 95%"


def test_plot_ci_of_five_single_runs_has_no_caveat(tmp_path):
    [(_, _, [curve])] = collect_panels(_runs(tmp_path, 5), band="ci", stat="iqm")
    assert (curve.band_label, curve.note) == ("95% bootstrap CI of the IQM", None)


def test_plot_settings_in_one_panel_say_the_caveat_once_after_the_band(tmp_path):
    runs = _runs(tmp_path / "a", 3, lr=0.001) + _runs(tmp_path / "b", 2, lr=0.01)
    [(_, _, curves)] = collect_panels(runs, band="ci", stat="iqm")
    assert [c.band_label for c in curves] == [None, None]
    assert curves[0].note == "shaded: 95% bootstrap CI of the IQM \u2020\n\u2020 < 5 runs: covers well under 95%"
    assert curves[1].note is None
