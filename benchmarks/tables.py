"""What the benchmark scripts share: checks of their arguments, a "median (min-max)" cell, the line
naming the machine, the date and the load, the command that reproduces a table, and a table printed
and appended to the results file given with ``--out`` (``emit``: at the end; ``Section``: its own
section rewritten after every row, so a run cut short leaves the rows it finished, and what others
write to the file meanwhile is kept), and the child processes a script starts (``run_child``,
``start_child``, ``stopping_children``: a SIGTERM or Ctrl-C kills them and removes their temporary
folder). Imported as ``tables`` (a script's own directory is first on sys.path when it runs as
``python benchmarks/NAME.py``)."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

# the one lock of results files: proxima bench's --out (save_markdown), emit and Section take it alike
from proxima.bench import folder_lock

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------ arguments
def flag(dest: str) -> str:
    """The option of an argparse ``dest``: num_envs -> --num-envs."""
    return "--" + dest.replace("_", "-")


def shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def out_problem(name: str, path: Optional[str]) -> str:
    """'--out PATH: is a directory ...' when ``path`` cannot be written as a file, else ''. Checked
    before measuring: a bad name found only when the table is written loses the whole run. A folder
    that does not exist is refused as ``proxima bench --out`` refuses it ("folder /nonexist does not
    exist; create it first ..."): the scripts created it, and a typo such as /nonexist/x.md made a
    new folder tree somewhere unexpected instead of an error."""
    if not path:
        return ""
    from proxima.bench import out_file_problem, out_folder_problem

    problem = out_folder_problem(path) or out_file_problem(path, example="results.md")
    return f"{name} {path}: {problem}" if problem else ""


def parser(script: str, description: str) -> argparse.ArgumentParser:
    """The argument parser of ``script`` (its file name): ``proxima``'s own (proxima.cli.ArgParser),
    so a value argparse rejects (``--num-envs abc``) is one error line naming the flag and exit
    status 2, as the scripts' own checks (``refuse``) and ``proxima``'s commands are, not a usage
    block above it; flags are not abbreviated (``--round 3`` is an error, not --rounds)."""
    from proxima.cli import ArgParser

    return ArgParser(prog=script, description=description)


def arg_problem(args, at_least_one=(), positive=(), files=("out",), finite=()) -> str:
    """The first thing wrong with parsed ``args`` as one line naming the flag and its value, or '':
    an integer option of ``at_least_one`` below 1 (0 repeats append an empty table), a number of
    ``positive`` not above 0 (or not finite), a number of ``finite`` that is nan or infinite (a
    threshold of nan counts no run as solved), a file option of ``files`` that cannot be written."""
    for dest in at_least_one:
        value = getattr(args, dest)
        if value < 1:
            return f"{flag(dest)} {shown(value)}: must be at least 1"
    for dest in positive:
        value = getattr(args, dest)
        if not (value > 0 and math.isfinite(value)):
            return f"{flag(dest)} {shown(value)}: must be a positive number"
    for dest in finite:
        value = getattr(args, dest)
        if not math.isfinite(value):
            return f"{flag(dest)} {shown(value)}: must be a finite number"
    for dest in files:
        problem = out_problem(flag(dest), getattr(args, dest))
        if problem:
            return problem
    return ""


def distinct(values: list) -> list:
    """``values`` without repeats, in their first order: a size or mode named twice is measured once
    (a table keyed by it showed one measurement, or both pooled, in two rows)."""
    return list(dict.fromkeys(values))


def bench_problem(bench_argv: list) -> str:
    """What ``proxima bench BENCH_ARGV`` (the words after ``bench``) would refuse before measuring,
    as its one line, or '': checked in this process (``proxima.bench.arguments_problem``) before a
    script starts its processes, so a size that cannot fit at the end of --num-envs is refused
    before the sizes ahead of it are measured."""
    from proxima.bench import arguments_problem
    from proxima.cli import build_parser

    return arguments_problem(build_parser().parse_args(["bench", *bench_argv]))


class ChildFailed(RuntimeError):
    """A ``proxima`` process a script started failed; ``str()`` is one line for the user, ending
    with the child's own last line (its refusal: "proxima train: error: --preset 'nope': ..."). The
    scripts print it with ``refuse`` (exit 2) instead of a traceback."""


def refuse(script: str, problem: str) -> int:
    """Print ``problem`` as the one error line of ``script``; the exit status of bad arguments (2)."""
    print(f"{script}: error: {problem}", file=sys.stderr)
    return 2


# ------------------------------------------------------------------------------------ children
#: Popen keywords that start a child in a process group of its own (its pid is the group's id): a
#: SIGTERM or Ctrl-C to a script then kills the child and whatever the child started (torchrun's
#: workers, a population's processes) with one killpg, none of it left running reparented to init.
#: The group stays in the script's session, so gpu_session.sh's sweep still finds what a killed
#: script leaves.
OWN_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}

_stopping = threading.Event()  # set by the signal handler: no child is started after it


def _not_stopping(cmd) -> None:
    if _stopping.is_set():  # a worker thread (solve_time.py --parallel) about to start the next seed
        raise ChildFailed(f"`{shlex.join(map(str, cmd))}` not started: the script is stopping")


def run_child(cmd, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, **kwargs)`` with the child in a process group of its own (``OWN_GROUP``),
    for ``stopping_children`` to kill. Looked up as ``subprocess.run`` at each call, so a test's
    stand-in for it stands in here too."""
    _not_stopping(cmd)
    return subprocess.run(cmd, **OWN_GROUP, **kwargs)


def start_child(cmd, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **kwargs)`` in a process group of its own; end it with ``kill_group``."""
    _not_stopping(cmd)
    return subprocess.Popen(cmd, **OWN_GROUP, **kwargs)


def kill_group(pid: int) -> None:
    """SIGKILL the process group of a child of ``run_child``/``start_child`` (the group's id is the
    child's pid): the child and what it started, stragglers included once the child has exited (the
    group outlives its leader while a member runs). Nothing when the group is gone."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _children(own_groups: bool = False) -> list:
    """[(pid, leads its own group)] of this process's children (Linux /proc: their parent pid), found
    without a registry: ``subprocess.run`` does not hand its Popen out. ``own_groups``: only those
    that lead a process group of their own (started by ``run_child`` or ``start_child``)."""
    me, found = os.getpid(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[1]) == me and (not own_groups or int(fields[2]) == int(entry)):
            found.append((int(entry), int(fields[2]) == int(entry)))
    return found


def kill_children(own_groups: bool = False) -> list:
    """SIGKILL the children of this process (``_children``), each leading a group of its own with
    that group (``kill_group``), another (one between fork and setpgid, or started without
    ``OWN_GROUP``) alone; their pids."""
    found = _children(own_groups)
    for pid, leader in found:
        if leader:
            kill_group(pid)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    return [pid for pid, _ in found]


class Stopped(SystemExit):
    """SIGTERM or SIGINT reached a script inside ``stopping_children``: its exit status is 128 + the
    signal (143, 130), as a shell reports a process the signal ended."""


@contextlib.contextmanager
def stopping_children(script: str, prefix: Optional[str] = None):
    """While the block runs, a SIGTERM (a time limit's) or SIGINT (Ctrl-C) kills every child process
    of the script with its process group, removes the temporary folder this yields (made with
    ``prefix``; None without one) and ends the script with 128 + the signal and one line on stderr.
    Without this the script died alone: its ``proxima train`` went on burning a core, reparented to
    init, and /tmp/proxima-solve-XXXX stayed on disk. The section a ``Section`` wrote so far stays,
    "Partial k of n" and all. The folder is removed at the end of the block in any case."""
    folder = Path(tempfile.mkdtemp(prefix=prefix)) if prefix else None
    old = {}

    def sweep() -> None:
        # a child whose launch raced the handler (a worker thread past the check) is killed too,
        # within 50 ms; only group leaders: what a `finally` starts to clean up (vs_revision.py's
        # `git worktree remove`) runs in the script's own group and must finish
        while _stopping.is_set():
            kill_children(own_groups=True)
            time.sleep(0.05)

    def handler(signum, frame) -> None:
        if _stopping.is_set():  # a second signal while unwinding: the first one's cleanup goes on
            kill_children()
            return
        _stopping.set()
        kill_children()
        threading.Thread(target=sweep, daemon=True).start()
        raise Stopped(128 + signum)

    if threading.current_thread() is threading.main_thread():  # signal.signal works only there
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, handler)
    try:
        yield folder
    except Stopped as e:
        name = signal.Signals(e.code - 128).name
        removed = f"; {folder} removed" if folder else ""
        _remove(folder)
        print(f"{script}: stopped by {name}: its child processes were killed{removed}", file=sys.stderr, flush=True)
        raise
    finally:
        _remove(folder)
        for sig, before in old.items():
            signal.signal(sig, before)
        _stopping.clear()


def _remove(folder: Optional[Path]) -> None:
    """Remove ``folder``, trying again briefly while a killed child's last files land in it."""
    for _ in range(10):
        if folder is None or not folder.exists():
            return
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            time.sleep(0.1)


# ------------------------------------------------------------------------------------ tables
def median_range(values: list, *, scale: float = 1.0, digits: int = 1, unit: str = "",
                 fmt: Optional[Callable[[float], str]] = None) -> str:
    """'median (min-max)' of ``values``: each divided by ``scale`` and shown with ``digits`` decimals
    and ``unit``, or through ``fmt``; '-' for no values. Keyword-only: ``median_range(xs, 2)`` read
    as 2 digits once halved every value."""
    if not values:
        return "-"
    show = fmt or (lambda v: f"{v / scale:.{digits}f}{unit}")
    return f"{show(statistics.median(values))} ({show(min(values))}-{show(max(values))})"


def round_ratios(a: list, b: list) -> list:
    """[a_i / b_i]: the ratio of the two sides within each round (a round times A and B back to back),
    for ``median_range``. Not median(a) / median(b): the median of a ratio of medians pairs a fast
    phase of the machine on one side with a slow one on the other (benchmarks/README.md). A round
    whose B is 0 or missing has no ratio; ValueError when the sides have different round counts."""
    if len(a) != len(b):
        raise ValueError(f"round_ratios: {len(a)} rounds of one side against {len(b)} of the other")
    return [x / y for x, y in zip(a, b) if y]


#: a process that got less of a core than this in a round shared it with other processes
STARVED_SHARE = 0.9


def cpu_share(cpu_seconds: float, wall_seconds: float, processes: int = 1) -> float:
    """The cores one process used in a round: CPU seconds (of ``processes`` processes together) per
    wall-clock second, per process; nan when no time passed."""
    if not wall_seconds > 0:
        return float("nan")
    return cpu_seconds / wall_seconds / max(processes, 1)


def starved_note(shares: list, threshold: float = STARVED_SHARE) -> str:
    """The line to print under a ratio table when any round's process got under ``threshold`` of a
    core (``cpu_share``; nan counts as unknown, not starved), else ''. A ratio of two sides that each
    ran on a fraction of a core measures the scheduler as much as the code: a reviewer's loaded run
    printed a headline ratio from rounds at 0.2-0.7 of a core with nothing to say so."""
    low = [s for s in shares if s == s and s < threshold]
    if not low:
        return ""
    return (f"**Note: rounds starved of CPU: ratios unreliable.** {len(low)} of {len(shares)} timed measurements got "
            f"under {threshold:g} of a core per process (lowest {min(low):.2f}): other processes had the rest; "
            "rerun on an idle machine before quoting these ratios.")


def markdown_table(header: list, rows: list) -> str:
    """A markdown table: the first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def _word(value, path: bool = False) -> str:
    """``value`` as the recorded command (run from the repository root) needs it. A path (``path``:
    the --out file; or any value naming something that exists from where the script was started) is
    written relative to the repository root when inside it, absolute otherwise: a relative --out or
    --jax-python was recorded as typed from another folder and ran from neither that folder nor the
    root, while absolute repository paths were already made root-relative."""
    text = str(value)
    if not os.path.isabs(text) and text and (path or os.path.exists(text)):
        text = os.path.abspath(text)
    if os.path.isabs(text) and Path(text).is_relative_to(ROOT):  # the commands run from the repository root
        return os.path.relpath(text, ROOT)
    return text


def command_text(script: str, parser: argparse.ArgumentParser, args) -> str:
    """The shell command that reproduces a table: every option of ``parser`` with the value it ran
    with, defaults filled in (a default changed later must not change what the line reproduces),
    quoted as a shell needs it (`--only 'tanh numpy'`). Options left at None (unset) are omitted."""
    words = ["python", f"benchmarks/{script}"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        value = getattr(args, action.dest, None)
        if not action.option_strings:  # a positional argument
            words += [_word(v) for v in (value if isinstance(value, list) else [value])]
            continue
        name = max(action.option_strings, key=len)
        if action.nargs == 0:  # store_true and the like: the flag is the value
            if value != action.default:
                words.append(name)
        elif isinstance(action, argparse._AppendAction):
            for item in value or []:
                words += [name, _word(item)]
        elif value is not None:
            words += [name, _word(value, path=action.dest == "out")]
    return shlex.join(words)


def command(script: str, parser: argparse.ArgumentParser, args) -> str:
    """The 'Command: `...`' line under a table (``command_text``)."""
    return f"Command: `{command_text(script, parser, args)}`"


def started() -> tuple:
    """When a measurement starts (local time with its UTC offset, as ``proxima bench`` records its
    runs: ``proxima.bench.started_now``) and the 1-minute load average then: what ``machine_line``
    reports."""
    from proxima.bench import started_now

    return started_now(), os.getloadavg()[0]


def machine_line(threads, start: tuple) -> str:
    """The machine a table was measured on, which decides its figures: CPU model and vendor, cores,
    its vector instructions (one "AMD EPYC" has AVX-512, another not: which CPU tanh is fast differs), torch and the torch threads used, the GPU (or none), the CPU tanh (``proxima.tanh_cpu.MODE``:
    MKL's tanh is slow on CPUs that are not Intel's); the code measured: proxima's version and git
    commit, and whether tracked files differed from it (``proxima.bench.machine_info``'s, as ``proxima
    bench --out`` writes them); then the date with its UTC offset and the load average (1 min) at the
    start (``start``, from ``started()``) and now, at the end."""
    import torch

    from proxima.bench import machine_info
    from proxima.tanh_cpu import cpu_vendor

    m = machine_info("cpu")
    vendor = cpu_vendor()
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    code = (f"proxima {m['proxima']}, git commit {m['git_commit'] or 'unknown (not a git checkout)'}"
            + (" with uncommitted changes" if m["git_dirty"] else ""))
    when, load = start
    if when.tzinfo is None:  # a caller's own naive datetime: this machine's local time
        when = when.astimezone()
    return (f"CPU: {m['cpu']}{f' ({vendor})' if vendor else ''}, {os.cpu_count()} cores, SIMD {m['simd']}; torch {m['torch']}, "
            f"torch threads: {threads}; GPU: {gpu}; Python {m['python']}; CPU tanh: {m['cpu_tanh']}; {code}; "
            f"{when.isoformat(sep=' ', timespec='minutes')}, load average (1 min) {load:.2f} at start, "
            f"{os.getloadavg()[0]:.2f} at end")


def emit(text: str, out: Optional[str] = None, file_text: Optional[str] = None, script: str = "benchmark") -> int:
    """Print ``text``; append ``file_text`` (default: ``text``) to ``out``, if given, after a blank
    line, all or nothing (``proxima.bench.append_file``). The exit status: 0, or 2 with one line when
    ``out`` cannot be written (the table is printed above, so the run is not lost)."""
    print(text, flush=True)
    if not out:
        return 0
    from proxima.bench import append_file
    from proxima.diskspace import describe

    body = (text if file_text is None else file_text).strip("\n") + "\n"
    try:
        append_file(out, body, between="\n")  # under the results folder's lock, as Section's writes
    except OSError as e:
        return refuse(script, describe(out, e))
    return 0


def partial_note(done: int, total: int, what: str) -> str:
    """The line that marks a section written before its run finished (``Section.update``)."""
    return (f"**Partial: {done} of {total} {what} so far.** This section is rewritten as each one finishes; "
            "if it still reads so, the run stopped before the end (a time limit or a crash: see its log).")


class Section:
    """One run's section of the results file ``out``, written as the run goes: ``update(text)``
    after each completed row replaces the section with the rows so far (the caller marks it
    partial: ``partial_note``), ``finish(text)`` prints the final text and writes it, as ``emit``
    does. Each write reads ``out`` as it is then and replaces only this run's section, found by the
    HTML comments (invisible in rendered Markdown) that mark its begin and end with a token of this
    run: a note added to the file by hand while the run goes, or another run's section (two runs
    given the same ``--out``), is kept. A section not there yet (the first write, or the file
    replaced meanwhile) is appended after a blank line. Each write replaces the whole file at once
    (``proxima.bench.write_file``) under a lock on its folder, so a run killed at any point leaves
    the file with its section as last written (markers included), never half of one. ``finish``
    drops the markers: when nothing else wrote to ``out``, the final file is what ``emit`` would
    have appended: the old content, a blank line when there was any, the text. Without ``out``
    nothing is written and ``finish`` only prints."""

    def __init__(self, out: Optional[str], script: str = "benchmark"):
        import secrets

        self.out, self.script = out, script
        self.warned = False
        # random, not the pid or the time: two runs started together on two machines sharing a folder must not match
        token = secrets.token_hex(8)
        self.begin = f"<!-- section {token} of {script}: rewritten as the run goes -->\n".encode("utf-8")
        self.end = f"<!-- end of section {token} -->\n".encode("utf-8")

    def _write(self, text: str, final: bool = False) -> None:
        from proxima.bench import write_file

        body = (text.strip("\n") + "\n").encode("utf-8")
        block = body if final else self.begin + body + self.end
        real = Path(os.path.realpath(self.out))  # a symlinked results file stays a link to the updated file
        with folder_lock(real.parent):
            now = real.read_bytes() if real.is_file() else b""
            start = now.find(self.begin)
            stop = now.find(self.end, start + len(self.begin)) if start >= 0 else -1
            if stop >= 0:
                data = now[:start] + block + now[stop + len(self.end):]
            else:
                data = now + (b"\n" if now else b"") + block
            write_file(real, data)

    def update(self, text: str) -> None:
        """Write the section as it stands. A write that fails is said once on stderr and the run goes
        on (``finish`` tries again and reports)."""
        if not self.out:
            return
        try:
            self._write(text)
        except OSError as e:
            if not self.warned:
                from proxima.diskspace import describe

                print(f"{self.script}: warning: {describe(self.out, e)}; the table is printed at the end", file=sys.stderr)
                self.warned = True

    def finish(self, text: str) -> int:
        """Print ``text`` and write it as the section's final form. The exit status: 0, or 2 with one
        line when ``out`` cannot be written (the table is printed above, so the run is not lost)."""
        print(text, flush=True)
        if not self.out:
            return 0
        try:
            self._write(text, final=True)
        except OSError as e:
            from proxima.diskspace import describe

            return refuse(self.script, describe(self.out, e))
        return 0


def ab_report(caption: str, table: str, ratio_label: str, ratios: list, script: str, parser, args, start: tuple,
              threads=1, shares: Optional[list] = None) -> int:
    """The report of an A/B benchmark: caption, the machine, date and load, table, the per-round
    ratio, the ``starved_note`` of ``shares`` (each timed measurement's ``cpu_share``) when one was
    starved, and the command; printed, and appended to ``args.out`` if given. The exit status."""
    note = starved_note(shares or [])
    text = "\n".join([caption, "", machine_line(threads, start), "", table, "",
                      f"{ratio_label}, per round: {median_range(ratios, digits=2)}x", "", *([note, ""] if note else []),
                      command(script, parser, args), ""])
    return emit(text, args.out, script=script)
