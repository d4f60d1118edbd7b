"""Learned reward models: a tiny sequence classifier, built here, scoring real trajectory Batches (the judge:
test_reward_judge.py).

Expected numbers come from a direct forward of the saved model on the text the
reward model should read, computed without reinforge's reward model code.
"""


import pytest
import torch
from transformers import AutoModelForSequenceClassification, LlamaConfig, LlamaForSequenceClassification

from reinforge.batch import Batch
from reinforge.config import load_config, unused_settings
from reinforge.distributed import LocalWorkerGroup
from reinforge.errors import ConfigError, ModelError
from reinforge.inference import GenerationOutput
from reinforge.inference.rollout import trajectories
from reinforge.reward import make_reward_manager
from reinforge.reward.models import RewardModelScorer, RewardModelWorker
from reinforge.training.tiny_model import TinyModelSpec, build_tokenizer
from tests.trainer import conftest as end_to_end

RESPONSE_LEN = 8
ROWS = [  # (prompt messages, response text, ends with EOS, ground truth)
    ([{"role": "user", "content": "sort 3 1 2"}], "1 2 3", True, "1 2 3"),
    ([{"role": "system", "content": "be brief"}, {"role": "user", "content": "reverse 4 5"}], "5 4 and", False, "5 4"),
    ([{"role": "user", "content": "the sum of 7 and 8"}], "", False, "15"),  # an empty response
    ([{"role": "user", "content": "digits 9 0"}], "9", True, "nine"),
]
run_steps, small_run, task_files = end_to_end.run_steps, end_to_end.small_run, end_to_end.task_files  # the trainer's end-to-end fixtures
HASH_TEMPLATE = "{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"


def save_classifier(folder, tokenizer, seed=0, num_labels=1):
    """A randomly initialised tiny LlamaForSequenceClassification (one label) saved with `tokenizer`."""
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, num_labels=num_labels,
                         pad_token_id=tokenizer.pad_token_id, initializer_range=0.2)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForSequenceClassification(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def same_tokenizer_rm(tmp_path_factory, tokenizer):
    return save_classifier(tmp_path_factory.mktemp("rm-same"), tokenizer)


@pytest.fixture(scope="module")
def other_tokenizer(tokenizer):
    other = build_tokenizer(TinyModelSpec(vocab_size=320, seed=3))
    other.chat_template = HASH_TEMPLATE
    assert other.get_vocab() != tokenizer.get_vocab()
    return other


@pytest.fixture(scope="module")
def other_tokenizer_rm(tmp_path_factory, other_tokenizer):
    return save_classifier(tmp_path_factory.mktemp("rm-other"), other_tokenizer, seed=1)


def make_batch(tokenizer, rows=ROWS):
    """Trajectories as the rollout lays them out, plus raw_prompt, reward_model and data_source."""
    prompts = [tokenizer(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
                         add_special_tokens=False)["input_ids"] for messages, *_ in rows]
    width = max(map(len, prompts))
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids):] = torch.tensor(ids)
        attention_mask[row, width - len(ids):] = 1
    outputs = []
    for _, text, eos, _ in rows:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if eos else [])
        outputs.append(GenerationOutput(token_ids=ids))
    batch = trajectories(Batch({"input_ids": input_ids, "attention_mask": attention_mask}), outputs, tokenizer.pad_token_id,
                         width=RESPONSE_LEN)
    batch.non_tensors.update(Batch(non_tensors={
        "raw_prompt": [messages for messages, *_ in rows], "data_source": ["toy"] * len(rows),
        "reward_model": [{"ground_truth": truth, "style": "model"} for *_, truth in rows]}).non_tensors)
    return batch


def rm_config(actor_path, rm_path, *extra):
    config, _ = load_config([f"actor_rollout_ref.model.path={actor_path}", "trainer.device=cpu", "reward_model.enable=true",
                             f"reward_model.model.path={rm_path}", *extra])
    return config


def worker_for(config):
    worker = RewardModelWorker(config)
    worker.init_model()
    return worker


def direct_score(rm_path, token_ids):
    """The classifier's output for one unpadded sequence, from a fresh load of the saved folder."""
    model = AutoModelForSequenceClassification.from_pretrained(rm_path).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([token_ids])).logits[0, 0].item()


def valid_ids(batch, row):
    return batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()


def response_lengths(batch):
    return batch["attention_mask"][:, -RESPONSE_LEN:].sum(-1).tolist()


# ---- the sequence classifier ---------------------------------------------------------------------
def test_score_equals_a_direct_forward_and_lands_on_the_last_response_token(tiny_model_path, tokenizer, same_tokenizer_rm):
    batch = make_batch(tokenizer)
    worker = worker_for(rm_config(tiny_model_path, same_tokenizer_rm))
    assert not worker.switch_chat_template  # same tokenizer: the policy's token ids are read as they are
    rm_scores = worker.compute_rm_score(batch)["rm_scores"]
    assert rm_scores.shape == (len(ROWS), RESPONSE_LEN) and rm_scores.dtype == torch.float32
    for row, length in enumerate(response_lengths(batch)):
        if length == 0:
            assert not rm_scores[row].any()
            continue
        expected = direct_score(same_tokenizer_rm, valid_ids(batch, row))
        assert rm_scores[row, length - 1].item() == pytest.approx(expected, abs=1e-5)
        assert torch.count_nonzero(rm_scores[row]) == 1
    assert len({round(v, 4) for v in rm_scores.sum(-1).tolist()}) > 2  # a real model, not a constant


def test_micro_batches_and_token_budgets_give_the_scores_of_one_batch(tiny_model_path, tokenizer, same_tokenizer_rm,
                                                                      other_tokenizer_rm):
    batch = make_batch(tokenizer)
    for rm_path in (same_tokenizer_rm, other_tokenizer_rm):
        whole_worker = worker_for(rm_config(tiny_model_path, rm_path))
        whole = whole_worker.compute_rm_score(batch)["rm_scores"]
        lengths = whole_worker.classifier_inputs(batch).attention_mask.sum(-1)
        budget = int(lengths.max())  # several micro-batches of balanced token totals, each trimmed to its columns
        assert lengths.sum() > 2 * budget
        for extra in (["reward_model.micro_batch_size_per_gpu=1"],
                      ["reward_model.use_dynamic_bsz=true", f"reward_model.forward_max_token_len_per_gpu={budget}"]):
            micro = worker_for(rm_config(tiny_model_path, rm_path, *extra))
            assert torch.allclose(micro.compute_rm_score(batch)["rm_scores"], whole, atol=1e-5), extra


def test_packed_micro_batches_give_the_padded_scores(tiny_model_path, tokenizer, same_tokenizer_rm, other_tokenizer_rm,
                                                     monkeypatch):
    """reward_model.model.use_remove_padding (default true): the sequences packed end to end, the score read where the
    padded forward pools it (a response ending in EOS, the pad id here, at the token before); a spy sees the packed
    forward run, and false keeps the padded one."""
    import reinforge.reward.models.classifier as classifier

    packed_runs = []
    packed_scores = classifier._packed_scores
    monkeypatch.setattr(classifier, "_packed_scores", lambda *args: packed_runs.append(packed_scores(*args)) or packed_runs[-1])
    long_prompt = ([{"role": "user", "content": "count " + " ".join(map(str, range(40)))}], "40 41", True, "40 41 42")
    batch = make_batch(tokenizer, [*ROWS, long_prompt, *ROWS])  # short rows fit beside each other in the long one's length
    eos_is_pad = [f"reward_model.model.override_config={{pad_token_id:{tokenizer.eos_token_id}}}"]
    for rm_path, override in ((same_tokenizer_rm, []), (same_tokenizer_rm, eos_is_pad), (other_tokenizer_rm, [])):
        padded = worker_for(rm_config(tiny_model_path, rm_path, "reward_model.model.use_remove_padding=false", *override))
        expected = padded.compute_rm_score(batch)["rm_scores"]
        assert packed_runs == []
        for extra in (override, [*override, "reward_model.micro_batch_size_per_gpu=3"]):
            scores = worker_for(rm_config(tiny_model_path, rm_path, *extra)).compute_rm_score(batch)["rm_scores"]
            assert torch.allclose(scores, expected, atol=1e-5), (rm_path, extra)
            assert any(run is not None for run in packed_runs), extra  # micro-batches of alike rows stay padded
            packed_runs.clear()
        if override:  # the EOS rows are scored at the token before their EOS: not as with the tokenizer's own pad id
            assert padded.model.config.pad_token_id == tokenizer.eos_token_id
            assert not torch.allclose(expected.sum(-1)[0], worker_for(rm_config(
                tiny_model_path, rm_path)).compute_rm_score(batch)["rm_scores"].sum(-1)[0])
            packed_runs.clear()


def test_a_reward_model_that_ignores_packed_positions_keeps_padded_micro_batches(tiny_model_path, tokenizer,
                                                                                same_tokenizer_rm, monkeypatch, capsys):
    import transformers.masking_utils as masking

    batch = make_batch(tokenizer)
    expected = worker_for(rm_config(tiny_model_path, same_tokenizer_rm)).compute_rm_score(batch)["rm_scores"]
    monkeypatch.setattr(masking, "find_packed_sequence_indices", lambda position_ids: None)
    scores = worker_for(rm_config(tiny_model_path, same_tokenizer_rm)).compute_rm_score(batch)["rm_scores"]
    assert torch.allclose(scores, expected, atol=1e-5)
    assert "LlamaForSequenceClassification does not compute sequences packed" in capsys.readouterr().err


def test_another_tokenizer_reads_the_conversation_in_its_own_chat_template(tiny_model_path, tokenizer, other_tokenizer,
                                                                           other_tokenizer_rm):
    batch = make_batch(tokenizer)
    worker = worker_for(rm_config(tiny_model_path, other_tokenizer_rm,
                                  f"reward_model.model.input_tokenizer={tiny_model_path}"))
    assert worker.switch_chat_template
    inputs = worker.classifier_inputs(batch)
    rm_scores = worker.compute_rm_score(batch)["rm_scores"]
    for row, (messages, response, _, _) in enumerate(ROWS):
        expected_text = "".join(f"### {m['role']}: {m['content']}\n" for m in messages) + f"### assistant: {response}\n"
        assert inputs.texts[row] == expected_text  # the response's EOS is dropped, the prompt's template replaced
        ids = inputs.input_ids[row][inputs.attention_mask[row].bool()].tolist()
        assert ids == other_tokenizer(expected_text, add_special_tokens=False)["input_ids"]
        length = response_lengths(batch)[row]
        if length:
            assert rm_scores[row, length - 1].item() == pytest.approx(direct_score(other_tokenizer_rm, ids), abs=1e-5)


def test_max_length_cuts_the_end_of_a_rebuilt_input_and_is_counted(tiny_model_path, tokenizer, other_tokenizer,
                                                                   other_tokenizer_rm, capsys):
    batch = make_batch(tokenizer)
    config = rm_config(tiny_model_path, other_tokenizer_rm, "reward_model.max_length=9")
    group = LocalWorkerGroup(RewardModelWorker, config)
    group.init_model()
    inputs = group.workers[0].classifier_inputs(batch)
    full = [other_tokenizer(text, add_special_tokens=False)["input_ids"] for text in inputs.texts]
    assert inputs.truncated == [len(ids) > 9 for ids in full] and any(inputs.truncated)
    for row, ids in enumerate(full):
        assert inputs.input_ids[row][inputs.attention_mask[row].bool()].tolist() == ids[:9]
    scored = RewardModelScorer(group)(batch, return_dict=True)
    assert scored["reward_metrics"]["reward/rm_truncated"] == sum(inputs.truncated)
    assert inputs.truncated[0]  # the first input is shown once, as the model reads it: cut
    assert (f"the first (cut to reward_model.max_length=9 tokens): {other_tokenizer.decode(full[0][:9])!r}"
            in capsys.readouterr().out)
    row = 0
    assert scored["reward_tensor"][row].sum().item() == pytest.approx(direct_score(other_tokenizer_rm, full[row][:9]), abs=1e-5)


def test_the_policys_tokenizer_decides_whether_inputs_are_rebuilt(tiny_model_path, tokenizer, other_tokenizer, tmp_path):
    """A reward model with the policy's vocabulary but its own chat template rebuilds the conversations whatever
    input_tokenizer names; an input_tokenizer whose vocabulary is not the policy's cannot decode the policy's tokens."""
    templated = tokenizer.__class__.from_pretrained(tiny_model_path)
    templated.chat_template = HASH_TEMPLATE
    rm = save_classifier(tmp_path / "rm-hash", templated)
    for extra in ([], [f"reward_model.model.input_tokenizer={rm}"]):
        worker = worker_for(rm_config(tiny_model_path, rm, *extra))
        assert worker.switch_chat_template, extra
        assert worker.classifier_inputs(make_batch(tokenizer)).texts[0] == "### user: sort 3 1 2\n### assistant: 1 2 3\n"
    other_tokenizer.save_pretrained(tmp_path / "other")
    with pytest.raises(ModelError, match=r"^reward_model.model.input_tokenizer=.*other: its vocabulary is not the policy's"):
        worker_for(rm_config(tiny_model_path, rm, f"reward_model.model.input_tokenizer={tmp_path / 'other'}"))


def test_a_token_classifier_checkpoint_keeps_its_bias_and_is_read_at_the_last_token(tiny_model_path, tokenizer, tmp_path,
                                                                                     monkeypatch):
    """verl's model merger saves value models as *ForTokenClassification, whose head has a bias; loaded as a sequence
    classifier it would be dropped. Both the padded and the packed forward read it at the last token that is not the pad
    id (here the EOS id: a response ending in EOS is read at the token before), as a sequence classifier pools."""
    from transformers import LlamaForTokenClassification

    import reinforge.reward.models.classifier as classifier

    packed_runs = []
    packed_scores = classifier._packed_scores
    monkeypatch.setattr(classifier, "_packed_scores", lambda *args: packed_runs.append(packed_scores(*args)) or packed_runs[-1])
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, num_labels=1,
                         pad_token_id=tokenizer.eos_token_id, initializer_range=0.2)
    torch.manual_seed(0)
    model = LlamaForTokenClassification(config).eval()
    with torch.no_grad():
        model.score.bias.fill_(5.0)
    model.save_pretrained(tmp_path / "tok-rm")
    tokenizer.save_pretrained(tmp_path / "tok-rm")
    verl_critic = tmp_path / "verl-critic"  # verl's FSDP critic checkpoint: the same weights under the base model's name
    model.config.architectures = ["LlamaForCausalLM"]
    model.save_pretrained(verl_critic)
    tokenizer.save_pretrained(verl_critic)
    long_prompt = ([{"role": "user", "content": "count " + " ".join(map(str, range(40)))}], "40 41", True, "40 41 42")
    batch = make_batch(tokenizer, [*ROWS, long_prompt, *ROWS])  # short rows fit beside the long one: packing pays
    for packing, folder in (("true", tmp_path / "tok-rm"), ("false", tmp_path / "tok-rm"), ("true", verl_critic)):
        worker = worker_for(rm_config(tiny_model_path, folder, f"reward_model.model.use_remove_padding={packing}"))
        assert type(worker.model).__name__ == "LlamaForTokenClassification"
        scores = worker.compute_rm_score(batch)["rm_scores"]
        assert any(run is not None for run in packed_runs) is (packing == "true"), packing
        packed_runs.clear()
        ended_by_eos = 0
        for row, length in enumerate(response_lengths(batch)):
            if length:
                ids = valid_ids(batch, row)
                while ids[-1] == tokenizer.eos_token_id:  # the pad id: read at the last token before it
                    ids, ended_by_eos = ids[:-1], ended_by_eos + 1
                with torch.no_grad():
                    expected = model(input_ids=torch.tensor([valid_ids(batch, row)])).logits[0, len(ids) - 1, 0].item()
                assert scores[row, length - 1].item() == pytest.approx(expected, abs=1e-5), packing
        assert ended_by_eos


def test_a_checkpoint_whose_head_has_weights_the_classifier_would_not_use_is_refused(tiny_model_path, tokenizer, tmp_path):
    """Extra weights of the score head would be dropped in silence; others (an lm_head a conversion left) are harmless."""
    from safetensors.torch import load_file, save_file

    folder = save_classifier(tmp_path / "extra", tokenizer)
    weights = load_file(folder / "model.safetensors")
    save_file({**weights, "lm_head.weight": torch.zeros(len(tokenizer), 32)}, folder / "model.safetensors", metadata={"format": "pt"})
    worker_for(rm_config(tiny_model_path, folder))
    save_file({**weights, "classifier.weight": torch.zeros(1, 32)}, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelError, match=r"the checkpoint's score head has weights the LlamaForSequenceClassification does "
                                         r"not use, \['classifier.weight'\]"):
        worker_for(rm_config(tiny_model_path, folder))


def test_a_max_length_that_leaves_no_response_token_is_named(tiny_model_path, tokenizer, other_tokenizer_rm, capsys):
    worker = worker_for(rm_config(tiny_model_path, other_tokenizer_rm, "reward_model.max_length=3"))
    worker.compute_rm_score(make_batch(tokenizer))
    worker.compute_rm_score(make_batch(tokenizer))
    err = capsys.readouterr().err
    assert err.count("reinforge: warning: reward_model.max_length=3 cuts away every response token of 4 of 4 responses") == 1


def test_max_length_with_the_policys_tokenizer_is_reported_without_effect(tiny_model_path, same_tokenizer_rm, capsys):
    worker_for(rm_config(tiny_model_path, same_tokenizer_rm, "reward_model.max_length=8"))
    assert "reinforge: note: reward_model.max_length=8 has no effect: the reward model's tokenizer is the policy's" in (
        capsys.readouterr().out)


def test_a_causal_lm_is_refused_as_a_classifier(tiny_model_path):
    with pytest.raises(ModelError, match="no weights for .*score"):
        worker_for(rm_config(tiny_model_path, tiny_model_path))


def test_a_classifier_of_two_labels_or_a_wrong_override_names_the_mismatched_weights(tiny_model_path, tokenizer, tmp_path,
                                                                                      same_tokenizer_rm):
    two_labels = save_classifier(tmp_path / "two_labels", tokenizer, num_labels=2)
    with pytest.raises(ModelError, match=r"score.weight is \(2, 32\) in the checkpoint, \(1, 32\) in the model; a classifier "
                                         r"reward model gives one score per response \(num_labels=1\), and this one has num_labels=2"):
        worker_for(rm_config(tiny_model_path, two_labels))
    with pytest.raises(ModelError, match=r"is \(\d+, 32\) in the checkpoint, \(\d+, 48\) in the model.*; check "
                                         r"reward_model.model.override_config"):
        worker_for(rm_config(tiny_model_path, same_tokenizer_rm, "+reward_model.model.override_config.hidden_size=48"))


def test_an_external_lib_that_cannot_be_imported_names_its_key(tiny_model_path, same_tokenizer_rm):
    with pytest.raises(ModelError, match=r"reward_model.model.external_lib='no_such_lib_xyz' is neither a file nor an importable"):
        worker_for(rm_config(tiny_model_path, same_tokenizer_rm, "+reward_model.model.external_lib=no_such_lib_xyz"))


# ---- combining with a rule-based reward ----------------------------------------------------------
def test_reward_model_alone_is_the_reward_and_a_custom_function_is_added(tiny_model_path, tokenizer, same_tokenizer_rm):
    batch = make_batch(tokenizer)
    group = LocalWorkerGroup(RewardModelWorker, rm_config(tiny_model_path, same_tokenizer_rm))
    group.init_model()
    rm_scores = group.compute_rm_score(batch)["rm_scores"]

    alone = RewardModelScorer(group)(batch, return_dict=True)
    assert torch.equal(alone["reward_tensor"], rm_scores)
    assert alone["reward_extra_info"]["rm_score"] == pytest.approx(rm_scores.sum(-1).tolist())
    assert alone["reward_metrics"] == {"reward/errors": 0, "reward/timeouts": 0, "reward/rm_truncated": 0}
    assert torch.equal(RewardModelScorer(group)(batch), rm_scores)

    def length_reward(data_source, solution_str, ground_truth, extra_info=None):
        if not solution_str:
            raise ValueError("an empty response")  # counted by the manager, and the count must survive the combination
        return {"score": float(len(solution_str)), "exact": solution_str == ground_truth}

    manager = make_reward_manager("naive", tokenizer, length_reward)
    both = RewardModelScorer(group, manager)(batch, return_dict=True)
    assert torch.equal(both["reward_tensor"], manager(batch) + rm_scores)
    lengths = response_lengths(batch)
    for row, (_, response, _, truth) in enumerate(ROWS):
        if lengths[row]:
            assert both["reward_tensor"][row, lengths[row] - 1].item() == pytest.approx(len(response) + rm_scores[row].sum().item())
        assert both["reward_extra_info"]["exact"][row] == ((response == truth) if response else None)
    assert both["reward_metrics"] == {"reward/errors": 1, "reward/timeouts": 0, "reward/rm_truncated": 0}


# ---- config and end to end ------------------------------------------------------------------------
def test_reward_model_config(tiny_model_path, same_tokenizer_rm):
    with pytest.raises(ConfigError, match="needs reward_model.model.path"):
        load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "reward_model.enable=true"])
    with pytest.raises(ConfigError, match="did you mean 'reward_model.model.input_tokenizer'"):
        rm_config(tiny_model_path, same_tokenizer_rm, "reward_model.model.input_tokeniser=x")
    config, keys = load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "reward_model.enable=true",
                                f"reward_model.model.path={same_tokenizer_rm}", "reward_model.micro_batch_size=4",
                                "reward_model.judge.max_new_tokens=9", "reward_model.reward_manager=dapo"])
    assert config.data.return_raw_chat and config.reward_model.micro_batch_size_per_gpu == 4
    unused = "\n".join(unused_settings(config, keys))
    assert "reward_model.judge.max_new_tokens: used by a generative judge only" in unused
    assert "reward_model.reward_manager: the reward model's score is the whole reward" in unused
    config, keys = load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "reward_model.max_length=9"])
    assert unused_settings(config, keys) == ["reward_model.max_length: no reward model in this run (reward_model.enable=true adds one)"]


def test_one_training_step_with_a_reward_model_and_a_reward_function(run_steps, same_tokenizer_rm):
    steps = run_steps("reward_model.enable=true", f"reward_model.model.path={same_tokenizer_rm}", "trainer.total_training_steps=1")
    metrics = steps[1]
    assert metrics["reward/rm_truncated"] == 0 and metrics["reward/errors"] == 0
    rule_mean = metrics["critic/score/mean"] - metrics["reward/rm_score/mean"]  # the varied reward lies in [0, 6/7]
    assert -1e-6 <= rule_mean <= 6 / 7 + 1e-6
    assert metrics["reward/rm_score/mean"] != 0


def test_a_rebuilt_response_keeps_its_special_tokens_but_the_eos_as_verl_decodes_it(tokenizer):
    """verl decodes the response for its reward model with the special tokens and removes the EOS string: a special
    token the policy wrote inside the response is part of what the reward model reads."""
    from reinforge.reward.models.rows import response_texts

    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    ids = tokenizer("1", add_special_tokens=False)["input_ids"] + [start] + tokenizer("2", add_special_tokens=False)["input_ids"]
    ids += [tokenizer.eos_token_id]
    batch = Batch({"responses": torch.tensor([ids]), "attention_mask": torch.ones(1, 2 + len(ids), dtype=torch.long)})
    assert response_texts(batch, tokenizer) == ["12"]  # the reward function's solution_str
    assert response_texts(batch, tokenizer, keep_special=True) == ["1<|im_start|>2"]


def test_a_filter_metric_a_reward_model_alone_cannot_give_is_refused_at_start(tiny_model_path, same_tokenizer_rm):
    base = ["algorithm.filter_groups.enable=true", "actor_rollout_ref.rollout.n=2", "custom_reward_function.path=null"]
    with pytest.raises(ConfigError, match=r"^algorithm.filter_groups.metric='acc': the reward is the reward model's score alone"):
        rm_config(tiny_model_path, same_tokenizer_rm, *base, "algorithm.filter_groups.metric=acc")
    for metric in ("rm_score", "seq_reward"):
        rm_config(tiny_model_path, same_tokenizer_rm, *base, f"algorithm.filter_groups.metric={metric}")
