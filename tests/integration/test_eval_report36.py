"""eval records what it ran with (seed, backend, max_steps); report's std across runs is the sample std;
report names the rows metrics.csv lacks (a gap, a file cut before the run's checkpoint)."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from tests.cli_helpers import TINY_RUN, fake_run_dir, run_main

#: 5 iterations of 64 steps with an end-of-run evaluation of 2 episodes (eval.json)
STEPS = 320


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from proxima import cli

    run_dir = tmp_path_factory.mktemp("eval36") / "run"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--eval-episodes", "2", "--total-timesteps", str(STEPS),
                     "--run-dir", str(run_dir), "--quiet"]) == 0
    return run_dir


def _table_cell(text: str, field: str) -> str:
    [row] = [line for line in text.splitlines() if line.startswith(f"| {field} |")]
    return row.split(" | ")[1].rstrip(" |")


# ------------------------------------------------------------------------------------ eval's record
def test_eval_json_records_the_seed_backend_and_step_cap_it_ran_with(run):
    saved = json.loads((run / "eval.json").read_text())
    # the run's seed (1) + 1,000,000; "auto" as built for CartPole; the default cap though no episode was cut
    assert (saved["seed"], saved["backend"], saved["max_steps"]) == (1_000_001, "native", 100_000)
    assert "unfinished" not in saved and saved["global_step"] == STEPS


def test_eval_json_output_records_the_seed_given_or_defaulted_and_the_backend_built(run, capsys):
    code, out, err = run_main(["eval", str(run), "--json"], capsys)
    assert code == 0, err
    default = json.loads(out)
    assert (default["seed"], default["backend"], default["max_steps"]) == (1_000_001, "native", 100_000)
    # the same evaluation as eval.json: its numbers too
    assert default["returns"] == json.loads((run / "eval.json").read_text())["returns"]

    code, out, err = run_main(["eval", str(run), "--json", "--seed", "7", "--backend", "gymnasium", "--max-steps", "300"], capsys)
    assert code == 0, err
    typed = json.loads(out)
    assert (typed["seed"], typed["backend"], typed["max_steps"]) == (7, "gymnasium", 300)


def test_a_gymnasium_run_records_gymnasium_in_its_eval_json(tmp_path, capsys):
    run_dir = tmp_path / "gym"
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--backend", "gymnasium", "--eval-episodes", "1",
                             "--total-timesteps", "64", "--seed", "4", "--run-dir", str(run_dir), "--quiet"], capsys)
    assert code == 0, err
    saved = json.loads((run_dir / "eval.json").read_text())
    assert (saved["seed"], saved["backend"]) == (1_000_004, "gymnasium")


def test_population_eval_keeps_members_training_seed_and_adds_backend(tmp_path_factory, capsys):
    from tests.cli_helpers import tiny_population

    pop = tiny_population(tmp_path_factory, "pop36", 32)
    capsys.readouterr()  # the training's lines
    code, out, err = run_main(["eval", str(pop), "--json", "--episodes", "2"], capsys)
    assert code == 0, err
    result = json.loads(out)
    # "seed" of a member row is its training seed (population.json's), the evaluation's is eval_seed
    assert [(m["seed"], m["eval_seed"], m["backend"], m["max_steps"]) for m in result["members"]] == [
        (1, 1_000_001, "native", 100_000), (2, 1_000_002, "native", 100_000)]
    assert (result["eval_seed"], result["backend"]) == (None, "native")


# ------------------------------------------------------------------------------------ std across runs
def test_report_std_across_runs_is_the_sample_std_and_says_so(tmp_path):
    from proxima.report import build_report

    dirs = []
    for name, mean in (("a", 10.0), ("b", 20.0), ("c", 30.0)):
        d = fake_run_dir(tmp_path, name)
        (d / "eval.json").write_text(json.dumps({"env_id": "Fake-v0", "episodes": 2, "mean_return": mean, "std_return": 1.0,
                                                 "returns": [mean - 1, mean + 1], "lengths": [5, 5], "deterministic": True}))
        dirs.append(d)
    text = build_report(dirs, out=tmp_path / "r.md", episodes=0).read_text()
    # sqrt(((-10)^2 + 0 + 10^2) / 2) = 10; divided by n it would be 8.16
    assert "Final eval of Fake-v0 over 3 runs: mean 20.00, std (n-1) 10.00, min 10.00, max 30.00." in text
    assert "std (n-1) is the sample standard deviation of the runs' final eval mean returns" in text
    assert "\u00b1 is the standard deviation of a run's evaluation returns over its episodes, its squared deviations averaged over the episodes (ddof 0" in text


# ------------------------------------------------------------------------------------ rows missing
def _keep_rows(run_dir, keep) -> None:
    """metrics.csv with only the rows whose iteration ``keep(iteration)`` accepts."""
    path = run_dir / "metrics.csv"
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([rows[0]] + [r for r in rows[1:] if keep(int(r[0]))])


def test_report_names_iterations_missing_in_the_middle_and_no_complete_episode_count(run, tmp_path):
    from proxima.report import build_report

    gap = shutil.copytree(run, tmp_path / "gap")
    _keep_rows(gap, lambda i: i not in (2, 3))  # as a resume from a metrics.csv cut after iteration 1 leaves it
    text = build_report([gap], episodes=0).read_text()
    assert ("- metrics.csv has no rows of iterations 2-3 (between step 64 and step 256): rows missing") in text
    assert _table_cell(text, "episodes finished").startswith("at least ")
    assert _table_cell(text, "episodes finished").endswith(" (rows missing)")
    assert _table_cell(text, "steps") == f"{STEPS:,}"  # the last row's step is still the run's: not marked


def test_report_names_a_metrics_csv_that_ends_before_the_runs_checkpoint(run, tmp_path):
    from proxima.report import build_report

    cut = shutil.copytree(run, tmp_path / "cut")
    _keep_rows(cut, lambda i: i <= 2)  # a copied or restored file cut after iteration 2 (step 128)
    text = build_report([cut], episodes=0).read_text()
    assert ("- metrics.csv ends at step 128 (iteration 2), but the run reached step 320 (its newest checkpoint and its "
            "final evaluation): the rows of iterations 3-5 are missing") in text
    assert _table_cell(text, "steps") == "320 (128 in metrics.csv: rows missing)"
    assert _table_cell(text, "iterations") == "2 (rows missing)"
    assert _table_cell(text, "episodes finished").startswith("at least ")


def test_report_of_complete_rows_has_no_missing_note(run, tmp_path):
    from proxima.report import build_report

    whole = shutil.copytree(run, tmp_path / "whole")
    text = build_report([whole], episodes=0).read_text()
    assert "rows missing" not in text and _table_cell(text, "iterations") == "5"
    assert "env seed 1,000,001, backend native, at most 100,000 steps per episode" in text


def test_report_of_a_run_in_progress_takes_a_checkpoint_ahead_of_its_rows_for_no_loss(run, tmp_path):
    import os
    import socket

    from proxima.report import build_report

    live = shutil.copytree(run, tmp_path / "live")
    _keep_rows(live, lambda i: i <= 4)  # its checkpoint written, the row of that iteration not yet read
    (live / ".proxima.lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": "T"}))
    text = build_report([live], episodes=0).read_text()
    assert "rows missing" not in text and "metrics.csv ends at" not in text
    assert _table_cell(text, "steps").startswith("256 of 320 steps so far (in progress: locked by pid ")
