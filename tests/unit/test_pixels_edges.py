"""Pixels at the edges a review found wrong: images given to Policy.act in another layout or out
of range, a population's memory check on images, --video frames that are floats, grayscale or
change shape, the score of an Atari game while training (EpisodicLife's no-op after a lost life),
and Atari ids outside the known games without an Atari package installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from cli_helpers import error_line, run_main
from proxima.agent import Agent
from proxima.checkpoint import Policy
from proxima.envs import EnvError, atari, make_env
from proxima.envs.gym_adapter import from_ale_py

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IMG_CHW = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


@pytest.fixture
def fixtures_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


def _policy(env_id: str, backend: str = "auto") -> Policy:
    """An untrained policy for ``env_id``, with the env's spaces."""
    env = make_env(env_id, 1, backend=backend)
    obs_space, act_space = env.single_observation_space, env.single_action_space
    env.close()
    torch.manual_seed(0)
    return Policy(Agent(obs_space, act_space), None, {"env_id": env_id, "seed": 1}, obs_space, act_space, "cpu")


# ------------------------------------------------------------------------------- Policy.act
def test_policy_act_refuses_an_image_in_the_other_channel_order():
    """A CHW batch given to an HWC policy holds as many values: reshaped, it would be acted on scrambled."""
    policy = _policy("PixelQuadrant-v0")  # (36, 36, 3) images
    hwc = np.zeros((200, 36, 36, 3), np.uint8)
    assert policy.act(hwc).shape == (200,)
    with pytest.raises(ValueError) as e:
        policy.act(np.ascontiguousarray(hwc.transpose(0, 3, 1, 2)))
    assert str(e.value) == ("Policy.act: obs of shape (200, 3, 36, 36) does not hold (B, *(36, 36, 3)) observations of "
                            "PixelQuadrant-v0: its images are (36, 36, 3), channels last (H, W, C); move its channel axis "
                            "(np.moveaxis, torch.movedim)")


@pytest.mark.parametrize("shape, fix", [
    ((84, 84, 4), "move its channel axis (np.moveaxis, torch.movedim)"),
    ((84, 4, 84), "move its channel axis (np.moveaxis, torch.movedim)"),
    ((2, 84, 84, 4), "move its channel axis (np.moveaxis, torch.movedim)"),
    ((28224,), "give each image as (4, 84, 84)"),
    ((2, 28224), "give each image as (4, 84, 84)"),
])
def test_policy_act_takes_a_frame_stack_only_in_its_own_shape(shape, fix):
    policy = Policy(Agent(IMG_CHW, gym.spaces.Discrete(3)), None, {"env_id": "Stack-v0"}, IMG_CHW, gym.spaces.Discrete(3), "cpu")
    assert policy.act(np.zeros((4, 84, 84), np.uint8)).shape == () and policy.act(np.zeros((2, 4, 84, 84), np.uint8)).shape == (2,)
    with pytest.raises(ValueError) as e:
        policy.act(np.zeros(shape, np.uint8))
    assert str(e.value) == (f"Policy.act: obs of shape {shape} does not hold (B, *(4, 84, 84)) observations of Stack-v0: its "
                            f"images are (4, 84, 84), channels first (C, H, W); {fix}")


def test_policy_act_checks_a_dicts_image_key_as_an_image():
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (36, 36, 3), np.uint8),
                             "vec": gym.spaces.Box(-1, 1, (2,), np.float32)})
    policy = Policy(Agent(space, gym.spaces.Discrete(2)), None, {"env_id": "x"}, space, gym.spaces.Discrete(2), "cpu")
    with pytest.raises(ValueError, match=r"^Policy\.act: obs\['image'\] of shape \(5, 3, 36, 36\) does not hold "
                                         r"\(B, \*\(36, 36, 3\)\) observations of x: its images are \(36, 36, 3\)"):
        policy.act({"image": np.zeros((5, 3, 36, 36), np.uint8), "vec": np.zeros((5, 2), np.float32)})
    with pytest.raises(ValueError, match=r"; pass torch\.uint8 pixels 0\.\.255 as \(obs\['image'\] \* 255\)\.to\(torch\.uint8\)$"):
        policy.act({"image": torch.full((36, 36, 3), 0.5), "vec": torch.zeros(2)})


def test_policy_act_refuses_integer_pixels_the_uint8_cast_would_wrap():
    policy = _policy("PixelQuadrant-v0")
    in_range = np.full((36, 36, 3), 255, np.int16)
    assert policy.act(in_range) == policy.act(in_range.astype(np.uint8))
    with pytest.raises(ValueError) as e:
        policy.act(np.full((36, 36, 3), 300, np.int16))
    assert str(e.value) == ("Policy.act: obs holds int16 pixels from 300 to 300 where PixelQuadrant-v0's observations are "
                            "uint8 images (36, 36, 3); the cast to uint8 would wrap them (300 would be 44): pass pixels 0..255")
    below = torch.full((2, 36, 36, 3), -1)
    below[0] = 0
    with pytest.raises(ValueError, match=r"^Policy\.act: obs holds int64 pixels from -1 to 0 .*\(-1 would be 255\)"):
        policy.act(below)


def test_policy_act_tells_a_tensor_caller_the_torch_cast():
    policy = _policy("PixelQuadrant-v0")
    with pytest.raises(ValueError) as e:
        policy.act(torch.full((36, 36, 3), 0.5))
    assert str(e.value).endswith("; pass torch.uint8 pixels 0..255 as (obs * 255).to(torch.uint8)")
    with pytest.raises(ValueError) as e:
        policy.act(torch.full((36, 36, 3), 200.0))
    assert str(e.value).endswith("; pass torch.uint8 pixels 0..255 as obs.to(torch.uint8)")
    with pytest.raises(ValueError) as e:  # numpy callers keep numpy's words
        policy.act(np.full((36, 36, 3), 0.5, np.float32))
    assert str(e.value).endswith("; pass np.uint8 pixels 0..255 as (obs * 255).astype(np.uint8)")


# ------------------------------------------------------------------------------- population memory
def test_a_population_of_images_is_costed_as_its_rollout_holds_them(monkeypatch, capsys):
    """uint8 pixels at a byte and the CNN, as a single run of the same rows is costed (~1.0 GB here);
    costed as float32 pixels through an MLP it was ~3.9 GB and refused."""
    from proxima import sizing

    argv = ["train", "PixelQuadrant-v0", "--seeds", "1,2", "--num-envs", "128", "--num-steps", "512",
            "--num-minibatches", "64", "--dry-run"]
    monkeypatch.setattr(sizing, "free_memory", lambda device: 2 * 1024**3)
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    monkeypatch.setattr(sizing, "free_memory", lambda device: 512 * 1024**2)  # still refused where it cannot fit
    code, out, err = run_main(argv, capsys)
    error_line(code, err, "--seeds/--sweep: 2 members x 128 envs x 512 steps needs ~", "on cpu, 512.0 MiB free")


# ------------------------------------------------------------------------------- --video frames
def _first_gif_pixel(path) -> int:
    from PIL import Image

    return int(np.asarray(Image.open(path).convert("RGB"))[0, 0, 0])


@pytest.mark.parametrize("env, pixel", [("FloatRender", 204), ("GrayRender", 200)])
def test_float_and_grayscale_frames_make_a_video_of_their_pixels(env, pixel, fixtures_on_path, tmp_path):
    """Floats in [0, 1] are scaled by 255 (a cast made them an all-black video); (H, W, 1) is
    grayscale as (H, W) is (it was refused after the episodes had run)."""
    pytest.importorskip("PIL")
    from proxima.evaluate import evaluate

    result = evaluate(_policy(f"pixel_edge_envs:{env}", "gymnasium"), episodes=2, video=str(tmp_path / "v.gif"))
    assert result["video"] == str(tmp_path / "v.gif")
    assert abs(_first_gif_pixel(result["video"]) - pixel) <= 2


def test_a_frame_no_video_holds_is_refused_before_the_episodes(fixtures_on_path, tmp_path, monkeypatch):
    import proxima.evaluate as ev
    from proxima.video import VideoError

    monkeypatch.setattr(ev, "first_episodes", lambda *a, **k: pytest.fail("evaluated before checking the first frame"))
    video = tmp_path / "v.mp4"
    with pytest.raises(VideoError) as e:
        ev.evaluate(_policy("pixel_edge_envs:TwoChannelRender", "gymnasium"), episodes=2, video=str(video))
    assert str(e.value) == (f"--video {video}: env 'pixel_edge_envs:TwoChannelRender' renders frames of shape (40, 40, 2); "
                            "a video takes (H, W, 3), (H, W, 4) or grayscale (H, W), (H, W, 1); evaluate without --video")
    assert not video.exists()


def test_a_video_that_fails_after_the_episodes_keeps_their_result(fixtures_on_path, tmp_path):
    from proxima.evaluate import evaluate, format_result
    from proxima.video import VideoError

    video = tmp_path / "v.gif"
    with pytest.raises(VideoError) as e:
        evaluate(_policy("pixel_edge_envs:GrowingRender", "gymnasium"), episodes=2, video=str(video))
    result = e.value.result
    assert result["returns"] == [3.0, 3.0]
    assert str(e.value) == (f"--video {video}: frame 1 has shape (41, 40, 3), frame 0 has (40, 40, 3); all frames must match; "
                            f"the evaluation itself ran: {format_result(result)}")
    assert not video.exists()


def test_eval_prints_the_result_in_its_error_line_when_the_video_fails(fixtures_on_path, small_config, tmp_path, capsys):
    from proxima.trainer import train

    env_id = "pixel_edge_envs:GrowingRender"
    run_dir, _ = train(small_config(env_id=env_id, backend="gymnasium", total_timesteps=128), run_dir=tmp_path / "run",
                       quiet=True, evaluate_at_end=False)
    video = tmp_path / "v.gif"
    code, out, err = run_main(["eval", str(run_dir), "--env", env_id, "--episodes", "2", "--video", str(video)], capsys)
    error_line(code, err, f"--video {video}: frame 1 has shape (41, 40, 3)",
               f"; the evaluation itself ran: {env_id}: 3.00 +- 0.00 over 2 episodes (deterministic)")
    assert out == "" and not video.exists()


# ------------------------------------------------------------------------------- Atari game scores
def _fake_atari(monkeypatch, training: bool, **game):
    """AleAtari (the Gymnasium backend, its wrappers and statistics) on pixel_edge_envs.FakeAle."""
    from pixel_edge_envs import FakeAle

    def env_fn(name, render_mode, training):
        return lambda: gym.wrappers.FrameStackObservation(atari.game_wrappers(FakeAle(**game), training), atari.STACK)

    monkeypatch.setattr(atari, "ale_env_fn", env_fn)
    return atari.AleAtari("Fake-v5", "Fake", 1, "cpu", seed=0, training=training)


def _first_game(env) -> tuple:
    """(return, length, vector step) of the first game the env reports, stepping with NOOP."""
    env.reset(seed=0)
    for step in range(1, 100):
        _, _, _, _, info = env.step(torch.zeros(1, dtype=torch.int64))
        if int(info["episode_length"][0]) > 0:
            return float(info["episode_return"][0]), int(info["episode_length"][0]), step
    raise AssertionError("no game ended")


@pytest.mark.parametrize("training", [True, False])
def test_an_atari_games_return_is_its_full_score_in_training_and_evaluation(training, fixtures_on_path, monkeypatch):
    """3 lives of 5 env steps at 5 points each: 75, whoever pressed. While training EpisodicLife's
    no-op after each lost life scores too (its 2 x 5 points were dropped: 65); like the FIRE
    presses, it is no agent step: 7 of the 15 while training, 11 in evaluation (one FIRE per life)."""
    env = _fake_atari(monkeypatch, training)
    try:
        assert _first_game(env)[:2] == ((75.0, 7) if training else (75.0, 11))
    finally:
        env.close()


@pytest.mark.parametrize("training", [True, False])
def test_a_game_cut_in_the_no_op_after_a_lost_life_is_reported_once(training, fixtures_on_path, monkeypatch):
    """Cut at env step 11: while training that is EpisodicLife's no-op after the second lost life,
    inside the reset; the game is reported on the row of the step that lost the life (it was lost)."""
    env = _fake_atari(monkeypatch, training, max_frames=11)
    try:
        assert _first_game(env) == ((55.0, 5, 5) if training else (55.0, 7, 7))
    finally:
        env.close()


# ------------------------------------------------------------------------------- Atari ids
@pytest.fixture
def no_atari_packages(monkeypatch):
    """Neither ale-py nor EnvPool installed, whatever this machine has and whatever ran before in
    this process: the ids ale-py registered in Gymnasium's registry (on its import, by an ALE test)
    are taken out too, for the test's time."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name in ("ale_py", "envpool") else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    for env_id, spec in list(gym.registry.items()):
        if from_ale_py(spec):
            monkeypatch.delitem(gym.registry, env_id)


@pytest.fixture
def ale_ids_registered(monkeypatch):
    """ale-py's five ids of Pong in Gymnasium's registry, as importing ale-py registers them (the
    env itself is never built)."""
    for env_id in ("Pong-v0", "Pong-v4", "PongNoFrameskip-v0", "PongNoFrameskip-v4", "ALE/Pong-v5"):
        monkeypatch.setitem(gym.registry, env_id, gym.envs.registration.EnvSpec(env_id, entry_point="ale_py.env:AtariEnv"))


def test_the_no_atari_packages_fixture_hides_ale_pys_registered_ids(ale_ids_registered, no_atari_packages):
    """An ALE test run before in the same process left ale-py's ids in the registry: the hint tests
    below failed on 'did you mean Tennis-v4, Tennis-v0, ALE/Tennis-v5'."""
    assert not any(from_ale_py(spec) for spec in gym.registry.values())
    assert "Pong-v4" not in gym.registry and "ALE/Pong-v5" not in gym.registry


def test_an_atari_id_outside_the_known_games_gets_the_install_hint(no_atari_packages):
    with pytest.raises(EnvError) as e:
        make_env("Tennis-v5", 1)
    assert str(e.value) == ("unknown env id 'Tennis-v5'; if this is an Atari game, it needs ale-py and opencv (or EnvPool), "
                            f"which are not installed: {atari.INSTALL}")


def test_a_typo_of_another_v5_id_still_names_the_id(no_atari_packages):
    with pytest.raises(EnvError, match=r"^unknown env id 'Halfcheetah-v5'; did you mean HalfCheetah-v5.*\? if this is an Atari"):
        make_env("Halfcheetah-v5", 1)
    with pytest.raises(EnvError, match=r"^unknown env id 'Pongg-v5'; did you mean Pong-v5\? if this is an Atari game"):
        make_env("Pongg-v5", 1)
    assert atari.game_name("HalfCheetah-v5") is None  # registered by Gymnasium: not a game
    with pytest.raises(EnvError) as e:  # other versions: the plain line
        make_env("Cartpole-v1", 1)
    assert "Atari" not in str(e.value) and "did you mean CartPole-v1" in str(e.value)


def test_typos_are_offered_only_the_atari_ids_proxima_trains(no_atari_packages, ale_ids_registered):
    """ale-py's v0/v4 ids (Pong-v4, Pong-v0) are refused, so no "did you mean" names them (it was
    'Pong-v5, Pong-v4, Pong-v0'); its ALE/Pong-v5 is offered, with Pong-v5."""
    with pytest.raises(EnvError, match=r"^unknown env id 'Pongg-v5'; did you mean Pong-v5\? if this is an Atari game"):
        make_env("Pongg-v5", 1)
    with pytest.raises(EnvError) as e:  # the adapter's line: another version, not an Atari v5 id
        make_env("Pongg-v4", 1)
    # (then the MODULE:Pongg-v4 form for an id the user's own module registers: test_native_review45)
    assert str(e.value).startswith("unknown env id 'Pongg-v4'; did you mean Pong-v5, ALE/Pong-v5? ")


OLDER_LINE = ("'{id}': Atari games are trained as {game}-v5 (or ALE/{game}-v5): Proxima applies CleanRL's Atari wrappers "
              "itself (no frame skip in the id, 4 frames per step with a max over the last two, no sticky actions, up to "
              "30 no-ops at reset, 84x84 grayscale, 4 frames stacked)")


@pytest.mark.parametrize("registered", [False, True])
@pytest.mark.parametrize("env_id, game", [("PongNoFrameskip-v4", "Pong"), ("Pong-v4", "Pong"), ("Pong-v0", "Pong"),
                                          ("BreakoutNoFrameskip-v0", "Breakout"), ("ALE/Pong-v4", None),
                                          ("SpaceInvadersDeterministic-v4", "SpaceInvaders")])
def test_an_older_atari_id_of_a_game_says_to_train_its_v5_id(env_id, game, registered, request, no_atari_packages):
    """CleanRL's PongNoFrameskip-v4 was 'unknown' (and Pong-v4 'did you mean Ant-v4?'), or, with
    ale-py's ids registered, built raw by the adapter; Proxima trains Pong-v5 with its own wrappers."""
    if registered:
        request.getfixturevalue("ale_ids_registered")
    with pytest.raises(EnvError) as e:
        make_env(env_id, 1)
    if game is None:  # no id ale-py registers: the adapter's line
        assert str(e.value).startswith(f"unknown env id '{env_id}'")
    else:
        assert str(e.value) == OLDER_LINE.format(id=env_id, game=game)


def test_older_ids_of_other_envs_are_not_taken_for_atari_games(no_atari_packages):
    assert all(atari.game_name(i) is None for i in ("Ant-v4", "CartPole-v0", "Taxi-v4"))  # Gymnasium's own
    assert atari.game_name("Tennis-v4") is None  # no package to say it is a game: the adapter's unknown id
    assert "Atari" not in str(pytest.raises(EnvError, make_env, "Antt-v4", 1).value)


def test_the_cli_exits_2_with_the_older_atari_id_line(no_atari_packages, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = OLDER_LINE.format(id="PongNoFrameskip-v4", game="Pong")
    for argv in (["check-env", "PongNoFrameskip-v4"], ["train", "PongNoFrameskip-v4", "--total-timesteps", "512"]):
        code, _, err = run_main(argv, capsys)
        assert error_line(code, err, line).endswith(f"error: {line}")
    assert not list(tmp_path.iterdir())  # no run directory


def test_a_float_video_of_0_to_255_pixels_is_not_scaled_for_a_dark_first_frame():
    from proxima.video import _check_frames

    frames = _check_frames([np.zeros((4, 4, 3), np.float32), np.full((4, 4, 3), 100.0, np.float32)])
    assert int(frames[1].max()) == 100  # read as 0..255, not scaled by 255 into white
    frames = _check_frames([np.zeros((4, 4, 3), np.float32), np.full((4, 4, 3), 0.5, np.float32)])
    assert int(frames[1].max()) == 127  # all in [0, 1]: scaled


# ------------------------------------------------------------------------------- pixel ranges, per-key encoders
def test_a_0_1_board_trains_on_0_and_1_and_its_checkpoint_from_before_fails_with_one_line(fixtures_on_path, small_config,
                                                                                          tmp_path, capsys):
    """A uint8 Box(0, 1) board reaches the CNN as 0 and 1, not 0 and 1/255, and its checkpoints
    record the range: one written when every image was divided by 255 (no ``pixel_range``) does
    not load silently into a network that reads its inputs 255 times larger."""
    from proxima import checkpoint as ckpt
    from proxima.trainer import train

    env_id = "pixel_edge_envs:BinaryBoard"
    run_dir, agent = train(small_config(env_id=env_id, backend="gymnasium", num_envs=2, num_steps=4, total_timesteps=8,
                                        num_minibatches=1, update_epochs=1, checkpoint_every=1),
                           run_dir=tmp_path / "run", quiet=True, evaluate_at_end=False)
    assert agent.encoder_kind == "cnn"
    board = torch.ones(1, 40, 40, 2, dtype=torch.uint8)
    assert float(agent.encoder.pixels(board).max()) == 1.0
    policy = ckpt.load_policy(run_dir, env_id=env_id)
    assert torch.equal(policy.agent.encoder.pixels(board), agent.encoder.pixels(board))
    path = ckpt.list_checkpoints(run_dir)[-1]
    state = torch.load(path, weights_only=True)
    assert state["agent"].pop("encoder.pixels.pixel_range").tolist() == [0.0, 1.0]
    torch.save(state, path)  # as written before the range was read
    code, _, err = run_main(["eval", str(run_dir), "--env", env_id, "--episodes", "1"], capsys)
    error_line(code, err, "written before Proxima scaled a uint8 image by its declared range", "retrain it with this version")


def test_a_dict_of_a_camera_and_a_minimap_trains_the_cnn_on_the_camera_and_loads(fixtures_on_path, small_config, tmp_path):
    from proxima.checkpoint import load_policy
    from proxima.trainer import train

    env_id = "pixel_edge_envs:CamAndMinimap"
    run_dir, agent = train(small_config(env_id=env_id, backend="gymnasium", num_envs=2, num_steps=4, total_timesteps=8,
                                        num_minibatches=1, update_epochs=1),
                           run_dir=tmp_path / "run", quiet=True, evaluate_at_end=False)
    kinds = {k: type(m).__name__ for k, m in agent.encoder.encoders.items()}
    assert agent.encoder_kind == "cnn" and kinds == {"camera": "NatureCNN", "minimap": "FlatInput", "vec": "FlatInput"}
    policy = load_policy(run_dir, env_id=env_id)
    assert {k: type(m).__name__ for k, m in policy.agent.encoder.encoders.items()} == kinds
    obs = {"camera": np.zeros((3, 40, 40, 3), np.uint8), "minimap": np.zeros((3, 16, 16, 3), np.uint8),
           "vec": np.zeros((3, 2), np.float32)}
    assert policy.act(obs).shape == (3,)


def test_check_env_and_encoder_cnn_scale_float_pixels_of_unknown_range_first(fixtures_on_path, capsys):
    env_id = "pixel_edge_envs:UnboundedFloatPixels"
    both = ("return np.uint8 pixels 0..255 as (obs * 255).astype(np.uint8) if obs is in [0, 1], "
            "or obs.astype(np.uint8) if it is 0..255")
    code, out, err = run_main(["check-env", env_id], capsys)
    assert code == 0, err
    notes = [line for line in out.splitlines() if line.startswith("NOTE observation_space")]
    assert len(notes) == 1 and notes[0].endswith("declare Box(0, 255, (40, 40, 3), np.uint8) and " + both), out
    code, _, err = run_main(["train", env_id, "--encoder", "cnn", "--dry-run"], capsys)
    error_line(code, err, "declare Box(0, 255, (40, 40, 3), np.uint8) and " + both + "; or use --encoder mlp")
