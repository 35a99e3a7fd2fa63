"""Python subprocesses for tests, started warm: forks of one server process that has imported torch,
NumPy and Gymnasium already, instead of fresh interpreters (``import torch`` alone takes ~3 s on
2 cores, and the fast tier starts ~100 of them).

``run`` and ``Popen`` take what ``subprocess.run``/``subprocess.Popen`` take for
``[sys.executable, "-m", MODULE, ...]``, ``[sys.executable, "-c", CODE, ...]`` or
``[sys.executable, SCRIPT, ...]`` and give what the tests look at: a real process with its own pid
(signals, ``start_new_session`` process groups), its exit code (negative for a signal), pipes or
files for stdin/stdout/stderr, ``cwd`` and ``env`` (PYTHONPATH too). The child is a fork: it runs
the program as ``python`` would (``__main__``, ``sys.argv``, ``sys.path``, buffered stdout,
line-buffered stderr, atexit handlers, non-daemon threads joined, an uncaught KeyboardInterrupt
dies by SIGINT) with none of Proxima imported yet.

Anything the fork could not reproduce runs as a plain subprocess instead, with no change for the
test: other interpreter flags, ``preexec_fn``, an env that changes a variable read while the
server imported (PYTHON*, TORCH_*, OMP_*, MKL_*, CUDA*, ...: OMP_NUM_THREADS, PYTHONPATH,
PYTHONUNBUFFERED, PYTHONWARNINGS and PYTHONFAULTHANDLER are set in the child as the interpreter would),
or a PYTHONPATH entry that shadows a module the server holds.
Tests of start-up itself (an import that fails, a signal while torch imports) must use
``subprocess``: the server has imported the real packages already.

What a fork does not reproduce, knowingly: every child has the server's str hash seed (a fresh
interpreter draws its own; a test that compares two runs for equality should not lean on set
order); interpreter teardown is skipped after atexit handlers, thread joins, a final flush of
stdout/stderr and a garbage collection, so a file still referenced from a module global at exit is
not flushed and __del__ methods do not run then (a fresh interpreter's finalization would); and a
child is in the server's session and process group unless started with ``start_new_session``.

The server is one process for the test session (a Unix socket in a temporary folder); it ends when
the test process does (its stdin is a pipe from it).
"""

from __future__ import annotations

import io
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Optional

PRELOAD = ["numpy", "torch", "torch.nn", "torch.optim", "torch.utils.tensorboard", "gymnasium", "gymnasium.vector",
           "gymnasium.envs.classic_control", "yaml", "tqdm"]
#: environment variables the child takes from its request; other differences run a plain subprocess
CARRIED = {"PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONWARNINGS", "PYTHONFAULTHANDLER", "OMP_NUM_THREADS"}
READ_AT_START = ("PYTHON", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "GOMP_", "CUDA", "NCCL", "LD_", "MALLOC_",
                 "GLIBC_", "NUMPY", "OPENBLAS", "KINETO", "TF_", "TENSORBOARD", "TQDM_")
DISABLE = "PROXIMA_TESTS_COLD"  # set (to 1) to start every process fresh, as before

_HEAD = struct.Struct("!i")


# ----------------------------------------------------------------------------------------------
# server side


def serve(path: str) -> None:
    """Import PRELOAD, listen on ``path``; per request fork a child with the request's fds; send the
    child's pid, then its exit code (os.waitstatus_to_exitcode) once it is reaped. Ends when stdin
    closes. In a child, this returns only when its program does: the program's exceptions reach the
    interpreter's top level as under ``python`` (a traceback and exit 1, SystemExit's code, death by
    SIGINT for a KeyboardInterrupt), and interpreter shutdown runs as it would there."""
    import importlib

    start_env = dict(os.environ)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 -- a missing optional package: its tests import it themselves
            pass
    request = _loop(path, start_env)
    if request is not None:
        _run(request)


def _loop(path: str, start_env: dict) -> Optional[dict]:
    """The server's loop; in a forked child, its request (the server's sockets closed), else None."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    sel.register(0, selectors.EVENT_READ)
    modules = sorted({name.split(".")[0] for name in sys.modules})
    compiler = any(name in sys.modules for name in ("torch._dynamo", "torch._inductor"))
    added = {k: v for k, v in os.environ.items() if start_env.get(k) != v}  # set by the imports (PYGAME_HIDE_SUPPORT_PROMPT)
    print(json.dumps({"modules": modules, "env": start_env, "added": added, "compiler": compiler}), flush=True)
    waiting: dict[int, socket.socket] = {}
    while True:
        for key, _ in sel.select():
            if key.fileobj == 0:
                if not os.read(0, 4096):  # the test process is gone
                    return None
            elif key.fileobj is listener:
                conn, _ = listener.accept()
                try:
                    request, fds = _read_request(conn)
                except (OSError, ValueError):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:  # the child: let go of everything the server holds, then become the program
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    sel.close()
                    for sock in (listener, conn, *waiting.values()):
                        sock.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    _place(request, fds)
                    return request
                for fd in fds:
                    os.close(fd)
                try:
                    conn.sendall(_HEAD.pack(pid))
                except OSError:
                    pass
                waiting[pid] = conn
            else:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
            while waiting:  # reap every child that ended (SIGCHLD coalesces)
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                conn = waiting.pop(pid, None)
                if conn is not None:
                    try:
                        conn.sendall(_HEAD.pack(os.waitstatus_to_exitcode(status)))
                    except OSError:
                        pass
                    conn.close()


def _read_request(conn: socket.socket) -> tuple[dict, list]:
    head, fds, _, _ = socket.recv_fds(conn, _HEAD.size, 3)
    if len(head) != _HEAD.size or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ValueError("bad request")
    (size,) = _HEAD.unpack(head)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise OSError("request cut short")
        body += chunk
    return json.loads(body), fds


def _place(request: dict, fds: list) -> None:
    """In the child: the request's fds as 0, 1, 2, its session, cwd, env, std streams, sys.path."""
    try:
        moved = [os.dup(fd) for fd in fds]  # dups land above 2 (0-2 are taken), out of the way of dup2 below
        for fd in fds:
            os.close(fd)
        for target, fd in enumerate(moved):
            os.dup2(fd, target)
            os.close(fd)
        if request["new_session"]:
            os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _std_streams(unbuffered=bool(os.environ.get("PYTHONUNBUFFERED")))
        # PYTHONPATH's entries as the interpreter puts them on sys.path: absolute (from the child's cwd;
        # "." is that folder), each once with site-packages' entries (site drops duplicates)
        extra = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        kind, target = request["kind"], request["target"]
        first = {"module": os.getcwd(), "code": "", "script": str(Path(target).resolve().parent)}[kind]
        sys.path[:] = [first, *dict.fromkeys([*extra, *request["base_path"]])]
        if os.environ.get("PYTHONWARNINGS"):  # as the interpreter reads it at start: filters before the others
            import warnings

            sys.warnoptions[:] = [w for w in os.environ["PYTHONWARNINGS"].split(",") if w]
            warnings._processoptions(sys.warnoptions)  # noqa: SLF001
        if os.environ.get("PYTHONFAULTHANDLER"):
            import faulthandler

            faulthandler.enable()
        if "OMP_NUM_THREADS" in os.environ:
            import torch

            torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))
        try:
            import numpy

            numpy.random.seed()  # a fresh interpreter's global NumPy state is its own, not the server's
        except ImportError:
            pass
        try:
            import torch

            torch.seed()  # and its torch default generator too: forks of one server would all draw alike
        except ImportError:
            pass
    except BaseException:  # noqa: BLE001 -- the program never started: say why, exit 125
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(125)


def _std_streams(unbuffered: bool) -> None:
    """stdin/stdout/stderr as a fresh interpreter opens them on fds 0-2: stdout block-buffered unless
    a terminal or PYTHONUNBUFFERED, stderr line-buffered, stderr's errors backslashreplace."""
    enc = sys.__stdout__.encoding if sys.__stdout__ else "utf-8"
    # the error handlers the interpreter chose for this locale (C/POSIX/C.UTF-8: surrogateescape)
    errs = {name: getattr(getattr(sys, f"__{name}__"), "errors", None) or "strict" for name in ("stdin", "stdout")}

    def out(fd: int, errors: str, line: bool):
        raw = io.FileIO(fd, "w", closefd=False)
        buf = raw if unbuffered else io.BufferedWriter(raw)
        return io.TextIOWrapper(buf, encoding=enc, errors=errors, line_buffering=line or raw.isatty(),
                                write_through=unbuffered)

    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding=enc,
                                                 errors=errs["stdin"])
    sys.stdout = sys.__stdout__ = out(1, errs["stdout"], False)
    sys.stderr = sys.__stderr__ = out(2, "backslashreplace", True)


def _run(request: dict) -> None:
    """Run the program as ``python`` would. Its end: SystemExit (or none) ends the process as
    interpreter shutdown would, without tearing down the modules (~0.7 s with torch loaded); any other
    exception goes on to the interpreter's top level (a traceback and 1; for KeyboardInterrupt, death by SIGINT)."""
    import builtins
    import runpy
    import types

    kind, target, args = request["kind"], request["target"], request["args"]
    try:
        if kind == "module":
            sys.argv = [target, *args]  # runpy puts the module's file in argv[0]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif kind == "script":
            sys.argv = [target, *args]
            runpy.run_path(target, run_name="__main__")
        else:
            sys.argv = ["-c", *args]
            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = builtins
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)  # noqa: S102 -- the test's own code
    except SystemExit as e:
        _exit(e.code)
    _exit(None)


def _exit(value) -> None:
    """Py_FinalizeEx's visible steps, then os._exit: join non-daemon threads, atexit handlers, flush
    stdout/stderr (a failed stdout flush is reported and exits 120), finalize garbage (unreferenced
    open files flush)."""
    import atexit
    import gc
    import threading as th

    if value is None:
        code = 0
    elif isinstance(value, int):
        code = value
    else:
        print(value, file=sys.stderr)
        code = 1
    th._shutdown()  # noqa: SLF001
    atexit._run_exitfuncs()  # noqa: SLF001
    try:
        sys.stdout.flush()
    except (OSError, ValueError) as e:
        try:
            print(f"Exception ignored in: {sys.stdout!r}\n{type(e).__name__}: {e}", file=sys.stderr)
        except (OSError, ValueError):
            pass
        code = 120
    gc.collect()
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code & 0xFF)


# ----------------------------------------------------------------------------------------------
# test-process side


class _Server:
    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="warm-python-")
        self.path = os.path.join(self.folder, "s")
        env = {k: v for k, v in os.environ.items() if k not in CARRIED}  # each child sets these as it asks
        boot = (f"import sys; base = list(sys.path[1:]); sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                "import warm_python; sys.stdout.write(repr(base) + '\\n'); warm_python.serve(sys.argv[1])")
        self.proc = subprocess.Popen([sys.executable, "-c", boot, self.path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, cwd=self.folder, start_new_session=True)
        self.base_path = eval(self.proc.stdout.readline())  # noqa: S307 -- a list of str it wrote itself
        hello = json.loads(self.proc.stdout.readline())
        self.modules = set(hello["modules"])
        self.env = hello["env"]
        self.added = hello["added"]
        # the compiler's settings are read when torch._dynamo/_inductor import, which the server has not done
        self.read_at_start = tuple(p for p in READ_AT_START if p != "TORCH") + (
            ("TORCH",) if hello["compiler"] else ("TORCH_", "TORCHELASTIC"))

    def alive(self) -> bool:
        return self.proc.poll() is None


_server: Optional[_Server] = None
_lock = threading.Lock()


def available() -> bool:
    """Whether warm children can be had here (without starting the server)."""
    return not os.environ.get(DISABLE) and hasattr(socket, "send_fds") and hasattr(os, "fork")


def _get_server() -> Optional[_Server]:
    global _server
    if not available():
        return None
    with _lock:
        if _server is None or not _server.alive():
            try:
                _server = _Server()
            except Exception:  # noqa: BLE001 -- no warm server: plain subprocesses
                return None
        return _server


def _plan(args, env: Optional[dict], server: _Server, cwd=None) -> tuple[Optional[tuple], str]:
    """((kind, target, program args, child env), "") when the fork can run ``args`` as python would,
    else (None, why not)."""
    args = [os.fspath(a) for a in args]
    if len(args) < 2 or args[0] != sys.executable:
        return None, "not sys.executable"
    if args[1] in ("-m", "-c"):
        if len(args) < 3:
            return None, "no program"
        kind, target, rest = ("module" if args[1] == "-m" else "code"), args[2], args[3:]
    elif args[1].startswith("-"):
        return None, f"interpreter option {args[1]}"
    else:
        kind, target, rest = "script", args[1], args[2:]
    child_env = dict(os.environ if env is None else env)
    for name in set(child_env) | set(server.env):
        if name in CARRIED or not name.startswith(server.read_at_start):
            continue  # set (or not) by the child as the interpreter would at its start
        if child_env.get(name) != server.env.get(name):
            return None, f"env {name}"
    for entry in child_env.get("PYTHONPATH", "").split(os.pathsep):
        if entry and _shadows(os.path.join(os.fspath(cwd or os.getcwd()), entry), server.modules):  # "." is the child's cwd
            return None, f"PYTHONPATH {entry} shadows a module the server holds"
    return (kind, target, rest, {**server.added, **child_env}), ""


def _shadows(entry: str, modules: set) -> bool:
    try:
        names = os.listdir(entry)
    except OSError:
        return False
    for name in names:
        stem = name[:-3] if name.endswith(".py") else name.split(".")[0] if name.endswith(".so") else name
        if stem in modules or stem in ("sitecustomize", "usercustomize"):
            return True
    return False


class Popen:
    """A warm child (see the module docstring) with the parts of subprocess.Popen tests use."""

    def __new__(cls, args, **kw):
        server = _get_server()
        plan, why = _plan(args, kw.get("env"), server, kw.get("cwd")) if server is not None else (None, "no server")
        cold = plan is None or kw.get("preexec_fn") is not None or kw.get("pass_fds")
        if os.environ.get("WARM_PYTHON_LOG"):  # which calls ran warm: for whoever tunes this
            with open(os.environ["WARM_PYTHON_LOG"], "a") as log:
                log.write(f"{'cold ' + why if cold else 'warm'}\t{os.environ.get('PYTEST_CURRENT_TEST', '')}\t{[str(a)[:40] for a in args[:4]]}\n")
        if cold:
            return subprocess.Popen(args, **kw)
        obj = super().__new__(cls)
        obj._server, obj._planned = server, plan  # what __init__ runs
        return obj

    def __init__(self, args, stdin=None, stdout=None, stderr=None, cwd=None, env=None, text=None,
                 universal_newlines=None, encoding=None, errors=None, start_new_session=False, bufsize=-1, close_fds=True):
        server = self._server
        kind, target, rest, child_env = self._planned
        self.args = args
        self.returncode = None
        self._text = bool(text or universal_newlines or encoding or errors)
        self._encoding, self._errors = encoding, errors
        send, keep = [], []
        self.stdin = self._stream(stdin, 0, "w", send, keep)
        self.stdout = self._stream(stdout, 1, "r", send, keep)
        if stderr == subprocess.STDOUT:
            send.append(send[1])
            self.stderr = None
        else:
            self.stderr = self._stream(stderr, 2, "r", send, keep)
        request = {"kind": kind, "target": target, "args": rest, "env": child_env, "cwd": os.fspath(cwd or os.getcwd()),
                   "new_session": bool(start_new_session), "base_path": server.base_path}
        body = json.dumps(request).encode()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(server.path)
            socket.send_fds(self._sock, [_HEAD.pack(len(body))], send)
            self._sock.sendall(body)
            self.pid = _HEAD.unpack(self._recv_exact(_HEAD.size))[0]
        finally:
            for fd in keep:
                os.close(fd)
        self._readers: list = []
        self._outputs: dict = {}

    def _stream(self, spec, fd: int, mode: str, send: list, keep: list):
        if spec is None:
            send.append(fd)
            return None
        if spec == subprocess.DEVNULL:
            dn = os.open(os.devnull, os.O_RDWR)
            send.append(dn)
            keep.append(dn)
            return None
        if spec == subprocess.PIPE:
            r, w = os.pipe()
            ours, theirs = (w, r) if mode == "w" else (r, w)
            send.append(theirs)
            keep.append(theirs)
            if self._text:
                return open(ours, mode, encoding=self._encoding or None, errors=self._errors)  # noqa: SIM115
            return open(ours, mode + "b", buffering=0 if mode == "w" else -1)  # noqa: SIM115
        send.append(spec if isinstance(spec, int) else spec.fileno())
        return None

    def _recv_exact(self, n: int, timeout: Optional[float] = None) -> bytes:
        self._sock.settimeout(timeout)
        data = b""
        while len(data) < n:
            chunk = self._sock.recv(n - len(data))
            if not chunk:
                raise RuntimeError("the warm-python server ended before the child did")
            data += chunk
        return data

    # -- subprocess.Popen's interface ------------------------------------------------------------
    def poll(self):
        if self.returncode is None:
            try:
                self.returncode = _HEAD.unpack(self._recv_exact(_HEAD.size, timeout=0.0))[0]
            except (BlockingIOError, socket.timeout, TimeoutError):
                pass
            else:
                self._sock.close()
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if self.returncode is None:
            try:
                self.returncode = _HEAD.unpack(self._recv_exact(_HEAD.size, timeout=timeout))[0]
            except (socket.timeout, TimeoutError):
                raise subprocess.TimeoutExpired(self.args, timeout) from None
            self._sock.close()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input=None, timeout: Optional[float] = None):  # noqa: A002 -- subprocess's name
        import time

        if not self._readers:
            if self.stdin is not None:
                def feed(data=input):
                    try:
                        if data:
                            self.stdin.write(data)
                        self.stdin.close()
                    except (BrokenPipeError, ValueError):
                        pass
                self._readers.append(threading.Thread(target=feed, daemon=True))
            for name in ("stdout", "stderr"):
                stream = getattr(self, name)
                if stream is not None:
                    self._outputs[name] = []
                    self._readers.append(threading.Thread(target=self._drain, args=(name, stream), daemon=True))
            for t in self._readers:
                t.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._readers:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        results = []
        for name in ("stdout", "stderr"):
            if name in self._outputs:
                chunks = self._outputs[name]
                results.append(("" if self._text else b"").join(chunks))
                getattr(self, name).close()
            else:
                results.append(None)
        return tuple(results)

    def _drain(self, name: str, stream) -> None:
        try:
            while True:
                chunk = stream.read(65536)
                if not chunk:
                    break
                self._outputs[name].append(chunk)
        except (OSError, ValueError):
            pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is not None and not issubclass(exc_type, Exception):  # interrupted: as subprocess.Popen's with-block
            self.kill()
        for stream in (self.stdout, self.stderr, self.stdin):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self.wait()


def run(args, *, input=None, capture_output: bool = False, timeout: Optional[float] = None, check: bool = False,  # noqa: A002
        **kw) -> subprocess.CompletedProcess:
    """subprocess.run for a warm child (a plain subprocess where the fork could not stand in)."""
    if capture_output:
        kw["stdout"] = kw["stderr"] = subprocess.PIPE
    if input is not None:
        kw["stdin"] = subprocess.PIPE
    proc = Popen(args, **kw)
    with proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        except BaseException:  # the test interrupted (pytest-timeout, Ctrl-C): no child left running, as subprocess.run
            proc.kill()
            raise
    result = subprocess.CompletedProcess(args, proc.returncode, out, err)
    if check:
        result.check_returncode()
    return result
