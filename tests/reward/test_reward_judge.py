"""The generative judge: its template, the scores parsed from its verdicts, a tiny judge generating for real, and a
training step with a judge alone. The batches and configs are test_reward_model.py's; expected numbers come from
transformers' own generate of the saved model, computed without reinforge's reward model code."""

import re

import pytest
import torch
from transformers import AutoModelForCausalLM

from reinforge.distributed import LocalWorkerGroup
from reinforge.errors import ConfigError, RewardError
from reinforge.inference import GenerationOutput
from reinforge.inference.seeds import VERDICT, derive_seed
from reinforge.reward.models import RewardModelScorer, RewardModelWorker
from reinforge.reward.models.judge import fill_template, parse_score, prompt_text
from tests.reward.test_reward_model import ROWS, make_batch, response_lengths, rm_config
from tests.trainer import conftest as end_to_end

run_steps, small_run, task_files = end_to_end.run_steps, end_to_end.small_run, end_to_end.task_files  # the trainer's end-to-end fixtures

PATTERN = re.compile(r"Score:\s*(-?\d+(?:\.\d+)?)")


@pytest.mark.parametrize("verdict, expected", [
    ("Good answer.\nScore: 7", 7.0),
    ("Score: 3 at first, but on reflection Score: 6.5", 6.5),  # the last match counts
    ("Score: 42", 10.0),  # clipped to max_score
    ("Score: -3", 0.0),  # clipped to min_score
    ("I would give it an eight.", None),
    ("", None),
])
def test_parse_score(verdict, expected):
    assert parse_score(verdict, PATTERN, 0.0, 10.0) == expected


def test_parse_score_without_groups_and_with_an_optional_group():
    assert parse_score("rated 4 then 9/10", re.compile(r"\d+"), 0.0, 100.0) == 10.0
    assert parse_score("grade: none", re.compile(r"grade: (\d+)?"), 0.0, 10.0) is None
    assert parse_score("score nan", re.compile(r"score (\w+)"), 0.0, 10.0) is None


def test_fill_template_fills_once_and_keeps_other_braces():
    template = 'Q: {prompt}\nA: {response}\nTruth: {ground_truth}\nAnswer as {"score": n}'
    filled = fill_template(template, {"prompt": "1+1?", "response": "it is {prompt}", "ground_truth": "2"})
    assert filled == 'Q: 1+1?\nA: it is {prompt}\nTruth: 2\nAnswer as {"score": n}'
    assert prompt_text([{"role": "user", "content": "hi"}]) == "hi"
    assert prompt_text([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]) == "system: s\n\nuser: u"


def test_a_prompt_with_images_reaches_a_reward_model_as_its_text():
    """A row with images keeps its prompt as a content list; a reward model (a judge's {prompt}, a classifier's
    rebuilt conversation) reads its text parts, the images left out (docs/data.md), not the list's Python repr."""
    import numpy as np

    from reinforge.batch import Batch
    from reinforge.reward.models.rows import chat_messages

    parts = [{"type": "image"}, {"type": "text", "text": "Is the square light?"}, {"type": "text", "text": " Answer 1 or 0."}]
    batch = Batch(non_tensors={"raw_prompt": [[{"role": "system", "content": "Be brief."},
                                                {"role": "user", "content": np.array(parts, dtype=object)}]]})
    messages = chat_messages(batch, 0)
    assert messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is the square light? Answer 1 or 0."}]
    assert prompt_text(messages[1:]) == "Is the square light? Answer 1 or 0."


def test_rows_without_the_ground_truth_a_judge_template_uses_are_named_at_start(tiny_model_path):
    from reinforge.errors import DataError
    from reinforge.reward.models.judge import check_judge_rows

    judge = rm_config(tiny_model_path, tiny_model_path, "reward_model.judge.enable=true").reward_model.judge
    rows = [({"reward_model": {"ground_truth": "2"}}, "a.jsonl", 0), ({"prompt": "x"}, "a.jsonl", 1)]
    check_judge_rows(judge, rows)  # the default template has no {ground_truth}: rows need none
    judge.prompt_template = "Q: {prompt} A: {response} Truth: {ground_truth}"
    with pytest.raises(DataError, match=r"^a\.jsonl: row 1, column 'reward_model': there is no such column; "
                                        r"reward_model\.judge\.prompt_template uses \{ground_truth\}"):
        check_judge_rows(judge, rows)
    check_judge_rows(judge, rows[:1])


@pytest.mark.parametrize("override, message", [
    ("reward_model.judge.prompt_template='Rate {answer}'", r"unknown placeholders \['\{answer\}'\]"),
    ("reward_model.judge.prompt_template='Rate {prompt}'", "no {response}"),
    ("reward_model.judge.score_pattern='Score: ('", "not a Python regular expression"),
    ("reward_model.judge.min_score=5", "min <= max"),
    ("reward_model.judge.max_new_tokens=0", "max_new_tokens=0 must be > 0"),
])
def test_judge_config_mistakes_are_config_errors(tiny_model_path, override, message):
    with pytest.raises(ConfigError, match=message):
        rm_config(tiny_model_path, tiny_model_path, "reward_model.judge.enable=true", "reward_model.judge.max_score=4", override)


def test_a_judge_refuses_a_classifiers_checkpoint(tiny_model_path, tmp_path):
    """A sequence classifier with tied embeddings loads as a causal LM without a missing weight, its score head dropped:
    its verdicts would be noise, so the judge names the head and the architecture instead."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from reinforge.errors import ModelError

    classifier = AutoModelForSequenceClassification.from_pretrained(tiny_model_path, num_labels=1)
    classifier.save_pretrained(tmp_path / "rm")
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(tmp_path / "rm")
    group = LocalWorkerGroup(RewardModelWorker, rm_config(tiny_model_path, tmp_path / "rm", "reward_model.judge.enable=true"))
    with pytest.raises(ModelError, match=r"the checkpoint has a classifier's score head \(score\.weight; architectures "
                                         r"\['Qwen2ForSequenceClassification'\]\): a judge generates its verdict with a causal LM"):
        group.init_model()


def judge_config(tiny_model_path, *extra):
    template = "reward_model.judge.prompt_template='Task: {prompt} | Answer: {response} | Truth: {ground_truth}'"
    return rm_config(tiny_model_path, tiny_model_path, "reward_model.judge.enable=true", template, *extra)


def test_judge_reads_the_filled_template_and_its_verdicts_are_parsed(tiny_model_path, tokenizer, monkeypatch):
    batch = make_batch(tokenizer)
    group = LocalWorkerGroup(RewardModelWorker, judge_config(tiny_model_path))
    group.init_model()
    judge = group.workers[0].judge
    seen = []
    verdicts = ["Fine.\nScore: 8", "Score: 15", "no idea", "Score: 2.5"]

    def fixed_verdicts(prompts, params, seeds=None):
        seen.extend(prompts)
        assert params.max_tokens == 64 and params.greedy and seeds is None  # a batch without sample_seeds
        return [GenerationOutput(token_ids=tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
                for text in verdicts]

    monkeypatch.setattr(judge.engine, "generate_batch", fixed_verdicts)
    scored = RewardModelScorer(group)(batch, return_dict=True)

    prompts = ["sort 3 1 2", "system: be brief\n\nuser: reverse 4 5", "the sum of 7 and 8", "digits 9 0"]
    for row, (_, response, _, truth) in enumerate(ROWS):
        chatml = f"<|im_start|>user\nTask: {prompts[row]} | Answer: {response} | Truth: {truth}<|im_end|>\n<|im_start|>assistant\n"
        assert tokenizer.decode(seen[row]) == chatml
    expected = [8.0, 10.0, 0.0, 2.5]
    lengths = response_lengths(batch)
    for row, length in enumerate(lengths):
        if length:
            assert scored["reward_tensor"][row, length - 1].item() == expected[row]
    assert scored["reward_tensor"][2].abs().sum() == 0  # the empty response gets no token reward
    assert scored["reward_metrics"] == {"reward/errors": 0, "reward/timeouts": 0, "reward/rm_truncated": 0,
                                        "reward/judge_parse_failures": 1}


def test_a_tiny_judge_generates_end_to_end(tiny_model_path, tokenizer):
    """Real greedy generation of plain-text judge inputs: each score, or parse failure, matches transformers' own generate.

    The untrained tiny model tends to repeat its input's last token, so inputs ending in a digit
    (the ground truths) give parseable verdicts and the one ending in a word does not.
    """
    batch = make_batch(tokenizer)
    group = LocalWorkerGroup(RewardModelWorker, judge_config(
        tiny_model_path, "reward_model.judge.apply_chat_template=false", "reward_model.judge.max_new_tokens=5",
        r"reward_model.judge.score_pattern='(\d)'", "reward_model.judge.max_score=4", "reward_model.max_length=16"))
    group.init_model()
    scored = group.compute_rm_score(batch)

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    verdicts = []
    for row, (messages, response, _, truth) in enumerate(ROWS):
        text = f"Task: {prompt_text(messages)} | Answer: {response} | Truth: {truth}"
        ids = tokenizer(text)["input_ids"]
        assert scored["rm_truncated"][row] == (len(ids) > 16)
        out = model.generate(torch.tensor([ids[-16:]]), max_new_tokens=5, do_sample=False,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        verdicts.append(tokenizer.decode(out[0, len(ids[-16:]):], skip_special_tokens=True))
        digits = re.findall(r"\d", verdicts[-1])
        assert scored["judge_parse_failed"][row] == (not digits)
        length = response_lengths(batch)[row]
        if length:
            assert scored["rm_scores"][row, length - 1].item() == (min(float(digits[-1]), 4.0) if digits else 0.0)
    assert any(scored["rm_truncated"]) and any(scored["judge_parse_failed"]) and not all(scored["judge_parse_failed"])


def test_a_sampling_judge_seeds_each_verdict_from_its_rows_seed(tiny_model_path, tokenizer):
    """With each row's `sample_seeds`, a row's sampled verdict is the same judged with the whole batch, judged in parts (as
    ranks judge their shares) or judged again (as a resumed run does): the engine's own random stream plays no part."""
    batch = make_batch(tokenizer)
    batch["sample_seeds"] = torch.tensor([11, 12, 13, 14])
    group = LocalWorkerGroup(RewardModelWorker, judge_config(
        tiny_model_path, "reward_model.judge.apply_chat_template=false", "reward_model.judge.max_new_tokens=12",
        "reward_model.judge.temperature=1.0"))
    group.init_model()
    worker = group.workers[0]

    def verdicts(rows: slice) -> list[str]:
        return worker.judge.judge(batch.index(rows), worker.input_tokenizer).verdicts

    whole = verdicts(slice(0, 4))
    assert len(set(whole)) == 4  # sampled: four rows, four different verdicts
    # not the seeds of the rows' agent turns (derive_seed(row seed, turn)): no verdict draws what a turn drew
    assert not {derive_seed(seed, VERDICT) for seed in (11, 12, 13, 14)} & {derive_seed(s, t) for s in (11, 12, 13, 14) for t in range(64)}
    assert verdicts(slice(2, 4)) + verdicts(slice(0, 2)) == whole[2:] + whole[:2]
    assert verdicts(slice(0, 4)) == whole


def test_one_training_step_with_a_judge_alone_and_validation(run_steps, tiny_model_path, tmp_path):
    # no reward function: the judge's score is the whole reward, and the reward manager, unused, is not even made
    # (batch would refuse to be made without a batch function)
    judge = ["custom_reward_function.path=null", "reward_model.reward_manager=batch", "reward_model.enable=true",
             f"reward_model.model.path={tiny_model_path}", "reward_model.judge.enable=true",
             "reward_model.judge.apply_chat_template=false", "reward_model.judge.max_new_tokens=16", "reward_model.judge.max_score=9",
             "reward_model.judge.temperature=1.0",
             "trainer.total_training_steps=1", "trainer.test_freq=1"]
    steps = run_steps(*judge, r"reward_model.judge.score_pattern='(\d)'")
    metrics = steps[1]
    assert 0 <= metrics["reward/judge_parse_failures"] < 4  # 2 prompts x n=2 responses, each judged once
    assert metrics["reward/errors"] == metrics["reward/timeouts"] == 0
    assert metrics["critic/score/mean"] == pytest.approx(metrics["reward/rm_score/mean"])
    assert any(key.startswith("val-aux/") and key.endswith("/rm_score/mean@1") for key in metrics)
    # a judge none of whose verdicts parse would train on rewards of 0: the run stops before the update
    with pytest.raises(RewardError, match=r"^step 1: the reward judge's verdict parsed on none of the 4 responses"):
        run_steps(*judge, r"reward_model.judge.score_pattern='never (\d)'", run_dir=tmp_path / "unparsed")
    assert not list((tmp_path / "unparsed").glob("global_step_*"))
