"""The note of a lock taken over shows the lock's fields as data: a newline or an ESC written into its
``since`` or ``host`` is escaped, the note stays one line, and the terminal is never sent a control code."""

from __future__ import annotations

import json
import os
import socket
import time

from proxima import rundir


def _write_lock(run, owner: dict, age: float):
    run.mkdir(parents=True, exist_ok=True)
    lock = run / rundir.LOCK_NAME
    lock.write_text(json.dumps(owner))
    then = time.time() - age
    os.utime(lock, (then, then))


def test_a_taken_over_locks_note_escapes_its_fields(tmp_path, capsys):
    dead = tmp_path / "dead"
    _write_lock(dead, {"pid": os.getpid(), "host": socket.gethostname(), "start": "1", "since": "x\n\x1b[31mRED"}, age=0)
    lock = rundir.RunLock(dead)
    lock.acquire()
    lock.release()
    other = tmp_path / "other"
    _write_lock(other, {"pid": 19842, "host": "pod\x1b]0;title\x07", "since": "T\nproxima: forged"}, age=10 * 600)
    lock = rundir.RunLock(other)
    lock.acquire()
    lock.release()
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and err.count("\n") == 2, repr(err)
    assert "(since x\\n\\x1b[31mRED), which is no longer running" in err
    assert "on host pod\\x1b]0;title\\x07 (since T\\nproxima: forged)" in err
