"""Review 45 of distributed training and benchmarking on CPU, the fast parts (no rank is started):

1. a rank's DistributedDataParallel wrap keeps --compile's disk cache (~/.cache/proxima/inductor, what
   doctor and meta.json name): building DDP imports torch._dynamo, which set TORCHINDUCTOR_CACHE_DIR to
   torch's /tmp folder before accel could set it, so every --nproc --compile run compiled cold;
2. train's closing 'train on:' line names the stop line's command (train --resume RUN --nproc K for a
   run of more processes than CPUs, which `proxima resume` refuses; torchrun's for a multi-node run);
3. bench's line above the table says the threads as they ran (--threads 2 below 2,048 rows ran as 1);
4. bench --threads and train --nproc K --threads N note more threads than CPUs, once, as train does;
5. benchmarks/distributed.py's notes say the run's envs and all-reduces and link a file that exists;
6. `proxima resume RUN --nproc K` is taken when K is the run's own count, and another K is told it.

The multi-process runs are in tests/integration/test_dist_review45.py (slow tier)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import edit_checkpoint, one_error_line, run_main, tiny_cartpole_run
from distributed_helpers import record_launches

from proxima import cli, cpuinfo

ROOT = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------------------------ 1. the compile cache
#: a rank's setup in a fresh interpreter (torch._dynamo not yet imported): distributed.init on a gloo group
#: of one, then the DDP wrap of a context that trains distributed; prints the variable and meta.json's cache
RANK_SETUP = """
import dataclasses, json, os, sys
import torch
from proxima import distributed
from proxima.doctor import _compile_cache
ctx = dataclasses.replace(distributed.init(), world_size=2)
assert type(ctx.wrap(torch.nn.Linear(2, 2))).__name__ == "DistributedDataParallel"
print(json.dumps({"var": os.environ.get("TORCHINDUCTOR_CACHE_DIR"), "meta": _compile_cache()}))
"""


def _rank_setup(tmp_path, **extra) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path / "home"), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1",
               LOCAL_RANK="0", OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
               **extra)
    # a plain interpreter: the tests' warm Python server may hold modules this check needs unimported
    done = subprocess.run([sys.executable, "-c", RANK_SETUP], env=env, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_ranks_ddp_wrap_leaves_inductor_on_proximas_cache_dir(tmp_path):
    (tmp_path / "home").mkdir()
    got = _rank_setup(tmp_path)
    cache = str(tmp_path / "home" / ".cache" / "proxima" / "inductor")
    assert got["var"] == cache  # was /tmp/torchinductor_<user>: DDP's import of torch._dynamo set it first
    assert got["meta"] == f"{cache} (0.0 MiB)"  # meta.json's "cache", as proxima doctor names it


def test_a_users_own_inductor_cache_dir_is_kept_by_the_rank_setup(tmp_path):
    (tmp_path / "home").mkdir()
    mine = tmp_path / "mine"
    got = _rank_setup(tmp_path, TORCHINDUCTOR_CACHE_DIR=str(mine))
    assert got["var"] == str(mine) and got["meta"].startswith(f"{mine} (")


# ------------------------------------------------------------------------------------ 2. train on: the stop line's route
def _run_of(tmp_path, world: int, command: list) -> Path:
    run = tmp_path / "n3"
    run.mkdir()
    (run / "meta.json").write_text(json.dumps({"world_size": world, "command": command}))
    return run


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(cpuinfo, "usable_cpus", lambda root=None: 2)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


def test_train_on_after_an_nproc_run_beyond_the_cpus_is_the_stop_lines_train_resume_nproc(tmp_path, two_cpus, monkeypatch):
    from proxima.signals import checkpoint_line

    _run_of(tmp_path, 3, ["proxima", "train", "CartPole-v1", "--nproc", "3", "--run-dir", "n3"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "3")  # rank 0 of the job says the closing lines
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert cli.next_commands(Path("n3"), "CartPole-v1", 3072, 3072) == [
        "evaluate: proxima eval n3", "train on: proxima train --resume n3 --nproc 3 --total-timesteps 6144"]
    # was `proxima resume n3 --total-timesteps 6144`, which refuses the run; the stop line was right
    assert checkpoint_line(Path("n3", "checkpoints", "step_3072.pt")).endswith(
        "continue with: proxima train --resume n3 --nproc 3")


def test_train_on_after_a_multi_node_run_says_its_torchrun_command(tmp_path, two_cpus, monkeypatch):
    _run_of(tmp_path, 4, ["/x/proxima/__main__.py", "train", "CartPole-v1", "--run-dir", "n3"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two machines of 2
    assert cli.next_commands(Path("n3"), "CartPole-v1", 4096, 4096)[-1] == (
        "train on: proxima resume n3 --total-timesteps 8192, under the same torchrun command (4 processes)")


def test_train_on_within_the_cpus_stays_proxima_resume(tmp_path, two_cpus, monkeypatch):
    _run_of(tmp_path, 2, ["proxima", "train", "CartPole-v1", "--nproc", "2", "--run-dir", "n3"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert cli.next_commands(Path("n3"), "CartPole-v1", 2048, 2048)[-1] == "train on: proxima resume n3 --total-timesteps 4096"


def _launch(argv: list, monkeypatch, capsys) -> tuple:
    """run_main of a command that launches ranks: the launcher reads the typed words from sys.argv."""
    monkeypatch.setattr(sys, "argv", ["proxima", *argv])
    return run_main(argv, capsys)


# ------------------------------------------------------------------------------------ 3. and 4. bench's threads
BENCH = ["bench", "CartPole-v1", "--num-envs", "4", "--repeats", "1", "--seconds", "0.05", "--train-only", "--backend", "native"]


def test_bench_says_threads_2_below_2048_rows_ran_as_1_above_its_table(two_cpus, capsys):
    code, out, err = run_main([*BENCH, "--threads", "2"], capsys)
    assert code == 0, err
    # was "threads 2" with no mark, though --json said intra_op 1, paired false: the --out file's wording
    assert out.splitlines()[0] == ("CartPole-v1 on cpu: threads 1 (--threads 2: not paired, every batch below 2,048 rows: "
                                   "the same as --threads 1), amp none, compile off, cudagraphs off, backend native, train only")
    assert "more than" not in err  # 2 threads on 2 CPUs: no note


def test_bench_notes_more_threads_than_cpus_as_train_does(two_cpus, capsys):
    code, _, err = run_main([*BENCH, "--threads", "3"], capsys)
    assert code == 0, err
    note = ("note: --threads 3 is more than this machine's 2 CPUs: the threads take turns on them, which is usually "
            "slower than --threads 2")
    assert [line for line in err.splitlines() if "more than" in line] == [f"proxima bench: {note}"]
    code, _, err = run_main(["train", "CartPole-v1", "--threads", "3", "--total-timesteps", "64", "--num-envs", "4",
                             "--num-steps", "16", "--dry-run"], capsys)
    assert code == 0 and f"proxima: {note}" in err.splitlines(), err  # train's own, word for word


def test_train_nproc_notes_its_processes_threads_once_in_the_launcher(two_cpus, tmp_path, monkeypatch, capsys):
    started = record_launches(monkeypatch)  # the launcher's checks run; no rank starts
    monkeypatch.chdir(tmp_path)
    code, _, err = _launch(["train", "CartPole-v1", "--nproc", "2", "--threads", "2", "--total-timesteps", "1024",
                            "--num-envs", "4", "--num-steps", "16", "--run-dir", "r"], monkeypatch, capsys)
    assert code == 0 and len(started) == 1, err
    assert [line for line in err.splitlines() if "more than" in line] == [
        "proxima: note: --threads 2 in each of 2 processes (4 threads) is more than this machine's 2 CPUs: the threads "
        "take turns on them, which is usually slower than --threads 1"]
    code, _, err = _launch(["train", "CartPole-v1", "--nproc", "2", "--threads", "2", "--total-timesteps", "1024",
                            "--num-envs", "4", "--num-steps", "16", "--run-dir", "q", "--quiet"], monkeypatch, capsys)
    assert code == 0 and "more than" not in err, err  # an advisory note: --quiet drops it


def test_the_ranks_leave_the_threads_note_to_the_launcher_and_torchrun_counts_its_processes(two_cpus, monkeypatch, capsys):
    from proxima.config import PPOConfig
    from proxima.launch import COMMAND_ENV
    from proxima.trainer import _note_threads

    cfg = PPOConfig(env_id="CartPole-v1", threads=3)
    monkeypatch.setenv(COMMAND_ENV, json.dumps(["proxima", "train", "--nproc", "2"]))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    _note_threads(cfg)
    assert capsys.readouterr().err == ""  # rank 0 of --nproc: the launcher said it
    monkeypatch.delenv(COMMAND_ENV)  # a torchrun typed by hand: rank 0 says it for this machine's processes
    _note_threads(PPOConfig(env_id="CartPole-v1", threads=2))
    assert capsys.readouterr().err == ("proxima: note: --threads 2 in each of 2 processes (4 threads) is more than this "
                                       "machine's 2 CPUs: the threads take turns on them, which is usually slower than "
                                       "--threads 1\n")


# ------------------------------------------------------------------------------------ 5. benchmarks/distributed.py
def test_distributed_benchmark_notes_say_the_runs_envs_and_all_reduces(monkeypatch, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import distributed
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    from proxima.config import PPOConfig

    monkeypatch.setattr(distributed, "run_once", lambda p, f, w, t: {"procs": p, "sps": 100.0, "wall": 1.0, "load": 1.0,
                                                                      "share": 1.0})
    assert distributed.main(["--procs", "1,2", "--repeats", "1", "--num-envs", "8"]) == 0
    out = capsys.readouterr().out
    assert "(its own 8 envs, its own update)" in out and "its own 64 envs" not in out
    assert "once per minibatch: 16 times an iteration, 4 epochs x 4 minibatches)" in out
    assert "(see benchmarks/results/learning.md and" in out and (ROOT / "benchmarks" / "results" / "learning.md").is_file()
    results = [{"procs": 1, "load": 0.5}]
    text = "\n".join(distributed.notes(results, {"usable": 2}, PPOConfig(num_envs=8, update_epochs=3, num_minibatches=2)))
    assert "once per minibatch: 6 times an iteration, 3 epochs x 2 minibatches)" in text  # not a fixed 16


# ------------------------------------------------------------------------------------ 6. resume --nproc K
@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    return tiny_cartpole_run(tmp_path_factory, "review45")


@pytest.fixture
def run_of_two(finished, tmp_path, monkeypatch):
    """A copy of the finished run whose checkpoint says 2 processes wrote it, in the working directory."""
    copy = tmp_path / "r1"
    shutil.copytree(finished, copy)
    from proxima.distributed import RANK_KEYS

    # as 2 processes of 4 envs would have written it: one iteration of 128 steps, each rank's own pieces
    edit_checkpoint(copy, lambda state: state.update(world_size=2, iteration=1,
                                                     ranks=[{k: state[k] for k in RANK_KEYS} for _ in range(2)]))
    meta = json.loads((copy / "meta.json").read_text())
    meta.update(world_size=2, command=["proxima", "train", "CartPole-v1", "--nproc", "2", "--run-dir", "r1"])
    (copy / "meta.json").write_text(json.dumps(meta))
    monkeypatch.chdir(tmp_path)
    return copy


@pytest.mark.parametrize("flag", [["--nproc", "2"], ["--nproc=2"]])
def test_resume_takes_nproc_equal_to_the_runs_own_count(run_of_two, two_cpus, monkeypatch, capsys, flag):
    started = record_launches(monkeypatch)
    code, _, err = _launch(["resume", "r1", *flag, "--total-timesteps", "256"], monkeypatch, capsys)
    assert code == 0 and len(started) == 1, err  # was refused: "--nproc: proxima resume starts as many processes ..."
    cmd = started[0]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2"
    assert cmd[-4:] == ["resume", "r1", "--total-timesteps", "256"]  # the ranks' own command: no --nproc


def test_resume_nproc_beyond_the_cpus_starts_the_runs_count_as_train_resume_nproc_does(run_of_two, monkeypatch, capsys):
    monkeypatch.setattr(cpuinfo, "usable_cpus", lambda root=None: 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    started = record_launches(monkeypatch)
    code, _, err = _launch(["resume", "r1", "--total-timesteps", "256"], monkeypatch, capsys)
    assert code == 2 and started == []  # a count read from a file starts no more processes than CPUs
    # the command typed, with the count: a typed one is the user's
    command = one_error_line(err, "proxima resume").rpartition("to run 2 here anyway: ")[2]
    assert command == "proxima resume r1 --total-timesteps 256 --nproc 2"
    code, _, err = _launch(shlex.split(command)[1:], monkeypatch, capsys)
    assert code == 0 and len(started) == 1, err


@pytest.mark.parametrize("count", ["3", "1"])
def test_resume_nproc_other_than_the_runs_count_names_the_runs_count(run_of_two, two_cpus, monkeypatch, capsys, count):
    started = record_launches(monkeypatch)
    code, out, err = _launch(["resume", "r1", "--nproc", count, "--total-timesteps", "256"], monkeypatch, capsys)
    assert (code, out, started) == (2, "", [])
    assert one_error_line(err, "proxima resume") == (
        f"--nproc {count}: r1 was written by 2 process(es), and its resume needs as many; give --nproc 2, or drop "
        "--nproc (proxima resume reads the count from the checkpoint); to continue with another count, start a new run "
        f"from its weights: proxima train CartPole-v1 --init-from r1{'' if count == '1' else ' --nproc ' + count} (its "
        "weights and --norm-obs statistics only: a fresh optimizer, learning-rate schedule and counters)")


def test_resume_nproc_of_a_one_process_run_is_1_or_told_1(finished, monkeypatch, capsys):
    code, _, err = run_main(["resume", str(finished), "--nproc", "2", "--total-timesteps", "256"], capsys)
    assert code == 2 and one_error_line(err, "proxima resume").startswith(f"--nproc 2: {finished} was written by 1 process(es)")
    code, _, err = run_main(["resume", str(finished), "--nproc", "1"], capsys)  # complete already: trains nothing
    assert code == 0, err
