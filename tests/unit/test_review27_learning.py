"""Review 27, learning benchmark: two pass counts (deterministic eval, training return), the training
return over the last 100 episodes, "other config" runs left out of the counts, a run without eval.json
a failed run, Atari ids, the invocation list, and solve_time.py's tables naming their preset's config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import learning  # noqa: E402
import solve_time  # noqa: E402

from proxima.presets import resolve  # noqa: E402


def _run(env_id, seed, mean, train=None, **extra):
    r = {"env_id": env_id, "seed": seed, "eval_mean": mean, "eval_std": 1.0, "episodes": 10, "steps": 1000,
         "wall_s": 10.0, "train_s": 9.0, "final_episodic_return": mean if train is None else train,
         "command": f"proxima train {env_id} --seed {seed}", "config": resolve(env_id).to_dict()}
    return {**r, **extra}


def _row(rows, env_id):
    """{column header: cell} of env_id's row of learning.table's rows."""
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    [row] = [r for r in rows if r.startswith(f"| {env_id} |")]
    return dict(zip(head, (c.strip() for c in row.strip("|").split("|"))))


# ------------------------------------------------------------------------------------ 1. two pass counts
def test_pass_is_counted_by_deterministic_eval_and_by_training_return_apart(tmp_path):
    """LunarLander's deterministic policy lands where the sampling one hovers: 10/10 by eval was
    4/10 by the training return the reference reports, and the table gave only the first."""
    runs = [_run("LunarLander-v3", 1, 247.8, train=236.2), _run("LunarLander-v3", 2, 226.8, train=114.7)]
    row = _row(learning.table(runs), "LunarLander-v3")
    assert row["pass (det. eval)"] == "2/2" and row["pass (training return)"] == "1/2"
    assert row["training return per seed (stoch.)"] == "10 it.: 236.2, 114.7"  # an old record, read as before
    out = tmp_path / "learning.md"
    learning.write_markdown(out, runs, [])
    head = " ".join(out.read_text().split("\n| env |")[0].split())
    assert "`pass (training return)` counts the seeds whose training return is at or above the target: it is the like-for-like count" in head
    assert "`pass (det. eval)` counts seeds whose deterministic evaluation reaches the target" in head
    assert "not comparable with the references" in head


# ------------------------------------------------------------------------------------ 2. last 100 episodes
def _metrics(path, iterations):
    lines = ["iteration,global_step,time,episodes,charts/episodic_return"]
    lines += [f"{i},{i * 512},{i},{n},{'' if ret is None else ret}" for i, (n, ret) in enumerate(iterations, 1)]
    path.write_text("\n".join(lines) + "\n")


def test_training_return_weights_iterations_by_episodes_over_the_last_100(tmp_path):
    m = tmp_path / "metrics.csv"
    _metrics(m, [(9, 500.0)] * 5 + [(1, 20.0)] * 5)  # the reviewer's: 452.0 over 50 episodes, 260.0 by iteration
    assert learning._last_episodes_return(m) == (452.0, 50)
    assert learning._last_return(m) == 260.0
    _metrics(m, [(60, 0.0), (60, 100.0), (0, None), (60, 200.0)])  # 60 x 200 + 40 of the 100.0 iteration
    assert learning._last_episodes_return(m) == (160.0, 100)


def _fake_train(episodes_of_seed: dict):
    """proxima train as learning.run_one sees it: config.yaml, metrics.csv, and eval.json unless the
    seed's episode count is 0 (train skips the evaluation then and exits 0)."""
    import yaml

    real = subprocess.run

    def run(cmd, *a, **k):
        if list(cmd[1:3]) != ["-m", "proxima"]:  # platform's uname and the like
            return real(cmd, *a, **k)
        run_dir, seed = Path(cmd[cmd.index("--run-dir") + 1]), int(cmd[cmd.index("--seed") + 1])
        run_dir.mkdir(parents=True)
        n = episodes_of_seed[seed]
        (run_dir / "config.yaml").write_text(yaml.safe_dump(dict(resolve("CartPole-v1").to_dict(), eval_episodes=n)))
        _metrics(run_dir / "metrics.csv", [(60, 100.0), (60, 200.0)])
        if n:
            (run_dir / "eval.json").write_text(json.dumps({"mean_return": 480.0, "std_return": 2.0, "episodes": n}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    return run


def test_new_runs_record_and_show_the_last_100_episode_mean(tmp_path, monkeypatch):
    monkeypatch.setattr(learning.subprocess, "run", _fake_train({1: 10}))
    record = learning.run_one("CartPole-v1", 1, tmp_path / "runs", 1, [], print)
    assert (record["train_return_last100"], record["train_episodes_last100"]) == (160.0, 100)
    assert record["final_episodic_return"] == 150.0  # the old field, still written
    rows = learning.table([record, _run("CartPole-v1", 2, 500.0)])  # a new record beside an old one
    assert _row(rows, "CartPole-v1")["training return per seed (stoch.)"] == "160.0 (100 ep.), 500.0 (10 it.)"


# ------------------------------------------------------------------------------------ 3. other config
def test_the_whole_resolved_config_is_compared_and_other_configs_are_not_counted():
    cfg = dict(resolve("Pendulum-v1").to_dict(), clip_coef=0.3, hidden_sizes=[256, 256], anneal_lr=False)
    assert learning.other_config({"env_id": "Pendulum-v1", "seed": 1, "config": cfg}) == ["anneal_lr", "clip_coef", "hidden_sizes"]
    old = dict(resolve("Pendulum-v1").to_dict(), lr=1e-3, total_timesteps=200000)  # the preset before 2026-12-02
    runs = [_run("Pendulum-v1", 1, -150.0), _run("Pendulum-v1", 2, -160.0), _run("Pendulum-v1", 3, -900.0, config=old),
            _run("Pendulum-v1", 4, -100.0, config={})]
    row = _row(learning.table(runs), "Pendulum-v1")
    assert (row["seeds"], row["mean"], row["pass (det. eval)"], row["pass (training return)"]) == ("2", "-155.0", "2/2", "2/2")
    assert row["eval return per seed (10 det. episodes)"] == ("s1: -150.0, s2: -160.0, s3: -900.0 (other config: total_timesteps, lr), "
                                                              "s4: -100.0 (other config: no recorded config)")


def test_fields_that_do_not_change_learning_and_fields_added_later_keep_a_run_current():
    now = resolve("CartPole-v1").to_dict()
    same = dict(now, device="cuda", threads=4, eval_episodes=3, checkpoint_every=0, run_dir="/x", progress=False, encoder="mlp")
    for gone in ("stop_return", "stop_episodes", "eval_every", "env_kwargs", "encoder"):  # older config.yaml files
        same.pop(gone)
    assert learning.other_config({"env_id": "CartPole-v1", "seed": 1, "config": same}) == []
    assert learning.other_config({"env_id": "CartPole-v1", "seed": 1, "config": dict(now, stop_return=400.0)}) == ["stop_return"]


# ------------------------------------------------------------------------------------ 4. no eval.json
def test_a_run_without_eval_json_is_a_failed_run_and_the_other_seeds_still_run(tmp_path, monkeypatch, capsys):
    """--extra '--eval-episodes 0': train exits 0 without eval.json; learning.py died on a FileNotFoundError."""
    monkeypatch.setattr(learning.subprocess, "run", _fake_train({1: 0, 2: 20}))
    out = tmp_path / "learning.md"
    code = learning.main(["--envs", "CartPole-v1", "--seeds", "1,2", "--out", str(out), "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.splitlines()
    assert code == 1 and len(err) == 1
    assert err[0].startswith("learning.py: error: 1 of 2 run(s) failed, see above (CartPole-v1 seed 1: exited 0 without ")
    assert "eval.json (--eval-episodes 0 skips the evaluation this table scores): run it with --eval-episodes 1 or more)" in err[0]
    row = _row(learning.table(learning.load_state(out)[0]), "CartPole-v1")
    assert row["eval return per seed (20 det. episodes)"] == "s2: 480.0"


def test_the_eval_column_names_the_recorded_episode_counts():
    rows = learning.table([_run("CartPole-v1", 1, 500.0, episodes=3)])
    assert "| eval return per seed (3 det. episodes) |" in rows[0]
    rows = learning.table([_run("CartPole-v1", 1, 500.0), _run("CartPole-v1", 2, 480.0, episodes=3), _run("Acrobot-v1", 1, -80.0)])
    assert "| eval return per seed (3, 10 det. episodes) |" in rows[0]
    assert _row(rows, "CartPole-v1")["eval return per seed (3, 10 det. episodes)"] == "s1: 500.0, s2: 480.0 (3 ep.)"


# ------------------------------------------------------------------------------------ 5. Atari ids
@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "SpaceInvaders-v5", "Pong-v5"])
def test_atari_ids_take_their_presets_as_train_does(env_id):
    assert learning._argument_problem([env_id], "1") is None
    assert learning.preset_summary(env_id).startswith("atari.yaml: ")
    assert learning.other_config({"env_id": env_id, "seed": 1, "config": resolve(env_id).to_dict()}) == []


# ------------------------------------------------------------------------------------ 6. invocations
def test_invocations_whose_rows_were_all_replaced_are_dropped(tmp_path):
    replaced = "OMP_NUM_THREADS=1 python benchmarks/learning.py --envs CartPole-v1 --seeds 1 --runs-dir /a"
    kept = "OMP_NUM_THREADS=1 python benchmarks/learning.py --envs CartPole-v1,Acrobot-v1 --seeds 1 --runs-dir /b  # note"
    hand = "OMP_NUM_THREADS=1 proxima train CartPole-v1 --seed 2 --run-dir /hand/run  (run by hand)"
    note = "(CartPole-v1 seed 3: see learning-10-seeds.md)"
    runs = [_run("CartPole-v1", 1, 500.0, run_dir="/b/CartPole-v1__1__20261205-000000"),
            _run("CartPole-v1", 2, 500.0, run_dir="/hand/run")]
    out = tmp_path / "learning.md"
    learning.write_markdown(out, runs, [replaced, kept, hand, note])
    commands = out.read_text().split("Benchmark invocations that produced these rows:")[1].split("Each run:")[0]
    assert replaced not in commands and all(line in commands for line in (kept, hand, note))
    assert learning.load_state(out)[1] == [kept, hand, note]


# ------------------------------------------------------------------------------------ 7. solve_time.py
def test_solve_time_tables_record_the_presets_resolved_config(tmp_path, monkeypatch, capsys):
    """The 2026-11-30 tables (450k steps, clip 0.2) read as today's preset: the heading named the preset only."""
    monkeypatch.setattr(solve_time, "run_seed", lambda args, seed, workdir: {
        "seed": seed, "wall": 5.0, "mean_return": 500.0, "std_return": 0.0, "steps": 1000, "command": "proxima"})
    out = tmp_path / "solve.md"
    assert solve_time.main(["--seeds", "1", "--out", str(out)]) == 0
    [line] = [ln for ln in out.read_text().splitlines() if ln.startswith("`fast` preset as resolved for this table: `")]
    recorded = json.loads(line.split(": `", 1)[1].rstrip("`"))
    want = {k: v for k, v in resolve("CartPole-v1", "fast").to_dict().items() if k not in solve_time.PER_RUN}
    assert recorded == want and recorded["total_timesteps"] == 550000 and recorded["clip_coef"] == 0.1
