"""Files a failed or killed attempt left behind: checkpoints a lower --keep-checkpoints drops are gone
before the next save needs their room, a resume that fails in its first iteration leaves no empty
TensorBoard event file, and a killed report's staged temporaries are removed by the next report."""
import errno
import os
import shutil
import time

import pytest

from proxima import checkpoint as ckpt
from proxima import population_run
from proxima import trainer
from proxima.logger import EventFile
from tests.cli_helpers import TINY_POP, TINY_RUN, error_line, fake_run_dir, run_main


@pytest.fixture(scope="module")
def five_checkpoints(tmp_path_factory):
    """A finished 5-iteration (320-step) CartPole run holding a checkpoint of every iteration."""
    from proxima import cli

    run = tmp_path_factory.mktemp("five") / "run"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "320", "--checkpoint-every", "1",
                     "--keep-checkpoints", "5", "--run-dir", str(run), "--quiet"]) == 0
    return run


def _copy(run, tmp_path):
    dest = tmp_path / "run"
    shutil.copytree(run, dest)
    return dest


def _steps(run) -> list:
    return [int(p.name[5:17]) for p in ckpt.list_checkpoints(run)]


def test_a_lower_keep_on_resume_frees_the_old_checkpoints_before_the_write_and_keeps_the_newest(
        five_checkpoints, tmp_path, capsys, monkeypatch):
    """--keep-checkpoints 1 on a nearly full disk: the 4 files it drops make the room, so they go
    before the new checkpoint is written, never the newest one, which a failed save leaves to resume from."""
    run = _copy(five_checkpoints, tmp_path)
    assert _steps(run) == [64, 128, 192, 256, 320]
    present = []

    def disk_full(tmp, path):  # the checkpoint written to its temporary name, the disk full at the rename
        present.append(_steps(run))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ckpt, "_before_replace", disk_full)
    resume = ["train", "--resume", str(run), "--total-timesteps", "384", "--keep-checkpoints", "1", "--quiet"]
    code, _, err = run_main(resume, capsys)
    error_line(code, err, "step_000000000384.pt: could not write checkpoint (No space left on device",
               "any earlier checkpoint is kept")
    assert present == [[320]]
    assert _steps(run) == [320] and ckpt.load_checkpoint(run)["global_step"] == 320
    monkeypatch.undo()
    code, _, err = run_main(resume, capsys)
    assert code == 0, err
    assert _steps(run) == [384]


def test_a_population_frees_its_own_and_its_members_dropped_checkpoints_before_any_write(tmp_path, capsys, monkeypatch):
    """Members are written first: the population's own old checkpoints go before those writes too, and every
    member's before the first member's write (written one at a time here, so a member left unpruned until its
    own write still holds its old files when the first write fails)."""
    monkeypatch.setattr(population_run, "MEMBER_WRITERS", 1)
    run = tmp_path / "R"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), "--total-timesteps", "96",
                             "--eval-episodes", "0", "--checkpoint-every", "1", "--keep-checkpoints", "5", "--quiet",
                             *TINY_POP], capsys)
    assert code == 0, err
    folders = [run, run / "m000-seed1", run / "m001-seed2"]
    assert [_steps(d) for d in folders] == [[32, 64, 96]] * 3
    present = []

    def disk_full(tmp, path):
        present.append([_steps(d) for d in folders])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ckpt, "_before_replace", disk_full)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--keep-checkpoints", "1"], capsys)
    error_line(code, err, "step_000000000128.pt: could not write checkpoint (No space left on device")
    assert present and all(seen == [[96]] * 3 for seen in present)
    assert [_steps(d) for d in folders] == [[96]] * 3


def test_a_resume_that_fails_in_its_first_iteration_leaves_no_new_event_file(five_checkpoints, tmp_path, capsys,
                                                                             monkeypatch):
    run = _copy(five_checkpoints, tmp_path)
    events = {p.name: p.read_bytes() for p in run.glob("events.out.tfevents.*")}
    assert len(events) == 1

    def disk_full(self):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(trainer.Trainer, "train_iteration", disk_full)
    for _ in range(2):  # each retry used to add one file holding only the header
        code, _, err = run_main(["train", "--resume", str(run), "--total-timesteps", "384", "--quiet"], capsys)
        error_line(code, err, "No space left on device")
        assert {p.name: p.read_bytes() for p in run.glob("events.out.tfevents.*")} == events


def test_an_event_file_closed_with_only_its_header_is_removed_one_with_an_event_is_kept(tmp_path):
    empty = EventFile(tmp_path)
    empty.close()
    kept = EventFile(tmp_path)
    kept.scalars(64, {"charts/SPS": 1.0})
    kept.close()
    assert sorted(tmp_path.glob("events.out.tfevents.*")) == [kept.path]


def test_a_report_removes_the_stale_temporaries_of_its_own_files_and_nothing_else(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "run")
    old = time.time() - 3600
    stale = [".report.0123456789ab.tmp.md", ".report_curve.0123456789ab.tmp.png",
             ".report.0123456789ab.tmp.md.ba9876543210.tmp"]  # atomic_open's own temporary inside a staged one
    others = [".report.0123456789ab.tmp.txt", ".notes.0123456789ab.tmp.md", "report.0123456789ab.tmp.md",
              ".report.not-hex-hex!.tmp.md", "report.md.bak",
              ".report.0123456789ab.tmp.md.bak",  # the pattern with more after it: the whole name must match
              ".report.abc.tmp.md", ".report.0123456789ab.tmp.md.abc.tmp"]  # hex, not the 12 digits the temporaries have
    for name in stale + others:
        (run / name).write_text("x")
        os.utime(run / name, (old, old))
    # entries of a stale temporary's name that are no regular file: a link (to a file that must survive) and a folder
    (tmp_path / "linked.md").write_text("kept")
    (run / ".report.aaaaaaaaaaaa.tmp.md").symlink_to(tmp_path / "linked.md")
    (run / ".report.bbbbbbbbbbbb.tmp.md").mkdir()
    for name in (".report.aaaaaaaaaaaa.tmp.md", ".report.bbbbbbbbbbbb.tmp.md"):
        os.utime(run / name, (old, old), follow_symlinks=False)
    os.utime(tmp_path / "linked.md", (old, old))
    (run / ".report.fedcba987654.tmp.md").write_text("another report under way")  # young: may be a live report's
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    assert sorted(p.name for p in run.iterdir() if p.name not in ("config.yaml", "metrics.csv")) == sorted(
        [*others, ".report.fedcba987654.tmp.md", "report.md", "report_curve.png",
         ".report.aaaaaaaaaaaa.tmp.md", ".report.bbbbbbbbbbbb.tmp.md"])
    assert (run / ".report.aaaaaaaaaaaa.tmp.md").is_symlink() and (tmp_path / "linked.md").read_text() == "kept"
    assert (run / ".report.bbbbbbbbbbbb.tmp.md").is_dir()
    assert "# " in (run / "report.md").read_text() and (run / "report_curve.png").read_bytes()[:4] == b"\x89PNG"
