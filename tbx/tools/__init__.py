"""Tools: declared in a domain's tools.py, served over MCP, bound to one episode's database."""

from tbx.tools.declare import ToolFailure, ToolSpec, collect_tools, tool

__all__ = ["ToolFailure", "ToolSpec", "collect_tools", "tool"]
