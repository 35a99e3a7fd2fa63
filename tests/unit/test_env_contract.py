"""The env path's numbers and lines without a training run: episode counts of Atari-like envs,
game lengths of the ALE wrappers (a fake ALE, no ale-py needed), Box actions cast to the space's
dtype, the action-scale note, EnvCalls' checks of what an env returns and where an exception is
located, memory sizing of Dict and image observations, and Policy.act's input checks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from proxima.envs import EnvError
from proxima.envs.spaces import action_scale_note, env_actions, obs_layout


# ------------------------------------------------------------------------------- episode counts
def test_episode_count_counts_rows_with_a_length_not_done_rows():
    """An Atari env while training ends an episode per lost life but reports full games: the rows
    that end an episode and no game carry 0 and are no episode of the statistics."""
    from proxima.rollout import Rollout

    ro = Rollout(2, 4, (2,), (), torch.int64, "cpu")
    done = torch.tensor([True, True, False, True])  # 3 episodes ended (lives), 1 game
    ro.add_episode_stats(torch.tensor([0.0, 7.0, 0.0, 0.0]), torch.tensor([0, 120, 0, 0]), done)
    ro.add_episode_stats(torch.tensor([0.0, 0.0, 3.0, 0.0]), torch.tensor([0, 0, 80, 0]), torch.tensor([False, False, True, True]))
    assert float(ro.ep_count) == 2.0 and float(ro.ep_return_sum) == 10.0 and float(ro.ep_length_sum) == 200.0


def test_a_populations_episode_count_per_member_counts_games_too():
    from proxima.population import PopulationRollout

    ro = PopulationRollout(2, 2, 2, (2,), (), torch.int64, "cpu")  # 2 members x 2 envs
    done = torch.tensor([True, True, True, False])  # member 0: a life and a game; member 1: a life
    ro.add_episode_stats(torch.tensor([0.0, 7.0, 0.0, 0.0]), torch.tensor([0, 120, 0, 0]), done)
    assert ro.ep_count.tolist() == [1.0, 0.0] and ro.ep_return_sum.tolist() == [7.0, 0.0]


def test_episode_count_of_an_ordinary_env_is_its_done_count():
    """Every done row of CartPole ends an episode with a length >= 1: the count is what it was."""
    from proxima import ppo
    from proxima.envs import make_env
    from proxima.rollout import Rollout

    env = make_env("CartPole-v1", 8, seed=0)
    ro = Rollout(64, 8, env.obs_shape, (), torch.int64, "cpu")
    g = torch.Generator().manual_seed(0)

    def policy_step(obs):
        return torch.randint(0, 2, (obs.shape[0],), generator=g), torch.zeros(obs.shape[0]), torch.zeros(obs.shape[0])

    ppo.collect_rollout(env, policy_step, ro, env.reset(seed=0))
    assert float(ro.ep_count) == float(ro.dones.sum()) > 0


# ------------------------------------------------------------------------------- ALE wrappers
class FakeAle(gym.Env):
    """ALE's interface to the wrappers (``unwrapped.ale.lives()``, ``get_action_meanings()``):
    3 lives, one lost every 4 env steps; reward 1 for FIRE (action 1)."""

    observation_space = spaces.Box(0, 255, (2,), np.uint8)
    action_space = spaces.Discrete(4)

    def __init__(self):
        self.ale = self
        self.env_steps = 0

    def lives(self) -> int:
        return self._lives

    def get_action_meanings(self):
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self._lives, self.t = 3, 0
        return np.zeros(2, np.uint8), {}

    def step(self, action):
        self.t += 1
        self.env_steps += 1
        if self.t % 4 == 0:
            self._lives -= 1
        return np.zeros(2, np.uint8), float(int(action) == 1), self._lives == 0, False, {}


@pytest.mark.parametrize("training", [True, False])
def test_a_games_length_counts_the_agents_steps_not_the_fire_presses(training):
    """FireReset presses FIRE twice after each reset (each lost life while training) and
    FireAfterLifeLoss once after a lost life in evaluation: those are env steps, not agent steps."""
    from proxima.envs.atari import game_wrappers

    base = FakeAle()
    env = game_wrappers(base, training)
    env.reset(seed=0)
    agent_steps, episodes, info = 0, 0, {}
    while "game_length" not in info:
        _, _, terminated, truncated, info = env.step(0)
        agent_steps += 1
        if (terminated or truncated) and "game_length" not in info:
            episodes += 1
            env.reset()
    # a game is 12 env steps: while training 2 FIRE + 2 agent steps for the first life, then for each of
    # the two others EpisodicLife's no-op, 2 FIRE and 1 agent step (4 agent steps, 2 episodes before the
    # last); in evaluation 2 FIRE, then 8 agent steps and a FIRE after each of the 2 lives lost before the end
    assert (agent_steps, episodes) == ((4, 2) if training else (8, 0)), (agent_steps, episodes)
    assert info["game_length"] == agent_steps and base.env_steps == 12
    assert info["game_return"] == 3.0  # the FIRE presses' rewards stay in the game's score


# ------------------------------------------------------------------------------- Box actions
def test_a_float64_box_action_is_clipped_in_the_spaces_own_dtype():
    """float32(-0.3) is -0.30000001 as float64: outside Box(-0.3, 0.3, float64), which an env that
    asserts action_space.contains(a) refuses. The clip is redone after the cast."""
    space = spaces.Box(-0.3, 0.3, (2,), np.float64)
    clipped32 = np.clip(np.array([[-5.0, 0.1], [0.3, 5.0]], np.float32), np.float32(-0.3), np.float32(0.3))
    out = env_actions(clipped32, space, 2)
    assert out.dtype == np.float64 and out.tolist() == [[-0.3, np.float64(np.float32(0.1))], [0.3, 0.3]]
    assert all(space.contains(a) for a in out)
    ints = env_actions(np.array([[4.6, -2.0]], np.float32), spaces.Box(0, 4, (2,), np.int64), 1)
    assert ints.tolist() == [[4, 0]] and ints.dtype == np.int64


def test_an_action_at_the_top_of_a_wide_int32_box_reaches_the_env_as_its_top():
    """float32(2**31 - 1) is 2**31: cast to int32 it wrapped to the bottom, which the clip kept as low."""
    space = spaces.Box(-2**31, 2**31 - 1, (2,), np.int32)
    top = np.clip(np.array([[3e9, -3e9]], np.float32), space.low.astype(np.float32), space.high.astype(np.float32))
    out = env_actions(top, space, 1)
    assert out.tolist() == [[2**31 - 1, -2**31]] and out.dtype == np.int32 and space.contains(out[0])


@pytest.mark.parametrize("space, note", [
    (spaces.Box(10.0, 20.0, (1,), np.float32),
     "action_space Box(10.0, 20.0, (1,), float32): 0 lies outside its range [10, 20], so the early actions all clip to one "
     "bound and the policy may never learn; Proxima clips Box actions to the bounds but does not rescale them: wrap the "
     "env in gymnasium.wrappers.RescaleAction(env, np.float32(-1), np.float32(1))"),
    (spaces.Box(np.array([-1.0, -500.0], np.float32), np.array([1.0, 500.0], np.float32)),
     f"action_space {spaces.Box(np.array([-1.0, -500.0], np.float32), np.array([1.0, 500.0], np.float32))}: its range entry 1 "
     "[-500, 500] is far wider than the "
     "policy's samples (std 1 around 0), which reach only a sliver of it; Proxima clips Box actions to the bounds but does "
     "not rescale them: wrap the env in gymnasium.wrappers.RescaleAction(env, np.float32(-1), np.float32(1))"),
    (spaces.Box(-0.001, 0.001, (3,), np.float64),
     "action_space Box(-0.001, 0.001, (3,), float64): its range [-0.001, 0.001] (all 3 entries) is far narrower than the policy's "
     "samples (std 1 around 0), which mostly clip to a bound; Proxima clips Box actions to the bounds but does not rescale "
     "them: wrap the env in gymnasium.wrappers.RescaleAction(env, np.float32(-1), np.float32(1))"),
    (spaces.Box(0, 1000, (2,), np.int32),  # RescaleAction keeps an int dtype: it would leave only -1, 0, 1
     "action_space Box(0, 1000, (2,), int32): its range [0, 1000] (all 2 entries) is far wider than the policy's samples (std 1 "
     "around 0), which reach only a sliver of it; Proxima clips Box actions to the bounds but does not rescale them: declare "
     "a float Box(-1, 1) and map it to the integers in the env, or use Discrete/MultiDiscrete if the values are choices"),
    (spaces.Box(-1.0, 1.0, (6,), np.float32), None),
    (spaces.Box(-2.0, 2.0, (1,), np.float32), None),  # Pendulum
    (spaces.Box(0.0, 1.0, (2,), np.float32),  # 0 on a bound: the policy's early actions, centred on 0, clip half the time
     "action_space Box(0.0, 1.0, (2,), float32): its range [0, 1] (all 2 entries) has 0 as a bound, and the policy's early actions "
     "are centred on 0, so half of them clip to that bound; Proxima clips Box actions to the bounds but does not rescale "
     "them: wrap the env in gymnasium.wrappers.RescaleAction(env, np.float32(-1), np.float32(1))"),
    # an integer Box with 0 on a bound: half its early samples clip to 0 and a third more round to it
    (spaces.Box(0, 5, (2,), np.int64), "action_space Box(0, 5, (2,), int64): its range [0, 5] (all 2 entries) has 0 as "
     "a bound, and the policy's early actions are centred on 0, so half of them clip to that bound; Proxima clips Box "
     "actions to the bounds but does not rescale them: declare a float Box(-1, 1) and map it to the integers in the env, "
     "or use Discrete/MultiDiscrete if the values are choices"),
    (spaces.Box(0, 1, (2,), np.bool_), None),  # a switch
    (spaces.Box(-0.4, 0.4, (17,), np.float32), None),  # Humanoid
    (spaces.Discrete(3), None),
])
def test_action_scale_note(space, note):
    assert action_scale_note(space) == note


# ------------------------------------------------------------------------------- EnvCalls
class Returns(gym.Env):
    """step() returns what ``out`` holds (reset: ``reset_out``)."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, out=None, reset_out=None, space=None):
        if space is not None:
            self.observation_space = space
        self.out, self.reset_out = out, reset_out

    def reset(self, seed=None, options=None):
        return self.reset_out

    def step(self, action):
        return self.out


def wrapped(env: gym.Env, index: int = 3):
    from proxima.envs.gym_adapter import EnvCalls

    return EnvCalls(env, index, obs_layout(env.observation_space, "m:E"), "m:E")


DICT = spaces.Dict({"img": spaces.Box(0, 255, (36, 36, 3), np.uint8), "v": spaces.Box(-1.0, 1.0, (2,), np.float32)})
GOOD_DICT = {"img": np.zeros((36, 36, 3), np.uint8), "v": np.zeros(2, np.float32)}
CHECK = "(check with: proxima check-env m:E)"


@pytest.mark.parametrize("out, space, line", [
    ((np.zeros(3, np.float32), 0.0, False, False, {}), None,
     f"env 'm:E': env 3 returned an observation of shape (3,) at env step 1; observation_space declares shape (2,): return an "
     f"array of that shape {CHECK}"),
    (([0.0, 0.0, 0.0], 0.0, False, False, {}), None,
     f"env 'm:E': env 3 returned an observation of shape (3,) at env step 1; observation_space declares shape (2,): return an "
     f"array of that shape {CHECK}"),
    ((np.zeros(2, np.float32), 0.0, False, False, None), None,
     f"env 'm:E': env 3 returned info of type NoneType at env step 1; step() returns info as a dict (return {{}} for none) {CHECK}"),
    (({"img": GOOD_DICT["img"]}, 0.0, False, False, {}), DICT,
     f"env 'm:E': env 3 returned an observation without the key 'v' at env step 1; the observation space declares it: return "
     f"obs['v'] too {CHECK}"),
    (({**GOOD_DICT, "v": np.zeros((1, 2), np.float32)}, 0.0, False, False, {}), DICT,
     f"env 'm:E': env 3 returned an observation at key 'v' of shape (1, 2) at env step 1; observation_space['v'] declares shape "
     f"(2,): return an array of that shape {CHECK}"),
    (({**GOOD_DICT, "img": np.zeros((36, 36, 3), np.float32)}, 0.0, False, False, {}), DICT,
     f"env 'm:E': env 3 returned an image at key 'img' of dtype float32 shape (36, 36, 3) at env step 1; the observation space "
     f"declares uint8 (36, 36, 3) (return np.uint8 pixels 0..255 of that shape) {CHECK}"),
    ((np.zeros(2, np.float32), 0.0, False, False, {}), DICT,
     f"env 'm:E': env 3 returned an observation of type ndarray at env step 1; the observation space is a Dict: return a dict "
     f"with the keys 'img', 'v' {CHECK}"),
], ids=["shape", "list shape", "info None", "missing key", "key shape", "float image", "not a dict"])
def test_what_an_env_returns_is_checked_at_every_step(out, space, line):
    env = wrapped(Returns(out, space=space))
    with pytest.raises(EnvError) as e:
        env.step(0)
    assert str(e.value) == line


def test_good_returns_pass_and_reset_info_is_checked():
    assert wrapped(Returns((GOOD_DICT, 1.0, False, False, {}), space=DICT)).step(0)[1] == 1.0
    assert wrapped(Returns(([0.5, 0.5], 1.0, False, False, {}))).step(0)[1] == 1.0  # a list of the right shape
    scalar = spaces.Box(-1.0, 1.0, (), np.float64)
    assert wrapped(Returns((0.5, 1.0, False, False, {}), space=scalar)).step(0)[0] == 0.5  # a Python float for shape ()
    old = (np.zeros(2, np.float32), 0.0, False, {})  # 4 values: refused where it happens, in check-env's words
    with pytest.raises(EnvError, match="step returns: expected 5 values .* got 4 values at step 1: the old gym API"):
        wrapped(Returns(old)).step(0)
    with pytest.raises(EnvError) as e:
        wrapped(Returns(reset_out=(np.zeros(2, np.float32), None))).reset(seed=0)
    assert str(e.value) == ("env 'm:E': env 3 returned info of type NoneType at reset (after env step 0); reset() returns "
                            f"(obs, info) with info a dict (return {{}} for none) {CHECK}")


class RaisesInNumpy(Returns):
    def step(self, action):
        np.linalg.inv(np.zeros((2, 2)))


class NoOptions(Returns):
    def reset(self, seed=None):
        return np.zeros(2, np.float32), {}


def test_an_exception_names_the_users_line_not_numpys():
    import inspect

    line = next(i for i, text in enumerate(inspect.getsourcelines(RaisesInNumpy)[0]) if "np.linalg.inv" in text)
    line += inspect.getsourcelines(RaisesInNumpy)[1]
    with pytest.raises(EnvError) as e:
        wrapped(RaisesInNumpy()).step(1)
    assert str(e.value) == f"env 'm:E': env 3 raised LinAlgError: Singular matrix (test_env_contract.py:{line}) at env step 1 (action 1)"
    with pytest.raises(EnvError) as e:
        wrapped(NoOptions()).reset(seed=0, options=None)
    assert str(e.value) == ("env 'm:E': env 3 raised TypeError: NoOptions.reset() got an unexpected keyword argument 'options' "
                            "at reset (after env step 0); reset() must take options, as Gymnasium's vector envs call it: "
                            "def reset(self, *, seed=None, options=None), calling super().reset(seed=seed) first (it "
                            "seeds self.np_random)")


# ------------------------------------------------------------------------------- sizing
def test_sizing_probes_a_dict_env_by_its_packed_tensor(monkeypatch):
    """A Dict space has no shape: the probe reads the packed obs tensor's (was a TypeError)."""
    from proxima import sizing
    from proxima.config import ConfigError, PPOConfig

    monkeypatch.setattr(sizing, "free_memory", lambda device: 10**8)
    cfg = PPOConfig(env_id="bad_envs:ImageDictObs", backend="gymnasium", num_envs=64, num_steps=8192)
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures"))
    sizes = sizing.env_probe(cfg)()
    assert tuple(sizes) == (36 * 36 * 3 + 2, 1, False) and sizes.layout.is_dict
    with pytest.raises(ConfigError) as e:
        sizing.check_fits(cfg, torch.device("cpu"), sizing.env_probe(cfg))
    assert str(e.value).startswith("--num-envs 64 x --num-steps 8192: needs ~")


def test_sizing_costs_images_as_uint8_through_the_cnn(monkeypatch):
    """PixelQuadrant-v0 (36x36x3 uint8, the Nature CNN): its buffers hold uint8 pixels, its network is
    the CNN with linear heads; a run that fits is not refused as float32 pixels through an MLP would be."""
    from proxima import sizing
    from proxima.agent import Agent
    from proxima.config import ConfigError, PPOConfig
    from proxima.envs import make_env

    cfg = PPOConfig(env_id="PixelQuadrant-v0", num_envs=16, num_steps=512, num_minibatches=4)
    env = make_env(cfg.env_id, 1)
    layout = obs_layout(env.single_observation_space)
    agent = Agent(env.single_observation_space, env.single_action_space, cfg.hidden_sizes, cfg.activation, cfg.encoder)
    env.close()
    sizes = sizing.env_probe(cfg)()
    assert tuple(sizes) == (3888, 1, True) and sizes.layout == layout
    weights, activations = sizing.network_terms(cfg, 3888, 1, layout)
    params = sum(p.numel() for p in agent.parameters())
    # 4 copies (weights, gradients, Adam's moments) of 4 bytes; the actor's head costed for act_size 1 (a lower bound)
    assert weights == 16 * (params - 3 * 512 - 3)
    # one minibatch of 2,048 rows: the float input and three feature maps (3888 + 32*8*8 + 64*3*3 + 64*1*1) and 512 features
    assert activations == 2048 * (3888 + 2048 + 576 + 64 + 512) * 4
    buffers = sizing.estimate_bytes(cfg, 3888, 1, True, layout)
    rollout_obs = 2 * 16 * 512 * 3888  # obs and final_obs, uint8
    assert rollout_obs < buffers < rollout_obs * 1.1
    monkeypatch.setattr(sizing, "free_memory", lambda device: int((buffers + weights + activations) * 1.05))
    sizing.check_fits(cfg, torch.device("cpu"), sizing.env_probe(cfg))  # fits: no error
    old = sizing.estimate_bytes(cfg, 3888, 1, True) + sizing.network_bytes(cfg, 3888, 1)  # float32 pixels, an MLP
    assert old > 2 * (buffers + weights + activations)
    norm = dict(cfg.__dict__, norm_obs=True)  # --norm-obs keeps float32 buffers (refused for images, costed as such)
    assert sizing.obs_bytes(PPOConfig(**norm), layout) == 4
    monkeypatch.setattr(sizing, "free_memory", lambda device: int((buffers + weights + activations) * 0.9))
    with pytest.raises(ConfigError):
        sizing.check_fits(cfg, torch.device("cpu"), sizing.env_probe(cfg))


# ------------------------------------------------------------------------------- Policy.act
def _pixel_policy():
    from proxima.agent import Agent
    from proxima.checkpoint import Policy
    from proxima.envs import make_env

    env = make_env("PixelQuadrant-v0", 1)
    obs_space, act_space = env.single_observation_space, env.single_action_space
    env.close()
    torch.manual_seed(0)
    return Policy(Agent(obs_space, act_space, encoder="cnn"), None, {"env_id": "PixelQuadrant-v0"}, obs_space, act_space, "cpu")


def test_policy_act_refuses_float_pixels():
    """A float image would be cast to uint8: pixels in [0, 1] all become 0, a black frame."""
    policy = _pixel_policy()
    assert policy.act(np.zeros((36, 36, 3), np.uint8)) in range(4)
    with pytest.raises(ValueError) as e:
        policy.act(np.full((2, 36, 36, 3), 0.5, np.float32))
    assert str(e.value) == ("Policy.act: obs holds float32 pixels where PixelQuadrant-v0's observations are uint8 images "
                            "(36, 36, 3) (the network scales the declared range to [0, 1] itself); pass np.uint8 pixels 0..255 as "
                            "(obs * 255).astype(np.uint8)")
    with pytest.raises(ValueError) as e:
        policy.act(torch.full((36, 36, 3), 200.0))
    assert str(e.value).endswith("(the network scales the declared range to [0, 1] itself); pass torch.uint8 pixels 0..255 as obs.to(torch.uint8)")


def test_policy_act_takes_a_batch_of_scalar_observations():
    """A scalar Box (shape ()) is recorded as (1,): a (B,) array is B observations, a 0-d one is one."""
    from proxima.agent import Agent
    from proxima.checkpoint import Policy

    obs_space = obs_layout(spaces.Box(-1.0, 1.0, (), np.float32))
    from proxima.envs.spaces import tensor_space

    flat = tensor_space(spaces.Box(-1.0, 1.0, (), np.float32), obs_space)
    torch.manual_seed(0)
    policy = Policy(Agent(flat, spaces.Discrete(2)), None, {"env_id": "E"}, flat, spaces.Discrete(2), "cpu")
    batch = policy.act(np.linspace(-1, 1, 5).astype(np.float32))
    assert batch.shape == (5,) and batch.tolist() == [int(policy.act(np.float32(x))) for x in np.linspace(-1, 1, 5)]
    assert policy.act(np.float32(0.5)).shape == () and policy.act(np.zeros((5, 1), np.float32)).shape == (5,)
    with pytest.raises(ValueError, match=r"does not hold \(B, \*\(1,\)\) observations"):
        policy.act(np.zeros((5, 2), np.float32))
