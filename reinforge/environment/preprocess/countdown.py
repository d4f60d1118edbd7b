"""Countdown (reach a target with + - * / over given numbers) as verl-schema RL data, like TinyZero.

Two sources:

- a copy of Jiayi-Pan/Countdown-Tasks-3to4 (columns `target`, `nums`), local (`--input`) or from
  the hub. As in TinyZero, a single split is cut in two: the first `num_train` rows are the train
  split and the next `num_test` rows the test split (when there are fewer rows, the last
  `num_test` rows are the test split and the rest the train split). A copy that already has train
  and test files is used as it is.
- generated here (`--generate`), solvable by construction: draw between `min_numbers` and
  `max_numbers` integers in NUMBER_RANGE, combine them in a random order with random operations,
  each number exactly once, keeping every intermediate result a positive integer (subtraction
  only of a smaller from a larger value, division only when exact), and keep the task when the
  final value is a target in 1..`max_target`; otherwise draw again. The same seed gives the same
  files. Every task (target and multiset of numbers) occurs once across both splits, so train and
  test never overlap; train is drawn first, so `num_test` does not change the train split.
  The expression that solves a generated task is kept in `extra_info.expression`.

Output rows: the dataset's `target` and `nums`, `data_source` "countdown", `prompt` one user message (template
`base`: TinyZero's base-model prompt, a "User:/Assistant:" conversation that opens the assistant's `<think>`;
`qwen-instruct`: TinyZero's, the Qwen chat's turns written out; template `chat`: only the user's request, for a chat
model whose template adds the turns),
`ability` "math", `reward_model` `{"style": "rule", "ground_truth": {"target": int, "numbers": [int, ...]}}`,
`extra_info` `{"split", "index"}` (+ `"expression"` for generated tasks).
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reinforge.environment.preprocess.splits import UNSPLIT, HubDataset, RawSplit, load_raw_splits, take, write_splits
from reinforge.errors import ConfigError, DataError

DATA_SOURCE = "countdown"
HUB = HubDataset("Jiayi-Pan/Countdown-Tasks-3to4")
TEMPLATES = ("base", "chat", "qwen-instruct")
TRAIN_SIZE, TEST_SIZE = 327680, 1024  # TinyZero's split of the hub dataset
NUMBER_RANGE = (1, 99)  # the numbers drawn for generated tasks, inclusive
MAX_DRAWS_PER_TASK = 1000  # generation gives up (DataError) after this many draws per task on average

_REQUEST = (
    "Using the numbers {numbers}, create an equation that equals {target}. You can use basic arithmetic operations "
    "(+, -, *, /) and each number can only be used once. Show your work in <think> </think> tags. And return the "
    "final answer in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>."
)
_BASE_TEMPLATE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant "
    "first thinks about the reasoning process in the mind and then provides the user with the answer.\n"
    "User: {request}\nAssistant: Let me solve this step by step.\n<think>"
)
_QWEN_INSTRUCT_TEMPLATE = (  # TinyZero's for Qwen instruct models: the chat's turns written out in the user message
    "<|im_start|>system\nYou are a helpful assistant. You first thinks about the reasoning process in the mind and then "
    "provides the user with the answer.<|im_end|>\n<|im_start|>user\n {request}<|im_end|>\n<|im_start|>assistant\n"
    "Let me solve this step by step.\n<think>"
)


@dataclass(frozen=True)
class Task:
    """One countdown task; `expression` solves it (None when the task came from a dataset)."""

    target: int
    numbers: tuple[int, ...]
    expression: str | None = None

    def key(self) -> tuple[int, tuple[int, ...]]:
        return self.target, tuple(sorted(self.numbers))


# ------------------------------------------------------------------------------------- rows
def prompt_text(target: int, numbers: list[int], template: str = "base") -> str:
    """The user message of a task in the given template (`base` or `chat`)."""
    request = _REQUEST.format(numbers=list(numbers), target=target)
    if template == "chat":
        return request
    if template == "base":
        return _BASE_TEMPLATE.format(request=request)
    if template == "qwen-instruct":
        return _QWEN_INSTRUCT_TEMPLATE.format(request=request)
    raise ConfigError(f"--template {template!r}: use one of {', '.join(TEMPLATES)}.")


def make_row(task: Task, split: str, index: int, template: str) -> dict[str, Any]:
    """The verl-schema row of one task (`extra_info.expression` when the task has a known solution)."""
    numbers = [int(n) for n in task.numbers]
    extra_info: dict[str, Any] = {"split": split, "index": index}
    if task.expression is not None:
        extra_info["expression"] = task.expression
    return {
        "target": int(task.target),  # the dataset's own columns, which TinyZero's and verl's files keep
        "nums": numbers,
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": prompt_text(int(task.target), numbers, template)}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": {"target": int(task.target), "numbers": numbers}},
        "extra_info": extra_info,
    }


# ------------------------------------------------------------------------------- generation
Node = int | tuple[str, "Node", "Node"]  # a number, or (operator, larger operand, smaller operand)


def random_task(rng: random.Random, count: int, max_target: int) -> Task | None:
    """Combine `count` random numbers into one value; the task when it is in 1..max_target, else None."""
    low, high = NUMBER_RANGE
    numbers = [low + _below(rng, high - low + 1) for _ in range(count)]
    terms: list[tuple[int, Node]] = [(n, n) for n in numbers]  # every value is a positive integer
    while len(terms) > 1:
        i = _below(rng, len(terms))
        j = _below(rng, len(terms) - 1)
        j += j >= i  # a second, different term
        (x, left), (y, right) = terms[i], terms[j]
        if x < y:
            (x, left), (y, right) = (y, right), (x, left)
        del terms[max(i, j)], terms[min(i, j)]
        operators = "+*" + ("-" if x > y else "") + ("/" if x % y == 0 else "")
        op = operators[_below(rng, len(operators))]
        value = x + y if op == "+" else x * y if op == "*" else x - y if op == "-" else x // y
        terms.append((value, (op, left, right)))
    value, tree = terms[0]
    return Task(value, tuple(numbers), render(tree)) if value <= max_target else None


def _below(rng: random.Random, n: int) -> int:
    """A uniform integer in 0..n-1 (faster than rng.randrange, which matters for 300k tasks)."""
    return int(rng.random() * n)


def render(node: Node, outermost: bool = True) -> str:
    """The expression of a tree, every inner operation in parentheses: `(4 * 36) - 95`."""
    if isinstance(node, int):
        return str(node)
    op, left, right = node
    text = f"{render(left, False)} {op} {render(right, False)}"
    return text if outermost else f"({text})"


def generate_tasks(num_train: int, num_test: int, seed: int, min_numbers: int = 3, max_numbers: int = 4,
                   max_target: int = 100) -> tuple[list[Task], list[Task]]:
    """`num_train` and `num_test` distinct solvable tasks (no task in both); deterministic in `seed`."""
    if not 2 <= min_numbers <= max_numbers:
        raise ConfigError(f"--min_numbers {min_numbers} --max_numbers {max_numbers}: need 2 <= min_numbers <= max_numbers.")
    if max_target < 1:
        raise ConfigError(f"--max_target {max_target}: must be at least 1.")
    rng = random.Random(seed)
    seen: set[tuple[int, tuple[int, ...]]] = set()
    wanted = num_train + num_test
    tasks: list[Task] = []
    draws_left = MAX_DRAWS_PER_TASK * wanted
    while len(tasks) < wanted:
        if draws_left == 0:
            raise DataError(
                f"Could only generate {len(tasks)} distinct countdown tasks of the {wanted} asked for with "
                f"--min_numbers {min_numbers} --max_numbers {max_numbers} --max_target {max_target}; "
                "ask for fewer, or allow more numbers or a larger target."
            )
        draws_left -= 1
        task = random_task(rng, min_numbers + _below(rng, max_numbers - min_numbers + 1), max_target)
        if task is not None and task.key() not in seen:
            seen.add(task.key())
            tasks.append(task)
    return tasks[:num_train], tasks[num_train:]


# ------------------------------------------------------------------------------ from a dataset
def split_dataset(raw: dict[str, RawSplit], num_train: int, num_test: int) -> dict[str, list[Task]]:
    """Train and test tasks of a loaded copy: its own splits when it has both, else one split cut in two."""
    if "train" in raw and "test" in raw and UNSPLIT not in raw:
        return {split: _tasks(raw[split]) for split in ("train", "test")}
    if len(raw) != 1:
        raise DataError(f"Countdown input: expected one file set (to cut into train and test) or train and test files; "
                        f"found splits {', '.join(sorted(raw))}.")
    (only,) = raw.values()
    total = len(only.rows)
    if total <= num_test:
        raise DataError(f"Countdown input has {total} rows, not more than --num_test {num_test}; lower --num_test.")
    if total >= num_train + num_test:
        train, test = only.slice(0, num_train), only.slice(num_train, num_train + num_test)
    else:
        train, test = only.slice(0, total - num_test), only.slice(total - num_test, total)
        print(f"reinforge: the countdown input has {total} rows, fewer than --num_train {num_train} + --num_test "
              f"{num_test}; train gets the first {total - num_test}", file=sys.stderr)
    return {"train": _tasks(train), "test": _tasks(test)}


def _tasks(raw: RawSplit) -> list[Task]:
    tasks = []
    for row, (source, number) in zip(raw.rows, raw.origins, strict=True):
        target, numbers = row.get("target"), row.get("nums")
        if not isinstance(target, int) or not isinstance(numbers, (list, tuple)) or not numbers:
            raise DataError(
                f"{source}: row {number} needs an integer 'target' and a list of integers 'nums' (the columns of "
                f"Jiayi-Pan/Countdown-Tasks-3to4); its columns are {', '.join(row) or '(none)'}."
            )
        tasks.append(Task(target, tuple(int(n) for n in numbers)))
    return tasks


# ------------------------------------------------------------------------------------ command
def preprocess(local_dir: str | Path, inputs: list[str] | None = None, generate: bool = False, template: str = "base",
               num_train: int = TRAIN_SIZE, num_test: int = TEST_SIZE, seed: int = 42, min_numbers: int = 3,
               max_numbers: int = 4, max_target: int = 100, max_train: int | None = None,
               max_test: int | None = None) -> dict[str, Path]:
    """Write `local_dir/train.parquet` and `test.parquet`: generated tasks, or a copy's (`inputs`, else the hub)."""
    if template not in TEMPLATES:
        raise ConfigError(f"--template {template!r}: use one of {', '.join(TEMPLATES)}.")
    if generate and inputs:
        raise ConfigError("--generate makes new tasks and --input reads them; pass one of the two.")
    if generate:
        train, test = generate_tasks(num_train, num_test, seed, min_numbers, max_numbers, max_target)
        tasks = {"train": train, "test": test}
    else:
        tasks = split_dataset(load_raw_splits(inputs, HUB), num_train, num_test)
    limits = {"train": max_train, "test": max_test}
    rows = {split: [make_row(task, split, i, template) for i, task in enumerate(take(split_tasks, limits[split]))]
            for split, split_tasks in tasks.items()}
    return write_splits(local_dir, rows)
