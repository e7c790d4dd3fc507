"""Row-level security (issue 21 item 6) on the real stack: the database's own check under the
services' scope checks. A connection acting as hm_service reads and writes only the scopes its
settings grant, and nothing when it set none; the graph's invariants still cross scopes; the
lexical leg keeps its index; and the migration applies to a store that already holds data."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import grpc
import pytest

from hypermnesia import row_security
from hypermnesia.migrator import INDEXED_OPERATOR_FUNCTIONS, migrate
from hypermnesia.pool import connect_pool
from hypermnesia.v1 import (
    common_pb2,
    curation_pb2,
    curation_pb2_grpc,
    intelligence_pb2,
    intelligence_pb2_grpc,
)
from services.retrieval import repo
from services.retrieval.filters import Prefilter
from services.retrieval.search import SearchInput
from tests.conftest import Stack, create_database
from tests.helpers import migrate_before

ALICE = common_pb2.Caller(principal="alice", grants=["user:alice", "project:*", "shared"])
BOB = common_pb2.Caller(principal="bob", grants=["user:bob", "project:bobs"])
BOTH = common_pb2.Caller(principal="carol", grants=["user:alice", "user:bob"])
TIMEOUT = 60
PROTECTED = ("memories", "records", "record_texts", "evidence_edges", "identities", "proposals")


@dataclass
class World:
    alices: str  # alice's premise, user:alice
    bobs: str  # bob's conclusion resting on it, user:bob


async def _save(
    cur: curation_pb2_grpc.CurationStub, caller: common_pb2.Caller, scope: str, content: str
) -> str:
    reply = await cur.Save(
        curation_pb2.SaveRequest(caller=caller, scope=scope, content=content), timeout=TIMEOUT
    )
    return str(reply.memory.id)


@pytest.fixture(scope="module")
async def world(stack: Stack) -> World:
    """A row in every protected table, in alice's and in bob's scopes, made through the services."""
    tag = uuid.uuid4().hex[:6]
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        cur, intel = curation_pb2_grpc.CurationStub(channel), intelligence_pb2_grpc.IntelligenceStub(channel)
        alices = await _save(cur, ALICE, "user:alice", f"The staging vault key {tag} rotates every Monday")
        bobs = await _save(cur, BOB, "user:bob", f"Deploys {tag} wait for the Monday vault rotation")
        await intel.AddEvidence(
            intelligence_pb2.AddEvidenceRequest(caller=BOTH, derived_id=bobs, premise_ids=[alices]),
            timeout=TIMEOUT,
        )
        for caller, scope in ((ALICE, "user:alice"), (BOB, "user:bob")):
            await intel.CreateIdentity(
                intelligence_pb2.CreateIdentityRequest(
                    caller=caller, scope=scope, name=f"{caller.principal}-{tag}"
                ),
                timeout=TIMEOUT,
            )
    for scope, evidence in (("user:alice", alices), ("user:bob", bobs)):
        await stack.pool.execute(
            "INSERT INTO proposals (id, scope, kind, content, rationale, evidence, mode, evidence_key)"
            " VALUES ($1, $2, 'fact', 'a fact', 'because', $3::uuid[], 'extractive', $4)",
            uuid.uuid4(),
            scope,
            [evidence],
            f"rls-{uuid.uuid4().hex}",
        )
    return World(alices=alices, bobs=bobs)


async def _counts(conn: asyncpg.Connection) -> dict[str, int]:
    return {t: await conn.fetchval(f"SELECT count(*) FROM {t}") for t in PROTECTED}


@pytest.fixture
async def service_conn(stack: Stack) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection acting as hm_service that set nothing else."""
    conn = await asyncpg.connect(stack.database_url)
    try:
        await conn.execute(f"SET ROLE {row_security.SERVICE_ROLE}")
        yield conn
    finally:
        await conn.close()


async def test_a_connection_that_set_no_grants_reads_and_writes_nothing(
    stack: Stack, world: World, service_conn: asyncpg.Connection
) -> None:
    before = await _counts(stack.pool)  # the owner's view
    assert all(n > 0 for n in before.values()), before
    assert await _counts(service_conn) == dict.fromkeys(PROTECTED, 0)
    # Changes reach no row.
    for table, change in (
        ("memories", "SET content = 'overwritten'"),
        ("identities", "SET name = name || '!'"),
        ("proposals", "SET status = 'rejected'"),
        ("evidence_edges", "SET created_by = 'nobody'"),
        ("record_texts", "SET payload = '{}'"),
    ):
        assert await service_conn.execute(f"UPDATE {table} {change}") == "UPDATE 0", table
        assert await service_conn.execute(f"DELETE FROM {table}") == "DELETE 0", table
    # New rows are refused, in any scope.
    record_id = await stack.pool.fetchval("SELECT id FROM records ORDER BY seq LIMIT 1")
    refused = {
        "memories": (
            "INSERT INTO memories (id, scope, owner_id, content, created_at, updated_at, last_accessed_at,"
            " valid_from) VALUES (gen_random_uuid(), 'user:alice', 'x', 'planted', now(), now(), now(), now())"
        ),
        "records": (
            "INSERT INTO records (id, seq, scope, kind, operation, author, created_at, content_sha256,"
            " record_hash) VALUES (gen_random_uuid(), 999999, 'user:alice', 'memory', 'create', 'x', now(),"
            " 'x', 'x')"
        ),
        "record_texts": f"INSERT INTO record_texts (record_id, payload) VALUES ('{record_id}', 'planted')",
        "evidence_edges": (
            "INSERT INTO evidence_edges (derived_id, premise_id, created_by)"
            f" VALUES ('{world.alices}', gen_random_uuid(), 'x')"
        ),
        "identities": (
            "INSERT INTO identities (id, scope, name, owner_id) VALUES (gen_random_uuid(), 'user:alice', 'x', 'x')"
        ),
        "proposals": (
            "INSERT INTO proposals (id, scope, kind, content, rationale, evidence, mode, evidence_key)"
            " VALUES (gen_random_uuid(), 'user:alice', 'fact', 'x', 'x', '{}', 'extractive', 'planted')"
        ),
    }
    for table, sql in refused.items():
        with pytest.raises(
            asyncpg.InsufficientPrivilegeError, match=f'row-level security policy for table "{table}"'
        ):
            await service_conn.execute(sql)
    assert await _counts(stack.pool) == before
    assert await stack.pool.fetchval("SELECT count(*) FROM memories WHERE content = 'overwritten'") == 0


async def test_a_callers_grants_reach_their_scopes_and_no_other(stack: Stack, world: World) -> None:
    pool = await connect_pool(stack.database_url, max_size=1)  # one connection: every switch reuses it
    try:
        with row_security.acting_as(row_security.for_caller(ALICE.grants)):
            async with pool.acquire() as conn:
                assert await conn.fetchval("SELECT current_user") == row_security.SERVICE_ROLE
                scopes = {r["scope"] for r in await conn.fetch("SELECT DISTINCT scope FROM memories")}
                assert "user:alice" in scopes and "user:bob" not in scopes
                assert await conn.fetchval("SELECT count(*) FROM memories WHERE id = $1", world.bobs) == 0
                assert await conn.fetchval("SELECT count(*) FROM records WHERE scope = 'user:bob'") == 0
                assert await conn.fetchval(
                    "SELECT count(*) FROM record_texts t JOIN records r ON r.id = t.record_id"
                    " WHERE r.target_id = $1",
                    world.alices,
                ) > 0  # fmt: skip
                # The edge belongs to bob's conclusion: alice does not see it, even from her premise.
                assert (
                    await conn.fetchval(
                        "SELECT count(*) FROM evidence_edges WHERE premise_id = $1", world.alices
                    )
                    == 0
                )
                assert {r["scope"] for r in await conn.fetch("SELECT scope FROM identities")} <= {
                    "user:alice"
                }
                assert {r["scope"] for r in await conn.fetch("SELECT scope FROM proposals")} <= {"user:alice"}
                # Her own rows she may change (rolled back); bob's she may not reach.
                tx = conn.transaction()
                await tx.start()
                done = await conn.execute(
                    "UPDATE memories SET importance = importance WHERE id = $1", world.alices
                )
                assert done == "UPDATE 1"
                assert (
                    await conn.execute("UPDATE memories SET content = 'x' WHERE id = $1", world.bobs)
                    == "UPDATE 0"
                )
                assert await conn.execute("DELETE FROM identities WHERE scope = 'user:bob'") == "DELETE 0"
                await tx.rollback()
                with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
                    await conn.execute(
                        "UPDATE memories SET scope = 'user:bob' WHERE id = $1", world.alices
                    )  # moving a row out of her scopes
        # Internal work on the same connection is the owner's again, and sees every scope.
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT current_user") != row_security.SERVICE_ROLE
            assert await conn.fetchval("SELECT count(*) FROM memories WHERE id = $1", world.bobs) == 1
        with row_security.acting_as(row_security.for_caller(BOB.grants)):
            async with pool.acquire() as conn:
                assert await conn.fetchval("SELECT count(*) FROM memories WHERE id = $1", world.bobs) == 1
                assert await conn.fetchval("SELECT count(*) FROM memories WHERE id = $1", world.alices) == 0
                assert (
                    await conn.fetchval(
                        "SELECT count(*) FROM evidence_edges WHERE premise_id = $1", world.alices
                    )
                    == 1
                )
    finally:
        await pool.close()


async def test_one_connection_switches_caller_to_caller_and_recovers_from_a_cancelled_switch(
    stack: Stack, world: World
) -> None:
    """Straight from alice to bob on the one pooled connection (no internal work between), and a
    switch cancelled mid-flight is not taken as done: the next acquire sets the grants again."""
    pool = await connect_pool(stack.database_url, max_size=1)

    async def sees(caller: common_pb2.Caller) -> set[str]:
        with row_security.acting_as(row_security.for_caller(caller.grants)):
            async with pool.acquire() as conn:
                rows = await conn.fetch(
                    "SELECT id::text FROM memories WHERE id = ANY($1::uuid[])", [world.alices, world.bobs]
                )
        return {r["id"] for r in rows}

    try:
        assert await sees(ALICE) == {world.alices}
        assert await sees(BOB) == {world.bobs}
        assert await sees(ALICE) == {world.alices}
        with row_security.acting_as(row_security.for_caller(BOB.grants)):
            acquiring = asyncio.ensure_future(pool.acquire())
            await asyncio.sleep(0)  # the setup's set_config is on its way
            acquiring.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                conn = await acquiring
                await pool.release(conn)
        assert await sees(ALICE) == {world.alices}
        assert await sees(BOB) == {world.bobs}
    finally:
        await pool.close()


async def test_the_service_role_reaches_no_token_and_no_cross_scope_function(
    stack: Stack, service_conn: asyncpg.Connection
) -> None:
    """Migration 0026: tokens are internal work's alone; the SECURITY DEFINER functions that act
    across scopes are callable by hm_service only where the services call them, by no other role."""
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="tokens"):
        await service_conn.fetchval("SELECT count(*) FROM tokens")
    assert await service_conn.fetchval("SELECT hm_version_text_hashes(gen_random_uuid())") is not None
    stranger = f"hm_stranger_{uuid.uuid4().hex[:8]}"
    await stack.pool.execute(f"CREATE ROLE {stranger} NOLOGIN")
    try:
        async with stack.pool.acquire() as conn:
            for call in ("hm_version_text_hashes(gen_random_uuid())", "hm_clear_stale(gen_random_uuid())"):
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL ROLE {stranger}")
                    with pytest.raises(
                        asyncpg.InsufficientPrivilegeError, match="permission denied for function"
                    ):
                        await conn.execute(f"SELECT {call}")
    finally:
        await stack.pool.execute(f"DROP ROLE {stranger}")


async def test_a_grant_matches_as_permits_does(stack: Stack, service_conn: asyncpg.Connection) -> None:
    """Exact scopes, `*` prefixes, and scopes holding LIKE's wildcards, commas and quotes."""
    scopes = ["user:abc", "user:a_c", "team:x,y", 'team:"q"', "proj:a%", "proj:ab"]
    ids = {}
    for scope in scopes:
        ids[scope] = await stack.pool.fetchval(
            "INSERT INTO memories (id, scope, owner_id, content, created_at, updated_at, last_accessed_at,"
            " valid_from) VALUES (gen_random_uuid(), $1, 'rls', 'grant shapes', now(), now(), now(), now())"
            " RETURNING id",
            scope,
        )
    try:
        for grants, expected in (
            (["user:a_c"], {"user:a_c"}),
            (["team:x,y", 'team:"q"'], {"team:x,y", 'team:"q"'}),
            (["proj:a%*"], {"proj:a%"}),
            (["proj:*"], {"proj:a%", "proj:ab"}),
            (["*"], set(scopes)),
            ([], set()),
        ):
            with row_security.acting_as(row_security.for_caller(grants)):
                _role, read, _write = row_security.current_state()  # what the pool would set
            await service_conn.execute("SELECT set_config('hm.read_grants', $1, false)", read)
            seen = {
                r["scope"]
                for r in await service_conn.fetch("SELECT scope FROM memories WHERE owner_id = 'rls'")
            }
            assert seen == expected, grants
    finally:
        await stack.pool.execute("DELETE FROM memories WHERE owner_id = 'rls'")


async def test_staleness_reaches_conclusions_the_writer_cannot_see(stack: Stack, world: World) -> None:
    """Alice changes her premise; bob's conclusion, which she may not read, still goes stale, and
    its reason names no id of alice's scope."""
    premise = await stack.pool.fetchval(
        "INSERT INTO memories (id, scope, owner_id, content, created_at, updated_at, last_accessed_at,"
        " valid_from) VALUES (gen_random_uuid(), 'user:alice', 'alice', 'The vault is in Oslo', now(), now(),"
        " now(), now()) RETURNING id"
    )
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        cur, intel = curation_pb2_grpc.CurationStub(channel), intelligence_pb2_grpc.IntelligenceStub(channel)
        conclusion = await _save(
            cur, BOB, "user:bob", f"Travel to Oslo for vault access {uuid.uuid4().hex[:6]}"
        )
        await intel.AddEvidence(
            intelligence_pb2.AddEvidenceRequest(
                caller=BOTH, derived_id=conclusion, premise_ids=[str(premise)]
            ),
            timeout=TIMEOUT,
        )
        await cur.Update(
            curation_pb2.UpdateRequest(caller=ALICE, id=str(premise), content="The vault moved to Bergen"),
            timeout=TIMEOUT,
        )
        stale = await stack.pool.fetchrow(
            "SELECT stale_because, stale_premise FROM memories WHERE id = $1", conclusion
        )
        # Bob is told why, but not the id of a memory in a scope he cannot see (migration 0027).
        assert stale["stale_because"] == "a premise in another scope was updated"
        assert stale["stale_premise"] == premise
        # Bob deletes his conclusion: its edge to alice's premise goes with it, though alice's
        # premise is outside his scopes (proven deletion, issue 22).
        await cur.Delete(curation_pb2.MemoryRequest(caller=BOB, id=conclusion), timeout=TIMEOUT)
    edges = await stack.pool.fetchval("SELECT count(*) FROM evidence_edges WHERE derived_id = $1", conclusion)
    assert edges == 0


async def test_the_lexical_leg_keeps_its_index_and_results_under_row_security(
    stack: Stack, world: World
) -> None:
    leaky = await stack.pool.fetch(
        "SELECT p.oid::regprocedure::text FROM pg_proc p"
        " WHERE p.oid = ANY($1::text[]::regprocedure[]) AND NOT p.proleakproof",
        list(INDEXED_OPERATOR_FUNCTIONS),
    )
    assert leaky == [], "the migrator (a superuser here) marks them LEAKPROOF"
    scope = f"project:rls-{uuid.uuid4().hex[:8]}"
    await stack.pool.execute(
        "INSERT INTO memories (id, scope, owner_id, content, created_at, updated_at, last_accessed_at, valid_from)"
        " SELECT gen_random_uuid(), $1, 'rls-bulk', 'routine entry ' || i || CASE WHEN i % 500 = 0"
        " THEN ' quasar calibration' ELSE ' ordinary' END, now(), now(), now(), now()"
        " FROM generate_series(1, 3000) i",
        scope,
    )
    await stack.pool.execute("ANALYZE memories")
    prefilter = Prefilter(scopes=[scope])
    where, filter_params = prefilter.sql(first_param=11)
    params = ["quasar calibration", repo._STOPWORDS, [scope], 1.2, [0.75, 0.75], None, None, [], 10, 2]
    pool = await connect_pool(stack.database_url, max_size=1)
    try:
        with row_security.acting_as(row_security.for_caller(ALICE.grants)):
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("SET LOCAL enable_seqscan = off")
                plan = "\n".join(
                    r[0]
                    for r in await conn.fetch("EXPLAIN " + repo.hybrid_sql(where), *params, *filter_params)
                )
        assert "memories_tsv_idx" in plan, plan
        assert "hm_grant_patterns" in plan or "InitPlan" in plan, plan  # the policy is there
        # The same search as the service's owner and as alice: the same hits, scored the same.
        query = SearchInput(
            principal="alice",
            grants=tuple(ALICE.grants),
            query="quasar calibration",
            k=10,
            filters=Prefilter(scopes=[scope]),
        )
        as_owner = await stack.searcher.search(query, log=False)
        with row_security.acting_as(row_security.for_caller(ALICE.grants)):
            as_alice = await stack.searcher.search(query, log=False)
        assert len(as_owner.hits) == 6
        assert [(h.id, round(h.score, 6)) for h in as_alice.hits] == [
            (h.id, round(h.score, 6)) for h in as_owner.hits
        ]
        with row_security.acting_as(row_security.for_caller(BOB.grants)):
            assert (await stack.searcher.search(query, log=False)).hits == []
    finally:
        await pool.close()
        await stack.pool.execute("DELETE FROM memories WHERE owner_id = 'rls-bulk'")


async def test_the_migration_applies_to_a_store_holding_data(pg_server_url: str) -> None:
    url = await create_database(pg_server_url)
    pool = await connect_pool(url, max_size=2)
    try:
        async with pool.acquire() as conn:
            await migrate_before(conn, "0025")
            await conn.execute(
                "INSERT INTO memories (id, scope, owner_id, content, created_at, updated_at, last_accessed_at,"
                " valid_from) SELECT gen_random_uuid(), 'user:' || (i % 3), 'o', 'note ' || i, now(), now(), now(),"
                " now() FROM generate_series(1, 50) i"
            )
            await conn.execute(
                "INSERT INTO identities (id, scope, name, owner_id) VALUES (gen_random_uuid(), 'user:1', 'me', 'o')"
            )
            # Each row over the columns it had before (later migrations may add columns).
            digest = (
                "SELECT md5(string_agg(j::text, ',' ORDER BY j::text)) FROM (SELECT (SELECT"
                " jsonb_object_agg(key, value) FROM jsonb_each(to_jsonb(t)) WHERE key = ANY($1::text[])) j"
                " FROM {} t) rows"
            )
            columns = {
                t: await conn.fetchval(
                    "SELECT array_agg(column_name::text) FROM information_schema.columns WHERE table_name = $1",
                    t,
                )
                for t in PROTECTED
            }
            before = {t: await conn.fetchval(digest.format(t), columns[t]) for t in PROTECTED}
        applied = await migrate(pool)
        assert [name for name in applied if name.startswith("0025")] == ["0025_row_security.sql"]
        async with pool.acquire() as conn:
            assert {t: await conn.fetchval(digest.format(t), columns[t]) for t in PROTECTED} == before
            forced = await conn.fetch(
                "SELECT relname FROM pg_class WHERE relname = ANY($1::text[]) AND relrowsecurity",
                list(PROTECTED),
            )
            assert sorted(r["relname"] for r in forced) == sorted(PROTECTED)
        with row_security.acting_as(row_security.for_caller(["user:1"])):
            async with pool.acquire() as conn:
                assert await conn.fetchval("SELECT count(*) FROM memories") == 17
                assert await conn.fetchval("SELECT count(*) FROM identities") == 1
    finally:
        await pool.close()


async def test_stale_reasons_written_before_0027_lose_their_cross_scope_ids(pg_server_url: str) -> None:
    url = await create_database(pg_server_url)
    pool = await connect_pool(url, max_size=2)
    try:
        async with pool.acquire() as conn:
            await migrate_before(conn, "0027")
            premise, successor, here, elsewhere = (uuid.uuid4() for _ in range(4))
            for memory_id, scope in ((premise, "user:a"), (here, "user:a"), (elsewhere, "user:b")):
                await conn.execute(
                    "INSERT INTO memories (id, scope, owner_id, content, created_at, updated_at,"
                    " last_accessed_at, valid_from) VALUES ($1, $2, 'o', 'x', now(), now(), now(), now())",
                    memory_id,
                    scope,
                )
            await conn.execute(
                "UPDATE memories SET stale_at = now(), stale_because = $2 WHERE id = ANY($1::uuid[])",
                [here, elsewhere],
                f"premise {premise} was superseded by {successor}",
            )
        await migrate(pool)
        rows = {
            r["id"]: r
            for r in await pool.fetch(
                "SELECT id, stale_because, stale_premise FROM memories WHERE id = ANY($1::uuid[])",
                [here, elsewhere],
            )
        }
        assert rows[here]["stale_because"] == f"premise {premise} was superseded by {successor}"
        assert rows[elsewhere]["stale_because"] == "a premise in another scope was superseded"
        assert rows[here]["stale_premise"] == rows[elsewhere]["stale_premise"] == premise
    finally:
        await pool.close()
