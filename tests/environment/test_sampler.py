"""Samplers: the built-in learnability curriculum, user samplers from data.sampler, and exact resume through the loader."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import pytest
import torch
from torch.utils.data import Sampler

from reinforge.batch import Batch
from reinforge.config.data_schema import DataConfig, SamplerRef
from reinforge.environment.dataloader import PromptLoader
from reinforge.environment.sampler import LearnabilitySampler, create_rl_sampler
from reinforge.errors import DataError


def _scored(rows: list[int], scores: list[float]) -> Batch:
    """A trained batch as the trainer hands it over: the dataset row of each trajectory and its score on the last token."""
    token_level_scores = torch.zeros(len(rows), 3)
    token_level_scores[:, -1] = torch.tensor(scores)
    return Batch.from_dict({"token_level_scores": token_level_scores, "dataset_index": rows})


def _dicts(items: list[int]) -> dict:
    return {"item": items}


# ---- the built-in curriculum ------------------------------------------------------------------
def test_weights_are_four_p_one_minus_p_of_the_success_rate_with_a_floor():
    sampler = LearnabilitySampler(list(range(6)), DataConfig(seed=3))
    # row 0 always solved, row 1 never, row 2 half the time, row 3 one time in four (score >= 1 succeeds); 4, 5 unseen
    sampler.update(_scored([0, 0, 1, 1, 2, 2, 3, 3, 3, 3], [1, 1.5, 0, 0.9, 1, 0, 1, 0, 0, -1]))
    assert sampler.weights.tolist() == [0.05, 0.05, 1.0, 0.75, 1.0, 1.0]
    sampler.update(_scored([2, 2], [1, 1]))  # only the rows of the latest batch change
    assert sampler.weights.tolist() == [0.05, 0.05, 0.05, 0.75, 1.0, 1.0]


def test_after_an_update_the_next_draws_favour_the_prompts_solved_half_the_time():
    rows = 200
    learnable = {3, 7}

    def epoch_after(update: bool) -> list[int]:
        sampler = LearnabilitySampler(list(range(rows)), DataConfig(seed=11))
        if update:
            sampler.update(_scored([i for i in range(rows) for _ in range(2)],
                                   [s for i in range(rows) for s in ((1, 0) if i in learnable else (1, 1))]))
        return list(sampler)

    before, after = epoch_after(False), epoch_after(True)
    assert len(before) == len(after) == rows
    # weights 1 for the two learnable prompts and 0.05 for the 198 solved ones: 2 / (2 + 198 * 0.05) = 0.168 of the draws
    share = sum(i in learnable for i in after) / rows
    assert 0.11 < share < 0.23
    assert sum(i in learnable for i in before) / rows < 0.05  # uniform: 2 / 200 = 0.01


def test_an_update_mid_epoch_redraws_the_rest_of_the_epoch():
    sampler = LearnabilitySampler(list(range(20)), DataConfig(seed=0))
    loader = PromptLoader(list(range(20)), 5, _dicts, shuffle=False, seed=0, sampler=sampler)
    batches = iter(loader)
    first = next(batches)
    sampler.update(_scored([i for i in range(20) if i != 9] * 2 + [9, 9], [1.0] * 38 + [1.0, 0.0]))
    rest = [i for batch in batches for i in batch["dataset_index"]]
    assert len(first["dataset_index"]) == 5 and len(rest) == 15
    assert rest.count(9) >= 4  # weight 1 against 19 x 0.05: about half of the 15 draws left (uniform: 0.75)


def test_the_built_in_sampler_needs_the_dataset_rows_of_the_batch():
    sampler = LearnabilitySampler(list(range(4)), DataConfig())
    with pytest.raises(DataError, match="LearnabilitySampler needs `dataset_index`"):
        sampler.update(Batch.from_dict({"token_level_scores": torch.ones(2, 3)}))


# ---- exact resume -----------------------------------------------------------------------------
def _train(loader: PromptLoader, steps: int) -> list[list[int]]:
    """What the trainer does: take a batch, score it (here: a fixed function of the row), hand it back."""
    served = []
    for _ in range(steps):
        batch = next(_stream(loader))
        rows = [i for i in batch["dataset_index"] for _ in range(2)]
        loader.on_batch_end(_scored(rows, [float((i * 7 + j) % 3 == 0) for j, i in enumerate(rows)]))
        served.append(batch["dataset_index"])
    return served


def _stream(loader: PromptLoader) -> Iterator[dict]:
    while True:
        yield from loader


def _curriculum_loader(rows: int = 12) -> PromptLoader:
    data = list(range(rows))
    return PromptLoader(data, 4, _dicts, shuffle=True, seed=1, sampler=LearnabilitySampler(data, DataConfig(seed=9)))


@pytest.mark.parametrize("stop_after", [1, 2, 3, 5])
def test_a_curriculum_resumed_from_a_saved_state_serves_what_an_uninterrupted_run_would(tmp_path, stop_after):
    expected = _train(_curriculum_loader(), 8)
    loader = _curriculum_loader()
    served = _train(loader, stop_after)
    torch.save(loader.state_dict(), tmp_path / "data.pt")  # as the checkpoint does, and loaded as resume does
    resumed = _curriculum_loader()
    resumed.load_state_dict(torch.load(tmp_path / "data.pt"))
    served += _train(resumed, 8 - stop_after)
    assert served == expected
    assert len({tuple(batch) for batch in expected}) > 1


class Reversed(Sampler[int]):
    """A user sampler with no state: the rows from last to first."""

    def __init__(self, data_source, data_config):
        self.rows = len(data_source)

    def __iter__(self):
        return iter(range(self.rows - 1, -1, -1))

    def __len__(self):
        return self.rows


@pytest.mark.parametrize("stop_after", [1, 2, 4])
def test_a_sampler_without_state_resumes_by_skipping_what_was_served(stop_after):
    def loader() -> PromptLoader:
        return PromptLoader(list(range(10)), 3, _dicts, shuffle=True, seed=0, sampler=Reversed(range(10), None))

    expected = _train(loader(), 6)
    assert expected[:3] == [[9, 8, 7], [6, 5, 4], [3, 2, 1]]
    first = loader()
    served = _train(first, stop_after)
    resumed = loader()
    resumed.load_state_dict(first.state_dict())
    assert served + _train(resumed, 6 - stop_after) == expected


class Rotating(Sampler[int]):
    """A user sampler with no state whose order depends on the epoch: rows 0..n-1 shifted by the epoch."""

    def __init__(self, rows):
        self.rows, self.epoch = rows, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        return iter([(i + self.epoch) % self.rows for i in range(self.rows)])

    def __len__(self):
        return self.rows


@pytest.mark.parametrize("stop_after", [2, 3, 4, 5])
def test_a_sampler_without_state_resumed_in_a_later_epoch_is_told_that_epoch(stop_after):
    def loader() -> PromptLoader:
        return PromptLoader(list(range(6)), 2, _dicts, shuffle=False, seed=0, sampler=Rotating(6))

    expected = _train(loader(), 7)
    assert expected == [[0, 1], [2, 3], [4, 5], [1, 2], [3, 4], [5, 0], [2, 3]]
    first = loader()
    served = _train(first, stop_after)
    resumed = loader()
    resumed.load_state_dict(first.state_dict())
    assert served + _train(resumed, 7 - stop_after) == expected


def test_a_checkpoint_with_sampler_state_needs_a_sampler_to_resume():
    loader = _curriculum_loader()
    _train(loader, 1)
    plain = PromptLoader(list(range(12)), 4, _dicts, shuffle=True, seed=1)
    with pytest.raises(DataError, match="holds a sampler state but this run's sampler"):
        plain.load_state_dict(loader.state_dict())


# ---- data.sampler -----------------------------------------------------------------------------
USER_SAMPLERS = """
from torch.utils.data import Sampler
from reinforge.environment.sampler import AbstractSampler


class EvenFirst(AbstractSampler):
    def __init__(self, data_source, data_config):
        self.rows = len(data_source)
        self.batch = data_config.train_batch_size

    def __iter__(self):
        return iter([i for i in range(self.rows) if i % 2 == 0] + [i for i in range(self.rows) if i % 2])

    def __len__(self):
        return self.rows


class NoConfig(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source


class NoLength:
    def __init__(self, data_source, data_config):
        pass

    def __iter__(self):
        return iter([])
"""


@pytest.fixture
def sampler_file(tmp_path):
    path = tmp_path / "my_samplers.py"
    path.write_text(textwrap.dedent(USER_SAMPLERS))
    return path


def _config(path, name) -> DataConfig:
    return DataConfig(train_batch_size=2, sampler=SamplerRef(class_path=str(path) if path else None, class_name=name))


@pytest.mark.parametrize("prefix", ["", "file://"])  # verl's file:// prefix before a file's path
def test_a_user_sampler_gets_the_dataset_and_the_data_config_and_sets_the_order(sampler_file, prefix):
    sampler = create_rl_sampler(_config(f"{prefix}{sampler_file}", "EvenFirst"), list(range(5)))
    assert sampler.batch == 2
    loader = PromptLoader(list(range(5)), 2, _dicts, shuffle=True, seed=0, drop_last=False, sampler=sampler)
    assert [batch["dataset_index"] for batch in loader] == [[0, 2], [4, 1], [3]]


@pytest.mark.parametrize("module", ["reinforge.environment.sampler", "pkg://reinforge.environment.sampler",
                                    "pkg://reinforge/environment/sampler"])  # verl turns pkg:// slashes into dots
def test_the_built_in_curriculum_by_module_name(module):
    assert isinstance(create_rl_sampler(_config(module, "LearnabilitySampler"), list(range(3))), LearnabilitySampler)


def test_no_sampler_configured_means_the_loader_order():
    assert create_rl_sampler(DataConfig(), list(range(3))) is None


@pytest.mark.parametrize(("path", "name", "message"), [
    ("file", "NoConfig", r"data.sampler: NoConfig must accept the keyword arguments data_source and data_config"),
    ("file", "NoLength", r"data.sampler: NoLength has no __len__"),
    ("file", "Missing", r"it defines no 'Missing' \(data.sampler.class_name\); the classes it defines are: EvenFirst, NoConfig, "
                        r"NoLength\."),
    (None, "EvenFirst", r"data.sampler.class_name='EvenFirst' is set but data.sampler.class_path is not"),
])
def test_sampler_errors_name_the_key_and_say_what_to_do(sampler_file, path, name, message):
    with pytest.raises(DataError, match=message):
        create_rl_sampler(_config(sampler_file if path else None, name), list(range(3)))


def test_a_sampler_that_yields_less_than_one_batch_is_refused(sampler_file):
    sampler = create_rl_sampler(_config(sampler_file, "EvenFirst"), list(range(3)))
    with pytest.raises(DataError, match=r"The sampler \(data.sampler\) yields 3 dataset indices per epoch but "
                                        r"data.train_batch_size is 4, so not one full batch can be made"):
        PromptLoader(list(range(5)), 4, _dicts, shuffle=True, seed=0, sampler=sampler)
