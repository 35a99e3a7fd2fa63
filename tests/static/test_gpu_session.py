"""benchmarks/gpu_session.sh, the one prepared command of a session lent a GPU, checked here on the CPU
with a stand-in Python: what it leaves in $OUT must fit what the device tool brings back (at most 8
files, no deeper than two folders), no step's log may be lost on the way, every command line it
runs parses with its script's own parser, its step limits and their kill graces fit the call (and
are the README's), every test that needs CUDA is marked `gpu` and runs in one of its two pytest
steps, a failed PureJaxRL solve run is a failed step with the anchor's own error in the log, and a
second run on the same machine trains into fresh run folders."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Optional

import pytest

import warm_python
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


def run_session(tmp_path: Path, stub: str = STUB, anchor_text: Optional[str] = "# the anchor\n",
                out_name: str = "out") -> tuple[subprocess.CompletedProcess, Path]:
    """gpu_session.sh on a fake tree (TMPDIR and OUT in ``tmp_path``) with a stand-in python3; ``anchor_text``
    None: no anchor carried."""
    work, out = tmp_path / "tree", tmp_path / out_name
    work.mkdir(parents=True, exist_ok=True)
    if anchor_text is not None:
        (work / ".anchors").mkdir(exist_ok=True)
        (work / ".anchors" / "purejaxrl_cartpole.py").write_text(anchor_text)
    out.mkdir()
    python = tmp_path / "python3"
    python.write_text(stub)
    python.chmod(0o755)
    env = {**os.environ, "OUT": str(out), "PYTHON": str(python), "TMPDIR": str(tmp_path)}
    r = subprocess.run(["bash", str(SCRIPT)], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    return r, out


@pytest.fixture(scope="module")
def default_session(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """(result, $OUT, TMPDIR) of one gpu_session.sh run with the plain stand-in: the tests below only read it."""
    tmp = tmp_path_factory.mktemp("gpu-default")
    r, out = run_session(tmp)
    return r, out, tmp


def test_gpu_session_returns_at_most_eight_files_and_every_log(default_session):
    r, out, tmp_path = default_session
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


def test_every_command_line_parses_with_its_scripts_parser(default_session):
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
    r, out, _ = default_session
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


def kill_grace() -> int:
    """The seconds `timeout -k` gives a step that ignores SIGTERM, from the one timeout call (in step())."""
    calls = [line.strip() for line in SCRIPT.read_text().splitlines() if re.match(r"\s*timeout ", line)]
    assert len(calls) == 1, calls  # the one in step(), which every step goes through
    match = re.fullmatch(r'timeout -k (\d+) "\$limit" "\$@" &', calls[0])
    assert match, calls
    return int(match[1])


def test_step_limits_fit_the_call_and_each_is_killed_if_it_ignores_sigterm():
    """Each step may run its kill grace past its limit (a process stuck in a CUDA call ignores SIGTERM):
    the limits alone added up to 540 s and the 9 graces of 10 s took the call to 630 s of its 600."""
    limits, grace = step_limits(), kill_grace()
    assert sorted(limits) == sorted(STEPS)
    assert 0 < grace <= 5, grace
    worst = sum(limits.values()) + len(limits) * grace
    assert worst <= 540, (limits, grace)  # 600 s a call: pip, the import check and slack take the rest
    assert f"= {sum(limits.values())}, + {len(limits)} x {grace} s of kill grace = {worst}\n" in SCRIPT.read_text(), (
        "the comment adding up the limits is out of date")


def test_the_compile_tests_run_last_and_only_there(default_session):
    """The cold inductor compiles are the slowest tests: a second pytest run, the session's last
    step, so a time-out there keeps every other test's result (the first run deselects them)."""
    r, out, _ = default_session
    assert r.returncode == 0, r.stdout + r.stderr
    runs = [argv for argv in stub_calls(out) if argv[:2] == ["-m", "pytest"]]
    assert len(runs) == 2
    summary = (out / "summary.txt").read_text().splitlines()
    assert summary[-1].startswith("pytest-cuda-compile: exit 0")
    first, last = selected_by(*(argv[2:] for argv in runs))
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
    assert (out / "summary.txt").read_text() == (f"gpu_session: start-up check failed: no CUDA here "
                                                 f"(all of it: {out}/import-error.txt)\n")
    assert "no CUDA here" in (out / "import-error.txt").read_text()


def test_gpu_session_is_shellcheck_clean():
    r = subprocess.run([tool("shellcheck"), str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_step_limits_are_the_readme_s():
    """benchmarks/README.md's "GPU session" table gives each step's limit and the estimate behind it:
    the same limits as the script, which they were not kept in step with by hand."""
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    table = readme.split("### GPU session", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)`[^|]*\| (\d+) \|", table, flags=re.M)
    named = {("doctor" if name == "proxima doctor" else name): int(limit) for name, limit in rows}
    assert named == step_limits()
    assert f"{sum(step_limits().values())} s in all" in readme and f"`timeout -k {kill_grace()}`" in readme
    assert f"{sum(step_limits().values()) + len(step_limits()) * kill_grace()} s with every step's {kill_grace()} s kill grace" in readme


# A pytest plugin for a collection with CUDA hidden (as on a machine without it): every test, whether it
# carries the `gpu` marker, and whether a skipif that applies here names CUDA or a GPU as its reason.
HIDE_CUDA = r"""
import json, os, re
import pytest
import torch

torch.cuda.is_available = lambda: False
torch.cuda.device_count = lambda: 0


@pytest.hookimpl(tryfirst=True)  # before -m deselects anything
def pytest_collection_modifyitems(session, config, items):
    tests = []
    for item in items:
        reasons = [m.kwargs.get("reason", "") for m in item.iter_markers("skipif")
                   if any(a is True for a in m.args) or m.kwargs.get("condition") is True]
        tests.append({"id": item.nodeid, "gpu": item.get_closest_marker("gpu") is not None,
                      "skips_without_cuda": any(re.search(r"cuda|gpu", r, re.I) for r in reasons)})
    with open(os.environ["COLLECTED_JSON"], "w") as f:
        json.dump(tests, f)
"""


_SELECTED: dict = {}
_STARTED: dict = {}  # argv -> (process, its stdout file): collections started ahead, beside each other


def _start_selection(argv: list) -> None:
    key = tuple(argv)
    if key not in _SELECTED and key not in _STARTED:
        out = tempfile.TemporaryFile("w+")
        # -qq: with the step's -v, node ids one per line (as -q alone lists them). --assert=plain: a
        # collection runs no test, and rewriting every module's asserts was two thirds of its CPU time
        proc = warm_python.Popen([sys.executable, "-m", "pytest", *argv, "--collect-only", "-qq", "--assert=plain"],
                                 cwd=ROOT, stdout=out, stderr=subprocess.DEVNULL, text=True)
        _STARTED[key] = (proc, out)


def selected_by(*argvs: list) -> list:
    """[the node ids ``pytest ARGV`` would run (its -m/-k applied)] for each ARGV, collected once per ARGV for
    this module, the collections side by side: each imports the whole suite (~10 s on 2 cores), and two tests
    ask for the same two."""
    for argv in argvs:
        _start_selection(argv)
    for argv in argvs:
        key = tuple(argv)
        if key in _STARTED:
            proc, out = _STARTED.pop(key)
            proc.wait(timeout=600)
            out.seek(0)
            _SELECTED[key] = {line.strip() for line in out.read().splitlines() if "::" in line}
            out.close()
    return [_SELECTED[tuple(argv)] for argv in argvs]


def collect(tmp_path: Path, argv: list, name: str, beside: tuple = ()) -> list:
    """[{id, gpu, skips_without_cuda}] of every test ``pytest ARGV`` collects (before any -m/-k), CUDA hidden;
    the selections of ``beside`` (argv lists for selected_by) are collected meanwhile."""
    (tmp_path / "hide_cuda_plugin.py").write_text(HIDE_CUDA)
    out = tmp_path / f"{name}.json"
    env = {**os.environ, "COLLECTED_JSON": str(out), "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    for other in beside:
        _start_selection(other)
    proc = warm_python.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "--assert=plain", "-p",
                            "hide_cuda_plugin", *argv],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def files_that_can_mark_gpu() -> list:
    """The test files a `gpu` marker or a skipif naming CUDA or a GPU can be in: those whose text says
    "cuda" or "gpu" (a marker or a reason written there), or every file ("tests") where a helper module
    makes pytest marks and says either word (a marker imported from it need not). A quarter of the
    files: collecting the whole suite, twice the imports, took ~20 s of this module's ~35 on 2 cores."""
    words = re.compile(r"cuda|gpu", re.I)
    helpers = [p for p in (ROOT / "tests").rglob("*.py") if not p.name.startswith("test_")]
    if any("pytest.mark" in p.read_text() and words.search(p.read_text()) for p in helpers):
        return ["tests"]
    files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")
                   if words.search(p.read_text()))
    assert "tests/unit/test_accel.py" in files and "tests/unit/test_doctor.py" in files, files
    return files


def test_every_test_that_needs_cuda_is_marked_gpu_and_runs_in_the_session(tmp_path, default_session):
    """The session selected CUDA tests by name (-k cuda): test_accel.py's fp16 checkpoint test and
    test_doctor.py's GPU tests have no "cuda" in theirs and ran nowhere. Now every test that skips
    without CUDA (a skipif that applies on a machine without it and names CUDA or a GPU as its
    reason) carries the `gpu` marker, and the session's two pytest steps together run exactly the
    `gpu` tests, each once. (A test that calls pytest.skip() in its body is not seen here: use the
    marker and skipif.)"""
    r, out, _ = default_session
    assert r.returncode == 0, r.stdout + r.stderr
    runs = [argv[2:] for argv in stub_calls(out) if argv[:2] == ["-m", "pytest"]]
    assert len(runs) == 2 and all(run[run.index("-m") + 1] == "gpu and not slow" for run in runs), runs
    everything = collect(tmp_path, ["-p", "no:cacheprovider", *files_that_can_mark_gpu()], "all", beside=runs)
    unmarked = [x["id"] for x in everything if x["skips_without_cuda"] and not x["gpu"]]
    assert not unmarked, f"tests that skip without CUDA but lack @pytest.mark.gpu: {unmarked}"
    gpu = {x["id"] for x in everything if x["gpu"]}
    assert {"tests/unit/test_accel.py::test_fp16_checkpoint_holds_grad_scaler_state",
            "tests/unit/test_doctor.py::test_gpu_machine_reports_gpus",
            "tests/unit/test_doctor.py::test_cli_require_cuda_passes_on_gpu"} <= gpu
    selected = selected_by(*runs)
    assert not selected[0] & selected[1]
    assert selected[0] | selected[1] == gpu, (gpu - (selected[0] | selected[1]), (selected[0] | selected[1]) - gpu)


def test_a_failed_purejaxrl_solve_run_fails_its_step_and_keeps_the_anchor_s_error(tmp_path):
    """The step printed the anchor's stdout only and always exited 0: a crash was a summary line
    saying 'exit 0' and a log without the error. Here the step's own Python code runs for real and
    the anchor is a stand-in: failing (exit 3), printing an "error" line and exiting 0 (as the real
    one does for a config that raised), and succeeding."""
    echo = STUB.splitlines()[2]
    real = f'[[ "$1" == "-c" && "$2" == *wall_from_launch_seconds* ]] && exec {shlex.quote(sys.executable)} "$@"'
    stub = STUB.replace(echo, real + "\n" + echo)
    fails = ("import json, sys\nprint(json.dumps({'num_envs': 4, 'error': 'XlaRuntimeError: boom'}))\n"
             "print('Traceback (most recent call last):', file=sys.stderr)\n"
             "print('RuntimeError: CUDA_ERROR_OUT_OF_MEMORY', file=sys.stderr)\nsys.exit(3)\n")
    solves = "import json\nprint(json.dumps({'num_envs': 4, 'steps_per_second': 1e5, 'final_return_mean': 500.0}))\n"
    for code, anchor in ((3, fails), (1, fails.replace("sys.exit(3)", "sys.exit(0)")), (0, solves)):
        r, out = run_session(tmp_path / f"exit{code}", stub, anchor_text=anchor)
        assert r.returncode == 0, r.stdout + r.stderr
        summary = (out / "summary.txt").read_text()
        assert f"purejaxrl-solve: exit {code}, " in summary, summary
        with tarfile.open(out / "logs.tar.gz") as tar:
            log = tar.extractfile("./purejaxrl-solve.json").read().decode()
        assert "wall_from_launch_seconds" in log
        if code:
            assert "XlaRuntimeError: boom" in log and "anchor stderr, last lines:" in log
            assert log.index("wall_from_launch_seconds") < log.index("anchor stderr") < log.index("CUDA_ERROR_OUT_OF_MEMORY"), log
        else:
            assert '"final_return_mean": 500.0' in log and "anchor stderr" not in log


def test_a_second_run_on_the_same_machine_trains_into_a_fresh_run_folder(tmp_path):
    """The Pendulum step trained into a fixed /tmp/pendulum-cudagraphs, so the script's second run on a
    warm machine failed there ("is not empty"). The stand-in refuses a run folder that is not empty, as
    proxima train does; both runs (the same TMPDIR) must pass, each in a folder of its own under TMPDIR
    that is gone at the end."""
    echo = STUB.splitlines()[2]
    train = ('if [[ "$*" == *" train "* ]]; then\n'
             '  d="$(printf "%s\\n" "$@" | sed -n "/^--run-dir$/{n;p}")"\n'
             '  [[ -n "$(ls -A "$d" 2> /dev/null)" ]] && { echo "proxima train: error: --run-dir $d: is not empty" >&2; exit 2; }\n'
             '  mkdir -p "$d" && echo done > "$d/eval.json"\n'
             'fi')
    stub = STUB.replace(echo, echo + "\n" + train)
    run_dirs = []
    for name in ("first", "second"):
        r, out = run_session(tmp_path, stub, out_name=name)
        assert r.returncode == 0, r.stdout + r.stderr
        summary = (out / "summary.txt").read_text()
        assert "pendulum-cudagraphs: exit 0, " in summary, summary
        trains = [argv for argv in stub_calls(out) if argv[2:3] == ["train"]]
        assert len(trains) == 1, trains
        run_dirs.append(Path(trains[0][trains[0].index("--run-dir") + 1]))
    assert run_dirs[0] != run_dirs[1]
    for d in run_dirs:
        assert d.is_relative_to(tmp_path) and not d.exists(), d


def test_nothing_a_step_started_outlives_it(tmp_path):
    """timeout's SIGKILL reaches its own child only: a driver script's children (proxima train, the
    anchor), or anything a step left running, would hold the GPU through the later steps. Here the
    first step (doctor) leaves a process that ignores SIGTERM; it is gone once that step ends."""
    pidfile, ready = tmp_path / "left.pid", tmp_path / "left.ready"
    # the stub writes the pid it started ($!) itself, at once: a pid file written by the child could
    # be caught empty (truncated, not yet written) when a loaded machine is slow to start it and the
    # step's kill comes first; the ready file only makes the wait for the SIGTERM trap likely
    leave = (f'if [[ "$*" == *"proxima doctor"* ]]; then\n'
             f'  bash -c \'trap "" TERM; : > {ready}; exec sleep 60\' &\n'
             f'  echo $! > {pidfile}\n'
             f'  for _ in $(seq 80); do [[ -e {ready} ]] && break; sleep 0.1; done\n'
             f'fi\n')
    stub = STUB.replace('echo "stub:', leave + 'echo "stub:', 1)
    r, _ = run_session(tmp_path, stub=stub)
    assert r.returncode == 0, r.stdout + r.stderr
    pid = int(pidfile.read_text())
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1][0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z"), f"process {pid} left by a step is still running (state {state})"


def _state(pid: int) -> str:
    """The state letter of a process (Z: a zombie, dead), or "gone"."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1][0]
    except (FileNotFoundError, ProcessLookupError):
        return "gone"


def test_each_kill_layer_of_a_step_is_needed(tmp_path):
    """A step's two kill layers each reach what the other cannot: a process the step left in a session
    (so a process group) of its own, out of reach of the group kill, is killed by the sweep of its
    token; a process left in the step's group without the token is killed by the group kill. The
    stand-in records its own process group and the leftover's before the step ends, so the first
    leftover is known to be out of the group's reach (a setpgid could end up in the group anyway)."""
    py = shlex.quote(sys.executable)
    own, ready = tmp_path / "own.pid", tmp_path / "own.ready"
    grouped, groups = tmp_path / "grouped.pid", tmp_path / "groups"
    # `proxima doctor`, not *doctor*: the pytest-cuda step's argv holds tests/unit/test_doctor.py, and a second
    # leftover started there (not yet out of its group) would take the pid files' place
    leave = (f'if [[ "$*" == *"proxima doctor"* ]]; then\n'
             f'  {py} -c "import os, signal, time; os.setsid(); signal.signal(signal.SIGTERM, signal.SIG_IGN); '
             f'open({str(ready)!r}, \'w\').close(); time.sleep(60)" &\n'
             f'  echo $! > {own}\n'
             f'  env -u GPU_SESSION_STEP bash -c \'trap "" TERM; exec sleep 60\' &\n'
             f'  echo $! > {grouped}\n'
             f'  for _ in $(seq 200); do [[ -e {ready} ]] && break; sleep 0.05; done\n'
             f'  echo "$(awk \'{{print $5}}\' /proc/$$/stat) $(awk \'{{print $5}}\' /proc/$(cat {own})/stat)" > {groups}\n'
             f'fi\n')
    stub = STUB.replace('echo "stub:', leave + 'echo "stub:', 1)
    r, out = run_session(tmp_path, stub=stub)
    pids = [int(p.read_text()) for p in (own, grouped) if p.exists() and p.read_text().strip()]
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "doctor: exit 0, " in (out / "summary.txt").read_text()
        assert len(pids) == 2 and ready.exists(), "the stand-in did not leave its two processes"
        step_group, left_group = map(int, groups.read_text().split())
        assert left_group == pids[0] != step_group  # out of the group kill's reach, before the step ended
        for pid, layer in zip(pids, ("the token sweep", "the group kill")):
            state = _state(pid)
            assert state in ("gone", "Z"), f"process {pid} left by the doctor step outlived it ({layer}; state {state})"
    finally:
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
