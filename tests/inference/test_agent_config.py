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
    with pytest.raises(ConfigError, match="NotALoop is not an AgentLoopBase subclass"):
        AgentRunner(tokenizer, config.actor_rollout_ref.rollout.multi_turn, config.actor_rollout_ref.rollout.agent)
