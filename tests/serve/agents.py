"""Outside agents for the serve tests, written against the official `mcp` client only.

Each takes a connected `mcp.Client` (in process, over HTTP or stdio). Run as a script it is the agent
a test kills: `python -m tests.serve.agents hold URL` opens a session over streamable HTTP, reads the
user's message, makes one tool call, prints READY and waits to be killed.
"""

from __future__ import annotations

import asyncio
import sys

import mcp

from tbx.policies.reference import DONE
from tbx.serve.episode import USER_ENDED
from tbx.tasks.model import Task


def text(result) -> str:  # a CallToolResult
    return "\n".join(part.text for part in result.content)


async def call(client: mcp.Client, name: str, arguments: dict | None = None) -> str:
    return text(await client.call_tool(name, arguments or {}))


async def play_reference(client: mcp.Client, task: Task) -> str:
    """The task's reference solution, a step a call, until the user ends the conversation (the oracle's
    closing message when the steps run out first); the last answer."""
    opening = await call(client, "get_user_message")
    assert opening == task.user.opening_message, (opening, task.id)  # the session got the task expected
    for step in task.reference:
        if step.tool is not None:
            answer = await call(client, step.tool, dict(step.arguments))
        else:
            answer = await call(client, "reply_to_user", {"text": step.say or ""})
        if answer.endswith(USER_ENDED):
            return answer
    return await call(client, "reply_to_user", {"text": DONE})


async def play_null(client: mcp.Client) -> str:
    """The null agent: reads the request and says it is done."""
    await call(client, "get_user_message")
    return await call(client, "reply_to_user", {"text": DONE})


async def hold(url: str) -> None:
    async with mcp.Client(url) as client:
        await call(client, "get_user_message")
        await call(client, "get_account", {"account_id": 1})
        print("READY", flush=True)
        await asyncio.sleep(3600)


if __name__ == "__main__":
    assert sys.argv[1] == "hold", sys.argv
    asyncio.run(hold(sys.argv[2]))
