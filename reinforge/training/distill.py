"""On-policy distillation (verl 0.9's `distillation.*`): the student learns from teachers' log-probs on its own rollouts.

After generation the trainer asks each row's teacher (`distillation.teacher_models`, routed by the row's
`teacher_key` field when there are several) for its log-probs at every response position, at temperature 1 (a
teacher only scores tokens): the sampled token's (`teacher_logprobs`, K = 1) for the estimator losses, or its top-k
tokens and their log-probs (`teacher_ids`, `teacher_logprobs`, K = topk) for `forward_kl_topk`. In the update each
token's distillation loss d is, with x = log pi_student - log pi_teacher at the sampled token (the student at the
rollout temperature, as its other log-probs):

    kl/k1 = x, abs = |x|, mse/k2 = x^2 / 2, low_var_kl/k3 = exp(-x) + x - 1  (kl_penalty's estimators of KL(s || t))
    forward_kl_topk = max(0, sum_{v in teacher top-k} p_t(v) (log p_t(v) - log p_s(v)))

clamped to [-loss_max_clamp, loss_max_clamp] when set, then either aggregated as the loss itself (by
`actor.loss_agg_mode`, with the mini-batch's totals) or, with `use_policy_gradient`, used as the advantage -d
(detached) of a clipped vanilla policy loss with the distillation section's clip ratios. With `use_task_rewards`
the update's loss is the task's loss plus `distillation_loss_coef` times this; without, this alone (coefficient 1).
Metrics: `actor/distillation/loss` (summed shares, as actor/pg_loss), `actor/distillation/loss_min`/`_max`, and
`actor/distillation/abs_loss` (estimators) or the top-k masses and overlap (`actor/distillation/student_mass`,
`teacher_mass`, their `_min`/`_max`, `overlap_ratio`, `overlap_token_advantage`), or with the policy gradient its
`actor/distillation/pg_clipfrac`, `ppo_kl`, `pg_clipfrac_lower`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reinforge.algorithm import agg_loss, compute_policy_loss, kl_penalty, log_probs_from_logits, masked_mean
from reinforge.batch import Batch
from reinforge.config.distillation_schema import (
    ESTIMATOR_MODES,
    TOPK_MODE,
    DistillationConfig,
    Teacher,
    no_teacher,
    resolve_teachers,
)
from reinforge.distributed.process_group import all_reduce
from reinforge.errors import ConfigError, DataError, ModelError
from reinforge.training.minibatch import FORWARD_KEYS, trim_padding


def topk_of(config: DistillationConfig) -> int:
    """How many log-probs a teacher gives per position: top-k for forward_kl_topk, else the sampled token's."""
    loss = config.distillation_loss
    return loss.topk if loss.loss_mode == TOPK_MODE else 1


@torch.no_grad()
def teacher_outputs(logits: torch.Tensor, tokens: torch.Tensor, topk: int,
                    vocab_limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, ids), each (..., K), of the teacher's `logits` (..., vocab) at temperature 1: with K = 1 the
    sampled `tokens`', else its `topk` most likely tokens (in order) among the first `vocab_limit` ids (the student's
    logits; a teacher's padded vocabulary may have more rows), a few thousand positions at a time."""
    if topk == 1:
        log_probs, _ = log_probs_from_logits(logits, tokens, 1.0, with_entropy=False)
        return log_probs[..., None], tokens[..., None]
    flat = logits.reshape(-1, logits.shape[-1])
    values = torch.empty(flat.shape[0], topk, dtype=torch.float32, device=logits.device)
    ids = torch.empty(flat.shape[0], topk, dtype=torch.long, device=logits.device)
    for start in range(0, flat.shape[0], 4096):
        chunk = torch.log_softmax(flat[start:start + 4096].float(), -1)
        values[start:start + 4096], ids[start:start + 4096] = chunk[:, :vocab_limit].topk(topk, -1)
    return values.view(*logits.shape[:-1], topk), ids.view(*logits.shape[:-1], topk)


def topk_losses(logits: torch.Tensor, temperature: float, teacher_log_probs: torch.Tensor, teacher_ids: torch.Tensor,
                min_clamp: float | None) -> dict[str, torch.Tensor]:
    """forward_kl_topk per position (the logits' leading shape): the loss (differentiable in `logits`), both models'
    probability mass on the teacher's top-k, and how many of the student's own top-k are among them with the mean
    teacher-weighted log-ratio there (verl's overlap diagnostics)."""
    scaled = logits.float() / temperature
    student = scaled.gather(-1, teacher_ids) - torch.logsumexp(scaled, -1, keepdim=True)
    student_mass, teacher_mass = student.detach().exp().sum(-1), teacher_log_probs.exp().sum(-1)
    if min_clamp is not None:
        student, teacher_log_probs = student.clamp_min(min_clamp), teacher_log_probs.clamp_min(min_clamp)
    losses = (teacher_log_probs.exp() * (teacher_log_probs - student)).sum(-1).clamp_min(0.0)
    with torch.no_grad():
        own = scaled.topk(teacher_ids.shape[-1], -1).indices
        overlap = (teacher_ids[..., :, None] == own[..., None, :]).any(-1)
        count = overlap.sum(-1)
        token_kl = teacher_log_probs.exp() * (teacher_log_probs - student.detach())
        advantage = torch.where(count > 0, (-token_kl * overlap).sum(-1) / count.clamp_min(1), 0.0)
    return {"loss": losses, "student_mass": student_mass, "teacher_mass": teacher_mass, "overlap_count": count,
            "overlap_token_advantage": advantage}


def distillation_loss(config: DistillationConfig, losses: torch.Tensor, log_prob: torch.Tensor, old_log_prob: torch.Tensor,
                      mask: torch.Tensor, loss_agg_mode: str, info: dict,
                      rollout_is_weights: torch.Tensor | None) -> tuple[torch.Tensor, dict[str, float]]:
    """The micro-batch's distillation loss from its per-token losses (rows, width), and its policy-gradient metrics."""
    loss_cfg = config.distillation_loss
    if loss_cfg.loss_max_clamp is not None:
        losses = losses.clamp(-loss_cfg.loss_max_clamp, loss_cfg.loss_max_clamp)
    if not loss_cfg.use_policy_gradient:
        return agg_loss(losses, mask, loss_agg_mode, **info), {}
    loss_cfg.global_batch_info = info
    loss, metrics = compute_policy_loss(loss_cfg.policy_loss_mode, old_log_prob=old_log_prob, log_prob=log_prob,
                                        advantages=-losses.detach(), response_mask=mask, loss_agg_mode=loss_agg_mode,
                                        config=loss_cfg, rollout_is_weights=rollout_is_weights)
    return loss, {f"actor/distillation/{key.removeprefix('actor/')}": value for key, value in metrics.items()}


def token_losses(config: DistillationConfig, out, trimmed, micro, log_prob: torch.Tensor, temperature: float,
                 mask: torch.Tensor) -> tuple[torch.Tensor, dict[str, float], dict[str, torch.Tensor]]:
    """A micro-batch's distillation loss per token (rows, width), its metrics to average over micro-batches, and the
    per-token values whose smallest and largest the update logs (`out`: the student's ResponseLogits of the
    `trimmed` micro-batch; `log_prob`: its log-probs at full width)."""
    loss_cfg, valid = config.distillation_loss, mask.bool()
    if loss_cfg.loss_mode in ESTIMATOR_MODES:
        losses = kl_penalty(log_prob, micro["teacher_logprobs"][..., 0], loss_cfg.loss_mode)
        return losses, {"actor/distillation/abs_loss": float(masked_mean(losses.detach().abs(), mask))}, {}
    parts = topk_losses(out.logits, temperature, out.lay_out(micro["teacher_logprobs"]), out.lay_out(micro["teacher_ids"]),
                        loss_cfg.log_prob_min_clamp)
    parts = {key: trimmed.widen(out.unpack(value)) for key, value in parts.items()}
    count, advantage = parts["overlap_count"].float(), parts["overlap_token_advantage"]
    overlapping = valid & (count > 0)
    metrics = {"actor/distillation/student_mass": float(masked_mean(parts["student_mass"], mask)),
               "actor/distillation/teacher_mass": float(masked_mean(parts["teacher_mass"], mask)),
               "actor/distillation/overlap_ratio": float(masked_mean(count, mask)) / loss_cfg.topk,
               "actor/distillation/overlap_token_advantage": float(advantage[overlapping].mean()) if overlapping.any() else 0.0}
    return parts["loss"], metrics, {name: parts[name][valid] for name in ("student_mass", "teacher_mass")}


def total_loss(config: DistillationConfig, task_loss: torch.Tensor, distill: torch.Tensor) -> torch.Tensor:
    """The update's loss: the task's plus the weighted distillation loss, or the distillation loss alone."""
    loss_cfg = config.distillation_loss
    return task_loss + loss_cfg.distillation_loss_coef * distill if loss_cfg.use_task_rewards else distill


def extreme_metrics(parts: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """`actor/distillation/<name>_min` and `_max` of each per-token value over the mini-batch, on every rank's tokens."""
    names = sorted({name for part in parts for name in part})
    lows = [min((float(p[n].min()) for p in parts if n in p and p[n].numel()), default=float("inf")) for n in names]
    highs = [max((float(p[n].max()) for p in parts if n in p and p[n].numel()), default=float("-inf")) for n in names]
    lows, highs = all_reduce(lows, "min"), all_reduce(highs, "max")
    out = {}
    for name, low, high in zip(names, lows, highs, strict=True):
        if low <= high:  # some token had a value
            out[f"actor/distillation/{name}_min"], out[f"actor/distillation/{name}_max"] = low, high
    return out


@torch.no_grad()
def teacher_log_probs(teachers: list[tuple[Teacher, torch.nn.Module]], batch, teacher_key: str, topk: int,
                      micro_batch_size: int | None, device, share_prompt: bool, pack: bool, vocab_limit: int | None = None):
    """`teacher_logprobs` (rows, response width, K) of every row, each from its teacher, and with K > 1 (top-k) the
    tokens they are of, `teacher_ids` (with K = 1 those are the responses); a row whose teacher_key value no teacher
    has is a DataError naming it. Teachers are whole on every rank (no collectives)."""
    from reinforge.training.actor import response_logits  # here: actor.py imports this module

    rows, width = len(batch), batch["responses"].shape[1]
    log_probs, ids = torch.zeros(rows, width, topk), torch.zeros(rows, width, topk, dtype=torch.long)
    owners = {teacher.key: model for teacher, model in teachers}  # one teacher: key None, every row's
    if len(teachers) > 1 and teacher_key not in batch:
        raise DataError(f"the rows have no field {teacher_key!r} (distillation.teacher_key) to pick their teacher by; "
                        f"they have {', '.join(batch.keys())}")
    values = list(batch[teacher_key]) if len(teachers) > 1 else [None] * rows
    unknown = sorted({v for v in values if v not in owners}, key=str)
    if unknown:
        raise no_teacher("", teacher_key, unknown, owners)
    inputs, size = batch.select(FORWARD_KEYS), micro_batch_size or rows
    for key, model in owners.items():
        mine = [row for row, value in enumerate(values) if value == key]
        for start in range(0, len(mine), size):
            part = mine[start:start + size]
            trimmed = trim_padding(inputs.index(part).to(device))
            out = response_logits(model, trimmed.batch, share_prompt, pack)
            part_log_probs, part_ids = teacher_outputs(out.logits, out.tokens, topk, vocab_limit)
            log_probs[part] = trimmed.widen(out.unpack(part_log_probs)).cpu()
            ids[part] = trimmed.widen(out.unpack(part_ids)).cpu()
    return Batch({"teacher_logprobs": log_probs, **({"teacher_ids": ids} if topk > 1 else {})})


@dataclass
class _TeacherSource:
    """What `load_pretrained` reads of a model section, for a teacher: its own folder, the student's trust and
    external_lib (which register the architecture), no config overrides."""

    path: str
    external_lib: str | None
    trust_remote_code: bool
    override_config: dict

    def get(self, key: str, default=None):
        return getattr(self, key, default)


def check_teacher_tokenizer(teacher: Teacher, tokenizer, trust_remote_code: bool) -> None:
    """A ModelError when the teacher's folder holds a tokenizer that gives the student's tokens other ids: its log-probs
    would be of other tokens. A folder without tokenizer files is taken at its word (its vocabulary size is checked)."""
    from pathlib import Path

    from transformers import AutoTokenizer

    from reinforge.training.model import has_tokenizer_files

    folder = Path(teacher.model_path).expanduser()
    if not has_tokenizer_files(folder):
        return
    theirs = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=trust_remote_code).get_vocab()
    ours = tokenizer.get_vocab()
    moved = sorted(token for token, index in ours.items() if theirs.get(token) != index)
    if moved:
        raise ModelError(f"{teacher.setting}={teacher.model_path}: the teacher's tokenizer gives {len(moved)} of the student's "
                         f"{len(ours)} tokens other ids (e.g. {moved[:3]}), so its log-probs would be of other tokens; a "
                         "teacher must share the student's tokenizer")


def load_teachers(config, device, student_vocab: int, tokenizer) -> list[tuple[Teacher, torch.nn.Module]]:
    """Each teacher's causal LM, frozen, in the reference's dtype (and compute dtype); one whose tokenizer gives the
    student's `tokenizer`'s tokens other ids, or that scores fewer tokens than it has, is a ModelError (its log-probs
    would be of other tokens), and so is a forward_kl_topk topk above the vocabulary the two models share
    (`student_vocab`: the student's logits)."""
    from transformers import AutoModelForCausalLM

    from reinforge.training.fsdp import compute_in
    from reinforge.training.model import load_pretrained, prepare_model, pretrained

    student = config.actor_rollout_ref.model
    teachers = []
    for teacher in resolve_teachers(config.distillation):
        check_teacher_tokenizer(teacher, tokenizer, student.trust_remote_code)
        source = _TeacherSource(teacher.model_path, student.external_lib, student.trust_remote_code, {})
        model = load_pretrained(source, teacher.setting, "teacher model", config.actor_rollout_ref.ref.fsdp_config.model_dtype,
                                lambda path, hf_config, kwargs: pretrained(AutoModelForCausalLM, path, **kwargs))
        rows = model.get_output_embeddings().weight.shape[0]
        if rows < len(tokenizer):
            raise ModelError(f"{teacher.setting}={teacher.model_path}: the teacher scores {rows} tokens, fewer than the "
                             f"student's tokenizer has ({len(tokenizer)}); a teacher must share the student's vocabulary")
        if topk_of(config.distillation) > min(rows, student_vocab):
            raise ConfigError(f"distillation.distillation_loss.topk={topk_of(config.distillation)} is more tokens than the "
                              f"teacher {teacher.setting}={teacher.model_path} and the student share "
                              f"({min(rows, student_vocab)}): set it lower (verl's default is 32)")
        model = prepare_model(model, device, trainable=False, gradient_checkpointing=False)
        compute_in(model, config.actor_rollout_ref.ref.fsdp_config, device)  # on CUDA in the reference's compute dtype too
        teachers.append((teacher, model))
    return teachers
