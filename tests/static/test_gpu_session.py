"""benchmarks/gpu_session.sh, the one prepared command of a session lent a GPU, checked here on the CPU
with a stand-in Python: what it leaves in $OUT must fit what the device tool brings back (at most 8
files, no deeper than two folders), no step's log may be lost on the way, every command line it
runs parses with its script's own parser, and its step limits fit the call."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.static.test_docker import tool

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"

# A stand-in for the GPU machine's python3: the import check passes; every other call prints its
# arguments (quoted as the shell would need them) and, given --out PATH, writes a table there, as
# the benchmark scripts do.
STUB = r"""#!/usr/bin/env bash
[[ "$1" == "-c" && "$2" == *"torch.cuda.is_available"* ]] && exit 0
echo "stub:$(printf ' %q' "$@")"
while [[ $# -gt 0 ]]; do
  if [[ "$1" == "--out" ]]; then echo "| table |" >> "$2"; fi
  shift
done
"""

STEPS = ["doctor", "pytest-cuda", "vs-purejaxrl", "purejaxrl-solve", "solve-gpu", "pendulum-cudagraphs", "accel",
         "population-256", "pytest-cuda-compile"]


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


def stub_calls(out: Path) -> list:
    """Every command line the session gave the stand-in Python (its logs echo them), as argv lists."""
    texts = [(out / "pytest-cuda.txt").read_text()]
    with tarfile.open(out / "logs.tar.gz") as tar:
        texts += [tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()]
    return [shlex.split(line[len("stub: "):]) for text in texts for line in text.splitlines() if line.startswith("stub: ")]


def test_every_command_line_parses_with_its_scripts_parser(tmp_path):
    """A flag the script does not have (or lost) would stop that step at once on the GPU machine,
    where a call cannot be repeated: each line is parsed here as its script parses it."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import accel
    import population_vs_purejaxrl
    import solve_time
    import vs_purejaxrl

    from proxima.cli import build_parser

    scripts = {"benchmarks/accel.py": accel, "benchmarks/vs_purejaxrl.py": vs_purejaxrl, "benchmarks/solve_time.py": solve_time,
               "benchmarks/population_vs_purejaxrl.py": population_vs_purejaxrl}
    r, out = run_session(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    parsed = {}
    for argv in stub_calls(out):
        if argv[0] in scripts:
            parsed[argv[0]] = scripts[argv[0]].build_parser().parse_args(argv[1:])  # SystemExit(2) on a wrong flag
        elif argv[:2] == ["-m", "proxima"]:
            parsed[argv[2]] = build_parser().parse_args(argv[2:])
    assert sorted(parsed) == sorted([*scripts, "doctor", "train"])
    vs = parsed["benchmarks/vs_purejaxrl.py"]
    assert vs.single_call and vs.cudagraphs and vs.time_budget is not None and vs.jax_cache == "on"
    # the anchor gets a budget under the step's own limit, and the table is kept if the step is cut short
    assert vs.time_budget < step_limits()["vs-purejaxrl"]
    pop = parsed["benchmarks/population_vs_purejaxrl.py"]
    assert pop.time_budget < step_limits()["population-256"] and pop.timeout <= pop.time_budget
    # accel: the shape only (native CartPole, 16-step rollouts, 4 epochs x 4 minibatches, 64x64),
    # the cold compile last
    ac = parsed["benchmarks/accel.py"]
    cases = accel.parse_cases(ac.cases)
    assert len(cases) == 1 and ac.modes.split(",") == ["eager", "cudagraphs", "compile+cudagraphs"]
    label, env_id, _, overrides = cases[0]
    from proxima.config import PPOConfig
    from proxima.presets import resolve

    cfg = resolve(env_id, None, PPOConfig())
    assert (env_id, overrides.get("num_steps"), cfg.update_epochs, cfg.num_minibatches, list(cfg.hidden_sizes)) == (
        "CartPole-v1", 16, 4, 4, [64, 64])
    # vs_purejaxrl's own `proxima bench` line parses too, and measures training only
    bench = build_parser().parse_args(vs_purejaxrl.proxima_cmd(vs, 2048, 3)[3:])
    assert bench.train_only and bench.cudagraphs and bench.json


def step_limits() -> dict:
    """{step name: limit seconds} of every `step NAME LIMIT ...` call in the script."""
    return {m[0]: int(m[1]) for m in re.findall(r"^\s*step ([\w-]+) (\d+) ", SCRIPT.read_text(), flags=re.M)}


def test_step_limits_fit_the_call_and_each_is_killed_if_it_ignores_sigterm():
    limits = step_limits()
    assert sorted(limits) == sorted(STEPS)
    assert sum(limits.values()) <= 540, limits  # 600 s a call: pip and the import check take the rest
    text = SCRIPT.read_text()
    assert re.search(r"= {}\n".format(sum(limits.values())), text), "the comment adding up the limits is out of date"
    # a process stuck in a CUDA call ignores SIGTERM: SIGKILL follows 10 s later
    calls = [line.strip() for line in text.splitlines() if re.match(r"\s*timeout ", line)]
    assert calls == ['timeout -k 10 "$limit" "$@"'], calls  # the one in step(), which every step goes through


def test_the_compile_tests_run_last_and_only_there(tmp_path):
    """The cold inductor compiles are the slowest tests: a second pytest run, the session's last
    step, so a time-out there keeps every other test's result (the first run deselects them)."""
    r, out = run_session(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    runs = [argv for argv in stub_calls(out) if argv[:2] == ["-m", "pytest"]]
    assert len(runs) == 2
    summary = (out / "summary.txt").read_text().splitlines()
    assert summary[-1].startswith("pytest-cuda-compile: exit 0")
    collected = []
    for argv in runs:
        proc = subprocess.run([sys.executable, *argv, "--collect-only"], cwd=ROOT, capture_output=True, text=True, timeout=300)
        collected.append({line for line in proc.stdout.splitlines() if "::" in line})
    first, last = collected
    assert last and all("compile+graphs" in t for t in last), last
    assert first and not first & last and not any("compile+graphs" in t for t in first)
    assert any("[graphs-CartPole-v1]" in t for t in first)  # the graphed-equals-eager tests stay in the first run


def test_gpu_session_keeps_earlier_logs_when_a_step_fails(tmp_path):
    # doctor fails: the script goes on, says so, and the archive still holds doctor's output
    echo = STUB.splitlines()[2]  # the line that echoes the arguments
    stub = STUB.replace(echo, echo + '\n[[ "$*" == *"proxima doctor"* ]] && { echo boom; exit 3; }')
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
