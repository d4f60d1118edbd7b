"""verl's rollout skip (`actor_rollout_ref.rollout.skip.*`, earlier `skip_rollout` / `skip_dump_dir`): keep the
training steps' generations on disk and read them back instead of generating, to iterate on a reward function or
on the update without paying for generation each time.

The first `max_dump_step` steps read their generation from the dump folder, or generate it and write it there.
Later steps, by `action`: `cache` generates as usual; `repeat` (the default) reads the dumped steps again in turn
(step k takes dumped step ((k - 1) mod D) + 1 of the D dumped); `repeat_last` reads the last dumped step. A
generation is the whole batch after the rollout: its prompts, their data columns and the responses (rewards are
scored afresh), kept with the step's prompts, so a dumped step replaces the prompts the loader drew as well.

The folder is `<dump_dir>/<experiment_name>_<project_name>/GBS<prompts>_N<n>_in<max_prompt_length>_out
<max_response_length>/`, as in verl, where <prompts> is the number of prompts a generation batch holds (verl's
loader batch: data.gen_batch_size when set, else data.train_batch_size), so a change of those settings starts a
new folder; a change of model, data or sampling does not, which is the point: delete the folder to generate anew. A dumped batch of another size than this run's
(a folder written by hand or by another version) stops the run, naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch

from reinforge.batch import Batch
from reinforge.config.derived import generation_batch
from reinforge.config.schema import Config
from reinforge.errors import ConfigError
from reinforge.trainer.checkpoint import save_torch

SKIP_ACTIONS = ("cache", "repeat", "repeat_last")


def skip_settings(config: Config) -> tuple[bool, str]:
    """(on, dump folder) from `rollout.skip.*`, or verl's earlier `rollout.skip_rollout` / `skip_dump_dir`."""
    rollout = config.actor_rollout_ref.rollout
    return rollout.skip.enable or rollout.skip_rollout, rollout.skip.dump_dir or rollout.skip_dump_dir


class RolloutCache:
    def __init__(self, config: Config):
        data, trainer, rollout = config.data, config.trainer, config.actor_rollout_ref.rollout
        _, dump_dir = skip_settings(config)
        self.prompts = generation_batch(config)[1]
        self.folder = (Path(dump_dir).expanduser() / f"{trainer.experiment_name}_{trainer.project_name}"
                       / f"GBS{self.prompts}_N{rollout.n}_in{data.max_prompt_length}_out{data.max_response_length}")
        self.max_dump_step, self.action = rollout.skip.max_dump_step, rollout.skip.action

    def describe(self) -> str:
        if self.max_dump_step == 0:  # only with action=cache (config check)
            return "skip.max_dump_step=0: no generation is read back or written, every step generates"
        later = {"cache": "later steps generate", "repeat": "later steps reuse the dumped ones in turn",
                 "repeat_last": "later steps reuse the last dumped one"}[self.action]
        return f"the generations of steps 1-{self.max_dump_step} are read from or written to {self.folder}; {later}"

    def generation(self, step: int, round_: int, prompts: Batch, generate: Callable[[], Batch]) -> tuple[Batch, Batch]:
        """(prompts, generation) of step `step`: `prompts` and `generate()`, or a dumped pair (`round_`: the step's
        generation batch, more than one under algorithm.filter_groups)."""
        if step <= self.max_dump_step:
            return self._load(step, round_) or self._dump(step, round_, prompts, generate())
        dumped = self.dumped_steps()
        if self.action == "cache" or not dumped:
            return prompts, generate()
        source = dumped[(step - 1) % len(dumped)] if self.action == "repeat" else dumped[-1]
        return self._load(source, round_) or (prompts, generate())

    def dumped_steps(self) -> list[int]:
        steps = {int(path.name.split("_")[1]) for path in self.folder.glob("step_*_round_*.pt")} if self.folder.is_dir() else set()
        return sorted(step for step in steps if step <= self.max_dump_step)

    def _path(self, step: int, round_: int) -> Path:
        return self.folder / f"step_{step:06d}_round_{round_}.pt"

    def _load(self, step: int, round_: int) -> tuple[Batch, Batch] | None:
        path = self._path(step, round_)
        if not path.is_file():
            return None
        saved = torch.load(path, weights_only=False)  # written by this class; pickled numpy arrays of the data columns
        prompts, batch = (Batch(part["tensors"], part["non_tensors"], part["meta_info"]) for part in saved)
        if len(prompts) != self.prompts:
            raise ConfigError(f"{path} holds a generation of {len(prompts)} prompts, and this run generates batches of "
                              f"{self.prompts}: delete it or set actor_rollout_ref.rollout.skip.dump_dir to another folder")
        return prompts, batch

    def _dump(self, step: int, round_: int, prompts: Batch, batch: Batch) -> tuple[Batch, Batch]:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._path(step, round_)
        tmp = path.with_name(f".{path.name}.tmp")
        save_torch([{"tensors": part.tensors, "non_tensors": part.non_tensors, "meta_info": part.meta_info}
                    for part in (prompts, batch)], tmp)
        os.replace(tmp, path)
        return prompts, batch
