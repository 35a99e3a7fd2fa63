"""A callback may change the fields the eager update reads each iteration (trainer.LIVE_FIELDS: an
SB3-style schedule of ent_coef or lr): the change trains from the next iteration, the checkpoint records
it and the run resumes with it. Any other field, an invalid value, or a run that cannot take the change
(--compile, --cudagraphs, several processes) is put back and refused in one line."""
import types

import pytest

import proxima
from proxima import load, train
from proxima.trainer import LIVE_FIELDS, Trainer, _config_changed_line
from tests.unit import test_python_api43 as api43


def test_update_epochs_changed_by_a_callback_trains_from_the_next_iteration_and_resumes(tmp_path):
    rows = []

    def cb(row, trainer):
        rows.append(row["losses/minibatch_updates"])
        trainer.cfg.update_epochs = 3

    api43._train(tmp_path / "run", cb, num_minibatches=2)
    assert rows == [2.0, 6.0, 6.0, 6.0]  # 1 epoch x 2 minibatches, then 3 x 2
    assert load(tmp_path / "run").config["update_epochs"] == 3
    _, policy = train(None, resume=tmp_path / "run", quiet=True, evaluate_at_end=False)
    assert policy.config["update_epochs"] == 3


def test_lr_changed_by_a_callback_without_anneal_reaches_the_optimizer_and_the_run_resumes(tmp_path):
    seen, trainers = [], []

    def cb(row, trainer):
        seen.append(row["charts/learning_rate"])
        trainers.append(trainer)
        if row["iteration"] == 1:
            trainer.cfg.lr = 1e-3

    api43._train(tmp_path / "run", cb)
    assert seen == [2.5e-4, 1e-3, 1e-3, 1e-3]
    assert float(trainers[0].optimizer.param_groups[0]["lr"]) == pytest.approx(1e-3)
    assert load(tmp_path / "run").config["lr"] == 1e-3
    _, policy = train(None, resume=tmp_path / "run", quiet=True, evaluate_at_end=False)
    assert policy.config["lr"] == 1e-3  # the optimizer's lr agrees with the recorded one: no "damaged" refusal


def test_an_invalid_live_value_is_put_back_and_refused_naming_the_callback_and_field(tmp_path):
    def cb(row, trainer):
        trainer.cfg.update_epochs = 0

    with pytest.raises(proxima.ConfigError) as e:
        api43._train(tmp_path / "run", cb)
    message = str(e.value)
    assert message.startswith("train(callback=test_an_invalid_live_value_is_put_back_and_refused_naming_the_callback"
                              "_and_field.<locals>.cb): PPOConfig.update_epochs = 0: "), message
    assert load(tmp_path / "run").config["update_epochs"] == 1


def test_a_live_field_with_a_structural_one_is_refused_whole(tmp_path):
    def cb(row, trainer):
        trainer.cfg.ent_coef = 0.0
        trainer.cfg.gamma = 0.9

    with pytest.raises(proxima.ConfigError, match=r"it changed trainer.cfg.gamma \(0.99 -> 0.9\); the run was built"):
        api43._train(tmp_path / "run", cb)
    config = load(tmp_path / "run").config
    assert (config["ent_coef"], config["gamma"]) == (0.01, 0.99)  # the ent_coef change went back with gamma's


@pytest.mark.parametrize("dist, cudagraphs, compile_, reason", [
    (types.SimpleNamespace(enabled=False), False, False, None),
    (types.SimpleNamespace(enabled=True, world_size=2), False, False,
     "a run of 2 processes calls the callback on rank 0 alone"),
    (types.SimpleNamespace(enabled=False), True, True, "--cudagraphs replays an update captured with the values it started with"),
    (types.SimpleNamespace(enabled=False), False, True, "--compile built the update with the values it started with"),
], ids=["eager", "two_processes", "cudagraphs", "compile"])
def test_runs_that_cannot_take_a_live_change_say_why(dist, cudagraphs, compile_, reason):
    fake = types.SimpleNamespace(dist=dist, cfg=types.SimpleNamespace(cudagraphs=cudagraphs, compile=compile_))
    assert Trainer._live_refusal(fake) == reason
    if reason is not None:
        line = _config_changed_line(print, [("ent_coef", 0.01, 0.0)], reason)
        assert f"it changed trainer.cfg.ent_coef (0.01 -> 0.0); {reason}, so the change would not train" in line



# --------------------------------------------------------------------- mutation survivors (review 43)
@pytest.mark.parametrize("field, value", [("lr", 1e-3), ("ent_coef", 0.0), ("vf_coef", 0.4), ("clip_coef", 0.1),
                                          ("vf_clip_coef", 0.5), ("max_grad_norm", 0.3), ("target_kl", 0.05),
                                          ("update_epochs", 2)])
def test_every_live_field_a_callback_changes_is_kept_in_the_checkpoint(tmp_path, field, value):
    def cb(row, trainer):
        setattr(trainer.cfg, field, value)

    api43._train(tmp_path / "run", cb)
    assert load(tmp_path / "run").config[field] == value


def test_a_live_change_in_a_run_that_cannot_take_it_is_refused_with_that_runs_reason(tmp_path, monkeypatch):
    reason = "--compile built the update with the values it started with"
    monkeypatch.setattr(Trainer, "_live_refusal", lambda self: reason)

    def cb(row, trainer):
        trainer.cfg.ent_coef = 0.0

    with pytest.raises(proxima.ConfigError) as e:
        api43._train(tmp_path / "run", cb)
    assert f"it changed trainer.cfg.ent_coef (0.01 -> 0.0); {reason}, so the change would not train" in str(e.value)
    assert load(tmp_path / "run").config["ent_coef"] == 0.01


def test_a_structural_change_is_never_blamed_on_compile():
    line = _config_changed_line(print, [("gamma", 0.99, 0.9)], "--compile built the update with the values it started with")
    assert "it changed trainer.cfg.gamma (0.99 -> 0.9); the run was built with the config it started with" in line
    assert "--compile" not in line


@pytest.mark.parametrize("leave", [SystemExit(3), KeyboardInterrupt()], ids=["sys_exit", "ctrl_c"])
def test_a_callback_that_changes_a_field_then_exits_leaves_the_checkpoint_with_the_runs_config(tmp_path, leave):
    def cb(row, trainer):
        trainer.cfg.gamma = 0.9
        raise leave

    with pytest.raises(type(leave)):
        api43._train(tmp_path / "run", cb)
    assert load(tmp_path / "run").config["gamma"] == 0.99
