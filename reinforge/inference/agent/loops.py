"""The built-in agent loops: `single_turn_agent`, `tool_agent` (tools and interactions) and `env_agent` (text games).

tool_agent, per row: the prompt is re-rendered from the row's messages with the tools' schemas
(`tools=`) when the chat template shows them (as verl does); the model speaks (generation also stops at the
`multi_turn.format`'s stop token, if it has one); the tool calls in its turn (in that format) run (at most
`multi_turn.max_parallel_calls`, concurrently) and their answers come back as `tool` messages in the order of the calls,
with the call's `tool_call_id` when the model gave one (cut to `max_tool_response_length` characters on
`tool_response_truncate_side`). A turn without tool calls ends the
conversation, or, when the row names an interaction (`extra_info.interaction_kwargs.name`), gets the interaction's reply
as a `user` message. `max_assistant_turns` bounds model turns; `max_user_turns` bounds the rounds of tool answers and
user replies together (verl counts both as user turns; null or 0: no limit, as verl's falsy check).

Nothing the model writes and nothing a tool or an interaction does stops the batch: a malformed call is dropped (as
verl's parser drops it; a turn of malformed calls only is a turn without calls) and counted in `tool_errors`; a call
of an unknown tool is answered in verl's words; a tool or interaction method that raises or returns a value of the
wrong shape is the row's error, counted in `tool_errors` / `interaction_errors`, its first traceback printed once
(`FailureReport`). A failed `execute` is answered with the error; a failed `calc_reward` scores 0; a failed
`generate_response` ends the conversation; a failed `calculate_score` scores 0.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from reinforge.environment.dataset import truncate as truncate_ids
from reinforge.environment.envs import make_env
from reinforge.errors import ConfigError, DataError
from reinforge.inference.agent.base import (
    USER_FAILURES,
    AgentLoopBase,
    AgentOutput,
    AgentRow,
    Conversation,
    FailureReport,
    register_agent_loop,
)
from reinforge.inference.interactions import chosen_interaction, response_result
from reinforge.inference.tools import ReturnValueError, execute_result, number, parse_tool_calls, show_value, truncate
from reinforge.user_code import class_label

TOOL_WATCHDOG_ENV = "REINFORGE_TOOL_WATCHDOG_S"  # seconds before the warning about a tool call still running (default 300)


def _tool_files(multi_turn) -> str:
    """The files the tools come from, for messages."""
    files = [f"{key}={path}" for key, path in (("multi_turn.tool_config_path", multi_turn.tool_config_path),
                                                 ("multi_turn.function_tool_path", multi_turn.function_tool_path)) if path]
    return " and ".join(files) or "no tool file"


def _row_name(row: AgentRow) -> str:
    return f"row extra_info.index={row.extra_info.get('index', row.index)}"


def _class_of(obj) -> str:
    return class_label(type(obj))


@register_agent_loop("single_turn_agent")
class SingleTurnAgentLoop(AgentLoopBase):
    async def run(self, row: AgentRow) -> AgentOutput:
        conv = Conversation(self.ctx, row)
        await conv.model_turn()
        return conv.output()


def _over(limit: int | None, count: int) -> bool:
    return bool(limit) and count >= limit


@dataclass
class _ToolState:
    """A row's tool instances and tallies."""

    instances: dict = field(default_factory=dict)  # tool name -> instance id
    step_rewards: list = field(default_factory=list)  # each call's step reward, in order (verl's tool_rewards)
    calls: int = 0
    errors: int = 0
    seconds: float = 0.0


async def _call_for_instance(method, instance_id: str):
    """calculate_score / finalize_interaction: with the instance id, as interactions that keep per-row state take it
    (verl's Gsm8kInteraction), or bare, as verl's BaseInteraction declares them (its agent loop calls neither)."""
    parameters = inspect.signature(method).parameters.values()
    if any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters):
        return await method(instance_id)
    return await method()


class _RowInteraction:
    """The row's interaction with its failures contained: a method that raises or returns another shape is counted in
    `errors` and reported once; the conversation then ends (generate_response) or scores 0 (calculate_score)."""

    def __init__(self, interaction, name: str, row: AgentRow, report: FailureReport, kwargs: dict):
        self.interaction, self.name, self.row, self.report = interaction, name, row, report
        self.kwargs = kwargs  # the row's interaction_kwargs, name included: every call gets them, as verl's agent loop
        self.instance_id = uuid.uuid4().hex  # verl's request id: the interaction's instance id for this row
        self.started = False  # a row whose start_interaction failed goes on as a row without an interaction
        self.turn_scores: list[float] = []
        self.errors = 0

    def _failed(self, method: str, error: Exception, cost: str) -> None:
        self.errors += 1
        self.report("interaction", f"interaction {self.name!r} ({_class_of(self.interaction)}) failed in {method} on "
                                   f"{_row_name(self.row)}; {cost}", error)

    async def start(self) -> None:
        try:
            await self.interaction.start_interaction(self.instance_id, **self.kwargs)
            self.started = True
        except USER_FAILURES as err:
            self._failed("start_interaction", err, "the row goes on without it")

    async def reply(self, messages: list[dict]) -> tuple[bool, str | None]:
        """(should_terminate, text); text None when generate_response failed or never started (the conversation ends)."""
        if not self.started:
            return True, None
        try:
            done, text, score = response_result(await self.interaction.generate_response(self.instance_id, messages,
                                                                                         **self.kwargs))
        except USER_FAILURES as err:
            self._failed("generate_response", err, "the conversation ends there")
            return True, None
        if score is not None:
            self.turn_scores.append(score)
        return done, text

    async def finish(self) -> dict:
        """The row's interaction scores (verl's keys), after calculate_score and finalize_interaction."""
        if not self.started:
            return {"interaction_score": 0.0, "turn_scores": []}
        try:
            score = number(await _call_for_instance(self.interaction.calculate_score, self.instance_id),
                           "the score from calculate_score")
        except USER_FAILURES as err:
            self._failed("calculate_score", err, "interaction_score is 0.0")
            score = 0.0
        try:
            await _call_for_instance(self.interaction.finalize_interaction, self.instance_id)
        except USER_FAILURES as err:
            self._failed("finalize_interaction", err, "nothing else is lost")
        return {"interaction_score": score, "turn_scores": self.turn_scores}


@register_agent_loop("tool_agent")
class ToolAgentLoop(AgentLoopBase):
    async def run(self, row: AgentRow) -> AgentOutput:
        ctx, cfg = self.ctx, self.ctx.multi_turn
        by_name = ctx.schemas
        schemas = list(by_name.values()) or None
        row.prompt_ids = self._prompt_with_tools(row, schemas)
        self._check_tools_kwargs(row)
        conv = Conversation(ctx, row, ctx.stop_token_ids)
        tools = _ToolState()
        user = await self._start_interaction(row)
        scores: dict = {}
        try:
            while True:
                text = await conv.model_turn()
                if text is None or _over(cfg.max_assistant_turns, conv.assistant_turns):
                    break
                parsed = parse_tool_calls(conv.raw_text, cfg.format, by_name) if ctx.tools else None
                tools.errors += len(parsed.errors) if parsed is not None else 0
                calls_tools = parsed is not None and bool(parsed.calls)  # malformed calls alone: no call, as verl
                if (not calls_tools and user is None) or _over(cfg.max_user_turns, conv.user_turns):
                    break
                calls = parsed.calls[: cfg.max_parallel_calls] if calls_tools else None
                if calls:
                    messages = [{"role": "tool", "content": answer, **({"tool_call_id": call.id} if call.id else {})}
                                for call, answer in zip(calls, await self._call_tools(calls, row, tools), strict=True)]
                else:
                    done, reply = await user.reply(conv.messages)
                    if reply is None:
                        break
                    messages = [{"role": "user", "content": reply}]
                    if done:  # as verl: the closing reply joins the conversation too (when it fits), counted, then the end
                        finish_reason = conv.finish_reason
                        conv.add_messages(messages, schemas, None)
                        conv.finish_reason = finish_reason  # a closing reply that does not fit ends nothing early
                        conv.user_turns += 1
                        break
                if not conv.add_messages(messages, schemas, calls):  # a round the budget cannot hold is dropped, not counted
                    break
                conv.user_turns += 1
        finally:
            tool_reward = await self._finish_tools(row, tools)
            if user is not None:
                scores.update(await user.finish())
        metrics = {"tool_calls": tools.calls, "tool_errors": tools.errors, "tool_s": tools.seconds}
        if ctx.tools:
            scores.update(tool_step_reward=sum(tools.step_rewards), tool_reward=tool_reward, tool_rewards=tools.step_rewards)
        if user is not None:
            metrics["interaction_errors"] = user.errors
        return conv.output(scores, **metrics, user_turns=conv.user_turns)

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
                f"of {_tool_files(self.ctx.multi_turn)} ({len(row.prompt_ids)} without), over data.max_prompt_length="
                f"{limit}. Raise data.max_prompt_length, or set data.truncation to left, right or middle"
            )
        return truncate_ids(ids, limit, mode)

    async def _start_interaction(self, row: AgentRow) -> _RowInteraction | None:
        """The row's interaction, started (None when the row names none)."""
        kwargs = dict(row.extra_info.get("interaction_kwargs") or {})
        if not kwargs or not self.ctx.interactions:
            return None
        name = chosen_interaction(kwargs, self.ctx.interactions)
        if name is None:
            raise DataError(f"{_row_name(row)} asks for interaction {kwargs.get('name')!r} "
                            f"(extra_info.interaction_kwargs.name); the interaction config defines {sorted(self.ctx.interactions)}")
        user = _RowInteraction(self.ctx.interactions[name], name, row, self.ctx.report, kwargs)
        await user.start()
        return user

    def _check_tools_kwargs(self, row: AgentRow) -> None:
        """Say once per run when a row's extra_info.tools_kwargs names tools that are not configured: their create_kwargs
        (a ground truth, say) reach no tool, which verl passes over in silence."""
        unknown = sorted(set(row.extra_info.get("tools_kwargs") or {}) - set(self.ctx.tools))
        if unknown:
            configured = f"the tools configured are {sorted(self.ctx.tools)}" if self.ctx.tools else "no tools are configured"
            self.ctx.report.notice("tools_kwargs", (
                f"{_row_name(row)} has extra_info.tools_kwargs for {unknown}, but {configured} (the tools' names in "
                f"{_tool_files(self.ctx.multi_turn)}); those kwargs reach no tool (said once per run)."))

    async def _call_tools(self, calls: list, row: AgentRow, tools: _ToolState) -> list[str]:
        """The answers to the turn's first max_parallel_calls valid calls, run concurrently, in the order written (the
        malformed ones are not run: verl's parser drops them; run() counts them in tool_errors)."""
        cfg = self.ctx.multi_turn
        start = time.perf_counter()
        answers = await asyncio.gather(*(self._call_one(call, row, tools) for call in calls))
        tools.seconds += time.perf_counter() - start
        return [truncate(text, cfg.max_tool_response_length, cfg.tool_response_truncate_side) for text in answers]

    async def _call_one(self, call, row: AgentRow, tools: _ToolState) -> str:
        tools.calls += 1
        tool = self.ctx.tools.get(call.name)
        if tool is None:  # answered, and its step reward 0, in verl's words
            tools.errors += 1
            tools.step_rewards.append(0.0)
            return f"Unknown function '{call.name}'. Available tools: {list(self.ctx.tools)}"
        kwargs = _tool_kwargs(row, call.name)
        watched = TOOL_WATCH.start(lambda seconds: (
            f"reinforge: warning: tool {call.name!r} ({_class_of(tool)}) has been running for {seconds:g} s on "
            f"{_row_name(row)}; it may be stuck, and the step waits for it (give the tool a time limit of its own; a "
            "second Ctrl-C abandons the step)"))
        try:
            if call.name not in tools.instances:
                created = await tool.create(create_kwargs=kwargs.get("create_kwargs") or {})
                tools.instances[call.name] = created[0] if isinstance(created, tuple) else created
            text, reward, metrics = execute_result(await tool.execute(tools.instances[call.name], call.arguments,
                                                                      **(kwargs.get("execute_kwargs") or {})))
        except USER_FAILURES as err:  # a tool's failure is the row's, answered to the model (verl's words), not the run's
            self._tool_failed(tool, call.name, "execute", row, tools, err, "the model is answered with the error")
            tools.step_rewards.append(0.0)
            return f"Error executing tool '{call.name}': {err}"
        finally:
            TOOL_WATCH.done(watched)
        if reward is not None:  # a step reward of None is no step reward, as verl keeps them
            tools.step_rewards.append(reward)
        tools.errors += int(bool(metrics.get("error")))
        return text

    async def _finish_tools(self, row: AgentRow, tools: _ToolState) -> float:
        """The sum of the row's tools' calc_reward (a failed one counts 0), each instance released."""
        total = 0.0
        for name, instance_id in tools.instances.items():
            tool, kwargs = self.ctx.tools[name], _tool_kwargs(row, name)
            try:
                total += number(await tool.calc_reward(instance_id, **(kwargs.get("calc_reward_kwargs") or {})),
                                "the reward from calc_reward")
            except USER_FAILURES as err:
                self._tool_failed(tool, name, "calc_reward", row, tools, err, "its tool_reward counts 0.0")
            try:
                await tool.release(instance_id, **(kwargs.get("release_kwargs") or {}))
            except USER_FAILURES as err:
                self._tool_failed(tool, name, "release", row, tools, err, "nothing else is lost")
        return total

    def _tool_failed(self, tool, name: str, method: str, row: AgentRow, tools: _ToolState, error: Exception, cost: str) -> None:
        tools.errors += 1
        self.ctx.report("tool", f"tool {name!r} ({_class_of(tool)}) failed in {method} on {_row_name(row)}; {cost}", error)


def tool_watchdog_seconds() -> float:
    """REINFORGE_TOOL_WATCHDOG_S (default 300): how long a tool call runs before a warning names it."""
    value = os.environ.get(TOOL_WATCHDOG_ENV) or "300"
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ConfigError(f"{TOOL_WATCHDOG_ENV}={value!r}: seconds, a number > 0")
    return seconds


class _ToolWatch:
    """One thread for every tool call of the process: a call still running `tool_watchdog_seconds()` after it started is
    named once on stderr (from this thread, so a tool that blocks the event loop is named too). The call goes on: tools
    set their own limits, as in verl."""

    def __init__(self) -> None:
        self.calls: dict[int, tuple[float, float, Callable[[float], str]]] = {}
        self.lock = threading.Lock()
        self.next_key = 0
        self.thread: threading.Thread | None = None
        self.added = threading.Event()  # a call came in: the watch looks again at the earliest deadline

    def start(self, message: Callable[[float], str]) -> int:
        seconds = tool_watchdog_seconds()
        with self.lock:
            self.next_key += 1
            key = self.next_key
            self.calls[key] = (time.monotonic() + seconds, seconds, message)
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, name="reinforge-tool-watch", daemon=True)
                self.thread.start()
        self.added.set()
        return key

    def done(self, key: int) -> None:
        with self.lock:
            self.calls.pop(key, None)

    def _watch(self) -> None:
        while True:
            with self.lock:
                wait = min([60.0, *(deadline - time.monotonic() for deadline, _, _ in self.calls.values())])
            self.added.wait(max(wait, 0.0))
            self.added.clear()
            now = time.monotonic()
            with self.lock:
                overdue = [self.calls.pop(key) for key, (deadline, _, _) in list(self.calls.items()) if deadline <= now]
            for _, seconds, message in overdue:
                print(message(seconds), file=sys.stderr, flush=True)


TOOL_WATCH = _ToolWatch()


def _tool_kwargs(row: AgentRow, name: str) -> dict:
    """The row's extra_info.tools_kwargs.<name>: create_kwargs, execute_kwargs, calc_reward_kwargs, release_kwargs."""
    return (row.extra_info.get("tools_kwargs") or {}).get(name) or {}


@register_agent_loop("env_agent")
class EnvAgentLoop(AgentLoopBase):
    """Plays a text environment: each model turn is an action, each observation a user message.

    The row's prompt is the first observation; `extra_info.env_kwargs` names the environment
    (`name`) and its `reset` arguments. The episode ends when the environment says done, at
    `max_assistant_turns`, at `max_user_turns` observations sent back, or when the response budget
    is spent. Reward: `env_reward`, the sum of the step rewards, in `rollout_reward_scores`."""

    async def run(self, row: AgentRow) -> AgentOutput:
        env = _reset_env(row)
        cfg = self.ctx.multi_turn
        conv = Conversation(self.ctx, row)
        total, done = 0.0, False
        while not done:
            text = await conv.model_turn()
            if text is None:
                break
            observation, reward, done = _step(env, row, text)
            total += reward
            if done or _over(cfg.max_assistant_turns, conv.assistant_turns) or _over(cfg.max_user_turns, conv.user_turns):
                break
            if not conv.add_messages([{"role": "user", "content": observation}]):
                break
            conv.user_turns += 1
        return conv.output({"env_reward": total, "env_done": bool(done)}, user_turns=conv.user_turns)


def _reset_env(row: AgentRow):
    """The row's environment (extra_info.env_kwargs: `name` and its `reset` arguments), reset: a DataError naming the row
    and the environment when the name is unknown or reset refuses the arguments, as for any bad value in the data."""
    kwargs = dict(row.extra_info.get("env_kwargs") or {})
    name = kwargs.pop("name", None)
    try:
        env = make_env(name)
    except ValueError as err:
        raise DataError(f"{_row_name(row)}: extra_info.env_kwargs.name: {err.args[0]}") from None
    kwargs.setdefault("seed", row.extra_info.get("index", row.index))
    try:
        env.reset(**kwargs)
    except USER_FAILURES as err:
        raise DataError(f"{_row_name(row)}: environment {name!r} ({_class_of(env)}) cannot reset with extra_info.env_kwargs "
                        f"{kwargs}: {type(err).__name__}: {err}") from err
    return env


def _step(env, row: AgentRow, action: str) -> tuple[str, float, bool]:
    """`env.step(action)`, checked: (observation text, finite reward, done as a bool); a ConfigError naming the environment
    class and the row when it raises or returns anything else (a bug in the environment would fail every row)."""
    where = f"environment {(row.extra_info.get('env_kwargs') or {}).get('name')!r} ({_class_of(env)}) on {_row_name(row)}"
    try:
        result = env.step(action)
    except USER_FAILURES as err:
        raise ConfigError(f"{where} failed in step: {type(err).__name__}: {err}") from err
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        raise ConfigError(f"{where}: step returned {show_value(result)}; it returns (observation, reward, done)")
    observation, reward, done = result
    if not isinstance(observation, str) or not (isinstance(done, (bool, np.bool_)) or isinstance(done, (int, np.integer)) and done in (0, 1)):
        raise ConfigError(f"{where}: step returned the observation {show_value(observation)} and done {show_value(done)}; "
                          "it returns a string and a bool (or 0/1)")
    try:
        return observation, number(reward, "the reward from step"), bool(done)
    except ReturnValueError as err:
        raise ConfigError(f"{where}: {err}") from None
