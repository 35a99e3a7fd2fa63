"""charts/success_rate: the share of an iteration's finished episodes whose last step's info["is_success"]
was true, of those that reported it (SB3's Monitor reads the same key), from Gymnasium envs under sync and
async vector envs; blank (no TensorBoard point) where no episode reported, as for CartPole; an old
metrics.csv header resumes with the cell blank; ranks' counts are pooled; a value in [0, 1] is a partial
success, one no rate can use is left out with one note naming the env and its step."""

from __future__ import annotations

import csv
import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima import cli
from proxima.distributed import DistContext
from proxima.logger import CSV_COLUMNS, _event_records
from tests.cli_helpers import TINY_RUN, module_written_in, run_main, tiny_cartpole_run

COLUMN = "charts/success_rate"

#: 3-step episodes (TINY_RUN's 16 steps: 5 end in iteration 1, episodes 1-5, and 5 in iteration 2, 6-10), ended by
#: terminated and truncated in turn. Episode k's last step reports OUTCOMES[k % 4] (no key for k % 4 == 3; is_success None with
#: none=True, which is no report either): an
#: iteration's rate is over the episodes that reported, iteration 1: 1, 0, -, 1, 1 -> 3/4; iteration 2: 0, -, 1, 1, 0
#: -> 2/4. Envs reset with an even seed (env 1 and 3 of --seed 1) report nothing, so each step mixes envs that
#: report with envs that do not. Mid-episode steps and resets say is_success True: never an episode's outcome.
SUCC_ENV = '''
import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

OUTCOMES = {1: {"is_success": np.float32(1.0)}, 2: {"is_success": False}, 3: {}, 0: {"is_success": np.bool_(True)}}
BAD = {"pair": np.array([True, False]), "one": np.array([True]),  # values JSON --env-kwargs cannot give
       "t1": torch.tensor(1.0), "ttrue": torch.tensor(True), "tfalse": torch.tensor(False)}


class Succ(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, bad=None, none=False, bad_eps=(2,), bad_seed=None):
        self.bad, self.none, self.k, self.silent = bad, none, 0, False
        self.bad_eps, self.bad_seed, self.seed0 = tuple(bad_eps), bad_seed, None  # bad_seed: only the env reset with it

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.silent = seed % 2 == 0
            self.seed0 = seed if self.seed0 is None else self.seed0
        self.t = 0
        return np.zeros(2, np.float32), {"is_success": True}

    def step(self, action):
        self.t += 1
        info = {"is_success": True}
        end = self.t >= 3
        if end:
            self.k += 1
            info = {} if self.silent else dict(OUTCOMES[self.k % 4])
            if self.none and not self.silent and self.k % 4 == 3:
                info = {"is_success": None}  # reported as not reported (SB3's Monitor reads it so)
            if self.bad is not None and self.k in self.bad_eps and self.bad_seed in (None, self.seed0):
                info = {"is_success": BAD.get(self.bad, self.bad) if isinstance(self.bad, str) else self.bad}
        return np.zeros(2, np.float32), 0.0, end and self.k % 2 == 1, end and self.k % 2 == 0, info
'''

RATES = [0.75, 0.5]


@pytest.fixture
def succ_env(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "succ38_env", SUCC_ENV)


def _rows(path) -> tuple[list, list]:
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r)
        return header, [dict(zip(header, row)) for row in r]


def _tensorboard(run_dir) -> list:
    return [(e.step, v.simple_value) for p in sorted(run_dir.glob("events.out.tfevents.*"))
            for _, e in _event_records(p) for v in e.summary.value if v.tag == COLUMN]


def _train(run_dir, steps: int, *extra) -> None:
    assert cli.main(["train", "succ38_env:Succ", *TINY_RUN, "--seed", "1", "--total-timesteps", str(steps),
                     "--run-dir", str(run_dir), "--quiet", *extra]) == 0


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_the_column_is_the_share_of_reporting_episodes_that_succeeded(succ_env, tmp_path, vector):
    run = tmp_path / "run"
    _train(run, 128, "--vector", vector)
    header, rows = _rows(run / "metrics.csv")
    assert header == CSV_COLUMNS
    assert [float(r[COLUMN]) for r in rows] == RATES
    assert [int(r["episodes"]) for r in rows] == [20, 20]  # every finished episode counted, reported or not
    if vector == "sync":
        assert _tensorboard(run) == [(64, 0.75), (128, 0.5)]


def test_an_env_that_reports_no_success_logs_a_blank_cell_and_no_point(tmp_path_factory):
    run = tiny_cartpole_run(tmp_path_factory, "succ38_cartpole")
    header, rows = _rows(run / "metrics.csv")
    assert COLUMN in header and len(rows) == 2
    assert [r[COLUMN] for r in rows] == ["", ""]
    assert all(r["charts/episodic_return"] for r in rows)  # episodes did end: the blank is of success alone
    assert _tensorboard(run) == []


def test_a_gymnasium_env_that_reports_no_success_logs_blank_cells(tmp_path):
    # the Gymnasium backend counts reports (none here: 0 of 0), where a native env has no count at all
    run = tmp_path / "run"
    assert cli.main(["train", "CartPole-v1", "--backend", "gymnasium", *TINY_RUN, "--total-timesteps", "128",
                     "--run-dir", str(run), "--quiet"]) == 0
    _, rows = _rows(run / "metrics.csv")
    assert [r[COLUMN] for r in rows] == ["", ""]
    assert _tensorboard(run) == []


def test_is_success_none_is_left_out_as_a_missing_key_is(succ_env, tmp_path):
    # episodes 3 and 7 say None: counted as failures the rates would be 3/5 and 2/5
    run = tmp_path / "run"
    _train(run, 128, "--env-kwargs", '{"none": true}')
    _, rows = _rows(run / "metrics.csv")
    assert [float(r[COLUMN]) for r in rows] == RATES


def test_a_one_element_array_is_a_flag(succ_env, tmp_path):
    # episode 2 (False in OUTCOMES) says array([True]): iteration 1 is 4 of 4
    run = tmp_path / "run"
    _train(run, 128, "--env-kwargs", '{"bad": "one"}')
    _, rows = _rows(run / "metrics.csv")
    assert [float(r[COLUMN]) for r in rows] == [1.0, 0.5]


@pytest.mark.parametrize("bad, shown", [("yes", "'yes' (str)"), (2, "2 (int)"), (-0.5, "-0.5 (float)"),
                                        ("pair", "array([ True, False]) (ndarray)")])
def test_a_value_no_rate_can_use_is_left_out_with_one_note_naming_env_and_step(succ_env, tmp_path, capsys, bad, shown):
    # the key feeds a logging column only: an env that trains must not stop for it. Episode 2 (False in
    # OUTCOMES) says the bad value: iteration 1 is 3 of 3 reporting episodes, iteration 2 as before
    kwargs = json.dumps({"bad": bad})
    run = tmp_path / "run"
    code, _, err = run_main(["train", "succ38_env:Succ", *TINY_RUN, "--seed", "1", "--total-timesteps", "128",
                             "--run-dir", str(run), "--quiet", "--env-kwargs", kwargs], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "is_success" in line]
    assert notes == [f"proxima: note: env 'succ38_env:Succ': env 0's info['is_success'] = {shown} at env step 6 is no bool "
                     "or number in [0, 1]: such values are left out of charts/success_rate (this note is not repeated)"], err
    _, rows = _rows(run / "metrics.csv")
    assert [float(r[COLUMN]) for r in rows] == [1.0, 0.5]


def test_a_fraction_is_a_partial_success_averaged_as_sb3_does(succ_env, tmp_path):
    # every env's episode 2 says 0.5 (the silent envs 1 and 3 too): iteration 1 is envs 0 and 2's 1 + 0.5 + 1 + 1
    # each and envs 1 and 3's 0.5 each, 8 of 10 episodes' worth
    run = tmp_path / "run"
    _train(run, 128, "--env-kwargs", '{"bad": 0.5}')
    _, rows = _rows(run / "metrics.csv")
    assert [float(r[COLUMN]) for r in rows] == [0.8, 0.5]


def test_a_resume_of_an_old_header_run_leaves_the_older_rows_blank(succ_env, tmp_path):
    run = tmp_path / "run"
    _train(run, 64)
    path = run / "metrics.csv"
    _, rows = _rows(path)
    assert float(rows[0][COLUMN]) == RATES[0]
    old = [c for c in CSV_COLUMNS if c != COLUMN]  # the header before this column existed
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=old, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    assert cli.main(["resume", str(run), "--env", "succ38_env:Succ", "--total-timesteps", "128", "--quiet"]) == 0
    header, after = _rows(path)
    assert header == CSV_COLUMNS
    assert [r["global_step"] for r in after] == ["64", "128"]
    assert after[0][COLUMN] == "" and {k: after[0][k] for k in old} == {k: rows[0][k] for k in old}
    # the resumed run's envs start their episodes afresh (episodes 1-5 again): its own iteration's rate
    assert float(after[1][COLUMN]) == RATES[0]


def test_ranks_pool_their_success_counts(monkeypatch):
    """Two ranks' successes and reporting episodes are summed, not averaged: 3 of 4 and 0 of 1 are 3 of 5."""
    other = {"success_sum": 0.0, "success_count": 1.0, "ep_count": 2.0, "policy_loss": 3.0}
    mine = {"success_sum": 3.0, "success_count": 4.0, "ep_count": 4.0, "policy_loss": 1.0}

    def all_reduce(vec, op=None):  # rank 1's values, in the order reduce_metrics stacked them
        vec += torch.tensor([other[k] for k in mine])

    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    out = DistContext(rank=0, world_size=2).reduce_metrics({k: torch.tensor(v) for k, v in mine.items()})
    assert out["success_sum"] == 3.0 and out["success_count"] == 5.0
    assert out["policy_loss"] == 2.0  # the rest averaged, as before


class _Lives(gym.Env):
    """2-step episodes whose last step reports a success beside a game statistic."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        end = self.t >= 2
        return np.zeros(2, np.float32), 0.0, end, False, ({"is_success": np.bool_(True), "lives": 3} if end else {"lives": 4})


def test_a_subclass_that_reads_info_sees_the_last_steps_keys_and_the_flag():
    """A GymnasiumEnv whose _episode_stats reads info (Atari's game statistics) gets every key of an
    episode's last step, not the success flag alone."""
    from proxima.envs.gym_adapter import GymnasiumEnv

    class Seen(GymnasiumEnv):
        def _episode_stats(self, reward, done, info):
            self.seen.append(info)
            return super()._episode_stats(reward, done, info)

    env = Seen("lives38", 2, env_fn=_Lives)
    try:
        env.seen = []
        env.reset(seed=0)
        for _ in range(2):
            env.step(torch.zeros(2, dtype=torch.long))
    finally:
        env.close()
    assert env.seen[0]["lives"].tolist() == [4, 4]
    final = env.seen[1]["final_info"]
    assert final["lives"].tolist() == [3, 3] and final["is_success"].tolist() == [1.0, 1.0]
    assert env.take_successes() == (2.0, 2)


@pytest.mark.parametrize("value, rates", [("t1", [1.0, 0.5]), ("ttrue", [1.0, 0.5]), ("tfalse", [0.6, 0.5])])
def test_a_torch_0d_tensor_is_read_as_its_value(succ_env, tmp_path, capsys, value, rates):
    # every env's episode 2 says torch.tensor(...): a success (or a failure), read, with no note
    run = tmp_path / "run"
    code, _, err = run_main(["train", "succ38_env:Succ", *TINY_RUN, "--seed", "1", "--total-timesteps", "128",
                             "--run-dir", str(run), "--quiet", "--env-kwargs", json.dumps({"bad": value})], capsys)
    assert code == 0, err
    assert "is_success" not in err
    _, rows = _rows(run / "metrics.csv")
    assert [float(r[COLUMN]) for r in rows] == rates


def _bad_notes(tmp_path, capsys, **kwargs) -> list:
    run = tmp_path / "run"
    code, _, err = run_main(["train", "succ38_env:Succ", *TINY_RUN, "--seed", "1", "--total-timesteps", "128",
                             "--run-dir", str(run), "--quiet", "--env-kwargs", json.dumps({"bad": "yes", **kwargs})], capsys)
    assert code == 0, err
    return [line for line in err.splitlines() if "is_success" in line]


def test_the_note_is_not_repeated_for_a_later_bad_episode(succ_env, tmp_path, capsys):
    # episodes 2 and 4 say 'yes', at env steps 6 and 12: one note, the first's
    notes = _bad_notes(tmp_path, capsys, bad_eps=[2, 4])
    assert len(notes) == 1 and "at env step 6 " in notes[0], notes


def test_the_note_names_the_env_that_reported(succ_env, tmp_path, capsys):
    # only env 1 (reset with seed 2 under --seed 1) says 'yes'; env 1 is a silent one, so its report is its only one
    notes = _bad_notes(tmp_path, capsys, bad_seed=2)
    assert len(notes) == 1 and notes[0].startswith("proxima: note: env 'succ38_env:Succ': env 1's info['is_success'] = "
                                                   "'yes' (str) at env step 6 "), notes
