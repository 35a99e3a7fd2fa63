"""An RLHF checkpoint is data: every field is checked before any of it reaches a model, an optimizer or an
RNG. A damaged newest checkpoint is set aside for the one before (docs/rlhf.md); one that does not fit the
model built from config.yaml is refused; either is one line naming the file and the field, never a
traceback, a NaN blamed on the update, or memory corrupted by the fused Adam kernel."""

import os
import shutil
import sys
import threading
import time

import pytest
import torch

from proxima.rlhf import loop, rundir
from proxima.rlhf.config import ConfigError, RLHFConfig
from proxima.rlhf.trainer import RLHFTrainer
import warm_python


def config(assets, run_dir=None, **overrides) -> RLHFConfig:
    base = dict(policy=str(assets / "model"), prompts=str(assets / "prompts.txt"),
                reward="proxima.rlhf.demo:keyword_sentiment", batch_size=8, num_minibatches=2, update_epochs=1,
                max_new_tokens=4, lr=1e-3, steps=2, print_every=0, sample_every=1, checkpoint_every=1, plot=False,
                run_dir=str(run_dir) if run_dir else None)
    base.update(overrides)
    return RLHFConfig(**base)


@pytest.fixture(scope="module")
def trained(assets, tmp_path_factory):
    """A finished 2-step run (value model included) with checkpoints of steps 1 and 2."""
    from proxima.rlhf import train_rlhf

    return train_rlhf(config(assets, tmp_path_factory.mktemp("ckchecks") / "run"))


@pytest.fixture
def run(trained, tmp_path):
    return shutil.copytree(trained, tmp_path / "run")


def edit(file, change) -> None:
    state = torch.load(file, weights_only=True)
    change(state)
    torch.save(state, file)


def first_weight(state, part="policy"):
    return next(iter(state[part]))


def _nan_weight(s):
    s["policy"][first_weight(s)] = torch.full_like(s["policy"][first_weight(s)], float("nan"))


def _set_moment(part, key, make):
    def change(s):
        entry = s["opt_" + part]["state"][0]
        entry[key] = make(entry[key])
    return change


DAMAGED = {
    "no ranks": (lambda s: s.pop("ranks"), "incomplete checkpoint (missing 'ranks')"),
    "step a string": (lambda s: s.__setitem__("step", "abc"), "step is 'abc', not an integer >= 0"),
    "step negative": (lambda s: s.__setitem__("step", -1), "step is -1, not an integer >= 0"),
    "kl empty": (lambda s: s.__setitem__("kl", {}), "kl is an empty dict, not a mapping with the KL coefficient 'value'"),
    "nan weight": (_nan_weight, "policy.transformer.wte.weight holds 2048 non-finite value(s) (NaN or inf) of 2048"),
    "weight of another shape": (lambda s: s["policy"].__setitem__(first_weight(s), torch.zeros(3)),
                                "opt_policy: optimizer state of parameter 0: exp_avg has shape (64, 32), the parameter (3,)"),
    "moment of another shape": (_set_moment("policy", "exp_avg", lambda m: torch.zeros(3)),
                                "opt_policy: optimizer state of parameter 0: exp_avg has shape (3,), the parameter (64, 32)"),
    "value moment of another shape": (_set_moment("value", "exp_avg_sq", lambda m: torch.zeros(5)),
                                      "opt_value: optimizer state of parameter 0: exp_avg_sq has shape (5,)"),
    "nan moment": (_set_moment("policy", "exp_avg_sq", lambda m: torch.full_like(m, float("nan"))),
                   "opt_policy.state.0.exp_avg_sq holds 2048 non-finite value(s)"),
    "negative moment": (_set_moment("policy", "exp_avg_sq", lambda m: -torch.ones_like(m)),
                        "opt_policy.state.0.exp_avg_sq holds negative values"),
    "moment step a string": (_set_moment("policy", "step", lambda m: "abc"),
                             "opt_policy: optimizer state of parameter 0: needs tensors step, exp_avg and exp_avg_sq"),
    "rng of 5 bytes": (lambda s: s["ranks"][0].__setitem__("rng", torch.zeros(5, dtype=torch.uint8)),
                       "ranks[0].rng is not a CPU RNG state torch accepts (Expected a CPUGeneratorImplState of size 5056"),
    "sampler past its order": (lambda s: s["ranks"][0]["sampler"].__setitem__("pos", 10**6),
                               "ranks[0].sampler.pos is 1000000, not an integer from 0 to 80"),
    # torch.save stores an expand()ed tensor as its one element: 32 GB the first time a check reads it
    "view larger than its data": (lambda s: s["policy"].__setitem__(first_weight(s), torch.zeros(1).expand(2**33, 1)),
                                  "policy.transformer.wte.weight is a view larger than its data (shape (8589934592, 1)"),
}


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_checkpoint_is_one_line_naming_the_file_and_the_field(run, damage):
    change, message = DAMAGED[damage]
    older, newest = rundir.list_checkpoints(run)
    older.unlink()  # the only checkpoint: nothing to fall back to
    edit(newest, change)
    with pytest.raises(ConfigError) as info:
        rundir.load_newest_usable(run)
    assert str(info.value).startswith(f"{newest}: {message}"), str(info.value)
    assert "\n" not in str(info.value) and "the checkpoint is damaged or was edited" in str(info.value)
    assert rundir.list_checkpoints(run) == [newest]  # refused, not renamed: there is no other


def test_a_damaged_newest_checkpoint_is_set_aside_and_the_one_before_is_resumed_from(run, capsys):
    older, newest = rundir.list_checkpoints(run)
    edit(newest, _nan_weight)
    file, state = rundir.load_newest_usable(run)
    assert file == older and state["step"] == 1
    err = capsys.readouterr().err
    assert f"{newest} is unusable (policy.transformer.wte.weight holds 2048 non-finite value(s)" in err
    assert f"resuming from {older} instead (the bad file is kept as {newest.name}.corrupt)" in err
    assert not newest.exists() and newest.with_name(newest.name + ".corrupt").exists()


def test_resume_of_a_moment_of_another_shape_is_one_line_not_a_crash(run):
    """The fused Adam kernel read such a moment out of bounds: `munmap_chunk(): invalid pointer`, exit 134."""
    older, newest = rundir.list_checkpoints(run)
    older.unlink()
    edit(newest, DAMAGED["moment of another shape"][0])
    before = {p: p.read_bytes() for p in (newest, run / "metrics.csv", run / "config.yaml")}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    res = warm_python.run([sys.executable, "-m", "proxima", "resume", str(run), "--steps", "3"], capture_output=True,
                          text=True, timeout=300, env=env)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip().splitlines() == [
        f"proxima resume: error: {newest}: opt_policy: optimizer state of parameter 0: exp_avg has shape (3,), the "
        "parameter (64, 32) (parameter 0 is policy.transformer.wte.weight); the checkpoint is damaged or was edited"]
    assert {p: p.read_bytes() for p in before} == before


def test_a_fifo_at_a_checkpoints_name_is_set_aside_not_waited_on(run, capsys):
    fifo = run / "checkpoints" / "step_000003.pt"
    os.mkfifo(fifo)
    _unblock_later(fifo)  # the code before the fix waited on it: it reads EOF then, instead of hanging the test
    file, state = rundir.load_newest_usable(run)
    assert file.name == "step_000002.pt" and state["step"] == 2
    err = capsys.readouterr().err
    assert f"{fifo} is unusable (is a FIFO (named pipe), not a checkpoint file)" in err
    assert not os.path.lexists(fifo) and os.path.lexists(fifo.with_name(fifo.name + ".corrupt"))


def _unblock_later(fifo, after: float = 3.0, until: float = 30.0) -> None:
    """Open ``fifo`` for writing (and close it) once a reader waits on it, from ``after`` seconds on."""
    def go():
        time.sleep(after)
        deadline = time.monotonic() + until
        while time.monotonic() < deadline:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                return
            except OSError:  # no reader yet, or renamed away
                time.sleep(0.05)

    threading.Thread(target=go, daemon=True).start()


# ---------------------------------------------------------------------------------------------
# sound, but not this run's: refused before anything is restored
# ---------------------------------------------------------------------------------------------
def _wider_embedding(s):
    name = first_weight(s)
    s["policy"][name] = torch.zeros(65, 32)
    entry = s["opt_policy"]["state"][0]
    entry["exp_avg"], entry["exp_avg_sq"] = torch.zeros(65, 32), torch.zeros(65, 32)


def _float64_embedding(s):
    name = first_weight(s)
    s["policy"][name] = s["policy"][name].double()
    entry = s["opt_policy"]["state"][0]
    entry["exp_avg"], entry["exp_avg_sq"] = entry["exp_avg"].double(), entry["exp_avg_sq"].double()


FOREIGN = {
    "another shape": (_wider_embedding, "policy.transformer.wte.weight is a float32 tensor of shape (65, 32), the model "
                                        "built from config.yaml has float32 (64, 32)"),
    "another dtype": (_float64_embedding, "policy.transformer.wte.weight is a float64 tensor of shape (64, 32), the model "
                                          "built from config.yaml has float32 (64, 32)"),
    "amsgrad": (lambda s: s["opt_policy"]["param_groups"][0].__setitem__("amsgrad", True),
                "opt_policy.param_groups[0].amsgrad is True, this run's optimizer has False"),
    "prompt out of range": (lambda s: s["ranks"][0]["sampler"]["order"].__setitem__(0, 999),
                            "ranks[0].sampler.order draws prompt index 999 of 80 prompts"),
}


@pytest.fixture(scope="module")
def trainer(trained):
    return RLHFTrainer(rundir_config(trained))


def rundir_config(run_dir) -> RLHFConfig:
    from proxima.rlhf.config import from_dict

    return from_dict(rundir.read_config(run_dir))


@pytest.mark.parametrize("foreign", list(FOREIGN))
def test_a_checkpoint_that_does_not_fit_the_model_is_refused_before_anything_is_restored(run, trainer, foreign):
    change, message = FOREIGN[foreign]
    newest = rundir.list_checkpoints(run)[-1]
    edit(newest, change)
    weights = {n: p.detach().clone() for n, p in trainer.policy.named_parameters()}
    rng, step = torch.get_rng_state(), trainer.step
    with pytest.raises(ConfigError) as info:
        loop.load_checkpoint(trainer, newest)
    assert str(info.value).startswith(f"{newest}: {message}"), str(info.value)
    assert all(torch.equal(p, weights[n]) for n, p in trainer.policy.named_parameters())
    assert torch.equal(torch.get_rng_state(), rng) and trainer.step == step and not trainer.opt_policy.state
