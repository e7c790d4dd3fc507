"""The MCP tool surface (the drop-in `memory_*` tools, task and structure tools, the usage guide),
built from the operation table (gateway.operations).

Each tool is an operation's request model and its function: the model is the tool's argument model,
so its input schema is the model's JSON schema (the same one the OpenAPI document shows), with a
flat, named parameter per field. Its description says in a sentence or two when to call it (the
function's docstring, REST's description, is the reference). Which tools and parameters a session
is shown is its profile's (gateway.tool_profiles). A tool of a rate-limited operation takes its
token from the caller's bucket first, before its arguments are read (gateway.limits).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import uuid
import warnings
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
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

from gateway.auth import PROJECT_HEADER, Authenticator, Identity, Session
from gateway.backends import Backends
from gateway.deliveries import DeliveryLog, session_id
from gateway.errors import invalid_request
from gateway.limits import RateLimiter, Refusal
from gateway.operations import OPERATIONS, REFUSED, Operation, OperationFn
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


class ToolKit:
    """What every tool needs: the backends and the session of a call."""

    def __init__(
        self,
        backends: Backends,
        auth: Authenticator,
        stdio_headers: Mapping[str, str] | None = None,
        profile: str = "default",
        limiter: RateLimiter | None = None,
        deliveries: DeliveryLog | None = None,
    ) -> None:
        self.backends = backends
        # What the tools deliver is recorded here (gateway.deliveries); a log that is off records nothing.
        self.deliveries = deliveries or DeliveryLog(backends, enabled=False)
        self.auth = auth
        self.stdio_headers = stdio_headers or {}
        # None over stdio: one local client's own process is not rate limited.
        self.limiter = limiter
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

    async def identity(self, ctx: Context) -> Identity:
        """The caller: an HTTP request's is resolved once and kept in its scope (the resolver of
        `root`, the rate limit and the session all ask); a stdio call's from the process's token."""
        scope = getattr(ctx.request_context.request, "scope", None)
        if scope is not None:
            return await self.auth.identity_of(scope)
        return await self.auth.identity(self.headers_of(ctx))

    async def refusal(self, ctx: Context, kind: str | None) -> Refusal | None:
        """Why the caller may not make this call now (its `kind` bucket is empty), or None."""
        if self.limiter is None or not self.limiter.limits_kind(kind):
            return None
        assert kind is not None
        try:
            identity = await self.identity(ctx)
        except HypermnesiaError:
            return None  # the call fails in session_of, naming the header to send
        return self.limiter.take(identity.principal.id, kind)

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
            await self.identity(ctx)
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
        return await self.auth.session(headers, root, await self.identity(ctx))


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
    """A tool that answers in this server's words: a call over the caller's rate limit is refused
    first, saying when to retry; a call outside the session's tool profile is refused naming the
    profile that has it, and arguments that fail the request model read as REST's do
    (gateway.errors), not as pydantic's report."""

    admits: Callable[[Context, Mapping[str, Any]], str | None] = Field(exclude=True)
    limited: Callable[[Context], Awaitable[Refusal | None]] = Field(exclude=True)

    async def run(
        self, arguments: dict[str, Any], context: Context[Any, Any], convert_result: bool = False
    ) -> Any:
        limited = await self.limited(context)
        if limited is not None:
            # The bare sentence, as REST's 429 says it: what the model reads as the tool's answer.
            answer = CallToolResult(content=[TextContent(type="text", text=limited.message)], is_error=True)
            return self.fn_metadata.convert_result(answer) if convert_result else answer
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


def model_tool(kit: ToolKit, operation: Operation, function: OperationFn) -> Tool:
    """The tool of `operation` (its `tool`): parameters are the request model's fields, the call is
    `function` (the operation's, bound). `when_missing` is the answer for a memory id that names
    nothing this session can read: unknown, another tenant's, or not an id at all, all answered
    alike (null for a lookup, as existing clients expect). A tool without one refuses such an id,
    saying whether it is unknown or not a UUID."""
    tool = operation.tool
    assert tool is not None
    name, model, description = tool.name, operation.request, tool.description
    answer, when_missing = tool.answer, tool.when_missing
    arguments: type[BaseModel] = type(
        f"{name}_arguments", (model, _ModelArguments), {"__doc__": model.__doc__}
    )
    metadata = _structured_output(name, tool.returns)
    metadata.arg_model = arguments
    answers_missing = when_missing is not REFUSED

    async def run(request: BaseModel, ctx: Context, root: ListRootsResult | str | None) -> CallToolResult:
        result: Any = None
        try:
            session = await kit.session_of(ctx, root)
            if answers_missing and not _names_a_memory(request):
                value = when_missing
            else:
                result = await function(kit.backends, session, request)
                value = answer(result)
        except HypermnesiaError as exc:
            if not (answers_missing and _is_missing(exc)):
                raise ToolError(exc.message) from exc
            value = when_missing
        # One text block holding the whole answer as JSON (what a model reads), and the same value
        # as structured content (what a program reads), wrapped as the output schema says.
        structured = {"result": value} if metadata.wrap_output else value
        text = json.dumps(value, ensure_ascii=False)
        if result is not None:
            # The text the client receives: the delivery log hashes its UTF-8 bytes.
            kit.deliveries.record(
                operation.delivers,
                name,
                "mcp",
                session,
                session_id(kit.headers_of(ctx), mcp=True),
                request,
                result,
                text.encode(),
            )
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
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

    async def limited(ctx: Context) -> Refusal | None:
        return await kit.refusal(ctx, operation.limit)

    return ModelTool(
        admits=admits,
        limited=limited,
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
    *,
    limiter: RateLimiter | None = None,
    operations: Sequence[Operation] = OPERATIONS,
    deliveries: DeliveryLog | None = None,
) -> MCPServer:
    """The MCP server of `operations`' tools. `limiter`: the rate limits (None over stdio);
    `deliveries`: the delivery log its tools record in (None: none)."""
    kit = ToolKit(backends, auth, stdio_headers, settings.mcp_tools, limiter, deliveries)
    served = [op for op in operations if op.tool is not None]
    names = [op.tool.name for op in served if op.tool is not None]
    tools = [model_tool(kit, op, op.bind(settings, names)) for op in served]
    return MCPServer(
        name="hypermnesia",
        instructions=INSTRUCTIONS,
        version=__version__,
        tools=tools,
        middleware=[ListedByProfile(settings.mcp_tools, kit.request_headers)],
    )
