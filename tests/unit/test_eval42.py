"""Users of trained policies and run directories: RUN/checkpoints read as RUN (eval, load), evaluate()'s
default episode count is eval's, --video into a missing folder, episode counts in words, a first
checkpoint whose write was cut off, and a report past a damaged meta.json."""

import json
import os
import re
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


def _killed_at_first_checkpoint(run, tmp_path):
    """A copy of ``run`` as a kill during its first checkpoint's write leaves it: metrics.csv logs the
    first iteration (the one the checkpoint was due at, --checkpoint-every 1) and nothing after."""
    run = _copy(run, tmp_path)
    header, first = (run / "metrics.csv").read_text().splitlines()[:2]
    (run / "metrics.csv").write_text(f"{header}\n{first}\n")
    return run


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
    run = _killed_at_first_checkpoint(run, tmp_path)
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


# ------------------------------------------------------------------ mutation-review survivors (5ddb069, 37bc9cc)
@pytest.mark.parametrize("episodes", [None, "3", 2.5])
def test_an_eval_json_episodes_field_that_is_no_integer_is_said_as_unknown(episodes):
    """An eval.json edited by hand (no episodes, a string, a float): report and eval's line say "?",
    never crash on f"{n:,}"."""
    result = {"env_id": "CartPole-v1", "mean_return": 9.0, "std_return": 0.0, "deterministic": True}
    if episodes is not None:  # format_result's results are evaluate()'s or a current eval.json's: never without one
        result["episodes"] = episodes
        assert ev.format_result(result) == "CartPole-v1: 9.00 +- 0.00 over ? episodes (deterministic)"
    assert _eval_line(result) == "9.00 \u00b1 0.00 over ? episodes (deterministic)"


def _cut_off_line(run, capsys):
    return error_line(*run_main(["eval", str(run)], capsys)[::2])


def test_several_cut_off_first_writes_name_the_newest_and_count_the_others(run, tmp_path, capsys):
    run = _killed_at_first_checkpoint(run, tmp_path)
    ckpts = run / "checkpoints"
    # the older one renamed last: a listing in creation order would put the newer first
    (ckpts / "step_000000000128.pt").rename(ckpts / ".step_000000000128.pt.00000002.tmp")
    (ckpts / "step_000000000064.pt").rename(ckpts / ".step_000000000064.pt.00000001.tmp")
    line = _cut_off_line(run, capsys)
    assert (f"during the save): {ckpts / '.step_000000000128.pt.00000002.tmp'} (and 1 more like it) is all it left, "
            "no checkpoints/step_*.pt") in line, line


def test_a_cut_off_write_beside_a_link_named_like_one_names_the_real_file(run, tmp_path, capsys):
    run = _killed_at_first_checkpoint(run, tmp_path)
    ckpts = run / "checkpoints"
    (ckpts / "step_000000000064.pt").rename(ckpts / ".step_000000000064.pt.00000001.tmp")
    (ckpts / "step_000000000128.pt").unlink()
    os.symlink(tmp_path / "nowhere", ckpts / ".step_000000000128.pt.00000002.tmp")  # dangling: no temp file of a write
    line = _cut_off_line(run, capsys)
    assert (f"during the save): {ckpts / '.step_000000000064.pt.00000001.tmp'} is all it left, "
            "no checkpoints/step_*.pt") in line, line


@pytest.mark.parametrize("meta", [True, False])
def test_the_checkpoints_folder_of_a_run_without_checkpoints_gets_the_runs_line(run, tmp_path, capsys, meta):
    run = _copy(run, tmp_path)
    for ckpt in (run / "checkpoints").glob("step_*.pt"):
        ckpt.unlink()
    if not meta:
        (run / "meta.json").unlink()
    lines = [error_line(*run_main(["eval", str(path)], capsys)[::2]) for path in (run, run / "checkpoints")]
    assert lines[0] == lines[1], lines
    assert lines[1].startswith(f"proxima eval: error: {run}: its checkpoints are missing ("), lines[1]


def test_evaluate_runs_the_runs_config_eval_episodes_however_the_policy_was_named(run, tmp_path, monkeypatch):
    """RUN/config.yaml's eval_episodes (a resume may have changed it) for RUN, RUN/checkpoints and a file
    in RUN/checkpoints/, named relative to the working directory too."""
    run = _copy(run, tmp_path)
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("eval_episodes: 3", "eval_episodes: 5"))
    ckpt = run / "checkpoints" / "step_000000000128.pt"
    for path in (run, run / "checkpoints", ckpt):
        assert ev.evaluate(proxima.load(path))["episodes"] == 5, path
    monkeypatch.chdir(run / "checkpoints")
    assert ev.evaluate(proxima.load(ckpt.name))["episodes"] == 5


def test_evaluate_of_a_checkpoint_outside_any_run_runs_its_recorded_eval_episodes(run, tmp_path):
    """A checkpoint copied out of its run: the count it records (3), not 10, nor the config.yaml of a
    run whose folder it was copied into (only RUN/checkpoints/ is a run's)."""
    (tmp_path / "bare").mkdir()
    (tmp_path / "other" / "exported").mkdir(parents=True)
    (tmp_path / "other" / "config.yaml").write_text((run / "config.yaml").read_text().replace("eval_episodes: 3",
                                                                                            "eval_episodes: 5"))
    for folder in (tmp_path / "bare", tmp_path / "other" / "exported"):
        shutil.copy(run / "checkpoints" / "step_000000000128.pt", folder)
        assert ev.evaluate(proxima.load(folder / "step_000000000128.pt"))["episodes"] == 3, folder


def test_load_and_resume_of_the_checkpoints_folder_with_a_damaged_newest_act_as_the_run(run, tmp_path, capsys):
    runs = []
    for name in ("a", "b"):
        shutil.copytree(run, tmp_path / name)
        os.truncate(tmp_path / name / "checkpoints" / "step_000000000128.pt", 1000)
        runs.append(tmp_path / name)
    lines = []
    for path in (runs[0], runs[0] / "checkpoints"):
        with pytest.raises(proxima.checkpoint.CheckpointError) as e:
            proxima.load(path)
        lines.append(str(e.value))
    assert lines[0] == lines[1] and lines[1].startswith(f"{runs[0] / 'checkpoints' / 'step_000000000128.pt'}: "), lines
    resumed = [run_main(["resume", str(path), "--total-timesteps", "192", "--quiet"], capsys)
               for path in (runs[0], runs[1] / "checkpoints")]
    for (code, out, err), path in zip(resumed, runs):
        assert code == 0 and out == f"run directory: {path}\n", (code, out, err)
        assert (f"{path / 'checkpoints' / 'step_000000000128.pt'} is unusable (truncated checkpoint (1000 bytes, "
                f"the end of the archive is missing)); resuming from {path / 'checkpoints' / 'step_000000000064.pt'} "
                "instead") in err, err
        assert sorted(p.name for p in (path / "checkpoints").iterdir()) == [
            "step_000000000064.pt", "step_000000000128.pt", "step_000000000128.pt.corrupt", "step_000000000192.pt"]


def test_a_vanishing_newest_names_the_run_for_its_checkpoints_folder(run, monkeypatch):
    from proxima import checkpoint as ckpt

    def vanished(path, map_location):
        raise ckpt._Vanished(f"{path}: no such file or directory")

    monkeypatch.setattr(ckpt, "_load_file", vanished)
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.load_checkpoint(run / "checkpoints")
    assert str(e.value).startswith(f"{run}: its newest checkpoint was removed while being opened "), str(e.value)


def test_a_run_directory_named_checkpoints_is_read_as_itself(run, tmp_path, capsys):
    """--run-dir X/checkpoints, X holding run files of its own: X/checkpoints is the run, not X's folder."""
    shutil.copytree(run, tmp_path / "checkpoints")
    shutil.copy(run / "config.yaml", tmp_path)
    code, out, err = run_main(["eval", str(tmp_path / "checkpoints"), "--episodes", "1"], capsys)
    assert code == 0, err
    assert " at step 128 over 1 episode (deterministic)" in out, out


def test_a_checkpoint_file_named_checkpoints_beside_run_files_is_read_as_the_file(run, tmp_path, capsys):
    """cp RUN/checkpoints/step_N.pt X/checkpoints (no such folder there) makes a FILE named checkpoints."""
    shutil.copy(run / "checkpoints" / "step_000000000064.pt", tmp_path / "checkpoints")
    shutil.copy(run / "config.yaml", tmp_path)
    code, out, err = run_main(["eval", str(tmp_path / "checkpoints"), "--episodes", "1"], capsys)
    assert code == 0, err
    assert " at step 64 over 1 episode (deterministic)" in out, out


def test_a_temp_file_beside_rows_past_the_first_checkpoint_leaves_the_checkpoints_missing(run, tmp_path, capsys):
    """metrics.csv logs iterations past the first one a checkpoint was due at: the run wrote checkpoints
    and went on, so a leftover temp file is a later write's; the line says the checkpoints are missing
    (put them back), not that the first write was cut (nothing to resume)."""
    run = _copy(run, tmp_path)
    ckpts = run / "checkpoints"
    for ckpt in ckpts.glob("step_*.pt"):
        ckpt.unlink()
    (ckpts / ".step_000000000192.pt.abcd1234.tmp").write_bytes(b"x" * 100)
    line = error_line(*run_main(["eval", str(run)], capsys)[::2])
    assert f"{run}: its checkpoints are missing (metrics.csv logs 2 iteration(s), to step 128" in line, line
    assert f"put them back in {ckpts}" in line and "interrupted" not in line, line


# --- what metrics.csv and config.yaml say about a run without checkpoints (checkpoint._checkpoint_schedule)
def _no_checkpoints(run, tmp_path, rows: int, **config):
    """A copy of ``run`` without its step_*.pt, metrics.csv cut to its first ``rows`` rows, config.yaml's
    fields in ``config`` replaced."""
    run = _copy(run, tmp_path)
    for ckpt in (run / "checkpoints").glob("step_*.pt"):
        ckpt.unlink()
    lines = (run / "metrics.csv").read_text().splitlines()
    (run / "metrics.csv").write_text("\n".join(lines[:1 + rows]) + "\n")
    text = (run / "config.yaml").read_text()
    for key, value in config.items():
        text = re.sub(rf"(?m)^{key}: .*$", f"{key}: {value}", text)
    (run / "config.yaml").write_text(text)
    return run


def test_a_run_killed_in_its_first_iteration_stopped_before_its_first_checkpoint(run, tmp_path, capsys):
    run = _no_checkpoints(run, tmp_path, rows=0)
    for command in ("eval", "resume"):
        line = error_line(*run_main([command, str(run)], capsys)[::2])
        assert f"{run}: the run stopped before its first checkpoint (one is written every" in line, line


def test_rows_up_to_the_first_checkpoint_due_say_the_checkpoints_are_missing(run, tmp_path, capsys):
    run = _no_checkpoints(run, tmp_path, rows=1)  # --checkpoint-every 1: one was written at iteration 1
    line = error_line(*run_main(["eval", str(run)], capsys)[::2])
    assert f"{run}: its checkpoints are missing (metrics.csv logs 1 iteration(s), to step 64," in line, line


def test_a_cut_write_before_a_checkpoint_every_0_runs_end_is_its_first(run, tmp_path, capsys):
    """--checkpoint-every 0: the first checkpoint due is the run's end (iteration 10 here); a temp file
    beside 2 rows is a cut write (a Ctrl-C's checkpoint, cut by a second), not a later one's."""
    run = _no_checkpoints(run, tmp_path, rows=2, checkpoint_every=0, total_timesteps=640)
    (run / "checkpoints" / ".step_000000000128.pt.0badf00d.tmp").write_bytes(b"x" * 100)
    line = error_line(*run_main(["eval", str(run)], capsys)[::2])
    assert f"{run}: its first checkpoint's write was interrupted" in line, line


def test_resume_of_the_checkpoints_folder_names_the_run_directory_as_typed(run, tmp_path, capsys, monkeypatch):
    _copy(run, tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["resume", os.path.join("run", "checkpoints"), "--total-timesteps", "192"], capsys)
    assert code == 0, err
    assert out.splitlines()[-1] == "run directory: run", out


def test_the_checkpoints_folder_typed_as_dot_from_inside_it_is_the_run(run, tmp_path, capsys, monkeypatch):
    run = _copy(run, tmp_path)
    monkeypatch.chdir(run / "checkpoints")
    code, out, err = run_main(["eval", ".", "--episodes", "1"], capsys)
    assert code == 0, err
    assert " at step 128 over 1 episode (deterministic)" in out, out
