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
