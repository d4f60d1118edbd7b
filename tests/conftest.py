"""Shared fixtures: the tiny model and tokenizer, built once per test session (no download)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """The reinforge cache for this session: REINFORGE_CACHE if set (reused across runs), else a temp dir."""
    if os.environ.get("REINFORGE_CACHE"):
        return Path(os.environ["REINFORGE_CACHE"])
    path = tmp_path_factory.mktemp("reinforge-cache")
    os.environ["REINFORGE_CACHE"] = str(path)
    return path


@pytest.fixture(scope="session")
def tiny_model_path(cache_dir) -> Path:
    from reinforge.training.tiny_model import ensure_tiny_model

    return ensure_tiny_model(root=cache_dir / "models")


@pytest.fixture(scope="session")
def tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


@pytest.fixture(autouse=True)
def fp32_compute_on_a_gpu(monkeypatch):
    """Where a GPU is present the runs here use it (trainer.device null), and their models compute (and the hf engine
    generates) in fp32 instead of verl's bf16 default: the expected numbers are fp32 ones, as on the CPU.
    The tests of that default take the verl_default fixture."""
    import torch

    if torch.cuda.is_available():
        monkeypatch.setattr("reinforge.training.fsdp.CUDA_COMPUTE_DTYPE", "fp32")


@pytest.fixture
def verl_default(monkeypatch):
    """verl's bf16 on CUDA, which fp32_compute_on_a_gpu replaces on a GPU, for the tests of that default."""
    monkeypatch.setattr("reinforge.training.fsdp.CUDA_COMPUTE_DTYPE", "bf16")


@pytest.fixture(autouse=True)
def clean_registries():
    """Estimators, losses, agent loops and text environments a test registers do not leak into the other tests'
    lists of registered names."""
    from reinforge.algorithm.advantage import ADV_ESTIMATOR_REGISTRY
    from reinforge.algorithm.policy_loss import POLICY_LOSS_REGISTRY
    from reinforge.environment.envs import ENV_REGISTRY
    from reinforge.inference.agent import AGENT_LOOP_REGISTRY

    registries = (ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY, ENV_REGISTRY, AGENT_LOOP_REGISTRY)
    saved = [(registry, dict(registry)) for registry in registries]
    yield
    for registry, entries in saved:
        registry.clear()
        registry.update(entries)


@pytest.fixture(scope="session")
def tiny_vl_model_path(tiny_model_path, cache_dir) -> Path:
    """A tiny Qwen2-VL model made from the tiny model (training/tiny_vl_model.py)."""
    from reinforge.training.tiny_vl_model import ensure_tiny_vl_model

    return ensure_tiny_vl_model(tiny_model_path, cache_dir / "models")


def png(light: bool, rng, side: int = 56) -> bytes:
    """A PNG of a dark or a light noisy grey square."""
    import io

    import numpy as np
    from PIL import Image

    base = rng.randrange(170, 256) if light else rng.randrange(0, 86)
    noise = np.array([[rng.randrange(-20, 21) for _ in range(side)] for _ in range(side)])[..., None].repeat(3, -1)
    buffer = io.BytesIO()
    Image.fromarray(np.clip(base + noise, 0, 255).astype("uint8")).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="session")
def brightness_rows():
    """`rows(n, seed)`: verl-schema rows of the brightness task: one image each (a dark or light square, as a Hugging Face
    Image feature stores it: {'bytes', 'path'}), the prompt `<image>Copy: 01` or `... 10` (the order drawn apart from the
    image, so the text alone says nothing of the answer), ground truth "1" for a light image, "0" for a dark one."""
    import random

    def rows(n: int, seed: int) -> list[dict]:
        rng, out = random.Random(seed), []
        for i in range(n):
            light, order = rng.random() < 0.5, rng.choice(["01", "10"])
            out.append({"data_source": "brightness", "prompt": [{"role": "user", "content": f"<image>Copy: {order}"}],
                        "images": [{"bytes": png(light, rng), "path": None}],
                        "reward_model": {"style": "rule", "ground_truth": "1" if light else "0"},
                        "extra_info": {"split": "train", "index": i}})
        return out

    return rows
