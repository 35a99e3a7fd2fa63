"""Review 38: a bench cut short (an env that fails at a larger size, Ctrl-C, SIGTERM, a crash) keeps
the sizes it finished: their table is printed and written to --out with a line naming the size that
failed or was interrupted and why, and the exit status and stderr line stay what they were (2 and
the error line; 130/143). Nothing is written when no size finished. And the --out file's warm-up
seconds are a whole warm-up's, not a call's."""

from __future__ import annotations

import signal

import pytest

from proxima import bench
from proxima.signals import TrainingInterrupted
from tests.cli_helpers import error_line, module_written_in, run_main

#: a Gymnasium env whose step raises once 4 or more of it are open at once: the 4-env size fails,
#: the 1- and 2-env sizes (and any lone probe instance) run
BAD_AT_4 = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Bad(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)
    open_now = 0

    def __init__(self):
        Bad.open_now += 1
        self.closed = False

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if Bad.open_now >= 4:
            raise RuntimeError("simulator exploded")
        self.t += 1
        return np.zeros(2, np.float32), 1.0, False, self.t >= 8, {}

    def close(self):
        if not self.closed:
            self.closed, Bad.open_now = True, Bad.open_now - 1
'''

#: the cheapest bench that measures: train only, one repeat of one call, 16-step rollouts
FAST = ["--train-only", "--repeats", "1", "--seconds", "0.01", "--num-steps", "16"]


@pytest.fixture
def bad_env(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "badat4_keep38", BAD_AT_4)


def cut_at_third_size(monkeypatch, exc):
    """bench_lines measures the first two sizes for real and raises ``exc()`` at the third; returns the sizes asked."""
    real, asked = bench.bench_lines, []

    def lines(args, backends, n):
        asked.append(n)
        if len(asked) == 3:
            raise exc()
        return real(args, backends, n)

    monkeypatch.setattr(bench, "bench_lines", lines)
    return asked


def rows(text: str) -> list:
    """The num_envs of the table rows in ``text`` (console table or Markdown)."""
    out = []
    for row in text.splitlines():
        cells = [c for c in row.replace("|", " ").split() if c]
        if len(cells) > 2 and cells[0] in ("native", "gymnasium") and cells[1].replace(",", "").isdigit():
            out.append(int(cells[1].replace(",", "")))
    return out


def test_env_failing_at_4_envs_keeps_the_1_and_2_env_rows(bad_env, tmp_path, capsys):
    out = tmp_path / "bad.md"
    code, stdout, err = run_main(["bench", "badat4_keep38:Bad", "--num-envs", "1,2,4,8", *FAST, "--out", str(out)], capsys)
    line = error_line(code, err, "proxima bench: error: ", "simulator exploded")  # exit 2 and today's line, last
    assert err.strip().splitlines()[-1] == line
    assert rows(stdout) == [1, 2]
    note = "stopped at 4 envs (gymnasium): failed: "
    assert note in stdout and stdout.rstrip().endswith("not measured: 4, 8 envs")
    text = out.read_text()
    assert rows(text) == [1, 2]
    assert f"**Incomplete: {note}" in text and "simulator exploded" in text.split("**Incomplete:")[1].splitlines()[0]
    assert f"wrote {out}" in err


def test_ctrl_c_at_the_third_size_keeps_two_rows_and_exits_130(monkeypatch, tmp_path, capsys):
    asked = cut_at_third_size(monkeypatch, KeyboardInterrupt)
    out = tmp_path / "int.md"
    code, stdout, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "1,2,4,8", *FAST,
                                  "--out", str(out)], capsys)
    assert (code, asked) == (130, [1, 2, 4])
    assert rows(stdout) == [1, 2] and rows(out.read_text()) == [1, 2]
    assert "stopped at 4 envs (native): interrupted (SIGINT); not measured: 4, 8 envs" in stdout
    assert "**Incomplete: stopped at 4 envs (native): interrupted (SIGINT)" in out.read_text()
    assert err.strip().splitlines()[-1] == "proxima bench: stopped by SIGINT at 4 envs" and "Traceback" not in err


def test_sigterm_is_a_stop_that_keeps_the_rows_and_exits_143(monkeypatch, tmp_path, capsys):
    def sigterm():
        # what the OS does on SIGTERM: run the handler installed for it (SIG_DFL, an int, would kill the process)
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler), "bench leaves SIGTERM's default: a SIGTERM would kill it with its rows unsaved"
        handler(signal.SIGTERM, None)
        return KeyboardInterrupt()  # not reached: the handler raises

    cut_at_third_size(monkeypatch, sigterm)
    out = tmp_path / "term.md"
    code, stdout, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "1,2,4", *FAST,
                                  "--out", str(out)], capsys)
    assert code == 143, err
    assert rows(out.read_text()) == [1, 2] and "interrupted (SIGTERM)" in out.read_text()
    assert "proxima bench: stopped by SIGTERM at 4 envs" in err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back as it was found


def test_a_stop_before_any_size_finished_writes_nothing(monkeypatch, tmp_path, capsys):
    def lines(args, backends, n):
        raise TrainingInterrupted(signal.SIGTERM, None)

    monkeypatch.setattr(bench, "bench_lines", lines)
    out = tmp_path / "none.md"
    code, stdout, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "1,2", *FAST,
                                  "--out", str(out)], capsys)
    assert code == 143 and not out.exists() and stdout == ""


def test_a_crash_keeps_the_finished_rows_then_raises(monkeypatch, tmp_path, capsys):
    cut_at_third_size(monkeypatch, lambda: RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"))
    out = tmp_path / "crash.md"
    from proxima import cli

    with pytest.raises(RuntimeError, match="out of memory"):  # the traceback and exit 1, as before
        cli.main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "1,2,4", *FAST, "--out", str(out)])
    text = out.read_text()
    assert rows(text) == [1, 2]
    assert "stopped at 4 envs (native): failed: RuntimeError: CUDA out of memory. Tried to allocate 2 GiB" in text


def test_out_file_gives_the_warm_up_seconds_per_measurement_not_per_call():
    line = bench.Line("native", 4, samples={"train": [1.0]}, warmup={"train": [34.9], "env": [0.5]})
    text = bench.warmup_text([line])
    assert "(0.5-34.9 s per measurement, all its warm-up calls together)" in text
    assert "s each" not in text


def test_an_env_error_after_sigterm_is_the_stop_not_a_failure(monkeypatch, tmp_path, capsys):
    """A SIGTERM that ended --vector async's workers surfaces as the env's EnvError: the signal recorded on
    the OutsideLoop makes it a stop (143, "stopped by SIGTERM"), not an env failure (2)."""
    from proxima.envs import EnvError

    real, asked = bench.bench_lines, []

    def lines(args, backends, n):
        asked.append(n)
        if len(asked) == 2:
            outside = signal.getsignal(signal.SIGTERM).__self__  # the OutsideLoop around the sizes
            outside.signum = signal.SIGTERM
            raise EnvError("worker 0 died")
        return real(args, backends, n)

    monkeypatch.setattr(bench, "bench_lines", lines)
    out = tmp_path / "term.md"
    code, stdout, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "1,2", *FAST,
                                  "--out", str(out)], capsys)
    assert code == 143, err
    assert err.strip().splitlines()[-1] == "proxima bench: stopped by SIGTERM at 2 envs"
    assert "interrupted (SIGTERM)" in out.read_text() and "worker 0 died" not in out.read_text()


def test_a_stop_after_only_skipped_sizes_writes_nothing(monkeypatch, tmp_path, capsys):
    """Gymnasium only, every size over --max-gym-envs: the rows so far are all 'skipped', which record nothing."""
    real, calls = bench.train_x_gym, []

    def ratios(lines):
        calls.append(lines[0].num_envs)
        if lines[0].num_envs == 4:
            raise KeyboardInterrupt
        return real(lines)

    monkeypatch.setattr(bench, "train_x_gym", ratios)
    out = tmp_path / "skipped.md"
    code, stdout, err = run_main(["bench", "CartPole-v1", "--backend", "gymnasium", "--max-gym-envs", "1",
                                  "--num-envs", "2,4", *FAST, "--out", str(out)], capsys)
    assert (code, calls) == (130, [2, 4]), err
    assert not out.exists() and stdout == ""
    assert err.strip().splitlines()[-1] == "proxima bench: stopped by SIGINT at 4 envs"
