"""Run identity and run folders.

A run is named by a hash of the settings that change its results (not paths, logging or
concurrency), so the same command lands in the same folder and resumes there. The resolved
config and the git commit are saved beside the outputs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tbx.config import Config
from tbx.tasks.model import hash_json


def identity_settings(cfg: Config) -> dict[str, Any]:
    if cfg.stage.name == "report":
        return {"stage": "report", "runs": [str(Path(r).resolve()) for r in cfg.runs],
                "names": list(cfg.report.names)}
    if cfg.stage.name == "select":
        return {"stage": "select", "probe_run": str(Path(cfg.select.probe_run or "").resolve()),
                "pool": dataclasses.asdict(cfg.pool), "difficulty": dataclasses.asdict(cfg.difficulty)}
    settings = {
        "stage": cfg.stage.name,
        "tasks": dataclasses.asdict(cfg.tasks),
        "policy": dataclasses.asdict(cfg.policy),
        "user": {"target": cfg.user._target_, "model": cfg.user.endpoint.model},
        "judge": {"target": cfg.judge._target_, "model": cfg.judge.endpoint.model},
        "attempts": cfg.eval.attempts,
        "seed": cfg.seed,
    }
    if cfg.eval.max_turns is not None:
        settings["max_turns"] = cfg.eval.max_turns
    if any((cfg.faults.tool, cfg.faults.db, cfg.faults.user, cfg.faults.judge)):  # a chaos run never resumes a clean one
        settings["faults"] = dataclasses.asdict(cfg.faults)
    if cfg.stage.name == "probe":
        settings["attempts"] = dataclasses.asdict(cfg.probe)
    if cfg.stage.name == "train":
        pool = Path(cfg.train.pool or "")
        settings["attempts"] = None
        settings["grpo"] = dataclasses.asdict(cfg.grpo)
        settings["finetune"] = cfg.pool.finetune
        settings["pool"] = hash_json(pool.read_text()) if pool.is_file() else str(pool)
    if cfg.stage.name == "serve":  # the agent plays from outside: its name is all tbx knows of it
        settings["policy"] = {"served_agent": cfg.serve.agent_name}
    elif "reference" not in cfg.policy._target_:
        model = dataclasses.asdict(cfg.model)
        for key in ("cache_dir", "server", "endpoint"):
            model.pop(key)
        settings["model"] = model | {"endpoint_model": cfg.model.endpoint.model}
    return settings


def run_identity(cfg: Config) -> str:
    return hash_json(identity_settings(cfg))[:10]


def run_name(cfg: Config) -> str:
    if cfg.stage.name == "select":
        return f"select-{cfg.pool.name}-{run_identity(cfg)}"
    if cfg.stage.name == "report":
        return f"report-{len(cfg.runs)}runs-{run_identity(cfg)}"
    agent = cfg.serve.agent_name if cfg.stage.name == "serve" else cfg.policy.name
    return f"{cfg.stage.name}-{cfg.tasks.name}-{agent}-{run_identity(cfg)}"


def resolve_run_dir(cfg: Config) -> Path:
    path = Path(cfg.run_dir) if cfg.run_dir else Path(cfg.out_root) / run_name(cfg)
    path.mkdir(parents=True, exist_ok=True)
    return path


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def save_run_meta(run_dir: Path, cfg: Config) -> None:
    (run_dir / "config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    meta = {"identity": run_identity(cfg), "settings": identity_settings(cfg), "git_commit": git_commit()}
    (run_dir / "run.json").write_text(json.dumps(meta, indent=2))


def record_engine(run_dir: Path, engine: dict[str, Any]) -> None:
    """Add what served the policy to `run.json`: e.g. `{"name": "vllm", "version": "0.32.0", "weights": ...}`."""
    path = run_dir / "run.json"
    meta = json.loads(path.read_text()) if path.is_file() else {}
    meta["engine"] = engine
    staging = path.with_name(f".{path.name}.{os.getpid()}.partial")
    staging.write_text(json.dumps(meta, indent=2))
    os.replace(staging, path)
