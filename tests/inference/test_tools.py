"""Tools: the Hermes parser, truncation, the built-in tools, and loading verl's tool config YAML."""

import asyncio
import time

import pytest

from reinforge.errors import ConfigError
from reinforge.inference.tools import (
    CalculatorTool,
    Gsm8kTool,
    PythonTool,
    ReturnValueError,
    ToolCall,
    execute_result,
    load_tools,
    parse_tool_calls,
    truncate,
)
from reinforge.inference.tools.base import plain_schema
from reinforge.inference.tools.builtin import evaluate_arithmetic


def test_parser_reads_calls_and_reports_malformed_ones_without_raising():
    text = ('I will add. <tool_call>{"name": "calculator", "arguments": {"expression": "1+2"}}</tool_call>'
            '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"print(1)\\"}"}</tool_call>'
            '<tool_call>{"name": oops}</tool_call><tool_call>[1, 2]</tool_call>'
            '<tool_call>{"name": "x", "arguments": 3}</tool_call> bye <tool_call>{"name"')
    turn = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in turn.calls] == [("calculator", {"expression": "1+2"}), ("python", {"code": "print(1)"})]
    assert len(turn.errors) == 4
    assert "not valid JSON" in turn.errors[0] and "JSON object" in turn.errors[1]
    assert "arguments of tool 'x' must be a JSON object" in turn.errors[2]
    assert "was not closed" in turn.errors[3]
    assert turn.content.startswith("I will add.") and "bye" in turn.content
    assert parse_tool_calls("no calls here").calls == [] and parse_tool_calls("no calls here").errors == []
    # verl's parser needs "arguments" too: a call without them is malformed
    assert parse_tool_calls('<tool_call>{"name": "calculator"}</tool_call>').errors[0].startswith("Error: a tool call must be")


def test_parser_keeps_calls_and_malformed_calls_in_the_order_written():
    turn = parse_tool_calls('<tool_call>not json</tool_call><tool_call>{"name": "calculator", "arguments": {}}</tool_call>')
    assert isinstance(turn.items[0], str) and turn.items[0].startswith("Error: the tool call is not valid JSON")
    assert turn.items[1] == ToolCall("calculator", {})


def test_truncate_cuts_the_side_named_as_verl():
    # verl's tool agent loop: left drops the beginning, right the end, middle keeps limit // 2 of each end
    text = "abcdefghij"
    assert truncate(text, 4, "left") == "(truncated)...ghij"
    assert truncate(text, 4, "right") == "abcd...(truncated)"
    assert truncate(text, 5, "middle") == "ab...(truncated)...ij"
    assert truncate(text, 1, "middle") == "...(truncated)..."  # verl's text[-0:] would keep it all
    assert truncate(text, 10, "middle") == text


def test_builtin_tools():
    async def scenario():
        calc = CalculatorTool()
        iid = await calc.create()
        assert (await calc.execute(iid, {"expression": "(3 + 4) * 2 - 10 / 4"}))[0] == "11.5"
        assert (await calc.execute(iid, {"expression": "2 ** 10"}))[0] == "1024"
        answer, reward, metrics = await calc.execute(iid, {"expression": "__import__('os').getcwd()"})
        assert answer.startswith("Error: cannot evaluate") and metrics == {"error": 1} and reward == 0.0
        assert (await calc.execute(iid, {"expression": "1/0"}))[0].startswith("Error")

        checker = Gsm8kTool()
        iid = await checker.create(create_kwargs={"ground_truth": "1234"})  # verl's flexible extraction: "1,234" would not match
        assert (await checker.execute(iid, {"answer": "12"})) == ("Current parsed answer='12' reward=0.0", -0.05, {})
        assert await checker.calc_reward(iid) == 0.0
        assert (await checker.execute(iid, {"answer": "$1234"})) == ("Current parsed answer='$1234' reward=1.0", 0.0, {})
        assert await checker.calc_reward(iid) == 1.0
        await checker.release(iid)

        python = PythonTool({"timeout_s": 5})
        out, _, metrics = await python.execute("x", {"code": "print(sum(range(5)))"})
        assert out == "10\n" and metrics["status"] == "ok"
        out, _, metrics = await python.execute("x", {"code": "raise ValueError('boom')"})
        assert "boom" in out and metrics["error"] == 1
    asyncio.run(scenario())


def test_gsm8k_tool_scores_as_verls_gsm8k_tool():
    """verl's Gsm8kTool: "#### " put in front of the answer when missing, the GSM8K scorer in flexible mode (the last
    number), a -0.05 step reward for an answer that does not improve the score."""
    async def score(answer: str) -> tuple[float, float]:
        tool = Gsm8kTool()
        iid = await tool.create(create_kwargs={"ground_truth": "72"})
        _, step_reward, _ = await tool.execute(iid, {"answer": answer})
        return await tool.calc_reward(iid), step_reward

    for answer, expected in (("72", (1.0, 0.0)), ("#### 72", (1.0, 0.0)), ("The answer is 72", (1.0, 0.0)),
                             ("$72", (1.0, 0.0)), ("72.0", (0.0, -0.05)), ("71", (0.0, -0.05)), ("", (0.0, -0.05))):
        assert asyncio.run(score(answer)) == expected, answer


@pytest.mark.parametrize("expression", [
    "(((9**99)**99)**99)**99", "9**9**9**9", "2**10000000", "10**4000 * 10**4000", "(10**3000)**0.5", "2.0**(10**3000)",
    "-(7**5000)**2", "1" + "+1" * 5000, "(" * 300 + "1" + ")" * 300, "(-8)**0.5", "9" * 2001,
])
def test_calculator_answers_every_expression_within_milliseconds(expression):
    """Integers grow without bound in Python: a result's size is estimated from its operands' before it is computed,
    and one that would pass MAX_BITS (or an expression too long or too deep) is refused, not computed."""
    start = time.perf_counter()
    answer, _, metrics = asyncio.run(CalculatorTool().execute("i", {"expression": expression}))
    assert time.perf_counter() - start < 0.05, expression
    assert answer.startswith("Error: cannot evaluate") and metrics == {"error": 1}, answer


def test_calculator_still_computes_large_but_bounded_numbers():
    assert evaluate_arithmetic("2**1000") == 2**1000 and evaluate_arithmetic("(9**99)**9") == 9**891
    assert evaluate_arithmetic("1**(10**500)") == 1 and evaluate_arithmetic("2**-2") == 0.25


@pytest.mark.parametrize(("result", "message"), [
    (42, "returned 42 (int) from execute; it returns (response, step_reward, metrics)"),
    ((42, 0.0, {}), "returned the response 42 (int); a response is text, None, {'text': ...} or an object with .text"),
    (({"text": 3}, 0.0, {}), "returned the response {'text': 3} (dict)"),
    (("ok", "high", {}), "returned the step reward 'high' (str), not a number"),
    (("ok", 0.0, ["not", "a", "dict"]), "returned the metrics ['not', 'a', 'dict'] (list) from execute, not a dict"),
])
def test_execute_results_of_the_wrong_shape_are_named(result, message):
    """verl's ToolResponse.text is a string: a number as the response is the tool's error, not an empty message."""
    with pytest.raises(ReturnValueError) as error:
        execute_result(result)
    assert message in str(error.value)


def test_execute_results_of_the_accepted_shapes():
    class Response:
        text = "from .text"

    assert execute_result(("text", 1, None)) == ("text", 1.0, {})
    assert execute_result(({"text": "from a dict"}, None, {"error": 1})) == ("from a dict", None, {"error": 1})  # no reward
    assert execute_result([Response(), True, {}]) == ("from .text", 1.0, {})
    assert execute_result((None, 0.5, {})) == ("", 0.5, {})


USER_TOOL = '''
from reinforge.inference.tools import BaseTool

class Echo(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return {"text": parameters["say"] * self.config["times"]}, 0.5, {}
'''


def test_load_tools_from_yaml(tmp_path):
    (tmp_path / "my_tools.py").write_text(USER_TOOL)
    config = tmp_path / "tools.yaml"
    config.write_text(f"""tools:
  - class_name: calculator
    config: {{type: native}}
  - class_name: reinforge.inference.tools.builtin.Gsm8kTool
  - class_name: {tmp_path / 'my_tools.py'}:Echo
    config: {{times: 2}}
    tool_schema: {{type: function, function: {{name: echo, parameters: {{type: object, properties: {{say: {{type: string}}}}}}}}}}
""")
    tools = load_tools(config)
    assert sorted(tools) == ["calculator", "check_answer", "echo"]
    assert tools["echo"].config == {"times": 2}
    assert asyncio.run(tools["echo"].execute("i", {"say": "hi"})) == ({"text": "hihi"}, 0.5, {})


def test_a_relative_tool_file_is_found_beside_the_yaml_file(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "my_tools.py").write_text(USER_TOOL)
    (tmp_path / "cfg" / "tools.yaml").write_text("tools:\n  - class_name: my_tools.py:Echo\n    config: {times: 3}\n"
                                                 "    tool_schema: {type: function, function: {name: echo}}\n")
    monkeypatch.chdir(tmp_path)  # not the YAML file's folder: my_tools.py is not here
    assert asyncio.run(load_tools("cfg/tools.yaml")["echo"].execute("i", {"say": "a"})) == ({"text": "aaa"}, 0.5, {})


def test_the_python_tool_called_without_code_answers_an_error():
    from reinforge.inference.tools.builtin import PythonTool

    for parameters in ({"cod": "print(1)"}, {}):
        text, reward, metrics = asyncio.run(PythonTool().execute("i", parameters))
        assert text.startswith("Error: python takes the argument 'code'") and metrics == {"error": 1} and reward == 0.0
    assert asyncio.run(PythonTool().execute("i", {"code": "print(6 * 7)"}))[0] == "42\n"


def test_the_python_tool_answers_a_sandbox_failure_without_the_launchers_traceback(monkeypatch):
    from reinforge.inference.tools.builtin import PythonTool
    from reinforge.reward import sandbox
    from reinforge.reward.sandbox.local import RunResult

    failed = RunResult("sandbox_error", 1, "", 'Traceback (most recent call last):\n  File "/host/path/_launcher.py"\nOSError: x',
                       0.1, "the sandbox could not run the program: OSError: x", "new session")
    monkeypatch.setattr(sandbox, "run_code", lambda *args, **kwargs: failed)
    text, _, metrics = asyncio.run(PythonTool().execute("i", {"code": "print(1)"}))
    assert text == "Error (sandbox_error): the sandbox could not run the program: OSError: x\n"
    assert metrics == {"status": "sandbox_error", "error": 1}


def test_a_tool_schema_keeps_the_fields_verls_pydantic_schema_knows(tmp_path):
    """verl validates tool_schema into OpenAIFunctionToolSchema, which drops what it does not know (a property's items,
    minimum, default; a function's extra keys), and dumps it without unset or None fields: the model sees that."""
    (tmp_path / "my_tools.py").write_text(USER_TOOL)
    config = tmp_path / "tools.yaml"
    config.write_text(f"""tools:
  - class_name: {tmp_path / 'my_tools.py'}:Echo
    config: {{times: 1}}
    tool_schema:
      type: function
      function:
        name: echo
        description: Say it.
        examples: [hi]
        parameters:
          type: object
          additionalProperties: false
          properties:
            say: {{type: string, description: what, default: hi}}
            times: {{type: array, items: {{type: integer}}, minimum: 1, enum: [[1], [2]]}}
          required: [say]
""")
    schema = plain_schema(load_tools(config)["echo"].get_openai_tool_schema())
    assert schema == {"type": "function", "function": {
        "name": "echo", "description": "Say it.",
        "parameters": {"type": "object", "properties": {"say": {"type": "string", "description": "what"},
                                                        "times": {"type": "array", "enum": [[1], [2]]}},
                       "required": ["say"]}}}


def test_verls_own_gsm8k_tool_and_interaction_class_names_are_the_built_ins(tmp_path):
    from reinforge.inference.interactions import Gsm8kInteraction, load_interactions

    config = tmp_path / "gsm8k_tool_config.yaml"  # verl's examples/sglang_multiturn/config/tool_config, as written there
    for class_name in ("verl.tools.gsm8k_tool.Gsm8kTool", "verl.workers.tool.gsm8k_tool.Gsm8kTool"):
        config.write_text(f"""tools:
  - class_name: "{class_name}"
    config: {{}}
    tool_schema:
      type: "function"
      function:
        name: "calc_gsm8k_reward"
        parameters: {{type: "object", properties: {{answer: {{type: "string"}}}}, required: ["answer"]}}
""")
        assert isinstance(load_tools(config)["calc_gsm8k_reward"], Gsm8kTool)
    interactions = tmp_path / "interaction_config.yaml"
    interactions.write_text("interaction:\n  - name: gsm8k\n    class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n"
                            "    config: {}\n")
    assert isinstance(load_interactions(interactions)["gsm8k"], Gsm8kInteraction)
    for entry, message in (("config: {retry_mesage: Wrong}", "config has retry_mesage (did you mean retry_message?); the gsm8k "
                                                             "interaction's settings are retry_message"),
                           ("confg: {}", "unknown key 'confg' (did you mean 'config'?); an entry has name, class_name, config")):
        interactions.write_text(f"interaction:\n  - name: gsm8k\n    class_name: gsm8k\n    {entry}\n")
        with pytest.raises(ConfigError, match=r"interaction_config.yaml, interaction\[0\]: ") as error:
            load_interactions(interactions)
        assert message in str(error.value)
    config.write_text("tools:\n  - class_name: verl.tools.search_tool.SearchTool\n")
    with pytest.raises(ConfigError, match=r"cannot import module 'verl\.tools\.search_tool'.*verl is not a dependency of "
                                          r"reinforge: its SearchTool needs verl installed; reinforge's built-in ones are "
                                          r"calculator, gsm8k, python"):
        load_tools(config)


@pytest.mark.parametrize(("content", "message"), [
    ("tools: 3", "must hold a list under 'tools:'"),
    ("tools: [{config: {}}]", "tools[0]: each entry needs a class_name"),
    ("tools: [{class_name: no_such_pkg.Tool}]", "cannot import module 'no_such_pkg'"),
    ("tools: [{class_name: reinforge.inference.tools.NoTool}]", "has no class 'NoTool'"),
    ("tools: [{class_name: calculator}, {class_name: calculator}]", "a second tool named 'calculator'"),
    ("tools: [", "is not valid YAML"),
    ("tools: [{class_name: calculator, tool_schema: calculator}]",
     "tools[0]: tool_schema must be a mapping (an OpenAI function schema: {type: function, function: {name, description, "
     "parameters}}), not 'calculator' (str)"),
    ("tools: [{class_name: calculator, config: [timeout_s, 5]}]",
     "tools[0]: config must be a mapping (the keyword settings given to the class, e.g. {timeout_s: 5}), not "
     "['timeout_s', 5] (list)"),
    ("tools: [{class_name: reinforge.inference.tools.builtin.PythonTool, config: {timeout_s: 5}, tool_schema: {function: x}}]",
     "tools[0]: the tool has no tool_schema.function.name to be called by"),
])
def test_load_tools_errors_name_the_file_and_entry(tmp_path, content, message):
    config = tmp_path / "tools.yaml"
    config.write_text(content)
    with pytest.raises(ConfigError, match="tools.yaml") as err:
        load_tools(config)
    assert message in str(err.value)
    with pytest.raises(ConfigError, match="tool_config_path='missing.yaml': no such file"):
        load_tools("missing.yaml")


def test_a_tool_whose_init_raises_is_a_config_error_naming_the_file_and_class(tmp_path):
    (tmp_path / "needs_key.py").write_text(
        "from reinforge.inference.tools import BaseTool\n\n"
        "class NeedsKey(BaseTool):\n"
        "    def __init__(self, config, tool_schema):\n"
        "        super().__init__(config, tool_schema)\n"
        "        self.key = config['api_key']\n")
    config = tmp_path / "tools.yaml"
    config.write_text(f"tools:\n  - class_name: {tmp_path / 'needs_key.py'}:NeedsKey\n"
                      "    tool_schema: {type: function, function: {name: s}}\n")
    with pytest.raises(ConfigError) as error:
        load_tools(config)
    assert f"{config}, tools[0]: building {tmp_path / 'needs_key.py'}:NeedsKey failed: KeyError: 'api_key'" in str(error.value)


def test_a_dotted_class_name_finds_a_module_in_the_current_directory(tmp_path, monkeypatch):
    """As under `python -m`: the `reinforge` console script does not put the current directory on sys.path itself."""
    (tmp_path / "cwd_tools_module.py").write_text(USER_TOOL)
    (tmp_path / "tools.yaml").write_text("tools:\n  - class_name: cwd_tools_module.Echo\n"
                                         "    tool_schema: {type: function, function: {name: echo}}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    assert sorted(load_tools("tools.yaml")) == ["echo"]
    assert str(tmp_path) not in __import__("sys").path  # only while the user's module imports


QWEN3_SCHEMAS = {"search": {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
    "query": {"type": "string"}, "limit": {"type": "integer"}, "score": {"type": "number"}, "exact": {"type": "boolean"},
    "filters": {"type": "object"}, "tags": {"type": "array"}}}}}}


def test_qwen3_coder_calls_are_read_with_the_types_of_the_tool_schema_as_verl_reads_them():
    text = ("Let me look.\n<tool_call>\n<function=search>\n<parameter=query>\nred fox\n</parameter>\n"
            "<parameter=limit>\n3\n</parameter>\n<parameter=score>\n2.0\n</parameter>\n<parameter=exact>\nTrue\n</parameter>\n"
            "<parameter=filters>\n{\"year\": 2024}\n</parameter>\n<parameter=tags>\n['a', 'b']\n</parameter>\n"
            "<parameter=other>\n7\n</parameter>\n<parameter=note>\nnull\n</parameter>\n</function>\n</tool_call>"
            "<tool_call><function=search><parameter=limit>many</parameter></function></tool_call>")
    turn = parse_tool_calls(text, "qwen3_coder", QWEN3_SCHEMAS)
    assert turn.content == "Let me look." and turn.errors == []
    assert [(c.name, c.arguments) for c in turn.calls] == [
        ("search", {"query": "red fox", "limit": 3, "score": 2, "exact": True, "filters": {"year": 2024}, "tags": ["a", "b"],
                    "other": "7", "note": None}),
        ("search", {"limit": "many"}),  # a value that does not convert stays text, as verl's
    ]


def test_qwen3_coder_cut_off_calls_and_malformed_tags():
    cut = parse_tool_calls("<tool_call>\n<function=search>\n<parameter=query>\nfox\n</parameter>\n<parameter=lim",
                           "qwen3_coder", QWEN3_SCHEMAS)
    assert [(c.name, c.arguments) for c in cut.calls] == [("search", {"query": "fox"})] and len(cut.errors) == 1
    assert parse_tool_calls("no calls <function=search>", "qwen3_coder").items == []  # no <tool_call>: no call, as verl
    bad = parse_tool_calls("<tool_call><function=search</function></tool_call>", "qwen3_coder")
    assert bad.calls == [] and bad.errors == ["Error: the tool call <function=search has no '>' after the function name."]


@pytest.mark.parametrize(("entry", "message"), [
    ("class_name: calculater", "class_name 'calculater' is not a built-in tool (calculator, gsm8k, python; did you mean "
                               "'calculator'?) nor a class path"),
    ("class_name: python\n    config: {timeout_s: 5s}", "config timeout_s='5s': a number > 0 (default 5.0)"),
    ("class_name: python\n    config: {memroy_mb: 64}",
     "config has memroy_mb (did you mean memory_mb?); the python tool's settings are timeout_s, memory_mb"),
    ("class_name: calculator\n    config: {max_digts: 5}", "config has max_digts; the calculator tool takes no settings"),
    ("class_name: gsm8k\n    config: {type: native, reward_scale: 2}", "config has reward_scale; the gsm8k tool takes no settings"),
    ("class_name: calculator\n    confg: {}\n    tool_shema: {}", "unknown keys 'confg' (did you mean 'config'?), 'tool_shema' "
                                                             "(did you mean 'tool_schema'?); an entry has class_name, config, "
                                                             "tool_schema"),
    ("class_name: helpers/my_tools.py:Missing", "helpers/my_tools.py does not exist"),
])
def test_tool_file_mistakes_name_the_entry(tmp_path, entry, message):
    from reinforge.errors import ConfigError
    from reinforge.inference.tools import load_tools

    (tmp_path / "tools.yaml").write_text(f"tools:\n  - {entry}\n")
    with pytest.raises(ConfigError, match=r"tools.yaml, tools\[0\]: ") as error:
        load_tools(tmp_path / "tools.yaml")
    assert message in str(error.value)
