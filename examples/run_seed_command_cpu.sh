#!/usr/bin/env bash
# The GRPO command line of verl's examples/grpo_trainer/run_qwen3-8b.sh, as `reinforge train`,
# with the model path and sizes swapped for the local tiny model and small GSM8K-format data, and
# the engine: vLLM needs a GPU, so this CPU run generates with hf (ROLLOUT=vllm on a GPU with
# reinforge[vllm] installed). Every other override is the seed's own (but trainer.n_gpus_per_node=1:
# on a CPU it counts worker processes); the ones that only matter to vLLM are accepted and reported
# as having no effect here.
set -euo pipefail
DATA=${DATA:-$HOME/data/gsm8k_like}
MODEL=${MODEL:-$(python -c 'from reinforge.training.tiny_model import ensure_tiny_model; print(ensure_tiny_model())')}
[ -f "$DATA/train.parquet" ] || python "$(dirname "$0")/make_gsm8k_like_data.py" --out "$DATA"

reinforge train \
    algorithm.adv_estimator=grpo \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    data.train_batch_size=16 \
    data.max_prompt_length=128 \
    data.max_response_length=16 \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.rollout.name=${ROLLOUT:-hf} \
    actor_rollout_ref.rollout.n=5 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.entropy_coeff=0 \
    algorithm.use_kl_in_reward=False \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.total_training_steps=${STEPS:-2} \
    trainer.test_freq=2 \
    trainer.logger='["console"]' \
    trainer.project_name=reinforge_examples \
    trainer.experiment_name=seed_gsm8k_cpu \
    "$@"
