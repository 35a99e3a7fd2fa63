"""report's machine table shows where each part of a run trained: the first start's host and working
directory, then each resume's that differs (meta.json ``resumes``), as it does for devices and commits."""

from __future__ import annotations

from proxima.report import _machine


def test_host_and_working_directory_changes_show_from_the_resume_step():
    meta = {"host": "a", "cwd": "/w", "resumes": [{"step": 64, "host": "a", "cwd": "/w"},
                                                   {"step": 128, "host": "b", "cwd": "/x"}]}
    cells = _machine(meta)
    assert cells["host"] == "a -> b from step 128"
    assert cells["working directory"] == "/w -> /x from step 128"
    assert _machine({"host": "a", "cwd": "/w"})["working directory"] == "/w"
    assert _machine({})["host"] is None  # a run recorded before host/cwd: the row stays empty
