"""The config of `reinforge eval`: verl's `main_eval` keys (verl/trainer/config/evaluation.yaml) and defaults.

The older `ray_init` section and the newer `ray_kwargs` both load (scoring runs in this process, so neither does
anything); `custom_reward_function.reward_kwargs` is the newer verl's, bound to the function as in training; verl 0.9's
main_eval reads the function from `reward.custom_reward_function.*` (added with `+`), which sets the same keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from reinforge.config.fields import Node, _f, _sub

_NO_EFFECT = "Accepted for verl compatibility; no effect here."


@dataclass
class EvalDataConfig(Node):
    path: str = _f("/tmp/math_Qwen2-7B-Instruct.parquet", "The file to score: parquet (as reinforge generate writes it; "
                   "also .json or .jsonl), one row per prompt.")
    response_key: str = _f("responses", "Column of each row's responses: a list of strings (a single string counts as one "
                           "response).")
    data_source_key: str = _f("data_source", "Column whose value picks the built-in scorer (without "
                              "custom_reward_function.path) and groups the metrics: test_score/<value>.")
    reward_model_key: str = _f("reward_model", "Column of dicts whose 'ground_truth' is passed to the reward function.")
    prompt_key: str = _f("prompt", _NO_EFFECT + " (the prompt is not passed to the reward function, as in verl.)")
    last_user_msg_template: str | None = _f(None, _NO_EFFECT + " (a template of the prompt, which scoring does not read.)")
    use_shm: bool = _f(False, _NO_EFFECT + " (verl: copy the file to shared memory first.)")


@dataclass
class EvalRewardFunctionConfig(Node):
    path: str | None = _f(None, "Python file defining the reward function; null: the built-in scorer of each row's data "
                          "source (verl's main_eval needs a file; the built-in scorers are reinforge's addition).")
    name: str = _f("compute_score", "Name of the function in that file; it is called as fn(data_source, response, "
                   "ground_truth) by position for every response, without extra_info, as verl's main_eval calls it.")
    reward_kwargs: dict = _f({}, "Extra keyword arguments bound to the function (newer verl's key).")


@dataclass
class EvaluationConfig(Node):
    data: EvalDataConfig = _sub(EvalDataConfig, "The file of responses and its columns.")
    custom_reward_function: EvalRewardFunctionConfig = _sub(EvalRewardFunctionConfig, "The reward function.")
    ray_init: dict = _f({"num_cpus": None, "timeline_json_file": None}, _NO_EFFECT + " (older verl's Ray settings; responses "
                        "are scored in this process.)")
    ray_kwargs: dict = _f({"ray_init": {"num_cpus": None}, "timeline_json_file": None},
                          _NO_EFFECT + " (newer verl's Ray settings; responses are scored in this process.)")


_INERT = {
    "data.prompt_key": "the prompt is not passed to the reward function (as in verl's main_eval)",
    "data.last_user_msg_template": "scoring does not read the prompt",
    "data.use_shm": "the file is read from its path",
    "ray_init": "no Ray: responses are scored in this process",
    "ray_kwargs": "no Ray: responses are scored in this process",
}


def unused_evaluation_settings(user_keys: list[str]) -> list[str]:
    """One line per key the user set that does nothing in this command, with the reason."""
    lines = []
    for key in dict.fromkeys(user_keys):
        reason = next((r for prefix, r in _INERT.items() if key == prefix or key.startswith(prefix + ".")), None)
        if key.startswith(("hydra.", "hydra/")):
            reason = "Hydra's own setting (its outputs and logs); it changes no config key"
        if reason:
            lines.append(f"{key}: {reason}")
    return lines


def load_evaluation_config(args: list[str], config_file: str | None = None) -> tuple[EvaluationConfig, list[str]]:
    """The config of `reinforge eval` from overrides (and a YAML file), and the keys the user set."""
    from reinforge.config.loading import naming_the_file, resolve

    # verl 0.9's main_eval reads the function from reward.custom_reward_function (added with +): the same keys here
    args = [re.sub(r"^([+~]{0,2})reward\.custom_reward_function\.", r"\1custom_reward_function.", arg) for arg in args]
    with naming_the_file(config_file, args, EvaluationConfig, "evaluation"):
        config, user_keys, ignored = resolve(EvaluationConfig, args, config_file, base="evaluation")
    return config, ignored + user_keys


def describe_evaluation(config: EvaluationConfig, user_keys: list[str]) -> str:
    """What `reinforge eval --dry-run` prints: the resolved config and the settings without effect."""
    from reinforge.config.loading import describe

    return describe(config, unused_evaluation_settings(user_keys))
