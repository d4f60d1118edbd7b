"""The `distillation.*` section (verl 0.9's on-policy distillation; config/schema.py assembles the whole): the student
learns from teacher models' log-probs on its own rollouts (docs/algorithms.md, "On-policy distillation")."""

from __future__ import annotations

from dataclasses import dataclass

from reinforge.config.fields import Node, _f, _sub
from reinforge.errors import ConfigError, DataError

ESTIMATOR_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")  # single-sample KL estimators, sampled tokens only
TOPK_MODE = "forward_kl_topk"
LOSS_MODES = (*ESTIMATOR_MODES, TOPK_MODE)
DEFAULT_TEACHER = "teacher_model"
TEACHER_FIELDS = ("model_path", "key", "num_replicas", "inference")  # verl's DistillationTeacherModelConfig


@dataclass
class DistillationLossConfig(Node):
    loss_mode: str = _f("k3", "How far the student is from the teacher at each response token: kl/k1, abs, mse/k2, "
                              "low_var_kl/k3 (an estimate of KL(student || teacher) from the sampled token's log-probs), "
                              "or forward_kl_topk (KL(teacher || student) over the teacher's top-k tokens).")
    topk: int | None = _f(32, "forward_kl_topk: how many of the teacher's most likely tokens each position compares.")
    use_task_rewards: bool = _f(True, "Keep the policy loss of the task's rewards and add distillation_loss_coef x the "
                                      "distillation loss; false: the distillation loss alone.")
    distillation_loss_coef: float = _f(1.0, "Weight of the distillation loss beside the policy loss (use_task_rewards).")
    loss_max_clamp: float | None = _f(None, "Clamp each token's distillation loss to [-this, this] (null: no clamp).")
    log_prob_min_clamp: float | None = _f(None, "forward_kl_topk: floor of the student's and the teacher's top-k "
                                                "log-probs (null: none).")
    use_policy_gradient: bool = _f(False, "Use minus the distillation loss as each token's advantage in a clipped policy "
                                          "loss (on-policy distillation as a reward; k1 recommended) instead of "
                                          "minimising it directly (k3 or forward_kl_topk recommended).")
    policy_loss_mode: str = _f("vanilla", "use_policy_gradient: the policy loss (vanilla only, as verl).")
    clip_ratio: float = _f(0.2, "use_policy_gradient: the clip range (stands in for a null clip_ratio_low/high).")
    clip_ratio_low: float | None = _f(0.2, "use_policy_gradient: lower clip, ratio >= 1 - clip_ratio_low.")
    clip_ratio_high: float | None = _f(0.2, "use_policy_gradient: upper clip, ratio <= 1 + clip_ratio_high.")
    use_chunked_topk: bool = _f(False, "Accepted for verl compatibility; no effect: the student's top-k log-probs never "
                                       "make a log-softmax copy of the vocabulary.")
    chunked_topk_chunk_size: int = _f(4096, "Accepted for verl compatibility; no effect (use_chunked_topk).")


@dataclass
class DistillationConfig(Node):
    enabled: bool = _f(False, "Learn from teacher models' log-probs on the student's rollouts.")
    teacher_models: dict = _f({"teacher_model": {"key": None, "model_path": None, "num_replicas": 0, "inference": {}}},
                              "The teachers, name -> {model_path, key}: one entry (teacher_model) teaches every row; with "
                              "several (teacher_model itself dropped, as verl), a row goes to the teacher whose key equals "
                              "its teacher_key field. A teacher shares the student's tokenizer and runs in the training "
                              "process, as the reference does (num_replicas and inference: no effect).")
    teacher_key: str = _f("data_source", "The row field that picks its teacher when there are several.")
    n_gpus_per_node: int = _f(8, "Accepted for verl compatibility (the teachers' own GPU pool); no effect: teachers run "
                                 "on the training ranks.")
    nnodes: int = _f(0, "Accepted for verl compatibility (the teachers' own nodes); no effect.")
    distillation_loss: DistillationLossConfig = _sub(DistillationLossConfig, "The distillation loss.")


@dataclass(frozen=True)
class Teacher:
    key: str | None  # the teacher_key value of the rows it teaches; None: every row
    model_path: str
    setting: str  # its config key, for messages


def resolve_teachers(config: DistillationConfig) -> list[Teacher]:
    """The teachers as verl resolves them: the one `teacher_model` entry teaches every row; with more entries,
    `teacher_model` is dropped and each other entry teaches the rows whose teacher_key field equals its `key`."""
    entries = dict(config.teacher_models or {})
    if not entries:
        raise ConfigError("distillation.enabled=true needs a teacher: set distillation.teacher_models.teacher_model.model_path")
    if len(entries) > 1:
        entries.pop(DEFAULT_TEACHER, None)
    teachers, keys = [], set()
    for name, entry in entries.items():
        setting = f"distillation.teacher_models.{name}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{setting}={entry!r}: a teacher is a mapping of {', '.join(TEACHER_FIELDS)}; set "
                              f"{setting}.model_path=...")
        unknown = sorted(set(entry) - set(TEACHER_FIELDS) - {"_target_"})
        if unknown:
            raise ConfigError(f"unknown config key '{setting}.{unknown[0]}': a teacher has {', '.join(TEACHER_FIELDS)}")
        if not entry.get("model_path"):
            raise ConfigError(f"{setting}.model_path is not set: the teacher's model folder (or hub name)")
        key = None if len(entries) == 1 else entry.get("key")
        if len(entries) > 1 and (key is None or key in keys):
            problem = ".key is not set" if key is None else f".key={key!r} is another teacher's too"
            raise ConfigError(f"{setting}{problem}: with several teachers, each teaches the rows whose "
                              f"{config.teacher_key} equals its key")
        keys.add(key)
        teachers.append(Teacher(key, str(entry["model_path"]), f"{setting}.model_path"))
    return teachers


def check_distillation(config: DistillationConfig) -> None:
    """The mistakes verl refuses at start, named by key."""
    if not config.enabled:
        return
    loss = config.distillation_loss
    where = "distillation.distillation_loss"
    if loss.loss_mode not in LOSS_MODES:
        raise ConfigError(f"{where}.loss_mode={loss.loss_mode!r} is not one of: {', '.join(LOSS_MODES)}")
    if loss.loss_mode == TOPK_MODE and (not isinstance(loss.topk, int) or loss.topk < 1):
        raise ConfigError(f"{where}.topk={loss.topk!r} must be a positive number of tokens with loss_mode={TOPK_MODE}")
    if loss.policy_loss_mode != "vanilla":
        raise ConfigError(f"{where}.policy_loss_mode={loss.policy_loss_mode!r}: only vanilla, as verl")
    if loss.loss_mode in ("kl", "k1") and not loss.use_policy_gradient:
        raise ConfigError(f"{where}.loss_mode={loss.loss_mode} with use_policy_gradient=false: the gradient of k1 does not "
                          "depend on the teacher (verl refuses it too); use k3 or forward_kl_topk, or "
                          "use_policy_gradient=true")
    if loss.distillation_loss_coef < 0:
        raise ConfigError(f"{where}.distillation_loss_coef={loss.distillation_loss_coef} must be >= 0")
    if loss.loss_max_clamp is not None and loss.loss_max_clamp <= 0:
        raise ConfigError(f"{where}.loss_max_clamp={loss.loss_max_clamp} must be > 0 (null: no clamp)")
    resolve_teachers(config)


def no_teacher(where: str, teacher_key: str, values, keys) -> DataError:
    """The error for rows whose teacher_key `values` no teacher's key is (`where`: their files, or none)."""
    return DataError(f"{where}rows whose {teacher_key} is {', '.join(map(repr, values))} have no teacher: the teachers' "
                     f"keys (distillation.teacher_models.*.key) are {', '.join(sorted(map(str, keys)))}")
