"""RLDataset: reading each format, chat-template rendering, item fields, length handling, and every DataError."""

from __future__ import annotations

import copy

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from reinforge.environment.dataset import RLDataset, create_rl_dataset
from reinforge.errors import ConfigError, DataError


def _template_ids(tokenizer, messages, **kwargs) -> list[int]:
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# ---- formats ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "json_array"), [("d.parquet", None), ("d.json", True), ("d.json", False), ("d.jsonl", None)])
def test_reads_each_format(tmp_path, tokenizer, data_config, make_rows, write_rows, name, json_array):
    rows = make_rows(5)
    path = write_rows(tmp_path / name, rows, json_array=json_array)
    dataset = RLDataset(str(path), tokenizer, data_config())
    assert len(dataset) == 5
    for i, row in enumerate(rows):
        item = dataset[i]
        assert item["data_source"] == row["data_source"]
        assert item["reward_model"] == row["reward_model"]
        assert item["extra_info"] == row["extra_info"]
        assert item["ability"] == "digits"
        assert item["index"] == 100 + i


def test_concatenates_several_files_in_order(tmp_path, tokenizer, data_config, make_rows, write_rows):
    first = write_rows(tmp_path / "a.parquet", make_rows(3))
    second = write_rows(tmp_path / "b.jsonl", make_rows(2, start=3))
    dataset = RLDataset([first, str(second)], tokenizer, data_config())
    assert [dataset[i]["index"] for i in range(len(dataset))] == [100, 101, 102, 103, 104]


def test_expands_home_in_paths(tmp_path, monkeypatch, tokenizer, data_config, make_rows, write_rows):
    monkeypatch.setenv("HOME", str(tmp_path))
    write_rows(tmp_path / "d.jsonl", make_rows(2))
    assert len(RLDataset("~/d.jsonl", tokenizer, data_config())) == 2


def test_a_glob_pattern_stands_for_the_files_it_matches_in_name_order(tmp_path, tokenizer, data_config, make_rows,
                                                                      write_rows):
    """As datasets.load_dataset (verl's reader) expands it; a pattern that matches nothing is a DataError."""
    write_rows(tmp_path / "part-1.jsonl", make_rows(2, start=2))
    write_rows(tmp_path / "part-0.parquet", make_rows(2))
    dataset = RLDataset(str(tmp_path / "part-*"), tokenizer, data_config())
    assert [dataset[i]["index"] for i in range(len(dataset))] == [100, 101, 102, 103]
    with pytest.raises(DataError, match=r"shard-\*.parquet: the pattern matches no file"):
        RLDataset(str(tmp_path / "shard-*.parquet"), tokenizer, data_config())
    named = write_rows(tmp_path / "train[v2].jsonl", make_rows(1))  # a file whose name has a pattern's characters is that file
    assert len(RLDataset(str(named), tokenizer, data_config())) == 1


def test_a_parquet_file_with_two_columns_of_one_name_is_refused(tmp_path, tokenizer, data_config):
    """A row dict would keep the last of them silently (datasets, verl's reader, refuses the file too)."""
    table = pa.Table.from_arrays([pa.array(["[]"]), pa.array(["x"]), pa.array(["y"])], names=["prompt", "data_source", "prompt"])
    pq.write_table(table, tmp_path / "d.parquet")
    with pytest.raises(DataError, match=r"d.parquet: the file has more than one column named 'prompt'; keep one of each"):
        RLDataset(str(tmp_path / "d.parquet"), tokenizer, data_config())


def test_a_prompt_of_no_tokens_and_a_token_past_the_model_are_named(tmp_path, tokenizer, data_config, make_rows, write_rows):
    rows = make_rows(3)
    path = write_rows(tmp_path / "d.jsonl", rows)
    dataset = RLDataset(str(path), tokenizer, data_config())
    largest = max(int(dataset[i]["input_ids"].max()) for i in range(3))
    dataset.check_token_ids(largest + 1, "actor_rollout_ref.model.path=m")  # every id has an embedding
    with pytest.raises(DataError, match=rf"d.jsonl: row \d, column 'prompt': the prompt holds token id {largest}, but the "
                                        rf"model of actor_rollout_ref.model.path=m has embeddings for {largest} tokens"):
        dataset.check_token_ids(largest, "actor_rollout_ref.model.path=m")
    bare = copy.deepcopy(tokenizer)  # (the fixture is the session's)
    bare.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # renders nothing around the content
    rows[1]["prompt"] = [{"role": "user", "content": ""}]
    with pytest.raises(DataError, match=r"e.jsonl: row 1, column 'prompt': the prompt is 0 tokens after the chat template"):
        RLDataset(str(write_rows(tmp_path / "e.jsonl", rows)), bare, data_config())


def test_max_samples_without_shuffle_keeps_the_first_rows(tmp_path, tokenizer, data_config, make_rows, write_rows):
    files = [write_rows(tmp_path / "a.jsonl", make_rows(3)), write_rows(tmp_path / "b.jsonl", make_rows(3, start=3))]
    dataset = RLDataset(files, tokenizer, data_config(shuffle=False), max_samples=4)
    assert [dataset[i]["index"] for i in range(len(dataset))] == [100, 101, 102, 103]


def test_max_samples_with_shuffle_keeps_the_rows_verl_draws_for_both_splits(tmp_path, tokenizer, data_config, make_rows,
                                                                             write_rows):
    rows = make_rows(10)
    for row in rows[6:]:
        del row["extra_info"]["index"]  # the default index is the row number in the files, not the position kept
    files = [str(write_rows(tmp_path / "a.jsonl", rows[:6])), str(write_rows(tmp_path / "b.parquet", rows[6:]))]
    drawn = np.random.default_rng(7).choice(10, size=4, replace=False).tolist()  # verl's RLHFDataset, data.seed=7
    assert sorted(drawn) != [0, 1, 2, 3]
    expected = [100 + i if i < 6 else i for i in drawn]
    config = data_config(shuffle=True, seed=7)
    for is_train in (True, False):  # verl builds the validation set from the same data config
        dataset = create_rl_dataset(files, config, tokenizer, is_train=is_train, max_samples=4)
        assert [dataset[i]["index"] for i in range(len(dataset))] == expected
        assert [dataset.origin(i) for i in range(4)] == [(files[0], i) if i < 6 else (files[1], i - 6) for i in drawn]


# ---- rendering and items ----------------------------------------------------------------------
def test_prompt_is_rendered_with_the_chat_template(tmp_path, tokenizer, data_config, make_rows, write_rows):
    rows = make_rows(2)
    rows[1]["prompt"].insert(0, {"role": "system", "content": "Be brief."})
    dataset = RLDataset(write_rows(tmp_path / "d.parquet", rows), tokenizer, data_config(return_full_prompt=True))
    for i, row in enumerate(rows):
        text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        item = dataset[i]
        assert item["input_ids"].dtype == torch.long and item["input_ids"].dim() == 1
        assert item["input_ids"].tolist() == tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(item["input_ids"]) == text
        assert item["full_prompts"] == text
        assert torch.equal(item["attention_mask"], torch.ones_like(item["input_ids"]))


def test_string_prompt_is_the_models_input_as_is_and_one_user_message_for_agents(tmp_path, tokenizer, data_config,
                                                                                 write_rows, monkeypatch):
    """TRL's standard format: a string prompt is tokenized as it is, with the tokenizer's own special tokens (a BOS
    where it adds one), beside chat rows rendered by the template; its messages are one user message."""
    path = write_rows(tmp_path / "d.jsonl", [{"prompt": "What is 2 + 2?"}, {"prompt": [{"role": "user", "content": "Hi"}]}])
    dataset = RLDataset(path, tokenizer, data_config(return_raw_chat=True, return_full_prompt=True))
    assert dataset[0]["raw_prompt"] == [{"role": "user", "content": "What is 2 + 2?"}]
    assert dataset[0]["input_ids"].tolist() == tokenizer("What is 2 + 2?")["input_ids"]
    assert dataset[0]["full_prompts"] == "What is 2 + 2?"
    assert dataset[1]["input_ids"].tolist() == _template_ids(tokenizer, [{"role": "user", "content": "Hi"}])
    from tokenizers.processors import TemplateProcessing

    bos = TemplateProcessing(single="<|im_start|> $A", special_tokens=[("<|im_start|>", 1)])  # a tokenizer that adds a BOS
    monkeypatch.setattr(tokenizer.backend_tokenizer, "post_processor", bos)
    with_bos = RLDataset(path, tokenizer, data_config())
    assert with_bos[0]["input_ids"].tolist() == [1] + tokenizer("What is 2 + 2?", add_special_tokens=False)["input_ids"]
    assert with_bos[1]["input_ids"].tolist() == dataset[1]["input_ids"].tolist()  # the template's tokens only
    monkeypatch.setattr(tokenizer, "chat_template", None)  # a base model's tokenizer: string prompts need none
    strings = write_rows(tmp_path / "s.jsonl", [{"prompt": "What is 2 + 2?"}])
    assert len(RLDataset(strings, tokenizer, data_config())) == 1
    with pytest.raises(DataError, match=r"d.jsonl: row 1, column 'prompt': the prompt is a list of chat messages, which "
                                        r"goes through the chat template, but the tokenizer has no chat template"):
        RLDataset(path, tokenizer, data_config())


def test_apply_chat_template_kwargs_reach_the_template(tmp_path, monkeypatch, tokenizer, data_config, make_rows, write_rows):
    monkeypatch.setattr(tokenizer, "chat_template", "{% if shout %}LOUD {% endif %}" + tokenizer.chat_template)
    config = data_config(apply_chat_template_kwargs={"shout": True}, return_full_prompt=True)
    item = RLDataset(write_rows(tmp_path / "d.jsonl", make_rows(1)), tokenizer, config)[0]
    assert item["full_prompts"].startswith("LOUD <|im_start|>user")


def test_prompt_key_names_the_prompt_column(tmp_path, tokenizer, data_config, write_rows):
    path = write_rows(tmp_path / "d.jsonl", [{"question": "hi", "prompt": 3}])
    item = RLDataset(path, tokenizer, data_config(prompt_key="question", return_raw_chat=True))[0]
    assert item["raw_prompt"] == [{"role": "user", "content": "hi"}]


def test_optional_columns_get_defaults_and_index_falls_back_to_row_number(tmp_path, tokenizer, data_config, write_rows):
    path = write_rows(tmp_path / "d.jsonl", [{"prompt": "a"}, {"prompt": "b", "extra_info": {"split": "x"}}])
    items = [RLDataset(path, tokenizer, data_config())[i] for i in range(2)]
    assert [item["data_source"] for item in items] == ["unknown", "unknown"]
    assert [item["reward_model"] for item in items] == [{}, {}]
    assert [item["extra_info"] for item in items] == [{"index": 0}, {"split": "x", "index": 1}]
    assert [item["index"] for item in items] == [0, 1]
    assert "ability" not in items[0] and "full_prompts" not in items[0]
    assert items[0]["raw_prompt"] == [{"role": "user", "content": "a"}]  # data.return_raw_chat is on by default, as verl's
    assert "raw_prompt" not in RLDataset(path, tokenizer, data_config(return_raw_chat=False))[0]


# ---- length: truncation and filtering --------------------------------------------------------
def _long_row(digits: int = 30) -> dict:
    return {"prompt": [{"role": "user", "content": "Reverse the digits: " + " ".join(str(i % 10) for i in range(digits))}]}


@pytest.mark.parametrize("mode", ["left", "right", "middle"])
def test_truncation_modes_keep_the_right_tokens(tmp_path, tokenizer, data_config, write_rows, mode):
    row = _long_row()
    full = _template_ids(tokenizer, row["prompt"])
    limit = (len(full) - 8) | 1  # odd, so `middle` must split it unevenly: 1 more token from the end
    expected = {
        "left": full[-limit:],
        "right": full[:limit],
        "middle": full[: limit // 2] + full[-(limit - limit // 2):],
    }[mode]
    dataset = RLDataset(write_rows(tmp_path / "d.jsonl", [row]), tokenizer, data_config(max_prompt_length=limit, truncation=mode))
    assert dataset[0]["input_ids"].tolist() == expected
    assert len(expected) == limit


def test_truncation_error_names_file_row_column_lengths_and_keys(tmp_path, tokenizer, data_config, make_rows, write_rows):
    row = _long_row()
    length = len(_template_ids(tokenizer, row["prompt"]))
    write_rows(tmp_path / "a.jsonl", make_rows(2))
    second = write_rows(tmp_path / "b.jsonl", [*make_rows(2), row])
    with pytest.raises(DataError) as err:
        RLDataset([tmp_path / "a.jsonl", second], tokenizer, data_config(max_prompt_length=length - 1))
    message = str(err.value)
    for part in [str(second), "row 2", "'prompt'", f"{length} tokens", f"data.max_prompt_length={length - 1}", "data.truncation"]:
        assert part in message


def test_filter_overlong_prompts_drops_and_reports_them(tmp_path, capsys, tokenizer, data_config, make_rows, write_rows):
    rows = make_rows(5)
    rows[1], rows[3] = _long_row(), _long_row()
    limit = len(_template_ids(tokenizer, make_rows(1, start=9)[0]["prompt"]))
    path = write_rows(tmp_path / "d.jsonl", rows)
    dataset = RLDataset(path, tokenizer, data_config(max_prompt_length=limit, filter_overlong_prompts=True))
    assert dataset.num_filtered == 2
    assert [dataset[i]["index"] for i in range(len(dataset))] == [100, 102, 104]
    assert f"dropped 2 of 5 prompts longer than data.max_prompt_length={limit} tokens from {path}" in capsys.readouterr().err


def test_filtering_every_row_is_an_empty_dataset_error(tmp_path, tokenizer, data_config, write_rows):
    path = write_rows(tmp_path / "d.jsonl", [_long_row(), _long_row()])
    with pytest.raises(DataError, match=r"No rows left after filtering: all 2 prompts .* longer than data.max_prompt_length=5"):
        RLDataset(path, tokenizer, data_config(max_prompt_length=5, filter_overlong_prompts=True))


# ---- errors -----------------------------------------------------------------------------------
def test_missing_file_shows_given_and_resolved_path(tmp_path, tokenizer, data_config):
    with pytest.raises(DataError) as err:
        RLDataset("~/nowhere/d.parquet", tokenizer, data_config())
    assert "Data file not found: ~/nowhere/d.parquet" in str(err.value)
    assert "nowhere/d.parquet)" in str(err.value) and "resolved to /" in str(err.value)


def test_unsupported_extension(tmp_path, tokenizer, data_config):
    path = tmp_path / "d.csv"
    path.write_text("prompt\nhi\n")
    with pytest.raises(DataError, match=r"d\.csv: unsupported file type '\.csv'; use one of \.parquet, \.json, \.jsonl"):
        RLDataset(path, tokenizer, data_config())


def test_corrupt_parquet_wraps_the_reader_error(tmp_path, tokenizer, data_config):
    path = tmp_path / "d.parquet"
    path.write_bytes(b"not a parquet file")
    with pytest.raises(DataError, match=r"d\.parquet: cannot read this \.parquet file \(Arrow\w+: .+\)") as err:
        RLDataset(path, tokenizer, data_config())
    assert err.value.__cause__ is not None


def test_bad_json_line_names_the_line(tmp_path, tokenizer, data_config):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": \n')
    with pytest.raises(DataError, match=r"d\.jsonl: line 2 is not valid JSON"):
        RLDataset(path, tokenizer, data_config())


def test_a_json_file_of_one_indented_object_is_one_row_and_a_broken_array_is_named(tmp_path, tokenizer, data_config):
    path = tmp_path / "one.json"
    path.write_text('{\n    "prompt": "a",\n    "data_source": "x"\n}\n')
    dataset = RLDataset(path, tokenizer, data_config())
    assert len(dataset) == 1 and dataset[0]["data_source"] == "x"
    path.write_text('[\n  {"prompt": "a"},\n  {"prompt": \n]')
    with pytest.raises(DataError, match=r"one\.json: not valid JSON \(Expecting value: line 4"):
        RLDataset(path, tokenizer, data_config())


def test_json_row_that_is_not_an_object(tmp_path, tokenizer, data_config):
    path = tmp_path / "d.json"
    path.write_text('[{"prompt": "a"}, "b"]')
    with pytest.raises(DataError, match=r"d\.json: row 1 is a JSON str, not an object of columns"):
        RLDataset(path, tokenizer, data_config())


def test_empty_files_are_an_empty_dataset_error(tmp_path, tokenizer, data_config):
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("\n")
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.table({"prompt": pa.array([], pa.string())}), parquet)
    with pytest.raises(DataError, match=r"The data files hold no rows: .*d\.jsonl, .*d\.parquet"):
        RLDataset([jsonl, parquet], tokenizer, data_config())


def test_missing_prompt_column_lists_the_columns(tmp_path, tokenizer, data_config, write_rows):
    path = write_rows(tmp_path / "d.parquet", [{"question": "a", "answer": "b"}])
    with pytest.raises(DataError) as err:
        RLDataset(path, tokenizer, data_config())
    message = str(err.value)
    assert f"{path}: no prompt column 'prompt' (data.prompt_key)" in message
    assert "its columns are question, answer" in message


def test_extra_info_that_is_not_a_dict_is_named_when_the_data_loads(tmp_path, tokenizer, data_config, make_rows, write_rows):
    rows = make_rows(4)
    rows[1]["extra_info"] = None  # null is fine: the row number becomes the index
    del rows[3]["extra_info"]  # and so is no extra_info at all
    rows[2]["extra_info"] = "note"
    with pytest.raises(DataError, match=r"d\.jsonl: row 2, column 'extra_info': must be a dict of extra fields .* got str 'note'"):
        RLDataset(str(write_rows(tmp_path / "d.jsonl", rows)), tokenizer, data_config())
    rows[2]["extra_info"] = {"index": 7}
    dataset = RLDataset(str(write_rows(tmp_path / "ok.jsonl", rows)), tokenizer, data_config())
    assert [dataset[i]["extra_info"] for i in range(4)] == [rows[0]["extra_info"], {"index": 1}, {"index": 7}, {"index": 3}]


@pytest.mark.parametrize("value, shown", [("72", "str '72'"), (["72"], "list")])
def test_a_reward_model_that_is_not_a_dict_is_named_when_the_data_loads(value, shown, tmp_path, tokenizer, data_config,
                                                                        make_rows, write_rows):
    rows = make_rows(3)
    rows[0]["reward_model"] = value  # row 0: read before any batch, where it used to fail as "not a mapping"
    with pytest.raises(DataError, match=rf"d\.jsonl: row 0, column 'reward_model': must be a dict .* got {shown}"):
        RLDataset(str(write_rows(tmp_path / "d.jsonl", rows)), tokenizer, data_config())
    rows[0]["reward_model"] = None  # null: the row loads, and the reward check says it is null
    dataset = RLDataset(str(write_rows(tmp_path / "ok.jsonl", rows)), tokenizer, data_config())
    with pytest.raises(DataError, match=r"ok\.jsonl: row 0, column 'reward_model': it is null\."):
        dataset.check_reward_columns()


def test_rows_with_images_without_a_processor_or_with_videos_are_refused_when_the_data_loads(tmp_path, tokenizer, data_config, make_rows, write_rows):
    rows = [{**row, "images": []} for row in make_rows(3)]  # verl's multimodal schema: a list of {'bytes', 'path'}
    rows[1]["images"] = [{"bytes": bytes.fromhex("89504e470d0a1a0a"), "path": None}]
    with pytest.raises(DataError, match=r"geo\.parquet: row 1, column 'images' \(data\.image_key\): the row has images, but "
                                        r"the model does not take images here \(reinforge trains them with Qwen2-VL and Qwen2\.5-VL models"):
        RLDataset(str(write_rows(tmp_path / "geo.parquet", rows)), tokenizer, data_config(image_key="images"))
    clips = [{**row, "clips": None} for row in make_rows(2)]
    clips[1]["clips"] = ["a.mp4"]
    with pytest.raises(DataError, match=r"v\.jsonl: row 1, column 'clips' \(data\.video_key\): the row has videos, but videos "
                                        r"are not supported in this version \(images are\)"):
        RLDataset(str(write_rows(tmp_path / "v.jsonl", clips)), tokenizer, data_config(video_key="clips"))
    rows[1]["images"] = None  # empty or null: a text row
    assert len(RLDataset(str(write_rows(tmp_path / "text.parquet", rows)), tokenizer, data_config())) == 3


@pytest.mark.parametrize(
    "bad", [7, None, [], ["hello"], [{"role": "user"}], [{"content": "hi"}], {"role": "user", "content": "hi"}]
)
def test_bad_prompt_value_names_row_and_column(tmp_path, tokenizer, data_config, write_rows, bad):
    path = write_rows(tmp_path / "d.jsonl", [{"prompt": "fine"}, {"prompt": bad}])
    with pytest.raises(DataError, match=r"d\.jsonl: row 1, column 'prompt': a prompt must be a string or a non-empty list"):
        RLDataset(path, tokenizer, data_config())


def test_a_message_list_encoded_as_json_text_is_named_rather_than_trained_as_text(tmp_path, tokenizer, data_config, write_rows):
    encoded = '[{"role": "user", "content": "What is 2+1?"}]'
    path = write_rows(tmp_path / "d.jsonl", [{"prompt": "fine"}, {"prompt": encoded}])
    with pytest.raises(DataError, match=r"d\.jsonl: row 1, column 'prompt': the prompt is a chat message list encoded as JSON "
                                        r"text"):
        RLDataset(path, tokenizer, data_config())
    plain = write_rows(tmp_path / "p.jsonl", [{"prompt": "[1, 2] sorted?"}, {"prompt": "[{a}] is a set"}])
    assert len(RLDataset(plain, tokenizer, data_config())) == 2  # text that only looks like it stays text


def test_tokenizer_without_chat_template_points_to_custom_chat_template(tmp_path, monkeypatch, tokenizer, data_config,
                                                                        make_rows, write_rows):
    monkeypatch.setattr(tokenizer, "chat_template", None)
    with pytest.raises(DataError, match="no chat template.*actor_rollout_ref.model.custom_chat_template"):
        RLDataset(write_rows(tmp_path / "d.jsonl", make_rows(1)), tokenizer, data_config())


def test_template_error_names_row(tmp_path, monkeypatch, tokenizer, data_config, write_rows):
    monkeypatch.setattr(tokenizer, "chat_template", "{{ raise_exception('only user turns') if messages[0].role != 'user' }}")
    path = write_rows(tmp_path / "d.jsonl", [{"prompt": "a"}, {"prompt": [{"role": "system", "content": "b"}]}])
    with pytest.raises(DataError, match=r"row 1, column 'prompt': the chat template failed on this prompt .*only user turns"):
        RLDataset(path, tokenizer, data_config())


def test_filter_drops_the_prompts_the_template_fails_on_and_says_which(tmp_path, monkeypatch, tokenizer, data_config,
                                                                       write_rows, capsys):
    """As verl's filter_overlong_prompts: a row the chat template raises on is dropped (counted in num_filtered),
    the others load; the note names the first failing row and the template's message."""
    monkeypatch.setattr(tokenizer, "chat_template", "{{ raise_exception('only user turns') if messages[0].role != 'user' }}"
                        "{% for m in messages %}{{ m.content }}{% endfor %}")
    system = [{"role": "system", "content": "b"}]
    path = write_rows(tmp_path / "d.jsonl", [{"prompt": "a"}, {"prompt": system}, {"prompt": "c"}, {"prompt": system}])
    dataset = RLDataset(path, tokenizer, data_config(filter_overlong_prompts=True))
    assert len(dataset) == 2 and dataset.num_filtered == 2
    assert [item["extra_info"]["index"] for item in dataset] == [0, 2]
    assert [tokenizer.decode(item["input_ids"]) for item in dataset] == ["a", "c"]
    err = capsys.readouterr().err
    assert "dropped 2 of 4 prompts" in err and "row 1, column 'prompt': the chat template failed" in err and "only user turns" in err
    only_bad = write_rows(tmp_path / "bad.jsonl", [{"prompt": system}])
    with pytest.raises(DataError, match=r"No rows left.*failed on all 1 prompts.*row 0, column 'prompt'.*only user turns"):
        RLDataset(only_bad, tokenizer, data_config(filter_overlong_prompts=True))


def test_unknown_truncation_mode_is_a_config_error(tmp_path, tokenizer, data_config, make_rows, write_rows):
    with pytest.raises(ConfigError, match="data.truncation='cut': use one of error, left, right, middle"):
        RLDataset(write_rows(tmp_path / "d.jsonl", make_rows(1)), tokenizer, data_config(truncation="cut"))


TOOLS_TEMPLATE = ("{% if tools %}tools: {% for t in tools %}{{ t['function']['name'] }} {% endfor %}\n{% endif %}"
                  "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                  "{% if add_generation_prompt %}assistant:{% endif %}")


def test_the_overlong_filter_measures_prompts_with_the_rollouts_tool_schemas(tmp_path, tokenizer, data_config, make_rows,
                                                                           write_rows):
    """verl's filter renders each prompt with the tool schemas of data.tool_config_path (the multi-turn rollout's): a
    prompt that fits only without them is dropped at load, not cut or refused mid-run when the rollout adds them."""
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = TOOLS_TEMPLATE
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - class_name: calculator\n")
    rows = make_rows(2)
    rows[1]["prompt"] = [{"role": "user", "content": "Reverse the digits: " + " ".join("7" * 12)}]
    schema = [{"type": "function", "function": {"name": "calculator"}}]
    limit = len(_template_ids(tok, rows[1]["prompt"]))  # the long row fits without the tools
    assert len(_template_ids(tok, rows[1]["prompt"], tools=schema)) > limit >= len(_template_ids(tok, rows[0]["prompt"], tools=schema))
    path = write_rows(tmp_path / "d.jsonl", rows)
    plain = RLDataset(path, tok, data_config(max_prompt_length=limit, filter_overlong_prompts=True))
    assert plain.num_filtered == 0
    measured = RLDataset(path, tok, data_config(max_prompt_length=limit, filter_overlong_prompts=True,
                                                tool_config_path=str(tools)))
    assert measured.num_filtered == 1 and measured[0]["index"] == 100
    assert measured[0]["input_ids"].tolist() == _template_ids(tok, rows[0]["prompt"])  # the items themselves: no tools


def test_the_trainer_gives_the_dataset_the_rollouts_tool_config(tmp_path):
    from reinforge.config import load_config

    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - class_name: calculator\n")
    config, _ = load_config(["actor_rollout_ref.rollout.multi_turn.enable=true",
                             f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}"])
    assert config.data.tool_config_path == str(tools)
    assert load_config([])[0].data.tool_config_path is None


def test_an_assistant_turn_that_only_calls_tools_has_no_content(tmp_path, tokenizer, data_config, write_rows):
    """{"role": "assistant", "content": null, "tool_calls": [...]} is how chat data writes a turn that only calls tools
    (verl loads it); a message without content or tool calls is still refused."""
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = ("{% for m in messages %}{{ m['role'] }}: {% if m['content'] %}{{ m['content'] }}{% endif %}"
                         "{% for c in m['tool_calls'] or [] %}call {{ c['function']['name'] }}{% endfor %}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant:{% endif %}")
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "2+3"}}}
    messages = [{"role": "user", "content": "add 2 3"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "content": "5"}]
    path = write_rows(tmp_path / "d.jsonl", [{"prompt": messages}])
    item = RLDataset(path, tok, data_config())[0]
    assert item["input_ids"].tolist() == _template_ids(tok, messages)
    assert tok.decode(item["input_ids"]) == "user: add 2 3assistant: call calculatortool: 5assistant:"  # trim_blocks
    path = write_rows(tmp_path / "e.jsonl", [{"prompt": [{"role": "user", "content": None}]}])
    with pytest.raises(DataError, match="a prompt must be a string or a non-empty list of chat messages"):
        RLDataset(path, tok, data_config())
