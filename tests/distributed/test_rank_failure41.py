"""When one rank fails, the others name the last checkpoint and do not take torchrun's teardown SIGTERM
for a user's stop ("stopped by SIGTERM; no checkpoint was written" while checkpoints were on disk)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from proxima import distributed
from proxima.signals import OutsideLoop, SignalGuard

#: signals.TEARDOWN_ENV: the file proxima.torchrun creates before it ends the job after a rank failed
TEARDOWN_ENV = "PROXIMA_TEARDOWN_FILE"

PEER_LOSS = "[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:18102"


def test_lost_contact_line_names_the_last_checkpoint_and_the_command_that_continues(capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.delenv(TEARDOWN_ENV, raising=False)
    ctx = distributed.DistContext(rank=0, world_size=2)
    ctx.report_failure(RuntimeError(PEER_LOSS), checkpoint=Path("f2/checkpoints/step_000000001024.pt"))
    assert capsys.readouterr().err == (
        "proxima: rank 0 stopped: lost contact with another rank (it failed or was stopped; its error is above): "
        f"RuntimeError: {PEER_LOSS}; checkpoint: f2/checkpoints/step_000000001024.pt; continue with: proxima resume f2\n")
    ctx.report_failure(RuntimeError(PEER_LOSS), checkpoint=None)  # in the loop, before the first checkpoint
    assert capsys.readouterr().err.endswith(f"{PEER_LOSS}; no checkpoint was written\n")
    ctx.report_failure(RuntimeError(PEER_LOSS))  # before the loop: no checkpoint to speak of
    assert capsys.readouterr().err.endswith(f"{PEER_LOSS}\n")


def test_lost_contact_line_says_torchrun_is_ending_the_job_after_the_other_rank_failed(capsys, monkeypatch, tmp_path):
    marker = tmp_path / "torn-down"
    marker.touch()
    monkeypatch.setenv(TEARDOWN_ENV, str(marker))
    monkeypatch.setenv("WORLD_SIZE", "2")
    distributed.DistContext(rank=0, world_size=2).report_failure(RuntimeError(PEER_LOSS), checkpoint=None)
    assert capsys.readouterr().err.startswith(
        "proxima: rank 0 stopped: lost contact with another rank (rank 1 failed, and torchrun is ending the job; "
        "its error is above): ")


def test_teardown_sigterm_in_the_loop_promises_no_checkpoint(capsys, monkeypatch, tmp_path):
    """torchrun's SIGTERM after a rank failed: no "writing a checkpoint after this iteration" (the peers are
    gone); the stop is recorded, so an evaluation under way ends for the collective that fails next."""
    marker = tmp_path / "torn-down"
    monkeypatch.setenv(TEARDOWN_ENV, str(marker))
    with SignalGuard(lambda: None, repeat_window=3.0) as stop:
        os.kill(os.getpid(), signal.SIGTERM)  # a user's stop (no marker): announced
    assert stop.signum == signal.SIGTERM
    assert "SIGTERM received; writing a checkpoint after this iteration" in capsys.readouterr().err
    marker.touch()
    with SignalGuard(lambda: None, repeat_window=3.0) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
    assert stop.signum == signal.SIGTERM
    assert capsys.readouterr().err == ""


def test_sigterm_while_a_lost_peer_is_reported_does_not_replace_the_failure():
    """The teardown SIGTERM that landed in report_failure raised "stopped by SIGTERM; no checkpoint was written"."""
    outside = OutsideLoop()
    with outside:
        outside.hold_for_failure()
        os.kill(os.getpid(), signal.SIGTERM)  # no TrainingInterrupted: the failure goes on to its line
    assert outside.signum == 0


@pytest.mark.slow  # a 2-process job of ~15 s on 2 cores: the slow tier, as test_launch_edges2's lost-peer repro
def test_rank_failure_leaves_rank_0_naming_its_last_checkpoint(tmp_path):
    """The audit's repro, smaller: rank 1 fails at iteration 3 with checkpoints every iteration; rank 0 says it
    lost contact and names step 768 (the newest on disk), never "stopped by SIGTERM; no checkpoint was written" (~15 s, 2 processes)."""
    from distributed_helpers import run

    res = run([sys.executable, "-m", "proxima", "train", "CartPole-v1", "--nproc", "2", "--num-envs", "4",
               "--num-steps", "32", "--total-timesteps", "2048", "--checkpoint-every", "1", "--threads", "1",
               "--no-progress", "--eval-episodes", "0", "--run-dir", "f2"], tmp_path, timeout=120,
              PROXIMA_TEST_FAIL_RANK=1, PROXIMA_TEST_FAIL_ITER=3, PROXIMA_DIST_TIMEOUT=60)
    assert res.returncode == 1, res.stderr[-3000:]
    lines = [line for line in res.stderr.splitlines() if line.startswith("proxima: ") and "spaces:" not in line]
    assert lines[0].startswith("proxima: rank 1 failed: RuntimeError: test failure injected on rank 1 at iteration 3"), lines
    rank0 = [line for line in lines if line.startswith("proxima: rank 0 ")]
    assert len(rank0) == 1 and rank0[0].startswith("proxima: rank 0 stopped: lost contact with another rank ("), lines
    assert rank0[0].endswith("; checkpoint: f2/checkpoints/step_000000000768.pt; continue with: proxima resume f2"), rank0
    assert not any("stopped by SIGTERM" in line or "SIGTERM received" in line for line in lines), lines
    assert lines[-1] == "proxima: the job failed: ranks 1 (first), 0 exited 1; each rank's own lines above say why"
    assert sorted(p.name for p in (tmp_path / "f2" / "checkpoints").glob("step_*.pt"))[-1] == "step_000000000768.pt"


def test_torchrun_marks_its_teardown_before_it_ends_the_ranks(monkeypatch):
    """proxima.torchrun creates TEARDOWN_ENV's file just before torch's agent ends the ranks after a failure
    (_stop_workers), not before, and takes it away with the job."""
    import torch.distributed.run as run
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    from proxima import torchrun

    seen = []
    monkeypatch.delenv(TEARDOWN_ENV, raising=False)
    monkeypatch.setattr(LocalElasticAgent, "_stop_workers", lambda self, group: seen.append(os.path.exists(os.environ[TEARDOWN_ENV])))

    def job(argv):  # torchrun's main: the ranks run, then one fails and the agent ends the others
        seen.append(os.path.exists(os.environ[TEARDOWN_ENV]))
        LocalElasticAgent._stop_workers(None, None)
        seen.append(os.environ[TEARDOWN_ENV])

    monkeypatch.setattr(run, "main", job)
    assert torchrun.main([]) == 0
    assert seen[:2] == [False, True]
    assert TEARDOWN_ENV not in os.environ and not os.path.exists(os.path.dirname(seen[2]))


def _dead_pid() -> int:
    import subprocess

    child = subprocess.Popen(["true"])
    child.wait()  # reaped: its pid names no process (until the kernel hands it out again, far off)
    return child.pid


def test_a_launch_sweeps_marker_folders_of_killed_launchers_only(monkeypatch, tmp_path):
    """A launcher killed by SIGKILL leaves its proxima-torchrun-PID-XXXXXXXX folder behind; the next launch
    removes it, and only it: not a live launcher's, not a look-alike, not a symlink of the exact name."""
    import tempfile

    import torch.distributed.run as run

    from proxima import torchrun

    dead, live = _dead_pid(), os.getpid()
    stale = tmp_path / f"proxima-torchrun-{dead}-ab_cd123"
    (stale / "sub").mkdir(parents=True)
    (stale / "torn-down").touch()
    kept = [tmp_path / f"proxima-torchrun-{live}-abcdefgh",  # a launcher still running
            tmp_path / f"proxima-torchrun-{dead}-abcdefg",  # look-alikes
            tmp_path / f"proxima-torchrun-{dead}-abcdefgh.bak",
            tmp_path / f"proxima-torchrun-0{dead}-abcdefgh",
            tmp_path / f"proxima-torchrun-x{dead}-abcdefgh"]
    for path in kept:
        path.mkdir()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").touch()
    link = tmp_path / f"proxima-torchrun-{dead}-linkedxx"
    link.symlink_to(target)
    plain = tmp_path / f"proxima-torchrun-{dead}-afile___"
    plain.touch()

    assert torchrun.sweep_stale_markers(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and all(path.is_dir() for path in kept)
    assert link.is_symlink() and (target / "keep").exists() and plain.is_file()

    # a launch sweeps first, and names its own folder by its pid (gone after it)
    stale.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(TEARDOWN_ENV, raising=False)
    seen = []
    monkeypatch.setattr(run, "main", lambda argv: seen.append(os.environ[TEARDOWN_ENV]))
    assert torchrun.main([]) == 0
    assert not stale.exists() and all(path.is_dir() for path in kept)
    own = Path(seen[0]).parent
    assert own.parent == tmp_path and own.name.startswith(f"proxima-torchrun-{live}-") and not own.exists()


def test_torchrun_writes_no_teardown_marker_while_it_restarts_the_ranks(monkeypatch):
    """torch's agent stops the ranks with _stop_workers to restart them too (--max-restarts, a node joining):
    those ranks are not told that torchrun is ending the job; a teardown after the restart still is."""
    import torch.distributed.run as run
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    from proxima import torchrun

    seen = []
    monkeypatch.delenv(TEARDOWN_ENV, raising=False)
    monkeypatch.setattr(LocalElasticAgent, "_stop_workers", lambda self, group: seen.append(os.path.exists(os.environ[TEARDOWN_ENV])))
    monkeypatch.setattr(LocalElasticAgent, "_restart_workers", lambda self, group: LocalElasticAgent._stop_workers(self, group))
    restart_workers = LocalElasticAgent._restart_workers

    def job(argv):  # a rank fails, the agent restarts the ranks; another fails with no restarts left
        LocalElasticAgent._restart_workers(None, None)
        LocalElasticAgent._stop_workers(None, None)

    monkeypatch.setattr(run, "main", job)
    assert torchrun.main([]) == 0
    assert seen == [False, True]
    assert LocalElasticAgent._restart_workers is restart_workers


# --- mutation review of the rank-failure lines and the teardown marker ---

def test_a_timed_out_collective_line_names_the_last_checkpoint_and_the_command_that_continues(capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("PROXIMA_DIST_TIMEOUT", "300")
    ctx = distributed.DistContext(rank=0, world_size=2)
    timed_out = RuntimeError("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 300000ms for recv operation to complete")
    ctx.report_failure(timed_out, checkpoint=Path("f2/checkpoints/step_000000000768.pt"))
    err = capsys.readouterr().err
    assert err.startswith("proxima: rank 0 stopped: rank 1 did not reach the same collective within PROXIMA_DIST_TIMEOUT=300 s"), err
    assert err.endswith("; checkpoint: f2/checkpoints/step_000000000768.pt; continue with: proxima resume f2\n"), err


def test_the_marking_stop_does_not_recreate_a_marker_folder_that_is_gone(tmp_path):
    """A folder of that name made after the launcher's was removed may be anyone's: no marker (the ranks
    print the generic line), and the ranks are still ended."""
    from proxima import torchrun

    marker = tmp_path / "gone" / "torn-down"
    seen = []
    marked, unmarked = torchrun.teardown_marking(str(marker), lambda self, group: seen.append(group) or "ended")
    assert unmarked is None
    assert marked(None, "workers") == "ended"
    assert seen == ["workers"] and not marker.parent.exists()


def test_the_marking_stop_does_not_follow_a_symlink_planted_as_the_marker(tmp_path):
    from proxima import torchrun

    target = tmp_path / "precious"
    target.write_text("not to be truncated")
    (tmp_path / "dir").mkdir()
    marker = tmp_path / "dir" / "torn-down"
    marker.symlink_to(target)
    seen = []
    marked, _ = torchrun.teardown_marking(str(marker), lambda self, group: seen.append(group))
    marked(None, "workers")
    assert seen == ["workers"]
    assert target.read_text() == "not to be truncated" and marker.is_symlink()


def test_the_marking_stop_writes_no_marker_into_a_symlinked_folder(tmp_path):
    from proxima import torchrun

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "dir").symlink_to(elsewhere)
    seen = []
    marked, _ = torchrun.teardown_marking(str(tmp_path / "dir" / "torn-down"), lambda self, group: seen.append(group))
    marked(None, "workers")
    assert seen == ["workers"] and list(elsewhere.iterdir()) == []


def test_the_marking_stop_ends_the_ranks_when_the_marker_cannot_be_written(tmp_path):
    from proxima import torchrun

    (tmp_path / "taken").write_text("a file where the marker's folder should be")
    seen = []
    marked, _ = torchrun.teardown_marking(str(tmp_path / "taken" / "torn-down"), lambda self, group: seen.append(group) or "ended")
    assert marked(None, "workers") == "ended"
    assert seen == ["workers"]


def test_the_marking_stop_marks_without_a_restart_to_wrap(tmp_path):
    from proxima import torchrun

    marker = tmp_path / "torn-down"
    marked, unmarked = torchrun.teardown_marking(str(marker), lambda self, group: None, None)
    assert unmarked is None
    marked(None, None)
    assert marker.exists()


def test_torchrun_puts_back_the_agents_stop_and_an_earlier_teardown_file(monkeypatch):
    import torch.distributed.run as run
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    from proxima import torchrun

    original = LocalElasticAgent._stop_workers
    monkeypatch.setenv(TEARDOWN_ENV, "/elsewhere/torn-down")
    seen = []
    monkeypatch.setattr(run, "main", lambda argv: seen.append((LocalElasticAgent._stop_workers is original, os.environ[TEARDOWN_ENV])))
    assert torchrun.main([]) == 0
    assert seen[0][0] is False and seen[0][1] != "/elsewhere/torn-down"
    assert LocalElasticAgent._stop_workers is original
    assert os.environ[TEARDOWN_ENV] == "/elsewhere/torn-down"


def test_the_sweep_keeps_another_users_folder_and_one_whose_launcher_it_may_not_signal(monkeypatch, tmp_path):
    from proxima import torchrun

    dead = _dead_pid()
    stale = tmp_path / f"proxima-torchrun-{dead}-abcdefgh"
    stale.mkdir()
    monkeypatch.setattr(os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)  # owned by another user
    assert torchrun.sweep_stale_markers(str(tmp_path)) == []
    assert stale.is_dir()
    monkeypatch.undo()

    def not_permitted(pid, sig):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", not_permitted)  # another user's launcher, alive
    assert torchrun.sweep_stale_markers(str(tmp_path)) == []
    assert stale.is_dir()
    monkeypatch.undo()
    assert torchrun.sweep_stale_markers(str(tmp_path)) == [str(stale)]  # the same folder, its launcher gone: removed


def test_only_sigterm_is_torchruns_teardown(monkeypatch, tmp_path):
    from proxima.signals import torn_down

    marker = tmp_path / "torn-down"
    marker.touch()
    monkeypatch.setenv(TEARDOWN_ENV, str(marker))
    assert torn_down(signal.SIGTERM) is True
    assert torn_down(signal.SIGINT) is False


def test_a_peer_lost_before_the_loop_gives_a_line_without_a_checkpoint_part(capsys, monkeypatch, tmp_path):
    """Rank 0 loses its peer while it sets the run up (the first collective): no checkpoint to speak of,
    not "no checkpoint was written" (which promises a run that trained)."""
    from proxima import trainer as T
    from proxima.config import PPOConfig

    class LostBeforeTheLoop(distributed.DistContext):
        def from_main(self, fn, *args, **kwargs):
            raise RuntimeError(PEER_LOSS)

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv(TEARDOWN_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(distributed, "_CONTEXT", LostBeforeTheLoop(rank=0, world_size=2))
    with pytest.raises(RuntimeError):
        T.train(PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=16), run_dir=str(tmp_path / "r"),
                quiet=True)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("proxima: rank 0")]
    assert lines == ["proxima: rank 0 stopped: lost contact with another rank (it failed or was stopped; its error is above): "
                     f"RuntimeError: {PEER_LOSS}"], lines
    assert not (tmp_path / "r").exists()


def test_the_sweep_keeps_a_folder_whose_lock_a_live_launcher_holds_whatever_its_pid(tmp_path):
    """A launcher in another pid namespace (a container sharing /tmp), or one whose pid looks dead, still
    holds the flock on its folder's lock file: the sweep keeps the folder; once the lock is let go, removes it."""
    import fcntl

    from proxima import torchrun

    held = tmp_path / f"proxima-torchrun-{_dead_pid()}-abcdefgh"
    held.mkdir()
    (held / "torn-down").touch()
    with open(held / torchrun.LOCK_NAME, "w") as lock:  # its own open file description: the launcher's
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert torchrun.sweep_stale_markers(str(tmp_path)) == []
        assert (held / "torn-down").exists()
    assert torchrun.sweep_stale_markers(str(tmp_path)) == [str(held)]


def test_a_launcher_holds_its_folders_lock_while_it_runs(monkeypatch, tmp_path):
    import fcntl
    import tempfile

    import torch.distributed.run as run

    from proxima import torchrun

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(TEARDOWN_ENV, raising=False)
    seen = []

    def job(argv):
        folder = os.path.dirname(os.environ[TEARDOWN_ENV])
        with open(os.path.join(folder, torchrun.LOCK_NAME)) as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append("free")
            except BlockingIOError:
                seen.append("held")
        seen.append(torchrun.sweep_stale_markers(str(tmp_path)))

    monkeypatch.setattr(run, "main", job)
    assert torchrun.main([]) == 0
    assert seen == ["held", []] and list(tmp_path.iterdir()) == []
