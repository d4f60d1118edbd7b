"""Function tools (`multi_turn.function_tool_path`, verl 0.9's): the decorator's schema, the answers' shapes, the loading
errors, and calls in a tool rollout (the scripted engine of test_agent_loops.py; the loop and the tools are the real ones)."""

from __future__ import annotations

import pytest

from reinforge.config import load_config
from reinforge.errors import ConfigError
from reinforge.inference.tools import ReturnValueError, load_all_tools
from reinforge.inference.tools.functions import answer_of, load_function_tools
from tests.inference.test_agent_failures import added_text, run_texts
from tests.inference.test_agent_loops import tools_yaml

TOOLS = '''
import asyncio

from reinforge.inference.tools import function_tool


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@function_tool("lookup")
async def find(key: str, exact: bool = False):
    """Look a key up.

    Args:
        key: What to look up.
        exact: Whether to match the whole key.
    """
    await asyncio.sleep(0)
    return {"key": key, "exact": exact}, 0.25, {"hits": 1}


def helper(x):  # not a tool
    return x
'''


def write(tmp_path, text: str, name: str = "tools.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_schema_comes_from_the_signature_and_docstring_as_verls_does(tmp_path):
    tools = load_function_tools(write(tmp_path, TOOLS))
    assert list(tools) == ["add", "lookup"]
    assert tools["add"].get_openai_tool_schema() == {"type": "function", "function": {
        "name": "add", "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer", "description": "The first number."},
                                                        "b": {"type": "integer", "description": "The second number."}},
                       "required": ["a", "b"]}}}
    lookup = tools["lookup"].get_openai_tool_schema()["function"]
    assert lookup["name"] == "lookup" and lookup["parameters"]["required"] == ["key"]
    assert lookup["parameters"]["properties"]["exact"] == {"type": "boolean", "description": "Whether to match the whole key."}
    assert load_function_tools(tmp_path / "tools.py") is tools  # a file is imported once


def test_function_tools_are_given_to_the_chat_template_by_name_as_verl_orders_them(tmp_path):
    text = "from reinforge.inference.tools import function_tool\n" + "".join(
        f"@function_tool\ndef {name}(x: int):\n    '''Do {name}.\n\n    Args:\n        x: A number.\n    '''\n    return x\n"
        for name in ("zeta", "alpha", "mid"))
    assert list(load_function_tools(write(tmp_path, text))) == ["alpha", "mid", "zeta"]


@pytest.mark.parametrize("result, expected", [
    ("5", ("5", 0.0, {})),
    ({"a": 1, "b": "é"}, ('{"a": 1, "b": "é"}', 0.0, {})),
    (type("ToolResponse", (), {"text": "from .text"})(), ("from .text", 0.0, {})),
    (("ok", 0.5), ("ok", 0.5, {})),
    (("ok", None, None), ("ok", 0.0, {})),
    (("ok", 1, {"m": 2}), ("ok", 1.0, {"m": 2})),
    (("ok", "0.5"), ("ok", 0.5, {})),  # float(reward) and dict(metrics), as verl coerces them
    (("ok", None, [("k", 1)]), ("ok", 0.0, {"k": 1})),
    (7, ("7", 0.0, {})),
    ([1, 2], ("[1, 2]", 0.0, {})),
])
def test_answers_are_shaped_as_verl_shapes_them(result, expected):
    assert answer_of(result) == expected


def test_a_tuple_of_another_length_or_a_reward_that_is_no_number_is_a_wrong_answer():
    with pytest.raises(ReturnValueError, match=r"the reward must be a number and the metrics a mapping"):
        answer_of(("a", "high"))
    for result in ((), ("a", 1, {}, "extra")):
        with pytest.raises(ReturnValueError, match=r"a function tool returns an answer, or \(answer, reward\)"):
            answer_of(result)


@pytest.mark.parametrize("text, message", [
    ("from reinforge.inference.tools import function_tool\n@function_tool\ndef f(a: int):\n    return a\n",
     r"importing .*tools.py failed: line 2: .*@function_tool f: .*needs a type hint on every parameter and a Google-style"),
    ("from reinforge.inference.tools import function_tool\n@function_tool\ndef f(*a: int):\n    '''F.'''\n    return a\n",
     r"@function_tool f: the parameters \['a'\] take any number of arguments"),
    ("def f(a: int):\n    return a\n", r"function_tool_path: .*tools.py defines no tool; mark each function with @function_tool"),
    ("from verl.tools.function_tool import function_tool\n",
     r"No module named 'verl'.*\(verl is not a dependency of reinforge: import the decorator with `from "
     r"reinforge.inference.tools import function_tool`"),
    ("from reinforge.inference.tools import function_tool\n"
     "@function_tool('x', schema={'type': 'function', 'function': {'name': 'y'}})\ndef f(): pass\n"
     "@function_tool(schema={'type': 'function', 'function': {'name': 'x'}})\ndef g(): pass\n",
     r"tools.py defines two function tools named 'x'; rename one"),
])
def test_loading_errors_name_the_file_and_the_function(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_function_tools(write(tmp_path, text))


def test_a_function_tool_named_as_a_configured_tool_is_refused(tmp_path):
    functions = write(tmp_path, "from reinforge.inference.tools import function_tool\n"
                                "@function_tool('calculator', schema={'type': 'function', 'function': {'name': 'c'}})\n"
                                "def calc(expression: str): pass\n")
    with pytest.raises(ConfigError, match=r"the function tools \['calculator'\] have the names of tools of .*tool_config_path"):
        load_all_tools(tools_yaml(tmp_path), functions)


def test_the_model_calls_function_tools_beside_configured_ones(tok, tmp_path):
    functions = write(tmp_path, TOOLS)
    calls = ('<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
             '<tool_call>{"name": "lookup", "arguments": {"key": "k"}}</tool_call>'
             '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>')
    out = run_texts(tok, tmp_path, [[calls, "#### 5"]], function_tool_path=functions, tool_config_path=tools_yaml(tmp_path),
                    max_parallel_calls=3,
                    extra_infos=[{"index": 0, "tools_kwargs": {"add": {"create_kwargs": {"ground_truth": "5"}}}}])
    answers = added_text(tok, out, 0)
    assert answers.index("\n5<|im_end|>") < answers.index('{"key": "k", "exact": false}') < answers.index("\n42<|im_end|>")
    assert out["reward_scores"][0]["tool_rewards"] == [0.0, 0.25, 0.0]  # each call's step reward
    assert out["agent_metrics"][0]["tool_calls"] == 3 and out["agent_metrics"][0]["tool_errors"] == 0


def test_a_function_that_raises_is_the_rows_tool_error(tok, tmp_path):
    functions = write(tmp_path, "from reinforge.inference.tools import function_tool\n"
                                "@function_tool\ndef boom(x: int):\n    '''Fail.\n\n    Args:\n        x: Anything.\n    '''\n"
                                "    raise ValueError('no')\n")
    out = run_texts(tok, tmp_path, [['<tool_call>{"name": "boom", "arguments": {"x": 1}}</tool_call>', "done"]],
                    function_tool_path=functions)
    assert out["agent_metrics"][0]["tool_errors"] == 1
    assert "Error executing tool 'boom': no" in added_text(tok, out, 0)  # verl's answer to a failed call


def test_the_rollout_key_is_checked_at_start_and_the_data_key_follows_it(tmp_path, tiny_model_path):
    base = [f"actor_rollout_ref.model.path={tiny_model_path}", "data.train_files=/x.parquet",
            "actor_rollout_ref.rollout.multi_turn.enable=true"]
    with pytest.raises(ConfigError, match=r"multi_turn.function_tool_path='/nowhere/tools.py': no such file"):
        load_config([*base, "actor_rollout_ref.rollout.multi_turn.function_tool_path=/nowhere/tools.py"])
    functions = write(tmp_path, TOOLS)
    config, _ = load_config([*base, f"actor_rollout_ref.rollout.multi_turn.function_tool_path={functions}"])
    assert config.data.function_tool_path == functions  # verl's data key interpolates the rollout's


def test_qwen3_coder_calls_reach_function_tools_with_the_types_of_their_signature(tok, tmp_path):
    """multi_turn.format=qwen3_coder: the XML call's values arrive typed by the schema built from the signature."""
    call = "<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n</parameter>\n</function>\n</tool_call>"
    out = run_texts(tok, tmp_path, [[call, "#### 5"]], function_tool_path=write(tmp_path, TOOLS), format="qwen3_coder")
    assert "\n5<|im_end|>" in added_text(tok, out, 0)  # 2 + 3, not "2" + "3"
    assert out["agent_metrics"][0]["tool_calls"] == 1 and out["agent_metrics"][0]["tool_errors"] == 0
