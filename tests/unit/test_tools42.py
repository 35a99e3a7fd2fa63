"""doctor's CUDA hint on a machine without an NVIDIA GPU, check-env naming the user's line, bench's
--num-envs duplicates, legend and --out folder, the progress line's return window, Python-API notes
worded by field, and a metrics.csv deleted while the run trains."""

from __future__ import annotations

import re
import sys

import pytest
import torch

from proxima import doctor


def _cpu_torch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)


def test_doctor_without_an_nvidia_device_says_the_cpu_build_is_right(monkeypatch):
    _cpu_torch(monkeypatch)
    monkeypatch.setattr(doctor, "nvidia_visible", lambda: False)
    hints = [h for h in doctor.collect()["hints"] if h.startswith("CUDA not usable")]
    assert len(hints) == 1
    assert "the right one here: no NVIDIA GPU or driver is visible (no /dev/nvidia*, no nvidia-smi)" in hints[0]
    assert "to train on GPUs" not in hints[0]
    # the install line stays, for a machine that has a GPU
    assert "on a machine with an NVIDIA GPU and driver, install PyPI's CUDA build" in hints[0] or sys.platform != "linux"


@pytest.mark.skipif(sys.platform != "linux", reason="PyPI's torch is the CUDA build on Linux only")
def test_doctor_cuda_hint_names_the_running_interpreters_pip(monkeypatch, tmp_path):
    _cpu_torch(monkeypatch)
    monkeypatch.setattr(doctor, "nvidia_visible", lambda: True)
    monkeypatch.setattr(sys, "executable", "/opt/py 3/bin/python3")
    monkeypatch.setattr(sys, "prefix", "/opt/py 3")
    monkeypatch.chdir(tmp_path)
    hint = doctor.cuda_reason(doctor.collect())
    assert hint.endswith("install PyPI's CUDA build: '/opt/py 3/bin/python3' -m pip uninstall -y torch && "
                         "'/opt/py 3/bin/python3' -m pip install torch==2.13.0 --index-url https://pypi.org/simple")


def test_doctor_says_dot_venv_pip_from_the_repositorys_venv(monkeypatch, tmp_path):
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "pip").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    assert doctor.pip() == ".venv/bin/pip"


def test_no_doctor_hint_says_a_bare_pip(monkeypatch):
    _cpu_torch(monkeypatch)
    monkeypatch.setattr(doctor, "nvidia_visible", lambda: True)
    monkeypatch.setattr(doctor, "_package", lambda name: (None, False, "not installed"))  # every install hint
    monkeypatch.setattr(torch, "__version__", "2.12.0")  # and the pin hint
    hints = doctor.collect()["hints"]
    assert sum("pip" in h for h in hints) >= 10
    bare = [h for h in hints if re.search(r"(^|[:;&] )pip ", h)]
    assert bare == []


RAISES_ENV = '''import gymnasium as gym
import numpy as np


class Raises(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t > 5:
            raise RuntimeError("boom in step")
        return np.zeros(2, np.float32), 0.0, False, False, {}
'''


@pytest.fixture
def raises_env(tmp_path, monkeypatch):
    from tests.cli_helpers import module_written_in

    yield from module_written_in(tmp_path, monkeypatch, "myenvs42", RAISES_ENV)


def test_check_env_names_the_user_line_that_raised(raises_env, capsys):
    from tests.cli_helpers import run_main

    code, out, err = run_main(["check-env", "myenvs42:Raises"], capsys)
    assert code == 1
    fails = [ln for ln in (out + err).splitlines() if ln.startswith("FAIL step")]
    assert fails == ["FAIL step: expected step(action) returns without raising; got step(0) at step 6 raised "
                     "RuntimeError: boom in step (myenvs42.py:17)"]
