"""Review 31: a resume from an older checkpoint sets aside what trained after it (checkpoints/abandoned-TIME),
and meta.json's ``resumes`` entries recorded past its step go with that timeline: kept, marked
``"abandoned": true``, and left out of `proxima report`'s changes and resume count."""

from __future__ import annotations

import json

from proxima import checkpoint as ckpt
from proxima import cli
from proxima.report import _machine, _versions
from proxima.train_state import record_resume

SMALL = ["--num-envs", "4", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
         "--checkpoint-every", "2", "--keep-checkpoints", "20", "--eval-episodes", "0", "--quiet", "--no-progress"]


def _entry(step: int, device: str, torch_version: str) -> dict:
    return {"started": "2026-01-02T03:04:05", "step": step, "command": ["proxima", "resume", "ab"],
            "versions": {"torch": torch_version}, "device": device, "git_commit": "abc1234", "git_dirty": False}


def test_record_resume_marks_the_entries_past_an_older_resume_and_keeps_them(tmp_path):
    path = tmp_path / "meta.json"
    path.write_text(json.dumps({"kind": "ppo", "device": "cpu", "versions": {"torch": "2.1"}}))
    later, again, older = _entry(1152, "cuda:0", "2.2"), _entry(1152, "cuda:0", "2.2"), _entry(512, "cpu", "2.1")
    assert record_resume(path, later) and record_resume(path, again)
    # the same step (day review 31): the second went back to the checkpoint the first started from, so
    # what the first trained is not in the run's history
    assert [r.get("abandoned") for r in json.loads(path.read_text())["resumes"]] == [True, None]
    assert record_resume(path, older)
    resumes = json.loads(path.read_text())["resumes"]
    assert resumes == [{**later, "abandoned": True}, {**again, "abandoned": True}, older]  # nothing lost
    assert record_resume(path, _entry(768, "cpu", "2.1"))  # on from the resumed path: the marks stay as they are
    assert [r.get("abandoned") for r in json.loads(path.read_text())["resumes"]] == [True, True, None, None]


def test_the_report_skips_resumes_on_an_abandoned_timeline_and_counts_them_apart():
    first = {"device": "cpu", "versions": {"torch": "2.1"}, "git_commit": "abc1234", "git_dirty": False}
    later, older = _entry(1152, "cuda:0", "2.2"), _entry(512, "cpu", "2.1")
    # marked by record_resume, or a meta.json written before the mark: the step going back says the same
    for resumes in ([{**later, "abandoned": True}, older], [later, older]):
        meta = {**first, "resumes": resumes}
        machine = _machine(meta)
        assert machine["device"] == "cpu" and _versions(meta) == {"torch": "2.1"}
        assert machine["resumes"] == "1 (1 more on an abandoned timeline)"
    # a change on the kept timeline is still shown, from its own step
    meta = {**first, "resumes": [later, older, _entry(768, "cuda:0", "2.1")]}
    assert _machine(meta)["device"] == "cpu -> cuda:0 from step 768"
    assert _machine(meta)["resumes"] == "2 (1 more on an abandoned timeline)"
    # back twice: 1152 and 1024 past 256, 512 past 256 too; only the last is the run's
    meta = {**first, "resumes": [later, older, _entry(1024, "cuda:0", "2.2"), _entry(256, "cpu", "2.1")]}
    assert _machine(meta)["resumes"] == "1 (3 more on an abandoned timeline)" and _machine(meta)["device"] == "cpu"
    assert _machine({**first, "resumes": [later]})["resumes"] == 1  # nothing abandoned: the plain count


def _report_rows(run) -> dict:
    rows = {}
    for line in (run / "report.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2:
            rows.setdefault(cells[0], []).append(cells[1])
    return rows


def test_a_real_resume_from_an_older_checkpoint_leaves_the_later_resume_out_of_the_report(tmp_path, capsys):
    run = tmp_path / "ab"
    assert cli.main(["train", "CartPole-v1", "--total-timesteps", "512", "--run-dir", str(run), *SMALL]) == 0
    assert cli.main(["resume", str(run), "--total-timesteps", "1024", "--quiet"]) == 0
    meta = json.loads((run / "meta.json").read_text())
    assert [r["step"] for r in meta["resumes"]] == [512]
    meta["resumes"][0]["device"] = "cuda:0"  # that resume ran on a GPU
    (run / "meta.json").write_text(json.dumps(meta))
    assert cli.main(["train", "--resume", str(ckpt.checkpoint_path(run, 256)), "--quiet", "--no-progress"]) == 0
    assert "older than the run's newest checkpoint" in capsys.readouterr().err
    resumes = json.loads((run / "meta.json").read_text())["resumes"]
    assert [(r["step"], r.get("abandoned")) for r in resumes] == [(512, True), (256, None)]
    assert cli.main(["report", str(run), "--episodes", "0"]) == 0
    rows = _report_rows(run)
    assert rows["resumes"] == ["1 (1 more on an abandoned timeline)"]
    assert set(rows["device"]) == {"cpu"}, rows["device"]  # not "cpu -> cuda:0 from step 512 -> cpu from step 256"


def test_a_population_resumed_from_an_older_checkpoint_marks_each_members_record(tmp_path, capsys):
    run = tmp_path / "pop"
    flags = [*SMALL, "--checkpoint-every", "1"]
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "256", "--run-dir", str(run), *flags]) == 0
    assert cli.main(["resume", str(run), "--total-timesteps", "384", "--quiet"]) == 0
    assert cli.main(["resume", str(ckpt.checkpoint_path(run, 128)), "--quiet"]) == 0
    assert "older than the run's newest checkpoint" in capsys.readouterr().err
    members = [run / m["dir"] for m in json.loads((run / "population.json").read_text())["member_dirs"]]
    assert len(members) == 2
    for member in members:
        meta = json.loads((member / "meta.json").read_text())
        assert [(r["step"], r.get("abandoned")) for r in meta["resumes"]] == [(256, True), (128, None)], member
        assert _machine(meta)["resumes"] == "1 (1 more on an abandoned timeline)"
