"""The `data.*` section of the config schema: the training and validation files, prompt layout, batch sizes,
and the user classes (Dataset, sampler, data generator) verl's data section names; keys, defaults and meanings
as in verl's `ppo_trainer.yaml` (config/schema.py holds the root)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reinforge.config.fields import Node, _f, _sub


@dataclass
class ClassRef(Node):
    path: str | None = _f(None, "Python file (or importable module) that defines the class.")
    name: str | None = _f(None, "Name of the class inside `path`.")


@dataclass
class SamplerRef(Node):
    class_path: str | None = _f(
        None, "Python file (or importable module) of a sampler class, called as cls(data_source=dataset, data_config=data); "
        "it yields the dataset indices of an epoch. Built in: reinforge.environment.sampler (LearnabilitySampler). "
        "Null: data.shuffle and data.seed set the order.",
    )
    class_name: str | None = _f(None, "Name of the sampler class inside class_path. A class with update(batch) is a "
                                "curriculum: it gets every training batch with its rewards after the step (docs/data.md).")
    group_key: str | None = _f(None, "verl's GroupRatioSampler setting (the dotted path of a row's group); read by a sampler "
                               "class of class_path that uses it (it gets this section as data_config.sampler).")
    group_names: list | None = _f(None, "verl's GroupRatioSampler setting (the groups' values); read by a sampler class that "
                                  "uses it.")
    group_ratios: list | None = _f(None, "verl's GroupRatioSampler setting (each group's share of a batch); read by a "
                                   "sampler class that uses it.")


@dataclass
class DataConfig(Node):
    train_files: Any = _f(
        None,
        "Training data: a parquet, JSON or JSONL file, or a list of them, in verl's schema "
        "(data_source, prompt as chat messages, ability, reward_model.ground_truth, extra_info). "
        "Unset with no model path: the built-in quickstart task.",
    )
    val_files: Any = _f(None, "Validation data, same format as train_files. Unset: no validation (quickstart: its own held-out set).")
    prompt_key: str = _f("prompt", "Column holding the prompt: a list of chat messages, or a plain string.")
    apply_chat_template: bool = _f(False, "Render a string prompt with the chat template too, as one user message "
                                   "(OpenRLHF's --apply_chat_template); false: a string prompt is the model's input text as it "
                                   "is (TRL's standard format). Chat-message prompts always go through the chat template.")
    input_template: str | None = _f(None, "A string prompt's text is input_template.format(prompt) (OpenRLHF's "
                                    "--input_template, e.g. 'User: {}\\nAssistant: '); not with apply_chat_template.")
    label_key: str | None = _f(None, "Column of each row's answer (OpenRLHF's --label_key): the row's "
                               "reward_model.ground_truth, what reward functions get as ground_truth (verl) or labels "
                               "(OpenRLHF). null: the rows' reward_model.ground_truth.")
    image_key: str = _f("images", "Column of a row's images (verl's multimodal data): a list of PIL images, {bytes, path} "
                                  "dicts (a Hugging Face Image feature) or file paths, each placed at an <image> of the "
                                  "prompt; needs a vision-language model with an image processor (Qwen2-VL family; "
                                  "docs/data.md).")
    video_key: str = _f("videos", "Column of a row's videos (verl's multimodal data); rows with videos are refused (images "
                                  "are supported).")
    reward_fn_key: str = _f("data_source", "Column whose value picks the scorer and groups validation metrics.")
    max_prompt_length: int = _f(512, "Longest prompt in tokens (a chat prompt after the chat template); longer ones follow "
                                 "`truncation`.")
    max_response_length: int = _f(512, "Most tokens generated per response.")
    train_batch_size: int = _f(1024, "Prompts per training step (each is sampled rollout.n times).")
    gen_batch_size: int | None = _f(
        None, "Prompts per generation batch: with algorithm.filter_groups on, DAPO's dynamic sampling draws batches of "
        "this size until train_batch_size groups survive the filter; without it, each step draws and trains this many "
        "prompts, as verl's trainer does (train_batch_size then has no effect). null: train_batch_size.",
    )
    val_batch_size: int | None = _f(None, "Prompts per validation generation call; null: the whole validation set at once.")
    truncation: str = _f("error", "What to do with a prompt over max_prompt_length: error, left, right or middle.")
    filter_overlong_prompts: bool = _f(False, "Drop prompts longer than max_prompt_length, and those the chat "
                                      "template fails on, when loading (reported with a count).")
    shuffle: bool = _f(True, "Shuffle the training data each epoch (seeded by data.seed).")
    validation_shuffle: bool = _f(False, "Shuffle the validation data.")
    seed: int | None = _f(42, "Seed of the training data order; null (verl's unseeded order): trainer.seed, so runs repeat.")
    return_raw_chat: bool = _f(True, "Keep the prompt's chat messages in the batch as `raw_prompt` (agent loops and reward "
                                      "models read them); verl's default, true since it moved chat templates to its agent loops.")
    return_raw_input_ids: bool = _f(False, "Accepted for verl compatibility; prompts are always re-tokenized by the one tokenizer.")
    return_full_prompt: bool = _f(False, "Keep the prompt text (a chat prompt after the chat template) as `full_prompts`.")
    dataloader_num_workers: int = _f(8, "verl's loader worker processes; prompts are prepared in-process here. Above 0 it "
                                        "still sets the shuffled order verl's loader then serves (two permutations drawn "
                                        "an epoch, the second used), so a seed gives verl's training order either way.")
    filter_overlong_prompts_workers: int = _f(1, "Accepted for verl compatibility (processes that measure prompts for "
                                              "filter_overlong_prompts); prompts are measured in-process.")
    use_shm: bool = _f(False, "Accepted for verl compatibility (copy the data files to shared memory); no effect here.")
    return_multi_modal_inputs: bool = _f(True, "Accepted for verl compatibility (keep a row's processed images and videos in "
                                         "the batch); a row's processed images always travel with it here.")
    tokenizer: str | None = _f(None, "Tokenizer folder (or hub id) of the policy when it differs from the model's; the same "
                               "setting as actor_rollout_ref.model.tokenizer_path (set one, or both to the same value).")
    trust_remote_code: bool = _f(False, "Allow a tokenizer with custom code.")
    custom_cls: ClassRef = _sub(ClassRef, "A user Dataset class (a torch Dataset taking data_files, tokenizer, config, processor, as verl calls it).")
    sampler: SamplerRef = _sub(SamplerRef, "A user sampler or curriculum that orders the training rows (verl's data.sampler).")
    datagen: ClassRef = _sub(
        ClassRef, "A data generator (subclass of reinforge.environment.datagen.AbstractDataGenerator, called with this "
        "section) whose generate(dataset) returns new training rows after every step; the training set grows (docs/data.md).",
    )
    apply_chat_template_kwargs: dict = _f({}, "Extra keyword arguments for tokenizer.apply_chat_template (e.g. enable_thinking).")
    max_samples: int = _f(-1, "Use at most this many training rows (-1: all): with data.shuffle, the ones verl draws (a seeded random choice of "
                                "data.seed), else the first ones. verl's name: train_max_samples.")
    image_patch_size: int = _f(14, "Accepted for verl compatibility (the patch size verl's image resizing rounds to); the "
                                   "model's image processor resizes here, with its own patch size.")
    audio_key: str = _f("audios", "Accepted for verl compatibility (column of a row's audio); no effect here: multimodal "
                                  "rows are refused.")
    mm_processor_kwargs: dict = _f({}, "Keyword arguments of the multimodal processor's call on each row's images, e.g. "
                                       "{size: {shortest_edge: 3136, longest_edge: 200704}} (Qwen2-VL's pixel bounds).")
    tool_config_path: str | None = _f(None, "verl's copy of actor_rollout_ref.rollout.multi_turn.tool_config_path (null: that "
                                      "one, with multi_turn.enable): data.filter_overlong_prompts measures each prompt with "
                                      "its tool schemas, as the rollout renders it; the rollout's tools come from multi_turn's.")
    function_tool_path: str | None = _f(None, "verl's copy of actor_rollout_ref.rollout.multi_turn.function_tool_path (null: "
                                        "that one, with multi_turn.enable): its tools' schemas measure prompts as "
                                        "tool_config_path's do.")
    max_val_samples: int = _f(-1, "Use at most this many validation rows (-1: all), chosen as max_samples are. verl's name: "
                                    "val_max_samples.")
    train_max_samples: int | None = _f(None, "verl's name of max_samples; when set it is max_samples.")
    val_max_samples: int | None = _f(None, "verl's name of max_val_samples; when set it is max_val_samples.")
