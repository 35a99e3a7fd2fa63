"""Review s34 (Proxima from Python), item 7 and populations: train() returns the run directory in the
form it was named whether the run is fresh or resumed; a run started from Python (a notebook's kernel)
records no kernel argv as its command; a policy's repr says which policy it is; act() on a dict for a
policy of array observations says so; a population trained from Python refuses a value in
PPOConfig's words."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import proxima
from proxima import PPOConfig, load
from proxima.config import ConfigError
from tests.cli_helpers import TINY_POP, error_line, fake_run_dir, run_main

TINY = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, eval_episodes=0,
            progress=False, threads=1)
KERNEL_ARGV = ["/opt/conda/lib/python3.11/site-packages/ipykernel_launcher.py", "-f", "/tmp/tmpkos8ig2r.json"]


@pytest.fixture(scope="module")
def named_run(tmp_path_factory):
    """A 1-iteration run trained from Python with a relative run_dir: (root it is relative to, its
    returned run_dir, its returned policy)."""
    root = tmp_path_factory.mktemp("named")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        run_dir, policy = proxima.train(PPOConfig(**TINY, total_timesteps=64, run_dir="runs/i1"), quiet=True)
    return root, run_dir, policy


# ------------------------------------------------------------------------------------ a. the returned run_dir
def test_train_returns_the_run_dir_as_named_for_a_fresh_run_and_a_resume_alike(named_run, monkeypatch):
    root, fresh, _ = named_run
    monkeypatch.chdir(root)
    assert fresh == Path("runs/i1")
    # resume="auto" on the same relative run_dir: the same relative Path, not the real path the lock was taken on
    resumed, _ = proxima.train(PPOConfig(**TINY, total_timesteps=128, run_dir="runs/i1"), resume="auto", quiet=True)
    assert resumed == Path("runs/i1") and not resumed.is_absolute()
    # resume=RUN_DIR, the config the run's own: RUN as given
    again, _ = proxima.train(None, resume="runs/i1", quiet=True)
    assert again == Path("runs/i1")
    # resume=RUN/checkpoints/step_N.pt (its newest): RUN in the form the file was named in
    newest = sorted((root / "runs/i1/checkpoints").glob("step_*.pt"))[-1]
    by_file, _ = proxima.train(None, resume=f"runs/i1/checkpoints/{newest.name}", quiet=True)
    assert by_file == Path("runs/i1")
    # an absolute directory given stays absolute
    absolute, _ = proxima.train(None, resume=str(root / "runs/i1"), quiet=True)
    assert absolute == root / "runs/i1"


# ------------------------------------------------------------------------------------ b. the recorded command
def test_python_command_names_the_call_and_a_jupyter_kernel_not_its_argv():
    from proxima.rundir import python_command

    assert python_command(argv=KERNEL_ARGV) == "python: proxima.train(...) from a Jupyter kernel"
    assert python_command(argv=["colab_kernel_launcher.py", "-f", "/x.json"]).endswith("from a Jupyter kernel")
    assert python_command(argv=["t1.py", "--lr", "3e-4"]) == "python: proxima.train(...) from t1.py --lr 3e-4"
    assert python_command(argv=[""]) == "python: proxima.train(...) from an interactive Python session"


def test_report_md_shows_a_recorded_kernel_argv_as_a_run_from_python(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "run")
    (run / "meta.json").write_text(json.dumps({"kind": "ppo", "command": KERNEL_ARGV}))
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert "python: proxima.train(...) from a Jupyter kernel" in text
    assert "ipykernel_launcher" not in text and "tmpkos8ig2r" not in text
    # a command line that trained is shown as typed
    (run / "meta.json").write_text(json.dumps({"kind": "ppo", "command": ["proxima", "train", "CartPole-v1", "--seed", "1"]}))
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    assert "proxima train CartPole-v1 --seed 1" in (run / "report.md").read_text()


def _tiny_members(**kw):
    from proxima.population import member_configs

    base = PPOConfig(**{**TINY, "num_envs": 2, "total_timesteps": 32, **kw})
    return member_configs(base, [1, 2], {})


def test_a_population_trained_in_a_notebook_records_the_call_not_the_kernels_argv(tmp_path, monkeypatch):
    from proxima.population_run import train_population

    monkeypatch.setattr(sys, "argv", KERNEL_ARGV)
    run = train_population(_tiny_members(), [1, 2], {}, run_dir=tmp_path / "pop", quiet=True)
    members = sorted(p for p in run.iterdir() if (p / "meta.json").is_file())
    assert len(members) == 2
    for member in members:
        command = json.loads((member / "meta.json").read_text())["command"]
        assert command == "python: proxima.population_run.train_population(...) from a Jupyter kernel"


# ------------------------------------------------------------------------------------ c. Policy's repr
def test_a_policys_repr_names_its_env_actions_encoder_device_and_step(named_run):
    root, run_dir, trained = named_run
    loaded = load(root / "runs/i1/checkpoints/step_000000000064.pt")
    assert repr(loaded) == "Policy(env_id='CartPole-v1', actions=Discrete(2), encoder='mlp', device='cpu', step=64)"
    assert repr(trained) == "TrainedPolicy(env_id='CartPole-v1', actions=Discrete(2), encoder='mlp', device='cpu', step=64)"


# ------------------------------------------------------------------------------------ d. act() given a dict
def test_act_on_a_dict_for_a_policy_of_array_observations_says_it_takes_an_array(named_run):
    _, _, policy = named_run
    with pytest.raises(ValueError) as info:
        policy.act({"a": 1})
    assert str(info.value) == ("Policy.act: obs is a dict (keys 'a'), but this policy takes a single array or tensor "
                               "observation of shape (4,) (or a batch (B, 4)), not a dict")
    assert policy.act(np.zeros(4, np.float32)) in (0, 1)  # the array it takes still acts


# ------------------------------------------------------------------------------------ e. a population's refusal
def test_a_population_from_python_refuses_a_value_in_ppoconfigs_words_and_the_cli_in_flags(tmp_path, capsys):
    from proxima.population_run import train_population

    with pytest.raises(ConfigError) as info:
        train_population(_tiny_members(gamma=2.0), [1, 2], {}, run_dir=tmp_path / "pop", quiet=True)
    assert str(info.value).startswith("PPOConfig.gamma = 2.0: "), str(info.value)
    assert not (tmp_path / "pop").exists()
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--gamma", "2.0", "--total-timesteps", "32",
                             "--run-dir", str(tmp_path / "cli"), *TINY_POP], capsys)
    error_line(code, err, "--gamma 2.0: ")


def test_a_run_trained_in_a_notebook_records_the_call_in_meta_json_not_the_kernels_argv(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", KERNEL_ARGV)
    run_dir, _ = proxima.train(PPOConfig(**TINY, total_timesteps=64, run_dir=str(tmp_path / "run")), quiet=True)
    proxima.train(PPOConfig(**TINY, total_timesteps=128, run_dir=str(run_dir)), resume="auto", quiet=True)
    meta = json.loads((run_dir / "meta.json").read_text())
    said = "python: proxima.train(...) from a Jupyter kernel"
    assert meta["command"] == said and [r["command"] for r in meta["resumes"]] == [said]
