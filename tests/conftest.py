"""Shared fixtures of the fast test tier: one intra-op thread, small configs, probe envs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

# Small MLPs on a shared CPU: one thread is fastest and keeps runs reproducible.
torch.set_num_threads(1)

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:  # makes `import probe_envs` work from any test folder
    sys.path.insert(0, str(TESTS))


@pytest.fixture(autouse=True)
def _denormals_back_on():
    """Trainer turns flush-to-zero on for its life (--flush-denormal); a test that leaves a trainer
    unclosed must not leave it on for the next (hypothesis, for one, refuses to run under FTZ)."""
    yield
    torch.set_flush_denormal(False)


@pytest.fixture(autouse=True)
def _stop_handlers_back():
    """A test that runs a command in-process through exit_process or cli.entry leaves the handlers a finished
    command installs (signals.ignore_stops: a stop exits the process at once): the next test of the same
    worker that signals itself would end the pytest worker. Put every stop signal's handler back."""
    import signal

    sigs = [getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2") if hasattr(signal, name)]
    before = {sig: signal.getsignal(sig) for sig in sigs}
    yield
    for sig, handler in before.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)


@pytest.fixture
def unflipped(monkeypatch):
    """The row-block kernel computes a first layer's weight gradient as (inp^T g)^T, several times
    faster than autograd's g^T inp (mlp_cpu.flipped). MKL's two products agree bit for bit on Intel
    CPUs but only within rounding on AMD's (another summation order): tests that compare the kernel
    with autograd bit for bit take this fixture, and test_mlp_cpu checks the flip on its own."""
    from proxima import mlp_cpu

    monkeypatch.setattr(mlp_cpu, "flipped", lambda w: False)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home directory of the test's own ($HOME), and a working directory apart from it: where ``~``
    in a path must and must not land."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    return home


@pytest.fixture
def small_config():
    """A PPOConfig factory for CartPole that trains in well under a second per iteration."""
    from proxima.config import PPOConfig

    def make(**overrides) -> PPOConfig:
        values = dict(env_id="CartPole-v1", num_envs=4, num_steps=32, total_timesteps=256, num_minibatches=4,
                      update_epochs=2, progress=False, checkpoint_every=0, eval_episodes=0, threads=1)
        values.update(overrides)
        return PPOConfig(**values)

    return make


@pytest.fixture
def probe_envs(monkeypatch):
    """Register the probe envs of tests/probe_envs.py as native envs ('Probe1-v0' ... 'Probe5-v0')."""
    import probe_envs as module

    from proxima.envs import classic

    for env_id, cls in module.PROBES.items():
        monkeypatch.setitem(classic.NATIVE_ENVS, env_id, cls)
    return module


@pytest.fixture
def drawn(monkeypatch):
    """The Figures plot_runs saves, to read their Axes (matplotlib's own objects, not pixels)."""
    from matplotlib.figure import Figure

    figures, real = [], Figure.savefig

    def savefig(self, *args, **kwargs):
        figures.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return figures


@pytest.fixture
def parsed(monkeypatch) -> list:
    """The length of every text load_yaml parses (plot's and the report's readers import it when they read)."""
    import proxima.config

    lengths, load = [], proxima.config.load_yaml
    monkeypatch.setattr(proxima.config, "load_yaml", lambda text: lengths.append(len(text)) or load(text))
    return lengths


@pytest.fixture
def preset_dir(tmp_path, monkeypatch):
    """The shipped preset files in a folder of the test's own, read in their place, where a test adds a broken one."""
    import shutil

    from proxima import presets

    folder = tmp_path / "presets"
    folder.mkdir()
    for path in presets._DIR.glob("*.yaml"):
        shutil.copy(path, folder / path.name)
    monkeypatch.setattr(presets, "_DIR", folder)
    presets.all_presets.cache_clear()
    yield folder
    presets.all_presets.cache_clear()
