"""The MCP tool surface (the drop-in `memory_*` tools, task and structure tools, the usage guide).

Each tool is an operation's request model and its function: the model is the tool's argument model,
so its input schema is the model's JSON schema (the same one the OpenAPI document shows), with a
flat, named parameter per field; the function's docstring is the tool's description.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import uuid
import warnings
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import ListRoots, Resolve, build_resolver_plans
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, func_metadata
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import CallToolResult, ListRootsResult, TextContent
from mcp_types.version import is_version_at_least
from pydantic import BaseModel

from gateway import intelligence, mcp_guide, memories, provenance, structure
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
# The protocol version from which a server asks the client through input_required rounds.
INPUT_REQUIRED_VERSION = "2026-07-28"

Operation = Callable[[Backends, Session, Any], Awaitable[Any]]


class ToolKit:
    """What every tool needs: the backends and the session of a call."""

    def __init__(
        self, backends: Backends, auth: Authenticator, stdio_headers: Mapping[str, str] | None = None
    ) -> None:
        self.backends = backends
        self.auth = auth
        self.stdio_headers = stdio_headers or {}
        # Per handshake-era MCP session: its first workspace root (or None), forgotten with the session.
        self._roots: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()

    def headers_of(self, ctx: Context) -> dict[str, str]:
        """HTTP calls carry their token and project in headers; stdio has no headers, so its calls
        use the ones the process was started with (`hypermnesia mcp`)."""
        raw = ctx.headers if ctx.headers is not None else self.stdio_headers
        return {k.lower(): v for k, v in raw.items()}

    async def ask_roots(self, ctx: Context) -> ListRoots | str | None:
        """The resolver of every tool's `root`: the first workspace root the client advertises, when
        no project header names the project. Best effort: a client without the roots
        capability has none, and the session falls back to the default project.

        A client on the 2026-07-28 protocol has no channel for a request from the server in the
        middle of a call: the SDK asks it with an input_required round (answered in the client's
        retry) when the resolver returns ListRoots. On the handshake-era protocol the request is
        sent mid-call, once per MCP session."""
        headers = self.headers_of(ctx)
        if headers.get(PROJECT_HEADER, "").strip():
            return None
        try:
            await self.auth.principal(headers)
        except HypermnesiaError:
            return None  # the call fails in session_of, naming the header: no roots round trip first
        capabilities = ctx.client_capabilities
        if capabilities is None or capabilities.roots is None:
            return None
        version = ctx.protocol_version
        if version is not None and is_version_at_least(version, INPUT_REQUIRED_VERSION):
            return ListRoots()
        return await self._listed_root(ctx)

    async def _listed_root(self, ctx: Context) -> str | None:
        session = ctx.session
        try:
            return self._roots[session]
        except (KeyError, TypeError):
            pass
        root = None
        try:
            with warnings.catch_warnings():
                # The roots capability is deprecated (SEP-2577) but still what clients send.
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                listed = await asyncio.wait_for(session.list_roots(), ROOTS_TIMEOUT_S)
            root = _first_root(listed)
        except Exception as exc:  # a client that cannot answer is a client without roots
            log.debug("could not list the client's roots: %s", exc)
        try:
            self._roots[session] = root
        except TypeError:
            pass
        return root

    async def session_of(self, ctx: Context, roots: ListRootsResult | str | None) -> Session:
        """The call's session: its token, and its project from the header, else the first
        workspace root (`roots`, what ask_roots resolved), else the default project."""
        headers = self.headers_of(ctx)
        root = _first_root(roots) if isinstance(roots, ListRootsResult) else roots
        return await self.auth.session(headers, root)


def _first_root(listed: ListRootsResult) -> str | None:
    return str(listed.roots[0].uri) if listed.roots else None


class _ModelArguments(ArgModelBase):
    """The SDK validates a call's arguments with the tool's argument model and hands the function its
    fields one level deep; a model tool takes the validated request model whole instead."""

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"request": self}


# fastmcp's client unwraps the SDK's {"result": ...} envelope into `CallToolResult.data` only when
# the tool's output schema carries this mark (what a fastmcp server puts there): without it a
# script written for the fastmcp client would read {"result": [...]} where it read a list.
FASTMCP_WRAP_MARK = "x-fastmcp-wrap-result"


def _structured_output(name: str, returns: Any) -> Any:
    """The SDK's own structured-output metadata for a tool whose answer is of type `returns`."""

    def answer() -> None: ...

    answer.__name__ = name
    answer.__signature__ = inspect.Signature(return_annotation=returns)  # type: ignore[attr-defined]
    metadata = func_metadata(answer, structured_output=True)
    if metadata.wrap_output and metadata.output_schema is not None:
        metadata.output_schema = {**metadata.output_schema, FASTMCP_WRAP_MARK: True}
    return metadata


def _is_missing(exc: HypermnesiaError) -> bool:
    return exc.code == grpc.StatusCode.NOT_FOUND


def _names_a_memory(request: BaseModel) -> bool:
    try:
        uuid.UUID(str(getattr(request, "memory_id", "")))
    except ValueError:
        return False
    return True


def model_tool(
    kit: ToolKit,
    name: str,
    model: type[BaseModel],
    operation: Operation,
    *,
    returns: Any = dict[str, Any],
    answer: Callable[[Any], Any] = lambda out: out,
    null_when_missing: bool = False,
) -> Tool:
    """A tool whose parameters are `model`'s fields and whose call is `operation`; `answer` picks
    what the tool returns from the operation's result (of type `returns`). With
    `null_when_missing`, a memory id that names nothing this session can read (unknown, another
    tenant's, or not an id at all) answers null instead of failing, as existing clients expect."""
    arguments: type[BaseModel] = type(
        f"{name}_arguments", (model, _ModelArguments), {"__doc__": model.__doc__}
    )
    metadata = _structured_output(name, returns)
    metadata.arg_model = arguments

    async def run(request: BaseModel, ctx: Context, root: ListRootsResult | str | None) -> CallToolResult:
        try:
            session = await kit.session_of(ctx, root)
            if null_when_missing and not _names_a_memory(request):
                value = None
            else:
                value = answer(await operation(kit.backends, session, request))
        except HypermnesiaError as exc:
            if not (null_when_missing and _is_missing(exc)):
                raise ToolError(exc.message) from exc
            value = None
        # One text block holding the whole answer as JSON (what a model reads), and the same value
        # as structured content (what a program reads), wrapped as the output schema says.
        structured = {"result": value} if metadata.wrap_output else value
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(value, ensure_ascii=False))],
            structured_content=structured,
        )

    # `root` is filled by a resolver, not by the caller: the SDK runs kit.ask_roots before the call
    # (Tool.from_function would find it in an Annotated[..., Resolve(...)] parameter).
    resolved = {"root": (Resolve(kit.ask_roots), False)}
    description = inspect.cleandoc(operation.__doc__ or "")
    if null_when_missing:
        description += "\n\nAnswers null when no memory with that id is in your scopes."
    argument_names = {info.alias or key for key, info in arguments.model_fields.items()}
    return Tool(
        fn=run,
        name=name,
        title=None,
        description=description,
        parameters=arguments.model_json_schema(by_alias=True),
        fn_metadata=metadata,
        is_async=True,
        context_kwarg="ctx",
        resolved_params=resolved,
        resolver_plans=build_resolver_plans(resolved, argument_names),
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
    # The drop-in result shapes where REST's differ: REST pages and envelopes (results + degraded,
    # memories + total, restored + memory), a tool answers the bare value, each search hit saying
    # itself what was missing from the answer; a missing memory is null, not an error.
    one_memory = dict[str, Any] | None
    tools = [
        model_tool(kit, "memory_save", m.SaveMemory, m.save),
        model_tool(
            kit,
            "memory_search",
            m.SearchMemories,
            m.search,
            returns=list[dict[str, Any]],
            answer=lambda out: out["results"],
        ),
        model_tool(kit, "memory_get", m.MemoryRef, m.get, returns=one_memory, null_when_missing=True),
        model_tool(
            kit, "memory_update", m.UpdateMemory, m.update, returns=one_memory, null_when_missing=True
        ),
        model_tool(kit, "memory_delete", m.MemoryRef, m.delete),
        model_tool(kit, "memory_forget", m.ForgetMemories, m.forget),
        model_tool(
            kit,
            "memory_restore",
            m.MemoryRef,
            m.restore,
            returns=one_memory,
            answer=lambda out: out["memory"],
            null_when_missing=True,
        ),
        model_tool(kit, "memory_supersede", m.SupersedeMemory, m.supersede),
        model_tool(kit, "task_decide", m.DecideTask, m.decide_task),
        model_tool(
            kit,
            "memory_list",
            m.ListMemories,
            m.list_memories,
            returns=list[dict[str, Any]],
            answer=lambda out: out["memories"],
        ),
        model_tool(kit, "memory_lineage", m.MemoryRef, m.lineage),
        model_tool(kit, "memory_stats", m.MemoryStats, m.stats),
        model_tool(kit, "memory_context", m.GetContext, m.assemble_context),
        model_tool(kit, "project_map", structure.ProjectMap, structure.project_map),
        model_tool(kit, "rules_for_path", structure.ResolvePath, structure.resolve),
        model_tool(kit, "memory_ask", intelligence.AskQuestion, intelligence.ask),
        model_tool(
            kit,
            "proposals_list",
            intelligence.ListProposals,
            intelligence.list_proposals,
            returns=list[dict[str, Any]],
            answer=lambda out: out["proposals"],
        ),
        model_tool(kit, "proposal_decide", intelligence.DecideProposal, intelligence.decide_proposal),
        model_tool(
            kit,
            "memory_evidence",
            intelligence.MemoryEvidence,
            intelligence.evidence,
            returns=one_memory,
            null_when_missing=True,
        ),
        model_tool(
            kit,
            "memory_provenance",
            provenance.MemoryProvenance,
            provenance.provenance,
            returns=one_memory,
            null_when_missing=True,
        ),
    ]
    guide = mcp_guide.Guide(settings, tool_names=[t.name for t in tools] + ["memory_usage_guide"])
    tools.append(model_tool(kit, "memory_usage_guide", mcp_guide.GuideRequest, guide))
    return MCPServer(name="hypermnesia", instructions=INSTRUCTIONS, version=__version__, tools=tools)
