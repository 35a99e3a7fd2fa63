"""report.md's machine table says what decides whether a CPU run reruns bit for bit: the CPU's model and
maker, the CPU tanh it computed with (and a resume's change of it), PROXIMA_CPU_TANH where the recorded
tanh is not the machine's default, and the command a resume ran."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from proxima.cpuinfo import cpu_model, cpu_vendor, numpy_tanh_target
from proxima.report import _machine
from proxima.tanh_cpu import MODES, choose_mode

INTEL = {"platform": "Linux-6.1-x86_64", "machine": "x86_64", "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
         "cpu_vendor": "GenuineIntel", "cpu_simd": "torch AVX512, numpy tanh X86_V4", "cpu_tanh": "torch"}
AMD = {**INTEL, "cpu_model": "AMD EPYC 7R13 Processor", "cpu_vendor": "AuthenticAMD",
       "cpu_simd": "torch AVX2, numpy tanh X86_V3", "cpu_tanh": "sigmoid"}
COMMAND = ["proxima", "train", "CartPole-v1", "--run-dir", "tt"]


def _resume(step: int, tanh: str, **more) -> dict:
    return {"step": step, "command": ["proxima", "resume", "tt", "--total-timesteps", "8192"], "device": "cpu",
            "cpu_tanh": tanh, **more}


def test_the_machine_table_names_the_cpu_model_its_maker_and_the_cpu_tanh():
    machine = _machine({"device": "cpu", "command": COMMAND, "machine": AMD})
    assert machine["cpu model"] == "AMD EPYC 7R13 Processor (AuthenticAMD)"
    assert machine["cpu tanh"] == "sigmoid"  # this CPU's default: nothing to add
    assert machine["command"] == "proxima train CartPole-v1 --run-dir tt"


def test_a_tanh_that_is_not_the_cpus_default_is_marked_and_the_command_sets_it():
    machine = _machine({"device": "cpu", "command": COMMAND, "machine": {**AMD, "cpu_tanh": "torch"}})
    assert machine["cpu tanh"] == "torch (not this CPU's default, sigmoid)"
    assert machine["command"] == "PROXIMA_CPU_TANH=torch proxima train CartPole-v1 --run-dir tt"
    machine = _machine({"command": COMMAND, "machine": {**INTEL, "cpu_tanh": "numpy"}})
    assert machine["command"] == "PROXIMA_CPU_TANH=numpy proxima train CartPole-v1 --run-dir tt"
    # --amp/--compile: torch in those steps, the chosen mode outside them, which is what the variable sets
    machine = _machine({"command": COMMAND, "machine": {**INTEL, "cpu_tanh": "torch", "cpu_tanh_eager": "sigmoid"}})
    assert machine["cpu tanh"] == "torch (sigmoid outside the --amp/--compile steps) (not this CPU's default, torch)"
    assert machine["command"].startswith("PROXIMA_CPU_TANH=sigmoid proxima train")


def test_where_the_default_cannot_be_told_the_command_is_left_as_recorded():
    # a maker other than Intel picks numpy's tanh or the sigmoid form by numpy's SIMD target: not recorded here
    machine = _machine({"command": COMMAND, "machine": {**AMD, "cpu_tanh": "torch", "cpu_simd": None}})
    assert machine["cpu tanh"] == "torch" and machine["command"] == "proxima train CartPole-v1 --run-dir tt"


def test_an_old_machine_section_says_not_recorded_and_no_machine_section_shows_nothing():
    old = {"platform": "Linux-6.1-x86_64", "machine": "x86_64", "cpu_count": 2}
    machine = _machine({"command": COMMAND, "machine": old})
    assert machine["cpu model"] == "not recorded" and machine["cpu tanh"] == "not recorded"
    assert machine["command"] == "proxima train CartPole-v1 --run-dir tt"
    assert _machine({"command": COMMAND})["cpu model"] is None and _machine({})["cpu tanh"] is None


def test_a_resume_that_changed_the_cpu_tanh_shows_the_change_and_its_command():
    meta = {"device": "cpu", "command": COMMAND, "machine": AMD, "resumes": [_resume(2048, "torch")]}
    machine = _machine(meta)
    assert machine["cpu tanh"] == "sigmoid -> torch from step 2,048"
    assert machine["resumes"] == 1
    assert machine["resume command"] == "proxima resume tt --total-timesteps 8192 (from step 2,048)"
    meta["resumes"] = [_resume(2048, "torch"), _resume(4096, "sigmoid")]
    machine = _machine(meta)
    assert machine["cpu tanh"] == "sigmoid -> torch from step 2,048 -> sigmoid from step 4,096"
    assert machine["resume command"].endswith("(from step 4,096, the last of 2)")
    # a resume set aside (a later one went back before it) changed nothing the run kept
    meta["resumes"] = [_resume(4096, "torch"), _resume(2048, "sigmoid")]
    assert _machine(meta)["cpu tanh"] == "sigmoid"
    assert _machine(meta)["resume command"].endswith("(from step 2,048)")
    assert _machine({"command": COMMAND, "machine": AMD})["resume command"] is None


def _proxima(args: list, cwd, tanh: str) -> None:
    env = {**os.environ, "PROXIMA_CPU_TANH": tanh, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "proxima", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_a_run_under_proxima_cpu_tanh_reports_the_variable_and_a_resume_changing_it(tmp_path):
    default = choose_mode(None, torch.backends.mkl.is_available(), cpu_vendor(), numpy_tanh_target())
    other = next(m for m in MODES if m != default)
    _proxima(["train", "CartPole-v1", "--total-timesteps", "256", "--num-envs", "2", "--num-steps", "64",
              "--run-dir", "tt", "--no-progress", "--quiet"], tmp_path, other)
    _proxima(["resume", "tt", "--total-timesteps", "512", "--quiet"], tmp_path, default)
    _proxima(["report", "tt"], tmp_path, default)
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ", 1)[1].rstrip(" |")
            for line in (tmp_path / "tt" / "report.md").read_text().splitlines() if line.startswith("| ")}
    assert rows["cpu tanh"] == f"{other} (not this CPU's default, {default}) -> {default} from step 256"
    assert rows["command"].startswith(f"PROXIMA_CPU_TANH={other} ")
    assert "train CartPole-v1 --total-timesteps 256" in rows["command"]
    assert rows["resume command"].endswith("resume tt --total-timesteps 512 --quiet (from step 256)")
    assert rows["cpu model"] == cpu_model() + (f" ({cpu_vendor()})" if cpu_vendor() else "")
