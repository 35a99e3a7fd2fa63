"""Review 37: how many minibatch gradient steps each iteration's update ran (losses/minibatch_updates in
metrics.csv and TensorBoard): update_epochs x num_minibatches without --target-kl, fewer where it
stopped the epoch loop (per member in a population); a resume of a run whose metrics.csv predates
the column rewrites it under the new header, its older rows kept with the cell blank."""

from __future__ import annotations

import csv

from proxima import cli
from proxima.logger import CSV_COLUMNS, _event_records
from tests.cli_helpers import TINY_POP, TINY_RUN, run_main

COLUMN = "losses/minibatch_updates"
#: 2 epochs x 2 minibatches (TINY_RUN's --update-epochs 1 overridden: a stop can then fall in either epoch)
FLAGS = [*TINY_RUN, "--update-epochs", "2", "--num-minibatches", "2"]
FULL = 4


def _rows(path) -> tuple[list, list]:
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r)
        return header, [dict(zip(header, row)) for row in r]


def write_under_header(path, columns: list, rows: list) -> None:
    """metrics.csv as an older Proxima wrote it: ``rows`` (dicts of cells) under ``columns`` alone."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def _train(run_dir, *extra) -> None:
    assert cli.main(["train", "CartPole-v1", *FLAGS, "--total-timesteps", "128", "--run-dir", str(run_dir), "--quiet", *extra]) == 0


def _tensorboard(run_dir) -> list:
    return [(e.step, v.simple_value) for p in sorted(run_dir.glob("events.out.tfevents.*"))
            for _, e in _event_records(p) for v in e.summary.value if v.tag == COLUMN]


def test_without_target_kl_every_iteration_logs_epochs_times_minibatches(tmp_path):
    run = tmp_path / "run"
    _train(run)
    header, rows = _rows(run / "metrics.csv")
    assert header == CSV_COLUMNS and COLUMN in header
    assert [r[COLUMN] for r in rows] == [str(FULL), str(FULL)]
    assert _tensorboard(run) == [(64, float(FULL)), (128, float(FULL))]


def test_a_target_kl_stop_logs_the_steps_it_ran(tmp_path):
    run = tmp_path / "run"
    _train(run, "--target-kl", "1e-9")
    _, rows = _rows(run / "metrics.csv")
    counts = [int(r[COLUMN]) for r in rows]
    # the first minibatch of an update starts from the rollout's policy (approx_kl ~0); a later one exceeds 1e-9
    assert all(1 <= c < FULL for c in counts), counts
    assert _tensorboard(run) == [(64, float(counts[0])), (128, float(counts[1]))]


def test_population_members_log_their_own_count(tmp_path):
    run = tmp_path / "R"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1", "--sweep", "target_kl=none,1e-9", "--run-dir", str(run),
                     "--total-timesteps", "64", "--eval-episodes", "0", "--quiet", *TINY_POP, "--update-epochs", "2"]) == 0
    (none,) = run.glob("m000-*")
    (tiny,) = run.glob("m001-*")
    _, off = _rows(none / "metrics.csv")
    _, on = _rows(tiny / "metrics.csv")
    assert [r[COLUMN] for r in off] == [str(FULL)] * len(off)  # TINY_POP: 2 minibatches, here 2 epochs
    assert off and all(1 <= int(r[COLUMN]) < FULL for r in on), on


def test_a_resume_of_an_old_header_run_writes_the_new_header_and_keeps_its_rows(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", "CartPole-v1", *FLAGS, "--total-timesteps", "64", "--run-dir", str(run), "--quiet"]) == 0
    path = run / "metrics.csv"
    _, rows = _rows(path)
    old = [c for c in CSV_COLUMNS if c != COLUMN]
    write_under_header(path, old, rows)  # the header before this column existed
    assert cli.main(["resume", str(run), "--total-timesteps", "128", "--quiet"]) == 0
    header, after = _rows(path)
    assert header == CSV_COLUMNS
    assert [r["global_step"] for r in after] == ["64", "128"]
    assert after[0][COLUMN] == "" and after[1][COLUMN] == str(FULL)
    # the older row's other cells stayed under their own names
    assert {k: after[0][k] for k in old} == {k: rows[0][k] for k in old}
    code, out, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    code, _, err = run_main(["plot", str(run), "--metric", "minibatch_updates", "--out", str(tmp_path / "p.png")], capsys)
    assert code == 0, err
    assert (tmp_path / "p.png").stat().st_size > 0
