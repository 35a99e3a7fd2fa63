"""An RLHF run directory is data: a reward it records as code is imported only with --trust-run (or
when the user names the reward), a link planted in it is never written through, and a damaged
metrics.csv or a huge --threads is one line or a note, never a traceback."""

import sys

import pytest
from cli_helpers import snapshot
import yaml

from proxima.cli import main as proxima_main
from proxima.rlhf import resume, train_rlhf
from proxima.rlhf.__main__ import main as rlhf_main
from proxima.rlhf.rundir import list_checkpoints, plot_curves, read_metrics
from proxima.rlhf.config import ConfigError

EVIL = 'open({marker!r}, "w").write("ran")\n\ndef f(prompts, responses):\n    return [0.0] * len(prompts)\n'


def resume_refused(*args, **kwargs) -> str:
    """resume()'s refusal of bad input (it raises), as the one line `proxima resume` prints for it."""
    from proxima.checkpoint import CheckpointError
    from proxima.diskspace import StorageError

    with pytest.raises((ConfigError, StorageError, CheckpointError)) as e:
        resume(*args, **kwargs)
    return f"proxima resume: error: {e.value}"


def one_line_error(capsys, code, prefix: str) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith(prefix) and "Traceback" not in err, err
    return err



@pytest.fixture
def clean_imports(monkeypatch, tmp_path):
    """sys.path and the planted module are put back after the test (a trusted resume imports it)."""
    monkeypatch.syspath_prepend(str(tmp_path / "nothing"))
    yield
    sys.modules.pop("evilreward", None)


@pytest.fixture
def planted(tiny_cfg, tmp_path, monkeypatch, clean_imports):
    """(run, marker): a finished 1-step run whose config.yaml was edited to record a reward module shipped
    in the run directory itself, which writes ``marker`` when imported."""
    run = train_rlhf(tiny_cfg(steps=1, run_dir=str(tmp_path / "run")))
    marker = tmp_path / "PWNED"
    (run / "evilreward.py").write_text(EVIL.format(marker=str(marker)))
    config = yaml.safe_load((run / "config.yaml").read_text())
    config.update(reward=["evilreward:f"], reward_import_path=["/home/someone/Downloads/run", str(run), "."])
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    return run, marker


def test_resume_refuses_a_recorded_reward_module_without_trust_run(planted, capsys):
    run, marker = planted
    before = snapshot(run)
    code = proxima_main(["resume", str(run), "--steps", "2"])
    err = one_line_error(capsys, code, "proxima resume: error: ")
    assert (f"{run / 'config.yaml'}: the recorded reward 'evilreward:f' would import and run module 'evilreward'; not done "
            "for a reward read from a run's files: pass --trust-run to `proxima resume` if you trust that code") in err
    assert not marker.exists() and "evilreward" not in sys.modules
    assert snapshot(run) == before and not (run / ".proxima.lock").exists()


def test_resume_refuses_a_recorded_reward_file_too(planted, capsys):
    run, marker = planted
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["reward"] = [f"{run / 'evilreward.py'}:f"]
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    err = resume_refused(run, steps=2)
    assert f"would import and run the file {run / 'evilreward.py'}" in err and not marker.exists()


def test_trust_run_is_the_users_consent(planted, capsys):
    run, marker = planted
    assert proxima_main(["resume", str(run), "--steps", "2", "--trust-run"]) == 0
    assert marker.exists() and read_metrics(run)["step"] == [1.0, 2.0]


def test_a_runs_config_given_to_proxima_rlhf_is_data_too(planted, tmp_path, capsys):
    run, marker = planted
    new = tmp_path / "new"
    code = rlhf_main(["--config", str(run / "config.yaml"), "--run-dir", str(new)])
    err = one_line_error(capsys, code, "proxima rlhf: error: ")
    assert "the recorded reward 'evilreward:f' would import and run module 'evilreward'" in err
    assert "give it on the command line (--reward evilreward:f)" in err
    assert not marker.exists() and not new.exists()
    # named on the command line, the reward is the user's; the folders the file records are not searched for it
    code = rlhf_main(["--config", str(run / "config.yaml"), "--run-dir", str(new), "--reward", "evilreward:f"])
    assert "cannot import evilreward" in one_line_error(capsys, code, "proxima rlhf: error: ")
    assert not marker.exists() and not new.exists()
    code = rlhf_main(["--config", str(run / "config.yaml"), "--run-dir", str(new), "--reward", "proxima.rlhf.demo:keyword_sentiment"])
    assert code == 0, capsys.readouterr().err
    recorded = yaml.safe_load((new / "config.yaml").read_text())
    assert recorded["reward"] == ["proxima.rlhf.demo:keyword_sentiment"] and recorded["reward_import_path"] == [str(tmp_path)]


def test_a_config_file_of_ones_own_may_name_a_reward_module_with_trust_run(assets, tmp_path, monkeypatch, clean_imports,
                                                                           capsys):
    """A file's reward module runs only with --trust-run (any --config file may be a downloaded run's:
    tests/rlhf/test_rlhf_untrusted26.py has the refusal)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "my_rewards_untrusted_test.py").write_text("def short(prompts, responses):\n    return [-len(r) for r in responses]\n")
    own = tmp_path / "rlhf.yaml"
    own.write_text(yaml.safe_dump({"policy": str(assets / "model"), "prompts": str(assets / "prompts.txt"),
                                   "reward": "my_rewards_untrusted_test:short", "reward_import_path": [str(lib)], "steps": 1,
                                   "batch_size": 4, "max_new_tokens": 4, "update_epochs": 1, "print_every": 0, "plot": False}))
    monkeypatch.chdir(tmp_path)
    assert rlhf_main(["--config", str(own), "--trust-run", "--run-dir", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    sys.modules.pop("my_rewards_untrusted_test", None)


def test_a_link_out_of_the_run_is_refused_before_anything_is_written(tiny_cfg, tmp_path, capsys):
    run = train_rlhf(tiny_cfg(steps=1, run_dir=str(tmp_path / "run")))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.csv").write_text("PRECIOUS")
    (run / "metrics.csv").unlink()
    (run / "metrics.csv").symlink_to(elsewhere / "precious.csv")
    code = proxima_main(["resume", str(run), "--steps", "2"])
    err = one_line_error(capsys, code, "proxima resume: error: ")
    assert f"{run / 'metrics.csv'}: is a symbolic link" in err and "outside the run directory" in err
    assert (elsewhere / "precious.csv").read_text() == "PRECIOUS"


def test_a_link_at_a_temp_name_is_never_followed(tiny_cfg, tmp_path, capsys):
    run = train_rlhf(tiny_cfg(steps=1, run_dir=str(tmp_path / "run")))
    victim = tmp_path / "precious"
    victim.write_text("PRECIOUS")
    (run / "checkpoints" / ".step_000002.pt.tmp").symlink_to(victim)  # the fixed temp name of the checkpoint writer
    assert resume(run, steps=2) == 0, capsys.readouterr().err
    assert victim.read_text() == "PRECIOUS"
    assert [p.name for p in list_checkpoints(run)][-1] == "step_000002.pt"
    (run / "curve.png").symlink_to(victim)  # a link at a target: replaced by the file, never written through
    plot_curves(run)
    assert victim.read_text() == "PRECIOUS" and (run / "curve.png").is_file() and not (run / "curve.png").is_symlink()


def test_a_damaged_metrics_csv_is_a_note_and_the_run_resumes(tiny_cfg, tmp_path, capsys):
    run = train_rlhf(tiny_cfg(steps=2, run_dir=str(tmp_path / "run")))
    metrics = run / "metrics.csv"
    metrics.write_bytes(metrics.read_bytes() + b"\xff\xfe junk\n" + b"2," + b"9" * 200_000 + b"\n")
    (run / "samples.jsonl").write_bytes((run / "samples.jsonl").read_bytes() + b"\xff\xfe not json\n")
    assert resume(run, steps=3) == 0
    err = capsys.readouterr().err
    assert f"proxima: note: {metrics}: dropped 2 line(s) that are not rows Proxima wrote" in err and "Traceback" not in err
    assert read_metrics(run)["step"] == [1.0, 2.0, 3.0]


def test_a_huge_thread_count_is_one_line(assets, tmp_path, capsys):
    code = rlhf_main(["--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"), "--reward",
                      "proxima.rlhf.demo:keyword_sentiment", "--run-dir", str(tmp_path / "run"), "--threads", "1000000"])
    assert "--threads 1000000: must be at most" in one_line_error(capsys, code, "proxima rlhf: error: ")
    assert not (tmp_path / "run").exists()


def test_a_new_run_never_prunes_through_a_planted_checkpoints_link(assets, tmp_path, capsys):
    other = tmp_path / "other" / "checkpoints"
    other.mkdir(parents=True)
    for step in (1, 2, 3, 4):
        (other / f"step_{step:06d}.pt").write_bytes(b"another run's")
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").symlink_to(other, target_is_directory=True)
    code = rlhf_main(["--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"), "--reward",
                      "proxima.rlhf.demo:keyword_sentiment", "--run-dir", str(run), "--steps", "1", "--batch-size", "4",
                      "--max-new-tokens", "4", "--update-epochs", "1", "--print-every", "0", "--no-plot", "--keep-checkpoints", "1"])
    assert "is a symbolic link" in one_line_error(capsys, code, "proxima rlhf: error: ")
    assert sorted(p.name for p in other.iterdir()) == [f"step_{s:06d}.pt" for s in (1, 2, 3, 4)]
