"""INFERENCE: generation engines behind one interface, and the rollout that uses them.

`InferenceEngine` (engine.py) is token ids in, token ids and log-probs out; `HFEngine` (hf.py)
implements it with transformers, `VLLMEngine` (vllm_engine.py) and `SGLangEngine` (sglang_engine.py)
with those libraries on a GPU, over the weight sync and sleep/wake protocol of colocated.py;
`make_engine` (factory.py) builds the one `rollout.name` asks for; `generate_sequences` (rollout.py) turns a Batch of prompts
into a Batch of trajectories with verl's field names. Multi-turn rollouts: agent loops
(`agent/`), tools (`tools/`) and interactions (`interactions.py`), docs/agents.md.
"""

from reinforge.inference.colocated import ModuleWeights
from reinforge.inference.engine import GenerationOutput, InferenceEngine, SamplingParams
from reinforge.inference.factory import make_engine
from reinforge.inference.hf import HFEngine
from reinforge.inference.rollout import generate_sequences

__all__ = ["GenerationOutput", "HFEngine", "InferenceEngine", "ModuleWeights", "SamplingParams", "generate_sequences",
           "make_engine"]
