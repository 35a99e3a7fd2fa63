"""The Python API as a script uses it (user review 43): a callback cannot corrupt the run's config, its
row holds every metrics.csv column, keys it adds reach TensorBoard, refusals name PPOConfig fields,
help(PPOConfig) lists the fields, and ProximaError is the one base a sweep catches."""

import csv
import dataclasses
import math

import pytest

import proxima
from proxima import PPOConfig, load, train
from proxima.logger import CSV_COLUMNS, _event_records

#: 4 iterations of 64 steps: a run of a second or two
TINY = dict(env_id="CartPole-v1", total_timesteps=256, num_envs=2, num_steps=32, update_epochs=1, num_minibatches=1,
            anneal_lr=False, progress=False, eval_episodes=0)


def _train(run_dir, callback, **over):
    return train(PPOConfig(**{**TINY, **over}), run_dir=run_dir, quiet=True, callback=callback, evaluate_at_end=False)


def _scalars(run_dir, tag):
    return [(e.step, v.simple_value) for p in sorted(run_dir.glob("events.out.tfevents.*"))
            for _, e in _event_records(p) for v in e.summary.value if v.tag == tag]


def test_a_callback_changing_trainer_cfg_is_refused_and_the_checkpoint_keeps_the_runs_config(tmp_path):
    def cb(row, trainer):
        trainer.cfg.gamma = 0.9  # GAE's discount: no LIVE_FIELDS member (test_callback_live43 has those)

    with pytest.raises(proxima.ConfigError) as e:
        _train(tmp_path / "run", cb)
    assert str(e.value).startswith("train(callback=test_a_callback_changing_trainer_cfg_is_refused_and_the_checkpoint"
                                   "_keeps_the_runs_config.<locals>.cb): it changed trainer.cfg.gamma (0.99 -> 0.9); ")
    assert "init_from=RUN_DIR" in str(e.value) and "\n" not in str(e.value)
    assert load(tmp_path / "run").config["gamma"] == 0.99  # the checkpoint of the refused iteration: the run's own
    _, policy = train(None, resume=tmp_path / "run", quiet=True, evaluate_at_end=False)  # resumes: nothing damaged
    assert policy.config["gamma"] == 0.99


def test_a_callback_changing_a_resume_safe_field_is_told_to_resume_with_it(tmp_path):
    def cb(row, trainer):
        trainer.cfg.total_timesteps = 512

    with pytest.raises(proxima.ConfigError, match=r"trainer.cfg.total_timesteps \(256 -> 512\).*"
                                                  r"train\(PPOConfig\(\.\.\., total_timesteps=512\), resume=RUN_DIR\)"):
        _train(tmp_path / "run", cb)


def test_the_callback_row_holds_every_metrics_csv_column_nan_where_blank_fresh_and_resumed(tmp_path):
    rows = []

    def cb(row):
        rows.append(dict(row))
        return row["iteration"] < 2  # stops after iteration 2

    _train(tmp_path / "run", cb, eval_every=128, eval_episodes=1)
    train(None, resume=tmp_path / "run", quiet=True, evaluate_at_end=False, callback=lambda row: rows.append(dict(row)))
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    assert all(list(r) == CSV_COLUMNS for r in rows)  # every column, in metrics.csv's order
    evaluated = [not math.isnan(r["eval/mean_return"]) for r in rows]
    assert evaluated == [False, True, False, True]  # eval_every 128 steps: iterations 2 and 4


def test_keys_a_callback_adds_go_to_tensorboard_and_metrics_csv_keeps_its_columns(tmp_path):
    def cb(row):
        row["custom/my_metric"] = row["iteration"] * 10

    run_dir, _ = _train(tmp_path / "run", cb)
    assert _scalars(run_dir, "custom/my_metric") == [(64, 10.0), (128, 20.0), (192, 30.0), (256, 40.0)]
    with open(run_dir / "metrics.csv") as f:
        assert next(csv.reader(f)) == CSV_COLUMNS


def test_a_non_number_a_callback_adds_is_refused_naming_the_key(tmp_path):
    def cb(row):
        row["custom/note"] = "fine"

    with pytest.raises(TypeError) as e:
        _train(tmp_path / "run", cb)
    assert str(e.value) == ("train(callback=test_a_non_number_a_callback_adds_is_refused_naming_the_key.<locals>.cb): "
                            "row['custom/note'] is a str; a key the callback adds is logged to TensorBoard as a scalar: "
                            "give a number (int, float, or a one-element tensor)")


def test_an_env_kwargs_refusal_from_python_names_the_field_not_the_flag(tmp_path):
    with pytest.raises(proxima.EnvError) as e:
        _train(tmp_path / "run", None, env_kwargs={"bogus": 1})
    assert str(e.value).startswith("PPOConfig.env_kwargs: env 'CartPole-v1' takes no argument 'bogus' ")
    assert "--env-kwargs" not in str(e.value)


def test_no_checkpoint_yet_from_python_names_checkpoint_every_as_the_field():
    from proxima.signals import hold_python_caller
    from proxima.trainer import Trainer

    release = hold_python_caller(True)
    try:
        line = Trainer._last_good(type("T", (), {"last_checkpoint": None})())
    finally:
        release()
    assert line == "no checkpoint was written yet (PPOConfig(checkpoint_every=N) writes one every N iterations)"


def test_help_of_ppoconfig_lists_every_field_with_its_default_and_help_in_field_words():
    doc = PPOConfig.__doc__
    assert "\nAttributes:\n" in doc
    for f in dataclasses.fields(PPOConfig):
        assert f"\n    {f.name} (" in doc
    assert ("    stop_episodes (int, default 20): Episodes stop_return averages over: the fewest recent iterations that "
            "hold at least this many.") in doc.splitlines()


def test_proximaerror_is_the_base_of_every_user_error_and_keeps_their_old_bases():
    from proxima.rundir import RunDirError

    assert issubclass(proxima.ConfigError, proxima.ProximaError) and issubclass(proxima.ConfigError, ValueError)
    assert issubclass(proxima.EnvError, proxima.ProximaError) and issubclass(proxima.EnvError, RuntimeError)
    assert issubclass(proxima.CheckpointError, proxima.ProximaError) and issubclass(proxima.CheckpointError, RuntimeError)
    assert issubclass(RunDirError, proxima.ProximaError)
    with pytest.raises(proxima.ProximaError, match="^train\\(config\\): expected a PPOConfig"):
        train(None)


def test_a_diverged_run_and_a_full_disk_are_proximaerrors_a_sweep_catches():
    from proxima.diskspace import StorageError
    from proxima.guards import NonFiniteError
    from proxima.plot import PlotError
    from proxima.population_report import PopulationError
    from proxima.report import ReportError
    from proxima.rundir import RunFileError

    for cls, base in ((NonFiniteError, RuntimeError), (StorageError, RuntimeError), (PopulationError, ValueError),
                      (ReportError, ValueError), (PlotError, ValueError), (RunFileError, OSError)):
        assert issubclass(cls, proxima.ProximaError) and issubclass(cls, base), cls  # `except RuntimeError` holds too
