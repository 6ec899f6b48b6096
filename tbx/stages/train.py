"""stage=train: GRPO on terminal-state rewards over a frozen pool.

    python launch.py stage=train train.pool=outputs/select-…/pool.json grpo=cpu_small

The native trainer (`grpo.trainer=native`) runs here: vLLM plays groups of episodes drawn from
the pool manifest (the sampler replaces zero-variance groups and re-runs error episodes), the
verdicts become rewards, one token-mean GRPO update of a transformers copy follows each step, and
its weights reach the running vLLM before the next step's rollouts (tbx/policies/trainable.py).
Checkpoints (weights, optimizer, sampler position, random generators) let a killed run resume
where it stopped, the server's weights included; the trained model is saved as a Hugging Face
folder for `stage=eval`. After each step `curves.png` in the run folder plots the step metrics
(tbx/report/training_curves.py), W&B or not. On
clusters `grpo.trainer=verl` hands the same pool and recipe to verl (see tbx/verl_bridge).
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from tbx.campaign import build_world, prepare_all
from tbx.campaign.components import build_backend, episode_cost
from tbx.catalog import load_manifest as read_manifest
from tbx.catalog import manifest_tasks
from tbx.config import Config
from tbx.episodes import EpisodeWorld, run_episode
from tbx.episodes.seeds import training_seed
from tbx.errors import EXIT_NO_UPDATE, ConfigError
from tbx.policies.trainable import TrainablePolicy, build_trainable
from tbx.process.durable import publish_folder, write_text
from tbx.process.preemption import run_loop
from tbx.records import PoolManifest, TrainState
from tbx.report.training_curves import training_curves_figure
from tbx.rl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from tbx.rl.grpo import LossSettings, group_advantages
from tbx.rl.native import TurnSample, UpdateResult, grpo_update
from tbx.rl.sampler import GroupSampler, StepBatch
from tbx.runs.identity import record_engine, record_meta, resolve_run_dir, run_identity, save_run_meta
from tbx.runs.results import NativeTrainResult, TrainResult, VerlTrainResult
from tbx.runs.sinks import stage_sink
from tbx.store import open_store
from tbx.store.training import as_training_attempt, first_attempt_of


def load_manifest(path: str | None) -> PoolManifest:
    manifest = read_manifest(path, "train.pool")
    if not manifest.kept:
        raise ConfigError(path, "train.pool", "keeps no task", "probe more tasks or choose another pool strategy")
    return manifest


def validate_train(cfg: Config) -> None:
    """What the native trainer needs beyond the values the schema checks (tbx/config/values.py)."""
    if cfg.model.kind != "vllm":
        raise ConfigError("conf/model", "model.kind", f"is {cfg.model.kind}: the native trainer updates a model "
                          "whose weights it can send to its rollout server", "use a model with kind: vllm")


pool_tasks = manifest_tasks


def step_samples(batch, policy: TrainablePolicy, norm_by_std: bool) -> list[TurnSample]:
    """One sample per assistant turn of every trained episode, with its group-centred advantage.

    Raises `StaleSamplesError` when a turn was sampled by other weights than the ones being trained."""
    import torch

    episodes = [(group.task_id, episode) for group in batch.groups for episode in group.episodes]
    if not episodes:
        return []
    rewards = torch.tensor([float(e.reward) for _, e in episodes])
    group_ids = [index for index, group in enumerate(batch.groups) for _ in group.episodes]
    advantages = group_advantages(rewards, group_ids, norm_by_std=norm_by_std)
    samples = []
    for (_, episode), advantage in zip(episodes, advantages.tolist(), strict=True):
        turns = [turn for turn in policy.take_trace(episode.seed) if turn.completion_ids]
        policy.check_samples(turns)
        samples += [TurnSample(turn.prompt_ids, turn.completion_ids, advantage, turn.logprobs) for turn in turns]
    return samples


@dataclass
class _Trainer:
    """The parts a native training run works with, and where it stands (`state`, what checkpoints keep)."""

    policy: TrainablePolicy
    optimizer: Any  # torch.optim.Optimizer
    sampler: GroupSampler
    store: Any  # the run's results store
    checkpoints: Path
    state: TrainState
    sink: Any = None  # the stage's logging sink
    world: EpisodeWorld | None = None  # the pool's tasks, user, judge, limits (those of evaluation) and faults


def _step_metrics(cfg: Config, step: int, batch: StepBatch, samples: list[TurnSample], update: UpdateResult | None,
                  scored: list[float], seconds: float, policy: TrainablePolicy) -> dict[str, Any]:
    """The `train/` metrics of one step; `update` is None when no group had a sample to train on (then the
    policy synced no weights), `scored` holds every reward of the run so far, this step's included."""
    rewards = [e.reward for g in batch.groups for e in g.episodes]
    metrics = {"train/step": step + 1, "train/reward_mean": float(np.mean(rewards)) if rewards else 0.0,
               "train/groups": len(batch.groups), "train/samples": len(samples),
               "train/step_seconds": seconds,
               "train/pool_pass_at_1_so_far": float(np.mean(scored)) if scored else 0.0}
    metrics |= {f"train/sampler/{k}": v for k, v in batch.stats.as_dict().items()}
    if update is not None:
        # vLLM's log-probs are the raw (temperature-1) ones: compared with the trainer's only at temperature 1
        comparable = cfg.model.temperature == 1.0
        gap = update.logprob_gap if comparable else float("nan")
        metrics |= {"train/loss": update.loss, "train/grad_norm": update.grad_norm,
                    "train/response_tokens": update.response_tokens, "train/clip_fraction": update.clip_fraction,
                    "train/logprob_gap": gap, "train/weight_sync_seconds": policy.sync_seconds[-1]}
        # mismatch_kl always; the TIS weights' statistics when grpo.is_threshold applies them (tbx/rl/correction.py)
        metrics |= {f"train/{key}": value if comparable else float("nan")
                    for key, value in update.importance.as_metrics().items()
                    if key.startswith("mismatch") or cfg.grpo.is_threshold is not None}
    return metrics


def _print_metrics(metrics: dict[str, Any]) -> None:
    """One line of a step's metrics on stderr (of the sampler's, only the zero-variance counts)."""
    print(" ".join(f"{k.removeprefix('train/')}={v:.4g}" if isinstance(v, float) else f"{k.removeprefix('train/')}={v}"
                   for k, v in metrics.items() if not k.startswith("train/sampler/") or "zero_variance" in k),
          file=sys.stderr)


async def _train(cfg: Config, run: _Trainer) -> None:
    policy, sampler, store, sink, state, world = run.policy, run.sampler, run.store, run.sink, run.state, run.world
    assert world is not None  # run_train built it
    settings = LossSettings(clip_ratio_low=cfg.grpo.clip_ratio, clip_ratio_high=cfg.grpo.clip_ratio,
                            loss_agg_mode=cfg.grpo.loss_agg_mode, kl_coef=0.0)  # no reference: kl_coef != 0 refused
    scored = state.scored
    for step in range(state.step, cfg.grpo.steps):
        started = time.perf_counter()
        bar = tqdm(total=cfg.grpo.groups_per_step * cfg.grpo.group_size, desc=f"train step {step + 1}/"
                   f"{cfg.grpo.steps}", unit="ep", file=sys.stderr, mininterval=2.0, dynamic_ncols=True)

        async def play(task_id: str, attempt: int, step: int = step, bar: tqdm = bar):
            seed = training_seed(cfg.seed, task_id, step, attempt)  # a re-run is another attempt: its own seed
            result = await run_episode(world, task_id, policy, attempt, seed)
            store.append(as_training_attempt(result, step), episode_cost(cfg, result.usage))
            if result.reward is None:
                policy.take_trace(seed)  # an error episode is never trained on
            bar.total = max(bar.total, bar.n + 1)  # replacement groups and re-runs add episodes
            bar.update(1)
            return result

        batch = await sampler.sample_step(play)
        bar.set_postfix_str("updating the model")
        for episode in batch.discarded:
            policy.take_trace(episode.seed)
        samples = step_samples(batch, policy, cfg.grpo.norm_adv_by_std)
        policy.forget_agents()  # cancelled episodes' traces: no step reads them
        for g in batch.groups:
            scored.extend(e.reward for e in g.episodes)
        update = None
        if samples:
            update = await asyncio.get_running_loop().run_in_executor(None, functools.partial(
                grpo_update, policy.model, run.optimizer, samples, settings, pad_id=policy.pad_id,
                micro_batch_size=cfg.grpo.micro_batch_size, temperature=cfg.model.temperature,
                max_grad_norm=cfg.grpo.max_grad_norm, share_prefix=not cfg.grpo.gradient_checkpointing,
                is_threshold=cfg.grpo.is_threshold))
            bar.set_postfix_str("sending the weights to vLLM")
            await asyncio.to_thread(policy.sync_weights, step + 1)
        bar.close()
        metrics = _step_metrics(cfg, step, batch, samples, update, scored, time.perf_counter() - started, policy)
        sink.log(metrics, step=step + 1)
        state.history.append(metrics)
        state.step = step + 1
        training_curves_figure(state.history, run.checkpoints.parent / "curves.png")  # beside the checkpoints
        _print_metrics(metrics)
        if (step + 1) % cfg.grpo.save_every == 0 or step + 1 == cfg.grpo.steps:
            save_checkpoint(run.checkpoints, step + 1, policy.model, run.optimizer,
                            state.checkpoint_extra(sampler.state_dict()))
    await world.aclose()


def run_train(cfg: Config) -> TrainResult:
    manifest = load_manifest(cfg.train.pool)
    if cfg.grpo.trainer == "verl":
        return _train_with_verl(cfg, manifest)
    validate_train(cfg)
    tasks = pool_tasks(manifest)
    run_dir = resolve_run_dir(cfg)
    store = open_store(cfg.store.url, run_dir, run_identity(cfg, tasks), "train", cfg.store.timeout_s)
    try:
        # one trainer per run: a second process stops here with one line, before it writes anything or
        # starts a model server
        store.lock_run(str(run_dir))
        save_run_meta(run_dir, cfg)
        run = _start(cfg, run_dir, tasks, store, manifest.finetune)
        policy = run.policy
        backend = build_backend(cfg)
        try:
            run.world = build_world(cfg, backend, prepare_all(cfg, tasks, backend))
            with stage_sink(cfg, run_dir) as sink:
                run.sink = sink
                run_loop(_run_and_close(cfg, run))
        finally:
            backend.close()
    finally:
        store.close()
    return finish_training(run_dir, policy, manifest.hash, cfg.grpo.steps, len(tasks), run.state.history)


def finish_training(run_dir: Path, policy, pool_hash: str, steps: int, n_tasks: int,
                    history: list[dict[str, Any]]) -> NativeTrainResult:
    """train.json and the trained model, published atomically; a run in which no step updated the model
    (every group zero-variance) saves no model, so nothing evaluates the base weights as trained, and
    exits EXIT_NO_UPDATE."""
    updates = sum("train/loss" in metrics for metrics in history)
    final = None
    if updates:
        final = str(publish_folder(policy.save_final(run_dir / ".final_model.partial"), run_dir / "final_model"))
    record_engine(run_dir, policy.engine())
    summary = NativeTrainResult(run_dir=str(run_dir), pool_hash=pool_hash, steps=steps, updates=updates,
                                history=tuple(history), final_model=final, weights=policy.weights_version,
                                exit_code=0 if updates else EXIT_NO_UPDATE)
    write_text(run_dir / "train.json", json.dumps(summary.to_json(), indent=2))
    if updates:
        print(f"trained {steps} steps ({updates} with a model update) on {n_tasks} pool tasks -> {final}")
    else:
        print(no_update_line(steps, run_dir), file=sys.stderr)
    return summary


def no_update_line(steps: int, run_dir: Path) -> str:
    return (f"no update ran: every group of all {steps} steps had zero variance (the same reward for every "
            f"attempt), so no trained model was saved ({run_dir / 'train.json'}); fix: a pool with tasks the "
            "model sometimes passes (stage=select's bands), larger grpo.group_size, or "
            "grpo.replace_zero_variance=true")


def _start(cfg: Config, run_dir: Path, tasks: list, store, finetune: str) -> _Trainer:
    """The policy (served; `finetune` is the pool manifest's, as verl's), optimizer and sampler, from the run's
    last checkpoint when there is one: the server then answers with that checkpoint's weights, as it did for
    the uninterrupted run."""
    import torch

    # every generator a checkpoint saves starts from the seed (Python's and numpy's would start from fresh
    # entropy), so two runs of one config checkpoint the same states
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    policy = build_trainable(cfg, run_dir, finetune)
    optimizer = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=cfg.grpo.lr,
                                  weight_decay=cfg.grpo.weight_decay)
    sampler = GroupSampler([t.id for t in tasks], cfg.grpo.group_size, cfg.grpo.groups_per_step,
                           np.random.default_rng(cfg.seed), cfg.grpo.max_replacements if cfg.grpo.replace_zero_variance
                           else 0, cfg.grpo.max_error_reruns)
    checkpoints = run_dir / "checkpoints"
    state = TrainState()
    latest = latest_checkpoint(checkpoints)
    if latest is not None:
        state = TrainState.from_checkpoint(*load_checkpoint(latest, policy.model, optimizer))
        sampler.load_state_dict(state.sampler)
        policy.sync_weights(state.step)
        print(f"resuming {run_dir} from step {state.step}", file=sys.stderr)
    record_engine(run_dir, policy.engine())
    # episodes a killed process stored after its last checkpoint were not trained on; they are replayed
    store.discard_from(first_attempt_of(state.step))
    return _Trainer(policy=policy, optimizer=optimizer, sampler=sampler, store=store, checkpoints=checkpoints,
                    state=state)


def _train_with_verl(cfg: Config, manifest: PoolManifest) -> VerlTrainResult:
    """The same pool and recipe, trained by verl (on the Ray cluster this job runs in)."""
    from tbx.verl_bridge.launch import run_verl_training

    tasks = pool_tasks(manifest)
    run_dir = resolve_run_dir(cfg)
    run_id = run_identity(cfg, tasks)
    store = open_store(cfg.store.url, run_dir, run_id, "train", cfg.store.timeout_s, read_tries=False)
    try:
        store.lock_run(str(run_dir))  # one trainer per run, as natively
        save_run_meta(run_dir, cfg)
        summary = run_verl_training(cfg, manifest, run_dir, run_dir.name, store)
    finally:
        store.close()
    record_meta(run_dir, "trainer", summary.verl)
    write_text(run_dir / "train.json", json.dumps(summary.to_json(), indent=2))
    if summary.exit_code == EXIT_NO_UPDATE:
        print(no_update_line(summary.steps, run_dir), file=sys.stderr)
    else:
        print(f"verl trained {summary.trained_steps} steps on {len(tasks)} pool tasks -> "
              f"{summary.final_model or summary.checkpoints}")
    return summary


async def _run_and_close(cfg: Config, run: _Trainer) -> None:
    try:
        await _train(cfg, run)
    finally:
        await run.policy.aclose()
