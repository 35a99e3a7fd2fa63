"""Output that stdout does not take (a full disk) is one line naming where, exit 2, for every
command, not only doctor: `proxima presets > /dev/full` gave a traceback, and a command that
swallowed the failed print exited 0 with its output lost."""

import errno
import os
import subprocess
import sys

import pytest

from proxima import cli
from tests import warm_python


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_presets_to_a_full_device_is_one_line_exit_2(tmp_path):
    with open("/dev/full", "w") as full:
        proc = warm_python.run([sys.executable, "-m", "proxima", "presets"], cwd=tmp_path, stdout=full,
                               stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == ["proxima presets: error: <stdout>: could not write (No space left on device); "
                                        "send the output to a file or pipe that takes it"]


class _FullStream:
    """A stdout whose writes fail as a full disk's do; fileno is a pipe's, so the line says <stdout>."""

    def __init__(self):
        self.r, self.w = os.pipe()

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        pass

    def fileno(self):
        return self.w


def _args(func):
    import argparse

    return argparse.Namespace(command="doctor", func=func)  # doctor: no import check, the func alone runs


def test_a_swallowed_stdout_failure_is_still_one_line_exit_2(monkeypatch, capsys):
    def swallowing(args):
        try:
            print("the table")
        except OSError:  # a command that went on: its output is lost all the same
            pass
        return 0

    stream = _FullStream()
    monkeypatch.setattr(sys, "stdout", stream)
    assert cli._command(_args(swallowing)) == 2
    assert sys.stdout is stream  # put back
    err = capsys.readouterr().err
    assert err.splitlines() == ["proxima doctor: error: <stdout>: could not write (No space left on device); "
                                "send the output to a file or pipe that takes it"]


def test_another_oserror_is_not_taken_for_stdout(monkeypatch):
    def failing(args):
        raise OSError(errno.ENOSPC, "No space left on device", "/elsewhere/file")

    monkeypatch.setattr(sys, "stdout", _FullStream())
    with pytest.raises(OSError) as e:
        cli._command(_args(failing))
    assert e.value.filename == "/elsewhere/file"


def test_stdout_is_the_stream_itself_for_a_command(monkeypatch, capsys):
    seen = {}

    def looking(args):
        seen["isatty"] = sys.stdout.isatty()
        seen["encoding"] = sys.stdout.encoding
        print("hello")
        return 3

    assert cli._command(_args(looking)) == 3
    assert capsys.readouterr().out == "hello\n"
    assert seen["isatty"] is False and seen["encoding"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_train_to_a_full_device_is_the_stdout_line_alone(tmp_path):
    """Day review: train's own failure diagnosis named stdout's ENOSPC "a file of the run" with the free
    space of some disk, a line before the CLI's <stdout> line."""
    with open("/dev/full", "w") as full:
        proc = warm_python.run([sys.executable, "-m", "proxima", "train", "--total-timesteps", "256", "--num-envs", "2",
                                "--threads", "1", "--eval-episodes", "1", "--no-progress", "--run-dir", str(tmp_path / "r")],
                               cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert errors == ["proxima train: error: <stdout>: could not write (No space left on device); "
                      "send the output to a file or pipe that takes it"], proc.stderr


def test_presets_writes_its_table_in_one_write(monkeypatch):
    """Under PYTHONUNBUFFERED (the container sets it) each print is a write of its own: a table in
    pieces let `proxima presets | head -1` find head gone at the second line (exit 141, not the 0
    docs/reliability.md promises for an output that fits the pipe's buffer)."""
    writes = []

    class Unbuffered:
        def write(self, text):
            writes.append(text)
            return len(text)

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stdout", Unbuffered())
    assert cli.main(["presets"]) == 0
    assert len(writes) == 1, writes[:3]
    assert writes[0].endswith("\n"), writes[0][-80:]  # its last line ends too: a shell prompt or `cat` after it starts on a line of its own
    lines = writes[0].splitlines()
    assert lines[0].split() == ["env", "id", "preset", "steps", "description"]
    assert any(line.split()[:2] == ["CartPole-v1", "fast"] for line in lines[1:])
