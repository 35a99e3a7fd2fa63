"""What the benchmark scripts share: a "median (min-max)" cell, and a table printed and appended to
the results file given with ``--out``. Imported as ``tables`` (a script's own directory is first on
sys.path when it runs as ``python benchmarks/NAME.py``)."""

from __future__ import annotations

import statistics
from typing import Callable, Optional


def median_range(values: list, scale: float = 1.0, digits: int = 1, unit: str = "",
                 fmt: Optional[Callable[[float], str]] = None) -> str:
    """'median (min-max)' of ``values``: each divided by ``scale`` and shown with ``digits`` decimals
    and ``unit``, or through ``fmt``; '-' for no values."""
    if not values:
        return "-"
    show = fmt or (lambda v: f"{v / scale:.{digits}f}{unit}")
    return f"{show(statistics.median(values))} ({show(min(values))}-{show(max(values))})"


def markdown_table(header: list, rows: list) -> str:
    """A markdown table: the first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def command(script: str, argv: Optional[list]) -> str:
    """The 'Command: ...' line that reproduces a table."""
    import shlex
    import sys

    words = ["python", f"benchmarks/{script}", *(argv if argv is not None else sys.argv[1:])]
    return f"Command: `{shlex.join(words)}`"  # quoted as a shell needs it (`--only 'tanh numpy'`)


def machine_line() -> str:
    """The CPU a table was measured on, which decides its figures: model, cores, torch, and the CPU
    tanh (``proxima.tanh_cpu.MODE``: MKL's tanh is slow on CPUs that are not Intel's)."""
    import os
    import platform

    import torch

    from proxima.bench import cpu_model
    from proxima.tanh_cpu import MODE, cpu_vendor

    vendor = cpu_vendor()
    return (f"CPU: {cpu_model()}{f' ({vendor})' if vendor else ''}, {os.cpu_count()} cores; torch {torch.__version__}, "
            f"Python {platform.python_version()}; CPU tanh: {MODE}")


def emit(text: str, out: Optional[str] = None, file_text: Optional[str] = None) -> None:
    """Print ``text``; append ``file_text`` (default: ``text``) after a blank line to ``out``, if given."""
    print(text)
    if out:
        with open(out, "a") as f:
            f.write("\n" + (text if file_text is None else file_text).rstrip("\n") + "\n")


def ab_report(caption: str, table: str, ratio_label: str, ratios: list, script: str, argv: Optional[list],
              out: Optional[str] = None) -> None:
    """The report of an A/B benchmark: caption, table, the per-round ratio and the command; printed,
    and appended to ``out`` if given."""
    text = "\n".join([caption, "", table, "", f"{ratio_label}, per round: {median_range(ratios, digits=2)}x", "",
                      command(script, argv), ""])
    emit(text, out)
