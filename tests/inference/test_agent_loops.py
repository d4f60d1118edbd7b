"""Agent loops: token-in/token-out, masks, budget, tools, interactions and the text game.

The engine here plays scripted turns (exact token ids, chosen so that re-tokenising them would
give different ids) because these tests must know the model's tokens exactly; the loops, the
engine's request batching, the tokenizer and the chat templates are the real ones. The agent tests
with a real model generating are in test_agent_end_to_end.py; failing tools, interactions, environments and
agent-loop configs in test_agent_failures.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from reinforge.batch import Batch
from reinforge.cli import main
from reinforge.config.schema import MultiTurnConfig
from reinforge.environment.dataset import collate_prompts
from reinforge.errors import DataError
from reinforge.inference.agent import AgentRunner
from reinforge.inference.engine import GenerationOutput, InferenceEngine, SamplingParams
from reinforge.inference.seeds import derive_seed
from reinforge.reward.manager.naive import NaiveRewardManager
from reinforge.reward.registry import default_compute_score

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# ChatML that drops the thinking of every assistant turn but the last, as reasoning models' templates do
THINK_STRIPPING_TEMPLATE = (
    "{% for message in messages %}{% set content = message['content'] %}"
    "{% if message['role'] == 'assistant' and not loop.last %}{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + content + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>'


class ScriptedEngine(InferenceEngine):
    """Answers each request with its conversation's next scripted turn; records every batch it ran."""

    def __init__(self, scripts: list[tuple[list[int], list[list[int]]]]):
        super().__init__()
        self.scripts = [(prompt, list(turns)) for prompt, turns in scripts]
        self.batches: list[list[list[int]]] = []
        self.seeds: list[list[int | None] | None] = []  # each batch's per-request seeds

    def generate_batch(self, prompts, params, max_tokens=None, seeds=None):
        self.batches.append(prompts)
        self.seeds.append(seeds)
        outputs = []
        for row, prompt in enumerate(prompts):
            turns = next(turns for start, turns in self.scripts if prompt[: len(start)] == start)
            ids = turns.pop(0)[: params.max_tokens if max_tokens is None else max_tokens[row]]
            outputs.append(GenerationOutput(ids, [-0.5] * len(ids), "stop" if ids[-1] == 2 else "length"))
        return outputs


def char_ids(tok, text: str) -> list[int]:
    """A valid but non-canonical tokenization (one piece per character) that re-tokenising would merge."""
    ids = []
    for piece in text.replace("<tool_call>", "\0<tool_call>\0").replace("</tool_call>", "\0</tool_call>\0").split("\0"):
        ids += tok(piece, add_special_tokens=False)["input_ids"] if "tool_call>" in piece else \
            [i for c in piece for i in tok(c, add_special_tokens=False)["input_ids"]]
    return ids


def prompts_batch(tok, rows: list[list[dict]], extra_infos=None, agent_names=None) -> Batch:
    items = [{"input_ids": torch.tensor(tok(tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False),
                                             add_special_tokens=False)["input_ids"])} for m in rows]
    batch = Batch.from_dict(collate_prompts(items, tok.pad_token_id))
    batch["raw_prompt"] = rows
    batch["extra_info"] = extra_infos or [{"index": i} for i in range(len(rows))]
    if agent_names:
        batch["agent_name"] = agent_names
    return batch


def row_ids(batch: Batch, row: int) -> tuple[list[int], list[int], list[int]]:
    prompt = batch["prompts"][row][batch["attention_mask"][row, : batch["prompts"].shape[1]].bool()].tolist()
    valid = batch["attention_mask"][row, batch["prompts"].shape[1]:].bool()
    return prompt, batch["responses"][row][valid].tolist(), batch["response_mask"][row][valid].tolist()


def tools_yaml(tmp_path) -> str:
    path = tmp_path / "tools.yaml"
    path.write_text("tools:\n  - class_name: calculator\n")
    return str(path)


def test_model_tokens_are_kept_exactly_and_only_tool_tokens_are_added(tok, tmp_path):
    tok.chat_template = THINK_STRIPPING_TEMPLATE
    messages = [{"role": "user", "content": "add 2 3"}]
    prompts = prompts_batch(tok, [messages])
    prompt_ids = row_ids_prompt = prompts["input_ids"][0].tolist()
    turn1 = char_ids(tok, "<think>add them</think>" + CALL) + [tok.eos_token_id]
    turn2 = char_ids(tok, "<think>it is 5</think>#### 5") + [tok.eos_token_id]
    assert tok.decode(turn1) != "" and tok(tok.decode(turn1), add_special_tokens=False)["input_ids"] != turn1
    engine = ScriptedEngine([(prompt_ids, [turn1, turn2])])
    runner = AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path)))
    out = runner.generate_sequences(engine, prompts, SamplingParams(max_tokens=200), tok.pad_token_id)

    tool_turn = tok("\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    prompt, response, mask = row_ids(out, 0)
    assert prompt == row_ids_prompt
    assert response == turn1 + tool_turn + turn2
    assert mask == [1] * len(turn1) + [0] * len(tool_turn) + [1] * len(turn2)
    assert engine.batches[1] == [prompt_ids + turn1 + tool_turn]  # the second turn continues the exact ids
    width = out["responses"].shape[1]
    assert width == 200 and out["rollout_log_probs"][0, : len(response)].tolist() == [-0.5 if m else 0.0 for m in mask]
    # Re-rendering the conversation would have dropped turn 1's thinking and re-tokenised the model's text: drift.
    conversation = messages + [{"role": "assistant", "content": tok.decode(turn1, skip_special_tokens=True)},
                               {"role": "tool", "content": "5"},
                               {"role": "assistant", "content": tok.decode(turn2, skip_special_tokens=True)}]
    rerendered = tok(tok.apply_chat_template(conversation, tokenize=False), add_special_tokens=False)["input_ids"]
    assert rerendered[: len(prompt) + len(response)] != prompt + response
    assert "add them" not in tok.decode(rerendered) and "add them" in tok.decode(prompt + response)
    assert out["__num_turns__"][0] == 4 and out["finish_reason"][0] == "stop"
    assert out["reward_scores"][0] == {"tool_step_reward": 0.0, "tool_reward": 0.0, "tool_rewards": [0.0]}  # one call
    assert out["agent_metrics"][0]["tool_calls"] == 1 and out["agent_metrics"][0]["tool_errors"] == 0


def test_each_model_turn_samples_with_a_seed_derived_from_the_row_seed_and_the_turn(tok, tmp_path):
    """Multi-turn rows carry their `sample_seeds` into every turn: turn t of a row asks the engine for
    derive_seed(row seed, t), so no two turns or rows share a seed; rows without seeds ask for none."""
    rows = [[{"role": "user", "content": "add 2 3"}], [{"role": "user", "content": "add 4 4"}]]
    call = tok(CALL, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    answer = tok("#### 5", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    runner = AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path)))
    for row_seeds in ([100, 200], None):
        prompts = prompts_batch(tok, rows)
        if row_seeds is not None:
            prompts["sample_seeds"] = torch.tensor(row_seeds)
        engine = ScriptedEngine([(prompts["input_ids"][i][prompts["attention_mask"][i].bool()].tolist(), [call, answer])
                                 for i in range(2)])
        runner.generate_sequences(engine, prompts, SamplingParams(max_tokens=100), tok.pad_token_id)
        if row_seeds is None:
            assert engine.seeds == [None, None]
            continue
        assert engine.seeds == [[derive_seed(100, 0), derive_seed(200, 0)], [derive_seed(100, 1), derive_seed(200, 1)]]
        assert len({seed for batch in engine.seeds for seed in batch}) == 4


def test_plain_chatml_trajectory_is_the_rendered_conversation(tok, tmp_path):
    messages = [{"role": "user", "content": "add 2 3"}]
    prompts = prompts_batch(tok, [messages])
    turn1 = tok(CALL, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    turn2 = tok("#### 5", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    engine = ScriptedEngine([(prompts["input_ids"][0].tolist(), [turn1, turn2])])
    runner = AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path)))
    out = runner.generate_sequences(engine, prompts, SamplingParams(max_tokens=100), tok.pad_token_id)
    prompt, response, _ = row_ids(out, 0)
    conversation = messages + [{"role": "assistant", "content": CALL}, {"role": "tool", "content": "5"},
                               {"role": "assistant", "content": "#### 5"}]
    assert tok.decode(prompt + response) + "\n" == tok.apply_chat_template(conversation, tokenize=False)


TOOLS_TEMPLATE = (  # ChatML that lists the tools in a system message, as tool-calling models' templates do
    "{% if tools %}<|im_start|>system\nTools: {% for t in tools %}{{ t['function']['name'] }} {% endfor %}<|im_end|>\n{% endif %}"
    + CHATML
)


def test_prompt_is_rendered_with_the_tool_schemas_when_the_template_shows_them(tok, tmp_path):
    tok.chat_template = TOOLS_TEMPLATE
    messages = [{"role": "user", "content": "add 2 3"}]
    prompts = prompts_batch(tok, [messages])  # rendered by the dataset, without tools
    with_tools = tok(tok.apply_chat_template(messages, tools=[{"type": "function", "function": {"name": "calculator"}}],
                                             add_generation_prompt=True, tokenize=False), add_special_tokens=False)["input_ids"]
    assert tok.decode(with_tools).startswith("<|im_start|>system\nTools: calculator <|im_end|>")
    turn1 = tok(CALL, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    turn2 = tok("#### 5", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    engine = ScriptedEngine([(with_tools, [turn1, turn2])])
    runner = AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path)))
    out = runner.generate_sequences(engine, prompts, SamplingParams(max_tokens=100), tok.pad_token_id)
    prompt, response, _ = row_ids(out, 0)
    assert engine.batches[0] == [with_tools] and prompt == with_tools
    tool_turn = tok("\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert response == turn1 + tool_turn + turn2
    assert out["input_ids"].shape[1] == out["prompts"].shape[1] + 100


VERL_STYLE_TOOL = '''
from pydantic import BaseModel


class Function(BaseModel):  # verl's OpenAIFunctionToolSchema, reduced
    name: str
    description: str | None = None
    parameters: dict | None = None


class Schema(BaseModel):
    type: str
    function: Function


class Calculator:  # written as a subclass of verl's BaseTool is
    def __init__(self, config, tool_schema):
        self.config, self.tool_schema = config, tool_schema
        self.name = self.tool_schema.function.name  # verl's BaseTool.__init__ reads the schema's attributes

    def get_openai_tool_schema(self):
        return Schema.model_validate(self.tool_schema.model_dump())

    async def create(self, instance_id=None, **kwargs):
        return instance_id or "calc-1", None

    async def execute(self, instance_id, parameters, **kwargs):
        return {"text": str(eval(parameters["expression"]))}, 0.0, {}

    async def calc_reward(self, instance_id, **kwargs):
        return 0.0

    async def release(self, instance_id, **kwargs):
        return None
'''


def test_a_tool_written_against_verls_base_tool_reads_its_schema_as_attributes(tok, tmp_path):
    """verl hands a tool its schema as a pydantic model (schema.function.name) and renders get_openai_tool_schema()'s
    model_dump: such a tool loads, is offered to the chat template by its name, and answers."""
    pytest.importorskip("pydantic")  # the tool's own import (the test extras bring it, through ray and the trackers)
    (tmp_path / "verl_tools.py").write_text(VERL_STYLE_TOOL)
    config = tmp_path / "tools.yaml"
    config.write_text(f"tools:\n  - class_name: {tmp_path / 'verl_tools.py'}:Calculator\n    config: {{type: native}}\n"
                      "    tool_schema: {type: function, function: {name: calculator, description: adds,\n"
                      "                  parameters: {type: object, properties: {expression: {type: string}}}}}\n")
    tok.chat_template = TOOLS_TEMPLATE
    messages = [{"role": "user", "content": "add 2 3"}]
    with_tools = tok(tok.apply_chat_template(messages, tools=[{"type": "function", "function": {"name": "calculator"}}],
                                             add_generation_prompt=True, tokenize=False), add_special_tokens=False)["input_ids"]
    turn1 = tok(CALL, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    turn2 = tok("#### 5", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    engine = ScriptedEngine([(with_tools, [turn1, turn2])])
    runner = AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=str(config)))
    out = runner.generate_sequences(engine, prompts_batch(tok, [messages]), SamplingParams(max_tokens=100), tok.pad_token_id)
    _, response, _ = row_ids(out, 0)
    tool_turn = tok("\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert engine.batches[0] == [with_tools] and response == turn1 + tool_turn + turn2
    assert out["agent_metrics"][0]["tool_calls"] == 1 and out["agent_metrics"][0]["tool_errors"] == 0


@pytest.mark.parametrize("truncation", ["error", "left", "right"])
def test_a_prompt_rendered_with_tools_keeps_to_max_prompt_length(tok, tmp_path, truncation):
    tok.chat_template = TOOLS_TEMPLATE
    messages = [{"role": "user", "content": "add 2 3"}]
    prompts = prompts_batch(tok, [messages])
    plain = prompts["input_ids"][0].tolist()
    with_tools = tok(tok.apply_chat_template(messages, tools=[{"type": "function", "function": {"name": "calculator"}}],
                                             add_generation_prompt=True, tokenize=False), add_special_tokens=False)["input_ids"]
    limit = len(plain) + 2  # the dataset's prompt fits, the one with the tools does not
    assert len(with_tools) > limit
    kept = {"left": with_tools[-limit:], "right": with_tools[:limit]}.get(truncation)
    turn = tok("#### 5", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    engine = ScriptedEngine([(kept or with_tools, [turn])])
    runner = AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path)), max_prompt_length=limit,
                         truncation=truncation)
    if truncation == "error":
        with pytest.raises(DataError, match=rf"row extra_info.index=0: the prompt is {len(with_tools)} tokens with the tool "
                                            rf"schemas of .*tools.yaml \({len(plain)} without\), over data.max_prompt_length={limit}"):
            runner.generate_sequences(engine, prompts, SamplingParams(max_tokens=20), tok.pad_token_id)
        return
    out = runner.generate_sequences(engine, prompts, SamplingParams(max_tokens=20), tok.pad_token_id)
    assert engine.batches[0] == [kept] and row_ids(out, 0)[0] == kept


def test_budget_cuts_the_conversation_and_rows_are_batched_together(tok, tmp_path):
    rows = [[{"role": "user", "content": f"add {a} 3"}] for a in range(3)]
    prompts = prompts_batch(tok, rows)
    turn = tok(CALL, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    scripts = [(prompts["input_ids"][r][prompts["attention_mask"][r].bool()].tolist(), [list(turn), list(turn)]) for r in range(3)]
    engine = ScriptedEngine(scripts)
    runner = AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path)))
    budget = len(turn) + 3
    out = runner.generate_sequences(engine, prompts, SamplingParams(max_tokens=budget), tok.pad_token_id)
    assert [len(b) for b in engine.batches] == [3]  # one batched request; the tool answer would not fit the budget
    for r in range(3):
        _, response, mask = row_ids(out, r)
        # as verl's loop: a round of messages the budget cannot hold whole is dropped, and the conversation ends
        assert len(response) == len(turn) and mask == [1] * len(turn)
        assert out["finish_reason"][r] == "length" and out["__num_turns__"][r] == 2

    # The reward sees the rollout's scores and lands on the last model token, not on the trailing tool tokens.
    def score(data_source, solution_str, ground_truth, extra_info=None):
        return extra_info["num_turns"] + extra_info["rollout_reward_scores"]["tool_step_reward"] + extra_info["index"]
    out["data_source"], out["reward_model"], out["extra_info"] = ["t"] * 3, [{"ground_truth": "5"}] * 3, prompts["extra_info"]
    rewards = NaiveRewardManager(tok, 0, score, "data_source")(out)
    assert rewards.nonzero().tolist() == [[r, len(turn) - 1] for r in range(3)]
    assert rewards.sum(-1).tolist() == [2.0, 3.0, 4.0]  # 2 turns (prompt, model; the tool answer was dropped) + index


def test_malformed_calls_and_parallel_limit(tok, tmp_path):
    prompts = prompts_batch(tok, [[{"role": "user", "content": "go"}]])
    text = "<tool_call>{bad json}</tool_call>" + CALL + CALL.replace("2+3", "7*6")
    turns = [tok(text, add_special_tokens=False)["input_ids"] + [2], tok("done", add_special_tokens=False)["input_ids"] + [2]]
    engine = ScriptedEngine([(prompts["input_ids"][0].tolist(), turns)])
    config = MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path), max_parallel_calls=1, max_tool_response_length=30,
                             tool_response_truncate_side="right")
    out = AgentRunner(tok, config).generate_sequences(engine, prompts, SamplingParams(max_tokens=300), tok.pad_token_id)
    _, response, mask = row_ids(out, 0)
    added = tok.decode([t for t, m in zip(response, mask, strict=True) if m == 0])
    # the malformed call is dropped (verl's parser drops it), the first of the two valid ones runs (max_parallel_calls=1)
    assert added.count("<|im_start|>tool\n") == 1 and "\n5<|im_end|>" in added and "42" not in added
    assert out["agent_metrics"][0]["tool_calls"] == 1 and out["agent_metrics"][0]["tool_errors"] == 1


def test_interaction_turns_and_scores(tok, tmp_path):
    config_path = tmp_path / "interaction.yaml"
    config_path.write_text("interaction:\n  - name: checker\n    class_name: gsm8k\n")
    prompts = prompts_batch(tok, [[{"role": "user", "content": "2 + 3?"}]],
                            [{"index": 0, "interaction_kwargs": {"name": "checker", "ground_truth": "5"}}])
    turns = [tok(t, add_special_tokens=False)["input_ids"] + [2] for t in ("#### 4", "#### 5", "#### 6")]
    engine = ScriptedEngine([(prompts["input_ids"][0].tolist(), turns)])
    runner = AgentRunner(tok, MultiTurnConfig(enable=True, interaction_config_path=str(config_path), max_user_turns=3))
    out = runner.generate_sequences(engine, prompts, SamplingParams(max_tokens=100), tok.pad_token_id)
    _, response, mask = row_ids(out, 0)
    assert out["reward_scores"][0] == {"interaction_score": 1.0, "turn_scores": [0.0, 1.0]}  # the last answer is right
    assert out["__num_turns__"][0] == 4  # prompt, wrong answer, "try again", right answer
    user = tok.decode([t for t, m in zip(response, mask, strict=True) if m == 0])
    assert user == "\n<|im_start|>user\nYour response is incorrect! You need to reflect on your answer and try again.<|im_end|>\n<|im_start|>assistant\n"

    bad = prompts_batch(tok, [[{"role": "user", "content": "x"}]], [{"index": 7, "interaction_kwargs": {"name": "nope"}}])
    with pytest.raises(DataError, match=r"extra_info.index=7 asks for interaction 'nope'.*\['checker'\]"):
        runner.generate_sequences(engine, bad, SamplingParams(max_tokens=10), tok.pad_token_id)


def test_text_game_episode(tok):
    env_kwargs = {"name": "guess_number", "low": 1, "high": 8, "target": 5, "max_attempts": 4}
    prompts = prompts_batch(tok, [[{"role": "user", "content": f"Guess my number between 1 and 8 ({i})."}] for i in range(2)],
                            [{"index": 0, "env_kwargs": env_kwargs}, {"index": 1, "env_kwargs": {**env_kwargs, "max_attempts": 2}}],
                            agent_names=["env_agent", "env_agent"])
    guesses = [tok(g, add_special_tokens=False)["input_ids"] + [2] for g in ("3", "7", "5")]
    engine = ScriptedEngine([(prompts["input_ids"][r][prompts["attention_mask"][r].bool()].tolist(), list(guesses)) for r in range(2)])
    out = AgentRunner(tok, MultiTurnConfig(enable=True)).generate_sequences(engine, prompts, SamplingParams(max_tokens=100),
                                                                            tok.pad_token_id)
    assert list(out["reward_scores"]) == [{"env_reward": 1.0, "env_done": True}, {"env_reward": 0.0, "env_done": True}]
    assert list(out["__num_turns__"]) == [6, 4]  # found at the third guess; out of tries after two
    # text_env/* data is scored by the episode's reward with no reward function to write
    found = {"rollout_reward_scores": out["reward_scores"][0], "num_turns": 6}
    assert default_compute_score("text_env/guess_number", "", "5", extra_info=found) == 1.0
    assert default_compute_score("text_env/guess_number", "", "5", extra_info={"index": 0}) == 0.0
    _, response, mask = row_ids(out, 0)
    observations = tok.decode([t for t, m in zip(response, mask, strict=True) if m == 0])
    assert observations.count("<|im_start|>user\nhigher") == 1 and observations.count("<|im_start|>user\nlower") == 1

    unknown = prompts_batch(tok, [[{"role": "user", "content": "x"}]], agent_names=["chess_agent"])
    with pytest.raises(DataError, match="agent_name='chess_agent'; the agent loops are"):
        AgentRunner(tok, MultiTurnConfig(enable=True)).generate_sequences(engine, unknown, SamplingParams(max_tokens=10), 0)


def test_tool_calls_are_read_with_the_special_tokens_a_tokenizer_makes_of_their_tags(tok, tmp_path):
    """A tokenizer may register <tool_call> and </tool_call> as special tokens; decoding the turn without them would
    erase the tags, and the call with them. verl parses the turn with its special tokens, and so does reinforge."""
    tok.add_special_tokens({"additional_special_tokens": ["<tool_call>", "</tool_call>"]})
    assert tok.decode(tok(CALL, add_special_tokens=False)["input_ids"], skip_special_tokens=True).startswith('{"name"')
    prompts = prompts_batch(tok, [[{"role": "user", "content": "go"}]])
    turns = [tok(CALL, add_special_tokens=False)["input_ids"] + [2], tok("done", add_special_tokens=False)["input_ids"] + [2]]
    engine = ScriptedEngine([(prompts["input_ids"][0].tolist(), turns)])
    config = MultiTurnConfig(enable=True, tool_config_path=tools_yaml(tmp_path))
    out = AgentRunner(tok, config).generate_sequences(engine, prompts, SamplingParams(max_tokens=300), tok.pad_token_id)
    _, response, mask = row_ids(out, 0)
    assert out["agent_metrics"][0]["tool_calls"] == 1 and out["agent_metrics"][0]["tool_errors"] == 0
    assert "<|im_start|>tool\n5<|im_end|>" in tok.decode([t for t, m in zip(response, mask, strict=True) if m == 0])


# Qwen3's way with reasoning: an assistant turn after the last user message shows its think block when it is the last
# message or has reasoning; so adding a message to [user, assistant] re-renders the assistant turn without it
THINKING_TEMPLATE = (
    "{% set ns = namespace(last_user=-1) %}"
    "{% for m in messages %}{% if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' %}<|im_start|>assistant\n"
    "{% if loop.index0 > ns.last_user and (loop.last or m.reasoning_content) %}<think>\n{{ m.reasoning_content or '' }}\n"
    "</think>\n\n{% endif %}{{ m.content }}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_tool_answers_and_replies_are_added_under_a_template_that_rewrites_earlier_thinking(tok):
    """verl renders the added messages after a stand-in whose assistant turn calls the tools with reasoning (so it keeps
    its think block either way); rendering them after [user, assistant] instead fails under such a template."""
    from reinforge.inference.agent.base import message_delta_text

    tok.chat_template = THINKING_TEMPLATE
    tool = message_delta_text(tok, [{"role": "tool", "content": "5"}, {"role": "tool", "content": "6"}])
    assert tool == ("\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>user\n<tool_response>\n6\n"
                    "</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert message_delta_text(tok, [{"role": "user", "content": "again"}]) == "\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n"


def test_gsm8k_rows_written_for_the_tool_reach_it_under_its_name(tok, tmp_path, capsys):
    """`reinforge data gsm8k --variant tool_agent_loop` rows with examples/gsm8k_tool_config.yaml: the row's ground
    truth reaches `calc_gsm8k_reward` (verl's Gsm8kTool: -0.05 for an answer that does not improve, 1.0 once right);
    under a tool of another name the row's tools_kwargs reach nothing, which is said once."""
    raw = tmp_path / "raw" / "train.jsonl"
    raw.parent.mkdir()
    raw.write_text(json.dumps({"question": "What is 6 times 7?", "answer": "6 * 7 = 42\n#### 42"}) + "\n")
    assert main(["data", "gsm8k", "--variant", "tool_agent_loop", "--input", str(raw), "--local_dir", str(tmp_path / "out")]) == 0
    row = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()[0]
    assert row["agent_name"] == "tool_agent" and [m["role"] for m in row["prompt"]] == ["system", "user"]

    def rollout(tool_config: str):
        prompts = prompts_batch(tok, [row["prompt"]], [row["extra_info"]], [row["agent_name"]])
        calls = [f'<tool_call>{{"name": "calc_gsm8k_reward", "arguments": {{"answer": "{a}"}}}}</tool_call>' for a in ("41", "42")]
        turns = [tok(text, add_special_tokens=False)["input_ids"] + [2] for text in (*calls, "#### 42")]
        engine = ScriptedEngine([(prompts["input_ids"][0].tolist(), turns)])
        config = MultiTurnConfig(enable=True, tool_config_path=tool_config)
        return AgentRunner(tok, config).generate_sequences(engine, prompts, SamplingParams(max_tokens=400), tok.pad_token_id)

    root = Path(__file__).resolve().parents[2]
    scores = rollout(str(root / "examples" / "gsm8k_tool_config.yaml"))["reward_scores"][0]
    assert scores == {"tool_step_reward": -0.05, "tool_reward": 1.0, "tool_rewards": [-0.05, 0.0]}
    assert "tools_kwargs" not in capsys.readouterr().err

    # the built-in's own name (check_answer): the model's calls are unknown and the ground truth reaches no tool
    plain = tmp_path / "plain.yaml"
    plain.write_text("tools:\n  - class_name: gsm8k\n")
    scores = rollout(str(plain))["reward_scores"][0]
    assert scores == {"tool_step_reward": 0.0, "tool_reward": 0.0, "tool_rewards": [0.0, 0.0]}
    err = capsys.readouterr().err
    assert err.count("tools_kwargs") == 1 and "row extra_info.index=0 has extra_info.tools_kwargs for ['calc_gsm8k_reward'], " \
        "but the tools configured are ['check_answer']" in err
