"""The MCP tool surface (seed 001's `memory_*` tools, task and structure tools, the usage guide).

Each tool is an operation's request model and its function: the model is the tool's argument model,
so its input schema is the model's JSON schema (the same one the OpenAPI document shows), with a
flat, named parameter per field; the function's docstring is the tool's description.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import warnings
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, func_metadata
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import BaseModel

from gateway import mcp_guide, memories, structure
from gateway.auth import PROJECT_HEADER, Authenticator, Session
from gateway.backends import Backends
from hypermnesia import __version__
from hypermnesia.errors import HypermnesiaError
from hypermnesia.settings import GatewaySettings

__all__ = ["INSTRUCTIONS", "ToolKit", "build_mcp"]

INSTRUCTIONS = (
    "hypermnesia is a long-term memory. Call memory_search before answering questions about the user, "
    "the project or earlier decisions; call memory_save when you learn a durable fact, preference or "
    "decision (content = the fact, description = a one-line summary)."
)

log = logging.getLogger(__name__)

ROOTS_TIMEOUT_S = 5.0

Operation = Callable[[Backends, Session, Any], Awaitable[Any]]


class ToolKit:
    """What every tool needs: the backends and the session of a call."""

    def __init__(
        self, backends: Backends, auth: Authenticator, stdio_headers: Mapping[str, str] | None = None
    ) -> None:
        self.backends = backends
        self.auth = auth
        self.stdio_headers = stdio_headers or {}
        # Per MCP session: its first workspace root (or None), forgotten with the session.
        self._roots: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()

    async def session_of(self, ctx: Context) -> Session:
        """HTTP calls carry their token and project in headers; stdio has no headers, so its calls
        use the ones the process was started with (`hypermnesia mcp`). Without a project header,
        the client's first workspace root names the project."""
        raw = ctx.headers if ctx.headers is not None else self.stdio_headers
        headers = {k.lower(): v for k, v in raw.items()}
        root = None if headers.get(PROJECT_HEADER, "").strip() else await self._first_root(ctx)
        return await self.auth.session(headers, root)

    async def _first_root(self, ctx: Context) -> str | None:
        """The first workspace root the client advertises, asked once per MCP session. Best effort
        (seed 001): a client without the roots capability, or a transport with no way back to the
        client, has none, and the session falls back to the default project."""
        session = ctx.session
        try:
            return self._roots[session]
        except (KeyError, TypeError):
            pass
        root = None
        capabilities = ctx.client_capabilities
        if capabilities is not None and capabilities.roots is not None:
            try:
                with warnings.catch_warnings():
                    # The roots capability is deprecated (SEP-2577) but still what clients send.
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    listed = await asyncio.wait_for(session.list_roots(), ROOTS_TIMEOUT_S)
                if listed.roots:
                    root = str(listed.roots[0].uri)
            except Exception as exc:  # a client that cannot answer is a client without roots
                log.debug("could not list the client's roots: %s", exc)
        try:
            self._roots[session] = root
        except TypeError:
            pass
        return root


class _ModelArguments(ArgModelBase):
    """The SDK validates a call's arguments with the tool's argument model and hands the function its
    fields one level deep; a model tool takes the validated request model whole instead."""

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"request": self}


def _structured_output(name: str, returns: Any) -> Any:
    """The SDK's own structured-output metadata for a tool whose answer is of type `returns`."""

    def answer() -> None: ...

    answer.__name__ = name
    answer.__signature__ = inspect.Signature(return_annotation=returns)  # type: ignore[attr-defined]
    return func_metadata(answer, structured_output=True)


def model_tool(
    kit: ToolKit,
    name: str,
    model: type[BaseModel],
    operation: Operation,
    *,
    returns: Any = dict[str, Any],
    answer: Callable[[Any], Any] = lambda out: out,
) -> Tool:
    """A tool whose parameters are `model`'s fields and whose call is `operation`; `answer` picks
    what the tool returns from the operation's result (of type `returns`)."""
    arguments: type[BaseModel] = type(
        f"{name}_arguments", (model, _ModelArguments), {"__doc__": model.__doc__}
    )

    async def run(request: BaseModel, ctx: Context) -> Any:
        try:
            return answer(await operation(kit.backends, await kit.session_of(ctx), request))
        except HypermnesiaError as exc:
            raise ToolError(exc.message) from exc

    metadata = _structured_output(name, returns)
    metadata.arg_model = arguments
    return Tool(
        fn=run,
        name=name,
        title=None,
        description=inspect.cleandoc(operation.__doc__ or ""),
        parameters=arguments.model_json_schema(by_alias=True),
        fn_metadata=metadata,
        is_async=True,
        context_kwarg="ctx",
        annotations=None,
    )


def build_mcp(
    backends: Backends,
    auth: Authenticator,
    settings: GatewaySettings,
    stdio_headers: Mapping[str, str] | None = None,
) -> MCPServer:
    kit = ToolKit(backends, auth, stdio_headers)
    m = memories
    tools = [
        model_tool(kit, "memory_save", m.SaveMemory, m.save),
        model_tool(
            kit,
            "memory_search",
            m.SearchMemories,
            m.search,
            returns=list[dict[str, Any]],
            # REST answers {results, degraded}; a tool answers the list, each hit saying what was missing.
            answer=lambda out: out["results"],
        ),
        model_tool(kit, "memory_get", m.MemoryRef, m.get),
        model_tool(kit, "memory_update", m.UpdateMemory, m.update),
        model_tool(kit, "memory_delete", m.MemoryRef, m.delete),
        model_tool(kit, "memory_forget", m.ForgetMemories, m.forget),
        model_tool(kit, "memory_restore", m.MemoryRef, m.restore),
        model_tool(kit, "memory_supersede", m.SupersedeMemory, m.supersede),
        model_tool(kit, "task_decide", m.DecideTask, m.decide_task),
        model_tool(kit, "memory_list", m.ListMemories, m.list_memories),
        model_tool(kit, "memory_lineage", m.MemoryRef, m.lineage),
        model_tool(kit, "memory_stats", m.MemoryStats, m.stats),
        model_tool(kit, "memory_context", m.GetContext, m.assemble_context),
        model_tool(kit, "project_map", structure.ProjectMap, structure.project_map),
        model_tool(kit, "rules_for_path", structure.ResolvePath, structure.resolve),
    ]
    guide = mcp_guide.Guide(settings, tool_names=[t.name for t in tools] + ["memory_usage_guide"])
    tools.append(model_tool(kit, "memory_usage_guide", mcp_guide.GuideRequest, guide))
    return MCPServer(name="hypermnesia", instructions=INSTRUCTIONS, version=__version__, tools=tools)
