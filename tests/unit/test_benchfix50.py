"""Review 50 of the benchmarks: the PureJaxRL comparison is reproducible from the repository (the
anchor ships in benchmarks/anchors/, `make jax-venv` makes its interpreter, a refusal names both),
every table names the commit it measured and its date's UTC offset, the A/B scripts say when their
rounds were starved of CPU, a --out in a missing folder is refused, and a value argparse rejects is
one line. Nothing here installs JAX or times anything."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.static.test_gpu_session import run_session, stub_calls
from tests.unit import test_benchmark_scripts
from tests.unit.test_benchmark_scripts import MODULES, boom, fake_python, run_main

import tables  # noqa: E402  (benchmarks/tables.py: on sys.path through test_benchmark_scripts)

ROOT = Path(__file__).resolve().parents[2]
#: the fixture under which no script may measure, build a Trainer or start a process (test_benchmark_scripts.py's)
no_work = test_benchmark_scripts.no_work
ANCHOR = ROOT / "benchmarks" / "anchors" / "purejaxrl_cartpole.py"
ANCHORS_README = ROOT / "benchmarks" / "anchors" / "README.md"
UPSTREAM_COMMIT = "31756b197773a52db763fdbe6d635e4b46522a73"


def pip_lines(text: str) -> list:
    """The `pip install ...` package lists of ``text``: [(options, packages)]."""
    return [tuple(m) for m in re.findall(r"pip install (?:--quiet )?((?:--no-deps )?)(\S+==[^\n;\\]*?)\s*(?:;|\\|\n|$)", text)]


# ------------------------------------------------------------------------------------ 1. the anchor in the repository
def test_the_purejaxrl_anchor_ships_with_its_source_licence_and_install_lines():
    header = ANCHOR.read_text().split('"""', 2)[1]
    assert f"https://github.com/luchris429/purejaxrl  commit {UPSTREAM_COMMIT}" in header
    assert "Apache-2.0" in header and "Changes from upstream" in header
    readme = ANCHORS_README.read_text()
    assert "Apache License 2.0" in readme and UPSTREAM_COMMIT in readme and "make jax-venv" in readme
    # the README's install lines are the ones `make jax-venv` runs
    makefile = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), "jax-venv", "JAX_VENV=/x"], capture_output=True,
                              text=True, timeout=60).stdout if shutil.which("make") else (ROOT / "Makefile").read_text()
    wanted = [("", "jax==0.11.2 flax optax chex numpy matplotlib seaborn"),
              ("--no-deps ", "gymnax==1.0.1 gymnasium==1.4.0 farama-notifications==0.0.4 six")]
    assert pip_lines(readme) == wanted and pip_lines(makefile) == wanted


def test_both_purejaxrl_scripts_default_to_the_repository_s_anchor():
    assert MODULES["vs_purejaxrl"].build_parser().parse_args([]).anchor == ANCHOR
    assert MODULES["population_vs_purejaxrl"].build_parser().parse_args([]).anchor == str(ANCHOR)
    assert MODULES["population_vs_purejaxrl"].build_parser().parse_args(["--anchor", ""]).anchor == ""  # Proxima only


def test_a_jax_python_without_jax_is_refused_with_make_jax_venv(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(MODULES["vs_purejaxrl"], "stream_json_lines", boom)  # nothing is measured
    no_jax = fake_python(tmp_path, "ModuleNotFoundError: No module named 'jax'", 1)
    out = tmp_path / "vs.md"
    code, _, err = run_main("vs_purejaxrl", ["--num-envs", "8", "--repeats", "1", "--jax-python", no_jax, "--out", str(out)], capsys)
    assert (code, err.splitlines()) == (2, [
        f"vs_purejaxrl.py: error: --jax-python {no_jax}: cannot import PureJaxRL's packages (ModuleNotFoundError: No module "
        "named 'jax'); install jax, chex, flax, optax, gymnax there, or run `make jax-venv` to make .jax-venv, the default "
        "--jax-python (benchmarks/anchors/README.md)"])
    assert not out.exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_jax_venv_refuses_an_interpreter_that_is_not_python_3_12(tmp_path):
    old = tmp_path / "python3.11"  # answers every question as a Python 3.11 would: not 3.12
    old.write_text("#!/bin/sh\nexit 1\n")
    old.chmod(0o755)
    venv = tmp_path / "jax-venv"
    r = subprocess.run(["make", "-s", "-C", str(ROOT), "jax-venv", f"JAX_PYTHON={old}", f"JAX_VENV={venv}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.splitlines()[0] == (f"make jax-venv: {old} does not run a Python 3.12, which JAX 0.11 needs: install "
                                        "one and name it: make jax-venv JAX_PYTHON=/path/to/python3.12")
    assert not venv.exists()


def test_the_gpu_session_runs_the_repository_s_anchor_before_a_carried_one(tmp_path):
    tree = tmp_path / "tree"
    (tree / "benchmarks" / "anchors").mkdir(parents=True)
    (tree / "benchmarks" / "anchors" / "purejaxrl_cartpole.py").write_text("# the repository's anchor\n")
    r, out = run_session(tmp_path)  # with a carried .anchors/purejaxrl_cartpole.py as well
    assert r.returncode == 0, r.stdout + r.stderr
    anchors = {argv[0]: argv[argv.index("--anchor") + 1] for argv in stub_calls(out) if "--anchor" in argv}
    assert anchors == {"benchmarks/vs_purejaxrl.py": "benchmarks/anchors/purejaxrl_cartpole.py",
                       "benchmarks/population_vs_purejaxrl.py": "benchmarks/anchors/purejaxrl_cartpole.py"}


# ------------------------------------------------------------------------------------ 2. the commit and the UTC offset
def test_a_table_names_the_commit_it_measured_and_its_date_s_utc_offset(monkeypatch, tmp_path, capsys):
    from proxima import train_state

    monkeypatch.setattr(train_state, "git_state", lambda: ("0123abc", True))
    monkeypatch.setattr(MODULES["hostmem"], "measure", lambda n, iters, keep: {"sps": 1000.0, "faults": 5.0})
    out = tmp_path / "hostmem.md"
    code, _, _ = run_main("hostmem", ["--repeats", "1", "--out", str(out)], capsys)
    line = next(x for x in out.read_text().splitlines() if x.startswith("CPU: "))
    assert code == 0
    assert re.search(r"; proxima \S+, git commit 0123abc with uncommitted changes; "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d[+-]\d\d:\d\d, load average \(1 min\)", line), line
    monkeypatch.setattr(train_state, "git_state", lambda: (None, None))  # an installed copy, no recorded commit
    line = tables.machine_line(1, tables.started())
    assert "git commit unknown (not a git checkout); " in line and "uncommitted" not in line


# ------------------------------------------------------------------------------------ 4. starved rounds
STARVED = "**Note: rounds starved of CPU: ratios unreliable.**"


def test_hostmem_says_when_its_processes_were_starved_of_cpu(monkeypatch, tmp_path, capsys):
    for cpu, noted in ((0.3, True), (1.0, False)):
        monkeypatch.setattr(MODULES["hostmem"], "measure",
                            lambda n, iters, keep: {"sps": 1000.0, "faults": 5.0, "cpu": cpu, "wall": 1.0})
        out = tmp_path / f"hostmem-{cpu}.md"
        code, _, _ = run_main("hostmem", ["--repeats", "1", "--out", str(out)], capsys)
        text = out.read_text()
        assert code == 0 and (STARVED in text) is noted, text
        if noted:
            assert "2 of 2 timed measurements got under 0.9 of a core per process (lowest 0.30)" in text


def test_mlp_kernel_says_when_its_windows_were_starved_of_cpu(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(time, "process_time", lambda: 0.0)  # the process got no CPU in any timed window
    out = tmp_path / "mlp.md"
    code, _, _ = run_main("mlp_kernel", ["--num-envs", "8", "--iterations", "1", "--rounds", "1", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0 and STARVED in text and "2 of 2 timed measurements" in text


def test_vs_revision_says_when_its_processes_were_starved_of_cpu(monkeypatch, tmp_path, capsys):
    mod = MODULES["vs_revision"]
    real = subprocess.run

    def sleeping_bench(tree, args, name=""):  # a process that waits instead of computing: under 0.9 of a core
        real([sys.executable, "-c", "import time; time.sleep(0.6)"], check=True)
        return 1000.0

    def git(cmd, *args, **kwargs):  # the worktree is not made: the measurement is a stand-in
        if list(cmd[:2]) == ["git", "rev-parse"] or list(cmd[:3]) == ["git", "--no-optional-locks", "status"]:
            return real(cmd, *args, **kwargs)  # questions: the commit measured, and the machine line's git_state
        assert list(cmd[:3]) in (["git", "worktree", "add"], ["git", "worktree", "remove"]), cmd
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(mod, "bench_sps", sleeping_bench)
    monkeypatch.setattr(subprocess, "run", git)
    out = tmp_path / "rev.md"
    code, _, _ = run_main("vs_revision", ["--rev", "HEAD", "--rounds", "1", "--seconds", "1", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0 and STARVED in text and "2 of 2 timed measurements" in text


# ------------------------------------------------------------------------------------ 7. --out in a missing folder
MISSING = [("hostmem", []), ("mlp_kernel", []), ("threads", []), ("vs_revision", ["--rev", "HEAD"]), ("vs_purejaxrl", []),
           ("accel", []), ("solve_time", []), ("distributed", []), ("population_speed", []), ("cpu_parts", []),
           ("population_vs_purejaxrl", []), ("sb3_compare", [])]


@pytest.mark.parametrize("name,argv", MISSING, ids=[m[0] for m in MISSING])
def test_an_out_in_a_missing_folder_is_refused_before_anything_runs(name, argv, tmp_path, capsys, no_work):
    out = tmp_path / "nope" / "x.md"
    code, _, err = run_main(name, [*argv, "--out", str(out)], capsys)
    assert (code, err.splitlines()) == (2, [
        f"{name}.py: error: --out {out}: folder {out.parent} does not exist; create it first (mkdir -p {out.parent}) "
        "or give a file in an existing folder"])
    assert not out.parent.exists()


# ------------------------------------------------------------------------------------ 9. one line for a bad value
BAD_VALUES = [("mlp_kernel", ["--num-envs", "abc"], "argument --num-envs: invalid int value: 'abc'"),
              ("hostmem", ["--iterations", "x"], "argument --iterations: invalid int value: 'x'"),
              ("vs_revision", ["--rev", "HEAD", "--rounds", "2.5"], "argument --rounds: invalid int value: '2.5'"),
              ("threads", ["--seconds", "soon"], "argument --seconds: invalid float value: 'soon'"),
              ("accel", ["--repeats", "abc"], "argument --repeats: invalid int value: 'abc'"),
              ("solve_time", ["--parallel", "two"], "argument --parallel: invalid int value: 'two'")]


@pytest.mark.parametrize("name,argv,message", BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_a_value_argparse_rejects_is_one_line_and_exit_2(name, argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        MODULES[name].main(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"{name}.py: error: {message} (see {name}.py --help)"]
