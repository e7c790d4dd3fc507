"""The MCP tool surface (seed 001's `memory_*` tools), over the shared operations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from gateway import mcp_curation, mcp_guide, mcp_retrieval, mcp_structure, operations
from gateway.auth import Authenticator, Session
from gateway.backends import Backends
from hypermnesia.errors import HypermnesiaError
from hypermnesia.settings import GatewaySettings

INSTRUCTIONS = (
    "hypermnesia is a long-term memory. Call memory_search before answering questions about the user, "
    "the project or earlier decisions; call memory_save when you learn a durable fact, preference or "
    "decision (content = the fact, description = a one-line summary)."
)


class ToolKit:
    """What every tool module needs: the backends, the session of a call, and error mapping."""

    def __init__(
        self, backends: Backends, auth: Authenticator, stdio_headers: Mapping[str, str] | None = None
    ) -> None:
        self.backends = backends
        self.auth = auth
        self.stdio_headers = stdio_headers or {}

    def session_of(self, ctx: Context) -> Session:
        """HTTP calls carry their token and project in headers; stdio has no headers, so its calls
        use the ones the process was started with (`hypermnesia mcp`)."""
        headers = ctx.headers if ctx.headers is not None else self.stdio_headers
        return self.auth.session({k.lower(): v for k, v in headers.items()})

    @staticmethod
    async def run(coro_factory: Any) -> Any:
        """Await the operation; a service error becomes an MCP tool error with its message."""
        try:
            return await coro_factory()
        except HypermnesiaError as exc:
            raise ToolError(exc.message) from exc


def build_mcp(
    backends: Backends,
    auth: Authenticator,
    settings: GatewaySettings,
    stdio_headers: Mapping[str, str] | None = None,
) -> MCPServer:
    mcp = MCPServer(name="hypermnesia", instructions=INSTRUCTIONS, version="0.1.0")
    kit = ToolKit(backends, auth, stdio_headers)
    session_of, run = kit.session_of, kit.run

    @mcp.tool(structured_output=True)
    async def memory_save(
        content: str,
        description: str,
        ctx: Context,
        scope: str | None = None,
        type: str | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        importance: float | None = None,
    ) -> dict[str, Any]:
        """Store a memory. Updates a near-duplicate instead of inserting (created: false).

        content: the fact itself. description: a one-line summary used for ranking and listing.
        scope defaults to this session's project; tags, metadata and importance (0-10) are optional.
        """
        return await run(
            lambda: operations.save(
                backends,
                session_of(ctx),
                content=content,
                description=description,
                scope=scope,
                type=type,
                tags=tags,
                metadata=metadata,
                importance=importance,
            )
        )

    @mcp.tool(structured_output=True)
    async def memory_search(
        query: str,
        ctx: Context,
        scope: str | None = None,
        tags: list[str] | None = None,
        k: int = operations.DEFAULT_K,
        min_similarity: float | None = None,
        relative_cutoff: float | None = None,
        topic: str | None = None,
        topic_only: bool = False,
    ) -> list[dict[str, Any]]:
        """Recall memories by meaning (hybrid semantic + keyword). Each result carries `similarity`
        (cosine 0-1), the blended `score` and the signals in it (`entity_overlap`, `active_task`,
        `topic_match`). Searches this project plus shared scopes by default. `topic` prefers
        memories filed under that topic; with `topic_only` it returns only those."""

        async def go() -> list[dict[str, Any]]:
            results, degraded = await operations.search(
                backends,
                session_of(ctx),
                query=query,
                scope=scope,
                tags=tags,
                k=k,
                min_similarity=min_similarity,
                relative_cutoff=relative_cutoff,
                topic=topic,
                topic_only=topic_only,
            )
            if degraded:
                # Never silently half-answer: say what was missing in every result.
                for item in results:
                    item["degraded"] = degraded
            return results

        return await run(go)

    @mcp.tool(structured_output=True)
    async def memory_get(memory_id: str, ctx: Context) -> dict[str, Any]:
        """Fetch one memory by id."""
        return await run(lambda: operations.get(backends, session_of(ctx), memory_id))

    # Tools of the other areas live beside their operations.
    mcp_curation.register(mcp, kit)
    mcp_retrieval.register(mcp, kit)
    mcp_structure.register(mcp, kit)
    mcp_guide.register(mcp, kit, settings)
    return mcp
