"""Tool calls in the model's text, in the format `multi_turn.format` names (verl's tool parsers):

- `hermes` (Qwen2.5, Qwen3, ...): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`;
- `qwen3_coder` (Qwen3-Coder, Qwen3.5): `<tool_call><function=NAME><parameter=P>value</parameter>...</function></tool_call>`,
  each value converted by the type the tool's schema gives that parameter, as verl converts it (integer, number,
  boolean, object as JSON, other types as a Python literal, `null` as None; a value that does not convert, or a
  parameter the schema does not name, stays text); a call cut off by the token limit after its last complete
  parameter still counts, as in verl;
- `glm` (GLM-4.5 and later): `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`;
- `seed` (Seed-OSS): `<seed:tool_call><function=NAME><parameter=K>V</parameter>...</function></seed:tool_call>`;
- `minimax` (MiniMax-M2): `<minimax:tool_call><invoke name="NAME"><parameter name="K">V</parameter>...</invoke>
  </minimax:tool_call>`;
- `kimi` (Kimi-K2): `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}
  <|tool_call_end|>...`; the id (`functions.NAME:0`) goes back with the answer as its `tool_call_id`;
- `deepseek_v4` (DeepSeek-V4's DSML): `<｜DSML｜invoke name="NAME"><｜DSML｜parameter name="K" string="true">V
  </｜DSML｜parameter>...` inside `<｜DSML｜tool_calls>`; a value marked `string="false"` is JSON;
- `gpt-oss` (the harmony format): a message to `functions.NAME` ended by `<|call|>`, its body the JSON arguments;
  messages on the `analysis` channel (reasoning) are never calls;
- `gemma4`: `<|tool_call>call:NAME{key:<|"|>text<|"|>,key2:5}<tool_call|>`.

The values of glm, seed and minimax parameters are JSON when they parse as JSON, else the text (stripped), as verl
reads them. glm, kimi and gemma4 models end a turn of calls with a token their tokenizer need not count as the end
of a sequence (`<|observation|>`, `<|im_end|>`, `<tool_call|>`), so the tool agent also stops generating there
(`STOP_TOKENS`, `stop_token_ids`), as verl's parsers ask.

`parse_tool_calls(text, format, schemas)` never raises: a call that is malformed (hermes: not valid JSON, not an
object, without a string `name` or `arguments` (verl's parser needs both), with non-object `arguments`;
qwen3_coder: a function or parameter tag without its `>`; any format: without a function name, or, where the
arguments are JSON (kimi, gpt-oss), arguments that are not a JSON object; a seed, minimax or deepseek_v4 block
without a function), or a hermes opening tag without its closing one, becomes an error message in `items` (in the
order written, beside the calls): the agent loop counts them in `tool_errors` and, as verl's parsers do, runs only
the valid calls. (verl runs a kimi call whose arguments are not JSON with no arguments, and answers a gpt-oss one
with the JSON error.)
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)

# the token that ends a turn of tool calls, where generation must stop for the answers (verl's stop_token_ids)
STOP_TOKENS = {"glm": "<|observation|>", "kimi": "<|im_end|>", "gemma4": "<tool_call|>"}


@dataclass
class ToolCall:
    name: str
    arguments: dict
    id: str | None = None  # the model's own id for the call (kimi), sent back as the answer's tool_call_id


@dataclass
class ParsedTurn:
    content: str  # the text with the tool calls removed
    items: list[ToolCall | str] = field(default_factory=list)  # in the order written: a call, or a malformed call's error

    @property
    def calls(self) -> list[ToolCall]:
        return [item for item in self.items if isinstance(item, ToolCall)]

    @property
    def errors(self) -> list[str]:
        return [item for item in self.items if isinstance(item, str)]


def parse_tool_calls(text: str, format: str = "hermes", schemas: dict[str, dict] | None = None) -> ParsedTurn:
    """The calls of a model turn; `schemas`: the tools' OpenAI schemas by name (qwen3_coder types its values by them,
    kimi finds a call's tool by them)."""
    return _PARSERS[format](text, schemas or {})


def stop_token_ids(format: str, tokenizer) -> list[int]:
    """The ids generation stops at, besides end of sequence, for a turn in this format (none when the tokenizer does not
    have the format's token)."""
    token = STOP_TOKENS.get(format)
    vocabulary = tokenizer.get_vocab() if token else {}
    return [vocabulary[token]] if token in vocabulary else []


def _parse_hermes(text: str, schemas: dict) -> ParsedTurn:
    turn = ParsedTurn(content=_CALL.sub("", text).strip())
    for body in _CALL.findall(text):
        call, error = _parse_one(body.strip())
        turn.items.append(call if call is not None else error)
    if turn.content.count(OPEN) > turn.content.count(CLOSE):
        turn.items.append(f"Error: a {OPEN} was not closed with {CLOSE}.")
    return turn


def _parse_one(body: str) -> tuple[ToolCall | None, str]:
    try:
        value = json.loads(body)
    except json.JSONDecodeError as err:
        return None, f"Error: the tool call is not valid JSON ({err.msg} at character {err.pos}): {body[:200]}"
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or "arguments" not in value:
        return None, 'Error: a tool call must be a JSON object {"name": <tool name>, "arguments": {...}}.'
    arguments = value["arguments"]
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return None, f"Error: the arguments of tool {value['name']!r} are not valid JSON."
    if not isinstance(arguments, dict):
        return None, f"Error: the arguments of tool {value['name']!r} must be a JSON object."
    return ToolCall(value["name"], arguments), ""


_XML_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*?)$", re.DOTALL)
_XML_FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
_XML_PARAMETER = re.compile(r"<parameter=(.*?)</parameter>|<parameter=(.*?)$", re.DOTALL)


def _parse_qwen3_coder(text: str, schemas: dict[str, dict]) -> ParsedTurn:
    if OPEN not in text:
        return ParsedTurn(content=text.strip())
    turn = ParsedTurn(content=text[:text.find(OPEN)].strip())
    for block in (a or b for a, b in _XML_CALL.findall(text)):
        for body in (a or b for a, b in _XML_FUNCTION.findall(block)):
            end = body.find(">")
            if end == -1:
                turn.items.append(f"Error: the tool call <function={body[:80]} has no '>' after the function name.")
                continue
            name, properties = body[:end], _properties(schemas.get(body[:end]))
            arguments = {}
            for parameter in (a or b for a, b in _XML_PARAMETER.findall(body[end + 1:])):
                cut = parameter.find(">")
                if cut == -1:
                    turn.items.append(f"Error: the parameter <parameter={parameter[:80]} of tool {name!r} has no '>' after "
                                      "its name.")
                    continue
                value = parameter[cut + 1:].removeprefix("\n").removesuffix("\n")
                arguments[parameter[:cut]] = _typed(value, properties.get(parameter[:cut]))
            turn.items.append(ToolCall(name, arguments))
    return turn


def _parameters(schema: dict | None) -> dict:
    return ((schema or {}).get("function") or {}).get("parameters") or {}


def _properties(schema: dict | None) -> dict:
    return _parameters(schema).get("properties") or {}


def _typed(value: str, spec: dict | None):
    """A qwen3_coder parameter's text as the type its schema names, as verl's parser converts it."""
    if value.lower() == "null":
        return None
    if not isinstance(spec, dict):
        return value
    kind = str(spec.get("type", "string")).strip().lower()
    if kind in ("string", "str", "text", "varchar", "char", "enum"):
        return value
    try:
        if kind.startswith(("int", "uint", "long", "short", "unsigned")):
            return int(value)
        if kind.startswith(("num", "float")):
            number = float(value)
            return int(number) if number == int(number) else number
    except (ValueError, OverflowError):
        return value
    if kind in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    if kind == "object" or kind.startswith("dict"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value


def _named(name: str, arguments: dict, call_id: str | None = None) -> ToolCall | str:
    return ToolCall(name, arguments, call_id) if name else "Error: a tool call without a function name."


def _json_or_text(value: str):
    """A glm, seed or minimax value: JSON when it parses as JSON, else the text, stripped (as verl reads them)."""
    return _json_or_raw(value.strip())


def _json_or_raw(value: str):
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def _json_object(text: str, what: str) -> dict | str:
    """JSON arguments (kimi, gpt-oss) as a dict, or the error message."""
    try:
        value = json.loads(text.strip())
    except (ValueError, RecursionError):
        return f"Error: the arguments of {what} are not valid JSON: {text.strip()[:200]}"
    return value if isinstance(value, dict) else f"Error: the arguments of {what} must be a JSON object."


def _blocks(text: str, open_tag: str, close_tag: str) -> tuple[str, list[str]]:
    """(the text before the first block, the blocks' bodies); no blocks unless both tags are in the text, as verl."""
    if open_tag not in text or close_tag not in text:
        return text, []
    return text[:text.find(open_tag)], re.findall(re.escape(open_tag) + "(.*?)" + re.escape(close_tag), text, re.DOTALL)


def _after_thinking(text: str) -> str:
    return text.rpartition("</think>")[2]


_GLM_ARGUMENT = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def _parse_glm(text: str, schemas: dict) -> ParsedTurn:
    before, blocks = _blocks(text, OPEN, CLOSE)
    turn = ParsedTurn(content=_after_thinking(before).strip())
    for body in blocks:
        cut = body.find("<arg_key>")
        arguments = {} if cut == -1 else {k.strip(): _json_or_text(v) for k, v in _GLM_ARGUMENT.findall(body[cut:])}
        turn.items.append(_named((body if cut == -1 else body[:cut]).strip(), arguments))
    return turn


def _markup_calls(text: str, tags: tuple[str, str], function: re.Pattern, parameter: re.Pattern, value=_json_or_text,
                  first_only: bool = False) -> ParsedTurn:
    """The calls in the blocks between `tags`: each block's functions (`function` finds name and body; the first only
    with `first_only`) and their parameters (`parameter` finds the key, then what `value` reads the value from)."""
    before, blocks = _blocks(text, *tags)
    turn = ParsedTurn(content=_after_thinking(before).strip())
    for body in blocks:
        functions = function.findall(body)[: 1 if first_only else None]
        if not functions:
            turn.items.append(f"Error: a {tags[0]} block without a function call.")
        for name, inner in functions:
            turn.items.append(_named(name.strip(), {key.strip(): value(*rest) for key, *rest in parameter.findall(inner)}))
    return turn


_SEED = (("<seed:tool_call>", "</seed:tool_call>"), re.compile(r"<function=([^>\n]+)>\s*(.*?)</function>", re.DOTALL),
         re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL))
_MINIMAX = (("<minimax:tool_call>", "</minimax:tool_call>"), re.compile(r'<invoke name="([^"]+)">\s*(.*?)</invoke>', re.DOTALL),
            re.compile(r'<parameter name="([^"]+)">(.*?)</parameter>', re.DOTALL))
_DSML = "｜DSML｜"
_DEEPSEEK_V4 = ((f"<{_DSML}tool_calls>", f"</{_DSML}tool_calls>"),
                re.compile(f'<{_DSML}invoke name="(.*?)">(.*?)</{_DSML}invoke>', re.DOTALL),
                re.compile(f'<{_DSML}parameter name="(.*?)" string="(true|false)">(.*?)</{_DSML}parameter>', re.DOTALL))


def _parse_seed(text: str, schemas: dict) -> ParsedTurn:
    return _markup_calls(text, *_SEED, first_only=True)  # one function a block, as the model writes it and verl reads it


def _parse_minimax(text: str, schemas: dict) -> ParsedTurn:
    return _markup_calls(text, *_MINIMAX)


def _parse_deepseek_v4(text: str, schemas: dict) -> ParsedTurn:
    # string="true": the text as written; else JSON, or the text when it is not JSON (as verl)
    return _markup_calls(text.replace("<｜end▁of▁sentence｜>", ""), *_DEEPSEEK_V4,
                         value=lambda is_text, value: value if is_text == "true" else _json_or_raw(value))


_KIMI_SECTION = "<|tool_calls_section_begin|>"
_KIMI_CALL = re.compile(r"<\|tool_call_begin\|>(.*?)<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>", re.DOTALL)
_KIMI_ID = re.compile(r"(?:functions\.)?(.*?)(?::\d+)?", re.DOTALL)


def _parse_kimi(text: str, schemas: dict) -> ParsedTurn:
    start = text.find(_KIMI_SECTION)
    turn = ParsedTurn(content=(text if start == -1 else text[:start]).strip())
    if start == -1:
        return turn
    for call_id, raw in _KIMI_CALL.findall(text):
        call_id = call_id.strip()
        arguments = _json_object(raw, f"the call {call_id!r}")
        turn.items.append(arguments if isinstance(arguments, str) else
                          _named(_kimi_tool(call_id, arguments, schemas), arguments, call_id or None))
    return turn


def _kimi_tool(call_id: str, arguments: dict, schemas: dict) -> str:
    """The tool a kimi call id names: the id itself or NAME of `functions.NAME:0` when a tool has that name; else, as verl
    guesses, the one tool whose name is in the id, or the one tool whose required parameters the call gives; else the
    id (answered as an unknown function)."""
    name = _KIMI_ID.fullmatch(call_id).group(1)
    for found in (call_id, name):
        if found in schemas:
            return found
    compact = call_id.lower().replace("-", "_")
    by_name = [tool for tool in schemas if tool.lower() in compact]
    by_parameters = [tool for tool, schema in schemas.items()
                     if (required := {key for key in _parameters(schema).get("required") or () if isinstance(key, str)})
                     and required <= set(arguments)]
    for candidates in (by_name, by_parameters):
        if len(candidates) == 1:
            return candidates[0]
    return call_id


_HARMONY_END = re.compile(r"<\|end\|>|<\|call\|>|<\|return\|>")
_HARMONY_RECIPIENT = re.compile(r"to=([^\s<]+)")


def _harmony_messages(text: str):
    """Each harmony message's header (role, channel, recipient: the text before its `<|message|>`), body, and the token
    that ends it ("" at the text's end); one pass over the text."""
    position = 0
    while (opened := text.find("<|message|>", position)) != -1:
        body = opened + len("<|message|>")
        end = _HARMONY_END.search(text, body)
        yield text[position:opened], text[body:end.start() if end else len(text)], end.group() if end else ""
        position = end.end() if end else len(text)


def _parse_gpt_oss(text: str, schemas: dict) -> ParsedTurn:
    """gpt-oss: a message whose header names a recipient `functions.NAME` and that ends with `<|call|>` is a call (verl
    asks for `<|start|>assistant` and `<|constrain|>json` in the header too, which a turn's first message lacks when the
    prompt already opened it); messages on the analysis channel are reasoning; the others are the content."""
    turn, content = ParsedTurn(content=""), []
    for header, body, end in _harmony_messages(text):
        if "<|channel|>analysis" in header:
            continue
        recipient = _HARMONY_RECIPIENT.search(header)
        if end != "<|call|>" or recipient is None:
            content.append(body)
        elif not recipient.group(1).startswith("functions."):
            turn.items.append(f"Error: a call to {recipient.group(1)!r}, which is not a function (to=functions.NAME).")
        else:
            name = recipient.group(1).removeprefix("functions.")
            arguments = _json_object(body, f"the call of {name!r}")
            turn.items.append(arguments if isinstance(arguments, str) else _named(name, arguments))
    turn.content = "\n".join(content).strip()
    return turn


_GEMMA_OPEN = "<|tool_call>"
_GEMMA_CALL = re.compile(r"<\|tool_call>call:(\w+)\{(.*?)\}<tool_call\|>", re.DOTALL)
# key:<|"|>text<|"|> or key:bare; a text may span lines (verl's pattern stops a text at a line's end)
_GEMMA_ARGUMENT = re.compile(r'(\w+):(?:<\|"\|>(.*?)<\|"\|>|([^,}]*))', re.DOTALL)
_GEMMA_WORDS = {"true": True, "false": False, "null": None}


def _parse_gemma4(text: str, schemas: dict) -> ParsedTurn:
    start = text.find(_GEMMA_OPEN)
    turn = ParsedTurn(content=(text if start == -1 else text[:start]).strip())
    calls = _GEMMA_CALL.findall(text)
    for name, body in calls:
        arguments = {}
        for match in _GEMMA_ARGUMENT.finditer(body):
            key, quoted, bare = match.groups()
            arguments[key] = quoted if quoted is not None else _gemma_bare(bare.strip())
        turn.items.append(ToolCall(name, arguments))
    if text.count(_GEMMA_OPEN) > len(calls):
        turn.items.append(f"Error: a {_GEMMA_OPEN} not of the form {_GEMMA_OPEN}call:NAME{{key:value,...}}<tool_call|>.")
    return turn


def _gemma_bare(value: str):
    """An unquoted gemma4 value: true, false, null (any case), an integer, a number, else the text."""
    if value.lower() in _GEMMA_WORDS:
        return _GEMMA_WORDS[value.lower()]
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


_PARSERS = {"hermes": _parse_hermes, "gpt-oss": _parse_gpt_oss, "qwen3_coder": _parse_qwen3_coder, "glm": _parse_glm,
            "seed": _parse_seed, "minimax": _parse_minimax, "kimi": _parse_kimi, "deepseek_v4": _parse_deepseek_v4,
            "gemma4": _parse_gemma4,
            "qwen": _parse_hermes, "chatml": _parse_hermes}  # verl's SGLang-era names: Qwen's template, hermes tool calls
FORMATS = tuple(_PARSERS)
