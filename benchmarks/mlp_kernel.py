"""The CPU MLP kernel (proxima/mlp_cpu.py) on and off: training steps/s side by side, one process.

    .venv/bin/python benchmarks/mlp_kernel.py                     # 4,096 native CartPole envs, 6 rounds
    .venv/bin/python benchmarks/mlp_kernel.py --rounds 8 --out benchmarks/results/mlp-kernel-cpu.md

One Trainer at the vs-PureJaxRL shape (native CartPole, 16 steps, 4 epochs x 4 minibatches of
16,384 rows, 64x64 tanh, one thread). Each round times ``--iterations`` iterations with the kernel,
then as many with the plain modules (``nn.Sequential``, what autograd runs without it), the order
alternating between rounds, each after one untimed iteration; the same process and the same
weights' trajectory, so both see the same machine load. "off" (``plain_modules``) turns off both
users of the row-block kernel: ``mlp_cpu.eligible`` (nets.MLP's forward: acting and autograd's
update) and ``grad_cpu.BlockGradients`` (the update's minibatch gradients without autograd, which
call ``mlp_cpu.forward_block``/``backward_block`` themselves), so its update is autograd over the
plain modules. Everything else (index_select gathers, keep_host_memory, loss_cpu's loss) is as in a
normal run. A timed window in which the process got under 0.9 of a core (its CPU seconds over the
window's wall seconds) puts ``tables.starved_note`` under the table: the ratio is then unreliable.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tables import ab_report, arg_problem, cpu_share, markdown_table, median_range, parser, refuse, started  # noqa: E402  (benchmarks/tables.py)


@contextlib.contextmanager
def plain_modules():
    """The "off" setting: no row-block kernel anywhere in an iteration. ``nets.MLP`` asks
    ``mlp_cpu.eligible`` before its kernel; ``ppo.make_grad_step`` asks its ``BlockGradients``
    ``covers(mb)`` before each minibatch (built once with the Trainer, so the switch is the per-call
    check, not ``for_agent``) and otherwise runs autograd."""
    from proxima import grad_cpu, mlp_cpu

    eligible, covers = mlp_cpu.eligible, grad_cpu.BlockGradients.covers
    mlp_cpu.eligible = lambda *a: False
    grad_cpu.BlockGradients.covers = lambda self, mb: False
    try:
        yield
    finally:
        mlp_cpu.eligible, grad_cpu.BlockGradients.covers = eligible, covers


#: each setting's context: "on" the default (kernel and block gradients), "off" the plain modules
SETTINGS = {"on": contextlib.nullcontext, "off": plain_modules}


def main(argv=None) -> int:
    p = parser("mlp_kernel.py", __doc__.split("\n\n")[0])
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--iterations", type=int, default=3, help="timed iterations per setting and round")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--out", default=None, help="append the table to this file")
    args = p.parse_args(argv)
    problem = arg_problem(args, at_least_one=("num_envs", "iterations", "rounds"))
    if problem:
        return refuse("mlp_kernel.py", problem)

    import torch

    from proxima.config import ConfigError, PPOConfig
    from proxima.trainer import Trainer

    torch.set_num_threads(1)
    n = args.num_envs
    cfg = PPOConfig(env_id="CartPole-v1", backend="native", num_envs=n, num_steps=16, total_timesteps=n * 16 * 100_000,
                    threads=1, progress=False, eval_episodes=0, checkpoint_every=0)
    try:
        trainer = Trainer(cfg, quiet=True)
    except ConfigError as e:  # e.g. more envs than memory holds: train's own one-line check
        return refuse("mlp_kernel.py", str(e))
    start = started()
    sps = {k: [] for k in SETTINGS}
    shares = []  # the cores the process got in each timed window
    try:
        for _ in range(2):
            trainer.train_iteration()
        for r in range(args.rounds):
            for name in (("on", "off") if r % 2 == 0 else ("off", "on")):
                with SETTINGS[name]():
                    trainer.train_iteration()
                    t0, c0 = time.perf_counter(), time.process_time()
                    for _ in range(args.iterations):
                        trainer.train_iteration()
                    wall = time.perf_counter() - t0
                    sps[name].append(n * 16 * args.iterations / wall)
                    shares.append(cpu_share(time.process_time() - c0, wall))
            print(f"round {r + 1}: on {sps['on'][-1]:,.0f} steps/s, off {sps['off'][-1]:,.0f} steps/s", file=sys.stderr)
    finally:
        trainer.close()
    ratios = [a / b for a, b in zip(sps["on"], sps["off"])]
    table = markdown_table(["MLP on the CPU", "training steps/s"], [
        ["row-block kernel (mlp_cpu and grad_cpu's block gradients, default)", median_range(sps["on"], scale=1e3, unit="k")],
        ["plain modules (autograd op by op, no block gradients)", median_range(sps["off"], scale=1e3, unit="k")]])
    return ab_report(f"native CartPole, {n:,} envs x 16 steps, 4 epochs x 4 minibatches, 64x64 tanh, 1 thread; {args.rounds} "
                     f"alternating rounds in one process, {args.iterations} timed iterations per setting and round",
                     table, "kernel / plain", ratios, "mlp_kernel.py", p, args, start, shares=shares)


if __name__ == "__main__":
    sys.exit(main())
