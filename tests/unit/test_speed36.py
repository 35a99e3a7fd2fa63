"""Review 36, speed switches: every compiled Trainer of a process compiles (dynamo's recompile limit
counted all of them against one code object, and the ninth ran eager under a "compiled" label) and a
step that runs eagerly all the same is caught and marked by bench; meta.json records the tanh a bf16
or compiled run computed; a resume without a C++ compiler says --no-compile; --threads above the CPUs
gets a note; report says a compiled run's throughput includes compilation and that runs of one seed
are no sample of seeds. No inductor compile here: dynamo's "eager" backend stands in for it."""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from proxima import accel, bench, report, train_state, trainer
from proxima.config import ConfigError, PPOConfig
from tests.cli_helpers import TINY_RUN, fake_run_dir, run_main

_REAL_COMPILE = torch.compile


@pytest.fixture
def eager_backend(monkeypatch, tmp_path):
    """torch.compile as accel calls it, with dynamo's "eager" backend (traces, caches and counts
    recompiles as inductor's would, builds no C++); the compile cache in tmp_path."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))

    def compile_eager(fn, **kw):
        kw.pop("options", None)
        return _REAL_COMPILE(fn, backend="eager", **kw)

    monkeypatch.setattr(torch, "compile", compile_eager)


def _tiny(num_envs: int, **kw) -> PPOConfig:
    return PPOConfig(env_id="CartPole-v1", num_envs=num_envs, num_steps=4, num_minibatches=2, update_epochs=1,
                     compile=True, total_timesteps=10**6, progress=False, checkpoint_every=0, eval_episodes=0, **kw)


def test_a_later_trainer_of_other_shapes_still_compiles(eager_backend, monkeypatch, tmp_path):
    """The bug at a limit of 1 instead of 8: with the steps' code shared between Trainers, the second
    Trainer's new shapes hit dynamo's recompile limit and both its steps ran eager."""
    fallbacks = []
    # torch's own patch, not monkeypatch: monkeypatch's undo of a dynamo config entry left it
    # "does not exist" for the rest of the process (test_accel failed after this file under xdist)
    with torch._dynamo.config.patch(recompile_limit=1):
        for n in (2, 4):
            t = trainer.Trainer(_tiny(n), run_dir=tmp_path / f"unused{n}", quiet=True)
            try:
                t.train_iteration()
                fallbacks.append(accel.eager_fallback(t))
            finally:
                t.close()
    assert fallbacks == [[], []]


def test_steps_that_run_eagerly_are_named(eager_backend, tmp_path):
    """force_eager: every compiled frame left to Python, as after a recompile limit."""
    t = trainer.Trainer(_tiny(2), run_dir=tmp_path / "unused", quiet=True)
    try:
        with torch.compiler.set_stance("force_eager"):
            t.train_iteration()
        assert accel.eager_fallback(t) == ["policy_step", "grad_step"]
    finally:
        t.close()


def test_bench_marks_a_compiled_row_that_ran_eager(eager_backend, capsys):
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    args = p.parse_args(["CartPole-v1", "--num-envs", "2", "--num-steps", "4", "--backend", "native", "--train-only",
                         "--repeats", "1", "--seconds", "0.02", "--compile", "--json"])
    with torch.compiler.set_stance("force_eager"):
        assert bench.run(args) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["compile"] is True and row["compile_live"] is False and row["compile_eager"] == ["policy_step", "grad_step"]
    line = bench.Line("native", 2, samples={"train": [100.0]}, compile_eager=["grad_step"])
    assert bench.table_rows([line])[0][4] == "100 (100-100) compile fell back: eager (grad_step)"


# ------------------------------------------------------------------------------------ the tanh a run computed
def _fake_trainer(**cfg):
    import gymnasium as gym

    env = SimpleNamespace(backend="native", single_observation_space=gym.spaces.Box(-1, 1, (4,)),
                          single_action_space=gym.spaces.Discrete(2))
    return SimpleNamespace(argv=["proxima", "train"], device=torch.device("cpu"), dist=SimpleNamespace(world_size=1),
                           env=env, cfg=PPOConfig(threads=1, **cfg), init_from_record=None)


@pytest.mark.parametrize("cfg, machine", [
    ({}, {"cpu_tanh": "sigmoid"}),
    ({"amp": "bf16"}, {"cpu_tanh": "torch", "cpu_tanh_eager": "sigmoid"}),
    ({"compile": True}, {"cpu_tanh": "torch", "cpu_tanh_eager": "sigmoid"}),
])
def test_meta_and_resume_entries_record_the_tanh_the_run_computed(cfg, machine, monkeypatch):
    import proxima.tanh_cpu

    monkeypatch.setattr(proxima.tanh_cpu, "MODE", "sigmoid")  # PROXIMA_CPU_TANH=sigmoid, or an AMD CPU's pick
    meta = train_state._run_meta(_fake_trainer(**cfg))
    assert meta["spaces"]["observation"] == "Box(4,) float32 -> 4 features"
    assert {k: meta["machine"].get(k) for k in ("cpu_tanh", "cpu_tanh_eager") if k in meta["machine"]} == machine
    entry = train_state.resume_entry(100, ["proxima", "resume"], device="cpu", cfg=PPOConfig(**cfg))
    assert {k: entry[k] for k in ("cpu_tanh", "cpu_tanh_eager") if k in entry} == machine


def test_a_bf16_resume_notes_no_tanh_change(monkeypatch, tmp_path, capsys):
    """Both records say what ran ("torch"): the process's "sigmoid" is no change of the run's tanh."""
    import proxima.tanh_cpu

    monkeypatch.setattr(proxima.tanh_cpu, "MODE", "sigmoid")
    path = tmp_path / "meta.json"
    path.write_text(json.dumps(train_state._run_meta(_fake_trainer(amp="bf16"))))
    assert train_state.record_resume(path, train_state.resume_entry(8, ["x"], device="cpu", cfg=PPOConfig(amp="bf16")))
    assert "CPU tanh" not in capsys.readouterr().err


def test_meta_json_spaces_records_a_description_that_raised_as_one_line_and_the_run_goes_on(monkeypatch, tmp_path, capsys):
    """meta.json's spaces never stops a run: an odd env's spaces or a bug in the description helper is
    recorded as the error's first line, and the run trains."""
    import proxima.envs.spaces

    def boom(*args, **kwargs):
        raise RuntimeError("no reading of this space\nsecond line")

    monkeypatch.setattr(proxima.envs.spaces, "spaces_summary", boom)
    assert train_state.run_spaces(_fake_trainer()) == {"error": "RuntimeError: no reading of this space"}
    assert train_state.run_spaces(SimpleNamespace(env=SimpleNamespace(backend="native"), cfg=PPOConfig())) == {
        "error": "AttributeError: 'types.SimpleNamespace' object has no attribute 'single_observation_space'"}
    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run_dir),
                             "--quiet"], capsys)
    assert code == 0, err
    assert json.loads((run_dir / "meta.json").read_text())["spaces"] == {"error": "RuntimeError: no reading of this space"}
    assert any((run_dir / "checkpoints").glob("*.pt")), sorted(p.name for p in run_dir.rglob("*"))
    # and without --quiet its start line says so rather than dying on the missing reading (a KeyError before)
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(tmp_path / "loud")],
                            capsys)
    assert code == 0 and "Traceback" not in err, err
    assert ("proxima: spaces: not described (RuntimeError: no reading of this space); meta.json records the error"
            in err.splitlines()), err


# ------------------------------------------------------------------------------------ resume without a compiler
def test_a_resumed_compile_without_a_compiler_says_add_no_compile(monkeypatch, tmp_path):
    from proxima import doctor, run_setup

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setattr(doctor, "inductor_cxx", lambda: (None, "no c++ on PATH"))
    cfg = PPOConfig(env_id="CartPole-v1", compile=True)
    with pytest.raises(ConfigError) as e:
        run_setup.preflight(cfg, resumed=True)
    assert str(e.value) == ("--compile: torch.compile on the CPU needs a C++ compiler (no c++ on PATH); "
                            "or add --no-compile (the run was compiled)")
    with pytest.raises(ConfigError, match=r"\(no c\+\+ on PATH\); or drop --compile$"):
        run_setup.preflight(cfg)  # a new run: the user typed --compile


# ------------------------------------------------------------------------------------ --threads above the CPUs
@pytest.mark.parametrize("threads, python, note", [
    (8, False, "proxima: note: --threads 8 is more than this machine's 2 CPUs: the threads take turns on them, which "
               "is usually slower than --threads 2\n"),
    (3, True, "proxima: note: PPOConfig.threads=3 is more than this machine's 2 CPUs: the threads take turns on them, "
              "which is usually slower than threads=2\n"),
    (2, False, ""),
])
def test_threads_above_the_cpus_get_one_note(threads, python, note, monkeypatch, capsys):
    import proxima.cpuinfo

    monkeypatch.setattr(proxima.cpuinfo, "usable_cpus", lambda root=None: 2)
    monkeypatch.setattr(proxima.cpuinfo.os, "cpu_count", lambda: 2)
    trainer.note_run(PPOConfig(env_id="CartPole-v1", threads=threads), {"threads": threads}, python)
    assert capsys.readouterr().err == note


# ------------------------------------------------------------------------------------ report
def test_report_says_a_compiled_runs_throughput_includes_compilation(tmp_path):
    eager = fake_run_dir(tmp_path, "eager", steps=(100, 200), seed=1)
    comp = fake_run_dir(tmp_path, "comp", steps=(100, 200), seed=2, compile=True)
    text = report.build_report([eager, comp], out=tmp_path / "r.md", episodes=0).read_text()
    assert "| throughput | 1,000 steps/s | 1,000 steps/s, compilation included |" in text
    assert ("- comp: --compile: wall time and throughput include torch.compile's compilation (in iteration 1 and in "
            "the first iteration after each resume") in text
    assert "- eager: --compile" not in text


def _run(name, seed, ret):
    return {"dir": name, "name": name, "env": "CartPole-v1", "config": {"seed": seed}, "meta": {},
            "summary": report.summarize({"global_step": np.array([100.0]), "iteration": np.array([1.0]),
                                         "time": np.array([1.0])}),
            "eval": {"mean_return": ret, "std_return": 0.0, "episodes": 10, "source": "x"}}


@pytest.mark.parametrize("seeds, said, footnote", [
    ((1, 1), " 2 runs of seed 1: not a sample of seeds; the spread is not across seeds.", report.STD_ACROSS_SAME_SEED),
    ((1, 2), "", report.STD_ACROSS_RUNS),
])
def test_runs_of_one_seed_are_not_called_a_sample_of_seeds(seeds, said, footnote):
    text = report.render([_run(f"r{i}", s, 100.0 + i) for i, s in enumerate(seeds)], None, "none", "charts/episodic_return", "step")
    line = next(x for x in text.splitlines() if x.startswith("Final eval of CartPole-v1 over 2 runs"))
    assert line.endswith("max 101.00." + said)
    assert footnote in text and (footnote is report.STD_ACROSS_RUNS) == ("the runs are a sample of seeds" in text)
