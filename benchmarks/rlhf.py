"""RLHF PPO step time on CPU: Proxima next to TRL 1.12's PPO, at the same settings.

Settings (both libraries): a 2-layer, 64-wide GPT-2 policy; a reward model and a value model of the
same size (the value model initialized from the reward model, as in TRL's examples); a 1,024-word
tokenizer (so that random models rarely emit EOS and responses run the full length); batch 16
prompts of 8-16 tokens; responses of at most 32 tokens, stopped at EOS; temperature 0.7, top-k off;
4 PPO epochs of 1 minibatch (TRL's defaults); KL coefficient 0.05; learning rate 1e-5.

A "PPO step" is one full iteration: generate, score (policy, reference, value and reward forwards),
advantages, 4 epochs of updates, metrics. Each repeat is a fresh process: 2 warm-up steps, then the
median of --steps timed steps, as wall-clock seconds and as CPU seconds of the process (the latter is
less sensitive to other jobs on a shared machine). Generated tokens/s counts response tokens up to
and including EOS over the wall-clock time spent in generation. The libraries' repeats alternate
(a round: one repeat of each), and the TRL / Proxima ratio under the table is the median (min-max)
of the per-round ratios (benchmarks/README.md's rule); a note follows when a repeat's process got
under 0.9 of a core (CPU seconds per wall second of its steps): its ratios are then unreliable.

    python benchmarks/rlhf.py --setup-trl           # once: TRL in its own venv (.bench-venv/trl)
    python benchmarks/rlhf.py --repeats 3 --threads 1

The TRL venv is separate because TRL pins its own dependencies; the models and tokenizer are built
once by this script and loaded by both from a temporary directory (nothing is downloaded). Bad
arguments are one error line (exit 2) before anything runs; a library whose repeat failed is a row
saying why, and the exit status is then 1. The table ends with its ``Command:`` line. A SIGTERM or
Ctrl-C kills the running worker and removes the temporary directory (exit 143 or 130).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

# benchmarks/tables.py: stdlib at import (the workers run it in TRL's venv too); machine_line imports torch when called
from tables import (ChildFailed, arg_problem, command, cpu_share, machine_line, median_range, refuse, round_ratios, run_child,
                    parser, started, starved_note, stopping_children)

ROOT = Path(__file__).resolve().parent.parent
TRL_VENV = ROOT / ".bench-venv" / "trl"
LIBRARIES = ("proxima", "trl")
SETTINGS = dict(batch_size=16, response_length=32, n_layer=2, n_embd=64, vocab_words=1021, epochs=4, minibatches=1,
                temperature=0.7, kl_coef=0.05, lr=1e-5)


# ---------------------------------------------------------------------------------------------
# assets: tokenizer, policy, reward model, prompts (built once, in the main environment)
# ---------------------------------------------------------------------------------------------
def build_assets(folder: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel, PreTrainedTokenizerFast

    s = SETTINGS
    words = [f"w{i}" for i in range(s["vocab_words"])]
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[EOS]"] + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]")
    tokenizer.padding_side = "left"
    config = GPT2Config(vocab_size=len(vocab), n_positions=128, n_embd=s["n_embd"], n_layer=s["n_layer"], n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=2, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    for name, cls, extra in (("policy", GPT2LMHeadModel, {}), ("reward", GPT2ForSequenceClassification, {"num_labels": 1})):
        model = cls(GPT2Config(**{**config.to_dict(), **extra}))
        model.save_pretrained(folder / name)
        tokenizer.save_pretrained(folder / name)
    rng = random.Random(0)
    prompts = [" ".join(rng.choice(words) for _ in range(rng.randint(8, 16))) for _ in range(256)]
    (folder / "prompts.txt").write_text("\n".join(prompts) + "\n")


# ---------------------------------------------------------------------------------------------
# workers: one process per (library, repeat); print one JSON line
# ---------------------------------------------------------------------------------------------
def response_tokens(responses, eos_id: int) -> int:
    """Tokens up to and including the first EOS (all of them when there is none), summed over rows."""
    is_eos = responses == eos_id
    first = is_eos.int().argmax(1)
    return int(((first + 1) * is_eos.any(1) + responses.shape[1] * ~is_eos.any(1)).sum())


def worker_proxima(assets: Path, steps: int, warmup: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from proxima.rlhf.config import RLHFConfig
    from proxima.rlhf.models import quiet_transformers
    from proxima.rlhf.trainer import RLHFTrainer

    quiet_transformers()
    s = SETTINGS
    cfg = RLHFConfig(policy=str(assets / "policy"), reward=str(assets / "reward"), value_init="reward",
                     prompts=str(assets / "prompts.txt"), batch_size=s["batch_size"], max_new_tokens=s["response_length"],
                     update_epochs=s["epochs"], num_minibatches=s["minibatches"], temperature=s["temperature"],
                     kl_coef=s["kl_coef"], lr=s["lr"], threads=int(os.environ["BENCH_THREADS"]))
    trainer = RLHFTrainer(cfg)
    times, cpu_times, tps, lengths = [], [], [], []
    for i in range(warmup + steps):
        t0, c0 = time.perf_counter(), time.process_time()
        metrics, _ = trainer.train_step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
            tps.append(metrics["charts/tokens_per_second"])
            lengths.append(metrics["val/response_length"])
    return {"step_s": statistics.median(times), "cpu_s": statistics.median(cpu_times),
            "tokens_per_s": statistics.median(tps), "length": statistics.mean(lengths)}


def worker_trl(assets: Path, steps: int, warmup: int) -> dict:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer, TrainerCallback
    from transformers.utils import logging as hf_logging

    from trl.experimental.ppo import PPOConfig, PPOTrainer
    from trl.experimental.ppo import ppo_trainer as ppo_module

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
    s = SETTINGS
    tokenizer = AutoTokenizer.from_pretrained(assets / "policy")
    tokenizer.padding_side = "left"
    prompts = (assets / "prompts.txt").read_text().splitlines()
    dataset = Dataset.from_dict({"input_ids": [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]})
    gen = {"seconds": [], "tokens": []}
    original = ppo_module.batch_generation

    def timed_generation(model, queries, *args, **kwargs):  # TRL's own generation, timed
        t0 = time.perf_counter()
        query_responses, logits = original(model, queries, *args, **kwargs)
        gen["seconds"].append(time.perf_counter() - t0)
        gen["tokens"].append(response_tokens(query_responses[:, queries.shape[1]:], tokenizer.eos_token_id))
        return query_responses, logits

    ppo_module.batch_generation = timed_generation
    marks, cpu_marks = [], []

    class StepTimer(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            marks.append(time.perf_counter())
            cpu_marks.append(time.process_time())

        def on_step_end(self, args, state, control, **kw):
            marks.append(time.perf_counter())
            cpu_marks.append(time.process_time())

    with tempfile.TemporaryDirectory() as out:
        args = PPOConfig(
            output_dir=out, per_device_train_batch_size=s["batch_size"], gradient_accumulation_steps=1,
            num_mini_batches=s["minibatches"], num_ppo_epochs=s["epochs"], response_length=s["response_length"],
            stop_token="eos", temperature=s["temperature"], kl_coef=s["kl_coef"], learning_rate=s["lr"],
            total_episodes=s["batch_size"] * (warmup + steps), num_sample_generations=0, report_to="none",
            save_strategy="no", logging_steps=1, disable_tqdm=True, use_cpu=True, seed=0, bf16=False,
            dataloader_num_workers=0,
        )
        trainer = PPOTrainer(
            args=args, processing_class=tokenizer, model=AutoModelForCausalLM.from_pretrained(assets / "policy"),
            ref_model=AutoModelForCausalLM.from_pretrained(assets / "policy"),
            reward_model=AutoModelForSequenceClassification.from_pretrained(assets / "reward", num_labels=1),
            value_model=AutoModelForSequenceClassification.from_pretrained(assets / "reward", num_labels=1),
            train_dataset=dataset, callbacks=[StepTimer()],
        )
        trainer.train()
    times = [b - a for a, b in zip(marks, marks[1:])][warmup:]
    cpu_times = [b - a for a, b in zip(cpu_marks, cpu_marks[1:])][warmup:]
    tps = [t / sec for t, sec in zip(gen["tokens"], gen["seconds"])][warmup:]
    lengths = [t / s["batch_size"] for t in gen["tokens"]][warmup:]
    return {"step_s": statistics.median(times), "cpu_s": statistics.median(cpu_times),
            "tokens_per_s": statistics.median(tps), "length": statistics.mean(lengths), "trl": trl.__version__}


# ---------------------------------------------------------------------------------------------
# orchestration
# ---------------------------------------------------------------------------------------------
def setup_trl() -> None:
    """Create TRL_VENV; ChildFailed (one line: the step and its last output line) when a step fails."""
    for cmd in ([sys.executable, "-m", "venv", str(TRL_VENV)], [str(TRL_VENV / "bin" / "pip"), "install", "trl==1.12.*", "torch==2.13.0"]):
        proc = run_child(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
            raise ChildFailed(f"`{shlex.join(cmd)}` failed (exit {proc.returncode}): {last}")


def run_worker(python: str, library: str, assets: Path, steps: int, warmup: int, threads: int, epochs: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "BENCH_THREADS": str(threads),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = run_child([python, __file__, "--worker", library, "--assets", str(assets), "--steps", str(steps),
                      "--warmup", str(warmup), "--epochs", str(epochs)], capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def summarize(results: list) -> str:
    """The row's cells after the library's name: as many as the header has (a failed library's
    row was two cells in a six-column table)."""
    ok = [r for r in results if "error" not in r]
    if not ok:
        return f"failed: {results[0]['error']} | - | - | - | 0"

    def cell(key: str, fmt: str) -> str:
        xs = [r[key] for r in ok]
        return f"{format(statistics.median(xs), fmt)} ({format(min(xs), fmt)}-{format(max(xs), fmt)})"

    return (f"{cell('step_s', '.3f')} | {cell('cpu_s', '.3f')} | {cell('tokens_per_s', ',.0f')} | "
            f"{statistics.mean(r['length'] for r in ok):.1f} | {len(ok)}")


def ratio_lines(results: dict) -> list:
    """The lines under the table: TRL / Proxima per round, of seconds and of CPU seconds per step
    (rounds where either failed left out; none without both libraries), and ``tables.starved_note``
    of every repeat's CPU share."""
    lines = []
    pairs = [(t, p) for t, p in zip(results.get("trl", []), results.get("proxima", [])) if "error" not in t and "error" not in p]
    if pairs:
        trl, ours = zip(*pairs)
        wall = round_ratios([r["step_s"] for r in trl], [r["step_s"] for r in ours])
        cpu = round_ratios([r["cpu_s"] for r in trl], [r["cpu_s"] for r in ours])
        lines.append(f"TRL / Proxima, per round: seconds per step {median_range(wall, digits=2)}x; "
                     f"CPU seconds per step {median_range(cpu, digits=2)}x")
    note = starved_note([cpu_share(r["cpu_s"], r["step_s"]) for rs in results.values() for r in rs if "error" not in r])
    return lines + ([note] if note else [])


def main(argv=None) -> int:
    p = parser("rlhf.py", __doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per library (at least 3 for a range)")
    p.add_argument("--steps", type=int, default=8, help="timed PPO steps per repeat (median taken)")
    p.add_argument("--warmup", type=int, default=2, help="untimed PPO steps first (0 or more)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (and OMP_NUM_THREADS)")
    p.add_argument("--epochs", type=int, default=4, help="PPO epochs per step (TRL's default is 4)")
    p.add_argument("--libraries", default="proxima,trl", help="comma separated, of: proxima, trl (default both)")
    p.add_argument("--setup-trl", action="store_true", help=f"create {TRL_VENV} with trl==1.12.* and torch==2.13.0, then exit")
    p.add_argument("--worker", choices=("proxima", "trl"), help=argparse.SUPPRESS)
    p.add_argument("--assets", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    SETTINGS["epochs"] = args.epochs
    if args.worker:
        fn = worker_proxima if args.worker == "proxima" else worker_trl
        print(json.dumps(fn(Path(args.assets), args.steps, args.warmup)), flush=True)
        return 0
    # before anything is built or run: --libraries foo was a KeyError and --repeats 0 an IndexError, as tracebacks
    problem = arg_problem(args, at_least_one=("repeats", "steps", "threads", "epochs"), files=())
    if not problem and args.warmup < 0:
        problem = f"--warmup {args.warmup}: must be 0 or more"
    libraries = list(dict.fromkeys(name.strip() for name in args.libraries.split(",") if name.strip()))
    unknown = [name for name in libraries if name not in LIBRARIES]
    if not problem and (unknown or not libraries):
        problem = f"--libraries {args.libraries}: " + (f"no library {unknown[0]!r}" if unknown else "none given") + \
            f"; name some of {', '.join(LIBRARIES)}, comma separated"
    if problem:
        return refuse("rlhf.py", problem)
    if args.setup_trl:
        try:
            setup_trl()
        except ChildFailed as e:
            return refuse("rlhf.py", str(e))
        return 0
    start = started()
    pythons = {"proxima": sys.executable, "trl": str(TRL_VENV / "bin" / "python")}
    results = {name: [] for name in libraries}
    with stopping_children("rlhf.py", "proxima-rlhf-") as tmp:
        build_assets(tmp)
        for repeat in range(args.repeats):  # interleaved, so that load on the machine hits both alike
            for name in libraries:
                if name == "trl" and not Path(pythons["trl"]).exists():
                    results[name].append({"error": f"{TRL_VENV} missing: run `python benchmarks/rlhf.py --setup-trl`"})
                    continue
                results[name].append(run_worker(pythons[name], name, tmp, args.steps, args.warmup, args.threads,
                                                args.epochs))
                print(f"repeat {repeat + 1} {name}: {json.dumps(results[name][-1])}", file=sys.stderr, flush=True)
    print(f"threads {args.threads}, {args.steps} timed steps after {args.warmup} warm-up, {args.repeats} repeats; "
          f"settings {json.dumps(SETTINGS)}\n")
    print(f"{machine_line(args.threads, start)}\n")
    print("| library | seconds per PPO step, median (range) | CPU seconds per step | generated tokens/s | "
          "mean response length | repeats |")
    print("|---|---|---|---|---|---|")
    for name in libraries:
        label = "Proxima" if name == "proxima" else "TRL 1.12 (trl.experimental.ppo)"
        print(f"| {label} | {summarize(results[name])} |")
    for line in ratio_lines(results):
        print(f"\n{line}")
    print(f"\n{command('rlhf.py', p, args)}", flush=True)
    failed = [(name, r["error"]) for name in libraries for r in results[name] if "error" in r]
    if failed:  # a row of errors is no measurement: a caller must not read the run as clean
        print(f"rlhf.py: error: {len(failed)} repeat(s) failed ({failed[0][0]}: {failed[0][1]}); the table says which", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
