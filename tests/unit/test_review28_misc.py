"""Review 28, small fixes: a checkpoint a full disk stopped says the size it needs, the free space
once its partial file is gone and, plainly, when no earlier checkpoint is left; a report_curve.png
link planted out of a run is refused as curve.png's is; docs/reliability.md lists `train --plot`
among the full-disk exceptions; docs/distributed.md says a resume runs an evaluation a stop left due."""

from __future__ import annotations

import errno
import io
import re
import shutil
from pathlib import Path

import pytest
import torch

from proxima import checkpoint as ckpt
from proxima import cli, diskspace, rundir
from proxima.diskspace import human_bytes
from cli_helpers import error_line, run_main

DOCS = Path(__file__).resolve().parents[2] / "docs"
ROOM = 36 * 1024  # what `df` shows once the partial checkpoint is removed
SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "192",
         "--checkpoint-every", "1", "--eval-episodes", "0", "--no-progress", "--quiet"]


class _FullFile:
    """The checkpoint's temp file on a disk with ``room`` bytes: bytes beyond it fail with ENOSPC."""

    def __init__(self, f, room: int) -> None:
        self.f, self.room = f, room

    def write(self, data) -> int:
        data = bytes(data)
        if len(data) > self.room:
            self.f.write(data[:self.room])  # the partial file a full disk leaves
            self.room = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)


@pytest.fixture
def full_disk(monkeypatch):
    """Checkpoint writes get 4 KB before the disk is full; the free space reported is 0 B while a
    temp file of a checkpoint is in the folder, ROOM once it is gone."""
    real_init = ckpt._RecordingWriter.__init__

    def init(self, f):
        real_init(self, _FullFile(f, 4096))

    def free(path):
        folder = Path(path).parent
        return 0 if any(p.name.endswith(".tmp") for p in folder.iterdir()) else ROOM

    monkeypatch.setattr(ckpt._RecordingWriter, "__init__", init)
    monkeypatch.setattr(diskspace, "free_bytes", free)


def _size(obj) -> int:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return len(buf.getvalue())


def _state() -> dict:
    return {"w": torch.arange(20000, dtype=torch.float32), "global_step": 128}


def test_a_checkpoint_cut_short_by_a_full_disk_says_its_size_the_room_left_and_that_none_is_earlier(tmp_path, full_disk):
    target = tmp_path / "checkpoints" / "step_000000000128.pt"
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.atomic_torch_save(_state(), target)
    assert str(info.value) == (f"{target}: could not write checkpoint (No space left on device; 36.0 KiB free there); "
                               "free some space (or choose another folder) and try again; "
                               f"the checkpoint needs {human_bytes(_size(_state()))}; there is no earlier checkpoint")
    assert list(target.parent.iterdir()) == []  # no partial file


def test_a_checkpoint_written_whole_but_not_kept_gives_its_own_size_and_keeps_the_earlier_one(tmp_path, monkeypatch):
    earlier = ckpt.atomic_torch_save({"w": torch.zeros(3)}, tmp_path / "checkpoints" / "step_000000000064.pt")
    target = earlier.with_name("step_000000000128.pt")

    def full(tmp, path):  # the bytes went out; the disk is full as they are synced and renamed
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt, "_before_replace", full)
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.atomic_torch_save(_state(), target)
    line = str(info.value)
    assert line.startswith(f"{target}: could not write checkpoint (No space left on device; ")
    assert line.endswith(f"; the checkpoint needs {human_bytes(_size(_state()))}; any earlier checkpoint is kept"), line
    assert [p.name for p in target.parent.iterdir()] == [earlier.name]


def test_a_full_disk_that_also_defeats_the_sizing_gives_the_bytes_written(tmp_path, full_disk, monkeypatch):
    monkeypatch.setattr(ckpt, "_serialized_size", lambda obj: None, raising=False)
    target = tmp_path / "checkpoints" / "best.pt"
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.atomic_torch_save(_state(), target)
    assert re.search(r"; the checkpoint needs more than the \d+(\.\d)? (B|KiB) written before the disk filled; "
                     r"there is no earlier checkpoint$", str(info.value)), str(info.value)


def test_a_failed_best_pt_beside_step_checkpoints_says_they_are_kept(tmp_path, full_disk):
    (tmp_path / "checkpoints").mkdir()
    torch.save({"w": torch.zeros(3)}, tmp_path / "checkpoints" / "step_000000000064.pt")
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.atomic_torch_save(_state(), tmp_path / "checkpoints" / "best.pt")
    assert str(info.value).endswith("; any earlier checkpoint is kept")
    assert "36.0 KiB free there" in str(info.value)


def test_train_on_a_full_disk_at_its_first_checkpoint_is_one_line_with_size_and_room(tmp_path, capsys, full_disk):
    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run_dir), *SMALL], capsys)
    error_line(code, err, f"{run_dir / 'checkpoints' / 'step_000000000064.pt'}: could not write checkpoint "
               "(No space left on device; 36.0 KiB free there)", "; the checkpoint needs ", "; there is no earlier checkpoint")
    assert not ckpt.list_checkpoints(run_dir)


# ------------------------------------------------------------------------------------ report_curve.png
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("finished")
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(root / "run"), *SMALL]) == 0
    return root / "run"


@pytest.mark.parametrize("name", ["curve.png", "report_curve.png"])
def test_a_report_curve_link_out_of_the_run_is_refused_as_curve_png_is(name, finished_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run, symlinks=True)
    victim = tmp_path / "victim.png"
    victim.write_bytes(b"someone else's picture")
    (run / name).symlink_to(victim)
    with pytest.raises(rundir.RunDirError, match=re.escape(f"{run / name}: is a symbolic link")):
        rundir.check_own_entries(run)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    error_line(code, err, f"{run / name}: is a symbolic link", "outside the run directory", "remove the link")
    assert victim.read_bytes() == b"someone else's picture"
    assert not (run / ".proxima.lock").exists()


# ------------------------------------------------------------------------------------ docs
def _flat(text: str) -> str:
    return " ".join(text.split())


def test_train_plot_on_a_full_disk_is_a_note_and_exit_0_as_reliability_md_says(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def full(self, target, **kwargs):
        target.write(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full)
    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run_dir), *SMALL, "--plot"], capsys)
    assert code == 0, err
    assert f"proxima: note: no curve.png: {run_dir / 'curve.png'}: could not write (No space left on device; " in err
    assert not (run_dir / "curve.png").exists() and not any(p.name.endswith(".tmp") for p in run_dir.iterdir())
    full_disk = _flat((DOCS / "reliability.md").read_text()).split("* **Full disk.**")[1].split("* **")[0]
    assert ("`train --plot` whose `curve.png` cannot be written (or drawn) after the run trained and wrote its checkpoints "
            "prints the note `proxima: note: no curve.png: D/curve.png: could not write") in full_disk
    assert "exits 0 (`proxima plot D` draws it later)" in full_disk


def test_distributed_md_says_the_resume_runs_the_evaluation_a_stop_left_due():
    text = _flat((DOCS / "distributed.md").read_text())
    assert "that iteration logs no eval value and `best.pt` stays as it was." not in text
    assert ("the stop's checkpoint records the evaluation as due, and the resume runs it first (on the checkpoint's "
            "state), logs that iteration's row again with its eval values") in text
    assert "reliability.md#evaluation-during-training" in text
    assert "## Evaluation during training" in (DOCS / "reliability.md").read_text()
