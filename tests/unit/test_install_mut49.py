"""Mutation tests of review 49's installing changes (install hints, broken_import, doctor's rows, missing_extra,
the pygame render line, bench's code record, meta.json's times and machine, the entrypoint's no-volume note):
each test pins behaviour that a small change to that code altered while test_install49 still passed."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import types
from importlib.metadata import version as dist_version
from pathlib import Path

import pytest

from proxima import cli, config, doctor
from tests.cli_helpers import run_main
from tests.unit.test_install49 import tokyo  # noqa: F401  (a fixture: TZ=Asia/Tokyo, time.tzset, put back)

ROOT = Path(__file__).resolve().parents[2]
OFFSET_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$")


@pytest.fixture
def fresh_imports():
    cli.broken_import.cache_clear()
    yield
    cli.broken_import.cache_clear()


def _core_hint() -> str:
    return config.install_hint("")


# ------------------------------------------------------------------------------------ config.pip / extra_install
def test_a_hint_names_the_repositorys_venv_pip_from_any_working_directory(monkeypatch, tmp_path):
    """pip(from_repository=True): the venv beside the package's checkout counts, wherever the command runs;
    plain pip() only the working directory's; a .venv without bin/pip is no .venv/bin/pip."""
    repo = tmp_path / "repo"
    (repo / "proxima").mkdir(parents=True)
    (repo / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    monkeypatch.setattr(config, "__file__", str(repo / "proxima" / "config.py"))
    monkeypatch.setattr(config, "_in_image", lambda: False)
    monkeypatch.setattr(sys, "prefix", str(repo / ".venv"))
    python = tmp_path / "py thon"
    monkeypatch.setattr(sys, "executable", str(python))
    own = f"{shlex.quote(str(python))} -m pip"
    # no bin/pip in the venv: this interpreter's pip, quoted
    assert config.pip(from_repository=True) == own
    assert config.extra_install("box2d") == f"{own} install -c requirements.lock -e '.[box2d]'"
    (repo / ".venv" / "bin" / "pip").write_text("")
    assert config.extra_install("box2d") == ".venv/bin/pip install -c requirements.lock -e '.[box2d]'"
    assert config.install_hint("") == ("install it from the repository root with: "
                                       ".venv/bin/pip install -c requirements.lock -e .")
    assert config.pip() == own  # the working directory has no .venv
    # another interpreter (not the repository's venv): its own pip, even from the repository root
    monkeypatch.chdir(repo)
    assert config.pip() == ".venv/bin/pip"
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "other"))
    assert config.pip(from_repository=True) == own


def test_the_images_hints_take_each_extras_requirements_and_the_core_ones(monkeypatch):
    import importlib.metadata

    monkeypatch.setattr(config, "_in_image", lambda: True)
    monkeypatch.setattr(importlib.metadata, "requires", lambda name: [
        "torch==2.13.0", "tqdm>=4.66", 'transformers>=4.45; extra == "rlhf"', "peft>=0.13; extra == 'rlhf'",
        'envpool>=1.2.5; sys_platform == "linux" and extra == "atari"'])
    c = config.IMAGE_CONSTRAINTS
    assert config.extra_install("") == f"pip install -c {c} 'torch==2.13.0' 'tqdm>=4.66'"
    assert config.extra_install("atari") == f"pip install -c {c} 'envpool>=1.2.5'"
    assert config.install_hint("rlhf") == (f"install it in this container with: pip install -c {c} "
                                           "'transformers>=4.45' 'peft>=0.13'")


# ------------------------------------------------------------------------------------ broken_import
def test_a_missing_tqdm_is_one_line_naming_the_locked_install(monkeypatch, fresh_imports):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    assert cli.broken_import() == ("tqdm is not installed, and every proxima command but doctor needs it: "
                                   f"{_core_hint()}")


def test_a_core_module_without_a_spec_is_a_line_not_a_valueerror(monkeypatch, fresh_imports):
    """find_spec raises ValueError for a module in sys.modules whose __spec__ is None."""
    stub = types.ModuleType("matplotlib")
    stub.__spec__ = None
    monkeypatch.setitem(sys.modules, "matplotlib", stub)
    assert cli.broken_import() == ("matplotlib is not installed, and every proxima command but doctor needs it: "
                                   f"{_core_hint()}")


def test_broken_import_is_none_with_every_core_package(fresh_imports):
    assert cli.broken_import() is None


# ------------------------------------------------------------------------------------ rlhf without its extra
def _rlhf_with(monkeypatch, capsys, tmp_path, exc):
    from proxima.rlhf import models

    def quiet():
        raise exc

    monkeypatch.setattr(models, "quiet_transformers", quiet)
    return run_main(["rlhf", "--demo", "--run-dir", str(tmp_path / "run")], capsys)


@pytest.mark.parametrize("name, missing", [("peft", "peft"), ("transformers.models.gpt2", "transformers"),
                                           ("safetensors.torch", "safetensors")])
def test_rlhf_names_the_top_level_module_of_its_extra_that_is_missing(name, missing, monkeypatch, capsys, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda mod, *a: None if mod == missing else real(mod, *a))
    code, _, err = _rlhf_with(monkeypatch, capsys, tmp_path, ModuleNotFoundError(f"No module named '{name}'", name=name))
    assert (code, err.splitlines()) == (2, [f"proxima rlhf: error: {missing} is not installed, and proxima rlhf "
                                            f"needs it: {config.install_hint('rlhf')}"]), err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name, top", [("transformers.models.gpt2", "transformers"), ("safetensors.torch", "safetensors")])
def test_rlhf_whose_extra_is_there_but_one_of_its_modules_is_not_says_it_does_not_import(name, top, monkeypatch,
                                                                                        capsys, tmp_path):
    # transformers installed, one of its modules missing (a partial install): 'not installed' would be false
    code, _, err = _rlhf_with(monkeypatch, capsys, tmp_path, ModuleNotFoundError(f"No module named '{name}'", name=name))
    assert (code, err.splitlines()) == (2, [f"proxima rlhf: error: {top} is installed but does not import (No module "
                                            f"named '{name}'), and proxima rlhf needs it: {config.install_hint('rlhf')}"]), err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["not_the_rlhf_extra", None])
def test_rlhf_leaves_other_missing_modules_to_their_traceback(name, monkeypatch, capsys, tmp_path):
    """Not every ModuleNotFoundError is the rlhf extra: a user's module, or one without a name, is re-raised."""
    with pytest.raises(ModuleNotFoundError) as e:
        _rlhf_with(monkeypatch, capsys, tmp_path, ModuleNotFoundError("No module named 'x'", name=name))
    assert e.value.name == name
    assert "is not installed" not in capsys.readouterr().err


# ------------------------------------------------------------------------------------ doctor's rows
@pytest.mark.skipif(sys.platform != "linux", reason="PyPI's Linux torch wheel is the CUDA build")
def test_torch_not_importable_takes_the_cpu_index_for_an_installed_cpu_build(monkeypatch):
    """The hint for a torch that does not import reads the installed build (+cpu) as the differs-hint does."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(doctor, "nvidia_visible", lambda: True)
    real = doctor._pkg_version
    monkeypatch.setattr(doctor, "_pkg_version", lambda d: "2.0.0+cpu" if d == "torch" else real(d))
    hints = [h for h in doctor.collect(test_build=False)["hints"] if h.startswith("torch not importable")]
    assert len(hints) == 1 and hints[0].endswith(f"{doctor.pip()} install torch=={doctor.TORCH_PIN} "
                                                 "--index-url https://download.pytorch.org/whl/cpu"), hints


def test_the_pinned_torch_hint_elsewhere_than_linux_is_pypis(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(doctor, "nvidia_visible", lambda: False)
    assert doctor._torch_install("2.0.0+cpu") == f"{doctor.pip()} install torch=={doctor.TORCH_PIN}"
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(doctor, "nvidia_visible", lambda: True)
    assert doctor._torch_install("2.0.0+cu121") == f"{doctor.pip()} install torch=={doctor.TORCH_PIN}"
    assert doctor._torch_install("2.0.0+cpu").endswith(" --index-url https://download.pytorch.org/whl/cpu")


def test_doctor_finds_pygame_ce_and_pyyaml_without_importing_pygame(monkeypatch):
    """pygame is only looked up (its import prints a banner); its version is pygame-ce's; pyyaml imports as yaml."""
    import importlib

    real = importlib.import_module

    def no_pygame(name, *a, **k):
        if name.partition(".")[0] == "pygame":
            raise AssertionError("doctor imported pygame")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", no_pygame)
    assert doctor._package("pygame") == (dist_version("pygame-ce"), True, "")
    assert doctor._package("pyyaml")[:2] == (dist_version("PyYAML"), True)


def test_doctor_says_the_locked_core_install_for_matplotlib_and_pyyaml(monkeypatch):
    real = doctor._package
    monkeypatch.setattr(doctor, "_package", lambda n: (None, False, "not found") if n in ("matplotlib", "pyyaml")
                        else real(n))
    hints = doctor.collect(test_build=False)["hints"]
    for name in ("matplotlib", "pyyaml"):
        assert (f"{name} not installed: {_core_hint()} (a core dependency: commands other than doctor refuse to "
                "start without it)") in hints, hints


# ------------------------------------------------------------------------------------ missing_extra / _validate_new
def test_missing_extra_looks_up_the_extras_own_module(monkeypatch):
    import importlib.util

    from proxima.envs.gym_adapter import missing_extra

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: types.SimpleNamespace(name=name) if name == "mujoco" else real(name, *a))
    assert missing_extra("HalfCheetah-v5") is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mujoco" else real(name, *a))
    assert missing_extra("HalfCheetah-v5") == ("env 'HalfCheetah-v5' needs an optional dependency: "
                                               f"{config.install_hint('mujoco')}")
    assert missing_extra("CartPole-v1") is None


def test_missing_extra_leaves_a_module_env_and_a_spec_less_box2d(monkeypatch):
    from proxima.envs.gym_adapter import missing_extra

    monkeypatch.setitem(sys.modules, "Box2D", None)
    assert missing_extra("LunarLanderMine:MyLander") is None  # module:Class imports its own module, no extra
    stub = types.ModuleType("Box2D")
    stub.__spec__ = None  # find_spec's ValueError: said as missing, not raised
    monkeypatch.setitem(sys.modules, "Box2D", stub)
    assert missing_extra("LunarLander-v3") == ("env 'LunarLander-v3' needs an optional dependency: "
                                               f"{config.install_hint('box2d')}")


@pytest.mark.parametrize("backend, said", [("gymnasium", True), ("native", False)])
def test_the_missing_extra_line_comes_first_for_the_gymnasium_backend_only(backend, said, monkeypatch, capsys,
                                                                            tmp_path):
    monkeypatch.setitem(sys.modules, "Box2D", None)
    code, _, err = run_main(["train", "LunarLander-v3", "--total-timesteps", "1024", "--backend", backend,
                             "--run-dir", str(tmp_path / "r")], capsys)
    box2d = ("proxima train: error: env 'LunarLander-v3' needs an optional dependency: "
             f"{config.install_hint('box2d')}")
    assert code == 2 and (err.splitlines() == [box2d]) is said, err
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------ the render line
def test_another_missing_render_dependency_keeps_gymnasiums_words(monkeypatch):
    import gymnasium as gym
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    from proxima import make_env
    from proxima.envs.base import EnvError

    def render(self):
        raise gym.error.DependencyNotInstalled("moviepy is not installed, run `pip install moviepy`")

    monkeypatch.setattr(CartPoleEnv, "render", render)
    env = make_env("CartPole-v1", 1, backend="gymnasium", render_mode="rgb_array")
    try:
        env.reset(seed=0)
        with pytest.raises(EnvError) as e:
            env.render(0)
        assert str(e.value) == "env 'CartPole-v1' cannot render: moviepy is not installed, run `pip install moviepy`"
    finally:
        env.close()


# ------------------------------------------------------------------------------------ bench
def test_bench_says_nothing_of_uncommitted_changes_for_a_clean_checkout(monkeypatch):
    import proxima
    from proxima import bench, train_state

    monkeypatch.setattr(train_state, "git_state", lambda: ("0123abc", False))
    lines = bench.machine_lines("cpu", 1)
    assert f"- proxima {proxima.__version__}, git commit 0123abc" in lines, lines
    assert not any("uncommitted" in ln for ln in lines), lines


# ------------------------------------------------------------------------------------ meta.json's times and machine
def test_started_now_and_a_resume_entry_carry_the_offset_to_the_second(tokyo):
    from proxima import train_state

    assert OFFSET_TIME.match(train_state.started_now()) and train_state.started_now().endswith("+09:00")
    started = train_state.resume_entry(5, argv=["proxima", "train"])["started"]
    assert OFFSET_TIME.match(started) and started.endswith("+09:00"), started


def test_machine_record_records_threads_and_is_none_where_doctor_fails(monkeypatch):
    from proxima import train_state

    assert train_state.machine_record("cpu", threads=3)["torch_threads"] == 3

    def broken(**kwargs):
        raise RuntimeError("doctor broke")

    monkeypatch.setattr(doctor, "collect", broken)
    assert train_state.machine_record("cpu") is None


def test_a_runs_machine_records_its_threads(capsys, tmp_path):
    run = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "256", "--num-envs", "2", "--num-steps", "64",
                             "--threads", "2", "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    assert json.loads((run / "meta.json").read_text())["machine"]["torch_threads"] == 2


def test_a_populations_members_record_the_offset_and_the_machine(tokyo, capsys, tmp_path):
    run = tmp_path / "pop"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "0,1", "--total-timesteps", "256", "--num-envs", "2",
                             "--num-steps", "64", "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    metas = sorted(run.rglob("meta.json"))
    assert metas, list(run.rglob("*"))
    for path in metas:
        meta = json.loads(path.read_text())
        assert OFFSET_TIME.match(meta["started"]) and meta["started"].endswith("+09:00"), (path, meta["started"])
        assert "torch" in meta["machine"], path


# ------------------------------------------------------------------------------------ the entrypoint's note
def _note_block() -> str:
    text = (ROOT / "docker" / "entrypoint.sh").read_text()
    start = text.index("unmounted=()\n")
    end = text.index("\nfi\n", start) + 4
    return text[start:end]


@pytest.mark.parametrize("folders, mounted, where", [
    (("runs", "checkpoints"), (), "WS/runs and WS/checkpoints"),
    (("runs", "checkpoints", "notebooks"), ("checkpoints",), "WS/runs and WS/notebooks"),
    (("runs", "checkpoints", "notebooks"), ("runs", "checkpoints", "notebooks"), None),
    (("checkpoints", "notebooks"), ("notebooks",), "WS/checkpoints"),
])
def test_the_no_volume_note_lists_the_unmounted_folders(folders, mounted, where, tmp_path):
    """The entrypoint's note block, with is_mount_point saying which folders are volumes."""
    ws = tmp_path / "ws"
    for name in folders:
        (ws / name).mkdir(parents=True)
    mounts = " ".join(shlex.quote(str(ws / m)) for m in mounted)
    script = (f"set -u\nWORKSPACE={shlex.quote(str(ws))}\nlog() {{ echo \"$*\"; }}\n"
              f"is_mount_point() {{ local m; for m in {mounts}; do [[ \"$m\" == \"$1\" ]] && return 0; done; return 1; }}\n"
              + _note_block())
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    expected = [] if where is None else [
        f"note: no volume is mounted at {where.replace('WS', str(ws))}: what is written there is lost with the "
        "container (docker rm, run --rm, compose down); mount host folders there to keep it (docker/README.md)"]
    assert r.stdout.splitlines() == expected, r.stdout
