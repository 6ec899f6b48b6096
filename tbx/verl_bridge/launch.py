"""stage=train with grpo.trainer=verl: hand the pool and the recipe to verl's trainer.

`launch.py stage=train grpo.trainer=verl hardware=slurm_h100_3x8 ...` runs as a Ray job
(`tbx.launch.dispatch.RayJob`): every task of the Slurm job joins one Ray cluster, and rank 0
(the head, with RAY_ADDRESS set) calls `run_verl_training`, which

1. finds the model folder (the embedded default's converted GGUF when `model.path` is unset; on
   CPU a tied model's untied copy, `tbx.vllm.weights.untied_copy`), plans the run from `grpo`,
   `hardware` and the pool manifest (`plan_training`: checked sizes),
2. opens the run's results store and discards the episodes of every step after verl's newest
   checkpoint (a killed run replays those steps; each is stored once),
3. writes the bridge files into the run folder (`verl/train.jsonl`, `verl/agent_loops.yaml`,
   `verl/tbx_config.yaml`, `verl/pool.json`),
4. starts `python -m <grpo.verl_entry> <overrides>` (verl's `main_ppo` by default) in the run
   folder with the environment of the head (plus the CPU platform's variables on hardware without
   GPUs), so its `ray.init()` joins the running cluster; streams its output to the terminal and to
   `verl/main_ppo.log`; a non-zero exit is an InfraError that quotes the end of the log; verl's file
   logger writes each step's metrics to `verl/metrics.jsonl` as the step ends (an earlier start's file is
   kept as `verl/metrics.<n>.jsonl`: verl truncates the file it opens; `step_metrics` reads them all);
5. merges verl's last checkpoint into a Hugging Face folder (`final_model/`) with verl's own
   merger, and records verl's version and the checkpoint in `run.json`; a run in which no step had
   a gradient (every group zero-variance) merges nothing and exits EXIT_NO_UPDATE, as natively.

The command is also written to `verl/command.sh`, so a user can rerun or edit it by hand. verl
resumes from the newest checkpoint in `checkpoints/` (`trainer.resume_mode=auto`), so a
requeued or restarted job continues where it stopped. This module starts processes and imports
no verl.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tbx.config import Config
from tbx.errors import EXIT_NO_UPDATE, ConfigError, InfraError
from tbx.process.durable import publish_folder
from tbx.process.owner import die_with_parent
from tbx.process.stall import StallWatch
from tbx.records import PoolManifest
from tbx.runs.results import VerlTrainResult
from tbx.store import ResultStore
from tbx.store.training import first_attempt_of
from tbx.verl_bridge.cpu import cpu_environment
from tbx.verl_bridge.data import write_bridge_files
from tbx.verl_bridge.overrides import (
    METRICS_FILE,
    VERL_VERSION,
    HardwareSettings,
    TrainPlan,
    plan_training,
    verl_overrides,
)

LOG_TAIL_LINES = 30
LATEST = "latest_checkpointed_iteration.txt"  # verl's pointer to its newest checkpoint


def verl_command(cfg: Config, manifest: PoolManifest, run_dir: Path, experiment: str,
                 run_id: str = "") -> tuple[TrainPlan, list[str]]:
    """The checked plan and the full command line of verl's trainer for this run (pure)."""
    plan = plan_training(manifest, str(run_dir), experiment, cfg.grpo,
                         HardwareSettings.from_config(cfg), run_id)
    return plan, [sys.executable, "-m", cfg.grpo.verl_entry, *verl_overrides(cfg, manifest, plan)]


def check_verl_installed(cfg: Config) -> None:
    """verl's trainer runs in this Python: say how to get it before anything starts."""
    module = cfg.grpo.verl_entry.split(".")[0]
    if importlib.util.find_spec(module) is None:
        raise ConfigError("conf/grpo", "grpo.trainer", f"is verl, but {sys.executable} has no '{module}' module",
                          "run launch.py with the venv that has verl: .venv-vllm/bin/python launch.py ... "
                          "(bash scripts/setup.sh builds it; on a cluster: docs/clusters.md)")


def training_model(cfg: Config, cpu: bool) -> Path:
    """The Hugging Face folder verl loads: `model.path`, or the embedded default's converted GGUF; on
    CPU a tied model's untied copy (vLLM's CPU reload cannot update a tied output layer)."""
    from tbx.policies.hf_model import model_directory, resolve_config_path
    from tbx.vllm.weights import untied_copy, weights_fingerprint

    directory = Path(cfg.model.path) if cfg.model.path else model_directory(cfg.model)[0]
    if not (directory / "config.json").is_file():
        raise ConfigError("conf/model", "model.path", f"{directory} holds no config.json",
                          "give a Hugging Face model folder (config, safetensors, tokenizer)")
    if not cpu:
        return directory
    cache = resolve_config_path(cfg.model.cache_dir) / "untied-hf"
    return untied_copy(directory, cache, f"{directory.name}-{weights_fingerprint(directory)[:12]}")


def latest_verl_step(checkpoints: Path) -> int:
    """The step of verl's newest complete checkpoint in `checkpoints` (0: none)."""
    pointer = checkpoints / LATEST
    if not pointer.is_file():
        return 0
    text = pointer.read_text().strip()
    return int(text) if text.isdigit() else 0


def run_verl_training(cfg: Config, manifest: PoolManifest, run_dir: Path, experiment: str,
                      store: ResultStore) -> VerlTrainResult:
    """Run verl's trainer to the end of the recipe; merge and describe the model it trained. `store` is the
    run's results store, open in this process for the whole run (verl's workers write to it too)."""
    check_verl_installed(cfg)
    hardware = HardwareSettings.from_config(cfg)
    model_dir = training_model(cfg, hardware.cpu)
    played = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=str(model_dir)),
                                 run_dir=str(run_dir))
    plan, command = verl_command(played, manifest, run_dir, experiment, store.run_id)
    resumed_from = discard_unsaved_steps(store, Path(plan.paths.checkpoint_dir))
    write_bridge_files(played, manifest, plan, resumed_after_step=resumed_from)
    folder = run_dir / "verl"
    (folder / "command.sh").write_text("#!/bin/sh\n" + shlex.join(command) + "\n")
    log_path = folder / "main_ppo.log"
    where = f"{plan.world_size} CPU rank(s)" if hardware.cpu else f"{plan.world_size} GPU(s)"
    print(f"verl: {plan.episodes_per_step} episodes/step on {where}, {plan.grpo.steps} steps"
          f"{f', resuming after step {resumed_from}' if resumed_from else ''}; log {log_path}", flush=True)
    if not os.environ.get("RAY_ADDRESS"):
        print("verl: RAY_ADDRESS is not set; verl starts a Ray instance of its own on this node", file=sys.stderr)
    environment = dict(os.environ)
    if hardware.cpu:
        environment |= cpu_environment(cfg.model.server.kv_cache_gib, hardware.cpus_per_node)
    keep_earlier_metrics(folder)
    watched = (folder / METRICS_FILE, Path(plan.paths.checkpoint_dir) / LATEST)  # a step logged, a checkpoint

    def progress() -> tuple:
        return store.stored_tries(), *(path.stat().st_mtime if path.exists() else 0 for path in watched)

    run_trainer(command, run_dir, environment, log_path, cfg.grpo.verl_stall_s, progress)
    checkpoints = Path(plan.paths.checkpoint_dir)
    step = latest_verl_step(checkpoints)
    metrics = step_metrics(folder)
    updates = updated_steps(metrics)
    if times := step_times(metrics):
        print(f"verl: slowest {times[0]}", flush=True)
    final = merge_checkpoint(checkpoints, step, run_dir, environment) if step and updates != 0 else None
    trainer = {"name": "verl", "version": importlib.metadata.version("verl") if final else VERL_VERSION,
               "checkpoint": str(checkpoints / f"global_step_{step}") if step else None,
               "base_model": str(model_dir), "device": "cpu" if hardware.cpu else "cuda"}
    return VerlTrainResult(run_dir=str(run_dir), pool_hash=plan.pool_hash, steps=plan.grpo.steps, trained_steps=step,
                           updates=updates, checkpoints=str(checkpoints), final_model=str(final) if final else None,
                           command=str(folder / "command.sh"), log=str(log_path), metrics=str(folder / METRICS_FILE),
                           verl=trainer, exit_code=EXIT_NO_UPDATE if step and updates == 0 else 0)


def updated_steps(metrics: dict[int, dict[str, Any]]) -> int | None:
    """How many of verl's logged steps changed the model: a non-zero gradient norm. verl steps its
    optimizer on a batch whose advantages are all 0 too; with no gradient from the first step on (AdamW's
    moments stay 0, weight decay 0 in the recipe) the weights are the base model's. None: verl logged no
    gradient norm, so nothing can be said (the model is merged as before)."""
    norms = [data["actor/grad_norm"] for data in metrics.values() if "actor/grad_norm" in data]
    return sum(norm > 0 for norm in norms) if norms else None


STEP_PHASES = ("gen", "old_log_prob", "ref", "update_actor", "save_checkpoint", "update_weights")  # verl's timers


def step_times(metrics: dict[int, dict[str, Any]]) -> list[str]:
    """One line per logged step, slowest first: its time, its phases' (verl's `timing_s/*`) and the tokens
    its update processed (`perf/total_num_tokens`)."""
    timed = sorted((s for s in metrics if "timing_s/step" in metrics[s]), key=lambda s: -metrics[s]["timing_s/step"])
    lines = []
    for step in timed:
        data = metrics[step]
        phases = ", ".join(f"{name} {data[f'timing_s/{name}']:.1f}" for name in STEP_PHASES
                           if f"timing_s/{name}" in data)
        tokens = f"; {int(data['perf/total_num_tokens'])} tokens" if "perf/total_num_tokens" in data else ""
        lines.append(f"step {step}: {data['timing_s/step']:.1f} s ({phases}){tokens}")
    return lines


def keep_earlier_metrics(folder: Path) -> None:
    """Move an earlier start's metrics file aside (`metrics.<n>.jsonl`): verl's file logger truncates its file."""
    current = folder / METRICS_FILE
    if current.is_file():
        current.rename(folder / f"metrics.{max(_earlier_metrics(folder), default=0) + 1}.jsonl")


def _earlier_metrics(folder: Path) -> dict[int, Path]:
    """The kept files of earlier starts by their number, oldest first."""
    numbered = {path.stem.split(".")[1]: path for path in folder.glob("metrics.*.jsonl")}
    return {int(n): numbered[n] for n in sorted((n for n in numbered if n.isdigit()), key=int)}


def step_metrics(folder: Path) -> dict[int, dict[str, Any]]:
    """verl's metrics per step over every start of the run, oldest start first (a step a resumed run
    replayed has its last start's values). A line cut short by a kill is skipped."""
    metrics: dict[int, dict[str, Any]] = {}
    for path in [*_earlier_metrics(folder).values(), folder / METRICS_FILE]:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
                metrics[int(record["step"])] = dict(record["data"])
            except (ValueError, KeyError, TypeError):
                continue
    return metrics


def discard_unsaved_steps(store: ResultStore, checkpoints: Path) -> int:
    """Drop the stored episodes of the steps after verl's newest checkpoint; return that checkpoint's step.

    verl resumes a killed run from its newest checkpoint and replays the steps after it, so the
    episodes a killed process stored for those steps were never trained on. The caller's open store
    does it (one store per process and run)."""
    step = latest_verl_step(checkpoints)
    store.discard_from(first_attempt_of(step))
    return step


def run_trainer(command: list[str], run_dir: Path, environment: dict[str, str], log_path: Path,
                stall_s: float | None = None, progress: Callable[[], object] = lambda: None) -> None:
    """Run `command` in the run folder to the end, its output to the terminal and the log. The trainer
    dies with this process (a SIGKILLed job leaves no verl driver behind; Ray's own daemons die with the
    job's Ray node, tbx/launch/ray_cluster.py, or with the driver that started them). With `stall_s`, a
    trainer whose `progress()` value does not change for that long is stopped (SIGTERM, SIGKILL after
    `STOP_GRACE_S`) and the run fails with an InfraError that says so. Its output is no sign of progress:
    verl logs its rollout counters every minute while it waits on dead workers."""
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    with log_path.open("a") as log, subprocess.Popen(command, cwd=run_dir, stdout=subprocess.PIPE, env=environment,
                                                     stderr=subprocess.STDOUT, text=True, bufsize=1,
                                                     preexec_fn=die_with_parent) as process:
        assert process.stdout is not None
        watch = StallWatch(stall_s, lambda: stop(process), progress) if stall_s else None
        try:
            for line in process.stdout:
                log.write(line)
                tail.append(line)
                sys.stdout.write(line)
            code = process.wait()
        finally:
            if watch:
                watch.stop()
    if watch and watch.stalled:
        raise InfraError(f"verl's trainer stored no episode, logged no step and wrote no checkpoint for {stall_s:g} s "
                         "(grpo.verl_stall_s), so tbx stopped it: a worker may have died under it (the log says "
                         "which: Ray's memory monitor, a worker that died). Run the same command again to resume "
                         "from its last checkpoint, with more memory free, or give a larger grpo.verl_stall_s where "
                         f"a step's update or the start legitimately takes longer; the end of {log_path}:\n"
                         + "".join(tail))
    if code != 0:
        raise InfraError(f"verl's trainer exited with status {code}; the end of {log_path}:\n" + "".join(tail))


STOP_GRACE_S = 30.0  # a stalled trainer's time to end after SIGTERM before SIGKILL


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()


def merge_checkpoint(checkpoints: Path, step: int, run_dir: Path, environment: dict[str, str]) -> Path:
    """verl's own merger: the FSDP shards of `global_step_<step>/actor` as a Hugging Face folder in
    `<run>/final_model` (replaced whole, so a killed merge leaves the previous folder)."""
    actor = checkpoints / f"global_step_{step}" / "actor"
    staging = run_dir / ".final_model.partial"
    shutil.rmtree(staging, ignore_errors=True)
    log_path = run_dir / "verl" / "merge.log"
    command = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(actor),
               "--target_dir", str(staging)]
    with log_path.open("w") as log:
        code = subprocess.run(command, cwd=run_dir, env=environment, stdout=log, stderr=subprocess.STDOUT,
                              check=False).returncode
    if code != 0:
        raise InfraError(f"verl's model merger exited with status {code} on {actor}; see {log_path}")
    return publish_folder(staging, run_dir / "final_model")
