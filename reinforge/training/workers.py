"""The workers: actor/rollout/reference in one class (policy, engine, frozen reference), and the critic.

Their public methods take and return Batches and are what the trainer calls through a worker
group (DESIGN §3). The roles `ActorRolloutRefWorker` plays are given by `role`:
`actor_rollout_ref` (policy, engine and frozen reference), `actor_rollout` (no reference) or
`ref` (reference only). `CriticWorker` holds the value model of PPO.

`init_model` joins the data-parallel process group (`init_distributed`). On one rank the models
are plain modules and the hf engine decodes with the actor's own module; on several, the actor,
reference and critic are sharded with FSDP2 (`fsdp.py`) and the engine decodes with an unsharded
copy of the policy that `update_weights` refreshes.

Checkpoints use verl's file names: `model_`, `optim_` and `extra_state_world_size_{W}_rank_{r}.pt`
(scheduler and, for the actor, every RNG), one set per rank, and a `huggingface/` folder with the
model's config; reading and writing them is checkpoint_io.py's, which reshards between numbers of ranks.
"""

from __future__ import annotations

import time

import torch

from reinforge.batch import Batch
from reinforge.config import wants_sum_pi_squared
from reinforge.config.schema import Config, TrainerConfig
from reinforge.distributed import Dispatch, register
from reinforge.distributed.process_group import init_distributed, rank, world_size
from reinforge.environment.multimodal import MM_KEY, has_images, never_generated
from reinforge.errors import ConfigError
from reinforge.inference import SamplingParams, generate_sequences, make_engine
from reinforge.inference.rollout import check_single_turn
from reinforge.training.actor import Actor
from reinforge.training.checkpoint_io import (
    full_model_state,
    load_training_state,
    rng_state,
    save_training_state,
    seed_rngs,
    set_rng_state,
    write_hf_model,
)
from reinforge.training.critic import Critic
from reinforge.training.distill import load_teachers, teacher_log_probs, topk_of
from reinforge.training.fsdp import offload_optimizer, shard_model
from reinforge.training.lora import (
    WithoutAdapters,
    adapter_state,
    add_lora,
    engine_weights,
    fan_in_fan_out,
    has_lora,
    lora_enabled,
    lora_scaling,
    merge_lora_state,
    save_adapter,
)
from reinforge.training.model import load_causal_lm, load_tokenizer, load_value_model, model_source
from reinforge.training.optim import advance_schedule, apply_settings, group_settings, make_optimizer, make_scheduler
from reinforge.training.perf import compute_memory_metrics, device_peak_flops, mfu, training_flops
from reinforge.training.vision import freeze_vision_tower


def update_perf_metrics(role: str, model: torch.nn.Module, batch: Batch, seconds: float, ppo_epochs: int,
                        trainer: TrainerConfig) -> dict[str, float]:
    """perf/mfu/<role> of an update that took `seconds` (when the peak is known), and for the actor the memory
    metrics, as verl's workers report them (docs/metrics.md)."""
    seq_lens = batch["attention_mask"].sum(-1).tolist()
    flops = training_flops(model.config, seq_lens)
    value = mfu(None if flops is None else flops * ppo_epochs, seconds, device_peak_flops(trainer.device, trainer.peak_flops))
    metrics = {} if value is None else {f"perf/mfu/{role}": value}
    if role == "actor":
        metrics.update(compute_memory_metrics(trainer.device))
    return metrics


class ActorRolloutRefWorker:
    def __init__(self, config: Config, role: str = "actor_rollout_ref"):
        if role not in ("actor_rollout_ref", "actor_rollout", "ref"):
            raise ValueError(f"unknown role {role!r}")
        self.config, self.role = config, role
        self.has_actor = role.startswith("actor")
        self.has_ref = role.endswith("ref")
        self.device = config.trainer.device

    @register(Dispatch.ALL)
    def init_model(self, total_training_steps: int) -> None:
        cfg = self.config.actor_rollout_ref
        init_distributed(self.device)
        seed_rngs(self.config.trainer.seed)  # each worker process's own streams (the driver seeds its own)
        self.tokenizer = load_tokenizer(self.config)
        if self.has_actor:
            model = load_causal_lm(self.config, self.device, trainable=True, dtype=cfg.actor.fsdp_config.model_dtype)
            # hf, vllm or sglang (docs/engines.md), made before sharding: with several ranks the hf engine decodes on
            # its own unsharded copy (a rank cannot run collectives in a decoding loop whose length differs from the
            # other ranks'), which update_weights keeps equal to the actor
            self.engine = make_engine(self.config, model, self.tokenizer, own_copy=world_size() > 1)
            self.engine.sleep()  # vllm/sglang with free_cache_engine: no KV cache held until the first rollout
            if lora_enabled(cfg.model):  # adapters added in place: an engine sharing the module uses them, a copy gets them merged
                model = add_lora(model, cfg.model, "actor_rollout_ref.model")
                self.engine.update_weights(engine_weights(model))
            if cfg.actor.freeze_vision_tower:
                freeze_vision_tower(model)
            model = shard_model(model, cfg.actor.fsdp_config, self.device)
            optimizer = make_optimizer(model.parameters(), cfg.actor.optim)
            self.scheduler = make_scheduler(optimizer, cfg.actor.optim, total_training_steps)
            self.actor = Actor(model, cfg.actor, optimizer, rollout_correction=self.config.algorithm.rollout_correction,
                               device=self.device, share_prompt=cfg.model.share_prompt_forward,
                               pack=cfg.model.use_remove_padding, distillation=self.config.distillation,
                               never=never_generated(self.config, model))
            self.vocab = model.get_output_embeddings().weight.shape[0]  # the student's logits, which a teacher's top-k index
            self.teachers = (load_teachers(self.config, self.device, self.vocab, self.tokenizer)
                             if self.config.distillation.enabled else [])
            self.agents = None
            if cfg.rollout.multi_turn.enable:  # imported here: single-turn runs never load the agent machinery
                from reinforge.inference.agent import AgentRunner

                data = self.config.data
                self.agents = AgentRunner(self.tokenizer, cfg.rollout.multi_turn, cfg.rollout.agent, data.apply_chat_template_kwargs,
                                          data.max_prompt_length, data.truncation)
        if self.has_ref and self.has_actor and lora_enabled(cfg.model):  # verl's ref-in-actor: the policy, adapters off
            self.ref = Actor(WithoutAdapters(self.actor.model), cfg.actor, device=self.device,
                             share_prompt=cfg.model.share_prompt_forward, pack=cfg.model.use_remove_padding,
                             never=self.actor.forward["never"])
        elif self.has_ref:
            ref = load_causal_lm(self.config, self.device, trainable=False, dtype=cfg.ref.fsdp_config.model_dtype)
            self.ref = Actor(shard_model(ref, cfg.ref.fsdp_config, self.device), cfg.actor, device=self.device,
                             share_prompt=cfg.model.share_prompt_forward, pack=cfg.model.use_remove_padding,
                             never=never_generated(self.config, ref))
        if self.has_ref and self.has_actor and cfg.actor.kl_loss_type == "full":
            self.actor.ref_model = self.ref.model  # the exact KL needs the reference's whole distribution

    # ---- inference ----------------------------------------------------------------------------
    def sampling_params(self, validate: bool, do_sample: bool = True) -> SamplingParams:
        rollout = self.config.actor_rollout_ref.rollout
        source = rollout.val_kwargs if validate else rollout
        return SamplingParams(
            max_tokens=rollout.response_length, temperature=source.temperature, top_p=source.top_p,
            top_k=source.top_k, do_sample=source.do_sample and do_sample, ignore_eos=rollout.ignore_eos,
        )

    @register(Dispatch.DP)
    def generate_sequences(self, prompts: Batch) -> Batch:
        """Prompts (input_ids, attention_mask) -> trajectories.

        meta_info['validate'] picks val_kwargs; meta_info['do_sample']=False asks for greedy responses.
        """
        params = self.sampling_params(bool(prompts.meta_info.get("validate", False)), prompts.meta_info.get("do_sample", True))
        self.engine.wake()  # vllm/sglang: memory back, the actor's latest weights pushed
        try:
            if self.agents is not None:  # multi-turn: an agent loop per row (docs/agents.md)
                if MM_KEY in prompts and has_images(prompts[MM_KEY]):  # a Dataset class's rows (the built-in's: at start)
                    raise ConfigError("actor_rollout_ref.rollout.multi_turn.enable=true: the rows have images "
                                      "(multi_modal_inputs), which agent loops do not take in this version")
                return self.agents.generate_sequences(self.engine, prompts, params, self.tokenizer.pad_token_id)
            check_single_turn(prompts)
            return generate_sequences(self.engine, prompts, params, self.tokenizer.pad_token_id)
        finally:
            self.engine.sleep()  # with rollout.free_cache_engine the training passes get the memory back

    # ---- training -----------------------------------------------------------------------------
    @register(Dispatch.DP)
    def compute_log_prob(self, batch: Batch) -> Batch:
        """old_log_probs of the current policy (no gradient), the entropy at each response token (`entropys`, from which
        the trainer logs actor/entropy, as verl's), and `sum_pi_squared` when the advantage estimator takes it or
        actor.calculate_sum_pi_squared is set."""
        rollout = self.config.actor_rollout_ref.rollout
        max_tokens = rollout.log_prob_max_token_len_per_gpu if rollout.log_prob_use_dynamic_bsz else None
        micro = rollout.log_prob_micro_batch_size_per_gpu
        if wants_sum_pi_squared(self.config):
            log_probs, entropy, sum_pi_squared = self.actor.compute_log_prob_and_sum_pi_squared(batch, rollout.temperature,
                                                                                                 micro, max_tokens)
            return Batch({"old_log_probs": log_probs, "entropys": entropy, "sum_pi_squared": sum_pi_squared})
        log_probs, entropy = self.actor.compute_log_prob(batch, rollout.temperature, micro, with_entropy=True,
                                                         max_tokens=max_tokens)
        return Batch({"old_log_probs": log_probs, "entropys": entropy})

    @register(Dispatch.DP)
    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        """ref_log_prob; with algorithm.kl_penalty=full in the reward also `full_kl`, the exact per-token KL(actor || ref)."""
        cfg, algo = self.config.actor_rollout_ref, self.config.algorithm
        micro = cfg.ref.log_prob_micro_batch_size_per_gpu
        max_tokens = cfg.ref.log_prob_max_token_len_per_gpu if cfg.ref.log_prob_use_dynamic_bsz else None
        if algo.use_kl_in_reward and algo.kl_penalty == "full":
            log_probs, full_kl = self.actor.compute_ref_log_prob_and_full_kl(batch, self.ref.model, cfg.rollout.temperature,
                                                                             micro, max_tokens)
            return Batch({"ref_log_prob": log_probs, "full_kl": full_kl})
        log_probs, _ = self.ref.compute_log_prob(batch, cfg.rollout.temperature, micro, max_tokens=max_tokens)
        return Batch({"ref_log_prob": log_probs})

    @register(Dispatch.DP)
    def compute_teacher_log_prob(self, batch: Batch) -> Batch:
        """teacher_logprobs (and with top-k, teacher_ids) of each response position, from each row's teacher."""
        cfg, dcfg = self.config.actor_rollout_ref, self.config.distillation
        return teacher_log_probs(self.teachers, batch, dcfg.teacher_key, topk_of(dcfg), cfg.ref.log_prob_micro_batch_size_per_gpu,
                                 self.device, cfg.model.share_prompt_forward, cfg.model.use_remove_padding, self.vocab)

    @register(Dispatch.DP)
    def update_actor(self, batch: Batch) -> Batch:
        """One training step of the policy; returns its metrics in meta_info['metrics']."""
        cfg = self.config.actor_rollout_ref
        start = time.perf_counter()
        offload_optimizer(self.actor.optimizer, cfg.actor.fsdp_config, self.device)
        metrics = self.actor.update_policy(batch, cfg.rollout.temperature, cfg.rollout.n)
        offload_optimizer(self.actor.optimizer, cfg.actor.fsdp_config, "cpu")
        metrics.update(update_perf_metrics("actor", self.actor.model, batch, time.perf_counter() - start,
                                           cfg.actor.ppo_epochs, self.config.trainer))
        advance_schedule(self.scheduler)
        metrics["actor/lr"] = self.scheduler.get_last_lr()[0]  # the next update's, as verl logs it
        return Batch(meta_info={"metrics": metrics})

    @register(Dispatch.ALL)
    def update_weights(self) -> None:
        """Give the engine the updated weights: vllm/sglang push them in buckets at their next wake; the hf engine
        copies them into its own copy of the policy when it has one (several ranks, rollout.dtype: bf16 on CUDA), else
        shares the actor's module."""
        self.engine.update_weights(engine_weights(self.actor.model))

    # ---- checkpoints --------------------------------------------------------------------------
    @register(Dispatch.ALL)
    def save_checkpoint(self, folder: str) -> None:
        """Write this rank's model, optimizer and extra state (scheduler, its RNG streams) under `folder` (verl's
        names, checkpoint_io.py); rank 0 adds the generation config and tokenizer to huggingface/, and with hf_model
        in save_contents the full weights as safetensors (gathered from every rank when the model is sharded)."""
        from reinforge.training.vision import is_vision_config, model_class, save_image_processor

        checkpoint = self.config.actor_rollout_ref.actor.checkpoint
        contents = checkpoint.save_contents
        path = save_training_state(folder, contents, self.actor.model, self.actor.optimizer,
                                   {"lr_scheduler": self.scheduler.state_dict(), "rng": self._rng_state()}, checkpoint.save_lora_only)
        model, hf_dir = self.actor.model, path / "huggingface"
        weights = full_model_state(model) if "hf_model" in contents else None  # a collective with several ranks
        adapter = adapter_state(model) if has_lora(model) else None  # a collective too
        if rank() != 0:
            return
        if adapter is not None:
            save_adapter(model, adapter, path)
        if weights is not None:
            if adapter is not None:  # the Hugging Face model is the merged one
                weights = merge_lora_state(weights, lora_scaling(model), fan_in_fan_out(model))
            write_hf_model(model.config, weights, hf_dir, model_class(model.config))
        if model.generation_config is not None:
            model.generation_config.save_pretrained(hf_dir)
        self.tokenizer.save_pretrained(hf_dir)
        if is_vision_config(model.config):
            model_cfg = self.config.actor_rollout_ref.model
            save_image_processor(model_source(model_cfg.path), hf_dir, model_cfg.trust_remote_code)

    @register(Dispatch.ALL)
    def load_checkpoint(self, folder: str) -> list[str]:
        contents = self.config.actor_rollout_ref.actor.checkpoint.load_contents
        built = group_settings(self.actor.optimizer)
        extra = load_training_state(folder, contents, self.actor.model, self.actor.optimizer, self.device)
        if extra is not None:
            self.scheduler.load_state_dict(extra["lr_scheduler"])
            self._set_rng_state(extra["rng"])
        notes = apply_settings(self.actor.optimizer, self.scheduler, self.config.actor_rollout_ref.actor.optim,
                               "actor_rollout_ref.actor.optim", built)
        self.update_weights()  # an engine with its own copy (several ranks, rollout.dtype, vllm) takes the loaded weights
        return notes

    def _rng_state(self) -> dict:
        return {**rng_state(), "engine": self.engine.state_dict()}

    def _set_rng_state(self, state: dict) -> None:
        set_rng_state(state)
        self.engine.load_state_dict(state["engine"])


class CriticWorker:
    """The value model of PPO: values for a batch of trajectories, and its clipped value-loss update."""

    def __init__(self, config: Config):
        self.config = config
        self.device = config.trainer.device

    @register(Dispatch.ALL)
    def init_model(self, total_training_steps: int) -> None:
        cfg = self.config.critic
        init_distributed(self.device)
        model = load_value_model(self.config, self.device, dtype=cfg.model.fsdp_config.model_dtype)
        if lora_enabled(cfg.model):
            model = add_lora(model, cfg.model, "critic.model")
        model = shard_model(model, cfg.model.fsdp_config, self.device)
        optimizer = make_optimizer(model.parameters(), cfg.optim)
        self.scheduler = make_scheduler(optimizer, cfg.optim, total_training_steps)
        self.critic = Critic(model, cfg, optimizer, device=self.device)

    @register(Dispatch.DP)
    def compute_values(self, batch: Batch) -> Batch:
        return Batch({"values": self.critic.compute_values(batch)})

    @register(Dispatch.DP)
    def update_critic(self, batch: Batch) -> Batch:
        """One training step of the critic; returns its metrics in meta_info['metrics']."""
        start = time.perf_counter()
        fsdp_config = self.config.critic.model.fsdp_config
        offload_optimizer(self.critic.optimizer, fsdp_config, self.device)
        metrics = self.critic.update_critic(batch, self.config.actor_rollout_ref.rollout.n)
        offload_optimizer(self.critic.optimizer, fsdp_config, "cpu")
        metrics.update(update_perf_metrics("critic", self.critic.model, batch, time.perf_counter() - start,
                                           self.config.critic.ppo_epochs, self.config.trainer))
        advance_schedule(self.scheduler)
        metrics["critic/lr"] = self.scheduler.get_last_lr()[0]  # the next update's, as verl logs it
        return Batch(meta_info={"metrics": metrics})

    @register(Dispatch.ALL)
    def save_checkpoint(self, folder: str) -> None:
        model = self.critic.model
        checkpoint = self.config.critic.checkpoint
        path = save_training_state(folder, checkpoint.save_contents, model, self.critic.optimizer,
                                   {"lr_scheduler": self.scheduler.state_dict()}, checkpoint.save_lora_only)
        adapter = adapter_state(model) if has_lora(model) else None  # a collective with several ranks
        if adapter is not None and rank() == 0:
            save_adapter(model, adapter, path)

    @register(Dispatch.ALL)
    def load_checkpoint(self, folder: str) -> list[str]:
        built = group_settings(self.critic.optimizer)
        extra = load_training_state(folder, self.config.critic.checkpoint.load_contents, self.critic.model,
                                    self.critic.optimizer, self.device, key="critic")
        if extra is not None:
            self.scheduler.load_state_dict(extra["lr_scheduler"])
        notes = apply_settings(self.critic.optimizer, self.scheduler, self.config.critic.optim, "critic.optim", built)
        return notes
