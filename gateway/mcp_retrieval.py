"""MCP tools of the read path beside search: list, lineage, stats."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import Context, MCPServer

from gateway import operations

if TYPE_CHECKING:
    from gateway.mcp_tools import ToolKit


def register(mcp: MCPServer, kit: ToolKit) -> None:
    """Add this area's tools to the server."""

    @mcp.tool(structured_output=True)
    async def memory_list(
        ctx: Context,
        scope: str | None = None,
        tags: list[str] | None = None,
        limit: int = 50,
        include_archived: bool = False,
        full: bool = False,
        offset: int = 0,
        as_of: datetime | None = None,
    ) -> dict[str, Any]:
        """A cheap index of memories (newest first): descriptions and metadata without bodies; pass
        full=true for bodies, include_archived=true to review forgotten ones, as_of for what was
        true at an instant. Scan the descriptions, then memory_get the one you need."""
        return await kit.run(
            lambda: operations.list_memories(
                kit.backends,
                kit.session_of(ctx),
                scope=scope,
                tags=tags,
                limit=limit,
                offset=offset,
                include_archived=include_archived,
                full=full,
                as_of=as_of,
            )
        )

    @mcp.tool(structured_output=True)
    async def memory_lineage(memory_id: str, ctx: Context) -> dict[str, Any]:
        """The supersede chain through a memory, oldest first: how a belief changed over time."""
        return await kit.run(lambda: operations.lineage(kit.backends, kit.session_of(ctx), memory_id))

    @mcp.tool(structured_output=True)
    async def memory_stats(ctx: Context, scope: str | None = None, days: int = 7) -> dict[str, Any]:
        """Recall health: memories per scope, search volume, empty-result rate, average hits and top
        score, latency percentiles and the recent queries that found nothing."""
        return await kit.run(
            lambda: operations.stats(kit.backends, kit.session_of(ctx), scope=scope, days=days)
        )

    @mcp.tool(structured_output=True)
    async def memory_context(
        ctx: Context,
        query: str = "",
        path: str = "",
        repo: str | None = None,
        mode: str = "auto",
        thread_id: str = "",
    ) -> dict[str, Any]:
        """The context block to read at session start or before a task: procedures, pinned project
        facts and map, the rules for `path` (a file you are about to edit), relevant memories and
        documents, and recent work — each layer within a token budget, citing memory ids."""
        return await kit.run(
            lambda: operations.assemble_context(
                kit.backends,
                kit.session_of(ctx),
                query=query,
                path=path,
                repo=repo,
                mode=mode,
                thread_id=thread_id,
            )
        )
