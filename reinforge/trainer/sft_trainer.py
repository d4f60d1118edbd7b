"""`reinforge sft`: supervised fine-tuning driven as verl's `fsdp_sft_trainer` is (config/sft_schema.py).

One process per rank: `reinforge sft ...` runs one; `torchrun --nproc_per_node=N -m reinforge sft ...` runs N,
the model sharded over them with FSDP2 (gloo on CPU, nccl on GPUs), each rank taking every N-th row of a step.

A step takes `data.train_batch_size` rows of the epoch's shuffled order (verl's: its DistributedSampler, which verl
builds without a seed, permutes the rows by the seed 0 + epoch; a last partial batch is dropped, as there), in
micro-batches of `micro_batch_size_per_gpu` rows per rank, each padded to its own longest row. A row with no token
to train on (its response empty or cut away by max_length) keeps its place, as in verl, and the run says how many
there are. The loss is the mean negative log-likelihood over every trained token of the step, on all ranks (verl's
older fsdp_sft_trainer averaged the micro-batches' means unless balance_dp_token; verl 0.9's trainer takes this
token mean), so the gradient does not depend on how the step is split. A step with a non-finite loss or gradient
norm is skipped, as verl's is. val/loss is the token mean over the validation files (verl's: the mean of its
validation batches' means, a last partial batch left out).

Checkpoints are verl's layout in `trainer.default_local_dir`: global_step_<N>/ with the rank files of model,
optimizer and extra state (checkpoint_io.py), huggingface/ (a model `reinforge train
actor_rollout_ref.model.path=...` loads), lora_adapter/ with LoRA, and latest_checkpointed_iteration.txt. The data
position follows from the step, so a resumed run (trainer.resume_mode=auto, the default) equals an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

import torch

from reinforge.config.sft_schema import EACH_EPOCH, SFTConfig
from reinforge.distributed.process_group import all_reduce, rank, world_size
from reinforge.environment.sft_dataset import collate_examples
from reinforge.trainer.checkpoint import due
from reinforge.training.checkpoint_io import seed_rngs
from reinforge.training.minibatch import backward_if_finite, clip_and_step, eval_mode, trim_padding
from reinforge.training.optim import advance_schedule

SAMPLER_SEED = 0  # torch's DistributedSampler's default seed, which verl's SFT trainer leaves as it is


class SFTTrainer:
    def __init__(self, config: SFTConfig, model, tokenizer, optimizer, scheduler, train_data, val_data, device: str):
        self.config, self.model, self.tokenizer = config, model, tokenizer
        self.optimizer, self.scheduler, self.device = optimizer, scheduler, device
        self.train_data, self.val_data = train_data, val_data
        self.pack = config.use_remove_padding and config.model.use_remove_padding  # both of verl's places must say so
        self.run_dir = Path(config.trainer.default_local_dir)
        self.steps_per_epoch = len(train_data) // config.data.train_batch_size
        self.total_steps = self.steps_per_epoch * config.trainer.total_epochs
        if config.trainer.total_training_steps is not None:
            self.total_steps = min(self.total_steps, config.trainer.total_training_steps)
        self.global_step = 0

    def _due(self, freq: int | str) -> bool:
        """Whether a save_freq / test_freq falls on this step: every `freq` steps, or at the end of every epoch."""
        return due(self.global_step, self.steps_per_epoch if freq == EACH_EPOCH else freq)

    # ---- the data of a step ------------------------------------------------------------------------
    def step_rows(self, step: int) -> list[int]:
        """This rank's rows (dataset indices) of training step `step` (1-based)."""
        batch = self.config.data.train_batch_size
        epoch, index = divmod(step - 1, self.steps_per_epoch)
        # verl's DistributedSampler, built without a seed: a permutation seeded by 0 + epoch, rank r taking every N-th row
        order = torch.randperm(len(self.train_data), generator=torch.Generator().manual_seed(SAMPLER_SEED + epoch))
        rows = order[index * batch:(index + 1) * batch].tolist()
        return rows[rank()::world_size()]

    def _micro_batches(self, dataset, rows: list[int]):
        size = self.config.data.micro_batch_size_per_gpu
        pad = self.tokenizer.pad_token_id
        return [collate_examples([dataset[i] for i in rows[start:start + size]], pad) for start in range(0, len(rows), size)]

    def _token_nll(self, micro) -> tuple[torch.Tensor, torch.Tensor]:
        """The summed negative log-likelihood of a micro-batch's trained tokens, and their count."""
        from reinforge.training.actor import response_log_probs  # with transformers' model code: imported once a run trains

        trimmed = trim_padding(micro.to(self.device))
        log_probs, _ = response_log_probs(self.model, trimmed.batch, temperature=1.0, pack=self.pack)
        mask = micro["response_mask"][:, :log_probs.shape[1]].to(log_probs.device, log_probs.dtype)
        return -(log_probs * mask).sum(), mask.sum()

    # ---- one step, validation ------------------------------------------------------------------------
    def train_step(self, step: int) -> dict[str, float]:
        start = time.perf_counter()
        self.model.train()
        micros = self._micro_batches(self.train_data, self.step_rows(step))
        tokens = all_reduce([float(sum(int(m["response_mask"].sum()) for m in micros))])[0]
        self.optimizer.zero_grad(set_to_none=True)
        nll_sum, finite = 0.0, True
        for micro in micros:
            nll, _ = self._token_nll(micro)
            # FSDP2 averages gradients over the ranks: x ranks makes the sum the gradient of the step's token mean
            finite = backward_if_finite(nll / max(tokens, 1.0) * world_size()) and finite
            nll_sum += float(nll.detach())
        clip = self.config.optim.clip_grad
        grad_norm, stepped = clip_and_step(self.model, self.optimizer, math.inf if clip is None else clip, finite)
        lr = self.optimizer.param_groups[0]["lr"]
        advance_schedule(self.scheduler)
        loss = all_reduce([nll_sum])[0] / max(tokens, 1.0)
        return {"train/loss": loss, "train/lr": lr, "train/grad_norm": grad_norm, "train/tokens": tokens,
                "train/nonfinite_skipped": float(not stepped), "train/time(s)": time.perf_counter() - start}

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """val/loss: the mean negative log-likelihood of every trained token of the validation data."""
        rows = list(range(len(self.val_data)))[rank()::world_size()]
        micros = self._micro_batches(self.val_data, rows)
        most = int(all_reduce([float(len(micros))], "max")[0])  # a sharded forward is a collective: same count on every rank
        # a rank with fewer micro-batches repeats one, uncounted; a rank with no rows (fewer rows than ranks) runs row 0
        spare = micros[-1] if micros else (self._micro_batches(self.val_data, [0])[0] if most else None)
        nll_sum = tokens = 0.0
        with eval_mode(self.model):
            for i in range(most):
                nll, count = self._token_nll(micros[i] if i < len(micros) else spare)
                if i < len(micros):
                    nll_sum, tokens = nll_sum + float(nll), tokens + float(count)
        nll_sum, tokens = all_reduce([nll_sum, tokens])
        return {"val/loss": nll_sum / max(tokens, 1.0)}

    # ---- checkpoints -------------------------------------------------------------------------------------
    def save(self, step: int) -> Path | None:
        """global_step_<step> in the run folder, written by every rank, published by rank 0 (trainer/checkpoint.py)."""
        import torch.distributed as dist

        from reinforge.trainer.checkpoint import save_checkpoint, staging_folder

        def write_all(folder: Path) -> None:
            if world_size() > 1:
                dist.barrier()  # rank 0 has set up the temporary folder
            self._write(folder)
            if world_size() > 1:
                dist.barrier()

        if rank() == 0:
            return save_checkpoint(self.run_dir, step, write_all, keep=self.config.trainer.max_ckpt_to_keep)
        write_all(staging_folder(self.run_dir, step))
        return None

    def _write(self, folder: Path) -> None:
        from transformers import AutoModelForCausalLM

        from reinforge.training.checkpoint_io import full_model_state, rng_state, save_training_state, write_hf_model
        from reinforge.training.lora import adapter_state, fan_in_fan_out, has_lora, lora_scaling, merge_lora_state, save_adapter

        contents = self.config.trainer.checkpoint["save_contents"]
        extra = {"lr_scheduler": self.scheduler.state_dict(), "global_step": self.global_step, "rng": rng_state()}
        save_training_state(str(folder), contents, self.model, self.optimizer, extra)
        weights = full_model_state(self.model) if "hf_model" in contents else None  # collectives with several ranks
        adapter = adapter_state(self.model) if has_lora(self.model) else None
        if rank() != 0:
            return
        hf_dir = folder / "huggingface"
        if adapter is not None:
            save_adapter(self.model, adapter, folder)
        if weights is not None:
            merged = merge_lora_state(weights, lora_scaling(self.model), fan_in_fan_out(self.model)) if adapter else weights
            write_hf_model(self.model.config, merged, hf_dir, AutoModelForCausalLM)
        if self.model.generation_config is not None:
            self.model.generation_config.save_pretrained(hf_dir)
        self.tokenizer.save_pretrained(hf_dir)

    def load(self, folder: Path) -> None:
        from reinforge.trainer.checkpoint import verify_files
        from reinforge.training.checkpoint_io import load_training_state, set_rng_state
        from reinforge.training.optim import apply_settings, group_settings

        contents = self.config.trainer.checkpoint["load_contents"]
        built = group_settings(self.optimizer)
        verify_files(sorted(folder.glob("*.pt")))  # against the save's checksums.json (trainer/checkpoint.py), on every rank
        extra = load_training_state(str(folder), contents, self.model, self.optimizer, self.device, key="trainer")
        if extra is not None:
            self.scheduler.load_state_dict(extra["lr_scheduler"])
            set_rng_state(extra["rng"])
        for note in apply_settings(self.optimizer, self.scheduler, self.config.optim, "optim", built):
            print(f"reinforge: note: {note}", flush=True)
        self.global_step = int(folder.name.removeprefix("global_step_"))

    # ---- the loop ------------------------------------------------------------------------------------------
    def fit(self) -> dict[str, float]:
        from reinforge.trainer.stop import RunStopped, StopSignals
        from reinforge.trainer.tracking import Tracking

        trainer = self.config.trainer
        if self.global_step >= self.total_steps:
            print(f"reinforge: this run already finished step {self.global_step} of {self.total_steps}; nothing to do", flush=True)
            return {}
        tracking = Tracking(self.run_dir, trainer.logger, self.total_steps, self.global_step, config=self.config) if rank() == 0 else None
        val: dict[str, float] = {}
        saved = None
        try:
            with StopSignals() as signals:
                while self.global_step < self.total_steps:
                    if all_reduce([float(signals.requested is not None)], "max")[0]:
                        saved = saved if saved and saved.name == f"global_step_{self.global_step}" else self.save(self.global_step)
                        raise RunStopped(signals.requested or 15, self.global_step, saved, False,
                                         "The same command resumes from it (trainer.resume_mode=auto).")
                    self.global_step += 1
                    metrics = self.train_step(self.global_step)
                    last = self.global_step == self.total_steps
                    if self.val_data is not None and (last or self._due(trainer.test_freq)):
                        val = self.validate()
                        metrics.update(val)
                    if tracking:
                        tracking.log(metrics, self.global_step)
                    if last or self._due(trainer.save_freq):
                        saved = self.save(self.global_step)
        finally:
            if tracking:
                tracking.close()
        return val


# ---- assembling a run -------------------------------------------------------------------------------------
def load_sft_tokenizer(config: SFTConfig):
    from reinforge.errors import ModelError
    from reinforge.training.model import model_source, tokenizer_from

    source = model_source(config.model.partial_pretrain, "model.partial_pretrain")
    tokenizer = tokenizer_from(source, "model.partial_pretrain", config.model.trust_remote_code or config.data.trust_remote_code,
                               config.data.chat_template)
    if not config.data.custom_cls.path and not getattr(tokenizer, "chat_template", None):  # a user's Dataset renders its own rows
        raise ModelError(f"model.partial_pretrain={config.model.partial_pretrain}: its tokenizer has no chat template, so the "
                         "rows cannot be rendered; set data.chat_template to a Jinja chat template")
    return tokenizer


def load_sft_model(config: SFTConfig, device: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    from reinforge.training.fsdp import shard_model
    from reinforge.training.lora import add_lora
    from reinforge.training.model import load_pretrained, prepare_model, pretrained

    model_cfg = config.model

    def build(source, hf_config, kwargs):
        if model_cfg.attn_implementation:
            kwargs["attn_implementation"] = model_cfg.attn_implementation
        return pretrained(AutoModelForCausalLM, source, **kwargs)

    model = load_pretrained(model_cfg, "model.partial_pretrain", "model", model_cfg.fsdp_config.model_dtype, build)
    model = prepare_model(model, device, True, model_cfg.enable_gradient_checkpointing)
    if model_cfg.lora_rank > 0 or model_cfg.lora_adapter_path:
        model = add_lora(model, model_cfg, "model")
    return shard_model(model, model_cfg.fsdp_config, device)


def run_sft(config: SFTConfig, notes: list[str]) -> dict[str, float]:
    """Fine-tune as configured (every rank runs this); returns the last validation metrics."""
    from reinforge.distributed.process_group import init_distributed
    from reinforge.trainer.main import _quiet_transformers
    from reinforge.trainer.run_folder import hold_run_folder

    device = config.trainer.device or ("cuda" if torch.cuda.is_available() else "cpu")
    init_distributed(device)
    say = print if rank() == 0 else (lambda *args, **kwargs: None)
    for note in notes:
        say(f"reinforge: note: {note}", flush=True)
    seed_rngs(config.trainer.seed)
    _quiet_transformers()
    run_dir = Path(config.trainer.default_local_dir).resolve()
    say(f"reinforge: run folder {run_dir}", flush=True)
    # rank 0 holds the run folder until the run ends: a second run started in it stops at once
    with hold_run_folder(run_dir, config.trainer.default_local_dir) if rank() == 0 else contextlib.nullcontext():
        return _run_sft_in(run_dir, config, device, say)


def _run_sft_in(run_dir: Path, config: SFTConfig, device: str, say) -> dict[str, float]:
    """`run_sft`, from the resume checks on."""
    from reinforge.config.loading import to_dict
    from reinforge.environment.sft_dataset import create_sft_dataset
    from reinforge.errors import ConfigError
    from reinforge.trainer.checkpoint import resume_folder
    from reinforge.trainer.run_folder import write_run_config
    from reinforge.training.optim import make_optimizer, make_scheduler

    folder = resume_folder(config.trainer)  # before anything is written or loaded: a fresh start over a saved run stops here
    if rank() == 0:
        write_run_config(run_dir, to_dict(config), config.trainer.default_local_dir)
    tokenizer = load_sft_tokenizer(config)
    train = create_sft_dataset(config.data.train_files, config.data, tokenizer, config.data.train_max_samples)
    val = create_sft_dataset(config.data.val_files, config.data, tokenizer, config.data.val_max_samples) if config.data.val_files else None
    if len(train) < config.data.train_batch_size:
        raise ConfigError(f"data.train_batch_size={config.data.train_batch_size} is more than the {len(train)} training rows; "
                          "lower it")
    untrained = getattr(train, "untrained", 0)
    if untrained:
        say(f"reinforge: {untrained} of {len(train)} training rows have no token to train on (the response all "
            f"beyond data.max_length={config.data.max_length}); they keep their place in the batches, as in verl, and "
            "add nothing to the loss", flush=True)
    model = load_sft_model(config, device)
    optimizer = make_optimizer(model.parameters(), config.optim)
    trainer = SFTTrainer(config, model, tokenizer, optimizer, None, train, val, device)
    trainer.scheduler = make_scheduler(optimizer, config.optim, trainer.total_steps)
    if folder is not None:
        trainer.load(folder)
        say(f"reinforge: resumed from {folder} (step {trainer.global_step})", flush=True)
    say(f"reinforge: {len(train)} training rows, {trainer.steps_per_epoch} steps per epoch, {trainer.total_steps} steps; "
        f"{world_size()} rank(s) on {device}", flush=True)
    return trainer.fit()


def main(config: SFTConfig, notes: list[str]) -> int:
    """`reinforge sft` with its loaded config (config/sft_schema.py's load_sft_config, which the CLI calls first)."""
    metrics = run_sft(config, notes)
    if rank() == 0 and metrics:
        print("reinforge: final validation " + "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()), flush=True)
    return 0
