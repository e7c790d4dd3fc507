"""The gateway's half of the delivery log (issue 30 item 3): what each agent was given.

The operation table marks the operations that deliver memories to an agent (`Delivers`, in
gateway/operations.py): a search, a context block, a file's rules and the project map (the hooks'
injections come through these same routes), a Dialectic answer. After the REST route or the MCP
tool has made the exact bytes it sends (the response body; the tool result's text), it hands them
here with the request and the result: `DeliveryLog.record` takes their sha256, the ids and scores
the result delivered, who asked and in which session, and queues the delivery. A background task
sends the queue to curation in batches (Deliveries.RecordDeliveries), which chains them
(services/curation/deliveries.py): the answer never waits on a database write.

What a crash loses: the deliveries queued and not yet sent, at most FLUSH_INTERVAL_S (1 s) of them (a
graceful stop sends them first). While curation is unreachable the queue keeps up to MAX_QUEUE
deliveries, retried; beyond that the oldest are dropped and counted in
hm_deliveries_dropped_total, so an outage never holds memory without bound or blocks an answer.

The session is the MCP session (Mcp-Session-Id) for MCP, else the X-Hypermnesia-Session header
(REST, the hooks, a stateless MCP client), else none.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter
from pydantic import BaseModel

from gateway.auth import Session
from gateway.backends import Backends
from gateway.fields import IsoTime, Request, field
from gateway.shaping import caller, deliveries_json, to_proto
from hypermnesia import scopes, secrets
from hypermnesia.errors import HypermnesiaError
from hypermnesia.times import timestamp
from hypermnesia.v1 import deliveries_pb2

__all__ = [
    "SESSION_HEADER",
    "Delivers",
    "DeliveryLog",
    "ListDeliveries",
    "list_deliveries",
    "session_id",
]

log = logging.getLogger(__name__)

SESSION_HEADER = scopes.SESSION_HEADER.lower()  # headers arrive lower-cased
MCP_SESSION_HEADER = "mcp-session-id"
# A session id longer than this is cut: it names a session, it is not a place to store text.
MAX_SESSION_CHARS = 200
# The queue is sent at least this often, and as soon as it holds BATCH deliveries: once a second,
# as retrieval batches its search bookkeeping (fewer, larger transactions for curation on a box it
# shares with the search path).
FLUSH_INTERVAL_S = 1.0
BATCH = 500
MAX_QUEUE = 10_000
# A batch that fails is retried after this long (curation restarting, or down).
RETRY_S = 2.0

DROPPED = Counter(
    "hm_deliveries_dropped_total",
    "Deliveries never recorded: the queue was full while curation could not be reached",
)
RECORDED = Counter("hm_deliveries_recorded_total", "Deliveries sent to curation's delivery log")

Item = tuple[str, float | None]


@dataclass(frozen=True)
class Delivers:
    """An operation's mark: it delivers what `items` finds in its result (ids and scores, in the
    order delivered)."""

    items: Callable[[Any], list[Item]]


def session_id(headers: Mapping[str, str], *, mcp: bool) -> str:
    """The session a call belongs to (headers lower-cased)."""
    value = (headers.get(MCP_SESSION_HEADER, "") if mcp else "") or headers.get(SESSION_HEADER, "")
    return value.strip()[:MAX_SESSION_CHARS]


def _thread(request: BaseModel) -> str:
    value = getattr(request, "thread_id", None) or getattr(request, "thread", None)
    return value if isinstance(value, str) else ""


def _scopes(session: Session, request: BaseModel) -> list[str]:
    """What the request read: its scope, else the session's readable scopes (who may see it)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, str) and scope:
        return [scope]
    return session.readable_scopes() or [session.project_scope]


def _masked(value: Any) -> Any:
    """`value` (a request's JSON) with every string's secrets masked, keys and shape kept."""
    if isinstance(value, str):
        return secrets.masked(value)
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    return value


class DeliveryLog:
    """The queue of deliveries and the task that sends it to curation."""

    def __init__(self, backends: Backends, enabled: bool = True) -> None:
        self.backends = backends
        self.enabled = enabled
        self._queue: deque[deliveries_pb2.Delivery] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def _request_json(self, request: BaseModel) -> str:
        # Masked whatever HM_REDACT says: the chain is append-only, so `hypermnesia redact --apply`
        # could not mask a request here later, as it does search_log's queries.
        return json.dumps(_masked(request.model_dump(mode="json")))

    def record(
        self,
        delivers: Delivers | None,
        name: str,
        transport: str,
        session: Session,
        session_name: str,
        request: BaseModel,
        result: Any,
        body: bytes,
    ) -> None:
        """Queue one delivery of `body` (the exact bytes sent); returns at once."""
        if not self.enabled or delivers is None:
            return
        items = [
            deliveries_pb2.DeliveredItem(id=i, has_score=s is not None, score=s or 0.0)
            for i, s in delivers.items(result)
        ]
        self._queue.append(
            deliveries_pb2.Delivery(
                principal=session.principal.id,
                session=session_name,
                thread=_thread(request),
                operation=name,
                transport=transport,
                delivered_at=timestamp(datetime.now(UTC)),
                # The request as the operation read it, its secrets masked.
                request_json=self._request_json(request),
                scopes=_scopes(session, request),
                items=items,
                text_sha256=hashlib.sha256(body).hexdigest(),
                text_bytes=len(body),
            )
        )
        while len(self._queue) > MAX_QUEUE:
            self._queue.popleft()
            DROPPED.inc()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="delivery-log")
        if len(self._queue) >= BATCH:
            self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), FLUSH_INTERVAL_S)
            self._wake.clear()
            if not await self.flush():
                await asyncio.sleep(RETRY_S)

    async def flush(self) -> bool:
        """Send what is queued, a batch at a time; False when curation could not take it (the
        batch goes back to the front of the queue)."""
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
            try:
                await self.backends.call(
                    self.backends.deliveries.RecordDeliveries,
                    deliveries_pb2.RecordDeliveriesRequest(deliveries=batch),
                )
            except HypermnesiaError as exc:
                self._queue.extendleft(reversed(batch))
                if not self._failing:
                    log.warning(
                        "delivery log: curation did not take %d deliveries (%s); retrying", len(batch), exc
                    )
                self._failing = True
                return False
            if self._failing:
                log.info("delivery log: curation takes deliveries again")
            self._failing = False
            RECORDED.inc(len(batch))
        return True

    async def close(self) -> None:
        """Stop the task and send what is queued (a graceful stop loses nothing)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._queue and not await self.flush():
            log.warning("delivery log: %d deliveries not recorded at shutdown", len(self._queue))


# ---- the listing: GET /deliveries, memory_deliveries, `hypermnesia replay` ------------------------


class ListDeliveries(Request):
    session: str = field(
        "Only this session's deliveries (an MCP session id, or the X-Hypermnesia-Session header).",
        "",
        max_length=MAX_SESSION_CHARS,
    )
    since: IsoTime | None = field("Only deliveries at or after this time (ISO 8601).", None)
    principal: str = field("Only what this principal was given.", "", max_length=200)
    limit: int = field("At most this many, oldest first.", 100, ge=1, le=1000)


async def list_deliveries(backends: Backends, session: Session, request: ListDeliveries) -> dict[str, Any]:
    """What was delivered to agents and where it came from: each search result, context block,
    file's rules and Dialectic answer (who, session, thread, time, the request, the sha256 of the
    exact text sent), its memories with their state now (live, superseded, stale, archived,
    deleted, purged: a purged memory by its id and hash only), and its place in the log's hash
    chain. Your own deliveries (a token granted every scope, `*`, reads everyone's), and only
    those whose every scope you may read."""
    # to_proto refuses a number the message cannot carry (the service refuses one over its limit).
    message = to_proto(deliveries_pb2.ListDeliveriesRequest(), request, caller=caller(session))
    return deliveries_json(await backends.call(backends.deliveries.ListDeliveries, message))


def items_of_search(out: dict[str, Any]) -> list[Item]:
    """The hits, or with group_by=thread the turns of each thread."""
    hits = [t for r in out["results"] for t in (r["turns"] if "turns" in r else [r])]
    return [(r["id"], r.get("score")) for r in hits]


def _unique(ids: list[str]) -> list[Item]:
    return [(i, None) for i in dict.fromkeys(ids)]


def items_of_context(out: dict[str, Any]) -> list[Item]:
    return _unique([i for layer in out["layers"].values() for i in layer["cited_ids"]])


def items_of_answer(out: dict[str, Any]) -> list[Item]:
    """The memories a Dialectic answer cites, then the rest of the evidence it shows."""
    cited = [c for claim in out["claims"] for c in claim["citations"]]
    return _unique(cited + [e["id"] for e in out["evidence"]])


def items_of_rules(out: dict[str, Any]) -> list[Item]:
    return _unique([c["id"] for c in out["constraints"]])


def items_of_map(out: dict[str, Any]) -> list[Item]:
    return _unique([c["id"] for c in out["invariants"]])
