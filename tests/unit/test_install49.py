"""Review 49, installing: a package missing from the venv is one line naming the install command of this
interpreter (never a traceback, never a .venv/bin/pip that is not there), and what doctor and meta.json say."""

from __future__ import annotations

import shlex
import sys

import pytest

from proxima import cli, config, doctor
from tests.cli_helpers import run_main

LOCKED_CORE = ".venv/bin/pip install -c requirements.lock -e ."


@pytest.fixture
def fresh_imports():
    """broken_import is asked once per process: each test's missing package is asked again."""
    cli.broken_import.cache_clear()
    yield
    cli.broken_import.cache_clear()


# ------------------------------------------------------------------------------------ 2. rlhf without transformers
def test_rlhf_without_transformers_is_one_line_with_the_rlhf_install_command(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "transformers", None)  # as after `pip uninstall -y transformers`
    code, out, err = run_main(["rlhf", "--demo", "--run-dir", str(tmp_path / "run")], capsys)
    assert (code, err.splitlines()) == (2, [
        "proxima rlhf: error: transformers is not installed, and proxima rlhf needs it: install it from the "
        "repository root with: .venv/bin/pip install -c requirements.lock -e '.[rlhf]'"]), err
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------ 4. a core package missing
@pytest.mark.parametrize("module, dist, argv", [
    ("tensorboard", "tensorboard", ["train", "CartPole-v1", "--total-timesteps", "512"]),
    ("matplotlib", "matplotlib", ["plot", "RUN"]),
    ("yaml", "pyyaml", ["train", "CartPole-v1", "--total-timesteps", "512"]),
])
def test_a_missing_core_dependency_is_one_line_before_any_run_directory(module, dist, argv, monkeypatch, capsys,
                                                                      tmp_path, fresh_imports):
    monkeypatch.setitem(sys.modules, module, None)
    argv = [str(tmp_path / "r") if a == "RUN" else a for a in argv] + (["--run-dir", str(tmp_path / "run")]
                                                                      if argv[0] == "train" else [])
    code, out, err = run_main(argv, capsys)
    assert (code, err.splitlines()) == (2, [
        f"proxima {argv[0]}: error: {dist} is not installed, and every proxima command but doctor needs it: "
        f"install it from the repository root with: {LOCKED_CORE}"]), err
    assert not (tmp_path / "run").exists()


def test_doctor_lists_the_core_packages_and_pygame_with_the_locked_install(monkeypatch):
    assert {"tensorboard", "matplotlib", "pyyaml", "pygame"} <= set(doctor.OPTIONAL_PACKAGES)
    real = doctor._package
    monkeypatch.setattr(doctor, "_package", lambda n: (None, False, "not found") if n in ("tensorboard", "pygame")
                        else real(n))
    hints = doctor.collect(test_build=False)["hints"]
    assert (f"tensorboard not installed: install it from the repository root with: {LOCKED_CORE} "
            "(a core dependency: commands other than doctor refuse to start without it)") in hints, hints
    assert ("pygame not installed: install it from the repository root with: .venv/bin/pip install -c "
            "requirements.lock -e '.[video]' (needed for `proxima eval --video` of Gymnasium envs (CartPole, "
            "LunarLander, ... draw with it))") in hints, hints


# ------------------------------------------------------------------------------------ 3. this interpreter's pip
def test_install_hints_name_this_interpreters_pip_outside_the_repositorys_venv(monkeypatch, tmp_path):
    """`mv .venv myenv`: there is no .venv/bin/pip; the hint is myenv's python -m pip, as doctor's torch hints."""
    (tmp_path / "myenv" / "bin").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    python = tmp_path / "my env" / "bin" / "python"
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "myenv"))
    monkeypatch.setattr(sys, "executable", str(python))
    assert config.install_hint("box2d") == (f"install it from the repository root with: {shlex.quote(str(python))} "
                                            "-m pip install -c requirements.lock -e '.[box2d]'")
    assert config.extra_install("") == f"{shlex.quote(str(python))} -m pip install -c requirements.lock -e ."
    assert doctor.pip is config.pip  # one helper


# ------------------------------------------------------------------------------------ 1. --video needs pygame
def test_a_gymnasium_env_without_pygame_names_the_video_extra_that_has_it(monkeypatch):
    import gymnasium as gym
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    from proxima import make_env
    from proxima.envs.base import EnvError

    def render(self):  # Gymnasium's words where pygame is not installed
        raise gym.error.DependencyNotInstalled('pygame is not installed, run `pip install "gymnasium[classic-control]"`')

    monkeypatch.setattr(CartPoleEnv, "render", render)
    env = make_env("CartPole-v1", 1, backend="gymnasium", render_mode="rgb_array")
    env.reset(seed=0)
    with pytest.raises(EnvError) as e:
        env.render(0)
    assert str(e.value) == ("env 'CartPole-v1' cannot render: pygame is not installed; the video extra has it: install "
                            "it from the repository root with: .venv/bin/pip install -c requirements.lock -e '.[video]'")
    env.close()


def test_the_video_extra_brings_the_pygame_of_the_lock():
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    video = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["video"]
    assert any(r.startswith("pygame-ce") for r in video), video
    assert any(line.lower().startswith("pygame-ce==") for line in (root / "requirements.lock").read_text().splitlines())


# ------------------------------------------------------------------------------------ 5. torch on a CPU-only machine
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


@pytest.mark.skipif(sys.platform != "linux", reason="PyPI's Linux torch wheel is the CUDA build")
@pytest.mark.parametrize("installed, gpu, index", [("2.0.0+cpu", False, True), ("2.0.0", False, True),
                                                   ("2.0.0+cpu", True, True), ("2.0.0", True, False)])
def test_the_pinned_torch_hint_takes_the_cpu_index_for_a_cpu_build_or_a_machine_without_a_gpu(installed, gpu, index,
                                                                                            monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch, "__version__", installed)
    monkeypatch.setattr(doctor, "nvidia_visible", lambda: gpu)
    about = [h for h in doctor.collect(test_build=False)["hints"] if "differs from the pinned" in h]
    assert about == [f"torch {installed} differs from the pinned torch=={doctor.TORCH_PIN}: {doctor.pip()} install "
                     f"torch=={doctor.TORCH_PIN}" + (f" {CPU_INDEX}" if index else "")], about


# ------------------------------------------------------------------------------------ 6. bench records the code
def test_bench_records_the_proxima_version_and_git_commit_it_measured(monkeypatch):
    import proxima
    from proxima import bench, train_state

    monkeypatch.setattr(train_state, "git_state", lambda: ("0123abc", True))
    machine = bench.machine_info("cpu")
    assert (machine["proxima"], machine["git_commit"], machine["git_dirty"]) == (proxima.__version__, "0123abc", True)
    assert f"- proxima {proxima.__version__}, git commit 0123abc with uncommitted changes" in bench.machine_lines("cpu", 1)
    monkeypatch.setattr(train_state, "git_state", lambda: (None, None))  # an installed copy without a recorded commit
    assert (f"- proxima {proxima.__version__}, git commit unknown (not a git checkout)"
            in bench.machine_lines("cpu", 1))


# ------------------------------------------------------------------------------------ 7, 8. meta.json's record
@pytest.fixture
def tokyo(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_runs_times_carry_their_utc_offset(tokyo, capsys, tmp_path):
    import json
    from datetime import datetime

    run = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "512", "--run-dir", str(run), "--quiet"],
                            capsys)
    assert code == 0, err
    started = json.loads((run / "meta.json").read_text())["started"]
    assert started.endswith("+09:00") and datetime.fromisoformat(started).utcoffset().total_seconds() == 9 * 3600


def test_an_rlhf_runs_meta_has_a_ppo_runs_versions_and_machine_blocks(tokyo):
    pytest.importorskip("transformers")
    import transformers

    from proxima import train_state
    from proxima.rlhf.rundir import _meta

    meta = _meta(1, "cpu")
    assert meta["versions"] == {**train_state.versions(), "transformers": transformers.__version__,
                                "peft": meta["peft"]}
    assert set(meta["machine"]) == set(train_state.machine_record("cpu")) and meta["machine"]["torch"] == meta["torch"]
    assert meta["started"] == meta["created"] and meta["started"].endswith("+09:00")
    # the keys earlier RLHF runs had stay, for what reads them
    assert {"kind", "proxima", "python", "torch", "transformers", "peft", "git_commit", "git_dirty", "device",
            "world_size", "command", "created", "host", "cwd"} <= set(meta)


# ------------------------------------------------------------------------------------ 9. the container's notebooks/
@pytest.mark.parametrize("folders, where", [
    (("runs", "checkpoints", "notebooks"), "WS/runs, WS/checkpoints and WS/notebooks"),
    (("notebooks",), "WS/notebooks"),
])
def test_the_entrypoint_notes_a_notebooks_folder_without_a_volume(folders, where, tmp_path):
    """docker/README says to save notebooks in notebooks/: without a volume there they went with the container unsaid."""
    import shutil
    import subprocess
    from pathlib import Path

    if not shutil.which("ssh-keygen", path="/usr/bin:/bin"):
        pytest.skip("ssh-keygen not available (openssh-client)")
    ws = tmp_path / "ws"
    for name in folders:
        (ws / name).mkdir(parents=True)
    (tmp_path / "home").mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "JUPYTER_TOKEN": "0123456789abcdef0123",
           "PROXIMA_ENTRYPOINT_DRY_RUN": "1", "SSH_AUTHORIZED_KEYS": "", "PROXIMA_WORKSPACE": str(ws),
           "SSH_AUTHORIZED_KEYS_FILE": str(tmp_path / "no-such-secret")}
    entrypoint = Path(__file__).resolve().parents[2] / "docker" / "entrypoint.sh"
    r = subprocess.run(["bash", str(entrypoint)], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if "no volume is mounted" in ln]
    assert notes == [f"proxima-entrypoint: note: no volume is mounted at {where.replace('WS', str(ws))}: what is "
                     "written there is lost with the container (docker rm, run --rm, compose down); mount host "
                     "folders there to keep it (docker/README.md)"], r.stderr


# ------------------------------------------------------------------------------------ 10b. the extra before the arithmetic
def test_a_missing_extra_is_said_before_the_presets_batch_arithmetic(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "Box2D", None)  # box2d not installed
    code, _, err = run_main(["train", "LunarLander-v3", "--total-timesteps", "1024", "--run-dir", str(tmp_path / "r")],
                            capsys)
    assert (code, err.splitlines()) == (2, [
        "proxima train: error: env 'LunarLander-v3' needs an optional dependency: install it from the repository "
        "root with: .venv/bin/pip install -c requirements.lock -e '.[box2d]'"]), err
    assert not (tmp_path / "r").exists()
