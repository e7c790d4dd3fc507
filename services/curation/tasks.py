"""Automatic task extraction from conversation records, and the task lifecycle.

    task_confidence = signal_strength * 0.6 + entity_density * 0.25 + recency_boost * 0.15

signal_strength is the pattern's score; entity_density is 1 when the task names an entity the
scope already knows (entity index, or another turn of the same import); recency_boost is 1
when the task's words were mentioned in another of the thread's last RECENT_TURNS turns. A
candidate at >= 0.70 becomes a working-memory task (priority medium), at >= 0.85 priority high.
Tasks expire with the working-memory TTL unless confirmed; a dismissed task is archived.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from hypermnesia.entities import extract
from hypermnesia.errors import FailedPrecondition, InvalidArgument, NotFound
from hypermnesia.scopes import permits
from hypermnesia.times import iso
from services.curation import payloads, rawlog, repo
from services.curation.writer import new_memory

MEDIUM, HIGH = 0.70, 0.85
RECENT_TURNS = 10
IMPORTANCE = {"medium": 3.0, "high": 5.0}

# (pattern, signal strength); group "task" is the task text.
PATTERNS: tuple[tuple[re.Pattern[str], float], ...] = tuple(
    (re.compile(p, re.IGNORECASE), s)
    for p, s in (
        (r"\bTODO:?\s+(?P<task>[^.!?\n]+)", 0.90),
        (r"\bdon'?t forget to\s+(?P<task>[^.!?\n]+)", 0.85),
        (r"\bI need to\s+(?P<task>[^.!?\n]+)", 0.80),
        (r"\bbefore we can [^,]+,\s*we need(?: to)?\s+(?P<task>[^.!?\n]+)", 0.78),
        (r"\bwe need to\s+(?P<task>[^.!?\n]+)", 0.75),
        (r"\bfollow up on\s+(?P<task>[^.!?\n]+)", 0.72),
        (r"\bnext step is(?: to)?\s+(?P<task>[^.!?\n]+)", 0.70),
        (r"\bI should\s+(?P<task>[^.!?\n]+)", 0.65),
    )
)
_WORD = re.compile(r"[a-z0-9]{3,}")


@dataclass(frozen=True)
class Candidate:
    text: str
    signal: float
    entity_density: float
    recency: float

    @property
    def confidence(self) -> float:
        return round(self.signal * 0.6 + self.entity_density * 0.25 + self.recency * 0.15, 4)

    @property
    def priority(self) -> str | None:
        if self.confidence >= HIGH:
            return "high"
        return "medium" if self.confidence >= MEDIUM else None


def find(text: str) -> list[tuple[str, float]]:
    """Task phrases and their signal strength; overlapping matches keep the strongest pattern."""
    hits: list[tuple[int, int, str, float]] = []
    for pattern, strength in PATTERNS:
        for m in pattern.finditer(text):
            start, end = m.span("task")
            if any(s < end and start < e for s, e, _, _ in hits):
                continue
            task = m.group("task").strip(" ,;:")
            if len(task) >= 3:
                hits.append((start, end, task, strength))
    return [(t, s) for _, _, t, s in sorted(hits)]


def score(task: str, signal: float, known: set[tuple[str, str]], recent_turns: list[str]) -> Candidate:
    found = extract(task)
    # A task that references known project entities is boosted.
    density = 1.0 if any(e in known for e in found) else 0.0
    words = set(_WORD.findall(task.lower()))
    recency = 0.0
    if words:
        for turn in recent_turns:
            overlap = len(words & set(_WORD.findall(turn.lower()))) / len(words)
            if overlap >= 0.6:
                recency = 1.0
                break
    return Candidate(task, signal, density, recency)


async def known_entities(conn: asyncpg.Connection, scope: str, texts: list[str]) -> set[tuple[str, str]]:
    """Which of the entities the candidate task phrases in `texts` mention the scope already knows
    (looked up by name, so a scope with a large index costs no more than a small one)."""
    wanted = {e for text in texts for task, _ in find(text) for e in extract(task)}
    if not wanted:
        return set()
    return await repo.known_entities(conn, scope, sorted(wanted))


def candidates_for(
    turns: list[tuple[int, str, str, str]], known_by_scope: dict[str, set[tuple[str, str]]]
) -> list[tuple[int, Candidate]]:
    """Candidates >= MEDIUM for conversation turns (index, scope, thread, content), in order.

    An entity is known when the scope's index has it or another turn of this batch mentions it,
    so a task naming something the conversation talked about scores as a project task."""
    mentions: dict[str, Counter[tuple[str, str]]] = {}
    extracted = {}
    for index, scope, _, content in turns:
        extracted[index] = set(extract(content))
        mentions.setdefault(scope, Counter()).update(extracted[index])
    by_thread: dict[tuple[str, str], list[str]] = {}
    out: list[tuple[int, Candidate]] = []
    for index, scope, thread, content in turns:
        history = by_thread.setdefault((scope, thread), [])
        others = {e for e, n in mentions[scope].items() if n - (e in extracted[index]) > 0}
        known = known_by_scope.get(scope, set()) | others
        for task, signal in find(content):
            candidate = score(task, signal, known, history[-RECENT_TURNS:])
            if candidate.priority is not None:
                out.append((index, candidate))
        history.append(content)
    return out


def task_fields(
    candidate: Candidate, source: dict[str, Any], memory_id: uuid.UUID, principal: str
) -> dict[str, Any]:
    """The working-memory task derived from a conversation memory."""
    priority = candidate.priority or "medium"
    return new_memory(
        memory_id=memory_id,
        scope=source["scope"],
        owner=principal,
        kind="working",
        content=candidate.text,
        at=source["created_at"],
        type="task",
        description=f"task: {candidate.text[:120]}",
        tags=["task"],
        importance=IMPORTANCE[priority],
        thread_id=source.get("thread_id"),
        metadata={
            "task": {
                "status": "candidate",
                "priority": priority,
                "confidence": candidate.confidence,
                "signal": candidate.signal,
                "entity_density": round(candidate.entity_density, 4),
                "recency": candidate.recency,
            },
            "derived_from": [str(source["id"])],
        },
    )


async def decide(
    conn: asyncpg.Connection, principal: str, grants: tuple[str, ...], task_id: uuid.UUID, decision: str
) -> None:
    """confirm: a tracked task (no TTL); dismiss: archived. Both are recorded in the raw log."""
    if decision not in ("confirm", "dismiss"):
        raise InvalidArgument("decision must be 'confirm' or 'dismiss'")
    await rawlog.lock_head(conn)
    row = await repo.lock_memory(conn, task_id)
    if row is None or not permits(grants, row["scope"]) or row["type"] != "task":
        raise NotFound(f"no task {task_id} in your scopes")
    meta = json.loads(row["metadata"]) if isinstance(row["metadata"], str) else dict(row["metadata"])
    status = meta.get("task", {}).get("status")
    if status != "candidate":
        raise FailedPrecondition(f"task {task_id} is already {status}; only a candidate can be decided")
    now = datetime.now(UTC)
    meta["task"] = {
        **meta.get("task", {}),
        "status": "confirmed" if decision == "confirm" else "dismissed",
        "decided_by": principal,
        "decided_at": iso(now),
    }
    changes: dict[str, Any] = {"metadata": meta, "updated_at": now}
    if decision == "confirm":
        changes["expires_at"] = None
    else:
        changes["archived_at"] = now
    await repo.update_memory(conn, task_id, changes, None)
    await rawlog.append(
        conn,
        scope=row["scope"],
        kind="task",
        operation=decision,
        author=principal,
        target_id=task_id,
        payload=payloads.update(task_id, changes, reason=decision),
    )
