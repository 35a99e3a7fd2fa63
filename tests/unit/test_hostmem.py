"""hostmem.keep_freed_memory (PPOConfig.keep_host_memory): the CPU hot loop reuses freed tensor
memory instead of page-faulting it back in from the OS every minibatch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from proxima import hostmem

# minor page faults per training iteration, in a fresh process (the setting is process-wide and one-way)
PROBE = textwrap.dedent("""
    import resource, sys
    from proxima.config import PPOConfig
    from proxima.trainer import Trainer

    keep = sys.argv[1] == "1"
    cfg = PPOConfig(env_id="CartPole-v1", backend="native", num_envs=4096, num_steps=16, total_timesteps=4096 * 16 * 100,
                    progress=False, eval_episodes=0, checkpoint_every=0, keep_host_memory=keep)
    t = Trainer(cfg, quiet=True)
    for _ in range(2):  # warm-up: the heap grows to the iteration's peak
        t.train_iteration()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        t.train_iteration()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 4)
""")


def _glibc() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").gnu_get_libc_version  # noqa: B018
        return True
    except (OSError, AttributeError):
        return False


def _faults_per_iteration(keep: bool) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE, "1" if keep else "0"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return float(out.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _glibc(), reason="glibc's malloc only")
def test_training_iterations_stop_page_faulting_their_tensors_back_in():
    default, kept = _faults_per_iteration(False), _faults_per_iteration(True)
    # 4,096 envs x 16 steps, 4x4 minibatches of 16,384 rows, after 2 warm-up iterations: 9,278
    # faults per iteration by default, 2 kept (one pair of processes). At 1,024 envs the CPU MLP
    # kernel's block buffers leave too few large allocations to tell (498 against 96)
    assert default > 1500
    assert kept < 0.35 * default


def test_keep_freed_memory_is_idempotent():
    first = hostmem.keep_freed_memory()
    assert hostmem.keep_freed_memory() is first
    assert hostmem.applied() is first
