"""Normalizers and the continuous-action path (PPO_NOTES "Continuous actions").

* RunningMeanStd: streamed moments equal batch moments; ObsNormalizer / RewardScaler clip bounds;
  the reward scaler divides by the std of the running discounted return and resets it at done.
* The statistics survive save/load (state_dict and a real checkpoint) and evaluation uses them
  frozen.
* Box actions: the rollout stores the unclipped sample with its Normal log-density; the env gets
  the clipped action (also from Policy.act).
* Presets of the continuous/Box2D/MuJoCo families and the "install proxima[extra]" message.
* ``proxima eval --video`` writes a readable video with one frame per step of the first episode.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima.envs.base import BatchedEnv
from torch.distributions import Normal

from proxima import ppo
from proxima.agent import Agent, action_dtype, action_shape
from proxima.normalize import ObsNormalizer, RewardScaler, RunningMeanStd
from proxima.rollout import Rollout


def _assert_same_stats(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


# ------------------------------------------------------------------------------------ moments
@pytest.mark.parametrize("shape", [(), (3,), (2, 4)])
def test_streamed_moments_equal_batch_moments(shape):
    g = torch.Generator().manual_seed(0)
    data = torch.randn((1000, *shape), generator=g, dtype=torch.float64) * 3.0 + 5.0
    streamed, batch = RunningMeanStd(shape), RunningMeanStd(shape)
    sizes = torch.randint(1, 40, (200,), generator=g).tolist()
    start = 0
    for n in sizes:  # many uneven chunks, some of one row
        if start >= len(data):
            break
        streamed.update(data[start:start + n])
        start += n
    streamed.update(data[start:]) if start < len(data) else None
    batch.update(data)
    torch.testing.assert_close(streamed.mean, batch.mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(streamed.var, batch.var, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(streamed.count, batch.count, rtol=0, atol=1e-9)
    # and both equal the plain moments up to the epsilon prior count (1e-4 of a sample)
    np.testing.assert_allclose(batch.mean.numpy(), data.mean(0).numpy(), rtol=1e-6)
    np.testing.assert_allclose(batch.var.numpy(), data.var(0, unbiased=False).numpy(), rtol=1e-6)
    assert streamed.mean.dtype == torch.float64


def test_float32_inputs_accumulate_in_float64():
    rms = RunningMeanStd((2,))
    x = (torch.randn(10_000, 2) * 0.01 + 1e4).to(torch.float32)
    for chunk in x.split(7):
        rms.update(chunk)
    one = RunningMeanStd((2,))
    one.update(x.double())
    # a float32 accumulator would be off by ~1e-3 here (1e4 +- 0.01); float64 matches to ~1e-12
    np.testing.assert_allclose(rms.mean.numpy(), one.mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(rms.var.numpy(), one.var.numpy(), rtol=1e-6)
    # the epsilon prior (count 1e-4, var 1) weighs in the variance only: the mean is the plain one
    np.testing.assert_allclose(rms.mean.numpy(), x.double().mean(0).numpy(), rtol=1e-7)


# ------------------------------------------------------------------------------------ obs normalizer
def test_obs_normalizer_normalizes_and_clips():
    norm = ObsNormalizer((3,), clip=10.0)
    data = torch.randn(5000, 3) * torch.tensor([1.0, 100.0, 0.01]) + torch.tensor([0.0, -50.0, 3.0])
    for chunk in data.split(100):
        norm(chunk)  # training mode updates
    out = norm(data, update=False)
    assert out.dtype == torch.float32
    np.testing.assert_allclose(out.mean(0).numpy(), 0.0, atol=1e-3)
    np.testing.assert_allclose(out.std(0).numpy(), 1.0, atol=2e-3)
    huge = torch.tensor([[1e6, -1e9, 1e3], [-1e6, 1e9, -1e3]])
    clipped = norm(huge, update=False)
    assert clipped.abs().max() == 10.0 and (clipped.abs() == 10.0).all()
    norm2 = ObsNormalizer((3,), clip=2.5)
    assert norm2(huge * 0 + torch.tensor([[100.0, -100.0, 0.0]]), update=False).abs().max() <= 2.5


def test_obs_normalizer_update_flag_and_eval_mode_freeze_the_stats():
    norm = ObsNormalizer((2,))
    norm(torch.randn(64, 2))
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    norm(torch.randn(64, 2) + 5, update=False)
    _assert_same_stats(before, norm.state_dict())
    norm.eval()
    norm(torch.randn(64, 2) + 5)
    _assert_same_stats(before, norm.state_dict())
    norm(torch.randn(64, 2) + 5, update=True)  # an explicit update wins over eval mode
    assert not torch.equal(before["rms.mean"], norm.rms.mean)


# ------------------------------------------------------------------------------------ reward scaler
def test_reward_scaler_divides_by_std_of_the_discounted_return_and_resets_at_done():
    gamma, n, T = 0.9, 3, 50
    g = torch.Generator().manual_seed(1)
    rewards = torch.randn(T, n, generator=g) * 2.0 + 1.0
    dones = torch.rand(T, n, generator=g) < 0.1
    scaler = RewardScaler(n, gamma, clip=1e9)
    # reference: the running discounted return per env, reset after a done; batch moments of all of them
    ret = torch.zeros(n, dtype=torch.float64)
    seen, outs, expected = [], [], []
    for t in range(T):
        ret = ret * gamma + rewards[t].double()
        seen.append(ret.clone())
        ref = RunningMeanStd(())
        ref.update(torch.cat(seen))  # one batch of every return so far: equals the streamed moments
        expected.append(rewards[t].double() / torch.sqrt(ref.var + 1e-8))
        ret = torch.where(dones[t], torch.zeros_like(ret), ret)
        outs.append(scaler(rewards[t], dones[t]))
        torch.testing.assert_close(scaler.returns, ret)  # reset where done
    torch.testing.assert_close(torch.stack(outs), torch.stack(expected).float(), rtol=1e-5, atol=1e-6)
    # no mean subtraction: the sign of every reward is kept
    assert (torch.sign(torch.stack(outs)) == torch.sign(rewards)).all()


def test_reward_scaler_clips_and_freezes_when_not_updating():
    scaler = RewardScaler(2, 0.99, clip=10.0)
    for _ in range(20):
        scaler(torch.full((2,), 0.01), torch.zeros(2, dtype=torch.bool))
    out = scaler(torch.tensor([1e6, -1e6]), torch.zeros(2, dtype=torch.bool), update=False)
    assert out.tolist() == [10.0, -10.0]
    before = {k: v.clone() for k, v in scaler.state_dict().items()}
    scaler.eval()
    scaler(torch.tensor([5.0, 5.0]), torch.ones(2, dtype=torch.bool))
    _assert_same_stats(before, scaler.state_dict())


def test_state_dict_round_trip():
    norm, scaler = ObsNormalizer((4,)), RewardScaler(3, 0.99)
    for _ in range(10):
        norm(torch.randn(8, 4) * 3 + 1)
        scaler(torch.randn(3), torch.rand(3) < 0.3)
    norm2, scaler2 = ObsNormalizer((4,)), RewardScaler(3, 0.99)
    norm2.load_state_dict(norm.state_dict())
    scaler2.load_state_dict(scaler.state_dict())
    _assert_same_stats(norm.state_dict(), norm2.state_dict())
    _assert_same_stats(scaler.state_dict(), scaler2.state_dict())
    assert set(norm.state_dict()) == {"rms.mean", "rms.var", "rms.count"}
    assert set(scaler.state_dict()) == {"rms.mean", "rms.var", "rms.count", "returns"}
    x = torch.randn(5, 4)
    assert torch.equal(norm(x, update=False), norm2(x, update=False))
    r, d = torch.randn(3), torch.zeros(3, dtype=torch.bool)
    assert torch.equal(scaler(r, d, update=False), scaler2(r, d, update=False))


# ------------------------------------------------------------------------------------ checkpoints
def _tiny_pendulum(tmp_path, **kw):
    from proxima.config import PPOConfig

    values = dict(env_id="Pendulum-v1", backend="native", num_envs=4, num_steps=32, total_timesteps=384,
                  num_minibatches=4, update_epochs=2, norm_obs=True, norm_reward=True, progress=False,
                  checkpoint_every=0, eval_episodes=0, threads=1, run_dir=str(tmp_path / "run"))
    values.update(kw)
    return PPOConfig(**values)


def test_checkpoint_keeps_the_normalizer_stats_and_evaluation_leaves_them_frozen(tmp_path):
    from proxima import checkpoint as ckpt
    from proxima.evaluate import evaluate
    from proxima.trainer import Trainer

    trainer = Trainer(_tiny_pendulum(tmp_path), quiet=True)
    try:
        run_dir = trainer.run()
    finally:
        trainer.close()
    assert float(trainer.obs_norm.rms.count) > 384  # it did learn statistics
    state = ckpt.load_checkpoint(run_dir)
    _assert_same_stats(state["obs_normalizer"], trainer.obs_norm.state_dict())
    _assert_same_stats(state["reward_scaler"], trainer.reward_scaler.state_dict())

    policy = ckpt.load_policy(run_dir)
    assert policy.obs_normalizer is not None and not policy.obs_normalizer.training
    _assert_same_stats(policy.obs_normalizer.state_dict(), trainer.obs_norm.state_dict())
    before = {k: v.clone() for k, v in policy.obs_normalizer.state_dict().items()}
    result = evaluate(policy, episodes=2, seed=7)
    assert result["lengths"] == [200, 200]
    _assert_same_stats(before, policy.obs_normalizer.state_dict())
    # the policy sees obs through the frozen stats: same action as normalizing by hand
    obs = torch.tensor([[0.3, -0.9, 2.0]])
    x = ((obs.double() - trainer.obs_norm.rms.mean) / torch.sqrt(trainer.obs_norm.rms.var + 1e-8)).clamp(-10, 10).float()
    expected = trainer.agent.act(x).clamp(-2.0, 2.0)
    torch.testing.assert_close(policy.act(obs), expected)


def test_resume_restores_the_normalizer_stats(tmp_path):
    from proxima import checkpoint as ckpt
    from proxima.trainer import Trainer

    cfg = _tiny_pendulum(tmp_path)
    trainer = Trainer(cfg, quiet=True)
    try:
        run_dir = trainer.run()
    finally:
        trainer.close()
    resumed = Trainer(cfg, run_dir=run_dir, resume_state=ckpt.load_checkpoint(run_dir), quiet=True)
    try:
        _assert_same_stats(resumed.obs_norm.state_dict(), trainer.obs_norm.state_dict())
        _assert_same_stats(resumed.reward_scaler.state_dict(), trainer.reward_scaler.state_dict())
    finally:
        resumed.close()


class RecordingEnv(BatchedEnv):
    """Wraps a BatchedEnv and records every action it is stepped with (``received``) and every
    observation its reset and step return (``returned``)."""

    def __init__(self, env):
        self.env, self.received, self.returned = env, [], []
        self.single_action_space = env.single_action_space
        self.single_observation_space = env.single_observation_space
        self.device, self.num_envs = env.device, env.num_envs

    def reset(self, seed=None):
        obs = self.env.reset(seed=seed)
        self.returned.append(obs.clone())
        return obs

    def step(self, action):
        self.received.append(action.clone())
        out = self.env.step(action)
        self.returned.append(out[0].clone())
        return out


def test_the_obs_normalizer_counts_each_returned_observation_once():
    """As Gymnasium's NormalizeObservation: the reset obs and every obs a step returns, once each;
    the obs a rollout ends on is not counted again when the next rollout starts from it."""
    from proxima.envs import make_env

    torch.manual_seed(0)
    env = RecordingEnv(make_env("Pendulum-v1", 3, backend="native", seed=0))
    agent = Agent(env.single_observation_space, env.single_action_space)
    rollout = Rollout(5, 3, env.obs_shape, action_shape(env.single_action_space), action_dtype(env.single_action_space), "cpu")
    norm = ObsNormalizer(env.obs_shape)
    next_obs = env.reset(seed=0)
    norm.count_reset(next_obs)
    for _ in range(3):
        next_obs = ppo.collect_rollout(env, agent.policy_step, rollout, next_obs, norm)
    seen = torch.cat(env.returned).double()  # (3 + 3 * 5 * 3, 3): 1 reset + 15 steps, 3 envs each
    assert seen.shape[0] == 48
    expected = RunningMeanStd((3,))
    expected.update(seen)
    assert float(norm.rms.count) == pytest.approx(48 + 1e-4)  # before: 57, each later start counted twice
    torch.testing.assert_close(norm.rms.mean, expected.mean)
    torch.testing.assert_close(norm.rms.var, expected.var)
    norm.eval()
    norm.count_reset(next_obs)  # frozen: an evaluation's reset is not counted
    assert float(norm.rms.count) == pytest.approx(48 + 1e-4)


def test_trainer_and_population_count_the_reset_obs_once(tmp_path):
    """384 steps of 4 envs x 32 steps: 4 reset obs + 384 stepped obs, for a run and for each member."""
    from proxima.population import Population
    from proxima.trainer import Trainer

    trainer = Trainer(_tiny_pendulum(tmp_path), quiet=True)
    try:
        trainer.run()
        assert float(trainer.obs_norm.rms.count) == pytest.approx(4 + 384 + 1e-4)
    finally:
        trainer.close()
    cfg = _tiny_pendulum(tmp_path, run_dir=str(tmp_path / "pop"))
    pop = Population([cfg, _tiny_pendulum(tmp_path, run_dir=str(tmp_path / "pop"), seed=2)])
    try:
        for _ in range(3):
            pop.train_iteration()
        assert float(pop.obs_norm.rms.count) == pytest.approx(4 + 384 + 1e-4)
    finally:
        pop.close()


# ------------------------------------------------------------------------------------ Box actions
def _box_setup(env_id: str, mean: float, backend: str = "native", num_envs: int = 6, num_steps: int = 8):
    from proxima.envs import make_env

    torch.manual_seed(0)
    env = make_env(env_id, num_envs, backend=backend, seed=0)
    space = env.single_action_space
    agent = Agent(env.single_observation_space, space)
    with torch.no_grad():  # a policy whose mean is far outside the bounds: most samples are too
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.fill_(mean)
    rollout = Rollout(num_steps, num_envs, env.obs_shape, action_shape(space), action_dtype(space), "cpu")
    rec = RecordingEnv(env)
    return rec, agent, rollout, rec.reset(seed=0)


@pytest.mark.parametrize("env_id,backend", [("Pendulum-v1", "native"), ("Pendulum-v1", "gymnasium"),
                                            ("MountainCarContinuous-v0", "native")])
def test_rollout_stores_the_unclipped_sample_and_steps_the_env_with_the_clipped_one(env_id, backend):
    rec, agent, rollout, obs = _box_setup(env_id, mean=3.5, backend=backend)
    low, high = (float(rec.single_action_space.low[0]), float(rec.single_action_space.high[0]))
    ppo.collect_rollout(rec, agent.policy_step, rollout, obs)
    stored = rollout.actions  # (T, N, 1)
    assert (stored > high).float().mean() > 0.5  # mostly outside the bounds, and kept that way
    received = torch.stack(rec.received)
    torch.testing.assert_close(received, stored.clamp(low, high))
    assert received.max() <= high and received.min() >= low
    # stored log-prob: the Normal log-density of the stored (unclipped) sample
    mean = agent.actor(rollout.obs)
    expected = Normal(mean, agent.actor_logstd.exp()).log_prob(stored).sum(-1)
    torch.testing.assert_close(rollout.logprobs, expected)
    clipped = Normal(mean, agent.actor_logstd.exp()).log_prob(stored.clamp(low, high)).sum(-1)
    outside = (stored > high).squeeze(-1)
    assert outside.any() and ((rollout.logprobs - clipped)[outside].abs() > 1e-3).all()  # not the clipped one's
    # the update recomputes the same log-prob from the stored action: ratio 1 at the first step
    _, newlogprob, _, _ = agent.get_action_and_value(rollout.obs.reshape(-1, *rollout.obs.shape[2:]),
                                                     stored.reshape(-1, 1))
    torch.testing.assert_close(newlogprob, rollout.logprobs.reshape(-1))


def test_mountain_car_continuous_penalty_is_charged_on_the_clipped_action():
    """The native env (like Gymnasium's) charges 0.1 * a^2 on the action as given; PPO clips first."""
    rec, agent, rollout, obs = _box_setup("MountainCarContinuous-v0", mean=4.0, num_steps=4)
    ppo.collect_rollout(rec, agent.policy_step, rollout, obs)
    a = rollout.actions.squeeze(-1).clamp(-1.0, 1.0)
    reached = rollout.terminated
    torch.testing.assert_close(rollout.raw_rewards[~reached], (-0.1 * a * a)[~reached])


def test_policy_act_clips_box_actions_to_the_bounds():
    from proxima.checkpoint import Policy

    space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    agent = Agent(gym.spaces.Box(-1, 1, (3,), np.float32), space)
    with torch.no_grad():
        agent.actor[-1].bias.fill_(5.0)
    policy = Policy(agent, None, {"env_id": "Pendulum-v1"}, None, space, "cpu")
    assert float(policy.act(torch.zeros(4, 3)).max()) == 2.0
    out = policy.act(np.zeros(3, dtype=np.float32))
    assert isinstance(out, np.ndarray) and out.shape == (1,) and out[0] == 2.0


# ------------------------------------------------------------------------------------ presets
MUJOCO_DEFAULTS = dict(num_envs=1, num_steps=2048, num_minibatches=32, update_epochs=10, lr=3e-4, ent_coef=0.0,
                       total_timesteps=1_000_000, norm_obs=True, norm_reward=True, backend="gymnasium")


def test_presets_are_listed_and_resolve():
    from proxima.cli import main
    from proxima.config import validate
    from proxima.presets import all_presets, resolve

    presets = all_presets()
    for env_id in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1",
                   "LunarLander-v3", "LunarLanderContinuous-v3", "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"):
        assert "default" in presets[env_id], env_id
        validate(resolve(env_id))
    for env_id in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"):
        cfg = resolve(env_id)
        for k, v in MUJOCO_DEFAULTS.items():
            assert getattr(cfg, k) == v, (env_id, k)
    lunar = resolve("LunarLander-v3")
    assert (lunar.num_envs, lunar.num_steps, lunar.gamma, lunar.gae_lambda) == (16, 1024, 0.999, 0.98)
    pend = resolve("Pendulum-v1")
    assert pend.norm_obs and pend.norm_reward and pend.gamma < 0.99
    assert main(["presets"]) == 0


def test_flags_override_the_preset():
    import argparse

    from proxima.cli import build_parser, config_from_args

    args = build_parser().parse_args(["train", "Pendulum-v1", "--lr", "0.01", "--no-norm-reward"])
    cfg = config_from_args(args, "proxima train")
    assert cfg.lr == 0.01 and cfg.norm_reward is False
    assert cfg.num_envs == 32 and cfg.norm_obs is True  # the rest from the preset
    assert isinstance(args, argparse.Namespace)


@pytest.mark.parametrize("env_id,extra", [("LunarLander-v3", "box2d"), ("LunarLanderContinuous-v3", "box2d"),
                                          ("HalfCheetah-v5", "mujoco"), ("Hopper-v5", "mujoco")])
def test_missing_extra_names_the_install_command(monkeypatch, env_id, extra):
    """Whether or not box2d/mujoco are installed here: a DependencyNotInstalled from gym.make (what
    Gymnasium raises without them) becomes one line naming the extra."""
    from proxima.envs import EnvError, GymnasiumEnv

    def missing(*a, **k):
        raise gym.error.DependencyNotInstalled(f"{extra} is not installed, run `pip install \"gymnasium[{extra}]\"`")

    monkeypatch.setattr(gym, "make", missing)
    with pytest.raises(EnvError) as err:
        GymnasiumEnv(env_id, 1)
    msg = str(err.value)
    assert f".venv/bin/pip install -c requirements.lock -e '.[{extra}]'" in msg and env_id in msg and "\n" not in msg


def test_missing_extra_through_the_cli_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    from proxima.cli import main

    def missing(*a, **k):
        raise gym.error.DependencyNotInstalled("Box2D is not installed")

    monkeypatch.setattr(gym, "make", missing)
    rc = main(["train", "LunarLander-v3", "--total-timesteps", "16384", "--run-dir", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip().count("\n") == 0 and "-e '.[box2d]'" in err
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------ video
def _read_frames(path: str) -> int:
    from PIL import Image

    with Image.open(path) as im:
        return getattr(im, "n_frames", 1)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_eval_video_writes_a_readable_file_with_one_frame_per_state(tmp_path, env_id, capsys):
    from proxima.cli import main

    run = tmp_path / "run"
    steps = 256 if env_id == "CartPole-v1" else 384
    args = ["train", env_id, "--num-envs", "4", "--num-steps", "32", "--total-timesteps", str(steps), "--run-dir", str(run),
            "--eval-episodes", "0", "--checkpoint-every", "0", "--quiet", "--threads", "1"]
    assert main(args) == 0
    capsys.readouterr()
    video = tmp_path / "out" / "episode.mp4"
    video.parent.mkdir()  # --video writes into an existing folder (a missing one is refused: test_eval42)
    assert main(["eval", str(run), "--episodes", "2", "--json", "--video", str(video)]) == 0
    import json

    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    written = result["video"]
    assert written is not None
    from pathlib import Path

    from proxima.video import has_mp4_encoder

    assert Path(written).suffix == (".mp4" if has_mp4_encoder() else ".gif")
    assert Path(written).stat().st_size > 0
    n = result["lengths"][0] + 1  # s0 .. the terminal state of an L-step episode (native envs)
    if Path(written).suffix == ".gif":
        assert _read_frames(written) == n
    else:
        import imageio.v3 as iio

        assert iio.imread(written, index=None).shape[0] == n


def _frames(n: int, size=(40, 60)) -> list:
    # every frame differs (GIF encoders merge identical consecutive frames)
    out = []
    for i in range(n):
        f = np.zeros((*size, 3), dtype=np.uint8)
        f[:, : (i % size[1]) + 1] = (255, 80 + i, 0)
        f[i % size[0]] = 255
        out.append(f)
    return out


def test_write_video_falls_back_to_gif_and_says_so(tmp_path, monkeypatch, capsys):
    from proxima import video

    monkeypatch.setattr(video, "has_mp4_encoder", lambda: False)
    path = video.write_video(_frames(7), tmp_path / "x.mp4")
    assert path == str(tmp_path / "x.gif")
    assert "GIF" in capsys.readouterr().err
    assert _read_frames(path) == 7
    import imageio.v3 as iio

    frames = iio.imread(path, index=None)
    assert frames.shape[:3] == (7, 40, 60)


@pytest.mark.skipif(not __import__("proxima.video").video.has_mp4_encoder(), reason="imageio-ffmpeg not installed")
def test_write_video_mp4(tmp_path):
    import imageio.v3 as iio

    from proxima.video import write_video

    path = write_video(_frames(9), tmp_path / "z.mp4")
    assert path.endswith(".mp4") and iio.imread(path, index=None).shape[0] == 9


def test_write_video_rejects_bad_frames(tmp_path):
    from proxima.video import VideoError, write_video

    with pytest.raises(VideoError, match="no frames"):
        write_video([], tmp_path / "a.gif")
    with pytest.raises(VideoError, match="frame 1"):
        write_video([np.zeros((4, 4, 3), np.uint8), np.zeros((5, 4, 3), np.uint8)], tmp_path / "a.gif")
