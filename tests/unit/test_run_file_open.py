"""rundir.open_run_file, the one way Proxima opens a run file it reads (a checkpoint, a safetensors
shard, a run's text files), and the warnings filters staying as they were when checkpoints are
loaded from several threads at once (warnings_guard)."""

from __future__ import annotations

import os
import threading
import time
import warnings

import pytest
import torch

from proxima import checkpoint as ckpt
from proxima import rundir
from proxima.rlhf import rundir as rlhf_rundir
from proxima.rlhf.config import ConfigError


def test_open_run_file_reads_a_regular_file_whole_and_blocking(tmp_path):
    file = tmp_path / "data.bin"
    file.write_bytes(b"x" * 300_000)
    with rundir.open_run_file(file) as f:
        assert os.get_blocking(f.fileno())
        assert f.read() == b"x" * 300_000


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_open_run_file_refuses_a_fifo_at_once_naming_it(tmp_path):
    fifo = tmp_path / "step_000000000001.pt"
    os.mkfifo(fifo)
    done = {}

    def open_it():
        try:
            rundir.open_run_file(fifo)
        except Exception as e:
            done["error"] = e

    t = threading.Thread(target=open_it, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "open_run_file waited on a FIFO for a writer"
    error = done["error"]
    assert isinstance(error, rundir.RunFileError) and not isinstance(error, FileNotFoundError)
    assert str(error) == f"{fifo}: is not a regular file (a FIFO, device or socket); the run directory was edited"


def test_open_run_file_refuses_a_directory_as_isadirectoryerror(tmp_path):
    with pytest.raises(IsADirectoryError):
        rundir.open_run_file(tmp_path)


def test_open_run_file_missing_is_filenotfounderror_as_for_open(tmp_path):
    with pytest.raises(FileNotFoundError):
        rundir.open_run_file(tmp_path / "gone.pt")


# Overlapping warnings.catch_warnings blocks restore each other's filter lists: the "ignore" one
# block added can outlive both, silencing every warning in the process for good.

def _overlapping_loads(monkeypatch, load, file):
    """Two threads load ``file`` at once; the first one's torch.load returns only after the second
    one's has begun (or 0.5 s, when a lock keeps them apart), and the second's returns later, so the
    first block ends first: unguarded, the second then restores the list the first had changed."""
    entered = []
    second_in = threading.Event()

    def slow_load(*args, **kwargs):
        entered.append(1)
        if len(entered) == 1:
            second_in.wait(0.5)
        else:
            second_in.set()
            time.sleep(0.2)
        return {}

    monkeypatch.setattr(torch, "load", slow_load)
    before = list(warnings.filters)

    def worker():
        try:
            load(file)
        except (ckpt.CheckpointError, ConfigError):  # {} is no checkpoint: only the filters matter here
            pass

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = list(warnings.filters)
    warnings.filters[:] = before  # a leak must not spill into later tests
    warnings._filters_mutated()
    return before, after


@pytest.fixture
def torch_file(tmp_path):
    file = tmp_path / "step_000000000001.pt"
    torch.save({"x": torch.zeros(3)}, file)
    return file


def test_overlapping_checkpoint_loads_leave_the_warnings_filters_as_they_were(monkeypatch, torch_file):
    before, after = _overlapping_loads(monkeypatch, ckpt.load_checkpoint, torch_file)
    assert after == before


def test_overlapping_rlhf_checkpoint_loads_leave_the_warnings_filters_as_they_were(monkeypatch, torch_file):
    before, after = _overlapping_loads(monkeypatch, rlhf_rundir.load_checkpoint, torch_file)
    assert after == before


def test_checkpoints_loaded_from_four_threads_at_once_leave_the_warnings_filters_as_they_were(tmp_path):
    file = tmp_path / "step_000000000001.pt"
    # many small tensors: each load spends long enough inside its block for thread switches to land there
    torch.save({f"t{i}": torch.zeros(2) for i in range(150)}, file)
    before = list(warnings.filters)
    try:
        for _ in range(10):
            barrier = threading.Barrier(4)

            def worker():
                barrier.wait()
                try:
                    ckpt.load_checkpoint(file)
                except ckpt.CheckpointError:  # not a Proxima checkpoint: only the filters matter here
                    pass

            threads = [threading.Thread(target=worker) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert warnings.filters == before
    finally:
        warnings.filters[:] = before
        warnings._filters_mutated()
