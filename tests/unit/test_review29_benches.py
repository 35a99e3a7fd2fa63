"""Review 29's findings on the benchmark scripts: a script stopped by SIGTERM or Ctrl-C takes its
children and its temporary folder with it; population_vs_purejaxrl.py fails when a side failed and
checks its PureJaxRL interpreter first; distributed.py, rlhf.py and sb3_compare.py say what went
wrong in one line (sb3_compare.py after writing what it measured); vs_purejaxrl.py names the
PureJaxRL TOTAL it ran; accel.py writes "median (min-max)"; gpu_session.sh says which steps it
skipped, limits its start-up and kills what a step left in process groups of its own; the
commands' `python` is the venv's, said once. Nothing here trains beyond 64 steps."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import tables  # noqa: E402  (benchmarks/tables.py)


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not reaped, is not running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1][0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in "ZX"


def wait_for(predicate, seconds: float = 30.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def children_of(pid: int) -> list:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def kill_quietly(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ------------------------------------------------------------------------------------ item 2: children
#: a child that starts a grandchild (the way torchrun starts workers), writes both pids and waits
FAMILY = ("import subprocess, sys, time\n"
          "g = subprocess.Popen(['sleep', '60'])\n"
          "open(sys.argv[1], 'w').write(f'{__import__(\"os\").getpid()} {g.pid}')\n"
          "time.sleep(60)\n")


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_kills_the_child_s_whole_group_and_removes_the_folder(tmp_path, monkeypatch, capsys, sig, code):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    pids_file = tmp_path / "pids"
    before = signal.getsignal(signal.SIGTERM)

    def signal_once_started():
        if wait_for(lambda: pids_file.exists() and pids_file.read_text().count(" ") == 1, 20):
            os.kill(os.getpid(), sig)

    threading.Thread(target=signal_once_started, daemon=True).start()
    with pytest.raises(SystemExit) as e:
        with tables.stopping_children("x.py", "proxima-x-") as folder:
            (folder / "run").mkdir()
            tables.run_child([sys.executable, "-c", FAMILY, str(pids_file)], capture_output=True, timeout=60)
    pids = [int(x) for x in pids_file.read_text().split()]
    try:
        assert e.value.code == code
        assert wait_for(lambda: not any(alive(p) for p in pids), 5), [p for p in pids if alive(p)]
        assert not folder.exists() and not list(tmp_path.glob("proxima-x-*"))
        err = capsys.readouterr().err.splitlines()
        assert err == [f"x.py: stopped by {sig.name}: its child processes were killed; {folder} removed"]
        assert signal.getsignal(signal.SIGTERM) == before  # the script's handlers are put back
    finally:
        kill_quietly(pids)


def test_solve_time_stopped_by_sigterm_leaves_no_process_and_no_temporary_folder(tmp_path):
    """The reviewer's case: SIGTERM to solve_time.py left its `proxima train` children running,
    reparented to init, and /tmp/proxima-solve-XXXX on disk. Two seeds at a time here."""
    env = dict(os.environ, TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    script = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "solve_time.py"), "--seeds", "1-3", "--parallel", "2",
                               "--out", str(tmp_path / "solve.md")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    kids = []
    try:
        assert wait_for(lambda: len(children_of(script.pid)) >= 2, 60), "the seeds never started"
        kids = children_of(script.pid)
        assert list(tmp_path.glob("proxima-solve-*"))
        script.send_signal(signal.SIGTERM)
        _, err = script.communicate(timeout=30)
        assert script.returncode == 143, err
        assert wait_for(lambda: not any(alive(k) for k in kids), 5), [k for k in kids if alive(k)]
        assert not list(tmp_path.glob("proxima-solve-*"))
        assert err.strip().splitlines()[-1].startswith("solve_time.py: stopped by SIGTERM: its child processes were killed; ")
    finally:
        if script.poll() is None:
            script.kill()
        kill_quietly(kids)


# ------------------------------------------------------------------------------------ item 1: population
import population_vs_purejaxrl as pop  # noqa: E402
import vs_purejaxrl  # noqa: E402


def fake_python(tmp_path: Path, stderr: str, code: int) -> str:
    path = tmp_path / "fake-python"
    path.write_text(f"#!/bin/sh\necho \"{stderr}\" >&2\nexit {code}\n")
    path.chmod(0o755)
    return str(path)


def test_population_exits_1_when_both_sides_failed(monkeypatch, tmp_path, capsys):
    anchor = tmp_path / "anchor.py"
    anchor.write_text("# the anchor\n")

    def failed(name):
        def run(*a, **k):
            raise RuntimeError(f"{name} failed (1): boom")
        return run

    monkeypatch.setattr(pop, "run_proxima", failed("proxima"))
    monkeypatch.setattr(pop, "run_purejaxrl", failed("PureJaxRL"))
    out = tmp_path / "pop.md"
    code = pop.main(["--device", "cpu", "--agents", "2", "--total", "20000", "--anchor", str(anchor),
                     "--jax-python", fake_python(tmp_path, "", 0), "--out", str(out)])
    err = capsys.readouterr().err.splitlines()
    assert code == 1
    assert err == ["population_vs_purejaxrl.py: error: PureJaxRL and Proxima failed (the table's row says why)"]
    assert "| Proxima population | failed: proxima failed (1): boom | | |" in out.read_text()


def test_population_refuses_a_jax_python_without_jax_before_measuring(monkeypatch, tmp_path, capsys):
    anchor = tmp_path / "anchor.py"
    anchor.write_text("# the anchor\n")
    monkeypatch.setattr(pop, "run_proxima", lambda *a, **k: pytest.fail("measured before the interpreter was checked"))
    monkeypatch.setattr(pop, "run_purejaxrl", lambda *a, **k: pytest.fail("measured before the interpreter was checked"))
    no_chex = fake_python(tmp_path, "ModuleNotFoundError: No module named 'chex'", 1)
    out = tmp_path / "pop.md"
    code = pop.main(["--device", "cpu", "--anchor", str(anchor), "--jax-python", no_chex, "--out", str(out)])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and not out.exists()
    assert err == [f"population_vs_purejaxrl.py: error: --jax-python {no_chex}: cannot import PureJaxRL's packages "
                   "(ModuleNotFoundError: No module named 'chex'); install jax, chex, flax, optax, gymnax there, "
                   "or run `make jax-venv` to make .jax-venv, the default --jax-python (benchmarks/anchors/README.md)"]


def test_population_defaults_run_on_this_machine():
    """--device cuda and this interpreter (no JAX) were the defaults: both rows failed on a CPU machine."""
    args = pop.build_parser().parse_args([])
    assert args.device == "auto"
    assert args.jax_python == vs_purejaxrl.build_parser().parse_args([]).jax_python != sys.executable


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the refusal needs a machine that cannot run it")
def test_population_refuses_cuda_where_there_is_none(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(pop, "run_proxima", lambda *a, **k: pytest.fail("measured"))
    code = pop.main(["--device", "cuda", "--anchor", str(tmp_path / "none.py"), "--out", str(tmp_path / "pop.md")])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("population_vs_purejaxrl.py: error: --device 'cuda': CUDA is not usable")


# ------------------------------------------------------------------------------------ item 3: distributed
import distributed  # noqa: E402


def test_distributed_times_two_iterations(tmp_path):
    """--iterations 2 passed the argument check and then raised "2 iterations logged; run more"."""
    csv = tmp_path / "metrics.csv"
    csv.write_text("iteration,global_step,time\n1,32,1.0\n2,64,1.5\n")
    assert distributed.steps_per_second(csv) == 64.0


def test_distributed_the_reviewer_s_command_writes_its_table(tmp_path, capsys):
    out = tmp_path / "X.md"
    code = distributed.main(["--procs", "1", "--repeats", "1", "--iterations", "2", "--num-envs", "4", "--num-steps", "8",
                             "--out", str(out)])
    capsys.readouterr()
    assert code == 0 and "| 1 | 4 |" in out.read_text()


def test_distributed_a_failed_run_is_one_line(monkeypatch, tmp_path, capsys):
    def run(cmd, *a, **k):
        return subprocess.CompletedProcess(cmd, 2, "", "some warning\nproxima train: error: --num-envs 0: must be at least 1\n")

    monkeypatch.setattr(subprocess, "run", run)
    out = tmp_path / "X.md"
    code = distributed.main(["--procs", "1", "--repeats", "1", "--iterations", "3", "--out", str(out)])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and not out.exists() and len(err) == 1, err
    assert err[0].startswith("distributed.py: error: `python -m proxima train CartPole-v1 ")
    assert err[0].endswith("failed (exit 2): proxima train: error: --num-envs 0: must be at least 1")


# ------------------------------------------------------------------------------------ item 4: rlhf
import rlhf  # noqa: E402


@pytest.mark.parametrize("argv, line", [
    (["--libraries", "foo"], "rlhf.py: error: --libraries foo: no library 'foo'; name some of proxima, trl, comma separated"),
    (["--libraries", ","], "rlhf.py: error: --libraries ,: none given; name some of proxima, trl, comma separated"),
    (["--repeats", "0"], "rlhf.py: error: --repeats 0: must be at least 1"),
    (["--steps", "0"], "rlhf.py: error: --steps 0: must be at least 1"),
    (["--warmup", "-1"], "rlhf.py: error: --warmup -1: must be 0 or more"),
])
def test_rlhf_refuses_bad_arguments_in_one_line(monkeypatch, capsys, argv, line):
    monkeypatch.setattr(rlhf, "build_assets", lambda folder: pytest.fail("built before the arguments were checked"))
    assert rlhf.main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [line]


def test_rlhf_a_failed_library_is_a_full_row_and_exit_1(monkeypatch, capsys):
    monkeypatch.setattr(rlhf, "build_assets", lambda folder: None)
    monkeypatch.setattr(rlhf, "TRL_VENV", Path("/nonexistent/trl-venv"))
    monkeypatch.setattr(rlhf, "run_worker", lambda *a: {"step_s": 0.5, "cpu_s": 0.4, "tokens_per_s": 1000.0, "length": 32.0})
    code = rlhf.main(["--repeats", "1"])
    out, err = capsys.readouterr()
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert code == 1
    assert len({row.count("|") for row in rows}) == 1, rows  # every row as wide as the header
    assert "| TRL 1.12 (trl.experimental.ppo) | failed: /nonexistent/trl-venv missing: " in out
    assert ("Command: `python benchmarks/rlhf.py --repeats 1 --steps 8 --warmup 2 --threads 1 --epochs 4 "
            "--libraries proxima,trl`") in out
    assert err.splitlines()[-1].startswith("rlhf.py: error: 1 repeat(s) failed (trl: /nonexistent/trl-venv missing")


# ------------------------------------------------------------------------------------ item 5: sb3_compare
import sb3_compare  # noqa: E402


def test_sb3_a_bench_venv_that_cannot_be_made_is_one_line(monkeypatch, tmp_path, capsys):
    venv = tmp_path / "bench-venv"  # never .bench-venv in the repository
    monkeypatch.setattr(sb3_compare, "BENCH_VENV", venv)
    monkeypatch.setattr(sb3_compare, "BENCH_PY", venv / "bin" / "python")

    def run(cmd, *a, **k):
        if "pip" in cmd:
            return subprocess.CompletedProcess(cmd, 1, "", "WARNING: Retrying ...\nERROR: No matching distribution found for torch==2.13.0\n")
        if cmd[1:3] == ["-m", "venv"]:
            return subprocess.CompletedProcess(cmd, 0, "", "")
        raise AssertionError(f"started {cmd}")

    monkeypatch.setattr(subprocess, "run", run)
    out = tmp_path / "sb3.md"
    code = sb3_compare.main(["--out", str(out)])
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("[sb3_compare ")]
    assert code == 2 and not out.exists() and len(err) == 1, err
    assert err[0].startswith(f"sb3_compare.py: error: {venv} could not be made: `")
    assert "failed (exit 1): ERROR: No matching distribution found for torch==2.13.0; it needs the network" in err[0]


def test_sb3_a_failed_worker_keeps_what_was_measured(monkeypatch, tmp_path, capsys):
    """The SB3 solve worker fails after the throughput parts and Proxima's runs: those are written,
    the section marked incomplete, --json too, and the run ends with one line (it was a RuntimeError
    traceback, and the ~15 minutes before it were lost)."""
    monkeypatch.setattr(sb3_compare, "ensure_bench_venv", lambda: None)
    monkeypatch.setattr(sb3_compare, "proxima_train_sps", lambda *a: [100000.0, 110000.0, 120000.0])
    monkeypatch.setattr(sb3_compare, "proxima_fast_solve", lambda seed, workdir: {
        "seed": seed, "wall": 8.0, "cpu": 7.0, "eval": 500.0, "command": f"proxima train CartPole-v1 --preset fast --seed {seed}"})

    def worker(cmd, *a, **k):  # the stand-in SB3 worker: throughput works, time to solve crashes
        if "sps" in cmd:
            result = {"sps": [4000.0, 4100.0, 4200.0], "sb3": "2.9.0", "torch": "2.13.0"}
            return subprocess.CompletedProcess(cmd, 0, "SB3RESULT " + json.dumps(result) + "\n", "")
        return subprocess.CompletedProcess(cmd, 1, "", "Traceback (most recent call last):\nRuntimeError: boom\n")

    monkeypatch.setattr(subprocess, "run", worker)
    out, raw = tmp_path / "sb3.md", tmp_path / "sb3.json"
    code = sb3_compare.main(["--seeds", "1", "--sb3-seeds", "1", "--out", str(out), "--json", str(raw)])
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("[sb3_compare ")]
    assert code == 2 and len(err) == 1, err
    assert err[0] == (f"sb3_compare.py: error: the SB3 solve worker (--seed 1 --total-timesteps 500000) failed (exit 1): "
                      f"RuntimeError: boom; what was measured before it is in {out} and {raw}")
    text = out.read_text()
    assert "**Incomplete: the run stopped at a failure (the SB3 solve worker" in text
    assert "| SB3 PPO |" in text and "4,100 (4,000-4,200)" in text and "| 1 | 8.00 | 7.00 | 500.0 | yes |" in text
    assert "## SB3 time to solve" not in text
    data = json.loads(raw.read_text())
    assert data["sb3_sps"] == [4000.0, 4100.0, 4200.0] and data["failed"].startswith("the SB3 solve worker")


# ------------------------------------------------------------------------------------ item 7: the TOTAL run
def test_vs_purejaxrl_names_the_total_each_size_ran():
    """A 64-env run wrote "(TOTAL: {4096: 4000000.0})": PJR_TOTAL, not the 64 x 16 x 200 = 204,800 it ran."""
    args = vs_purejaxrl.build_parser().parse_args(["--num-envs", "64,4096"])
    args.cpus, args.jax_cache_dir = "one", None
    rows = [{"envs": n, "ours": [], "theirs": [], "ratios": [], "compile": [], "cores": ([], []), "notes": [], "graphs": ""}
            for n in (64, 4096)]
    text = vs_purejaxrl.report(vs_purejaxrl.build_parser(), args, rows, tables.started())
    assert "(TOTAL per envs N: 64: 204,800, 4,096: 4,000,000)" in text
    assert vs_purejaxrl.pjr_config(args, 64) == "64x16x204800"


# ------------------------------------------------------------------------------------ item 9: accel's cells
def test_accel_cells_are_median_min_max():
    import accel

    base = {"sps": [1000.0, 2000.0, 3000.0], "graphs": None}
    assert accel.cell(base, base) == "2,000 (1,000-3,000), 1.00x"
    assert accel.cell({"sps": [4000.0], "ratios": [2.0], "graphs": None}, base) == "4,000 (4,000-4,000), 2.00 (2.00-2.00)x"


# ------------------------------------------------------------------------------------ item 6: which python
def test_the_venv_is_said_once_where_the_commands_are():
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    intro = readme.split("\n## ", 1)[0]
    assert "**`python` in every command on this page, and in the `Command:` line each table records, is the\nproject's virtual environment" in intro
    assert "`source\n.venv/bin/activate`" in intro
    assert ".venv/bin/python benchmarks/" not in readme  # one spelling on the page: `python`, the venv's
    reproduce = (ROOT / "docs" / "performance.md").read_text().split("## Reproduce", 1)[1]
    assert reproduce.split("```bash\n", 1)[1].startswith("source .venv/bin/activate ")


# ------------------------------------------------------------------------------------ item 8: gpu_session.sh
SESSION = ROOT / "benchmarks" / "gpu_session.sh"
# the GPU machine's stand-in python3 and the steps in order: test_gpu_session.py's
from tests.static.test_gpu_session import STEPS, STUB, run_session  # noqa: E402


def test_gpu_session_without_an_anchor_says_each_skipped_step_and_runs_proxima_s_population(tmp_path):
    r, out = run_session(tmp_path, anchor_text=None)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = (out / "summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in summary] == STEPS, summary
    assert summary[2] == "vs-purejaxrl: skipped, no anchor (benchmarks/anchors/purejaxrl_cartpole.py is missing: git checkout -- benchmarks/anchors)"
    assert summary[3] == "purejaxrl-solve: skipped, no anchor (benchmarks/anchors/purejaxrl_cartpole.py is missing: git checkout -- benchmarks/anchors)"
    assert re.fullmatch(r"population-256: exit 0, \d+ s \(Proxima only: PureJaxRL skipped, no anchor\)", summary[7]), summary[7]
    with tarfile.open(out / "logs.tar.gz") as tar:
        log = tar.extractfile("./population-cuda.log").read().decode()
    assert "benchmarks/population_vs_purejaxrl.py" in log and "--anchor" not in log and "--jax-python" not in log


def test_gpu_session_start_up_has_limits_within_the_budget():
    """pip and the import check had no limit: a hang there took the whole 600 s call. Their limits
    and kill graces fit in the call's 60 s beyond the steps' 540 s (limits and graces), as the script says."""
    text = SESSION.read_text()
    start_up = re.findall(r"if !? ?timeout -k (\d+) (\d+) \"\$py\" (-m pip install|-c \"\$preflight\")", text)
    assert [m[2] for m in start_up] == ["-m pip install", '-c "$preflight"'], start_up
    steps = {m[0]: int(m[1]) for m in re.findall(r"^\s*step ([\w-]+) (\d+) ", text, flags=re.M)}
    grace = int(re.search(r'^\s*timeout -k (\d+) "\$limit" "\$@" &$', text, flags=re.M)[1])
    # the steps keep the 540 s their estimates need; the start-up's worst case comes out of the call's last 60 s
    total = sum(steps.values()) + len(steps) * grace
    worst_start_up = sum(int(g) + int(limit) for g, limit, _ in start_up)
    assert sorted(steps) == sorted(STEPS) and total <= 540 and total + worst_start_up <= 580, (steps, start_up, total)
    assert f"(the start-up's {worst_start_up} s at worst fits in the call's remaining 60 s)" in text
    assert subprocess.run(["bash", "-n", str(SESSION)], capture_output=True).returncode == 0


def test_gpu_session_kills_what_a_step_left_in_a_process_group_of_its_own(tmp_path):
    """A driver script killed by timeout's SIGKILL leaves its children (now in process groups of their
    own, for the script to kill on SIGTERM) out of reach of the step's group kill: the doctor step's
    stand-in leaves such a process behind; it is gone once the step ends."""
    pidfile, ready = tmp_path / "left.pid", tmp_path / "left.ready"
    # the pid is the one the stub started ($!), written at once: a pid file written by the child
    # itself could still be empty when a loaded machine starts it slowly and the step ends first
    leave = (f'if [[ "$*" == *"proxima doctor"* ]]; then\n'
             f'  {sys.executable} -c "import os, time; os.setpgid(0, 0); open({str(ready)!r}, \'w\').close(); '
             f'time.sleep(60)" &\n'
             f'  echo $! > {pidfile}\n'
             f'  for _ in $(seq 160); do [[ -e {ready} ]] && break; sleep 0.05; done\n'
             f'fi\n')
    stub = STUB.replace('echo "stub:', leave + 'echo "stub:', 1)
    r, _ = run_session(tmp_path, stub=stub)
    pid = int(pidfile.read_text())
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        assert wait_for(lambda: not alive(pid), 2), f"process {pid} left by the doctor step is still running"
    finally:
        kill_quietly([pid])
