"""Review 30's Atari findings, through the EnvPool stand-in (tests/fixtures/envpool_standin): seeds
past EnvPool's int32 range, a resume that must keep the run's backend, TicTacToe3D's two spellings,
what check-env checks, and the words of the preset. The same behaviours against the real EnvPool
and ale-py: tests/integration/test_pixels_atari.py."""

from __future__ import annotations

import csv

import gymnasium as gym
import pytest

from cli_helpers import error_line, run_main, snapshot
from proxima import run_setup
from proxima.config import MAX_SEED, PPOConfig
from proxima.envs import EnvError, atari, make_env
from tests.unit.test_envpool_standin import envpool  # noqa: F401 - the stand-in as ``envpool``, one test at a time

EVAL_OFFSET = 1_000_000


def _train(tmp_path, *extra) -> list:
    return ["train", "Pong-v5", "--num-envs", "2", "--num-steps", "12", "--num-minibatches", "2", "--update-epochs", "1",
            "--checkpoint-every", "1", "--run-dir", str(tmp_path / "D"), "--no-progress", *extra]


# ------------------------------------------------------------------ 2: seeds past EnvPool's int32 range
def test_the_standin_refuses_seeds_outside_int32_as_envpool_does(envpool):
    with pytest.raises(AssertionError, match="Seed should be in range of int32, got 2147483648"):
        envpool.make("Pong-v5", num_envs=1, seed=2**31)


@pytest.mark.parametrize("seed", [MAX_SEED, MAX_SEED + EVAL_OFFSET, MAX_SEED + 10_000 + 7])
def test_every_seed_a_run_hands_envpool_is_folded_into_its_range(envpool, seed):
    folded = seed % 2**31
    assert atari.envpool_seed(seed) == folded and atari.envpool_seed(5) == 5
    env = make_env("Pong-v5", 2, backend="envpool", seed=seed)  # the stand-in shows env i's seed in frame[0, 4]
    try:
        assert [int(env.reset()[i, 0, 0, 4]) for i in range(2)] == [(folded + i) % 256 for i in range(2)]
        assert [int(env.reset(seed=seed + 3)[i, 0, 0, 4]) for i in range(2)] == [((seed + 3) % 2**31 + i) % 256
                                                                               for i in range(2)]
    finally:
        env.close()


def test_the_largest_seed_trains_evaluates_and_resumes_on_envpool(envpool, tmp_path, monkeypatch, capsys):
    """--seed 2147483647 crashed the final evaluation (seed + 1,000,000) after all the training, and a
    resume (seed + iteration) outright: EnvPool asserts int32 seeds."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(_train(tmp_path, "--backend", "envpool", "--seed", str(MAX_SEED), "--total-timesteps", "24",
                                   "--eval-episodes", "1"), capsys)
    assert code == 0, err
    assert (tmp_path / "D" / "eval.json").is_file()
    code, _, err = run_main(["resume", str(tmp_path / "D"), "--total-timesteps", "48", "--eval-episodes", "0",
                             "--no-progress"], capsys)
    assert code == 0, err
    rows = list(csv.DictReader(open(tmp_path / "D" / "metrics.csv")))
    assert [int(float(r["global_step"])) for r in rows] == [24, 48]


# ------------------------------------------------------------------ 3: a resume keeps the run's backend
def test_a_run_trained_on_envpool_is_not_resumed_on_another_backend(envpool, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(_train(tmp_path, "--seed", "1", "--total-timesteps", "24", "--eval-episodes", "0"), capsys)
    assert code == 0, err
    assert "backend: auto" in (tmp_path / "D" / "config.yaml").read_text()
    before = snapshot(tmp_path / "D")
    # resumed where EnvPool is missing and Gymnasium's ALE would be there: auto must not switch to it
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    monkeypatch.setattr(atari, "has_ale", lambda: True)
    for argv in (["resume", str(tmp_path / "D"), "--total-timesteps", "48"],
                 ["train", "--resume", str(tmp_path / "D"), "--total-timesteps", "48", "--dry-run"]):
        code, _, err = run_main(argv, capsys)
        line = error_line(code, err, ".pt: the run trained 'Pong-v5' on EnvPool (--backend auto), which is not "
                                     "installed here; to resume it, install it from the repository root with: "
                                     ".venv/bin/pip install -c requirements.lock -e '.[atari]'",
                          "start a new run with --backend gymnasium")
        assert "Traceback" not in err and line.count("error:") == 1
        assert snapshot(tmp_path / "D") == before  # nothing set aside, logged or rewritten


def _state(backend) -> dict:
    return {"env_backend": backend, "path": "RUN/checkpoints/step_8.pt"}


def test_auto_resumes_on_the_recorded_backend_where_auto_would_pick_the_other(monkeypatch, capsys):
    monkeypatch.setattr(atari, "has_envpool", lambda: True)
    monkeypatch.setattr(atari, "has_ale", lambda: True)
    cfg = PPOConfig(env_id="Breakout-v5", backend="auto")
    assert run_setup.resumed_backend(cfg, _state("envpool")) is None  # auto picks it: nothing to change
    assert run_setup.resumed_backend(cfg, _state("gymnasium")) == "gymnasium"
    run_setup.use_backend(cfg, "gymnasium")
    assert cfg.backend == "gymnasium"  # config.yaml and the checkpoints name it from now on
    assert capsys.readouterr().err == ("proxima: note: --backend auto resumes on gymnasium, the backend the run trained "
                                       "on (auto would pick EnvPool here)\n")
    # an explicit --backend, a native run or a checkpoint without the record: as before
    assert run_setup.resumed_backend(PPOConfig(env_id="Breakout-v5", backend="envpool"), _state("gymnasium")) is None
    assert run_setup.resumed_backend(PPOConfig(env_id="CartPole-v1"), _state("native")) is None
    assert run_setup.resumed_backend(cfg, {"path": "x"}) is None
    monkeypatch.setattr(atari, "has_ale", lambda: False)
    with pytest.raises(EnvError, match=r"^RUN/checkpoints/step_8\.pt: the run trained 'Breakout-v5' on Gymnasium's ALE "
                                       r"\(--backend auto\), which needs ale-py and opencv, not installed here; to resume "
                                       r"it, install it .*start a new run with --backend envpool\)$"):
        run_setup.resumed_backend(PPOConfig(env_id="Breakout-v5"), _state("gymnasium"))


# ------------------------------------------------------------------ 4: TicTacToe3D / TicTacToe3d
@pytest.mark.parametrize("env_id", ["ALE/TicTacToe3D-v5", "TicTacToe3D-v5", "TicTacToe3d-v5"])
def test_either_spelling_of_tictactoe3d_reaches_envpool(envpool, env_id):
    assert atari.game_name(env_id) is not None
    env = make_env(env_id, 1, backend="auto", seed=0)  # auto: EnvPool (the stand-in) is installed
    try:
        assert env.backend == "envpool" and env.single_action_space.n == 10
    finally:
        env.close()


def test_either_spelling_of_tictactoe3d_reaches_ale_py(monkeypatch):
    """ale-py's registry spells it TicTacToe3D; the ALE env is built from that spelling."""
    monkeypatch.setattr(atari, "_register_ale", lambda: None)
    monkeypatch.setitem(gym.registry, "ALE/TicTacToe3D-v5", gym.envs.registration.EnvSpec("ALE/TicTacToe3D-v5"))
    assert atari.ale_game("TicTacToe3d") == atari.ale_game("TicTacToe3D") == "TicTacToe3D"
    assert atari.ale_game("NoSuchGame") == "NoSuchGame"


# ------------------------------------------------------------------ 5: what check-env checks
def test_check_env_says_it_checks_gymnasiums_ale_and_not_envpool(envpool, monkeypatch, capsys):
    monkeypatch.setattr(atari, "has_ale", lambda: False)
    code, _, err = run_main(["check-env", "Breakout-v5"], capsys)
    error_line(code, err, "check-env 'Breakout-v5' checks Gymnasium's ALE build of the game (--backend gymnasium's) "
                          "(EnvPool, installed, is not checked) and needs ale-py and opencv; install it")
    code, out, _ = run_main(["check-env", "--help"], capsys)
    assert code == 0
    out = " ".join(out.split())
    assert ("An Atari id (Pong-v5) is checked as Gymnasium's ALE with Proxima's wrappers, the env --backend gymnasium "
            "trains on (it needs ale-py); EnvPool's envs, which --backend auto trains on when EnvPool is installed, are "
            "not checked.") in out


# ------------------------------------------------------------------ 6: the preset's words
@pytest.mark.parametrize("env_id", ["Pong-v5", "Breakout-v5", "SpaceInvaders-v5"])
def test_the_atari_presets_say_they_bootstrap_truncations_unlike_cleanrl(env_id):
    from proxima.presets import presets_for, resolve

    assert resolve(env_id).bootstrap_truncation  # what the words below are about
    assert "unlike CleanRL, time-limit truncations are bootstrapped" in presets_for(env_id)["default"]["description"]
