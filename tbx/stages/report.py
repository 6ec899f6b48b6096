"""stage=report: compare evaluated runs (base first) in tables and figures.

    python launch.py stage=report 'runs=[outputs/eval-travel-null-…,outputs/eval-travel-oracle-…]'

Writes report.md and PNGs into the report's run folder: before/after, models side by side
(best and second best marked), cost and reliability, one task's attempts as a grid, a per-domain
heat map, pass@k and pass^k curves. The bill covers every try (retried errors included); a task
with fewer judged attempts than asked stops the report unless `report.allow_incomplete=true`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tbx.config import Config
from tbx.cost import parse_price_table
from tbx.errors import ConfigError
from tbx.metrics import IncompleteInventoryError
from tbx.report import RunData, render_report
from tbx.runs import read_run_meta, resolve_run_dir, save_run_meta
from tbx.sinks import stage_sink
from tbx.store.results import read_records

MODEL_POLICY = "tbx.policies.model.from_config"


def _agent_model(run_cfg: dict[str, Any]) -> tuple[str, float, float]:
    policy, model = run_cfg["policy"], run_cfg["model"]
    if policy["_target_"] != MODEL_POLICY:
        return policy["name"], 0.0, 0.0  # oracle, null, replay: no model tokens
    prices_in = model["price_input_per_mtok"] or model["endpoint"]["price_input_per_mtok"]
    prices_out = model["price_output_per_mtok"] or model["endpoint"]["price_output_per_mtok"]
    return model["name"], prices_in, prices_out


def load_run(run_dir: Path, name: str, store_url: str | None, allow_incomplete: bool) -> RunData:
    """A stored eval run as the report reads it: final tries, every try for the bill, prices."""
    if not (run_dir / "run.json").is_file():
        raise ConfigError(str(run_dir), "runs", "is not a run folder (no run.json)",
                          "list the folders stage=eval printed")
    meta = read_run_meta(run_dir / "run.json")
    run_cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    tries = read_records(store_url or run_dir, meta["identity"])
    finals: dict[tuple[str, int], dict[str, Any]] = {}
    for record in tries:
        finals[(record["task_id"], record["attempt"])] = record
    agent, price_in, price_out = _agent_model(run_cfg)
    table = {agent: {"input": price_in, "output": price_out}}
    roles = {}
    for role in ("user", "judge"):
        endpoint = run_cfg[role]["endpoint"]
        if endpoint["model"]:
            roles[role] = endpoint["model"]
            table[endpoint["model"]] = {"input": endpoint["price_input_per_mtok"],
                                        "output": endpoint["price_output_per_mtok"]}
    return RunData(name=name or run_cfg["policy"]["name"], records=list(finals.values()), model_name=agent,
                   prices=parse_price_table(table, f"{run_dir}/config.yaml"), k=run_cfg["eval"]["attempts"],
                   user_model=roles.get("user", ""), judge_model=roles.get("judge", ""),
                   allow_incomplete=allow_incomplete, billed_records=tries, tasks=meta.get("tasks"))


def run_report(cfg: Config) -> dict[str, Any]:
    if not cfg.runs:
        raise ConfigError("conf/config.yaml", "runs", "is empty", "give runs=[BASE_RUN,OTHER_RUN,...]")
    if cfg.report.names and len(cfg.report.names) != len(cfg.runs):
        raise ConfigError("conf/config.yaml", "report.names", f"has {len(cfg.report.names)} names for "
                          f"{len(cfg.runs)} runs", "give one name per run, or none")
    names = cfg.report.names or [""] * len(cfg.runs)
    runs = [load_run(Path(r), n, cfg.store.url, cfg.report.allow_incomplete) for r, n in zip(cfg.runs, names,
                                                                                               strict=True)]
    run_dir = resolve_run_dir(cfg)
    save_run_meta(run_dir, cfg)
    try:
        files = render_report(runs, run_dir, rng=np.random.default_rng(cfg.seed), resamples=cfg.report.resamples)
    except IncompleteInventoryError as exc:
        raise ConfigError(str(cfg.runs), "report.allow_incomplete", str(exc),
                          "re-run the missing attempts, or set report.allow_incomplete=true") from exc
    with stage_sink(cfg, run_dir) as sink:
        for index, table in enumerate(files.tables, 1):
            sink.table(f"report/table{index}", table.columns, table.rows)
        for path in files.png_paths:
            sink.image(f"report/{path.stem}", path)
    print(f"report of {len(runs)} runs -> {files.markdown_path}")
    for path in files.png_paths:
        print(f"  figure {path}")
    return {"run_dir": str(run_dir), "markdown": str(files.markdown_path),
            "figures": [str(p) for p in files.png_paths], "tables": [t.to_dict() for t in files.tables]}
