"""Multi-turn rollout: one agent loop per row, all concurrent, laid out as the usual trajectories Batch.

`AgentRunner` is built once per worker from `rollout.multi_turn` (tools and interactions are
loaded once) and `rollout.agent` (custom loops from `agent_loop_config_path`). Its
`generate_sequences` returns what the single-turn rollout returns (`responses`, `response_mask`,
`rollout_log_probs`, ... padded to the response length), where `responses` is the whole
conversation after the prompt and `response_mask` is 1 only on model tokens, plus per row:

- `__num_turns__` (verl's name): turns of the conversation, the prompt included;
- `reward_scores`: what tools, interactions and environments scored; the reward manager hands it
  to the reward function as `extra_info["rollout_reward_scores"]` (and `extra_info["num_turns"]`);
- `agent_metrics`: tool calls, tool errors, seconds generating and in tools (for the step metrics).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

import torch

from reinforge.batch import Batch
from reinforge.environment.dataset import collate_prompts
from reinforge.errors import ConfigError, DataError, UserError
from reinforge.inference.agent.base import (
    AGENT_LOOP_REGISTRY,
    USER_FAILURES,
    AgentContext,
    AgentLoopBase,
    AgentOutput,
    AgentRow,
    FailureReport,
    tool_answers_text,
)
from reinforge.inference.agent.loops import tool_watchdog_seconds
from reinforge.inference.engine import GenerationOutput, InferenceEngine, SamplingParams
from reinforge.inference.interactions import chosen_interaction, interaction_entries, load_interactions
from reinforge.inference.rollout import check_single_turn_row, prompt_token_lists, row_seed_list, trajectories
from reinforge.inference.tools import ToolCall, load_all_tools, plain_schema, show_value
from reinforge.inference.tools.parser import FORMATS, stop_token_ids
from reinforge.user_code import class_label

AGENT_KEY = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
DEFAULT_AGENT_LOOP = "tool_agent"  # of rows without agent_name, unless agent.default_agent_loop (verl's: single_turn_agent)


def load_agent_loops(path: str | Path) -> None:
    """Register the loops of verl's agent loop config (`- name: my_agent` / `_target_: pkg.module.Class`)."""
    from reinforge.inference.tools.loading import import_class, read_yaml

    file, entries = read_yaml(path, AGENT_KEY)
    entries = entries or []
    if not isinstance(entries, list):
        raise ConfigError(f"{AGENT_KEY}: {file} must be a list of entries with name and _target_")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not entry.get("name") or not entry.get("_target_"):
            raise ConfigError(f"{file}, entry {i}: each agent loop needs a name and a _target_ (package.module.Class)")
        cls = import_class(entry["_target_"], f"{file}, entry {i}", file.parent)
        if not issubclass(cls, AgentLoopBase):
            raise ConfigError(f"{file}, entry {i}: {entry['_target_']} is not a subclass of reinforge.inference.agent."
                              "AgentLoopBase; a loop here is `async def run(self, row: AgentRow) -> AgentOutput`, not verl's "
                              "run(sampling_params, **kwargs) (docs/agents.md, \"Writing an agent loop\")")
        AGENT_LOOP_REGISTRY[entry["name"]] = cls


def check_agent_config(multi_turn, agent) -> None:
    """At start, before any model loads (--dry-run too): the tools of multi_turn's tool files load, the classes of its
    interaction file import, the loops of agent.agent_loop_config_path load, and agent.default_agent_loop names a loop
    (built in, registered by @register_agent_loop in a module of algorithm.custom_modules, or listed in
    agent.agent_loop_config_path)."""
    load_all_tools(multi_turn.tool_config_path, multi_turn.function_tool_path)
    if multi_turn.interaction_config_path:
        interaction_entries(multi_turn.interaction_config_path)
    if agent.agent_loop_config_path:
        load_agent_loops(agent.agent_loop_config_path)
    name = agent.default_agent_loop
    if name is not None and name not in AGENT_LOOP_REGISTRY:
        raise ConfigError(f"actor_rollout_ref.rollout.agent.default_agent_loop={name!r} is not an agent loop; the agent loops are "
                          f"{', '.join(AGENT_LOOP_REGISTRY.names())} (your own: @register_agent_loop in a file of "
                          f"algorithm.custom_modules, or an entry of {AGENT_KEY})")


def check_agent_rows(rows: Iterable[tuple[dict, str, int]], rollout, prompt_key: str = "prompt") -> None:
    """At start, before any model loads: a DataError naming the file and row (`rows`: each row with its file and row
    number) of the first row that names an agent loop, an interaction (extra_info.interaction_kwargs.name) or an
    environment (extra_info.env_kwargs.name) that does not exist, an agent loop while multi-turn rollouts are off
    (the row would be generated single-turn and its tools or environment never used), or a string prompt (the model's
    input text as it is) for an agent loop that continues it as a chat."""
    from reinforge.environment.data_files import is_text_prompt
    from reinforge.environment.envs import ENV_REGISTRY

    multi_turn = rollout.multi_turn
    path = multi_turn.interaction_config_path
    interactions = [name for _, _, name, _ in interaction_entries(path)] if multi_turn.enable and path else []
    default = rollout.agent.default_agent_loop or DEFAULT_AGENT_LOOP
    for row, file, number in rows:
        named = row.get("agent_name")
        if not multi_turn.enable:
            check_single_turn_row(f"{file}: row {number}", named)
            continue
        loop = named or default
        if loop not in AGENT_LOOP_REGISTRY:
            raise DataError(f"{file}: row {number} has agent_name={loop!r}; the agent loops are "
                            f"{', '.join(AGENT_LOOP_REGISTRY.names())}")
        if loop != "single_turn_agent" and is_text_prompt(row.get(prompt_key)):
            raise DataError(f"{file}: row {number}, column {prompt_key!r}: a string prompt is the model's input text as it "
                            f"is (TRL's standard format), but the {loop} agent loop continues a chat turn by turn; give the "
                            "prompt as chat messages, [{'role': 'user', 'content': ...}], or set data.apply_chat_template=true "
                            "(a string prompt as one user message)")
        extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        asked = extra.get("interaction_kwargs")
        if interactions and isinstance(asked, dict) and asked and chosen_interaction(asked, interactions) is None:
            raise DataError(f"{file}: row {number}: extra_info.interaction_kwargs.name={asked.get('name')!r}; the interactions of "
                            f"{path} are {', '.join(sorted(interactions))}")
        env = extra.get("env_kwargs")
        if loop == "env_agent" and isinstance(env, dict) and env.get("name") not in ENV_REGISTRY:
            raise DataError(f"{file}: row {number}: extra_info.env_kwargs.name={env.get('name')!r}; the text environments are "
                            f"{', '.join(ENV_REGISTRY.names())} (your own: @register_env in a file of algorithm.custom_modules)")


class AgentRunner:
    def __init__(self, tokenizer, multi_turn, agent=None, chat_template_kwargs: dict | None = None,
                 max_prompt_length: int | None = None, truncation: str = "error"):
        if multi_turn.format not in FORMATS:
            raise ConfigError(f"actor_rollout_ref.rollout.multi_turn.format={multi_turn.format!r}: the tool-call formats are "
                              f"{', '.join(FORMATS)}")
        self.tokenizer, self.multi_turn = tokenizer, multi_turn
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.prompt_limit = (max_prompt_length, truncation)  # data.max_prompt_length, data.truncation
        self.tools = load_all_tools(multi_turn.tool_config_path, multi_turn.function_tool_path)
        if self.tools:
            tool_watchdog_seconds()  # a bad REINFORGE_TOOL_WATCHDOG_S fails here, not at the first tool call
        self.interactions = load_interactions(multi_turn.interaction_config_path) if multi_turn.interaction_config_path else {}
        if agent is not None and agent.agent_loop_config_path:
            load_agent_loops(agent.agent_loop_config_path)
        self.default_agent = (agent.default_agent_loop if agent is not None else None) or DEFAULT_AGENT_LOOP
        self.report = FailureReport()  # one per run: the first failure of a tool or an interaction is printed once
        self.stop_token_ids = tuple(stop_token_ids(multi_turn.format, tokenizer))
        self.schemas = {name: plain_schema(tool.get_openai_tool_schema()) for name, tool in self.tools.items()}
        if self.tools:  # a template that cannot render the answers of a turn's calls fails now, not in the rollout
            calls = [ToolCall(next(iter(self.tools)), {})] * min(multi_turn.max_parallel_calls, 2)
            tool_answers_text(tokenizer, [{"role": "tool", "content": "ok"}] * len(calls), calls, None,
                              {**self.chat_template_kwargs, "tools": list(self.schemas.values())})

    def generate_sequences(self, engine: InferenceEngine, prompts: Batch, params: SamplingParams, pad_token_id: int) -> Batch:
        """Run every row's agent loop concurrently and lay the conversations out as trajectories."""
        outputs = asyncio.run(self._run_all(engine, prompts, params))
        generations = [GenerationOutput(o.response_ids, o.log_probs, o.finish_reason) for o in outputs]
        if any(o.prompt_ids != ids for o, ids in zip(outputs, prompt_token_lists(prompts["input_ids"], prompts["attention_mask"]), strict=True)):
            items = [{"input_ids": torch.tensor(o.prompt_ids, dtype=torch.long)} for o in outputs]  # prompts re-rendered with tools
            prompts = Batch(dict(collate_prompts(items, pad_token_id)), meta_info=dict(prompts.meta_info))
        batch = trajectories(prompts, generations, pad_token_id, width=params.max_tokens,
                             response_masks=[o.response_mask for o in outputs])
        batch["__num_turns__"] = [o.num_turns for o in outputs]
        batch["reward_scores"] = [o.reward_scores for o in outputs]
        batch["agent_metrics"] = [o.metrics for o in outputs]
        return batch

    async def _run_all(self, engine: InferenceEngine, prompts: Batch, params: SamplingParams) -> list[AgentOutput]:
        ctx = AgentContext(engine, self.tokenizer, params, self.multi_turn, self.tools, self.interactions, self.chat_template_kwargs,
                           *self.prompt_limit, report=self.report, stop_token_ids=self.stop_token_ids, schemas=self.schemas)
        ids = prompt_token_lists(prompts["input_ids"], prompts["attention_mask"])
        rows = len(ids)
        names = list(prompts["agent_name"]) if "agent_name" in prompts else [None] * rows
        messages = list(prompts["raw_prompt"]) if "raw_prompt" in prompts else [None] * rows
        extra = list(prompts["extra_info"]) if "extra_info" in prompts else [None] * rows
        seeds = row_seed_list(prompts)
        loops = []
        for i in range(rows):
            name = names[i] or self.default_agent
            if name not in AGENT_LOOP_REGISTRY:
                raise DataError(f"row {i} (extra_info.index={(extra[i] or {}).get('index')}) has agent_name={name!r}; "
                                f"the agent loops are {sorted(AGENT_LOOP_REGISTRY)}")
            row_messages = [dict(m) for m in messages[i]] if messages[i] is not None else None
            row = AgentRow(ids[i], row_messages, dict(extra[i] or {}), i, seeds[i])
            loops.append(_run_loop(name, AGENT_LOOP_REGISTRY[name], ctx, row))
        return list(await asyncio.gather(*loops))


async def _run_loop(name: str, cls: type[AgentLoopBase], ctx: AgentContext, row: AgentRow) -> AgentOutput:
    """One row's conversation; a loop of the user's that raises or returns something other than an AgentOutput stops
    the run with a ConfigError naming the loop and the row (it would fail on every row that names it)."""
    if cls.__module__.startswith("reinforge."):  # the built-in loops contain their tools' failures themselves
        return await cls(ctx).run(row)
    where = f"agent loop {name!r} ({class_label(cls)}) on row extra_info.index={row.extra_info.get('index', row.index)}"
    try:
        output = await cls(ctx).run(row)
    except UserError:
        raise
    except USER_FAILURES as err:
        raise ConfigError(f"{where} failed: {type(err).__name__}: {err}") from err
    if not isinstance(output, AgentOutput):
        raise ConfigError(f"{where} returned {show_value(output)}; run returns an AgentOutput "
                          "(Conversation(ctx, row).output(...) makes one)")
    return output
