"""Stored runs for the viewer's tests, played for real on the mock domain (2 attempts per task):

- base: the null agent (every attempt fails);
- trained: a known-bad replay: the transfers are played as the reference plays them (they flip from
  0/2 to 2/2), and mock/nickname/1 plays the reference plus one write nobody asked for (a nickname on
  account 1), so its verdict fails on "no other change" with that row as the extra side effect.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.stage import make_cfg, run

EXTRA = {"tool": "set_nickname", "arguments": {"account_id": 1, "nickname": "oops"}}


def bad_replay(path: Path) -> Path:
    from tbx.catalog import resolve_tasks
    from tbx.config import TasksConfig

    lines = []
    for task in resolve_tasks(TasksConfig(name="mock", domains=["mock"])):
        steps = [{"tool": s.tool, "arguments": dict(s.arguments), "say": s.say} for s in task.reference]
        if task.id == "mock/nickname/1":
            steps.insert(-1, EXTRA)
        lines.append(json.dumps({"task_id": task.id, "steps": steps}))
    path.write_text("\n".join(lines) + "\n")
    return path


def stored_runs(tmp_path: Path) -> tuple[str, str]:
    base = run(make_cfg(tmp_path, "tasks=mock", "policy=null_agent", "eval.attempts=2", "policy.name=base"))
    trained = run(make_cfg(tmp_path, "tasks=mock", "policy=replay", f"policy.path={bad_replay(tmp_path / 'bad.jsonl')}",
                           "policy.name=trained", "eval.attempts=2"))
    return base.run_dir, trained.run_dir


def served_run(tmp_path: Path) -> str:
    """A served agent's run over stdio (tests/serve): on mock/transfer/5 it reads the user's message and
    leaves (abandoned), mock/transfer/20 it plays as the reference does (success); tbx never sees its tokens."""
    import asyncio

    import mcp

    from tbx.catalog import resolve_tasks
    from tbx.config import TasksConfig
    from tests.serve.agents import call, play_reference
    from tests.serve.served import ROOT, serve_args

    tasks = resolve_tasks(TasksConfig(name="mock", domains=["mock"], limit=2))
    command = serve_args(tmp_path, "tasks=mock", "tasks.limit=2", "serve.agent_name=my_agent",
                         "serve.transport=stdio")

    async def session(play) -> str:
        params = mcp.StdioServerParameters(command=command[0], args=command[1:], cwd=str(ROOT))
        async with mcp.Client(params) as client:
            return await play(client)

    asyncio.run(session(lambda client: call(client, "get_user_message")))
    asyncio.run(session(lambda client: play_reference(client, tasks[1])))
    (run_dir,) = (tmp_path / "outputs").glob("serve-mock-my_agent-*")
    return str(run_dir)
