"""A second, independent client: the MCP Inspector (npm, TypeScript SDK) lists the served tools with its
CLI and plays a task with `mcpdo`, its CLI that keeps one connection (one session) across commands.

npm installs the pinned Inspector once into `$TBX_CACHE/npm/` (default ~/.cache/tbx); without node and
npm, or when the install fails, the test skips and says why.
"""

import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest

from tbx.serve.episode import USER_ENDED
from tests.serve.served import Served, tasks_of

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
CACHE = Path(os.environ.get("TBX_CACHE") or Path.home() / ".cache" / "tbx") / "npm" / "mcp-inspector-2.12.0"


def inspector_bin() -> Path:
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are not on PATH: the MCP Inspector cannot run")
    bin_dir = CACHE / "node_modules" / ".bin"
    if not (bin_dir / "mcpdo").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix",
                               str(CACHE), INSPECTOR], capture_output=True, text=True, timeout=900)
        if done.returncode != 0 or not (bin_dir / "mcpdo").exists():
            lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
            pytest.skip(f"npm could not install {INSPECTOR}: {lines[-1]}")
    return bin_dir


@pytest.mark.integration
def test_the_mcp_inspector_lists_the_tools_and_plays_a_task(tmp_path):
    bins = inspector_bin()
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "MCP_CATALOG_PATH": str(home / "catalog.json"), "NO_COLOR": "1",
           "MCP_INSPECTOR_SECRET_STORE": "memory", "MCP_INSPECTOR_DAEMON_DIR": str(tmp_path / "daemon"),
           "MCP_INSPECTOR_DAEMON_TOKEN": secrets.token_urlsafe(32)}  # a private daemon, as `mcpdo private` sets

    def node(*args: str, check: bool = True) -> str:
        done = subprocess.run(["node", *args], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0 or not check, done.stderr[-2000:]
        return done.stdout

    task = tasks_of("mock")[0]
    with Served(tmp_path, "tasks=mock", "tasks.limit=1", "serve.agent_name=inspector") as server:
        listed = json.loads(node(str(bins / "mcp-inspector"), "--cli", server.url, "--method", "tools/list",
                                 "--format", "json"))  # a session that claims no attempt
        assert [t["name"] for t in listed["result"]["tools"]] == ["get_account", "transfer", "set_nickname",
                                                                  "get_user_message", "reply_to_user"]
        mcpdo = (str(bins / "mcpdo"), "--format", "json")

        def tool(name: str, arguments: dict) -> str:
            out = json.loads(node(*mcpdo, "--connection", server.url, "tools/call", name, "--tool-args-json",
                                  json.dumps(arguments)))
            return "\n".join(part["text"] for part in out["content"])

        try:
            node(*mcpdo, "connect", server.url, "--transport", "http")  # one session for the commands below
            assert tool("get_user_message", {}) == task.user.opening_message
            for step in task.reference:
                answer = tool(step.tool, dict(step.arguments)) if step.tool else \
                    tool("reply_to_user", {"text": step.say or ""})
        finally:
            node(*mcpdo, "daemon", "stop", check=False)
        assert answer.endswith(USER_ENDED)
        assert server.wait() == 0, server.output()[-2000:]
    (record,) = server.records.values()
    assert record.task_id == task.id and record.outcome == "success"
