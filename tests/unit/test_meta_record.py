"""meta.json's record of what ran: git_dirty beside git_commit, one ``resumes`` entry per resume
(train_state.record_resume), a population member's machine record, and how `proxima report` shows them."""

from __future__ import annotations

import json

import pytest
import torch

from proxima import cli, rundir
from proxima.report import _machine
from proxima.train_state import record_resume

ENTRY = {"started": "2026-01-02T03:04:05", "step": 64, "command": ["proxima", "resume", "run"],
         "versions": {"proxima": "0.1.0"}, "git_commit": "abc1234", "git_dirty": False}


def _meta(tmp_path, doc) -> object:
    path = tmp_path / "meta.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_each_resume_is_appended_and_the_first_start_is_kept(tmp_path):
    first = {"kind": "ppo", "started": "2026-01-01T00:00:00", "git_commit": "f" * 40, "git_dirty": True}
    path = _meta(tmp_path, first)
    assert record_resume(path, ENTRY) and record_resume(path, {**ENTRY, "step": 128})
    meta = json.loads(path.read_text())
    assert meta == {**first, "resumes": [ENTRY, {**ENTRY, "step": 128}]}
    assert list(tmp_path.iterdir()) == [path]  # rewritten through a temp file renamed over it, none left


@pytest.mark.parametrize("doc, why", [("{cut sho", "not readable JSON"), ("[1, 2]", "expected a JSON object, got list"),
                                      (json.dumps({"kind": "ppo", "resumes": "twice"}), "resumes is not a list (a str)")])
def test_a_damaged_meta_json_is_left_as_it_is_with_a_note(doc, why, tmp_path, capsys):
    """The run's record is damaged, not its checkpoints: the resume goes on, and nothing is guessed into the file."""
    path = _meta(tmp_path, doc)
    assert record_resume(path, ENTRY) is False
    assert path.read_text() == doc
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"proxima: note: {path}: {why}") and err[0].endswith(
        "; this resume is not recorded in it"), err


def test_a_link_at_meta_json_is_not_followed(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"kind": "ppo"}))
    (tmp_path / "run").mkdir()
    path = tmp_path / "run" / "meta.json"
    path.symlink_to(elsewhere)
    assert record_resume(path, ENTRY) is False
    assert json.loads(elsewhere.read_text()) == {"kind": "ppo"} and path.is_symlink()
    assert "this resume is not recorded" in capsys.readouterr().err


def test_many_resumes_keep_meta_json_readable_as_a_run_s(tmp_path):
    """A meta.json past what rundir reads back would stop the run counting as one (`proxima resume` refuses
    it): the oldest entries give way, counted."""
    path = _meta(tmp_path, {"kind": "ppo", "started": "2026-01-01T00:00:00"})
    long_entry = {**ENTRY, "command": ["proxima", "resume", "x" * 2000]}
    for _ in range(40):
        assert record_resume(path, long_entry)
    meta = json.loads(path.read_text())
    assert path.stat().st_size <= rundir._LOCK_MAX_BYTES
    assert 0 < len(meta["resumes"]) < 40 and meta["resumes_dropped"] == 40 - len(meta["resumes"])
    assert rundir.recorded_kind(path, strict=True) == "ppo"


def test_the_report_marks_a_commit_with_uncommitted_changes_and_counts_resumes():
    dirty = {**ENTRY, "git_dirty": True}  # resumed on the same dirty checkout: nothing changed on resume
    machine = _machine({"git_commit": "abc1234", "git_dirty": True, "resumes": [dirty, {**dirty, "step": ENTRY["step"] + 64}]})
    assert machine["git commit"] == "abc1234 (uncommitted changes)" and machine["resumes"] == 2
    machine = _machine({"git_commit": "abc1234", "git_dirty": True, "resumes": [ENTRY]})  # committed since
    assert machine["git commit"] == "abc1234 (uncommitted changes) -> abc1234 from step 64"
    machine = _machine({"git_commit": "abc1234", "git_dirty": False})
    assert machine["git commit"] == "abc1234" and machine["resumes"] is None
    assert _machine({"git_commit": "abc1234", "git_dirty": None})["git commit"] == "abc1234"
    assert _machine({"git_commit": None, "git_dirty": True})["git commit"] is None  # nothing to mark
    assert _machine({"resumes": "twice"})["resumes"] is None  # an edited file: no count made up


def test_a_population_member_records_what_a_single_run_does(tmp_path):
    """A member holds a single run's files: its meta.json has the machine record (tanh_cpu.py: it names
    the tanh mode) and git_dirty, as a single run's, the machine gathered once for all members."""
    from unittest import mock

    from proxima import doctor

    small = ["--total-timesteps", "64", "--num-envs", "2", "--num-steps", "32", "--num-minibatches", "1", "--update-epochs", "1",
             "--eval-episodes", "0", "--no-progress", "--quiet", "--threads", "1"]
    with mock.patch.object(doctor, "collect", wraps=doctor.collect) as collect:
        assert cli.main(["train", "CartPole-v1", "--seeds", "1,2", "--run-dir", str(tmp_path / "pop"), *small]) == 0
    assert collect.call_count == 1
    metas = [json.loads(p.read_text()) for p in sorted((tmp_path / "pop").glob("m*/meta.json"))]
    assert [m["member"] for m in metas] == [0, 1]
    for meta in metas:
        assert meta["machine"]["cpu_tanh"] == metas[0]["machine"]["cpu_tanh"] is not None
        assert meta["machine"]["torch"] == meta["versions"]["torch"]
        assert "git_dirty" in meta and meta["git_dirty"] in (True, False, None)


def test_a_resume_with_another_cpu_tanh_is_noted_and_recorded(tmp_path, capsys):
    """Bit-identity of a CPU resume needs the CPU tanh the run started with (chosen by the CPU's maker):
    a resume on another kind of CPU says it trains on validly but not bit for bit, and records its own."""
    from proxima.train_state import resume_entry

    path = _meta(tmp_path, {"kind": "ppo", "machine": {"cpu_tanh": "torch"}})
    entry = resume_entry(128, ["proxima", "resume", "RUN"], device="cpu")
    assert record_resume(path, {**entry, "cpu_tanh": "numpy"})
    assert "the run started with the CPU tanh 'torch' and resumes with 'numpy'" in capsys.readouterr().err
    assert record_resume(path, {**entry, "cpu_tanh": "torch"})
    assert capsys.readouterr().err == ""
    assert [r["cpu_tanh"] for r in json.loads(path.read_text())["resumes"]] == ["numpy", "torch"]
    assert "cpu_tanh" not in resume_entry(128, [], device="cuda:0")  # a GPU run computes no CPU tanh


def test_a_population_resume_records_the_cpu_tanh_in_each_member_and_notes_a_change_once(tmp_path, capsys, monkeypatch):
    from proxima import tanh_cpu
    from proxima.population_run import _record_resume

    dirs = [tmp_path / "m000", tmp_path / "m001"]
    for d in dirs:
        d.mkdir()
        _meta(d, {"kind": "ppo", "machine": {"cpu_tanh": "torch"}})
    monkeypatch.setattr(tanh_cpu, "MODE", "numpy")  # resumed on another kind of CPU
    _record_resume(dirs, 128, torch.device("cpu"))
    assert capsys.readouterr().err.count("the run started with the CPU tanh 'torch' and resumes with 'numpy'") == 1
    assert [json.loads((d / "meta.json").read_text())["resumes"][0]["cpu_tanh"] for d in dirs] == ["numpy", "numpy"]
    assert [json.loads((d / "meta.json").read_text())["resumes"][0]["device"] for d in dirs] == ["cpu", "cpu"]
