"""torchrun as ``proxima train --nproc K`` starts it: a stop by signal ends in an exit code, not a traceback.

On SIGINT/SIGTERM torchrun passes the signal to every rank, waits for them (each writes its part of
the checkpoint and prints one line), then raises ``SignalException`` out of its ``main``, and
Python prints that as a traceback under the ranks' lines, as if the run had crashed. Here it is the
exit code the signal means (130, 143), as a single process exits. Everything else is torchrun's
own ``main`` with its own arguments: ``python -m proxima.torchrun --nproc-per-node K --standalone
-m proxima train ...`` behaves as ``python -m torch.distributed.run ...`` does.
"""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed.elastic.multiprocessing.api import SignalException
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
    finally:
        if raise_stop is not None:
            api._terminate_process_handler = raise_stop
    return 0


if __name__ == "__main__":
    sys.exit(main())
