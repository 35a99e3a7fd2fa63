"""Run logging: TensorBoard events, metrics.csv (one row per iteration) and a progress bar.

Metric names follow the common convention (DESIGN.md): charts/episodic_return,
charts/episodic_length, charts/SPS, charts/learning_rate, losses/policy_loss, losses/value_loss,
losses/entropy, losses/approx_kl, losses/clipfrac, losses/explained_variance.
On resume from global step S, events and CSV rows after S are dropped before logging continues, so
neither file holds a duplicate or a gap.
"""

from __future__ import annotations

import csv
import math
import os
import sys
from pathlib import Path
from typing import Optional

CSV_COLUMNS = [
    "iteration", "global_step", "time", "episodes",
    "charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/learning_rate",
    "losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac",
    "losses/explained_variance",
]


def truncate_csv(path: Path, max_step: int) -> None:
    """Keep the header and the rows with global_step <= max_step (rewritten atomically)."""
    if not path.exists():
        return
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return
    header, body = rows[0], rows[1:]
    if "global_step" not in header:
        return
    col = header.index("global_step")
    # a run killed mid-write can leave a cut-off last row: keep only whole rows up to max_step
    kept = [r for r in body if len(r) == len(header) and _int_or_none(r[col]) is not None and _int_or_none(r[col]) <= max_step]
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(kept)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _int_or_none(text: str) -> Optional[int]:
    try:
        return int(text)
    except ValueError:
        return None


def _wait_for_new_second(run_dir: Path) -> None:
    """TensorBoard reads a folder's event files in name order, and names start with the creation
    second: a resumed run's file must not share the second of the file it continues (else the pid
    decides the order and the purge of steps logged after the checkpoint can be applied too early)."""
    import time

    stamps = [_int_or_none(p.name.split(".")[3]) for p in run_dir.glob("events.out.tfevents.*") if p.name.count(".") >= 4]
    newest = max((t for t in stamps if t is not None), default=None)
    if newest is not None and int(time.time()) == newest:  # at most one second; a clock set back is left alone
        time.sleep(max(0.0, newest + 1 - time.time()) + 0.01)


class RunLogger:
    """Writes one TensorBoard scalar set and one CSV row per iteration; rank 0 only."""

    def __init__(self, run_dir: Path, total_steps: int, resume_step: Optional[int] = None, progress: bool = True):
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = Path(run_dir)
        self.csv_path = self.run_dir / "metrics.csv"
        if resume_step is not None:
            truncate_csv(self.csv_path, resume_step)
            _wait_for_new_second(self.run_dir)
        # purge_step drops events at steps > resume_step that a killed run logged after its checkpoint
        self.writer = SummaryWriter(str(self.run_dir), purge_step=None if resume_step is None else resume_step + 1)
        new = not self.csv_path.exists()
        self._csv_file = open(self.csv_path, "a", newline="")
        self._csv = csv.DictWriter(self._csv_file, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        if new:
            self._csv.writeheader()
        self.last_return = math.nan
        self.bar = None
        if progress:
            from tqdm import tqdm

            self.bar = tqdm(total=total_steps, initial=resume_step or 0, unit="step", unit_scale=True,
                            dynamic_ncols=True, file=sys.stderr, smoothing=0.1, mininterval=0.5)

    def log(self, iteration: int, global_step: int, metrics: dict) -> None:
        """metrics: name -> float (NaN = not measured this iteration, e.g. no episode finished)."""
        for name, value in metrics.items():
            if "/" in name and value is not None and math.isfinite(value):
                self.writer.add_scalar(name, value, global_step)
        row = {"iteration": iteration, "global_step": global_step, **metrics}
        self._csv.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()})
        self._csv_file.flush()
        ret = metrics.get("charts/episodic_return", math.nan)
        if math.isfinite(ret):
            self.last_return = ret
        if self.bar is not None:
            self.bar.update(global_step - self.bar.n)
            self.bar.set_postfix_str(f"SPS {metrics.get('charts/SPS', 0):,.0f} | return {self.last_return:.1f}", refresh=False)

    def text(self, tag: str, text: str, step: int) -> None:
        self.writer.add_text(tag, text, step)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.writer.flush()
        self.writer.close()
        self._csv_file.close()
