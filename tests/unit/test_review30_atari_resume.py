"""Day review 30: the recorded-backend rule of a resume also holds for a population, and a restartable
job that types --backend auto resumes every time (config.yaml records the backend auto chose)."""

from __future__ import annotations

from cli_helpers import error_line, run_main
from proxima.envs import atari
from tests.unit.test_review30_atari import _train, envpool  # noqa: F401 - the stand-in fixture


def test_a_population_trained_on_envpool_is_not_resumed_on_another_backend(envpool, tmp_path, monkeypatch, capsys):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(_train(tmp_path, "--seeds", "1-2", "--total-timesteps", "24", "--eval-episodes", "0"), capsys)
    assert code == 0, err
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    monkeypatch.setattr(atari, "has_ale", lambda: True)
    code, _, err = run_main(["resume", str(tmp_path / "D"), "--total-timesteps", "48"], capsys)
    error_line(code, err, "the run trained 'Pong-v5' on EnvPool (--backend auto), which is not installed here")
    assert "Traceback" not in err


def test_a_typed_backend_auto_is_no_change_of_the_backend_config_yaml_records():
    """A resume that kept the run's backend writes it into config.yaml (gymnasium where auto would now pick
    EnvPool); the job's next run of its own command types --backend auto again: not a change."""
    from proxima import run_setup
    from proxima.config import PPOConfig

    recorded = PPOConfig(env_id="Pong-v5", backend="gymnasium", num_envs=2, num_steps=24, total_timesteps=48)
    state = {"env_backend": "gymnasium", "path": "RUN/checkpoints/step_48.pt", "global_step": 48, "iteration": 2}
    cfg = run_setup.apply_resume_overrides(recorded, {"backend": "auto", "total_timesteps": 96}, state, quiet=True)
    assert (cfg.backend, cfg.total_timesteps) == ("gymnasium", 96)
