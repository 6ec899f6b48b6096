"""The pool manifest as verl dataset rows, and the files a verl run reads (no verl import).

verl's `RLHFDataset` reads parquet or JSON lines; we write JSON lines (no pyarrow needed on the
launch side). One row per kept task:

- `prompt`: a placeholder chat; our agent loop builds the real prompt from the task itself
  (system policy, tool schemas from the episode's MCP session, the simulated user's opening);
- `agent_name`: `tbx_episode`, so each row runs in our AgentLoop;
- `extra_info.task_id` (+ domain, family, band): what the loop looks the task up by;
- `reward_model.ground_truth`: the task id (verl's reward manager requires the key; our loop
  sets `reward_score` itself, so verl's reward workers are skipped);
- `data_source`: `tbx/<domain>`, which verl uses to group its metrics.

`write_bridge_files` also writes the agent-loop YAML, the resolved tbx config the workers rebuild
their episode world from, and a copy of the manifest, at the paths of `BridgePaths`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tbx.config import Config, plain
from tbx.records import PoolManifest, PoolTask
from tbx.verl_bridge.overrides import AGENT_LOOP_NAME, TrainPlan, agent_loop_entries, validate_manifest


def pool_rows(manifest: PoolManifest) -> list[dict[str, Any]]:
    """One verl dataset row per kept task, in task-id order (pure)."""
    validate_manifest(manifest)
    by_id = {row.id: row for row in manifest.tasks}
    rows = []
    for index, task_id in enumerate(sorted(manifest.kept)):
        info = by_id.get(task_id, PoolTask(task_id))
        domain = info.domain or task_id.split("/", 1)[0]
        rows.append({
            "data_source": f"tbx/{domain}",
            "prompt": [{"role": "user", "content": f"tbx task {task_id}"}],
            "agent_name": AGENT_LOOP_NAME,
            "reward_model": {"style": "rule", "ground_truth": task_id},
            "extra_info": {"index": index, "task_id": task_id, "domain": domain,
                           "family": info.family, "band": info.band or "", "pool_hash": manifest.hash},
        })
    return rows


def write_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    return path


def write_bridge_files(cfg: Config, manifest: PoolManifest, plan: TrainPlan, prompt_style: str = "tbx",
                       resumed_after_step: int = 0) -> None:
    """Rows, agent-loop YAML, resolved tbx config and manifest copy, where `plan.paths` says."""
    paths = plan.paths
    write_rows(pool_rows(manifest), Path(paths.train_file))
    entries = agent_loop_entries(plan, prompt_style, resumed_after_step)
    Path(paths.agent_loop_config).write_text(omegaconf_yaml(entries))
    Path(paths.tbx_config).write_text(omegaconf_yaml(plain(cfg)))
    Path(paths.manifest).write_text(json.dumps(manifest.to_dict(), indent=2))


def omegaconf_yaml(data: Any) -> str:
    """YAML that OmegaConf, which reads both files back (verl's agent-loop config; the workers' tbx config),
    reads as written. PyYAML leaves a string such as the run id `635e839243` unquoted, and OmegaConf's loader
    takes it for a float (inf), so the workers stored their episodes under run id 'inf'; OmegaConf's own
    dumper quotes every string its loader would read as another type."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(data))
