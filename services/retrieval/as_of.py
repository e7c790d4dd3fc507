"""As-of reads: search and context answered from the store as it was at an instant T, so a user
can ask what an agent would have been told then.

Where the past comes from. The `memories` table holds each memory's current state only: an update
in place overwrites the text, a delete or purge removes the row. The raw log holds every write,
with a payload complete enough to redo it (services/curation/payloads.py; a rebuild replays it).
So an as-of read replays the searched scopes' records written up to T (records.created_at <= T,
in log order) into the memories as they were then: each one's text and fields as of its last
version before T, the supersedes, archives and restores made by then, and nothing created after
T; a memory deleted after T is back as it was. The filters then judge validity at T
(filters.Prefilter with `as_of`: valid_from/valid_to, archived_at, expires_at, stale_at), so a
supersede chain answers the version current at T.

How it is scored. The replayed rows go into temporary tables of the read's own transaction
(`hm_past_memories`, whose tsvector and length are the live row's where the text is the same,
else made by the live table's own generation expressions; and the lexical statistics
`hm_past_lexical_scope` / `hm_past_lexical_df` counted over them), and the
search runs its own SQL on them: a `Past` is a pool whose statements read those tables in place
of the live ones. So BM25, fusion, gates, the thread context and the recall-depth walk are the
very code of the normal search, over the as-of texts and as-of statistics. The dense leg is an
exact scan (the past tables have no HNSW graph). A row's vector is the stored one when its text
has not changed since T, else the vector curation keeps by text (embedding_store: every version
a memory had, until it is deleted), else the text is embedded now (bounded: only rows whose text
the store no longer embeds, such as a deleted memory's). Scores are those of the current model.

Why not another way. Reading the current rows' validity windows alone (the earlier as_of) showed
an updated memory's new text and lost every deleted one; versioned copies of every row would
cost every write. Replay costs only the audit read: the normal search path is untouched (it
never builds a Past), and an as-of read costs a replay of the searched scopes' log
(docs/PERFORMANCE.md has a figure).

Limits, said in the answer or here: a text purged since T cannot be searched or shown (the
answer's `purged` lists those memories' ids and its `degraded` says as_of_purged); staleness at T is read from the current flag
(stale_at <= T); recency is measured from T with the access times the log holds (searches'
access bumps are not logged); entity links, open tasks, the project map and path rules are the
current ones. A time in the future is refused (the store cannot know it); a time before the first
write answers nothing. As-of reads use the primary (temporary tables need a writable server).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
import numpy as np

from hypermnesia.errors import InvalidArgument, Unavailable
from hypermnesia.memory_rows import COLUMNS
from hypermnesia.times import iso
from services.retrieval import repo

__all__ = ["Past", "candidates", "check_instant", "past", "replay"]

# Embeds texts as documents (EmbedderClient.embed with DOCUMENT and a deadline).
EmbedDocuments = Callable[[list[str]], Awaitable[np.ndarray]]
EMBEDDER_UNAVAILABLE = "embedder_unavailable"
# What an answer says (in `degraded`, which every search hit carries to an MCP client) when some
# memory of then could not be searched because its text has been purged since.
PURGED = "as_of_purged"

# The live tables a search reads, and the past tables that stand in for them in a Past. Only
# table references (FROM/JOIN) are rewritten, so no column or literal can be touched.
_PAST_TABLES = {
    "memories": "hm_past_memories",
    "lexical_scope": "hm_past_lexical_scope",
    "lexical_df": "hm_past_lexical_df",
}
_TABLE_REF = re.compile(r"\b(FROM|JOIN)(\s+)(memories|lexical_scope|lexical_df)\b")

# The generated columns (the tsvector and its length) become plain columns here: copied from the
# live row when the text is the same as then, else computed by the live table's own expressions,
# read from the catalog, so the migrations stay their one home.
_CREATE = "CREATE TEMPORARY TABLE hm_past_memories (LIKE memories INCLUDING DEFAULTS) ON COMMIT DROP"
_GENERATED = (
    "SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) AS expression FROM pg_attribute a"
    " JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
    " WHERE a.attrelid = 'memories'::regclass AND a.attgenerated = 's' ORDER BY a.attnum"
)
_RECORDS = (
    "SELECT r.id, r.kind, r.target_id, t.payload FROM records r LEFT JOIN record_texts t ON t.record_id = r.id"
    " WHERE r.scope = ANY($1::text[]) AND r.created_at <= $2 ORDER BY r.seq"
)


def _insert_sql(generated: list[str]) -> str:
    """The replayed rows ($1, a JSON array of curated columns) with what the live row gives: its
    vector and generated columns when the text is the same as then, and its staleness (the graph's
    staleness is not in the log: a conclusion stale now went stale at stale_at, which the filters
    compare with T)."""
    copied = ["embedding", *generated]
    stale = ["stale_at", "stale_because", "stale_premise"]
    columns = ", ".join([*COLUMNS, *copied, *stale])
    values = ", ".join(
        [*(f"j.{c}" for c in COLUMNS), *(f"same.{c}" for c in copied), *(f"m.{c}" for c in stale)]
    )
    return (
        f"INSERT INTO hm_past_memories ({columns}) SELECT {values}"
        " FROM jsonb_populate_recordset(NULL::hm_past_memories, $1::jsonb) j"
        " LEFT JOIN memories m ON m.id = j.id"
        " LEFT JOIN memories same ON same.id = j.id AND same.description = j.description"
        " AND same.content = j.content"
    )


def _compute_sql(generated: list[tuple[str, str]]) -> str:
    """The generated columns of the rows whose text changed since then (or that are gone)."""
    sets = ", ".join(f"{name} = {expression}" for name, expression in generated)
    return f"UPDATE hm_past_memories SET {sets} WHERE {generated[0][0]} IS NULL"


_KEPT_VECTORS = (
    "SELECT p.id, p.description, p.content, s.vector FROM hm_past_memories p"
    " LEFT JOIN embedding_store s ON s.text_sha256 = hm_embedding_text_sha256(p.description, p.content)"
    " WHERE p.embedding IS NULL"
)
_STATISTICS = (
    "CREATE TEMPORARY TABLE hm_past_lexical_scope ON COMMIT DROP AS"
    " SELECT scope, count(*)::bigint AS docs, coalesce(sum(lex_len), 0)::bigint AS total_len"
    " FROM hm_past_memories GROUP BY scope;"
    " CREATE TEMPORARY TABLE hm_past_lexical_df ON COMMIT DROP AS"
    " SELECT m.scope, t.term, count(*)::bigint AS df"
    " FROM hm_past_memories m, unnest(tsvector_to_array(m.search_tsv)) AS t(term) GROUP BY 1, 2;"
    " ANALYZE hm_past_memories"
)


def check_instant(at: datetime, now: datetime | None = None) -> None:
    """Refuse an as_of the store cannot answer for: one still to come."""
    now = now or datetime.now(UTC)
    if at > now:
        raise InvalidArgument(
            f"as_of {iso(at)} is in the future (the store's time is {iso(now)}): it can only answer "
            "for a time that has passed; leave as_of out for what it holds now"
        )


def _memory_id(record: Mapping[str, Any]) -> str:
    return str(record["target_id"] or record["id"])


def replay(records: Sequence[Mapping[str, Any]]) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """The memories the records build (id -> curated columns in their JSON form), applied as
    services/curation/payloads.apply applies them, and the ids whose text a purge erased from one
    of the records (their state is unknown, so they are left out)."""
    state: dict[str, dict[str, Any]] = {}
    purged: set[str] = set()
    for record in records:
        if record["payload"] is None:
            if record["kind"] != "proposal":  # a proposal's own record is no memory's version
                memory_id = _memory_id(record)
                purged.add(memory_id)
                state.pop(memory_id, None)
            continue
        _apply(state, json.loads(record["payload"]))
    return state, purged - set(state)


def _apply(state: dict[str, dict[str, Any]], payload: Mapping[str, Any]) -> None:
    op = payload.get("op")
    if op == "create":
        memory = dict(payload["memory"])
        state[str(memory["id"])] = memory
        closes = payload.get("closes")
        for closed in [closes] if isinstance(closes, str) else closes or []:
            if (old := state.get(closed)) is not None:
                old["superseded_by"] = memory["id"]
                old["valid_to"] = memory["valid_from"]
        return
    memory_id = str(payload.get("id", ""))
    current = state.get(memory_id)
    if op in ("delete", "purge"):
        state.pop(memory_id, None)
        reclose = payload.get("reclose")
        if reclose and (old := state.get(str(reclose["id"]))) is not None:
            old["superseded_by"] = memory_id
            old["valid_to"] = reclose["valid_to"]
    elif current is None:
        return
    elif op == "update":
        current.update(payload.get("set") or {})
    elif op == "archive":
        current["archived_at"] = payload["at"]
    elif op == "restore":
        current["archived_at"] = None
        current["last_accessed_at"] = payload["at"]
    elif op == "retire":
        current["archived_at"] = current["valid_to"] = payload["at"]


class _PastConnection:
    """An asyncpg connection whose reads go to the past tables (what `Past.acquire` lends)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    @staticmethod
    def sql(query: str) -> str:
        return _TABLE_REF.sub(lambda m: f"{m[1]}{m[2]}{_PAST_TABLES[m[3]]}", query)

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        return list(await self.conn.fetch(self.sql(query), *args))

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        return await self.conn.fetchrow(self.sql(query), *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self.conn.fetchval(self.sql(query), *args)


@dataclass
class Past(_PastConnection):
    """The store of some scopes as it was at `at`, for the reads of one request: it stands in for
    the pool (fetch, fetchrow, fetchval, acquire), and its statements read the past tables.
    `purged`: memories present at `at` whose text was purged since; `degraded`: what it could not
    do (embedder_unavailable: rows whose vector could not be made are found by keywords only)."""

    conn: asyncpg.Connection
    at: datetime
    scopes: list[str]
    purged: list[str] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[_PastConnection]:
        yield self


@asynccontextmanager
async def past(
    pool: asyncpg.Pool, scopes: list[str], at: datetime, embed: EmbedDocuments
) -> AsyncIterator[Past]:
    """The store of `scopes` as it was at `at`, for the duration of the block (one transaction
    on one connection of `pool`; its tables are dropped at its end)."""
    check_instant(at)
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        records = await conn.fetch(_RECORDS, scopes, at)
        state, purged = replay(records)
        await conn.execute(_CREATE)
        if state:
            generated = [(r["attname"], r["expression"]) for r in await conn.fetch(_GENERATED)]
            await conn.execute(_insert_sql([name for name, _ in generated]), json.dumps(list(state.values())))
            await conn.execute(_compute_sql(generated))
        degraded = await _fill_vectors(conn, embed)
        await conn.execute(_STATISTICS)
        yield Past(conn, at, scopes, sorted(purged), degraded + ([PURGED] if purged else []))


def _embedding_text(description: str, content: str) -> str:
    # The text curation embeds a memory as (services/curation/embedding.py embedding_text, which
    # hm_embedding_text_sha256 keys embedding_store by).
    return f"{description}\n{content}" if description else content


async def _fill_vectors(conn: asyncpg.Connection, embed: EmbedDocuments) -> list[str]:
    """Give every past row its vector: kept by text, else embedded now. Returns the degraded flags."""
    rows = await conn.fetch(_KEPT_VECTORS)
    vectors: dict[uuid.UUID, np.ndarray] = {
        r["id"]: np.frombuffer(r["vector"], dtype="<f4") for r in rows if r["vector"] is not None
    }
    missing = [r for r in rows if r["vector"] is None]
    degraded: list[str] = []
    if missing:
        try:
            made = await embed([_embedding_text(r["description"], r["content"]) for r in missing])
            vectors.update({r["id"]: v for r, v in zip(missing, made, strict=True)})
        except Unavailable:
            degraded.append(EMBEDDER_UNAVAILABLE)
    if vectors:
        await conn.executemany(
            "UPDATE hm_past_memories SET embedding = $2 WHERE id = $1",
            [(memory_id, np.asarray(v, dtype=np.float32)) for memory_id, v in vectors.items()],
        )
    return degraded


async def candidates(past: Past, q: repo.CandidateQuery, vector: np.ndarray | None) -> list[asyncpg.Record]:
    """A search's candidates from the past tables: an exact dense scan, then the same hybrid
    statement as a live search (repo.hybrid)."""
    dense_ids: list[uuid.UUID] = []
    if vector is not None:
        where, params = q.prefilter.sql(first_param=3)
        rows = await past.fetch(repo.dense_sql(where, exact=True), vector, q.depth, *params)
        dense_ids = [r["id"] for r in rows]
    return await repo.hybrid(past, q, vector, dense_ids)
