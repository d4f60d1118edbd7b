"""End to end on CPU: a tiny model fine-tuned here to call a tool trains on multi-turn rollouts with tools,
with an interaction, and on the text game; and the rollout worker masks the tool turns out of the loss."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from reinforge.config import load_config
from reinforge.environment.envs import guess_number_rows
from reinforge.trainer.main import run
from reinforge.training.workers import ActorRolloutRefWorker
from tests.inference.conftest import GAME_PROMPT, one_thread
from tests.trainer.test_metrics_documented import undocumented

# A user tool loaded from a file: the calculator, with a step reward of 1 when its result is the row's answer.
USER_TOOL = '''
from reinforge.inference.tools import CalculatorTool

class CheckedCalculator(CalculatorTool):
    async def create(self, instance_id=None, **kwargs):
        instance_id = await super().create(instance_id)
        self.truth = getattr(self, "truth", {})
        self.truth[instance_id] = kwargs["create_kwargs"]["ground_truth"]
        return instance_id

    async def execute(self, instance_id, parameters, **kwargs):
        text, _, metrics = await super().execute(instance_id, parameters)
        return text, float(text == self.truth[instance_id]), metrics
'''
# The rollout's scores (tools, interaction, game) plus a part that varies with the text, so GRPO has advantages.
REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    scores = extra_info["rollout_reward_scores"]
    flow = scores.get("tool_step_reward", 0.0) + sum(scores.get("turn_scores", [])) + scores.get("env_reward", 0.0)
    return {"score": flow + sum(map(ord, solution_str)) % 7 / 70, "flow": flow, "turns": extra_info["num_turns"],
            # verl's agent loop also hands over each tool call's reward and each user turn's score at the top level, both
            # lists in every row (empty without tool calls or an interaction): read without a default, as verl's users do
            "tool_rewards": sum(extra_info["tool_rewards"]), "turn_scores": len(extra_info["turn_scores"])}
'''
RUN = ["data.train_batch_size=2", "data.max_prompt_length=64", "data.max_response_length=64", "data.return_raw_chat=true",
       "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
       "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
       "trainer.total_training_steps=1", "trainer.val_before_train=false", "trainer.test_freq=-1",
       "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.multi_turn.enable=true"]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def add_rows(n: int, answer: str = "5") -> list[dict]:
    return [{"data_source": "agent_test", "prompt": [{"role": "user", "content": f"add {i % 3} {i % 5}"}],
             "reward_model": {"ground_truth": answer},
             "extra_info": {"index": i, "tools_kwargs": {"calculator": {"create_kwargs": {"ground_truth": answer}}},
                            "interaction_kwargs": {"name": "checker", "ground_truth": answer}}} for i in range(n)]


@pytest.fixture
def agent_run(tool_model_path, tmp_path):
    (tmp_path / "reward.py").write_text(REWARD)
    (tmp_path / "my_tools.py").write_text(USER_TOOL)
    (tmp_path / "tools.yaml").write_text(f"tools:\n  - class_name: {tmp_path / 'my_tools.py'}:CheckedCalculator\n")
    (tmp_path / "interaction.yaml").write_text("interaction:\n  - name: checker\n    class_name: gsm8k\n")

    def train(rows: list[dict], *overrides: str) -> tuple[dict, list[dict]]:
        data = write_jsonl(tmp_path / "data.jsonl", rows)
        config, keys = load_config([f"actor_rollout_ref.model.path={tool_model_path}", f"data.train_files={data}",
                                    f"data.val_files={data}", f"trainer.default_local_dir={tmp_path / 'run'}",
                                    f"trainer.rollout_data_dir={tmp_path / 'rollouts'}", f"custom_reward_function.path={tmp_path / 'reward.py'}",
                                    *RUN, *overrides])
        with one_thread():
            run(config, keys)
        step = next(json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
                    if "timing_s/step" in line)
        rollouts = [json.loads(line) for line in (tmp_path / "rollouts" / "1.jsonl").read_text().splitlines()]
        return step, rollouts

    return train


def assert_trained(step: dict) -> None:
    assert step["step"] == 1 and math.isfinite(step["actor/pg_loss"]) and step["actor/grad_norm"] > 0


def test_tool_rollouts_train(agent_run, tmp_path):
    step, rollouts = agent_run(add_rows(2), f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tmp_path / 'tools.yaml'}",
                               "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2")
    assert_trained(step)
    assert step["num_turns/max"] == 4 and step["tool_call_counts/mean"] >= 1 and len(rollouts) == 8
    assert step["timing_s/agent_loop/generate_sequences/mean"] > 0 and undocumented(set(step)) == []
    called = [r for r in rollouts if "tool\n5\n" in r["output"]]  # the dump shows the whole conversation
    assert len(called) >= 6 and all(r["flow"] >= 1.0 and r["turns"] == 4 for r in called)  # the step reward reached the reward
    assert all(r["tool_rewards"] == r["flow"] for r in rollouts)


FUNCTION_TOOL = '''
from reinforge.inference.tools import function_tool


@function_tool("calculator")
def calculate(expression: str):
    """Compute an arithmetic expression.

    Args:
        expression: The expression, e.g. 2+3.
    """
    try:
        value = str(eval(expression, {"__builtins__": {}}))
    except Exception as err:
        return f"error: {err}"
    return value, float(value == "5")
'''


def test_function_tool_rollouts_train(agent_run, tmp_path):
    (tmp_path / "function_tools.py").write_text(FUNCTION_TOOL)
    step, rollouts = agent_run(add_rows(2), f"actor_rollout_ref.rollout.multi_turn.function_tool_path={tmp_path / 'function_tools.py'}",
                               "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2")
    assert_trained(step)
    assert step["num_turns/max"] == 4 and step["tool_call_counts/mean"] >= 1 and len(rollouts) == 8
    called = [r for r in rollouts if "tool\n5\n" in r["output"]]
    assert len(called) >= 6 and all(r["flow"] >= 1.0 and r["turns"] == 4 for r in called)  # the function's reward arrived


def test_interaction_rollouts_train(agent_run, tmp_path):
    step, rollouts = agent_run(add_rows(2, answer="987"), f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={tmp_path / 'interaction.yaml'}",
                               "actor_rollout_ref.rollout.multi_turn.max_user_turns=1", "trainer.val_before_train=true",
                               "data.max_response_length=96")  # room for verl's retry message and a second model turn
    assert_trained(step)
    # The model never says 987: wrong, "try again", another turn, then the user-turn limit.
    assert step["num_turns/min"] == 4 and all(r["turns"] == 4 and r["flow"] == 0.0 for r in rollouts)
    assert all(r["turn_scores"] == 1 for r in rollouts)  # one user turn, one turn score
    validation = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert validation["step"] == 0 and validation["val-aux/num_turns/min"] == validation["val-aux/num_turns/max"] == 4
    assert all("Your response is incorrect! You need to reflect on your answer and try again." in r["output"] for r in rollouts)


def test_text_game_trains(agent_run):
    rows = guess_number_rows(4, seed=1)
    assert all(row["prompt"][0]["content"] == GAME_PROMPT for row in rows)
    step, rollouts = agent_run(rows, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4")
    assert_trained(step)
    # the rows' agent_name (env_agent) reached the rollout: observations came back as user turns
    assert 3 <= step["num_turns/max"] <= 1 + 4 + 3 and step["num_turns/min"] >= 2
    for r in rollouts:  # found at guess k: 2k turns, k - 1 hints, reward 1; else out of tries or out of budget, reward 0
        hints = r["output"].count("user\nhigher") + r["output"].count("user\nlower")
        assert r["flow"] in (0.0, 1.0) and r["turns"] <= 8 and hints <= 3
        assert r["flow"] == 0.0 or (r["turns"] % 2 == 0 and hints == r["turns"] // 2 - 1)


def test_rollout_worker_masks_tool_turns(tool_model_path, tmp_path):
    from reinforge.batch import Batch
    from reinforge.environment.dataset import collate_prompts

    (tmp_path / "tools.yaml").write_text("tools:\n  - class_name: calculator\n")
    config, _ = load_config([f"actor_rollout_ref.model.path={tool_model_path}", "data.max_response_length=48",
                             "actor_rollout_ref.rollout.multi_turn.enable=true", "actor_rollout_ref.rollout.temperature=0.5",
                             f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tmp_path / 'tools.yaml'}",
                             "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2"])
    worker = ActorRolloutRefWorker(config, role="actor_rollout")
    worker.init_model(1)
    tok = worker.tokenizer
    messages = [[{"role": "user", "content": f"add {i} 1"}] for i in range(4)]
    items = [{"input_ids": torch.tensor(tok(tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False),
                                             add_special_tokens=False)["input_ids"])} for m in messages]
    prompts = Batch.from_dict(collate_prompts(items, tok.pad_token_id))
    prompts["raw_prompt"], prompts["extra_info"] = messages, [{"index": i} for i in range(4)]
    with one_thread():
        out = worker.generate_sequences(prompts)
    tool_turn = tok("\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    width = prompts["input_ids"].shape[1]
    for row in range(4):
        valid = out["attention_mask"][row, width:].bool()
        response, mask = out["responses"][row][valid].tolist(), out["response_mask"][row][valid].tolist()
        first = response.index(tok.eos_token_id) + 1  # the model's first turn ends with its EOS
        assert mask[:first] == [1] * first and tok.decode(response[:first]).startswith('<tool_call>{"name": "calculator"')
        assert response[first:first + len(tool_turn)] == tool_turn and mask[first:first + len(tool_turn)] == [0] * len(tool_turn)
        assert all(m == 1 for m in mask[first + len(tool_turn):])  # the second model turn
        assert (out["rollout_log_probs"][row][valid][torch.tensor(mask) == 0] == 0).all()
    assert out["response_mask"].sum() < out["attention_mask"][:, width:].sum()  # the loss sees fewer tokens than the model reads
    # The actor, reading the laid-out conversation, gives the model's tokens the log-probs the engine sampled them with.
    model_tokens = out["response_mask"].bool()
    recomputed = worker.compute_log_prob(out)["old_log_probs"]
    torch.testing.assert_close(recomputed[model_tokens], out["rollout_log_probs"][model_tokens], atol=2e-3, rtol=0)
