"""The policy maths on one model: log-probs of responses, and the PPO-style update.

`Actor` knows nothing of generation, rewards or advantages' origin. It takes a Batch of
trajectories with `advantages` (and, when a KL loss is on, `ref_log_prob`) and runs
`ppo_epochs` passes of mini-batches (`ppo_mini_batch_size` prompts x rollout.n trajectories),
each split into micro-batches (of rows, or with `use_dynamic_bsz` of a token budget, each trimmed
of its all-padding columns: `minibatch.py`) whose gradients accumulate. Before a mini-batch, its totals
(tokens, sequences) are set as `config.global_batch_info`; every loss term aggregates with them
(`agg_loss(..., **global_batch_info)`), so a micro-batch's loss is its exact share of the
mini-batch's and the accumulated gradient is the same whatever the micro-batch size.

On several data-parallel ranks (FSDP2, `training/fsdp.py`) each rank holds its share of every
mini-batch (`ppo_mini_batch_size x n / world_size` rows), the totals are summed over ranks, and the
metrics are summed shares, so every rank returns the mini-batch's global values.

When the update is on-policy (one epoch, one mini-batch) and the batch carries no
`old_log_probs`, the old log-probs are the detached log-probs of the update's own forward pass:
they are the same numbers, and a second forward pass is saved. With the engine's log-probs in the
batch (`rollout_log_probs`) that pass also gives the train/inference mismatch metrics
(`training/rollout_probs_diff_*`, `rollout_corr/*`), which the trainer measures itself when it
ran an old-log-prob pass. The policy loss multiplies its token losses by the batch's
`rollout_is_weights` when the trainer computed them (`algorithm.rollout_correction`); in bypass
mode the engine's log-probs are the old ones and the loss is `bypass_policy_loss`.

Log-probs and entropy come from `log_probs_from_logits`, which keeps no extra vocabulary-sized
tensors for the backward pass. The exact KL (`kl_loss_type=full`) needs the whole distribution
of both models, so it runs the reference model on each micro-batch.
"""

from __future__ import annotations

import torch

from reinforge.algorithm import (
    agg_loss,
    batch_entropy,
    compute_policy_loss,
    full_kl_from_logits,
    kl_penalty,
    log_probs_from_logits,
    sum_pi_squared_from_logits,
)
from reinforge.algorithm.rollout_correction import bypass_policy_loss, mismatch_metrics
from reinforge.batch import Batch
from reinforge.config.algorithm_schema import RolloutCorrectionConfig
from reinforge.config.distillation_schema import DistillationConfig
from reinforge.config.schema import ActorConfig
from reinforge.distributed.process_group import all_reduce, all_reduce_dict, world_size
from reinforge.environment.multimodal import (
    MM_KEY,
    concat_inputs,
    has_images,
    mask_vision_tokens,
    mrope_positions,
    vision_token_ids,
    with_stand_in_image,
)
from reinforge.training.distill import distillation_loss, extreme_metrics, token_losses, total_loss
from reinforge.training.minibatch import (
    FORWARD_KEYS,
    Trimmed,
    backward_if_finite,
    clip_and_step,
    eval_mode,
    forward_in_micro_batches,
    gathered_rows,
    global_batch_info,
    micro_batch_mean,
    micro_batch_rows,
    run_epochs,
    trim_padding,
)
from reinforge.training.packing import ResponseLogits, packed_logits, packing_for
from reinforge.training.shared_prefix import shared_prompt_logits


def response_logits(model: torch.nn.Module, batch: Batch, share_prompt: bool = True, pack: bool = False,
                    never: list[int] | None = None, in_step: bool = False) -> ResponseLogits:
    """Logits that predict each response token: (batch, response_len, vocab), or packed (1, tokens, vocab) with `pack`
    (model.use_remove_padding) where packing saves rows (`packing.py`; `ResponseLogits.unpack` gives per-token
    results at (batch, response_len)).

    With `share_prompt` (actor_rollout_ref.model.share_prompt_forward), a prompt that repeats in the batch is
    computed once (`shared_prefix.py`; the same numbers) where it repeats and the model allows it, unless the packed
    forward runs fewer tokens. Rows with images (`multi_modal_inputs`) run padded, with their images' inputs and their
    three-axis positions (environment/multimodal.py), neither shared nor packed. `never`: tokens the engine never
    samples (a vision-language model's vision tokens under the hf engine), whose logits are set to `NEVER` here too.
    `in_step`: every rank runs this forward in step with the others (the actor's and the reference's, sharded), so a
    vision-language model's ranks agree whether to run its vision encoder (`_image_text_logits`)."""
    out = _response_logits(model, batch, share_prompt, pack, in_step)
    if never:
        mask_vision_tokens(out.logits, torch.tensor(never))
    return out


def _response_logits(model: torch.nn.Module, batch: Batch, share_prompt: bool, pack: bool, in_step: bool) -> ResponseLogits:
    width = batch["responses"].shape[1]
    images = MM_KEY in batch and has_images(batch[MM_KEY])
    if in_step and world_size() > 1 and vision_token_ids(model.config):  # the encoder's collectives: all ranks or none
        if all_reduce([float(images)], "max")[0] > 0:
            return _image_text_logits(model, batch, width, stand_in=not images)
    elif images:
        return _image_text_logits(model, batch, width)
    packing = packing_for(model, batch, pack)
    if share_prompt:
        shared = shared_prompt_logits(model, batch["input_ids"], batch["attention_mask"], batch["position_ids"], width,
                                      cheaper_than=None if packing is None else packing.cost)
        if shared is not None:
            return ResponseLogits(shared, batch["responses"])
    if packing is not None:
        return packed_logits(model, batch, packing)
    length = batch["input_ids"].shape[1]
    keep = torch.arange(length - width - 1, length - 1, device=batch["input_ids"].device)  # position t predicts token t + 1
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"], use_cache=False, logits_to_keep=keep)
    return ResponseLogits(out.logits, batch["responses"])


def _image_text_logits(model: torch.nn.Module, batch: Batch, width: int, stand_in: bool = False) -> ResponseLogits:
    """`response_logits` of rows with images: one padded forward with the rows' pixel inputs. With `stand_in` (a rank
    whose micro-batch has no image while another rank's has) a row of one blank image's token runs with them and its
    logits join the result times 0, so the vision encoder runs forward and backward here too, as on the other ranks."""
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    images = concat_inputs(list(batch[MM_KEY]) if MM_KEY in batch else [], input_ids.device)
    length = input_ids.shape[1]
    keep = torch.arange(length - width - 1, length - 1, device=input_ids.device)
    if stand_in:  # its image token where the first kept logits are read
        input_ids, attention_mask, images = with_stand_in_image(model.config, input_ids, attention_mask, length - width - 1)
    positions = mrope_positions(model, input_ids, attention_mask, images)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, use_cache=False,
                logits_to_keep=keep, **images)
    logits = out.logits
    if stand_in:  # the stand-in's logit times 0 on one entry: its graph joins the loss's without a copy of the logits
        logits = logits[:-1]
        logits[:1, :1, :1] += 0 * out.logits[-1, 0, 0]
    return ResponseLogits(logits, batch["responses"])


def response_log_probs(model: torch.nn.Module, batch: Batch, temperature: float, with_entropy: bool = False,
                       share_prompt: bool = True, pack: bool = False, never: list[int] | None = None,
                       in_step: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob (and entropy) of each response token, (batch, response_len), under logits / temperature."""
    out = response_logits(model, batch, share_prompt, pack, never, in_step)
    return tuple(map(out.unpack, log_probs_from_logits(out.logits, out.tokens, temperature, with_entropy)))


def _without_truncated(batch: Batch, keys: list[str]) -> Batch:
    """`keys` of `batch` with the responses cut at the length limit (finish reason "length") masked out of the loss."""
    reasons = batch.get("finish_reason")
    if reasons is None:
        raise ValueError("actor.mask_truncated_responses needs the rollout's finish reasons (finish_reason) in the batch")
    data = batch.select(keys)
    finished = torch.tensor([reason != "length" for reason in reasons], device=data["response_mask"].device)
    data["response_mask"] = data["response_mask"] * finished.unsqueeze(-1).to(data["response_mask"].dtype)
    return data


class Actor:
    def __init__(self, model: torch.nn.Module, config: ActorConfig, optimizer: torch.optim.Optimizer | None = None,
                 ref_model: torch.nn.Module | None = None, rollout_correction: RolloutCorrectionConfig | None = None,
                 device: str | None = None, share_prompt: bool = True, pack: bool = False,
                 distillation: DistillationConfig | None = None, never: list[int] | None = None):
        """`device`: where inputs go; by default the parameters' (FSDP's CPU offload keeps them on the CPU).
        `share_prompt`: compute a prompt that repeats in a micro-batch once (actor_rollout_ref.model.share_prompt_forward);
        `pack`: pack micro-batches without padding (actor_rollout_ref.model.use_remove_padding);
        `distillation`: the update learns from the batch's teacher log-probs too (`distill.py`);
        `never`: tokens the engine never samples (`response_logits`)."""
        self.model, self.config, self.optimizer, self.ref_model = model, config, optimizer, ref_model
        self.distillation = distillation if distillation is not None and distillation.enabled else None
        loss_cfg = None if self.distillation is None else self.distillation.distillation_loss
        # the task's loss terms, left out (as verl leaves out its ppo_loss) when distillation alone trains the policy
        self.task_terms = loss_cfg is None or loss_cfg.use_task_rewards or loss_cfg.use_policy_gradient
        # response_logits' options; the actor's and the reference's forwards run in step on every rank
        self.forward = {"share_prompt": share_prompt, "pack": pack, "never": never, "in_step": True}
        self.rollout_correction = rollout_correction  # algorithm.rollout_correction; its bypass_mode changes the loss
        self.device = torch.device(device) if device else next(model.parameters()).device

    @torch.no_grad()
    def compute_log_prob(self, batch: Batch, temperature: float, micro_batch_size: int | None,
                         with_entropy: bool = False, max_tokens: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropy) for every row, in micro-batches (`max_tokens`: token-budget ones), without
        gradients; 0 where the attention mask is."""
        with eval_mode(self.model):
            return forward_in_micro_batches(batch, micro_batch_size, max_tokens, self.device,
                                            lambda micro: response_log_probs(self.model, micro, temperature, with_entropy,
                                                                               **self.forward))

    @torch.no_grad()
    def compute_log_prob_and_sum_pi_squared(self, batch: Batch, temperature: float, micro_batch_size: int | None,
                                            max_tokens: int | None = None
                                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probs, entropy and the sum of squared probabilities over the vocabulary at each response position, from
        one forward."""
        def forward(micro: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            out = response_logits(self.model, micro, **self.forward)
            log_probs, entropy = log_probs_from_logits(out.logits, out.tokens, temperature)
            return tuple(map(out.unpack, (log_probs, entropy, sum_pi_squared_from_logits(out.logits, temperature))))

        with eval_mode(self.model):
            return forward_in_micro_batches(batch, micro_batch_size, max_tokens, self.device, forward)

    @torch.no_grad()
    def compute_ref_log_prob_and_full_kl(self, batch: Batch, ref_model: torch.nn.Module, temperature: float,
                                         micro_batch_size: int | None,
                                         max_tokens: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The reference's log-probs and the exact per-token KL(this policy || reference), from one forward of each."""
        def forward(micro: Batch) -> tuple[torch.Tensor, torch.Tensor]:
            ref = response_logits(ref_model, micro, **self.forward)
            log_probs, _ = log_probs_from_logits(ref.logits, ref.tokens, temperature, with_entropy=False)
            own = self._same_layout(response_logits(self.model, micro, **self.forward), ref)
            return ref.unpack(log_probs), ref.unpack(full_kl_from_logits(own, ref.logits, temperature))

        with eval_mode(self.model):
            return forward_in_micro_batches(batch, micro_batch_size, max_tokens, self.device, forward)

    def update_policy(self, batch: Batch, temperature: float, rollout_n: int) -> dict[str, float]:
        """Run the PPO epochs over `batch`; returns verl's actor/* metrics averaged over optimizer steps."""
        cfg = self.config
        mini_size = cfg.ppo_mini_batch_size * rollout_n // world_size()  # this rank's share of each mini-batch
        micro_size = cfg.ppo_micro_batch_size_per_gpu or mini_size
        max_tokens = cfg.ppo_max_token_len_per_gpu if cfg.use_dynamic_bsz else None
        on_policy = cfg.ppo_epochs == 1 and len(batch) <= mini_size and "old_log_probs" not in batch
        keys = [*FORWARD_KEYS, "response_mask", "advantages"]
        keys += [k for k in ("old_log_probs", "ref_log_prob", "rollout_log_probs", "rollout_is_weights", "teacher_logprobs",
                             "teacher_ids") if k in batch]
        if cfg.mask_truncated_responses:  # TRL's mask_truncated_completions, on a copy: the trainer's mask stays whole
            batch = _without_truncated(batch, keys)
        if cfg.use_kl_loss and cfg.kl_loss_type != "full" and "ref_log_prob" not in batch:
            raise ValueError("use_kl_loss needs ref_log_prob in the batch (the reference worker computes it)")
        if cfg.use_kl_loss and cfg.kl_loss_type == "full" and self.ref_model is None:
            raise ValueError("kl_loss_type=full needs the reference model in the actor")
        return run_epochs(batch, keys, mini_size, cfg.ppo_epochs, cfg.shuffle, "actor",
                          lambda mini: self._optimizer_step(mini, micro_size, max_tokens, temperature, on_policy))

    def _optimizer_step(self, mini: Batch, micro_size: int, max_tokens: int | None, temperature: float,
                        on_policy: bool) -> tuple[dict[str, float], bool]:
        cfg = self.config
        info = global_batch_info(mini["response_mask"], cfg.loss_scale_factor)
        cfg.global_batch_info = info  # read by the policy loss (verl's convention)
        metrics: dict[str, float] = {}

        def add(key: str, value: float) -> None:
            metrics[key] = metrics.get(key, 0.0) + value

        self.optimizer.zero_grad(set_to_none=True)
        loss_finite = True
        measured = []  # on-policy: (old, rollout, mask) of each micro-batch, for the train/inference mismatch metrics
        ratio_metrics = []  # each micro-batch's pg_clipfrac, ppo_kl, ...: verl averages them over micro-batches, unweighted
        entropies = []  # on-policy: (entropy, mask) of each micro-batch, for verl's actor/entropy of the whole batch
        extremes = []  # distillation: per-token values whose smallest and largest are logged
        for rows in micro_batch_rows(mini, micro_size, max_tokens):
            micro = mini.index(rows).to(self.device)
            mask = micro["response_mask"].float()
            trimmed = trim_padding(micro)
            out = response_logits(self.model, trimmed.batch, **self.forward)  # rows x kept response columns
            log_prob, entropy = (trimmed.widen(out.unpack(v)) for v in log_probs_from_logits(out.logits, out.tokens, temperature))
            old_log_prob = log_prob.detach() if on_policy else micro["old_log_probs"]
            if on_policy and "rollout_log_probs" in micro:
                measured.append((old_log_prob.cpu(), micro["rollout_log_probs"].cpu(), mask.cpu()))
            loss, pg_metrics = None, {}
            if self.task_terms:
                loss, pg_metrics = self._task_loss(micro, trimmed, out, log_prob, old_log_prob, entropy, mask, temperature, info, add)
            if self.distillation is not None:
                losses, distill_metrics, values = token_losses(self.distillation, out, trimmed, micro, log_prob, temperature, mask)
                extremes.append({"loss": losses.detach()[mask.bool()], **values})
                distill, pg = distillation_loss(self.distillation, losses, log_prob, old_log_prob, mask, cfg.loss_agg_mode,
                                                info, micro.get("rollout_is_weights"))
                loss = total_loss(self.distillation, loss, distill)
                add("actor/distillation/loss", distill.item() / info["dp_size"])
                pg_metrics = {**pg_metrics, **distill_metrics, **pg}
            loss_finite &= backward_if_finite(loss)
            add("actor/loss", loss.item() / info["dp_size"])  # the whole loss, as verl logs it beside its parts
            if on_policy:
                entropies.append((entropy.detach().cpu(), mask.cpu()))
            ratio_metrics.append(pg_metrics)
        metrics.update(micro_batch_mean(ratio_metrics, info["dp_size"]))

        metrics = all_reduce_dict(metrics)
        if self.distillation is not None:
            metrics.update(extreme_metrics(extremes))
        if entropies:  # the old-log-prob pass was skipped: verl's actor/entropy (that pass's) is this pass's, before the step
            metrics["actor/entropy"] = batch_entropy(*gathered_rows(entropies), cfg.loss_agg_mode, cfg.loss_scale_factor)
        if measured:  # the old-log-prob pass was skipped: its numbers are this forward pass's (every rank's rows)
            metrics.update(mismatch_metrics(*gathered_rows(measured)))
        metrics["actor/grad_norm"], stepped = clip_and_step(self.model, self.optimizer, cfg.grad_clip, loss_finite)
        if cfg.use_kl_loss and self.task_terms:
            metrics["actor/kl_coef"] = cfg.kl_loss_coef
        return metrics, stepped

    def _task_loss(self, micro: Batch, trimmed: Trimmed, out: ResponseLogits, log_prob: torch.Tensor, old_log_prob: torch.Tensor,
                   entropy: torch.Tensor, mask: torch.Tensor, temperature: float, info: dict, add) -> tuple[torch.Tensor, dict]:
        """The policy loss of the task's advantages, less the entropy bonus, plus the KL loss; and the policy loss's
        metrics (`add` sums the others' shares)."""
        cfg = self.config
        pg_loss, pg_metrics = self._policy_loss(micro, old_log_prob, log_prob, mask)
        add("actor/pg_loss", pg_loss.item() / info["dp_size"])  # shares of micro-batches and ranks: they sum to the mini-batch's value
        loss = pg_loss
        if cfg.entropy_coeff:
            entropy_term = agg_loss(entropy, mask, cfg.loss_agg_mode, **info)
            loss = loss - cfg.entropy_coeff * entropy_term
            add("actor/entropy_loss", entropy_term.item() / info["dp_size"])
        if cfg.use_kl_loss:
            kl_term = agg_loss(self._kl(micro, trimmed, out, log_prob, temperature), mask, cfg.loss_agg_mode, **info)
            loss = loss + cfg.kl_loss_coef * kl_term
            add("actor/kl_loss", kl_term.item() / info["dp_size"])
        return loss, pg_metrics

    def _policy_loss(self, micro: Batch, old_log_prob: torch.Tensor, log_prob: torch.Tensor,
                     mask: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """The configured policy loss, weighted by the batch's rollout_is_weights when the trainer computed them;
        in bypass mode (old = the engine's log-probs) the bypass loss, whose correction compares pi_theta with them."""
        cfg, corr = self.config, self.rollout_correction
        if corr is not None and corr.bypass_mode:
            return bypass_policy_loss(log_prob, old_log_prob, micro["advantages"], mask, cfg.loss_agg_mode, cfg, corr)
        return compute_policy_loss(
            cfg.policy_loss.loss_mode, old_log_prob=old_log_prob, log_prob=log_prob, advantages=micro["advantages"],
            response_mask=mask, loss_agg_mode=cfg.loss_agg_mode, config=cfg, rollout_is_weights=micro.get("rollout_is_weights"),
        )

    def _kl(self, micro: Batch, trimmed: Trimmed, out: ResponseLogits, log_prob: torch.Tensor,
            temperature: float) -> torch.Tensor:
        """Per-token KL(actor || reference) of the kind `kl_loss_type` names, at full response width."""
        if self.config.kl_loss_type != "full":
            return kl_penalty(log_prob, micro["ref_log_prob"], self.config.kl_loss_type)
        with torch.no_grad():
            ref_logits = self._same_layout(response_logits(self.ref_model, trimmed.batch, **self.forward), out)
        return trimmed.widen(out.unpack(full_kl_from_logits(out.logits, ref_logits, temperature)))

    @staticmethod
    def _same_layout(out: ResponseLogits, like: ResponseLogits) -> torch.Tensor:
        """`out`'s logits laid out as `like`'s (packed or padded: the two models may have taken different forwards)."""
        if (out.packing is None) == (like.packing is None):
            return out.logits
        if like.packing is None:  # packed -> padded
            p = out.packing
            return out.logits.new_zeros((*p.shape, out.logits.shape[-1])).index_put((p.rows, p.cols), out.logits[0])
        return out.logits[like.packing.rows, like.packing.cols][None]  # padded -> packed
