"""The memory operations (the memory_* tools and their REST routes), one request model and one
function per operation: the function picks the session's scopes, builds the proto request, calls the
service and shapes the answer (gateway.shaping)."""

from __future__ import annotations

from typing import Any

from gateway.auth import Session
from gateway.backends import Backends
from gateway.fields import IsoTime, Request, field
from gateway.shaping import (
    archived_json,
    caller,
    context_json,
    deleted_json,
    forget_json,
    lineage_json,
    list_json,
    memory_json,
    restored_json,
    save_json,
    search_json,
    stats_json,
    superseded_json,
    to_proto,
    updated_json,
)
from hypermnesia.errors import NotFound
from hypermnesia.fusions import FUSIONS
from hypermnesia.kinds import DECAY_CLASSES, DEFAULT_IMPORTANCE, DEFAULT_TYPE
from hypermnesia.recall_depth import DEPTHS
from hypermnesia.scopes import permits
from hypermnesia.v1 import curation_pb2, retrieval_pb2
from hypermnesia.validation import (
    IMPORTANCE_RANGE,
    KINDS,
    MAX_CONTENT_CHARS,
    MAX_DESCRIPTION_CHARS,
    MAX_FORGET_LIMIT,
    MAX_LAYER_BUDGET,
    MAX_LIST_LIMIT,
    MAX_METADATA_BYTES,
    MAX_QUERY_CHARS,
    MAX_REF_CHARS,
    MAX_SCOPE_CHARS,
    MAX_STATS_DAYS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    MAX_TYPE_CHARS,
)

__all__ = [
    "DEFAULT_K",
    "DecideTask",
    "ForgetMemories",
    "GetContext",
    "ListMemories",
    "MemoryRef",
    "MemoryStats",
    "SaveMemory",
    "SearchMemories",
    "SupersedeMemory",
    "UpdateMemory",
    "archive",
    "assemble_context",
    "decide_task",
    "delete",
    "forget",
    "get",
    "lineage",
    "list_memories",
    "restore",
    "save",
    "search",
    "stats",
    "supersede",
    "update",
]

DEFAULT_K = 10
GROUP_BY = ("thread",)
_LOW, _HIGH = IMPORTANCE_RANGE
# The values of the enum-like fields, stated as JSON Schema enums (the services refuse others).
MODES = ("answer", "manager")
TASK_DECISIONS = ("confirm", "dismiss")

# The field texts several requests share.
_SCOPE_TO_WRITE = "Where the memory lives, e.g. 'user:alice' or 'shared'; default: your project."
_SCOPE_OF_CORRECTION = (
    "Where the correction lives; defaults to the replaced memory's scope, the only one allowed."
)
_AS_OF = (
    "Answer from the memories as they were at this past instant (ISO 8601): texts, versions and "
    "supersedes current then; `purged` lists ids whose text was erased since."
)
_INCLUDE_STALE = (
    "Include stale conclusions (a premise they rest on changed since), flagged stale with stale_because."
)
_DEPTH = (
    "Recall depth: explicit (stored memories only), derived (plus derived conclusions; the default), "
    "premises (plus the direct evidence of each derived result, listed after the results with "
    "via.premise_of), ancestry (evidence of evidence, at most 3 hops and 20 rows), or auto (picks one "
    "from what was found and says why in depth_reason)."
)
_SCOPE_TO_READ = "Only this scope (e.g. 'shared'); default: your project plus your token's granted scopes."
_TAGS_TO_WRITE = f"Labels for filtering, each 1-{MAX_TAG_CHARS} printable characters."
_TAGS_TO_MATCH = "Only memories carrying every one of these tags."
_METADATA = f"Any JSON object kept with the memory (at most {MAX_METADATA_BYTES:,} bytes as JSON)."
_IMPORTANCE = f"{_LOW:g} (trivial) to {_HIGH:g} (critical): ranks higher and is forgotten later."
_TYPE = "A free label such as 'fact', 'preference' or 'decision'."
_MEMORY_ID = "The memory's id (a UUID)."


def _scopes(session: Session, scope: str | None) -> list[str]:
    """The named scope, or everything this session may read: its project plus the token's grants."""
    if scope is not None:
        return [scope]
    return session.readable_scopes()


class SaveMemory(Request):
    content: str = field("The fact itself.", max_length=MAX_CONTENT_CHARS)
    description: str = field(
        "A one-line summary, used for ranking, de-duplication and listing.",
        "",
        max_length=MAX_DESCRIPTION_CHARS,
    )
    scope: str | None = field(_SCOPE_TO_WRITE, None, max_length=MAX_SCOPE_CHARS)
    # The drop-in defaults, stated in the schema so a client sees what an omitted field means.
    type: str = field(_TYPE, DEFAULT_TYPE, max_length=MAX_TYPE_CHARS)
    tags: list[str] | None = field(_TAGS_TO_WRITE, None, max_items=MAX_TAGS)
    metadata: dict[str, Any] | None = field(_METADATA, None)
    importance: float = field(_IMPORTANCE, DEFAULT_IMPORTANCE, ge=_LOW, le=_HIGH)
    kind: str | None = field("The memory's kind; default semantic.", None, enum=KINDS)


def _save_request(session: Session, request: SaveMemory) -> curation_pb2.SaveRequest:
    return to_proto(
        curation_pb2.SaveRequest(),
        request,
        caller=caller(session),
        # Only an omitted scope means the session's project: an empty one is sent as given, for
        # curation to refuse ("scope is empty"), not quietly saved somewhere the caller did not name.
        scope=session.project_scope if request.scope is None else request.scope,
    )


async def save(backends: Backends, session: Session, request: SaveMemory) -> dict[str, Any]:
    """Store a memory. A restatement of a near-duplicate updates it instead of inserting (created:
    false, with the previous version as `replaced`); a near-duplicate that differs in a number,
    date, identifier, name or negation is a different fact: the save is new and names it under
    `similar` (id, content, differences such as "100 -> 1000") so you can supersede it. content is
    the fact; description a one-line summary used for ranking and listing; scope defaults to this
    session's project."""
    return save_json(await backends.call(backends.curation.Save, _save_request(session, request)))


class SearchMemories(Request):
    query: str = field("What you are looking for, in words.", max_length=MAX_QUERY_CHARS)
    scope: str | None = field(_SCOPE_TO_READ, None, max_length=MAX_SCOPE_CHARS)
    tags: list[str] | None = field(_TAGS_TO_MATCH, None, max_items=MAX_TAGS)
    k: int = field("How many results at most (HM_SEARCH_MAX_K caps it).", DEFAULT_K, ge=1)
    min_similarity: float | None = field(
        "Drop hits below this cosine unless they hold every query word; 0 disables. Default: "
        "HM_SEARCH_MIN_SIMILARITY.",
        None,
        ge=0,
        le=1,
    )
    relative_cutoff: float | None = field(
        "Drop hits this far below the best hit's cosine unless they hold every query word; 0 disables. "
        "Default: HM_SEARCH_RELATIVE_CUTOFF.",
        None,
        ge=0,
        le=1,
    )
    topic: str | None = field(
        "The active topic: memories filed under it (a record's topic_id) rank higher.",
        None,
        max_length=MAX_REF_CHARS,
    )
    topic_only: bool = field("Return only memories filed under `topic`.", False)
    fusion: str | None = field(
        "How the semantic and keyword legs combine, or one leg alone (dense, bm25). Unset: the server's "
        "HM_FUSION.",
        None,
        enum=FUSIONS,
    )
    kinds: list[str] | None = field("Only memories of these kinds.", None, enum=KINDS)
    types: list[str] | None = field("Only memories of these types.", None)
    repo: str | None = field("Only memories of this repository.", None)
    since: IsoTime | None = field("Only memories created at or after this time (ISO 8601).", None)
    until: IsoTime | None = field("Only memories created before this time (ISO 8601).", None)
    as_of: IsoTime | None = field(_AS_OF, None)
    mode: str | None = field(
        "answer (relevance first, the default) or manager (recency, open tasks first).", None, enum=MODES
    )
    include_archived: bool = field("Include forgotten (archived) memories.", False)
    rerank: bool = field("Re-score the top results with the cross-encoder, when one is configured.", False)
    include_stale: bool = field(_INCLUDE_STALE, False)
    depth: str = field(_DEPTH, "derived", enum=DEPTHS)
    group_by: str | None = field(
        "thread: the k best conversation threads instead of k memories, each with its best turns "
        "(`turns`, at most 3) under the thread's `thread_id`, `scope` and best `score`; a memory in no "
        "thread is a group of its own.",
        None,
        enum=GROUP_BY,
    )


async def search(backends: Backends, session: Session, request: SearchMemories) -> dict[str, Any]:
    """Recall memories by meaning (hybrid semantic + keyword). Each result carries `similarity`
    (cosine 0-1), the blended `score` and the signals in it (`entity_overlap`, `active_task`,
    `topic_match`; `time_match` when a date the query names, e.g. "last Tuesday", holds the
    memory's event time), and `degraded` when part of the search was unavailable. Searches this project
    plus shared scopes by default. `topic` prefers memories filed under that topic; with
    `topic_only` it returns only those. `depth` says how far to follow the evidence of derived
    conclusions (evidence rows come after the results, each with `via.premise_of`); when a depth
    is named, the answer says the depth used and why (`depth`, `depth_reason`). Stale conclusions (a premise changed)
    are left out unless `include_stale`, then flagged `stale` with `stale_because`."""
    message = to_proto(
        retrieval_pb2.SearchRequest(), request, caller=caller(session), scopes=_scopes(session, request.scope)
    )
    response = await backends.call(backends.retrieval.Search, message)
    return search_json(
        response, with_depth="depth" in request.model_fields_set, by_thread=request.group_by == "thread"
    )


class MemoryRef(Request):
    memory_id: str = field(_MEMORY_ID)


async def get(backends: Backends, session: Session, request: MemoryRef) -> dict[str, Any]:
    """Fetch one memory by id."""
    message = retrieval_pb2.GetRequest(caller=caller(session), id=request.memory_id)
    return memory_json(await backends.call(backends.retrieval.Get, message))


async def lineage(backends: Backends, session: Session, request: MemoryRef) -> dict[str, Any]:
    """How a belief changed over time. `lineage`: the supersede chain through a memory, oldest
    first (the memories still stored). `versions`: every version of every memory on that chain,
    oldest first, numbered from 1: the record that created each memory and each change in place
    (operation update: memory_update, or a save merged into it, reason "dedupe"), with the text as
    of then (content, description), its time (`at`), author, and the fields an update `changed`.
    A version whose text was erased says `text: "purged"` with null content and description (so
    does a deleted memory's, `text: "deleted"`)."""
    message = retrieval_pb2.GetRequest(caller=caller(session), id=request.memory_id)
    response = await backends.call(backends.retrieval.Lineage, message)
    return lineage_json(response)


async def delete(backends: Backends, session: Session, request: MemoryRef) -> dict[str, Any]:
    """Delete a memory by id (hard: it leaves every read; only the audit log keeps a tombstone).
    `deleted` is false when there was no such memory in your scopes (e.g. deleted already)."""
    message = curation_pb2.MemoryRequest(caller=caller(session), id=request.memory_id)
    try:
        await backends.call(backends.curation.Delete, message)
    except NotFound:
        # Deleting what is not there answers, it does not fail; a retried delete is safe.
        return deleted_json(False)
    return deleted_json(True)


async def archive(backends: Backends, session: Session, request: MemoryRef) -> dict[str, Any]:
    """Archive (forget) one memory by id: soft, like memory_forget's sweep, it leaves search, get
    and list (list's include_archived shows it) and restore brings it back. Unlike the sweep it
    spares no core or important memory: it is the one you named."""
    message = curation_pb2.MemoryRequest(caller=caller(session), id=request.memory_id)
    return archived_json(await backends.call(backends.curation.Archive, message))


async def restore(backends: Backends, session: Session, request: MemoryRef) -> dict[str, Any]:
    """Un-archive a forgotten memory (the inverse of memory_forget); refreshes its access time."""
    message = curation_pb2.MemoryRequest(caller=caller(session), id=request.memory_id)
    return restored_json(await backends.call(backends.curation.Restore, message))


class ListMemories(Request):
    scope: str | None = field(_SCOPE_TO_READ, None, max_length=MAX_SCOPE_CHARS)
    tags: list[str] | None = field(_TAGS_TO_MATCH, None, max_items=MAX_TAGS)
    limit: int = field("How many memories at most in this page.", 50, nonzero=True, le=MAX_LIST_LIMIT)
    include_archived: bool = field("Include forgotten (archived) memories, to review them.", False)
    full: bool = field("Include each memory's content (the body), not only its description.", False)
    offset: int = field("Skip this many memories (the next page).", 0, ge=0)
    as_of: IsoTime | None = field("List what was true at this instant (ISO 8601).", None)
    kind: list[str] | None = field("Only memories of these kinds.", None, enum=KINDS)
    type: list[str] | None = field("Only memories of these types.", None)
    include_stale: bool = field(_INCLUDE_STALE, False)


async def list_memories(backends: Backends, session: Session, request: ListMemories) -> dict[str, Any]:
    """A cheap index of memories (newest first): descriptions and metadata without bodies; pass
    full=true for bodies, include_archived=true to review forgotten ones, as_of for what was
    true at an instant. Scan the descriptions, then memory_get the one you need."""
    message = to_proto(
        retrieval_pb2.ListRequest(),
        request,
        caller=caller(session),
        scopes=_scopes(session, request.scope),
        kinds=request.kind,
        types=request.type,
    )
    response = await backends.call(backends.retrieval.List, message)
    return list_json(response, full=request.full, offset=request.offset)


class MemoryStats(Request):
    scope: str | None = field(_SCOPE_TO_READ, None, max_length=MAX_SCOPE_CHARS)
    days: int = field(
        "The window of search history to report on, in days.", 7, nonzero=True, le=MAX_STATS_DAYS
    )


async def stats(backends: Backends, session: Session, request: MemoryStats) -> dict[str, Any]:
    """Recall health: memories per scope, search volume, empty-result rate, average hits and top
    score, latency percentiles and the recent queries that found nothing."""
    message = to_proto(
        retrieval_pb2.StatsRequest(), request, caller=caller(session), scopes=_scopes(session, request.scope)
    )
    response = await backends.call(backends.retrieval.Stats, message)
    return stats_json(response)


class GetContext(Request):
    query: str = field(
        "What you are about to do or were asked; empty at session start.", "", max_length=MAX_QUERY_CHARS
    )
    path: str = field("A file you are about to edit, relative to the repository root: adds its rules.", "")
    repo: str | None = field(
        "The repository whose map and rules apply; defaults to this session's project ('' for none).",
        None,
    )
    mode: str = field("auto: manager without a query, else answer.", "auto", enum=(*MODES, "auto"))
    thread_id: str = field(
        "The conversation whose recent turns fill the last layer.", "", max_length=MAX_REF_CHARS
    )
    scope: str | None = field(_SCOPE_TO_READ, None, max_length=MAX_SCOPE_CHARS)
    budgets: dict[str, int] | None = field(
        "Token budgets per layer (procedural, project, path_rules, memories, documents, recent), each "
        f"0-{MAX_LAYER_BUDGET:,}.",
        None,
    )
    include_stale: bool = field(_INCLUDE_STALE, False)
    depth: str = field(_DEPTH, "derived", enum=DEPTHS)
    as_of: IsoTime | None = field(_AS_OF, None)


async def assemble_context(backends: Backends, session: Session, request: GetContext) -> dict[str, Any]:
    """The context block to read at session start or before a task: procedures, pinned project
    facts and map, the rules for `path` (a file you are about to edit), relevant memories and
    documents, and recent work — each layer within a token budget, citing memory ids."""
    repo = request.repo
    if repo is None and permits(session.grants, session.project_scope):
        # The session's project, so its map (tier 0) and a path's rules (tier 1) come without
        # naming it; not where projects need a grant this token lacks (the map is the project's).
        repo = session.project_repo
    message = to_proto(
        retrieval_pb2.ContextRequest(),
        request,
        caller=caller(session),
        scopes=_scopes(session, request.scope),
        repo=repo,
    )
    response = await backends.call(backends.retrieval.AssembleContext, message)
    return context_json(response)


class UpdateMemory(Request):
    memory_id: str = field(_MEMORY_ID)
    content: str | None = field("The new text of the fact.", None, max_length=MAX_CONTENT_CHARS)
    description: str | None = field("The new one-line summary.", None, max_length=MAX_DESCRIPTION_CHARS)
    type: str | None = field(_TYPE, None, max_length=MAX_TYPE_CHARS)
    tags: list[str] | None = field(
        _TAGS_TO_WRITE + " Replaces the tags; [] clears them.", None, max_items=MAX_TAGS
    )
    metadata: dict[str, Any] | None = field(_METADATA + " Replaces the metadata.", None)
    importance: float | None = field(_IMPORTANCE, None, ge=_LOW, le=_HIGH)
    decay_class: str | None = field("How fast it fades.", None, enum=DECAY_CLASSES)


async def update(backends: Backends, session: Session, request: UpdateMemory) -> dict[str, Any]:
    """Edit a known memory in place: only the given fields change, the id stays, and the earlier
    text stays readable as a version (memory_lineage). A description is never rewritten for you:
    when content changes and no description is given, a memory that has one answers with
    `description_may_be_stale: true`; give `description` too to refresh it."""
    message = to_proto(
        curation_pb2.UpdateRequest(),
        request,
        caller=caller(session),
        id=request.memory_id,
        # Sent apart from the lists themselves, so that an empty list can clear them.
        set_tags=request.tags is not None,
        set_metadata=request.metadata is not None,
    )
    memory = await backends.call(backends.curation.Update, message)
    return updated_json(memory, description_may_be_stale=_kept_description(request, memory.description))


def _kept_description(request: UpdateMemory | SupersedeMemory, kept: str) -> bool:
    """Whether a write changed the content but kept a description (`kept`) written for the old
    content (a description is the caller's own summary: nothing tells whether it still holds)."""
    return request.content is not None and request.description is None and bool(kept)


class ForgetMemories(Request):
    scope: str | None = field(
        "Forget in this scope only; default: your project.", None, max_length=MAX_SCOPE_CHARS
    )
    tags: list[str] | None = field(_TAGS_TO_MATCH, None, max_items=MAX_TAGS)
    older_than_days: float | None = field(
        "Not recalled for this many days; default: HM_FORGET_AFTER_DAYS.", None, ge=0
    )
    importance_floor: float | None = field(
        "At most this importance; default: HM_FORGET_IMPORTANCE_FLOOR.", None, ge=_LOW, le=_HIGH
    )
    apply: bool = field("Archive them; without it this is a dry run that only reports.", False)
    limit: int = field(
        "List at most this many of them (stalest first).", 100, nonzero=True, le=MAX_FORGET_LIMIT
    )


async def forget(backends: Backends, session: Session, request: ForgetMemories) -> dict[str, Any]:
    """Archive stale, low-importance memories (soft). Dry run unless apply is true. `matched` is
    the true total; `memories` lists at most `limit`, stalest first, with `truncated`."""
    message = to_proto(
        curation_pb2.ForgetRequest(),
        request,
        caller=caller(session),
        scopes=[request.scope or session.project_scope],
    )
    return forget_json(await backends.call(backends.curation.Forget, message))


class SupersedeMemory(Request):
    """A correction: every field not given is kept from the memory it replaces."""

    memory_id: str = field("The id of the memory this one replaces (a UUID).")
    content: str = field("The corrected fact.", max_length=MAX_CONTENT_CHARS)
    description: str | None = field("A one-line summary.", None, max_length=MAX_DESCRIPTION_CHARS)
    scope: str | None = field(_SCOPE_OF_CORRECTION, None, max_length=MAX_SCOPE_CHARS)
    type: str | None = field(_TYPE, None, max_length=MAX_TYPE_CHARS)
    tags: list[str] | None = field(f"{_TAGS_TO_WRITE} [] clears them.", None, max_items=MAX_TAGS)
    metadata: dict[str, Any] | None = field(_METADATA, None)
    importance: float | None = field(_IMPORTANCE, None, ge=_LOW, le=_HIGH)
    kind: str | None = field("The memory's kind.", None, enum=KINDS)


async def supersede(backends: Backends, session: Session, request: SupersedeMemory) -> dict[str, Any]:
    """Replace a memory with a corrected one: a new id; the old one is closed but kept for
    history and as-of questions (memory_lineage lists both). Every field not given is kept from
    the memory it replaces: description, type, tags, metadata, importance, kind (and its decay
    class). When the kept description was written for the old content, the answer says
    `description_may_be_stale: true`; give `description` to replace it."""
    # With no scope named, curation puts the correction where the replaced memory lives (it
    # knows the scope, the gateway does not): the session's project would refuse a `user:` one.
    message = to_proto(
        curation_pb2.SaveRequest(),
        request,
        caller=caller(session),
        supersedes=request.memory_id,
        # An empty description, tag list or metadata given is a value, not "keep the old one".
        set_description=request.description is not None,
        set_tags=request.tags is not None,
        set_metadata=request.metadata is not None,
    )
    response = await backends.call(backends.curation.Save, message)
    return superseded_json(
        response, description_may_be_stale=_kept_description(request, response.memory.description)
    )


class DecideTask(Request):
    task_id: str = field("The candidate task's id (a memory id).")
    decision: str = field("confirm (track it, no expiry) or dismiss (archive it).", enum=TASK_DECISIONS)


async def decide_task(backends: Backends, session: Session, request: DecideTask) -> dict[str, Any]:
    """Confirm (track it, no expiry) or dismiss (archive) an extracted candidate task."""
    message = to_proto(curation_pb2.TaskDecision(), request, caller=caller(session), id=request.task_id)
    return memory_json(await backends.call(backends.curation.ConfirmTask, message))
