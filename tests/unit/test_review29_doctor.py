"""Review 29 of `proxima doctor`, --device and the compile cache: an uncreatable cache is one line
(exit 2) and doctor's "no", not a 55-line traceback; --device auto|cuda ask a tiny op, as doctor
does, on the device they will use; doctor's thread count and settings say what train uses and
refuses; a relative cache setting is shown as the absolute folder inductor uses; a full stdout is
one line."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest
import torch

import warm_python
from cli_helpers import one_error_line
from proxima import accel, device, doctor
from proxima.config import ConfigError

TRAIN = ["-m", "proxima", "train", "CartPole-v1", "--total-timesteps", "256", "--num-envs", "2", "--num-steps", "64",
         "--threads", "1", "--no-progress", "--compile"]


@pytest.fixture(autouse=True)
def clean_settings(monkeypatch):
    """What a fresh `proxima doctor` sees: no compile cache setting, no inductor $CXX snapshot."""
    for name in ("TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME", "PROXIMA_DIST_TIMEOUT", "PROXIMA_CPU_TANH", "CXX",
                 "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "torch._inductor.config", raising=False)
    monkeypatch.setattr(device, "_NOTED", set(), raising=False)


# --- 1. an uncreatable compile cache -------------------------------------------------------------

def _cache_cases(tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("")
    return {
        "XDG_CACHE_HOME": (lambda: monkeypatch.setenv("XDG_CACHE_HOME", str(afile)), afile / "proxima" / "inductor"),
        "HOME": (lambda: monkeypatch.setenv("HOME", "/proc/nohome"), Path("/proc/nohome/.cache/proxima/inductor")),
        "TORCHINDUCTOR_CACHE_DIR": (lambda: monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/proc/nocache"),
                                    Path("/proc/nocache")),
    }


@pytest.mark.skipif(sys.platform != "linux", reason="/proc is Linux's")
@pytest.mark.parametrize("source", ["XDG_CACHE_HOME", "HOME", "TORCHINDUCTOR_CACHE_DIR"])
def test_an_uncreatable_cache_is_a_config_error_naming_the_folder_and_the_setting(source, tmp_path, monkeypatch):
    setup, path = _cache_cases(tmp_path, monkeypatch)[source]
    setup()
    with pytest.raises(ConfigError) as e:
        accel.setup_compile_cache()
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"--compile: the compile cache {path} cannot be created or written (")
    assert f"from {source}=" in message
    assert message.endswith("set TORCHINDUCTOR_CACHE_DIR (or XDG_CACHE_HOME) to a writable folder, or drop --compile")
    if source != "TORCHINDUCTOR_CACHE_DIR":
        assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # inductor was not pointed at it


def test_train_compile_with_an_uncreatable_cache_is_one_line_exit_2(tmp_path):
    """The reviewer's repro: XDG_CACHE_HOME a regular file; it died after 55 lines, exit 1, ending in
    "Artifact of type=precompile already registered in mega-cache artifact factory"."""
    afile = tmp_path / "afile"
    afile.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(afile)
    proc = warm_python.run([sys.executable, *TRAIN, "--run-dir", str(tmp_path / "run")], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert one_error_line(proc.stderr, "proxima train") == (
        f"--compile: the compile cache {afile}/proxima/inductor cannot be created or written (Not a directory; from "
        f"XDG_CACHE_HOME={afile}): set TORCHINDUCTOR_CACHE_DIR (or XDG_CACHE_HOME) to a writable folder, or drop --compile")
    assert not (tmp_path / "run").exists()


def test_doctor_says_compile_is_off_with_an_uncreatable_cache(tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(afile))
    info = doctor.collect()
    assert info["compile"]["ok"] is False
    assert info["compile"]["cache"] == f"{afile}/proxima/inductor (not usable: see the hints)"
    hint = next(h for h in info["hints"] if h.startswith("torch.compile unavailable: the compile cache"))
    assert f"from XDG_CACHE_HOME={afile}" in hint and hint.endswith("; or train with compile off")
    assert info["errors"] == {}
    rows = doctor.format_report(info).splitlines()
    assert any(r.split()[:2] == ["torch.compile", "no"] for r in rows), rows


def test_doctors_cache_check_leaves_no_folder_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "a" / "b" / "cache"))
    info = doctor.collect()
    assert info["compile"]["cache"] == f"{tmp_path / 'a' / 'b' / 'cache'} (empty: the first --compile run fills it)"
    assert not any("compile cache" in h for h in info["hints"])
    assert list(tmp_path.iterdir()) == []  # created to check it, removed again
    accel.compile_cache_problem()  # what --compile runs: keeps it
    assert (tmp_path / "a" / "b" / "cache").is_dir() and list((tmp_path / "a" / "b" / "cache").iterdir()) == []


# --- 2. threads ----------------------------------------------------------------------------------

def test_doctor_labels_torchs_thread_count_as_not_what_train_uses():
    info = doctor.collect()
    row = next(r for r in doctor.format_report(info).splitlines() if r.split()[:1] == ["cpu"])
    assert f"torch's default threads {torch.get_num_threads()} (train uses --threads, default 1)" in row
    assert "intra-op threads" not in row


def test_collect_records_the_runs_threads():
    assert doctor.collect(threads=4)["torch_threads"] == 4
    assert doctor.collect()["torch_threads"] == torch.get_num_threads()


# --- 3. and 6. the tiny op, for --device and on the device that will run --------------------------

@pytest.fixture
def broken_gpu(monkeypatch):
    """A CUDA build that lists two GPUs on which nothing computes (a driver too old, a GPU in a bad state)."""
    def boom(*a, **k):
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device\nsecond line")

    monkeypatch.setattr(torch.version, "cuda", torch.version.cuda or "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "synchronize", boom)
    real_ones = torch.ones

    def ones(*a, **k):
        if "cuda" in str(k.get("device", "")):
            boom()
        return real_ones(*a, **k)

    monkeypatch.setattr(torch, "ones", ones)


def test_device_auto_falls_back_to_the_cpu_with_one_note(broken_gpu, capsys):
    assert device.resolve_device("auto") == torch.device("cpu")
    assert device.resolve_device("auto") == torch.device("cpu")
    assert capsys.readouterr().err.splitlines() == [
        "proxima: note: --device auto: CUDA is not usable here (a tiny tensor op on cuda:0 failed (RuntimeError: CUDA "
        "error: no kernel image is available for execution on the device)); using the CPU (proxima doctor says more)"]


@pytest.mark.parametrize("name, where", [("cuda", "cuda:0"), ("cuda:1", "cuda:1")])
def test_device_cuda_fails_in_one_line_with_doctors_reason(name, where, broken_gpu):
    with pytest.raises(ConfigError) as e:
        device.resolve_device(name)
    assert str(e.value) == (f"--device {name!r}: CUDA is not usable here: a tiny tensor op on {where} failed (RuntimeError: "
                            "CUDA error: no kernel image is available for execution on the device); run `proxima doctor` "
                            "for the cause, or use --device cpu")
    assert f"CUDA not usable: a tiny tensor op on {where} failed (RuntimeError: CUDA error: no kernel image" in \
           doctor.cuda_reason(doctor.collect(device=name))


def test_a_usable_gpu_is_chosen(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(device, "cuda_op_problem", lambda dev=None: "")
    assert device.resolve_device("auto") == torch.device("cuda")
    assert capsys.readouterr().err == ""


def test_the_probe_runs_on_the_device_the_process_will_use(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert device.probe_device("cuda:1") == torch.device("cuda", 1)
    assert device.probe_device() == device.probe_device("cuda") == device.probe_device("cpu") == torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_RANK", "1")  # a torchrun rank before set_device: its own GPU, not GPU 0
    assert device.probe_device("cuda") == torch.device("cuda", 1)
    probed = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(device, "cuda_op_problem", lambda dev=None: probed.append(dev) or "")
    info = doctor.collect(device=torch.device("cuda", 1))
    assert probed == [torch.device("cuda", 1)] and info["cuda_usable"] is True


# --- 4. relative settings --------------------------------------------------------------------------

def test_a_relative_xdg_cache_home_is_ignored_and_the_cache_dir_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relcache")  # the XDG spec: a relative path is to be ignored
    assert accel.compile_cache_dir() == tmp_path / "home" / ".cache" / "proxima" / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "kernels")  # inductor makes it absolute against the cwd
    assert accel.compile_cache_dir() == tmp_path / "kernels"
    info = doctor.collect()
    assert info["compile"]["cache_dir"] == str(tmp_path / "kernels")
    assert info["compile"]["cache"].startswith(f"{tmp_path / 'kernels'} (")


# --- 5. a stdout that takes nothing ----------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_doctor_to_a_full_device_is_one_line_exit_2(tmp_path):
    with open("/dev/full", "w") as full:
        proc = warm_python.run([sys.executable, "-m", "proxima", "doctor"], cwd=tmp_path, stdout=full,
                               stderr=__import__("subprocess").PIPE, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == ["proxima doctor: error: <stdout>: could not write (No space left on device); "
                                        "send the report to a file or pipe that takes it"]


class _Stdout:
    def __init__(self, exc):
        self.exc = exc

    def write(self, text):
        raise self.exc

    def flush(self):
        pass


def test_a_broken_pipe_is_left_to_the_cli(monkeypatch):
    monkeypatch.setattr(sys, "stdout", _Stdout(BrokenPipeError(errno.EPIPE, "Broken pipe")))
    with pytest.raises(BrokenPipeError):  # cli._doctor: exit 141, no traceback, as before
        doctor.main([])


def test_a_full_stdout_in_process_is_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _Stdout(OSError(errno.ENOSPC, "No space left on device")))
    assert doctor.main(["--json"]) == 2
    assert capsys.readouterr().err.startswith("proxima doctor: error: <stdout>: could not write (No space left on device)")


# --- 7. settings train refuses ----------------------------------------------------------------------

def test_doctor_words_bad_settings_as_what_to_set(monkeypatch):
    monkeypatch.setenv("PROXIMA_DIST_TIMEOUT", "abc")
    monkeypatch.setenv("PROXIMA_CPU_TANH", "bogus")
    monkeypatch.delitem(sys.modules, "proxima.tanh_cpu")  # read again, as a fresh process reads it
    info = doctor.collect()
    assert info["errors"] == {}
    assert "PROXIMA_CPU_TANH='bogus': must be one of torch, sigmoid, numpy (or unset: chosen by CPU)" in info["hints"]
    timeout = next(h for h in info["hints"] if h.startswith("PROXIMA_DIST_TIMEOUT="))
    assert timeout.startswith("PROXIMA_DIST_TIMEOUT='abc': must be a number of seconds from ")
    assert timeout.endswith("; unset it for the default, 300")
    assert not any(h.startswith("probe ") for h in info["hints"])


def test_a_cpu_runs_record_probes_no_gpu_and_usable_cpus_is_its_own_key(monkeypatch):
    """Review 29b: collect(device=cpu) (every CPU run's meta.json) ran the tiny op on cuda:0, holding a
    CUDA context there for the run's life on a shared GPU machine; cpu_affinity held the cgroup quota."""
    from proxima import device as device_mod
    from proxima import doctor

    probed = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(device_mod, "cuda_op_problem", lambda dev=None: probed.append(dev) or "")
    info = doctor.collect(device=torch.device("cpu"), threads=1)
    assert probed == [] and info["cuda_usable"] is None
    info = doctor.collect(device=torch.device("cuda", 1), threads=1)
    assert len(probed) == 1 and info["cuda_usable"] is True
    monkeypatch.setattr(doctor, "usable_cpus", lambda: 1)
    info = doctor.collect()
    assert info["usable_cpus"] == 1 and info["cpu_affinity"] == len(os.sched_getaffinity(0))


def test_a_cpu_runs_record_on_a_gpu_machine_says_not_probed_not_a_driver_hint(monkeypatch):
    """Review 29c: cuda_usable None (not probed) was read as False: every --device cpu run on a healthy GPU
    machine recorded "CUDA not usable: ; the driver may be too old for CUDA 12.4", and the report said "no"."""
    from proxima import device as device_mod
    from proxima import doctor

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(device_mod, "cuda_op_problem", lambda dev=None: "")
    info = doctor.collect(device=torch.device("cpu"), threads=1)
    assert info["cuda_usable"] is None
    assert not [h for h in info["hints"] if h.startswith("CUDA not usable")], info["hints"]
    assert "  cuda usable      not probed (a CPU run's record)" in doctor.format_report(info).splitlines()
