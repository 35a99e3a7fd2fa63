"""Review 36's Atari findings: an unknown ALE/<Game>-v5 is unresolvable (check-env exits 2) and told
before any build, typos of games get near misses from the installed game lists, a lower-case game
resolves, an EnvPool run's eval/resume name what the run recorded, and --env-kwargs takes three ALE
settings on both backends. The installed extra is faked: EnvPool's game list monkeypatched, or the
EnvPool stand-in (tests/fixtures/envpool_standin); the main venv has neither EnvPool nor ale-py."""

from __future__ import annotations

import types

import gymnasium as gym
import pytest

from proxima import run_setup
from proxima.config import PPOConfig
from proxima.envs import EnvError, atari
from tests.cli_helpers import error_line, run_main
from tests.unit.test_envpool_standin import envpool  # noqa: F401 - the stand-in as ``envpool``, one test at a time

GAMES = {"pong": "Pong", "breakout": "Breakout", "spaceinvaders": "SpaceInvaders", "tennis": "Tennis"}


@pytest.fixture
def extra(monkeypatch):
    """EnvPool and ale-py as if installed, with GAMES as EnvPool's list; nothing is built."""
    monkeypatch.setattr(atari, "has_envpool", lambda: True)
    monkeypatch.setattr(atari, "has_ale", lambda: True)
    monkeypatch.setattr(atari, "_envpool_games", lambda: dict(GAMES))


def _tiny(tmp_path, env_id: str = "Pong-v5", *extra_args) -> list:
    return ["train", env_id, "--num-envs", "2", "--num-steps", "12", "--num-minibatches", "2", "--update-epochs", "1",
            "--total-timesteps", "24", "--eval-episodes", "0", "--run-dir", str(tmp_path / "D"), "--no-progress",
            *extra_args]


# ------------------------------------------------------------------ 1, 2: unknown games and typos
def test_check_env_of_an_unknown_ale_game_exits_2_with_the_near_miss(extra, capsys):
    """It built ALE/Pongg-v5 and reported NameNotFound as a violation (exit 1, 'the env is broken')."""
    code, out, err = run_main(["check-env", "ALE/Pongg-v5"], capsys)
    line = error_line(code, err, "unknown env id 'ALE/Pongg-v5'", "no Atari game 'Pongg'", "did you mean ALE/Pong-v5?")
    assert "FAIL" not in out and "violation" not in out, out
    assert line.startswith("proxima check-env: error:")


def test_train_of_an_unknown_ale_game_is_refused_before_envpool_builds_it(extra, capsys):
    code, _, err = run_main(["train", "ALE/Pongg-v5", "--dry-run"], capsys)
    error_line(code, err, "unknown env id 'ALE/Pongg-v5'", "did you mean ALE/Pong-v5?")


@pytest.mark.parametrize("env_id, near", [("SpaceInvader-v5", "SpaceInvaders-v5"), ("Tenis-v5", "Tennis-v5")])
def test_a_typo_of_a_game_gets_it_as_a_near_miss(extra, env_id, near, capsys):
    """Tennis is in no list but EnvPool's: the installed list is among the candidates, not KNOWN_GAMES alone."""
    code, _, err = run_main(["train", env_id, "--dry-run"], capsys)
    line = error_line(code, err, f"unknown env id '{env_id}'; did you mean ")
    assert near in line.partition("did you mean ")[2].split(", ")[0], line


def test_without_the_extra_an_ale_typo_says_which_game_it_is_close_to(monkeypatch, capsys):
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    monkeypatch.setattr(atari, "has_ale", lambda: False)
    code, _, err = run_main(["train", "ALE/Pongg-v5", "--dry-run"], capsys)
    error_line(code, err, "env 'ALE/Pongg-v5' needs ale-py and opencv", "unless it is a typo of ALE/Pong-v5",
               "pip install")


@pytest.mark.parametrize("installed", [False, True])
def test_a_lower_case_game_is_the_game(installed, monkeypatch, request):
    """docs/atari.md: game names match without regard to case (pong-v5 suggested Ant-v5)."""
    if installed:
        request.getfixturevalue("extra")
    else:
        monkeypatch.setattr(atari, "has_envpool", lambda: False)
        monkeypatch.setattr(atari, "_listed_game", lambda game: None)
    assert atari.game_name("pong-v5") == "Pong"
    assert atari.game_name("ALE/breakout-v5") == "Breakout"
    assert atari.game_name("foo-v5") is None  # a lower-case id no list has is no game, nor an install hint


def test_a_lower_case_game_trains_with_the_atari_preset(envpool, tmp_path, monkeypatch, capsys):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["train", "pong-v5", "--dry-run"], capsys)
    assert code == 0, err
    assert "clip_coef: 0.1\n" in out and "num_envs: 8\n" in out and "encoder: cnn\n" in out, out


# ------------------------------------------------------------------ 3: an EnvPool run where EnvPool is missing
def test_eval_of_an_envpool_run_without_envpool_names_the_checkpoint_and_gymnasium(monkeypatch):
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    policy = types.SimpleNamespace(config={"backend": "envpool"}, env_id="Breakout-v5", path="RUN/checkpoints/s.pt")
    with pytest.raises(EnvError) as e:
        run_setup.check_eval_backend(policy, None)
    line = str(e.value)
    assert line.startswith("RUN/checkpoints/s.pt: this run trained 'Breakout-v5' on EnvPool (its checkpoint records it)")
    assert "--backend gymnasium" in line and "pip install" in line and "--backend envpool needs" not in line
    run_setup.check_eval_backend(policy, "gymnasium")  # typed: make_env's line is about what the user typed
    monkeypatch.setattr(atari, "has_envpool", lambda: True)
    run_setup.check_eval_backend(policy, None)


def test_resume_of_a_backend_envpool_run_without_envpool_names_the_run(envpool, tmp_path, monkeypatch, capsys):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(_tiny(tmp_path, "Pong-v5", "--backend", "envpool"), capsys)
    assert code == 0, err
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    monkeypatch.setattr(atari, "has_ale", lambda: True)
    code, _, err = run_main(["resume", str(tmp_path / "D"), "--total-timesteps", "48"], capsys)
    line = error_line(code, err, "the run trained 'Pong-v5' on EnvPool (--backend envpool), which is not installed here",
                      "to resume it, install")
    assert "--backend envpool needs" not in line


# ------------------------------------------------------------------ 4: --env-kwargs of an Atari id
def test_env_kwargs_outside_the_ale_settings_are_refused_naming_them(capsys):
    code, _, err = run_main(["train", "Pong-v5", "--env-kwargs", '{"frameskip": 2}', "--dry-run"], capsys)
    error_line(code, err, "--env-kwargs: the Atari id 'Pong-v5' takes only repeat_action_probability",
               "full_action_space", "max_episode_steps", "not 'frameskip'")
    code, _, err = run_main(["train", "Pong-v5", "--env-kwargs", '{"repeat_action_probability": 1.5}', "--dry-run"], capsys)
    error_line(code, err, "repeat_action_probability for the Atari id 'Pong-v5' must be a number from 0 to 1, got 1.5")


def test_env_kwargs_reach_envpool_in_training_and_in_eval(envpool, tmp_path, monkeypatch, capsys):  # noqa: F811
    made = []
    real = envpool.make

    def make(*args, **kwargs):
        made.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(envpool, "make", make)
    monkeypatch.chdir(tmp_path)
    kwargs = '{"repeat_action_probability": 0.25, "max_episode_steps": 5}'
    code, _, err = run_main(_tiny(tmp_path, "Pong-v5", "--env-kwargs", kwargs), capsys)
    assert code == 0, err
    assert "repeat_action_probability: 0.25" in (tmp_path / "D" / "config.yaml").read_text()
    assert made and all((m["repeat_action_probability"], m["max_episode_steps"]) == (0.25, 5) for m in made), made
    made.clear()
    code, out, err = run_main(["eval", str(tmp_path / "D"), "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    assert made and all((m["repeat_action_probability"], m["max_episode_steps"]) == (0.25, 5) for m in made), made
    made.clear()  # another spelling of the game: its settings still apply (envs.same_game)
    code, out, err = run_main(["eval", str(tmp_path / "D"), "--env", "ALE/Pong-v5", "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    assert made and all((m["repeat_action_probability"], m["max_episode_steps"]) == (0.25, 5) for m in made), made


def test_env_kwargs_reach_gymnasiums_ale_with_the_limit_in_frames(monkeypatch):
    made = {}

    class Built(Exception):
        pass

    def fake_make(env_id, **kwargs):
        made.update(kwargs, env_id=env_id)
        raise Built

    monkeypatch.setattr(atari, "_register_ale", lambda: None)
    monkeypatch.setattr(atari, "_ale_games", lambda: {"pong": "Pong"})
    monkeypatch.setattr(gym, "make", fake_make)
    settings = atari.atari_settings("Pong-v5", {"repeat_action_probability": 0.25, "full_action_space": True,
                                                "max_episode_steps": 10})
    with pytest.raises(Built):
        atari.ale_env_fn("Pong", None, True, settings)()
    assert (made["env_id"], made["repeat_action_probability"], made["full_action_space"], made["max_episode_steps"]) == \
        ("ALE/Pong-v5", 0.25, True, 10 * atari.FRAME_SKIP)


# ------------------------------------------------------------------ 6: the backend auto picked
def test_the_backend_line_says_what_auto_picked(monkeypatch):
    monkeypatch.setattr(atari, "has_envpool", lambda: True)
    assert run_setup.backend_line(PPOConfig(env_id="Pong-v5")) == "env backend: envpool (auto: EnvPool is installed)"
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    assert run_setup.backend_line(PPOConfig(env_id="Pong-v5")) == "env backend: gymnasium (auto: EnvPool is not installed)"
    assert run_setup.backend_line(PPOConfig(env_id="Pong-v5", backend="gymnasium")) == "env backend: gymnasium"
    assert run_setup.backend_line(PPOConfig(env_id="CartPole-v1")) is None


def test_train_prints_the_backend_line_and_bench_both_measures_envpool_beside_gymnasium(envpool, tmp_path, monkeypatch, capsys):  # noqa: F811
    """train --dry-run names auto's pick (the stand-in makes EnvPool installed); bench's default 'both' means
    the backend train builds and Gymnasium's, which for an Atari game with EnvPool is envpool, not native."""
    from proxima.bench import backends_for

    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["train", "Pong-v5", "--dry-run"], capsys)
    assert code == 0, err
    assert "proxima: env backend: envpool (auto: EnvPool is installed)" in err
    assert backends_for("Pong-v5", "both") == ["envpool", "gymnasium"]
    assert backends_for("CartPole-v1", "both") == ["native", "gymnasium"]
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    assert backends_for("Pong-v5", "both") == ["gymnasium"]


def test_eval_under_another_spelling_of_the_game_keeps_its_recorded_settings(monkeypatch):
    """A run trained as Pong-v5 with sticky actions, evaluated with --env ALE/Pong-v5 (or pong-v5): the
    game's recorded --env-kwargs still apply (they were dropped: no sticky actions, no word); another
    env named is not given them."""
    from proxima.envs import same_game

    assert same_game("ALE/Pong-v5", "Pong-v5") and same_game("pong-v5", "Pong-v5")
    assert not same_game("Breakout-v5", "Pong-v5") and not same_game("CartPole-v1", "Pong-v5")
    assert not same_game("ALE/Pongg-v5", "Pong-v5")  # told by its own build, not matched here


def test_a_typo_of_another_id_does_not_import_the_atari_backends(monkeypatch):
    """Only a -v5 id asks EnvPool and ale-py for their game lists (seconds of imports, and a broken
    install's traceback); a broken list is skipped."""
    from proxima.envs import gym_adapter

    asked = []
    monkeypatch.setattr(atari, "has_envpool", lambda: True)
    monkeypatch.setattr(atari, "_envpool_games", lambda: asked.append(1) or (_ for _ in ()).throw(ImportError("broken")))
    assert "CartPole-v1" in gym_adapter.suggestable_ids("CartPol-v1") and asked == []
    assert "Pong-v5" in gym_adapter.suggestable_ids("Pongg-v5") and asked == [1]  # broken list: KNOWN_GAMES still
