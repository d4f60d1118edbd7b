"""A training run with rollout.name=vllm against the fake vllm package: the worker wakes the engine (pushing the
actor's weights) before each rollout, puts it to sleep after, and hands it the weights after every update."""

import sys

import torch

from reinforge.training.actor import Actor
from tests.inference.fake_engines import FakeLLM, fake_vllm


def test_weights_reach_the_engine_between_update_and_rollout(run_steps, monkeypatch, tiny_model_path):
    log: list = []
    engine_matches_actor = []
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(log))
    monkeypatch.setattr("reinforge.inference.factory.check_gpu_engine", lambda config: None)  # the fake runs on CPU
    update_policy = Actor.update_policy

    def logged_update(self, *args, **kwargs):
        """Before each update: did the rollout just before it use the actor's current weights (in bfloat16)?"""
        log.append(("update_actor",))
        (llm,) = FakeLLM.instances
        engine_matches_actor.append(all(torch.equal(llm.weights[name], tensor.to(torch.bfloat16))
                                        for name, tensor in self.model.state_dict().items() if name != "lm_head.weight"))
        return update_policy(self, *args, **kwargs)

    monkeypatch.setattr(Actor, "update_policy", logged_update)
    steps = run_steps("actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.tensor_model_parallel_size=1")

    assert sorted(steps) == [1, 2]
    rollout = ["wake_up", "load", "reset_prefix_cache", "wake_up", "generate", "sleep"]
    assert [entry[0] for entry in log] == ["sleep", *rollout, "update_actor", *rollout, "update_actor"]
    assert [entry[1] for entry in log if entry[0] == "generate"] == [4, 4]  # 2 prompts x rollout.n=2
    assert engine_matches_actor == [True, True]  # step 2's rollout ran with the weights of step 1's update
    (llm,) = FakeLLM.instances
    assert llm.kwargs["model"] == str(tiny_model_path) and llm.kwargs["enable_sleep_mode"] is True
