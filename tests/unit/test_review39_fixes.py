"""Fixes from a review of the day's changes: ``~`` in a --config file's run_dir as the dry run sees
it, one device resolution in proxima.load, check-env's spaces line, the advice of a run with no
usable checkpoint, report --json written before report.md, and a typed --metric honoured."""

from pathlib import Path

import yaml

import proxima
from proxima import PPOConfig
from tests.cli_helpers import error_line, run_main
from tests.unit.test_python_api39 import SMALL  # the Python API tests' tiny run


def _config_file(path: Path, **values) -> str:
    path.write_text(yaml.safe_dump({"env_id": "CartPole-v1", **values}))
    return str(path)


def test_expand_home_lives_in_rundir_and_stays_importable_from_the_package(home):
    from proxima.rundir import expand_home

    assert proxima._expand_home is expand_home
    assert expand_home("~/x") == str(home / "x") and expand_home(Path("~/x")) == home / "x"


def test_dry_run_of_a_config_files_tilde_run_dir_checks_the_home_directory(home, capsys):
    (home / "runs" / "cp").mkdir(parents=True)
    (home / "runs" / "cp" / "notes.txt").write_text("mine")
    cfg = _config_file(home / "c.yaml", run_dir="~/runs/cp")
    code, _, err = run_main(["train", "--config", cfg, "--dry-run"], capsys)
    error_line(code, err, str(home / "runs" / "cp"))  # the directory train refuses, not ./~/runs/cp (new)
    assert not Path("~").exists()


def test_dry_run_resume_auto_of_a_config_files_tilde_run_dir_continues_the_home_run(home, capsys):
    proxima.train(PPOConfig(env_id="CartPole-v1", **SMALL), run_dir="~/runs/cp", quiet=True)
    cfg = _config_file(home / "c.yaml", run_dir="~/runs/cp", num_envs=4, num_steps=16, total_timesteps=128)
    code, out, err = run_main(["train", "--config", cfg, "--resume", "auto", "--dry-run"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out)["run_dir"] == str(home / "runs" / "cp")  # the resume's, not a new run in ./~
    assert not Path("~").exists()


def test_load_auto_on_a_broken_gpu_probes_once_and_notes_once_in_the_calls_words(tmp_path, monkeypatch, capsys):
    import torch

    from proxima import device as device_mod

    run_dir, _ = proxima.train(PPOConfig(env_id="CartPole-v1", **SMALL), run_dir=tmp_path / "run", quiet=True)
    capsys.readouterr()
    probes = []

    def broken(dev=None):
        probes.append(dev)
        return "a tiny tensor op on cuda:0 failed (RuntimeError: CUDA error: busy)"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(device_mod, "cuda_op_problem", broken)
    monkeypatch.setattr(device_mod, "_NOTED", set())
    policy = proxima.load(run_dir, device="auto")
    assert policy.device == torch.device("cpu")
    assert len(probes) == 1
    assert capsys.readouterr().err == (
        "proxima: note: device='auto': CUDA is not usable here (a tiny tensor op on cuda:0 failed (RuntimeError: "
        "CUDA error: busy)); using the CPU (proxima doctor says more)\n")


def test_check_env_says_spaces_not_described_where_the_description_raises_as_train_does(monkeypatch, capsys):
    from proxima.envs import checker

    def raises(*args, **kwargs):
        raise KeyError("obs")

    monkeypatch.setattr(checker, "spaces_summary", raises)
    code, out, err = run_main(["check-env", "CartPole-v1"], capsys)
    assert code == 0 and "Traceback" not in err, err
    lines = out.splitlines()
    assert lines[-2:] == ["spaces: not described (KeyError: 'obs')", lines[-1]]
    assert lines[-1].startswith("OK: CartPole-v1 passes ")


def test_missing_checkpoints_never_advise_a_truncated_best_pt(tmp_path, capsys):
    run_dir, _ = proxima.train(PPOConfig(env_id="CartPole-v1", **SMALL), run_dir=tmp_path / "run", quiet=True)
    folder = run_dir / "checkpoints"
    (step,) = sorted(folder.glob("step_*.pt"))
    (folder / "best.pt").write_bytes(step.read_bytes()[:200])  # truncated: no resume loads it
    step.unlink()
    code, _, err = run_main(["eval", str(run_dir)], capsys)
    line = error_line(code, err, f"{run_dir}: its checkpoints are missing")
    assert "proxima resume" not in line, line
    assert line.endswith(f"or train it again from the start: proxima train --config {run_dir / 'config.yaml'} "
                         "--resume auto (its files are moved aside) (its best.pt does not load either)"), line


def test_report_json_that_cannot_be_written_leaves_no_report_md(tmp_path, monkeypatch, capsys):
    import errno

    from proxima import atomic
    from tests.cli_helpers import fake_run_dir

    run = fake_run_dir(tmp_path, "run")
    written = atomic.write_atomic

    def refuse_json(path, *args, **kwargs):
        if str(path).endswith(".json"):
            raise OSError(errno.EACCES, "Permission denied")
        return written(path, *args, **kwargs)

    monkeypatch.setattr(atomic, "write_atomic", refuse_json)
    code, _, err = run_main(["report", str(run), "--json", str(tmp_path / "numbers.json")], capsys)
    error_line(code, err, str(tmp_path / "numbers.json"))
    assert not (run / "report.md").exists() and not (run / "report_curve.png").exists()
    assert not (tmp_path / "numbers.json").exists()
