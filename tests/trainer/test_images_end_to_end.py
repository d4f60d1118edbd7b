"""`reinforge train` on rows with images (verl's multimodal layout: an `images` column of {'bytes', 'path'}, `<image>` in
the prompt) with a tiny Qwen2-VL model: it learns a task that only the image answers, resumes exactly, saves a model
folder that loads with its processor, and refuses what this version does not do with images."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from reinforge.cli import main
from reinforge.config import load_config
from reinforge.errors import ConfigError
from reinforge.trainer.main import run
from tests.trainer.conftest import records, train_steps

FIRST_DIGIT = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    digits = [c for c in solution_str if c.isdigit()]
    return 1.0 if digits and digits[0] == ground_truth else 0.0
"""
KEY = "val-core/brightness/acc/mean@1"


@pytest.fixture
def image_run(tiny_vl_model_path, brightness_rows, tmp_path):
    """`image_run(*overrides, run_dir=...)`: GRPO on the brightness task (train 128 rows, validation 64), {step: metrics}."""
    for name, n, seed in (("train", 128, 0), ("val", 64, 1)):
        pq.write_table(pa.Table.from_pylist(brightness_rows(n, seed)), tmp_path / f"{name}.parquet")
    (tmp_path / "reward.py").write_text(FIRST_DIGIT)
    base = [f"actor_rollout_ref.model.path={tiny_vl_model_path}", f"data.train_files={tmp_path / 'train.parquet'}",
            f"data.val_files={tmp_path / 'val.parquet'}", f"custom_reward_function.path={tmp_path / 'reward.py'}",
            "algorithm.adv_estimator=grpo", "data.max_prompt_length=64", "data.max_response_length=4",
            "data.train_batch_size=16", "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
            "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.rollout.temperature=2.0",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false", "trainer.logger=[console]"]

    def image_run(*extra: str, run_dir=None) -> dict[int, dict]:
        run_dir = run_dir or tmp_path / "run"
        config, keys = load_config([*base, f"trainer.default_local_dir={run_dir}", *extra])
        run(config, keys)
        return train_steps(run_dir)

    return image_run


def test_a_vision_language_model_learns_what_only_the_image_tells(image_run, tmp_path):
    """The prompt's digits come in either order whatever the image, so text alone answers half of the rows; the
    validation reward goes from 0 to at least 0.9 of 64 rows within 40 steps only by reading the image, and with each
    image swapped for one of the other shade the trained model answers at most 0.1 of them."""
    run_dir = tmp_path / "learn"
    steps = image_run("trainer.total_training_steps=40", "trainer.test_freq=40", "trainer.save_freq=40",
                      "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]", run_dir=run_dir)
    vals = [(r["step"], r[KEY]) for r in records(run_dir) if KEY in r]
    assert vals[0] == (0, 0.0) and vals[-1][0] == 40 and vals[-1][1] >= 0.9, vals
    # the engine sampled with the log-probs the update computes (the images and their positions agree)
    assert max(s["training/rollout_probs_diff_max"] for s in steps.values()) < 1e-4

    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from reinforge.training.vision import load_processor

    saved = run_dir / "global_step_40" / "actor" / "huggingface"
    assert (saved / "preprocessor_config.json").is_file()
    model = AutoModelForImageTextToText.from_pretrained(saved)
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration"
    assert load_processor(str(saved), AutoTokenizer.from_pretrained(saved)).image_processor.patch_size == 14
    # `reinforge generate` with the saved folder answers the validation rows as the run's last (greedy) validation did
    out = tmp_path / "answers.parquet"
    assert main(["generate", f"model.path={saved}", f"data.path={tmp_path / 'val.parquet'}", f"data.output_path={out}",
                 "rollout.response_length=4", "rollout.temperature=0", "data.n_samples=1"]) == 0
    assert len(pq.read_table(out)) == 64 and accuracy(out) == vals[-1][1]
    # each row with an image of the other shade instead: the answers follow the images
    rows = pq.read_table(tmp_path / "val.parquet").to_pylist()
    other = {label: [row["images"] for row in rows if row["reward_model"]["ground_truth"] != label] for label in "01"}
    swapped = [{**row, "images": other[row["reward_model"]["ground_truth"]][i % 8]} for i, row in enumerate(rows)]
    pq.write_table(pa.Table.from_pylist(swapped), tmp_path / "swapped.parquet")
    assert main(["generate", f"model.path={saved}", f"data.path={tmp_path / 'swapped.parquet'}", f"data.output_path={out}",
                 "rollout.response_length=4", "rollout.temperature=0", "data.n_samples=1"]) == 0
    assert accuracy(out) <= 0.1


def accuracy(path) -> float:
    """The share of a generated file's rows whose first response's first digit is the ground truth."""
    rows = pq.read_table(path).to_pylist()
    return sum([c for c in row["responses"][0] if c.isdigit()][:1] == [row["reward_model"]["ground_truth"]]
               for row in rows) / len(rows)


def test_a_resumed_image_run_equals_the_uninterrupted_one(image_run, tmp_path):
    whole = image_run("trainer.total_training_steps=4", run_dir=tmp_path / "whole")
    image_run("trainer.total_training_steps=2", "trainer.save_freq=2", run_dir=tmp_path / "parts")
    resumed = image_run("trainer.total_training_steps=4", run_dir=tmp_path / "parts")
    for step in (3, 4):
        for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "response_length/mean"):
            assert resumed[step][key] == whole[step][key], (step, key)


def test_a_frozen_vision_tower_keeps_its_weights_while_the_language_model_learns(image_run, tiny_vl_model_path,
                                                                                run_steps, tmp_path):
    from transformers import AutoModelForImageTextToText

    from reinforge.training.checkpoint_io import read_full_model_state

    image_run("trainer.total_training_steps=2", "trainer.save_freq=2", "actor_rollout_ref.actor.freeze_vision_tower=true",
              run_dir=tmp_path / "frozen")
    trained = read_full_model_state(tmp_path / "frozen" / "global_step_2" / "actor", "test")
    start = AutoModelForImageTextToText.from_pretrained(tiny_vl_model_path).state_dict()
    tower = [name for name in trained if ".visual." in name]
    assert len(tower) > 20 and all(torch.equal(trained[name], start[name]) for name in tower)
    moved = max((trained[name] - start[name]).abs().max().item() for name in trained if "language_model.layers" in name)
    assert moved > 1e-4
    with pytest.raises(ConfigError, match=r"freeze_vision_tower=true, but the model has no vision tower"):
        run_steps("actor_rollout_ref.actor.freeze_vision_tower=true")


def test_what_images_do_not_support_yet_is_refused_before_training(image_run, tmp_path):
    with pytest.raises(ConfigError, match=r"algorithm.adv_estimator=gae trains a critic, and a critic for a vision-language "
                                          r"model is not supported in this version"):
        image_run("algorithm.adv_estimator=gae", run_dir=tmp_path / "gae")
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.rollout.multi_turn.enable=true: prompts with images "
                                          r"\(data.image_key\) are generated single-turn by the hf engine only"):
        image_run("actor_rollout_ref.rollout.multi_turn.enable=true", run_dir=tmp_path / "agent")


def test_rows_with_images_need_the_hf_engine_and_no_distillation():
    from types import SimpleNamespace

    from reinforge.config.schema import Config
    from reinforge.environment.multimodal import check_image_run

    with_images, text = SimpleNamespace(has_images=True), SimpleNamespace(has_images=False)
    for section, field, value, setting in (
            ("actor_rollout_ref.rollout", "name", "vllm", "actor_rollout_ref.rollout.name=vllm"),
            ("actor_rollout_ref.rollout", "name", "sglang", "actor_rollout_ref.rollout.name=sglang"),
            ("actor_rollout_ref.rollout.multi_turn", "enable", True, "actor_rollout_ref.rollout.multi_turn.enable=true"),
            ("distillation", "enabled", True, "distillation")):
        config = Config()  # the checked fields alone (the config checks would stop vllm on a machine without a GPU first)
        config.algorithm.adv_estimator = "grpo"
        node = config
        for part in section.split("."):
            node = getattr(node, part)
        setattr(node, field, value)
        assert check_image_run(config, [text, None], processor=None) == []  # text rows: nothing to refuse
        with pytest.raises(ConfigError, match=rf"^{setting}: prompts with images \(data.image_key\) are generated single-turn "
                                              r"by the hf engine only in this version, without distillation"):
            check_image_run(config, [text, with_images], processor=None)


def test_a_reward_model_is_noted_to_read_prompts_with_images_as_text():
    from types import SimpleNamespace

    from reinforge.config.schema import Config
    from reinforge.environment.multimodal import check_image_run

    config = Config()
    config.algorithm.adv_estimator = "grpo"
    with_images, text = SimpleNamespace(has_images=True), SimpleNamespace(has_images=False)
    assert check_image_run(config, [with_images, text], processor=None) == []
    config.reward_model.enable = True
    assert check_image_run(config, [text, None], processor=None) == []
    assert check_image_run(config, [with_images, text], processor=None) == [
        "the reward model reads the prompts of rows with images as text, without their images"]


TRL_BRIGHTNESS = """
from PIL import Image, ImageStat


def brightness(prompts, completions, images, **kwargs):
    # TRL's signature: the rows' image column as TRL's datasets give it, PIL images; chat completions as messages
    assert all(isinstance(image, Image.Image) for row in images for image in row), images
    light = [ImageStat.Stat(image.convert("L")).mean[0] > 128 for image, *_ in images]
    texts = [completion[0]["content"] for completion in completions]
    return [1.0 if [c for c in text if c.isdigit()][:1] == ["1" if bright else "0"] else 0.0
            for text, bright in zip(texts, light)]
"""


def test_a_trl_reward_function_gets_the_images_as_pil_images(image_run, tmp_path):
    """The reward is computed from the image itself: the rewards equal the first-digit rule of the ground truths."""
    reward = tmp_path / "trl_brightness.py"
    reward.write_text(TRL_BRIGHTNESS)
    steps = image_run(f"custom_reward_function.path={reward}", "custom_reward_function.name=brightness",
                      "trainer.total_training_steps=2", f"trainer.rollout_data_dir={tmp_path / 'dump'}",
                      run_dir=tmp_path / "trl")
    assert all(step.get("reward/errors", 0) == 0 for step in steps.values())
    for step in (1, 2):
        for line in (tmp_path / "dump" / f"{step}.jsonl").read_text().splitlines():
            row = __import__("json").loads(line)
            right = [c for c in row["output"] if c.isdigit()][:1] == [row["gts"]]
            assert row["score"] == float(right), row
