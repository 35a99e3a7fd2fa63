"""Hostile input on surfaces added in session 46: a reward file too deep or too big for ast, an ffmpeg
that prints escape codes, floods its output or leaves a child running, a symlink loop given as a run,
a config number past float's range, and a 100 kB config value in a legend."""

import os
import stat
import sys
import time
import tracemalloc

import pytest
import torch

from proxima.plot import legend_entry, setting_groups, sweep_order
from proxima.rlhf.config import ConfigError
from proxima.rlhf.rewards import load_reward
from tests.cli_helpers import fake_run_dir, run_main

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="the stand-in ffmpeg binaries are shell scripts")

NOT_RUN = 'print("SHOULD NOT RUN")\n'


def test_a_reward_file_too_deep_for_ast_still_gets_its_one_line_hint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # 10,000 additions nest 10,000 deep: ast.parse raises RecursionError ("during ast construction")
    (tmp_path / "deep.py").write_text(NOT_RUN + "def score(prompts, responses):\n    return 0\n" + "x = 1" + "+1" * 10000 + "\n")
    with pytest.raises(ConfigError) as e:
        load_reward("deep.py", torch.device("cpu"), import_path=[str(tmp_path)])
    assert str(e.value).startswith("--reward 'deep.py': name the function: deep.py:FUNCTION (it defines score)"), str(e.value)
    assert "SHOULD NOT RUN" not in capsys.readouterr().out


def test_the_cli_refuses_a_too_deep_reward_file_in_one_line_with_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep.py").write_text("x = 1" + "+1" * 10000 + "\n")
    code, out, err = run_main(["rlhf", "--demo", "--reward", "deep.py", "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 2, err
    assert err.strip().splitlines() == ["proxima rlhf: error: --reward 'deep.py': name the function: deep.py:FUNCTION"]


def test_a_big_reward_files_hint_is_read_from_its_first_megabyte_with_little_memory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    body = "y = [" + ",".join(["1"] * 2000) + "]\n"  # 4 kB a line, 2.4 MB in all: ast would hold about 1 GB
    (tmp_path / "big.py").write_text(NOT_RUN + "def first(prompts, responses):\n    return 0\n"
                                     + "async def second(p, r):\n    pass\n" + body * 600 + "def late(p, r):\n    pass\n")
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as e:
            load_reward("big.py", torch.device("cpu"), import_path=[str(tmp_path)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(e.value).startswith("--reward 'big.py': name the function: big.py:FUNCTION (it defines first, second, ...)"), str(e.value)
    assert peak < 40 * 2**20, f"{peak / 2**20:.0f} MB"


def _fake_ffmpeg(tmp_path, monkeypatch, script: str):
    pytest.importorskip("imageio_ffmpeg")
    exe = tmp_path / "ffmpeg"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", str(exe))
    return exe


@posix_only
def test_ffmpegs_escape_codes_on_stderr_are_shown_escaped(tmp_path, monkeypatch):
    from proxima import video

    _fake_ffmpeg(tmp_path, monkeypatch, 'printf "\\033]0;PWNED\\007\\033[2J\\033[31mred" >&2\nexit 3\n')
    _, encoders, problem = video._probe_ffmpeg()
    assert encoders == frozenset()
    assert "exited with status 3 on -encoders: \\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31mred; " in problem, problem
    assert problem.isprintable()


@posix_only
def test_an_ffmpeg_that_floods_its_output_is_stopped_and_named(tmp_path, monkeypatch):
    from proxima import video

    _fake_ffmpeg(tmp_path, monkeypatch, "head -c 50000000 /dev/zero | tr '\\0' a\n")
    tracemalloc.start()
    try:
        exe, encoders, problem = video._probe_ffmpeg()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert encoders == frozenset()
    assert problem.startswith(f"imageio-ffmpeg's ffmpeg {exe} (IMAGEIO_FFMPEG_EXE) printed more than 1 MB for -encoders "
                              "(ffmpeg's list is about 30 kB: is it ffmpeg?); point IMAGEIO_FFMPEG_EXE at"), problem
    assert peak < 10 * 2**20, f"{peak / 2**20:.0f} MB"


@posix_only
def test_an_ffmpeg_that_hangs_is_killed_with_the_child_it_started(tmp_path, monkeypatch):
    from proxima import video

    pid_file = tmp_path / "child.pid"
    _fake_ffmpeg(tmp_path, monkeypatch, f"sleep 4 &\necho $! > {pid_file}\nwait\n")
    monkeypatch.setattr(video, "FFMPEG_PROBE_TIMEOUT_S", 0.5)
    start = time.monotonic()
    _, _, problem = video._probe_ffmpeg()
    took = time.monotonic() - start
    assert "did not answer -encoders within 0.5 s" in problem, problem
    assert took < 2.5, f"{took:.1f} s"  # not the 4 s of the child holding its output pipe open
    assert not _running(int(pid_file.read_text()))


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie that no init reaps, in a container, is dead)."""
    time.sleep(0.2)
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


@pytest.fixture
def symlink_loop(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake_run_dir(tmp_path, "A")
    os.symlink("loop2", tmp_path / "loop1")
    os.symlink("loop1", tmp_path / "loop2")
    return tmp_path


@pytest.mark.parametrize("argv", [["report", "loop1+A"], ["report", "loop1", "A"], ["plot", "loop1", "A", "--out", "x.png"]])
def test_a_symlink_loop_given_as_a_run_is_one_line_naming_it(argv, symlink_loop, capsys):
    code, out, err = run_main(argv, capsys)
    assert code == 2, err
    assert err.strip().splitlines() == [f"proxima {argv[0]}: error: loop1: a symlink loop (links that lead back to "
                                        "themselves); give the run directory itself"]


def test_a_config_number_past_floats_range_does_not_order_a_sweep(tmp_path, capsys):
    runs = [fake_run_dir(tmp_path, "r0", lr=10**400), fake_run_dir(tmp_path, "r1", lr=0.01),
            fake_run_dir(tmp_path, "r2", lr=0.001)]
    assert sweep_order(runs) == runs  # lr is not a number in every run: name order
    code, _, err = run_main(["plot", str(tmp_path), "--out", str(tmp_path / "sweep.png")], capsys)
    assert code == 0, err
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_a_100_kb_config_value_is_cut_short_in_its_legend_label(tmp_path):
    runs = [fake_run_dir(tmp_path, f"r{i}", env_kwargs={"blob": str(i) * 100_000}) for i in range(3)]
    labels = [label for label, _ in setting_groups(runs)["Fake-v0"]]
    assert labels == [f"env_kwargs={{'blob': '{str(i) * 30}... (100,012 characters)" for i in range(3)]
    assert all("\n" not in legend_entry(label) for label in labels)
