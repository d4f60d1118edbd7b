"""The `hf` engine: generation with a transformers causal LM, on CPU or GPU.

It decodes with a KV cache, one token per step for every row still decoding: a row that emits a
stop token leaves the batch (its cache rows are dropped), so short responses stop costing compute
while long ones finish. The cache keeps room ahead (`kv_cache.py`), so a step writes its token in
place instead of copying the cache. A prompt repeated in several rows (GRPO's n samples) is
prefilled once and its cache rows copied.

Sampling is by row: a request with a seed (`SamplingParams.seed`, or `seeds` per prompt) draws the
token at position t by inverting the CDF of its filtered distribution at a uniform number hashed
from (seed, t) (`seeds.py`), so its tokens depend only on its prompt, its seed and the weights,
never on the other rows of the batch, `micro_batch_size`, rows leaving early, or which process
generates it. The trainer seeds every row. Requests without a seed draw from the engine's own
seeded `torch.Generator` (saved in checkpoints, so a resumed run samples the same tokens); those
depend on the batch. The log-prob it returns for a token is
log softmax(logits / temperature), the distribution the actor uses, before top-k/top-p filtering.
It usually shares the actor's module, so there are no weights to sync after an update.

On a terminal, a rollout that runs longer than two seconds shows a progress bar of decoding steps
(one unit per token position of each micro-batch) with an ETA; when stderr is not a terminal (CI
logs, files) nothing is printed.

Requests that differ only in their token limit and seed run as one batch (`max_tokens` per prompt: a
row at its limit leaves the batch); requests of different sampling parameters do not batch together yet.
"""

from __future__ import annotations

import inspect
import sys

import torch
from tqdm import tqdm
from transformers.cache_utils import DynamicCache

from reinforge.distributed.process_group import full_tensor
from reinforge.environment.multimodal import concat_inputs, has_images, mask_vision_tokens, mrope_positions, vision_token_ids
from reinforge.errors import TrainingError
from reinforge.inference.engine import GenerationOutput, InferenceEngine, SamplingParams
from reinforge.inference.kv_cache import growing_cache
from reinforge.inference.seeds import sample_inverse_cdf, uniforms

PROGRESS_DELAY_S = 2.0  # the generation bar appears only for rollouts that take longer than this


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k and the top-p nucleus to -inf (always keeps the best token); `logits` itself when
    neither filter is on."""
    if top_k is not None and 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        drop_sorted = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p  # mass before this token
        drop_sorted[..., 0] = False  # the best token, also when top_p <= 0
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def cache_keyword(model: torch.nn.Module) -> str:
    """The keyword `model.forward` takes its KV cache under: `cache` from transformers 5.24 on (which warns about
    the old name, to be removed in 5.40), `past_key_values` before it and in models that kept that name."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class RowDraws:
    """The uniform numbers of a micro-batch's seeded rows, (rows, max_tokens), on the model's device."""

    def __init__(self, values: torch.Tensor, unseeded: torch.Tensor | None):
        self.values = values
        self.unseeded = unseeded  # (rows,) bool: rows that sample from the engine's generator; None when none do

    @classmethod
    def of(cls, seeds: list[int | None] | None, steps: int, device: torch.device) -> RowDraws | None:
        """None when no row has a seed (all sample from the generator)."""
        if seeds is None or all(seed is None for seed in seeds):
            return None
        values = torch.from_numpy(uniforms([0 if seed is None else seed for seed in seeds], steps)).to(device)
        unseeded = [seed is None for seed in seeds]
        return cls(values, torch.tensor(unseeded, device=device) if any(unseeded) else None)


class HFEngine(InferenceEngine):
    def __init__(self, model: torch.nn.Module, pad_token_id: int, eos_token_ids: list[int],
                 seed: int = 0, micro_batch_size: int | None = None):
        super().__init__()
        self.model = model
        self.pad_token_id = pad_token_id
        self.eos_token_ids = tuple(eos_token_ids)
        self.micro_batch_size = micro_batch_size
        device = next(model.parameters()).device
        vision = vision_token_ids(model.config)  # a vision-language model's image placeholders: never generated
        self.never_ids = torch.tensor(vision, device=device) if vision else None
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def generate_batch(self, prompts: list[list[int]], params: SamplingParams, max_tokens: list[int] | None = None,
                       seeds: list[int | None] | None = None, multi_modal: list[dict | None] | None = None) -> list[GenerationOutput]:
        if seeds is None and params.seed is not None:
            seeds = [params.seed] * len(prompts)
        size = self.micro_batch_size or len(prompts) or 1
        outputs: list[GenerationOutput] = []
        was_training = self.model.training
        self.model.eval()
        chunks = range(0, len(prompts), size)
        progress = tqdm(total=len(chunks) * params.max_tokens, desc="generate", unit="tok", leave=False, dynamic_ncols=True,
                        delay=PROGRESS_DELAY_S, disable=not sys.stderr.isatty())
        try:
            for start in chunks:
                limits = None if max_tokens is None else max_tokens[start:start + size]
                chunk_seeds = None if seeds is None else seeds[start:start + size]
                images = None if multi_modal is None else multi_modal[start:start + size]
                outputs += self._generate(prompts[start:start + size], params, limits, chunk_seeds, progress, images)
        finally:
            progress.close()
            self.model.train(was_training)
        return outputs

    @torch.inference_mode()
    def _generate(self, prompts: list[list[int]], params: SamplingParams, limits: list[int] | None,
                  seeds: list[int | None] | None, progress: tqdm, images: list[dict | None] | None = None) -> list[GenerationOutput]:
        device = next(self.model.parameters()).device
        batch, width = len(prompts), max(len(p) for p in prompts)
        input_ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long, device=device)
        attention_mask = torch.zeros((batch, width), dtype=torch.long, device=device)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt):] = 1
        if has_images(images):  # (3, rows, width): a vision-language model's positions over its image tokens
            position_ids = mrope_positions(self.model, input_ids, attention_mask, concat_inputs(images, device))
        else:
            images = None
            position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        stop_ids = torch.tensor(sorted(set(self.eos_token_ids) | set(params.stop_token_ids)), device=device)
        check_stop = not params.ignore_eos and stop_ids.numel() > 0
        limit = None if limits is None else torch.tensor(limits, dtype=torch.long, device=device)  # per-row token limits

        tokens = torch.full((batch, params.max_tokens), self.pad_token_id, dtype=torch.long, device=device)
        log_probs = torch.zeros((batch, params.max_tokens), dtype=torch.float32, device=device)
        lengths = torch.zeros(batch, dtype=torch.long, device=device)
        stopped = torch.zeros(batch, dtype=torch.bool, device=device)
        rows = torch.arange(batch, device=device)  # the rows still decoding, as indices into the batch
        draws = None if params.greedy else RowDraws.of(seeds, params.max_tokens, device)
        cache_arg = cache_keyword(self.model)
        logits, past = self._prefill(prompts, input_ids, attention_mask, position_ids, cache_arg, width + params.max_tokens,
                                     images)
        step_positions = position_ids
        for t in range(params.max_tokens):
            next_ids, next_log_probs = self._sample(mask_vision_tokens(logits.float(), self.never_ids), params, draws, rows, t)
            tokens[rows, t] = next_ids
            log_probs[rows, t] = next_log_probs
            lengths[rows] += 1
            progress.update(1)
            hit_stop = done = torch.isin(next_ids, stop_ids) if check_stop else None
            if limit is not None:  # a row at its own token limit leaves too (finish reason "length")
                at_limit = lengths[rows] >= limit[rows]
                done = at_limit if hit_stop is None else hit_stop | at_limit
            if done is not None and bool(done.any()):
                if hit_stop is not None:
                    stopped[rows[hit_stop]] = True
                if bool(done.all()):
                    progress.update(params.max_tokens - t - 1)  # every row stopped early: this micro-batch is done
                    break
                # finished rows leave the batch: the next steps compute only for the rows still decoding
                keep = (~done).nonzero().squeeze(-1)
                rows, next_ids = rows[keep], next_ids[keep]
                past.reorder_cache(keep)
                attention_mask, step_positions = attention_mask[keep], step_positions[..., keep, :]
            if t + 1 == params.max_tokens:
                break
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(rows), 1))], 1)
            step_positions = step_positions[..., -1:] + 1  # (rows, 1), or (3, rows, 1): each axis one on
            logits = self.model(input_ids=next_ids[:, None], attention_mask=attention_mask, position_ids=step_positions,
                                use_cache=True, logits_to_keep=1, **{cache_arg: past}).logits[:, -1, :]

        results = []
        for row in range(batch):
            n = int(lengths[row])
            results.append(GenerationOutput(
                token_ids=tokens[row, :n].tolist(),
                log_probs=log_probs[row, :n].tolist(),
                finish_reason="stop" if bool(stopped[row]) else "length",
            ))
        return results

    def _prefill(self, prompts: list[list[int]], input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 position_ids: torch.Tensor, cache_arg: str, limit: int,
                 images: list[dict | None] | None = None) -> tuple[torch.Tensor, DynamicCache]:
        """The prompts' forward pass: last-position logits (batch, vocab) and the KV cache (the one the model would
        make for itself, its full-attention layers growing in place up to `limit` positions: `kv_cache.py`; given
        to the model because its name in the output changed with the keyword).

        A prompt that occurs in several rows (GRPO's n samples of one prompt) is computed once and its
        cache rows copied, so the prefill costs one row per distinct prompt (a prompt with images: the same ids and the
        same images' inputs, as the n samples of a row share them)."""
        distinct: dict[tuple, int] = {}
        first_rows: list[int] = []
        owner = []
        for row, prompt in enumerate(prompts):
            key = (tuple(prompt), None if images is None or not images[row] else id(images[row]))
            if key not in distinct:
                distinct[key] = len(first_rows)
                first_rows.append(row)
            owner.append(distinct[key])
        take = torch.tensor(first_rows, device=input_ids.device) if len(first_rows) < len(prompts) else None
        if take is not None:
            input_ids, attention_mask, position_ids = input_ids[take], attention_mask[take], position_ids[..., take, :]
        pixels = {} if images is None else concat_inputs([images[row] for row in first_rows], input_ids.device)
        past = growing_cache(self.model.config, limit)
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=True, logits_to_keep=1, **pixels, **{cache_arg: past}).logits[:, -1, :]
        if take is not None:
            expand = torch.tensor(owner, device=logits.device)
            logits = logits[expand]
            past.reorder_cache(expand)
        return logits, past

    def _sample(self, logits: torch.Tensor, params: SamplingParams, draws: RowDraws | None, rows: torch.Tensor,
                t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The next token of each row still decoding (`rows`), and its log-prob under the unfiltered distribution."""
        if params.greedy:
            next_ids = logits.argmax(-1)
            return next_ids, torch.log_softmax(logits, -1).gather(-1, next_ids[:, None]).squeeze(-1)
        scaled = logits / params.temperature if params.temperature != 1.0 else logits
        kept = filter_logits(scaled, params.top_k, params.top_p)
        # unnormalised probabilities (0 where filtered out), which the CDF inversion takes as they are
        top = kept.amax(-1, keepdim=True)
        if not bool(torch.isfinite(top).all()):  # NaN or inf logits: the CDF inversion would pick no token
            raise TrainingError("the policy's next-token logits are NaN or infinite while generating: its weights have "
                                "diverged (a learning rate too high, actor_rollout_ref.actor.optim.lr, is the usual cause); "
                                "resume from a checkpoint before that (trainer.resume_mode=resume_path) with a lower one")
        weights = (kept - top).exp_()
        # one uniform number per row, inverted through the row's CDF (torch.multinomial draws one exponential number
        # per vocabulary entry on CPU: 41 ms per step for 64 rows of a 32k vocabulary, against 1 ms)
        if draws is None:
            u = self._uniforms(len(rows), weights.device)
        else:
            u = draws.values[rows, t]  # a copy (indexed by a tensor)
            if draws.unseeded is not None:  # requests without a seed in the same batch: the engine's generator
                own = draws.unseeded[rows]
                if bool(own.any()):
                    u[own] = self._uniforms(int(own.sum()), weights.device)
        next_ids = sample_inverse_cdf(weights, u)
        # log softmax(scaled) at the token: the normaliser from the weights' sum when nothing was filtered out
        if kept is scaled:
            log_norm = top.squeeze(-1) + weights.sum(-1).log()
        else:
            log_norm = torch.logsumexp(scaled, -1)
        return next_ids, scaled.gather(-1, next_ids[:, None]).squeeze(-1) - log_norm

    def _uniforms(self, count: int, device: torch.device) -> torch.Tensor:
        return torch.rand(count, generator=self.generator, dtype=torch.float64, device=device)

    def update_weights(self, named_tensors) -> None:
        """Copy the actor's weights into the engine's own module (cast to its dtype); nothing when the engine
        generates with the actor's module itself (`ModuleWeights` of that same module)."""
        if getattr(named_tensors, "module", None) is self.model:
            return
        own = self.model.state_dict()
        with torch.no_grad():
            for name, tensor in named_tensors:
                own[name].copy_(full_tensor(tensor))

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
