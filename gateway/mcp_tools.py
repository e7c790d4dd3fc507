"""The MCP tool surface (the drop-in `memory_*` tools, task and structure tools, the usage guide).

Each tool is an operation's request model and its function: the model is the tool's argument model,
so its input schema is the model's JSON schema (the same one the OpenAPI document shows), with a
flat, named parameter per field. Its description says in a sentence or two when to call it (the
function's docstring, REST's description, is the reference). Which tools and parameters a session
is shown is its profile's (gateway.tool_profiles).
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
from pydantic import BaseModel, Field, ValidationError

from gateway import intelligence, mcp_guide, memories, provenance, structure
from gateway.auth import PROJECT_HEADER, Authenticator, Session
from gateway.backends import Backends
from gateway.errors import invalid_request
from gateway.tool_profiles import ListedByProfile, out_of_profile, session_profile
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
        self,
        backends: Backends,
        auth: Authenticator,
        stdio_headers: Mapping[str, str] | None = None,
        profile: str = "default",
    ) -> None:
        self.backends = backends
        self.auth = auth
        self.stdio_headers = stdio_headers or {}
        # The server's tool profile (HM_MCP_TOOLS): a session without the profile header has it.
        self.profile = profile
        # Per handshake-era MCP session: its first workspace root (or None), forgotten with the session.
        self._roots: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()

    def headers_of(self, ctx: Context) -> dict[str, str]:
        """HTTP calls carry their token and project in headers; stdio has no headers, so its calls
        use the ones the process was started with (`hypermnesia mcp`)."""
        return self.request_headers(ctx.headers)

    def request_headers(self, raw: Mapping[str, str] | None) -> dict[str, str]:
        return {k.lower(): v for k, v in (raw if raw is not None else self.stdio_headers).items()}

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
    if metadata.output_schema is not None:
        # Generated titles ("Result", "memory_getOutput") say nothing a client uses.
        schema = {k: v for k, v in metadata.output_schema.items() if k != "title"}
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        if metadata.wrap_output:
            schema[FASTMCP_WRAP_MARK] = True
        metadata.output_schema = schema
    return metadata


def _is_missing(exc: HypermnesiaError) -> bool:
    return exc.code == grpc.StatusCode.NOT_FOUND


def _names_a_memory(request: BaseModel) -> bool:
    try:
        uuid.UUID(str(getattr(request, "memory_id", "")))
    except ValueError:
        return False
    return True


class ModelTool(Tool):
    """A tool that answers in this server's words: a call outside the session's tool profile is
    refused naming the profile that has it, and arguments that fail the request model read as
    REST's do (gateway.errors), not as pydantic's report."""

    admits: Callable[[Context, Mapping[str, Any]], str | None] = Field(exclude=True)

    async def run(
        self, arguments: dict[str, Any], context: Context[Any, Any], convert_result: bool = False
    ) -> Any:
        refusal = self.admits(context, arguments)
        if refusal is not None:
            raise ToolError(f"Error executing tool {self.name}: {refusal}")
        try:
            return await super().run(arguments, context, convert_result)
        except ToolError as exc:
            cause = exc.__cause__
            if not isinstance(cause, ValidationError):
                raise
            message = invalid_request(cause.errors(), "tools/list")
            # From the validation error still, which the SDK logs by field name only.
            raise ToolError(f"Error executing tool {self.name}: {message}") from cause


# What model_tool's `when_missing` defaults to: an id that names nothing is refused.
REFUSED = object()


def model_tool(
    kit: ToolKit,
    name: str,
    model: type[BaseModel],
    operation: Operation,
    *,
    description: str,
    returns: Any = dict[str, Any],
    answer: Callable[[Any], Any] = lambda out: out,
    when_missing: Any = REFUSED,
) -> Tool:
    """A tool whose parameters are `model`'s fields and whose call is `operation`; `answer` picks
    what the tool returns from the operation's result (of type `returns`). `when_missing` is the
    answer for a memory id that names nothing this session can read: unknown, another tenant's,
    or not an id at all, all answered alike (null for a lookup, as existing clients expect). A tool
    without one refuses such an id, saying whether it is unknown or not a UUID."""
    arguments: type[BaseModel] = type(
        f"{name}_arguments", (model, _ModelArguments), {"__doc__": model.__doc__}
    )
    metadata = _structured_output(name, returns)
    metadata.arg_model = arguments
    answers_missing = when_missing is not REFUSED

    async def run(request: BaseModel, ctx: Context, root: ListRootsResult | str | None) -> CallToolResult:
        try:
            session = await kit.session_of(ctx, root)
            if answers_missing and not _names_a_memory(request):
                value = when_missing
            else:
                value = answer(await operation(kit.backends, session, request))
        except HypermnesiaError as exc:
            if not (answers_missing and _is_missing(exc)):
                raise ToolError(exc.message) from exc
            value = when_missing
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
    if when_missing is None:
        description += " Null when none with that id is in your scopes."
    argument_names = {info.alias or key for key, info in arguments.model_fields.items()}

    def admits(ctx: Context, given: Mapping[str, Any]) -> str | None:
        try:
            profile = session_profile(kit.headers_of(ctx), kit.profile)
        except HypermnesiaError as exc:
            return exc.message
        return out_of_profile(profile, name, given)

    return ModelTool(
        admits=admits,
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
    kit = ToolKit(backends, auth, stdio_headers, settings.mcp_tools)
    m = memories
    # The drop-in result shapes where REST's differ: REST pages and envelopes (results + degraded,
    # memories + total, restored + memory), a tool answers the bare value, each search hit saying
    # itself what was missing from the answer; a missing memory is null, not an error.
    one_memory = dict[str, Any] | None
    many = list[dict[str, Any]]
    tools = [
        model_tool(
            kit,
            "memory_save",
            m.SaveMemory,
            m.save,
            description="Store a durable fact, preference or decision. Restating a stored one updates it "
            "(created: false); a near-duplicate that differs is listed under `similar`, to supersede.",
        ),
        model_tool(
            kit,
            "memory_search",
            m.SearchMemories,
            m.search,
            description="Recall memories by meaning and keywords: call it before answering about the user, the "
            "project or earlier decisions.",
            returns=many,
            answer=lambda out: out["results"],
        ),
        model_tool(
            kit,
            "memory_get",
            m.MemoryRef,
            m.get,
            description="Fetch one memory by id.",
            returns=one_memory,
            when_missing=None,
        ),
        model_tool(
            kit,
            "memory_update",
            m.UpdateMemory,
            m.update,
            description="Edit a memory in place: only the given fields change; the earlier text stays in "
            "its history. For a fact that changed, use memory_supersede.",
            returns=one_memory,
            when_missing=None,
        ),
        model_tool(
            kit,
            "memory_delete",
            m.MemoryRef,
            m.delete,
            description="Delete a memory for good (to retire a fact, use memory_supersede or memory_forget). "
            "`deleted` is false when none with that id is in your scopes.",
            when_missing={"deleted": False},
        ),
        model_tool(
            kit,
            "memory_forget",
            m.ForgetMemories,
            m.forget,
            description="Archive stale, unimportant memories (memory_restore undoes it); a dry run unless apply "
            "is true. `matched` counts them all, `memories` lists at most `limit`.",
        ),
        model_tool(
            kit,
            "memory_restore",
            m.MemoryRef,
            m.restore,
            description="Bring back a memory that memory_forget archived.",
            returns=one_memory,
            answer=lambda out: out["memory"],
            when_missing=None,
        ),
        model_tool(
            kit,
            "memory_supersede",
            m.SupersedeMemory,
            m.supersede,
            description="Replace a memory whose fact changed with the corrected one: the old version stays in "
            "its lineage, and every field not given is kept from it.",
        ),
        model_tool(
            kit,
            "task_decide",
            m.DecideTask,
            m.decide_task,
            description="Confirm (track it, no expiry) or dismiss (archive) a candidate task extracted from "
            "a conversation.",
        ),
        model_tool(
            kit,
            "memory_list",
            m.ListMemories,
            m.list_memories,
            description="A cheap index of memories, newest first: descriptions, no bodies (full=true for them). "
            "Scan it, then memory_get the one you need.",
            returns=many,
            answer=lambda out: out["memories"],
        ),
        model_tool(
            kit,
            "memory_lineage",
            m.MemoryRef,
            m.lineage,
            description="How a belief changed over time: the supersede chain through a memory and every "
            "version of its text, oldest first.",
        ),
        model_tool(
            kit,
            "memory_stats",
            m.MemoryStats,
            m.stats,
            description="Recall health: memories per scope, searches, empty-result rate, latency, recent misses.",
            answer=m.stats_answer,
        ),
        model_tool(
            kit,
            "memory_context",
            m.GetContext,
            m.assemble_context,
            description="Call it at the start of a task: procedures, project facts, the rules for `path` (a file "
            "you will edit), relevant memories and recent work, within token budgets.",
        ),
        model_tool(
            kit,
            "project_map",
            structure.ProjectMap,
            structure.project_map,
            description="The repository's hand-curated map (components, what each owns, its rules); call it "
            "when you start working in a repository.",
        ),
        model_tool(
            kit,
            "rules_for_path",
            structure.ResolvePath,
            structure.resolve,
            description="The rules to follow before editing a file: its component and the constraints that "
            "apply to it.",
        ),
        model_tool(
            kit,
            "memory_ask",
            intelligence.AskQuestion,
            intelligence.ask,
            description="Answer a question from memory as claims citing the memories they rest on; it abstains "
            "when nothing stored answers it.",
        ),
        model_tool(
            kit,
            "proposals_list",
            intelligence.ListProposals,
            intelligence.list_proposals,
            description="What consolidation proposes (distilled facts, revisions, retirements), each with its "
            "evidence; nothing is written until a proposal is approved.",
            returns=many,
            answer=lambda out: out["proposals"],
        ),
        model_tool(
            kit,
            "proposal_decide",
            intelligence.DecideProposal,
            intelligence.decide_proposal,
            description="Approve (write what it proposes) or reject (with a reason) a proposal; final.",
        ),
        model_tool(
            kit,
            "memory_evidence",
            intelligence.MemoryEvidence,
            intelligence.evidence,
            description="A memory's place in the evidence graph: what it rests on and what rests on it.",
            returns=one_memory,
            when_missing=None,
        ),
        model_tool(
            kit,
            "memory_provenance",
            provenance.MemoryProvenance,
            provenance.provenance,
            description="Why a memory exists: the raw-log records it came from and who wrote or approved what.",
            returns=one_memory,
            when_missing=None,
        ),
    ]
    guide = mcp_guide.Guide(settings, tool_names=[t.name for t in tools] + ["memory_usage_guide"])
    tools.append(
        model_tool(
            kit,
            "memory_usage_guide",
            mcp_guide.GuideRequest,
            guide,
            description="How to connect a client and a CLAUDE.md section, from this server's live settings; "
            "`warnings` names setup problems.",
        )
    )
    return MCPServer(
        name="hypermnesia",
        instructions=INSTRUCTIONS,
        version=__version__,
        tools=tools,
        middleware=[ListedByProfile(settings.mcp_tools, kit.request_headers)],
    )
