"""Mutation tests of review 50's benchmark and bench changes (f3034f0, 5e5b079): what the existing tests
(test_benchfix50.py, test_benchcli50.py, test_benchmark_scripts.py) let through. A --out under a folder
that is missing is named as missing even where its nearest existing folder is not writable (as proxima
bench says it); the scripts' flags are never abbreviated; a naive start time still gets its UTC offset;
a measurement without CPU seconds is not counted as starved, and the shares are CPU over wall of the
timed part only (hostmem's child, mlp_kernel's windows, vs_revision's child processes with their system
time); --anchor's default is the repository's copy, then the first that exists; a missing --anchor is one
line; make jax-venv refuses a Python newer than 3.12 too; a row of a size not measured carries no
(paired) mark; train's small-batch note is not drawn for a paired agent's halved threads and names
PPOConfig's field for a Python caller; --help says what several threads do on small batches."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

import proxima
from proxima import bench, cpuinfo
from proxima.config import PPOConfig
from tests.cli_helpers import run_main as run_cli
from tests.unit import test_benchmark_scripts
from tests.unit.test_benchmark_scripts import MODULES, run_main

import tables  # noqa: E402  (benchmarks/tables.py: on sys.path through test_benchmark_scripts)

ROOT = Path(__file__).resolve().parents[2]
no_work = test_benchmark_scripts.no_work  # fixture: nothing measured, no Trainer, no process but git's questions
STARVED = "**Note: rounds starved of CPU: ratios unreliable.**"
REPO_ANCHOR = ROOT / "benchmarks" / "anchors" / "purejaxrl_cartpole.py"


@pytest.fixture
def two_cpus(monkeypatch):
    """A 2-CPU machine: --threads 2 draws no note on more threads than CPUs."""
    monkeypatch.setattr(cpuinfo, "usable_cpus", lambda root=None: 2)


# ------------------------------------------------------------------------------------ --out, flags, the date
def test_a_missing_folder_is_named_before_an_unwritable_ancestor_as_proxima_bench_names_it():
    # /proc/nope: missing, and /proc takes no file; the fix to make first is the missing folder
    assert tables.out_problem("--out", "/proc/nope/x.md") == (
        "--out /proc/nope/x.md: folder /proc/nope does not exist; create it first (mkdir -p /proc/nope) or give a "
        "file in an existing folder")


def test_a_script_s_flag_is_never_abbreviated(capsys, no_work):
    with pytest.raises(SystemExit) as e:
        MODULES["mlp_kernel"].main(["--round", "3"])  # not --rounds
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "mlp_kernel.py: error: unrecognized arguments: --round 3 (see mlp_kernel.py --help)"]


def test_a_start_time_carries_its_utc_offset_naive_or_not():
    when, _ = tables.started()
    assert when.utcoffset() is not None  # what accel.py and population_speed.py print as start[0] too
    local = datetime(2026, 12, 8, 9, 30).astimezone()
    offset = local.isoformat()[-6:]  # +HH:MM
    line = tables.machine_line(1, (datetime(2026, 12, 8, 9, 30), 0.5))  # a caller's own naive local time
    assert f"; 2026-12-08 09:30{offset}, load average (1 min) 0.50 at start, " in line, line


# ------------------------------------------------------------------------------------ starved rounds
def test_hostmem_counts_no_result_without_cpu_seconds_as_starved(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(MODULES["hostmem"], "measure", lambda n, iters, keep: {"sps": 1000.0, "faults": 5.0})
    out = tmp_path / "hostmem.md"
    code, _, _ = run_main("hostmem", ["--repeats", "1", "--out", str(out)], capsys)
    assert code == 0 and STARVED not in out.read_text()


def test_hostmem_s_child_reports_the_cpu_and_wall_seconds_of_its_timed_iterations_only():
    got = MODULES["hostmem"].measure(8, 1, True)  # one child process: a Trainer at 8 envs, one timed iteration
    assert got["sps"] > 0 and got["wall"] > 0
    # a single-threaded process: at most about a core over the timed part (its start-up is minutes of CPU
    # seconds too many on none of them)
    assert 0 < got["cpu"] <= got["wall"] * 1.5 + 0.05, got


def test_mlp_kernel_measures_each_window_s_own_cpu_seconds(monkeypatch, tmp_path, capsys):
    clock = itertools.count(1000.0, 1e-6)  # a process already 1,000 CPU seconds old that got none in the windows
    monkeypatch.setattr(time, "process_time", lambda: next(clock))
    out = tmp_path / "mlp.md"
    code, _, _ = run_main("mlp_kernel", ["--num-envs", "8", "--iterations", "1", "--rounds", "1", "--out", str(out)], capsys)
    assert code == 0 and STARVED in out.read_text()


class Usage:
    """resource.getrusage's stand-in: RUSAGE_CHILDREN's user/system seconds from ``children``, in turn."""

    def __init__(self, children):
        self.children = iter(children)

    def __call__(self, who):
        import resource

        if who != resource.RUSAGE_CHILDREN:
            return SimpleNamespace(ru_utime=500.0, ru_stime=500.0)  # this process's own: not the child's
        user, system = next(self.children)
        return SimpleNamespace(ru_utime=user, ru_stime=system)


def test_vs_revision_s_share_is_its_child_s_user_and_system_seconds_over_the_wall(monkeypatch):
    mod = MODULES["vs_revision"]
    wall = iter([10.0, 12.0])  # 2 s of wall time
    monkeypatch.setattr(mod, "time", SimpleNamespace(perf_counter=lambda: next(wall)))
    monkeypatch.setattr(mod.resource, "getrusage", Usage([(1.0, 1.0), (1.6, 2.2)]))  # 0.6 s user + 1.2 s system
    monkeypatch.setattr(mod, "bench_sps", lambda tree, args, name="": 1234.0)
    sps, share = mod.timed_bench(ROOT, SimpleNamespace(), "this tree")
    assert sps == 1234.0 and share == pytest.approx(0.9)


def test_vs_revision_s_share_is_unknown_when_no_process_ran(monkeypatch):
    mod = MODULES["vs_revision"]
    monkeypatch.setattr(mod.resource, "getrusage", Usage([(1.0, 1.0), (1.0, 1.0)]))  # a stand-in: no child ran
    monkeypatch.setattr(mod, "bench_sps", lambda tree, args, name="": 1234.0)
    sps, share = mod.timed_bench(ROOT, SimpleNamespace(), "this tree")
    assert sps == 1234.0 and share != share  # nan: not counted as starved (tables.starved_note)


# ------------------------------------------------------------------------------------ the PureJaxRL anchor
def test_the_repository_s_anchor_is_looked_for_before_a_carried_copy():
    anchors = MODULES["vs_purejaxrl"].ANCHORS
    assert anchors[0] == REPO_ANCHOR
    assert anchors.index(ROOT / ".anchors" / "purejaxrl_cartpole.py") < anchors.index(
        ROOT.parent / "shared" / "anchors" / "purejaxrl_cartpole.py")


def test_the_default_anchor_is_the_first_that_exists_else_the_repository_s_name(monkeypatch, tmp_path):
    mod = MODULES["vs_purejaxrl"]
    first, second, third = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    third.write_text("# a carried copy\n")
    monkeypatch.setattr(mod, "ANCHORS", (first, second, third))
    assert mod.default_anchor() == third
    third.unlink()
    assert mod.default_anchor() == first  # none: the refusal names where the repository keeps it


def test_a_missing_anchor_is_one_line_naming_the_repository_s(tmp_path, capsys, no_work):
    missing = tmp_path / "nope.py"
    code, _, err = run_main("vs_purejaxrl", ["--anchor", str(missing), "--num-envs", "8", "--repeats", "1"], capsys)
    assert (code, err.splitlines()) == (2, [
        f"vs_purejaxrl.py: error: --anchor {missing}: no PureJaxRL anchor there; give the file, the repository's is "
        "benchmarks/anchors/purejaxrl_cartpole.py"])


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_jax_venv_refuses_a_python_newer_than_3_12(tmp_path):
    newer = tmp_path / "python3.13"  # runs the check's code as a Python 3.13 would; anything else fails
    newer.write_text(f"#!/bin/sh\n[ \"$1\" = -c ] || exit 1\nexec {sys.executable} -c "
                     "\"import sys, types; code = sys.argv[1].replace('import sys; ', ''); "
                     "exec(code, {'sys': types.SimpleNamespace(version_info=(3, 13, 0), exit=sys.exit)})\" \"$2\"\n")
    newer.chmod(0o755)
    venv = tmp_path / "jax-venv"
    r = subprocess.run(["make", "-s", "-C", str(ROOT), "jax-venv", f"JAX_PYTHON={newer}", f"JAX_VENV={venv}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.splitlines()[0] == (f"make jax-venv: {newer} does not run a Python 3.12, which JAX 0.11 needs: "
                                        "install one and name it: make jax-venv JAX_PYTHON=/path/to/python3.12"), r.stderr
    assert not venv.exists()


# ------------------------------------------------------------------------------------ bench's (paired) marks
def test_a_row_of_a_size_not_measured_carries_no_paired_mark():
    lines = [bench.Line("native", 4, intra_op=1, paired=False), bench.Line("gymnasium", 4, skipped="over --max-gym-envs"),
             bench.Line("native", 64, intra_op=1, paired=True)]
    assert [row[1] for row in bench.table_rows(lines)] == ["4 (not paired)", "4", "64 (paired)"]
    alike = [bench.Line("native", 4, intra_op=1, paired=False), bench.Line("gymnasium", 4, skipped="over --max-gym-envs")]
    assert [row[1] for row in bench.table_rows(alike)] == ["4", "4"]  # one way of running: the threads line says it


def test_the_threads_line_names_two_sizes_of_one_way_with_and():
    lines = [bench.Line("native", n, intra_op=1, paired=n >= 64) for n in (4, 8, 64)]
    assert bench.threads_text(lines, 2) == (
        "1 (--threads 2: not paired, every batch below 2,048 rows: the same as --threads 1) at 4 and 8 envs; "
        "1 each on two threads, actor and critic side by side for batches of 2,048+ rows (--threads 2) at 64 envs")


# ------------------------------------------------------------------------------------ train's small-batch note
def test_train_notes_no_small_batches_for_a_paired_agent_s_halved_threads(two_cpus, tmp_path, capsys):
    # CartPole at --threads 2: a side thread with 1 intra-op thread each, no batch reaching 2,048 rows
    code, _, err = run_cli(["train", "CartPole-v1", "--num-envs", "2", "--num-steps", "16", "--total-timesteps", "32",
                            "--update-epochs", "1", "--num-minibatches", "2", "--threads", "2", "--eval-episodes", "0",
                            "--no-plot", "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "--threads" in line]
    assert notes and not [line for line in notes if "intra-op threads on every batch" in line], err


def test_a_python_caller_s_small_batch_note_names_ppoconfig_s_field(two_cpus, tmp_path, capsys):
    cfg = PPOConfig(env_id="Pendulum-v1", num_envs=2, num_steps=16, total_timesteps=32, update_epochs=1, num_minibatches=2,
                    threads=2, eval_episodes=0, plot=False)
    proxima.train(cfg, run_dir=str(tmp_path / "run"))
    notes = [line for line in capsys.readouterr().err.splitlines() if "intra-op threads on every batch" in line]
    assert len(notes) == 1 and notes[0].startswith("proxima: note: PPOConfig.threads=2: 2 intra-op threads "), notes


def test_help_says_several_threads_can_be_far_slower_on_small_batches(capsys):
    code, out, _ = run_cli(["train", "--help"], capsys)
    text = " ".join(out.split())
    assert code == 0
    assert ("other agents use them as torch intra-op threads, which on small batches can be tens of times slower than "
            "1 thread when other processes share the cores (train and bench say so in a note)") in text
