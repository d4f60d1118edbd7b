"""verl's multi-turn and agent keys: accepted, checked, and the no-effect one reported."""

import pytest

from reinforge.config import load_config
from reinforge.config.unused import unused_settings
from reinforge.errors import ConfigError
from reinforge.inference.agent import AgentRunner

MT = "actor_rollout_ref.rollout.multi_turn."


def test_verl_multi_turn_keys_load():
    config, keys = load_config([f"{MT}enable=true", f"{MT}max_assistant_turns=5", f"{MT}max_user_turns=2",
                                f"{MT}max_parallel_calls=2", f"{MT}max_tool_response_length=100",
                                f"{MT}tool_response_truncate_side=right", f"{MT}format=hermes",
                                "actor_rollout_ref.rollout.agent.num_workers=4",
                                "actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent"])
    multi_turn = config.actor_rollout_ref.rollout.multi_turn
    assert (multi_turn.enable, multi_turn.max_assistant_turns, multi_turn.max_parallel_calls) == (True, 5, 2)
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "single_turn_agent"
    assert any("actor_rollout_ref.rollout.agent.num_workers" in line for line in unused_settings(config, keys))


@pytest.mark.parametrize(("override", "message"), [
    (f"{MT}tool_response_truncate_side=top", "tool_response_truncate_side='top' is not one of: left, right, middle"),
    (f"{MT}format=json", "multi_turn.format='json' is not one of: hermes"),
    (f"{MT}max_parallel_calls=0", "max_parallel_calls=0 must be > 0"),
    (f"{MT}tool_config_path=no/tools.yaml", "multi_turn.tool_config_path='no/tools.yaml': no such file"),
    (f"{MT}max_tol_response_length=3", "did you mean 'actor_rollout_ref.rollout.multi_turn.max_tool_response_length'"),
])
def test_bad_multi_turn_values_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config([f"{MT}enable=true", override])


def test_agent_loop_config_registers_user_loops(tmp_path, tokenizer):
    (tmp_path / "my_loops.py").write_text(
        "from reinforge.inference.agent import AgentLoopBase\n\nclass Echo(AgentLoopBase):\n    pass\n\nclass NotALoop:\n    pass\n")
    good, bad = tmp_path / "loops.yaml", tmp_path / "bad.yaml"
    good.write_text(f"- name: echo_agent\n  _target_: {tmp_path / 'my_loops.py'}:Echo\n")
    bad.write_text(f"- name: x\n  _target_: {tmp_path / 'my_loops.py'}:NotALoop\n")
    config, _ = load_config([f"{MT}enable=true", f"actor_rollout_ref.rollout.agent.agent_loop_config_path={good}"])
    from reinforge.inference.agent import AGENT_LOOP_REGISTRY

    AgentRunner(tokenizer, config.actor_rollout_ref.rollout.multi_turn, config.actor_rollout_ref.rollout.agent)
    assert AGENT_LOOP_REGISTRY.pop("echo_agent").__name__ == "Echo"
    config.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(bad)
    with pytest.raises(ConfigError, match="NotALoop is not a subclass of reinforge.inference.agent.AgentLoopBase; a loop here is `async def run"):
        AgentRunner(tokenizer, config.actor_rollout_ref.rollout.multi_turn, config.actor_rollout_ref.rollout.agent)


def test_multi_turn_keeps_the_chat_messages_whatever_return_raw_chat_says():
    """Agent loops render each row's messages with the tools; without them the model never sees its tools (verl 0.9
    always keeps them)."""
    config, keys = load_config([f"{MT}enable=true", "data.return_raw_chat=false"])
    assert config.data.return_raw_chat is True
    assert any(line.startswith("data.return_raw_chat: agent loops render each row's chat messages")
               for line in unused_settings(config, keys))
    config, _ = load_config(["data.return_raw_chat=false"])
    assert config.data.return_raw_chat is False


def test_broken_tool_and_interaction_files_fail_at_the_config_check(tmp_path):
    """--dry-run and the start of a run load the tools and import the interactions' classes, before any model loads."""
    tools, interactions = tmp_path / "tools.yaml", tmp_path / "interactions.yaml"
    tools.write_text("tools:\n  - class_name: no_such_module.Tool\n")
    with pytest.raises(ConfigError, match=r"tools.yaml, tools\[0\]: cannot import module 'no_such_module'"):
        load_config([f"{MT}enable=true", f"{MT}tool_config_path={tools}"])
    interactions.write_text("interaction:\n  - name: checker\n    class_name: gsm8kk.Checker\n")
    with pytest.raises(ConfigError, match=r"interactions.yaml, interaction\[0\]: cannot import module 'gsm8kk'"):
        load_config([f"{MT}enable=true", f"{MT}interaction_config_path={interactions}"])


def _rows(*rows):
    return [(row, "train.jsonl", i) for i, row in enumerate(rows)]


def test_each_rows_agent_loop_interaction_and_environment_are_checked_at_start(tmp_path):
    from reinforge.errors import DataError
    from reinforge.inference.agent import check_agent_rows

    interactions = tmp_path / "interactions.yaml"
    interactions.write_text("interaction:\n  - name: checker\n    class_name: gsm8k\n  - name: other\n    class_name: gsm8k\n")
    off, _ = load_config([])
    on, _ = load_config([f"{MT}enable=true", f"{MT}interaction_config_path={interactions}"])
    plain = {"extra_info": {"index": 0}}
    check_agent_rows(_rows(plain, {**plain, "agent_name": "single_turn_agent"}), off.actor_rollout_ref.rollout)
    with pytest.raises(DataError, match=r"^train.jsonl: row 1 has agent_name='tool_agent', but actor_rollout_ref.rollout."
                                        r"multi_turn.enable=false: no agent loop runs"):
        check_agent_rows(_rows(plain, {**plain, "agent_name": "tool_agent"}), off.actor_rollout_ref.rollout)
    good = [plain, {"agent_name": "env_agent", "extra_info": {"env_kwargs": {"name": "guess_number"}}},
            {"extra_info": {"interaction_kwargs": {"name": "other", "ground_truth": "1"}}}]
    check_agent_rows(_rows(*good), on.actor_rollout_ref.rollout)
    for bad, message in [({"agent_name": "tool_agnet"}, r"row 3 has agent_name='tool_agnet'; the agent loops are env_agent, "),
                         ({"extra_info": {"interaction_kwargs": {"name": "chekcer"}}},
                          r"row 3: extra_info.interaction_kwargs.name='chekcer'; the interactions of .* are checker, other"),
                         ({"extra_info": {"interaction_kwargs": {"ground_truth": "1"}}},  # two interactions: a name is needed
                          r"row 3: extra_info.interaction_kwargs.name=None"),
                         ({"agent_name": "env_agent", "extra_info": {"env_kwargs": {"name": "guess_numbr"}}},
                          r"row 3: extra_info.env_kwargs.name='guess_numbr'; the text environments are guess_number")]:
        with pytest.raises(DataError, match=rf"^train.jsonl: {message}"):
            check_agent_rows(_rows(*good, bad), on.actor_rollout_ref.rollout)
    text = {"prompt": "Q: what is 2+2? A:", "extra_info": {"index": 3}}  # the model's input text: no chat to continue
    check_agent_rows(_rows({**text, "agent_name": "single_turn_agent"}), on.actor_rollout_ref.rollout)
    with pytest.raises(DataError, match=r"^train.jsonl: row 0, column 'prompt': a string prompt is the model's input text as "
                                        r"it is \(TRL's standard format\), but the tool_agent agent loop continues a chat"):
        check_agent_rows(_rows(text), on.actor_rollout_ref.rollout, "prompt")


def test_a_bad_agent_name_in_the_validation_file_stops_the_run_before_the_model_loads(tiny_model_path, tmp_path, capsys):
    import json

    from reinforge.cli import main

    row = {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "1+1?"}],
           "reward_model": {"ground_truth": "2"}, "extra_info": {"index": 0}}
    train, val = tmp_path / "train.jsonl", tmp_path / "val.jsonl"
    train.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    val.write_text(json.dumps(row) + "\n" + json.dumps({**row, "agent_name": "tool_agnet"}) + "\n")
    assert main(["train", f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={train}",
                 f"data.val_files={val}", "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                 f"{MT}enable=true", f"trainer.default_local_dir={tmp_path / 'run'}", "trainer.logger=[]"]) == 2
    out, err = capsys.readouterr()
    assert f"reinforge: error: {val}: row 1 has agent_name='tool_agnet'; the agent loops are" in err
    assert "first step begins" not in out and not (tmp_path / "run" / "metrics.jsonl").exists()
