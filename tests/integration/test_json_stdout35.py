"""Machine-readable stdout stays machine-readable when the env prints: an env that prints as it is
built or reset (print(), os.write(1, ...), C code's printf) has its lines on stderr, and stdout holds
the JSON (or YAML) alone, as --json and --dry-run promise (terminal.machine_stdout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from proxima.terminal import machine_stdout
from tests.cli_helpers import TINY_POP, TINY_RUN, isolated, module_written_in, run_main

MODULE = "noisy35_envs"
#: N prints from Python and from fd 1 as it is built and on each reset; NC also through C's stdio
ENVS = '''
import os

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class N(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self):
        print("N: loading simulator assets")
        os.write(1, b"N: fd1 loading\\n")

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        print("N: reset")
        os.write(1, b"N: fd1 reset\\n")
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), float(action), False, self.t >= 8, {}


class NC(N):
    def __init__(self):
        import ctypes

        super().__init__()
        ctypes.CDLL(None).printf(b"N: C printf\\n")
'''
ENV = f"{MODULE}:N"


@pytest.fixture
def noisy(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, MODULE, ENVS)


def _noise_on_stderr(err: str, *kinds: str) -> None:
    for kind in kinds or ("N: loading simulator assets", "N: fd1 loading"):
        assert kind in err, (kind, err)


# ------------------------------------------------------------------------------- the context manager
def test_machine_stdout_sends_python_fd1_and_child_writes_to_stderr_and_the_json_to_stdout(capfd):
    print("before")
    original = sys.stdout
    with machine_stdout() as out:
        print("py noise")
        os.write(1, b"fd noise\n")
        subprocess.run(["/bin/sh", "-c", "echo child noise"], check=True)  # a child inherits fd 1
        print('{"a": 1}', file=out)
    assert sys.stdout is original
    print("after")
    os.write(1, b"fd after\n")
    o, e = capfd.readouterr()
    assert o == 'before\n{"a": 1}\nafter\nfd after\n'
    assert e.splitlines() == ["py noise", "fd noise", "child noise"]


def test_machine_stdout_puts_stdout_back_after_ctrl_c(capfd):
    original = sys.stdout
    with pytest.raises(KeyboardInterrupt):
        with machine_stdout():
            os.write(1, b"fd noise\n")
            raise KeyboardInterrupt
    assert sys.stdout is original
    print("after")
    os.write(1, b"fd after\n")
    o, e = capfd.readouterr()
    assert (o, e) == ("after\nfd after\n", "fd noise\n")


def test_machine_stdout_under_capsys_swaps_python_stdout(capsys):
    with machine_stdout() as out:  # capsys' sys.stdout has no fd: only the Python swap is seen
        print("py noise")
        print("{}", file=out)
    assert capsys.readouterr() == ("{}\n", "py noise\n")


# ------------------------------------------------------------------------------- the commands (capfd)
def test_population_dry_run_json_line_is_stdout_alone(noisy, capfd):
    code, out, err = run_main(["train", ENV, "--seeds", "1,2", "--dry-run", "--num-envs", "2"], capfd)
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["members"], doc["seeds"], doc["config"]["env_id"]) == (2, [1, 2], ENV)
    _noise_on_stderr(err)


def test_bench_json_lines_are_stdout_alone(noisy, capfd):
    import torch

    before = torch.get_num_threads()
    try:
        code, out, err = run_main(["bench", ENV, "--backend", "gymnasium", "--num-envs", "2", "--num-steps", "8",
                                   "--repeats", "1", "--seconds", "0.01", "--train-only", "--json"], capfd)
    finally:
        torch.set_num_threads(before)  # bench sets --threads for the process it owns; here that is pytest's
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(d["env_id"], d["backend"], d["num_envs"]) for d in lines] == [(ENV, "gymnasium", 2)]
    _noise_on_stderr(err, "N: loading simulator assets", "N: fd1 loading", "N: reset", "N: fd1 reset")


def test_doctor_json_is_stdout_alone_when_a_probe_prints(monkeypatch, capfd):
    from proxima import doctor

    def noisy_collect(*a, **k):  # a library that prints as the probes import or call it
        print("probe noise")
        os.write(1, b"fd probe noise\n")
        return {"python": "3", "cuda_usable": False}

    monkeypatch.setattr(doctor, "collect", noisy_collect)
    code, out, err = run_main(["doctor", "--json"], capfd)
    assert code == 0, err
    assert json.loads(out) == {"python": "3", "cuda_usable": False}
    _noise_on_stderr(err, "probe noise", "fd probe noise")


# eval (one run, a population) and a single run's dry run: cli.py's and population_eval.py's
def test_eval_json_is_stdout_alone(noisy, tmp_path, capfd):
    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", ENV, *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run_dir), "--quiet"], capfd)
    assert code == 0, err
    code, out, err = run_main(["eval", str(run_dir), "--env", ENV, "--episodes", "2", "--json"], capfd)
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["episodes"], doc["lengths"]) == (2, [8, 8])
    _noise_on_stderr(err, "N: loading simulator assets", "N: fd1 loading", "N: reset", "N: fd1 reset")


def test_population_eval_json_is_stdout_alone(noisy, tmp_path, capfd):
    run = tmp_path / "R"
    code, _, err = run_main(["train", ENV, "--seeds", "1-2", "--run-dir", str(run), "--total-timesteps", "32",
                             "--eval-episodes", "0", "--quiet", *TINY_POP], capfd)
    assert code == 0, err
    code, out, err = run_main(["eval", str(run), "--env", ENV, "--episodes", "1", "--json"], capfd)
    assert code == 0, err
    doc = json.loads(out)
    assert [(m["dir"], m["seed"]) for m in doc["members"]] == [("m000-seed1", 1), ("m001-seed2", 2)]
    _noise_on_stderr(err, "N: loading simulator assets", "N: fd1 loading", "N: reset", "N: fd1 reset")


def test_single_run_dry_run_yaml_is_stdout_alone(noisy, capfd):
    code, out, err = run_main(["train", ENV, "--dry-run", "--num-envs", "2"], capfd)
    assert code == 0, err
    doc = yaml.safe_load(out)
    assert (doc["env_id"], doc["num_envs"]) == (ENV, 2)
    _noise_on_stderr(err)


# ------------------------------------------------------------------------------- a real process
def test_population_dry_run_in_a_process_keeps_c_printf_off_stdout(tmp_path, monkeypatch):
    """A real fd 1 (a pipe): the JSON line is written with fd 1 pointed back at it; C's stdio buffer
    of the env's printf is flushed to stderr before it is, not at exit onto stdout after the JSON."""
    # block-buffered, as `proxima train ... | jq` is: with PYTHONUNBUFFERED every write would flush itself
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    (tmp_path / f"{MODULE}.py").write_text(ENVS)
    result = isolated(["-c", "import sys; sys.path.insert(0, '.'); from proxima.cli import entry; entry()",
                       "train", f"{MODULE}:NC", "--seeds", "1,2", "--dry-run", "--num-envs", "2"], tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["members"], doc["config"]["env_id"]) == (2, f"{MODULE}:NC")
    _noise_on_stderr(result.stderr, "N: loading simulator assets", "N: fd1 loading", "N: C printf")


# ------------------------------------------------------------------------------- the flushes, in a block-buffered pipe
#: (what the process runs, its stdout, its stderr): each is what a buffer left unflushed at one point would misroute
BUFFERED = {
    # the pre-block flush: what was printed before the block is stdout's, not stderr's
    "printed-before": ("""
        print("before")
        with machine_stdout() as out:
            print("{}", file=out)
        """, "before\n{}\n", ""),
    # the flush after each write: the JSON leaves the buffer while fd 1 is the real stdout
    "json-line": ("""
        with machine_stdout() as out:
            print("noise")
            print('{"a": 1}', file=out)
            print("more noise")
        """, '{"a": 1}\n', "noise\nmore noise\n"),
    # fd 1 goes back to stderr after each write: bench --json writes several lines, the env runs between them
    "fd1-between-lines": ("""
        with machine_stdout() as out:
            print('{"a": 1}', file=out)
            os.write(1, b"late fd noise\\n")
            print('{"b": 2}', file=out)
        """, '{"a": 1}\n{"b": 2}\n', "late fd noise\n"),
    # a library's write through the sys.stdout it took before the block: flushed to stderr before the JSON's
    "held-reference": ("""
        old = sys.stdout
        with machine_stdout() as out:
            old.write("held noise\\n")
            print('{"a": 1}', file=out)
        """, '{"a": 1}\n', "held noise\n"),
    # ... and at the block's end, before fd 1 is the real stdout again
    "held-reference-at-exit": ("""
        old = sys.stdout
        with machine_stdout() as out:
            print('{"a": 1}', file=out)
            old.write("held noise\\n")
        print("after")
        """, '{"a": 1}\nafter\n', "held noise\n"),
    # a C printf made before the block is stdout's, flushed there before the diversion
    "c-printf-before": ("""
        ctypes.CDLL(None).printf(b"c before\\n")
        with machine_stdout() as out:
            print('{"a": 1}', file=out)
        """, 'c before\n{"a": 1}\n', ""),
    # a nested block shares the outer one's real stdout (its JSON is not sent to stderr) and diversion
    "nested": ("""
        with machine_stdout() as a:
            with machine_stdout() as b:
                print('{"a": 1}', file=b)
                os.write(1, b"inner noise\\n")
            os.write(1, b"outer noise\\n")
            print('{"b": 1}', file=a)
        """, '{"a": 1}\n{"b": 1}\n', "inner noise\nouter noise\n"),
    # the stream handed out, written after the block: to stdout, not to a closed (or reused) fd
    "stream-after-block": ("""
        with machine_stdout() as out:
            pass
        print("late", file=out)
        os.write(1, b"fd after\\n")
        """, "late\nfd after\n", ""),
}


@pytest.mark.parametrize("name", sorted(BUFFERED))
def test_machine_stdout_in_a_block_buffered_pipe(name, tmp_path, monkeypatch):
    code, want_out, want_err = BUFFERED[name]
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)  # a pipe's stdout is block-buffered: only flushes move it
    program = "import ctypes, os, sys\nfrom proxima.terminal import machine_stdout\n" + textwrap.dedent(code)
    result = isolated(["-c", program], tmp_path)
    assert result.returncode == 0, result.stderr
    assert (result.stdout, result.stderr) == (want_out, want_err)


def test_machine_stdout_closes_the_copy_of_fd1_it_made():
    before = sorted(os.listdir("/proc/self/fd"))
    for _ in range(5):
        with machine_stdout():
            pass
    assert sorted(os.listdir("/proc/self/fd")) == before  # bench --json, one block per env: one fd leaked each
