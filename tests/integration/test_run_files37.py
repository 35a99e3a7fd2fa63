"""Review s37 (UX 6, 7, 9, 11): a meta.json that is no record is a note, not a false line nor an exit 2;
a newer checkpoint schema gets no start-over advice and other recorded versions one note; a refusal of a
value the run recorded names its file and field, not a flag never typed; a read-only run dir says --out."""

from __future__ import annotations

import errno
import json
import shutil

import pytest

from cli_helpers import edit_checkpoint, error_line, fake_run_dir, run_main, tiny_cartpole_run

from proxima import __version__


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_cartpole_run(tmp_path_factory, "files37")


@pytest.fixture
def run(tiny, tmp_path):
    """A copy of the tiny run, for a test to edit."""
    return shutil.copytree(tiny, tmp_path / "run")


# ------------------------------------------------------------------------------------ 9: meta.json not a record
@pytest.mark.parametrize("meta, why", [
    ([1, 2], "not a record (a JSON list)"),
    ({"versions": [1, 2]}, "versions is not a mapping"),
    ({"world_size": float("nan"), "versions": {"torch": "2.0"}}, "world_size is not a count of processes (nan)"),
    ({"world_size": 0, "versions": {"torch": "2.0"}}, "world_size is not a count of processes (0)"),
    ({"resumes": "x"}, "resumes is not a list"),
])
def test_report_notes_a_meta_json_field_it_cannot_use_and_still_writes(tmp_path, capsys, meta, why):
    d = fake_run_dir(tmp_path, "r")
    (d / "meta.json").write_text(json.dumps(meta))
    code, _, err = run_main(["report", str(d), "--episodes", "0"], capsys)
    assert code == 0, err
    text = (d / "report.md").read_text()
    assert f"- {d / 'meta.json'}: {why}" in text
    assert "(no meta.json)" not in text  # there is one: it records none
    assert "| world size | nan |" not in text and "| world size | 0 |" not in text


def test_report_without_meta_json_says_there_is_none(tmp_path, capsys):
    """No meta.json: the report says so, not "No versions recorded in meta.json." about a file that does not exist."""
    d = fake_run_dir(tmp_path, "r")
    (d / "meta.json").unlink(missing_ok=True)
    code, _, err = run_main(["report", str(d), "--episodes", "0"], capsys)
    assert code == 0, err
    text = (d / "report.md").read_text()
    assert "No versions recorded (no meta.json)." in text and "recorded in meta.json" not in text


# ------------------------------------------------------------------------------------ 7: versions
def test_a_newer_schema_says_upgrade_without_start_over_advice_and_keeps_the_file(run, capsys):
    path = edit_checkpoint(run, lambda s: s.update(schema_version=s["schema_version"] + 1))
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    line = error_line(code, err, f"{path}: checkpoint schema version", "upgrade proxima")
    assert "--overwrite" not in line and "restore a copy" not in line
    assert path.is_file()  # a sound file of a newer Proxima is never set aside as damaged
    code, _, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    assert "--overwrite" not in error_line(code, err, "upgrade proxima")


def test_resume_of_a_named_newer_checkpoint_file_says_upgrade_without_start_over_advice(run, capsys):
    """`resume path/to/ckpt.pt` on a newer Proxima's file says upgrade, never --overwrite or restore a copy."""
    path = edit_checkpoint(run, lambda s: s.update(schema_version=s["schema_version"] + 1))
    code, _, err = run_main(["resume", str(path), "--quiet"], capsys)
    line = error_line(code, err, f"{path}: checkpoint schema version", "upgrade proxima")
    assert "--overwrite" not in line and "restore a copy" not in line and path.is_file()


def test_a_checkpoint_recording_only_proximas_version_gets_no_version_note(run, capsys):
    """The same proxima and no torch recorded is no version difference: no "bit-identical" note at eval."""
    edit_checkpoint(run, lambda s: s.update(versions={"proxima": __version__}))
    code, _, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    assert code == 0 and "bit-identical" not in err, err


def test_other_recorded_versions_get_one_note_at_eval_and_resume(run, capsys):
    code, _, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    assert code == 0 and "bit-identical" not in err  # the same versions: no note
    path = edit_checkpoint(run, lambda s: s["versions"].update(proxima="9.9.9"))
    code, _, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    note = (f"proxima: note: {path}: recorded with proxima 9.9.9 / torch {__import__('torch').__version__}; this is "
            f"{__version__} / ")
    assert code == 0 and err.count("bit-identical only within one version") == 1 and note in err, err
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0 and err.count("bit-identical only within one version") == 1 and note in err, err


# ------------------------------------------------------------------------------------ 6: the run's values, not flags
def test_eval_names_config_yaml_eval_episodes_not_a_flag_never_typed(run, capsys):
    yaml = run / "config.yaml"
    yaml.write_text(yaml.read_text().replace("eval_episodes: 0", f"eval_episodes: {10 ** 12}"))
    code, _, err = run_main(["eval", str(run)], capsys)
    line = error_line(code, err, f"{yaml}: eval_episodes 1,000,000,000,000: the evaluation builds one env per episode",
                      "; pass --episodes N")
    assert "lower --episodes" not in line


def test_eval_of_a_bare_checkpoint_names_its_eval_episodes_not_a_flag_never_typed(run, tmp_path, capsys):
    """A bare .pt's recorded eval_episodes refused is named as that file's field, with --episodes N as the fix."""
    path = edit_checkpoint(run, lambda s: s["config"].update(eval_episodes=10 ** 12))
    bare = shutil.copy(path, tmp_path / "bare.pt")
    code, _, err = run_main(["eval", str(bare)], capsys)
    line = error_line(code, err, f"error: {bare}: eval_episodes 1,000,000,000,000", "; pass --episodes N")
    assert "checkpoint:" not in line and "lower --episodes" not in line


@pytest.mark.parametrize("field, value, shown, damaged", [("lr", -1.0, "lr -1.0: must be positive", True),
                                                          ("threads", 10 ** 6, "threads 1000000: must be at most", False)])
def test_resume_names_the_checkpoints_field_not_a_flag_never_typed(run, capsys, field, value, shown, damaged):
    path = edit_checkpoint(run, lambda s: s["config"].update({field: value}))
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    line = error_line(code, err, f"error: {path}: {shown}")
    assert f"--{field} {value}" not in line
    # only a field no resume flag may change says the file was edited or damaged
    assert ("a resume cannot change it: the file was edited or damaged" in line) == damaged


def test_resume_names_a_typed_flag_as_the_flag_not_the_checkpoint(run, capsys):
    """`resume --threads 1000000` is refused as the flag typed, not blamed on the checkpoint's field."""
    code, _, err = run_main(["resume", str(run), "--quiet", "--threads", str(10 ** 6)], capsys)
    line = error_line(code, err, "--threads 1000000")
    assert "ckpt" not in line.split("--threads")[0].lower()


# ------------------------------------------------------------------------------------ 11: a read-only run dir
def _denied(*args, **kwargs):
    raise PermissionError(errno.EACCES, "Permission denied")


def test_report_and_plot_in_a_run_dir_they_cannot_write_say_use_out(tmp_path, capsys, monkeypatch):
    from proxima import atomic

    d = fake_run_dir(tmp_path, "r")
    monkeypatch.setattr(atomic, "write_atomic", _denied)
    code, _, err = run_main(["report", str(d), "--episodes", "0"], capsys)
    line = error_line(code, err, f"{d / 'report.md'}: could not write (Permission denied)")
    assert line.endswith("; use --out FILE.md"), line
    code, _, err = run_main(["report", str(d), "--episodes", "0", "--out", str(tmp_path / "x.md")], capsys)
    assert "--out FILE" not in error_line(code, err, "Permission denied")  # the --out given is the one to change
    monkeypatch.setattr(atomic, "atomic_open", _denied)
    code, _, err = run_main(["plot", str(d)], capsys)
    line = error_line(code, err, f"{d / 'curve.png'}: could not write (Permission denied)")
    assert line.endswith("; use --out FILE.png"), line


def test_plot_with_an_explicit_out_it_cannot_write_does_not_say_use_out(tmp_path, capsys, monkeypatch):
    """The --out given is the one to change: plot does not tell a user who typed one to pass --out."""
    from proxima import atomic

    d = fake_run_dir(tmp_path, "r")
    monkeypatch.setattr(atomic, "atomic_open", _denied)
    code, _, err = run_main(["plot", str(d), "--out", str(tmp_path / "x.png")], capsys)
    assert "--out FILE" not in error_line(code, err, "Permission denied")
