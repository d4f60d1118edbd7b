"""The reward model worker (verl's `RewardModelWorker`): loads the reward model, scores trajectories.

`init_model()` loads three things: the tokenizer that decodes the policy's tokens
(`reward_model.model.input_tokenizer`, null: the policy's own), the reward model's own tokenizer
(from `reward_model.model.path`) and the model, in `reward_model.model.fsdp_config.model_dtype`:

- a sequence classifier (`AutoModelForSequenceClassification`, one label), the default. A
  checkpoint whose weights do not all load into it (a plain causal LM, say) is refused rather
  than scored by a randomly initialised head. Without a `pad_token_id` in its config, the
  tokenizer's pad id is used (transformers needs one to find each row's last token);
- a causal LM judge with `reward_model.judge.enable` (see `judge.py`), generating with the hf
  engine seeded by `trainer.seed`.

`compute_rm_score(batch)` returns `rm_scores` (batch, response_len): the score of each row on its
last valid response token (verl's name and layout), plus per-row flags `rm_truncated` and, for the
judge, `judge_parse_failed`, which `RewardModelScorer` counts. Micro-batches of
`reward_model.micro_batch_size_per_gpu` rows, or token-budget ones (`reward_model.use_dynamic_bsz`), give the
same scores as one batch. The first call
prints the first rebuilt input (or judge exchange) once, to show what the reward model reads.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from reinforge.batch import Batch
from reinforge.config.schema import Config
from reinforge.distributed import Dispatch, register
from reinforge.errors import ModelError
from reinforge.inference import HFEngine
from reinforge.reward.models.classifier import ClassifierInputs, classifier_inputs, same_tokenizer, sequence_scores
from reinforge.reward.models.judge import Judge, check_judge_tokenizer
from reinforge.reward.models.rows import on_last_response_token
from reinforge.training.model import load_pretrained, load_tokenizer, prepare_model, tokenizer_source

PATH_KEY = "reward_model.model.path"


class RewardModelWorker:
    """The reward model role; its registered methods take and return Batches."""

    def __init__(self, config: Config):
        self.config = config
        self.device = config.trainer.device
        self.model: torch.nn.Module | None = None
        self.judge: Judge | None = None
        self.switch_chat_template = False
        self._shown = self._warned_cut = False

    @register(Dispatch.ALL)
    def init_model(self) -> None:
        rm = self.config.reward_model
        self.input_tokenizer = _input_tokenizer(self.config)
        self.tokenizer = _tokenizer(rm.model.path, PATH_KEY, rm.model.trust_remote_code)
        if rm.judge.enable:
            check_judge_tokenizer(rm.judge, self.tokenizer, f"{PATH_KEY}={rm.model.path}")  # before the model loads
            model = _load(self.config, judge=True, device=self.device)
            engine = HFEngine(model, self.tokenizer.pad_token_id, _eos_ids(model, self.tokenizer), seed=self.config.trainer.seed,
                              micro_batch_size=rm.micro_batch_size_per_gpu)
            self.judge = Judge(rm.judge, self.tokenizer, engine, rm.max_length)
            return
        self.model = _load(self.config, judge=False, device=self.device, pad_token_id=self.tokenizer.pad_token_id)
        # what made the ids (input_tokenizer's default): the reward model reads them as they are only with its tokenizer
        policy = self.input_tokenizer if rm.model.input_tokenizer is None else load_tokenizer(self.config)
        if rm.model.input_tokenizer is not None and self.input_tokenizer.get_vocab() != policy.get_vocab():
            raise ModelError(f"reward_model.model.input_tokenizer={rm.model.input_tokenizer}: its vocabulary is not the "
                             f"policy's ({self.config.actor_rollout_ref.model.path}), and it decodes the policy's tokens; "
                             "leave it unset (the policy's tokenizer, verl's default)")
        self.switch_chat_template = not same_tokenizer(policy, self.tokenizer)
        if not self.switch_chat_template and rm.max_length is not None:
            print(f"reinforge: note: reward_model.max_length={rm.max_length} has no effect: the reward model's tokenizer is "
                  "the policy's, so it reads the policy's tokens as they are (as in verl)", flush=True)
        if self.switch_chat_template and not self.tokenizer.chat_template:
            raise ModelError(f"{PATH_KEY}={rm.model.path}: its tokenizer differs from the policy's and has no chat template, so "
                             "the conversations cannot be rebuilt for it; add a chat_template to its tokenizer_config.json")

    @register(Dispatch.DP)
    def compute_rm_score(self, batch: Batch) -> Batch:
        """rm_scores (batch, response_len): each row's reward model score on its last valid response token."""
        if self.judge is not None:
            verdicts = self.judge.judge(batch, self.input_tokenizer)
            self._show_once(f"the reward judge's first verdict of the run: {verdicts.verdicts[0]!r} -> score {verdicts.scores[0]}"
                            f"{' (unparsed)' if verdicts.parse_failed[0] else ''}")
            return Batch({"rm_scores": on_last_response_token(torch.tensor(verdicts.scores), batch)},
                         {"rm_truncated": verdicts.truncated, "judge_parse_failed": verdicts.parse_failed})
        inputs = self.classifier_inputs(batch)
        if inputs.texts and not self._shown:
            cut = f" (cut to reward_model.max_length={self.config.reward_model.max_length} tokens)" if inputs.truncated[0] else ""
            read = self.tokenizer.decode(inputs.input_ids[0, :int(inputs.attention_mask[0].sum())].tolist()) if cut else inputs.texts[0]
            self._show_once(f"the reward model reads conversations in its own chat template; the first{cut}: {read!r}")
        if inputs.unscored and not self._warned_cut:
            self._warned_cut = True
            print(f"reinforge: warning: reward_model.max_length={self.config.reward_model.max_length} cuts away every response "
                  f"token of {inputs.unscored} of {len(inputs.truncated)} responses, whose rebuilt prompts alone are longer: "
                  "the reward model scores their prompts only. Raise reward_model.max_length", file=sys.stderr, flush=True)
        rm = self.config.reward_model
        scores = sequence_scores(self.model, inputs, rm.micro_batch_size_per_gpu,
                                 rm.forward_max_token_len_per_gpu if rm.use_dynamic_bsz else None, rm.model.use_remove_padding)
        return Batch({"rm_scores": on_last_response_token(scores, batch)}, {"rm_truncated": inputs.truncated})

    def classifier_inputs(self, batch: Batch) -> ClassifierInputs:
        """What the sequence classifier reads for `batch`: the policy's ids, or the rebuilt conversations."""
        return classifier_inputs(batch, self.input_tokenizer, self.tokenizer if self.switch_chat_template else None,
                                 self.model.config.pad_token_id, self.config.reward_model.max_length)

    def _show_once(self, line: str) -> None:
        if not self._shown:
            self._shown = True
            print(f"reinforge: {line}", flush=True)


def _input_tokenizer(config: Config) -> Any:
    """The tokenizer that decodes the policy's tokens: reward_model.model.input_tokenizer, else the policy's own."""
    model_cfg = config.reward_model.model
    if model_cfg.input_tokenizer is None:
        return load_tokenizer(config)
    return _tokenizer(model_cfg.input_tokenizer, "reward_model.model.input_tokenizer", model_cfg.trust_remote_code)


def _tokenizer(path: str, key: str, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer

    source = tokenizer_source(path, key)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except Exception as exc:
        raise ModelError(f"{key}={path}: cannot load its tokenizer: {exc}") from exc
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ModelError(f"{key}={path}: its tokenizer has neither a pad nor an EOS token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


HEAD_NAMES = ("score", "classifier")  # the output layer of transformers' sequence and token classifiers


def _load(config: Config, judge: bool, device: str, pad_token_id: int | None = None) -> torch.nn.Module:
    """The reward model (a causal LM for the judge, else a one-label sequence classifier) in eval mode on `device`.

    Every weight must come from the checkpoint; the classifier gets `pad_token_id` when its config has none.
    """
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoModelForTokenClassification

    model_cfg = config.reward_model.model

    def build(source: str, hf_config: Any, kwargs: dict) -> torch.nn.Module:
        # a *ForTokenClassification checkpoint (verl's model merger saves value models so) keeps its head's bias
        token = any(str(name).endswith("ForTokenClassification") for name in getattr(hf_config, "architectures", None) or ())
        cls = AutoModelForCausalLM if judge else AutoModelForTokenClassification if token else AutoModelForSequenceClassification
        if type(hf_config) not in cls._model_mapping:
            hint = "" if judge else "; for a causal LM judge set reward_model.judge.enable=true"
            raise ModelError(f"transformers has no {cls.__name__} for {type(hf_config).__name__}{hint}")
        labels = getattr(hf_config, "num_labels", 1)
        if not judge:
            hf_config.num_labels = 1
            if hf_config.pad_token_id is None:
                hf_config.pad_token_id = pad_token_id
        # mismatched shapes are reported below, by name, rather than by transformers' error pointing at a log it did not show
        model, info = cls.from_pretrained(source, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs)
        head = [key for key in info["unexpected_keys"] if key.split(".")[0] in HEAD_NAMES]  # what the scores would lack
        if cls is AutoModelForSequenceClassification and head == ["score.bias"]:
            # a value head with a bias under the base model's architectures (verl's FSDP critic checkpoints): a token classifier
            cls = AutoModelForTokenClassification
            model, info = cls.from_pretrained(source, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs)
            head = [key for key in info["unexpected_keys"] if key.split(".")[0] in HEAD_NAMES]
        if info["missing_keys"]:
            raise ModelError(f"the checkpoint has no weights for {sorted(info['missing_keys'])[:4]}, so they would be random "
                             "(is it a reward model of this kind?)")
        if judge and head:  # a classifier's checkpoint: as a causal LM its head is dropped and its verdicts are noise
            raise ModelError(f"the checkpoint has a classifier's score head ({sorted(head)[0]}; architectures "
                             f"{getattr(hf_config, 'architectures', None)}): a judge generates its verdict with a causal LM. "
                             "Score with it as a classifier (reward_model.judge.enable=false), or give the judge a causal LM")
        if not judge and head:
            raise ModelError(f"the checkpoint's score head has weights the {type(model).__name__} does not use, "
                             f"{sorted(head)[:4]}, so its scores would not be the checkpoint's")
        if info["mismatched_keys"]:
            shapes = ", ".join(f"{name} is {tuple(saved)} in the checkpoint, {tuple(built)} in the model"
                               for name, saved, built in sorted(info["mismatched_keys"])[:4])
            reason = (f"a classifier reward model gives one score per response (num_labels=1), and this one has num_labels={labels}"
                      if not judge and labels != 1 else "check reward_model.model.override_config")
            raise ModelError(f"the checkpoint's weights do not fit the model its config describes: {shapes}; {reason}")
        return model

    what = f"reward {'judge' if judge else 'model'} ({PATH_KEY})"
    model = load_pretrained(model_cfg, PATH_KEY, what, model_cfg.fsdp_config.model_dtype, build)
    return prepare_model(model, device, trainable=False, gradient_checkpointing=False)


def _eos_ids(model: torch.nn.Module, tokenizer: Any) -> list[int]:
    """Where a verdict ends: the model's generation-config EOS ids and the tokenizer's EOS."""
    eos = model.generation_config.eos_token_id if getattr(model, "generation_config", None) is not None else None
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids
