"""GSM8K (grade-school maths word problems) as verl-schema data, in the forms of verl's GSM8K scripts.

Input rows have `question` and `answer`, where the answer is a worked solution ending in
`#### <number>`. `--variant` picks the form (verl's `examples/data_preprocess/gsm8k*.py`):

- `gsm8k` (default, verl's `gsm8k.py`): single-turn RL rows
  - `data_source`: "openai/gsm8k" (the built-in GSM8K scorer);
  - `prompt`: one user message, the question + " " + INSTRUCTION;
  - `ability`: "math";
  - `reward_model`: `{"style": "rule", "ground_truth": <the number after the first "####", commas removed>}`;
  - `extra_info`: `{"split", "index" (position in the raw split), "answer" (the worked solution), "question"}`.
- `multiturn_w_tool` (`gsm8k_multiturn_w_tool.py`): a system message asking for the `calc_gsm8k_reward` tool, the
  question + " " + TOOL_INSTRUCTION, and in `extra_info` also `need_tools_kwargs: true`,
  `tools_kwargs.calc_gsm8k_reward.create_kwargs.ground_truth` and `interaction_kwargs: {query, ground_truth}`.
- `tool_agent_loop` (`gsm8k_tool_agent_loop.py`): the same with `agent_name: tool_agent`.
- `multiturn_w_interaction` (`gsm8k_multiturn_w_interaction.py`): a system message asking to think again when told
  the answer is wrong, and `interaction_kwargs: {name: "gsm8k", query, ground_truth}`.
- `multiturn_sft` (`gsm8k_multiturn_sft.py`): SFT rows, `messages` = the question + " " + INSTRUCTION as the user's
  turn and the worked solution as the assistant's (written to ~/data/gsm8k_sft by default, as verl).

A row whose answer has no `#### <number>` is dropped and counted (verl stops with an assertion); the SFT form
keeps it, as verl's script does not look for the number.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

from reinforge.environment.preprocess.splits import HubDataset, preprocess_splits

DATA_SOURCE = "openai/gsm8k"
HUB = HubDataset("openai/gsm8k", "main")
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
TOOL_INSTRUCTION = "Let's think step by step and output the final answer after `####`."  # verl's multi-turn scripts'
TOOL_NAME = "calc_gsm8k_reward"  # the tool_schema name of verl's gsm8k_tool_config.yaml
TOOL_SYSTEM = ("You are a math expert. You are given a question and you need to solve it step by step. Reasoning step by "
               f"step before any tool call. You should use the `{TOOL_NAME}` tool after step by step solving the question, "
               "before generate final answer at least once and refine your answer if necessary. Put your final answer in "
               "the format of `#### <answer>`.")
INTERACTION_SYSTEM = ("You are a math expert. You are given a question and you need to solve it step by step. You should "
                      "rethinking carefully if user point out your answer is wrong. Put your final answer in the format of "
                      "`#### <answer>`.")
REQUIRED_COLUMNS = ("question", "answer")

_FINAL_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")


def extract_answer(solution: str) -> str | None:
    """The number after the first `#### ` of a GSM8K solution, without thousands commas; None when absent."""
    match = _FINAL_ANSWER.search(solution)
    return match.group(1).replace(",", "") if match else None


def make_row(raw: dict[str, Any], split: str, index: int, variant: str = "gsm8k") -> dict[str, Any] | None:
    """The verl-schema row of one GSM8K example in the form `variant` (VARIANTS), or None when an RL form's answer has
    no `#### <number>`."""
    question, solution = str(raw["question"]), str(raw["answer"])
    if variant == "multiturn_sft":
        return {"messages": [{"role": "user", "content": f"{question} {INSTRUCTION}"},
                             {"role": "assistant", "content": solution}]}
    ground_truth = extract_answer(solution)
    if ground_truth is None:
        return None
    extra_info = {"split": split, "index": index, "answer": solution, "question": question}
    if variant == "gsm8k":
        prompt = [{"role": "user", "content": f"{question} {INSTRUCTION}"}]
    else:
        query = f"{question} {TOOL_INSTRUCTION}"
        with_tool = variant != "multiturn_w_interaction"
        prompt = [{"role": "system", "content": TOOL_SYSTEM if with_tool else INTERACTION_SYSTEM},
                  {"role": "user", "content": query}]
        if with_tool:
            extra_info |= {"need_tools_kwargs": True,
                           "tools_kwargs": {TOOL_NAME: {"create_kwargs": {"ground_truth": ground_truth}}},
                           "interaction_kwargs": {"query": query, "ground_truth": ground_truth}}
        else:
            extra_info["interaction_kwargs"] = {"name": "gsm8k", "query": query, "ground_truth": ground_truth}
    agent = {"agent_name": "tool_agent"} if variant == "tool_agent_loop" else {}
    return {"data_source": DATA_SOURCE, **agent, "prompt": prompt, "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": ground_truth}, "extra_info": extra_info}


VARIANTS = {  # --variant: (what it writes, its default output folder)
    "gsm8k": ("single-turn RL rows (verl's gsm8k.py)", "~/data/gsm8k"),
    "multiturn_w_tool": (f"multi-turn RL rows for the {TOOL_NAME} tool (gsm8k_multiturn_w_tool.py)", "~/data/gsm8k"),
    "tool_agent_loop": ("the same, with agent_name tool_agent (gsm8k_tool_agent_loop.py)", "~/data/gsm8k"),
    "multiturn_w_interaction": ("multi-turn RL rows for the gsm8k interaction (gsm8k_multiturn_w_interaction.py)",
                                "~/data/gsm8k"),
    "multiturn_sft": ("SFT rows with messages (gsm8k_multiturn_sft.py)", "~/data/gsm8k_sft"),
}


def preprocess(inputs: list[str] | None, local_dir: str | Path | None, max_train: int | None = None,
               max_test: int | None = None, variant: str = "gsm8k") -> dict[str, Path]:
    """Write `local_dir/train.parquet` and `test.parquet` (default: the variant's folder) from a local copy (`inputs`)
    or the hub."""
    return preprocess_splits(inputs, HUB, partial(make_row, variant=variant), REQUIRED_COLUMNS, local_dir or VARIANTS[variant][1],
                             {"train": max_train, "test": max_test})
