"""stage=train grpo.trainer=verl: the pool and recipe reach verl's entry point on a Ray cluster.

verl's trainer needs GPUs and vLLM, so its entry (`grpo.verl_entry`) is a stand-in here
(tests/verl_bridge/stand_in_main_ppo.py); everything around it is real: launch.py, the job plan,
a submitit job that brings up a Ray head, the bridge files, the command line, the exit status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tbx.errors import InfraError
from tbx.records import PoolManifest
from tbx.verl_bridge.launch import run_verl_training, verl_command
from tests.launch import ROOT, compose_cfg
from tests.verl_bridge.test_overrides import manifest

STAND_IN = "tests.verl_bridge.stand_in_main_ppo"


def write_pool(tmp_path, kept: int = 24) -> PoolManifest:
    pool = manifest(kept=kept).sealed()
    (tmp_path / "pool.json").write_text(json.dumps(pool.to_dict()))
    return pool


def verl_cfg(tmp_path, *extra: str):
    return compose_cfg("stage=train", "grpo.trainer=verl", f"grpo.verl_entry={STAND_IN}", "grpo.groups_per_step=4",
                       "grpo.group_size=2", "hardware.gpus_per_node=1", f"model.path={tmp_path}/model",
                       f"train.pool={tmp_path}/pool.json", f"out_root={tmp_path}/out", *extra)


def test_command_carries_the_grpo_group_and_hardware(tmp_path):
    pool = write_pool(tmp_path)
    cfg = verl_cfg(tmp_path, "grpo.lr=3e-6", "grpo.steps=7")
    plan, command = verl_command(cfg, pool, tmp_path / "run", "exp")
    assert command[:3] == [sys.executable, "-m", STAND_IN]
    got = dict(arg.split("=", 1) for arg in command[3:])
    assert got["actor_rollout_ref.rollout.n"] == "2" and got["data.train_batch_size"] == "4"
    assert got["actor_rollout_ref.actor.optim.lr"] == "3e-06" and got["trainer.total_training_steps"] == "7"
    assert (got["trainer.nnodes"], got["trainer.n_gpus_per_node"]) == ("1", "1")
    assert plan.episodes_per_step == 8


def test_a_failing_trainer_is_an_infra_error_quoting_its_log(tmp_path, monkeypatch):
    pool = write_pool(tmp_path)
    monkeypatch.setenv("STAND_IN_EXIT", "3")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the stand-in lives in tests/; verl's trainer runs in the run folder
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(InfraError, match="status 3(.|\n)*failing as asked"):
        run_verl_training(verl_cfg(tmp_path), pool, run_dir, "exp")
    assert "failing as asked" in (run_dir / "verl" / "main_ppo.log").read_text()


@pytest.mark.integration
def test_launch_runs_verls_entry_on_the_jobs_ray_cluster(tmp_path):
    pytest.importorskip("ray", reason="ray is not installed: pip install -e '.[cluster]'")
    write_pool(tmp_path)
    args = ["stage=train", "grpo.trainer=verl", f"grpo.verl_entry={STAND_IN}", "grpo.groups_per_step=4",
            "grpo.group_size=2", "hardware=local_jobs", "hardware.gpus_per_node=1", f"model.path={tmp_path}/model",
            f"train.pool={tmp_path}/pool.json", f"out_root={tmp_path}/out", f"launcher.folder={tmp_path}/jobs",
            "logger=none"]
    out = subprocess.run([sys.executable, str(ROOT / "launch.py"), *args], capture_output=True, text=True, cwd=ROOT,
                         timeout=240, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    reports = list((tmp_path / "out").rglob("verl/stand_in.json"))
    assert len(reports) == 1, out.stdout[-2000:]
    report = json.loads(reports[0].read_text())
    assert report["ray_nodes"] == 1  # joined the job's own Ray head through RAY_ADDRESS
    assert report["files"] == {"data.train_files": True, "actor_rollout_ref.rollout.agent.agent_loop_config_path": True}
    run_dir = reports[0].parent.parent
    summary = json.loads((run_dir / "train.json").read_text())
    assert summary["trainer"] == "verl" and summary["checkpoints"] == str(run_dir / "checkpoints")
    assert (run_dir / "verl" / "command.sh").read_text().count("actor_rollout_ref.rollout.n=2") == 1
