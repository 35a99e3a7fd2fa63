"""The Python API review (round 28), second part: a second Ctrl-C in a notebook, what train() returns,
the restart advice of a run without a checkpoint, train()'s config type, Python's words in train()'s
refusals, and a stop line that names huge rewards."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import warm_python
from cli_helpers import run_main, without_spaces_line
from proxima import checkpoint as ckpt
from proxima.config import ConfigError, PPOConfig


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


# --- finding 1: a second interrupt from the Python API -----------------------------------------------------
SECOND_SIGINT_FROM_PYTHON = textwrap.dedent("""
    import os, signal, sys, time
    from proxima import PPOConfig, checkpoint, train

    important, writes = 42, []

    def before_replace(tmp, path):
        writes.append(path)
        if len(writes) == 2:  # the second checkpoint is in its temp file, not yet in place
            os.kill(os.getpid(), signal.SIGINT)  # first: finish the iteration, checkpoint, stop
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)  # second: stop at once, here
            time.sleep(0.05)
            print("still in the checkpoint write after the second SIGINT", file=sys.stderr)

    checkpoint._before_replace = before_replace
    run = sys.argv[1]
    try:
        train(PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=32, total_timesteps=100_000, threads=1,
                        progress=False, checkpoint_every=1, eval_episodes=0, run_dir=run), quiet=True)
    except KeyboardInterrupt as e:  # the first's stop is one too: its class name tells them apart
        print(f"{type(e).__name__} caught", flush=True)
    print("alive", important, "lock left:", os.path.exists(os.path.join(run, ".proxima.lock")), flush=True)
""")


def test_a_second_sigint_in_a_python_run_raises_keyboardinterrupt_and_the_process_lives_on(tmp_path):
    script = tmp_path / "second.py"
    script.write_text(SECOND_SIGINT_FROM_PYTHON)
    run = tmp_path / "run"
    out = warm_python.run([sys.executable, str(script), str(run)], cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=180)
    # was: exit 130 at once (os._exit), which in Jupyter killed the kernel and everything in it
    assert out.returncode == 0, out.stderr
    assert "KeyboardInterrupt caught" in out.stdout
    assert "alive 42 lock left: False" in out.stdout  # the run's lock released on the way out
    assert ("proxima: second interrupt, stopping now without this iteration's checkpoint (last checkpoint kept): "
            "KeyboardInterrupt") in out.stderr
    assert "interrupt again to stop at once with KeyboardInterrupt)" in out.stderr
    assert "still in the checkpoint write" not in out.stderr
    assert [p.name for p in ckpt.list_checkpoints(run)] == [f"step_{128:012d}.pt"]  # the one before loads
    assert ckpt.load_checkpoint(run)["global_step"] == 128


def test_the_guard_raises_on_a_second_sigint_only_when_asked_and_a_second_sigterm_still_exits(monkeypatch, capsys):
    from proxima.signals import SignalGuard

    def exited(code):
        raise SystemExit(code)

    monkeypatch.setattr(os, "_exit", exited)
    guard = SignalGuard(last_checkpoint=lambda: None, second_raises=True)
    guard._handle(signal.SIGINT, None)
    with pytest.raises(KeyboardInterrupt) as info:
        guard._handle(signal.SIGINT, None)
    assert type(info.value) is KeyboardInterrupt  # a plain one: no checkpoint follows, unlike TrainingInterrupted's
    guard = SignalGuard(last_checkpoint=lambda: None, second_raises=True)
    guard._handle(signal.SIGINT, None)
    with pytest.raises(SystemExit, match="143"):  # SIGTERM asks for the process to end
        guard._handle(signal.SIGTERM, None)
    guard = SignalGuard(last_checkpoint=lambda: None)  # the CLI's: exit at once, as before
    guard._handle(signal.SIGINT, None)
    with pytest.raises(SystemExit, match="130"):
        guard._handle(signal.SIGINT, None)


# --- finding 3: train() returns what load(run_dir) gives -----------------------------------------------------
def test_train_returns_a_policy_that_acts_on_raw_observations_as_the_loaded_one(small_config, tmp_path):
    from proxima import load, train
    from proxima.envs import make_env

    cfg = small_config(env_id="Pendulum-v1", norm_obs=True, num_steps=64, total_timesteps=512, run_dir=str(tmp_path / "r"))
    run_dir, policy = train(cfg, quiet=True)
    loaded = load(run_dir)
    obs = make_env("Pendulum-v1", num_envs=5, device="cpu").reset(seed=3)  # raw observations, as an env gives them
    # was: agent.act(obs) skipped the normalizer the network was trained behind, and acted otherwise
    assert torch.equal(policy.act(obs), loaded.act(obs))
    assert torch.equal(policy.batched_act(obs), loaded.batched_act(obs))
    numpy_obs = obs.numpy()
    assert np.array_equal(policy.act(numpy_obs[0]), loaded.act(numpy_obs[0]))
    assert policy.obs_normalizer is not None and not policy.agent.training
    # the network itself is there for code that needs it, and answers as the Agent train() returned did
    assert policy.encoder_kind == policy.agent.encoder_kind == "mlp"
    for p, q in zip(policy.parameters(), loaded.agent.parameters()):
        assert torch.equal(p, q)
    assert policy.run_threads == loaded.run_threads and policy.run_flush_denormal == loaded.run_flush_denormal
    assert policy.path == str(ckpt.list_checkpoints(run_dir)[-1])
    with pytest.raises(AttributeError, match="nor its agent"):
        policy.no_such_thing


def test_a_trained_policy_evaluates_as_the_loaded_one(small_config, tmp_path):
    import copy

    from proxima import load, train
    from proxima.evaluate import evaluate

    run_dir, policy = train(small_config(norm_obs=True, run_dir=str(tmp_path / "r")), quiet=True)
    assert evaluate(policy, episodes=2, seed=5) == evaluate(load(run_dir), episodes=2, seed=5)
    assert copy.deepcopy(policy).act(np.zeros(4, np.float32)) == policy.act(np.zeros(4, np.float32))


# --- finding 5: the restart advice of a run without a checkpoint --------------------------------------------
class _Boom(__import__("gymnasium").Env):
    """Fails at its 30th step across instances while ``armed``: a run that stops in its second iteration,
    before any checkpoint (--checkpoint-every 0)."""

    import gymnasium as _gym

    observation_space = _gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = _gym.spaces.Discrete(2)
    armed, steps = True, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        type(self).steps += 1
        if type(self).armed and type(self).steps == 30:
            raise RuntimeError("boom")
        return np.zeros(3, np.float32), 1.0, False, False, {}


@pytest.fixture
def boom(monkeypatch):
    import gymnasium as gym

    env_id = "Review28Boom-v0"
    monkeypatch.setitem(gym.registry, env_id, gym.envs.registration.EnvSpec(env_id, entry_point=_Boom))
    monkeypatch.setattr(_Boom, "armed", True)
    monkeypatch.setattr(_Boom, "steps", 0)
    return env_id


def _stopped_run(env_id: str, **train_kwargs) -> Path:
    """A run trained from Python that stopped before its first checkpoint; its run directory."""
    from proxima import train
    from proxima.envs import EnvError

    cfg = PPOConfig(env_id=env_id, num_envs=2, num_steps=8, total_timesteps=64, checkpoint_every=0, eval_episodes=0,
                    threads=1, progress=False, num_minibatches=1, update_epochs=1)
    with pytest.raises(EnvError, match="boom"):
        train(cfg, quiet=True, **train_kwargs)
    runs = list(Path("runs").iterdir()) if not train_kwargs else [Path(train_kwargs["run_dir"])]
    assert len(runs) == 1 and (runs[0] / "config.yaml").is_file() and not ckpt.list_checkpoints(runs[0])
    return runs[0].resolve()


def _advice(run: Path) -> list:
    from proxima import load

    with pytest.raises(ckpt.CheckpointError) as e:
        load(run)
    command = str(e.value).split("train it again from the start: ")[1].split(" (its files are moved aside)")[0]
    return shlex.split(command)


def test_the_restart_advice_of_a_default_directory_run_works_as_printed(boom, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run = _stopped_run(boom)  # runs/<env>__<seed>__<time>: config.yaml records run_dir null
    assert yaml.safe_load((run / "config.yaml").read_text())["run_dir"] is None
    argv = _advice(run)
    assert argv[:4] == ["proxima", "train", "--config", str(run / "config.yaml")] and argv[4:] == ["--resume", "auto"]
    _Boom.armed = False
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, out, err = run_main(argv[1:], capsys)
    # was: exit 2, "proxima train: error: --resume auto needs --run-dir DIR (the run to continue)"
    assert code == 0, err
    assert f"run directory: {run}" in out
    assert [p.name for p in ckpt.list_checkpoints(run)] == [f"step_{64:012d}.pt"]  # trained again in its own folder
    assert len(list(run.parent.glob(run.name + ".*"))) == 1  # the stopped run's files moved aside
    assert not (tmp_path / "elsewhere" / "runs").exists()


def test_train_with_run_dir_records_the_directory_it_used(boom, small_config, tmp_path, capsys):
    from proxima import train

    used = tmp_path / "used"
    run_dir, _ = train(small_config(run_dir=str(tmp_path / "named")), run_dir=used, quiet=True)
    assert run_dir == used and not (tmp_path / "named").exists()
    # was: config.yaml said run_dir: .../named, a directory the run never wrote
    assert yaml.safe_load((used / "config.yaml").read_text())["run_dir"] == str(used)
    run = _stopped_run(boom, run_dir=str(tmp_path / "py"))
    assert yaml.safe_load((run / "config.yaml").read_text())["run_dir"] == str(run)
    _Boom.armed = False
    code, out, err = run_main(_advice(run)[1:], capsys)
    assert code == 0 and ckpt.list_checkpoints(run), err


# --- finding 7: train() of something other than a PPOConfig -------------------------------------------------
@pytest.mark.parametrize("config, kind", [({"env_id": "CartPole-v1"}, "dict"), ("CartPole-v1", "str")])
def test_train_of_a_dict_or_an_env_id_is_one_config_error(config, kind, tmp_path, monkeypatch):
    from proxima import train

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:  # was: AttributeError: 'dict' object has no attribute 'env_id', chained
        train(config)
    assert str(e.value) == {"dict": "expected a PPOConfig, got dict (PPOConfig(**fields), or proxima.config.from_dict(mapping) "
                                    "for a mapping)",
                            "str": "expected a PPOConfig, got str 'CartPole-v1': give PPOConfig(env_id='CartPole-v1') "
                                   "(or proxima.presets.resolve('CartPole-v1') with its default preset, as proxima train applies it)"}[kind]
    assert e.value.__cause__ is None and e.value.__context__ is None
    assert list(tmp_path.iterdir()) == []


# --- finding 8: train()'s refusals in Python's words, the CLI's in flags ------------------------------------
@pytest.mark.parametrize("field, value, line", [
    ("gamma", 1.5, "PPOConfig.gamma = 1.5: must be in (0, 1]"),
    ("num_envs", 0, "PPOConfig.num_envs = 0: must be at least 1"),
    ("eval_every", 5, "PPOConfig.eval_every = 5: needs eval_episodes of 1 or more"),
])
def test_train_from_python_names_the_field_and_the_cli_the_flag(field, value, line, tmp_path, monkeypatch, capsys):
    from proxima import train

    monkeypatch.chdir(tmp_path)
    extra = {"eval_episodes": 0} if field == "eval_every" else {}
    with pytest.raises(ConfigError) as e:
        train(PPOConfig(**{field: value}, **extra, run_dir=str(tmp_path / "r")))
    assert str(e.value) == line  # was: "--gamma 1.5: must be in (0, 1]", a flag a Python caller never typed
    assert not (tmp_path / "r").exists()
    flag = "--" + field.replace("_", "-")
    argv = ["train", "CartPole-v1", flag, str(value), "--run-dir", "c"] + (["--eval-episodes", "0"] if extra else [])
    code, _, err = run_main(argv, capsys)
    assert code == 2 and f"proxima train: error: {flag} {value}:" in err


def test_a_python_resume_names_the_field_too(small_config, tmp_path, monkeypatch):
    from proxima import train
    from proxima.config import max_threads

    run_dir, _ = train(small_config(run_dir=str(tmp_path / "r")), quiet=True)
    cfg = small_config(threads=max_threads() + 1)
    with pytest.raises(ConfigError, match=rf"^PPOConfig.threads = {max_threads() + 1}: must be at most"):
        train(cfg, resume=run_dir, quiet=True)


# --- G5: huge rewards named in the non-finite stop line ------------------------------------------------------
class _Huge(__import__("gymnasium").Env):
    """Pays a finite, legal 1e20 every step."""

    import gymnasium as _gym

    observation_space = _gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = _gym.spaces.Discrete(2)

    def __init__(self, reward: float = 1e20):
        self.reward, self.t = reward, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), self.reward, self.t >= 20, False, {}


def test_a_non_finite_update_from_huge_rewards_names_their_size(tmp_path, monkeypatch, capsys):
    import gymnasium as gym

    env_id = "Review28Huge-v0"
    monkeypatch.setitem(gym.registry, env_id, gym.envs.registration.EnvSpec(env_id, entry_point=_Huge))
    monkeypatch.chdir(tmp_path)
    argv = ["train", env_id, "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "512", "--run-dir", "r",
            "--no-progress", "--eval-episodes", "0", "--threads", "1"]
    code, _, err = run_main(argv, capsys)
    assert code == 2, err
    # was: "...; try a lower --lr or --max-grad-norm, or --norm-obs/--norm-reward", which lr cannot fix
    assert without_spaces_line(err) == (
        "proxima train: error: non-finite loss or gradient in the update at global step 128 (iteration 1); "
        "no checkpoint was written yet (--checkpoint-every N writes one every N iterations); rewards reach "
        "~1e20: --norm-reward (or scale them down in the env)\n"), err
    code, _, err = run_main(argv + ["--norm-reward", "--overwrite"], capsys)  # the advice, taken
    assert code == 0, err


def test_device_and_size_refusals_from_python_name_the_fields_not_the_flags(tmp_path):
    """validate(python=True) named PPOConfig's fields, but the device and size checks train() also runs kept
    the command line's flags: a notebook user never typed --cudagraphs or --num-envs."""
    import proxima
    from proxima.config import ConfigError, PPOConfig

    with pytest.raises(ConfigError) as info:
        proxima.train(PPOConfig(env_id="CartPole-v1", cudagraphs=True, threads=1, run_dir=str(tmp_path / "a")))
    assert str(info.value).startswith("cudagraphs needs a CUDA device (got device='cpu')"), str(info.value)
    with pytest.raises(ConfigError) as info:
        proxima.train(PPOConfig(env_id="CartPole-v1", num_envs=4096, num_steps=16384, num_minibatches=1,
                                total_timesteps=10**11, threads=1, run_dir=str(tmp_path / "b")))
    line = str(info.value)
    assert line.startswith("one minibatch (num_envs=4096 x num_steps=16384 / num_minibatches=1 = 67,108,864 rows)"), line
    assert "--" not in line and not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
