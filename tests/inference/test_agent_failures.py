"""Failures stay in their row: tools and interactions that raise or return the wrong shape, environments that refuse
their arguments, and the config mistakes of custom agent loops and environments (ConfigErrors naming the file).

The engine plays scripted turns (test_agent_loops.py's ScriptedEngine); the loops and tools are the real ones.
"""

from __future__ import annotations

import pytest

from reinforge.batch import Batch
from reinforge.config.schema import MultiTurnConfig
from reinforge.errors import ConfigError, DataError
from reinforge.inference.agent import AgentRunner
from reinforge.inference.engine import SamplingParams
from tests.inference.test_agent_loops import CALL, ScriptedEngine, prompts_batch, row_ids, tools_yaml


def run_texts(tok, tmp_path, scripts: list[list[str]], extra_infos=None, agent_names=None, max_tokens=200, **multi_turn) -> Batch:
    """A rollout whose row i plays the model turns scripts[i] (texts, each ended by EOS)."""
    prompts = prompts_batch(tok, [[{"role": "user", "content": f"q{i}"}] for i in range(len(scripts))], extra_infos, agent_names)
    turns = [[tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts] for texts in scripts]
    engine = ScriptedEngine([(prompts["input_ids"][r][prompts["attention_mask"][r].bool()].tolist(), turns[r])
                             for r in range(len(scripts))])
    return AgentRunner(tok, MultiTurnConfig(enable=True, **multi_turn)).generate_sequences(
        engine, prompts, SamplingParams(max_tokens=max_tokens), tok.pad_token_id)


def added_text(tok, out: Batch, row: int) -> str:
    _, response, mask = row_ids(out, row)
    return tok.decode([t for t, m in zip(response, mask, strict=True) if m == 0])


BAD_TOOLS = '''
from reinforge.inference.tools import BaseTool

class RewardRaises(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return "ok", 0.5, {}
    async def calc_reward(self, instance_id, **kwargs):
        raise ValueError("calc_reward failed")

class RewardNone(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return "ok", 0.0, {}
    async def calc_reward(self, instance_id, **kwargs):
        return None

class ReleaseRaises(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return "ok", 0.0, {}
    async def calc_reward(self, instance_id, **kwargs):
        return 1.0
    async def release(self, instance_id, **kwargs):
        raise RuntimeError("release failed")

class ReturnsInt(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return 42, 0.0, {}

class ReturnsBadReward(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return "ok", "high", {}

class ReturnsNanReward(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return "ok", float("nan"), {}

class Exits(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        import sys
        sys.exit("bad")

class Sleeps(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        import asyncio
        await asyncio.sleep(0.5)
        return "late", 0.0, {}
'''


def bad_tool_config(tmp_path, cls: str) -> str:
    (tmp_path / "bad_tools.py").write_text(BAD_TOOLS)
    path = tmp_path / f"{cls}.yaml"
    path.write_text(f"tools:\n  - class_name: {tmp_path / 'bad_tools.py'}:{cls}\n"
                    "    tool_schema: {type: function, function: {name: t}}\n")
    return str(path)


T_CALL = '<tool_call>{"name": "t", "arguments": {}}</tool_call>'


@pytest.mark.parametrize(("cls", "tool_reward", "printed"), [
    ("RewardRaises", 0.0, "ValueError: calc_reward failed"),
    ("RewardNone", 0.0, "ReturnValueError: returned the reward from calc_reward None (NoneType), not a number"),
    ("ReleaseRaises", 1.0, "RuntimeError: release failed"),
])
def test_a_failing_calc_reward_or_release_costs_only_its_row(tok, tmp_path, capsys, cls, tool_reward, printed):
    """A calc_reward that raises or returns a non-number scores 0 and a release that raises loses nothing; each is
    counted in the row's tool_errors, the first one printed (with the traceback of the user's code), the batch goes on."""
    out = run_texts(tok, tmp_path, [[T_CALL, "answer"], [T_CALL, "answer"], ["no tool"]], tool_config_path=bad_tool_config(tmp_path, cls))
    assert [scores["tool_reward"] for scores in out["reward_scores"]] == [tool_reward, tool_reward, 0.0]
    assert [m["tool_errors"] for m in out["agent_metrics"]] == [1, 1, 0]
    assert out["reward_scores"][0]["tool_step_reward"] == (0.5 if cls == "RewardRaises" else 0.0)
    err = capsys.readouterr().err
    assert err.count(printed) == 1 and f"tool 't' ({tmp_path / 'bad_tools.py'}:{cls}) failed in " in err
    assert "Later tool failures are only counted in the metric tool_errors" in err
    assert (err.count("Traceback") == 1) is (cls != "RewardNone")  # reinforge's own finding needs no traceback


@pytest.mark.parametrize(("cls", "answer"), [
    ("ReturnsInt", "Error executing tool 't': returned the response 42 (int); a response is text"),
    ("ReturnsBadReward", "Error executing tool 't': returned the step reward 'high' (str), not a number"),
    ("ReturnsNanReward", "Error executing tool 't': returned the step reward nan (float), not a finite number"),
    ("Exits", "Error executing tool 't': bad"),  # sys.exit in a tool costs its row, not the run
])
def test_execute_returning_the_wrong_shape_is_the_rows_tool_error(tok, tmp_path, cls, answer):
    out = run_texts(tok, tmp_path, [[T_CALL, "answer"], ["no tool"]], tool_config_path=bad_tool_config(tmp_path, cls))
    assert f"<|im_start|>tool\n{answer}" in added_text(tok, out, 0)
    assert [m["tool_errors"] for m in out["agent_metrics"]] == [1, 0]
    assert out["reward_scores"][0]["tool_step_reward"] == 0.0


def test_tool_answers_come_back_in_the_order_of_the_calls_and_malformed_calls_are_dropped(tok, tmp_path):
    """verl's parser drops a call it cannot read; a valid call of an unknown tool is answered. Both count as errors."""
    turn = '<tool_call>not json</tool_call>' + CALL + '<tool_call>{"name": "nope", "arguments": {}}</tool_call>'
    out = run_texts(tok, tmp_path, [[turn, "done"]], tool_config_path=tools_yaml(tmp_path), max_parallel_calls=2)
    answers = added_text(tok, out, 0).split("<|im_start|>tool\n")[1:]
    assert [a.split("<|im_end|>")[0] for a in answers] == ["5", "Unknown function 'nope'. Available tools: ['calculator']"]
    assert out["agent_metrics"][0]["tool_errors"] == 2
    assert out["reward_scores"][0]["tool_rewards"] == [0.0, 0.0]  # verl's: the unknown call's step reward is 0 too


def test_a_turn_of_malformed_calls_only_ends_the_conversation_as_in_verl(tok, tmp_path):
    out = run_texts(tok, tmp_path, [['<tool_call>not json</tool_call>', "never generated"]],
                    tool_config_path=tools_yaml(tmp_path))
    assert added_text(tok, out, 0) == "" and out["__num_turns__"][0] == 2  # the prompt and the one model turn
    assert (out["agent_metrics"][0]["tool_calls"], out["agent_metrics"][0]["tool_errors"]) == (0, 1)


BAD_INTERACTIONS = '''
from reinforge.inference.interactions import BaseInteraction

class Raises(BaseInteraction):
    async def generate_response(self, instance_id, messages, **kwargs):
        raise RuntimeError("user simulator down")

class ThreeTuple(BaseInteraction):
    async def generate_response(self, instance_id, messages, **kwargs):
        return False, "again", 0.0

class ScoreRaises(BaseInteraction):
    async def generate_response(self, instance_id, messages, **kwargs):
        return True, "bye", 1.0, {}
    async def calculate_score(self, instance_id, **kwargs):
        raise ValueError("no score")

class StartRaises(BaseInteraction):
    async def start_interaction(self, instance_id=None, **kwargs):
        raise KeyError("ground_truth")

class NotAnInteraction:
    def __init__(self, config):
        pass
'''


def interaction_config(tmp_path, cls: str) -> str:
    (tmp_path / "bad_interactions.py").write_text(BAD_INTERACTIONS)
    path = tmp_path / f"{cls}.yaml"
    path.write_text(f"interaction:\n  - name: u\n    class_name: {tmp_path / 'bad_interactions.py'}:{cls}\n")
    return str(path)


@pytest.mark.parametrize(("cls", "printed", "scores"), [
    ("Raises", "RuntimeError: user simulator down", {"interaction_score": 0.0, "turn_scores": []}),
    ("ThreeTuple", "ReturnValueError: returned (False, 'again', 0.0) (tuple) from generate_response; it returns "
                   "(should_terminate, text, turn_score, extra)", {"interaction_score": 0.0, "turn_scores": []}),
    ("ScoreRaises", "ValueError: no score", {"interaction_score": 0.0, "turn_scores": [1.0]}),
    ("StartRaises", "KeyError: 'ground_truth'", {"interaction_score": 0.0, "turn_scores": []}),
])
def test_a_failing_interaction_costs_only_its_row(tok, tmp_path, capsys, cls, printed, scores):
    """generate_response that raises or returns another shape ends that row's conversation; calculate_score that
    raises scores 0; start_interaction that raises leaves the row without its interaction; each is counted in
    interaction_errors, the first printed; the other rows go on."""
    extra = [{"index": 0, "interaction_kwargs": {"name": "u"}}, {"index": 1, "interaction_kwargs": {"name": "u"}}, {"index": 2}]
    out = run_texts(tok, tmp_path, [["hi", "more"], ["hi", "more"], ["hi"]], extra, interaction_config_path=interaction_config(tmp_path, cls))
    assert list(out["reward_scores"])[:2] == [scores, scores] and out["reward_scores"][2] == {}
    assert [m.get("interaction_errors") for m in out["agent_metrics"]] == [1, 1, None]
    # the prompt and one model turn; ScoreRaises ends the conversation with "bye", which joins it as in verl (mask 0)
    assert list(out["__num_turns__"]) == ([3, 3, 2] if cls == "ScoreRaises" else [2, 2, 2])
    assert ("<|im_start|>user\nbye<|im_end|>" in added_text(tok, out, 0)) is (cls == "ScoreRaises")
    err = capsys.readouterr().err
    assert err.count(printed) == 1 and f"interaction 'u' ({tmp_path / 'bad_interactions.py'}:{cls}) failed in" in err


def test_an_interaction_class_that_is_not_a_base_interaction_is_refused_at_load(tok, tmp_path):
    path = interaction_config(tmp_path, "NotAnInteraction")
    with pytest.raises(ConfigError) as error:
        AgentRunner(tok, MultiTurnConfig(enable=True, interaction_config_path=path))
    assert (f"{path}, interaction[0]: {tmp_path / 'bad_interactions.py'}:NotAnInteraction is not a subclass of "
            "reinforge.inference.interactions.BaseInteraction") in str(error.value)


def test_the_gsm8k_interaction_scores_the_last_answer_as_verl(tok, tmp_path):
    config = tmp_path / "interaction.yaml"
    config.write_text("interaction:\n  - name: checker\n    class_name: gsm8k\n")
    extra = [{"index": i, "interaction_kwargs": {"name": "checker", "ground_truth": "5"}} for i in range(2)]
    out = run_texts(tok, tmp_path, [["#### 4", "The answer is 5"], ["4", "#### 6", "7"]], extra, interaction_config_path=str(config),
                    max_user_turns=2)
    assert list(out["reward_scores"]) == [{"interaction_score": 1.0, "turn_scores": [0.0, 1.0]},
                                          {"interaction_score": 0.0, "turn_scores": [0.0, 0.0]}]


VERL_STYLE_INTERACTION = '''
from reinforge.inference.interactions import BaseInteraction

CALLS = []

class EchoInteraction(BaseInteraction):  # written to verl's contract
    async def start_interaction(self, instance_id=None, **kwargs):
        CALLS.append(("start", instance_id, sorted(kwargs)))
        return None  # verl's agent loop ignores what it returns
    async def generate_response(self, instance_id, messages, **kwargs):
        CALLS.append(("respond", instance_id, kwargs["ground_truth"]))
        return len(CALLS) > 3, "again", None if len(CALLS) == 2 else 0.5, {}  # no score for the first turn
    async def calculate_score(self):  # verl's BaseInteraction declares these without an instance id
        return 0.25
    async def finalize_interaction(self):
        CALLS.append(("finalize",))
'''


def test_an_interaction_written_to_verls_contract_runs_unchanged(tok, tmp_path, capsys):
    """verl's agent loop: start_interaction(request_id, **interaction_kwargs) with the name, its return value unused;
    generate_response(request_id, messages, **interaction_kwargs); a None turn score is no score; calculate_score and
    finalize_interaction as BaseInteraction declares them; no name in the config: the class name without
    'Interaction', lowercased."""
    import sys

    (tmp_path / "echo_interaction.py").write_text(VERL_STYLE_INTERACTION)
    config = tmp_path / "interaction.yaml"
    config.write_text(f"interaction:\n  - class_name: {tmp_path / 'echo_interaction.py'}:EchoInteraction\n")
    extra = [{"index": 0, "interaction_kwargs": {"name": "echo", "ground_truth": "7"}}]
    out = run_texts(tok, tmp_path, [["a", "b", "c"]], extra, interaction_config_path=str(config), max_user_turns=3)
    assert list(out["reward_scores"]) == [{"interaction_score": 0.25, "turn_scores": [0.5, 0.5]}]
    assert out["agent_metrics"][0].get("interaction_errors", 0) == 0 and "failed in" not in capsys.readouterr().err
    calls = next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(tmp_path / "echo_interaction.py")).CALLS
    request_id = calls[0][1]
    assert isinstance(request_id, str) and calls[0] == ("start", request_id, ["ground_truth", "name"])
    assert calls[1:4] == [("respond", request_id, "7")] * 3 and calls[-1] == ("finalize",)


# ------------------------------------------------------------------------------ text environments
GAME = {"name": "guess_number", "low": 1, "high": 8, "target": 5, "max_attempts": 8}


def test_env_kwargs_that_reset_refuses_are_a_data_error_naming_the_row_and_environment(tok, tmp_path):
    with pytest.raises(DataError) as error:
        run_texts(tok, tmp_path, [["3"]], [{"index": 4, "env_kwargs": {**GAME, "low": "one"}}], ["env_agent"])
    assert ("row extra_info.index=4: environment 'guess_number' (reinforge.environment.envs.GuessNumberEnv) cannot reset "
            "with extra_info.env_kwargs") in str(error.value)
    assert "ValueError: invalid literal for int() with base 10: 'one'" in str(error.value)


@pytest.mark.parametrize(("max_user_turns", "observations"), [(1, 1), (2, 2), (0, 3), (None, 3)])
def test_env_agent_sends_at_most_max_user_turns_observations(tok, tmp_path, max_user_turns, observations):
    """As tool_agent counts tool answers and user replies; null or 0: no limit (verl's falsy check)."""
    out = run_texts(tok, tmp_path, [["1", "2", "3", "5"]], [{"index": 0, "env_kwargs": GAME}], ["env_agent"],
                    max_user_turns=max_user_turns)
    assert added_text(tok, out, 0).count("<|im_start|>user\n") == observations
    assert out["agent_metrics"][0]["user_turns"] == observations
    assert out["reward_scores"][0]["env_reward"] == (1.0 if observations == 3 else 0.0)


def test_a_tool_call_still_running_after_the_watchdog_time_is_named(tok, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("REINFORGE_TOOL_WATCHDOG_S", "0.1")
    out = run_texts(tok, tmp_path, [[T_CALL, "answer"]], tool_config_path=bad_tool_config(tmp_path, "Sleeps"))
    assert "<|im_start|>tool\nlate" in added_text(tok, out, 0)  # the call goes on
    assert (f"reinforge: warning: tool 't' ({tmp_path / 'bad_tools.py'}:Sleeps) has been running for 0.1 s on row "
            "extra_info.index=0; it may be stuck") in capsys.readouterr().err


def test_a_bad_watchdog_time_is_refused_before_the_rollout(tok, tmp_path, monkeypatch):
    monkeypatch.setenv("REINFORGE_TOOL_WATCHDOG_S", "5m")
    with pytest.raises(ConfigError, match=r"^REINFORGE_TOOL_WATCHDOG_S='5m': seconds, a number > 0"):
        AgentRunner(tok, MultiTurnConfig(enable=True, tool_config_path=bad_tool_config(tmp_path, "Sleeps")))


def test_a_single_turn_rollout_refuses_rows_that_name_an_agent_loop():
    """What a Dataset class of the user's gives is checked at its first rollout (the built-in dataset's rows at start)."""
    import numpy as np
    import torch

    from reinforge.inference.rollout import check_single_turn

    names = np.array([None, "single_turn_agent", "tool_agent"], dtype=object)
    extra = np.array([{"index": 0}, {"index": 1}, {"index": 9}], dtype=object)
    check_single_turn(Batch({"input_ids": torch.zeros(2, 3)}, {"agent_name": names[:2], "extra_info": extra[:2]}))
    with pytest.raises(DataError, match=r"^a row \(extra_info.index=9\) has agent_name='tool_agent', but actor_rollout_ref"):
        check_single_turn(Batch({"input_ids": torch.zeros(3, 3)}, {"agent_name": names, "extra_info": extra}))


BROKEN_GAMES = '''
from reinforge.environment.envs import TextEnv, register_env

class Base(TextEnv):
    def reset(self, seed=None, **kwargs):
        return "Play."

@register_env("raises_game")
class Raises(Base):
    def step(self, action):
        raise RuntimeError("boom in step")

@register_env("pair_game")
class Pair(Base):
    def step(self, action):
        return "again", 1.0

@register_env("string_reward_game")
class StringReward(Base):
    def step(self, action):
        return "again", "1.0", "no"
'''


@pytest.mark.parametrize(("game", "message"), [
    ("raises_game", "failed in step: RuntimeError: boom in step"),
    ("pair_game", "step returned ('again', 1.0) (tuple); it returns (observation, reward, done)"),
    ("string_reward_game", "step returned the observation 'again' (str) and done 'no' (str); it returns a string and a bool "
                           "(or 0/1)"),
])
def test_an_environment_whose_step_fails_stops_the_run_naming_it_and_the_row(tok, tmp_path, game, message):
    from reinforge.config import load_config

    (tmp_path / "broken_games.py").write_text(BROKEN_GAMES)
    load_config(["actor_rollout_ref.model.path=/m", "actor_rollout_ref.rollout.multi_turn.enable=true",
                 f"algorithm.custom_modules=[{tmp_path / 'broken_games.py'}]"])
    with pytest.raises(ConfigError) as error:
        run_texts(tok, tmp_path, [["1"]], [{"index": 3, "env_kwargs": {"name": game}}], ["env_agent"])
    assert str(error.value).startswith(f"environment {game!r} ({tmp_path / 'broken_games.py'}:")
    assert "on row extra_info.index=3" in str(error.value) and message in str(error.value)


MY_GAME = '''
from reinforge.environment.envs import TextEnv, register_env

@register_env("echo_game")
class EchoGame(TextEnv):
    def reset(self, seed=None, word="hi", **kwargs):
        self.word = word
        return f"Say {word}."

    def step(self, action):
        return "again", float(self.word in action), self.word in action
'''


def test_a_custom_environment_is_registered_by_a_file_in_algorithm_custom_modules(tok, tmp_path):
    """algorithm.custom_modules is imported at start, in the driver and in every Ray worker: @register_env there works."""
    from reinforge.config import load_config

    (tmp_path / "my_game.py").write_text(MY_GAME)
    load_config(["actor_rollout_ref.model.path=/m", "actor_rollout_ref.rollout.multi_turn.enable=true",
                 f"algorithm.custom_modules=[{tmp_path / 'my_game.py'}]"])
    out = run_texts(tok, tmp_path, [["no", "yes"]], [{"index": 0, "env_kwargs": {"name": "echo_game", "word": "yes"}}], ["env_agent"])
    assert out["reward_scores"][0] == {"env_reward": 1.0, "env_done": True}


# ------------------------------------------------------------------------------ agent loop config
MY_LOOP = '''
from reinforge.inference.agent import AgentLoopBase, Conversation

class OneTurn(AgentLoopBase):
    async def run(self, row):
        conversation = Conversation(self.ctx, row)
        await conversation.model_turn()
        return conversation.output()
'''


def test_default_agent_loop_is_checked_with_the_config(tmp_path, monkeypatch):
    """Before any model loads, naming the loops it knows: the built-in ones and those of agent.agent_loop_config_path."""
    from reinforge.config import load_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_loops.py").write_text(MY_LOOP)
    (tmp_path / "loops.yaml").write_text("- name: one_turn\n  _target_: my_loops.OneTurn\n")
    base = ["actor_rollout_ref.model.path=/m", "actor_rollout_ref.rollout.multi_turn.enable=true"]
    with pytest.raises(ConfigError) as error:
        load_config([*base, "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agnet"])
    assert ("actor_rollout_ref.rollout.agent.default_agent_loop='tool_agnet' is not an agent loop; the agent loops are "
            "env_agent, single_turn_agent, tool_agent (your own:") in str(error.value)
    config, _ = load_config([*base, "actor_rollout_ref.rollout.agent.default_agent_loop=one_turn",
                             "actor_rollout_ref.rollout.agent.agent_loop_config_path=loops.yaml"])
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "one_turn"
    load_config(["actor_rollout_ref.model.path=/m", "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agnet"])  # multi-turn off


@pytest.mark.parametrize(("content", "message"), [
    ("- name: my_loop\n   _target_: my_loops.Loop\n", "actor_rollout_ref.rollout.agent.agent_loop_config_path: {file} is not valid YAML"),
    ("loops: {{}}\n", "actor_rollout_ref.rollout.agent.agent_loop_config_path: {file} must be a list of entries with name and _target_"),
    ("- name: my_loop\n", "{file}, entry 0: each agent loop needs a name and a _target_"),
])
def test_agent_loop_config_mistakes_are_config_errors_naming_the_file(tmp_path, content, message):
    from reinforge.inference.agent import load_agent_loops

    file = tmp_path / "loops.yaml"
    file.write_text(content.format())
    with pytest.raises(ConfigError) as error:
        load_agent_loops(file)
    assert message.format(file=file) in str(error.value)


BROKEN_LOOPS = '''
from reinforge.inference.agent import AgentLoopBase

class Raising(AgentLoopBase):
    async def run(self, row):
        raise RuntimeError("loop bug")

class ReturnsNone(AgentLoopBase):
    async def run(self, row):
        return None
'''


@pytest.mark.parametrize(("loop", "message"), [
    ("raising_loop", "failed: RuntimeError: loop bug"),
    ("none_loop", "returned None (NoneType); run returns an AgentOutput"),
])
def test_a_custom_agent_loop_that_fails_stops_the_run_naming_it_and_the_row(tok, tmp_path, loop, message):
    from reinforge.inference.agent import AGENT_LOOP_REGISTRY, load_agent_loops

    (tmp_path / "broken_loops.py").write_text(BROKEN_LOOPS)
    (tmp_path / "loops.yaml").write_text(f"- name: raising_loop\n  _target_: {tmp_path / 'broken_loops.py'}:Raising\n"
                                         f"- name: none_loop\n  _target_: {tmp_path / 'broken_loops.py'}:ReturnsNone\n")
    load_agent_loops(tmp_path / "loops.yaml")
    try:
        with pytest.raises(ConfigError) as error:
            run_texts(tok, tmp_path, [["1"]], [{"index": 7}], [loop])
    finally:
        AGENT_LOOP_REGISTRY.pop("raising_loop"), AGENT_LOOP_REGISTRY.pop("none_loop")
    assert str(error.value).startswith(f"agent loop {loop!r} ({tmp_path / 'broken_loops.py'}:")
    assert "on row extra_info.index=7" in str(error.value) and message in str(error.value)
