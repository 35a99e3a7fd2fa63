"""Review 27: ``proxima bench`` keeps the preset's device and switches unless typed, and the
progress bar shows each iteration's own values, as '\\r' frames on a terminal and as plain lines
elsewhere."""

from __future__ import annotations

import io
import json
import re

import pytest
import torch

from proxima import bench
from proxima.cli import build_parser, main
from proxima import logger as run_logging
from proxima.logger import RunLogger

TINY = ["--backend", "native", "--train-only", "--repeats", "1", "--seconds", "0.02"]


# ------------------------------------------------------------------------------------ bench --preset
def test_bench_keeps_the_presets_device_and_switches_unless_typed(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args = build_parser().parse_args(["bench", "CartPole-v1", "--preset", "gpu"])
    cfg = bench.bench_config(args, "native", 256)
    assert (cfg.device, cfg.cudagraphs, cfg.compile, cfg.amp) == ("cuda", True, False, "none")
    args = build_parser().parse_args(["bench", "CartPole-v1", "--preset", "gpu", "--no-cudagraphs", "--amp", "bf16"])
    cfg = bench.bench_config(args, "native", 256)
    assert (cfg.device, cfg.cudagraphs, cfg.amp) == ("cuda", False, "bf16")  # typed flags win


def test_bench_preset_gpu_without_cuda_is_refused_as_train_refuses_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "bench.md"
    code = main(["bench", "CartPole-v1", "--preset", "gpu", "--num-envs", "16", *TINY, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err == ("proxima bench: error: --preset gpu needs CUDA, which is not usable here (run `proxima doctor`); "
                   "on a CPU use --preset fast\n")
    assert not out.exists()


@pytest.fixture
def built(monkeypatch) -> list:
    """The configs of every Trainer the bench builds (a Trainer subclass put in its place)."""
    import proxima.trainer

    configs = []

    class Spy(proxima.trainer.Trainer):
        def __init__(self, cfg, *a, **kw):
            configs.append(cfg)
            super().__init__(cfg, *a, **kw)

    monkeypatch.setattr(proxima.trainer, "Trainer", Spy)
    return configs


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_bench_preset_gpu_with_a_non_cuda_device_is_refused_as_train_refuses_it(device, built, monkeypatch, tmp_path,
                                                                                  capsys):
    # the preset's CUDA graphs are never turned off quietly: eager figures under a "--preset gpu" label
    # would pass for the graphed setting, and train refuses the same pair
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # --device auto resolves to the CPU
    refusal = (f"--preset gpu turns on --cudagraphs, which needs a CUDA device (got --device {device}); "
               "on a CPU use --preset fast, or add --no-cudagraphs\n")
    out = tmp_path / "bench.md"
    code = main(["bench", "CartPole-v1", "--preset", "gpu", "--device", device, "--num-envs", "16", *TINY,
                 "--json", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err == "proxima bench: error: " + refusal
    assert captured.out == "" and not out.exists() and not built
    assert main(["train", "CartPole-v1", "--preset", "gpu", "--device", device, "--dry-run"]) == 2
    assert capsys.readouterr().err == "proxima train: error: " + refusal  # the same words as train


def test_bench_preset_gpu_on_a_cpu_with_no_cudagraphs_typed_measures_eager_and_says_so(built, tmp_path, capsys):
    out = tmp_path / "bench.md"
    code = main(["bench", "CartPole-v1", "--preset", "gpu", "--device", "cpu", "--no-cudagraphs", "--num-envs", "16",
                 *TINY, "--json", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0
    (ran,) = built
    assert (str(ran.device), ran.cudagraphs, ran.num_steps) == ("cpu", False, 16)  # the typed device; the preset's T
    assert "note:" not in captured.err
    (row,) = [json.loads(r) for r in captured.out.splitlines()]
    assert (row["preset"], row["device"], row["cudagraphs"], row["cudagraphs_live"]) == ("gpu", "cpu", False, None)
    text = out.read_text()
    (settings,) = [r for r in text.splitlines() if r.startswith("- preset `gpu`: ")]
    assert f"T = {ran.num_steps} steps" in settings and "cudagraphs False," in settings
    assert f"compile {ran.compile}," in settings and f"amp {ran.amp}," in settings
    assert "--device cpu " in text and " --preset gpu --no-cudagraphs " in text  # the command reproduces what ran
    assert "--cudagraphs: only train replays" not in text


def test_bench_typed_cudagraphs_on_a_cpu_is_one_line_before_measuring(tmp_path, capsys):
    out = tmp_path / "bench.md"
    code = main(["bench", "CartPole-v1", "--preset", "gpu", "--device", "cpu", "--cudagraphs", "--num-envs", "16", *TINY,
                 "--out", str(out)])
    assert code == 2
    assert capsys.readouterr().err == "proxima bench: error: --cudagraphs needs a CUDA device (got --device cpu)\n"
    assert not out.exists()


# ------------------------------------------------------------------------------------ progress bar
class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def log_steps(logger, steps):
    for i, step in enumerate(steps, 1):
        logger.log(i, step, {"charts/SPS": float(step), "charts/episodic_return": float(i)})


def test_each_bar_frame_shows_its_own_iterations_values(monkeypatch, tmp_path):
    stream = Terminal()
    monkeypatch.setattr("sys.stderr", stream)
    logger = RunLogger(tmp_path, total_steps=200, progress=True)
    from tqdm import tqdm

    assert isinstance(logger.bar, tqdm)  # a terminal keeps tqdm's bar
    logger.bar.mininterval, logger.bar.miniters, logger.bar.dynamic_miniters = 0, 0, False  # a frame per update
    try:
        log_steps(logger, range(20, 201, 20))
    finally:
        logger.close()
    frames = [f for f in stream.getvalue().split("\r") if "SPS" in f]
    shown = [(float(re.search(r"([\d.]+)/200", f).group(1)), int(re.search(r"SPS (\d+)", f).group(1)),
              float(re.search(r"return ([\d.]+)", f).group(1))) for f in frames]
    assert len(shown) >= 10
    assert all(step == sps == 20 * ret for step, sps, ret in shown), shown
    assert shown[-1] == (200.0, 200, 10.0)


def test_without_a_terminal_progress_is_plain_lines_at_an_interval(monkeypatch, tmp_path):
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setattr("proxima.logger.LINE_SECONDS", 0.0)  # a line per update
    logger = RunLogger(tmp_path, total_steps=200, progress=True)
    assert isinstance(logger.bar, run_logging.LineProgress)
    try:
        log_steps(logger, range(20, 201, 20))
    finally:
        logger.close()
    text = stream.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert len(lines) == 10
    for i, line in enumerate(lines, 1):
        assert re.fullmatch(rf"step {20 * i}/200 \({10 * i}%\) 0:00:0\d \| SPS {20 * i} \| return {i}\.0", line), line


def test_line_progress_shows_the_first_step_waits_its_interval_and_ends_with_the_last_step(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("proxima.logger.time.monotonic", lambda: clock[0])
    stream = io.StringIO()
    bar = run_logging.LineProgress(1000, 0, stream, interval=30.0)
    for step in range(100, 701, 100):  # 10 s apart: a line at the first update, then 30 s after it
        clock[0] += 10.0
        bar.set_postfix_str(f"SPS {step}", refresh=False)
        bar.update(100)
    bar.close()  # stopped early at 700: its last step still gets a line
    assert stream.getvalue() == ("step 100/1,000 (10%) 0:00:10 | SPS 100\n"  # a job's log says at once that it trains
                                 "step 400/1,000 (40%) 0:00:40 | SPS 400\n"
                                 "step 700/1,000 (70%) 0:01:10 | SPS 700\n")


def test_a_training_run_into_a_file_writes_lines_not_frames(tmp_path, capsys):
    code = main(["train", "CartPole-v1", "--total-timesteps", "1024", "--num-envs", "4", "--num-steps", "128",
                 "--eval-episodes", "0", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 0
    assert "\r" not in err
    first, last = [row for row in err.split("\n") if row.startswith("step ")]  # a short run: the first and final lines
    assert first.startswith("step 512/1,024 (50%) ")
    assert re.fullmatch(r"step 1,024/1,024 \(100%\) \d:\d\d:\d\d \| SPS [\d,]+ \(run average\) \| return \(\d+ ep\) (-|[\d.]+)", last), last


def test_a_jupyter_cell_keeps_tqdms_bar(monkeypatch, tmp_path):
    # ipykernel's OutStream says it is no tty, yet the notebook draws '\r' frames in place: the quickstart
    # notebook keeps its live bar rather than a line every LINE_SECONDS
    cell = type("OutStream", (io.StringIO,), {"__module__": "ipykernel.iostream", "isatty": lambda self: False})()
    monkeypatch.setattr("sys.stderr", cell)
    logger = RunLogger(tmp_path, total_steps=200, progress=True)
    from tqdm import tqdm

    try:
        assert isinstance(logger.bar, tqdm)
    finally:
        logger.close()
