"""Deletion that can be proven (issue 22): after a delete (the service's memory_delete) and after
`hypermnesia purge`, `verify --forgotten` finds the memory in no derived place and a search for its
rare words finds nothing; a derived copy left behind on purpose makes it fail, naming the place."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx

from services.curation import proposals
from services.curation.repo import text_sha256
from tests.conftest import Stack
from tests.test_curation_admin import ALICE, cli


async def _search_hits(stack: Stack, query: str, word: str, memory_id: str) -> list[dict]:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        found = await http.post("/memories/search", json={"query": query, "k": 20})
        assert found.status_code == 200, found.text
    return [
        h for h in found.json()["results"] if h["id"] == memory_id or word.lower() in h["content"].lower()
    ]


async def _terms(stack: Stack, *terms: str) -> list[str]:
    rows = await stack.pool.fetch(
        "SELECT term FROM lexical_df WHERE scope = 'project:admin' AND term = ANY($1::text[])", list(terms)
    )
    return [r["term"] for r in rows]


async def test_delete_leaves_no_derived_copy(stack: Stack, model_cache: Path) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        await http.post("/memories", json={"content": "The build server is called osprey"})
        saved = await http.post(
            "/memories", json={"content": "Quillfeather deploys via kestrel-gw.internal:8443 with Zorblax"}
        )
        memory_id = saved.json()["memory"]["id"]
    assert await _search_hits(stack, "Quillfeather Zorblax", "Quillfeather", memory_id)
    assert await _terms(stack, "quillfeather", "zorblax")
    live = await cli(stack.database_url, model_cache, "verify", "--forgotten", memory_id)
    assert live.code == 6 and "memories" in live.err  # a live memory is not forgotten

    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        # Two versions, two kept vectors: the delete takes both.
        patched = await http.patch(
            f"/memories/{memory_id}",
            json={"content": "Quillfeather deploys via kestrel-gw.internal:8443 with Zorblax nightly"},
        )
        assert patched.status_code == 200, patched.text
        versions = [
            text_sha256(f"Quillfeather deploys via kestrel-gw.internal:8443 with Zorblax{tail}")
            for tail in ("", " nightly")
        ]
        kept = "SELECT count(*) FROM embedding_store WHERE text_sha256 = ANY($1::text[])"
        assert await stack.pool.fetchval(kept, versions) == 2
        deleted = await http.delete(f"/memories/{memory_id}")
        assert deleted.status_code == 200, deleted.text

    checked = await cli(stack.database_url, model_cache, "verify", "--forgotten", memory_id)
    assert checked.code == 0, checked.out + checked.err
    assert "is forgotten" in checked.out and "deleted" in checked.out
    assert "raw log texts" in checked.out and "kept by design" in checked.out  # delete keeps history
    assert "HOLDS" not in checked.out
    assert await _terms(stack, "quillfeather", "zorblax") == []
    assert await stack.pool.fetchval(kept, versions) == 0
    assert await _search_hits(stack, "Quillfeather Zorblax", "Quillfeather", memory_id) == []
    assert (
        await stack.pool.fetchval(
            "SELECT count(*) FROM entities WHERE name IN ('Quillfeather', 'Zorblax', 'gw.internal')"
        )
        == 0
    )


async def test_purge_leaves_no_derived_copy_and_a_planted_one_is_named(
    stack: Stack, model_cache: Path
) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        saved = await http.post(
            "/memories", json={"content": "Marmaduke keeps the vault code in Brindlewick"}
        )
        memory_id = saved.json()["memory"]["id"]
        other = await http.post("/memories", json={"content": "The vault is in the basement"})
        other_id = other.json()["memory"]["id"]
        patched = await http.patch(
            f"/memories/{memory_id}", json={"content": "Marmaduke keeps the vault code in Brindlewick hall"}
        )
        assert patched.status_code == 200, patched.text
    async with stack.pool.acquire() as conn, conn.transaction():
        (proposal,) = await proposals.propose(
            conn,
            [
                proposals.Draft(
                    scope="project:admin",
                    kind="fact",
                    content="The vault code is kept in the basement",
                    rationale="two memories about the vault",
                    evidence=(uuid.UUID(memory_id), uuid.UUID(other_id)),
                    mode="extractive",
                )
            ],
            "system:dreamer",
        )
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        approved = await http.post(f"/proposals/{proposal['id']}/approve", json={"reason": "ok"})
        assert approved.status_code == 200, approved.text
    conclusion = await stack.pool.fetchval("SELECT result_id FROM proposals WHERE id = $1", proposal["id"])

    purged = await cli(stack.database_url, model_cache, "purge", memory_id)
    assert purged.code == 0, purged.err
    checked = await cli(stack.database_url, model_cache, "verify", "--forgotten", memory_id)
    assert checked.code == 0, checked.out + checked.err
    assert "purged" in checked.out and "HOLDS" not in checked.out and "kept by design" not in checked.out
    assert await _terms(stack, "marmaduke") == []
    assert await _search_hits(stack, "Marmaduke vault code Brindlewick", "Marmaduke", memory_id) == []
    quoted = await stack.pool.fetchrow(
        "SELECT content, description FROM proposals WHERE id = $1", proposal["id"]
    )
    assert (quoted["content"], quoted["description"]) == ("", "")
    stale = await stack.pool.fetchval("SELECT stale_because FROM memories WHERE id = $1", conclusion)
    assert stale and memory_id in stale
    texts = json.dumps([r["payload"] for r in await stack.pool.fetch("SELECT payload FROM record_texts")])
    assert "Brindlewick" not in texts and "Marmaduke" not in texts
    chain = await cli(stack.database_url, model_cache, "verify")
    assert chain.code == 0, chain.err

    # Plant derived copies back by raw SQL: each is named.
    payload = await stack.pool.fetchval(
        "SELECT t.payload FROM records r JOIN record_texts t ON t.record_id = r.id"
        " WHERE r.target_id = $1::uuid AND r.operation = 'purge'",
        memory_id,
    )
    vector_hash = json.loads(payload)["vectors"][0]
    await stack.pool.execute(
        "INSERT INTO embedding_store (text_sha256, vector) VALUES ($1, $2)", vector_hash, b"\x00" * 16
    )
    try:
        leaked = await cli(stack.database_url, model_cache, "verify", "--forgotten", memory_id)
        assert leaked.code == 6, leaked.out + leaked.err
        assert "stored vectors" in leaked.err and "HOLDS 1" in leaked.out
    finally:
        await stack.pool.execute("DELETE FROM embedding_store WHERE text_sha256 = $1", vector_hash)
    await stack.pool.execute(
        "INSERT INTO lexical_df (scope, term, df) VALUES ('project:admin', 'marmaduke', 1)"
    )
    try:
        leaked = await cli(stack.database_url, model_cache, "verify", "--forgotten", memory_id)
        assert leaked.code == 6 and "lexical terms" in leaked.err
    finally:
        await stack.pool.execute(
            "DELETE FROM lexical_df WHERE scope = 'project:admin' AND term = 'marmaduke'"
        )
    clean = await cli(stack.database_url, model_cache, "verify", "--forgotten", memory_id)
    assert clean.code == 0, clean.out + clean.err
