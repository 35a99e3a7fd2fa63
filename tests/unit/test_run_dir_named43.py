"""One answer to "which run does this path name" (evaluate.run_dir_named) for proxima eval, proxima
resume and evaluate(): eval worked it out in cli.py and evaluate() in evaluate.py, and the two
disagreed on a checkpoint typed inside RUN/checkpoints/ (eval ran the checkpoint's count, not RUN's)."""

import shutil

import proxima
from proxima import evaluate as ev
from tests.cli_helpers import run_main
from tests.unit import test_eval42 as eval42

run = eval42.run  # a finished 2-iteration CartPole run with --eval-episodes 3, checkpoints at steps 64 and 128

CKPT = "step_000000000128.pt"


def test_a_path_names_its_run_as_typed_or_none(run, tmp_path, monkeypatch):
    loose = tmp_path / "loose" / CKPT
    loose.parent.mkdir()
    shutil.copy(run / "checkpoints" / CKPT, loose)
    assert ev.run_dir_named(run) == run
    assert ev.run_dir_named(str(run / "checkpoints")) == run
    assert ev.run_dir_named(run / "checkpoints" / CKPT) == run
    assert ev.run_dir_named(loose) is None
    monkeypatch.chdir(run.parent)
    assert ev.run_dir_named(f"{run.name}/checkpoints/{CKPT}") == type(run)(run.name)  # relative, as typed
    monkeypatch.chdir(run / "checkpoints")
    assert ev.run_dir_named(CKPT).samefile(run)


def test_eval_of_a_checkpoint_typed_in_the_checkpoints_folder_runs_the_runs_episodes(run, tmp_path, monkeypatch, capsys):
    """RUN/config.yaml's eval_episodes (a resume may have changed it), as evaluate() runs for that file."""
    run = eval42._copy(run, tmp_path)
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("eval_episodes: 3", "eval_episodes: 2"))
    monkeypatch.chdir(run / "checkpoints")
    code, out, err = run_main(["eval", CKPT], capsys)
    assert code == 0, err
    assert " over 2 episodes (deterministic)" in out, out
    assert ev.evaluate(proxima.load(CKPT))["episodes"] == 2
