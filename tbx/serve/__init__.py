"""Serve episodes over MCP, so an agent outside tbx (any MCP client) is evaluated like one inside.

`episode.py` makes a client's calls the agent of an ordinary episode; `server.py` is an episode's MCP
server (its task's domain tools and the user channel); `campaign.py` hands the pending attempts to
sessions; `http.py` serves them over streamable HTTP, a session per episode. stage=serve
(`tbx/stages/serve.py`) wires them to the task set and the results store; docs/serve.md is the guide.
"""

from tbx.config.values import LOOPBACK  # bind addresses that need no bearer token

__all__ = ["LOOPBACK"]
