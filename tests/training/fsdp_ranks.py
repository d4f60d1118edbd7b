"""One rank of the data-parallel training check in test_fsdp.py (run as a script by each spawned rank).

`train(model_path, batch, world_size)` builds the actor/reference and critic workers as a run with
`world_size` ranks would, feeds them `batch` (this rank's share), and returns what the test compares:
reference and old log-probs, values, the metrics of 3 actor and critic updates, the final
parameters (gathered whole), and whether the engine's copy of the policy equals the actor after
update_weights. As a script it joins the process group from RANK/WORLD_SIZE/MASTER_* and saves that
to <out>/rank<r>.pt.
"""

from __future__ import annotations

import sys

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from reinforge.batch import Batch
from reinforge.config import load_config
from reinforge.training.minibatch import micro_batch_rows, token_budget_count
from reinforge.training.workers import ActorRolloutRefWorker, CriticWorker

STEPS = 3
MINI_BATCH_PER_RANK = 2  # ppo_mini_batch_size 2 x rollout.n 2 over 2 ranks


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole state dict on every rank (gathered from the FSDP2 shards), so each rank's result can be checked."""
    if not torch.distributed.is_initialized():
        return model.state_dict()
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def actor_overrides(model_path: str, world_size: int) -> list[str]:
    """4 prompts x 2 samples, mini-batches of 2 prompts (2 per step), micro-batches of 1 trajectory, a KL loss, GRPO;
    the actor recomputes activations in the backward pass (gradient checkpointing)."""
    return [
        f"actor_rollout_ref.model.path={model_path}", "trainer.device=cpu", f"trainer.n_gpus_per_node={world_size}",
        "data.train_batch_size=4", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        "algorithm.adv_estimator=grpo",
    ]


def run_config(model_path: str, world_size: int):
    """`actor_overrides` with an entropy bonus, and a critic that does not recompute activations."""
    config, _ = load_config([
        *actor_overrides(model_path, world_size), "actor_rollout_ref.actor.entropy_coeff=0.01", "critic.enable=true",
        "critic.model.enable_gradient_checkpointing=false", "critic.ppo_micro_batch_size_per_gpu=1",
        "critic.forward_micro_batch_size_per_gpu=1", "critic.optim.lr=1e-3",
    ])
    return config


def comparable(metrics: dict) -> dict:
    """The metrics that do not depend on timing or memory."""
    return {key: value for key, value in metrics.items() if not key.startswith("perf/")}


def train(model_path: str, batch: Batch, world_size: int) -> dict:
    config = run_config(model_path, world_size)
    actor, critic = ActorRolloutRefWorker(config), CriticWorker(config)
    actor.init_model(STEPS)
    critic.init_model(STEPS)
    out = {"ref_log_prob": actor.compute_ref_log_prob(batch)["ref_log_prob"], "values": critic.compute_values(batch)["values"],
           "actor_metrics": [], "critic_metrics": []}
    batch["ref_log_prob"] = out["ref_log_prob"]
    for _ in range(STEPS):
        batch["old_log_probs"] = actor.compute_log_prob(batch)["old_log_probs"]
        out.setdefault("old_log_probs", batch["old_log_probs"])
        out["critic_metrics"].append(comparable(critic.update_critic(batch).meta_info["metrics"]))
        out["actor_metrics"].append(comparable(actor.update_actor(batch).meta_info["metrics"]))
        actor.update_weights()
    out["actor"] = full_state_dict(actor.actor.model)
    out["critic"] = full_state_dict(critic.critic.model)
    engine_model = actor.engine.model.state_dict()
    out["engine_equals_actor"] = all(torch.equal(engine_model[key], value) for key, value in out["actor"].items())
    out["workers"] = (actor, critic)
    return out


def faults(actor: ActorRolloutRefWorker, batch: Batch, rank: int) -> dict:
    """What only several ranks can get wrong, after `train`: rank 1 holding one row fewer for a forward pass (it
    repeats a micro-batch so that the collectives stay in step), and a NaN loss on rank 1 alone (every rank must
    skip the backward and the step, or the others would wait for it)."""
    full = actor.compute_log_prob(batch)["old_log_probs"]
    rows = batch.index(slice(0, len(batch) - rank))
    uneven = actor.compute_log_prob(rows)["old_log_probs"]
    if rank == 1:
        batch["advantages"] = torch.full_like(batch["advantages"], float("nan"))
    before = {key: value.clone() for key, value in full_state_dict(actor.actor.model).items()}
    metrics = actor.update_actor(batch).meta_info["metrics"]
    after = full_state_dict(actor.actor.model)
    return {"uneven_matches": torch.equal(uneven, full[:len(rows)]), "nan_skipped": metrics["actor/nonfinite_skipped"],
            "nan_unchanged": all(torch.equal(before[key], after[key]) for key in before)}


def dynamic_bsz(actor: ActorRolloutRefWorker, batch: Batch, rank: int, budget: int = 8) -> dict:
    """Token-budget micro-batches when the ranks' token totals differ, after `train`: rank 1's rows cut to 2 real
    tokens, so that under `budget` tokens rank 0 needs 2 micro-batches per mini-batch and rank 1 needs 1. Both must
    run 2 (or the collectives would hang), and give the log-probs and the gradient of fixed micro-batches."""
    batch = batch.index(slice(None))
    if rank == 1:
        prompt = batch["input_ids"].shape[1] - batch["responses"].shape[1]
        attention = torch.zeros_like(batch["attention_mask"])
        attention[:, prompt - 1:prompt + 1] = 1
        batch["attention_mask"], batch["response_mask"] = attention, attention[:, prompt:]
        batch["position_ids"] = (attention.cumsum(-1) - 1).clamp(min=0)
        batch["advantages"] = batch["advantages"] * batch["response_mask"]
    policy, mini = actor.actor, batch.index(slice(0, MINI_BATCH_PER_RANK))
    lengths = mini["attention_mask"].sum(-1).tolist()
    out = {"natural": token_budget_count(lengths, budget), "used": len(micro_batch_rows(mini, None, budget))}
    fixed, _ = policy.compute_log_prob(batch, 1.0, 1)
    dynamic, _ = policy.compute_log_prob(batch, 1.0, None, max_tokens=budget)
    out["log_probs_match"] = torch.allclose(dynamic, fixed, atol=1e-5)
    for group in policy.optimizer.param_groups:
        group["lr"] = 0.0  # the parameters stay, so both updates start from the same ones
    grad_norms = []
    for dynamic_on in (False, True):
        policy.config.use_dynamic_bsz, policy.config.ppo_max_token_len_per_gpu = dynamic_on, budget
        grad_norms.append(policy.update_policy(batch, temperature=1.0, rollout_n=2)["actor/grad_norm"])
    out["grad_norms"] = grad_norms
    return out


def exit_rank() -> None:
    """Leave the process group and end this rank at once, its results saved. The interpreter's teardown is skipped: with
    gloo's threads it has aborted a rank after its work was done (SIGABRT, about once in a hundred 2-rank runs here,
    with the group destroyed or not), which would fail a check whose results were all in."""
    import os

    from reinforge.distributed.process_group import close_distributed

    close_distributed()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    import os

    model_path, batch_file, out_dir = sys.argv[1:]
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    chunk = torch.load(batch_file, weights_only=False).chunk(world_size)[rank]
    result = train(model_path, chunk, world_size)
    result["dynamic_bsz"] = dynamic_bsz(result["workers"][0], chunk, rank)
    result["faults"] = faults(result.pop("workers")[0], chunk, rank)
    torch.save(result, f"{out_dir}/rank{rank}.pt")
    exit_rank()
