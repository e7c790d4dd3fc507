"""The Dreamer (issue 18, item 6): proposes derived memories; never approves one.

Each step builds its drafts deterministically (extractive mode) — which evidence, what rationale,
what the draft says — and, when an LLM is configured, only the wording of the drafts not proposed
before is asked of it (the evidence key does not depend on the wording, so a re-run never spends
tokens on what it would not propose). A failed LLM call keeps the extractive wording and says so.

Steps: revisions or retirements of stale conclusions; contradictions between live memories (same
entity and attribute, different value: stated as "<entity>'s <attribute> is <value>", or two
near-duplicates one value or a negation apart) with a suggested supersede; distilled facts from clusters
of episodes (entity overlap + embedding similarity); project summaries; procedural patterns.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import asyncpg
import numpy as np
from pydantic import BaseModel, Field

from services.curation import consolidation_repo, graph_repo, metrics, proposals_repo, repo
from services.curation.differences import contradiction
from services.curation.embedding import cosine
from services.curation.llm import MODE_EXTRACTIVE, MODE_LLM, LlmClient
from services.curation.proposals import Draft

MAX_CHAIN_WALK = 100
MAX_SUMMARY_ITEMS = 12
MAX_CLUSTER = 20
# An entity named by more than max(COMMON_MIN, COMMON_SHARE of the memories read) does not link
# two of them (_share_telling_entity). Chosen on LoCoMo conversation 1 (docs/PERFORMANCE.md).
COMMON_SHARE = 0.1
COMMON_MIN = 10

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
# `<entity>'s <attribute> is <value>` and `<entity> <attribute>: <value>` (one per sentence/line).
_POSSESSIVE = re.compile(
    r"^\s*(?P<entity>[\w][\w .@/-]{0,60}?)'s (?P<attr>[\w][\w -]{0,40}?) (?:is|are) (?P<value>.+?)\s*\.?\s*$"
)
_COLON = re.compile(
    r"^\s*(?P<entity>[\w][\w.@/-]{0,60}) (?P<attr>[\w][\w -]{0,40}?):\s*(?P<value>.+?)\s*\.?\s*$"
)
_CLAUSE = re.compile(r"[,;:]\s+")
_STEP = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+\S", re.MULTILINE)
_ARROWS = re.compile(r"\s(?:->|→|then)\s", re.IGNORECASE)


class Wording(BaseModel):
    content: str = Field(min_length=1, max_length=4000)
    description: str = Field(default="", max_length=300)


@dataclass
class Dream:
    drafts: list[Draft] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def first_sentence(text: str, limit: int = 300) -> str:
    line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
    sentence = _SENTENCE.split(line, maxsplit=1)[0]
    return sentence[:limit]


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower()).strip(" .")


def attribute_claims(text: str) -> list[tuple[str, str, str]]:
    """(entity, attribute, value) for each sentence or line stating one."""
    out = []
    for line in text.splitlines():
        for sentence in _SENTENCE.split(line):
            # A clause may carry the statement ("After the migration, Dana's editor is emacs.").
            candidates = [sentence, *_CLAUSE.split(sentence)[1:]]
            possessive = next((m for c in candidates if (m := _POSSESSIVE.match(c))), None)
            match = possessive or _COLON.match(sentence)
            if match:
                out.append((_norm(match["entity"]), _norm(match["attr"]), _norm(match["value"])))
    return out


def _arrays(vectors: dict[uuid.UUID, Any]) -> dict[uuid.UUID, np.ndarray]:
    """pgvector values (Vector, HalfVector or arrays) as float32 arrays."""
    out = {}
    for key, value in vectors.items():
        if value is None:
            continue
        out[key] = np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype=np.float32)
    return out


def looks_procedural(text: str) -> bool:
    return len(_STEP.findall(text)) >= 2 or len(_ARROWS.findall(text)) >= 2


class Dreamer:
    def __init__(
        self,
        pool: asyncpg.Pool,
        llm: LlmClient | None,
        *,
        similarity: float,
        similarity_alone: float,
        near_duplicate: float,
    ) -> None:
        self.pool = pool
        self.llm = llm
        self.similarity = similarity
        self.similarity_alone = similarity_alone
        # The dedupe gate's first threshold (HM_DEDUPE_THRESHOLD): what counts as a near-duplicate.
        self.near_duplicate = near_duplicate

    # ---- steps ---------------------------------------------------------------------------

    async def stale(self, conn: asyncpg.Connection, scope: str) -> list[Draft]:
        """A revision from the current premises, or a retirement when none is left."""
        drafts = []
        for row in await consolidation_repo.stale_conclusions(conn, scope):
            edges = await graph_repo.edges(conn, [row["id"]], upward=True)
            current = await self._current_versions(conn, [e["premise_id"] for e in edges])
            because = row["stale_because"] or "a premise changed"
            if not current:
                drafts.append(
                    Draft(
                        scope=scope,
                        kind="retirement",
                        content=row["content"],
                        description=row["description"],
                        rationale=f"{row['id']} is stale ({because}) and none of its premises is live any more; retire it",
                        evidence=(row["id"],),
                        supersedes=row["id"],
                        mode=MODE_EXTRACTIVE,
                    )
                )
                continue
            text = " ".join(first_sentence(p["content"], 400) for p in current)
            drafts.append(
                Draft(
                    scope=scope,
                    kind="revision",
                    content=text,
                    description=row["description"],
                    rationale=f"{row['id']} is stale ({because}); revised from its current premises",
                    evidence=tuple(p["id"] for p in current),
                    supersedes=row["id"],
                    mode=MODE_EXTRACTIVE,
                )
            )
        return drafts

    async def _current_versions(
        self, conn: asyncpg.Connection, ids: Sequence[uuid.UUID]
    ) -> list[asyncpg.Record]:
        """Each premise's current version (the head of its supersede chain), the live ones only."""
        out: dict[uuid.UUID, asyncpg.Record] = {}
        now = datetime.now(UTC)
        for memory_id in ids:
            row = await graph_repo.node(conn, memory_id)
            steps = 0
            while row is not None and row["superseded_by"] is not None and steps < MAX_CHAIN_WALK:
                row = await graph_repo.node(conn, row["superseded_by"])
                steps += 1
            if row is None or row["archived_at"] is not None or row["superseded_by"] is not None:
                continue
            if row["expires_at"] is not None and row["expires_at"] <= now:
                continue
            out[row["id"]] = row
        return list(out.values())

    async def _groups(
        self, conn: asyncpg.Connection, ids: list[uuid.UUID]
    ) -> tuple[dict[uuid.UUID, np.ndarray], dict[uuid.UUID, set[int]], list[list[uuid.UUID]]]:
        """Vectors, entity sets, and the groups of memories that say the same thing: every two
        members share a telling entity and are similar, or are very similar alone (one matrix
        product and a few per-entity blocks, not a Python loop over every pair)."""
        vectors = _arrays(await repo.embeddings_for(conn, ids))
        ents = await consolidation_repo.entity_sets(conn, ids)
        have = [i for i in ids if i in vectors]
        if len(have) < 2:
            return vectors, ents, []
        matrix = np.stack([vectors[i] for i in have])
        matrix = matrix / (np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12)
        sims = matrix @ matrix.T
        linked = (sims >= self.similarity_alone) | (
            (sims >= self.similarity) & _share_telling_entity(have, ents)
        )
        np.fill_diagonal(linked, False)
        return vectors, ents, [[have[i] for i in g] for g in _cliques(sims, linked, MAX_CLUSTER)]

    async def contradictions(self, conn: asyncpg.Connection, scope: str) -> list[Draft]:
        rows = await consolidation_repo.live_memories(conn, scope, None, None, None)
        drafts = self._stated_values(scope, rows)
        known = {d.evidence_key for d in drafts}
        for draft in await self._near_duplicates(conn, scope, rows):
            if draft.evidence_key not in known:
                drafts.append(draft)
        return drafts

    def _stated_values(self, scope: str, rows: list[asyncpg.Record]) -> list[Draft]:
        """Memories stating "<entity>'s <attribute> is <value>" with different values: the newest
        suggested to supersede each older one."""
        said: dict[tuple[str, str], list[tuple[asyncpg.Record, str]]] = {}
        for row in rows:
            for entity, attr, value in attribute_claims(row["content"]):
                said.setdefault((entity, attr), []).append((row, value))
        drafts = []
        for (entity, attr), claims in said.items():
            if len({value for _, value in claims}) < 2:
                continue
            newest, newest_value = max(claims, key=lambda c: _age_key(c[0]))
            for older, value in claims:
                if older["id"] == newest["id"] or value == newest_value:
                    continue
                drafts.append(
                    _supersede(
                        scope,
                        older,
                        newest,
                        f"{older['id']} says {entity}'s {attr} is {value!r}; {newest['id']} (newer) says "
                        f"{newest_value!r}",
                    )
                )
        return drafts

    async def _near_duplicates(
        self, conn: asyncpg.Connection, scope: str, rows: list[asyncpg.Record]
    ) -> list[Draft]:
        """Near-duplicates (their stored embeddings' cosine reaches HM_DEDUPE_THRESHOLD, the save's
        first dedupe gate) that say the same of the same entity and attribute but for one value or a
        negation (differences.contradiction): the newest such memory suggested to supersede each
        older one. Different facts about different things ("service 1 talks to q1", "service 2
        talks to q2") differ in more than one place and are left alone. One matrix product over
        the run's bounded rows (consolidation_repo.MAX_ROWS), not a Python loop over every pair."""
        by_id = {r["id"]: r for r in rows}
        vectors = _arrays(await repo.embeddings_for(conn, list(by_id)))
        newest: dict[uuid.UUID, tuple[asyncpg.Record, str]] = {}
        for a, b, _sim in _pairs_above(vectors, list(by_id), self.near_duplicate):
            older, newer = sorted((by_id[a], by_id[b]), key=_age_key)
            change = contradiction(older["content"], newer["content"])
            if change is None:
                continue
            current = newest.get(older["id"])
            if current is None or _age_key(newer) > _age_key(current[0]):
                newest[older["id"]] = (newer, str(change))
        return [
            _supersede(
                scope,
                by_id[older_id],
                newer,
                f"{newer['id']} (newer) says what {older_id} says but for {change}",
            )
            for older_id, (newer, change) in newest.items()
        ]

    async def facts(
        self, conn: asyncpg.Connection, scope: str, rows: Sequence[asyncpg.Record]
    ) -> list[Draft]:
        """Groups of at least two episodes (of `rows`, what the run read) that say the same thing."""
        if len(rows) < 2:
            return []
        by_id = {r["id"]: r for r in rows}
        vectors, ents, groups = await self._groups(conn, list(by_id))
        drafts = []
        for group in groups:
            members = [by_id[i] for i in group]
            medoid = _medoid(members, vectors)
            common = set.intersection(*(ents.get(m["id"], set()) for m in members))
            names = await consolidation_repo.entity_names(conn, sorted(common))
            about = f" about {', '.join(names[:5])}" if names else ""
            drafts.append(
                Draft(
                    scope=scope,
                    kind="fact",
                    content=first_sentence(medoid["description"] or medoid["content"], 500),
                    description=f"Distilled from {len(members)} episodes{about}",
                    rationale=f"{len(members)} similar episodes{about} say the same thing; {medoid['id']} says it best",
                    evidence=tuple(m["id"] for m in members),
                    mode=MODE_EXTRACTIVE,
                )
            )
        return drafts

    def summary(self, scope: str, rows: Sequence[asyncpg.Record], period: str) -> list[Draft]:
        """A project summary of the newest MAX_SUMMARY_ITEMS of `rows` (semantic memories of one
        period, oldest first); `period` completes "What <scope> established ..."."""
        rows = rows[-MAX_SUMMARY_ITEMS:]
        if len(rows) < 2:
            return []
        lines = "\n".join(f"- {first_sentence(r['description'] or r['content'], 200)}" for r in rows)
        return [
            Draft(
                scope=scope,
                kind="summary",
                content=f"What {scope} established {period} ({len(rows)} facts):\n{lines}",
                description=f"Summary of {scope}, {rows[0]['created_at']:%Y-%m-%d} to {rows[-1]['created_at']:%Y-%m-%d}",
                rationale=f"the {len(rows)} most recent semantic memories of {scope} {period}",
                evidence=tuple(r["id"] for r in rows),
                mode=MODE_EXTRACTIVE,
            )
        ]

    async def procedures(
        self, conn: asyncpg.Connection, scope: str, rows: Sequence[asyncpg.Record]
    ) -> list[Draft]:
        """Groups of at least two memories (of `rows`) describing the same multi-step workflow."""
        by_id = {r["id"]: r for r in rows if looks_procedural(r["content"]) and r["kind"] != "procedural"}
        if len(by_id) < 2:
            return []
        vectors, _ents, groups = await self._groups(conn, list(by_id))
        drafts = []
        for group in groups:
            members = [by_id[i] for i in group]
            medoid = _medoid(members, vectors)
            drafts.append(
                Draft(
                    scope=scope,
                    kind="procedure",
                    content=medoid["content"],
                    description=f"A workflow repeated {len(members)} times",
                    rationale=f"{len(members)} memories describe the same multi-step workflow; {medoid['id']} is the most typical",
                    evidence=tuple(m["id"] for m in members),
                    mode=MODE_EXTRACTIVE,
                )
            )
        return drafts

    # ---- wording ---------------------------------------------------------------------------

    async def new_only(self, conn: asyncpg.Connection, drafts: list[Draft]) -> list[Draft]:
        """The drafts whose evidence key no proposal of their scope has (nothing is proposed twice)."""
        out = []
        by_scope: dict[str, list[Draft]] = {}
        for d in drafts:
            by_scope.setdefault(d.scope, []).append(d)
        for scope, items in by_scope.items():
            known = await proposals_repo.known_keys(conn, scope, [d.evidence_key for d in items])
            seen: set[str] = set()
            for d in items:
                if d.evidence_key not in known and d.evidence_key not in seen:
                    seen.add(d.evidence_key)
                    out.append(d)
        return out

    async def word(self, conn: asyncpg.Connection, drafts: list[Draft], dream: Dream) -> list[Draft]:
        """With an LLM, ask it to phrase each draft from its (fenced) evidence; otherwise as is."""
        if self.llm is None:
            return drafts
        out = []
        for d in drafts:
            if d.kind in ("retirement", "contradiction"):
                out.append(d)
                continue
            rows = await graph_repo.nodes(conn, list(d.evidence))
            items = [(str(r["id"]), r["content"]) for r in rows]
            if d.supersedes is not None and d.kind == "revision":
                old = await graph_repo.node(conn, d.supersedes)
                if old is not None:
                    items.append((str(old["id"]), old["content"]))
            answer = await self.llm.structured(_TASKS[d.kind], items, Wording)
            if answer.value is None:
                metrics.LLM_FALLBACKS.labels(f"dreamer:{d.kind}").inc()
                if answer.note not in dream.notes:
                    dream.notes.append(answer.note)
                out.append(d)
                continue
            out.append(
                replace(
                    d,
                    content=answer.value.content,
                    description=answer.value.description or d.description,
                    mode=MODE_LLM,
                )
            )
        return out


_TASKS = {
    "fact": "State, in one or two sentences, the durable fact these episodes establish together.",
    "summary": "Summarise these memories of one project: decisions made, patterns observed, open questions.",
    "procedure": "Write the repeated multi-step workflow these memories describe as numbered steps.",
    "revision": (
        "The last memory is a conclusion whose premises changed; the others are its current premises. "
        "Restate the conclusion so it follows from the current premises only."
    ),
}


def _age_key(row: asyncpg.Record) -> tuple[datetime, str]:
    """Older first; the id breaks a tie of creation times."""
    return row["created_at"], str(row["id"])


def _supersede(scope: str, older: asyncpg.Record, newer: asyncpg.Record, why: str) -> Draft:
    """A contradiction proposal: `newer` supersedes `older` (keyed by the pair, so never twice)."""
    return Draft(
        scope=scope,
        kind="contradiction",
        content=newer["content"],
        description=newer["description"],
        rationale=f"{why}; suggest that {newer['id']} supersedes {older['id']}",
        evidence=(older["id"], newer["id"]),
        supersedes=older["id"],
        mode=MODE_EXTRACTIVE,
    )


def _pairs_above(
    vectors: dict[uuid.UUID, np.ndarray], ids: list[uuid.UUID], floor: float
) -> list[tuple[uuid.UUID, uuid.UUID, float]]:
    """The pairs of `ids` (those with a vector) whose cosine reaches `floor`, with it: one matrix
    product."""
    have = [i for i in ids if i in vectors]
    if len(have) < 2:
        return []
    matrix = np.stack([vectors[i] for i in have])
    matrix = matrix / (np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12)
    sims = matrix @ matrix.T
    return [
        (have[int(x)], have[int(y)], float(sims[x, y])) for x, y in np.argwhere(np.triu(sims >= floor, 1))
    ]


def _share_telling_entity(ids: list[uuid.UUID], ents: dict[uuid.UUID, set[int]]) -> np.ndarray:
    """Which pairs of `ids` share an entity that tells them apart: one named by at most
    max(COMMON_MIN, COMMON_SHARE of them). An entity in most of them says nothing about which
    belong together (in a long conversation, the speakers' names are in nearly every turn)."""
    n = len(ids)
    holders: dict[int, list[int]] = {}
    for i, memory_id in enumerate(ids):
        for entity in ents.get(memory_id, ()):
            holders.setdefault(entity, []).append(i)
    limit = max(COMMON_MIN, COMMON_SHARE * n)
    share = np.zeros((n, n), dtype=bool)
    for members in holders.values():
        if 1 < len(members) <= limit:
            share[np.ix_(members, members)] = True
    return share


def _cliques(sims: np.ndarray, linked: np.ndarray, cap: int) -> list[list[int]]:
    """Groups (indices) of at least two in which every member is linked to every other, at most
    `cap` each, grown greedily from the most similar linked pair down (ties: the earlier rows).
    Not connected components: over hundreds of turns, chains of single links join nearly
    everything into one group."""
    xs, ys = np.nonzero(np.triu(linked, 1))
    group_of: dict[int, int] = {}
    groups: dict[int, list[int]] = {}
    for k in np.argsort(-sims[xs, ys], kind="stable"):
        x, y = int(xs[k]), int(ys[k])
        gx, gy = group_of.get(x), group_of.get(y)
        if gx is None and gy is None:
            groups[x] = [x, y]
            group_of[x] = group_of[y] = x
        elif gx is None or gy is None:
            g, new = (gx, y) if gx is not None else (gy, x)
            assert g is not None
            if len(groups[g]) < cap and linked[new, groups[g]].all():
                groups[g].append(new)
                group_of[new] = g
        elif (
            gx != gy
            and len(groups[gx]) + len(groups[gy]) <= cap
            and linked[np.ix_(groups[gx], groups[gy])].all()
        ):
            for member in groups.pop(gy):
                groups[gx].append(member)
                group_of[member] = gx
    return [sorted(g) for g in groups.values()]


def _medoid(members: list[asyncpg.Record], vectors: dict[uuid.UUID, Any]) -> asyncpg.Record:
    """The member most similar to the others (ties: the oldest)."""

    def centrality(m: asyncpg.Record) -> float:
        v = vectors.get(m["id"])
        if v is None:
            return -1.0
        return sum(
            cosine(v, vectors[o["id"]])
            for o in members
            if o["id"] != m["id"] and vectors.get(o["id"]) is not None
        )

    return max(members, key=lambda m: (centrality(m), -m["created_at"].timestamp()))
