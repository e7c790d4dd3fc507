"""Provenance of a memory (issue 22): where it came from and whether that history verifies.

For one memory id: every raw-log record about it (its create, updates, supersede, archive and
restore, import, derive, delete, purge) with seq, hash and whether the hash recomputes from the
row, its content_sha256 and the previous record's hash; its supersede lineage; its evidence
(premises) and the conclusions derived from it; the Dreamer's proposals it came from or feeds,
with who decided them and the decision records. `grants=None` is the admin CLI (sees every
scope); the service passes the caller's grants and gets NotFound for a memory outside them, and
related memories outside them are left out.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg

from hypermnesia.errors import InvalidArgument, NotFound
from hypermnesia.scopes import permits
from hypermnesia.times import iso
from services.curation import rawlog

_MAX_LINEAGE = 1000


def _parse(memory_id_text: str) -> uuid.UUID:
    try:
        return uuid.UUID(memory_id_text)
    except ValueError as exc:
        raise InvalidArgument(f"{memory_id_text!r} is not a memory id (a UUID)") from exc


async def _records(conn: asyncpg.Connection, where: str, *args: Any) -> list[dict[str, Any]]:
    """Records matching `where`, each with its hash recomputed against the record before it."""
    rows = await conn.fetch(
        "SELECT r.*, t.payload, p.record_hash AS prev_hash FROM records r"
        " LEFT JOIN record_texts t ON t.record_id = r.id"
        " LEFT JOIN records p ON p.seq = r.seq - 1"
        f" WHERE {where} ORDER BY r.seq",
        *args,
    )
    out = []
    for row in rows:
        prev_hash = rawlog.GENESIS_HASH if row["seq"] == 1 else row["prev_hash"]
        hash_ok = (
            prev_hash is not None
            and rawlog.compute_hash(row, row["content_sha256"], prev_hash) == row["record_hash"]
        )
        payload = row["payload"]
        text_ok = payload is None or hashlib.sha256(payload.encode()).hexdigest() == row["content_sha256"]
        data = json.loads(payload) if payload is not None else None
        out.append(
            {
                "seq": row["seq"],
                "id": str(row["id"]),
                "kind": row["kind"],
                "operation": row["operation"],
                "author": row["author"],
                "scope": row["scope"],
                "created_at": iso(row["created_at"]),
                "source_ref": row["source_ref"],
                "record_hash": row["record_hash"],
                "content_sha256": row["content_sha256"],
                "verifies": bool(hash_ok and text_ok),
                "text": "present" if payload is not None else "purged",
                "payload_op": data.get("op") if isinstance(data, dict) else None,
                "closes": (data.get("closes") if isinstance(data, dict) else None),
                "evidence": (data.get("evidence") if isinstance(data, dict) else None),
                "proposal": (data.get("proposal") if isinstance(data, dict) else None),
            }
        )
    return out


async def provenance(
    conn: asyncpg.Connection, memory_id_text: str, grants: Sequence[str] | None = None
) -> dict[str, Any]:
    memory_id = _parse(memory_id_text)
    memory = await conn.fetchrow(
        "SELECT id, scope, owner_id, kind, type, created_at, updated_at, archived_at, supersedes,"
        " superseded_by, stale_at, stale_because FROM memories WHERE id = $1",
        memory_id,
    )
    records = await _records(conn, "r.id = $1 OR r.target_id = $1", memory_id)
    # Records about other memories that name this one: the supersede that closed it, a derive
    # that took it as evidence. (A scan of the texts: provenance is an occasional question.)
    mentions = await _records(
        conn,
        "t.payload LIKE '%' || $1::uuid::text || '%' AND r.id <> $1::uuid AND r.target_id IS DISTINCT FROM $1::uuid",
        memory_id,
    )
    scope = memory["scope"] if memory is not None else (records[0]["scope"] if records else None)
    if scope is None or (grants is not None and not permits(grants, scope)):
        raise NotFound(f"no memory {memory_id_text}" + (" in your scopes" if grants is not None else ""))

    def readable(other_scope: str | None) -> bool:
        return grants is None or (other_scope is not None and permits(grants, other_scope))

    # Supersede lineage: follow supersedes back and superseded_by forward through the table.
    back: list[str] = []
    forward: list[str] = []
    for column, into in (("supersedes", back), ("superseded_by", forward)):
        current = memory[column] if memory is not None else None
        seen = {memory_id}
        while current is not None and current not in seen and len(into) < _MAX_LINEAGE:
            seen.add(current)
            row = await conn.fetchrow(f"SELECT scope, {column} FROM memories WHERE id = $1", current)
            if row is None or not readable(row["scope"]):
                break
            into.append(str(current))
            current = row[column]
    # A record that created this memory by closing others names them even when they are gone.
    closed = sorted(
        {
            c
            for r in records
            if r["payload_op"] == "create"
            for c in ([r["closes"]] if isinstance(r["closes"], str) else r["closes"] or [])
        }
    )

    premises = await conn.fetch(
        "SELECT e.premise_id AS id, e.created_by, e.created_at, m.scope, m.stale_at,"
        " (m.id IS NULL) AS gone FROM evidence_edges e LEFT JOIN memories m ON m.id = e.premise_id"
        " WHERE e.derived_id = $1 ORDER BY e.created_at, e.premise_id",
        memory_id,
    )
    conclusions = await conn.fetch(
        "SELECT e.derived_id AS id, e.created_by, e.created_at, m.scope, m.stale_at, m.stale_because"
        " FROM evidence_edges e JOIN memories m ON m.id = e.derived_id"
        " WHERE e.premise_id = $1 ORDER BY e.created_at, e.derived_id",
        memory_id,
    )
    proposals = await conn.fetch(
        "SELECT id, scope, kind, status, evidence, result_id, decided_by, decided_at, decision_reason,"
        " created_at FROM proposals WHERE result_id = $1 OR $1 = ANY(evidence) ORDER BY created_at, id",
        memory_id,
    )
    proposal_out = []
    for p in proposals:
        if not readable(p["scope"]):
            continue
        proposal_out.append(
            {
                "id": str(p["id"]),
                "kind": p["kind"],
                "status": p["status"],
                "role": "made this memory" if p["result_id"] == memory_id else "quotes it as evidence",
                "evidence": [str(e) for e in p["evidence"]],
                "decided_by": p["decided_by"],
                "decided_at": iso(p["decided_at"]),
                "reason": p["decision_reason"],
                "records": await _records(conn, "r.target_id = $1", p["id"]),
            }
        )
    authors = sorted({r["author"] for r in records})
    approvers = sorted(
        {p["decided_by"] for p in proposal_out if p["decided_by"] and p["status"] == "approved"}
    )
    return {
        "id": str(memory_id),
        "scope": scope,
        "state": _state(memory, records),
        "owner": memory["owner_id"] if memory is not None else None,
        "stale_because": memory["stale_because"] if memory is not None else None,
        "records": records,
        "mentioned_by": [r for r in mentions if readable(r["scope"])],
        "all_verify": all(r["verifies"] for r in records)
        and all(r["verifies"] for r in mentions)
        and all(rec["verifies"] for p in proposal_out for rec in p["records"]),
        "lineage": {"supersedes": back, "superseded_by": forward, "closed_by_its_records": closed},
        "premises": [
            {
                "id": str(r["id"]),
                "by": r["created_by"],
                "state": "gone" if r["gone"] else ("stale" if r["stale_at"] else "live"),
            }
            for r in premises
            if r["gone"] or readable(r["scope"])
        ],
        "conclusions": [
            {"id": str(r["id"]), "by": r["created_by"], "stale": r["stale_at"] is not None}
            for r in conclusions
            if readable(r["scope"])
        ],
        "proposals": proposal_out,
        "written_by": authors,
        "approved_by": approvers,
    }


def _state(memory: asyncpg.Record | None, records: list[dict[str, Any]]) -> str:
    if memory is None:
        last = records[-1]["operation"] if records else ""
        return (
            "purged"
            if any(r["operation"] == "purge" for r in records)
            else ("deleted" if last == "delete" else "absent")
        )
    if memory["superseded_by"] is not None:
        return "superseded"
    if memory["archived_at"] is not None:
        return "archived"
    return "stale" if memory["stale_at"] is not None else "live"


def render(data: dict[str, Any]) -> list[str]:
    """The provenance as lines for a terminal."""
    lines = [
        f"memory {data['id']} ({data['scope']}): {data['state']}"
        + (f", stale because {data['stale_because']}" if data.get("stale_because") else ""),
        f"written by: {', '.join(data['written_by']) or '-'}"
        + (f"; approved by: {', '.join(data['approved_by'])}" if data["approved_by"] else ""),
        "records:",
    ]
    for r in data["records"]:
        lines.append(
            f"  seq {r['seq']:>6}  {r['operation']:<10} by {r['author']:<24} {r['created_at']}  "
            f"{r['record_hash'][:16]}  {'verifies' if r['verifies'] else 'DOES NOT VERIFY'}"
            + ("" if r["text"] == "present" else "  (text purged)")
        )
    if data["mentioned_by"]:
        lines.append("records of other memories that name it:")
        for r in data["mentioned_by"]:
            lines.append(
                f"  seq {r['seq']:>6}  {r['operation']:<10} by {r['author']:<24} {r['created_at']}  "
                f"{r['record_hash'][:16]}  {'verifies' if r['verifies'] else 'DOES NOT VERIFY'}"
            )
    lineage = data["lineage"]
    if lineage["supersedes"] or lineage["superseded_by"] or lineage["closed_by_its_records"]:
        lines.append("lineage:")
        for other in lineage["supersedes"]:
            lines.append(f"  supersedes    {other}")
        for other in lineage["superseded_by"]:
            lines.append(f"  superseded by {other}")
        for other in lineage["closed_by_its_records"]:
            if other not in lineage["supersedes"]:
                lines.append(f"  closed        {other} (no longer stored)")
    if data["premises"]:
        lines.append("evidence (premises):")
        lines += [f"  {p['id']}  {p['state']}  (edge by {p['by']})" for p in data["premises"]]
    if data["conclusions"]:
        lines.append("conclusions derived from it:")
        lines += [
            f"  {c['id']}{'  stale' if c['stale'] else ''}  (edge by {c['by']})" for c in data["conclusions"]
        ]
    for p in data["proposals"]:
        decided = (
            f"{p['status']} by {p['decided_by']} at {p['decided_at']}" if p["decided_by"] else p["status"]
        )
        lines.append(f"proposal {p['id']} ({p['kind']}, {p['role']}): {decided}")
        for r in p["records"]:
            lines.append(
                f"  seq {r['seq']:>6}  {r['operation']:<10} by {r['author']:<24} "
                f"{r['record_hash'][:16]}  {'verifies' if r['verifies'] else 'DOES NOT VERIFY'}"
            )
    lines.append("every record verifies" if data["all_verify"] else "SOME RECORDS DO NOT VERIFY")
    return lines
