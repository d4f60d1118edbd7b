"""Validation: generate for every validation prompt with val_kwargs, score, and aggregate per data source.

Each prompt gets `actor_rollout_ref.rollout.val_kwargs.n` responses; the metrics are verl's
(`trainer/val_metrics.py`): `val-core/<data_source>/<var>/mean@<n>` for the core variable (`acc`
when that data source's rewards return one, else `reward`), with `best@<n>/*` and `maj@<n>/*` beside
it when n > 1, and `val-aux/...` for the rest (std@n, best/worst/maj@k for smaller k, pass@k,
and, as in verl, the numeric keys of the reward's extra information: `acc` for plain-number
results, `score` and the other keys of dict results; `score` differs from `reward` where the reward adds to it, e.g. DAPO's overlong
penalty or a reward model's score). `trainer.log_val_generations` prints that many samples and hands
them to the trackers (a table in wandb, trackio and mlflow, text in tensorboard and swanlab);
`trainer.validation_data_dir` writes every sample as JSONL. Responses whose reward function failed
(scored 0) are counted in `val-aux/reward/errors` and `val-aux/reward/timeouts` when there are any,
with a warning when every response failed.
"""

from __future__ import annotations

import sys

import numpy as np

from reinforge.batch import Batch
from reinforge.config.schema import Config
from reinforge.distributed import WorkerGroup
from reinforge.inference.rollout import SEED_KEY, rollout_inputs
from reinforge.inference.seeds import VALIDATION, row_seeds
from reinforge.reward.manager.trl import TrainerState
from reinforge.trainer.generations import generation_records, write_generations
from reinforge.trainer.tracking import Tracking
from reinforge.trainer.val_metrics import process_validation_metrics, validation_metric_dict


def trainer_state(trainer, done: int) -> TrainerState:
    """What TRL reward functions read as trainer_state (reward/manager/trl.py) when `done` steps of `trainer` (an
    RLTrainer) are done: its step count, and the epochs done as a fraction (steps per epoch: the loader's batches)."""
    return TrainerState.at(done, trainer.total_training_steps, len(trainer.train_loader))


def validate(config: Config, wg: WorkerGroup, reward_fn, val_loader, tokenizer, step: int,
             tracking: Tracking | None = None, state: TrainerState | None = None) -> dict[str, float]:
    n = config.actor_rollout_ref.rollout.val_kwargs.n
    key = config.data.reward_fn_key
    sources: list[str] = []
    uids: list[int] = []  # the validation prompt each response answers
    extras: list[dict] = []  # per response: the reward's extra information (`score`, the keys of dict results, ...)
    plain: list[bool] = []  # per response: its reward function returned a plain number (the manager says so)
    rewards: list[float] = []
    failed = {"reward/errors": 0, "reward/timeouts": 0}  # responses whose reward function failed (scored 0)
    samples = []
    turns: list[int] = []  # multi-turn rollouts: turns per conversation
    # decoded when used: for validation_data_dir, or to pick the log_val_generations shown from all of them
    decode = bool(config.trainer.validation_data_dir or config.trainer.log_val_generations)
    for number, prompts in enumerate(val_loader):
        batch = Batch.from_dict(prompts, meta_info={"validate": True, "trainer_state": state}).repeat(n, interleave=True)
        batch[SEED_KEY] = row_seeds(len(batch), config.trainer.seed, VALIDATION, step, number)  # see RLTrainer._generate
        batch = batch.union(wg.generate_sequences(rollout_inputs(batch)))
        scored = reward_fn(batch, return_dict=True)
        scores = scored["reward_tensor"].sum(-1).tolist()
        extra_info = scored.get("reward_extra_info", {})
        first_uid = len(uids) // n
        sources += [str(s) for s in batch[key]] if key in batch else ["unknown"] * len(scores)
        uids += [first_uid + row // n for row in range(len(scores))]
        extras += [{k: values[row] for k, values in extra_info.items()} for row in range(len(scores))]
        plain += scored.get("plain_scores") or [False] * len(scores)  # a manager that does not say: its keys as given
        rewards += scores
        turns += [int(t) for t in batch["__num_turns__"]] if "__num_turns__" in batch else []
        for name in failed:
            failed[name] += scored.get("reward_metrics", {}).get(name, 0)
        if decode:
            samples += generation_records(batch, scores, tokenizer, step, extra_info)

    extras = _plain_sources_without_score(sources, extras, plain)
    names = list(dict.fromkeys(k for extra in extras for k in extra))
    infos = {"reward": rewards, **{name: [extra.get(name) for extra in extras] for name in names}}  # None: not in this row
    _report_samples(config, samples, step, tracking)
    metrics = validation_metric_dict(process_validation_metrics(sources, uids, infos))
    if turns:  # as verl's validation
        metrics.update({"val-aux/num_turns/min": min(turns), "val-aux/num_turns/max": max(turns),
                        "val-aux/num_turns/mean": float(np.mean(turns))})
    if any(failed.values()):
        metrics.update({f"val-aux/{name}": count for name, count in failed.items()})
        if sum(failed.values()) == len(rewards):
            summary = getattr(reward_fn, "failure_summary", None)
            print(f"reinforge: warning: validation @ step {step}: the reward function failed on all {len(rewards)} responses "
                  f"({failed['reward/errors']} errors, {failed['reward/timeouts']} timeouts), so the validation reward is 0"
                  + (f"; it is {summary()}" if summary else ""), file=sys.stderr, flush=True)
    return metrics


def _plain_sources_without_score(sources: list[str], extras: list[dict], plain: list[bool]) -> list[dict]:
    """A data source whose reward function returns plain numbers has acc and no score as a variable, as verl's reward
    loop records them (`acc` is the number; the manager's `score` repeats it); a source with any dict result keeps
    its score, whatever its values (verl logs every key of a dict result)."""
    with_dicts = {source for source, is_plain in zip(sources, plain, strict=True) if not is_plain}
    with_acc = {source for source, extra in zip(sources, extras, strict=True) if extra.get("acc") is not None}
    return [{key: value for key, value in extra.items() if key != "score"} if source in with_acc - with_dicts else extra
            for source, extra in zip(sources, extras, strict=True)]


def _report_samples(config: Config, samples: list[dict], step: int, tracking: Tracking | None) -> None:
    """Log log_val_generations samples, picked as verl picks them: sorted by input, shuffled with seed 42, the first
    ones (the same prompts at every validation); write all of them to validation_data_dir."""
    shown = sorted(samples, key=lambda sample: sample["input"])
    np.random.RandomState(42).shuffle(shown)
    shown = shown[:config.trainer.log_val_generations]
    if tracking is not None:
        tracking.log_generations(shown, step)
    for sample in shown:
        print(f"[val sample @ step {step}] score={sample['score']:.3f} gts={sample['gts']!r}\n"
              f"  input:  {sample['input']!r}\n  output: {sample['output']!r}", flush=True)
    if config.trainer.validation_data_dir:
        write_generations(config.trainer.validation_data_dir, step, samples)
