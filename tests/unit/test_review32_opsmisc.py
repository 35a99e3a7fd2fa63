"""Review 32: what the --nproc launcher, proxima.torchrun, doctor and SharedChange promise, each asserted
where a mutation left it untested: the failure line, exit codes after signals, the recorded command,
the lock's launcher note, doctor's hints and values, one change made once across threads."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from proxima import doctor, launch, rundir, torchrun
from proxima.diskspace import StorageError
from proxima.shared_change import SharedChange
from tests.cli_helpers import error_line, run_main

ARGV = ["train", "CartPole-v1", "--nproc", "2"]


# --- proxima.torchrun: the one line for failed ranks ---------------------------------------------------------------


def failures(**codes) -> dict:
    """{rank: a torchrun ProcessFailure stand-in} from keyword ``r<rank>=exitcode``."""
    return {int(k[1:]): SimpleNamespace(exitcode=v) for k, v in codes.items()}


def failure_line(capsys, fails: dict, first) -> str:
    assert torchrun.child_failure_exit(fails, first) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_the_failure_line_names_the_first_failed_rank_first(capsys):
    assert failure_line(capsys, failures(r0=1, r1=1), first=1) == (
        "proxima: the job failed: ranks 1 (first), 0 exited 1; each rank's own lines above say why")


def test_a_rank_ended_by_a_signal_is_said_killed_by_it_not_exited_negative(capsys):
    assert failure_line(capsys, failures(r0=-9, r1=1), first=0) == (
        "proxima: the job failed: rank 0 (first) was killed by SIGKILL (often the out-of-memory killer: check dmesg or the "
        "job's memory limit; it printed nothing); rank 1 exited 1; each rank's own lines above say why")
    # a number no signal has: named by its number
    assert "rank 0 (first) was killed by signal 200; rank 1 exited 1;" in failure_line(capsys, failures(r0=-200, r1=1), first=0)


def test_a_long_list_of_failed_ranks_shows_eight_and_counts_the_rest(capsys):
    line = failure_line(capsys, failures(**{f"r{i}": 1 for i in range(10)}), first=0)
    assert "ranks 0 (first), 1, 2, 3, 4, 5, 6, 7 and 2 more exited 1;" in line
    assert ", 8" not in line and "9" not in line


# --- launch_torchrun: exit codes, signals, the child's environment -------------------------------------------------


def fake_torchrun(monkeypatch, code: int, during_wait=()) -> dict:
    """launch's Popen replaced by a torchrun that, while the launcher waits, has the launcher's installed
    handler take each signal of ``during_wait``, then exits ``code``; launch's checks skipped (tested
    elsewhere). Returns {cmd, env, sent: signals sent to torchrun}."""
    calls: dict = {"sent": []}

    class Fake:
        pid = 4242

        def __init__(self, cmd, env=None, **kw):
            calls["cmd"], calls["env"] = cmd, env

        def wait(self):
            for sig in during_wait:
                signal.getsignal(sig)(sig, None)
            return code

        def poll(self):
            return code

        def send_signal(self, sig):
            calls["sent"].append(sig)

    monkeypatch.setattr(launch, "_check", lambda nproc, argv: None)
    monkeypatch.setattr(launch, "subprocess", SimpleNamespace(Popen=Fake))
    return calls


def test_torchrun_killed_by_a_signal_gives_128_plus_its_number(monkeypatch):
    fake_torchrun(monkeypatch, -signal.SIGKILL)
    assert launch.launch_torchrun(2, ARGV) == 137


def test_a_run_that_finished_cleanly_despite_a_late_ctrl_c_exits_0(monkeypatch):
    calls = fake_torchrun(monkeypatch, 0, during_wait=[signal.SIGINT])
    assert launch.launch_torchrun(2, ARGV) == 0
    assert calls["sent"] == [signal.SIGINT]


def test_a_stopped_run_exits_with_the_first_signal_it_got(monkeypatch):
    fake_torchrun(monkeypatch, 1, during_wait=[signal.SIGTERM, signal.SIGINT])
    monkeypatch.setattr(launch, "_child_pids", lambda pid: [])
    assert launch.launch_torchrun(2, ARGV) == 128 + signal.SIGTERM


def test_a_second_signal_goes_to_the_ranks_not_to_torchrun_again(monkeypatch):
    calls = fake_torchrun(monkeypatch, 1, during_wait=[signal.SIGINT, signal.SIGINT])
    monkeypatch.setattr(launch, "_child_pids", lambda pid: [101, 102] if pid == 4242 else [])
    killed = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append((pid, sig)))
    assert launch.launch_torchrun(2, ARGV) == 130
    assert calls["sent"] == [signal.SIGINT]
    assert killed == [(101, signal.SIGINT), (102, signal.SIGINT)]


def test_meta_json_records_the_command_the_user_typed_with_nproc(monkeypatch):
    calls = fake_torchrun(monkeypatch, 0)
    argv = ["train", "CartPole-v1", "--nproc", "2", "--seed", "3"]
    assert launch.launch_torchrun(2, argv) == 0
    assert json.loads(calls["env"][launch.COMMAND_ENV])[1:] == argv
    assert "--nproc" not in calls["cmd"]  # the ranks themselves never launch again


def test_the_ranks_get_one_omp_thread_unless_the_user_set_it(monkeypatch):
    calls = fake_torchrun(monkeypatch, 0)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    launch.launch_torchrun(2, ARGV)
    assert calls["env"]["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    launch.launch_torchrun(2, ARGV)
    assert calls["env"]["OMP_NUM_THREADS"] == "3"


def test_arguments_after_a_double_dash_pass_through_untouched():
    argv = ["train", "X", "--nproc", "2", "--", "--nproc", "2", "--nproc=3"]
    assert launch.strip_nproc(argv) == ["train", "X", "--", "--nproc", "2", "--nproc=3"]


def test_nproc_is_refused_under_a_launcher_that_sets_only_world_size_and_rank(monkeypatch, capsys):
    def refuse(*a, **k):
        raise AssertionError("the launcher started torchrun under another launcher")

    monkeypatch.setattr(launch, "subprocess", SimpleNamespace(Popen=refuse))
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    code, _, err = run_main(ARGV, capsys)
    error_line(code, err, "--nproc: this process already runs under torchrun; drop --nproc")


# --- the launcher's checks of the run directory -----------------------------------------------------------------


@pytest.mark.parametrize("flags, why", [(os.ST_RDONLY, "Read-only file system"), (0, "Permission denied")])
def test_a_run_folder_not_writable_says_whether_it_is_read_only(monkeypatch, tmp_path, flags, why):
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_flag=flags))
    with pytest.raises(StorageError) as e:
        launch._check_writable(tmp_path / "run")
    assert str(e.value) == f"--run-dir {tmp_path / 'run'}: cannot create it ({why} in {tmp_path}); choose another --run-dir"


def fake_proc(monkeypatch, procs: dict) -> None:
    """/proc as launch reads it: {pid: (stat line, cmdline bytes)}; rank 0 (pid 100) holds the lock and runs."""

    class FakePath:
        def __init__(self, path):
            _, _, pid, self.what = str(path).split("/")
            self.pid = int(pid)

        def read_text(self):
            return procs[self.pid][0]

        def read_bytes(self):
            if self.pid not in procs:
                raise FileNotFoundError(str(self.pid))
            return procs[self.pid][1]

    monkeypatch.setattr(launch, "Path", FakePath)
    monkeypatch.setattr(rundir, "read_lock", lambda run_dir: {"pid": 100})
    monkeypatch.setattr(rundir, "holder_alive", lambda info: True)


LAUNCHER = (b"/venv/bin/python\0/venv/bin/proxima\0train\0CartPole-v1\0--nproc\0002\0", "300 (proxima) S 1 1")
TORCHRUN = b"/venv/bin/python\0-m\0proxima.torchrun\0--nproc-per-node\0002\0"


def test_the_lock_of_a_nproc_run_names_its_launcher_even_with_parentheses_in_the_rank_name(monkeypatch):
    # the process name ("comm") may hold ")": the parent pid is read after the last one
    fake_proc(monkeypatch, {100: ("100 (pt (a) 9) S 200 100 100", b"python\0-m\0proxima\0"),
                            200: ("200 (python) S 300 300 300", TORCHRUN), 300: (LAUNCHER[1], LAUNCHER[0])})
    assert launch._launcher_note(os.devnull) == (
        "; pid 100 is rank 0 of a --nproc run: stop that run by signalling its launcher, pid 300 "
        "(kill -INT 300: every rank checkpoints and stops)")


def test_a_torchrun_started_by_hand_is_the_one_to_signal(monkeypatch):
    fake_proc(monkeypatch, {100: ("100 (python) S 200 100 100", b""), 200: ("200 (python) S 300 300 300", TORCHRUN),
                            300: ("300 (bash) S 1 1", b"-bash\0")})
    assert launch._launcher_note(os.devnull) == (
        "; pid 100 is rank 0 of a multi-process run: stop the run by signalling its torchrun, pid 200")


def test_a_lock_held_by_a_plain_process_gets_no_rank_note(monkeypatch):
    fake_proc(monkeypatch, {100: ("100 (python) S 200 100 100", b""),
                            200: ("200 (python) S 300 300 300", b"/usr/bin/python\0my_script.py\0"),
                            300: (LAUNCHER[1], LAUNCHER[0])})
    assert launch._launcher_note(os.devnull) == ""


# --- doctor ----------------------------------------------------------------------------------------------------------


@pytest.fixture
def no_cuda(monkeypatch):
    """doctor as on a machine without a usable GPU, whatever this one has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_doctor_hints_the_pinned_torch_only_when_another_is_installed(monkeypatch, no_cuda):
    monkeypatch.setattr(doctor, "nvidia_visible", lambda: True)  # a GPU machine: PyPI's torch (test_install49: CPU ones)
    monkeypatch.setattr(torch, "__version__", "2.0.0")
    hint = f"torch 2.0.0 differs from the pinned torch=={doctor.TORCH_PIN}: {doctor.pip()} install torch=={doctor.TORCH_PIN}"
    assert hint in doctor.collect()["hints"]
    monkeypatch.setattr(torch, "__version__", doctor.TORCH_PIN + "+cpu")  # a local build tag is the same torch
    assert not [h for h in doctor.collect()["hints"] if "differs from the pinned" in h]


def test_doctor_hints_nccl_only_where_cuda_is_usable(monkeypatch, no_cuda):
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: False)
    info = doctor.collect()
    assert info["cuda_usable"] is False
    assert not [h for h in info["hints"] if h.startswith("NCCL backend")], info["hints"]


def test_doctor_reports_the_drivers_cuda_version(monkeypatch):
    from proxima import device

    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(device, "cuda_op_problem", lambda dev=None: "")
    monkeypatch.setattr(torch._C, "_cuda_getDriverVersion", lambda: 12040, raising=False)
    info = doctor.collect()
    assert info["cuda_driver"] == "12.4"
    assert "12.4 (driver supports 12.4)" in doctor.format_report(info)


def test_a_torch_that_does_not_import_is_one_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    monkeypatch.setattr(doctor, "nvidia_visible", lambda: True)  # a GPU machine: PyPI's torch (test_install49: CPU ones)
    monkeypatch.setattr(doctor, "_pkg_version", lambda name, real=doctor._pkg_version: None if name == "torch" else real(name))
    info = doctor.collect()
    assert info["torch"] is None
    about = [h for h in info["hints"] if "import of torch halted" in h]
    assert about == ["torch not importable (ModuleNotFoundError: import of torch halted; None in sys.modules): "
                     f"{doctor.pip()} install torch=={doctor.TORCH_PIN}"], info["hints"]


def test_ctrl_c_during_a_probe_stops_doctor():
    errors: dict = {}

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        doctor._probe(errors, "x", interrupted)
    assert errors == {}


def test_require_cuda_says_torch_does_not_import_when_that_is_why(monkeypatch, capsys):
    hint = f"torch not importable (ImportError: libcudnn.so.9 missing): {doctor.pip()} install torch=={doctor.TORCH_PIN}"
    assert doctor.cuda_reason({"cuda_usable": False, "hints": ["mujoco not installed: ...", hint]}) == hint
    monkeypatch.setattr(doctor, "collect", lambda: {"cuda_usable": False, "hints": [hint]})
    assert doctor.run(argparse.Namespace(json=False, require_cuda=True)) == 1
    assert capsys.readouterr().err == f"proxima doctor: CUDA not usable: {hint}\n"


def test_a_package_that_imports_without_a_known_version_is_not_called_missing(monkeypatch, no_cuda):
    monkeypatch.setattr(doctor, "_package", lambda name: (None, True, ""))
    info = doctor.collect()
    assert not [h for h in info["hints"] if "not installed" in h or "does not import" in h], info["hints"]
    assert all(info["importable"][name] for name in doctor.OPTIONAL_PACKAGES)


# --- SharedChange --------------------------------------------------------------------------------------------------


def test_holders_starting_at_once_make_the_change_once_and_undo_it_once():
    made, undone = [], []

    def make():
        made.append(1)
        time.sleep(0.05)  # a slow change: the other holders arrive while it is made
        return lambda: undone.append(1)

    change = SharedChange(make)
    start = threading.Barrier(8)
    releases = []

    def holder():
        start.wait()
        releases.append(change.hold())

    threads = [threading.Thread(target=holder) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and change.held
    for release in releases:
        release()
    assert len(undone) == 1 and not change.held
