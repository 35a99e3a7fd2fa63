"""Eval video as review 46 found it: an imageio-ffmpeg whose ffmpeg cannot be found or does not run
is a GIF written in the MP4's place, said (which binary, why) before the episodes run, not a
traceback after them; a write that fails on another file than the video names that file;
`proxima doctor` says whether the ffmpeg runs and what eval --video writes; evaluate(video=...)
from Python names its argument, not the CLI's flag."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import proxima
from cli_helpers import error_line, run_main
from proxima import cli, doctor, video
from proxima.config import extra_install
from proxima.diskspace import describe

SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "128",
         "--eval-episodes", "0", "--no-progress", "--quiet"]
NO_EXE = "No ffmpeg exe could be found. Install ffmpeg on your system, or set the IMAGEIO_FFMPEG_EXE environment variable."


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("video46") / "run"
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(run_dir), *SMALL]) == 0
    return run_dir


@pytest.fixture(autouse=True)
def fresh_ffmpeg_probe(monkeypatch):
    """Each test probes the ffmpeg it sets up, and leaves the process's cache as it was."""
    monkeypatch.setattr(video, "_FFMPEG", None, raising=False)
    monkeypatch.setattr(video, "_ENCODERS", None)
    monkeypatch.delenv("IMAGEIO_FFMPEG_EXE", raising=False)


def gif_frames(path) -> int:
    from PIL import Image

    with Image.open(path) as im:
        return im.n_frames


def no_binary(monkeypatch) -> None:
    """imageio-ffmpeg installed, but no ffmpeg of its own nor on PATH."""
    import imageio_ffmpeg

    def get_ffmpeg_exe():
        raise RuntimeError(NO_EXE)

    monkeypatch.setattr(imageio_ffmpeg, "get_ffmpeg_exe", get_ffmpeg_exe)


def fake_ffmpeg(tmp_path, body: str) -> str:
    exe = tmp_path / "ffmpeg"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return str(exe)


# ------------------------------------------------------------------------------------ 1. IMAGEIO_FFMPEG_EXE pointing nowhere
def test_eval_with_ffmpeg_exe_pointing_nowhere_writes_the_gif_and_says_which_binary(finished_run, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", "/nonexistent/ffmpeg")
    out = tmp_path / "bad.mp4"
    code, stdout, err = run_main(["eval", str(finished_run), "--episodes", "1", "--json", "--video", str(out)], capsys)
    assert code == 0, err
    gif = tmp_path / "bad.gif"
    assert err.splitlines() == [
        "proxima: no MP4 encoder (imageio-ffmpeg's ffmpeg /nonexistent/ffmpeg (IMAGEIO_FFMPEG_EXE) does not run: No such file "
        f"or directory; point IMAGEIO_FFMPEG_EXE at a working ffmpeg, or unset it); writing a GIF instead: {gif}"]
    result = json.loads(stdout)
    assert result["video"] == str(gif) and sorted(p.name for p in tmp_path.iterdir()) == ["bad.gif"]
    assert gif_frames(gif) == result["lengths"][0] + 1  # s0 .. sL: every state of the episode


def test_a_write_failing_on_another_file_names_that_file_not_the_video(tmp_path, monkeypatch):
    # the ffmpeg binary gone between the probe and the writing: its name, not "bad.mp4: No such file"
    def missing_binary(frames, path, fps):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/nonexistent/ffmpeg")

    monkeypatch.setattr(video, "has_mp4_encoder", lambda: True)
    monkeypatch.setattr(video, "_ENCODERS", frozenset({"libx264"}))
    monkeypatch.setattr(video, "_write_mp4", missing_binary)
    out = tmp_path / "bad.mp4"
    with pytest.raises(video.VideoError) as caught:
        video.write_video([np.zeros((4, 4, 3), np.uint8)] * 2, out, fps=30)
    assert str(caught.value) == f"{out}: could not write the video (/nonexistent/ffmpeg: No such file or directory); no video was kept"
    assert list(tmp_path.iterdir()) == []


def test_describe_names_no_other_file_for_the_output_its_temp_file_its_folder_or_a_file_in_it(tmp_path):
    out = tmp_path / "v.mp4"
    for filename in (out, tmp_path / ".v.abc.tmp.mp4", tmp_path, None):  # itself, its temp file, its folder
        e = FileNotFoundError(errno.ENOENT, "No such file or directory", *([str(filename)] if filename else []))
        assert describe(out, e, "could not write the video") == f"{out}: could not write the video (No such file or directory)"
    e = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "run" / "metrics.csv"))
    assert describe(tmp_path / "run", e) == f"{tmp_path / 'run'}: could not write (Permission denied)"


def test_an_encoder_error_is_said_without_a_free_space_note_that_is_no_reason(tmp_path, monkeypatch):
    def fails(frames, path, fps):
        raise RuntimeError(NO_EXE)

    monkeypatch.setattr(video, "has_mp4_encoder", lambda: True)
    monkeypatch.setattr(video, "_ENCODERS", frozenset({"libx264"}))
    monkeypatch.setattr(video, "_write_mp4", fails)
    out = tmp_path / "v.mp4"
    with pytest.raises(video.VideoError) as caught:
        video.write_video([np.zeros((4, 4, 3), np.uint8)], out, fps=30)
    assert str(caught.value) == f"{out}: could not write the video (RuntimeError: {NO_EXE}); no video was kept"


# ------------------------------------------------------------------------------------ 2. no binary found at all
def test_no_ffmpeg_binary_falls_back_to_a_gif_said_before_the_episodes(finished_run, tmp_path, monkeypatch, capsys):
    import proxima.evaluate as ev

    no_binary(monkeypatch)
    said_at_env = []
    real_make_env = ev.make_env

    def make_env_spy(*args, **kwargs):
        said_at_env.append(capsys.readouterr().err)
        return real_make_env(*args, **kwargs)

    monkeypatch.setattr(ev, "make_env", make_env_spy)
    result = ev.evaluate(proxima.load(str(finished_run)), episodes=2, video=str(tmp_path / "api.webm"))
    gif = tmp_path / "api.gif"
    assert said_at_env == [f"proxima: no MP4 encoder (imageio-ffmpeg finds no ffmpeg binary ({NO_EXE}); set IMAGEIO_FFMPEG_EXE "
                           f"to a working ffmpeg, or reinstall the video extra ({extra_install('video')})); writing a GIF "
                           f"instead: {gif}\n"]
    assert result["video"] == str(gif) and gif_frames(gif) == result["lengths"][0] + 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["api.gif"]


@pytest.mark.parametrize("body, why", [
    ("echo 'Illegal instruction' >&2; exit 132", "exited with status 132 on -encoders: Illegal instruction"),
    ("exit 0", "lists no video encoders (is it ffmpeg?)"),
    ("exec sleep 30", "did not answer -encoders within 0.5 s"),
], ids=["crashes", "not-ffmpeg", "hangs"])
def test_an_ffmpeg_that_does_not_work_is_found_once_before_writing(tmp_path, monkeypatch, body, why):
    exe = fake_ffmpeg(tmp_path, body)
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", exe)
    monkeypatch.setattr(video, "FFMPEG_PROBE_TIMEOUT_S", 0.5)
    calls = []
    real_popen = subprocess.Popen  # the probe's process, however it is started (run() starts a Popen too)
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, *a, **k: (calls.append(cmd), real_popen(cmd, *a, **k))[1])
    problem = f"imageio-ffmpeg's ffmpeg {exe} (IMAGEIO_FFMPEG_EXE) {why}; point IMAGEIO_FFMPEG_EXE at a working ffmpeg, or unset it"
    assert video.mp4_problem() == problem and not video.has_mp4_encoder()
    assert video.video_target(tmp_path / "v.mkv") == tmp_path / "v.gif"
    assert calls == [[exe, "-hide_banner", "-encoders"]]  # one run of the binary, cached


# ------------------------------------------------------------------------------------ 3. doctor
def test_doctor_says_the_ffmpeg_does_not_run_and_that_eval_writes_a_gif(monkeypatch):
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", "/nonexistent/ffmpeg")
    info = doctor.collect()
    if not info["importable"]["imageio-ffmpeg"]:
        pytest.skip("needs imageio-ffmpeg")
    problem = ("imageio-ffmpeg's ffmpeg /nonexistent/ffmpeg (IMAGEIO_FFMPEG_EXE) does not run: No such file or directory; "
               "point IMAGEIO_FFMPEG_EXE at a working ffmpeg, or unset it")
    assert info["ffmpeg"] == {"path": "/nonexistent/ffmpeg", "runs": False, "problem": problem, "eval_video": "gif"}
    row = [line.split(None, 1)[1] for line in doctor.format_report(info).splitlines() if line.split()[:1] == ["imageio-ffmpeg"]]
    assert row == [f"{info['packages']['imageio-ffmpeg']}, importable, but eval --video writes a GIF instead of MP4: {problem}"]


def test_doctor_names_the_ffmpeg_that_runs_and_says_eval_writes_mp4():
    if not video.has_mp4_encoder() or "libx264" not in video._ffmpeg_encoders():
        pytest.skip("needs imageio-ffmpeg with a working ffmpeg")
    import imageio_ffmpeg

    exe = imageio_ffmpeg.get_ffmpeg_exe()
    info = doctor.collect()
    assert info["ffmpeg"] == {"path": exe, "runs": True, "problem": None, "eval_video": "mp4"}
    row = [line.split(None, 1)[1] for line in doctor.format_report(info).splitlines() if line.split()[:1] == ["imageio-ffmpeg"]]
    assert row == [f"{info['packages']['imageio-ffmpeg']}, importable; its ffmpeg runs ({exe}): eval --video writes MP4"]


def test_doctor_survives_a_missing_binary_and_a_run_never_probes_it(monkeypatch):
    no_binary(monkeypatch)
    info = doctor.collect(test_build=False)  # a run's meta.json: no ffmpeg run at every start
    assert "ffmpeg" not in info
    info = doctor.collect()
    if info["importable"]["imageio-ffmpeg"]:
        assert info["ffmpeg"]["path"] is None and info["ffmpeg"]["eval_video"] == "gif"
        assert info["ffmpeg"]["problem"].startswith(f"imageio-ffmpeg finds no ffmpeg binary ({NO_EXE}); ")


# ------------------------------------------------------------------------------------ 4. Python wording
def test_evaluate_from_python_names_its_video_argument_not_the_cli_flag(finished_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    policy = proxima.load(str(finished_run))
    with pytest.raises(video.VideoError) as caught:
        proxima.evaluate(policy, episodes=2, video="nodir/api.mp4")
    assert str(caught.value) == "evaluate: video='nodir/api.mp4': folder nodir does not exist; create it first"
    with pytest.raises(video.VideoError) as caught:
        proxima.evaluate(policy, episodes=2, video=Path("notes.txt"))
    assert str(caught.value) == ("evaluate: video='notes.txt': unsupported video type '.txt'; use .mp4, .mov, .mkv, .webm, "
                                 ".gif")
    code, _, err = run_main(["eval", str(finished_run), "--episodes", "2", "--video", "nodir/api.mp4"], capsys)
    line = error_line(code, err, "folder nodir does not exist; create it first")
    assert line.startswith("proxima eval: error: --video nodir/api.")  # the CLI names its flag
    assert os.listdir(tmp_path) == []
