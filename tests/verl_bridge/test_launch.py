"""stage=train grpo.trainer=verl: the command verl's entry gets, and a trainer that fails.

verl's real trainer runs in tests/verl_bridge/test_verl_cpu.py (launch.py -> submitit -> Ray ->
verl.trainer.main_ppo on this CPU machine). The stand-in entry (tests/verl_bridge/stand_in_main_ppo.py)
is kept only for what the real trainer cannot be made to do on demand: exit with a chosen failure
status, so the bridge's error path (an InfraError quoting verl's log) is shown.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tbx.errors import EXIT_INFRA, EXIT_NO_UPDATE, InfraError
from tbx.records import PoolManifest
from tbx.store import open_store
from tbx.verl_bridge import launch
from tbx.verl_bridge.launch import (
    keep_earlier_metrics,
    run_verl_training,
    step_metrics,
    step_times,
    verl_command,
)
from tests.helpers.stage import launch as launch_py
from tests.launch import ROOT, compose_cfg
from tests.verl_bridge.pools import manifest
from tests.verl_bridge.verl_run import write_pool as write_runnable_pool

STAND_IN = "tests.verl_bridge.stand_in_main_ppo"


def write_pool(tmp_path, kept: int = 24) -> PoolManifest:
    pool = manifest(kept=kept).sealed()
    (tmp_path / "pool.json").write_text(json.dumps(pool.to_dict()))
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text("{}")  # the stand-in loads no weights
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
    store = open_store(None, run_dir, "run1", "train", read_tries=False)
    with pytest.raises(InfraError, match="status 3(.|\n)*failing as asked"):
        run_verl_training(verl_cfg(tmp_path), pool, run_dir, "exp", store)
    store.close()
    assert "failing as asked" in (run_dir / "verl" / "main_ppo.log").read_text()


def test_a_trainer_failing_mid_run_ends_launch_py_with_one_line_and_status_5(tmp_path, monkeypatch):
    """Through launch.py: a service that fails for good while the run goes (here verl's trainer) is one line and
    exit status 5 (EXIT_INFRA), not 2 (bad input), so a scheduler can tell "retry" from "fix the input"."""
    monkeypatch.setenv("STAND_IN_EXIT", "3")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pool = write_runnable_pool(tmp_path / "pool.json")
    done = launch_py("stage=train", "grpo.trainer=verl", f"grpo.verl_entry={STAND_IN}", "grpo.groups_per_step=1",
                     "grpo.group_size=2", f"train.pool={pool}", f"out_root={tmp_path}/out")
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == EXIT_INFRA and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(errors) == 1 and "verl's trainer exited with status 3" in errors[0], done.stderr[-3000:]
    assert "Fix: check that service, then run the same command again" in errors[0]


def test_a_trainer_that_stops_making_progress_is_stopped_with_an_infra_error(tmp_path, monkeypatch):
    """A verl that waits forever (on a worker that died under it) stores no episode and logs no step, though it
    keeps printing its counters: after grpo.verl_stall_s the run stops it and fails, naming the setting, and the
    trainer is gone."""
    pool = write_pool(tmp_path)
    monkeypatch.setenv("STAND_IN_HANG", str(tmp_path / "pid"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store = open_store(None, run_dir, "run1", "train", read_tries=False)
    try:
        with pytest.raises(InfraError, match=r"wrote no checkpoint for 2 s \(grpo.verl_stall_s\)(.|\n)*running: 2"):
            run_verl_training(verl_cfg(tmp_path, "grpo.verl_stall_s=2"), pool, run_dir, "exp", store)
    finally:
        store.close()
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):  # reaped by the bridge: no such process any more
        os.kill(pid, 0)


@pytest.mark.parametrize(("norms", "updates"), [("0,0", 0), ("0,0.4", 1)])
def test_a_verl_run_without_a_gradient_merges_no_model(tmp_path, monkeypatch, norms, updates):
    """Every step of zero-variance groups (grad norm 0): no update ran, so nothing is merged and the stage
    exits EXIT_NO_UPDATE, as natively; one step with a gradient is merged (the merger stands in here)."""
    pool = write_pool(tmp_path)
    monkeypatch.setenv("STAND_IN_EXIT", "0")
    monkeypatch.setenv("STAND_IN_GRAD_NORMS", norms)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    merged = []
    monkeypatch.setattr(launch.importlib.metadata, "version", lambda name: "0.9.1")  # verl is not installed in .venv
    monkeypatch.setattr(launch, "merge_checkpoint", lambda checkpoints, step, run_dir, env: merged.append(step)
                        or run_dir / "final_model")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store = open_store(None, run_dir, "run1", "train", read_tries=False)
    try:
        result = run_verl_training(verl_cfg(tmp_path, "grpo.steps=2"), pool, run_dir, "exp", store)
    finally:
        store.close()
    assert (result.trained_steps, result.updates) == (2, updates)
    if updates:
        assert merged == [2] and result.final_model == str(run_dir / "final_model") and result.exit_code == 0
    else:
        assert merged == [] and result.final_model is None and result.exit_code == EXIT_NO_UPDATE
        assert result.to_json()["exit_code"] == EXIT_NO_UPDATE and result.to_json()["final_model"] is None


def test_step_metrics_survive_a_restart_that_replays_a_step(tmp_path):
    """verl's file logger truncates its file at each start: the launcher keeps an earlier start's file and
    the reader joins them. Start 1 logged step 1 and was killed inside step 2 (half a line); start 2
    replayed step 2 (grad_norm 0.5), so step 1 is start 1's and step 2 start 2's."""
    folder = tmp_path / "verl"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text('{"step": 1, "data": {"actor/grad_norm": 1.5}}\n{"step": 2, "da')
    keep_earlier_metrics(folder)
    assert not (folder / "metrics.jsonl").exists() and (folder / "metrics.1.jsonl").is_file()
    (folder / "metrics.jsonl").write_text('{"step": 2, "data": {"actor/grad_norm": 0.5}}\n')
    assert step_metrics(folder) == {1: {"actor/grad_norm": 1.5}, 2: {"actor/grad_norm": 0.5}}
    keep_earlier_metrics(folder)  # a third start: the second's file is kept next to the first's
    assert sorted(p.name for p in folder.iterdir()) == ["metrics.1.jsonl", "metrics.2.jsonl"]
    assert step_metrics(folder) == {1: {"actor/grad_norm": 1.5}, 2: {"actor/grad_norm": 0.5}}


def test_step_times_name_the_slowest_step_first_with_its_phases_and_tokens():
    metrics = {1: {"timing_s/step": 92.4, "timing_s/gen": 34.0, "timing_s/update_actor": 37.2,
                   "perf/total_num_tokens": 6400, "actor/grad_norm": 2.7},
               2: {"timing_s/step": 128.0, "timing_s/gen": 62.0, "timing_s/old_log_prob": 13.0,
                   "timing_s/update_actor": 41.0, "timing_s/update_weights": 1.1},
               3: {"actor/grad_norm": 0.0}}  # a line without timings (cut short) is left out
    assert step_times(metrics) == ["step 2: 128.0 s (gen 62.0, old_log_prob 13.0, update_actor 41.0, "
                                   "update_weights 1.1)",
                                   "step 1: 92.4 s (gen 34.0, update_actor 37.2); 6400 tokens"]
    assert step_times({}) == []


def test_verl_logs_each_step_to_the_run_folder(tmp_path):
    pool = write_pool(tmp_path)
    _, command = verl_command(verl_cfg(tmp_path), pool, tmp_path / "run", "exp")
    got = dict(arg.split("=", 1) for arg in command[3:])
    assert got["trainer.logger"] == "[console,file]"
    assert got["+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"] == str(
        tmp_path / "run" / "verl" / "metrics.jsonl")
