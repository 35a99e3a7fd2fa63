"""tests/warm_python.py, which most CLI tests start their processes with: a warm child must look to
the test exactly as a fresh ``python`` process does (exit codes, signals, output order, argv, path,
cwd, env), and anything it could not reproduce must run as a plain subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import warm_python

pytestmark = pytest.mark.skipif(not warm_python.available(), reason="no warm server here (PROXIMA_TESTS_COLD, no fork)")

#: programs whose (exit code, stdout, stderr) must be the same warm and fresh
PROGRAMS = {
    "exit code": "import sys; sys.exit(3)",
    "exit message": "import sys; sys.exit('bad input')",
    "exit None": "raise SystemExit",
    "exit 256 wraps": "import sys; sys.exit(257)",
    "output order": "import sys; print('out 1'); print('err 1', file=sys.stderr); print('out 2'); sys.stderr.write('err 2\\n')",
    "argv and name": "import sys; print(sys.argv, __name__)",
    "path head": "import sys; print(repr(sys.path[0]))",
    "cwd and env": "import os; print(os.getcwd(), os.environ.get('WARM_TEST_VALUE'))",
    "atexit": "import atexit; atexit.register(print, 'at exit'); print('main')",
    "thread joined": ("import threading, time\n"
                      "def late():\n    time.sleep(0.2); print('thread done', flush=True)\n"
                      "threading.Thread(target=late).start(); print('main done', flush=True)"),
    "stdin": "import sys; print(sys.stdin.read().upper())",
    "warnings env": "import warnings; warnings.warn('shown?'); print('ok')",
}


def _both(code: str, tmp_path, **kw):
    env = {**os.environ, "WARM_TEST_VALUE": "42", **kw.pop("env", {})}
    argv = [sys.executable, "-c", code, "a b", "c"]
    warm = warm_python.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, **kw)
    fresh = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, **kw)
    return warm, fresh


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_warm_child_exits_and_prints_as_a_fresh_interpreter(name, tmp_path):
    kw = {"input": "some input"} if name == "stdin" else {}
    if name == "warnings env":
        kw["env"] = {"PYTHONWARNINGS": "error"}
    warm, fresh = _both(PROGRAMS[name], tmp_path, **kw)
    assert (warm.returncode, warm.stdout) == (fresh.returncode, fresh.stdout)
    if name == "warnings env":  # raised as an error by the env's filter: the last line of the traceback
        assert fresh.returncode == 1 and warm.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1] == "UserWarning: shown?"
    else:
        assert warm.stderr == fresh.stderr


@pytest.mark.parametrize("unbuffered, order", [("", "err 1\nerr 2\nout 1\nout 2\n"),  # stdout by block, stderr by line
                                                ("1", "out 1\nerr 1\nout 2\nerr 2\n")])
def test_output_order_with_stderr_into_stdout_is_a_fresh_interpreters(unbuffered, order):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    argv = [sys.executable, "-c", PROGRAMS["output order"]]
    kw = dict(env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert not isinstance(warm_python.Popen(argv, **kw), subprocess.Popen)
    warm, fresh = warm_python.run(argv, timeout=60, **kw), subprocess.run(argv, timeout=60, **kw)
    assert warm.stdout == fresh.stdout == order


def test_an_uncaught_exception_is_a_traceback_and_1_and_keyboardinterrupt_dies_by_sigint(tmp_path):
    warm, fresh = _both("raise ValueError('no')", tmp_path)
    assert warm.returncode == fresh.returncode == 1
    assert warm.stderr.splitlines()[-1] == "ValueError: no" and warm.stderr.startswith("Traceback")
    warm, fresh = _both("raise KeyboardInterrupt", tmp_path)
    assert warm.returncode == fresh.returncode == -signal.SIGINT


def test_a_warm_child_is_a_real_process_for_signals_and_sessions(tmp_path):
    code = "import os, time; print(os.getpid(), os.getpgid(0), os.getsid(0), flush=True); time.sleep(60)"
    proc = warm_python.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    pid, pgid, sid = map(int, proc.stdout.readline().split())
    assert pid == pgid == sid == proc.pid
    assert proc.poll() is None
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    with pytest.raises(subprocess.TimeoutExpired):
        warm_python.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)


def test_a_warm_child_starts_with_torch_loaded_and_nothing_of_proxima(tmp_path):
    code = "import sys; print('torch' in sys.modules, any(m.split('.')[0] == 'proxima' for m in sys.modules))"
    out = warm_python.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["True", "False"], out.stderr


def test_modules_scripts_and_pythonpath_run_as_python_runs_them(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "warm_probe_mod.py").write_text("import sys\nif __name__ == '__main__':\n    print('module', sys.argv[1:], sys.path[0])\n")
    script = tmp_path / "prog.py"
    script.write_text("import sys, warm_probe_mod\nprint('script', sys.argv, repr(sys.path[0]))\n")
    env = {**os.environ, "PYTHONPATH": str(lib)}
    for argv in ([sys.executable, "-m", "warm_probe_mod", "x"], [sys.executable, str(script), "y"]):
        warm = warm_python.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        fresh = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
        assert warm.returncode == 0 and warm.stdout.startswith(("module ['x']", "script ["))


def test_what_a_fork_cannot_reproduce_runs_as_a_plain_subprocess(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "torch.py").write_text("raise ImportError('stand-in')\n")
    code = [sys.executable, "-c", "pass"]
    assert isinstance(warm_python.Popen(code, env={**os.environ, "PYTHONHASHSEED": "7"}), subprocess.Popen)
    assert isinstance(warm_python.Popen(code, env={**os.environ, "PYTHONPATH": str(shadow)}), subprocess.Popen)
    assert isinstance(warm_python.Popen(code, preexec_fn=os.getpid), subprocess.Popen)
    assert isinstance(warm_python.Popen([sys.executable, "-X", "utf8", "-c", "pass"]), subprocess.Popen)
    assert isinstance(warm_python.Popen(["true"]), subprocess.Popen)
    assert not isinstance(warm_python.Popen(code), subprocess.Popen)
    # the shadowed import fails as it would in a fresh interpreter
    out = warm_python.run([sys.executable, "-c", "import torch"], env={**os.environ, "PYTHONPATH": str(shadow)},
                          capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "ImportError: stand-in" in out.stderr


def test_an_interrupted_run_kills_its_child_and_children_draw_their_own_random_numbers(tmp_path):
    """subprocess.run kills its child when the test is interrupted (pytest-timeout, Ctrl-C): so does
    warm_python.run. And two warm children do not share the server's torch or NumPy random state."""
    marker = tmp_path / "pid"
    code = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(60)"

    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 2.0)
        with pytest.raises(KeyboardInterrupt):
            warm_python.run([sys.executable, "-c", code], timeout=30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    pid = int(marker.read_text())
    for _ in range(100):  # reaped by the server once it died
        if not os.path.exists(f"/proc/{pid}"):
            break
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}")
    draw = "import torch, numpy; print(torch.rand(1).item(), numpy.random.rand())"
    a, b = (warm_python.run([sys.executable, "-c", draw], capture_output=True, text=True, timeout=60).stdout.split()
            for _ in range(2))
    assert a[0] != b[0] and a[1] != b[1]
