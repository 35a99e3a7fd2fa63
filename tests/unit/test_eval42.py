"""Users of trained policies and run directories: RUN/checkpoints read as RUN (eval, load), evaluate()'s
default episode count is eval's, --video into a missing folder, episode counts in words, a first
checkpoint whose write was cut off, and a report past a damaged meta.json."""

import json
import os
import shutil

import pytest

import proxima
from proxima import evaluate as ev
from proxima.report import _eval_line
from tests.cli_helpers import TINY_RUN, error_line, run_main


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished 2-iteration CartPole run with a checkpoint at each (steps 64 and 128) and --eval-episodes 3."""
    from proxima import cli

    run_dir = tmp_path_factory.mktemp("eval42") / "run"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--eval-episodes", "3", "--checkpoint-every", "1",
                     "--total-timesteps", "128", "--run-dir", str(run_dir), "--quiet"]) == 0
    return run_dir


def _copy(run, tmp_path):
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def test_eval_and_load_read_a_runs_checkpoints_folder_as_the_run(run, capsys):
    code, out, err = run_main(["eval", str(run / "checkpoints"), "--episodes", "1"], capsys)
    assert code == 0, err
    assert " at step 128 over 1 episode (deterministic)" in out, out
    assert proxima.load(run / "checkpoints").path == str(run / "checkpoints" / "step_000000000128.pt")


def test_a_damaged_newest_in_the_checkpoints_folder_gets_the_run_directorys_line(run, tmp_path, capsys):
    run = _copy(run, tmp_path)
    os.truncate(run / "checkpoints" / "step_000000000128.pt", 1000)
    lines = [error_line(*run_main(["eval", str(path), "--episodes", "1"], capsys)[::2])
             for path in (run, run / "checkpoints")]
    assert lines[0] == lines[1]
    assert f"the run's newest sound checkpoint is {run / 'checkpoints' / 'step_000000000064.pt'}" in lines[1], lines[1]


def test_evaluate_runs_the_runs_eval_episodes_as_eval_does_unless_given(run, capsys):
    policy = proxima.load(run)
    code, out, err = run_main(["eval", str(run), "--json"], capsys)
    assert code == 0, err
    cli = json.loads(out)
    result = ev.evaluate(policy)
    assert result["episodes"] == cli["episodes"] == 3
    assert result["returns"] == cli["returns"]
    assert ev.evaluate(policy, episodes=2)["episodes"] == 2


def test_a_video_into_a_missing_folder_is_refused_before_any_episode(run, tmp_path, capsys, monkeypatch):
    def ran(*a, **k):
        raise AssertionError("the episodes ran")

    monkeypatch.setattr(ev, "_evaluate", ran)
    missing = tmp_path / "no" / "such"
    code, out, err = run_main(["eval", str(run), "--video", str(missing / "x.mp4")], capsys)
    line = error_line(code, err)
    assert line.endswith(f": folder {missing} does not exist; create it first"), line
    assert not (tmp_path / "no").exists() and out == ""


def test_episode_counts_are_words_with_thousands_separators():
    result = {"env_id": "CartPole-v1", "mean_return": 9.0, "std_return": 0.0, "episodes": 1, "deterministic": True}
    assert ev.format_result(result) == "CartPole-v1: 9.00 +- 0.00 over 1 episode (deterministic)"
    assert ev.format_result({**result, "episodes": 2000}).endswith(" over 2,000 episodes (deterministic)")
    assert _eval_line({**result, "episodes": 1}) == "9.00 \u00b1 0.00 over 1 episode (deterministic)"
    assert _eval_line({**result, "episodes": 2000}) == "9.00 \u00b1 0.00 over 2,000 episodes (deterministic)"


def test_a_first_checkpoint_cut_off_in_its_write_is_named_not_called_removed(run, tmp_path, capsys):
    run = _copy(run, tmp_path)
    ckpts = run / "checkpoints"
    (ckpts / "step_000000000064.pt").rename(ckpts / ".step_000000000064.pt.3f9a2c1d.tmp")  # a full-size temp file
    (ckpts / "step_000000000128.pt").unlink()
    for command in ("resume", "eval"):
        line = error_line(*run_main([command, str(run)], capsys)[::2])
        assert (f"{run}: its first checkpoint's write was interrupted (a kill or a second Ctrl-C during the save): "
                f"{ckpts / '.step_000000000064.pt.3f9a2c1d.tmp'} is all it left, no checkpoints/step_*.pt, so there is "
                "nothing to evaluate or resume; train it again from the start: proxima train --config "
                f"{run / 'config.yaml'} --resume auto (its files are moved aside)") in line, line
        assert "removed" not in line


def test_a_report_is_written_past_a_meta_json_that_is_not_json(run, tmp_path, capsys):
    run = _copy(run, tmp_path)
    (run / "meta.json").write_text("{garbage\n")
    code, out, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert (f"- {run / 'meta.json'}: not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 "
            "(char 1)); its versions and machine are treated as not recorded") in text
    assert "No versions recorded in meta.json." in text


def test_eval_of_the_checkpoints_folder_takes_the_runs_config_episodes_and_best(tmp_path, capsys):
    """RUN/checkpoints is RUN for eval's episode count (RUN/config.yaml's, which a resume may have
    changed after the checkpoint was written) and for --best (RUN/checkpoints/best.pt, not
    checkpoints/checkpoints/best.pt)."""
    from proxima import cli

    run = tmp_path / "run"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--eval-episodes", "3", "--eval-every", "64",
                     "--total-timesteps", "128", "--run-dir", str(run), "--quiet"]) == 0
    capsys.readouterr()  # the training's own lines
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("eval_episodes: 3", "eval_episodes: 2"))
    outs = []
    for path in (run, run / "checkpoints"):
        code, out, err = run_main(["eval", str(path)], capsys)
        assert code == 0, err
        outs.append(out)
    assert " over 2 episodes (deterministic)" in outs[1] and outs[0] == outs[1], outs
    best = [run_main(["eval", str(path), "--best", "--episodes", "1"], capsys) for path in (run, run / "checkpoints")]
    assert best[0][0] == best[1][0] == 0, best
    assert best[0][1] == best[1][1] and " at step " in best[1][1], best
