"""The command line's stop signals from its first moment: the ``proxima`` console script, ``python -m
proxima`` and ``python -m proxima.rlhf`` import this package (proxima/__init__.py, then the CLI's own modules: a few tenths of a second)
before cli.entry installs its handling (signals.BeforeTraining). A Ctrl-C meanwhile printed a
KeyboardInterrupt traceback ending in ``from proxima.cli import entry``; a SIGTERM killed the command with
no line. proxima/__init__.py installs this module's handler first, for the command line only (never for
``import proxima`` in a script or a notebook), and BeforeTraining takes over from it, putting back what was
there before.

Stdlib modules the interpreter has already loaded only: importing this costs nothing measurable."""

import os
import signal
import sys

#: the commands that train, whose stop before training says "before training started" (cli.entry)
TRAINING_COMMANDS = ("train", "resume", "rlhf")

#: the handlers this module replaced, put back by the handling that takes over (signals.BeforeTraining)
_ORIGINAL: dict = {}


def under_torchrun() -> bool:
    """Whether this process is a rank that torchrun (or a launcher like it) started; here, not in launch (which imports
    torch), so that cli.entry can ask before any heavy import."""
    return bool(os.environ.get("TORCHELASTIC_RUN_ID") or (os.environ.get("WORLD_SIZE") and os.environ.get("RANK")))


def resumes(argv) -> bool:
    """Whether the command line ``argv`` (the subcommand first) continues a run: ``resume``, ``--resume``."""
    flags = argv[:argv.index("--")] if "--" in argv else argv
    return bool(flags) and (flags[0] == "resume" or any(a == "--resume" or a.startswith("--resume=") for a in flags))


def stop_signals() -> tuple:
    """The signals that stop a run: SIGINT, SIGTERM, SIGUSR1, SIGUSR2 (a scheduler's warning before its
    time limit), and SIGHUP unless this process ignores it. A run started under ``nohup`` (or by a shell
    or job system that ignores SIGHUP) asked to outlive its terminal: a handler of ours would turn the
    hang-up into a stop."""
    usr = tuple(getattr(signal, name) for name in ("SIGUSR1", "SIGUSR2") if hasattr(signal, name))
    hup = getattr(signal, "SIGHUP", None)
    if hup is None or signal.getsignal(hup) is signal.SIG_IGN:
        return (signal.SIGINT, signal.SIGTERM) + usr
    return (signal.SIGINT, signal.SIGTERM, hup) + usr


#: the modules ``python -m`` starts the command line with, and the words of ``proxima`` each stands for:
#: ``python -m proxima.rlhf FLAGS`` (torchrun's -m target) is ``proxima rlhf FLAGS``
MAIN_MODULES = {"proxima": (), "proxima.rlhf": ("rlhf",)}


def _dash_m():
    """The MODULE of ``python -m MODULE`` (sys.orig_argv), None when the interpreter's options end otherwise (a
    script, -c); sys.argv says nothing of it (while the package imports, ``python -m``'s sys.argv[0] is "-m").
    Read as CPython reads its options: short flags combine (``-Bm MODULE``, ``-Im``, ``-mMODULE``), -W/-X take
    the rest of their word or the next one, --check-hash-based-pycs the next one."""
    orig = list(getattr(sys, "orig_argv", []))
    i = 1
    while i < len(orig):
        arg = orig[i]
        if arg == "-" or not arg.startswith("-") or arg == "--":
            return None  # a script, stdin, or the end of the options
        if arg.startswith("--"):
            i += 2 if arg == "--check-hash-based-pycs" else 1
            continue
        step = 1
        for j, flag in enumerate(arg[1:], 2):
            if flag == "c":
                return None
            if flag == "m":
                return arg[j:] or (orig[i + 1] if i + 1 < len(orig) else None)
            if flag in "WX":  # their value is the rest of this word, else the next word
                step = 1 if arg[j:] else 2
                break
        i += step
    return None


def command_line() -> bool:
    """Whether this process is the ``proxima`` console script, ``python -m proxima`` or ``python -m proxima.rlhf``."""
    if sys.argv[:1] == ["-m"]:
        return _dash_m() in MAIN_MODULES
    main = sys.modules.get("__main__")
    return os.path.basename(sys.argv[0]) == "proxima" and getattr(main, "__file__", None) == sys.argv[0]


def command_words() -> list:
    """The words after ``proxima`` of this command line: sys.argv[1:], with ``rlhf`` first under ``python -m
    proxima.rlhf`` (which takes rlhf's flags only); its sys.argv[0] is "-m", then the module's __main__.py."""
    started = sys.argv[:1] == ["-m"] or os.path.basename(sys.argv[0] if sys.argv else "") == "__main__.py"
    return [*MAIN_MODULES.get(_dash_m() if started else None, ()), *sys.argv[1:]]


def install() -> None:
    """Handle the stop signals until cli.entry's own handling takes over (``original``). Not in a torchrun
    rank, which BeforeTraining leaves alone too (its launcher says a rank's stop before training)."""
    if under_torchrun():
        return
    for sig in stop_signals():
        _ORIGINAL[sig] = signal.signal(sig, _handle)


def original(sig: int):
    """The handler from before ``install`` for ``sig``: what the handling taking over puts back when it ends."""
    return _ORIGINAL.get(sig, signal.SIG_DFL)


def _handle(signum, frame):
    """A stop while the command's modules import: nothing is on disk yet. A command that trains says
    BeforeTraining's line and exits 128+signum; any other exits 130 on a Ctrl-C, as it would later
    (cli._run_command), and takes another signal's default action, as it would later too."""
    argv = command_words()
    if argv and argv[0] in TRAINING_COMMANDS:
        what = "the run is as its last checkpoint left it" if resumes(argv) else "nothing was kept"
        line = f"proxima: stopped by {signal.Signals(signum).name}; before training started; {what}\n"
        try:
            os.write(2, line.encode())
        except OSError:  # a SIGHUP's terminal may be gone: the exit status still says it
            pass
        os._exit(128 + signum)  # nothing to flush or undo: no module of the command has run yet
    if signum == signal.SIGINT:
        os._exit(130)
    signal.signal(signum, original(signum))
    signal.raise_signal(signum)
