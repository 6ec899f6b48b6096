"""From probing to a trained model: difficulty bands, the pool, the probe, the GRPO recipe, the pipeline and
the settings of stage=train and stage=select."""

from __future__ import annotations

from dataclasses import dataclass, field

from tbx.config.choices import Finetune, LossAggMode, StoppingRule, Trainer
from tbx.config.episodes import TasksConfig
from tbx.config.markers import CONTENT_PATH, NOT_IDENTITY_PATH


@dataclass
class DifficultyConfig:
    edges: list[float] = field(default_factory=lambda: [0.0, 0.08, 0.30, 0.60, 0.90, 1.0])  # band edges
    names: list[str] = field(default_factory=lambda: ["rarely", "hard", "medium", "often", "almost always"])


@dataclass
class PoolConfig:
    name: str = "full_param"
    keep_ranges: list[list[float]] = field(default_factory=lambda: [[0.08, 0.90]])  # [low, high) success rates kept
    finetune: Finetune = Finetune.full  # full | lora: how the trainer updates the model on this pool


@dataclass
class ProbeConfig:
    attempts: int = 20  # n: attempts per task (the most, when adaptive)
    adaptive: bool = True  # stop a task early once more attempts are unlikely to change its pool decision
    rule: StoppingRule = StoppingRule.predictive  # predictive (posterior predictive flip probability) | band_mass (naive)
    threshold: float = 0.02  # stop when the flip probability is at most this (band_mass: mass at least)
    min_attempts: int = 4
    round_size: int = 2
    protect_both: bool = False  # protect the full_param and lora decisions too (more episodes, one probe for both)


@dataclass
class GrpoConfig:
    """The training recipe (docs/training.md, "Training"). The same record drives the native trainer and the verl bridge
    (tbx/verl_bridge/overrides.py); verl keys in brackets."""

    group_size: int = 8  # episodes per task per step [actor_rollout_ref.rollout.n]
    groups_per_step: int = 18  # tasks per step (18 x 8 = 144 episodes) [data.train_batch_size]
    steps: int = 50  # optimizer updates [trainer.total_training_steps]
    lr: float = 1e-6  # AdamW [actor.optim.lr]; LoRA usually wants ~10x more
    weight_decay: float = 0.0  # [actor.optim.weight_decay]
    loss_agg_mode: LossAggMode = LossAggMode["token-mean"]  # [actor.loss_agg_mode]
    clip_ratio: float = 0.2  # PPO ratio clip, both sides [actor.clip_ratio(_low/_high)]
    norm_adv_by_std: bool = True  # divide advantages by the group std (False: Dr.GRPO) [algorithm.norm_adv_by_std_in_grpo]
    # KL-to-reference loss weight; 0: no reference model [actor.kl_loss_coef]. The native trainer keeps no
    # reference model, so it refuses a non-zero value.
    kl_coef: float = 0.0
    lora_rank: int = 16  # used when the pool's finetune is lora [model.lora_rank]
    lora_alpha: int = 32  # [model.lora_alpha]
    lora_target_modules: str = "all-linear"  # [model.target_modules]
    replace_zero_variance: bool = True  # replace all-0/all-1 groups by fresh tasks [algorithm.filter_groups]
    max_replacements: int = 18  # replacements (zero-variance or unfillable groups) per step [trainer.v1.sampler]
    max_error_reruns: int = 8  # native: re-runs of error episodes per group
    max_prompt_tokens: int = 4096  # verl: system prompt, tools, demonstrations, opening [data.max_prompt_length]
    max_response_tokens: int = 8192  # verl: whole multi-turn response incl. tool/user tokens [data.max_response_length]
    max_error_retries: int = 2  # verl: re-runs of an episode that ended in an error outcome, inside the agent loop
    save_every: int = 10  # checkpoint every N steps, and at the last [trainer.save_freq]
    # checkpoints kept on disk, the newest (each holds the weights and the optimizer: ~1.6 GB for the 135M model,
    # ~20 GB for a 1.7B); null: every one [trainer.max_actor_ckpt_to_keep, max_critic_ckpt_to_keep]
    keep_checkpoints: int | None = 2
    micro_batch_size: int = 4  # native: sequences per forward/backward (gradient accumulation)
    # native: cut micro-batches from the step's turns sorted by prompt, not in sampled order, so none mixes two
    # domains' prompts and each shares a longer prefix: the same gradient, less memory and time (docs/training.md)
    sort_by_prompt: bool = False
    gradient_checkpointing: bool = False  # native: trade compute for memory
    max_grad_norm: float = 1.0
    # Off-policy correction, native trainer: each token's policy-gradient term times min(exp(old_logp -
    # sampler_logp), this), the truncated importance weight against vLLM's log-probs (TIS,
    # tbx/rl/correction.py); > 1, typically 2.0; needs model.temperature 1; null: off. Under verl:
    # algorithm.rollout_correction.rollout_is=token + rollout_is_threshold (tbx/verl_bridge/async_overrides.py).
    is_threshold: float | None = None
    # Asynchronous GRPO: a step trains on turns sampled by weights at most this many versions old, while
    # the sampler keeps playing the next steps' groups during the update (docs/training.md); 0: synchronous.
    max_staleness: int = 0
    # verl: stop the run when it stored no episode, logged no step and wrote no checkpoint for this many seconds (a
    # worker that died under it, e.g. killed by Ray's memory monitor, leaves verl waiting forever); null: no bound
    verl_stall_s: float | None = 1800.0
    trainer: Trainer = Trainer.native  # native (transformers in-process) | verl (Ray + vLLM on clusters)
    verl_entry: str = "verl.trainer.main_ppo"  # verl: the module `python -m` runs with the overrides


@dataclass
class PipelineConfig:
    eval_tasks: TasksConfig = field(default_factory=lambda: TasksConfig(
        name="sample", domains=["travel", "retail", "auto_insurance", "neobank", "consulting"], split="bench",
        per_family=1))  # benchmark tasks the base and trained models are evaluated on
    eval_attempts: int = 2
    # Held-out instances of the training families: the training task set (`tasks`) generated with this
    # seed instead of tasks.seed, so none of them is in the pool; base and trained are evaluated on them
    # too (what training can move). null: skip.
    heldout_seed: int | None = 1
    heldout_attempts: int = 2


@dataclass
class TrainConfig:
    pool: str | None = field(default=None, metadata=CONTENT_PATH)  # the pool manifest (pool.json from stage=select)


@dataclass
class SelectConfig:
    probe_run: str | None = field(default=None, metadata=CONTENT_PATH)  # the probe run folder to select from
    # also write the pool manifest here
    manifest_path: str | None = field(default=None, metadata=NOT_IDENTITY_PATH)
