"""benchmarks/learning.py's results file: rewriting it keeps what was written by hand and names each run's machine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import learning  # noqa: E402

from proxima.presets import resolve  # noqa: E402


def _run(env_id, seed, mean, machine=None):
    r = {"env_id": env_id, "seed": seed, "eval_mean": mean, "eval_std": 1.0, "steps": 1000, "wall_s": 10.0,
         "train_s": 9.0, "final_episodic_return": mean, "command": f"proxima train {env_id} --seed {seed}",
         "config": resolve(env_id).to_dict()}  # a run of today's preset: a record without a config is "other config"
    if machine:
        r["machine"] = machine
    return r


def test_rewrite_keeps_hand_written_sections_once_and_names_machines(tmp_path):
    out = tmp_path / "learning.md"
    runs = [_run("CartPole-v1", 1, 500.0, "Xeon box"), _run("Pendulum-v1", 1, -150.0, "EPYC box")]
    learning.write_markdown(out, runs, ["python benchmarks/learning.py"])
    text = out.read_text()
    assert "- machine (CartPole-v1): Xeon box" in text and "- machine (Pendulum-v1): EPYC box" in text

    # a section added by hand (e.g. a budget run) survives two rewrites, once, before the presets
    hand = "## Atari on this CPU (a budget run)\n\nPong: 191 steps/s.\n\n"
    out.write_text(text.replace("## Presets (default)", hand + "## Presets (default)"))
    runs.append(_run("CartPole-v1", 2, 480.0))
    learning.write_markdown(out, runs, ["python benchmarks/learning.py"])
    learning.write_markdown(out, runs, ["python benchmarks/learning.py"])
    text = out.read_text()
    assert text.count("## Atari on this CPU (a budget run)") == 1 and "Pong: 191 steps/s." in text
    assert text.index("## Atari on this CPU") < text.index("## Presets (default)")
    assert "## Tuning notes" not in text  # the notes are of the committed files' runs, not of these
    assert text.count("## Presets (default)") == 1 and text.count("## Commands") == 1
    assert "- machine (CartPole-v1): not recorded" in text  # a run without the field is not given this machine
    assert learning.load_state(out)[0] == runs


def test_one_machine_is_named_without_env_list(tmp_path):
    out = tmp_path / "learning.md"
    learning.write_markdown(out, [_run("CartPole-v1", 1, 500.0, "EPYC box")], [])
    assert "- machine: EPYC box" in out.read_text()


def test_runs_recorded_before_machines_take_the_files_header(tmp_path):
    out = tmp_path / "learning.md"
    learning.write_markdown(out, [_run("CartPole-v1", 1, 500.0)], [])
    old_header = ("- CPU: AMD EPYC, 2 logical cores (2 usable by this process); training on CPU, 1 torch thread; "
                  "CPU tanh: numpy (proxima/tanh_cpu.py)\n- torch 2.13.0+cpu, gymnasium 1.4.0, Python 3.11.7\n")
    text = out.read_text()
    out.write_text(text.replace("- machine: not recorded\n", old_header))
    runs, _ = learning.load_state(out)
    assert runs[0]["machine"] == ("AMD EPYC, 2 logical cores (2 usable by this process); CPU tanh: numpy "
                                  "(proxima/tanh_cpu.py); torch 2.13.0+cpu, gymnasium 1.4.0, Python 3.11.7")


@pytest.mark.parametrize("argv,message", [
    (["--envs", ""], "--envs: no env id given"),
    (["--envs", "NoSuch-v0"], "--envs NoSuch-v0: no default preset"),
    (["--envs", "CartPole-v1", "--seeds", ""], "--seeds '': expected comma-separated integers"),
    (["--envs", "CartPole-v1", "--seeds", "1,a"], "--seeds '1,a': expected comma-separated integers"),
    (["--envs", "CartPole-v1", "--seeds", "1", "--threads", "0"], "--threads 0: must be at least 1"),
])
def test_bad_arguments_are_one_line_before_anything_runs(tmp_path, capsys, argv, message):
    out = tmp_path / "learning.md"
    with pytest.raises(SystemExit) as e:
        learning.main([*argv, "--out", str(out), "--runs-dir", str(tmp_path / "runs")])
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "runs").exists()


def test_out_that_is_a_folder_is_refused_first(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        learning.main(["--table-only", "--out", str(tmp_path)])
    assert e.value.code == 2 and "is a directory" in capsys.readouterr().err


def test_extra_flags_that_only_say_where_do_not_make_a_run_other_config():
    run = _run("CartPole-v1", 1, 500.0)
    assert not learning.stale(dict(run, extra="--device cuda --threads 4"))
    assert learning.stale(dict(run, extra="--hidden-sizes 256,256"))


def _failed(env_id, seed):
    return {"env_id": env_id, "seed": seed, "command": f"proxima train {env_id} --seed {seed}", "returncode": 2,
            "wall_s": 1.0, "error": "proxima train: error: boom"}


def test_a_failed_run_never_replaces_a_recorded_successful_one():
    ok = _run("CartPole-v1", 1, 500.0)
    runs = [ok, _run("CartPole-v1", 2, 480.0)]
    assert learning.merge(runs, _failed("CartPole-v1", 1)) is runs
    again = _run("CartPole-v1", 1, 499.0)  # a successful re-run still replaces the old record
    assert learning.merge(runs, again) == [runs[1], again]
    # a failure where nothing worked before is recorded (the table says "failed: ...")
    assert learning.merge([_failed("Acrobot-v1", 1)], _failed("Acrobot-v1", 1)) == [_failed("Acrobot-v1", 1)]


def test_a_failed_seed_keeps_the_recorded_row_and_the_script_exits_1(tmp_path, capsys, monkeypatch):
    """The reviewer's repro: a seed that fails (here --extra with a flag train refuses) dropped seed 1's
    recorded 500.0 from the table and the script exited 0."""
    out = tmp_path / "learning.md"
    learning.write_markdown(out, [_run("CartPole-v1", 1, 500.0), _run("CartPole-v1", 2, 480.0)], ["old invocation"])
    before = out.read_text()
    monkeypatch.setattr(learning, "run_one", lambda env_id, seed, *a, **k: _failed(env_id, seed))
    code = learning.main(["--envs", "CartPole-v1", "--seeds", "1", "--out", str(out), "--runs-dir", str(tmp_path / "runs")])
    _, err = capsys.readouterr()
    assert code == 1
    assert err.splitlines() == ["learning.py: error: 1 of 1 run(s) failed, see above (CartPole-v1 seed 1: proxima train: "
                                "error: boom)"]
    assert out.read_text() == before  # nothing merged: not even the invocation is listed as producing rows
    assert "| CartPole-v1 | >= 475 | 2 | s1: 500.0, s2: 480.0 |" in before


def test_a_failed_seed_beside_a_new_success_is_merged_and_still_exits_1(tmp_path, capsys, monkeypatch):
    out = tmp_path / "learning.md"
    learning.write_markdown(out, [_run("CartPole-v1", 1, 500.0)], [])
    results = {1: _failed("CartPole-v1", 1), 2: _run("CartPole-v1", 2, 490.0)}
    monkeypatch.setattr(learning, "run_one", lambda env_id, seed, *a, **k: dict(results[seed]))
    code = learning.main(["--envs", "CartPole-v1", "--seeds", "1,2", "--out", str(out), "--runs-dir", str(tmp_path / "runs")])
    assert code == 1 and "1 of 2 run(s) failed" in capsys.readouterr().err
    assert "| CartPole-v1 | >= 475 | 2 | s1: 500.0, s2: 490.0 |" in out.read_text()
