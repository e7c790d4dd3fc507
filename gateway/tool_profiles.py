"""Tool profiles: which MCP tools, and which of their parameters, a session is shown.

An agent reads every listed tool's schema on every session, so the list is what it pays in context
before it does anything. The default profile lists what an agent needs in its loop: seed 001's ten
tools and memory_context, memory_ask, memory_supersede, with memory_search's advanced parameters
left out. `full` lists every tool with every parameter. HM_MCP_TOOLS picks the server's profile;
a session picks its own with the X-Hypermnesia-Tools header. A tool or parameter outside the
session's profile is not listed, and a call that names one is refused, naming the profile that has
it (gateway.mcp_tools checks calls, ListedByProfile trims tools/list).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, get_args

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from hypermnesia.errors import InvalidArgument
from hypermnesia.settings import McpToolProfile

__all__ = [
    "DEFAULT",
    "DEFAULT_TOOLS",
    "FULL",
    "FULL_ONLY_PARAMETERS",
    "PROFILES",
    "PROFILE_HEADER",
    "ListedByProfile",
    "out_of_profile",
    "session_profile",
]

PROFILES: tuple[str, ...] = get_args(McpToolProfile)
DEFAULT, FULL = "default", "full"
PROFILE_HEADER = "x-hypermnesia-tools"

DEFAULT_TOOLS = frozenset(
    {
        # Seed 001's drop-in tools.
        "memory_search",
        "memory_save",
        "memory_update",
        "memory_get",
        "memory_list",
        "memory_delete",
        "memory_forget",
        "memory_restore",
        "memory_stats",
        "memory_usage_guide",
        # What an agent calls in its loop besides: the context at the start of a task, a question
        # answered with citations, a fact that changed.
        "memory_context",
        "memory_ask",
        "memory_supersede",
    }
)

# Parameters a tool of the default profile takes only in the full profile: memory_search's
# filters and ranking controls beyond seed 001's (query, scope, tags, k and the two gates), and
# the same controls of memory_list, memory_context and memory_ask; the decay class and kind of a
# memory an update or supersede changes (a supersede keeps the replaced memory's kind).
FULL_ONLY_PARAMETERS: dict[str, frozenset[str]] = {
    "memory_search": frozenset(
        {
            "topic",
            "topic_only",
            "fusion",
            "kinds",
            "types",
            "repo",
            "since",
            "until",
            "as_of",
            "mode",
            "include_archived",
            "rerank",
            "include_stale",
            "depth",
            "group_by",
        }
    ),
    "memory_list": frozenset({"as_of", "kind", "type", "include_stale"}),
    "memory_context": frozenset({"repo", "mode", "thread_id", "budgets", "include_stale", "depth", "as_of"}),
    "memory_ask": frozenset({"depth"}),
    "memory_update": frozenset({"decay_class"}),
    "memory_supersede": frozenset({"kind"}),
}

_HOW = (
    f"set HM_MCP_TOOLS={FULL} on the server, or send the header X-Hypermnesia-Tools: {FULL} "
    "(then reconnect: clients keep the tool list of their connection)"
)


def session_profile(headers: Mapping[str, str], server_profile: str) -> str:
    """The profile a session asked for in its header (lower-cased names), else the server's."""
    asked = headers.get(PROFILE_HEADER, "").strip().lower()
    if not asked:
        return server_profile
    if asked not in PROFILES:
        raise InvalidArgument(
            f"X-Hypermnesia-Tools is {asked[:40]!r}; send {DEFAULT} (the tools of an agent's loop) or "
            f"{FULL} (every tool and parameter), or leave it out for the server's {server_profile}"
        )
    return asked


def out_of_profile(profile: str, tool: str, arguments: Mapping[str, Any]) -> str | None:
    """Why a call is outside the session's profile (a sentence naming the profile that has what it
    names), or None when the profile has the tool and every parameter given."""
    if profile == FULL:
        return None
    if tool not in DEFAULT_TOOLS:
        return f"{tool} is in the {FULL} tool profile, not this session's {profile} one: {_HOW}"
    advanced = sorted(FULL_ONLY_PARAMETERS.get(tool, frozenset()) & set(arguments))
    if advanced:
        names = ", ".join(advanced)
        return (
            f"{names}: {'a parameter' if len(advanced) == 1 else 'parameters'} of {tool} in the {FULL} "
            f"tool profile, not this session's {profile} one; leave {'it' if len(advanced) == 1 else 'them'} "
            f"out, or {_HOW}"
        )
    return None


def _listed(tool: dict[str, Any]) -> dict[str, Any]:
    """A default-profile tool as that profile lists it: without its full-only parameters."""
    hidden = FULL_ONLY_PARAMETERS.get(tool["name"])
    if not hidden:
        return tool
    schema = dict(tool["inputSchema"])
    schema["properties"] = {k: v for k, v in schema["properties"].items() if k not in hidden}
    return {**tool, "inputSchema": schema}


class ListedByProfile:
    """Server middleware: trims tools/list to the session's profile. `headers_of` gives a request's
    headers (an HTTP request's own, or a stdio process's)."""

    def __init__(
        self, server_profile: str, headers_of: Callable[[Mapping[str, str] | None], Mapping[str, str]]
    ) -> None:
        self.server_profile = server_profile
        self.headers_of = headers_of

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/list":
            return await call_next(ctx)
        try:
            profile = session_profile(
                self.headers_of(getattr(ctx.request, "headers", None)), self.server_profile
            )
        except InvalidArgument as exc:
            raise MCPError(code=INVALID_PARAMS, message=exc.message) from exc
        result = await call_next(ctx)
        if profile == FULL or not isinstance(result, dict):
            return result
        tools = [_listed(t) for t in result.get("tools", []) if t.get("name") in DEFAULT_TOOLS]
        return {**result, "tools": tools}
