"""A stop signal that lands DURING torch's import as `proxima train`/`resume` starts (cli.entry holds it,
signals.BeforeTraining.holding, and raises it once torch is in): one line, 128 + signum, nothing on disk;
and a command that trains nothing (`eval`) has the signal handling it had before proxima.

The stop is sent by a sitecustomize (on the child's PYTHONPATH) whose meta-path finder signals the process
as `torch` starts importing. Where an exception lands inside that import the finder aborts the process, as
torch's C++ does (pybind11::error_already_set, SIGABRT): the hold is what keeps a stop out of it."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SITECUSTOMIZE = '''
import os, signal, sys

class _StopAtTorch:
    sent = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or _StopAtTorch.sent:
            return None
        _StopAtTorch.sent = True
        try:
            os.kill(os.getpid(), getattr(signal, os.environ["STOP_AT_TORCH"]))
            for _ in range(1000):  # the handler runs here, inside the import
                pass
        except BaseException:  # an exception inside torch's import: its C++ aborts the process
            if os.environ.get("STOP_AT_TORCH_ABORTS") == "1":
                sys.stderr.write("terminate called after throwing an instance of 'pybind11::error_already_set'\\n")
                sys.stderr.flush()
                os.abort()
            raise
        return None

sys.meta_path.insert(0, _StopAtTorch())
'''


def _run_stopped_at_torch(args: list, tmp_path, name: str = "SIGTERM", aborts: bool = True) -> tuple:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID")}
    env.update(PYTHONPATH=os.pathsep.join([str(site), str(REPO)]), STOP_AT_TORCH=name,
               STOP_AT_TORCH_ABORTS="1" if aborts else "0")
    proc = subprocess.run([sys.executable, "-m", "proxima", *args], cwd=work, env=env, text=True,
                          capture_output=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr, work


def test_sigterm_during_torchs_import_as_train_starts_is_one_line_and_no_run(tmp_path):
    code, out, err, work = _run_stopped_at_torch(
        ["train", "CartPole-v1", "--total-timesteps", "2048", "--run-dir", "run"], tmp_path)
    assert (code, out) == (143, ""), err
    assert err == "proxima: stopped by SIGTERM; before training started; nothing was kept\n"
    assert os.listdir(work) == []


def test_sigterm_during_torchs_import_as_resume_starts_leaves_the_run_as_it_was(tmp_path):
    run_dir = tmp_path / "work" / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("env_id: CartPole-v1\n")
    code, out, err, work = _run_stopped_at_torch(["resume", "run"], tmp_path)
    assert (code, out) == (143, ""), err
    assert err == "proxima: stopped by SIGTERM; before training started; the run is as its last checkpoint left it\n"
    assert os.listdir(work) == ["run"]
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "config.yaml"]
    assert list((run_dir / "checkpoints").iterdir()) == []
    assert (run_dir / "config.yaml").read_text() == "env_id: CartPole-v1\n"


def test_eval_keeps_the_signal_handling_from_before_proxima(tmp_path):
    """eval trains nothing: SIGTERM during its torch import ends it by SIGTERM's default action, as before
    proxima's guard, never with "before training started" (the guard is taken off once the command is read)."""
    code, out, err, _ = _run_stopped_at_torch(["eval", "run"], tmp_path, aborts=False)
    assert code == -signal.SIGTERM, (code, err)
    assert "before training started" not in err and out == ""


@pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                    reason="the child inherits an ignored SIGINT")
def test_ctrl_c_during_evals_torch_import_is_a_keyboard_interrupt_as_before(tmp_path):
    code, out, err, _ = _run_stopped_at_torch(["eval", "run"], tmp_path, name="SIGINT", aborts=False)
    assert code == 130, err
    assert "before training started" not in err and "Traceback" not in err and out == ""
