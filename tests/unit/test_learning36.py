"""benchmarks/learning.py's record keeping, case by case: the seeds a run covers without --seeds,
what merge keeps when a new run failed or is of another config, the up-front refusal of --extra
(only today's preset's successful runs, every env checked) and which --out paths are the committed
results files. Stubs stand in for ``proxima train``: nothing trains here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from proxima.presets import resolve

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import learning  # noqa: E402  (benchmarks/learning.py)


def _run(env_id: str = "CartPole-v1", seed: int = 1, ok: bool = True, steps=None) -> dict:
    """A record as run_one makes it: today's preset, or another config with ``steps`` total_timesteps."""
    config = dict(resolve(env_id).to_dict(), seed=seed)
    if steps is not None:
        config["total_timesteps"] = steps
    return {"env_id": env_id, "seed": seed, "command": f"proxima train {env_id} --seed {seed}",
            "run_dir": f"runs/{env_id}__{seed}", "wall_s": 1.0, "load_start": 1.0, "load_end": 1.0,
            "finished": "2026-12-06T10:00:00", "returncode": 0 if ok else 1, "machine": "test box",
            "eval_mean": 480.0 if ok else None, "eval_std": 1.0 if ok else None, "episodes": 10,
            "steps": config["total_timesteps"], "train_s": 0.9, "final_episodic_return": 20.0,
            "train_return_last100": 20.0, "train_episodes_last100": 100, "config": config,
            **({} if ok else {"error": "exit 1"})}


def test_seeds_default_to_one_to_n_of_tasks_and_seeds_are_taken_as_given():
    n = learning.TASKS["CartPole-v1"][1]
    assert n > 1 and learning.seeds_of("CartPole-v1", None) == list(range(1, n + 1))
    assert learning.seeds_of("CartPole-v1", "3,5") == [3, 5]


def test_a_failed_run_never_replaces_a_recorded_success_even_with_replace():
    ok = _run()
    for failed in (_run(ok=False), _run(ok=False, steps=2048)):
        assert learning.merge([ok], failed, replace=True) == [ok]
        assert learning.merge([ok], failed) == [ok]


def test_a_run_of_another_config_replaces_a_recorded_run_of_another_config():
    """Only a run of today's preset is protected: an older smoke test gives way to a newer one."""
    old, new = _run(steps=2048), _run(steps=4096)
    assert learning.stale(old) and learning.stale(new)
    assert learning.merge([old], new) == [new]
    assert learning.merge([_run()], new) == [_run()]  # today's preset is kept without --replace


def _stub_run(env_id, seed, runs_dir, threads, extra, log):
    return _run(env_id, seed, steps=2048)


def _main(tmp_path, out, envs, *flags) -> int:
    return learning.main(["--envs", envs, "--seeds", "1", *flags, "--runs-dir", str(tmp_path / "runs"), "--out", str(out)])


def test_extra_is_refused_only_over_successful_runs_of_today_s_preset(tmp_path, monkeypatch, capsys):
    """An out file holding only a 2,048-step run of seed 1 (another config) or a failed run: a new
    smoke test may go there (exit 0)."""
    monkeypatch.setattr(learning, "run_one", _stub_run)
    for held in (_run(steps=2048), _run(ok=False)):
        out = tmp_path / f"out{held['eval_mean']}.md"
        learning.write_markdown(out, [held], [])
        assert _main(tmp_path, out, "CartPole-v1", "--extra", "--total-timesteps 2048") == 0, capsys.readouterr().err
        assert [r["config"]["total_timesteps"] for r in learning.load_state(out)[0]] == [2048]


def test_extra_is_refused_for_a_recorded_run_of_any_env_not_only_the_first(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(learning, "run_one", _stub_run)
    out = tmp_path / "out.md"
    learning.write_markdown(out, [_run("CartPole-v1", 1)], [])
    before = out.read_bytes()
    assert _main(tmp_path, out, "Pendulum-v1,CartPole-v1", "--extra", "--total-timesteps 2048") == 2
    err = capsys.readouterr().err
    assert f"{out} holds runs of today's preset for CartPole-v1 seed 1 that these runs would replace" in err
    assert out.read_bytes() == before and not (tmp_path / "runs").exists()


def test_a_relative_or_linked_path_to_the_committed_results_is_recorded(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert learning.recorded_file(Path("benchmarks/results/learning.md"))
    link = tmp_path / "link.md"
    os.symlink(ROOT / "benchmarks" / "results" / "learning.md", link)
    assert learning.recorded_file(link)
    assert not learning.recorded_file(tmp_path / "learning.md")
