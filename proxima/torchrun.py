"""torchrun as ``proxima train --nproc K`` starts it: a stop by signal ends in an exit code, not a traceback.

On SIGINT/SIGTERM torchrun passes the signal to every rank, waits for them (each writes its part of
the checkpoint and prints one line), then raises ``SignalException`` out of its ``main``, and
Python prints that as a traceback under the ranks' lines, as if the run had crashed. Here it is the
exit code the signal means (130, 143), as a single process exits.

When ranks fail, torchrun raises ``ChildFailedError``, printed as a ~40-line "proxima FAILED"
traceback under lines the ranks already printed. Here (child_failure_exit) a job whose ranks all
ended alike, with a refusal (2) or a stop (130, 143), exits with that code and prints nothing more;
any other failure prints one line naming each failed rank's exit code and exits 1. Everything else
is torchrun's own ``main`` with its own arguments: ``python -m proxima.torchrun --nproc-per-node K --standalone
-m proxima train ...`` behaves as ``python -m torch.distributed.run ...`` does.
"""

from __future__ import annotations

import signal
import sys

#: exit codes a rank ends with after printing its own line: a refusal (a user error, docs/reliability.md)
#: and a stop by SIGINT/SIGTERM with its checkpoint
QUIET_CODES = (2, 128 + signal.SIGINT, 128 + signal.SIGTERM)
#: how a rank ends when torchrun ends it with SIGTERM after another rank failed: killed by the signal
#: (no handler yet), or its handler's stop (143)
TEARDOWN_CODES = (-signal.SIGTERM, 128 + signal.SIGTERM)


def quiet_exit_code(codes) -> "int | None":
    """The exit code of a job whose failed ranks exited with ``codes``, when the ranks' own lines
    said all there is: every one the same code of QUIET_CODES, or one refusal or SIGINT stop beside
    ranks that torchrun's teardown ended (TEARDOWN_CODES). None otherwise."""
    sigterm = 128 + signal.SIGTERM
    codes = {sigterm if c in TEARDOWN_CODES else c for c in codes}
    if len(codes) == 1 and codes <= set(QUIET_CODES):
        return codes.pop()
    own = codes - {sigterm}
    if len(own) == 1 and own <= set(QUIET_CODES):
        return own.pop()
    return None


def _how(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited {code}"


def child_failure_exit(failures: dict, first=None) -> int:
    """The job's exit code for torchrun's ChildFailedError ``failures`` ({rank: ProcessFailure}); one
    line on stderr unless quiet_exit_code finds the ranks' own lines enough. ``first``: the rank that
    failed first (torchrun's root cause), named first."""
    codes = {rank: int(f.exitcode) for rank, f in failures.items()}
    code = quiet_exit_code(codes.values())
    if code is not None:
        return code
    groups: dict = {}
    for rank in sorted(codes, key=lambda r: (r != first, r)):  # the first failure leads the line
        groups.setdefault(codes[rank], []).append(f"{rank} (first)" if rank == first else str(rank))
    parts = []
    for code, ranks in groups.items():
        shown = ", ".join(ranks[:8]) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
        parts.append(f"rank{'s' if len(ranks) > 1 else ''} {shown} {_how(code)}")
    print(f"proxima: the job failed: {'; '.join(parts)}; each rank's own lines above say why", file=sys.stderr)
    return 1


def main(argv=None) -> int:
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    raise_stop = getattr(api, "_terminate_process_handler", None)
    if raise_stop is not None:  # installed by torchrun when it starts the ranks (api.PContext.start)
        stopping: list = []

        def first_stop_only(signum, frame):
            # A job-wide stop reaches torchrun more than once (Slurm and systemd signal every process,
            # and the launcher forwards its own copy): once torchrun is stopping its ranks (passing the
            # signal on, waiting, then killing them), a copy that raised again would land inside that
            # shutdown, in its logging, as a traceback. A stop at once goes to the ranks (launch.py).
            if stopping:
                return
            stopping.append(signum)
            raise_stop(signum, frame)

        api._terminate_process_handler = first_stop_only
    try:
        torchrun_main(argv)
    except SignalException as e:
        return 128 + int(e.sigval)
    except ChildFailedError as e:
        return child_failure_exit(e.failures, e.get_first_failure()[0])
    finally:
        if raise_stop is not None:
            api._terminate_process_handler = raise_stop
    return 0


if __name__ == "__main__":
    sys.exit(main())
