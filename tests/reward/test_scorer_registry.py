"""default_compute_score routing by data_source, and registering scorers."""

import pytest

from reinforge.errors import RewardError
from reinforge.reward import default_compute_score, register_scorer, registry


@pytest.fixture
def clean_registry(monkeypatch):
    """Scorers registered in a test disappear after it."""
    monkeypatch.setattr(registry, "_EXACT", dict(registry._EXACT))
    monkeypatch.setattr(registry, "_PREFIX", dict(registry._PREFIX))


@pytest.mark.parametrize(
    ("data_source", "solution", "ground_truth"),
    [
        ("openai/gsm8k", "#### 72", "72"),
        ("lighteval/MATH", r"\boxed{\frac12}", r"\frac{1}{2}"),
        ("DigitalLearningGmbH/MATH-lighteval", r"\boxed{3}", "3"),
        ("HuggingFaceH4/MATH-500", r"\boxed{3}", "3"),
        ("countdown", "<answer>2*3*4</answer>", {"target": 24, "numbers": [2, 3, 4]}),
        ("countdown_3to4", "<answer>2*3*4</answer>", {"target": 24, "numbers": [2, 3, 4]}),
    ],
)
def test_builtin_routes(data_source, solution, ground_truth):
    assert default_compute_score(data_source, solution, ground_truth, extra_info={"split": "train"}) == 1.0


def test_kwargs_reach_the_scorer():
    assert default_compute_score("openai/gsm8k", "it is 72", "72", method="flexible") == 1.0


def test_unknown_data_source_lists_known_ones_and_the_custom_function_key():
    with pytest.raises(RewardError) as info:
        default_compute_score("my/dataset", "x", "y")
    message = str(info.value)
    assert "'my/dataset'" in message
    assert "openai/gsm8k" in message and "lighteval/MATH" in message and "countdown*" in message
    assert "custom_reward_function.path=" in message


def test_register_by_call_and_decorator(clean_registry):
    register_scorer("synthetic/add", lambda solution_str, ground_truth: float(solution_str == ground_truth))

    @register_scorer("synthetic/mul")
    def mul_score(solution_str, ground_truth, extra_info=None):
        return extra_info["bonus"] if solution_str == ground_truth else 0.0

    assert default_compute_score("synthetic/add", "3", "3", extra_info={"ignored": True}) == 1.0
    assert default_compute_score("synthetic/mul", "6", "6", extra_info={"bonus": 0.5}) == 0.5
    assert mul_score("6", "6", {"bonus": 2}) == 2


def test_exact_name_beats_prefix_and_longest_prefix_wins(clean_registry):
    register_scorer("task", lambda s, g: 1.0, prefix=True)
    register_scorer("task_hard", lambda s, g: 2.0, prefix=True)
    register_scorer("task_hard_v2", lambda s, g: 3.0)
    assert default_compute_score("task_easy", "", "") == 1.0
    assert default_compute_score("task_hard_v1", "", "") == 2.0
    assert default_compute_score("task_hard_v2", "", "") == 3.0


def test_registering_a_non_callable_fails():
    with pytest.raises(TypeError, match="callable"):
        register_scorer("bad", 3)
