"""A single run is a population of one (DESIGN.md): a population's meta.json files and population.json
record the members' ``spaces``, a new population prints the one ``proxima: spaces: ...`` line a single
run prints, each member's metrics.csv carries charts/episodic_return_100 (rebuilt exactly on resume),
and a complete population's resume notes the single-run-only flags a resume that trains notes."""

from __future__ import annotations

import csv
import json
import math

from cli_helpers import run_main

from proxima.config import PPOConfig
from proxima.population import member_configs
from proxima.population_run import resume_population, train_population
from proxima.signals import TrainingInterrupted

SEEDS = [1, 2]
CARTPOLE = {"observation": "Box(4,) float32 -> 4 features", "action": "Discrete(2) -> categorical over 2",
            "policy": "MLP 32 tanh"}
LINE = "proxima: spaces: obs Box(4,) float32 -> 4 features, MLP 32 tanh; action Discrete(2) -> categorical over 2\n"
FLAGS = ["--backend", "native", "--num-envs", "2", "--num-steps", "32", "--total-timesteps", "128",
         "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1", "--hidden-sizes", "32",
         "--eval-episodes", "0", "--checkpoint-every", "0", "--no-progress"]


def _config(**kw) -> PPOConfig:
    return PPOConfig(**{**dict(env_id="CartPole-v1", backend="native", num_envs=2, num_steps=32, total_timesteps=128,
                               num_minibatches=2, update_epochs=1, threads=1, hidden_sizes=(32,), progress=False,
                               eval_episodes=0, checkpoint_every=0), **kw})


def _train(run_dir, sweep=None, stop_after=None, **kw):
    sweep = sweep or {}
    return train_population(member_configs(_config(**kw), SEEDS, sweep), SEEDS, sweep, run_dir=run_dir, quiet=True,
                            evaluate_at_end=False, stop_after=stop_after)


def _members(run_dir) -> list:
    return [run_dir / m["dir"] for m in json.loads((run_dir / "population.json").read_text())["member_dirs"]]


def _rows(member_dir) -> list:
    with open(member_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _rolling_by_hand(rows) -> list:
    """charts/episodic_return_100 from the rows' own episodes and charts/episodic_return: the mean return
    of the fewest most recent iterations holding at least 100 episodes (all of them before 100 ended)."""
    seen, out = [], []
    for r in rows:
        if r["episodes"] and int(r["episodes"]) > 0:
            seen.append((int(r["episodes"]), float(r["charts/episodic_return"])))
        window, count = [], 0
        for c, m in reversed(seen):
            if count >= 100:
                break
            window.append((c, m))
            count += c
        out.append(math.fsum(c * m for c, m in window) / count if count else None)
    return out


def _column(rows) -> list:
    return [float(r["charts/episodic_return_100"]) if r["charts/episodic_return_100"] else None for r in rows]


def test_population_json_and_every_members_meta_json_record_the_spaces(tmp_path):
    run = _train(tmp_path / "pop", sweep={"lr": [1e-3, 3e-4]})  # a sweep varies no field the spaces depend on
    assert json.loads((run / "population.json").read_text())["spaces"] == CARTPOLE
    members = _members(run)
    assert len(members) == 4
    for d in members:
        assert json.loads((d / "meta.json").read_text())["spaces"] == CARTPOLE


def test_a_new_population_prints_the_spaces_line_once_and_neither_resume_nor_quiet_prints_it(tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "0,1", "--run-dir", str(tmp_path / "pop"), *FLAGS], capsys)
    assert code == 0, err
    assert [line for line in err.splitlines(keepends=True) if "spaces:" in line] == [LINE]
    code, _, err = run_main(["resume", str(tmp_path / "pop"), "--total-timesteps", "256"], capsys)
    assert code == 0, err
    assert "spaces:" not in err
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "0,1", "--run-dir", str(tmp_path / "q"), "--quiet", *FLAGS],
                            capsys)
    assert code == 0, err
    assert "spaces:" not in err


def test_each_members_rolling_return_is_the_window_of_its_own_episodes(tmp_path):
    # 4 envs x 32 steps x 24 iterations: ~180 CartPole episodes a member, so the window drops iterations
    run = _train(tmp_path / "pop", num_envs=4, total_timesteps=4 * 32 * 24)
    for d in _members(run):
        rows = _rows(d)
        assert len(rows) == 24
        assert sum(int(r["episodes"]) for r in rows) > 130
        assert _column(rows) == _rolling_by_hand(rows)
        assert all(v is not None for v in _column(rows)[1:])


def test_a_resumed_members_rolling_return_equals_the_uninterrupted_ones(tmp_path):
    kw = dict(num_envs=4, total_timesteps=4 * 32 * 24, checkpoint_every=10)
    whole = _train(tmp_path / "whole", **kw)
    cut = tmp_path / "cut"
    try:
        _train(cut, stop_after=14, **kw)
    except TrainingInterrupted:
        pass
    assert len(_rows(_members(cut)[0])) == 14
    # from the older checkpoint (iteration 10): rows 11-14 are dropped and the window rebuilt from rows 1-10
    resume_population(cut, quiet=True, evaluate_at_end=False, checkpoint=cut / "checkpoints" / "step_000000001280.pt")
    for a, b in zip(_members(whole), _members(cut)):
        assert a.name == b.name
        resumed = _rows(b)
        assert [r["iteration"] for r in resumed] == [str(i) for i in range(1, 25)]
        assert _column(resumed) == _column(_rows(a)) == _rolling_by_hand(resumed)


def test_a_complete_populations_resume_notes_stop_episodes_as_one_that_trains(tmp_path, capsys):
    run = _train(tmp_path / "pop")
    for extra in ([], ["--total-timesteps", "256"]):
        code, _, err = run_main(["resume", str(run), "--stop-episodes", "0", *extra], capsys)
        assert code == 0, err
        assert ("proxima: note: --stop-episodes 0 applies to single runs; each member of the population trains for "
                "--total-timesteps\n") in err
    code, _, err = run_main(["resume", str(run), "--stop-episodes", "0"], capsys)
    assert code == 0, err
    assert "the run is complete (256 steps)" in err


def test_a_population_of_an_image_env_with_encoder_auto_records_the_encoder_it_built(tmp_path, capsys, monkeypatch):
    """population_spaces describes the encoder the population built (pop.encoder_kind), not the config's
    'auto': for a uint8 image that is the CNN, as a single run of the env records."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "fixtures"))
    board = {"observation": "Box(40, 40, 2) uint8 -> image (2, 40, 40) 0..1 scaled to [0, 1]",
             "policy": "Nature CNN (512 features), linear actor and critic heads",
             "action": "Discrete(2) -> categorical over 2"}
    run = tmp_path / "pop"
    code, _, err = run_main(["train", "pixel_edge_envs:BinaryBoard", "--seeds", "1,2", "--run-dir", str(run), *FLAGS,
                             "--backend", "gymnasium", "--encoder", "auto", "--total-timesteps", "64"], capsys)
    assert code == 0, err
    assert json.loads((run / "population.json").read_text())["spaces"] == board
    for d in _members(run):
        assert json.loads((d / "meta.json").read_text())["spaces"] == board
    assert f"proxima: spaces: obs {board['observation']}, " in err


def test_population_spaces_describes_the_encoder_the_population_built_not_its_configs_auto():
    """The unit contract behind the test above: population_spaces reads pop.encoder_kind (what the
    agents built), whatever a config's --encoder auto would resolve to on its own."""
    import types

    import numpy as np
    from gymnasium import spaces

    from proxima.population_run import population_spaces

    env = types.SimpleNamespace(single_observation_space=spaces.Box(0, 1, (40, 40, 2), np.uint8),
                                single_action_space=spaces.Discrete(2))
    pop = types.SimpleNamespace(configs=[_config(encoder="auto")], env=env, encoder_kind="mlp")
    assert population_spaces(pop) == {
        "observation": "Box(40, 40, 2) uint8 -> image (2, 40, 40) 0..1 scaled to [0, 1], flattened to 3200 features",
        "policy": "MLP 32 tanh", "action": "Discrete(2) -> categorical over 2"}
    assert pop.configs[0].encoder == "auto"  # the population's own config is left as it is
    pop.encoder_kind = "cnn"
    assert population_spaces(pop)["policy"] == "Nature CNN (512 features), linear actor and critic heads"


def test_a_diverged_members_later_rows_leave_the_rolling_cell_blank_and_its_report_a_real_final(tmp_path):
    """Before, RollingReturn.add skipped a diverged member's row (episodes NaN) but the logger wrote the old
    window's mean in it and every later row: `proxima report RUN/m001` gave that stale pre-divergence mean
    as the member's final at its last step (and the report's rebuild filled any blank cell with it again)."""
    import types

    from proxima.logger import ROLLING_RETURN, RunLogger
    from proxima.plot import read_metrics
    from proxima.population_run import _blank_diverged, _log_members
    from proxima.report import summarize

    dirs = [tmp_path / f"m00{i}" for i in range(2)]
    for d in dirs:
        d.mkdir()
    loggers = [RunLogger(d, 256, progress=False, rolling=True) for d in dirs]
    pop = types.SimpleNamespace(scheduled_lrs=[1e-3, 1e-3], diverged_at=[None, None], iteration=0)
    for it in (1, 2, 3, 4):  # m001 diverges in iteration 3
        pop.iteration = it
        pop.diverged_at = [None, {"iteration": 3} if it >= 3 else None]
        values = {k: [1.0, 1.0] for k in ("ep_length_sum", "policy_loss", "value_loss", "entropy", "approx_kl",
                                           "clipfrac", "explained_variance")}
        values.update(ep_return_sum=[10.0 * it, 10.0 * it], ep_count=[2.0, 2.0], nonfinite=[False, False])
        _blank_diverged(values, pop)
        _log_members(loggers, values, pop, sps=100.0, elapsed=0.1 * it, step=64 * it)
    for lg in loggers:
        lg.close()
    cells = [[r[ROLLING_RETURN] for r in csv.DictReader(open(d / "metrics.csv"))] for d in dirs]
    assert cells[0] == ["5.0", "7.5", "10.0", "12.5"]  # the healthy member's window: 2 episodes an iteration
    assert cells[1] == ["5.0", "7.5", "", ""]  # blank after the divergence, as its episodic_return cells are
    # its report's final: the last real window, at its step, not refilled from the rows (rolling_rebuilt 0)
    s = summarize(read_metrics(dirs[1]))
    assert (s["rolling"], s["final"], s["final_step"], s["rolling_rebuilt"]) == (True, 7.5, 128.0, 0)
    assert summarize(read_metrics(dirs[0]))["final"] == 12.5
