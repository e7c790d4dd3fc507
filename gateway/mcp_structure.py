"""MCP tools of the structure area: tier 0 project map, tier 1 path rules
(registered by gateway.mcp_tools.build_mcp)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import Context, MCPServer

from gateway import structure_ops

if TYPE_CHECKING:
    from gateway.mcp_tools import ToolKit


def register(mcp: MCPServer, kit: ToolKit) -> None:
    """Add this area's tools to the server."""
    backends, session_of, run = kit.backends, kit.session_of, kit.run

    @mcp.tool(structured_output=True)
    async def project_map(ctx: Context, repo: str | None = None) -> dict[str, Any]:
        """The repository's hand-curated map: its components (a tree through `parent`), what each
        is responsible for, their relationships, and the global invariants that always apply.
        Call it when you start working in a repository. repo defaults to this session's project."""
        return await run(lambda: structure_ops.project_map(backends, session_of(ctx), repo))

    @mcp.tool(structured_output=True)
    async def rules_for_path(path: str, ctx: Context, repo: str | None = None) -> dict[str, Any]:
        """The rules to follow before editing a file: the component the path belongs to, its
        constraints, those of the components it depends on, and the global invariants, each with
        why it applies. path is relative to the repository root (e.g. 'src/app.py'); repo
        defaults to this session's project."""
        return await run(lambda: structure_ops.resolve(backends, session_of(ctx), repo, path))
