"""Clean stops: SIGINT/SIGTERM finish the iteration, write a checkpoint, and exit 130/143.

A second SIGINT exits at once; checkpoints are written atomically (checkpoint.py), so the last one
stays loadable whatever moment the process dies.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM stopped the run (after a checkpoint was written, in the loop); ``exit_code`` is
    128+signum. ``what``: the line after "stopped by SIG...; " (default: the checkpoint and the
    command that continues the run, ``proxima resume RUN_DIR``: a run's or a population's)."""

    def __init__(self, signum: int, checkpoint: Optional[Path], what: Optional[str] = None):
        super().__init__(f"stopped by {signal.Signals(signum).name}; {what or checkpoint_line(checkpoint)}")
        self.signum, self.checkpoint, self.exit_code = signum, checkpoint, 128 + signum


def checkpoint_line(checkpoint: Optional[Path]) -> str:
    """``checkpoint: RUN/checkpoints/step_N.pt; continue with: proxima resume RUN`` (a population's
    checkpoint is RUN/checkpoints/step_N.pt too: resume continues every member)."""
    if checkpoint is None:
        return "checkpoint: None"
    path = Path(checkpoint)
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    world = os.environ.get("WORLD_SIZE", "1")
    # a resume needs as many processes (train_state.load): `proxima resume` starts them on one machine
    if world.isdigit() and int(world) > 1 and os.environ.get("LOCAL_WORLD_SIZE", world) != world:
        return f"checkpoint: {checkpoint}; continue with: proxima resume {run_dir}, under the same torchrun command ({world} processes)"
    return f"checkpoint: {checkpoint}; continue with: proxima resume {run_dir}"


@dataclass
class Stop:
    signum: int = 0


class SignalGuard:
    """First SIGINT/SIGTERM: finish the iteration, checkpoint, stop. Second SIGINT: exit at once
    (checkpoints are written atomically, so the last one stays loadable)."""

    def __init__(self):
        self.stop = Stop()
        self._old = {}

    def __enter__(self):
        if threading_main():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self.stop

    def _handle(self, signum, frame):
        if self.stop.signum:
            sys.stderr.write("\nproxima: second interrupt, exiting now (last checkpoint kept)\n")
            os._exit(128 + signum)
        self.stop.signum = signum
        sys.stderr.write(f"\nproxima: {signal.Signals(signum).name} received; writing a checkpoint after this iteration "
                         "(interrupt again to exit at once)\n")

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


class OutsideLoop:
    """Around a whole run, outside the loop's SignalGuard (building the env and agent, writing
    config.yaml and meta.json, the end-of-run evaluation): SIGINT/SIGTERM raise TrainingInterrupted
    at once, with no checkpoint, so the caller can take back a new run's files and its lock rather
    than die half-written (SIGTERM's default) or with a KeyboardInterrupt that skips the cleanup.
    The loop's SignalGuard replaces these handlers while it runs and restores them after."""

    def __init__(self):
        self._old = {}

    def __enter__(self):
        if threading_main():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    @staticmethod
    def _handle(signum, frame):
        raise TrainingInterrupted(signum, None)

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


def threading_main() -> bool:
    return threading.current_thread() is threading.main_thread()
