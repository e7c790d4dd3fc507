"""Proposals (issue 18, item 7): what the Dreamer suggests waits here for a decision.

Approving makes the change in one transaction with its raw-log records: a derived memory (fact,
summary -> semantic; procedure -> procedural; a revision keeps the stale conclusion's kind and
supersedes it) is created with its evidence edges (the create record carries `evidence`, so a
rebuild restores both); a contradiction's suggested supersede is performed; a retirement archives
the stale conclusion. Every decision — approve or reject — is a raw-log record naming who decided
and when. The Dreamer only proposes: nothing here is called by it.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from hypermnesia import row_security, validation
from hypermnesia.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from hypermnesia.memory_rows import is_live
from hypermnesia.scopes import permits, require
from hypermnesia.times import iso, optional_timestamp
from hypermnesia.v1 import intelligence_pb2
from services.curation import entities, graph_repo, lifecycle, metrics, payloads, proposals_repo, rawlog, repo
from services.curation.embedding import BatchEmbedder, embedding_text
from services.curation.writer import new_memory

log = logging.getLogger(__name__)

KINDS = ("fact", "procedure", "summary", "revision", "retirement", "contradiction")
STATUSES = ("pending", "approved", "rejected")
MEMORY_KIND = {"fact": "semantic", "summary": "semantic", "procedure": "procedural"}
MAX_REASON_CHARS = 2000
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


@dataclass(frozen=True)
class Draft:
    scope: str
    kind: str
    content: str
    rationale: str
    evidence: tuple[uuid.UUID, ...]
    mode: str
    description: str = ""
    supersedes: uuid.UUID | None = None

    @property
    def evidence_key(self) -> str:
        """What the proposal rests on: never proposed twice, whatever was decided the first time."""
        material = "\n".join(
            [self.kind, ",".join(sorted(str(e) for e in self.evidence)), str(self.supersedes or "")]
        )
        return hashlib.sha256(material.encode()).hexdigest()


def proposal_message(
    row: Mapping[str, Any], readable: set[uuid.UUID] | None = None
) -> intelligence_pb2.Proposal:
    """`readable`: the evidence ids the caller may read (None = all); the others are left out, so
    a proposal never reveals a row outside the caller's scopes, not even as a count."""
    return intelligence_pb2.Proposal(
        id=str(row["id"]),
        scope=row["scope"],
        kind=row["kind"],
        status=row["status"],
        content=row["content"],
        description=row["description"],
        rationale=row["rationale"],
        evidence=[str(e) for e in row["evidence"] if readable is None or e in readable],
        supersedes=str(row["supersedes"] or ""),
        mode=row["mode"],
        created_at=optional_timestamp(row["created_at"]),
        decided_by=row["decided_by"] or "",
        decided_at=optional_timestamp(row["decided_at"]),
        decision_reason=row["decision_reason"] or "",
        result_id=str(row["result_id"] or ""),
    )


async def propose(conn: asyncpg.Connection, drafts: Sequence[Draft], author: str) -> list[asyncpg.Record]:
    """Insert the drafts not proposed before (by evidence key), each with a raw-log record, inside
    the caller's transaction; returns the new proposals."""
    if not drafts:
        return []
    await rawlog.lock_head(conn)
    made = []
    for draft in drafts:
        row = await proposals_repo.insert(
            conn,
            {
                "id": uuid.uuid4(),
                "scope": draft.scope,
                "kind": draft.kind,
                "content": draft.content,
                "description": draft.description,
                "rationale": draft.rationale,
                "evidence": draft.evidence,
                "supersedes": draft.supersedes,
                "mode": draft.mode,
                "evidence_key": draft.evidence_key,
            },
        )
        if row is not None:
            made.append(row)
    await rawlog.append_many(
        conn,
        [
            rawlog.Entry(
                scope=row["scope"],
                kind="proposal",
                operation="propose",
                author=author,
                target_id=row["id"],
                payload={
                    "v": payloads.PAYLOAD_VERSION,
                    "op": "propose",
                    "proposal": str(row["id"]),
                    "kind": row["kind"],
                    "content": row["content"],
                    "rationale": row["rationale"],
                    "evidence": [str(e) for e in row["evidence"]],
                    "supersedes": str(row["supersedes"]) if row["supersedes"] else None,
                    "mode": row["mode"],
                },
            )
            for row in made
        ],
    )
    for row in made:
        metrics.PROPOSALS_MADE.labels(row["kind"]).inc()
    return made


@dataclass(frozen=True)
class Decision:
    proposal: asyncpg.Record
    memory_id: uuid.UUID | None


class Proposals:
    def __init__(self, pool: asyncpg.Pool, embeddings: BatchEmbedder) -> None:
        self.pool = pool
        self.embeddings = embeddings

    async def list(
        self, grants: Sequence[str], scopes: Sequence[str], status: str, limit: int
    ) -> list[asyncpg.Record]:
        for scope in scopes:
            validation.check_scope(scope)
        require(grants, scopes)
        status = status or "pending"
        if status not in (*STATUSES, "all"):
            raise InvalidArgument(f"status {status!r} is unknown; use pending, approved, rejected or all")
        limit = limit or DEFAULT_LIMIT
        validation.check_limit(limit, MAX_LIMIT)
        async with self.pool.acquire() as conn:
            rows = await proposals_repo.listing(
                conn, tuple(grants), list(scopes), None if status == "all" else status, limit
            )
        # The SQL filter is the grants' own; this re-check keeps one meaning of "permitted".
        return [r for r in rows if permits(grants, r["scope"])]

    async def readable_evidence(
        self, grants: Sequence[str], rows: Sequence[Mapping[str, Any]]
    ) -> set[uuid.UUID]:
        """Which of these proposals' evidence ids the grants may read."""
        ids = {e for r in rows for e in r["evidence"]}
        async with self.pool.acquire() as conn:
            scopes = await graph_repo.scopes_of(conn, list(ids))
        return {i for i, scope in scopes.items() if permits(grants, scope)}

    async def decide(
        self, principal: str, grants: Sequence[str], proposal_text: str, decision: str, reason: str
    ) -> Decision:
        proposal_id = validation.parse_id(proposal_text, "proposal")
        if decision not in ("approve", "reject"):
            raise InvalidArgument(f"decision {decision!r} is unknown; use approve or reject")
        reason = reason.strip()
        if decision == "reject" and not reason:
            raise InvalidArgument("say why the proposal is rejected (a reason is required)")
        if len(reason) > MAX_REASON_CHARS:
            raise InvalidArgument(f"the reason is {len(reason)} characters; at most {MAX_REASON_CHARS}")
        async with self.pool.acquire() as conn:
            current = await proposals_repo.fetch(conn, proposal_id)
        if current is None or not permits(grants, current["scope"]):
            raise NotFound(f"no proposal {proposal_text} in your scopes")
        vector = None
        if decision == "approve" and current["kind"] in (*MEMORY_KIND, "revision"):
            vector = await self.embeddings.one(embedding_text(current["description"], current["content"]))
        # Asked before the transaction: it takes connections of its own, which a transaction
        # holding the raw log's head must not wait for (writers queued on the head may hold the rest).
        hidden = await self._hidden_from_caller(list(current["evidence"])) if decision == "approve" else set()
        now = datetime.now(UTC)
        async with self.pool.acquire() as conn, conn.transaction():
            await rawlog.lock_head(conn)
            p = await proposals_repo.lock(conn, proposal_id)
            assert p is not None
            if p["status"] != "pending":
                raise FailedPrecondition(
                    f"proposal {proposal_text} was already {p['status']} by {p['decided_by']} at "
                    f"{p['decided_at']:%Y-%m-%d %H:%M}; a decision is final"
                )
            result: uuid.UUID | None = None
            if decision == "approve":
                result = await self._approve(conn, p, principal, grants, now, vector, hidden)
            row = await proposals_repo.decide(
                conn, proposal_id, "approved" if decision == "approve" else "rejected", principal, now,
                reason or None, result,
            )  # fmt: skip
            await rawlog.append(
                conn,
                scope=p["scope"],
                kind="proposal",
                operation=decision,
                author=principal,
                target_id=proposal_id,
                payload={
                    "v": payloads.PAYLOAD_VERSION,
                    "op": "decide",
                    "proposal": str(proposal_id),
                    "kind": p["kind"],
                    "decision": decision,
                    "decided_by": principal,
                    "decided_at": iso(now),
                    "reason": reason or None,
                    "result_id": str(result) if result else None,
                },
            )
        metrics.PROPOSALS_DECIDED.labels(decision).inc()
        # The gauge counts every scope's proposals, not the ones this caller may see. The decision
        # has committed: a failed count must not answer it with an error (a retry would be refused).
        try:
            with row_security.internal():
                async with self.pool.acquire() as own:
                    metrics.PROPOSALS_PENDING.set(await proposals_repo.count_pending(own))
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("a decision committed but the pending proposals could not be counted: %s", exc)
        return Decision(row, result)

    async def _hidden_from_caller(self, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of `ids` exist but lie outside the caller's view: row security hides such rows as
        if they were gone, and the caller should hear "not yours", not "gone"."""
        if not ids:
            return set()
        async with self.pool.acquire() as conn:
            seen = {r["id"] for r in await graph_repo.nodes(conn, ids)}
        missing = [i for i in ids if i not in seen]
        if not missing:
            return set()
        with row_security.internal():
            async with self.pool.acquire() as own:
                return {r["id"] for r in await graph_repo.nodes(own, missing)}

    async def _approve(
        self,
        conn: asyncpg.Connection,
        p: asyncpg.Record,
        principal: str,
        grants: Sequence[str],
        now: datetime,
        vector: Any,
        hidden: set[uuid.UUID],
    ) -> uuid.UUID:
        require(grants, [p["scope"]])
        evidence = list(p["evidence"])
        rows = {r["id"]: r for r in await graph_repo.nodes(conn, evidence)}
        for memory_id in evidence:
            row = rows.get(memory_id)
            if memory_id in hidden:
                raise PermissionDenied(
                    f"evidence {memory_id} is outside your scopes; ask its owner to decide"
                )
            if row is None:
                raise FailedPrecondition(
                    f"evidence {memory_id} no longer exists; reject this proposal (the next run proposes "
                    "from what is there now)"
                )
            if not permits(grants, row["scope"]):
                raise PermissionDenied(
                    f"evidence {memory_id} is outside your scopes; ask its owner to decide"
                )
        kind = p["kind"]
        if kind == "retirement":
            return await self._retire(conn, p, principal, now)
        if kind == "contradiction":
            return await self._supersede(conn, p, rows, principal, now)
        for memory_id in evidence:
            row = rows[memory_id]
            if not is_live(row, now) or row["stale_at"] is not None:
                raise FailedPrecondition(
                    f"evidence {memory_id} is no longer live ({_state(row, now)}); reject this proposal, "
                    "the next run proposes from what is there now"
                )
        target = p["supersedes"]
        memory_kind = MEMORY_KIND.get(kind)
        if target is not None:
            old = await repo.lock_memory(conn, target)
            if old is None or not permits(grants, old["scope"]):
                raise FailedPrecondition(f"the conclusion {target} to revise no longer exists")
            if old["superseded_by"] is not None:
                raise FailedPrecondition(f"{target} was already superseded by {old['superseded_by']}")
            memory_kind = memory_kind or old["kind"]
        fields = new_memory(
            memory_id=uuid.uuid4(),
            scope=p["scope"],
            owner=principal,
            kind=memory_kind or "semantic",
            type="note",  # what an approved proposal's memory has always been
            content=p["content"],
            at=now,
            description=p["description"],
            tags=["derived"],
            metadata={"proposal": str(p["id"]), "proposal_kind": kind, "mode": p["mode"]},
            supersedes=target,
        )
        if target is not None:
            await repo.close_memory(conn, target, fields["id"], now)
        await repo.insert_memories(conn, [fields], [vector])
        await graph_repo.add_edges(conn, fields["id"], evidence, principal)
        await rawlog.append(
            conn,
            scope=p["scope"],
            kind="memory",
            operation="derive",
            author=principal,
            target_id=fields["id"],
            payload=payloads.create(
                fields, closes=target, evidence=[str(e) for e in evidence], proposal=str(p["id"])
            ),
        )
        await entities.link(conn, fields["id"], p["scope"], p["description"], p["content"], now)
        return uuid.UUID(str(fields["id"]))

    async def _retire(
        self, conn: asyncpg.Connection, p: asyncpg.Record, principal: str, now: datetime
    ) -> uuid.UUID:
        target = p["supersedes"] or p["evidence"][0]
        row = await repo.lock_memory(conn, target)
        if row is None:
            raise FailedPrecondition(f"the conclusion {target} to retire no longer exists")
        if row["archived_at"] is None:
            await lifecycle.archive(conn, [target], principal, now, reason=f"retired (proposal {p['id']})")
        return uuid.UUID(str(target))

    async def _supersede(
        self,
        conn: asyncpg.Connection,
        p: asyncpg.Record,
        rows: dict[uuid.UUID, asyncpg.Record],
        principal: str,
        now: datetime,
    ) -> uuid.UUID:
        """A contradiction: the newer memory supersedes the older (p.supersedes)."""
        older = p["supersedes"]
        newer = next(e for e in p["evidence"] if e != older)
        for memory_id in (older, newer):
            row = await repo.lock_memory(conn, memory_id)
            if row is None or not is_live(row, now):
                raise FailedPrecondition(
                    f"{memory_id} is no longer live; the contradiction is gone, reject this proposal"
                )
            if memory_id == newer and row["supersedes"] is not None:
                raise FailedPrecondition(
                    f"{newer} already corrects {row['supersedes']}; supersede {older} by hand "
                    "(memory_save with supersedes) or reject this proposal"
                )
        if await repo.chain_contains(conn, older, newer):
            raise FailedPrecondition(f"{newer} is already on {older}'s chain; nothing to supersede")
        links = {older: {"superseded_by": newer, "valid_to": now}, newer: {"supersedes": older}}
        for memory_id, changes in links.items():
            await repo.update_memory(conn, memory_id, changes, None)
        await rawlog.append_many(
            conn,
            [
                rawlog.Entry(
                    scope=rows[memory_id]["scope"],
                    kind="memory",
                    operation="supersede",
                    author=principal,
                    target_id=memory_id,
                    payload=payloads.update(memory_id, changes, reason=f"contradiction {p['id']}"),
                )
                for memory_id, changes in links.items()
            ],
        )
        return uuid.UUID(str(newer))


def _state(row: Mapping[str, Any], now: datetime) -> str:
    if row["archived_at"] is not None:
        return "archived"
    if row["superseded_by"] is not None:
        return f"superseded by {row['superseded_by']}"
    if row["stale_at"] is not None:
        return f"stale: {row['stale_because']}"
    return "expired"
