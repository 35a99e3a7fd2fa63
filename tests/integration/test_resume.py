"""Resume (issue 5, item 3): a run stopped at any iteration and resumed ends bit-identical to an
uninterrupted run on CPU with native envs; metrics.csv and TensorBoard continue at the right step
with no duplicate or missing row; Gymnasium-backed runs restart their episodes and say so once."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch

from proxima import checkpoint as ckpt
from proxima import cli
from proxima.config import PPOConfig
from proxima.logger import RunLogger
from proxima.trainer import Trainer, TrainingInterrupted, train

STEPS = 64  # 4 envs x 16 steps per iteration
ITERATIONS = 6
#: CSV columns that legitimately differ between two runs (wall clock)
CLOCK = {"time", "charts/SPS"}


def config(**overrides) -> PPOConfig:
    values = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=ITERATIONS * STEPS, num_minibatches=2,
                  update_epochs=2, progress=False, checkpoint_every=2, eval_episodes=0, threads=1)
    values.update(overrides)
    return PPOConfig(**values)


def read_csv(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def tb_scalars(run_dir: Path) -> dict:
    """tag -> [(step, value)] of every scalar in every event file of the run, in the order TensorBoard
    reads them, by a plain EventFileLoader: TensorBoard's default (fast) loader applies no purge
    marker, so neither does this (EventAccumulator would hide what a resume left behind)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    scalars: dict = {}
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for v in event.summary.value:
                if v.metadata.plugin_data.plugin_name == "scalars":
                    scalars.setdefault(v.tag, []).append((event.step, float(tensor_util.make_ndarray(v.tensor))))
    return scalars


def assert_same(a, b, where="state"):
    """Recursive equality; tensors bit-identical (torch.equal)."""
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)), where


def final_state(run_dir: Path) -> dict:
    state = ckpt.load_checkpoint(run_dir)
    for volatile in ("path", "elapsed", "versions"):
        state.pop(volatile)
    state["config"].pop("run_dir")
    return state


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Reference runs, one per normalization setting: run_dir."""
    cache = {}

    def get(norm: bool) -> Path:
        if norm not in cache:
            run_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
            train(config(norm_obs=norm, norm_reward=norm), run_dir=run_dir, quiet=True, evaluate_at_end=False)
            cache[norm] = run_dir
        return cache[norm]

    return get


def stop_like_a_signal(cfg: PPOConfig, run_dir: Path, k: int) -> None:
    """The first leg: the same config, stopped during iteration k as SIGINT would stop it."""
    trainer = Trainer(cfg, run_dir=run_dir, quiet=True)
    try:
        with pytest.raises(TrainingInterrupted) as info:
            trainer.run(stop_after=k)
    finally:
        trainer.close()
    assert info.value.exit_code == 130 and info.value.checkpoint == ckpt.checkpoint_path(run_dir, k * STEPS)


def crash_after_logging(cfg: PPOConfig, run_dir: Path, k: int, monkeypatch) -> None:
    """The first leg dies (no signal handling) after logging iteration k, past its last checkpoint."""
    original = Trainer.train_iteration

    def dying(self):
        if self.iteration == k:
            raise KeyboardInterrupt  # as abrupt as it gets in-process: no checkpoint for iteration k
        return original(self)

    monkeypatch.setattr(Trainer, "train_iteration", dying)
    with pytest.raises(KeyboardInterrupt) as info:
        train(cfg, run_dir=run_dir, quiet=True, evaluate_at_end=False)
    assert type(info.value) is KeyboardInterrupt  # as it came: no checkpointed stop (TrainingInterrupted) of it
    monkeypatch.undo()


@pytest.mark.parametrize("case", [
    # (normalization, how the first leg ends, at iteration k, how the second leg is started)
    ("plain", "signal", 1, "cli-resume"),
    ("norm", "signal", 4, "cli-train-resume-auto"),
    ("norm", "crash", 5, "train-resume-path"),
], ids=lambda c: "-".join(map(str, c)))
def test_stopped_and_resumed_run_is_bit_identical_and_logs_continue(case, tmp_path, uninterrupted, monkeypatch, capsys):
    norm, stop, k, how = case
    norm = norm == "norm"
    cfg = config(norm_obs=norm, norm_reward=norm)
    run_dir = tmp_path / "run"
    if stop == "signal":
        stop_like_a_signal(cfg, run_dir, k)
        resumed_from = k * STEPS
    else:
        crash_after_logging(cfg, run_dir, k, monkeypatch)
        resumed_from = (k // cfg.checkpoint_every) * cfg.checkpoint_every * STEPS
        # the dead run logged past its last checkpoint: those rows must not survive the resume
        assert int(read_csv(run_dir)[-1]["global_step"]) > resumed_from
    assert ckpt.load_checkpoint(run_dir)["global_step"] == resumed_from

    if how == "cli-resume":
        assert cli.main(["resume", str(run_dir), "--quiet"]) == 0
    elif how == "cli-train-resume-auto":
        argv = ["train", "CartPole-v1", "--resume", "auto", "--run-dir", str(run_dir), "--quiet"]
        assert cli.main(argv) == 0
    else:
        train(None, resume=ckpt.resolve_checkpoint(run_dir), quiet=True, evaluate_at_end=False)
    err = capsys.readouterr().err
    assert "cannot restore their state" not in err  # native envs resume exactly

    reference = uninterrupted(norm)
    # parameters, optimizer, normalizers, env state, RNGs, counters: all bit-identical
    resumed, expected = final_state(run_dir), final_state(reference)
    assert resumed["global_step"] == ITERATIONS * STEPS
    for name, p in expected["agent"].items():
        assert torch.equal(resumed["agent"][name], p), name
    assert_same(resumed, expected)

    # metrics.csv: one row per iteration, no duplicate or gap, same numbers as the uninterrupted run
    rows, ref_rows = read_csv(run_dir), read_csv(reference)
    assert [int(r["global_step"]) for r in rows] == [STEPS * i for i in range(1, ITERATIONS + 1)]
    assert [int(r["iteration"]) for r in rows] == list(range(1, ITERATIONS + 1))
    for row, ref in zip(rows, ref_rows):
        assert {c: v for c, v in row.items() if c not in CLOCK} == {c: v for c, v in ref.items() if c not in CLOCK}

    # TensorBoard: the same steps and values for every tag (the files hold nothing past the checkpoint, no duplicate)
    scalars, ref_scalars = tb_scalars(run_dir), tb_scalars(reference)
    assert set(scalars) == set(ref_scalars) and "losses/value_loss" in scalars
    for tag, points in ref_scalars.items():
        assert [s for s, _ in scalars[tag]] == [s for s, _ in points], tag
        if tag not in CLOCK:
            assert [v for _, v in scalars[tag]] == [v for _, v in points], tag


def test_gymnasium_resume_restarts_episodes_and_says_so_once(tmp_path, capsys):
    cfg = config(backend="gymnasium", num_envs=2, total_timesteps=4 * 32, checkpoint_every=0)
    run_dir = tmp_path / "run"
    trainer = Trainer(cfg, run_dir=run_dir, quiet=True)
    try:
        with pytest.raises(TrainingInterrupted):
            trainer.run(stop_after=2)
    finally:
        trainer.close()
    capsys.readouterr()

    assert cli.main(["resume", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert err.count("gymnasium envs cannot restore their state") == 1, err
    assert err.count("restarts episodes") == 1
    assert [int(r["global_step"]) for r in read_csv(run_dir)] == [32, 64, 96, 128]
    assert ckpt.load_checkpoint(run_dir)["global_step"] == 128


def test_a_gymnasium_resume_starts_the_new_episodes_returns_at_zero_for_reward_scaling(tmp_path):
    """Restarted episodes begin a new discounted return (as a fresh run's, as baselines' VecNormalize
    does at reset); the running statistics of the return carry over."""
    cfg = config(env_id="Pendulum-v1", backend="gymnasium", num_envs=2, total_timesteps=4 * 32, checkpoint_every=0,
                 norm_reward=True)
    run_dir = tmp_path / "run"
    trainer = Trainer(cfg, run_dir=run_dir, quiet=True)
    try:
        with pytest.raises(TrainingInterrupted):
            trainer.run(stop_after=2)  # 64 of Pendulum's 200 steps: every episode is under way
    finally:
        trainer.close()
    state = ckpt.load_checkpoint(run_dir)
    assert (state["reward_scaler"]["returns"] != 0).all()
    resumed = Trainer(cfg, run_dir=run_dir, resume_state=state, quiet=True)
    try:
        assert torch.equal(resumed.reward_scaler.returns, torch.zeros(2, dtype=torch.float64))
        for key, value in state["reward_scaler"].items():
            if key != "returns":
                assert torch.equal(resumed.reward_scaler.state_dict()[key], value), key
    finally:
        resumed.close()


def test_progress_bar_resumes_at_the_checkpoint_step(tmp_path):
    logger = RunLogger(tmp_path, total_steps=1000, resume_step=640, progress=True)
    try:
        assert logger.bar.n == 640 and logger.bar.total == 1000
        logger.log(11, 704, {"charts/SPS": 1.0})
        assert logger.bar.n == 704
    finally:
        logger.close()


def test_resume_drops_a_cut_off_csv_row(tmp_path):
    from proxima.logger import CSV_COLUMNS, truncate_csv

    path = tmp_path / "metrics.csv"
    whole = ",".join(["1", "64"] + ["1.0"] * (len(CSV_COLUMNS) - 2))
    path.write_text(",".join(CSV_COLUMNS) + "\n" + whole + "\n" + whole.replace("64", "128", 1).replace(",1,", ",2,", 1)[:9])
    truncate_csv(path, 128)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["global_step"] for r in rows] == ["64"]


def test_the_python_api_resume_applies_or_refuses_its_config(tmp_path):
    """train(config, resume=...) from Python: the fields set in config act as the flags typed on the CLI."""
    import yaml

    from proxima.config import ConfigError, PPOConfig
    from proxima.trainer import train as train_api

    base = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, threads=1, progress=False, eval_episodes=0)
    run = tmp_path / "r"
    train_api(PPOConfig(total_timesteps=128, **base), run_dir=run, quiet=True)
    with pytest.raises(ConfigError, match=r"lr=0.1: cannot change when resuming"):
        train_api(PPOConfig(total_timesteps=256, lr=0.1, **base), run_dir=run, resume="auto", quiet=True)
    train_api(PPOConfig(total_timesteps=256, **base), run_dir=run, resume="auto", quiet=True)  # extends the run
    assert yaml.safe_load((run / "config.yaml").read_text())["total_timesteps"] == 256
    assert ckpt.list_checkpoints(run)[-1].name.endswith("256.pt")


@pytest.mark.parametrize("field, value, needle", [
    ("num_envs", "4", "PPOConfig.num_envs = '4': expected an integer"),
    ("total_timesteps", 1024.5, "PPOConfig.total_timesteps = 1024.5: expected an integer"),
    ("keep_checkpoints", 2.5, "PPOConfig.keep_checkpoints = 2.5: expected an integer"),
    ("stop_return", "475", "PPOConfig.stop_return = '475': expected a number or None"),
    ("compile", "yes", "PPOConfig.compile = 'yes': expected True or False"),
    ("threads", True, "PPOConfig.threads = True: expected an integer"),
    ("hidden_sizes", 64, "PPOConfig.hidden_sizes = 64: expected"),
])
def test_a_python_config_of_the_wrong_type_is_refused_before_anything_is_written(tmp_path, field, value, needle):
    from proxima.config import ConfigError, PPOConfig
    from proxima.trainer import train as train_api

    cfg = PPOConfig(env_id="CartPole-v1", total_timesteps=128, num_envs=4, num_steps=16, progress=False, eval_episodes=0)
    setattr(cfg, field, value)
    with pytest.raises(ConfigError) as info:
        train_api(cfg, run_dir=tmp_path / "r", quiet=True)
    assert needle in str(info.value)
    assert not (tmp_path / "r").exists()
    cfg.lr = 1  # an int for a float field is fine
    setattr(cfg, field, getattr(PPOConfig(), field))
    from proxima.config import validate

    validate(cfg)


def test_a_resume_may_switch_compile_but_not_amp():
    from proxima.config import ConfigError
    from proxima.run_setup import apply_resume_overrides

    state = {"global_step": 0, "path": "ckpt"}
    cfg = apply_resume_overrides(PPOConfig(), {"compile": True, "compile_mode": "max-autotune"}, state)
    assert cfg.compile and cfg.compile_mode == "max-autotune"  # compiled and eager checkpoints are interchangeable
    with pytest.raises(ConfigError, match="--amp 'bf16': cannot change when resuming"):
        apply_resume_overrides(PPOConfig(), {"amp": "bf16"}, state)


def test_resume_refuses_a_run_dir_other_than_the_runs_own(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    train(config(total_timesteps=2 * STEPS, checkpoint_every=1), run_dir=run_dir, quiet=True, evaluate_at_end=False)
    before = read_csv(run_dir)
    elsewhere = tmp_path / "elsewhere"
    line = (f"--run-dir {elsewhere}: a run resumes in its own directory ({run_dir.resolve()}); drop --run-dir "
            "(to continue a copy elsewhere, copy the run directory and resume the copy)")
    assert cli.main(["resume", str(run_dir), "--total-timesteps", str(3 * STEPS), "--run-dir", str(elsewhere)]) == 2
    assert capsys.readouterr().err == f"proxima resume: error: {line}\n"
    assert cli.main(["train", "--resume", str(run_dir), "--total-timesteps", str(3 * STEPS), "--run-dir", str(elsewhere)]) == 2
    assert capsys.readouterr().err == f"proxima train: error: {line}\n"
    assert not elsewhere.exists() and read_csv(run_dir) == before  # nothing trained, here or there
    # naming the run's own directory (as `train --resume auto --run-dir RUN` does) continues it
    monkeypatch.chdir(tmp_path)
    assert cli.main(["resume", "run", "--total-timesteps", str(3 * STEPS), "--run-dir", "./run", "--quiet"]) == 0
    assert len(read_csv(run_dir)) == 3


