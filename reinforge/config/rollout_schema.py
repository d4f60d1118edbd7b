"""The `actor_rollout_ref.rollout.*` section of the config schema (config/schema.py assembles the whole): the
generation engine and its sampling, validation sampling, multi-turn agent loops and verl's engine settings."""

from __future__ import annotations

from dataclasses import dataclass

from reinforge.config.fields import Node, _f, _sub

PROFILER_DOC = ("Accepted for verl compatibility: verl's profiler settings of this role (tool, enable, all_ranks, ranks, "
                "save_path, tool_config), a free-form mapping; no effect here (no profiler integration: the timing_s/* "
                "metrics give each phase's seconds per step).")

# the tool-call formats of multi_turn.format (verl's parser names), as inference/tools/parser.py reads them
TOOL_CALL_FORMATS = ("hermes", "gpt-oss", "qwen3_coder", "glm", "seed", "minimax", "kimi", "deepseek_v4", "gemma4", "qwen", "chatml")


@dataclass
class ValKwargs(Node):
    temperature: float = _f(0.0, "Validation sampling temperature (0: greedy).")
    top_p: float = _f(1.0, "Validation top-p.")
    top_k: int = _f(-1, "Validation top-k (-1: off).")
    n: int = _f(1, "Validation samples per prompt.")
    do_sample: bool = _f(False, "Sample during validation; false: greedy.")


@dataclass
class MultiTurnConfig(Node):
    enable: bool = _f(False, "Run an agent loop per row (tools, interactions, text environments; docs/agents.md) "
                      "instead of one plain response; rows pick the loop by their agent_name column.")
    max_assistant_turns: int | None = _f(None, "Most model turns per conversation; null or 0 (as verl): until the budget is spent.")
    max_user_turns: int | None = _f(None, "Most rounds of tool answers and user replies per conversation (env_agent: "
                                    "observations); null or 0: no limit (verl's).")
    max_parallel_calls: int = _f(1, "Most tool calls run from one model turn (the first ones; they run concurrently).")
    max_tool_response_length: int = _f(256, "Tool answers are cut to this many characters.")
    tool_response_truncate_side: str = _f("middle", "Which part of a long tool answer is cut: left (keep its end), right (keep its beginning) or middle (keep both ends).")
    tool_config_path: str | None = _f(None, "Tool config YAML (tools: [{class_name, config, tool_schema}]).")
    interaction_config_path: str | None = _f(None, "Interaction config YAML (interaction: [{name, class_name, config}]).")
    format: str = _f("hermes", "Tool-call format, by verl's parser names: hermes (<tool_call>{json}</tool_call>; Qwen2.5, "
                     "Qwen3; qwen and chatml, the names of verl's SGLang-era configs, mean it too), qwen3_coder (Qwen3-Coder, "
                     "Qwen3.5), glm, seed, minimax, kimi, deepseek_v4, gpt-oss, gemma4 (docs/agents.md).")
    use_inference_chat_template: bool = _f(False, "Accepted for verl compatibility; no effect: the trained ids are the model's "
                                           "own tokens (token-in/token-out, verl's false).")
    tokenization_sanity_check_mode: str = _f("strict", "Accepted for verl compatibility; no effect: model turns keep the "
                                             "engine's token ids, so there is no re-tokenization to check.")
    function_tool_path: str | None = _f(None, "A Python file of plain functions marked @function_tool, used as tools beside "
                                        "tool_config_path's (docs/agents.md).")
    num_repeat_rollouts: int | None = _f(None, "Accepted for verl compatibility (its SGLang rollout); no effect: rollout.n "
                                         "sets the conversations per prompt.")


@dataclass
class CustomAsyncServerConfig(Node):
    path: str | None = _f(None, "verl: file of a custom async inference server. No effect: generation runs on rollout.name's engine.")
    name: str | None = _f(None, "verl: class name of the custom async server. No effect here.")


@dataclass
class AgentConfig(Node):
    num_workers: int = _f(8, "verl: agent loop worker processes. Here every row's loop runs in one asyncio event loop.")
    agent_loop_config_path: str | None = _f(None, "YAML list of custom agent loops: [{name, _target_: package.module.Class}].")
    default_agent_loop: str | None = _f(None, "Agent loop of rows without agent_name; null: tool_agent.")
    custom_async_server: CustomAsyncServerConfig = _sub(CustomAsyncServerConfig, "Accepted for verl compatibility; no effect.")


@dataclass
class SkipConfig(Node):
    enable: bool = _f(False, "Keep the training steps' generations on disk and read them back instead of generating (to "
                      "iterate on a reward function or the update without generating each time; docs/observability.md).")
    dump_dir: str | None = _f(None, "Where; null: skip_dump_dir. The generations go to <dump_dir>/<experiment_name>_"
                              "<project_name>/GBS<prompts per generation batch>_N<n>_in<max_prompt_length>_out<max_response_length>/.")
    max_dump_step: int = _f(1, "Steps 1 to max_dump_step read their generation from there, or generate and write it; "
                            "0 (action=cache only, as in verl): none.")
    action: str = _f("repeat", "Later steps: cache (generate), repeat (reuse the dumped steps in turn) or repeat_last.")


@dataclass
class TraceConfig(Node):
    backend: str | None = _f(None, "Accepted for verl compatibility (trace rollouts to mlflow or weave); no effect here.")
    token2text: bool = _f(False, "Accepted for verl compatibility (decode the traced token ids); no effect here.")
    project_name: str | None = _f(None, "Accepted for verl compatibility (the tracing project; verl: trainer.project_name); no effect here.")
    experiment_name: str | None = _f(None, "Accepted for verl compatibility (the tracing experiment; verl: "
                                     "trainer.experiment_name); no effect here.")
    max_samples_per_step_per_worker: int | None = _f(None, "Accepted for verl compatibility (most traced rollouts per step "
                                                     "and worker); no effect here.")


@dataclass
class RolloutConfig(Node):
    name: str = _f("hf", "Generation engine: hf (transformers; CPU or GPU; shares the actor's weights), vllm or sglang (one CUDA "
                   "GPU or more, in the training process, extras reinforge[vllm] / reinforge[sglang]; docs/engines.md).")
    mode: str = _f("sync", "sync or async rollout (async: planned; runs sync).")
    n: int = _f(1, "Responses sampled per prompt (the group size of GRPO).")
    temperature: float = _f(1.0, "Sampling temperature; the actor divides logits by it when computing log-probs too.")
    top_p: float = _f(1.0, "Nucleus sampling threshold (1: off).")
    top_k: int = _f(-1, "Top-k sampling (-1 or 0: off).")
    do_sample: bool = _f(True, "Sample; false: greedy.")
    prompt_length: int | None = _f(None, "Null: data.max_prompt_length.")
    response_length: int | None = _f(None, "Most new tokens per response; null: data.max_response_length.")
    ignore_eos: bool = _f(False, "Keep generating past EOS up to response_length.")
    dtype: str | None = _f(
        None, "Engine dtype: fp32 or bf16 (float32/bfloat16). Null: bfloat16 on CUDA (verl's default, every engine); on the "
        "CPU the actor's (actor.fsdp_config.model_dtype), and the hf engine generates with the actor's own module. Another dtype than the actor's: "
        "the hf engine generates from a copy of the policy in it, refreshed after every update, which is the "
        "train/inference mismatch of a bf16 engine beside an fp32 trainer (algorithm.rollout_correction).")
    log_prob_micro_batch_size: int | None = _f(None, "verl's deprecated global micro-batch: rows over all data-parallel ranks, "
                                               "divided by their number (rounded down) into its _per_gpu key; not together with it.")
    log_prob_micro_batch_size_per_gpu: int | None = _f(None, "Trajectories per forward when recomputing log-probs; null: all at once.")
    log_prob_use_dynamic_bsz: bool | None = _f(None, "Form the old-log-prob pass's micro-batches by log_prob_max_token_len_per_gpu "
                                               "tokens instead of log_prob_micro_batch_size_per_gpu rows; null: actor.use_dynamic_bsz.")
    log_prob_max_token_len_per_gpu: int | None = _f(None, "Real tokens per old-log-prob micro-batch on one rank when "
                                                    "log_prob_use_dynamic_bsz; null: actor.ppo_max_token_len_per_gpu.")
    micro_batch_size_per_gpu: int | None = _f(None, "hf engine: prompts generated together; null: all at once.")
    gpu_memory_utilization: float = _f(0.5, "vLLM/SGLang: fraction of GPU memory for the engine's weights and KV cache "
                                       "(SGLang's mem_fraction_static); the actor trains in the rest.")
    tensor_model_parallel_size: int = _f(2, "vLLM/SGLang tensor parallel size (SGLang's tp_size); at most the GPUs visible, 1 on one GPU.")
    max_num_batched_tokens: int = _f(8192, "vLLM: tokens per scheduler step; SGLang: chunked_prefill_size.")
    max_model_len: int | None = _f(None, "vLLM/SGLang (context_length): longest sequence; null: data.max_prompt_length + "
                                       "response_length, as verl.")
    max_num_seqs: int = _f(1024, "vLLM: concurrent sequences; SGLang: max_running_requests.")
    enforce_eager: bool = _f(True, "vLLM: no CUDA graphs; SGLang: disable_cuda_graph.")
    free_cache_engine: bool = _f(True, "vLLM/SGLang: release the engine's GPU memory while the actor trains (vLLM sleep mode "
                                 "level 1, SGLang's memory saver) and take it back before generating.")
    layered_summon: bool = _f(False, "Accepted for verl compatibility (LoRA: gather the FSDP shards layer by layer for "
                              "the engine); weights are always pushed in buckets here (update_weights_bucket_megabytes).")
    load_format: str = _f("dummy", "vLLM/SGLang: how the engine loads its first weights; dummy (random) is enough, since the "
                          "actor's weights are pushed before the first generation.")
    enable_chunked_prefill: bool = _f(True, "vLLM chunked prefill (SGLang: false sets chunked_prefill_size=-1).")
    enable_prefix_caching: bool = _f(True, "Accepted for verl compatibility; not passed to the engine: vLLM and SGLang keep "
                                     "their own default (on). engine_kwargs.vllm.enable_prefix_caching (SGLang: "
                                     "engine_kwargs.sglang.disable_radix_cache) sets it.")
    disable_log_stats: bool = _f(True, "vLLM statistics logging; SGLang: log_level error.")
    update_weights_bucket_megabytes: int = _f(512, "vLLM/SGLang: the actor's weights are pushed to the engine in buckets of at "
                                              "most this many MiB (cast to rollout.dtype), so the push needs no second full copy.")
    calculate_log_probs: bool = _f(False, "Return the engine's per-token log-probs as rollout_log_probs (every engine here "
                                   "always returns them).")
    engine_kwargs: dict = _f({}, "Extra engine arguments by engine, as verl nests them: engine_kwargs.vllm.* go to vllm.LLM, "
                             "engine_kwargs.sglang.* to sglang.Engine; they override the translated settings.")
    cudagraph_capture_sizes: list | None = _f(None, "Accepted for verl compatibility (vLLM's CUDA-graph batch sizes); not passed "
                                              "to the engine: set it in engine_kwargs.vllm (SGLang: engine_kwargs.sglang.cuda_graph_bs).")
    data_parallel_size: int = _f(1, "Accepted for verl compatibility (the engine's data-parallel replicas); no effect here: "
                                 "generation runs on the training ranks, one engine each.")
    expert_parallel_size: int = _f(1, "Accepted for verl compatibility (expert parallelism of MoE layers in the engine); not "
                                   "passed to the engine: engine_kwargs.vllm.enable_expert_parallel (engine_kwargs.sglang.ep_size).")
    skip_tokenizer_init: bool = _f(False, "Accepted for verl compatibility (the engine loads no tokenizer); not passed to the engine.")
    multi_stage_wake_up: bool = _f(False, "Accepted for verl compatibility (SGLang: take back the weights' and the KV cache's "
                                   "memory in two stages); no effect here.")
    over_sample_rate: float = _f(0.0, "verl: stop generating once (1 - over_sample_rate) of the requests are done and train on "
                                 "the cut-off rest. Only 0 in this version (every request finishes); another value is an error.")
    skip_rollout: bool = _f(False, "verl's earlier name of skip.enable.")
    skip_dump_dir: str = _f("/tmp/rollout_dump", "Where skip.enable (skip_rollout) keeps the generations, unless skip.dump_dir is set.")
    skip: SkipConfig = _sub(SkipConfig, "Generations kept on disk and reused (verl's rollout skip).")
    trace: TraceConfig = _sub(TraceConfig, "Accepted for verl compatibility (rollout tracing); no effect here.")
    router_config_path: str | None = _f(None, "Accepted for verl compatibility (a plugin that routes requests among verl's "
                                              "inference servers); no effect here: the engine runs in the training process.")
    nnodes: int = _f(0, "Accepted for verl compatibility (nodes of a standalone rollout pool; 0: colocated with training); "
                        "no effect here: generation runs on the training ranks.")
    n_gpus_per_node: int | None = _f(None, "Accepted for verl compatibility (GPUs per node of a standalone rollout pool; "
                                           "verl: trainer.n_gpus_per_node); no effect here.")
    seed: int = _f(42, "Accepted for verl compatibility (the engine's seed); every rollout row samples with its own seed "
                       "derived from trainer.seed here.")
    full_determinism: bool = _f(False, "Accepted for verl compatibility (deterministic engine kernels); no effect here.")
    pipeline_model_parallel_size: int = _f(1, "Accepted for verl compatibility (the engine's pipeline parallel size); not "
                                           "passed to the engine: set it in engine_kwargs.vllm (engine_kwargs.sglang.pp_size).")
    scheduling_policy: str = _f("fcfs", "Accepted for verl compatibility (the engine's request scheduling, fcfs or "
                                        "priority); not passed to the engine, which schedules first come, first served.")
    logprobs_mode: str = _f("processed_logprobs", "verl: which log-probs the engine returns; processed_logprobs (after "
                            "temperature, top-k and top-p, as here) only in this version, another mode is an error.")
    checkpoint_engine: dict = _f({}, "Accepted for verl compatibility (how weights reach the engine: backend, "
                                     "update_weights_bucket_megabytes, ...), a free-form mapping; no effect here (the bucket "
                                     "size is rollout.update_weights_bucket_megabytes).")
    enable_rollout_routing_replay: bool = _f(False, "verl: record the engine's MoE routing and replay it in training (R3). "
                                                    "Not in this version: only false (true is an error).")
    moe_load_balance_metrics_interval: int = _f(0, "Accepted for verl compatibility (log the engine's MoE load-balance "
                                                   "metrics every this many steps); no effect here.")
    prometheus: dict = _f({}, "Accepted for verl compatibility (export the engine's metrics to Prometheus: enable, port, "
                              "file, served_model_name), a free-form mapping; no effect here.")
    quantization: str | None = _f(None, "Accepted for verl compatibility (quantize the engine's weights, e.g. fp8); not "
                                        "passed to the engine: set engine_kwargs.vllm.quantization (engine_kwargs.sglang).")
    quantization_config_file: str | None = _f(None, "Accepted for verl compatibility (the file of quantization); not passed "
                                                    "to the engine.")
    cast_to_rollout_dtype: bool = _f(False, "Accepted for verl compatibility (cast the weights to rollout.dtype before "
                                            "sending them); the engine gets its weights in its own dtype here.")
    mtp: dict | None = _f(None, "Accepted for verl compatibility (the engine's speculative decoding from the model's MTP "
                                "layers; verl: actor_rollout_ref.model.mtp), a free-form mapping; no effect here.")
    qat: dict | None = _f(None, "Accepted for verl compatibility (verl's copy of the actor's QAT settings for the engine); "
                                "no effect here.")
    use_preprocessed_multimodal_input: bool = _f(True, "Accepted for verl compatibility (send the engine processed images "
                                                 "and videos instead of the raw media); the hf engine, which generates "
                                                 "prompts with images here, always takes them processed.")
    disaggregation: dict = _f({}, "Accepted for verl compatibility (prefill/decode disaggregation of the engine: enabled, "
                                  "prefill_replicas, decode_replicas, ...), a free-form mapping; no effect here.")
    profiler: dict = _f({}, PROFILER_DOC)
    val_kwargs: ValKwargs = _sub(ValKwargs, "Sampling for validation.")
    multi_turn: MultiTurnConfig = _sub(MultiTurnConfig, "Multi-turn rollouts.")
    agent: AgentConfig = _sub(AgentConfig, "Agent loops of multi-turn rollouts (docs/agents.md).")


ENGINE_SECTIONS = ("vllm", "sglang")  # rollout.engine_kwargs nests the pass-through arguments by engine, as verl does
OTHER_ENGINES = ("trtllm",)  # sections verl's configs ship (empty) for engines reinforge does not have


def check_engine_kwargs(engine_kwargs: dict, name: str = "vllm") -> None:
    """A setting directly under rollout.engine_kwargs, not in an engine's section, is an error naming it (with any engine:
    no engine would take it there). Sections of engines reinforge does not have (verl's trtllm: {}) are left alone."""
    from reinforge.errors import ConfigError

    unknown = [key for key in engine_kwargs if key not in ENGINE_SECTIONS + OTHER_ENGINES]
    if unknown:
        raise ConfigError(f"actor_rollout_ref.rollout.engine_kwargs.{unknown[0]}: engine arguments nest under the engine's "
                          f"name, e.g. actor_rollout_ref.rollout.engine_kwargs.{name}.{unknown[0]}=...")
