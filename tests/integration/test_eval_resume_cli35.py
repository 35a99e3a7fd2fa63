"""Review 35: `proxima resume` past a damaged meta.json; eval's output places its numbers (the step and
the checkpoint evaluated); eval --help's --device default; --nproc's dry run sizes the job's iteration;
a resume with another process count under a torchrun typed by hand is refused once, naming torchrun."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from proxima import checkpoint as ckpt
from tests.cli_helpers import TINY_RUN, error_line, run_main, tiny_cartpole_run


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    return tiny_cartpole_run(tmp_path_factory, "ev35")


@pytest.fixture(scope="module")
def with_best(tmp_path_factory):
    """A 3-iteration run evaluated every iteration: a best.pt from before its last step."""
    from proxima import cli

    run = tmp_path_factory.mktemp("ev35best") / "run"
    flags = [a for a in TINY_RUN if a not in ("--eval-episodes", "0")]
    assert cli.main(["train", "CartPole-v1", *flags, "--eval-episodes", "1", "--eval-every", "64", "--total-timesteps",
                     "192", "--run-dir", str(run), "--quiet"]) == 0
    return run


def copy_of(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run", symlinks=True))


# -- 1. resume past a damaged meta.json -----------------------------------------------------------------------

@pytest.mark.parametrize("text, why", [("[1]", "expected a JSON object, got list"),
                                       ("{garb", "not readable JSON (JSONDecodeError)")])
def test_resume_goes_on_past_a_damaged_meta_json_and_leaves_it(finished, tmp_path, capsys, text, why):
    run = copy_of(finished, tmp_path)
    (run / "meta.json").write_text(text)
    code, out, err = run_main(["resume", str(run), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0, err
    assert out.strip() == f"run directory: {run}"
    assert ckpt.list_checkpoints(run)[-1].name == "step_000000000192.pt"  # it trained on
    assert f"meta.json: {why}; the run directory's meta.json was damaged or edited; this resume is not recorded in it" in err
    assert (run / "meta.json").read_text() == text  # left as it is (docs/reliability.md)


def test_an_rlhf_run_with_a_damaged_meta_json_is_still_refused_naming_it(tmp_path, capsys):
    """Its checkpoints' six-digit names say RLHF: its resume needs meta.json, and the line names it."""
    from proxima.rundir import RunDirError
    from proxima.run_setup import resumes_rlhf

    run = tmp_path / "rl"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step_000002.pt").write_bytes(b"x")
    (run / "meta.json").write_text("[1]")
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    error_line(code, err, f"{run / 'meta.json'}: expected a JSON object, got list")
    with pytest.raises(RunDirError):
        resumes_rlhf(run)
    (run / "checkpoints" / "step_000000000128.pt").write_bytes(b"x")  # a PPO checkpoint's name: PPO decides
    assert resumes_rlhf(run) is False
    (run / "meta.json").write_text(json.dumps({"kind": "rlhf"}))
    assert resumes_rlhf(run) is True


# -- 2. eval says which checkpoint and step it evaluated --------------------------------------------------------

def test_eval_json_and_line_name_the_checkpoint_and_its_step(finished, capsys):
    newest = ckpt.list_checkpoints(finished)[-1]
    code, out, err = run_main(["eval", str(finished), "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["global_step"] == 128 and data["checkpoint"] == str(newest)
    code, out, err = run_main(["eval", str(finished), "--episodes", "1"], capsys)
    assert code == 0, err
    assert re.fullmatch(r"CartPole-v1: [\d.]+ \+- 0\.00 at step 128 over 1 episode \(deterministic\)\n", out), out


def test_eval_best_names_best_pt_and_its_own_step(with_best, capsys):
    import torch

    best = ckpt.best_checkpoint_path(with_best)
    step = torch.load(best, weights_only=True)["global_step"]
    assert step < 192  # best.pt of an earlier iteration than the newest checkpoint (the test's premise)
    code, out, err = run_main(["eval", str(with_best), "--best", "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert (data["global_step"], data["checkpoint"]) == (step, str(best))
    code, out, err = run_main(["eval", str(with_best), "--best", "--episodes", "1"], capsys)
    assert code == 0, err
    assert f" at step {step:,} over 1 episode (" in out, out


# -- 3. eval --help: --device's default ---------------------------------------------------------------------------

def test_eval_help_says_device_defaults_to_cpu_and_how_to_match_a_cuda_run(capsys):
    code, out, _ = run_main(["eval", "--help"], capsys)
    assert code == 0
    text = " ".join(out.split())
    start = text.index("--device DEVICE torch")  # its help, not the usage line
    device = text[start:text.index("--backend", start)]
    assert "default: cpu" in device and "--device cuda" in device and "eval.json" in device, device


# -- 4. --nproc's dry run sizes the job's iteration on stderr -----------------------------------------------------

DRY = ["train", "CartPole-v1", "--dry-run", "--num-envs", "4", "--num-steps", "32", "--total-timesteps", "2048"]


def test_nproc_dry_run_says_the_jobs_iteration_on_stderr_and_keeps_stdout_yaml(capsys):
    code, out, err = run_main([*DRY, "--nproc", "2"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out)["num_envs"] == 4  # stdout: the YAML alone, per process
    assert "proxima: 2 processes x 4 envs x 32 steps = 256 steps per iteration, 8 iterations\n" in err, err
    code, _, err = run_main(DRY, capsys)
    assert code == 0 and "processes x" not in err, err  # one process: the YAML's num_envs x num_steps is the batch
    code, _, err = run_main([*DRY, "--nproc", "2", "--quiet"], capsys)
    assert code == 0 and "processes x" not in err, err


# -- 5. another process count: refused in rank 0's work, once; torchrun's count named -----------------------------

def test_resolve_start_refuses_another_process_count_before_setting_anything_aside(with_best, tmp_path, monkeypatch):
    """Rank 0 reads the checkpoint in resolve_start (inside DistContext.from_main): the refusal there is
    reported once under torchrun, and the checkpoints newer than the one named (best.pt, of an earlier
    step) are not set aside first."""
    from proxima import distributed
    from proxima.launch import COMMAND_ENV
    from proxima.run_setup import resolve_start
    from proxima.rundir import RunSession

    run = copy_of(with_best, tmp_path)
    files, best = ckpt.list_checkpoints(run), ckpt.best_checkpoint_path(run)
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    monkeypatch.setattr(distributed, "_CONTEXT", distributed.DistContext(world_size=2))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "hand")  # a torchrun typed by hand: no launcher's COMMAND_ENV
    monkeypatch.delenv(COMMAND_ENV, raising=False)
    session = RunSession()
    try:
        with pytest.raises(ckpt.CheckpointError) as e:
            resolve_start(None, None, str(best), session, overrides={}, quiet=True)
    finally:
        session.release()
    assert str(e.value).startswith(f"{best}: written by 1 process(es), resumed with 2; use the same number of processes, 1 "
                                   f"(proxima train --resume {run}, without torchrun); to continue with another count")
    assert files and ckpt.list_checkpoints(run) == files
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before  # no abandoned-TIME/ folder either


def test_a_hand_typed_torchrun_is_told_its_own_process_count(monkeypatch):
    from proxima import run_setup
    from proxima.launch import COMMAND_ENV

    state = {"world_size": 2, "path": "/r/run/checkpoints/step_000000000128.pt"}
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "hand")
    monkeypatch.delenv(COMMAND_ENV, raising=False)
    with pytest.raises(ckpt.CheckpointError) as e:
        run_setup.check_processes(state, 3, launcher=False)
    assert ("resumed with 3; use the same number of processes, 2 in all (torchrun --nproc-per-node 2 on one machine, "
            "or proxima train --resume /r/run --nproc 2); to continue with another count") in str(e.value)
    monkeypatch.setenv(COMMAND_ENV, json.dumps(["train", "--resume", "/r/run", "--nproc", "3"]))  # --nproc's ranks
    with pytest.raises(ckpt.CheckpointError, match=r"; use the same --nproc \("):
        run_setup.check_processes(state, 3, launcher=False)


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_torchrun_by_hand_with_another_process_count_is_refused_once(finished, tmp_path):
    from tests.distributed_helpers import run as run_job

    run = copy_of(finished, tmp_path)
    res = run_job([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "proxima",
                   "train", "--resume", str(run), "--total-timesteps", "256"], tmp_path)
    assert res.returncode != 0
    refusal = "written by 1 process(es), resumed with 2; use the same number of processes, 1"
    assert res.stderr.count(refusal) == 1, res.stderr[-4000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith(("proxima:", "proxima train:"))]
    assert len(lines) == 1 and lines[0].startswith(f"proxima train: error: {ckpt.list_checkpoints(run)[-1]}: {refusal} "
                                                   f"(proxima train --resume {run}, without torchrun); "), res.stderr[-4000:]
