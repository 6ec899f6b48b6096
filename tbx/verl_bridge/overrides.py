"""Our config → the few verl Hydra overrides we vary (pure: no verl, no ray, no filesystem).

`plan_training` turns the GRPO settings (the `grpo` group's `GrpoConfig`, the record the native
trainer reads too), hardware and the frozen pool manifest into a `TrainPlan`
(derived sizes and the file paths of the run) and refuses inconsistent combinations with the
offending values and the fix. `verl_overrides` turns the plan and the tbx config into the
override list that `python -m verl.trainer.main_ppo` is started with; everything else keeps
verl's defaults, so the list reads as the diff between verl and the reference recipe
(docs/training.md: token-mean GRPO, 18 groups × 8 episodes per step, AdamW lr 1e-6, weight decay 0,
50 steps, 3 nodes × 8 GPUs, zero-variance groups replaced, errored episodes re-run).

Choices that are ours, not verl's defaults:
- One optimizer step per training step (`ppo_mini_batch_size` = groups per step): the
  reference counts 50 *update* steps.
- `clip_ratio_low/high` are set with `clip_ratio`: verl reads the low/high keys first, so
  setting `clip_ratio` alone would silently keep 0.2.
- Zero-variance groups: verl's V1 sampler (its DAPO filter) on the metric `acc`, which the agent
  loop sets to the verdict (1/0) in `reward_extra_info`, through tbx's subclass
  (`tbx.verl_bridge.sampler`, verl's `custom_sampler` extension point) that stops replacing after
  `max_replacements` a step as the native sampler does (verl's own never stops).
- Errored episodes: the agent loop re-runs them itself (`max_error_retries`); an episode that
  still errors raises, V1 marks its group `failure`, and `sync_refill_failed_groups` replaces a
  group that has no trajectory left. verl's own validation is off: it counts a failed session
  as accuracy 0, and tbx's eval stage evaluates checkpoints instead.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from tbx.config import Config, GrpoConfig, LossAggMode
from tbx.errors import ConfigError
from tbx.records import PoolManifest
from tbx.verl_bridge.async_overrides import apply_delta, external_modules, off_policy_overrides
from tbx.verl_bridge.cpu import RANKS_PER_NODE, cpu_overrides, is_cpu

VERL_VERSION = "0.9.1"  # the one verl release the bridge is written and tested against
AGENT_LOOP_NAME = "tbx_episode"  # `agent_name` of our rows and `default_agent_loop`
AGENT_LOOP_TARGET = "tbx.verl_bridge.agent_loop.TbxEpisodeLoop"
FILTER_METRIC = "acc"  # reward_extra_info key holding the verdict; zero variance of it = no signal
METRICS_FILE = "metrics.jsonl"  # in <run>/verl: verl's file logger (trainer.logger "file"); earlier starts' in metrics.<n>.jsonl
# verl's LoRA sync on vLLM 0.32 needs this worker extension (tbx/verl_bridge/vllm_ext.py); on CPU the CPU
# delta's extension (a subclass) is named instead
LORA_WORKER_EXTENSION = "tbx.verl_bridge.vllm_ext.LoraSyncExtension"
SAMPLER_PATH, SAMPLER_NAME = "pkg://tbx.verl_bridge.sampler", "TbxReplayBuffer"
FINETUNES = ("full", "lora")
_PLAIN = re.compile(r"[\w./:@+~-]+")  # override values Hydra reads unquoted
_NOT_A_STRING = re.compile(r"(?i)[-+]?(\d[\d_]*(\.\d*)?(e[-+]?\d+)?|\.\d+|inf|nan)|true|false|null|none")
_GRPO = "grpo settings"
_HARDWARE = "hardware settings"


@dataclass(frozen=True)
class HardwareSettings:
    """Where training runs; verl keys in brackets."""

    nodes: int = 3  # [trainer.nnodes]
    gpus_per_node: int = 8  # [trainer.n_gpus_per_node]; on CPU the training ranks per node
    # vLLM tensor parallelism per rollout replica [rollout.tensor_model_parallel_size]: a 27B model
    # in bf16 (~54 GB) must share an 80 GB H100 with the colocated trainer; 4 leaves room for KV cache.
    tensor_parallel_size: int = 4
    cpu: bool = False  # no GPUs: verl runs with tbx's CPU platform (tbx/verl_bridge/cpu.py)
    cpus_per_node: int = 2  # CPU only: cores of a node, for the Ray instance verl starts itself
    ray_cluster: bool = False  # the job started a Ray cluster that verl joins (every executor but debug)

    @staticmethod
    def from_config(cfg: Config) -> HardwareSettings:
        """From the `hardware` group (nodes, GPUs per node) and `model.tensor_parallel_size`; hardware
        without GPUs trains on the CPU, one rank (and one rollout replica) per node."""
        hw = cfg.hardware
        ray_cluster = str(hw.executor) != "debug"
        if is_cpu(hw.gpus_per_node):
            return HardwareSettings(hw.nodes, RANKS_PER_NODE, 1, cpu=True, cpus_per_node=hw.cpus_per_task,
                                    ray_cluster=ray_cluster)
        return HardwareSettings(hw.nodes, hw.gpus_per_node, cfg.model.tensor_parallel_size, ray_cluster=ray_cluster)


@dataclass(frozen=True)
class BridgePaths:
    """Files of one training run; all derived from the run folder."""

    run_dir: str
    train_file: str  # pool tasks as verl dataset rows (JSONL)
    agent_loop_config: str  # YAML list naming our AgentLoop, read by every AgentLoopWorker
    tbx_config: str  # the resolved tbx config the agent loop rebuilds its episode world from
    manifest: str  # copy of the pool manifest the rows came from
    checkpoint_dir: str  # [trainer.default_local_dir]
    rollout_dir: str  # every trained trajectory per step as verl scored it, JSONL [trainer.rollout_data_dir]
    metrics_file: str  # verl's metrics, a JSON line per step, written as each step ends (its file logger)

    @staticmethod
    def under(run_dir: str) -> BridgePaths:
        root = PurePosixPath(run_dir)
        return BridgePaths(run_dir=str(root), train_file=str(root / "verl" / "train.jsonl"),
                           agent_loop_config=str(root / "verl" / "agent_loops.yaml"),
                           tbx_config=str(root / "verl" / "tbx_config.yaml"),
                           manifest=str(root / "verl" / "pool.json"),
                           checkpoint_dir=str(root / "checkpoints"), rollout_dir=str(root / "verl" / "rollouts"),
                           metrics_file=str(root / "verl" / METRICS_FILE))


@dataclass(frozen=True)
class TrainPlan:
    """Settings plus everything derived from them; what `verl_overrides` reads."""

    grpo: GrpoConfig
    hardware: HardwareSettings
    finetune: str  # full | lora, from the pool manifest
    pool_size: int  # tasks kept in the pool
    pool_hash: str
    world_size: int  # GPUs in all
    episodes_per_step: int  # groups_per_step × group_size
    episodes_per_gpu: int  # per data-parallel rank and step
    rollout_replicas: int  # vLLM replicas: world_size / tensor_parallel_size
    steps_per_epoch: int  # pool_size // groups_per_step (verl's epoch)
    total_epochs: int  # enough epochs that the pool never runs out before `steps`
    experiment: str  # W&B run name and checkpoint folder name
    paths: BridgePaths = field(default_factory=lambda: BridgePaths.under("."))
    run_id: str = ""  # the run's identity: its rows in the results store


def _require(condition: bool, source: str, name: str, problem: str, fix: str) -> None:
    if not condition:
        raise ConfigError(source, name, problem, fix)


def validate_grpo(grpo: GrpoConfig) -> None:
    """Values that are wrong on their own."""
    _require(grpo.group_size >= 2, _GRPO, "group_size", f"is {grpo.group_size}; a group of one has no "
             "relative advantage", "use at least 2 episodes per group (the reference uses 8)")
    for name in ("groups_per_step", "steps", "max_prompt_tokens", "max_response_tokens", "save_every"):
        value = getattr(grpo, name)
        _require(value >= 1, _GRPO, name, f"is {value}", "use a value >= 1")
    _require(grpo.lr > 0, _GRPO, "lr", f"is {grpo.lr}", "use a positive learning rate (reference: 1e-6)")
    _require(grpo.weight_decay >= 0, _GRPO, "weight_decay", f"is {grpo.weight_decay}", "use a value >= 0")
    _require(0 < grpo.clip_ratio < 1, _GRPO, "clip_ratio", f"is {grpo.clip_ratio}", "use a value in (0, 1), "
             "typically 0.2")
    _require(grpo.kl_coef >= 0, _GRPO, "kl_coef", f"is {grpo.kl_coef}", "use a value >= 0 (0 turns KL off)")
    for name in ("max_error_retries", "max_replacements"):
        _require(getattr(grpo, name) >= 0, _GRPO, name, f"is {getattr(grpo, name)}", "use a value >= 0")
    modes = [mode.value for mode in LossAggMode]  # tbx's loss has these; verl 0.9.1 has them all
    _require(grpo.loss_agg_mode in modes, _GRPO, "loss_agg_mode", f"'{grpo.loss_agg_mode}' is unknown",
             f"use one of {modes} (the reference uses token-mean)")


def validate_hardware(hardware: HardwareSettings, grpo: GrpoConfig) -> None:
    """The cluster shape, and the batch against it."""
    for name in ("nodes", "gpus_per_node", "tensor_parallel_size"):
        value = getattr(hardware, name)
        _require(value >= 1, _HARDWARE, name, f"is {value}", "use a value >= 1")
    tp, per_node = hardware.tensor_parallel_size, hardware.gpus_per_node
    divisors = [d for d in range(1, per_node + 1) if per_node % d == 0]
    _require(per_node % tp == 0, _HARDWARE, "tensor_parallel_size", f"{tp} does not divide gpus_per_node "
             f"{per_node}", f"use a divisor of {per_node}: {divisors}")
    world = hardware.nodes * per_node
    episodes = grpo.groups_per_step * grpo.group_size
    if episodes % world:
        step = world // math.gcd(world, grpo.group_size)  # groups_per_step must be a multiple of this
        nearest = max(step, step * round(grpo.groups_per_step / step))
        raise ConfigError(_GRPO, "groups_per_step", f"{grpo.groups_per_step} groups × {grpo.group_size} episodes "
                          f"= {episodes} episodes do not split evenly over {world} GPUs ({hardware.nodes} nodes × "
                          f"{per_node})", f"use a multiple of {step} groups per step (e.g. {nearest}), or change "
                          "the group size or the GPU count")


def validate_manifest(manifest: PoolManifest) -> tuple[str, int, str]:
    """(finetune, pool size, hash) of a pool manifest written by stage=select."""
    source = "pool manifest"
    finetune = manifest.finetune
    _require(finetune in FINETUNES, source, "pool.finetune", f"is '{finetune}'", f"use one of {list(FINETUNES)}")
    _require(len(manifest.kept) > 0, source, "kept", "the pool is empty", "select with wider keep ranges or "
             "probe more tasks")
    return finetune, len(manifest.kept), manifest.hash


def plan_training(manifest: PoolManifest, run_dir: str, experiment: str, grpo: GrpoConfig | None = None,
                  hardware: HardwareSettings | None = None, run_id: str = "") -> TrainPlan:
    """Validate the settings against each other and the pool; derive sizes and paths."""
    grpo, hardware = grpo or GrpoConfig(), hardware or HardwareSettings()
    validate_grpo(grpo)
    validate_hardware(hardware, grpo)
    finetune, pool_size, pool_hash = validate_manifest(manifest)
    if finetune == "lora":
        _require(grpo.lora_rank >= 1, _GRPO, "lora_rank", f"is {grpo.lora_rank} but the pool is a LoRA pool",
                 "use a rank >= 1 (reference LoRA: 16), or select a full_param pool")
        _require(grpo.lora_alpha >= 1, _GRPO, "lora_alpha", f"is {grpo.lora_alpha}", "use a value >= 1")
    _require(pool_size >= grpo.groups_per_step, _GRPO, "groups_per_step", f"is {grpo.groups_per_step} but the pool "
             f"holds {pool_size} tasks (verl draws distinct tasks per step)", f"use at most {pool_size} groups "
             "per step, or select a larger pool")
    world = hardware.nodes * hardware.gpus_per_node
    steps_per_epoch = pool_size // grpo.groups_per_step
    return TrainPlan(
        grpo=grpo, hardware=hardware, finetune=finetune, pool_size=pool_size, pool_hash=pool_hash,
        world_size=world, episodes_per_step=grpo.groups_per_step * grpo.group_size,
        episodes_per_gpu=grpo.groups_per_step * grpo.group_size // world,
        rollout_replicas=world // hardware.tensor_parallel_size, steps_per_epoch=steps_per_epoch,
        # verl stops at `total_epochs` even before `total_training_steps`; one spare epoch.
        total_epochs=math.ceil(grpo.steps / steps_per_epoch) + 1,
        experiment=experiment, paths=BridgePaths.under(run_dir), run_id=run_id,
    )


def _value(value: Any) -> str:
    """A Hydra override value: booleans as True/False, lists in brackets, floats exact, odd strings quoted."""
    if isinstance(value, bool):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_value(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    # spaces, quotes, commas...; or a string Hydra would read as a number, boolean or null: quote it
    if isinstance(value, str) and (not _PLAIN.fullmatch(text) or _NOT_A_STRING.fullmatch(text)):
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return text


def verl_overrides(cfg: Config, manifest: PoolManifest, plan: TrainPlan | None = None) -> list[str]:
    """The Hydra overrides for `verl.trainer.main_ppo`, grouped algorithm and data → actor and
    model → rollout → trainer. `plan` defaults to the reference recipe in the run folder of `cfg`."""
    if plan is None:
        plan = plan_training(manifest, cfg.run_dir or cfg.out_root, "train")
    _require(bool(cfg.model.path), "config", "model.path", "is not set; verl loads a Hugging Face model folder",
             "set model.path=/path/to/model (the same weights the pool was probed with)")
    pairs = _algorithm_and_data(cfg, plan) + _actor_and_model(cfg, plan) + _rollout(cfg, plan) + _trainer(cfg, plan)
    # asynchronous training and the off-policy correction (tbx/verl_bridge/async_overrides.py); none by default
    pairs = apply_delta(pairs, off_policy_overrides(plan.grpo))
    hw = plan.hardware
    if hw.cpu:
        pairs += cpu_overrides(hw.cpus_per_node, hw.nodes, hw.ray_cluster, cfg.model.server.kv_cache_gib)
    pairs = apply_delta(pairs, external_modules(plan.grpo, hw.cpu))
    return [f"{key}={_value(value)}" for key, value in pairs]


def _algorithm_and_data(cfg: Config, plan: TrainPlan) -> list[tuple[str, Any]]:
    g, paths = plan.grpo, plan.paths
    return [
        ("algorithm.adv_estimator", "grpo"),
        ("algorithm.norm_adv_by_std_in_grpo", g.norm_adv_by_std),
        ("algorithm.use_kl_in_reward", False),
        ("algorithm.filter_groups.enable", g.replace_zero_variance),
        ("algorithm.filter_groups.metric", FILTER_METRIC),
        ("data.train_files", paths.train_file),
        ("data.val_files", paths.train_file),  # verl loads a val set even with validation off
        ("data.train_batch_size", g.groups_per_step),
        ("data.max_prompt_length", g.max_prompt_tokens),
        ("data.max_response_length", g.max_response_tokens),
        ("data.filter_overlong_prompts", False),
        ("data.seed", cfg.seed),
    ]


def _actor_and_model(cfg: Config, plan: TrainPlan) -> list[tuple[str, Any]]:
    g = plan.grpo
    pairs: list[tuple[str, Any]] = [
        ("actor_rollout_ref.actor.optim.lr", g.lr),
        ("actor_rollout_ref.actor.optim.weight_decay", g.weight_decay),
        ("actor_rollout_ref.actor.loss_agg_mode", g.loss_agg_mode),
        ("actor_rollout_ref.actor.clip_ratio", g.clip_ratio),
        ("actor_rollout_ref.actor.clip_ratio_low", g.clip_ratio),
        ("actor_rollout_ref.actor.clip_ratio_high", g.clip_ratio),
        ("actor_rollout_ref.actor.entropy_coeff", 0),
        ("actor_rollout_ref.actor.use_kl_loss", g.kl_coef > 0),
        ("actor_rollout_ref.actor.kl_loss_coef", g.kl_coef),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", g.groups_per_step),  # one update per step
        ("actor_rollout_ref.actor.use_dynamic_bsz", True),
        ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", g.max_prompt_tokens + g.max_response_tokens),
        ("actor_rollout_ref.model.path", cfg.model.path),
    ]
    if plan.finetune == "lora":
        pairs += [
            ("actor_rollout_ref.model.lora_rank", g.lora_rank),
            ("actor_rollout_ref.model.lora_alpha", g.lora_alpha),
            ("actor_rollout_ref.model.target_modules", g.lora_target_modules),
            ("actor_rollout_ref.rollout.load_format", "safetensors"),
        ]
        if not plan.hardware.cpu:
            pairs.append(("+actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls", LORA_WORKER_EXTENSION))
    return pairs


def _rollout(cfg: Config, plan: TrainPlan) -> list[tuple[str, Any]]:
    return [
        ("actor_rollout_ref.rollout.name", "vllm"),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", plan.hardware.tensor_parallel_size),
        ("actor_rollout_ref.rollout.n", plan.grpo.group_size),
        ("actor_rollout_ref.rollout.temperature", cfg.model.temperature),  # as probed: difficulty is relative
        ("actor_rollout_ref.rollout.top_p", cfg.model.top_p),
        ("actor_rollout_ref.rollout.calculate_log_probs", True),
        ("actor_rollout_ref.rollout.multi_turn.enable", True),  # legacy trainer: train on response_mask
        ("actor_rollout_ref.rollout.agent.agent_loop_config_path", plan.paths.agent_loop_config),
        ("actor_rollout_ref.rollout.agent.default_agent_loop", AGENT_LOOP_NAME),
    ]


def _trainer(cfg: Config, plan: TrainPlan) -> list[tuple[str, Any]]:
    g, hw, paths = plan.grpo, plan.hardware, plan.paths
    return [
        ("trainer.nnodes", hw.nodes),
        ("trainer.n_gpus_per_node", hw.gpus_per_node),
        ("trainer.total_training_steps", g.steps),
        ("trainer.total_epochs", plan.total_epochs),
        ("trainer.use_v1", True),
        ("trainer.v1.trainer_mode", "sync"),
        ("trainer.v1.sampler.sync_refill_failed_groups", True),
        ("trainer.v1.sampler.custom_sampler.path", SAMPLER_PATH),
        ("trainer.v1.sampler.custom_sampler.name", SAMPLER_NAME),
        ("+trainer.v1.sampler.sampler_kwargs.metric", FILTER_METRIC if g.replace_zero_variance else None),
        ("+trainer.v1.sampler.sampler_kwargs.max_replacements", g.max_replacements),
        ("+trainer.v1.sampler.sampler_kwargs.train_batch_size", g.groups_per_step),
        # verl's file logger writes each step's metrics unbuffered as the step ends: a killed run keeps them
        # (the console's lines pass through Ray's log forwarding, which a SIGKILL can cut short)
        ("trainer.logger", ["console", "file", "wandb"] if cfg.logger.kind == "wandb" else ["console", "file"]),
        ("+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH", paths.metrics_file),
        ("trainer.project_name", cfg.logger.project),
        ("trainer.experiment_name", plan.experiment),
        ("trainer.default_local_dir", plan.paths.checkpoint_dir),
        ("trainer.rollout_data_dir", plan.paths.rollout_dir),  # what each step trained on, with verl's scores
        ("trainer.save_freq", g.save_every),
        ("trainer.max_actor_ckpt_to_keep", g.keep_checkpoints),
        ("trainer.max_critic_ckpt_to_keep", g.keep_checkpoints),
        ("trainer.resume_mode", "auto"),
        ("trainer.val_before_train", False),  # checkpoints are evaluated by tbx's eval stage
        ("trainer.test_freq", -1),
    ]


def agent_loop_entries(plan: TrainPlan, prompt_style: str = "tbx", resumed_after_step: int = 0) -> list[dict[str, Any]]:
    """The YAML list verl reads from `agent_loop_config_path`: our loop and its init arguments
    (`resumed_after_step`: the checkpoint this start resumes from, 0 for none)."""
    return [{"name": AGENT_LOOP_NAME, "_target_": AGENT_LOOP_TARGET, "tbx_config_path": plan.paths.tbx_config,
             "run_dir": plan.paths.run_dir, "run_id": plan.run_id,
             "max_error_retries": plan.grpo.max_error_retries, "prompt_style": prompt_style,
             "stop_after_tool_call": True, "resumed_after_step": resumed_after_step}]
