"""MCP tools of the retrieval area (registered by gateway.mcp_tools.build_mcp)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp.server.mcpserver import MCPServer

if TYPE_CHECKING:
    from gateway.mcp_tools import ToolKit


def register(mcp: MCPServer, kit: ToolKit) -> None:
    """Add this area's tools to the server."""
