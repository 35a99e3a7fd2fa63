"""Review 50 of multi-process runs: a rank torchrun kills after its shutdown timeout is not blamed on the
out-of-memory killer, nor a rank that exited by itself said to have printed its error; a resumed module env
that does not import is refused once, before torchrun starts; --dry-run under a torchrun started by hand uses
the job's process count; ranks given other flags than rank 0 are warned about; a WORLD_SIZE left in the shell,
a --master-port in use, a resume of a live run with no checkpoint yet and `resume --nproc 0` are one line each."""

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from proxima import distributed, torchrun
from proxima.signals import TEARDOWN_ENV

REPO = Path(__file__).resolve().parents[2]
PROXIMA = [sys.executable, "-m", "proxima"]
TORCHRUN = [sys.executable, "-m", "proxima.torchrun"]
TINY = ["--num-envs", "4", "--num-steps", "32", "--total-timesteps", "2048"]

#: env H sleeps forever in step() on rank 1, env X ends rank 1 with os._exit(3), after 300 steps; S never fails
RENV = textwrap.dedent('''
    import os, time
    import gymnasium as gym
    import numpy as np

    class S(gym.Env):
        def __init__(self):
            self.observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
            self.action_space = gym.spaces.Discrete(2)
            self.t = self.n = 0
        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(3, np.float32), {}
        def fail(self):
            pass
        def step(self, a):
            self.t += 1
            self.n += 1
            if os.environ.get("RANK") == "1" and self.n > 300:
                self.fail()
            return np.zeros(3, np.float32), 1.0, self.t >= 20, False, {}

    class H(S):
        def fail(self):
            time.sleep(3600)

    class X(S):
        def fail(self):
            os._exit(3)
''')


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                        "GLOO_SOCKET_IFNAME", "PROXIMA_DIST_TIMEOUT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), **extra)
    return env


def _run(args, cwd, timeout=300, **extra):
    return subprocess.run(args, cwd=cwd, env=_env(**extra), capture_output=True, text=True, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _renv(tmp_path) -> Path:
    folder = tmp_path / "e"
    folder.mkdir()
    (folder / "renv.py").write_text(RENV)
    return folder


# --- 1: a rank that torchrun kills after its shutdown timeout -------------------------------------------
def test_a_sigkill_torchrun_sent_after_its_shutdown_timeout_is_named_so_without_the_oom_hint(capsys):
    failures = {0: SimpleNamespace(exitcode=1, pid=100), 1: SimpleNamespace(exitcode=-9, pid=101)}
    assert torchrun.child_failure_exit(failures, first=0, forced={101}) == 1
    assert capsys.readouterr().err == (
        "proxima: the job failed: rank 0 (first) exited 1; rank 1 was killed by torchrun after its shutdown timeout "
        "(it did not stop on SIGTERM); each rank's own lines above say why\n")
    # the rank that failed first keeps the out-of-memory hint: its SIGKILL came before any teardown
    assert torchrun.child_failure_exit(failures, first=1, forced={101}) == 1
    assert "rank 1 (first) was killed by SIGKILL (often the out-of-memory killer" in capsys.readouterr().err


def test_forced_kills_records_the_pids_torch_kills_with_sigkill_only():
    import signal

    seen = []
    close, forced = torchrun.forced_kills(lambda self, death_sig=None: seen.append(death_sig))
    close(SimpleNamespace(proc=SimpleNamespace(pid=7)), signal.SIGTERM)
    close(SimpleNamespace(proc=SimpleNamespace(pid=8)), death_sig=signal.SIGKILL)
    assert forced == {8} and seen == [signal.SIGTERM, signal.SIGKILL]


@pytest.mark.slow  # a multi-process job
def test_a_hung_rank_killed_at_torchruns_shutdown_timeout_reads_so_in_the_jobs_last_line(tmp_path):
    folder = _renv(tmp_path)
    out = _run([*PROXIMA, "train", "renv:H", "--nproc", "2", *TINY[:4], "--total-timesteps", "4096",
                "--run-dir", str(tmp_path / "rH")], folder, PROXIMA_DIST_TIMEOUT="5")
    assert out.returncode == 1, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last == ("proxima: the job failed: rank 0 (first) exited 1; rank 1 was killed by torchrun after its shutdown "
                    "timeout (it did not stop on SIGTERM); each rank's own lines above say why")
    assert "rank 1 did not reach the same collective within PROXIMA_DIST_TIMEOUT=5 s" in out.stderr


# --- 9: a rank that exits by itself, with a code Proxima never uses ---------------------------------------
def test_a_rank_that_exited_with_a_foreign_code_is_not_said_to_have_printed_its_error(capsys, tmp_path):
    failures = {1: SimpleNamespace(exitcode=3, pid=5), 0: SimpleNamespace(exitcode=1, pid=4)}
    assert torchrun.child_failure_exit(failures, first=1) == 1
    assert capsys.readouterr().err == (
        "proxima: the job failed: rank 1 (first) exited 3 without an error line from Proxima (its env or code ended the "
        "process: sys.exit or os._exit; anything it printed is above); rank 0 exited 1; each rank's own lines above say why\n")
    marker = tmp_path / "torn-down"
    marker.write_text("1 3\n")
    killed = distributed.killed_peers({TEARDOWN_ENV: str(marker), "RANK": "0", "LOCAL_RANK": "0"})
    assert killed == {1: 3}
    assert distributed.lost_contact_line(0, 2, "E", True, killed) == (
        "proxima: rank 0 stopped: lost contact with another rank (rank 1 exited 3 without an error line from Proxima "
        "(its env or code ended the process), and torchrun is ending the job): E")


@pytest.mark.slow  # a multi-process job
def test_a_rank_ended_by_os_exit_3_is_named_by_its_peer_and_the_last_line(tmp_path):
    folder = _renv(tmp_path)
    out = _run([*PROXIMA, "train", "renv:X", "--nproc", "2", *TINY[:4], "--total-timesteps", "4096",
                "--run-dir", str(tmp_path / "rX")], folder)
    assert out.returncode == 1, out.stderr
    assert ("proxima: rank 0 stopped: lost contact with another rank (rank 1 exited 3 without an error line from "
            "Proxima (its env or code ended the process), and torchrun is ending the job)") in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(
        "proxima: the job failed: rank 1 (first) exited 3 without an error line from Proxima")


# --- 2: a resumed module env that does not import here ------------------------------------------------------
@pytest.mark.slow  # a multi-process job
def test_resuming_a_module_env_run_from_another_folder_is_refused_once_before_torchrun(tmp_path):
    folder = _renv(tmp_path)
    run = tmp_path / "rS"
    out = _run([*PROXIMA, "train", "renv:S", "--nproc", "2", *TINY, "--run-dir", str(run)], folder)
    assert out.returncode == 0, out.stderr
    hint = (f"cannot import module 'renv' for env 'renv:S': No module named 'renv' here ({tmp_path}); the run was "
            f"trained in {folder}, which holds it: run this from there or name that folder (cd {folder}, or "
            f"PYTHONPATH={folder})")
    for args, prog in ((["resume", "--env", "renv:S", "rS", "--total-timesteps", "4096"], "proxima resume"),
                       (["train", "renv:S", "--resume", "rS", "--nproc", "2", "--total-timesteps", "4096"], "proxima train")):
        out = _run([*PROXIMA, *args], tmp_path)
        assert out.returncode == 2, out.stderr
        assert out.stderr.splitlines() == [f"{prog}: error: {hint}"]


# --- 3: --dry-run under a torchrun started by hand ------------------------------------------------------------
def test_dry_run_under_a_hand_started_torchrun_counts_its_processes_and_prints_once(tmp_path):
    hand = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "proxima",
            "train", "CartPole-v1", "--num-envs", "4", "--dry-run", "--total-timesteps"]
    out = _run([*hand, "2048"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("env_id: CartPole-v1") == 1
    assert "proxima: 2 processes x 4 envs x 128 steps = 1,024 steps per iteration, 2 iterations" in out.stderr
    out = _run([*hand, "768"], tmp_path)
    assert out.returncode != 0
    assert out.stderr.count("one batch (--num-envs 4 x --num-steps 128 x 2 processes = 1,024 steps) is larger than "
                            "--total-timesteps 768") == 1


# --- 4: ranks started with other flags ------------------------------------------------------------------------
def test_settings_differ_line_names_each_field_with_rank_0s_value_and_the_others():
    base = {"num_envs": 4, "update_epochs": 4, "seed": 1}
    assert distributed.settings_differ_line([base, dict(base)]) is None
    assert distributed.settings_differ_line(None) is None
    line = distributed.settings_differ_line([base, dict(base, num_envs=8, update_epochs=2), dict(base, num_envs=2)])
    assert line == ("proxima: warning: the ranks were not started with the same settings: --num-envs is 4 on rank 0 but "
                    "8 on rank 1 (and on 1 more rank); --update-epochs is 4 on rank 0 but 2 on rank 1; every rank trains "
                    "with rank 0's (start every rank with the same command)")


@pytest.mark.slow  # a multi-process job
def test_two_torchruns_with_other_flags_warn_once_on_rank_0_and_train_with_rank_0s(tmp_path):
    port = _free_port()
    common = [*TORCHRUN, "--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port",
              str(port)]
    run = str(tmp_path / "f4")
    node1 = subprocess.Popen([*common, "--node-rank", "1", "-m", "proxima", "train", "CartPole-v1", "--num-envs", "8",
                              "--num-steps", "32", "--update-epochs", "2", "--total-timesteps", "2048", "--run-dir", run],
                             cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        node0 = _run([*common, "--node-rank", "0", "-m", "proxima", "train", "CartPole-v1", *TINY, "--run-dir", run],
                     tmp_path)
        _, err1 = node1.communicate(timeout=120)
    finally:
        node1.kill()
    assert node0.returncode == 0 and node1.returncode == 0, node0.stderr + err1
    warning = ("proxima: warning: the ranks were not started with the same settings: --num-envs is 4 on rank 0 but 8 on "
               "rank 1; --update-epochs is 4 on rank 0 but 2 on rank 1; every rank trains with rank 0's (start every "
               "rank with the same command)")
    assert node0.stderr.count(warning) == 1 and "warning" not in err1
    assert json.loads((tmp_path / "f4" / "meta.json").read_text()).get("world_size") == 2


# --- 5: a WORLD_SIZE left in the shell ---------------------------------------------------------------------
STRAY = ("WORLD_SIZE=2 is set but this process was not started by torchrun (no MASTER_ADDR/MASTER_PORT): unset "
         "WORLD_SIZE and RANK (or use --nproc K to start K processes)")


def test_stray_world_size_is_only_a_world_size_no_launcher_set():
    assert distributed.stray_world_size({"WORLD_SIZE": "2", "RANK": "0"}) == STRAY
    assert distributed.stray_world_size({"WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x"}) is None
    assert distributed.stray_world_size({"WORLD_SIZE": "2", "MASTER_ADDR": "n0", "MASTER_PORT": "29500"}) is None
    assert distributed.stray_world_size({"WORLD_SIZE": "1"}) is None


def test_a_world_size_left_in_the_shell_is_one_line_not_a_failed_join(tmp_path):
    out = _run([*PROXIMA, "train", "CartPole-v1", *TINY, "--run-dir", str(tmp_path / "w")], tmp_path,
               WORLD_SIZE="2", RANK="0")
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [f"proxima train: error: {STRAY}"]
    assert not (tmp_path / "w").exists()


def test_nproc_under_a_world_size_left_in_the_shell_names_it_beside_a_launchers(tmp_path):
    # --nproc cannot tell a WORLD_SIZE and RANK left in the shell from a launcher that sets only those two
    out = _run([*PROXIMA, "train", "CartPole-v1", *TINY, "--run-dir", str(tmp_path / "w"), "--nproc", "2"], tmp_path,
               WORLD_SIZE="2", RANK="0")
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [
        "proxima train: error: --nproc: this process already runs under torchrun; drop --nproc, or, if WORLD_SIZE=2 was "
        "only left in the shell (MASTER_ADDR/MASTER_PORT, which torchrun sets, are not set), unset WORLD_SIZE and RANK"]


# --- 6: a --master-port in use -------------------------------------------------------------------------------
def test_a_master_port_in_use_is_one_line_not_torchs_traceback(tmp_path):
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        out = _run([*TORCHRUN, "--nproc-per-node", "2", "--master-port", str(port), "-m", "proxima", "train",
                    "CartPole-v1", *TINY, "--run-dir", str(tmp_path / "p")], tmp_path, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [f"proxima: port {port} on this machine is in use (another job?): pick another "
                                       "--master-port"]


# --- 7, 8: resume of a live run before its first checkpoint; resume --nproc 0 ---------------------------------
def test_resuming_a_live_run_without_a_checkpoint_says_it_is_in_use_first(tmp_path):
    run = tmp_path / "u3"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("config.yaml", "meta.json", "metrics.csv"):  # what a run writes before its first checkpoint
        (run / name).write_text("")
    since = "2026-12-08T00:00:00"
    (run / ".proxima.lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since}))
    in_use = (f"run {run} is in use by pid {os.getpid()} (since {since}); wait for it to finish or stop it (a lock left "
              f"by a process that is gone is taken over; {run / '.proxima.lock'})")
    out = _run([*PROXIMA, "resume", "u3", "--total-timesteps", "4096"], tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [f"proxima resume: error: {in_use}".replace(str(run), "u3")]
    out = _run([*PROXIMA, "eval", "u3"], tmp_path)  # eval reads the first checkpoint once written: told to wait for it
    assert "the run is in progress and has no checkpoint yet" in out.stderr


def test_resume_nproc_0_is_refused_as_train_refuses_it(tmp_path):
    out = _run([*PROXIMA, "train", "CartPole-v1", "--num-envs", "4", "--num-steps", "32", "--total-timesteps", "256",
                "--run-dir", "r1", "--quiet"], tmp_path)
    assert out.returncode == 0, out.stderr
    out = _run([*PROXIMA, "resume", "r1", "--nproc", "0"], tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == ["proxima resume: error: --nproc 0: must be at least 1"]
