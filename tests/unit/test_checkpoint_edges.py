"""Checkpoint edges a reviewer found: a checkpoint linked in from another run, a damaged zip archive
whatever zipfile makes of it, a resume from best.pt, a name planted where a bad file is set aside,
and the lines eval prints when the env or the video fails. Each is one line (exit 2) or a note,
never a traceback, and nothing outside the run named is read as it, written or pruned."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from cli_helpers import edit_checkpoint, error_line, run_main, snapshot
from proxima import checkpoint as ckpt

#: 4 envs x 16 steps = 64 steps an iteration; 2 iterations, a checkpoint each
SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "128",
         "--checkpoint-every", "1", "--eval-episodes", "0", "--threads", "1", "--no-progress", "--quiet"]
MORE = ["--total-timesteps", "192", "--eval-episodes", "0", "--quiet"]
LINK_OUT = ("is a symbolic link to", "outside the run directory", "remove the link")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    from proxima import cli

    run_dir = tmp_path_factory.mktemp("trained") / "run"
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(run_dir), *SMALL]) == 0
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step_000000000064.pt", "step_000000000128.pt"]
    return run_dir


def copy_run(trained: Path, tmp_path: Path, name: str = "run") -> Path:
    return Path(shutil.copytree(trained, tmp_path / name, symlinks=True))


@pytest.fixture
def run_dir(trained, tmp_path) -> Path:
    return copy_run(trained, tmp_path)


def link_newest_to(run: Path, other: Path) -> Path:
    """RUN/checkpoints/step_<later>.pt, a link to ``other``'s newest checkpoint: RUN's newest by name."""
    link = run / "checkpoints" / "step_000000001024.pt"
    link.symlink_to(ckpt.list_checkpoints(other)[-1])
    return link


# ------------------------------------------------------------------ 1. a checkpoint linked in from another run
@pytest.mark.parametrize("command", [
    lambda run, link: ["resume", str(run)],
    lambda run, link: ["train", "--resume", str(link)],
    lambda run, link: ["train", "--resume", "auto", "--run-dir", str(run)],
], ids=["resume RUN", "train --resume LINK", "train --resume auto"])
def test_resume_refuses_a_checkpoint_linked_into_another_run_and_touches_neither(run_dir, trained, tmp_path, capsys, command):
    victim = copy_run(trained, tmp_path, "victim")
    link = link_newest_to(run_dir, victim)
    before, mine = snapshot(victim), snapshot(run_dir)
    code, _, err = run_main([*command(run_dir, link), *MORE, "--keep-checkpoints", "1"], capsys)
    error_line(code, err, f"{link}: is a symbolic link to {victim / 'checkpoints'}", f"outside the run directory {run_dir}",
               "remove the link")
    assert snapshot(victim) == before  # the other run: nothing trained into, pruned or rewritten
    assert snapshot(run_dir) == mine and not (run_dir / ".proxima.lock").exists()  # the link is not set aside as corrupt


def test_an_older_checkpoint_linked_out_is_refused_not_skipped_by_the_fallback(run_dir, trained, tmp_path, capsys):
    victim = copy_run(trained, tmp_path, "victim")
    older, newest = ckpt.list_checkpoints(run_dir)
    older.unlink()
    older.symlink_to(ckpt.list_checkpoints(victim)[0])
    newest.write_bytes(newest.read_bytes()[:1000])  # cut short: the resume falls back to the linked one
    code, _, err = run_main(["resume", str(run_dir), *MORE], capsys)
    error_line(code, err, f"{older}: is a symbolic link", "outside the run directory")
    assert snapshot(victim) == snapshot(copy_run(trained, tmp_path, "pristine"))


@pytest.mark.parametrize("best", [False, True], ids=["newest", "best.pt"])
def test_eval_and_report_refuse_a_checkpoint_linked_out_of_the_run(run_dir, trained, tmp_path, capsys, best):
    victim = copy_run(trained, tmp_path, "victim")
    if best:
        link = run_dir / "checkpoints" / "best.pt"
        link.symlink_to(ckpt.list_checkpoints(victim)[-1])
    else:
        link = link_newest_to(run_dir, victim)
    code, _, err = run_main(["eval", str(run_dir), "--episodes", "1", *(["--best"] if best else [])], capsys)
    error_line(code, err, f"{link}: is a symbolic link", f"outside the run directory {run_dir}")
    if not best:
        code, _, err = run_main(["report", str(run_dir), "--episodes", "1"], capsys)
        assert code == 0, err
        assert f"could not evaluate: {link}: is a symbolic link" in (run_dir / "report.md").read_text()


def test_a_checkpoint_linked_inside_its_run_still_evaluates(run_dir, capsys):
    kept = run_dir / "kept"
    kept.mkdir()
    newest = ckpt.list_checkpoints(run_dir)[-1]
    shutil.move(newest, kept / newest.name)
    newest.symlink_to(kept / newest.name)
    code, out, err = run_main(["eval", str(run_dir), "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["episodes"] == 1


# ------------------------------------------------------------------ 2. the folder of a linked checkpoint is never an import path
def test_eval_of_a_linked_checkpoint_never_imports_from_the_folder_it_was_named_in(trained, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "downloads"
    folder.mkdir()
    marker = tmp_path / "IMPORTED"
    (folder / "shadow_env_ck.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit('shadow module ran')\n")
    (folder / "model.pt").symlink_to(ckpt.list_checkpoints(trained)[-1])
    monkeypatch.chdir(folder)
    code, _, err = run_main(["eval", "model.pt", "--env", "shadow_env_ck:C", "--episodes", "1"], capsys)
    error_line(code, err, "cannot import module 'shadow_env_ck'", "run directories are never searched")
    assert not marker.exists()


# ------------------------------------------------------------------ 3. a damaged zip archive, whatever zipfile makes of it
def multi_disk(data: bytearray) -> None:
    """A flipped bit in the zip64 end-of-central-directory locator: 'spans several disks' (BadZipFile
    from zipfile.is_zipfile, not caught before)."""
    locator = data.find(b"PK\x06\x07")
    data[locator + 16] ^= 2


def encrypted(data: bytearray) -> None:
    """A flipped bit in a record's flags: 'encrypted, password required' (RuntimeError from testzip)."""
    central = data.find(b"PK\x01\x02")
    data[central + 8] ^= 1


def damage(path: Path, how) -> None:
    data = bytearray(path.read_bytes())
    how(data)
    path.write_bytes(bytes(data))


def deflate(path: Path) -> None:
    """The same records, compressed: torch.save never writes these (a small one can inflate to gigabytes)."""
    with zipfile.ZipFile(path) as src:
        records = [(info, src.read(info)) for info in src.infolist()]
    with zipfile.ZipFile(path, "w") as dst:
        for info, data in records:
            dst.writestr(info.filename, data, compress_type=zipfile.ZIP_DEFLATED)


@pytest.mark.parametrize("how, words", [
    (lambda p: damage(p, multi_disk), "corrupted checkpoint (damaged zip archive: zipfiles that span multiple disks"),
    (lambda p: damage(p, encrypted), "corrupted checkpoint (damaged zip archive: File 'archive/data.pkl' is encrypted"),
    (deflate, "corrupted checkpoint (record 'archive/data.pkl' is compressed (method 8); torch.save stores records uncompressed)"),
], ids=["multi-disk", "encrypted", "deflated"])
def test_a_damaged_zip_archive_is_one_line_and_the_resume_falls_back(run_dir, capsys, how, words):
    older, newest = ckpt.list_checkpoints(run_dir)
    how(newest)
    code, _, err = run_main(["eval", str(newest)], capsys)
    error_line(code, err, f"{newest}: {words}")
    code, _, err = run_main(["resume", str(run_dir), *MORE], capsys)
    assert code == 0, err
    assert f"{newest} is unusable ({words}" in err and f"resuming from {older} instead" in err
    assert Path(f"{newest}.corrupt").is_file()


# ------------------------------------------------------------------ 4. resuming from best.pt
def test_resume_from_best_sets_the_newer_checkpoints_aside(run_dir, capsys):
    older, newer = ckpt.list_checkpoints(run_dir)
    shutil.copy(older, run_dir / "checkpoints" / "best.pt")  # the best eval was at step 64
    old_128 = newer.read_bytes()
    code, _, err = run_main(["train", "--resume", str(run_dir / "checkpoints" / "best.pt"), *MORE], capsys)
    assert code == 0, err
    assert "moved the 1 newer one(s) (step_000000000128.pt) to" in err
    aside = list((run_dir / "checkpoints").glob("abandoned-*/step_000000000128.pt"))
    assert len(aside) == 1 and aside[0].read_bytes() == old_128  # the abandoned timeline is kept, not overwritten
    assert [p.name for p in ckpt.list_checkpoints(run_dir)][-2:] == ["step_000000000128.pt", "step_000000000192.pt"]
    steps = [line.split(",")[1] for line in (run_dir / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == ["64", "128", "192"]


# ------------------------------------------------------------------ 6. a name planted where a bad checkpoint is set aside
def test_a_folder_planted_at_the_corrupt_name_gets_a_free_name_instead(run_dir, capsys):
    older, newest = ckpt.list_checkpoints(run_dir)
    newest.write_bytes(newest.read_bytes()[:1000])
    planted = Path(f"{newest}.corrupt")
    planted.mkdir()
    (planted / "keep.txt").write_text("mine")
    code, _, err = run_main(["resume", str(run_dir), *MORE], capsys)
    assert code == 0, err
    assert f"the bad file is kept as {newest.name}.corrupt-2" in err
    assert Path(f"{newest}.corrupt-2").stat().st_size == 1000 and (planted / "keep.txt").read_text() == "mine"


# ------------------------------------------------------------------ 5. eval names where the env kwargs came from
def test_an_env_build_failing_with_recorded_kwargs_names_the_checkpoint_not_config_yaml(run_dir, capsys):
    path = edit_checkpoint(run_dir, lambda s: s["config"].update(env_kwargs={"max_episode_steps": -5}))
    code, _, err = run_main(["eval", str(run_dir), "--episodes", "1"], capsys)
    line = error_line(code, err, f"(env kwargs {{\"max_episode_steps\": -5}} recorded in {path}; give others with "
                                 "--env-kwargs JSON")
    assert "config.yaml" not in line  # config.yaml records {}: eval never read it


# ------------------------------------------------------------------ 7. --json when the video fails after the episodes
def test_eval_json_prints_the_result_when_the_video_fails_after_the_episodes(run_dir, tmp_path, monkeypatch, capsys):
    from proxima import video
    from proxima.video import VideoError

    def full_disk(frames, path, fps=30.0):
        raise VideoError(f"{path}: could not write the video (No space left on device); no video was kept")

    monkeypatch.setattr(video, "write_video", full_disk)
    code, out, err = run_main(["eval", str(run_dir), "--episodes", "2", "--json", "--video", str(tmp_path / "ep.gif")], capsys)
    error_line(code, err, f"--video {tmp_path / 'ep.gif'}: could not write the video", "the evaluation itself ran")
    result = json.loads(out)
    assert result["episodes"] == 2 and len(result["returns"]) == 2 and "video" not in result


def test_best_pt_holds_its_iterations_stop_return_episodes_so_a_resume_from_it_stops_there(tmp_path, capsys):
    # a random CartPole policy ends ~25 episodes in 512 steps: --stop-return 10 over 20 stops at iteration 1,
    # the iteration whose evaluation wrote best.pt
    run = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run), "--num-envs", "4", "--num-steps", "128",
                             "--total-timesteps", "2048", "--eval-every", "512", "--eval-episodes", "2", "--stop-return", "10",
                             "--stop-episodes", "20", "--threads", "1", "--no-progress", "--quiet"], capsys)
    assert code == 0, err
    best = run / "checkpoints" / "best.pt"
    window = ckpt.load_checkpoint(best)["return_window"]
    assert window == ckpt.load_checkpoint(run / "checkpoints" / "step_000000000512.pt")["return_window"] and window, window
    rows, evaluation = (run / "metrics.csv").read_text(), (run / "eval.json").read_text()
    code, _, err = run_main(["resume", str(best), "--quiet"], capsys)
    assert code == 0, err
    assert "the run stopped at --stop-return 10" in err, err
    assert (run / "metrics.csv").read_text() == rows and (run / "eval.json").read_text() == evaluation
