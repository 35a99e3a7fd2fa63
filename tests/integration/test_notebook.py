"""Executes notebooks/quickstart.ipynb end to end with a small budget; any failing cell fails the test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


def _venv_kernel(tmp_path: Path, monkeypatch) -> None:
    """A python3 kernelspec that runs this interpreter (the venv's), found first via JUPYTER_PATH."""
    from ipykernel.kernelspec import install

    prefix = tmp_path / "jupyter-prefix"
    install(kernel_name="python3", prefix=str(prefix))
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    from jupyter_client.kernelspec import KernelSpecManager

    assert KernelSpecManager().get_kernel_spec("python3").argv[0] == sys.executable


def test_committed_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the quickstart has no code cells"
    for cell in code:
        assert not cell.get("outputs") and cell.get("execution_count") is None, "clear the notebook's outputs before committing"
    assert any(c.cell_type == "markdown" for c in nb.cells)


def test_quickstart_notebook_runs(tmp_path, monkeypatch):
    _venv_kernel(tmp_path, monkeypatch)
    monkeypatch.setenv("PROXIMA_NB_STEPS", "1024")  # two iterations: the notebook runs, not learns
    monkeypatch.setenv("PROXIMA_NB_RUN_DIR", str(tmp_path / "runs" / "quickstart"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the failing cell

    run_dir = tmp_path / "runs" / "quickstart"
    assert (run_dir / "metrics.csv").is_file() and (run_dir / "eval.json").is_file()
    assert (run_dir / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "training for 1,024 steps" in text
    assert any("image/png" in o.get("data", {}) for o in outputs), "the curve was not displayed"
    assert "one episode with the loaded policy: return" in text
