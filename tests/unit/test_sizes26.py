"""Resource sizes a reviewer reproduced: a metrics.csv read into ~26x its size (a 60 MB file of
1000 columns drove ``proxima plot`` to 1.8 GB), and ``--vector async`` forking one process per env
with no bound (``num_envs: 100000`` passed ``train --dry-run``)."""

from __future__ import annotations

import resource
import tracemalloc

import pytest
import torch

from proxima import logger, sizing
from proxima.config import ConfigError, PPOConfig
from proxima.plot import PlotError, read_metrics

from tests.cli_helpers import one_error_line, run_main


def _wide_csv(path, columns: int, rows: int) -> None:
    header = ["iteration", "global_step", "charts/episodic_return"] + [f"extra/c{i}" for i in range(columns - 3)]
    with open(path, "w") as f:
        f.write(",".join(header) + "\n")
        for r in range(rows):
            f.write(f"{r},{r * 10}," + ",".join(["10"] * (columns - 2)) + "\n")


# ------------------------------------------------------------------ metrics.csv: a header too wide
def test_a_header_of_1000_columns_is_refused_in_one_short_line(tmp_path):
    _wide_csv(tmp_path / "metrics.csv", 1000, 5)
    with pytest.raises(PlotError) as e:
        read_metrics(tmp_path)
    line = str(e.value)
    assert "\n" not in line and len(line) < 400, line  # not 999 names
    assert str(tmp_path / "metrics.csv") in line and "1,000 columns" in line and "and 997 more" in line, line
    assert f"more than the {logger.MAX_CSV_COLUMNS}" in line, line


def test_plot_of_a_1000_column_file_exits_2_with_one_line(tmp_path, capsys):
    _wide_csv(tmp_path / "metrics.csv", 1000, 5)
    code, _, err = run_main(["plot", str(tmp_path), "--out", str(tmp_path / "c.png")], capsys)
    assert code == 2, err
    assert "1,000 columns" in one_error_line(err, "proxima plot")
    assert not (tmp_path / "c.png").exists()


def test_the_columns_a_run_logs_stay_under_the_cap():
    assert len(logger.CSV_COLUMNS) <= logger.MAX_CSV_COLUMNS // 8


def test_a_header_at_the_cap_is_read(tmp_path):
    _wide_csv(tmp_path / "metrics.csv", logger.MAX_CSV_COLUMNS, 3)
    cols = read_metrics(tmp_path)
    assert len(cols) == logger.MAX_CSV_COLUMNS and cols["extra/c0"].tolist() == [10.0] * 3


# ------------------------------------------------------------------ metrics.csv: rows kept compactly
def test_a_large_metrics_csv_is_read_in_a_few_times_its_size(tmp_path, monkeypatch):
    """2 MB of 200-column rows of `10` (the reviewer's file, narrower), read as a file past the
    list threshold is: the lists of str took ~26x the file, the compact rows ~3x."""
    from proxima import rundir

    monkeypatch.setattr(logger, "_LIST_BYTES", 0, raising=False)
    # read_run_bytes asks read() for its cap, 2 GiB that tracemalloc counts though no page of it is touched
    monkeypatch.setattr(rundir, "read_run_bytes", lambda p, limit: open(p, "rb").read())
    path = tmp_path / "metrics.csv"
    _wide_csv(path, 200, 3500)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        lines, bad = logger.read_csv_lines(path)
        header, rows, skipped = logger.whole_rows(lines, bad)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * size, f"peak {peak:,} bytes reading a {size:,}-byte file ({peak / size:.1f}x)"
    assert len(rows) == 3500 and not skipped and not bad and len(header) == 200
    n, r = rows[-1]
    assert n == 3501 and len(r) == 200 and r[0] == "3499" and r[1] == "34990" and r[-1] == "10" and list(r)[5] == "10"
    with pytest.raises(IndexError):
        r[200]


def test_compact_rows_read_as_lists_do(tmp_path, monkeypatch):
    """The same cells, bad lines and whole rows either way: quotes, \\r line ends, bytes that are not
    UTF-8, a field over the csv module's limit, a last row cut short."""
    path = tmp_path / "metrics.csv"
    path.write_bytes(b'step,a,b\r\n1,2,3\n\n2,"x,y",3\r3,\xff,4\n4,' + b"9" * 200_000 + b",5\n5,6,7,8\n6,1,2\n7,1")
    monkeypatch.setattr(logger, "_LIST_BYTES", 1 << 30, raising=False)
    as_lists = logger.read_csv_lines(path)
    monkeypatch.setattr(logger, "_LIST_BYTES", 0, raising=False)
    compact = logger.read_csv_lines(path)
    assert [(n, list(c)) for n, c in compact[0]] == [(n, list(c)) for n, c in as_lists[0]] == [
        (1, ["step", "a", "b"]), (2, ["1", "2", "3"]), (4, ["2", "x,y", "3"]), (7, ["5", "6", "7", "8"]),
        (8, ["6", "1", "2"]), (9, ["7", "1"])]
    assert compact[1] == as_lists[1] and [b.line for b in compact[1]] == [5, 6]
    assert compact[1][1].why == "not CSV: field larger than field limit (131072)"
    header, rows, skipped = logger.whole_rows(*compact)
    assert header == ["step", "a", "b"] and [n for n, _ in rows] == [2, 4, 8] and sorted(skipped) == [5, 6, 7]


# ------------------------------------------------------------------ --vector async: a process per env
def _cfg(**kw) -> PPOConfig:
    return PPOConfig(**{"env_id": "Pendulum-v1", "backend": "gymnasium", "vector": "async", "num_steps": 8, **kw})


def _gym_sizes():
    return sizing.EnvSizes(3, 1, False)


def _limits(monkeypatch, nproc: int) -> None:
    real = resource.getrlimit
    monkeypatch.setattr(resource, "getrlimit",
                        lambda which: (nproc, nproc) if which == resource.RLIMIT_NPROC else real(which))


def test_async_envs_past_the_process_limit_are_refused(monkeypatch):
    monkeypatch.setattr(sizing, "free_memory", lambda device: 1 << 40)
    _limits(monkeypatch, 4096)
    with pytest.raises(ConfigError) as e:
        sizing.check_fits(_cfg(num_envs=5000), torch.device("cpu"), _gym_sizes)
    line = str(e.value)
    assert "\n" not in line and "--num-envs 5000" in line and "--vector async" in line, line
    assert "4,096" in line and "ulimit -u" in line and "--vector sync" in line, line


def test_async_envs_past_the_free_memory_are_refused(monkeypatch):
    monkeypatch.setattr(sizing, "free_memory", lambda device: 8 << 30)
    _limits(monkeypatch, 1 << 20)
    with pytest.raises(ConfigError) as e:
        sizing.check_fits(_cfg(num_envs=4000), torch.device("cpu"), _gym_sizes)
    line = str(e.value)
    assert "\n" not in line and "--num-envs 4000" in line and "--vector async" in line, line
    assert "4,000 processes" in line and "8.0 GiB free" in line and "--vector sync" in line, line


def test_async_workers_count_host_memory_on_cuda_too(monkeypatch):
    """The workers are CPU processes: a GPU with room for the buffers does not make room for them."""
    monkeypatch.setattr(sizing, "free_memory", lambda device: (80 << 30) if device.type == "cuda" else (8 << 30))
    _limits(monkeypatch, 1 << 20)
    with pytest.raises(ConfigError, match="--vector async"):
        sizing.check_fits(_cfg(num_envs=4000), torch.device("cuda"), _gym_sizes)


def test_sync_native_and_running_workers_are_not_counted(monkeypatch):
    monkeypatch.setattr(sizing, "free_memory", lambda device: 8 << 30)
    _limits(monkeypatch, 1 << 20)
    sizing.check_fits(_cfg(num_envs=4000, vector="sync"), torch.device("cpu"), _gym_sizes)
    sizing.check_fits(_cfg(num_envs=4000), torch.device("cpu"), lambda: sizing.EnvSizes(3, 1, True))  # no workers
    assert sizing.async_workers(_cfg(num_envs=10, backend="auto", env_id="CartPole-v1")) == 0  # the native CartPole

    class Alive:
        def is_alive(self):
            return True

    class Env:  # the Trainer's env, sized after it forked its workers: free memory has them already
        obs_shape, backend, env_id = (3,), "gymnasium", "Pendulum-v1"

    import gymnasium as gym

    env = Env()
    env.single_observation_space = gym.spaces.Box(-1, 1, (3,))
    env.single_action_space = gym.spaces.Box(-1, 1, (1,))
    env.envs = type("Vec", (), {"processes": [Alive()] * 4000})()
    sizing.check_fits(_cfg(num_envs=4000), torch.device("cpu"), lambda: sizing.env_sizes(env, "Pendulum-v1"))


def test_train_dry_run_refuses_100000_async_envs(tmp_path, capsys):
    cfg = tmp_path / "async.yaml"
    cfg.write_text("env_id: Pendulum-v1\nbackend: gymnasium\nvector: async\nnum_envs: 100000\ntotal_timesteps: 100000000\n")
    code, out, err = run_main(["train", "--config", str(cfg), "--dry-run"], capsys)
    assert code == 2, err
    line = one_error_line(err, "proxima train")
    assert "async.yaml: num_envs 100000" in line and "--vector async" in line and "--vector sync" in line, line
