"""The CPU-only replacements of the training step, each against what it replaced, in one process.

    .venv/bin/python benchmarks/cpu_parts.py                      # 9 rounds
    .venv/bin/python benchmarks/cpu_parts.py --out benchmarks/results/cpu-parts.md

At the vs-PureJaxRL shape (native CartPole, 4,096 envs x 16 steps, minibatches of 16,384 rows,
one thread), CPU time (``time.process_time``) per call of:

* loss: ``loss_cpu.ppo_loss`` (closed-form backward) vs ``ppo.ppo_loss`` through autograd, forward
  and backward from the new log-probs, values and entropies of a real minibatch;
* head: ``agent._categorical_logprob_entropy`` on the CPU (``_CategoricalCPU``) vs the plain
  log_softmax / gather / entropy over the last axis, forward and backward, 16,384 x 2 logits;
  and acting (no_grad, 256 envs: the fast preset's until 2026-12-05, 96 now): its forward called directly vs through
  ``Function.apply``;
* optimizer: ``adam.Adam`` vs ``torch.optim.Adam(fused=True)``: zero_grad, clip and step on the
  agent's parameters;
* advantages: ``ppo.next_values`` (the rollout's values reused) vs the critic on every final obs,
  then GAE, on a real rollout;
* gradients: ``grad_cpu.BlockGradients`` vs the agent's forward, ``loss_cpu.ppo_loss`` and
  autograd's backward, for a minibatch of 1,024 rows (one block: the fast preset's minibatch until 2026-12-05) and
  of 16,384 rows (four blocks of 4,096 rows; eight in the tables of 2,048-row blocks);
* tanh (``proxima/tanh_cpu.py``): ``torch.tanh`` vs ``2 sigmoid(2x) - 1`` on a row block (4,096 x 64)
  in place, the ``Tanh`` module acting in 4 envs, and a 16,384-row minibatch's gradients, each with
  ``tanh_cpu.MODE`` "torch" vs "sigmoid" (MKL's tanh is the slow side on CPUs not Intel's); then
  "sigmoid" (in the kernel its folded form, ``tanh_of_doubled_``) vs "numpy" on the same block,
  acting in 4 and in 4,096 envs, and the minibatch's gradients;
* acting at 4,096 envs (no_grad): the actor through ``mlp_cpu`` (last layer W h^T, logits as a
  (B, n) view of (n, B)), a Gumbel-max sample as ``agent._categorical_sample`` writes it and the
  head, vs the same with the last layer h W^T on each block and ``argmax(logits - log(-log u))``.

Rounds alternate the order of the two sides; the table gives median (min-max) microseconds per call
and the per-round ratio old / new. ``--only`` measures some parts: their exact names separated by
';' (what the Command: line of a table of those rows reproduces), or text their names contain.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tables import arg_problem, command, emit, machine_line, markdown_table, median_range, parser, refuse, started  # noqa: E402  (benchmarks/tables.py)


def cpu_us(fn, calls: int) -> float:
    t0 = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - t0) / calls * 1e6


def part_names() -> list:
    """The parts' names in table order: known before the trainer is built, so that ``--only`` is checked first."""
    from proxima import mlp_cpu

    rows = mlp_cpu.block_rows([64])
    return ["gradients, 1,024-row minibatch (one block)",
            f"gradients, 16,384-row minibatch ({16384 // rows} blocks)",  # 8 when blocks were 2,048 rows (before 64a48ae)
            "loss fwd+bwd (16,384 rows)",
            "categorical head fwd+bwd (16,384 x 2)",
            "categorical head, acting (no_grad, 256 x 2)",
            "acting, 4,096 envs (no_grad): actor, sample, log-prob",
            f"tanh, a {rows:,} x 64 block in place (and its copy)",
            "tanh, acting in 4 envs (4 x 64, tanh_cpu.Tanh, no_grad)",
            "gradients, 16,384-row minibatch, by tanh mode",
            f"tanh numpy, a {rows:,} x 64 block in place (and its copy)",
            "tanh numpy, acting in 4 envs (4 x 64, tanh_cpu.Tanh, no_grad)",
            "tanh numpy, acting in 4,096 envs (4,096 x 64, tanh_cpu.Tanh, no_grad)",
            "tanh numpy, gradients, 16,384-row minibatch",
            "zero_grad + clip + Adam step",
            "advantages (4,096 x 16)"]


def select_parts(only, names: list) -> tuple:
    """(the parts ``--only`` selects, in table order; '' or the one error line). ``only`` is terms
    separated by ';', each a part's exact name or, when no part has that name, text the names
    contain. Exact names make a recorded command reproduce its table alone: a bare substring such as
    'tanh' selects every part named after it since, as parts are added."""
    if only is None:
        return list(names), ""
    terms = [t.strip() for t in only.split(";") if t.strip()]
    chosen = set()
    for term in terms or [only]:
        hits = [n for n in names if n == term] or [n for n in names if term and term in n]
        if not hits:
            which = "" if len(terms) <= 1 else f"{term!r} "
            return [], f"--only {only!r}: {which}matches no part (the parts: {'; '.join(names)})"
        chosen.update(hits)
    return [n for n in names if n in chosen], ""


def main(argv=None) -> int:
    p = parser("cpu_parts.py", __doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--calls", type=int, default=20, help="calls per side and round")
    p.add_argument("--out", default=None, help="append the table to this file")
    p.add_argument("--only", default=None,
                   help="only these parts, separated by ';': each a part's exact name, or else text its name contains "
                        "(--only 'tanh numpy': the four numpy rows; --only 'acting, 4,096 envs (no_grad): actor, sample, "
                        "log-prob': that row alone)")
    args = p.parse_args(argv)
    problem = arg_problem(args, at_least_one=("rounds", "calls"))
    if problem:
        return refuse("cpu_parts.py", problem)
    names, problem = select_parts(args.only, part_names())
    if problem:
        return refuse("cpu_parts.py", problem)

    import torch

    from proxima import agent as agent_mod, grad_cpu, loss_cpu, mlp_cpu, ppo, tanh_cpu
    from proxima.adam import Adam
    from proxima.config import PPOConfig
    from proxima.trainer import Trainer

    torch.set_num_threads(1)
    cfg = PPOConfig(env_id="CartPole-v1", backend="native", num_envs=4096, num_steps=16, total_timesteps=4096 * 16 * 100_000,
                    threads=1, progress=False, eval_episodes=0, checkpoint_every=0)
    trainer = Trainer(cfg, quiet=True)
    for _ in range(2):
        trainer.train_iteration()
    agent, ro, batch = trainer.agent, trainer.rollout, trainer.parts.batch
    mb = {k: v[:16384] for k, v in batch.items()}
    with torch.no_grad():
        _, lp0, ent0, v0 = agent(mb["obs"], mb["actions"])
        logits0 = agent.actor(mb["obs"]).contiguous()  # the head rows: row-major logits, as before mlp_cpu's W h^T
    kw = dict(clip_coef=cfg.clip_coef, vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef, clip_vloss=cfg.clip_vloss, norm_adv=cfg.norm_adv)

    def loss(fn):
        def run():
            x = [t.clone().requires_grad_() for t in (lp0, v0, ent0)]
            fn(x[0], mb["logprobs"], mb["advantages"], x[1], mb["values"], mb["returns"], x[2], **kw)["loss"].backward()
        return run

    def plain_head(logits, action):
        logp = torch.log_softmax(logits, dim=-1)
        return logp.gather(-1, action.long().unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)

    def head(fn):
        def run():
            logits = logits0.clone().requires_grad_()
            lp, ent = fn(logits, mb["actions"])
            (lp.sum() + 0.01 * ent.sum()).backward()
        return run

    def acting_head(fn):
        logits, action = logits0[:256].clone(), mb["actions"][:256]

        @torch.no_grad()
        def run():
            fn(logits, action)
        return run

    def forward_blocks_before(x, weights, biases, act, rows, keep_hidden):
        """mlp_cpu._forward_blocks before its last layer ran as W h^T: every layer h W^T, block by block."""
        forward_act, _ = mlp_cpu.ACTIVATIONS[act]
        last = len(weights) - 1
        outs = [x.new_empty(x.shape[0] if keep_hidden or i == last else min(rows, x.shape[0]), w.shape[0])
                for i, w in enumerate(weights)]
        w_t = [w.t() for w in weights]
        blocks = [o.split(rows) if keep_hidden or i == last else None for i, o in enumerate(outs)]
        for k, h in enumerate(x.split(rows)):
            mlp_cpu.forward_block(h, w_t, biases, forward_act,
                                  [blocks[i][k] if blocks[i] is not None else outs[i][:h.shape[0]] for i in range(last + 1)])
        return outs

    def acting(old: bool):
        obs = mb["obs"][:4096]

        @torch.no_grad()
        def run():
            if old:  # the kernel's forward before, then argmax over the last axis
                now, mlp_cpu._forward_blocks = mlp_cpu._forward_blocks, forward_blocks_before
                try:
                    logits = agent.actor(obs)
                finally:
                    mlp_cpu._forward_blocks = now
                u = torch.rand_like(logits).clamp(1e-20, 1.0)
                action = torch.argmax(logits - torch.log(-torch.log(u)), dim=-1)
            else:
                logits = agent.actor(obs)
                action = agent_mod._categorical_sample(logits)
            agent_mod._categorical_logprob_entropy(logits, action)
        return run

    params = {k: [q.detach().clone().requires_grad_() for q in agent.parameters()] for k in ("old", "new")}
    optimizers = {"old": torch.optim.Adam(params["old"], lr=torch.tensor(1e-3), eps=1e-5, fused=True),
                  "new": Adam(params["new"], lr=torch.tensor(1e-3), eps=1e-5)}
    grads = [torch.randn_like(q) for q in params["old"]]

    def optimizer(side):
        def run():
            opt = optimizers[side]
            opt.zero_grad(set_to_none=True)
            for q, g in zip(params[side], grads):
                q.grad = g.clone()
            torch.nn.utils.clip_grad_norm_(params[side], cfg.max_grad_norm)
            opt.step()
        return run

    def value_of(obs):
        return agent.get_value(obs.reshape(-1, *obs.shape[2:])).reshape(obs.shape[:2])

    def advantages(next_values):
        @torch.no_grad()
        def run():
            nv = next_values()
            ppo.compute_gae(ro.rewards, ro.values, nv, ro.terminated, ro.dones, cfg.gamma, cfg.gae_lambda)
        return run

    blocks = grad_cpu.BlockGradients.for_agent(agent, cfg)

    def tanh_mode(mode, fn):
        """fn with tanh_cpu.MODE set to ``mode`` for the call (the process's own mode restored after)."""
        def run():
            own, tanh_cpu.MODE = tanh_cpu.MODE, mode
            try:
                fn()
            finally:
                tanh_cpu.MODE = own
        return run

    block = torch.randn(mlp_cpu.block_rows([64]), 64)
    scratch = torch.empty_like(block)

    def tanh_block(fn):
        return lambda: fn(scratch.copy_(block))

    acting_act, acting_h, acting_big = tanh_cpu.Tanh(), torch.randn(4, 64), torch.randn(4096, 64)

    @torch.no_grad()
    def tanh_acting():
        acting_act(acting_h)

    @torch.no_grad()
    def tanh_acting_big():
        acting_act(acting_big)

    def grads_autograd(rows):
        small = {k: v[:rows] for k, v in mb.items()}

        def run():
            agent.zero_grad(set_to_none=True)
            _, lp, ent, v = agent(small["obs"], small["actions"])
            loss_cpu.ppo_loss(lp, small["logprobs"], small["advantages"], v, small["values"], small["returns"], ent,
                              **kw)["loss"].backward()
        return run

    def grads_blocks(rows):
        small = {k: v[:rows] for k, v in mb.items()}

        def run():
            agent.zero_grad(set_to_none=True)
            blocks(small)
        return run

    bodies = [  # (before, now, before's label, now's label), in the order of part_names()
        (grads_autograd(1024), grads_blocks(1024), "forward + loss_cpu + autograd", "grad_cpu.BlockGradients"),
        (grads_autograd(16384), grads_blocks(16384), "forward + loss_cpu + autograd", "grad_cpu.BlockGradients"),
        (loss(ppo.ppo_loss), loss(loss_cpu.ppo_loss), "ppo.ppo_loss + autograd", "loss_cpu.ppo_loss"),
        (head(plain_head), head(agent_mod._categorical_logprob_entropy), "log_softmax over the last axis + autograd",
         "_CategoricalCPU"),
        (acting_head(agent_mod._CategoricalCPU.apply), acting_head(agent_mod._categorical_logprob_entropy),
         "_CategoricalCPU.apply", "its forward, called directly"),
        (acting(True), acting(False), "last layer h W^T, argmax", "last layer W h^T, argmin"),
        (tanh_block(torch.Tensor.tanh_), tanh_block(tanh_cpu.sigmoid_tanh_), "torch.tanh (MKL)", "tanh_cpu.sigmoid_tanh_"),
        (tanh_mode("torch", tanh_acting), tanh_mode("sigmoid", tanh_acting), "MODE torch", "MODE sigmoid"),
        (tanh_mode("torch", grads_blocks(16384)), tanh_mode("sigmoid", grads_blocks(16384)), "MODE torch", "MODE sigmoid"),
        (tanh_block(tanh_cpu.tanh_of_doubled_), tanh_block(tanh_cpu.numpy_tanh_),
         "tanh_cpu.tanh_of_doubled_ (the kernel's folded sigmoid form)", "tanh_cpu.numpy_tanh_"),
        (tanh_mode("sigmoid", tanh_acting), tanh_mode("numpy", tanh_acting), "MODE sigmoid", "MODE numpy"),
        (tanh_mode("sigmoid", tanh_acting_big), tanh_mode("numpy", tanh_acting_big), "MODE sigmoid", "MODE numpy"),
        (tanh_mode("sigmoid", grads_blocks(16384)), tanh_mode("numpy", grads_blocks(16384)), "MODE sigmoid", "MODE numpy"),
        (optimizer("old"), optimizer("new"), "torch.optim.Adam(fused=True)", "adam.Adam"),
        (advantages(lambda: value_of(ro.final_obs)),
         advantages(lambda: ppo.next_values(ro.values, ro.final_obs, ro.dones, ro.terminated, value_of)),
         "critic on every final obs", "ppo.next_values"),
    ]
    every = part_names()
    assert len(bodies) == len(every), "part_names() and bodies must list the same parts"
    parts = {name: body for name, body in zip(every, bodies) if name in names}
    times = {name: ([], []) for name in parts}
    start = started()
    try:
        for r in range(args.rounds):
            for name, (old, new, _, _) in parts.items():
                for side in ((0, 1) if r % 2 == 0 else (1, 0)):
                    fn = (old, new)[side]
                    fn()  # untimed: lazy state, caches
                    times[name][side].append(cpu_us(fn, args.calls))
            print(f"round {r + 1} done", file=sys.stderr)
    finally:
        trainer.close()
    rows = []
    for name, (old_us, new_us) in times.items():
        _, _, old_label, new_label = parts[name]
        ratios = [a / b for a, b in zip(old_us, new_us)]
        rows.append([name, f"{old_label}: {median_range(old_us, digits=0)}", f"{new_label}: {median_range(new_us, digits=0)}",
                     f"{median_range(ratios, digits=2)}x"])
    table = markdown_table(["part", "before (us a call)", "now (us a call)", "before / now, per round"], rows)
    text = "\n".join([f"CPU time per call, 1 thread, {args.rounds} alternating rounds of {args.calls} calls a side, one process "
                      f"(native CartPole at 4,096 envs x 16 steps). {machine_line(1, start)}", "", table, "",
                      command("cpu_parts.py", p, args), ""])
    return emit(text, args.out, script="cpu_parts.py")


if __name__ == "__main__":
    sys.exit(main())
