"""Review 49's findings on the day's commits: NCCL_SOCKET_IFNAME checked only for runs on CUDA, make_env's
refusals in a Python caller's words, the missing-extra check shared by the CLI and the Python API, tqdm in
doctor's tables, and one copy each of the join failure's report, the extras' modules and the guarded find_spec."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tests.cli_helpers import run_main


# --- 1. NCCL_SOCKET_IFNAME: only a run whose tensors are on CUDA starts NCCL -----------------------------------
@pytest.fixture
def bogus_nccl(monkeypatch):
    """A machine where CUDA and NCCL are (nccl_used) and NCCL_SOCKET_IFNAME selects no interface here."""
    from proxima import distributed

    monkeypatch.setattr(distributed, "interface_addresses", lambda: {"lo", "eth0"})
    monkeypatch.setattr(distributed, "nccl_used", lambda: True)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "bogus0")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)


def test_nproc_of_a_cpu_run_where_cuda_and_nccl_are_ignores_nccl_socket_ifname(bogus_nccl):
    from proxima import launch

    launch._check(2, ["train", "CartPole-v1", "--device", "cpu", "--num-envs", "2", "--num-steps", "32",
                      "--total-timesteps", "256"])  # no ConfigError: its ranks never start NCCL


def test_nproc_checks_nccl_socket_ifname_for_ranks_on_cuda(bogus_nccl):
    from proxima import launch
    from proxima.config import ConfigError

    launch._check_nccl(torch.device("cpu"))
    with pytest.raises(ConfigError, match=r"^NCCL_SOCKET_IFNAME='bogus0': selects no network interface with an address "
                                          r"here \(interfaces with one: eth0, lo\)"):
        launch._check_nccl(torch.device("cuda", 0))


def test_a_rank_of_a_cpu_run_joins_without_reading_nccl_socket_ifname(bogus_nccl, monkeypatch):
    """distributed.init joins with 'cpu:gloo,cuda:nccl' wherever CUDA is, before the run's --device is known."""
    import torch.distributed as dist

    from proxima import distributed

    class Rendezvous(Exception):
        pass

    def rendezvous(*args, **kwargs):
        raise Rendezvous()

    monkeypatch.setattr(dist, "rendezvous", rendezvous)
    with pytest.raises(Rendezvous):  # on to the store: no ConfigError first
        distributed.join_group("cpu:gloo,cuda:nccl")
    ctx = distributed.DistContext(rank=1, world_size=2, local_rank=1)
    assert ctx.device_for("cpu") == torch.device("cpu")


def test_a_rank_that_resolves_a_cuda_device_checks_nccl_socket_ifname(bogus_nccl, monkeypatch):
    from proxima import device as device_mod
    from proxima import distributed
    from proxima.config import ConfigError

    monkeypatch.setattr(device_mod, "resolve_device", lambda name, arg="--device": torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"^NCCL_SOCKET_IFNAME='bogus0': selects no network interface"):
        distributed.DistContext(rank=1, world_size=2, local_rank=1).device_for("cuda")


# --- 2. make_env called from Python names its own arguments, never a flag ----------------------------------------
@pytest.fixture
def fixtures_path(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "fixtures"))


NATIVE_IDS = "Acrobot-v1, CartPole-v1, LinearQuadratic-v0, MountainCar-v0, MountainCarContinuous-v0, Pendulum-v1, PixelQuadrant-v0"


@pytest.mark.parametrize("env_id, kwargs, line", [
    ("CartPole-v1", {"backend": "envpool"},
     "backend='envpool' runs Atari games (ids like Pong-v5), not 'CartPole-v1'; use backend='auto'"),
    ("LunarLander-v3", {"backend": "native"},
     f"no native env for 'LunarLander-v3' (native: {NATIVE_IDS}); use backend='gymnasium' or backend='auto'"),
    ("Pendulum-v1", {"backend": "native", "env_kwargs": {"g": 9.8}},
     "env_kwargs: the native 'Pendulum-v1' takes no constructor arguments; use backend='gymnasium' (or backend='auto')"),
    ("PixelQuadrant-v0", {"backend": "gymnasium"},
     "'PixelQuadrant-v0' is a torch-native env with no Gymnasium version: use backend='native' (or backend='auto')"),
    ("user_native_env:Drift", {"backend": "gymnasium"},
     "'user_native_env:Drift' is a torch-native env (a BatchedEnv subclass), not a gymnasium.Env: it runs on "
     "backend='auto' or backend='native', not backend='gymnasium'"),
])
def test_make_env_from_python_refuses_a_backend_in_its_arguments_words(env_id, kwargs, line, fixtures_path):
    from proxima import make_env
    from proxima.envs import EnvError

    with pytest.raises(EnvError) as e:
        make_env(env_id, 2, **kwargs)
    assert str(e.value) == line


def test_the_cli_keeps_the_flag_words_of_make_envs_refusals(capsys, tmp_path):
    code, _, err = run_main(["train", "CartPole-v1", "--backend", "envpool", "--total-timesteps", "1024",
                             "--run-dir", str(tmp_path / "r")], capsys)
    assert (code, err.strip().splitlines()[-1]) == (2, "proxima train: error: --backend envpool runs Atari games "
                                                       "(ids like Pong-v5), not 'CartPole-v1'; use --backend auto"), err


# --- 3. an env whose extra is missing is said first, from Python and for populations too ----------------------------
BOX2D_LINE = ("env 'LunarLander-v3' needs an optional dependency: install it from the repository root with: "
              ".venv/bin/pip install -c requirements.lock -e '.[box2d]'")


@pytest.fixture
def no_box2d(monkeypatch):
    monkeypatch.setitem(sys.modules, "Box2D", None)  # box2d not installed


def test_train_from_python_says_a_missing_extra_before_the_batch_arithmetic(no_box2d, tmp_path):
    import proxima
    from proxima.envs import EnvError

    with pytest.raises(EnvError) as e:  # total_timesteps=10 is smaller than one batch: said once box2d is there
        proxima.train(proxima.PPOConfig(env_id="LunarLander-v3", total_timesteps=10), run_dir=tmp_path / "r", quiet=True)
    assert str(e.value) == BOX2D_LINE
    assert not (tmp_path / "r").exists()


def test_train_population_from_python_says_a_missing_extra_first(no_box2d, tmp_path):
    import proxima
    from proxima.envs import EnvError

    with pytest.raises(EnvError) as e:
        proxima.train_population(proxima.PPOConfig(env_id="LunarLander-v3", total_timesteps=10), seeds=[1, 2],
                                 run_dir=tmp_path / "p", quiet=True)
    assert str(e.value) == BOX2D_LINE
    assert not (tmp_path / "p").exists()


def test_train_seeds_says_a_missing_extra_before_the_presets_batch_arithmetic(no_box2d, capsys, tmp_path):
    code, _, err = run_main(["train", "LunarLander-v3", "--seeds", "1,2", "--total-timesteps", "10",
                             "--run-dir", str(tmp_path / "p")], capsys)
    assert (code, err.splitlines()) == (2, [f"proxima train: error: {BOX2D_LINE}"]), err
    assert not (tmp_path / "p").exists()


# --- 4. doctor lists tqdm, without which every other command refuses to start ------------------------------------
def test_doctor_says_tqdm_is_missing_as_the_other_commands_refuse_without_it(monkeypatch):
    from proxima import doctor

    monkeypatch.setitem(sys.modules, "tqdm", None)  # not importable (its distribution's metadata may still be there)
    info = doctor.collect(test_build=False)
    assert info["importable"]["tqdm"] is False
    hints = [h for h in info["hints"] if h.startswith("tqdm ")]
    assert len(hints) == 1 and hints[0].endswith(
        f"install it from the repository root with: {doctor.pip()} install -c requirements.lock -e . (a core "
        "dependency: commands other than doctor refuse to start without it)"), info["hints"]
    rows = [line.strip() for line in doctor.format_report(info).splitlines() if line.strip().startswith("tqdm ")]
    assert rows and rows[0].endswith("not importable"), rows


# --- 5. one copy each: the join failure's report, the extras' modules, the guarded find_spec ------------------------
@pytest.mark.parametrize("entry", ["ppo", "rlhf"])
def test_a_rank_that_cannot_join_says_one_line_and_marks_the_error_reported(entry, monkeypatch, capsys):
    import torch.distributed as tdist

    from proxima import distributed
    from proxima.rlhf import dist as rlhf_dist

    def unreachable(*args, **kwargs):
        raise RuntimeError("[enforce fail at tcp.cpp:1] connection refused")

    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "29500",
                        "TORCHELASTIC_RUN_ID": "x"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tdist, "is_initialized", lambda: False)
    monkeypatch.setattr(tdist, "rendezvous", unreachable)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(distributed, "is_torchrun_rank", lambda: True)
    with pytest.raises(RuntimeError) as e:
        distributed.init() if entry == "ppo" else rlhf_dist.init_distributed("cpu")
    assert getattr(e.value, distributed._REPORTED, False)  # exit_process prints no traceback after the line
    assert capsys.readouterr().err == (
        "proxima: rank 1 failed: could not join the process group (store at MASTER_ADDR:MASTER_PORT 10.0.0.9:29500): "
        "RuntimeError: connection refused; check that every node reaches that address and that GLOO_SOCKET_IFNAME / "
        "NCCL_SOCKET_IFNAME, if set, name this machine's interface to the others (docs/distributed.md, Multi-node)\n")


def test_module_found_is_false_for_a_module_set_to_none_or_absent(monkeypatch):
    from proxima.doctor import module_found

    assert module_found("json")
    assert not module_found("no_such_module_review49")
    monkeypatch.setitem(sys.modules, "yaml", None)
    assert not module_found("yaml")


def test_the_missing_extra_check_reads_doctors_table_of_modules(monkeypatch):
    from proxima import doctor
    from proxima.envs.gym_adapter import missing_extra

    monkeypatch.setitem(doctor._MODULES, "mujoco", ("no_such_module_review49", ("mujoco",)))
    assert missing_extra("HalfCheetah-v5") == ("env 'HalfCheetah-v5' needs an optional dependency: install it from the "
                                               "repository root with: .venv/bin/pip install -c requirements.lock -e '.[mujoco]'")
