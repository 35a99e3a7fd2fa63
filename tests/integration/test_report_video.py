"""`proxima report` and `proxima eval --video` on the cases a review found wrong: population flags,
null eval.json fields, a run still training, per-metric wording, the video's frames (the terminal
state, no renders past env 0's episode), video suffixes, a missing pygame; plus ppo.update's batch
check and compute_gae's dtype."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import socket
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import proxima
from proxima.cli import main
from proxima.evaluate import evaluate

STEPS = 1024
TRAIN = ["--total-timesteps", str(STEPS), "--num-envs", "4", "--num-steps", "128", "--eval-episodes", "2",
         "--no-progress", "--quiet", "--threads", "1"]
HAS_FFMPEG = importlib.util.find_spec("imageio_ffmpeg") is not None


def run_cli(argv, capsys):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def one_error(code, err, prog: str) -> str:
    """The single error line of a refused command (exit 2, no traceback)."""
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"proxima {prog}: error: "), err
    return lines[0][len(f"proxima {prog}: error: "):]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs") / "cp"
    assert main(["train", "CartPole-v1", *TRAIN, "--seed", "1", "--run-dir", str(d)]) == 0
    return d


@pytest.fixture(scope="module")
def pop_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("pops") / "pop"
    assert main(["train", "CartPole-v1", *TRAIN, "--seeds", "1-2", "--run-dir", str(d)]) == 0
    return d


@pytest.fixture
def fresh_run(run_dir, tmp_path):
    """A copy of the trained run without report outputs."""
    d = tmp_path / "run"
    shutil.copytree(run_dir, d, ignore=shutil.ignore_patterns("report.md", "curve.png", "*_curve.png"))
    return d


def files(d: Path) -> set:
    return {p.name for p in d.iterdir()}


# ------------------------------------------------------------------------------------ report: populations
def test_population_report_unknown_metric_exits_2_and_writes_nothing(pop_dir, capsys):
    before = files(pop_dir)
    code, out, err = run_cli(["report", pop_dir, "--metric", "nonsense", "--x", "time", "--smooth", "5"], capsys)
    line = one_error(code, err, "report")  # the members share one logger's columns: the first member's file is named
    assert line.startswith(f"unknown metric 'nonsense' in {pop_dir}/m000-seed1/metrics.csv; available: iteration, global_step"), line
    assert out == "" and files(pop_dir) == before


def test_population_report_draws_the_asked_metric_x_and_smoothing(pop_dir, tmp_path, capsys, monkeypatch):
    import proxima.plot as plot
    import proxima.report as report

    drawn = []
    real = plot.plot_runs
    spy = lambda dirs, out, **kw: (drawn.append(kw), real(dirs, out, **kw))[1]  # noqa: E731
    monkeypatch.setattr(plot, "plot_runs", spy)  # population_report's import
    monkeypatch.setattr(report, "plot_runs", spy)
    code, out, _ = run_cli(["report", pop_dir, "--metric", "value_loss", "--x", "time", "--smooth", "2",
                            "--out", tmp_path / "pop.md"], capsys)
    assert code == 0 and out == f"wrote {tmp_path / 'pop.md'}\n"
    assert (tmp_path / "pop_curve.png").is_file()
    assert drawn[-1] == {"metric": "value_loss", "x": "time", "smooth": 2, "quiet": False}  # the last drawn; the CLI says its notes


def test_report_of_a_population_and_a_run_says_report_the_population_alone(pop_dir, run_dir, tmp_path, capsys):
    code, _, err = run_cli(["report", pop_dir, run_dir, "--out", tmp_path / "mix.md"], capsys)
    assert one_error(code, err, "report") == (f"{pop_dir}: a population (population.json), not a single run; "
                                              f"report it alone (proxima report {pop_dir}) or beside other "
                                              f"populations (proxima report {pop_dir} POP2 --out FILE.md), not beside "
                                              "single runs")
    assert not any(tmp_path.iterdir())


def test_threshold_on_a_single_run_is_refused(fresh_run, capsys):
    before = files(fresh_run)
    code, _, err = run_cli(["report", fresh_run, "--threshold", "100"], capsys)
    assert one_error(code, err, "report") == "--threshold 100: applies to a population (train --seeds/--sweep) alone, not to single runs"
    assert files(fresh_run) == before


# ------------------------------------------------------------------------------------ report: single runs
@pytest.mark.parametrize("field", ["std_return", "episodes", "mean_return", "returns"])
def test_null_eval_field_is_one_line_and_no_file(fresh_run, field, capsys):
    saved = json.loads((fresh_run / "eval.json").read_text())
    saved[field] = None
    (fresh_run / "eval.json").write_text(json.dumps(saved))
    before = files(fresh_run)
    code, out, err = run_cli(["report", fresh_run], capsys)
    assert one_error(code, err, "report").startswith(f"{fresh_run / 'eval.json'}: {field} is not ")
    assert err.rstrip().endswith("(null)")
    assert out == "" and files(fresh_run) == before  # no curve.png, no report.md


def test_loss_metric_shows_max_and_min_not_best_and_no_episode_footnote(fresh_run, capsys):
    code, _, _ = run_cli(["report", fresh_run, "--metric", "value_loss"], capsys)
    text = (fresh_run / "report.md").read_text()
    assert code == 0
    assert "| max losses/value_loss |" in text and "| min losses/value_loss |" in text
    assert "best losses/value_loss" not in text and "episodes that finished" not in text
    assert "losses/value_loss: one value per iteration, as logged in metrics.csv." in text
    import csv

    rows = list(csv.DictReader(open(fresh_run / "metrics.csv")))
    lowest = min(rows, key=lambda r: float(r["losses/value_loss"]))
    assert f"| min losses/value_loss | {float(lowest['losses/value_loss']):.2f} at step {int(lowest['global_step']):,} |" in text


def test_return_metric_keeps_best_and_the_episode_footnote(fresh_run, capsys):
    code, _, _ = run_cli(["report", fresh_run], capsys)
    text = (fresh_run / "report.md").read_text()
    # a run that logs charts/episodic_return_100 (issue 39) is summarized by its rolling return, a return too: "best"
    assert code == 0 and "| best charts/episodic_return_100 |" in text and "max charts/episodic_return" not in text
    # the curve is the rolling return too (the default since session 44): no per-iteration footnote of its own
    assert "the mean over the episodes that finished in that iteration" not in text
    assert "fewest most recent iterations that hold at least 100" in text


def test_empty_env_kwargs_shows_as_braces(fresh_run, capsys):
    assert run_cli(["report", fresh_run], capsys)[0] == 0
    assert "| env_kwargs | {} |" in (fresh_run / "report.md").read_text()


def test_report_of_a_run_in_training_says_in_progress(fresh_run, capsys):
    shutil.rmtree(fresh_run / "checkpoints")
    (fresh_run / "eval.json").unlink()
    lock = {"pid": os.getpid(), "host": socket.gethostname(), "since": "2030-01-02T03:04:05"}
    (fresh_run / ".proxima.lock").write_text(json.dumps(lock))
    code, _, _ = run_cli(["report", fresh_run, "--episodes", "1"], capsys)
    text = (fresh_run / "report.md").read_text()
    assert code == 0
    assert (f"- could not evaluate: the run is in progress (locked by pid {os.getpid()} since 2030-01-02T03:04:05) "
            "and has no checkpoint yet") in text
    assert "not a Proxima run directory" not in text


def test_report_and_plot_out_under_a_file_name_the_parent(fresh_run, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    code, _, err = run_cli(["plot", fresh_run, "--out", tmp_path / "afile" / "c.png"], capsys)
    assert one_error(code, err, "plot") == f"--out {tmp_path / 'afile' / 'c.png'}: {tmp_path / 'afile'} is a file, not a folder"
    before = files(fresh_run)
    code, _, err = run_cli(["report", fresh_run, "--out", tmp_path / "afile" / "r.md"], capsys)
    assert one_error(code, err, "report") == f"--out {tmp_path / 'afile' / 'r.md'}: {tmp_path / 'afile'} is a file, not a folder"
    assert files(fresh_run) == before


# ------------------------------------------------------------------------------------ eval --video
def _spy_cartpole(monkeypatch):
    """Log the (x, theta) of every CartPole.render(0) call."""
    from proxima.envs import classic

    states = []
    real = classic.CartPole.render

    def spy(self, index=0):
        x, _, th, _ = self._host_row("s", index)
        states.append((float(x), float(th)))
        return real(self, index)

    monkeypatch.setattr(classic.CartPole, "render", spy)
    return states


def _captured_frames(monkeypatch):
    import proxima.video as video

    got = []
    monkeypatch.setattr(video, "write_video", lambda frames, path, fps=30.0: (got.append(list(frames)), str(path))[1])
    return got


def test_native_video_has_the_terminal_frame_and_stops_rendering_after_env0(run_dir, tmp_path, monkeypatch):
    states, got = _spy_cartpole(monkeypatch), _captured_frames(monkeypatch)
    policy = proxima.load(run_dir)
    res = evaluate(policy, episodes=3, seed=1_000_001, video=str(tmp_path / "v.mp4"))
    length = res["lengths"][0]
    assert len(got[0]) == length + 1  # s0 .. sL, as gymnasium's RecordVideo
    assert len(states) == length + 1  # no env.render once env 0's episode is over
    if length < 500:  # terminated: the last frame is the state that ended the episode
        x, th = states[-1]
        assert abs(th) > 12 * 2 * math.pi / 360 or abs(x) > 2.4
    assert max(res["lengths"]) > length or len(set(res["lengths"])) == 1  # env 0 is not the longest: the case tested
    for i, (x, th) in enumerate(states[:-1]):  # every frame before the last one is of a running episode
        assert abs(th) <= 12 * 2 * math.pi / 360 and abs(x) <= 2.4, i


class _CountingEnv:
    """A non-native env of 2 rows: row i's episode ends after lengths[i] steps; render(0) returns a
    frame holding env 0's step count (a backend that autoresets inside step, like Gymnasium's)."""

    device = torch.device("cpu")

    def __init__(self, lengths):
        self.lengths, self.t, self.renders = lengths, 0, 0

    def render(self, index=0):
        self.renders += 1
        return np.full((4, 4, 3), self.t, dtype=np.uint8)

    def step(self, action):
        self.t += 1
        done = torch.tensor([self.t == n for n in self.lengths])
        return torch.zeros(2, 1), torch.ones(2), done, torch.zeros(2, dtype=torch.bool), {}


def test_autoreset_backend_video_is_s0_to_before_last_and_stops_rendering():
    from proxima.evaluate import FrameRecorder, first_episodes

    env = _CountingEnv([3, 7])
    rec = FrameRecorder(env, "Counting-v0", "v.mp4")
    _, lengths, _ = first_episodes(env, torch.zeros(2, 1), lambda o: torch.zeros(2), 100, before_step=rec.before_step)
    assert lengths.tolist() == [3, 7]
    assert [int(f[0, 0, 0]) for f in rec.frames] == [0, 1, 2]  # s0..s(L-1): the final state is reset already
    assert env.renders == 3  # none while env 1 finishes its episode


@pytest.mark.skipif(not HAS_FFMPEG, reason="needs imageio-ffmpeg")
@pytest.mark.parametrize("suffix", [".mp4", ".webm"])
def test_video_file_holds_episode_plus_one_frames(run_dir, tmp_path, suffix, capsys):
    import imageio_ffmpeg

    video = tmp_path / f"ep{suffix}"
    code, out, err = run_cli(["eval", run_dir, "--episodes", "1", "--json", "--video", video], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["video"] == str(video) and video.is_file()
    assert imageio_ffmpeg.count_frames_and_secs(str(video))[0] == result["lengths"][0] + 1


def test_unsupported_video_suffix_is_refused_before_evaluating(run_dir, tmp_path, capsys, monkeypatch):
    import proxima.evaluate as ev

    monkeypatch.setattr(ev, "make_env", lambda *a, **k: pytest.fail("evaluated before checking --video"))
    code, out, err = run_cli(["eval", run_dir, "--episodes", "1", "--video", tmp_path / "v.txt"], capsys)
    assert one_error(code, err, "eval") == (f"--video {tmp_path / 'v.txt'}: unsupported video type '.txt'; "
                                            "use .mp4, .mov, .mkv, .webm, .gif")
    assert out == "" and not any(tmp_path.iterdir())


def test_video_under_a_file_is_refused_before_evaluating(run_dir, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    code, _, err = run_cli(["eval", run_dir, "--episodes", "1", "--video", tmp_path / "afile" / "v.mp4"], capsys)
    assert one_error(code, err, "eval") == f"--video {tmp_path / 'afile' / 'v.mp4'}: {tmp_path / 'afile'} is a file, not a folder"


@pytest.mark.skipif(importlib.util.find_spec("pygame") is not None, reason="pygame is installed")
def test_gymnasium_video_without_pygame_names_pygame(run_dir, tmp_path, capsys):
    video = tmp_path / "g.mp4"
    code, out, err = run_cli(["eval", run_dir, "--episodes", "1", "--backend", "gymnasium", "--video", video], capsys)
    from proxima.config import install_hint  # the video extra's, not Gymnasium's bare pip (review 49)

    assert one_error(code, err, "eval") == (f"--video {video}: env 'CartPole-v1' cannot render: pygame is not installed; "
                                            f"the video extra has it: {install_hint('video')}; evaluate without --video")
    assert out == "" and not video.exists()


# ------------------------------------------------------------------------------------ ppo.update, compute_gae
def _update(rows: int, num_minibatches: int = 4):
    from proxima.ppo import update

    sizes = []
    cfg = SimpleNamespace(num_minibatches=num_minibatches, update_epochs=1, target_kl=None)
    batch = {"obs": torch.zeros(rows, 2), "advantages": torch.zeros(rows)}
    update(None, None, batch, cfg, grad_step=lambda mb: (sizes.append(mb["obs"].shape[0]), {"loss": torch.zeros(())})[1])
    return sizes


def test_update_runs_num_minibatches_equal_minibatches():
    assert _update(8) == [2, 2, 2, 2]


@pytest.mark.parametrize("rows", [10, 3])
def test_update_refuses_a_batch_num_minibatches_does_not_divide(rows):
    with pytest.raises(ValueError, match=rf"^update: a batch of {rows} rows does not split into num_minibatches=4 equal"):
        _update(rows)


def test_compute_gae_keeps_float64():
    from proxima.ppo import compute_gae

    z = torch.zeros(3, 2, dtype=torch.float64)
    adv, ret = compute_gae(z + 1, z, z, z.bool(), z.bool(), 0.99, 0.95)
    assert adv.dtype == ret.dtype == torch.float64
