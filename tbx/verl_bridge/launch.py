"""stage=train with grpo.trainer=verl: hand the pool and the recipe to verl's trainer.

`launch.py stage=train grpo.trainer=verl hardware=slurm_h100x8x3 ...` runs as a Ray job
(`tbx.launch.dispatch.RayJob`): every task of the Slurm job joins one Ray cluster, and rank 0
(the head, with RAY_ADDRESS set) calls `run_verl_training`, which

1. plans the run from `grpo`, `hardware` and the pool manifest (`plan_training`: checked sizes),
2. writes the bridge files into the run folder (`verl/train.jsonl`, `verl/agent_loops.yaml`,
   `verl/tbx_config.yaml`, `verl/pool.json`),
3. starts `python -m <grpo.verl_entry> <overrides>` (verl's `main_ppo` by default) in the run
   folder with the environment of the head, so its `ray.init()` joins the running cluster,
   streams its output to the terminal and to `verl/main_ppo.log`, and
4. turns a non-zero exit into an InfraError that quotes the end of the log.

The command is also written to `verl/command.sh`, so a user can rerun or edit it by hand. verl
resumes from the newest checkpoint in `checkpoints/` (`trainer.resume_mode=auto`), so a
requeued job continues where it stopped. This module starts a process and imports no verl.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import Any

from tbx.config import Config
from tbx.errors import InfraError
from tbx.records import PoolManifest
from tbx.verl_bridge.data import write_bridge_files
from tbx.verl_bridge.overrides import GrpoSettings, HardwareSettings, TrainPlan, plan_training, verl_overrides

LOG_TAIL_LINES = 30


def verl_command(cfg: Config, manifest: PoolManifest, run_dir: Path, experiment: str) -> tuple[TrainPlan, list[str]]:
    """The checked plan and the full command line of verl's trainer for this run (pure)."""
    plan = plan_training(manifest, str(run_dir), experiment, GrpoSettings.from_config(cfg.grpo),
                         HardwareSettings.from_config(cfg))
    return plan, [sys.executable, "-m", cfg.grpo.verl_entry, *verl_overrides(cfg, manifest, plan)]


def run_verl_training(cfg: Config, manifest: PoolManifest, run_dir: Path, experiment: str) -> dict[str, Any]:
    """Write the bridge files, run verl's trainer to the end, and say where its checkpoints are."""
    plan, command = verl_command(cfg, manifest, run_dir, experiment)
    write_bridge_files(cfg, manifest, plan)
    folder = run_dir / "verl"
    (folder / "command.sh").write_text("#!/bin/sh\n" + shlex.join(command) + "\n")
    log_path = folder / "main_ppo.log"
    print(f"verl: {plan.episodes_per_step} episodes/step on {plan.world_size} GPU(s), {plan.grpo.steps} steps; "
          f"log {log_path}", flush=True)
    if not os.environ.get("RAY_ADDRESS"):
        print("verl: RAY_ADDRESS is not set; verl starts a Ray instance of its own on this node", file=sys.stderr)
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    with log_path.open("a") as log, subprocess.Popen(command, cwd=run_dir, stdout=subprocess.PIPE,
                                                     stderr=subprocess.STDOUT, text=True, bufsize=1) as process:
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            tail.append(line)
            sys.stdout.write(line)
        code = process.wait()
    if code != 0:
        raise InfraError(f"verl's trainer exited with status {code}; the end of {log_path}:\n" + "".join(tail))
    return {"run_dir": str(run_dir), "trainer": "verl", "pool_hash": plan.pool_hash, "steps": plan.grpo.steps,
            "checkpoints": plan.paths.checkpoint_dir, "command": str(folder / "command.sh"), "log": str(log_path)}
