"""Mutation gaps of review 46: plot's one-panel-per-env layout (the order runs are given in, a folder's
by value of a number that differs (not a bool, not a NaN, the first field first, its populations
kept), --label in a per-env panel, the band said once in a several-settings panel's legend title and
as its swatch in a one-setting panel, legend entries wrapped and cut at six lines, populations
sharing the y-axis of their env's plain runs, collect_panels refusing an unknown layout) and eval
--video's ffmpeg probe (the default timeout, a binary killed by a signal, its last stderr line cut
to 120 characters, a listing without video encoders, a path Python refuses, no imageio without the
binary), the encoder refusal's alternative, describe() with a bytes filename and a relative path,
doctor's refused/gif rows, and evaluate(video='~/...') naming the argument as given."""

from __future__ import annotations

import csv
import errno
import importlib.util
import json
import os
import time
from pathlib import Path

import pytest

from cli_helpers import fake_run_dir
from proxima import doctor, video
from proxima.cli import main
from proxima.config import extra_install
from proxima.diskspace import describe
from proxima.logger import CSV_COLUMNS

# ==================================================================================== plot
mpl = pytest.importorskip("matplotlib")


from tests.unit.test_plot46 import _axes, _labels, _legend  # noqa: E402  (after importorskip)


def _plot(args, out, drawn) -> list:
    assert main(["plot", *map(str, args), "--out", str(out), "--metric", "charts/episodic_return"]) == 0
    return _axes(drawn[-1])


def _population(run: Path, lrs=(0.001, 0.0003), returns=(50.0, 60.0)) -> Path:
    """A population of one member per lr, logged at steps 100 and 200."""
    entries = []
    for i, lr in enumerate(lrs):
        name = f"m{i:03d}-seed1-lr{lr}"
        (run / name).mkdir(parents=True)
        (run / name / "config.yaml").write_text(f"env_id: Fake-v0\nseed: 1\nlr: {lr}\n")
        with open(run / name / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            w.writeheader()
            for k, r in enumerate(returns, 1):
                w.writerow({"iteration": k, "global_step": 100 * k, "time": 0.1 * k, "episodes": 1,
                            "charts/episodic_return": r, "charts/episodic_return_100": r})
        entries.append({"dir": name, "seed": 1, "settings": {"lr": lr}})
    (run / "population.json").write_text(json.dumps({"kind": "ppo-population", "env_id": "Fake-v0", "members": len(lrs),
                                                     "seeds": [1], "member_dirs": entries}))
    return run


def test_per_env_curves_keep_the_command_line_order_not_their_labels_order(tmp_path, drawn):
    big = fake_run_dir(tmp_path, "big", lr=0.01)
    small = fake_run_dir(tmp_path, "small", returns=(3.0, 4.0), lr=0.001)
    (ax,) = _plot([big, small], tmp_path / "o.png", drawn)
    assert _labels(ax) == ["lr=0.01", "lr=0.001"]  # as given, though "lr=0.001" sorts first
    assert [list(ln.get_ydata()) for ln in ax.get_lines()] == [[1.0, 2.0], [3.0, 4.0]]


def test_a_label_names_its_curve_in_a_per_env_panel_in_place_of_the_setting(tmp_path, drawn):
    a = fake_run_dir(tmp_path, "a", lr=0.01)
    b = fake_run_dir(tmp_path, "b", lr=0.001)
    (ax,) = _plot([a, b, "--label", f"{a}=fast"], tmp_path / "o.png", drawn)
    assert _labels(ax) == ["fast", "lr=0.001"]


def test_one_setting_of_seeds_keeps_its_band_swatch_and_no_legend_title(tmp_path, drawn):
    a = fake_run_dir(tmp_path, "a", lr=0.01)
    b = fake_run_dir(tmp_path, "b", returns=(3.0, 4.0), lr=0.01, seed=2)
    (ax,) = _plot([a, b], tmp_path / "o.png", drawn)
    assert ax.get_title() == "Fake-v0"
    title, entries = _legend(ax)
    # one setting: its band's swatch is that setting's, so it is an entry of its own
    assert title == "" and entries == ["mean of 2 runs", "min-max over runs"]


def test_two_settings_of_seeds_say_their_band_once_in_the_title_and_no_swatch(tmp_path, drawn):
    runs = [fake_run_dir(tmp_path, name, returns=r, lr=lr, seed=seed)
            for name, r, lr, seed in (("a1", (1.0, 2.0), 0.01, 1), ("a2", (3.0, 4.0), 0.01, 2),
                                      ("b1", (5.0, 6.0), 0.001, 1), ("b2", (7.0, 8.0), 0.001, 2))]
    (ax,) = _plot(runs, tmp_path / "o.png", drawn)
    title, entries = _legend(ax)
    assert title == "shaded: min-max over runs"  # said once, not once per setting
    assert entries == ["lr=0.01: mean of 2 runs", "lr=0.001: mean of 2 runs"]
    bands = sorted((p.get_paths()[0].vertices[:, 1].min(), p.get_paths()[0].vertices[:, 1].max()) for p in ax.collections)
    assert bands == [(1.0, 4.0), (5.0, 8.0)]


def test_per_setting_panels_of_one_setting_are_titled_with_the_env_alone(tmp_path, drawn):
    from proxima.plot import group_runs

    a = fake_run_dir(tmp_path, "a", lr=0.01)
    b = fake_run_dir(tmp_path, "b", returns=(3.0, 4.0), lr=0.01, seed=2)
    c = fake_run_dir(tmp_path, "c", lr=0.01, env_id="Other-v0")
    assert group_runs([a, b, c]) == {"Fake-v0": [a, b], "Other-v0": [c]}
    axes = _plot([a, b, c, "--panels", "per-setting"], tmp_path / "o.png", drawn)
    assert [ax.get_title() for ax in axes] == ["Fake-v0", "Other-v0"]


def test_a_very_long_setting_label_is_cut_at_six_lines_ending_in_dots(tmp_path, drawn):
    # three fields of some 300 characters each: each short enough to be shown whole, together 11 lines
    long = {f"option_{i:02d}": "x" * 20 for i in range(9)}
    runs = [fake_run_dir(tmp_path, "a", env_kwargs={}, activation="tanh", encoder="mlp"),
            fake_run_dir(tmp_path, "b", env_kwargs=long, activation="a" * 300, encoder="e" * 300)]
    (ax,) = _plot(runs, tmp_path / "o.png", drawn)
    lines = _legend(ax)[1][1].splitlines()
    assert len(lines) == 6 and lines[-1].endswith("...") and "..." not in "".join(lines[:-1])
    assert all(len(line) <= 90 for line in lines)
    assert lines[0].startswith("env_kwargs={'option_00': 'xxxxxxxxxxxxxxxxxxxx',")


def test_a_label_of_150_characters_is_two_legend_lines(tmp_path, drawn):
    runs = [fake_run_dir(tmp_path, "a", env_kwargs={"k": 1}),
            fake_run_dir(tmp_path, "b", env_kwargs={f"o{i}": "y" * 10 for i in range(6)})]
    (ax,) = _plot(runs, tmp_path / "o.png", drawn)
    text = "env_kwargs={" + ", ".join(f"'o{i}': '{'y' * 10}'" for i in range(6)) + "}"
    assert 90 < len(text) <= 170
    entry = _legend(ax)[1][1]
    assert len(entry.splitlines()) == 2 and entry.replace("\n", " ") == text
    assert len(entry.splitlines()[0]) > 70  # filled to the width, not cut at each field


def test_a_folder_orders_by_the_first_numeric_field_that_differs(tmp_path, drawn):
    for name, lr, n in (("a", 0.001, 8), ("b", 0.01, 4), ("c", 0.0001, 16)):
        fake_run_dir(tmp_path / "sweep", name, lr=lr, num_envs=n)
    (ax,) = _plot([tmp_path / "sweep"], tmp_path / "o.png", drawn)
    assert _labels(ax) == ["lr=0.0001, num_envs=16", "lr=0.001, num_envs=8", "lr=0.01, num_envs=4"]


def test_a_folder_whose_runs_differ_in_a_number_and_a_word_orders_by_the_number(tmp_path, drawn):
    fake_run_dir(tmp_path / "sweep", "a", lr=0.01, activation="tanh", target_kl=None)
    fake_run_dir(tmp_path / "sweep", "b", lr=0.001, activation="relu", target_kl=0.02)
    fake_run_dir(tmp_path / "sweep", "c", lr=0.003)  # neither field at all
    (ax,) = _plot([tmp_path / "sweep"], tmp_path / "o.png", drawn)
    # target_kl is a number in one run only: no order of its own (and no crash on null)
    assert _labels(ax) == ["lr=0.001, activation=relu, target_kl=0.02", "lr=0.003, activation=(unset), target_kl=(unset)",
                           "lr=0.01, activation=tanh, target_kl=none"]


def test_a_folder_whose_runs_differ_in_a_switch_keeps_name_order(tmp_path, drawn):
    fake_run_dir(tmp_path / "sweep", "a_on", norm_adv=True)
    fake_run_dir(tmp_path / "sweep", "b_off", norm_adv=False)
    (ax,) = _plot([tmp_path / "sweep"], tmp_path / "o.png", drawn)
    assert _labels(ax) == ["norm_adv=true", "norm_adv=false"]  # a bool is no number to order by


def test_a_folder_with_a_nan_setting_keeps_name_order(tmp_path, drawn):
    for name, lr in (("a", 0.1), ("b", 0.001), ("c", float("nan"))):
        fake_run_dir(tmp_path / "sweep", name, lr=lr)
    (ax,) = _plot([tmp_path / "sweep"], tmp_path / "o.png", drawn)
    assert _labels(ax) == ["lr=0.1", "lr=0.001", "lr=nan"]  # no order among NaN: the names


def test_a_folder_of_runs_and_a_population_draws_both_on_one_y_scale(tmp_path, drawn):
    fake_run_dir(tmp_path / "runs", "a", lr=0.01)
    fake_run_dir(tmp_path / "runs", "b", lr=0.001)
    _population(tmp_path / "runs" / "pop")
    axes = _plot([tmp_path / "runs"], tmp_path / "o.png", drawn)
    assert [ax.get_title() for ax in axes] == ["Fake-v0"]  # per-env: the population's curves join the runs' panel
    assert _labels(axes[0]) == ["lr=0.001", "lr=0.01", "pop: lr=0.001: IQM (1 member)", "pop: lr=0.0003: IQM (1 member)"]
    # one env and metric: one y-axis holds the plain runs' curves and the population's (its 60.0 included)
    assert axes[0].get_ylim()[1] >= 60.0


def test_collect_panels_refuses_an_unknown_layout(tmp_path):
    from proxima.plot import PlotError, collect_panels

    run = fake_run_dir(tmp_path, "a")
    with pytest.raises(PlotError, match=r"^--panels 'one': choose one of per-env, per-setting$"):
        collect_panels([run], "charts/episodic_return", panels="one")


# ==================================================================================== eval --video's ffmpeg
@pytest.fixture
def fresh_ffmpeg_probe(monkeypatch):
    monkeypatch.setattr(video, "_FFMPEG", None)
    monkeypatch.setattr(video, "_ENCODERS", None)
    monkeypatch.delenv("IMAGEIO_FFMPEG_EXE", raising=False)


def fake_ffmpeg(tmp_path, body: str) -> str:
    exe = tmp_path / "ffmpeg"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return str(exe)


FIX = "point IMAGEIO_FFMPEG_EXE at a working ffmpeg, or unset it"
needs_ffmpeg = pytest.mark.skipif(importlib.util.find_spec("imageio_ffmpeg") is None, reason="needs imageio-ffmpeg")


@needs_ffmpeg
def test_a_hanging_ffmpeg_is_given_up_on_after_five_seconds(tmp_path, monkeypatch, fresh_ffmpeg_probe):
    exe = fake_ffmpeg(tmp_path, "exec sleep 60")
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", exe)
    start = time.monotonic()
    problem = video.mp4_problem()
    assert time.monotonic() - start < 20
    assert problem == f"imageio-ffmpeg's ffmpeg {exe} (IMAGEIO_FFMPEG_EXE) did not answer -encoders within 5 s; {FIX}"


@needs_ffmpeg
def test_an_ffmpeg_killed_by_a_signal_says_its_status(tmp_path, monkeypatch, fresh_ffmpeg_probe):
    exe = fake_ffmpeg(tmp_path, "echo ' V....D libx264 H.264'; kill -SEGV $$")
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", exe)
    assert video.mp4_problem() == f"imageio-ffmpeg's ffmpeg {exe} (IMAGEIO_FFMPEG_EXE) exited with status -11 on -encoders; {FIX}"
    assert video.video_target(tmp_path / "v.mp4") == tmp_path / "v.gif"


@needs_ffmpeg
def test_a_failing_ffmpeg_is_said_by_its_last_stderr_line_cut_to_120_characters(tmp_path, monkeypatch, fresh_ffmpeg_probe):
    last = "E" * 200
    exe = fake_ffmpeg(tmp_path, f"echo 'a first line' >&2; echo '{last}' >&2; exit 1")
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", exe)
    assert video.mp4_problem() == (f"imageio-ffmpeg's ffmpeg {exe} (IMAGEIO_FFMPEG_EXE) exited with status 1 on -encoders: "
                                   f"{'E' * 120}; {FIX}")


@needs_ffmpeg
def test_an_ffmpeg_listing_only_audio_encoders_lists_no_video_encoder(tmp_path, monkeypatch, fresh_ffmpeg_probe):
    exe = fake_ffmpeg(tmp_path, "echo 'Encoders:'; echo ' A....D aac   AAC (Advanced Audio Coding)'")
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", exe)
    assert video.mp4_problem() == f"imageio-ffmpeg's ffmpeg {exe} (IMAGEIO_FFMPEG_EXE) lists no video encoders (is it ffmpeg?); {FIX}"
    assert not video.has_mp4_encoder()


@needs_ffmpeg
def test_an_ffmpeg_path_python_cannot_run_is_a_problem_not_a_traceback(monkeypatch, fresh_ffmpeg_probe):
    import imageio_ffmpeg

    monkeypatch.setattr(imageio_ffmpeg, "get_ffmpeg_exe", lambda: "/opt/ff\0mpeg")
    problem = video.mp4_problem()
    assert problem.startswith("imageio-ffmpeg's ffmpeg /opt/ff\0mpeg does not run: embedded null byte; set IMAGEIO_FFMPEG_EXE")
    assert video.ffmpeg_status() == ("/opt/ff\0mpeg", problem)


def test_no_imageio_is_the_video_extra_even_with_imageio_ffmpeg(monkeypatch, fresh_ffmpeg_probe):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "imageio" else real(name, *a))
    monkeypatch.setattr(video, "_FFMPEG", ("/usr/bin/ffmpeg", ""))  # a binary that runs: still no imageio to drive it
    assert video.mp4_problem() == f"the video extra: {extra_install('video')}"
    assert not video.has_mp4_encoder()


def test_an_ffmpeg_without_libx264_refuses_mp4_for_gif_and_webm_for_mp4_or_gif(tmp_path, monkeypatch):
    monkeypatch.setattr(video, "_FFMPEG", ("/x/ffmpeg", ""))
    monkeypatch.setattr(video, "_ENCODERS", frozenset({"mpeg4"}))
    monkeypatch.setattr(video, "mp4_problem", lambda: "")
    with pytest.raises(video.VideoError) as caught:
        video.video_target(tmp_path / "v.mp4")
    assert str(caught.value) == f"--video {tmp_path / 'v.mp4'}: this ffmpeg has no libx264 encoder for .mp4; use .gif"
    with pytest.raises(video.VideoError) as caught:
        video.video_target(tmp_path / "v.webm")
    assert str(caught.value) == f"--video {tmp_path / 'v.webm'}: this ffmpeg has no libvpx-vp9 encoder for .webm; use .mp4 or .gif"


def test_describe_names_another_file_given_as_bytes(tmp_path):
    e = FileNotFoundError(errno.ENOENT, "No such file or directory", b"/x/ffmpeg")
    out = tmp_path / "v.mp4"
    assert describe(out, e, "could not write the video") == f"{out}: could not write the video (/x/ffmpeg: No such file or directory)"


def test_describe_of_a_relative_path_names_no_file_that_is_its_own(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for filename in (tmp_path / "v.mp4", tmp_path / ".v.abc.tmp.mp4"):  # absolute, the path given relative
        e = FileNotFoundError(errno.ENOENT, "No such file or directory", str(filename))
        assert describe("v.mp4", e, "could not write the video") == "v.mp4: could not write the video (No such file or directory)"
    e = FileNotFoundError(errno.ENOENT, "No such file or directory", ".v.abc.tmp.mp4")  # relative, the path absolute
    assert describe(tmp_path / "v.mp4", e) == f"{tmp_path / 'v.mp4'}: could not write (No such file or directory)"


def _ffmpeg_row(info) -> list[str]:
    return [line.split(None, 1)[1] for line in doctor.format_report(info).splitlines() if line.split()[:1] == ["imageio-ffmpeg"]]


@needs_ffmpeg
def test_doctor_says_eval_refuses_mp4_of_an_ffmpeg_without_libx264(monkeypatch, fresh_ffmpeg_probe):
    monkeypatch.setattr(video, "_FFMPEG", ("/x/ffmpeg", ""))
    monkeypatch.setattr(video, "_ENCODERS", frozenset({"mpeg4"}))
    monkeypatch.setattr(video, "mp4_problem", lambda: "")
    info = doctor.collect()
    assert info["ffmpeg"] == {"path": "/x/ffmpeg", "runs": True, "problem": None, "eval_video": "refused"}
    version = info["packages"]["imageio-ffmpeg"]
    assert _ffmpeg_row(info) == [f"{version}, importable; its ffmpeg runs (/x/ffmpeg) but has no libx264 encoder: "
                                 "eval --video FILE.mp4 is refused, FILE.gif works"]


@needs_ffmpeg
def test_doctor_says_a_gif_until_imageio_is_installed_when_only_its_ffmpeg_runs(monkeypatch, fresh_ffmpeg_probe):
    monkeypatch.setattr(video, "_FFMPEG", ("/x/ffmpeg", ""))
    monkeypatch.setattr(video, "_ENCODERS", frozenset({"libx264"}))
    monkeypatch.setattr(video, "mp4_problem", lambda: f"the video extra: {extra_install('video')}")
    info = doctor.collect()
    assert info["ffmpeg"] == {"path": "/x/ffmpeg", "runs": True, "problem": None, "eval_video": "gif"}
    version = info["packages"]["imageio-ffmpeg"]
    assert _ffmpeg_row(info) == [f"{version}, importable; its ffmpeg runs (/x/ffmpeg); eval --video writes a GIF instead of "
                                 "MP4 until imageio is installed"]


def test_evaluate_names_a_home_relative_video_argument_as_given(tmp_path, monkeypatch):
    import proxima

    monkeypatch.setenv("HOME", str(tmp_path))
    run_dir = tmp_path / "run"
    assert main(["train", "CartPole-v1", "--run-dir", str(run_dir), "--num-envs", "2", "--num-steps", "16",
                 "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "64", "--eval-episodes", "0",
                 "--no-progress", "--quiet"]) == 0
    with pytest.raises(video.VideoError) as caught:
        proxima.evaluate(proxima.load(str(run_dir)), episodes=1, video="~/nodir/api.gif")
    assert str(caught.value) == f"evaluate: video='~/nodir/api.gif': folder {tmp_path / 'nodir'} does not exist; create it first"
    assert sorted(os.listdir(tmp_path)) == ["run"]
