"""A population's diverged member, resume flags and stops outside the loop (population.py,
population_run.py, population_eval.py): a member frozen by its env's NaN keeps finite normalizer
statistics, so ``proxima eval RUN`` evaluates it; a resume rewrites the members' config.yaml; a
signal in a resume's setup or end-of-run evaluation is the documented stop; ``resume --seed`` is
refused in one line."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from cli_helpers import error_line, run_main
from proxima import checkpoint as ckpt
from proxima.config import ConfigError, PPOConfig
from proxima.population import Population, member_configs
from proxima.population_run import resume_population
import warm_python

#: CartPole whose copies reset with seeds 3..4 (member 1's rows of a --seeds 1-2 population of 2 envs
#: each: the rows are seeded 1..4) return NaN observations from their 12th step on
NAN_POLE = textwrap.dedent("""
    import numpy as np
    from gymnasium.envs.classic_control import CartPoleEnv


    class NanPole(CartPoleEnv):
        tag = None

        def reset(self, *, seed=None, options=None):
            if seed is not None:
                self.tag = seed
            self.t = 0
            return super().reset(seed=seed, options=options)

        def step(self, action):
            obs, r, term, trunc, info = super().step(action)
            self.t += 1
            if self.tag is not None and 3 <= self.tag <= 4 and self.t > 11:
                obs = np.full_like(obs, np.nan)
            return obs, r, term, trunc, info
""")

TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
        "--no-progress"]


def _train(tmp_path: Path, capsys, *args: str, name: str = "R") -> Path:
    run = tmp_path / name
    code, _, err = run_main(["train", *args, *TINY, "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    return run


# --- a member frozen by its env's NaN keeps its last finite normalizer statistics ---------------------
def _cfg(**kw) -> PPOConfig:
    base = dict(env_id="CartPole-v1", num_envs=4, num_steps=32, total_timesteps=128 * 5, num_minibatches=4, update_epochs=2,
                progress=False, checkpoint_every=0, eval_episodes=0, threads=1, norm_obs=True, norm_reward=True)
    base.update(kw)
    return PPOConfig(**base)


def _run(inject: bool, iterations: int = 5):
    """A population of 3 whose member 1 gets NaN observations and rewards from its env's 40th step on
    (``inject``), as population_run's loop marks it: [(obs mean, obs var, reward var) after each iteration]."""
    pop = Population(member_configs(_cfg(), [1, 2, 3]))
    step, count = pop.env.step, [0]

    def bad_step(action):
        out = list(step(action))
        count[0] += 1
        if inject and count[0] >= 40:
            out[0] = out[0].clone()
            out[0][4:8] = float("nan")  # member 1's rows
            out[1] = out[1].clone()
            out[1][4:8] = float("nan")
        return tuple(out)

    pop.env.step = bad_step
    seen = []
    for _ in range(iterations):
        pop.train_iteration()
        for p, message in pop.env_failures():
            pop.mark_diverged(p, message)
        seen.append((pop.obs_norm.rms.mean.clone(), pop.obs_norm.rms.var.clone(), pop.reward_scaler.rms.var.clone()))
    return pop, seen


def test_a_diverged_members_normalizer_statistics_stay_its_last_finite_ones_and_the_others_are_untouched():
    clean, clean_seen = _run(False)
    bad, bad_seen = _run(True)
    assert bad.diverged.tolist() == [False, True, False]
    frozen_at = bad.diverged_at[1]["iteration"]
    for (mean, var, rvar), (cmean, cvar, crvar) in zip(bad_seen, clean_seen):
        for x in (mean, var, rvar):
            assert bool(torch.isfinite(x).all())
        for p in (0, 2):  # bit for bit the statistics of the population without the NaN
            assert torch.equal(mean[p], cmean[p]) and torch.equal(var[p], cvar[p]) and torch.equal(rvar[p], crvar[p])
    # from the iteration the NaN came in, member 1's statistics are those it had before it
    before = bad_seen[frozen_at - 2]
    for mean, var, rvar in bad_seen[frozen_at - 1:]:
        assert torch.equal(mean[1], before[0][1]) and torch.equal(var[1], before[1][1]) and torch.equal(rvar[1], before[2][1])
    assert bool(torch.isfinite(bad.member_obs_normalizer(1).rms.mean).all())
    clean.close()
    bad.close()


def test_eval_of_a_population_with_a_member_frozen_by_its_envs_nan_evaluates_every_member(tmp_path, capsys, monkeypatch):
    """--norm-obs and an env that returns NaN to member 1: its checkpoint holds finite statistics, so
    `proxima eval RUN` evaluates its last finite weights and reports the others (it stopped, exit 2,
    on the member's NaN statistics)."""
    (tmp_path / "nan_pole.py").write_text(NAN_POLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    run = _train(tmp_path, capsys, "nan_pole:NanPole", "--seeds", "1-2", "--norm-obs", "--total-timesteps", "128",
                 "--eval-episodes", "1")
    member = run / "m001-seed2"
    at = json.loads((member / "diverged.json").read_text())["iteration"]
    state = ckpt.load_checkpoint(ckpt.list_checkpoints(member)[-1])  # refused NaN statistics as a damaged file
    assert all(bool(torch.isfinite(v).all()) for v in state["obs_normalizer"].values())
    code, out, err = run_main(["eval", str(run), "--env", "nan_pole:NanPole", "--episodes", "1"], capsys)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0].startswith("m000-seed1: ")
    assert lines[1].startswith("m001-seed2: ")
    assert f"diverged at iteration {at}: its last finite weights, left out of the statistics" in lines[1]
    assert "(1 of 2 members, seeds only)" in lines[2] and f"left out: m001-seed2 (diverged at iteration {at})" in lines[2]


def test_eval_checks_every_members_checkpoint_before_it_evaluates_any(tmp_path, capsys):
    from proxima.population_eval import evaluate_population

    run = _train(tmp_path, capsys, "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", "--eval-episodes", "0")
    damaged = ckpt.list_checkpoints(run / "m001-seed2")[-1]
    damaged.write_bytes(damaged.read_bytes()[:100])  # truncated
    said = []
    evaluate_population(run, episodes=1, on_member=lambda row: said.append(row["dir"]),
                        on_left_out=lambda d, why: said.append(f"left out {d.name}: {why.split(':')[0]}"))
    # the damaged member (the last) is named before any member is evaluated, and then left out
    assert said == [f"left out m001-seed2: checkpoints/{damaged.name}", "m000-seed1"]


# --- a resume rewrites the members' config.yaml -----------------------------------------------------
def test_a_resume_rewrites_each_members_config_yaml_with_the_flags_it_changed(tmp_path, capsys):
    trained = _train(tmp_path, capsys, "CartPole-v1", "--seeds", "1-2", "--sweep", "lr=1e-3,3e-4", "--total-timesteps", "64",
                     "--eval-episodes", "1", name="trained")
    run = tmp_path / "moved"
    trained.rename(run)  # the run moved: each member's config records where it is now
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--keep-checkpoints", "7", "--checkpoint-every",
                             "3", "--eval-episodes", "2", "--quiet"], capsys)
    assert code == 0, err
    members = sorted(p for p in run.iterdir() if p.name.startswith("m0"))
    assert len(members) == 4
    for d in members:
        cfg = yaml.safe_load((d / "config.yaml").read_text())
        assert (cfg["total_timesteps"], cfg["keep_checkpoints"], cfg["checkpoint_every"], cfg["eval_episodes"]) == (128, 7, 3, 2)
        assert cfg["run_dir"] == str(d) and cfg["encoder"] == "mlp"
        assert cfg["lr"] == (1e-3 if "lr0.001" in d.name else 3e-4) and cfg["seed"] == int(d.name.split("-")[1][4:])
        assert not list(d.glob("config.yaml.*"))  # replaced atomically: no temp file left
    before = {d: (d / "config.yaml").stat().st_mtime_ns for d in members}
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)  # complete, nothing changed: the files stay
    assert code == 0, err
    assert {d: (d / "config.yaml").stat().st_mtime_ns for d in members} == before
    code, _, err = run_main(["report", str(members[0]), "--out", str(tmp_path / "r.md"), "--episodes", "0"], capsys)
    assert code == 0, err
    report = (tmp_path / "r.md").read_text()
    assert "| total_timesteps | 128 |" in report and "| keep_checkpoints | 7 |" in report and "| eval_episodes | 2 |" in report


def test_a_resume_cut_short_before_it_trained_then_resumed_plainly_puts_back_the_checkpoints_config(tmp_path, capsys,
                                                                                                      monkeypatch):
    """The stop line says `proxima resume RUN`; that plain resume finds the population complete at the
    checkpoint's target and puts the members' config.yaml back to it, as a single run's resume does."""
    from proxima import population_run
    from proxima.signals import TrainingInterrupted

    run = _train(tmp_path, capsys, "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", "--eval-episodes", "0")
    members = sorted(p for p in run.iterdir() if p.name.startswith("m0"))

    def stopped(*a, **k):  # a stop as the loop starts: nothing trained
        raise TrainingInterrupted(signal.SIGTERM, None)

    with monkeypatch.context() as m:
        m.setattr(population_run, "_train_loop", stopped)
        code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--quiet"], capsys)
    assert code == 143 and "outside an iteration; the population is as its last checkpoint left it" in err, err
    assert yaml.safe_load((members[0] / "config.yaml").read_text())["total_timesteps"] == 128  # the resume that was to train
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    assert code == 0, err
    for d in members:
        assert yaml.safe_load((d / "config.yaml").read_text())["total_timesteps"] == 64, d


# --- resume --seed ------------------------------------------------------------------------------------
def test_resume_refuses_seed_naming_the_populations_seeds(tmp_path, capsys):
    run = _train(tmp_path, capsys, "CartPole-v1", "--seeds", "1-3", "--total-timesteps", "64", "--eval-episodes", "0")
    for seed in ("1", "2"):  # before: "--seed 1: cannot change when resuming (the run was trained with 2)"
        code, _, err = run_main(["resume", str(run), "--seed", seed, "--total-timesteps", "128"], capsys)
        line = error_line(code, err)
        assert line.endswith("--seed: a population's seeds are 1-3 (set per member, with --seeds, not --seed); drop --seed"), line
    with pytest.raises(ConfigError, match="^--seed: a population's seeds are 1-3 "):
        resume_population(run, overrides={"seed": 1}, quiet=True)
    assert not (run / ".proxima.lock").exists()
    assert [p.name for p in ckpt.list_checkpoints(run)] == ["step_000000000064.pt"]  # nothing trained


# --- a signal outside the loop: in a resume's setup, in the end-of-run evaluation ---------------------
#: ``proxima ARGV`` in a fresh process, sending itself SIGNAL as the hooked function starts: in a
#: resume's setup (after its checks) or in the end-of-run evaluation (the batched evaluation of every member)
HOOKED = textwrap.dedent("""
    import os, signal, sys
    from proxima import cli, population_run
    from proxima.population import Population

    where, signum = sys.argv[1], getattr(signal, sys.argv[2])
    owner, name = (population_run, "_set_aside_member_checkpoints") if where == "setup" else (Population, "evaluate_members")
    real = getattr(owner, name)

    def hooked(*args, **kwargs):
        os.kill(os.getpid(), signum)  # the handler runs here, as it would wherever the signal lands
        return real(*args, **kwargs)

    setattr(owner, name, hooked)
    sys.exit(cli.main(sys.argv[3:]))
""")


def _hooked(tmp_path: Path, where: str, signum: int, *argv: str) -> tuple[int, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = warm_python.run([sys.executable, "-c", HOOKED, where, signal.Signals(signum).name, *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_in_a_resumes_end_of_run_evaluation_says_training_is_complete(tmp_path, capsys, signum):
    run = _train(tmp_path, capsys, "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", "--eval-episodes", "1")
    code, err = _hooked(tmp_path, "evaluate", signum, "resume", "R", "--total-timesteps", "128", "--eval-episodes", "2", "--quiet")
    name = signal.Signals(signum).name
    assert code == 128 + signum, err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (f"proxima: stopped by {name}; during the end-of-run evaluation; training is complete "
                                            "(checkpoint: R/checkpoints/step_000000000128.pt); the population's checkpoints "
                                            "are kept; `proxima eval R` evaluates it")
    assert not (run / ".proxima.lock").exists()
    assert not list(run.glob("m0*/eval.json"))  # the evaluation of step 64 went with the first resumed iteration
    code, out, err = run_main(["eval", str(run), "--episodes", "1"], capsys)  # as the line says
    assert code == 0, err


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_signal_in_a_new_populations_end_of_run_evaluation_names_its_checkpoint(tmp_path):
    code, err = _hooked(tmp_path, "evaluate", signal.SIGTERM, "train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64",
                        "--eval-episodes", "1", *TINY, "--run-dir", "N", "--quiet")
    assert code == 143, err
    assert err.strip().splitlines()[-1] == ("proxima: stopped by SIGTERM; during the end-of-run evaluation; training is complete "
                                            "(checkpoint: N/checkpoints/step_000000000064.pt); the population's checkpoints "
                                            "are kept; `proxima eval N` evaluates it")
    assert not (tmp_path / "N" / ".proxima.lock").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_signal_in_a_resumes_setup_leaves_the_population_as_its_checkpoint_and_resumable(tmp_path, capsys):
    run = _train(tmp_path, capsys, "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", "--eval-episodes", "0")
    code, err = _hooked(tmp_path, "setup", signal.SIGTERM, "resume", "R", "--total-timesteps", "128", "--quiet")
    assert code == 143, err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == ("proxima: stopped by SIGTERM; outside an iteration; the population is as its last "
                                            "checkpoint left it; checkpoint: R/checkpoints/step_000000000064.pt; continue with: "
                                            "proxima resume R")
    assert not (run / ".proxima.lock").exists()
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--quiet"], capsys)  # as the line says
    assert code == 0, err
    assert [p.name for p in ckpt.list_checkpoints(run)][-1] == "step_000000000128.pt"
