"""stage=train: GRPO on terminal-state rewards over a frozen pool.

    python launch.py stage=train train.pool=outputs/select-…/pool.json grpo=cpu_small

The native trainer (`grpo.trainer=native`) is a recipe (tbx/rl/trainer.py: setup, play, update, save); this
stage builds it from the config and runs its steps: vLLM plays groups of episodes drawn from the pool manifest
in the run's episode world (the sampler replaces zero-variance groups and re-runs error episodes), each
episode returned with the turns the policy sampled in it, the verdicts become rewards, one token-mean GRPO
update of a transformers copy follows each step, and its weights reach the running vLLM before the next
step's rollouts (tbx/policies/trainable.py).
Checkpoints (weights, optimizer, sampler position, random generators) let a killed run resume
where it stopped, the server's weights included; the trained model is saved as a Hugging Face
folder for `stage=eval`. After each step `curves.png` in the run folder plots the step metrics
(tbx/report/training_curves.py), W&B or not. On
clusters `grpo.trainer=verl` hands the same pool and recipe to verl (see tbx/verl_bridge).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tbx.campaign import build_world, prepare_all
from tbx.campaign.components import build_backend, episode_cost
from tbx.catalog import load_manifest as read_manifest
from tbx.catalog import manifest_tasks
from tbx.config import Config
from tbx.episodes import EpisodeWorld, run_episode
from tbx.episodes.seeds import training_seed
from tbx.errors import EXIT_NO_UPDATE, ConfigError
from tbx.policies.trainable import build_trainable
from tbx.process.durable import publish_folder, write_text
from tbx.process.preemption import run_loop
from tbx.records import PoolManifest
from tbx.report.training_curves import training_curves_figure
from tbx.rl.trainer import NativeRecipe, PlayedEpisode
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


def validate_train(cfg: Config, finetune: str) -> None:
    """What the native trainer needs beyond the values the schema checks (tbx/config/values.py); `finetune` is
    the pool manifest's."""
    if cfg.model.kind != "vllm":
        raise ConfigError("conf/model", "model.kind", f"is {cfg.model.kind}: the native trainer updates a model "
                          "whose weights it can send to its rollout server", "use a model with kind: vllm")
    if cfg.grpo.max_staleness and finetune == "lora":
        # each sync loads the new adapter under a new name and unloads the old one, which episodes still
        # playing would name
        raise ConfigError(cfg.train.pool, "finetune", "is lora, but the native trainer plays ahead "
                          f"(grpo.max_staleness={cfg.grpo.max_staleness}) with full-parameter weights only",
                          "give grpo.max_staleness=0 for a LoRA pool")


pool_tasks = manifest_tasks


async def _train(cfg: Config, recipe: NativeRecipe, world: EpisodeWorld, store, sink) -> None:
    """The recipe's steps from where the run stands: each step's episodes played in `world` by the trained
    policy and stored, the step's metrics logged, plotted (`curves.png` beside the checkpoints) and printed,
    and a checkpoint when one is due. A step's progress bar opens when its first episode starts (with
    grpo.max_staleness >= 1, while the step before it is updating)."""
    bars: dict[int, tqdm] = {}

    def bar_of(step: int) -> tqdm:
        if step not in bars:
            bars[step] = tqdm(total=cfg.grpo.groups_per_step * cfg.grpo.group_size, desc=f"train step {step + 1}/"
                              f"{cfg.grpo.steps}", unit="ep", file=sys.stderr, mininterval=2.0, dynamic_ncols=True)
        return bars[step]

    async def play(task_id: str, attempt: int, step: int) -> PlayedEpisode:
        bar = bar_of(step)
        seed = training_seed(cfg.seed, task_id, step, attempt)  # a re-run is another attempt: its own seed
        traced = recipe.policy.traced()
        result = await run_episode(world, task_id, traced, attempt, seed)
        store.append(as_training_attempt(result, step), episode_cost(cfg, result.usage))
        bar.total = max(bar.total, bar.n + 1)  # replacement groups and re-runs add episodes
        bar.update(1)
        return PlayedEpisode(result, traced.turns)

    async def done(step: int, metrics: dict[str, Any]) -> None:
        bar_of(step).close()
        bars.pop(step)
        sink.log(metrics, step=step + 1)
        training_curves_figure(recipe.state.history, recipe.checkpoints.parent / "curves.png")
        _print_metrics(metrics)
        if recipe.save_due(step) and cfg.grpo.max_staleness:
            await recipe.on_trainer_thread(recipe.write, recipe.snapshot())  # episodes played ahead go on meanwhile
        elif recipe.save_due(step):
            recipe.save()

    try:
        await recipe.train(play, done, say=lambda step, text: bar_of(step).set_postfix_str(text))
    finally:
        for bar in bars.values():
            bar.close()
    await world.aclose()


def _print_metrics(metrics: dict[str, Any]) -> None:
    """One line of a step's metrics on stderr (of the sampler's, only the zero-variance counts)."""
    print(" ".join(f"{k.removeprefix('train/')}={v:.4g}" if isinstance(v, float) else f"{k.removeprefix('train/')}={v}"
                   for k, v in metrics.items() if not k.startswith("train/sampler/") or "zero_variance" in k),
          file=sys.stderr)


def run_train(cfg: Config) -> TrainResult:
    manifest = load_manifest(cfg.train.pool)
    if cfg.grpo.trainer == "verl":
        return _train_with_verl(cfg, manifest)
    validate_train(cfg, manifest.finetune)
    tasks = pool_tasks(manifest)
    run_dir = resolve_run_dir(cfg)
    store = open_store(cfg.store.url, run_dir, run_identity(cfg, tasks), "train", cfg.store.timeout_s)
    try:
        # one trainer per run: a second process stops here with one line, before it writes anything or
        # starts a model server
        store.lock_run(str(run_dir))
        save_run_meta(run_dir, cfg)
        # the policy is served with `finetune` the pool manifest's, as verl's
        recipe = NativeRecipe.setup(cfg, [t.id for t in tasks], run_dir / "checkpoints",
                                    lambda: build_trainable(cfg, run_dir, manifest.finetune))
        record_engine(run_dir, recipe.policy.engine())
        # episodes a killed process stored after its last checkpoint were not trained on; they are replayed
        store.discard_from(first_attempt_of(recipe.state.step))
        backend = build_backend(cfg)
        try:
            world = build_world(cfg, backend, prepare_all(cfg, tasks, backend))
            with stage_sink(cfg, run_dir) as sink:
                run_loop(_run_and_close(cfg, recipe, world, store, sink))
        finally:
            backend.close()
    finally:
        store.close()
    return finish_training(run_dir, recipe.policy, manifest.hash, cfg.grpo.steps, len(tasks), recipe.state.history)


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


async def _run_and_close(cfg: Config, recipe: NativeRecipe, world: EpisodeWorld, store, sink) -> None:
    try:
        await _train(cfg, recipe, world, store, sink)
    finally:
        await recipe.policy.aclose()
