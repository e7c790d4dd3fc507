"""The operation table: every operation the gateway serves, declared once.

An operation is its request model and its function (gateway.memories, .records, .structure,
.intelligence, .provenance, .viz, .mcp_guide), and how it is reached: its REST routes (method and
path; gateway.rest builds them), its MCP tool (name and a one-or-two-sentence description of when to
call it; gateway.mcp_tools builds it), its rate-limit kind (gateway.limits), the deadline its
service call needs beyond HM_RPC_TIMEOUT_S, and whether it delivers memories to an agent (`delivers`:
REST and MCP then record the exact text they send in the delivery log, gateway.deliveries). The OpenAPI document and the tool schemas both come from
the request model, so a REST body and its tool's arguments are the same schema.

No `from __future__ import annotations` here: the map's route adapter is read by FastAPI at runtime.
"""

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Path, Query, Request
from pydantic import BaseModel

from gateway import (
    deliveries,
    intelligence,
    mcp_guide,
    memories,
    provenance,
    records,
    shaping,
    structure,
    viz,
)
from gateway.auth import Session
from gateway.backends import Backends
from gateway.deliveries import Delivers
from hypermnesia.errors import InvalidArgument
from hypermnesia.settings import GatewaySettings
from hypermnesia.structure_map import MAX_SOURCE_BYTES

__all__ = [
    "OPERATIONS",
    "REFUSED",
    "SEARCH",
    "WRITE",
    "Operation",
    "OperationFn",
    "Route",
    "ServerBound",
    "Tool",
]

WRITE = "write"
SEARCH = "search"

OperationFn = Callable[[Backends, Session, Any], Awaitable[Any]]


@dataclass(frozen=True)
class ServerBound:
    """A function made when the server is built, from its settings and its tool names (the usage
    guide quotes both)."""

    build: Callable[[GatewaySettings, list[str]], OperationFn]


@dataclass(frozen=True)
class Route:
    """A REST route. The request's fields named in the path (`{memory_id}`; `{record_id:uuid}` for a
    UUID) come from the URL; `fixed` fields are set by the route itself; the others are the JSON
    body (the query string for a GET). `optional_body`: a route that may be sent without a body.
    `adapter`: a route whose request is not JSON (FastAPI reads its parameters; it returns the
    request). `note` is added to the function's docstring in the OpenAPI document."""

    method: str
    path: str
    fixed: Mapping[str, Any] = field(default_factory=dict)
    optional_body: bool = False
    adapter: Callable[..., Awaitable[BaseModel]] | None = None
    note: str = ""


# What a Tool's `when_missing` defaults to: an id that names nothing is refused.
REFUSED = object()


@dataclass(frozen=True)
class Tool:
    """An MCP tool. `answer` picks what the tool returns from the operation's result (of type
    `returns`); `when_missing` is the answer for a memory id that names nothing this session can
    read (REFUSED: such an id is an error)."""

    name: str
    description: str
    returns: Any = dict[str, Any]
    answer: Callable[[Any], Any] = lambda out: out
    when_missing: Any = REFUSED


@dataclass(frozen=True)
class Operation:
    """One operation. `limit`: the rate-limit bucket it takes from (WRITE, SEARCH, or None for reads
    by id and listings). `timeout_s`: its service call's deadline when longer than HM_RPC_TIMEOUT_S,
    a number or a function of the request. `delivers`: what of its result an agent is given, for
    the delivery log (None: nothing is recorded)."""

    request: type[BaseModel]
    function: OperationFn | ServerBound
    rest: tuple[Route, ...] = ()
    tool: Tool | None = None
    limit: str | None = None
    timeout_s: float | Callable[[Any], float] | None = None
    delivers: Delivers | None = None

    def bind(self, settings: GatewaySettings, tool_names: list[str]) -> OperationFn:
        """The function as this server calls it, its deadline applied."""
        function = self.function
        bound = function.build(settings, tool_names) if isinstance(function, ServerBound) else function
        timeout = self.timeout_s
        if timeout is None:
            return bound

        async def within_deadline(backends: Backends, session: Session, request: Any) -> Any:
            seconds = timeout(request) if callable(timeout) else timeout
            return await bound(backends.within(seconds), session, request)

        return within_deadline


_JSON_TYPES = ("application/json", "+json")


async def _map_text(http: Request) -> str:
    """The body as map text: YAML as sent, or JSON (checked as JSON, so its errors read as JSON errors)."""
    raw = await http.body()
    # The one limit checked before the wire: a body this large would not fit in a gRPC message.
    if len(raw) > MAX_SOURCE_BYTES:
        raise InvalidArgument(f"the map is larger than {MAX_SOURCE_BYTES:,} bytes; split it")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument("the body is not UTF-8 text; send the map file encoded as UTF-8") from exc
    content_type = http.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type.endswith(_JSON_TYPES):
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidArgument(
                f"the body is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from exc
        # JSON is YAML, except that YAML refuses tab indentation; outside strings (where JSON
        # escapes them) tabs are only whitespace, so this keeps every line number.
        text = text.replace("\t", " ")
    return text


_SOURCE_NAME = structure.LoadMap.model_fields["source_name"]


async def _map_load(
    repo: Annotated[str, Path(description=structure.LoadMap.model_fields["repo"].description)],
    http: Request,
    name: Annotated[str, Query(description=_SOURCE_NAME.description)] = _SOURCE_NAME.default,
) -> structure.LoadMap:
    """POST /map/{repo}: the body is the map file itself, YAML or JSON, not a JSON request."""
    return structure.LoadMap(repo=repo, source=await _map_text(http), source_name=name)


def _usage_guide(settings: GatewaySettings, tool_names: list[str]) -> OperationFn:
    return mcp_guide.Guide(settings, tool_names)


# An import embeds every record before it answers: time in proportion to its size.
IMPORT_SECONDS_PER_RECORD = 1.0


def _import_seconds(request: records.ImportRecords) -> float:
    return 30 + IMPORT_SECONDS_PER_RECORD * len(request.records)


def _results(out: dict[str, Any]) -> Any:
    return out["results"]


def _memories(out: dict[str, Any]) -> Any:
    return out["memories"]


def _memory(out: dict[str, Any]) -> Any:
    return out["memory"]


def _proposals(out: dict[str, Any]) -> Any:
    return out["proposals"]


# The drop-in result shapes where REST's differ: REST pages and envelopes (results + degraded,
# memories + total, restored + memory), a tool answers the bare value, each search hit saying
# itself what was missing from the answer; a missing memory is null, not an error.
ONE_MEMORY = dict[str, Any] | None
MANY = list[dict[str, Any]]
MEMORY = "/memories/{memory_id}"

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        memories.SaveMemory,
        memories.save,
        rest=(Route("POST", "/memories"),),
        tool=Tool(
            "memory_save",
            "Store a durable fact, preference or decision. Restating a stored one updates it "
            "(created: false); a near-duplicate that differs is listed under `similar`, to supersede.",
        ),
        limit=WRITE,
    ),
    Operation(
        memories.SearchMemories,
        memories.search,
        rest=(Route("POST", "/memories/search"),),
        tool=Tool(
            "memory_search",
            "Recall memories by meaning and keywords: call it before answering about the user, the "
            "project or earlier decisions.",
            returns=MANY,
            answer=_results,
        ),
        limit=SEARCH,
        delivers=Delivers(deliveries.items_of_search),
    ),
    Operation(
        memories.MemoryRef,
        memories.get,
        rest=(Route("GET", MEMORY),),
        tool=Tool("memory_get", "Fetch one memory by id.", returns=ONE_MEMORY, when_missing=None),
    ),
    Operation(
        memories.UpdateMemory,
        memories.update,
        rest=(Route("PATCH", MEMORY),),
        tool=Tool(
            "memory_update",
            "Edit a memory in place: only the given fields change; the earlier text stays in "
            "its history. For a fact that changed, use memory_supersede.",
            returns=ONE_MEMORY,
            when_missing=None,
        ),
        limit=WRITE,
        # A new text is embedded before it is written.
        timeout_s=60,
    ),
    Operation(
        memories.MemoryRef,
        memories.delete,
        rest=(Route("DELETE", MEMORY),),
        tool=Tool(
            "memory_delete",
            "Delete a memory for good (to retire a fact, use memory_supersede or memory_forget). "
            "`deleted` is false when none with that id is in your scopes.",
            when_missing={"deleted": False},
        ),
        limit=WRITE,
    ),
    Operation(
        memories.ForgetMemories,
        memories.forget,
        rest=(Route("POST", "/memories/forget"),),
        tool=Tool(
            "memory_forget",
            "Archive stale, unimportant memories (memory_restore undoes it); a dry run unless apply "
            "is true. `matched` counts them all, `memories` lists at most `limit`.",
        ),
        limit=WRITE,
    ),
    Operation(
        memories.MemoryRef,
        memories.restore,
        rest=(Route("POST", MEMORY + "/restore"),),
        tool=Tool(
            "memory_restore",
            "Bring back a memory that memory_forget archived.",
            returns=ONE_MEMORY,
            answer=_memory,
            when_missing=None,
        ),
        limit=WRITE,
    ),
    Operation(memories.MemoryRef, memories.archive, rest=(Route("POST", MEMORY + "/archive"),), limit=WRITE),
    Operation(
        memories.SupersedeMemory,
        memories.supersede,
        rest=(Route("POST", MEMORY + "/supersede"),),
        tool=Tool(
            "memory_supersede",
            "Replace a memory whose fact changed with the corrected one: the old version stays in "
            "its lineage, and every field not given is kept from it.",
        ),
        limit=WRITE,
    ),
    Operation(
        memories.DecideTask,
        memories.decide_task,
        rest=(Route("POST", "/tasks/{task_id}/{decision}"),),
        tool=Tool(
            "task_decide",
            "Confirm (track it, no expiry) or dismiss (archive) a candidate task extracted from "
            "a conversation.",
        ),
        limit=WRITE,
    ),
    Operation(
        memories.ListMemories,
        memories.list_memories,
        rest=(Route("GET", "/memories"),),
        tool=Tool(
            "memory_list",
            "A cheap index of memories, newest first: descriptions, no bodies (full=true for them). "
            "Scan it, then memory_get the one you need.",
            returns=MANY,
            answer=_memories,
        ),
    ),
    Operation(
        memories.MemoryRef,
        memories.lineage,
        rest=(Route("GET", MEMORY + "/lineage"),),
        tool=Tool(
            "memory_lineage",
            "How a belief changed over time: the supersede chain through a memory and every "
            "version of its text, oldest first.",
        ),
    ),
    Operation(
        memories.MemoryStats,
        memories.stats,
        rest=(Route("GET", "/stats"),),
        tool=Tool(
            "memory_stats",
            "Recall health: memories per scope, searches, empty-result rate, latency, recent misses.",
            answer=shaping.stats_answer,
        ),
    ),
    Operation(
        memories.GetContext,
        memories.assemble_context,
        rest=(Route("POST", "/records/context"),),
        tool=Tool(
            "memory_context",
            "Call it at the start of a task: procedures, project facts, the rules for `path` (a file "
            "you will edit), relevant memories and recent work, within token budgets.",
        ),
        limit=SEARCH,
        delivers=Delivers(deliveries.items_of_context),
    ),
    # The raw records (REST only).
    Operation(
        records.AppendRecord,
        records.append_record,
        rest=(Route("POST", "/records"),),
        limit=WRITE,
        timeout_s=60,
    ),
    Operation(
        records.ImportRecords,
        records.import_records,
        rest=(Route("POST", "/records/import"),),
        limit=WRITE,
        timeout_s=_import_seconds,
    ),
    Operation(
        records.QueryRecords,
        records.query_records,
        rest=(Route("GET", "/records/query"), Route("POST", "/records/query")),
    ),
    # A rebuild replays the whole raw log.
    Operation(
        records.RebuildRecords,
        records.rebuild,
        rest=(Route("POST", "/records/rebuild"),),
        limit=WRITE,
        timeout_s=3600,
    ),
    Operation(
        records.StateObject,
        records.state,
        rest=(
            Route("GET", "/records/state/{kind}/{key}", fixed={"history": False}),
            Route("GET", "/records/state/{kind}/{key}/history", fixed={"history": True}),
        ),
    ),
    # `:uuid` so that the fixed paths under /records (context, query, state) never match these.
    Operation(records.RecordRef, records.get_record, rest=(Route("GET", "/records/{record_id:uuid}"),)),
    Operation(records.RecordRef, records.lineage, rest=(Route("GET", "/records/{record_id:uuid}/lineage"),)),
    Operation(
        records.RecordRef, records.derivations, rest=(Route("GET", "/records/{record_id:uuid}/derivations"),)
    ),
    # The project map.
    Operation(
        structure.ProjectMap,
        structure.project_map,
        rest=(Route("GET", "/map/{repo}"),),
        tool=Tool(
            "project_map",
            "The repository's hand-curated map (components, what each owns, its rules); call it "
            "when you start working in a repository.",
        ),
        delivers=Delivers(deliveries.items_of_map),
    ),
    Operation(
        structure.ResolvePath,
        structure.resolve,
        rest=(Route("GET", "/map/{repo}/resolve"),),
        tool=Tool(
            "rules_for_path",
            "The rules to follow before editing a file: its component and the constraints that apply to it.",
        ),
        delivers=Delivers(deliveries.items_of_rules),
    ),
    Operation(
        structure.LoadMap,
        structure.load,
        rest=(
            Route("POST", "/map/{repo}", adapter=_map_load, note="The body is the map file (YAML or JSON)."),
        ),
        limit=WRITE,
    ),
    # Consolidation and the Dialectic.
    Operation(
        intelligence.AskQuestion,
        intelligence.ask,
        rest=(Route("POST", "/dialectic/ask"),),
        tool=Tool(
            "memory_ask",
            "Answer a question from memory as claims citing the memories they rest on; it abstains "
            "when nothing stored answers it.",
        ),
        limit=SEARCH,
        # An answer may wait on a search and, when one is configured, on an LLM with retries.
        timeout_s=120,
        delivers=Delivers(deliveries.items_of_answer),
    ),
    Operation(
        intelligence.ListProposals,
        intelligence.list_proposals,
        rest=(Route("GET", "/proposals"),),
        tool=Tool(
            "proposals_list",
            "What consolidation proposes (distilled facts, revisions, retirements), each with its "
            "evidence; nothing is written until a proposal is approved.",
            returns=MANY,
            answer=_proposals,
        ),
    ),
    Operation(
        intelligence.DecideProposal,
        intelligence.decide_proposal,
        # The body is optional: an approval needs nothing, and a rejection without a reason is
        # answered by the service with what to send.
        rest=(
            Route(
                "POST", "/proposals/{proposal_id}/approve", fixed={"decision": "approve"}, optional_body=True
            ),
            Route(
                "POST",
                "/proposals/{proposal_id}/reject",
                fixed={"decision": "reject"},
                optional_body=True,
                note='The body is {"reason": "why"}.',
            ),
        ),
        tool=Tool(
            "proposal_decide",
            "Approve (write what it proposes) or reject (with a reason) a proposal; final.",
        ),
        limit=WRITE,
        # Approving embeds the new memory before it is written.
        timeout_s=60,
    ),
    Operation(
        intelligence.MemoryEvidence,
        intelligence.evidence,
        rest=(Route("GET", MEMORY + "/evidence"),),
        tool=Tool(
            "memory_evidence",
            "A memory's place in the evidence graph: what it rests on and what rests on it.",
            returns=ONE_MEMORY,
            when_missing=None,
        ),
    ),
    Operation(
        provenance.MemoryProvenance,
        provenance.provenance,
        rest=(Route("GET", MEMORY + "/provenance"),),
        tool=Tool(
            "memory_provenance",
            "Why a memory exists: the raw-log records it came from and who wrote or approved what.",
            returns=ONE_MEMORY,
            when_missing=None,
        ),
    ),
    Operation(
        deliveries.ListDeliveries,
        deliveries.list_deliveries,
        rest=(Route("GET", "/deliveries"),),
        tool=Tool(
            "memory_deliveries",
            "What agents were given (searches, context blocks, rules, answers) by session or time, "
            "with the hash of each text sent and every memory's state now.",
        ),
    ),
    # The 3D map reads up to 5,000 memories and their edges: as costly as a search.
    Operation(viz.VizGraph, viz.graph, rest=(Route("GET", "/viz/graph"),), limit=SEARCH),
    Operation(
        mcp_guide.GuideRequest,
        ServerBound(_usage_guide),
        tool=Tool(
            "memory_usage_guide",
            "How to connect a client and a CLAUDE.md section, from this server's live settings; "
            "`warnings` names setup problems.",
        ),
    ),
)
