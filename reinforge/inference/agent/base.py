"""Agent loops: the base class, the registry by name, and the token-in/token-out conversation.

An agent loop turns one row (prompt token ids, its raw messages and extra_info) into one
trajectory by calling `await engine.generate(...)` one turn at a time; the rollout runs one loop
per row concurrently, so the engine batches the turns that are in flight.

Token-in/token-out: `Conversation` keeps the engine's exact token ids for model turns (mask 1,
with their log-probs) and tokenizes only the messages added between them (tool answers, user
turns, environment observations; mask 0). The ids of added messages are the template's text for
them after the end-of-turn token of a previous assistant turn, so the whole sequence is what the
chat template would render, except that earlier model turns are never re-rendered (a template that
rewrites history, e.g. dropping earlier thinking, cannot change tokens the model produced).

The response budget (`rollout.response_length`) bounds model and added tokens together: a turn
asks for at most the tokens left, added messages are cut to what is left, and the loop ends when
nothing is left.
"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any

from reinforge.errors import ConfigError
from reinforge.inference.engine import InferenceEngine, SamplingParams
from reinforge.inference.seeds import derive_seed
from reinforge.inference.tools.base import ReturnValueError
from reinforge.registry import Registry

# what a tool, interaction, environment or agent loop of the user's may raise that costs its row, not the run: a
# SystemExit (sys.exit in a tool) included; KeyboardInterrupt and the cancellation of an abandoned step still stop it
USER_FAILURES = (Exception, SystemExit)
AGENT_LOOP_REGISTRY = Registry("agent loop")  # per-row `agent_name` -> AgentLoopBase subclass
register_agent_loop = AGENT_LOOP_REGISTRY.register  # class decorator


class FailureReport:
    """Prints the first failure of each kind of the user's code (`tool`, `interaction`) with its traceback; later ones
    are only counted, in the rows' `tool_errors` / `interaction_errors` (as the reward manager does for a scorer).

    One per AgentRunner, so once per run; a failure is the row's, never the batch's."""

    def __init__(self):
        self.printed: set[str] = set()

    def __call__(self, kind: str, what: str, error: BaseException) -> None:
        if kind in self.printed:
            return
        self.printed.add(kind)
        detail = (f"{type(error).__name__}: {error}" if isinstance(error, ReturnValueError)  # reinforge's finding: no traceback
                  else "".join(traceback.format_exception(type(error), error, error.__traceback__)))
        print(f"reinforge: {what}. Later {kind} failures are only counted in the metric {kind}_errors.\n{detail}", file=sys.stderr)

    def notice(self, kind: str, message: str) -> None:
        """Print `message` the first time a `kind` of doubtful input is seen (not a failure: nothing is counted)."""
        if kind not in self.printed:
            self.printed.add(kind)
            print(f"reinforge: {message}", file=sys.stderr)


@dataclass
class AgentContext:
    """What every loop of a rollout shares."""

    engine: InferenceEngine
    tokenizer: Any
    params: SamplingParams  # max_tokens is the response budget of the whole conversation
    multi_turn: Any  # MultiTurnConfig
    tools: dict = field(default_factory=dict)  # name -> BaseTool
    interactions: dict = field(default_factory=dict)  # name -> BaseInteraction
    chat_template_kwargs: dict = field(default_factory=dict)  # data.apply_chat_template_kwargs
    max_prompt_length: int | None = None  # data.max_prompt_length and data.truncation, for a prompt rendered with tools
    truncation: str = "error"
    report: FailureReport = field(default_factory=FailureReport)  # the first failure of a tool or an interaction, printed
    stop_token_ids: tuple[int, ...] = ()  # where the tool-call format's turns end besides end of sequence (tool_agent)
    # the tools' OpenAI schemas by name, as plain dicts (the chat template shows them; the qwen3_coder parser types its
    # values by them, the kimi parser finds a call's tool by them); built once per run by the AgentRunner
    schemas: dict = field(default_factory=dict)


@dataclass
class AgentRow:
    prompt_ids: list[int]
    messages: list[dict] | None  # the raw chat messages of the prompt, when the dataset gives them
    extra_info: dict
    index: int  # the row's position in the batch
    seed: int | None = None  # the row's sampling seed (`sample_seeds`); each model turn samples with its own seed derived from it


@dataclass
class AgentOutput:
    prompt_ids: list[int]  # the row's prompt, or the prompt re-rendered with the tool schemas
    response_ids: list[int]
    response_mask: list[int]
    log_probs: list[float]
    num_turns: int  # as verl counts: the prompt, each assistant turn, each round of tool/user messages
    finish_reason: str
    reward_scores: dict = field(default_factory=dict)  # tool rewards, interaction scores, env rewards
    metrics: dict = field(default_factory=dict)  # tool_calls, tool_errors, generate_s, tool_s, ...


def message_delta_text(tokenizer, messages: list[dict], tools: list[dict] | None = None, calls: list | None = None,
                       stopped_at: str | None = None, **template_kwargs) -> str:
    """The template's text for `messages` appended after an assistant turn that ended with the token `stopped_at` (its
    text; None: the tokenizer's end of sequence), starting right after that token and ending with the next generation
    prompt.

    As verl builds it: the messages rendered after a stand-in conversation (system and user, and before tool answers
    an assistant turn that makes the calls answered, `tool_answers_text`), what the template adds for them, behind the
    text it puts after the stopped-at token in an assistant turn (Qwen's newline after `<|im_end|>`), or, when no
    assistant turn has that token, after the end-of-sequence token. A template that renders the stand-in's last turn
    differently once more messages follow is so handled. A template that refuses the stand-in (no system role) is
    asked with a plain user/assistant exchange instead."""
    kwargs = {**template_kwargs, **({"tools": tools} if tools else {})}
    if messages and messages[0]["role"] == "tool":
        return tool_answers_text(tokenizer, messages, calls, stopped_at, kwargs)
    separator = _after_stop(stopped_at, _plain_turn_text(tokenizer, kwargs)) if stopped_at else None
    stand_in = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    try:
        _, added = _rendered_after(tokenizer, stand_in, messages, kwargs)
        if separator is None:
            separator = _after_end_of_turn(tokenizer, tokenizer.apply_chat_template(stand_in[1:2], tokenize=False, **kwargs))
        return separator + added
    except Exception:  # noqa: BLE001  (a template's own refusal of the stand-in: jinja, ValueError, KeyError, ...)
        pass
    before, added = _rendered_after(tokenizer, [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
                                    messages, kwargs)
    return (_after_end_of_turn(tokenizer, before) if separator is None else separator) + added


def _after_stop(stopped_at: str, turn: str) -> str | None:
    """What the template writes after the token the model stopped at, within an assistant `turn`'s text (None when the
    token is not in it)."""
    return turn[turn.rfind(stopped_at) + len(stopped_at):] if stopped_at in turn else None


def _plain_turn_text(tokenizer, kwargs: dict) -> str:
    """The template's text of a plain assistant turn after a user message (with or without a system message before it);
    "" when the template renders neither."""
    turn = {"role": "assistant", "content": "a"}
    for opening in ([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], [{"role": "user", "content": "u"}]):
        try:
            earlier = tokenizer.apply_chat_template(opening, tokenize=False, **kwargs)
            whole = tokenizer.apply_chat_template([*opening, turn], tokenize=False, **kwargs)
        except Exception:  # noqa: BLE001  (the template's refusal of this opening)
            continue
        if whole.startswith(earlier):
            return whole[len(earlier):]
    return ""


def tool_answers_text(tokenizer, messages: list[dict], calls: list | None, stopped_at: str | None, kwargs: dict) -> str:
    """The template's text for tool answers (and the next generation prompt) after the turn that made `calls`
    (ToolCalls; placeholders when not given).

    The stand-in's assistant turn makes the real calls (names, arguments, and ids where the model gave one, as do the
    answers' `tool_call_id`s, as verl), so templates that name the tool in its answer (gpt-oss, Gemma 4) or the call's
    id (Kimi) render them. The text begins with what the template writes after the token the model stopped at within
    that turn (Qwen's newline after `<|im_end|>`, Gemma 4's `<|tool_response>` after `<tool_call|>`), or, when that
    token is not there, after the tokenizer's end-of-sequence token. The stand-in opens with a system message, or
    without one for a template that has no system role; a template that renders neither is a ConfigError naming its
    error (verl's rollout fails there too), never a guess."""
    answered = calls or [None] * sum(message["role"] == "tool" for message in messages)
    tool_calls = [{**({"id": call.id} if getattr(call, "id", None) else {}), "type": "function",
                   "function": {"name": getattr(call, "name", "t"), "arguments": getattr(call, "arguments", {})}}
                  for call in answered]
    turn = {"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": tool_calls}
    error = None
    for opening in ([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], [{"role": "user", "content": "u"}]):
        try:
            before, added = _rendered_after(tokenizer, [*opening, turn], messages, kwargs)
            earlier = tokenizer.apply_chat_template(opening, tokenize=False, **kwargs)
        except Exception as err:  # noqa: BLE001  (the template's refusal: jinja's, a SecurityError of its sandbox, ...)
            error = error or err
            continue
        separator = _after_stop(stopped_at, before[len(earlier):] if before.startswith(earlier) else "") if stopped_at else None
        return (_after_end_of_turn(tokenizer, earlier) if separator is None else separator) + added
    several = ""
    if len(tool_calls) > 1 and len(messages) == len(tool_calls):  # does one call a turn render?
        try:
            tool_answers_text(tokenizer, messages[:1], answered[:1], stopped_at, kwargs)
            several = " (it takes one call a turn: set actor_rollout_ref.rollout.multi_turn.max_parallel_calls=1)"
        except ConfigError:
            pass
    raise ConfigError(f"the chat template cannot render {len(messages)} tool answer(s) after an assistant turn that makes "
                      f"{len(tool_calls)} tool call(s){several}: {type(error).__name__}: {str(error).rstrip('.')}. Fix the "
                      "template (the model's tokenizer_config.json or chat_template.jinja, or "
                      "actor_rollout_ref.model.custom_chat_template)")


def _rendered_after(tokenizer, base: list[dict], messages: list[dict], kwargs: dict) -> tuple[str, str]:
    """(the template's text of `base`, what `messages` and the next generation prompt add after it)."""
    before = tokenizer.apply_chat_template(base, tokenize=False, **kwargs)
    after = tokenizer.apply_chat_template(base + messages, tokenize=False, add_generation_prompt=True, **kwargs)
    if not after.startswith(before):
        raise ValueError("the chat template renders a conversation's earlier messages differently once more are "
                         "added; token-in/token-out needs a prefix-stable rendering of the last assistant turn")
    return before, after[len(before):]


def _after_end_of_turn(tokenizer, text: str) -> str:
    """What `text` has after its last end-of-turn (EOS) token: the separator a template puts after a turn."""
    eos = tokenizer.eos_token or ""
    return text[text.rfind(eos) + len(eos):] if eos and eos in text else ""


class Conversation:
    """The growing response of one row: token ids, loss mask, log-probs, and turn counts."""

    def __init__(self, ctx: AgentContext, row: AgentRow, stop_token_ids: tuple[int, ...] = ()):
        self.ctx, self.row = ctx, row
        self.params = replace(ctx.params, stop_token_ids=tuple(dict.fromkeys((*ctx.params.stop_token_ids, *stop_token_ids))))
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.log_probs: list[float] = []
        self.messages: list[dict] = list(row.messages or [])
        self.num_turns = 1  # the prompt
        self.assistant_turns = 0
        self.user_turns = 0
        self.metrics: dict[str, float] = {"generate_s": 0.0}
        self.finish_reason = "stop"
        self.raw_text = ""  # the last assistant turn decoded with its special tokens (what tool calls are parsed from)

    @property
    def remaining(self) -> int:
        return self.params.max_tokens - len(self.ids)

    async def model_turn(self) -> str | None:
        """Generate one assistant turn; its text, or None when the budget ran out (the conversation ends)."""
        if self.remaining <= 0:
            self.finish_reason = "length"
            return None
        # the tokens left in the response budget; the engine batches requests that differ only in this limit
        start = time.perf_counter()
        seed = None if self.row.seed is None else derive_seed(self.row.seed, self.assistant_turns)
        output = await self.ctx.engine.generate(self.row.prompt_ids + self.ids,
                                                replace(self.params, max_tokens=self.remaining, seed=seed))
        self.metrics["generate_s"] += time.perf_counter() - start
        tokens, log_probs = output.token_ids, list(output.log_probs)
        self.ids += tokens
        self.mask += [1] * len(tokens)
        self.log_probs += log_probs + [0.0] * (len(tokens) - len(log_probs))
        self.num_turns += 1
        self.assistant_turns += 1
        text = self.ctx.tokenizer.decode(tokens, skip_special_tokens=True)
        # tool calls are read from the turn with its special tokens, as verl's parser reads them: a tokenizer may make
        # <tool_call> itself a special token, which skipping would erase
        self.raw_text = self.ctx.tokenizer.decode(tokens)
        self.messages.append({"role": "assistant", "content": text})
        if output.finish_reason != "stop":
            self.finish_reason = "length"  # cut by the budget: no tool call or reply can follow
            return None
        if self.remaining <= 0:  # the turn filled the budget: the conversation ends there, its calls unrun, as verl's
            return None
        return text

    def add_messages(self, messages: list[dict], tools: list[dict] | None = None, calls: list | None = None) -> bool:
        """Append tool/user messages (mask 0) and the next generation prompt; False, appending nothing, when they would
        reach the end of the response budget (as verl's loop, which drops such a round and ends the conversation).

        `calls`: the ToolCalls the tool messages answer. A template whose next message opens with the token the
        model's turn stopped at (GLM's `<|observation|>` and `<|user|>`) does not get that token twice: the model's
        stays, with its log-prob (verl removes the model's and adds the template's)."""
        tok = self.ctx.tokenizer
        stopped_at = tok.convert_ids_to_tokens(self.ids[-1]) if self.mask and self.mask[-1] == 1 else None
        text = message_delta_text(tok, messages, tools, calls, stopped_at, **self.ctx.chat_template_kwargs)
        if stopped_at and stopped_at in tok.get_added_vocab() and text.startswith(stopped_at):
            text = text[len(stopped_at):]
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if len(ids) >= self.remaining:
            self.finish_reason = "length"
            return False
        self.messages += messages
        self.num_turns += 1
        self.ids += ids
        self.mask += [0] * len(ids)
        self.log_probs += [0.0] * len(ids)
        return True

    def output(self, reward_scores: dict | None = None, **metrics: float) -> AgentOutput:
        return AgentOutput(self.row.prompt_ids, self.ids, self.mask, self.log_probs, self.num_turns, self.finish_reason,
                           reward_scores or {}, {**self.metrics, **metrics})


class AgentLoopBase:
    """One conversation per call of `run`; subclasses are registered with `register_agent_loop(name)`."""

    def __init__(self, ctx: AgentContext):
        self.ctx = ctx

    async def run(self, row: AgentRow) -> AgentOutput:
        raise NotImplementedError
