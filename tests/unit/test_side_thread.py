"""--threads 2: the critic on a second thread (side_thread.py) computes what one thread computes, bit
for bit; the worker carries the caller's grad mode, FTZ and thread count, re-raises errors, and only
takes batches worth a hand-off."""

import threading

import pytest
import torch

from proxima import side_thread
from proxima.config import PPOConfig
from proxima.side_thread import SideThread


def _trainer(threads: int, **kw):
    from proxima.trainer import Trainer

    cfg = PPOConfig(env_id="CartPole-v1", backend="native", num_envs=64, num_steps=16, num_minibatches=2, update_epochs=2,
                    total_timesteps=10**6, progress=False, checkpoint_every=0, eval_episodes=0, threads=threads, **kw)
    return Trainer(cfg, quiet=True)


def _params(trainer) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in trainer.agent.parameters()])


@pytest.mark.parametrize("min_rows", [1, 2048])
def test_two_threads_train_bit_for_bit_as_one(monkeypatch, min_rows):
    """Two iterations with --threads 2 give the parameters, Adam state and rollout of --threads 1:
    the actor on the caller's thread, the critic on the worker, in acting and in the update (every
    batch paired at min_rows 1; none of these small ones at the default, which must change nothing)."""
    monkeypatch.setattr(side_thread, "MIN_ROWS", min_rows)
    results = []
    for threads in (1, 2):
        t = _trainer(threads)
        try:
            assert (t.side is not None) == (threads == 2)
            for _ in range(2):
                t.train_iteration()
            jobs = t.side.jobs if t.side is not None else 0
            results.append((_params(t), t.rollout.values.clone(), t.optimizer.state_dict()["state"][0]["exp_avg_sq"].clone(), jobs))
            assert torch.get_num_threads() == 1  # threads // 2 intra-op threads each
        finally:
            t.close()
    (p1, v1, s1, _), (p2, v2, s2, jobs) = results
    assert torch.equal(p1, p2) and torch.equal(v1, v2) and torch.equal(s1, s2)
    # at min_rows 1: 16 acting steps and 2 x 2 minibatches x (forward, backward) a iteration, for 2
    assert jobs == (2 * (16 + 2 * 2 * 2) if min_rows == 1 else 0)


def test_initial_parameters_do_not_depend_on_threads():
    """The agent is built on one thread whatever --threads says (orthogonal init's QR gives other
    bits with two), and a continuous agent, which is not paired, keeps --threads as intra-op threads."""
    from proxima.trainer import Trainer

    a, b = _trainer(1), _trainer(3)
    try:
        assert torch.equal(_params(a), _params(b)) and b.side is not None and b.side.intra_op == 1
    finally:
        a.close(), b.close()
    cfg = PPOConfig(env_id="Pendulum-v1", backend="native", num_envs=4, num_steps=8, total_timesteps=10**4,
                    progress=False, checkpoint_every=0, eval_episodes=0, threads=2)
    t = Trainer(cfg, quiet=True)
    try:
        assert t.side is None and torch.get_num_threads() == 2
    finally:
        t.close()
        torch.set_num_threads(1)


def test_pairs_only_where_grad_cpu_covers_the_agent():
    from proxima.agent import Agent
    import gymnasium as gym

    box = gym.spaces.Box(-1, 1, (4,))
    discrete, continuous = Agent(box, gym.spaces.Discrete(2)), Agent(box, gym.spaces.Box(-1, 1, (2,)))
    cfg = PPOConfig(threads=2)
    cpu = torch.device("cpu")
    assert side_thread.pairs(cfg, cpu, discrete)
    assert not side_thread.pairs(cfg, cpu, continuous)
    assert not side_thread.pairs(PPOConfig(threads=1), cpu, discrete)
    assert not side_thread.pairs(PPOConfig(threads=2, compile=True), cpu, discrete)
    assert not side_thread.pairs(PPOConfig(threads=2, amp="bf16"), cpu, discrete)
    assert not side_thread.pairs(cfg, torch.device("meta"), discrete)


def test_worker_carries_grad_mode_threads_and_errors():
    side = SideThread(intra_op=1)
    try:
        with torch.no_grad():
            assert side.submit(torch.is_grad_enabled).result() is False
        assert side.submit(torch.is_grad_enabled).result() is True
        assert side.submit(torch.get_num_threads).result() == 1
        assert side.submit(lambda: threading.current_thread() is threading.main_thread()).result() is False
        with pytest.raises(ZeroDivisionError):
            side.submit(lambda: 1 / 0).result()
        assert side.submit(lambda x: x + 1, 1).result() == 2  # still serving after an error
        assert side.jobs == 6
    finally:
        side.close()
    with pytest.raises(RuntimeError):
        side.submit(int)


def test_worker_flushes_denormals_as_the_caller():
    """FTZ/DAZ live in each thread's MXCSR: the worker sets the caller's, so it computes the same numbers."""
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-to-zero mode")
    torch.set_flush_denormal(False)
    tiny = torch.tensor([1e-39])  # a float32 denormal
    on, off = SideThread(flush_denormal=True), SideThread(flush_denormal=False)
    try:
        assert on.submit(lambda: (tiny * 1.0).item()).result() == 0.0
        # exactly the denormal (pytest.approx's absolute tolerance, 1e-12, would also accept 0.0)
        assert off.submit(lambda: (tiny * 1.0).item()).result() == tiny.item() > 0.0
    finally:
        on.close(), off.close()


def test_small_acting_batches_stay_on_the_callers_thread(monkeypatch):
    """Below MIN_ROWS the paired policy step is the agent's own (a hand-off costs more than it saves)."""
    import gymnasium as gym
    from proxima.agent import Agent

    agent = Agent(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    side = SideThread()
    try:
        step = side_thread.paired_policy_step(agent, side)
        obs = torch.randn(8, 4)
        torch.manual_seed(0)
        a1, lp1, v1 = step(obs)
        assert side.jobs == 0
        monkeypatch.setattr(side_thread, "MIN_ROWS", 8)
        torch.manual_seed(0)
        a2, lp2, v2 = step(obs)
        assert side.jobs == 1 and torch.equal(a1, a2) and torch.equal(lp1, lp2) and torch.equal(v1, v2)
    finally:
        side.close()


def test_trainer_close_ends_the_worker():
    t = _trainer(2)
    assert t.side.submit(lambda: threading.current_thread().name).result().startswith("proxima-critic")
    t.close()
    assert not any(th.name.startswith("proxima-critic") and th.is_alive() for th in threading.enumerate())
