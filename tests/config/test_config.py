import dataclasses
import re

import pytest

from reinforge.config import all_keys, batch_arithmetic, field_doc, load_config, unused_settings
from reinforge.config.schema import Config
from reinforge.errors import ConfigError

VERL = ["algorithm.adv_estimator=grpo", "data.train_files=/d/train.parquet", "actor_rollout_ref.model.path=/m"]


def test_every_schema_field_is_documented():
    missing = [key for key in all_keys() if not field_doc(key)]
    assert missing == []


def test_verl_defaults_hold_when_a_model_and_data_are_given():
    cfg, _ = load_config(VERL)
    actor = cfg.actor_rollout_ref.actor
    assert (cfg.data.train_batch_size, cfg.data.max_prompt_length, cfg.data.max_response_length) == (1024, 512, 512)
    assert (actor.optim.lr, actor.ppo_mini_batch_size, actor.clip_ratio_low, actor.clip_ratio_high) == (1e-6, 256, 0.2, 0.2)
    assert (actor.kl_loss_type, actor.loss_agg_mode, cfg.algorithm.kl_ctrl.kl_coef) == ("low_var_kl", "token-mean", 0.001)
    assert cfg.actor_rollout_ref.rollout.response_length == 512  # derived from data.max_response_length
    assert cfg.trainer.default_local_dir == "checkpoints/verl_examples/gsm8k"


def test_seed_overrides_parse(tmp_path):
    cfg, keys = load_config(VERL + [
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.n=5",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.ppo_mini_batch_size=256", "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.kl_loss_coef=0.001", "actor_rollout_ref.actor.entropy_coeff=0",
        "algorithm.use_kl_in_reward=False", "data.train_batch_size=1024", "trainer.n_gpus_per_node=8",
        "trainer.logger=['console']", "+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4",
    ])
    assert cfg.actor_rollout_ref.rollout.n == 5 and cfg.actor_rollout_ref.actor.use_kl_loss is True
    assert cfg.actor_rollout_ref.rollout.engine_kwargs == {"vllm": {"swap_space": 4}}
    notes = "\n".join(unused_settings(cfg, keys))
    assert "tensor_model_parallel_size: vLLM/SGLang setting; this run generates with the hf engine" in notes
    assert "engine_kwargs" in notes and "n_gpus_per_node" not in notes  # 8 ranks: Ray would run them


def test_an_engine_argument_not_nested_under_an_engine_is_an_error_with_any_engine():
    for engine in ("hf", "vllm"):  # hf too: no engine would take it there (it used to be a note with hf)
        with pytest.raises(ConfigError, match=re.escape("actor_rollout_ref.rollout.engine_kwargs.swap_space: engine arguments "
                                                        "nest under the engine's name, e.g. actor_rollout_ref.rollout."
                                                        "engine_kwargs.vllm.swap_space=...")):
            load_config(VERL + [f"actor_rollout_ref.rollout.name={engine}", "+actor_rollout_ref.rollout.engine_kwargs.swap_space=4"])
    # verl 0.8+ ships a section per engine, trtllm's among them: another engine's section is left alone
    load_config(VERL + ["+actor_rollout_ref.rollout.engine_kwargs.trtllm={}"])


def test_validation_sampling_settings_under_greedy_validation_are_listed():
    cfg, keys = load_config(VERL + ["actor_rollout_ref.rollout.val_kwargs.temperature=1.0", "actor_rollout_ref.rollout.val_kwargs.n=4"])
    notes = unused_settings(cfg, keys)
    assert [n.split(":")[0] for n in notes if "greedily" in n] == ["actor_rollout_ref.rollout.val_kwargs.temperature",
                                                                   "actor_rollout_ref.rollout.val_kwargs.n"]
    assert any(n.endswith("set val_kwargs.do_sample=true to sample") for n in notes)
    cfg, keys = load_config(VERL + ["actor_rollout_ref.rollout.val_kwargs.temperature=1.0", "actor_rollout_ref.rollout.val_kwargs.n=4",
                                    "actor_rollout_ref.rollout.val_kwargs.do_sample=true"])
    assert not [n for n in unused_settings(cfg, keys) if "val_kwargs" in n]


def test_settings_verl_ignores_as_well_are_listed():
    cfg, keys = load_config(VERL + ["trainer.resume_from_path=/runs/a/global_step_3", "custom_reward_function.name=score",
                                    "custom_reward_function.path=null", "trainer.test_freq=5", "data.val_files=null",
                                    "custom_reward_function.reward_weights=[1,2]"])
    notes = unused_settings(cfg, keys)
    assert ("trainer.resume_from_path: read with trainer.resume_mode=resume_path only, as in verl; resume_mode=auto resumes "
            "the run folder's latest checkpoint") in notes
    assert ("custom_reward_function.name: names a function in custom_reward_function.path, which is not set: the built-in "
            "scorers score the rows") in notes
    assert ("custom_reward_function.reward_weights: weighs the functions in custom_reward_function.path, which is not set: "
            "the built-in scorers score the rows") in notes
    assert "trainer.test_freq: data.val_files is not set, so there is nothing to validate" in notes


def test_a_group_estimator_with_one_response_per_prompt_is_noted():
    """TRL refuses num_generations < 2; verl trains on: the note says what a group of one means for the estimator."""
    def lone(*overrides):
        cfg, keys = load_config(VERL + list(overrides))
        return [n for n in unused_settings(cfg, keys) if "gives each prompt one response" in n]

    [grpo] = lone("actor_rollout_ref.rollout.n=1")
    assert grpo.startswith("algorithm.adv_estimator=grpo ") and "each response's advantage is its own score" in grpo
    [loo] = lone("actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=rloo_vectorized")
    assert "every advantage is 0, so nothing is learned" in loo
    assert lone("actor_rollout_ref.rollout.n=2") == []
    for estimator in ("reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax"):  # no groups, or a batch baseline
        assert lone("actor_rollout_ref.rollout.n=1", f"algorithm.adv_estimator={estimator}") == []


def test_algorithm_settings_without_effect_are_listed_with_what_would_use_them():
    cfg, keys = load_config(VERL + [
        "actor_rollout_ref.actor.use_kl_loss=false", "actor_rollout_ref.actor.kl_loss_coef=0.5", "algorithm.kl_ctrl.kl_coef=0.1",
        "algorithm.kl_penalty=k3", "algorithm.adv_estimator=rloo", "algorithm.lam=0.95", "algorithm.gamma=0.9",
        "algorithm.norm_adv_by_std_in_grpo=false", "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
        "actor_rollout_ref.actor.tau_pos=2", "actor_rollout_ref.actor.clip_ratio_c=4", "actor_rollout_ref.actor.clip_ratio=0.3",
        "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.1", "algorithm.filter_groups.metric=acc",
        "actor_rollout_ref.actor.policy_loss.dro_beta=0.5",
    ])
    notes = unused_settings(cfg, keys)
    assert "actor_rollout_ref.actor.kl_loss_coef: acts only with actor_rollout_ref.actor.use_kl_loss=true" in notes
    assert "algorithm.kl_ctrl.kl_coef: acts only with algorithm.use_kl_in_reward=true (the KL penalty in the reward)" in notes
    assert "algorithm.kl_penalty: acts only with algorithm.use_kl_in_reward=true (the KL penalty in the reward)" in notes
    for key in ("lam", "gamma", "norm_adv_by_std_in_grpo"):
        assert f"algorithm.{key}: algorithm.adv_estimator=rloo does not use it" in notes
    assert "actor_rollout_ref.actor.tau_pos: policy_loss.loss_mode=gspo does not use it (read by sapo)" in notes
    assert "actor_rollout_ref.actor.clip_ratio_c: policy_loss.loss_mode=gspo does not use it (read by vanilla, up, dppo_tv, dppo_kl, cppo)" in notes
    assert "actor_rollout_ref.actor.policy_loss.clip_cov_ratio: policy_loss.loss_mode=gspo does not use it (read by clip_cov)" in notes
    assert "actor_rollout_ref.actor.policy_loss.dro_beta: policy_loss.loss_mode=gspo does not use it (read by dro)" in notes
    assert "algorithm.filter_groups.metric: acts only with algorithm.filter_groups.enable=true" in notes
    assert not [n for n in notes if n.startswith("actor_rollout_ref.actor.use_kl_loss")]
    # as in verl, clip_ratio only stands in for a null clip_ratio_low or clip_ratio_high (0.2 each by default)
    assert ("actor_rollout_ref.actor.clip_ratio: the clip range is clip_ratio_low=0.2 and clip_ratio_high=0.2 (verl's defaults "
            "0.2 each); as in verl, clip_ratio stands in only for one of them set to null: set those instead") in notes
    assert (cfg.actor_rollout_ref.actor.clip_ratio_low, cfg.actor_rollout_ref.actor.clip_ratio_high) == (0.2, 0.2)
    cfg, keys = load_config(VERL + ["actor_rollout_ref.actor.clip_ratio=0.3", "actor_rollout_ref.actor.clip_ratio_high=null"])
    assert (cfg.actor_rollout_ref.actor.clip_ratio_low, cfg.actor_rollout_ref.actor.clip_ratio_high) == (0.2, 0.3)
    assert not [n for n in unused_settings(cfg, keys) if n.startswith("actor_rollout_ref.actor.clip_ratio")]
    cfg, keys = load_config(VERL + ["algorithm.adv_estimator=gae", "algorithm.lam=0.95", "algorithm.gamma=0.9",
                                    "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.kl_coef=0.1"])
    assert not [n for n in unused_settings(cfg, keys) if n.startswith("algorithm.")]  # used: nothing listed


@pytest.mark.parametrize("override, message", [
    ("actor_rollout_ref.actor.optim.lrr=1", "did you mean 'actor_rollout_ref.actor.optim.lr'"),
    ("actor_rollout_ref.acter.ppo_epochs=2", "did you mean 'actor_rollout_ref.actor.ppo_epochs'"),
    ("data.train_batch_sise=8", "did you mean 'data.train_batch_size'"),
    # the right name under another parent: the nearest such key, not a look-alike in the same section
    ("actor_rollout_ref.actor.lr=1e-6", "did you mean 'actor_rollout_ref.actor.optim.lr'"),
    ("actor_rollout_ref.actor.temperature=1", "did you mean 'actor_rollout_ref.rollout.temperature'"),
    ("actor_rollout_ref.actor.n=4", "did you mean 'actor_rollout_ref.rollout.n'"),
    ("trainer.ppo_epochs=2", "did you mean 'actor_rollout_ref.actor.ppo_epochs'"),
    ("actor_rollout_ref.rollout.n=0", "actor_rollout_ref.rollout.n=0 must be > 0"),
    ("actor_rollout_ref.actor.optim.lr=-1", "optim.lr=-1.0 must be >= 0"),
    ("actor_rollout_ref.actor.optim.lr=fast", "must be a number"),
    ("data.truncation=sideways", "data.truncation='sideways' is not one of: error, left, right, middle"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size=2048", "larger than data.train_batch_size=1024"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size=300", "not a multiple"),
    ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=7", "does not divide the mini-batch"),
    ("algorithm.adv_estimator=nope", "is not one of: gae, gdpo, gpg, grpo, grpo_passk, grpo_vectorized, opo, optimal_token_baseline, reinforce_plus_plus"),
    ("trainer.logger=['neptune']", "'neptune' is not a logger; choose from console, file, jsonl, tensorboard"),
    ("a.b.c=1", "unknown config key 'a.b.c'"),
    ("algorithm.gamma=1.5", "algorithm.gamma=1.5 must be in [0, 1]"),
    ("actor_rollout_ref.actor.optim.betas=[0.9,1.5]", "actor_rollout_ref.actor.optim.betas=[0.9, 1.5] must be two numbers in"),
    ("critic.optim.betas=[0.9,1.5]", "critic.optim.betas=[0.9, 1.5] must be two numbers in"),
    ("actor_rollout_ref.actor.optim.eps=-1", "actor_rollout_ref.actor.optim.eps=-1.0 must be >= 0"),
    ("actor_rollout_ref.actor.optim.min_lr_ratio=2", "actor_rollout_ref.actor.optim.min_lr_ratio=2.0 must be in [0, 1]"),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=-0.5", "lr_warmup_steps_ratio=-0.5 must be in [0, 1]"),
    ("actor_rollout_ref.actor.optim.num_cycles=-1", "actor_rollout_ref.actor.optim.num_cycles=-1.0 must be >= 0"),
    ("actor_rollout_ref.actor.grad_clip=0", "actor_rollout_ref.actor.grad_clip=0.0 must be > 0"),
    ("actor_rollout_ref.actor.optim.optimizer=Adamm", "optim.optimizer='Adamm' is not an optimizer class of torch.optim"),
    ("actor_rollout_ref.actor.checkpoint.save_contents=[hf]",
     "actor_rollout_ref.actor.checkpoint.save_contents=['hf']: ['hf'] is not among model, optimizer, extra, hf_model"),
    ("critic.checkpoint.load_contents=[modle,optimizer]", "critic.checkpoint.load_contents=['modle', 'optimizer']: ['modle'] is not"),
    ("algorithm.lam=-0.5", "algorithm.lam=-0.5 must be in [0, 1]"),
    ("actor_rollout_ref.actor.clip_ratio_low=-0.1", "actor_rollout_ref.actor.clip_ratio_low=-0.1 must be >= 0"),
    ("custom_reward_function.path=http://a:1/r,http://b:2/r", "one reward function file or reward server URL is taken "
                                                              "(OpenRLHF's comma-separated --remote_rm_url"),
    ("actor_rollout_ref.actor.policy_loss.clip_cov_lb=9", "clip_cov_lb=9.0 is above clip_cov_ub=5.0"),
    ("actor_rollout_ref.actor.policy_loss.ppo_kl_coef=-1", "policy_loss.ppo_kl_coef=-1.0 must be >= 0"),
    ("actor_rollout_ref.actor.clip_ratio_c=1", "clip_ratio_c=1.0 must be > 1: policy_loss.loss_mode=vanilla caps"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=dro",
     "actor_rollout_ref.actor.policy_loss.dro_beta=None must be a positive number with policy_loss.loss_mode=dro"),
    ("+reward_model.reward_kwargs.overlong_buffer_cfg={enable: true, len: 4}",  # with reward_manager=dapo below
     "overlong_buffer_cfg.enable=true needs reward_model.reward_kwargs.max_resp_len"),
    ("actor_rollout_ref.rollout.val_kwargs.top_p=0", "actor_rollout_ref.rollout.val_kwargs.top_p=0.0 must be in (0, 1]"),
    ("actor_rollout_ref.rollout.temperature=0",  # do_sample=false too: the actor's log-probs divide the logits by it
     "actor_rollout_ref.rollout.temperature=0: the actor divides the logits by the rollout temperature"),
    ("data.seed=[1,2", "cannot parse override 'data.seed=[1,2': no viable alternative"),  # Hydra refuses it, so does reinforge
])
def test_bad_values_name_the_key(override, message):
    args = [a for a in VERL if not a.startswith(override.split("=")[0] + "=")] + [override]
    if "overlong_buffer_cfg" in override:
        args.append("reward_model.reward_manager=dapo")
    if override.endswith("temperature=0"):
        args.append("actor_rollout_ref.rollout.do_sample=false")
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load_config(args)


def test_an_input_template_with_a_typed_backslash_n_is_noted():
    """OpenRLHF warns when --input_template holds the two characters \\n; a real line break is not noted."""
    cfg, keys = load_config(VERL + ["data.input_template='User: {}\\nAssistant: '"])
    assert any(n.startswith("data.input_template: its \\n is a backslash and an n") for n in unused_settings(cfg, keys))
    cfg, keys = load_config(VERL + ["data.input_template='User: {}\nAssistant: '"])
    assert cfg.data.input_template == "User: {}\nAssistant: "
    assert not [n for n in unused_settings(cfg, keys) if n.startswith("data.input_template")]


def test_masking_truncated_responses_when_every_response_is_cut_is_refused():
    with pytest.raises(ConfigError, match="rollout.ignore_eos=true cuts every response there: nothing would be learned"):
        load_config(VERL + ["actor_rollout_ref.actor.mask_truncated_responses=true", "actor_rollout_ref.rollout.ignore_eos=true"])


def test_clip_ratio_c_is_checked_for_the_loss_that_reads_it():
    """The dual-clip losses need c > 1; dppo's ratio cap takes any positive c (verl's DPPO uses it as a truncation
    threshold); losses that do not read it are not held to either."""
    def with_mode(mode: str, c: float):
        return load_config(VERL + [f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}", f"actor_rollout_ref.actor.clip_ratio_c={c}"])

    with pytest.raises(ConfigError, match=r"clip_ratio_c=0.5 must be > 1: policy_loss.loss_mode=up caps"):
        with_mode("up", 0.5)
    with pytest.raises(ConfigError, match=r"clip_ratio_c=0.0 must be > 0"):
        with_mode("dppo_kl", 0)
    assert with_mode("dppo_tv", 0.8)[0].actor_rollout_ref.actor.clip_ratio_c == 0.8
    assert with_mode("gspo", 0.5)[0].actor_rollout_ref.actor.clip_ratio_c == 0.5


def test_delete_restores_default_and_legacy_reward_location():
    cfg, _ = load_config(VERL + ["trainer.total_epochs=3", "~trainer.total_epochs",
                                 "reward_model.custom_reward_function.path=/r.py",
                                 "reward_model.custom_reward_function.name=my_fn"])
    assert cfg.trainer.total_epochs == 30
    assert (cfg.custom_reward_function.path, cfg.custom_reward_function.name) == ("/r.py", "my_fn")


def test_yaml_file_then_command_line(tmp_path):
    file = tmp_path / "run.yaml"
    file.write_text("data:\n  train_batch_size: 16\n  max_response_length: 32\nactor_rollout_ref:\n  rollout:\n    n: 4\n")
    cfg, keys = load_config(VERL + ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"], str(file))
    assert (cfg.data.train_batch_size, cfg.data.max_response_length, cfg.actor_rollout_ref.rollout.n) == (8, 32, 4)
    file.write_text("data:\n  max_respone_length: 32\n")  # a key of the file is named with the file
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(file))}: unknown config key 'data.max_respone_length'; did you"):
        load_config(VERL, str(file))
    file.write_text("data:\n  max_response_length: 32\n")
    with pytest.raises(ConfigError, match=r"^unknown config key 'data.max_respone_length'"):  # one of the command line's: not
        load_config(VERL + ["data.max_respone_length=3"], str(file))
    named = f"^{re.escape(str(file))}: "
    for text, message in (("trainer:\n  save_freq: four\n", "'trainer.save_freq' must be an integer, got 'four'"),
                          ("trainer:\n  total_epochs: -3\n", "trainer.total_epochs=-3 must be > 0"),
                          ("trainer:\n  save_freq: ${oops.missing}\n", "cannot resolve the interpolation of 'trainer.save_freq' in the config: Interpolation key 'oops.missing' not found")):
        file.write_text(text)  # a type, range or interpolation error of a value from the file names the file
        with pytest.raises(ConfigError, match=named + re.escape(message)):
            load_config(VERL, str(file))
    file.write_text("trainer:\n  total_epochs: -3\n")
    with pytest.raises(ConfigError, match=r"^trainer.total_epochs=-2 must be > 0"):  # the command line's value: not
        load_config(VERL + ["trainer.total_epochs=-2"], str(file))
    with pytest.raises(ConfigError, match=f"config file {re.escape(str(tmp_path))} is a folder; give the YAML file in it"):
        load_config(VERL, str(tmp_path))


def test_batch_arithmetic_follows_verl_units():
    cfg, _ = load_config(VERL + ["data.train_batch_size=64", "actor_rollout_ref.rollout.n=4",
                                 "actor_rollout_ref.actor.ppo_mini_batch_size=16",
                                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
                                 "actor_rollout_ref.actor.ppo_epochs=2", "data.max_prompt_length=100",
                                 "data.max_response_length=28"])
    assert batch_arithmetic(cfg) == {
        "prompts_per_step": 64, "trajectories_per_step": 256, "trajectories_per_mini_batch": 64,
        "data_parallel_ranks": 1, "trajectories_per_rank_mini_batch": 64, "mini_batches_per_epoch": 4, "optimizer_steps_per_step": 8, "trajectories_per_micro_batch": 8,
        "gradient_accumulation": 8, "max_tokens_per_micro_batch": 8 * 128, "on_policy_single_update": False,
    }


def test_quickstart_applies_only_without_model_and_data():
    quick, _ = load_config([])
    assert quick.algorithm.adv_estimator == "grpo" and quick.trainer.experiment_name == "quickstart"
    assert quick.data.train_files.endswith("train.parquet")
    tweaked, _ = load_config(["trainer.total_training_steps=3"])
    assert tweaked.trainer.total_training_steps == 3 and tweaked.trainer.experiment_name == "quickstart"
    given, _ = load_config(["actor_rollout_ref.model.path=/m", "data.train_files=/d.parquet"])
    assert given.algorithm.adv_estimator == "gae" and given.critic.enable  # verl's defaults once a model is given
    # the same keys given inside a mapping of their group
    grouped, keys = load_config(["actor_rollout_ref.model={path: /m}", "data={train_files: /d.parquet}"])
    assert grouped.algorithm.adv_estimator == "gae" and grouped.trainer.experiment_name != "quickstart"
    assert keys == ["actor_rollout_ref.model.path", "data.train_files"]


def test_config_round_trips_through_its_dict():
    cfg, _ = load_config([])
    assert dataclasses.asdict(cfg)["data"]["train_batch_size"] == cfg.data.train_batch_size
    assert isinstance(cfg, Config)


def test_critic_follows_the_estimator():
    gae, _ = load_config([a for a in VERL if not a.startswith("algorithm.adv_estimator")] + ["algorithm.adv_estimator=gae"])
    assert gae.critic.enable and gae.critic.model.path == "/m" and gae.critic.ppo_mini_batch_size == gae.actor_rollout_ref.actor.ppo_mini_batch_size
    grpo, _ = load_config(VERL)
    assert grpo.critic.enable is False
    with pytest.raises(ConfigError, match="needs a critic's values; remove critic.enable=false"):
        load_config([a for a in VERL if not a.startswith("algorithm.adv_estimator")] + ["algorithm.adv_estimator=gae", "critic.enable=false"])


@pytest.mark.parametrize("value, expected", [
    ("~/data/train.parquet", "~/data/train.parquet"),
    ("'[~/data/gsm8k/train.parquet,~/data/math/train.parquet]'", ["~/data/gsm8k/train.parquet", "~/data/math/train.parquet"]),
    ("[~/a.parquet, ~/b.parquet]", ["~/a.parquet", "~/b.parquet"]),
    ("[a.parquet,b.parquet]", ["a.parquet", "b.parquet"]),
    ("[~/a.parquet,'~/s/*.parquet']", ["~/a.parquet", "~/s/*.parquet"]),  # an item in quotes beside bare ones
    ('[~/a.parquet,"~/b c.parquet"]', ["~/a.parquet", "~/b c.parquet"]),
])
def test_paths_with_a_tilde_and_lists_of_them_parse_as_written(value, expected):
    # Hydra's grammar rejects `~` inside a value; docs/data.md's multi-file example writes one in a list
    config, _ = load_config(["actor_rollout_ref.model.path=/m", f"data.train_files={value.strip(chr(39))}"])
    assert config.data.train_files == expected


@pytest.mark.parametrize("value", ['"x', "'unterminated", '"a"b', "{a:1", "[~/a.parquet,'~/b]", "[~/a,'b'c']", "[a,b,]",
                                   "extend_list(x)"])
def test_values_hydra_refuses_with_quotes_or_brackets_in_them_are_refused_not_taken_as_text(value):
    # only a plain value (a path with `~`, text with `=` or unicode) Hydra rejects is taken as the text written
    with pytest.raises(ConfigError, match=r"cannot parse override .trainer.project_name=.*Hydra's override grammar"):
        load_config(["actor_rollout_ref.model.path=/m", "data.train_files=a.parquet", f"trainer.project_name={value}"])
    config, _ = load_config(["actor_rollout_ref.model.path=/m", "data.train_files=a.parquet", "trainer.project_name=a=b"])
    assert config.trainer.project_name == "a=b"


def test_a_mapping_given_to_a_mapping_merges_into_it_as_in_hydra():
    config, _ = load_config(["actor_rollout_ref.model.path=/m", "data.train_files=a.parquet",
                             "++reward_model.reward_kwargs={x:1,n:{a:1}}", "++reward_model.reward_kwargs={y:2,n:{b:2}}",
                             "custom_reward_function.reward_kwargs={k:1}", "custom_reward_function.reward_kwargs.k=3"])
    assert config.reward_model.reward_kwargs == {"x": 1, "y": 2, "n": {"a": 1, "b": 2}}
    assert config.custom_reward_function.reward_kwargs == {"k": 3}


def test_config_sections_read_like_verls_omegaconf_configs():
    config, _ = load_config(["actor_rollout_ref.model.path=/m", "data.train_files=a.parquet", "data.max_prompt_length=77"])
    data = config.data
    assert data["max_prompt_length"] == data.max_prompt_length == data.get("max_prompt_length") == 77
    assert "max_prompt_length" in data and "no_such_key" not in data and data.get("no_such_key", 5) == 5
    assert config["actor_rollout_ref"]["model"]["path"] == "/m"
    with pytest.raises(KeyError):
        data["no_such_key"]


def test_verls_optimizer_keys_and_a_plus_override_into_override_optimizer_config():
    cfg, _ = load_config(VERL + ["actor_rollout_ref.actor.optim.optimizer=SGD", "actor_rollout_ref.actor.optim.optimizer_impl=torch.optim",
                                 "+actor_rollout_ref.actor.optim.override_optimizer_config.momentum=0.9"])
    assert cfg.actor_rollout_ref.actor.optim.override_optimizer_config == {"momentum": 0.9}  # `dict | None`: a group to add to
    cfg, _ = load_config(VERL + ["actor_rollout_ref.actor.optim.override_optimizer_config=null"])  # verl's default
    assert cfg.actor_rollout_ref.actor.optim.override_optimizer_config is None


def test_numbers_given_to_string_keys_are_strings_as_omegaconf_makes_them():
    """verl's OmegaConf turns trainer.experiment_name=2024 into "2024"; model_dtype=32 is verl's spelling of fp32."""
    config, _ = load_config([*VERL, "trainer.experiment_name=2024", "actor_rollout_ref.actor.fsdp_config.model_dtype=32"])
    assert config.trainer.experiment_name == "2024"
    assert config.actor_rollout_ref.actor.fsdp_config.model_dtype == "32"
    from reinforge.training.model import DTYPES

    assert DTYPES["32"] is DTYPES["fp32"]
    with pytest.raises(ConfigError, match="'trainer.val_before_train' must be true or false, got 3"):  # only string keys
        load_config([*VERL, "trainer.val_before_train=3"])


def test_a_null_data_seed_is_the_trainer_seed():
    """verl's data.seed defaults to null (an unseeded order); here it is trainer.seed, so the run repeats."""
    config, _ = load_config([*VERL, "data.seed=null", "trainer.seed=7"])
    assert config.data.seed == 7


def test_a_chat_template_that_is_not_valid_jinja_is_a_config_error():
    # it used to be blamed on the first data row, when the template rendered it
    with pytest.raises(ConfigError, match=re.escape("actor_rollout_ref.model.custom_chat_template: the chat template is not "
                                                    "valid Jinja: unexpected '}' (line 1 of the template)")):
        load_config(VERL + ["actor_rollout_ref.model.custom_chat_template='{% for m in messages %}{{ m.content }'"])
    # transformers' own tags and filters are valid
    load_config(VERL + ["actor_rollout_ref.model.custom_chat_template='{% for m in messages %}{% generation %}"
                        "{{ m.content|tojson }}{% endgeneration %}{% endfor %}'"])


def test_a_misspelt_choice_suggests_the_closest():
    with pytest.raises(ConfigError, match=re.escape("algorithm.adv_estimator='grop' is not one of: gae, ") + r".*"
                                          + re.escape("; did you mean 'grpo'?")):
        load_config(VERL + ["algorithm.adv_estimator=grop"])
