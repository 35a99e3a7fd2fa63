"""A run directory belongs to one run and is data, never code (issue 17, items 1-3).

Attacks tried: a checkpoint whose env id is ``os:abort``; a run directory shipping a module that
writes a file when imported; training twice into one directory; a second trainer (or a resume) on
a run that is still going; a lock left by a killed trainer; a metrics.csv left empty or cut short;
a user env that breaks the contract; a disk that fills up mid-run.
"""

from __future__ import annotations

import csv
import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from proxima import checkpoint as ckpt
from proxima import cli, rundir
from proxima.logger import CSV_COLUMNS
from cli_helpers import error_line, run_main
import warm_python

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROOT = Path(__file__).resolve().parents[2]
#: 4 envs x 16 steps = 64 steps an iteration; 3 iterations; one checkpoint per iteration
SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "192",
         "--checkpoint-every", "1", "--eval-episodes", "0", "--no-progress", "--quiet"]



def proxima_cmd(*args: str, cwd: Path, timeout: int = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
    return warm_python.run([sys.executable, "-m", "proxima", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def read_csv(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def steps(run_dir: Path) -> list[int]:
    return [int(r["global_step"]) for r in read_csv(run_dir)]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished CartPole run of 3 iterations (checkpoints at 64, 128, 192; the last 3 kept)."""
    root = tmp_path_factory.mktemp("finished")
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(root / "run"), *SMALL]) == 0
    return root / "run"


def crafted_run(tmp_path: Path, finished_run: Path, env_id: str, name: str = "run") -> Path:
    """A copy of ``finished_run`` whose checkpoints and config.yaml record ``env_id``."""
    run_dir = tmp_path / name
    shutil.copytree(finished_run, run_dir)
    for path in ckpt.list_checkpoints(run_dir):
        state = torch.load(path, weights_only=True)
        state["config"]["env_id"] = env_id
        ckpt.atomic_torch_save(state, path)
    text = (run_dir / "config.yaml").read_text().replace("env_id: CartPole-v1", f"env_id: {env_id}")
    (run_dir / "config.yaml").write_text(text)
    return run_dir


# ------------------------------------------------------------------------------------ item 2: data, never code
def test_checkpoint_with_env_os_abort_is_refused_by_eval_and_resume(tmp_path, finished_run, capsys):
    """The recorded env id `os:abort` would kill the process (SIGABRT) if it were imported and called."""
    run_dir = crafted_run(tmp_path, finished_run, "os:abort")
    for argv in (["eval", str(run_dir), "--episodes", "1"], ["resume", str(run_dir)]):
        result = proxima_cmd(*argv, cwd=tmp_path)
        assert result.returncode == 2, (argv, result.returncode, result.stderr)  # -6 would be SIGABRT
        line = error_line(result.returncode, result.stderr, "'os:abort'", "--env os:abort", "--trust-run")
        assert "would import and run module 'os'" in line
    code, _, err = run_main(["train", "--resume", str(run_dir), "--no-progress"], capsys)
    error_line(code, err, "'os:abort'", "(proxima train os:abort --resume ...)")  # train's ENV_ID, not a --env it lacks
    assert steps(run_dir) == steps(finished_run), "a refused resume must not touch the run"
    assert not (run_dir / rundir.LOCK_NAME).exists()


def test_run_dir_shipping_a_module_does_not_run_it(tmp_path, finished_run, capsys, monkeypatch):
    """`cd RUN && proxima eval .`: neither the recorded module:Class env nor a shipped numpy.py runs."""
    run_dir = crafted_run(tmp_path, finished_run, "evil_env:Env")
    marker = tmp_path / "PWNED"
    payload = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    (run_dir / "evil_env.py").write_text(payload + "import gymnasium\nclass Env(gymnasium.Env):\n    pass\n")
    (run_dir / "numpy.py").write_text(payload)  # `python -m` puts the current directory first on sys.path

    result = proxima_cmd("eval", ".", "--episodes", "1", cwd=run_dir)
    error_line(result.returncode, result.stderr, "evil_env:Env", "--env evil_env:Env")
    monkeypatch.chdir(run_dir)
    code, _, err = run_main(["resume", "."], capsys)
    error_line(code, err, "evil_env:Env")
    # naming the env explicitly does not make the run directory an import path either
    code, _, err = run_main(["eval", ".", "--episodes", "1", "--env", "evil_env:Env"], capsys)
    error_line(code, err, "cannot import module 'evil_env'", "run directories are never searched")
    assert not marker.exists(), marker.read_text()
    assert "evil_env" not in sys.modules


def test_named_env_and_trust_run_let_a_user_env_run(tmp_path, capsys, monkeypatch):
    """The user's own module:Class run: eval/resume work once the user names the env or trusts the run."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    run_dir = tmp_path / "run"
    assert cli.main(["train", "bad_envs:GoodEnv", "--run-dir", str(run_dir), *SMALL, "--total-timesteps", "128"]) == 0
    capsys.readouterr()
    code, _, err = run_main(["eval", str(run_dir), "--episodes", "1"], capsys)
    error_line(code, err, "bad_envs:GoodEnv", "--env bad_envs:GoodEnv")
    code, out, err = run_main(["eval", str(run_dir), "--episodes", "2", "--env", "bad_envs:GoodEnv", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["returns"] == [10.0, 10.0]  # GoodEnv: 10 steps of +1
    code, _, err = run_main(["resume", str(run_dir), "--total-timesteps", "192", "--trust-run", "--quiet"], capsys)
    assert code == 0, err
    assert steps(run_dir) == [64, 128, 192]
    code, _, err = run_main(["resume", str(run_dir), "--total-timesteps", "256", "--env", "bad_envs:WrongShape"], capsys)
    error_line(code, err, "trains 'bad_envs:GoodEnv', not 'bad_envs:WrongShape'")


# ------------------------------------------------------------------------------------ item 1: one run per directory
def test_training_twice_into_one_directory_is_refused(tmp_path, capsys, finished_run):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    before = sorted(p.name for p in ckpt.list_checkpoints(run_dir))
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run_dir), *SMALL], capsys)
    error_line(code, err, f"{run_dir} is not empty", "--resume auto", "--overwrite")
    assert sorted(p.name for p in ckpt.list_checkpoints(run_dir)) == before
    assert steps(run_dir) == [64, 128, 192]


def test_overwrite_moves_the_old_run_aside_and_says_where(tmp_path, capsys, finished_run):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    (run_dir / "notes.txt").write_text("mine")
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run_dir), *SMALL, "--total-timesteps", "128", "--overwrite"], capsys)
    assert code == 0, err
    old = [p for p in tmp_path.iterdir() if p.name.startswith("run.old-")]
    assert len(old) == 1 and f"moved the old {run_dir} to {old[0]}" in err
    assert (old[0] / "notes.txt").read_text() == "mine" and steps(old[0]) == [64, 128, 192]
    assert steps(run_dir) == [64, 128] and not (run_dir / "notes.txt").exists()
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step_000000000064.pt", "step_000000000128.pt"]


def test_resume_auto_after_a_kill_before_the_first_checkpoint_starts_clean(tmp_path, capsys):
    """What a kill during the first iteration leaves: config.yaml, meta.json, an empty metrics.csv."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in ("config.yaml", "meta.json", "metrics.csv"):
        (run_dir / name).write_text("")
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run_dir), "--resume", "auto", *SMALL], capsys)
    assert code == 0, err
    assert "--resume auto found no checkpoint to continue: moved the old" in err
    rows = read_csv(run_dir)
    assert list(rows[0]) == CSV_COLUMNS and [int(r["global_step"]) for r in rows] == [64, 128, 192]


def test_resume_writes_a_header_into_an_empty_or_cut_metrics_csv(tmp_path, capsys, finished_run):
    """Killed between creating metrics.csv and its header reaching the disk, or mid-row."""
    for content in ("", "64,1,0.1\n128,2,"):
        run_dir = tmp_path / f"run{len(content)}"
        shutil.copytree(finished_run, run_dir)
        newest = ckpt.list_checkpoints(run_dir)[-1]
        newest.unlink()  # resume from step 128
        (run_dir / "metrics.csv").write_text(content)
        code, _, err = run_main(["resume", str(run_dir), "--quiet"], capsys)
        assert code == 0, err
        rows = read_csv(run_dir)
        assert list(rows[0]) == CSV_COLUMNS
        assert [int(r["global_step"]) for r in rows] == [192]  # nothing usable before the checkpoint, no duplicate


def sleeper() -> subprocess.Popen:
    return warm_python.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def write_lock(run_dir: Path, pid: int, **extra) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    info = {"pid": pid, "host": os.uname().nodename, "start": rundir._process_start(pid), "since": "2026-01-01T00:00:00", **extra}
    (run_dir / rundir.LOCK_NAME).write_text(json.dumps(info))


def test_a_live_lock_stops_a_second_trainer_and_a_resume(tmp_path, capsys, finished_run):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    other = sleeper()
    try:
        write_lock(run_dir, other.pid)
        for argv in (["resume", str(run_dir), "--total-timesteps", "256"],
                     ["train", "--resume", "auto", "--run-dir", str(run_dir), *SMALL],
                     ["train", "CartPole-v1", "--run-dir", str(run_dir), *SMALL, "--overwrite"],
                     ["train", "CartPole-v1", "--run-dir", str(tmp_path / "fresh"), *SMALL]):
            if "fresh" in argv[3]:
                write_lock(tmp_path / "fresh", other.pid)
            code, _, err = run_main(argv, capsys)
            error_line(code, err, "is in use by pid %d" % other.pid)
    finally:
        other.kill()
        other.wait()
    assert steps(run_dir) == [64, 128, 192] and not list(tmp_path.glob("run.old-*"))


def test_a_stale_lock_is_taken_over_with_a_line(tmp_path, capsys, finished_run):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    gone = sleeper()
    gone.kill()
    gone.wait()
    write_lock(run_dir, gone.pid)
    code, _, err = run_main(["resume", str(run_dir), "--total-timesteps", "256"], capsys)
    assert code == 0, err
    assert f"took over the lock left by pid {gone.pid}" in err
    assert steps(run_dir) == [64, 128, 192, 256]
    assert not (run_dir / rundir.LOCK_NAME).exists(), "the lock is released when the trainer ends"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["fifo", "link", "folder"])
def test_a_lock_that_is_not_a_regular_file_is_taken_over_without_blocking(kind, tmp_path, capsys, finished_run):
    """A FIFO at the lock's name used to block every reader forever (resume, report, train)."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    lock = run_dir / rundir.LOCK_NAME
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename}))
    {"fifo": lambda: os.mkfifo(lock), "link": lambda: os.symlink(outside, lock), "folder": lock.mkdir}[kind]()
    assert rundir.read_lock(run_dir) == {}
    code, _, err = run_main(["resume", str(run_dir), "--total-timesteps", "256"], capsys)
    if kind == "folder":  # a folder is never deleted: named, and left as it was
        error_line(code, err, f"{lock}: is a directory, not a lock file; remove it (or rename it) and try again")
        assert lock.is_dir() and steps(run_dir) == [64, 128, 192]
        return
    assert code == 0, err
    assert "took over an unreadable lock file" in err
    assert steps(run_dir) == [64, 128, 192, 256]
    assert not lock.exists() and not lock.is_symlink()
    assert json.loads(outside.read_text())["pid"] == os.getpid(), "the link's target is left alone"


def test_a_reused_pid_does_not_keep_a_lock_alive():
    """The pid is running, but it is not the process that took the lock (its start time differs)."""
    other = sleeper()
    try:
        info = {"pid": other.pid, "host": os.uname().nodename, "start": rundir._process_start(other.pid)}
        assert rundir.holder_alive(info)
        assert not rundir.holder_alive({**info, "start": "1"})
        assert rundir.holder_alive({**info, "host": "another-machine"})
    finally:
        other.kill()
        other.wait()


def test_resume_of_a_run_that_is_still_training_is_refused(tmp_path):
    """Two real processes: a long run holds its directory; `proxima resume` on it exits 2 naming the pid."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
    first = warm_python.Popen([sys.executable, "-m", "proxima", "train", "CartPole-v1", "--run-dir", "run", "--num-envs", "4",
                              "--num-steps", "16", "--total-timesteps", "10000000", "--checkpoint-every", "1", "--no-progress"],
                             cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not ckpt.list_checkpoints(tmp_path / "run"):
            assert first.poll() is None and time.time() < deadline, first.stderr.read() if first.poll() is not None else "timeout"
            time.sleep(0.2)
        result = proxima_cmd("resume", "run", cwd=tmp_path)
        error_line(result.returncode, result.stderr, f"run {(tmp_path / 'run').resolve()} is in use by pid {first.pid}")
    finally:
        first.terminate()
        first.wait(timeout=60)
    assert not (tmp_path / "run" / rundir.LOCK_NAME).exists()


# ------------------------------------------------------------------------------------ item 3: broken env, full disk
@pytest.mark.parametrize("env_id, problem", [("bad_envs:OldGymStep", "step returns"), ("bad_envs:OldGymReset", "reset returns")])
def test_a_broken_env_gets_check_env_s_diagnosis_and_leaves_no_run_dir(env_id, problem, tmp_path, capsys, monkeypatch):
    from proxima.envs.checker import check_env

    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", env_id, "--run-dir", "run", *SMALL], capsys)
    line = error_line(code, err, f"env '{env_id}' breaks the env contract", problem, f"proxima check-env {env_id}")
    # the same words as `proxima check-env` (train names where it saw it: at reset after env step 0)
    assert str(check_env(env_id)[0]).split(" at reset")[0].split(" at step")[0] in line
    assert list(tmp_path.iterdir()) == [], "a failed start must not leave a run directory"


class FullDisk:
    """open() for the logger whose file ``name`` accepts ``room`` writes, then fails as a full disk does."""

    def __init__(self, name: str, room: int) -> None:
        self.name, self.room = name, room

    def __call__(self, path, *args, **kwargs):
        f = open(path, *args, **kwargs)
        if Path(path).name != self.name:
            return f
        test = self

        class Full:
            def __getattr__(self, attr):
                return getattr(f, attr)

            def write(self, data):
                test.room -= 1
                if test.room < 0:
                    raise OSError(errno.ENOSPC, "No space left on device")
                return f.write(data)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                f.close()

        return Full()


def test_disk_full_in_metrics_is_one_line_keeping_the_last_checkpoint(tmp_path, capsys, monkeypatch):
    from proxima import logger

    monkeypatch.setattr(logger, "open", FullDisk("metrics.csv", room=3), raising=False)  # header + 2 rows
    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run_dir), *SMALL], capsys)
    error_line(code, err, f"{run_dir / 'metrics.csv'}: could not write (No space left on device;", "free there)",
               "last good checkpoint: ", "step_000000000128.pt")
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step_000000000064.pt", "step_000000000128.pt"]
    ckpt.load_checkpoint(run_dir)  # the kept checkpoint loads


def test_disk_full_at_run_start_leaves_no_run_dir(tmp_path, capsys, monkeypatch):
    from proxima import train_state

    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(train_state, "open", full, raising=False)
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(tmp_path / "run"), *SMALL], capsys)
    error_line(code, err, "config.yaml: could not start the run (No space left on device;", "free there)")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------ item 4: resume
def test_resume_with_total_timesteps_extends_the_run_and_its_lr_schedule(tmp_path, capsys, finished_run):
    """3 iterations done; --total-timesteps 320 adds 2. The linear schedule is recomputed over the new
    total: iteration i (from 1) uses lr0 * (1 - (i - 1) / 5) (docs/reliability.md)."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    code, _, err = run_main(["resume", str(run_dir), "--total-timesteps", "320", "--quiet"], capsys)
    assert code == 0, err
    rows = read_csv(run_dir)
    assert [int(r["global_step"]) for r in rows] == [64, 128, 192, 256, 320]
    assert [float(r["charts/learning_rate"]) for r in rows[3:]] == pytest.approx([2.5e-4 * 2 / 5, 2.5e-4 * 1 / 5])
    state = ckpt.load_checkpoint(run_dir)
    assert state["global_step"] == 320 and state["config"]["total_timesteps"] == 320


@pytest.mark.parametrize("argv, flag", [(["--lr", "1e-3"], "--lr 0.001"), (["--num-envs", "8"], "--num-envs 8"),
                                        (["--no-norm-adv"], "--no-norm-adv")])
def test_resume_refuses_flags_that_would_change_the_run(argv, flag, tmp_path, capsys, finished_run):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    for command in (["resume", str(run_dir)], ["train", "--resume", "auto", "--run-dir", str(run_dir)]):
        code, _, err = run_main(command + argv + ["--total-timesteps", "256"], capsys)
        error_line(code, err, f"{flag}: cannot change when resuming", "safe to change on resume: --total-timesteps")
    assert steps(run_dir) == [64, 128, 192]
    # the value the run already has is not a change
    code, _, err = run_main(["resume", str(run_dir), "--lr", "2.5e-4", "--num-envs", "4", "--total-timesteps", "256", "--quiet"], capsys)
    assert code == 0, err
    assert steps(run_dir) == [64, 128, 192, 256]


def test_resume_falls_back_to_the_newest_valid_checkpoint(tmp_path, capsys, finished_run):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    newest = ckpt.list_checkpoints(run_dir)[-1]
    newest.write_bytes(newest.read_bytes()[:1000])  # cut short, as a full disk or a copy would leave it
    code, _, err = run_main(["resume", str(run_dir), "--quiet"], capsys)
    assert code == 0, err
    before = run_dir / "checkpoints" / "step_000000000128.pt"
    assert f"proxima: note: {newest} is unusable (truncated checkpoint" in err
    assert f"resuming from {before} instead (the bad file is kept as step_000000000192.pt.corrupt)" in err
    assert (run_dir / "checkpoints" / "step_000000000192.pt.corrupt").exists()
    assert steps(run_dir) == [64, 128, 192]  # iteration 3 trained again, its row once
    assert ckpt.load_checkpoint(run_dir)["global_step"] == 192


def test_checkpoints_are_written_by_wall_clock_interval_too(tmp_path, capsys):
    from proxima.config import FIELDS

    assert FIELDS["checkpoint_minutes"].default == 10.0
    argv = ["train", "CartPole-v1", *SMALL, "--checkpoint-every", "0", "--keep-checkpoints", "5"]
    code, _, err = run_main(argv + ["--run-dir", str(tmp_path / "clock"), "--checkpoint-minutes", "1e-9"], capsys)
    assert code == 0, err
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "clock")] == [f"step_{s:012d}.pt" for s in (64, 128, 192)]
    code, _, err = run_main(argv + ["--run-dir", str(tmp_path / "end"), "--checkpoint-minutes", "0"], capsys)
    assert code == 0, err
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "end")] == ["step_000000000192.pt"]


# ------------------------------------------------------------------------------------ item 3: plot, report, video
def test_disk_full_in_plot_and_report_is_one_line_and_no_file(tmp_path, capsys, monkeypatch, finished_run):
    from matplotlib.figure import Figure

    def full(self, target, **kwargs):  # the image goes to a temp file (atomic.atomic_open): half of it, then ENOSPC
        if hasattr(target, "write"):
            target.write(b"\x89PNG half")
        else:
            Path(target).write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full)
    code, _, err = run_main(["plot", str(finished_run), "--out", str(tmp_path / "c.png")], capsys)
    error_line(code, err, f"{tmp_path / 'c.png'}: could not write (No space left on device;", "free there)")
    from proxima import atomic

    def no_room(fd):  # a full disk as the report's bytes are flushed to it
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", no_room)
    code, _, err = run_main(["report", str(finished_run), "--out", str(tmp_path / "r.md"), "--episodes", "0"], capsys)
    error_line(code, err, f"{tmp_path / 'r.md'}: could not write (No space left on device;", "free there)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".mp4", ".gif"])
def test_a_video_that_could_not_be_finished_is_deleted_and_reported(suffix, tmp_path, capsys, monkeypatch, finished_run):
    from proxima import video

    if suffix == ".mp4":
        if not video.has_mp4_encoder():
            pytest.skip("no MP4 encoder")

        def quiet_failure(frames, path, fps):  # what ffmpeg does on a full disk: logs, exits, leaves a stub
            Path(path).write_bytes(b"\x00\x00\x00\x18ftypisom" + b"\x00" * 100)

        monkeypatch.setattr(video, "_write_mp4", quiet_failure)
        why = "unreadable after writing"
    else:
        def full(frames, path, fps):
            Path(path).write_bytes(b"GIF89a")
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(video, "_write_gif", full)
        why = "No space left on device;"
    out = tmp_path / f"v{suffix}"
    code, stdout, err = run_main(["eval", str(finished_run), "--episodes", "1", "--video", str(out)], capsys)
    error_line(code, err, f"{out}: could not write the video ({why}", "free there", "no video was kept")
    assert "video:" not in stdout and list(tmp_path.iterdir()) == []


def test_eval_video_of_an_env_that_cannot_render_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    run_dir = tmp_path / "run"
    assert cli.main(["train", "bad_envs:GoodEnv", "--run-dir", str(run_dir), *SMALL, "--total-timesteps", "64"]) == 0
    code, _, err = run_main(["eval", str(run_dir), "--env", "bad_envs:GoodEnv", "--video", str(tmp_path / "v.mp4")], capsys)
    error_line(code, err, "--video", "renders no frames", "without --video")
    assert not (tmp_path / "v.mp4").exists()


# ------------------------------------------------------------------------------------ item 5: evaluation during training
def test_eval_every_logs_eval_metrics_and_keeps_the_best_checkpoint(tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = ["train", "CartPole-v1", "--run-dir", str(run_dir), *SMALL, "--eval-every", "128", "--eval-episodes", "2"]
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    rows = read_csv(run_dir)
    evals = {int(r["global_step"]): float(r["eval/mean_return"]) for r in rows if r["eval/mean_return"]}
    assert sorted(evals) == [128]  # 192 // 128 == 1: one multiple of 128 crossed
    best = ckpt.load_checkpoint(run_dir / "checkpoints" / "best.pt")
    assert best["global_step"] == 128 and best["best_eval"] == evals[128]
    # the best policy is evaluated by `eval --best` with the same seed and episodes as during training
    code, out, err = run_main(["eval", str(run_dir), "--best", "--episodes", "2", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["mean_return"] == evals[128]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    assert [(e.step, round(e.value, 4)) for e in acc.Scalars("eval/mean_return")] == [(128, round(evals[128], 4))]
    from proxima.report import build_report

    text = build_report([run_dir], episodes=0).read_text()
    assert f"| eval return during training, best | {evals[128]:.2f} at step 128 (checkpoints/best.pt) |" in text


def test_eval_every_does_not_change_training(tmp_path, capsys):
    """Evaluations run on a copy with the RNG streams put back: the weights end bit-identical."""
    for name, extra in (("plain", []), ("evals", ["--eval-every", "64", "--eval-episodes", "2"])):
        assert run_main(["train", "CartPole-v1", "--run-dir", str(tmp_path / name), *SMALL, *extra], capsys)[0] == 0
    a, b = (ckpt.load_checkpoint(tmp_path / n)["agent"] for n in ("plain", "evals"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_eval_best_without_best_pt_is_one_line(capsys, finished_run):
    code, _, err = run_main(["eval", str(finished_run), "--best"], capsys)
    error_line(code, err, "no checkpoints/best.pt", "--eval-every")
    best_file = finished_run / "checkpoints" / "best.pt"  # --best of a file: the flag is the problem, not the file
    code, _, err = run_main(["eval", str(ckpt.list_checkpoints(finished_run)[-1]), "--best"], capsys)
    error_line(code, err, "--best needs a run directory", "drop --best")
    assert not best_file.exists()


def test_a_resume_from_before_best_pt_never_replaces_it_with_a_worse_policy(tmp_path, capsys, monkeypatch):
    """After a crash the last checkpoint may be older than best.pt and know a lower best: best.pt stays."""
    from proxima import evaluate as evaluate_module

    run_dir = tmp_path / "run"
    argv = ["train", "CartPole-v1", "--run-dir", str(run_dir), *SMALL, "--eval-every", "64", "--eval-episodes", "2",
            "--checkpoint-every", "1"]
    assert run_main(argv, capsys)[0] == 0
    best = ckpt.load_checkpoint(run_dir / "checkpoints" / "best.pt")
    for c in ckpt.list_checkpoints(run_dir)[1:]:  # the crash: only the first checkpoint (step 64) is left
        c.unlink()
    state = torch.load(ckpt.list_checkpoints(run_dir)[0], weights_only=True)
    state["best_eval"] = None  # it knows no best yet (best.pt was written later)
    ckpt.atomic_torch_save(state, ckpt.list_checkpoints(run_dir)[0])
    worse = best["best_eval"] - 1.0  # every evaluation after the resume is worse than best.pt's

    def worse_eval(policy, **kw):
        return {"env_id": "CartPole-v1", "episodes": 2, "mean_return": worse, "std_return": 0.0, "returns": [worse, worse],
                "lengths": [10, 10], "deterministic": True}

    monkeypatch.setattr(evaluate_module, "evaluate", worse_eval)
    code, _, err = run_main(["resume", str(run_dir), "--no-progress", "--eval-episodes", "2"], capsys)
    assert code == 0, err
    after = ckpt.load_checkpoint(run_dir / "checkpoints" / "best.pt")
    assert after["best_eval"] == best["best_eval"] and after["global_step"] == best["global_step"]


def test_each_resume_is_recorded_in_meta_json(tmp_path, capsys, finished_run):
    """meta.json describes the first start; what trained each later part (command, versions, commit) is
    one ``resumes`` entry per resume, from the step it resumed at. A damaged meta.json does not stop one."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    first = json.loads((run_dir / "meta.json").read_text())
    assert "git_dirty" in first and "resumes" not in first
    for total in ("256", "320"):
        code, _, err = run_main(["resume", str(run_dir), "--total-timesteps", total, "--quiet"], capsys)
        assert code == 0, err
    meta = json.loads((run_dir / "meta.json").read_text())
    assert {k: v for k, v in meta.items() if k != "resumes"} == first
    assert [r["step"] for r in meta["resumes"]] == [192, 256]
    for entry in meta["resumes"]:
        assert set(entry) == {"started", "step", "command", "versions", "cpu_tanh", "git_commit", "git_dirty", "device",
                                "host", "cwd"}
        assert entry["cpu_tanh"] == first["machine"]["cpu_tanh"]  # the same machine: no note
        assert isinstance(entry["command"], list)  # this process's argv (in a test: pytest's), as a first start's
        assert entry["versions"] == first["versions"]
    (run_dir / "meta.json").write_text(json.dumps({**meta, "resumes": {"edited": True}}))
    code, _, err = run_main(["train", "CartPole-v1", "--resume", "auto", "--run-dir", str(run_dir), *SMALL,
                             "--total-timesteps", "384"], capsys)  # the last --total-timesteps counts
    assert code == 0, err
    assert "meta.json: resumes is not a list (a dict)" in err and steps(run_dir)[-1] == 384
    assert json.loads((run_dir / "meta.json").read_text())["resumes"] == {"edited": True}


def test_what_a_kill_while_locking_left_does_not_make_the_folder_not_empty(tmp_path, capsys):
    """A SIGKILL in the microseconds a process takes the lock leaves its temp file (.proxima.lock.<pid>.<hex>.tmp)
    or a stale lock it moved aside (.proxima.lock.stale.<pid>): the same command was then refused, "not empty".
    A dead process's leftovers are no one's data: the run starts and removes them; a live process's are a
    run starting there, and still refuse."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    run_dir = tmp_path / "R"
    run_dir.mkdir()
    leftovers = [f".proxima.lock.{gone.pid}.0a1b2c3d4e5f.tmp", f".proxima.lock.stale.{gone.pid}"]
    for name in leftovers:
        (run_dir / name).write_text('{"pid": %d}' % gone.pid)
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run_dir), *SMALL], capsys)
    assert code == 0, err
    assert (run_dir / "config.yaml").is_file() and not any((run_dir / n).exists() for n in leftovers)
    live = tmp_path / "L"
    live.mkdir()
    (live / f".proxima.lock.{os.getpid()}.0a1b2c3d4e5f.tmp").write_text("{}")
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(live), *SMALL], capsys)
    error_line(code, err, "is not empty", f".proxima.lock.{os.getpid()}.0a1b2c3d4e5f.tmp")
