"""The built-in agent loops: `single_turn_agent`, `tool_agent` (tools and interactions) and `env_agent` (text games).

tool_agent, per row: the prompt is re-rendered from the row's messages with the tools' schemas
(`tools=`) when the chat template shows them (as verl does); the model speaks; Hermes `<tool_call>`s in its turn run (at most
`multi_turn.max_parallel_calls`, concurrently) and their answers come back as `tool` messages
(cut to `max_tool_response_length` characters on `tool_response_truncate_side`); a malformed
call, an unknown tool or a tool that raises is answered with an error message, never a crash. A
turn without tool calls ends the conversation, or, when the row names an interaction
(`extra_info.interaction_kwargs.name`), gets the interaction's reply as a `user` message.
`max_assistant_turns` bounds model turns; `max_user_turns` bounds the rounds of tool answers and
user replies together (verl counts both as user turns).
"""

from __future__ import annotations

import asyncio
import time

from reinforge.environment.dataset import truncate as truncate_ids
from reinforge.environment.envs import make_env
from reinforge.errors import DataError
from reinforge.inference.agent.base import AgentLoopBase, AgentOutput, AgentRow, Conversation, register_agent_loop
from reinforge.inference.tools import parse_tool_calls, response_text, truncate


@register_agent_loop("single_turn_agent")
class SingleTurnAgentLoop(AgentLoopBase):
    async def run(self, row: AgentRow) -> AgentOutput:
        conv = Conversation(self.ctx, row)
        await conv.model_turn()
        return conv.output()


def _over(limit: int | None, count: int) -> bool:
    return bool(limit) and count >= limit


@register_agent_loop("tool_agent")
class ToolAgentLoop(AgentLoopBase):
    async def run(self, row: AgentRow) -> AgentOutput:
        ctx, cfg = self.ctx, self.ctx.multi_turn
        schemas = [tool.get_openai_tool_schema() for tool in ctx.tools.values()] or None
        row.prompt_ids = self._prompt_with_tools(row, schemas)
        conv = Conversation(ctx, row)
        state = {"instances": {}, "step_reward": 0.0, "calls": 0, "errors": 0, "tool_s": 0.0}
        interaction, interaction_id, turn_scores = await self._start_interaction(row)
        scores: dict = {}
        try:
            while True:
                text = await conv.model_turn()
                if text is None or _over(cfg.max_assistant_turns, conv.assistant_turns):
                    break
                parsed = parse_tool_calls(text) if ctx.tools else None
                if parsed is not None and (parsed.calls or parsed.errors):
                    if _over(cfg.max_user_turns, conv.user_turns):
                        break
                    answers = await self._call_tools(parsed, row, state)
                    conv.user_turns += 1
                    if not conv.add_messages([{"role": "tool", "content": a} for a in answers], schemas):
                        break
                    continue
                if interaction is None or _over(cfg.max_user_turns, conv.user_turns):
                    break
                done, reply, score, _ = await interaction.generate_response(interaction_id, conv.messages)
                turn_scores.append(float(score))
                conv.user_turns += 1
                if done or not conv.add_messages([{"role": "user", "content": reply}], schemas):
                    break
        finally:
            tool_reward = await self._finish_tools(row, state)
            if interaction is not None:
                scores["interaction_score"] = float(await interaction.calculate_score(interaction_id))
                scores["turn_scores"] = turn_scores
                await interaction.finalize_interaction(interaction_id)
        if ctx.tools:
            scores.update(tool_step_reward=state["step_reward"], tool_reward=tool_reward)
        return conv.output(scores, tool_calls=state["calls"], tool_errors=state["errors"], tool_s=state["tool_s"],
                           user_turns=conv.user_turns)

    def _prompt_with_tools(self, row: AgentRow, schemas: list[dict] | None) -> list[int]:
        """The prompt rendered with the tool schemas (`tools=`), when the chat template shows them; else the row's ids.

        The longer prompt keeps to data.max_prompt_length as the dataset's do: cut on the data.truncation side,
        or a DataError under truncation=error."""
        if not schemas or row.messages is None:
            return row.prompt_ids
        tok, kwargs = self.ctx.tokenizer, self.ctx.chat_template_kwargs
        with_tools = tok.apply_chat_template(row.messages, tools=schemas, add_generation_prompt=True, tokenize=False, **kwargs)
        if with_tools == tok.apply_chat_template(row.messages, add_generation_prompt=True, tokenize=False, **kwargs):
            return row.prompt_ids  # the template ignores tools: keep the dataset's ids exactly
        ids = tok(with_tools, add_special_tokens=False)["input_ids"]
        limit, mode = self.ctx.max_prompt_length, self.ctx.truncation
        if limit is None or len(ids) <= limit:
            return ids
        if mode == "error":
            raise DataError(
                f"row extra_info.index={row.extra_info.get('index')}: the prompt is {len(ids)} tokens with the tool schemas "
                f"of {self.ctx.multi_turn.tool_config_path} ({len(row.prompt_ids)} without), over data.max_prompt_length="
                f"{limit}. Raise data.max_prompt_length, or set data.truncation to left, right or middle"
            )
        return truncate_ids(ids, limit, mode)

    async def _start_interaction(self, row: AgentRow):
        kwargs = dict(row.extra_info.get("interaction_kwargs") or {})
        if not kwargs or not self.ctx.interactions:
            return None, None, []
        name = kwargs.pop("name", None)
        if name is None and len(self.ctx.interactions) == 1:
            name = next(iter(self.ctx.interactions))
        if name not in self.ctx.interactions:
            raise DataError(f"row extra_info.index={row.extra_info.get('index')} asks for interaction {name!r} "
                            f"(extra_info.interaction_kwargs.name); the interaction config defines {sorted(self.ctx.interactions)}")
        interaction = self.ctx.interactions[name]
        return interaction, await interaction.start_interaction(None, **kwargs), []

    async def _call_tools(self, parsed, row: AgentRow, state: dict) -> list[str]:
        cfg = self.ctx.multi_turn
        start = time.perf_counter()
        answers = await asyncio.gather(*(self._call_one(call, row, state) for call in parsed.calls[: cfg.max_parallel_calls]))
        state["tool_s"] += time.perf_counter() - start
        state["errors"] += len(parsed.errors)
        return [truncate(text, cfg.max_tool_response_length, cfg.tool_response_truncate_side)
                for text in [*answers, *parsed.errors]]

    async def _call_one(self, call, row: AgentRow, state: dict) -> str:
        state["calls"] += 1
        tool = self.ctx.tools.get(call.name)
        if tool is None:
            state["errors"] += 1
            return f"Error: there is no tool named {call.name!r}; the tools are {sorted(self.ctx.tools)}."
        kwargs = (row.extra_info.get("tools_kwargs") or {}).get(call.name) or {}
        try:
            if call.name not in state["instances"]:
                created = await tool.create(create_kwargs=kwargs.get("create_kwargs") or {})
                state["instances"][call.name] = created[0] if isinstance(created, tuple) else created
            response, reward, metrics = await tool.execute(state["instances"][call.name], call.arguments,
                                                           **(kwargs.get("execute_kwargs") or {}))
        except Exception as err:  # a tool's failure is the model's problem to handle, not the run's
            state["errors"] += 1
            return f"Error: tool {call.name!r} failed: {type(err).__name__}: {err}"
        state["step_reward"] += float(reward or 0.0)
        state["errors"] += int(bool((metrics or {}).get("error")))
        return response_text(response)

    async def _finish_tools(self, row: AgentRow, state: dict) -> float:
        total = 0.0
        for name, instance_id in state["instances"].items():
            kwargs = (row.extra_info.get("tools_kwargs") or {}).get(name) or {}
            total += float(await self.ctx.tools[name].calc_reward(instance_id, **(kwargs.get("calc_reward_kwargs") or {})))
            await self.ctx.tools[name].release(instance_id, **(kwargs.get("release_kwargs") or {}))
        return total


@register_agent_loop("env_agent")
class EnvAgentLoop(AgentLoopBase):
    """Plays a text environment: each model turn is an action, each observation a user message.

    The row's prompt is the first observation; `extra_info.env_kwargs` names the environment
    (`name`) and its `reset` arguments. The episode ends when the environment says done, at
    `max_assistant_turns`, or when the response budget is spent. Reward: `env_reward`, the sum of
    the step rewards, in `rollout_reward_scores`."""

    async def run(self, row: AgentRow) -> AgentOutput:
        kwargs = dict(row.extra_info.get("env_kwargs") or {})
        name = kwargs.pop("name", None)
        try:
            env = make_env(name)
        except ValueError as err:
            raise DataError(f"row extra_info.index={row.extra_info.get('index')}: extra_info.env_kwargs.name: {err.args[0]}") from None
        kwargs.setdefault("seed", row.extra_info.get("index", row.index))
        env.reset(**kwargs)
        conv = Conversation(self.ctx, row)
        total, done = 0.0, False
        while not done:
            text = await conv.model_turn()
            if text is None:
                break
            observation, reward, done = env.step(text)
            total += float(reward)
            if done or _over(self.ctx.multi_turn.max_assistant_turns, conv.assistant_turns):
                break
            conv.user_turns += 1
            if not conv.add_messages([{"role": "user", "content": observation}]):
                break
        return conv.output({"env_reward": total, "env_done": bool(done)}, user_turns=conv.user_turns)
