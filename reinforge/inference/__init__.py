"""INFERENCE: generation engines behind one interface, and the rollout that uses them.

`InferenceEngine` (engine.py) is token ids in, token ids and log-probs out; `HFEngine` (hf.py)
implements it with transformers; `generate_sequences` (rollout.py) turns a Batch of prompts
into a Batch of trajectories with verl's field names. Multi-turn rollouts: agent loops
(`agent/`), tools (`tools/`) and interactions (`interactions.py`), docs/agents.md.
"""

from reinforge.inference.engine import GenerationOutput, InferenceEngine, SamplingParams
from reinforge.inference.hf import HFEngine
from reinforge.inference.rollout import generate_sequences

__all__ = ["GenerationOutput", "HFEngine", "InferenceEngine", "SamplingParams", "generate_sequences"]
