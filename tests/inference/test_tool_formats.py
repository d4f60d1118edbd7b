"""Tool-call formats other than Hermes and Qwen3-Coder (`multi_turn.format`: glm, seed, minimax, kimi, deepseek_v4, gpt-oss,
gemma4): what each parser reads from a turn (values worked out by hand from the format), the tokens generation stops
at, and, in the tool agent, a turn ended by a stop token that the template's next message opens with (GLM), and the
call ids and names that a template puts in the answers (Kimi, gpt-oss).

The parsers were diff-tested against verl 0.9.1's on the same texts (equal calls); the cases where reinforge reads
more than verl (a gpt-oss call without `<|start|>assistant`, a gemma4 text over several lines) are asserted here."""

from __future__ import annotations

import pytest

from reinforge.config import load_config
from reinforge.config.rollout_schema import TOOL_CALL_FORMATS
from reinforge.config.schema import MultiTurnConfig
from reinforge.errors import ConfigError
from reinforge.inference.agent import AgentRunner
from reinforge.inference.engine import SamplingParams
from reinforge.inference.tools import FORMATS, parse_tool_calls, stop_token_ids
from tests.inference.test_agent_loops import ScriptedEngine, prompts_batch, row_ids, tools_yaml

SCHEMAS = {
    "get_weather": {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
    "search": {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
}


def calls(turn) -> list[tuple]:
    return [(c.name, c.arguments, c.id) for c in turn.calls]


def test_every_format_of_the_config_has_a_parser():
    assert FORMATS == TOOL_CALL_FORMATS


def test_verls_sglang_era_format_names_read_hermes_calls():
    """verl's gsm8k_multiturn_grpo.yaml (format: qwen) and older configs (chatml) name the Qwen template's format."""
    text = 'Let me compute.<tool_call>{"name": "calc", "arguments": {"answer": "7"}}</tool_call>'
    for name in ("qwen", "chatml"):
        turn = parse_tool_calls(text, name)
        assert turn.content == "Let me compute." and calls(turn) == [("calc", {"answer": "7"}, None)]
    load_config(["actor_rollout_ref.rollout.multi_turn.format=qwen", "data.train_files=x.parquet"])


def test_glm_reads_names_and_key_value_pairs_json_or_text():
    text = ("<think>the weather</think>Let me check.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris"
            "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
            "<tool_call>search<arg_key> query </arg_key><arg_value> {\"a\": [1, 2]} </arg_value></tool_call>"
            "<tool_call>get_weather</tool_call><tool_call>\n<arg_key>x</arg_key><arg_value>1</arg_value></tool_call><|observation|>")
    turn = parse_tool_calls(text, "glm")
    assert turn.content == "Let me check."
    assert calls(turn) == [("get_weather", {"city": "Paris", "days": 3}, None), ("search", {"query": {"a": [1, 2]}}, None),
                           ("get_weather", {}, None)]
    assert turn.errors == ["Error: a tool call without a function name."]
    assert parse_tool_calls("<tool_call>get_weather<arg_key>city</arg_key>", "glm").items == []  # never closed: no call


def test_seed_and_minimax_read_their_xml_calls():
    seed = ("I will look.<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=days>"
            " 3 </parameter>\n</function>\n</seed:tool_call><seed:tool_call>nothing</seed:tool_call>")
    turn = parse_tool_calls(seed, "seed")
    assert turn.content == "I will look." and calls(turn) == [("get_weather", {"city": "Paris", "days": 3}, None)]
    assert turn.errors == ["Error: a <seed:tool_call> block without a function call."]
    minimax = ('<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">"Paris"</parameter>\n'
               '<parameter name="days">[1, 2]</parameter>\n</invoke>\n<invoke name="search">\n<parameter name="query">'
               'red fox</parameter>\n</invoke>\n</minimax:tool_call>')
    assert calls(parse_tool_calls(minimax, "minimax")) == [("get_weather", {"city": "Paris", "days": [1, 2]}, None),
                                                           ("search", {"query": "red fox"}, None)]
    assert parse_tool_calls("<minimax:tool_call>x</minimax:tool_call>", "minimax").errors == [
        "Error: a <minimax:tool_call> block without a function call."]


def test_kimi_calls_keep_their_ids_and_find_their_tool():
    def section(*entries):
        return "<|tool_calls_section_begin|>" + "".join(
            f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{arguments}<|tool_call_end|>" for call_id, arguments in entries
        ) + "<|tool_calls_section_end|>"

    turn = parse_tool_calls("Checking." + section(("functions.get_weather:0", '{"city": "Paris"}'),
                                                  ("functions.search:1", '{"query": "q"}')), "kimi", SCHEMAS)
    assert turn.content == "Checking."
    assert calls(turn) == [("get_weather", {"city": "Paris"}, "functions.get_weather:0"),
                           ("search", {"query": "q"}, "functions.search:1")]
    guessed = parse_tool_calls(section(("lookup:0", '{"city": "P", "days": 1}'), ("functions.GET-WEATHER:2", "{}"),
                                       ("functions.nothing:3", '{"a": 1}')), "kimi", SCHEMAS)
    assert calls(guessed) == [
        ("get_weather", {"city": "P", "days": 1}, "lookup:0"),  # the one tool whose required parameters it gives
        ("get_weather", {}, "functions.GET-WEATHER:2"),  # the one tool whose name is in the id
        ("functions.nothing:3", {"a": 1}, "functions.nothing:3"),  # no tool: answered as an unknown function
    ]
    bad = parse_tool_calls(section(("functions.search:0", "not json"), ("functions.search:1", "[1]")), "kimi", SCHEMAS)
    assert bad.calls == [] and bad.errors == ["Error: the arguments of the call 'functions.search:0' are not valid JSON: not json",
                                              "Error: the arguments of the call 'functions.search:1' must be a JSON object."]


def test_deepseek_v4_reads_text_and_json_parameters():
    d = "｜DSML｜"
    text = (f'<think>plan</think>Answer.\n\n<{d}tool_calls>\n<{d}invoke name="get_weather">\n'
            f'<{d}parameter name="city" string="true"> Paris </{d}parameter>\n<{d}parameter name="days" string="false">5'
            f'</{d}parameter>\n<{d}parameter name="note" string="false">not json</{d}parameter>\n</{d}invoke>\n'
            f'</{d}tool_calls><｜end▁of▁sentence｜>')
    turn = parse_tool_calls(text, "deepseek_v4")
    assert turn.content == "Answer."
    assert calls(turn) == [("get_weather", {"city": " Paris ", "days": 5, "note": "not json"}, None)]


def test_gpt_oss_reads_calls_to_functions_and_skips_reasoning():
    text = ('<|channel|>analysis<|message|>maybe to=functions.search <|call|> later<|end|>'
            '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>')
    turn = parse_tool_calls(text, "gpt-oss")
    assert calls(turn) == [("get_weather", {"city": "Paris"}, None)] and turn.errors == []
    # a turn's first message, whose <|start|>assistant the prompt wrote (verl's pattern needs it in the turn)
    first = parse_tool_calls('<|channel|>commentary to=functions.search <|constrain|>json<|message|>{"query": "x"}<|call|>', "gpt-oss")
    assert calls(first) == [("search", {"query": "x"}, None)]
    other = parse_tool_calls('<|channel|>commentary to=browser.open <|message|>{}<|call|>', "gpt-oss")
    assert other.errors == ["Error: a call to 'browser.open', which is not a function (to=functions.NAME)."]
    assert parse_tool_calls('<|channel|>commentary to=functions.search<|message|>{"query"<|call|>', "gpt-oss").errors[0].startswith(
        "Error: the arguments of the call of 'search' are not valid JSON")
    final = parse_tool_calls("<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Sunny.<|return|>",
                             "gpt-oss")
    assert final.items == [] and final.content == "Sunny."


def test_gemma4_reads_typed_bare_values_and_quoted_texts():
    text = ('Sure.<|tool_call>call:get_weather{city:<|"|>Paris, France<|"|>,days:3,hot:true,rate:1.5,none:null,w:abc}'
            '<tool_call|><|tool_call>call:search{query:<|"|>line one\nline two<|"|>}<tool_call|><|tool_call>broken')
    turn = parse_tool_calls(text, "gemma4")
    assert turn.content == "Sure."
    assert calls(turn) == [
        ("get_weather", {"city": "Paris, France", "days": 3, "hot": True, "rate": 1.5, "none": None, "w": "abc"}, None),
        ("search", {"query": "line one\nline two"}, None),  # verl's pattern stops a quoted text at the line's end
    ]
    assert turn.errors == ["Error: a <|tool_call> not of the form <|tool_call>call:NAME{key:value,...}<tool_call|>."]


def test_stop_tokens_are_the_formats_token_when_the_tokenizer_has_it(tok):
    assert stop_token_ids("glm", tok) == [] and stop_token_ids("hermes", tok) == []
    tok.add_special_tokens({"additional_special_tokens": ["<|observation|>", "<tool_call|>"]})
    assert stop_token_ids("glm", tok) == tok.convert_tokens_to_ids(["<|observation|>"])
    assert stop_token_ids("gemma4", tok) == tok.convert_tokens_to_ids(["<tool_call|>"])
    assert stop_token_ids("kimi", tok) == tok.convert_tokens_to_ids(["<|im_end|>"])
    assert stop_token_ids("hermes", tok) == []


class StopEngine(ScriptedEngine):
    """A scripted turn ending with one of the request's stop tokens finishes with "stop"; records each request's stops."""

    def generate_batch(self, prompts, params, max_tokens=None, seeds=None):
        self.stops = getattr(self, "stops", []) + [params.stop_token_ids]
        outputs = super().generate_batch(prompts, params, max_tokens, seeds)
        for out in outputs:
            if out.token_ids[-1] in params.stop_token_ids:
                out.finish_reason = "stop"
        return outputs


# GLM's shape: no end-of-turn token; a role token opens each message, and the model stops at the next one it writes
GLM_STYLE = (
    "{% for m in messages %}{% if m['role'] == 'tool' %}{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}"
    "<|observation|>{% endif %}<tool_response>{{ m['content'] }}</tool_response>"
    "{% elif m['role'] == 'assistant' %}<|assistant|>\n{{ m['content'] }}{% for c in m.get('tool_calls') or [] %}"
    "<tool_call>{{ c['function']['name'] }}</tool_call>{% endfor %}"
    "{% else %}<|{{ m['role'] }}|>\n{{ m['content'] }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_a_glm_turn_stops_at_the_observation_token_which_the_tool_answer_does_not_repeat(tok, tmp_path):
    tok.add_special_tokens({"additional_special_tokens": ["<|observation|>", "<|user|>", "<|assistant|>"]})
    tok.chat_template = GLM_STYLE
    observation = tok.convert_tokens_to_ids("<|observation|>")
    prompts = prompts_batch(tok, [[{"role": "user", "content": "add 2 3"}]])
    prompt_ids = prompts["input_ids"][0].tolist()
    call = "<tool_call>calculator\n<arg_key>expression</arg_key>\n<arg_value>2+3</arg_value>\n</tool_call>"
    turn1 = tok(call, add_special_tokens=False)["input_ids"] + [observation]
    turn2 = tok("#### 5", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    engine = StopEngine([(prompt_ids, [turn1, turn2])])
    runner = AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path), format="glm"))
    out = runner.generate_sequences(engine, prompts, SamplingParams(max_tokens=200), tok.pad_token_id)

    assert engine.stops == [(observation,), (observation,)]  # both model turns may stop there
    tool_turn = tok("<tool_response>5</tool_response><|assistant|>", add_special_tokens=False)["input_ids"]
    _, response, mask = row_ids(out, 0)
    assert response == turn1 + tool_turn + turn2  # one <|observation|>: the model's
    assert mask == [1] * len(turn1) + [0] * len(tool_turn) + [1] * len(turn2)
    assert out["agent_metrics"][0]["tool_calls"] == 1 and out["agent_metrics"][0]["tool_errors"] == 0


# A template that names, in each answer, the call's id (as Kimi's does) and the tool called (as gpt-oss's does, from the
# assistant turn before the answers)
NAMING_TEMPLATE = (
    "{% set ns = namespace(calls=[]) %}{% for m in messages %}{% if m['role'] == 'assistant' and m.get('tool_calls') %}"
    "{% set ns.calls = m['tool_calls'] %}{% endif %}{% if m['role'] == 'tool' %}<|im_start|>tool\n## Return of "
    "{{ m.get('tool_call_id', '?') }} from {{ ns.calls[0]['function']['name'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_answers_carry_the_call_id_and_the_template_sees_the_real_calls(tok, tmp_path):
    tok.chat_template = NAMING_TEMPLATE
    prompts = prompts_batch(tok, [[{"role": "user", "content": "add 2 3"}]])
    prompt_ids = prompts["input_ids"][0].tolist()
    kimi_call = ('<|tool_calls_section_begin|><|tool_call_begin|>functions.calculator:0<|tool_call_argument_begin|>'
                 '{"expression": "2+3"}<|tool_call_end|><|tool_calls_section_end|>')
    turn1 = tok(kimi_call, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    turn2 = tok("#### 5", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    engine = StopEngine([(prompt_ids, [turn1, turn2])])
    runner = AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path), format="kimi"))
    out = runner.generate_sequences(engine, prompts, SamplingParams(max_tokens=200), tok.pad_token_id)

    assert engine.stops[0] == tuple(tok.convert_tokens_to_ids(["<|im_end|>"]))
    _, response, mask = row_ids(out, 0)
    added = tok.decode([t for t, m in zip(response, mask, strict=True) if m == 0])
    assert added == "\n<|im_start|>tool\n## Return of functions.calculator:0 from calculator\n5<|im_end|>\n<|im_start|>assistant\n"


# Gemma 4's shape: a turn of calls ends with <|tool_response>, which the answers then fill inside the same turn; an
# answer names its tool by looking up its tool_call_id among the turn's calls (neither has one here: None == None)
GEMMA_STYLE = (
    "{% set ns = namespace(calls=[], name='unknown') %}{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}{% set ns.calls = m.get('tool_calls') or [] %}<|turn>model\n{{ m['content'] }}"
    "{% for c in ns.calls %}<|tool_call>call:{{ c['function']['name'] }}{}<tool_call|>{% endfor %}"
    "{% if ns.calls %}<|tool_response>{% else %}<turn|>\n{% endif %}"
    "{% elif m['role'] == 'tool' %}{% set ns.name = 'unknown' %}{% for c in ns.calls %}"
    "{% if ns.name == 'unknown' and c.get('id') == m.get('tool_call_id') %}{% set ns.name = c['function']['name'] %}{% endif %}"
    "{% endfor %}response:{{ ns.name }}{value:<|\"|>{{ m['content'] }}<|\"|>}<tool_response|>"
    "{% else %}<|turn>{{ m['role'] }}\n{{ m['content'] }}<turn|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt and messages[-1]['role'] != 'tool' %}<|turn>model\n{% endif %}"
)
GEMMA_TOKENS = ["<|turn>", "<turn|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>']


def test_a_gemma4_answer_fills_the_turn_its_call_left_open_and_names_the_tool_of_its_call(tok, tmp_path):
    tok.add_special_tokens({"additional_special_tokens": GEMMA_TOKENS})
    tok.chat_template = GEMMA_STYLE
    prompts = prompts_batch(tok, [[{"role": "user", "content": "add 2 3"}]])
    stop = tok.convert_tokens_to_ids("<tool_call|>")
    turn1 = tok('<|tool_call>call:calculator{expression:<|"|>2+3<|"|>}', add_special_tokens=False)["input_ids"] + [stop]
    turn2 = tok("#### 5", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    engine = StopEngine([(prompts["input_ids"][0].tolist(), [turn1, turn2])])
    runner = AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path), format="gemma4"))
    out = runner.generate_sequences(engine, prompts, SamplingParams(max_tokens=200), tok.pad_token_id)

    assert engine.stops[0] == (stop,)
    _, response, mask = row_ids(out, 0)
    # what the template writes after <tool_call|> in a turn of calls (not the newline it writes after an ended turn),
    # then the answer, with the name of the tool its call called
    answer = tok('<|tool_response>response:calculator{value:<|"|>5<|"|>}<tool_response|>', add_special_tokens=False)["input_ids"]
    assert response == turn1 + answer + turn2
    assert mask == [1] * len(turn1) + [0] * len(answer) + [1] * len(turn2)


def test_a_template_without_a_system_role_renders_the_answers_after_a_stand_in_without_one(tok, tmp_path):
    tok.chat_template = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
                         + NAMING_TEMPLATE)
    prompts = prompts_batch(tok, [[{"role": "user", "content": "add 2 3"}]])
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>'
    turns = [tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for text in (call, "#### 5")]
    engine = StopEngine([(prompts["input_ids"][0].tolist(), turns)])
    out = AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path))).generate_sequences(
        engine, prompts, SamplingParams(max_tokens=200), tok.pad_token_id)
    _, response, mask = row_ids(out, 0)
    added = tok.decode([t for t, m in zip(response, mask, strict=True) if m == 0])
    assert added == "\n<|im_start|>tool\n## Return of ? from calculator\n5<|im_end|>\n<|im_start|>assistant\n"  # no id: none


def test_a_template_that_cannot_render_tool_answers_is_refused_when_the_rollout_is_set_up(tok, tmp_path):
    # transformers renders templates in a sandbox that refuses list.append (as some published templates use it)
    tok.chat_template = ("{% set ids = [] %}{% for m in messages %}{% for c in m.get('tool_calls') or [] %}"
                         "{% set _ = ids.append(c['id']) %}{% endfor %}{% endfor %}" + NAMING_TEMPLATE)
    with pytest.raises(ConfigError, match=r"the chat template cannot render 1 tool answer\(s\) after an assistant turn that "
                                          r"makes 1 tool call\(s\): SecurityError: .*append.*custom_chat_template"):
        AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path)))
    with pytest.raises(ConfigError) as refused:  # two calls fail as one does: no advice to make one call a turn
        AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path), max_parallel_calls=2))
    assert "makes 2 tool call(s): SecurityError" in str(refused.value) and "max_parallel_calls" not in str(refused.value)


def test_a_template_of_one_call_a_turn_is_refused_at_start_when_turns_may_make_several(tok, tmp_path):
    tok.chat_template = ("{% for m in messages %}{% if (m.get('tool_calls') or []) | length > 1 %}"
                         "{{ raise_exception('This model only supports single tool-calls at once!') }}{% endif %}{% endfor %}"
                         + NAMING_TEMPLATE)
    AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path)))  # one call a turn: fine
    with pytest.raises(ConfigError, match=r"after an assistant turn that makes 2 tool call\(s\) \(it takes one call a "
                                          r"turn: set actor_rollout_ref.rollout.multi_turn.max_parallel_calls=1\): "
                                          r"TemplateError: This model only supports single tool-calls at once!"):
        AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path), max_parallel_calls=3))


def test_turns_that_are_not_in_the_format_or_odd_ids_never_raise():
    assert parse_tool_calls("word " * 20000, "gpt-oss").items == []  # no harmony message: no call (read in one pass)
    odd = parse_tool_calls('<|tool_calls_section_begin|><|tool_call_begin|>functions.search\n:0<|tool_call_argument_begin|>'
                           '{"query": "q"}<|tool_call_end|>', "kimi", SCHEMAS)
    assert calls(odd) == [("search", {"query": "q"}, "functions.search\n:0")]


def test_a_user_reply_follows_what_the_template_writes_after_the_token_the_model_stopped_at(tok, tmp_path):
    """A base model's tokenizer ends sequences with <|endoftext|>, while the chat template ends turns with <|im_end|>
    and a newline: the model stops at <|im_end|>, and the reply opens with the template's newline."""
    config_path = tmp_path / "interaction.yaml"
    config_path.write_text("interaction:\n  - name: checker\n    class_name: gsm8k\n")
    tok.eos_token = "<|endoftext|>"
    prompts = prompts_batch(tok, [[{"role": "user", "content": "2 + 3?"}]],
                            [{"index": 0, "interaction_kwargs": {"name": "checker", "ground_truth": "5"}}])
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    turns = [tok(text, add_special_tokens=False)["input_ids"] + [im_end] for text in ("#### 4", "#### 5")]
    engine = StopEngine([(prompts["input_ids"][0].tolist(), turns)])
    runner = AgentRunner(tok, MultiTurnConfig(enable=True, interaction_config_path=str(config_path), max_user_turns=3))
    out = runner.generate_sequences(engine, prompts, SamplingParams(max_tokens=100, stop_token_ids=(im_end,)), tok.pad_token_id)
    _, response, mask = row_ids(out, 0)
    user = tok.decode([t for t, m in zip(response, mask, strict=True) if m == 0])
    assert user == ("\n<|im_start|>user\nYour response is incorrect! You need to reflect on your answer and try again."
                    "<|im_end|>\n<|im_start|>assistant\n")
    assert out["reward_scores"][0]["interaction_score"] == 1.0
