"""One RLHF PPO step: rollout -> advantages -> update, for one process of a data-parallel run.

One iteration (a "PPO step"), with B = batch_size responses per process and R response tokens:

    rollout()             prompts -> generate (KV cache) -> log-probs of policy and reference, values,
                          scores (reward model or function), EOS bookkeeping          all no_grad
    compute_advantages()  -beta * KL per token + score at the last token -> GAE (core compute_gae)
                          -> whitened under the response mask; or grpo / rloo from the group
    update()              epochs x minibatches x micro-batches of the core ppo_loss, gradients
                          accumulated per minibatch, averaged across processes, clipped per model

The algorithm itself lives in algorithm.py, masked.py, kl.py and ppo.py; this file wires models,
optimizers and processes around it, and loop.py runs the steps, logs and writes checkpoints.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from typing import Optional

import numpy as np
import torch

from ..ppo import ppo_loss
from . import dist as D
from . import fsdp
from .algorithm import gae_advantages, group_advantages, grpo_advantages, sequence_rewards, token_rewards
from .config import ConfigError, RLHFConfig, check_kl_horizon, reward_specs, value_error
from .data import PromptSampler, encode_prompts, load_prompts, prompts_sha256
from .generation import (SamplingSettings, decode_responses, generate, pad_left, position_ids_from_mask,
                         response_masks, response_token_lists)
from .kl import KLController, kl_per_token
from .masked import masked_mean, masked_sum, masked_whiten
from ..device import resolve_device
from .models import (DTYPES, apply_lora, check_model_fits, enable_checkpointing, end_ids, generation_eos_ids, load_policy, logprobs_and_entropy,
                     make_reference, make_value_model, max_positions, read_tokenizer, response_logits, token_logprobs,
                     training_tokenizer, vocabulary_sha256, weights_fingerprint, chat_template_sha256)
from .rewards import RewardBatch, load_rewards


def float32_repr(x: float) -> float:
    """``x`` (a float32 score) as the shortest float that reads back as the same float32: samples.jsonl
    shows -1.3, not the widened -1.2999999523162842."""
    return float(str(np.float32(x)))


def sample_row(row, response: str, response_raw: str, tokens: int, eos: bool, score: float) -> dict:
    """One samples.jsonl entry. ``response`` is what reward functions read (special tokens and the EOS dropped);
    ``response_raw`` keeps every sampled token but the padding after EOS (a ``<pad>`` or ``<s>`` the policy
    sampled, the EOS itself), so a reward paid for an empty-looking response can be seen for what it read;
    ``response_tokens`` counts them (the tokens the KL and the loss cover), ``eos`` says whether one ended it."""
    return {"prompt": row.prompt, "response": response, "response_raw": response_raw, "response_tokens": tokens,
            "eos": eos, "score": float32_repr(score)}


class RLHFTrainer:
    """Owns the models, optimizers, KL coefficient, prompt sampler and counters of one process.

    Construction loads and checks everything (a ConfigError for bad input) and writes nothing;
    loop.run(trainer, run_dir) trains and writes the run directory.
    """

    def __init__(self, cfg: RLHFConfig, d: Optional[D.Dist] = None):
        self.cfg, self.dist = cfg, d or D.Dist()
        check_kl_horizon(cfg, self.dist.world_size)  # validate() saw one process; before any model loads
        self.device = resolve_device(cfg.device)
        if self.device.type == "cuda" and self.dist.enabled:
            self.device = torch.device("cuda", self.dist.local_rank)
        torch.set_num_threads(cfg.threads)
        self.critic = cfg.advantage == "gae"

        dtype = DTYPES[cfg.dtype]
        self.prompts = load_prompts(cfg.prompts)
        world = self.dist.world_size
        if len(self.prompts) < world:  # on every rank, before any model loads: a rank's share would be empty
            raise ConfigError(D.prompt_share_refusal(cfg.prompts, len(self.prompts), world))
        self.prompts_sha256 = prompts_sha256(self.prompts)  # recorded in checkpoints: a resume checks the file
        self.reward = load_rewards(reward_specs(cfg), cfg.reward_weights, self.device, dtype, cfg.bf16,
                                   cfg.reward_import_path, micro_batch_size=cfg.micro_batch_size)
        policy, tokenizer_dir = load_policy(cfg.policy, cfg.seed, dtype, fits=self._model_fits(dtype))
        # the tokenizer's folder and the flag that named it, for messages: --tokenizer when it was given,
        # else --policy (its own tokenizer; None when it has none, which read_tokenizer refuses)
        tokenizer_dir, tokenizer_flag = (cfg.tokenizer, "--tokenizer") if cfg.tokenizer else (tokenizer_dir, "--policy")
        # the tokenizer as stored goes into policy/; the copy that trains left-pads and has a pad token, and
        # an EOS: the generation_config's first eos id when the tokenizer names none
        eos_ids = generation_eos_ids(policy)
        self.tokenizer_as_loaded = read_tokenizer(tokenizer_dir, tokenizer_flag, eos_ids)
        self.tokenizer = training_tokenizer(self.tokenizer_as_loaded, eos_ids)
        self.reward.read_with(self.tokenizer)  # before the trial call and the positions note read with it
        if len(self.tokenizer) > policy.get_input_embeddings().num_embeddings:
            raise ConfigError(f"{tokenizer_flag} {tokenizer_dir!r}: the tokenizer has {len(self.tokenizer)} tokens but "
                              f"the policy embeds only {policy.get_input_embeddings().num_embeddings}")
        self.stop_ids = self._stop_ids(policy, tokenizer_dir)
        self.prompt_ids = encode_prompts(self.tokenizer, self.prompts, cfg.max_prompt_length, cfg.truncate_prompts)
        self._probe_reward()

        reward_dir = next((m.path for m in self.reward.models), None)
        if self.critic and cfg.value_init == "reward":
            self._check_same_vocabulary(self.reward.models[0], tokenizer_dir)
        self.value = make_value_model(cfg.value_init, policy, reward_dir, cfg.seed, dtype) if self.critic else None
        self._check_positions(policy)
        # checkpoints hold the trained weights only: a resume loads the frozen reference (with LoRA, the base
        # under the adapter) and the tokenizer from their folders again, and checks them by these
        self.policy_fingerprint = weights_fingerprint(policy)
        self.vocab_sha256 = vocabulary_sha256(self.tokenizer_as_loaded)
        self.template_sha256 = chat_template_sha256(self.tokenizer_as_loaded)
        self.tokenizer_source = f"{tokenizer_flag} {tokenizer_dir}"  # for the resume's message
        self.ref = make_reference(policy, cfg.lora)
        if cfg.lora:
            # seeded here, not by whatever ran before: LoRA's A matrices are drawn from the global RNG
            torch.manual_seed(cfg.seed + 2)
            policy = apply_lora(policy, cfg, "CAUSAL_LM")
            if self.value is not None:
                self.value.backbone = apply_lora(self.value.backbone, cfg, "FEATURE_EXTRACTION", value_backbone=True)
        if cfg.gradient_checkpointing:
            enable_checkpointing(policy)
            if self.value is not None:
                enable_checkpointing(self.value.backbone)
        if cfg.fsdp:  # on the host until sharded: only this process's shards reach the device (_shard)
            self.policy = policy
        else:
            self.policy = policy.to(self.device)
            self.ref = self.ref.to(self.device) if self.ref is not None else None
            self.value = self.value.to(self.device) if self.value is not None else None

        for m in self.trained_models():
            D.broadcast_parameters(m, self.dist, via=self.device)
        self.param_numel_full = fsdp.full_numel(self.trained_models())
        if cfg.fsdp:
            self._shard()
        self.policy_params = [p for p in self.policy.parameters() if p.requires_grad]
        self.value_params = [p for p in self.value.parameters() if p.requires_grad] if self.critic else []
        # separate optimizers: the value model may take its own learning rate, and one model's
        # gradient norm never scales the other's step (docs/ppo_notes.md core detail 3: Adam eps 1e-5);
        # the fused kernel takes plain tensors only, so sharded parameters use the foreach one
        fused = not cfg.fsdp
        self.opt_policy = torch.optim.Adam(self.policy_params, lr=cfg.lr, eps=1e-5, fused=fused)
        self.opt_value = torch.optim.Adam(self.value_params, lr=cfg.value_lr or cfg.lr, eps=1e-5, fused=fused) if self.critic else None
        self.kl_ctl = KLController(cfg.kl_coef, cfg.adaptive_kl, cfg.kl_target, cfg.kl_horizon)
        self.sampling = SamplingSettings(cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p,
                                         self.stop_ids, self.tokenizer.pad_token_id)
        # every process draws its own prompts and samples: seed the global RNG per rank
        torch.manual_seed(cfg.seed * 1000 + self.dist.rank)
        self.sampler = PromptSampler(len(self.prompts), self.dist.rank, self.dist.world_size)
        self.step, self.seconds = 0, 0.0
        # the last step whose update passed the loop's checks and was logged; a new run none of whose steps
        # did (step 1 diverged) keeps nothing (api's discard), since a resume would only repeat it
        self.finished_step = 0
        self._step_ended: Optional[float] = None  # perf_counter after the last step's metrics were reduced (_metrics)

    def _model_fits(self, dtype: torch.dtype):
        """load_policy's ``fits``: refuse a policy whose copies this run holds cannot fit, before it is built
        (a config.json may ask for 40 GB). Counted: the policy, and without LoRA its gradients, Adam's two
        moments and the frozen reference; with a critic (gae, --value-init policy) the value model's
        backbone copy, and without LoRA its gradients and moments. Reward models and activations are not
        counted, so the estimate is a lower bound.

        --fsdp: each process loads its models whole on the host (the policy, the reference, the value model:
        ``loaded``) and only its shards reach the device (_shard). On GPUs each holds 1/N of every copy, the
        load's 1/N of the loaded models included, which is never more than training's; on the CPU the shards
        share the host's memory, and while loading every process holds its own whole models."""
        cfg = self.cfg
        parts = [("policy", 1)] if cfg.lora else [("policy", 1), ("its gradients", 1), ("Adam's 2 moments", 2),
                                                   ("reference", 1)]
        if self.critic and cfg.value_init == "policy":
            parts += [("value model", 1)] if cfg.lora else [("value model with its gradients and moments", 4)]
        copies = sum(n for _, n in parts)
        what = ", ".join(name for name, _ in parts)
        processes = self.dist.world_size
        if cfg.fsdp:
            loaded = 2 + (1 if self.critic and cfg.value_init == "policy" else 0)  # --fsdp refuses --lora
            if self.device.type != "cpu":
                copies, processes = max(fsdp.share(copies, processes), fsdp.share(loaded, processes)), 1
            else:
                if loaded * processes > copies:
                    copies = loaded * processes
                    what = (f"policy, reference{', value model' if loaded == 3 else ''}, loaded whole by each of "
                            f"{processes} processes before sharding")
                processes = 1
        elif self.device.type != "cpu":  # a GPU each
            processes = 1
        return functools.partial(check_model_fits, cfg.policy, dtype=dtype, copies=copies, what=what,
                                 device=self.device, processes=processes, lora=cfg.lora)

    def _stop_ids(self, policy, tokenizer_dir: str) -> list:
        """The ids that end a response: the tokenizer's EOS and, as Hugging Face's generate does, the
        policy's generation_config eos ids (an instruct model's end of turn). When the tokenizer's EOS is
        not among the policy's own eos ids the two may not belong together (a fresh config's default
        ids, another model's tokenizer): a warning, and only the tokenizer's EOS ends a response, since
        the policy's ids may name ordinary tokens of this tokenizer."""
        eos = self.tokenizer.eos_token_id
        config_ids, generation_ids = end_ids(policy)
        if not config_ids | generation_ids or eos in config_ids | generation_ids:
            return sorted({eos} | generation_ids)
        if self.dist.is_main:
            name = self.tokenizer.eos_token
            print(f"proxima rlhf: warning: tokenizer {tokenizer_dir}: its EOS {name!r} (id {eos}) is not among the "
                  f"policy's end-of-sequence ids {sorted(config_ids | generation_ids)} (config.json, "
                  f"generation_config.json); responses end only at {name!r}; check that the tokenizer belongs to "
                  f"the policy", file=sys.stderr, flush=True)
        return [eos]

    def _check_same_vocabulary(self, rm, tokenizer_dir: str) -> None:
        """--value-init reward reuses the reward model's embeddings for the policy's token ids: the two
        tokenizers must map every token to the same id, not just have as many."""
        ours, theirs = self.tokenizer.get_vocab(), rm.tokenizer.get_vocab()
        if ours == theirs:
            return
        token = next((t for t in sorted(ours.keys() | theirs.keys()) if ours.get(t) != theirs.get(t)))
        raise ConfigError(f"--value-init reward: the reward model's tokenizer ({rm.path}) and the policy's "
                          f"({tokenizer_dir}) have different vocabularies (token {token!r} is id {theirs.get(token)} "
                          f"in the reward model's, {ours.get(token)} in the policy's); use --value-init policy")

    def _shard(self) -> None:
        """Shard the policy, the reference and the value model, which are on the host, onto the device: each
        model's weights are taken out to the host first (the models become meta skeletons), so that no model
        ever reaches the device whole, then each is sharded and only this process's shards are copied there.
        The device's peak while loading is 1/N of the three models (_model_fits counts it)."""
        if not self.dist.enabled:
            raise ConfigError("--fsdp shards the models across processes: start it with torchrun --nproc-per-node N (N >= 2)")
        if self.device.type == "cuda":  # FSDP places the shards on the current device; a caller's own Dist and
            torch.cuda.set_device(self.device)  # process group (no init_distributed) may not have made it this one
        models = [(self.policy, self.policy)] + ([(self.ref, self.ref)] if self.ref is not None else []) \
            + ([(self.value, self.value.backbone)] if self.value is not None else [])
        fsdp.check_blocks([blocks for _, blocks in models])
        weights = [fsdp.take_weights(model) for model, _ in models]
        mesh = fsdp.mesh(self.device, self.dist.world_size)
        for (model, blocks), held in zip(models, weights):
            fsdp.shard(model, blocks, mesh)
            fsdp.place_shards(model, held, self.device)
            held.clear()  # the host's copy of this model goes now

    def _all_done(self, done: torch.Tensor) -> bool:
        return D.all_across(bool(done.all()), self.dist, self.device)

    def _probe_reward(self) -> None:
        """Call every reward once, on the first prompt with an empty response, before anything is written:
        a reward that cannot run is bad input, not a crash at step 1."""
        row, ids = self.prompts[0], self.prompt_ids[0]
        self.reward(RewardBatch([row], [""], [self.tokenizer.decode(ids)], step=0))

    def _check_positions(self, policy) -> None:
        """The longest prompt plus --max-new-tokens must fit every model's positions, checked before training:
        past them GPT-2 fails with an IndexError and a RoPE model silently runs beyond its trained range."""
        longest = max(range(len(self.prompt_ids)), key=lambda i: len(self.prompt_ids[i]))
        need = len(self.prompt_ids[longest]) + self.cfg.max_new_tokens
        where = f"the longest prompt (line {self.prompts[longest].line}, {len(self.prompt_ids[longest])} tokens)"
        models = [("policy", policy.config)] + ([("value model", self.value.backbone.config)] if self.value else [])
        for role, config in models:
            limit = max_positions(config)
            if limit and need > limit:
                # value_error: the CLI names a --config file's key where the file set it (cli.in_file_words)
                raise value_error("max_new_tokens", f"--max-new-tokens {self.cfg.max_new_tokens}: {where} + "
                                  f"{self.cfg.max_new_tokens} new tokens = {need}, more than the {role}'s {limit} "
                                  f"positions; {self._fitting(len(self.prompt_ids[longest]), limit)}")
        texts = [self.tokenizer.decode(ids) for ids in self.prompt_ids] if self.reward.models else []
        for rm in self.reward.models:
            lengths = [len(x) for x in rm.encode(self.prompts, [""] * len(texts), texts)]
            i = max(range(len(lengths)), key=lengths.__getitem__)
            # a note, not a refusal: the reward model cuts a longer input (RewardModel.fit), and new tokens
            # counted in the policy's tokenizer bound nothing in its own
            if rm.limit and lengths[i] + self.cfg.max_new_tokens > rm.limit and self.dist.is_main:
                print(f"proxima rlhf: note: --max-new-tokens {self.cfg.max_new_tokens}: prompt line "
                      f"{self.prompts[i].line} is {lengths[i]} tokens for the reward model {rm.path}, with the new "
                      f"tokens about {lengths[i] + self.cfg.max_new_tokens}, more than its {rm.limit} positions; "
                      f"longer inputs lose the prompt's beginning", file=sys.stderr, flush=True)

    def _fitting(self, prompt_tokens: int, limit: int) -> str:
        """The values that fit ``limit`` positions: a lower --max-new-tokens while the prompt leaves room, and
        the --max-prompt-length that keeps --max-new-tokens (a prompt as long as the positions leaves none)."""
        new = self.cfg.max_new_tokens
        keep = "--max-prompt-length" if self.cfg.truncate_prompts else "--truncate-prompts --max-prompt-length"
        options = ([f"--max-new-tokens {limit - prompt_tokens}"] if prompt_tokens < limit else []) + \
                  ([f"{keep} {limit - new}"] if new < limit else [])
        if not options:
            return f"lower --max-new-tokens below {limit}, and {keep} to the positions left"
        return "use " + " or ".join(options)

    def trained_models(self) -> list:
        return [self.policy] + ([self.value] if self.critic else [])

    def autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16) if self.cfg.bf16 else contextlib.nullcontext()

    # -----------------------------------------------------------------------------------------
    # rollout
    # -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def rollout(self) -> dict:
        """Sample B responses and score them. Returns a dict of (B, ...) tensors on the device plus
        the texts of the first few (for the sample log)."""
        cfg, g = self.cfg, self.cfg.samples_per_prompt
        prompt_idx = [i for i in self.sampler.next(cfg.batch_size // g) for _ in range(g)]  # groups adjacent
        query, query_mask = pad_left([self.prompt_ids[i] for i in prompt_idx], self.tokenizer.pad_token_id, self.device)
        for m in self.trained_models():
            m.eval()  # gradient checkpointing would switch the KV cache off in train mode
        t0 = time.perf_counter()
        with self.autocast():
            responses = generate(self.policy, query, query_mask, self.sampling, self._all_done if self.cfg.fsdp else None)
        gen_seconds = time.perf_counter() - t0
        mask, lengths, has_eos = response_masks(responses, self.stop_ids)
        b = {"query_responses": torch.cat([query, responses], 1), "responses": responses, "mask": mask,
             "lengths": lengths, "has_eos": has_eos, "context_length": query.shape[1]}
        b["attention_mask"] = torch.cat([query_mask, torch.ones_like(responses)], 1)
        b["position_ids"] = position_ids_from_mask(b["attention_mask"])

        chunk = cfg.micro_batch_size or cfg.batch_size
        parts = [self._score_forward(b, torch.arange(s, min(s + chunk, cfg.batch_size), device=self.device))
                 for s in range(0, cfg.batch_size, chunk)]
        for key in parts[0]:
            b[key] = torch.cat([p[key] for p in parts])

        rows = [self.prompts[i] for i in prompt_idx]
        response_ids = response_token_lists(responses, lengths, has_eos)
        texts = decode_responses(self.tokenizer, response_ids)
        # what the policy saw, special tokens (chat template, BOS) kept, padding not; with and without the
        # stop token it emitted, since only a reward model of the policy's vocabulary reads that token
        full = [self.tokenizer.decode(self.prompt_ids[i] + r) for i, r in zip(prompt_idx, response_ids)]
        # host lists read once (response_token_lists has synced already), for the stop texts and the samples
        token_rows, n_tokens, eos = responses.tolist(), lengths.tolist(), has_eos.tolist()
        stopped = [self.tokenizer.decode(self.prompt_ids[i] + row[:n]) if e else f
                   for i, row, n, e, f in zip(prompt_idx, token_rows, n_tokens, eos, full)]
        raw, b["reward_parts"] = self.reward(RewardBatch(rows, texts, full, step=self.step + 1, texts_with_stop=stopped))
        # docs/ppo_notes.md: a fixed penalty for responses that never emit EOS
        b["scores"] = raw.to(self.device) - cfg.missing_eos_penalty * (~has_eos).float()
        b["kl"] = kl_per_token(b["logprobs"], b["ref_logprobs"], cfg.kl_estimator)
        b["texts"] = [sample_row(r, t, self.tokenizer.decode(row[:n]), n, e, s) for r, t, row, n, e, s in
                      zip(rows[:cfg.samples_logged], texts, token_rows, n_tokens, eos,
                          b["scores"][:cfg.samples_logged].tolist())]
        b["gen_seconds"] = gen_seconds
        return b

    def _score_forward(self, b: dict, inds: torch.Tensor) -> dict:
        """Rollout-time log-probs of policy and reference, and values, for rows ``inds``."""
        qr, am, pos = b["query_responses"][inds], b["attention_mask"][inds], b["position_ids"][inds]
        responses, r, t = b["responses"][inds], b["responses"].shape[1], self.cfg.temperature
        out = {}
        with self.autocast():
            out["logprobs"] = token_logprobs(response_logits(self.policy, qr, am, pos, r, t), responses)
            if self.ref is None:  # LoRA: the reference is the policy with its adapter off
                with self.policy.disable_adapter():
                    ref_logits = response_logits(self.policy, qr, am, pos, r, t)
            else:
                ref_logits = response_logits(self.ref, qr, am, pos, r, t)
            out["ref_logprobs"] = token_logprobs(ref_logits, responses)
            if self.critic:
                out["values"] = self.value(qr, am, pos)[:, b["context_length"] - 1:-1]
        return out

    # -----------------------------------------------------------------------------------------
    # advantages
    # -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def compute_advantages(self, b: dict) -> dict:
        """Adds rewards, advantages, returns (B, R) to the batch (and values of zeros without a critic)."""
        cfg, mask, beta = self.cfg, b["mask"], self.kl_ctl.value
        rewards, non_score = token_rewards(b["scores"], b["kl"], mask, b["lengths"], beta)
        b["non_score_rewards"] = non_score
        if self.critic:
            if cfg.whiten_rewards:
                rewards = masked_whiten(rewards, mask, shift_mean=False)
            adv, returns = gae_advantages(rewards, b["values"], b["lengths"], cfg.gamma, cfg.gae_lambda)
            adv = masked_whiten(adv, mask)  # docs/ppo_notes.md: whitened under the response mask
        else:
            if cfg.advantage == "grpo":  # the KL outside the normalisation, so that beta scales it (algorithm.py)
                seq_adv = grpo_advantages(b["scores"], masked_sum(b["kl"], mask, dim=1), cfg.samples_per_prompt, beta)
            else:
                seq_adv = group_advantages(sequence_rewards(b["scores"], b["kl"], mask, beta), cfg.samples_per_prompt,
                                           cfg.advantage)
            adv = torch.where(mask, seq_adv[:, None], torch.zeros_like(b["kl"]))
            returns = torch.zeros_like(adv)
            b["values"] = torch.zeros_like(adv)
        b["rewards"], b["advantages"], b["returns"] = rewards, adv, returns
        return b

    # -----------------------------------------------------------------------------------------
    # update
    # -----------------------------------------------------------------------------------------
    def minibatch_loss(self, b: dict, inds: torch.Tensor) -> dict:
        """The core ppo_loss on rows ``inds``: their response tokens flattened to (n * R,), masked."""
        cfg, r = self.cfg, b["responses"].shape[1]
        qr, am, pos = b["query_responses"][inds], b["attention_mask"][inds], b["position_ids"][inds]
        with self.autocast():
            logits = response_logits(self.policy, qr, am, pos, r, cfg.temperature)
            new_values = self.value(qr, am, pos)[:, b["context_length"] - 1:-1] if self.critic else b["values"][inds]
        new_logprobs, entropy = logprobs_and_entropy(logits, b["responses"][inds], entropy_grad=cfg.ent_coef > 0)
        return ppo_loss(new_logprobs.reshape(-1), b["logprobs"][inds].reshape(-1), b["advantages"][inds].reshape(-1),
                        new_values.float().reshape(-1), b["values"][inds].reshape(-1), b["returns"][inds].reshape(-1),
                        entropy.reshape(-1), clip_coef=cfg.clip_coef, vf_coef=cfg.vf_coef if self.critic else 0.0,
                        ent_coef=cfg.ent_coef, clip_vloss=cfg.clip_vloss, norm_adv=False,
                        mask=b["mask"][inds].reshape(-1), vf_clip_coef=cfg.vf_clip_coef)

    def accumulate_gradients(self, b: dict, mb_inds: torch.Tensor) -> dict:
        """Gradients of one minibatch, summed over its micro-batches.

        Each micro-batch's loss is a mean over its own response tokens, so it is weighted by its share
        of the minibatch's tokens: the accumulated gradient is exactly the full minibatch's. Under torchrun
        that holds per process: each takes the mean over its own tokens and _step averages the processes
        with equal weight, not by their token counts.
        """
        for opt in (self.opt_policy, self.opt_value):
            if opt is not None:
                opt.zero_grad(set_to_none=True)
        micro = self.cfg.micro_batch_size or len(mb_inds)
        n_tokens = b["mask"][mb_inds].sum().clamp_min(1)
        totals: dict = {}
        for start in range(0, len(mb_inds), micro):
            inds = mb_inds[start:start + micro]
            weight = b["mask"][inds].sum() / n_tokens
            out = self.minibatch_loss(b, inds)
            (out["loss"] * weight).backward()
            for k, v in out.items():
                totals[k] = totals.get(k, 0.0) + v.detach() * weight
        return totals

    def update(self, b: dict) -> dict:
        """Epochs x minibatches; returns the mean of each loss term over the minibatches (tensors)."""
        cfg = self.cfg
        for m in self.trained_models():
            m.train()
        batch = b["responses"].shape[0]
        mb_size = batch // cfg.num_minibatches
        totals, n = {}, 0
        for _epoch in range(cfg.update_epochs):
            perm = torch.randperm(batch, device=self.device)
            for start in range(0, batch, mb_size):
                out = self.accumulate_gradients(b, perm[start:start + mb_size])
                out["policy_grad_norm"] = self._step(self.opt_policy, self.policy_params)
                if self.critic:
                    out["value_grad_norm"] = self._step(self.opt_value, self.value_params)
                for k, v in out.items():
                    totals[k] = totals.get(k, 0.0) + v
                n += 1
        return {k: v / n for k, v in totals.items()}

    def _step(self, opt: torch.optim.Optimizer, params: list) -> torch.Tensor:
        if not self.cfg.fsdp:  # FSDP reduce-scatters (and averages) the gradients in the backward
            D.average_gradients(params, self.dist)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        opt.step()
        return fsdp.full_tensor(grad_norm.detach())

    # -----------------------------------------------------------------------------------------
    # one iteration and the loop
    # -----------------------------------------------------------------------------------------
    def train_step(self) -> tuple:
        """One PPO iteration; returns (metrics dict of floats averaged over processes, sample rows)."""
        cfg = self.cfg
        if cfg.anneal_lr:
            frac = 1.0 - self.step / cfg.steps
            self.opt_policy.param_groups[0]["lr"] = frac * cfg.lr
            if self.opt_value is not None:
                self.opt_value.param_groups[0]["lr"] = frac * (cfg.value_lr or cfg.lr)
        # one clock for the run: a step lasts from the end of the last one (its logging and checkpoint included)
        # to the end of this one's metrics reduction, which every process leaves together; charts/seconds_per_step
        # is the slowest process's, and the run's seconds (summary.json, `done: N steps in X s`) are their sum
        t0 = self._step_ended if self._step_ended is not None else time.perf_counter()
        b = self.compute_advantages(self.rollout())
        self._last_scores = b["scores"].detach()  # for a diverged update's hint (score_peak)
        losses = self.update(b)
        metrics, self._step_ended = self._metrics(b, losses, t0)
        self.seconds += metrics["charts/seconds_per_step"]
        self.kl_ctl.update(metrics["objective/kl"], cfg.batch_size * self.dist.world_size)
        self.step += 1
        return metrics, b["texts"]

    def score_peak(self) -> float:
        """The largest |score| of the last batch, over all processes (a collective: every process calls it)."""
        scores = getattr(self, "_last_scores", None)
        peak = float(scores.abs().max()) if scores is not None and scores.numel() else 0.0
        return D.max_across(peak, self.dist, self.device)

    def _metrics(self, b: dict, losses: dict, started: float) -> tuple:
        """(per-step metrics, TRL's names where TRL has one, with one host sync for all of them; the perf_counter
        at which the step ended, after that sync). ``started``: the perf_counter at which the step began."""
        mask = b["mask"]
        kl_sum = masked_sum(b["kl"], mask, dim=1)
        non_score = b["non_score_rewards"].sum(1)
        tokens = mask.sum().float()
        named = {
            "objective/kl": kl_sum.mean(),
            "objective/entropy": masked_sum(-b["logprobs"], mask, dim=1).mean(),
            "objective/non_score_reward": non_score.mean(),
            "objective/rlhf_reward": (b["scores"] + non_score).mean(),
            "objective/scores": b["scores"].mean(),
            "policy/approxkl": losses["approx_kl"],
            "policy/clipfrac": losses["clipfrac"],
            "policy/entropy": losses["entropy"],
            "losses/policy_loss": losses["policy_loss"],
            "val/ratio": losses["ratio"],
            "val/response_length": b["lengths"].float().mean(),
            "val/eos_rate": b["has_eos"].float().mean(),
            "val/advantage_mean": masked_mean(b["advantages"], mask),
            "policy/grad_norm": losses["policy_grad_norm"],
            "charts/tokens_per_second": tokens / max(b["gen_seconds"], 1e-9),
            "charts/seconds_per_step": torch.zeros(()),  # known after the reduction below; here for the column order
        }
        for name, part in b["reward_parts"].items():  # each reward's own mean, before its weight
            named[f"rewards/{name}"] = part.mean()
        if self.critic:  # grpo/rloo train no value model: a 0 loss in their logs would read as a perfect critic
            named["losses/value_loss"] = losses["value_loss"]
            named["val/clipfrac"] = losses["vf_clipfrac"]
            named["val/value_mean"] = masked_mean(b["values"], mask)
            named["val/grad_norm"] = losses["value_grad_norm"]
        values = D.mean_across(torch.stack([v.detach().float().to(self.device) for v in named.values()]), self.dist)
        metrics = dict(zip(named, values.tolist()))
        # after the reduction and its host sync, which wait for the slowest process: part of this step
        ended = time.perf_counter()
        # the slowest process's: a process that waited in a collective took as long in wall-clock time
        metrics["charts/seconds_per_step"] = D.max_across(ended - started, self.dist, self.device)
        metrics["objective/kl_coef"] = self.kl_ctl.value
        metrics["charts/learning_rate"] = self.opt_policy.param_groups[0]["lr"]
        return metrics, ended
