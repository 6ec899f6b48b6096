"""A Config composed through Hydra as on the command line, a stage run in this process, and launch.py run as
users run it (a subprocess: its exit status, stdout and stderr)."""

from __future__ import annotations

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
