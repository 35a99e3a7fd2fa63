"""benchmarks/gpu_session.sh, the one prepared command of a session lent a GPU, checked here on the CPU
with a stand-in Python: what it leaves in $OUT must fit what the device tool brings back (at most 8
files, no deeper than two folders), and no step's log may be lost on the way."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.static.test_docker import tool

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"

# A stand-in for the GPU machine's python3: the import check passes; every other call prints its
# arguments and, given --out PATH, writes a table there, as the benchmark scripts do.
STUB = r"""#!/usr/bin/env bash
[[ "$1" == "-c" && "$2" == *"torch.cuda.is_available"* ]] && exit 0
echo "stub: $*"
while [[ $# -gt 0 ]]; do
  if [[ "$1" == "--out" ]]; then echo "| table |" >> "$2"; fi
  shift
done
"""

STEPS = ["doctor", "pytest-cuda", "vs-purejaxrl", "purejaxrl-solve", "solve-gpu", "pendulum-cudagraphs", "accel",
         "population-256"]


def run_session(tmp_path: Path, stub: str = STUB) -> tuple[subprocess.CompletedProcess, Path]:
    work, out = tmp_path / "tree", tmp_path / "out"
    (work / ".anchors").mkdir(parents=True)
    (work / ".anchors" / "purejaxrl_cartpole.py").write_text("# the anchor\n")
    out.mkdir()
    python = tmp_path / "python3"
    python.write_text(stub)
    python.chmod(0o755)
    env = {**os.environ, "OUT": str(out), "PYTHON": str(python), "TMPDIR": str(tmp_path)}
    r = subprocess.run(["bash", str(SCRIPT)], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    return r, out


def test_gpu_session_returns_at_most_eight_files_and_every_log(tmp_path):
    r, out = run_session(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == sorted(["summary.txt", "pytest-cuda.txt", "vs-purejaxrl-cuda.md", "solve-gpu.md", "accel-cuda.md",
                            "population-cuda.md", "logs.tar.gz"]), files
    assert len(files) <= 8
    summary = (out / "summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in summary] == STEPS, summary
    assert all(": exit 0, " in line for line in summary), summary
    with tarfile.open(out / "logs.tar.gz") as tar:
        logs = {Path(m.name).name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
    assert sorted(logs) == sorted(["doctor.txt", "vs-purejaxrl-cuda.log", "purejaxrl-solve.json", "solve-gpu.log",
                                   "pendulum-cudagraphs.txt", "accel-cuda.log", "population-cuda.log"])
    assert logs["doctor.txt"].startswith("stub: -m proxima doctor")
    assert "--cudagraphs" in logs["pendulum-cudagraphs.txt"]
    assert "wall_from_launch_seconds" in logs["purejaxrl-solve.json"]
    # the temporary log folder is gone; only $OUT holds the results
    assert not list(tmp_path.glob("gpu-session.*"))


def test_gpu_session_keeps_earlier_logs_when_a_step_fails(tmp_path):
    # doctor fails: the script goes on, says so, and the archive still holds doctor's output
    stub = STUB.replace('echo "stub: $*"', 'echo "stub: $*"\n[[ "$*" == *"proxima doctor"* ]] && { echo boom; exit 3; }')
    r, out = run_session(tmp_path, stub)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = (out / "summary.txt").read_text()
    assert "doctor: exit 3, " in summary and "accel: exit 0, " in summary
    with tarfile.open(out / "logs.tar.gz") as tar:
        doctor = tar.extractfile("./doctor.txt").read().decode()
    assert "boom" in doctor


def test_gpu_session_stops_with_one_line_without_cuda(tmp_path):
    r, out = run_session(tmp_path, "#!/usr/bin/env bash\necho 'no CUDA here' >&2; exit 1\n")
    assert r.returncode == 2
    assert (out / "summary.txt").read_text().startswith("gpu_session: need gymnasium and a CUDA torch here")
    assert "no CUDA here" in (out / "import-error.txt").read_text()


def test_gpu_session_is_shellcheck_clean():
    r = subprocess.run([tool("shellcheck"), str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
