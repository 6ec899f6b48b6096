"""The native GRPO trainer as a recipe, in the manner of torchtune's recipes: `setup` (seeded generators, the
trained policy, the optimizer, the group sampler, and the last checkpoint when there is one), then per step
`play` (a step's groups, each episode played by the caller's function) and `update` (group-centred advantages,
one token-mean GRPO update of the torch module, the new weights sent to the rollout server), `record` (the
step's `train/` metrics, kept in the run's state) and `save` (a checkpoint a killed run resumes from).

Playing and updating are separate methods: with `grpo.max_staleness` s >= 1 (asynchronous GRPO, `train`) the
next step's groups are played while the recipe updates on this step's, so the inference server and the trainer
work at once; a step then trains on turns sampled by weights at most s versions old (tbx/rl/staleness.py),
drops older ones and counts them. With s = 0 each step plays, then updates, as a synchronous trainer does. The recipe knows neither the episode loop nor the store: the caller's
`play_episode(task_id, attempt, step)` plays one episode and returns it with the turns the policy sampled in it
(`PlayedEpisode`), and the caller logs the metrics `step` returns (tbx/stages/train.py).
"""

from __future__ import annotations

import asyncio
import functools
import random
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tbx.config import Config
from tbx.records import EpisodeResult, TrainState
from tbx.rl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from tbx.rl.grpo import LossSettings, group_advantages
from tbx.rl.native import TurnSample, UpdateResult, grpo_update
from tbx.rl.sampler import GroupSampler, StepBatch
from tbx.rl.staleness import BusyClock, StalenessStats, fresh_turns


class SampledTurn(Protocol):
    """One assistant turn as the rollout server sampled it."""

    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]
    logprobs: Sequence[float] | None
    weight_versions: tuple[str, ...]


class TrainedPolicy(Protocol):
    """What the recipe asks of the policy it trains (tbx.policies.trainable.TrainablePolicy)."""

    model: Any  # the torch module being trained
    sync_seconds: list[float]
    served_versions: list[str]  # the weight versions it served, oldest first (asynchronous GRPO's clock)

    @property
    def pad_id(self) -> int: ...

    def check_samples(self, turns: list[Any]) -> None:
        """Raise when a turn was sampled by other weights than the ones being trained."""

    def sync_weights(self, step: int) -> float:
        """Send the module's weights to the rollout server as step `step`'s; seconds taken."""


@dataclass(frozen=True)
class PlayedEpisode:
    """A training episode's result and the turns the trained policy sampled in it (none for a policy that
    sampled nothing); an error episode (reward None) is never trained on."""

    result: EpisodeResult
    turns: tuple[SampledTurn, ...]

    @property
    def reward(self) -> float | None:
        return self.result.reward

    @property
    def seed(self) -> int:
        return self.result.seed


PlayEpisode = Callable[[str, int, int], Awaitable[PlayedEpisode]]  # (task id, attempt, step) -> the episode


def step_samples(batch: StepBatch, policy: TrainedPolicy, norm_by_std: bool,
                 staleness: tuple[Sequence[str], int] | None = None) -> tuple[list[TurnSample], StalenessStats | None]:
    """One sample per assistant turn of every trained episode, with its group-centred advantage.

    Synchronous (`staleness` None): raises `StaleSamplesError` when a turn was sampled by other weights than the
    ones being trained. Asynchronous (`staleness` = (the versions the policy served, oldest first; and
    grpo.max_staleness)): turns older than the bound are dropped, and the counts come back with the samples.
    The group advantages are the whole groups' either way: an episode whose turns were all dropped still
    counts in its group's baseline."""
    import torch

    episodes = [episode for group in batch.groups for episode in group.episodes]
    if not episodes:
        return [], None if staleness is None else StalenessStats({}, 0, 0)
    rewards = torch.tensor([float(e.reward) for e in episodes])
    group_ids = [index for index, group in enumerate(batch.groups) for _ in group.episodes]
    advantages = group_advantages(rewards, group_ids, norm_by_std=norm_by_std)
    sampled = [[turn for turn in episode.turns if turn.completion_ids] for episode in episodes]
    stats = None
    if staleness is None:
        for turns in sampled:
            policy.check_samples(turns)
    else:
        sampled, stats = fresh_turns(sampled, *staleness)
    samples = [TurnSample(turn.prompt_ids, turn.completion_ids, advantage, turn.logprobs)
               for turns, advantage in zip(sampled, advantages.tolist(), strict=True) for turn in turns]
    return samples, stats


def step_metrics(cfg: Config, step: int, batch: StepBatch, samples: list[TurnSample], update: UpdateResult | None,
                 scored: list[float], seconds: float, policy: TrainedPolicy) -> dict[str, Any]:
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


@dataclass(frozen=True)
class Updated:
    """What a step's update did: its samples, the GRPO update (None when no group had a sample: no weights were
    sent), the age of the trained turns (asynchronous runs), and the seconds of update and weight sync."""

    samples: list[TurnSample]
    result: UpdateResult | None
    staleness: StalenessStats | None = None
    seconds: float = 0.0


@dataclass
class NativeRecipe:
    """The parts a native training run works with, and where it stands (`state`, what checkpoints keep)."""

    cfg: Config
    policy: Any  # a TrainedPolicy
    optimizer: Any  # torch.optim.Optimizer
    sampler: GroupSampler
    checkpoints: Path  # the run's checkpoint folder
    state: TrainState
    rollouts: BusyClock = field(default_factory=BusyClock)  # when some episode was being played
    _drawn: dict[int, dict[str, Any]] = field(default_factory=dict)  # the sampler after each played step's draws
    # The update, the weight sync and the checkpoint run off the event loop on this one thread, never on asyncio's
    # shared pool: glibc gives each thread that allocates its own heap (arena) and may keep a freed peak there, so
    # updates landing on whichever pool thread was idle (episodes played ahead keep the others busy) could each
    # leave GBs of freed activations behind. An asynchronous training run was OOM-killed at 19 GB in step 4; one
    # update's own peak (16.6 GB, measured after) is most of that (docs/training.md).
    _trainer_thread: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=1, thread_name_prefix="tbx-trainer"), repr=False)

    @classmethod
    def setup(cls, cfg: Config, task_ids: Sequence[str], checkpoints: Path,
              build_policy: Callable[[], TrainedPolicy]) -> NativeRecipe:
        """Seed every generator a checkpoint saves (Python's and numpy's would start from fresh entropy, so two
        runs of one config checkpoint the same states), build the policy, its optimizer and the sampler over
        `task_ids`, and resume from the last checkpoint in `checkpoints` when there is one: the server then
        answers with that checkpoint's weights, as it did for the uninterrupted run."""
        import torch

        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        policy = build_policy()
        optimizer = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=cfg.grpo.lr,
                                      weight_decay=cfg.grpo.weight_decay)
        g = cfg.grpo
        sampler = GroupSampler(list(task_ids), g.group_size, g.groups_per_step, np.random.default_rng(cfg.seed),
                               g.max_replacements if g.replace_zero_variance else 0, g.max_error_reruns)
        recipe = cls(cfg, policy, optimizer, sampler, checkpoints, TrainState())
        latest = latest_checkpoint(checkpoints)
        if latest is not None:
            recipe.state = TrainState.from_checkpoint(*load_checkpoint(latest, policy.model, optimizer))
            sampler.load_state_dict(recipe.state.sampler)
            policy.sync_weights(recipe.state.step)
            print(f"resuming {checkpoints.parent} from step {recipe.state.step}", file=sys.stderr)
        return recipe

    async def play(self, step: int, play_episode: PlayEpisode) -> StepBatch:
        """Step `step`'s groups, every episode played by `play_episode` (replacement groups and error re-runs
        included); the sampler's state after its draws is kept for the checkpoint that follows the step."""
        async def played(task_id: str, attempt: int) -> PlayedEpisode:
            self.rollouts.start()
            try:
                return await play_episode(task_id, attempt, step)
            finally:
                self.rollouts.stop()

        batch = await self.sampler.sample_step(played)
        self._drawn[step] = self.sampler.state_dict()
        return batch

    async def update(self, step: int, batch: StepBatch, say: Callable[[str], object] = lambda _: None) -> Updated:
        """The step's samples, one GRPO update on them and the new weights sent to the server (none when no
        group had a sample); the trained rewards join the run's. `say` hears what it is doing."""
        cfg, policy, started = self.cfg, self.policy, time.perf_counter()
        bound = (list(policy.served_versions), cfg.grpo.max_staleness) if cfg.grpo.max_staleness else None
        samples, staleness = step_samples(batch, policy, cfg.grpo.norm_adv_by_std, bound)
        for group in batch.groups:
            self.state.scored.extend(e.reward for e in group.episodes)
        if not samples:
            return Updated(samples, None, staleness, time.perf_counter() - started)
        settings = LossSettings(clip_ratio_low=cfg.grpo.clip_ratio, clip_ratio_high=cfg.grpo.clip_ratio,
                                loss_agg_mode=cfg.grpo.loss_agg_mode, kl_coef=0.0)  # no reference: kl_coef != 0 refused
        update = await self.on_trainer_thread(functools.partial(
            grpo_update, policy.model, self.optimizer, samples, settings, pad_id=policy.pad_id,
            micro_batch_size=cfg.grpo.micro_batch_size, temperature=cfg.model.temperature,
            max_grad_norm=cfg.grpo.max_grad_norm, share_prefix=not cfg.grpo.gradient_checkpointing,
            is_threshold=cfg.grpo.is_threshold, sort_by_prompt=cfg.grpo.sort_by_prompt))
        say("sending the weights to vLLM")
        await self.on_trainer_thread(policy.sync_weights, step + 1)
        return Updated(samples, update, staleness, time.perf_counter() - started)

    async def on_trainer_thread(self, work: Callable[..., Any], *args: Any) -> Any:
        """`work(*args)` on the recipe's one trainer thread (the update, the weight sync, the checkpoint)."""
        return await asyncio.get_running_loop().run_in_executor(self._trainer_thread, work, *args)

    def record(self, step: int, batch: StepBatch, updated: Updated, span: tuple[float, float],
               waited: float) -> dict[str, Any]:
        """The step's metrics, kept in the run's history; the run now stands after `step`. `span` is the
        step's wall-clock interval on the trainer, `waited` the seconds in it the trainer waited for episodes."""
        seconds = span[1] - span[0]
        metrics = step_metrics(self.cfg, step, batch, updated.samples, updated.result, self.state.scored, seconds,
                               self.policy)
        busy = self.rollouts.busy_between(*span)
        self.rollouts.forget_before(span[1])  # the next step's span starts later
        metrics |= {"train/update_seconds": updated.seconds,
                    "train/trainer_idle_fraction": waited / seconds if seconds > 0 else 0.0,
                    "train/rollout_idle_fraction": 1.0 - busy / seconds if seconds > 0 else 0.0}
        if updated.staleness is not None:
            metrics |= {f"train/{key}": value for key, value in updated.staleness.as_metrics().items()}
        self.state.history.append(metrics)
        self.state.step = step + 1
        return metrics

    async def step(self, step: int, play_episode: PlayEpisode,
                   say: Callable[[str], object] = lambda _: None) -> dict[str, Any]:
        """Play step `step`'s groups, update on them, and return the step's metrics (a synchronous step)."""
        started = time.perf_counter()
        batch = await self.play(step, play_episode)
        waited = time.perf_counter() - started
        say("updating the model")
        updated = await self.update(step, batch, say)
        return self.record(step, batch, updated, (started, time.perf_counter()), waited)

    async def train(self, play_episode: PlayEpisode, done: Callable[[int, dict[str, Any]], Awaitable[object]],
                    say: Callable[[int, str], object] = lambda _step, _text: None) -> None:
        """Every step from where the run stands; `done(step, metrics)` after each (the caller logs and saves).

        With grpo.max_staleness >= 1 the next step's groups start playing as soon as this step's are complete,
        so they play while this step updates and its weights are sent: the inference server and the trainer work
        at once, and a step costs about max(play, update) rather than their sum. One step is played ahead at
        most, so a trained turn is at most one version old; older turns (which only a longer lag would make)
        are dropped and counted. An episode that a weight swap falls into finishes on the new weights, each turn
        labelled with the weights that sampled it (vLLM pauses generation for the swap, so no turn mixes two)."""
        steps, ahead = self.cfg.grpo.steps, None
        try:
            for step in range(self.state.step, steps):
                began = time.perf_counter()
                batch = await (ahead if ahead is not None else self.play(step, play_episode))
                waited, ahead = time.perf_counter() - began, None
                if self.cfg.grpo.max_staleness and step + 1 < steps:
                    ahead = asyncio.create_task(self.play(step + 1, play_episode))
                say(step, "updating the model")
                updated = await self.update(step, batch, lambda text, step=step: say(step, text))
                await done(step, self.record(step, batch, updated, (began, time.perf_counter()), waited))
        finally:
            if ahead is not None:  # a failing step: the episodes played ahead are cancelled, never trained on
                ahead.cancel()
                await asyncio.gather(ahead, return_exceptions=True)

    def save_due(self, step: int) -> bool:
        """Whether a checkpoint follows step `step` (every `grpo.save_every` steps, and the last)."""
        return (step + 1) % self.cfg.grpo.save_every == 0 or step + 1 == self.cfg.grpo.steps

    def snapshot(self) -> tuple[int, dict[str, Any]]:
        """What a checkpoint of where the run stands keeps besides the weights, optimizer and generators, taken in
        the event loop's thread: the scored rewards, the history, and the sampler as it stood after the last
        trained step's draws (not the draws of a step played ahead: a resumed run plays that step again, and the
        killed run's tries of it are discarded from the store)."""
        drawn = self._drawn.get(self.state.step - 1)
        if drawn is None:
            if self.cfg.grpo.max_staleness:
                raise RuntimeError(f"no sampler state was kept for step {self.state.step}: a checkpoint would "
                                   "hold the draws of the step played ahead")
            drawn = self.sampler.state_dict()  # synchronous: nothing has drawn since
        for step in [s for s in self._drawn if s < self.state.step - 1]:
            del self._drawn[step]
        extra = self.state.checkpoint_extra(drawn)
        return self.state.step, dict(extra, scored=list(extra["scored"]), history=list(extra["history"]))

    def write(self, snapshot: tuple[int, dict[str, Any]]) -> None:
        """Write a `snapshot()` with the weights, optimizer and generators (a thread may do it while episodes
        played ahead go on: the model changes only in the next update, which waits for this)."""
        step, extra = snapshot
        save_checkpoint(self.checkpoints, step, self.policy.model, self.optimizer, extra,
                        keep=self.cfg.grpo.keep_checkpoints)

    def save(self) -> None:
        """A checkpoint of where the run stands (`snapshot`, then `write`)."""
        self.write(self.snapshot())
