"""Tools: the Hermes parser, truncation, the built-in tools, and loading verl's tool config YAML."""

import asyncio

import pytest

from reinforge.errors import ConfigError
from reinforge.inference.tools import CalculatorTool, Gsm8kTool, PythonTool, load_tools, parse_tool_calls, truncate


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


def test_truncate_keeps_the_chosen_side():
    text = "abcdefghij"
    assert truncate(text, 4, "left") == "abcd...(truncated)"
    assert truncate(text, 4, "right") == "(truncated)...ghij"
    assert truncate(text, 5, "middle") == "ab...(truncated)...hij"
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
        iid = await checker.create(create_kwargs={"ground_truth": "1,234"})
        assert (await checker.execute(iid, {"answer": "12"}))[0] == "Incorrect."
        assert await checker.calc_reward(iid) == 0.0
        assert (await checker.execute(iid, {"answer": "$1234"}))[0] == "Correct."
        assert await checker.calc_reward(iid) == 1.0
        await checker.release(iid)

        python = PythonTool({"timeout_s": 5})
        out, _, metrics = await python.execute("x", {"code": "print(sum(range(5)))"})
        assert out == "10\n" and metrics["status"] == "ok"
        out, _, metrics = await python.execute("x", {"code": "raise ValueError('boom')"})
        assert "boom" in out and metrics["error"] == 1
    asyncio.run(scenario())


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


@pytest.mark.parametrize(("content", "message"), [
    ("tools: 3", "must hold a list under 'tools:'"),
    ("tools: [{config: {}}]", "tools[0]: each entry needs a class_name"),
    ("tools: [{class_name: no_such_pkg.Tool}]", "cannot import module 'no_such_pkg'"),
    ("tools: [{class_name: reinforge.inference.tools.NoTool}]", "has no class 'NoTool'"),
    ("tools: [{class_name: calculator}, {class_name: calculator}]", "a second tool named 'calculator'"),
    ("tools: [", "is not valid YAML"),
])
def test_load_tools_errors_name_the_file_and_entry(tmp_path, content, message):
    config = tmp_path / "tools.yaml"
    config.write_text(content)
    with pytest.raises(ConfigError, match="tools.yaml") as err:
        load_tools(config)
    assert message in str(err.value)
    with pytest.raises(ConfigError, match="tool_config_path='missing.yaml': no such file"):
        load_tools("missing.yaml")
