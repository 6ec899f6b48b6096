"""Tools: declared in a domain's tools.py, served over MCP, bound to one episode's database."""

from tbx.tools.declare import ToolFailure, ToolSpec, collect_tools, tool
from tbx.tools.records import record_once

__all__ = ["ToolFailure", "ToolSpec", "collect_tools", "record_once", "tool"]
