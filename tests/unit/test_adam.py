"""adam.Adam: torch.optim.Adam(fused=True)'s numbers and checkpoint layout, without importing torch._dynamo."""

import copy
import sys

import pytest
import torch

from proxima.adam import Adam
import warm_python


def _params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*shape, generator=g)) for shape in ((64, 4), (64,), (2, 64), (2,))]


def _grads(params, step):
    g = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(p.shape, generator=g) * (step + 1) for p in params]


def _run(opt, params, steps, start=0):
    for step in range(start, start + steps):
        opt.zero_grad(set_to_none=True)
        for p, grad in zip(params, _grads(params, step)):
            p.grad = grad
        opt.param_groups[0]["lr"].fill_(1e-2 * (1 - step / 20))  # annealed in place, as the trainer does
        opt.step()


def _torch_adam(params):
    return torch.optim.Adam(params, lr=torch.tensor(1e-2), eps=1e-5, fused=True)


def _assert_bit_equal(a, b, what):
    for i, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x, y), f"{what} {i} differs"


def test_steps_are_bit_identical_to_torch_fused_adam():
    ours, theirs = _params(), _params()
    opt, ref = Adam(ours, lr=torch.tensor(1e-2), eps=1e-5), _torch_adam(theirs)
    _run(opt, ours, 7)
    _run(ref, theirs, 7)
    _assert_bit_equal(ours, theirs, "parameter")
    for p, q in zip(ours, theirs):
        for k in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(opt.state[p][k], ref.state[q][k]), k
    assert float(opt.state[ours[0]]["step"]) == 7.0


def test_state_dicts_move_both_ways_with_torch_adam():
    # torch.optim.Adam -> ours: an older checkpoint resumes and continues exactly
    ref_params, our_params = _params(), _params()
    ref = _torch_adam(ref_params)
    _run(ref, ref_params, 4)
    with torch.no_grad():
        for p, q in zip(our_params, ref_params):
            p.copy_(q)
    opt = Adam(our_params, lr=torch.tensor(0.5), eps=1e-5)
    own_lr = opt.param_groups[0]["lr"]
    opt.load_state_dict(copy.deepcopy(ref.state_dict()))  # deep copies: as torch.save and torch.load would
    assert opt.param_groups[0]["lr"] is own_lr and float(own_lr) == float(ref.param_groups[0]["lr"])
    _run(opt, our_params, 3, start=4)
    _run(ref, ref_params, 3, start=4)
    _assert_bit_equal(our_params, ref_params, "parameter after torch -> ours")

    # ours -> torch.optim.Adam: same keys, and torch continues exactly
    sd = opt.state_dict()
    assert set(sd["param_groups"][0]) == set(ref.state_dict()["param_groups"][0])
    back_params = [torch.nn.Parameter(p.detach().clone()) for p in our_params]
    back = _torch_adam(back_params)
    back.load_state_dict(copy.deepcopy(sd))
    _run(back, back_params, 2, start=7)
    _run(opt, our_params, 2, start=7)
    _assert_bit_equal(our_params, back_params, "parameter after ours -> torch")


def test_load_keeps_existing_state_tensors():
    params = _params()
    opt = Adam(params, lr=torch.tensor(1e-2), eps=1e-5)
    _run(opt, params, 2)
    held = opt.state[params[0]]["exp_avg"]  # a captured CUDA graph would hold this very tensor
    sd = {"state": {i: {k: v.clone() + 1 for k, v in s.items()} for i, s in opt.state_dict()["state"].items()},
          "param_groups": opt.state_dict()["param_groups"]}
    opt.load_state_dict(sd)
    assert opt.state[params[0]]["exp_avg"] is held
    assert torch.equal(held, sd["state"][0]["exp_avg"])


@pytest.mark.parametrize("mutate, message", [
    (lambda sd: sd["param_groups"][0].update(params=[0, 1]), "parameter groups of sizes [2]"),
    (lambda sd: sd["state"][1].update(exp_avg=torch.zeros(3)), "exp_avg has shape (3,)"),
    (lambda sd: sd["state"].update({7: sd["state"][0]}), "index 7 out of range"),
    (lambda sd: sd["param_groups"][0].update(lr=float("nan")), "not a finite number"),
    (lambda sd: sd["state"][0].pop("exp_avg_sq"), "needs tensors step, exp_avg and exp_avg_sq"),
    (lambda sd: sd.pop("state"), "not an Adam state_dict"),
])
def test_a_state_dict_that_does_not_fit_is_refused_and_changes_nothing(mutate, message):
    params = _params()
    opt = Adam(params, lr=torch.tensor(1e-2), eps=1e-5)
    _run(opt, params, 2)
    before = {k: v.clone() for k, v in opt.state[params[1]].items()}
    lr_before = float(opt.param_groups[0]["lr"])
    sd = opt.state_dict()
    sd = {"state": {i: dict(s) for i, s in sd["state"].items()}, "param_groups": [dict(sd["param_groups"][0], lr=0.123)]}
    mutate(sd)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        opt.load_state_dict(sd)
    assert float(opt.param_groups[0]["lr"]) == lr_before
    for k, v in before.items():
        assert torch.equal(opt.state[params[1]][k], v), k


def test_a_step_with_found_inf_changes_nothing():
    """What GradScaler (fp16) hands the step when a gradient overflowed: no parameter, moment or count moves."""
    params = _params()
    opt = Adam(params, lr=torch.tensor(1e-2), eps=1e-5)
    _run(opt, params, 1)
    before = [p.detach().clone() for p in params]
    moments = {k: v.clone() for k, v in opt.state[params[0]].items()}
    for p, grad in zip(params, _grads(params, 5)):
        p.grad = grad
    opt.grad_scale, opt.found_inf = None, torch.ones(())
    try:
        opt.step()
    finally:
        del opt.grad_scale, opt.found_inf
    _assert_bit_equal(params, before, "parameter")
    for k, v in moments.items():
        assert torch.equal(opt.state[params[0]][k], v), k


def test_constructor_refuses_what_it_cannot_step():
    with pytest.raises(ValueError, match="no parameters"):
        Adam([], lr=torch.tensor(1e-3))
    with pytest.raises(ValueError, match="0-dim tensor"):
        Adam(_params(), lr=1e-3)
    with pytest.raises(ValueError, match="one device and floating dtype"):
        Adam([torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))], lr=torch.tensor(1e-3))


def test_zero_grad():
    params = _params()
    opt = Adam(params, lr=torch.tensor(1e-2))
    for p in params:
        p.grad = torch.ones_like(p)
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in params)
    opt.zero_grad()
    assert all(p.grad is None for p in params)


def test_training_does_not_import_the_compiler():
    """torch.optim's classes import torch._dynamo (1.2 s a launch here); an eager run never needs it."""
    code = (
        "import sys, torch\n"
        "from proxima.config import PPOConfig\n"
        "from proxima.trainer import Trainer\n"
        "cfg = PPOConfig(env_id='CartPole-v1', backend='native', num_envs=8, num_steps=8, total_timesteps=128,\n"
        "                progress=False, checkpoint_every=0, eval_episodes=0, threads=1)\n"
        "t = Trainer(cfg, quiet=True)\n"
        "t.train_iteration(); t.train_iteration(); t.optimizer.load_state_dict(t.state_dict()['optimizer'])\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = warm_python.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
