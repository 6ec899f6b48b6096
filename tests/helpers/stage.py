"""A Config composed through Hydra as on the command line, a stage run in this process, and launch.py run as
users run it (a subprocess: its exit status, stdout and stderr)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tbx.config import Config, register_configs

ROOT = Path(__file__).resolve().parents[2]
register_configs()


def make_cfg(tmp_path, *overrides) -> Config:
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        composed = compose("config", overrides=["logger=none", f"out_root={tmp_path}/outputs",
                                                f"backend.workdir={tmp_path}/db", *overrides])
    return OmegaConf.to_object(composed)


def run(cfg):
    from tbx.launch import run_stage

    return run_stage(cfg)


def launch_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`python launch.py ARGS` as a user types it."""
    return subprocess.run([sys.executable, str(ROOT / "launch.py"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def launch(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`python launch.py logger=none ARGS`."""
    return launch_cli("logger=none", *args, cwd=cwd)


def error_lines(out: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in out.stderr.splitlines() if line.strip() and "%|" not in line]  # progress bars aside


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# every (group, option) of conf/
OPTIONS = sorted((d.name, f.stem) for d in (ROOT / "conf").iterdir() if d.is_dir() for f in d.glob("*.yaml"))
# values a user must give for some options (`???` in their file)
REQUIRED = {("backend", "postgres"): ["backend.url=postgresql+psycopg://postgres@127.0.0.1:5432/postgres"],
            ("model", "openai_endpoint"): ["model.endpoint.base_url=http://127.0.0.1:8000/v1",
                                           "model.endpoint.model=some-model"],
            ("experiment", "eval_endpoint"): ["model.endpoint.base_url=http://127.0.0.1:8000/v1",
                                              "model.endpoint.model=some-model"],
            ("experiment", "reference_probe"): ["model.path=/models/base"],
            ("experiment", "reference_train"): ["model.path=/models/base", "train.pool=pool.json"],
            ("experiment", "reference_eval"): ["model.path=/models/trained"],
            ("stage", "serve"): ["serve.agent_name=some_agent"]}
