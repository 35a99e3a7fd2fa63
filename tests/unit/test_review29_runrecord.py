"""Review 29, what a run's files record across resumes: a resume from an explicitly older checkpoint
that set best.pt aside writes a new best.pt at its next evaluation (and the report names best.pt only
when it holds the best row), meta.json's resumes record the device and the report shows what a resume
changed, a resume that trains nothing leaves config.yaml as it was, and a resume records the run
directory's absolute path however the run was named."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml

from cli_helpers import run_main
from proxima import checkpoint as ckpt
from proxima.report import build_report

TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "1", "--update-epochs", "1", "--threads", "1",
        "--no-progress"]


def _train(run, capsys, *extra) -> None:
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run), *TINY, *extra], capsys)
    assert code == 0, err


def _row(text: str, label: str, section: str = "") -> str:
    """The report's first table row labelled ``label`` after the heading ``section``."""
    return next(line for line in text[text.index(section):].splitlines() if line.startswith(f"| {label} |"))


# ------------------------------------------------------------------------------ 1: best.pt set aside by an older resume
@pytest.fixture
def scripted_evals(monkeypatch):
    """--eval-every evaluations (the only caller passing ``stop``) return the means put in the list, in
    order; the end-of-run evaluation stays real."""
    from proxima import evaluate as ev

    real, means = ev.evaluate, []

    def fake(*args, **kwargs):
        result = real(*args, **kwargs)
        if "stop" in kwargs:
            result = {**result, "mean_return": means.pop(0), "std_return": 0.0}
        return result

    monkeypatch.setattr(ev, "evaluate", fake)
    return means


def test_a_resume_whose_best_pt_was_set_aside_writes_one_again(tmp_path, capsys, scripted_evals):
    run = tmp_path / "r2"
    # best.pt first written at step 32 (10.0; no checkpoint there), replaced at 96 (20.0)
    scripted_evals += [10.0, 5.0, 20.0, 3.0]
    _train(run, capsys, "--total-timesteps", "128", "--eval-every", "32", "--eval-episodes", "1", "--checkpoint-every", "2")
    assert ckpt.load_checkpoint(run / "checkpoints" / "best.pt")["global_step"] == 96
    older = ckpt.checkpoint_path(run, 64)
    assert ckpt.load_checkpoint(older)["best_eval"] == 10.0  # the policy of the best.pt that step 96 replaced
    scripted_evals += [10.0]  # the resumed evaluation at step 96 equals that best, is not above it
    code, _, err = run_main(["resume", str(older), "--total-timesteps", "96"], capsys)
    assert code == 0, err
    assert "and best.pt (its step 96;" in err  # set aside with the newer checkpoints
    # was: no best.pt at all (`proxima eval RUN --best`: no checkpoints/best.pt), the best kept at 10.0 without a file
    best = ckpt.load_checkpoint(run / "checkpoints" / "best.pt")
    assert (best["global_step"], best["best_eval"]) == (96, 10.0)
    assert (f"proxima: note: {older.name} records a best eval return of 10.00, but {run / 'checkpoints' / 'best.pt'} that "
            "held it is not there (set aside with the newer checkpoints, or removed): the resumed run's best starts afresh, "
            "and its next --eval-every evaluation writes best.pt") in err
    assert ckpt.load_checkpoint(ckpt.checkpoint_path(run, 96))["best_eval"] == 10.0
    code, out, err = run_main(["eval", str(run), "--best", "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    # of the rows tied at 10.0 (steps 32 and 96) the report names the one best.pt holds
    text = build_report([run], episodes=0).read_text()
    assert _row(text, "eval return during training, best") == (
        "| eval return during training, best | 10.00 at step 96 (checkpoints/best.pt) |")


def test_a_checkpoint_that_scored_the_set_aside_best_becomes_best_pt_again(tmp_path, capsys, scripted_evals):
    run, reference = tmp_path / "r", tmp_path / "ref"
    scripted_evals += [10.0, 20.0, 15.0, 30.0]  # best.pt at 32, 64 (20.0) and 128
    _train(run, capsys, "--total-timesteps", "128", "--eval-every", "32", "--eval-episodes", "1", "--checkpoint-every", "1",
           "--keep-checkpoints", "10")
    shutil.copytree(run, reference)
    older = ckpt.checkpoint_path(run, 64)
    scripted_evals += [15.0]
    code, _, err = run_main(["resume", str(older), "--total-timesteps", "96"], capsys)
    assert code == 0, err
    # was: no best.pt (15.0 at step 96 is not above the checkpoint's 20.0); now step 64's, as the run had it then
    assert (run / "checkpoints" / "best.pt").read_bytes() == older.read_bytes()
    assert (f"proxima: note: {older.name} records a best eval return of 20.00, but {run / 'checkpoints' / 'best.pt'} that "
            f"held it is not there (set aside with the newer checkpoints, or removed): {older.name}, which scored it, is "
            "best.pt again") in err
    assert ckpt.load_checkpoint(ckpt.checkpoint_path(run, 96))["best_eval"] == 20.0  # as the uninterrupted run's
    assert ckpt.load_checkpoint(ckpt.checkpoint_path(reference, 96))["best_eval"] == 20.0
    text = build_report([run], episodes=0).read_text()
    assert _row(text, "eval return during training, best") == (
        "| eval return during training, best | 20.00 at step 64 (checkpoints/best.pt) |")


def test_the_report_names_best_pt_only_when_it_holds_the_best_row(tmp_path, capsys, scripted_evals):
    run = tmp_path / "r"
    scripted_evals += [10.0, 5.0]
    _train(run, capsys, "--total-timesteps", "64", "--eval-every", "32", "--eval-episodes", "1")
    label = "eval return during training, best"
    assert _row(build_report([run], episodes=0).read_text(), label) == f"| {label} | 10.00 at step 32 (checkpoints/best.pt) |"
    (run / "checkpoints" / "best.pt").unlink()
    # was: "(checkpoints/best.pt)" named whether or not the file was there
    assert _row(build_report([run], episodes=0).read_text(), label) == f"| {label} | 10.00 at step 32 |"


# ------------------------------------------------------------------------------ 2: what a resume changed, in the report
def test_a_resume_records_its_device_and_the_report_shows_what_changed(tmp_path, capsys):
    run = tmp_path / "r"
    _train(run, capsys, "--total-timesteps", "32", "--eval-episodes", "0")
    assert run_main(["resume", str(run), "--total-timesteps", "64", "--quiet"], capsys)[0] == 0
    meta = json.loads((run / "meta.json").read_text())
    assert meta["resumes"][0]["device"] == "cpu"  # was: not recorded (--device may change on resume)
    text = build_report([run], episodes=0).read_text()
    assert _row(text, "torch", "## Versions and machine") == f"| torch | {torch.__version__} |"  # nothing changed: as before
    assert _row(text, "device", "## Versions and machine") == "| device | cpu |"
    # the first start ran other code, on another device, with another torch
    meta.update(device="cuda:0", git_commit="e433af9", git_dirty=False)
    meta["versions"]["torch"] = "2.13.0"
    meta["resumes"][0].update(git_commit="b6d8522", git_dirty=False)
    (run / "meta.json").write_text(json.dumps(meta))
    text = build_report([run], episodes=0).read_text()
    # was: the first start's alone (| torch | 2.13.0 |, | git commit | e433af9 |, | device | cuda:0 |)
    assert _row(text, "torch", "## Versions and machine") == f"| torch | 2.13.0 -> {torch.__version__} from step 32 |"
    assert _row(text, "git commit") == "| git commit | e433af9 -> b6d8522 from step 32 |"
    assert _row(text, "device", "## Versions and machine") == "| device | cuda:0 -> cpu from step 32 |"
    assert _row(text, "numpy").count("->") == 0


# ------------------------------------------------------------------------------ 3: a resume that trains nothing
def test_a_resume_of_a_complete_run_leaves_config_yaml_as_it_was(tmp_path, capsys):
    run = tmp_path / "r3"
    _train(run, capsys, "--total-timesteps", "64", "--eval-episodes", "1")
    before = (run / "config.yaml").read_bytes()
    for flags in (["--stop-return", "10", "--keep-checkpoints", "1"], ["--checkpoint-every", "7"]):
        code, _, err = run_main(["resume", str(run), *flags], capsys)
        assert code == 0, err
        assert "the run is complete (64 steps)" in err
        # was: config.yaml said stop_return 10.0, keep_checkpoints 1 (or checkpoint_every 7), which nothing ran with
        assert (run / "config.yaml").read_bytes() == before, flags
    code, _, err = run_main(["resume", str(run)], capsys)
    assert code == 0 and "differs from the checkpoint's" not in err, err
    # the documented exception: another --eval-episodes evaluates the end again, and config.yaml says so
    code, _, err = run_main(["resume", str(run), "--eval-episodes", "2", "--keep-checkpoints", "1"], capsys)
    assert code == 0, err
    assert json.loads((run / "eval.json").read_text())["episodes"] == 2
    config, was = yaml.safe_load((run / "config.yaml").read_text()), yaml.safe_load(before)
    assert (config["eval_episodes"], config["keep_checkpoints"]) == (2, was["keep_checkpoints"])
    code, _, err = run_main(["resume", str(run)], capsys)
    assert code == 0 and "differs from the checkpoint's" not in err, err


# ------------------------------------------------------------------------------ 4: run_dir however the run was resumed
def test_a_resumed_run_records_its_absolute_directory_however_it_was_named(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _train("r2", capsys, "--total-timesteps", "32", "--eval-episodes", "0")
    assert yaml.safe_load((tmp_path / "r2" / "config.yaml").read_text())["run_dir"] == "r2"  # a new run: as given (README)
    shutil.copytree(tmp_path / "r2", tmp_path / "r3")
    assert run_main(["resume", "r2", "--total-timesteps", "64", "--quiet"], capsys)[0] == 0
    name = ckpt.checkpoint_path("r3", 32)
    assert run_main(["resume", str(name), "--total-timesteps", "64", "--quiet"], capsys)[0] == 0
    # was: run_dir: r2 (the first start's relative name) by directory, the absolute path from a checkpoint file
    for run in ("r2", "r3"):
        assert yaml.safe_load((tmp_path / run / "config.yaml").read_text())["run_dir"] == str((tmp_path / run).resolve())


def test_meta_json_records_the_threads_the_run_uses(tmp_path, capsys):
    """machine.torch_threads was torch.get_num_threads() when meta.json was gathered: by then the side
    thread's threads // 2 (--threads 2 recorded 1, --threads 4 recorded 2)."""
    run = tmp_path / "r"
    _train(run, capsys, "--threads", "2", "--total-timesteps", "64", "--eval-episodes", "0")
    assert json.loads((run / "meta.json").read_text())["machine"]["torch_threads"] == 2
