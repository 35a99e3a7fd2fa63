"""A population's checkpoint save that fails part way (a full disk) leaves a population that resumes,
and a failed write of a run's file is one line naming that file."""

from __future__ import annotations

import errno
from pathlib import Path

from proxima import checkpoint as ckpt
from proxima.run_setup import diagnose_failure

from tests.cli_helpers import TINY_POP, error_line, run_main

MEMBERS = ["m000-seed1", "m001-seed2"]


def _steps(folder: Path) -> list:
    return [p.name for p in ckpt.list_checkpoints(folder)]


def test_a_full_disk_at_the_populations_own_checkpoint_leaves_it_resumable_from_the_one_before(tmp_path, capsys, monkeypatch):
    """--keep-checkpoints 1: the members' step-32 files must outlive their step-64 writes until the population's
    step_64.pt exists, else a failure there leaves its newest checkpoint (step 32) without its members' files."""
    run = tmp_path / "R"
    real_save = ckpt.atomic_torch_save

    def full_at_population_step_64(obj, path):
        if Path(path) == run / "checkpoints" / "step_000000000064.pt":
            raise ckpt.CheckpointError(f"{path}: could not write checkpoint (No space left on device)")
        return real_save(obj, path)

    monkeypatch.setattr(ckpt, "atomic_torch_save", full_at_population_step_64)
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), "--total-timesteps", "96",
                             "--checkpoint-every", "1", "--keep-checkpoints", "1", "--eval-episodes", "0", "--quiet",
                             *TINY_POP], capsys)
    error_line(code, err, "step_000000000064.pt", "No space left on device")
    assert _steps(run) == ["step_000000000032.pt"]
    for m in MEMBERS:  # the step-64 files written before the failure; step 32's kept beside them
        assert _steps(run / m) == ["step_000000000032.pt", "step_000000000064.pt"]

    monkeypatch.setattr(ckpt, "atomic_torch_save", real_save)
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    assert code == 0, err
    assert _steps(run) == ["step_000000000096.pt"]
    for m in MEMBERS:  # step 64 went to abandoned-<time>/ at the resume, step 32 was pruned once 96 was the population's
        assert _steps(run / m) == ["step_000000000096.pt"]
        assert [p.name for p in (run / m / "checkpoints").glob("abandoned-*/*.pt")] == ["step_000000000064.pt"]


def test_a_full_disk_on_a_write_that_names_no_file_names_the_one_it_was_raised_from(tmp_path):
    """A buffered write's OSError carries no filename; a caller re-raising it from the open()'s error (which
    does) used to be reported as "a file of the run"."""
    target = tmp_path / "metrics.csv"
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        except OSError as named:
            raise OSError(errno.ENOSPC, "No space left on device") from named
    except OSError as e:
        line = str(diagnose_failure(e, None, None))
    assert line.startswith(f"{target}: could not write (No space left on device; "), line


def test_a_full_disk_with_no_file_known_keeps_the_generic_words(tmp_path):
    line = str(diagnose_failure(OSError(errno.ENOSPC, "No space left on device"), None, None))
    assert line.startswith("a file of the run: could not write (No space left on device"), line


def test_a_file_named_in_bytes_is_shown_as_its_path(tmp_path):
    target = tmp_path / "metrics.csv"
    line = str(diagnose_failure(OSError(errno.ENOSPC, "No space left on device", bytes(target)), None, None))
    assert line.startswith(f"{target}: could not write ("), line


def test_a_full_disk_raised_while_handling_another_files_error_does_not_name_that_file(tmp_path):
    """An unnamed ENOSPC raised inside ``except FileNotFoundError`` of an os.stat that probed eval.json was
    named eval.json: the error it was raised while handling (__context__) is another, already handled; one
    of the same errno (a cleanup's write failing as the open()'s did) still names its file."""
    probed, target = tmp_path / "eval.json", tmp_path / "metrics.csv"
    line = _unnamed_full_disk_while_handling(FileNotFoundError(errno.ENOENT, "No such file or directory", str(probed)))
    assert line.startswith("a file of the run: could not write (No space left on device"), line
    line = _unnamed_full_disk_while_handling(OSError(errno.ENOSPC, "No space left on device", str(target)))
    assert line.startswith(f"{target}: could not write (No space left on device; "), line


def _unnamed_full_disk_while_handling(first: OSError) -> str:
    """diagnose_failure's line for an ENOSPC naming no file, raised while ``first`` was handled."""
    try:
        try:
            raise first
        except OSError:
            raise OSError(errno.ENOSPC, "No space left on device")
    except OSError as e:
        return str(diagnose_failure(e, None, None))


def test_a_full_disk_raised_from_a_named_error_outside_its_handler_names_that_file_and_its_own_comes_first(tmp_path):
    """``raise ... from named`` outside an except block sets only __cause__ (no __context__): the cause's file is
    still the one named; when the error itself names a file, that one is shown, not its cause's."""
    cause, own = tmp_path / "metrics.csv", tmp_path / "eval.json"
    named = OSError(errno.ENOSPC, "No space left on device", str(cause))
    try:
        raise OSError(errno.ENOSPC, "No space left on device") from named
    except OSError as e:
        assert e.__context__ is None and e.__cause__ is named
        line = str(diagnose_failure(e, None, None))
    assert line.startswith(f"{cause}: could not write (No space left on device; "), line
    try:
        raise OSError(errno.ENOSPC, "No space left on device", str(own)) from named
    except OSError as e:
        line = str(diagnose_failure(e, None, None))
    assert line.startswith(f"{own}: could not write (No space left on device; "), line
