"""stage=probe and stage=select: counts, adaptive stopping, kill-and-resume, the pool manifest."""

import json
import random
import signal
import subprocess
import sys
from collections import Counter

import pytest

from tbx.store.results import read_records
from tests.helpers.stage import ROOT, launch, make_cfg, run

COIN = ["policy._target_=tests.stages.coin.CoinPolicy", "policy.name=coin"]


def attempts_per_task(run_dir):
    records = read_records(run_dir)
    finals = Counter(r.task_id for r in records)
    keys = [(r.task_id, r.attempt, r.try_index) for r in records]
    return finals, len(keys) == len(set(keys))


def test_fixed_probe_runs_n_per_task_and_select_writes_manifest(tmp_path):
    probe = run(make_cfg(tmp_path, "stage=probe", "tasks=travel", *COIN, "probe.adaptive=false",
                         "probe.attempts=6"))
    finals, unique = attempts_per_task(probe.run_dir)
    assert unique and set(finals.values()) == {6} and len(finals) == 72
    assert probe.episodes_share_of_fixed_n == 1.0
    manifest_path = tmp_path / "pool.json"
    selected = run(make_cfg(tmp_path, "stage=select", f"select.probe_run={probe.run_dir}",
                            f"select.manifest_path={manifest_path}"))
    manifest = json.loads(manifest_path.read_text())
    assert manifest["hash"] == selected.hash and len(manifest["tasks"]) == 72
    kept = [row for row in manifest["tasks"] if row["kept"]]
    assert kept and all(row["band"] in ("hard", "medium", "often") for row in kept)
    assert all(row["band"] in ("rarely", "almost always") for row in manifest["tasks"] if not row["kept"])
    for row in manifest["tasks"]:
        assert row["n"] == 6 and 0 <= row["k"] <= 6
    lora = run(make_cfg(tmp_path, "stage=select", f"select.probe_run={probe.run_dir}", "pool=lora"))
    lora_manifest = json.loads(open(lora.manifest).read())
    assert all(row["band"] in ("hard", "medium") for row in lora_manifest["tasks"] if row["kept"])
    assert lora.hash != selected.hash and lora.kept <= selected.kept


def test_adaptive_probe_spends_fewer_episodes(tmp_path):
    probe = run(make_cfg(tmp_path, "stage=probe", "tasks=travel", *COIN, "probe.attempts=20"))
    finals, unique = attempts_per_task(probe.run_dir)
    assert unique and max(finals.values()) <= 20 and min(finals.values()) >= 4
    assert probe.episodes_share_of_fixed_n < 0.9  # rarely/always-solved tasks stop early
    assert probe.rounds >= 2


@pytest.mark.slow
def test_probe_killed_at_random_points_resumes_to_exactly_n_per_task(tmp_path):
    args = ["logger=none", "stage=probe", "tasks=travel", *COIN, "probe.adaptive=false", "probe.attempts=10",
            "eval.concurrency=4", f"out_root={tmp_path}", f"backend.workdir={tmp_path}/db",
            f"run_dir={tmp_path / 'probe'}"]
    rng = random.Random(11)
    kills = 0
    for delay in [rng.uniform(3.0, 7.0) for _ in range(4)]:
        proc = subprocess.Popen([sys.executable, str(ROOT / "launch.py"), *args], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
    out = launch(*args)
    assert out.returncode == 0, out.stderr
    finals, unique = attempts_per_task(tmp_path / "probe")
    assert kills >= 1 and unique
    assert len(finals) == 72 and set(finals.values()) == {10}


def test_select_refuses_a_folder_that_is_not_a_probe_run(tmp_path):
    out = launch("stage=select", f"select.probe_run={tmp_path}", f"out_root={tmp_path}")
    assert out.returncode == 2 and "not a probe run folder" in out.stderr


def test_tasks_pool_keeps_the_manifests_tasks_in_its_order(tmp_path):
    from tbx.catalog import resolve_tasks
    from tbx.config import TasksConfig
    from tbx.errors import ConfigError
    from tbx.records import manifest_hash

    def write(kept: list[str]) -> None:
        (tmp_path / "pool.json").write_text(json.dumps({"kept": kept, "hash": manifest_hash({"kept": kept})}))

    every = [t.id for t in resolve_tasks(TasksConfig(name="travel", domains=["travel"]))]
    kept = [every[5], every[2]]
    write(kept)
    cfg = TasksConfig(name="travel", domains=["travel"], pool=str(tmp_path / "pool.json"))
    assert [t.id for t in resolve_tasks(cfg)] == kept
    write([*kept, "travel/nope/0"])
    with pytest.raises(ConfigError, match="tasks.pool.*travel/nope/0"):
        resolve_tasks(cfg)
    # edited by hand (its hash no longer matches): refused, as stage=train refuses it
    manifest = json.loads((tmp_path / "pool.json").read_text()) | {"kept": [every[0]]}
    (tmp_path / "pool.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match="'tasks.pool': its content does not match its hash"):
        resolve_tasks(cfg)
    with pytest.raises(ConfigError, match="tasks.pool.*not a readable pool manifest"):
        resolve_tasks(TasksConfig(name="travel", domains=["travel"], pool=str(tmp_path / "missing.json")))


def test_per_domain_spreads_a_sample_over_domains():
    from tbx.catalog import resolve_tasks
    from tbx.config import TasksConfig

    cfg = TasksConfig(name="sample", domains=["travel", "retail", "neobank"], split="bench", per_family=1,
                      per_domain=2)
    tasks = resolve_tasks(cfg)
    assert [t.domain for t in tasks] == ["travel", "travel", "retail", "retail", "neobank", "neobank"]
    assert len({t.family for t in tasks}) == 6
