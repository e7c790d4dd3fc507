"""MCP tools of the curation area (registered by gateway.mcp_tools.build_mcp): seed 001's
memory_update / memory_delete / memory_forget / memory_restore, plus supersede and task decisions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import Context, MCPServer

from gateway import curation_ops

if TYPE_CHECKING:
    from gateway.mcp_tools import ToolKit


def register(mcp: MCPServer, kit: ToolKit) -> None:
    """Add this area's tools to the server."""
    backends, session_of, run = kit.backends, kit.session_of, kit.run

    @mcp.tool(structured_output=True)
    async def memory_update(
        memory_id: str,
        ctx: Context,
        content: str | None = None,
        description: str | None = None,
        type: str | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        importance: float | None = None,
    ) -> dict[str, Any]:
        """Edit a known memory in place: only the given fields change, the id stays."""
        changes = {
            "content": content,
            "description": description,
            "type": type,
            "tags": tags,
            "metadata": metadata,
            "importance": importance,
        }
        return await run(lambda: curation_ops.update(backends, session_of(ctx), memory_id, changes))

    @mcp.tool(structured_output=True)
    async def memory_delete(memory_id: str, ctx: Context) -> dict[str, Any]:
        """Delete a memory by id (hard: it leaves every read; only the audit log keeps a tombstone)."""
        return await run(lambda: curation_ops.delete(backends, session_of(ctx), memory_id))

    @mcp.tool(structured_output=True)
    async def memory_forget(
        ctx: Context,
        scope: str | None = None,
        tags: list[str] | None = None,
        older_than_days: float | None = None,
        importance_floor: float | None = None,
        apply: bool = False,
        limit: int = 100,
    ) -> dict[str, Any]:
        """Archive stale, low-importance memories (soft). Dry run unless apply is true. `matched` is
        the true total; `memories` lists at most `limit`, stalest first, with `truncated`."""
        return await run(
            lambda: curation_ops.forget(
                backends,
                session_of(ctx),
                scope=scope,
                tags=tags,
                older_than_days=older_than_days,
                importance_floor=importance_floor,
                apply=apply,
                limit=limit,
            )
        )

    @mcp.tool(structured_output=True)
    async def memory_restore(memory_id: str, ctx: Context) -> dict[str, Any]:
        """Un-archive a forgotten memory (the inverse of memory_forget); refreshes its access time."""
        return await run(lambda: curation_ops.restore(backends, session_of(ctx), memory_id))

    @mcp.tool(structured_output=True)
    async def memory_supersede(
        memory_id: str,
        content: str,
        ctx: Context,
        description: str = "",
        tags: list[str] | None = None,
        importance: float | None = None,
    ) -> dict[str, Any]:
        """Replace a memory with a corrected one: a new id; the old one is closed but kept for
        history and as-of questions."""
        return await run(
            lambda: curation_ops.supersede(
                backends,
                session_of(ctx),
                memory_id,
                content=content,
                description=description,
                tags=tags,
                importance=importance,
            )
        )

    @mcp.tool(structured_output=True)
    async def task_decide(task_id: str, decision: str, ctx: Context) -> dict[str, Any]:
        """Confirm (track it, no expiry) or dismiss (archive) an extracted candidate task."""
        return await run(lambda: curation_ops.decide_task(backends, session_of(ctx), task_id, decision))
