"""`proxima report` names checkpoints/best.pt beside the best eval row only when the file holds that
row's evaluation (docs/reliability.md, Resume): a resume after a crash keeps the best.pt the lost
training wrote, and the resumed training evaluates the same steps again, so best.pt's step can be
the best row's while its policy scored another return. The report then says what best.pt holds."""

from __future__ import annotations

import csv
import json


from proxima import checkpoint as ckpt
from proxima.report import build_report
from tests.cli_helpers import run_main
from tests.unit.test_review29_runrecord import scripted_evals  # noqa: F401  (the fixture: scripted --eval-every means)

TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "1", "--update-epochs", "1", "--threads", "1",
        "--no-progress", "--eval-every", "32", "--eval-episodes", "1"]
LABEL = "eval return during training, best"


def _report(run) -> str:
    return build_report([run], episodes=0).read_text()


def _row(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {LABEL} |"))


def _notes(text: str) -> list:
    return [line for line in text.splitlines() if line.startswith("- checkpoints/best.pt")]


def _set_eval_cell(run, step: int, text: str) -> None:
    """metrics.csv with the eval/mean_return of ``step``'s row written as ``text``."""
    path = run / "metrics.csv"
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    at, col = rows[0].index("global_step"), rows[0].index("eval/mean_return")
    for row in rows[1:]:
        if row[at] == str(step):
            row[col] = text
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)


def test_best_pt_holding_the_best_row_is_named_beside_it(tmp_path, capsys, scripted_evals):
    run = tmp_path / "r"
    scripted_evals += [10.0, 1000 / 3, 20.0, 30.0]  # best.pt at step 64
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run), *TINY, "--total-timesteps", "128"], capsys)
    assert code == 0, err
    assert ckpt.load_checkpoint(run / "checkpoints" / "best.pt")["best_eval"] == 1000 / 3
    text = _report(run)
    assert _row(text) == f"| {LABEL} | 333.33 at step 64 (checkpoints/best.pt) |"
    assert _notes(text) == []
    # the row to 6 significant digits (another writer's CSV) still records best.pt's evaluation
    _set_eval_cell(run, 64, "333.333")
    assert _row(_report(run)) == f"| {LABEL} | 333.33 at step 64 (checkpoints/best.pt) |"
    # a later row scoring more: best.pt holds an evaluation the CSV records, not the best one, and says so
    _set_eval_cell(run, 96, "400.0")
    text = _report(run)
    assert _row(text) == f"| {LABEL} | 400.00 at step 96 |"
    assert _notes(text) == ["- checkpoints/best.pt holds the policy evaluated at step 64 (333.33), not the best "
                            "evaluation above; `proxima eval RUN --best` evaluates that policy."]


def test_a_best_pt_kept_from_training_lost_before_a_resume_is_not_credited_with_the_resumed_best(
        tmp_path, capsys, scripted_evals):
    run = tmp_path / "r"
    # evaluations at 32, 64, 96, 128; checkpoints at 64 and 128; best.pt written at step 96 (500.0)
    scripted_evals += [10.0, 20.0, 500.0, 30.0]
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run), *TINY, "--total-timesteps", "128",
                             "--checkpoint-every", "2"], capsys)
    assert code == 0, err
    assert _row(_report(run)) == f"| {LABEL} | 500.00 at step 96 (checkpoints/best.pt) |"
    # a SIGKILL after best.pt at 96, before the checkpoint at 128: that training's end never reached the disk
    ckpt.checkpoint_path(run, 128).unlink()
    (run / "eval.json").unlink()
    scripted_evals += [172.5, 150.0]  # the resumed training evaluates steps 96 and 128 again
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    assert code == 0, err
    best = ckpt.load_checkpoint(run / "checkpoints" / "best.pt")
    assert (best["global_step"], best["best_eval"]) == (96, 500.0)  # kept: only a better policy replaces it
    started = json.loads((run / "meta.json").read_text())["resumes"][0]["started"]
    text = _report(run)
    # was: "172.50 at step 96 (checkpoints/best.pt)", a return that file's policy never scored
    assert _row(text) == f"| {LABEL} | 172.50 at step 96 |"
    lost = ("training before the resume from step 64 (meta.json's resumes, started " + started + ")")
    assert _notes(text) == [
        "- checkpoints/best.pt holds the policy evaluated at step 96 (500.00), which no metrics.csv row records: "
        f"{lost} wrote it and was lost (killed or crashed before its next checkpoint); the resume kept it, as only "
        "a better policy replaces best.pt. The best above is the resumed training's; `proxima eval RUN --best` "
        "evaluates best.pt's."]
    # two resumes from before best.pt's step: the note names the last, the one whose training it outlived
    meta = json.loads((run / "meta.json").read_text())
    meta["resumes"].insert(0, {"step": 32, "started": "2020-01-01T00:00:00"})
    (run / "meta.json").write_text(json.dumps(meta))
    (note,) = _notes(_report(run))
    assert f": {lost} wrote it" in note
    # the best row records best.pt's value at another step (a capped return scored twice): still no row of ITS step
    _set_eval_cell(run, 128, "500.0")
    text = _report(run)
    assert _row(text) == f"| {LABEL} | 500.00 at step 128 |"
    (note,) = _notes(text)
    assert note.startswith("- checkpoints/best.pt holds the policy evaluated at step 96 (500.00), which no metrics.csv "
                           f"row records: {lost} wrote it")
    # a meta.json that records no resume: the same, without naming one
    meta = json.loads((run / "meta.json").read_text())
    del meta["resumes"]
    (run / "meta.json").write_text(json.dumps(meta))
    (note,) = _notes(_report(run))
    assert ", which no metrics.csv row records: training that a resume went back on wrote it" in note


def test_an_older_damaged_or_linked_best_pt_and_several_runs_notes(tmp_path, capsys, scripted_evals):
    import math
    import shutil

    import torch

    run = tmp_path / "r"
    scripted_evals += [10.0, 1000 / 3, 20.0, 30.0]  # best.pt at step 64 (333.33)
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run), *TINY, "--total-timesteps", "128"], capsys)
    assert code == 0, err
    best = run / "checkpoints" / "best.pt"
    state = torch.load(best, weights_only=True)
    named = f"| {LABEL} | 333.33 at step 64 (checkpoints/best.pt) |"
    # several runs: each note names its run, and a run's own is kept whichever run it is
    shutil.copytree(run, tmp_path / "a")
    shutil.copytree(run, tmp_path / "b")
    _set_eval_cell(tmp_path / "b", 96, "400.0")
    text = build_report([tmp_path / "a", tmp_path / "b"], out=tmp_path / "both.md", episodes=0).read_text()
    assert [line for line in text.splitlines() if "checkpoints/best.pt holds" in line] == [
        "- b: checkpoints/best.pt holds the policy evaluated at step 64 (333.33), not the best evaluation above; "
        "`proxima eval RUN --best` evaluates that policy."]
    # written before checkpoints recorded best_eval: its step, the best row's, is all there is to go by
    del state["best_eval"]
    torch.save(state, best)
    assert _row(_report(run)) == named
    # a damaged value: nothing to name the file by, nor a note saying what it holds
    state["best_eval"] = math.nan
    torch.save(state, best)
    text = _report(run)
    assert _row(text) == f"| {LABEL} | 333.33 at step 64 |" and _notes(text) == []
    # a link, even within the run to a file with the very evaluation: not a best.pt the run wrote, so not named
    state["best_eval"] = 1000 / 3
    torch.save(state, run / "kept.pt")
    best.unlink()
    best.symlink_to(run / "kept.pt")
    assert _row(_report(run)) == f"| {LABEL} | 333.33 at step 64 |"
