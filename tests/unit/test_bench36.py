"""Review 36, benchmark truthfulness: learning.py never lets a run of another config replace a recorded
run of today's preset, writes its tuning notes only into the committed files; ``proxima bench`` times
the backends of one size in turn and reports the per-round ratio; gpu_session.sh's start-up check
imports what the steps need and warns about a torch other than the pin. No training runs here: stubs
stand in for ``proxima train``, the Trainers and the clock."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from proxima import bench
from proxima.presets import resolve

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import learning  # noqa: E402  (benchmarks/learning.py)

RESULTS = ROOT / "benchmarks" / "results" / "learning.md"


# ------------------------------------------------------------------------------------ learning.py: other config
def _smoke_run(env_id, seed, runs_dir, threads, extra, log):
    """What `proxima train --total-timesteps 2048` records: a successful run of another config."""
    return {"env_id": env_id, "seed": seed, "command": f"proxima train {env_id} --seed {seed} --total-timesteps 2048",
            "run_dir": str(Path(runs_dir) / f"{env_id}__{seed}"), "wall_s": 1.0, "load_start": 1.0, "load_end": 1.0,
            "finished": "2026-12-06T10:00:00", "returncode": 0, "machine": "test box", "eval_mean": 116.2,
            "eval_std": 59.5, "episodes": 10, "steps": 2048, "train_s": 0.9, "final_episodic_return": 20.0,
            "train_return_last100": 20.0, "train_episodes_last100": 100,
            "config": dict(resolve(env_id).to_dict(), total_timesteps=2048, seed=seed)}


def _seed1(path: Path) -> dict:
    [run] = [r for r in learning.load_state(path)[0] if (r["env_id"], r["seed"]) == ("CartPole-v1", 1)]
    return run


def _copy_of_results(tmp_path: Path) -> Path:
    out = tmp_path / "learning.md"
    shutil.copyfile(RESULTS, out)
    assert _seed1(out)["steps"] == 499_712 and not learning.stale(_seed1(out))  # a run of today's preset
    return out


def _main(out: Path, tmp_path: Path, *flags) -> int:
    return learning.main(["--envs", "CartPole-v1", "--seeds", "1", *flags, "--runs-dir", str(tmp_path / "runs"),
                          "--out", str(out)])


def test_a_smoke_test_with_extra_is_refused_where_out_holds_the_recorded_run(tmp_path, monkeypatch, capsys):
    """The reviewer's repro: --extra '--total-timesteps 2048' into a copy of learning.md replaced seed 1's
    499,712-step record with the 2,048-step run and exited 0."""
    out = _copy_of_results(tmp_path)
    before = out.read_bytes()
    monkeypatch.setattr(learning, "run_one", _smoke_run)
    assert _main(out, tmp_path, "--extra", "--total-timesteps 2048") == 2
    assert capsys.readouterr().err.splitlines() == [
        f"learning.py: error: --extra '--total-timesteps 2048' changes --total-timesteps: {out} holds runs of today's "
        "preset for CartPole-v1 seed 1 that these runs would replace; give another --out, or --replace to replace them"]
    assert out.read_bytes() == before and not (tmp_path / "runs").exists()


def test_a_run_that_came_out_another_config_is_not_recorded_over_today_s_preset(tmp_path, monkeypatch, capsys):
    """No --extra to refuse up front (the run's own config.yaml differs): the recorded run is kept, exit 1."""
    out = _copy_of_results(tmp_path)
    before = out.read_bytes()
    monkeypatch.setattr(learning, "run_one", _smoke_run)
    assert _main(out, tmp_path) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"learning.py: error: 1 of 1 run(s) not recorded (CartPole-v1 seed 1: ran another config (total_timesteps); "
        f"{out} keeps its run of today's preset (--replace replaces it))"]
    assert out.read_bytes() == before


def test_replace_lets_a_run_of_another_config_replace_the_recorded_one(tmp_path, monkeypatch, capsys):
    out = _copy_of_results(tmp_path)
    monkeypatch.setattr(learning, "run_one", _smoke_run)
    assert _main(out, tmp_path, "--extra", "--total-timesteps 2048", "--replace") == 0
    assert _seed1(out)["steps"] == 2048
    row = next(ln for ln in out.read_text().splitlines() if ln.startswith("| CartPole-v1 |"))
    assert "s1: 116.2 (other config: total_timesteps, --total-timesteps)" in row


# ------------------------------------------------------------------------------------ learning.py: notes
def test_tuning_notes_go_only_into_the_committed_results_files(tmp_path, monkeypatch):
    out = tmp_path / "mine.md"
    runs = learning.load_state(RESULTS)[0]
    learning.write_markdown(out, runs, [])
    text = out.read_text()
    assert "## Tuning notes" not in text and "mean 230.5" not in text and "already meet the targets" not in text
    assert "shared with other jobs" not in text  # the committed files' machine, not this one's
    monkeypatch.setattr(learning, "RECORDED", (out,))  # as if out were benchmarks/results/learning.md
    learning.write_markdown(out, runs, [])
    text = out.read_text()
    assert "## Tuning notes" in text and "10 of 10 by deterministic evaluation, 213.9-247.8, mean 230.5" in text


# ------------------------------------------------------------------------------------ proxima bench: rounds
class LoadedClock:
    """perf_counter that moves only when a fake call runs; from call ``loaded_after`` on every call
    takes 3x as long (another job starting on the machine)."""

    def __init__(self, loaded_after: int):
        self.now, self.calls, self.order, self.loaded_after = 0.0, 0, [], loaded_after

    def perf_counter(self) -> float:
        return self.now

    def call(self, name: str, seconds: float):
        def fn() -> None:
            self.calls += 1
            self.order.append(name)
            self.now += seconds * (3 if self.calls > self.loaded_after else 1)

        return fn


def test_backends_are_timed_in_turn_so_a_load_phase_does_not_skew_their_ratio(monkeypatch):
    """native calls take 1/64 s, Gymnasium's 1/32 s, and the machine gets 3x slower from the second round
    on. Timed in turn, every round's ratio is 2.0; timing native's repeats, then Gymnasium's, gave 3.4x."""
    import proxima.trainer

    # warm-ups: 13 native calls (0.2 s), 7 Gymnasium ones; then windows of 64 and 32 calls (1 s each):
    # round 1 ends at call 13 + 7 + 64 + 32 = 116
    clock = LoadedClock(loaded_after=116)
    fns = {"native": clock.call("n", 1 / 64), "gymnasium": clock.call("g", 1 / 32)}
    closed = []

    class FakeTrainer:
        def __init__(self, cfg, quiet=False):
            self.cfg, self.side, self.device = cfg, None, SimpleNamespace(type="cpu")

        def close(self):
            closed.append(self.cfg.backend)

    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    monkeypatch.setattr(proxima.trainer, "Trainer", FakeTrainer)
    monkeypatch.setattr(bench, "check_line", lambda args, backend, n: SimpleNamespace(
        backend=backend, num_envs=n, num_steps=1, num_minibatches=1, cudagraphs=False))
    monkeypatch.setattr(bench, "measured_calls", lambda trainer, cfg, n: {"train": (fns[cfg.backend], 1)})
    args = SimpleNamespace(seconds=1.0, repeats=3, train_only=True)
    lines = [line for line, _, _ in bench.bench_lines(args, ["native", "gymnasium"], 8)]
    assert "".join(clock.order) == "n" * 13 + "g" * 7 + ("n" * 64 + "g" * 32) * 3
    assert [round(x, 2) for x in lines[0].samples["train"]] == [64.0, 21.33, 21.33]
    assert [round(x, 2) for x in lines[1].samples["train"]] == [32.0, 10.67, 10.67]
    assert bench.table_rows(lines)[0][-1] == "2.0x (2.0-2.0)" and closed == ["gymnasium", "native"]  # last built closed first (each puts back what it found)
    # each window's seconds (1 s, then 3 s under load) and each backend's own untimed warm-up
    assert lines[0].seconds["train"] == lines[1].seconds["train"] == [1.0, 3.0, 3.0]
    assert lines[0].warmup["train"] == [13 / 64] and lines[1].warmup["train"] == [7 / 32]


def test_train_x_gym_is_the_median_and_range_of_the_per_round_ratios():
    native = bench.Line("native", 8, samples={"train": [100.0, 300.0, 250.0]})
    gym = bench.Line("gymnasium", 8, samples={"train": [50.0, 100.0, 160.0]})
    # per round 2.0, 3.0, 1.5625: median 2.0 (the medians' ratio, 250 / 100, would say 2.5)
    rows = bench.table_rows([native, gym])
    assert rows[0][-1] == "2.0x (1.6-3.0)" and rows[1][-1] == ""
    args = SimpleNamespace(env_id="CartPole-v1", threads=1, repeats=3, preset=None, train_only=True)
    cfg = SimpleNamespace(num_steps=16, update_epochs=1, num_minibatches=2, compile=False, cudagraphs=False, amp="none",
                          vector="sync", hidden_sizes=[64, 64], encoder="auto")
    d = bench.json_line(native, args, cfg, "cpu", {}, bench.train_x_gym([native, gym])[id(native)])
    assert d["train_x_gym"] == 2.0 and d["train_x_gym_rounds"] == [2.0, 3.0, 1.5625]


# ------------------------------------------------------------------------------------ gpu_session.sh start-up
def test_gpu_session_stops_in_its_start_up_check_without_tensorboard_and_warns_of_another_torch(tmp_path):
    """A machine whose image lacks tensorboard crashed every training step after its limit (logger.py's
    import); the check imported gymnasium and torch only, and never compared torch with the pin."""
    tree, out = tmp_path / "tree", tmp_path / "out"
    (tree / "tensorboard").mkdir(parents=True)
    (tree / "tensorboard" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'tensorboard'\")\n")
    (tree / "requirements.lock").write_text("numpy==2.0\ntorch==0.0.1\n")  # a pin this torch is not
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh")], cwd=tree, env=env, capture_output=True,
                       text=True, timeout=60)
    import torch

    lines = [f"gpu_session: warning: torch {torch.__version__} here, requirements.lock pins 0.0.1: every number and "
             "test result of this session is of this torch",
             "gpu_session: start-up check failed: cannot import tensorboard.compat.proto.event_pb2 (ModuleNotFoundError: "
             f"No module named 'tensorboard'): install it in the image or carry its wheel in .whl/ (all of it: "
             f"{out}/import-error.txt)"]
    assert (r.returncode, r.stdout.splitlines()) == (2, lines), r.stderr
    assert (out / "summary.txt").read_text().splitlines() == lines  # and no step ran
    assert sorted(p.name for p in out.iterdir()) == ["import-error.txt", "summary.txt"]


# ------------------------------------------------------------------------------------ proxima bench: --json, windows
def test_json_lines_carry_each_native_lines_train_x_gym(monkeypatch, capsys):
    """`proxima bench --json`: the native line's per-round ratios over Gymnasium's at its num_envs, the
    Gymnasium line's null (bench_lines stubbed: no Trainer is built)."""
    from tests.cli_helpers import run_main

    def fake_lines(args, backends, n):
        cfg = resolve("CartPole-v1")
        per = {"native": [100.0, 300.0, 250.0], "gymnasium": [50.0, 100.0, 160.0]}
        return [(bench.Line(b, n, samples={"train": per[b]}), cfg, "cpu") for b in backends]

    monkeypatch.setattr(bench, "bench_lines", fake_lines)
    code, out, err = run_main(["bench", "CartPole-v1", "--num-envs", "8", "--backend", "both", "--train-only",
                               "--repeats", "3", "--json"], capsys)
    assert code == 0, err
    docs = {d["backend"]: d for d in map(json.loads, out.splitlines())}
    assert docs["native"]["train_x_gym_rounds"] == [2.0, 3.0, 1.5625] and docs["native"]["train_x_gym"] == 2.0
    assert docs["gymnasium"]["train_x_gym_rounds"] is None and docs["gymnasium"]["train_x_gym"] is None
