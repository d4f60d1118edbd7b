#!/usr/bin/env bash
# Checks training on one CUDA GPU with each engine: the hf engine, and vLLM and SGLang where installed
# (generation, weight sync), each with 2 GRPO training steps.
#
#   pip install 'reinforge[vllm]'      # and/or 'reinforge[sglang]' (this script installs nothing)
#   bash scripts/gpu_smoke.sh [MODEL]  # MODEL: a local folder or hub id; default Qwen/Qwen2.5-0.5B-Instruct
#
# For each engine (ENGINES="hf vllm sglang" by default; vllm or sglang not installed is skipped, but at
# least one engine must run):
#   1. vllm and sglang, scripts/gpu_smoke_sync.py: the engine, started with dummy weights, generates; its
#      log-probs must match the actor's (the first weight push worked); the actor is changed and handed over
#      as after an update, and the engine's log-probs must follow (every later push works);
#   2. `reinforge train` for 2 steps on the built-in task with rollout.name=<engine>: both steps must be
#      logged with non-empty responses (the actor computing in bf16, verl's default on CUDA).
# Exits non-zero at the first failure. Runs are written under $OUT (default: a new temporary folder).
set -euo pipefail
MODEL=${1:-${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}}
ENGINES=${ENGINES:-hf vllm sglang}
OUT=${OUT:-$(mktemp -d -t reinforge-gpu-smoke.XXXXXX)}
HERE=$(cd "$(dirname "$0")" && pwd)

if ! python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "FAIL: no CUDA GPU visible to torch; this script checks reinforge on one" >&2
    exit 1
fi
read -r TRAIN VAL < <(python -c 'from reinforge.environment.tasks import write_task_files; print(*write_task_files())')

checked=0
for engine in $ENGINES; do
    if [ "$engine" != hf ]; then
        if ! python -c "import $engine" 2>/dev/null; then
            echo "skip $engine: not installed (pip install 'reinforge[$engine]')"
            continue
        fi
        echo "== $engine: generation and weight sync ($MODEL)"
        python "$HERE/gpu_smoke_sync.py" "$engine" "$MODEL"
    fi

    echo "== $engine: 2 training steps"
    run_dir="$OUT/$engine"
    reinforge train \
        algorithm.adv_estimator=grpo \
        actor_rollout_ref.model.path="$MODEL" \
        data.train_files="$TRAIN" data.val_files="$VAL" \
        data.train_batch_size=4 data.max_prompt_length=256 data.max_response_length=64 \
        actor_rollout_ref.rollout.name="$engine" \
        actor_rollout_ref.rollout.n=4 \
        actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
        actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \
        actor_rollout_ref.actor.ppo_mini_batch_size=4 \
        actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
        actor_rollout_ref.actor.optim.lr=1e-6 \
        trainer.total_training_steps=2 trainer.val_before_train=false trainer.test_freq=-1 \
        trainer.device=cuda trainer.n_gpus_per_node=1 \
        trainer.default_local_dir="$run_dir"
    python - "$run_dir/metrics.jsonl" "$engine" <<'PY'
import json
import sys

path, engine = sys.argv[1], sys.argv[2]
steps = [r for r in map(json.loads, open(path)) if "timing_s/step" in r]
if [r["step"] for r in steps] != [1, 2]:
    sys.exit(f"FAIL {engine}: expected training steps 1 and 2 in {path}, found {[r['step'] for r in steps]}")
for r in steps:
    if not r.get("response_length/mean", 0) > 0:
        sys.exit(f"FAIL {engine}: step {r['step']} generated empty responses")
    extra = {k: r[k] for k in ("training/rollout_probs_diff_mean",) if k in r}
    print(f"{engine} step {r['step']}: response_length/mean={r['response_length/mean']:.1f} "
          f"reward={r.get('critic/score/mean', float('nan')):.3f} {extra or ''}")
print(f"{engine}: 2 training steps OK")
PY
    checked=$((checked + 1))
done

if [ "$checked" -eq 0 ]; then
    echo "FAIL: none of ($ENGINES) ran: name hf, or pip install 'reinforge[vllm]' or 'reinforge[sglang]'" >&2
    exit 1
fi
echo "GPU smoke passed for $checked engine(s); runs in $OUT"
