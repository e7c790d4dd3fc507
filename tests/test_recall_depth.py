"""Recall depth and staleness on the real stack (issue 18, items 2 and 3): explicit / derived /
premises / ancestry / auto on search and context, the fixed caps, stale conclusions leaving the
default reads and coming back flagged, and evidence that never crosses the caller's scopes.

The evidence edges are written with SQL on the stack's pool (the graph write RPCs belong to
curation); everything read goes through REST."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import pytest

from hypermnesia.recall_depth import MAX_HOPS, MAX_ROWS
from tests.conftest import Stack

ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "depth"}
BOB = {"Authorization": "Bearer bob-token", "X-Hypermnesia-Project": "bobs"}
SCOPE = "project:depth"
# Gates off: these tests are about what the graph adds, not about what the gates drop.
OPEN = {"min_similarity": 0.0, "relative_cutoff": 0.0}

GRAND = "The ledger-east Cassandra cluster was provisioned by the platform team in 2023"
PREMISE_A = "The billing service writes every invoice to the ledger-east Cassandra cluster"
PREMISE_B = "Cassandra keyspaces on ledger-east use a replication factor of three"
BUDGET = "The finance team signed off on next year's storage spending in January"
CONCLUSION = "Billing invoices are kept in three replicas on the ledger-east Cassandra cluster"


async def _save(http: httpx.AsyncClient, content: str, description: str, **extra) -> str:
    response = await http.post("/memories", json={"content": content, "description": description, **extra})
    assert response.status_code == 200, response.text
    return response.json()["memory"]["id"]


async def _search(http: httpx.AsyncClient, query: str, **extra) -> dict:
    response = await http.post("/memories/search", json={"query": query, **extra})
    assert response.status_code == 200, response.text
    return response.json()


async def _context(http: httpx.AsyncClient, **body) -> dict:
    response = await http.post("/records/context", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def _edges(stack: Stack, *edges: tuple[str, str]) -> None:
    await stack.pool.executemany(
        "INSERT INTO evidence_edges (derived_id, premise_id, created_by) VALUES ($1::uuid, $2::uuid, 'test')",
        list(edges),
    )


@dataclass(frozen=True)
class Graph:
    stack: Stack
    grand: str
    a: str
    b: str
    conclusion: str
    plain: str


@pytest.fixture(scope="module")
async def graph(stack: Stack) -> Graph:
    """conclusion -> (A, B); A -> grand. The conclusion and A are derived, B and grand stored."""
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        grand = await _save(http, GRAND, "who provisioned ledger-east")
        a = await _save(http, PREMISE_A, "where invoices are written")
        b = await _save(http, PREMISE_B, "ledger-east replication")
        conclusion = await _save(http, CONCLUSION, "how billing invoices are stored")
        plain = await _save(
            http, "The office espresso machine is descaled every Friday afternoon", "espresso upkeep",
            scope="project:depth-plain",
        )  # fmt: skip
    await _edges(stack, (conclusion, a), (conclusion, b), (a, grand))
    return Graph(stack, grand, a, b, conclusion, plain)


def _ids(body: dict) -> list[str]:
    return [r["id"] for r in body["results"]]


def _hits(body: dict) -> list[dict]:
    return [r for r in body["results"] if "via" not in r]


def _evidence(body: dict) -> list[dict]:
    return [r for r in body["results"] if "via" in r]


async def test_explicit_leaves_derived_conclusions_out(graph: Graph) -> None:
    async with httpx.AsyncClient(base_url=graph.stack.base_url, headers=ALICE, timeout=60) as http:
        body = await _search(http, CONCLUSION, scope=SCOPE, depth="explicit", **OPEN)
    assert body["depth"] == "explicit" and body["depth_reason"] == "requested"
    found = _ids(body)
    assert graph.conclusion not in found and graph.a not in found  # both rest on evidence
    assert graph.b in found and graph.grand in found
    assert _evidence(body) == []


async def test_derived_is_the_default_and_keeps_conclusions(graph: Graph) -> None:
    async with httpx.AsyncClient(base_url=graph.stack.base_url, headers=ALICE, timeout=60) as http:
        default = await _search(http, CONCLUSION, scope=SCOPE, **OPEN)
        named = await _search(http, CONCLUSION, scope=SCOPE, depth="derived", **OPEN)
    # The drop-in envelope is unchanged when no depth is named; a named one is reported.
    assert set(default) == {"results", "degraded"}
    assert named["depth"] == "derived" and named["depth_reason"] == "requested"
    assert _ids(default)[0] == graph.conclusion
    assert set(_ids(default)) == set(_ids(named)) >= {graph.conclusion, graph.a, graph.b, graph.grand}
    assert _evidence(default) == []  # derived adds no evidence rows
    assert all("stale" not in r for r in default["results"])


async def test_premises_appends_the_direct_evidence_flagged(graph: Graph) -> None:
    async with httpx.AsyncClient(base_url=graph.stack.base_url, headers=ALICE, timeout=60) as http:
        body = await _search(http, CONCLUSION, scope=SCOPE, k=1, depth="premises")
    assert body["depth"] == "premises" and body["depth_reason"] == "requested"
    assert [r["id"] for r in _hits(body)] == [graph.conclusion]
    # The evidence follows the hits, each naming the conclusion it supports; no scores of its own.
    assert body["results"][0]["id"] == graph.conclusion
    evidence = _evidence(body)
    assert {r["id"] for r in evidence} == {graph.a, graph.b}  # one hop: not the grandparent
    assert all(r["via"] == {"premise_of": graph.conclusion, "hops": 1} for r in evidence)
    assert all("score" not in r for r in evidence)
    assert {r["content"] for r in evidence} == {PREMISE_A, PREMISE_B}


async def test_ancestry_walks_two_hops(graph: Graph) -> None:
    async with httpx.AsyncClient(base_url=graph.stack.base_url, headers=ALICE, timeout=60) as http:
        body = await _search(http, CONCLUSION, scope=SCOPE, k=1, depth="ancestry")
    assert body["depth"] == "ancestry"
    evidence = _evidence(body)
    assert [r["id"] for r in evidence][2:] == [graph.grand]  # nearest first: hop 1, then hop 2
    via = {r["id"]: r["via"] for r in evidence}
    assert via[graph.a] == {"premise_of": graph.conclusion, "hops": 1}
    assert via[graph.b] == {"premise_of": graph.conclusion, "hops": 1}
    assert via[graph.grand] == {"premise_of": graph.a, "hops": 2}


async def _rows(stack: Stack, scope: str, contents: list[str]) -> list[str]:
    """Evidence-only memories written with SQL (never searched for, so no embedding needed): a
    run of near-identical sentences saved through the API would be merged by dedupe."""
    rows = await stack.pool.fetch(
        "INSERT INTO memories (id, scope, owner_id, content, created_at, updated_at, last_accessed_at, valid_from)"
        " SELECT gen_random_uuid(), $1, 'alice', c, now(), now(), now(), now() FROM unnest($2::text[]) AS c"
        " RETURNING id::text",
        scope,
        contents,
    )
    return [r["id"] for r in rows]


async def test_ancestry_stops_at_its_caps(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        # A chain one longer than MAX_HOPS: top -> c1 -> ... -> c(MAX_HOPS + 1).
        top_text = "Port rule: the harbour office reviews the tide tables every spring"
        top = await _save(http, top_text, "tide table review", scope="project:depth-caps")
        below = await _rows(stack, "project:depth-caps", [f"port fact {i}" for i in range(1, MAX_HOPS + 2)])
        chain = [top, *below]
        await _edges(stack, *zip(chain, chain[1:], strict=False))
        body = await _search(http, top_text, scope="project:depth-caps", k=1, depth="ancestry")
        assert [r["id"] for r in _hits(body)] == [top]
        assert [(r["id"], r["via"]) for r in _evidence(body)] == [
            (chain[i], {"premise_of": chain[i - 1], "hops": i}) for i in range(1, MAX_HOPS + 1)
        ]
        # More direct premises than MAX_ROWS: the evidence stops at MAX_ROWS rows.
        wide_text = "Summary: the lantern crates together hold every spare lantern of the fleet"
        wide_top = await _save(http, wide_text, "lantern summary", scope="project:depth-rows")
        premises = await _rows(
            stack, "project:depth-rows", [f"crate {i} of lanterns" for i in range(MAX_ROWS + 5)]
        )
        await _edges(stack, *[(wide_top, p) for p in premises])
        for depth in ("premises", "ancestry"):
            wide = await _search(http, wide_text, scope="project:depth-rows", k=1, depth=depth)
            assert [r["id"] for r in _hits(wide)] == [wide_top]
            assert len(_evidence(wide)) == MAX_ROWS
            assert {r["id"] for r in _evidence(wide)} < set(premises)


async def test_auto_picks_a_policy_and_says_why(graph: Graph) -> None:
    async with httpx.AsyncClient(base_url=graph.stack.base_url, headers=ALICE, timeout=60) as http:
        derived_top = await _search(http, CONCLUSION, scope=SCOPE, k=3, depth="auto")
        stored_only = await _search(
            http, "when is the espresso machine descaled", scope="project:depth-plain", depth="auto"
        )
        nothing = await _search(
            http, "zeppelin hangar mooring masts", scope="project:depth-empty", depth="auto"
        )
    # The best hit is a derived conclusion: its premises are added.
    assert _hits(derived_top)[0]["id"] == graph.conclusion
    assert derived_top["depth"] == "premises"
    assert derived_top["depth_reason"].startswith("auto:") and graph.conclusion in derived_top["depth_reason"]
    # The direct evidence of every derived hit (A, itself derived, may be among the top three).
    assert {r["via"]["premise_of"] for r in _evidence(derived_top)} <= {graph.conclusion, graph.a}
    assert all(r["via"]["hops"] == 1 for r in _evidence(derived_top))
    # Only stored rows found: nothing to widen.
    assert _ids(stored_only) == [graph.plain]
    assert stored_only["depth"] == "explicit" and stored_only["depth_reason"].startswith("auto:")
    assert nothing["results"] == [] and nothing["depth"] == "explicit"
    assert "nothing was found" in nothing["depth_reason"]


async def test_bad_depth_is_refused_with_the_choices(graph: Graph) -> None:
    async with httpx.AsyncClient(base_url=graph.stack.base_url, headers=ALICE, timeout=60) as http:
        for path, body in (
            ("/memories/search", {"query": "invoices", "depth": "deep"}),
            ("/records/context", {"query": "invoices", "depth": "deep"}),
        ):
            response = await http.post(path, json=body)
            assert response.status_code == 400, response.text
            message = response.json()["error"]["message"]
            assert "'deep'" in message and "explicit, derived, premises, ancestry, auto" in message


async def test_context_follows_the_depth(graph: Graph) -> None:
    async with httpx.AsyncClient(base_url=graph.stack.base_url, headers=ALICE, timeout=60) as http:
        # A premise far from the question (the search's relative cutoff leaves it out of the hits),
        # so that under `premises` it reaches the context only as the conclusion's evidence.
        budget = await _save(http, BUDGET, "storage budget sign-off")
        await _edges(graph.stack, (graph.conclusion, budget))
        default = await _context(http, query=CONCLUSION, scope=SCOPE)
        explicit = await _context(http, query=CONCLUSION, scope=SCOPE, depth="explicit")
        premises = await _context(http, query=CONCLUSION, scope=SCOPE, depth="premises")
        auto = await _context(http, query=CONCLUSION, scope=SCOPE, depth="auto")
        start = await _context(http, scope=SCOPE, depth="auto")
        start_premises = await _context(http, scope=SCOPE, depth="premises")
    assert default["depth"] == "derived" and default["depth_reason"] == "requested"
    assert graph.conclusion in default["layers"]["memories"]["cited_ids"]
    cited = [i for layer in explicit["layers"].values() for i in layer["cited_ids"]]
    assert graph.conclusion not in cited and graph.a not in cited and graph.b in cited
    memories = premises["layers"]["memories"]
    assert premises["depth"] == "premises"
    assert {graph.conclusion, graph.a, graph.b} <= set(memories["cited_ids"])
    assert budget not in default["layers"]["memories"]["cited_ids"]
    assert budget in memories["cited_ids"]
    evidence_line = next(line for line in memories["text"].splitlines() if f"[{budget[:8]}]" in line)
    assert f"evidence for [{graph.conclusion[:8]}]" in evidence_line
    assert auto["depth"] == "premises" and auto["depth_reason"].startswith("auto:")
    assert start["depth"] == "derived" and "no query" in start["depth_reason"]
    # At session start the recalled rows are the roots: their evidence not already shown follows.
    assert start_premises["depth"] == "premises" and start_premises["depth_reason"] == "requested"
    assert graph.conclusion in start_premises["layers"]["memories"]["cited_ids"]


async def test_a_stale_conclusion_leaves_default_reads_and_comes_back_flagged(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        premise = await _save(
            http, "The staging cluster autoscaler caps the node pool at twelve nodes", "cap"
        )
        conclusion_text = "Staging can never run more than twelve worker nodes at once"
        conclusion = await _save(http, conclusion_text, "staging size limit")
        await _edges(stack, (conclusion, premise))
        before = await _search(http, conclusion_text, scope=SCOPE, **OPEN)
        assert _ids(before)[0] == conclusion

        patched = await http.patch(
            f"/memories/{premise}",
            json={"content": "The staging autoscaler caps the node pool at twenty nodes"},
        )
        assert patched.status_code == 200, patched.text
        because = f"premise {premise} was updated"

        # Still readable by id and in lineage, flagged.
        got = (await http.get(f"/memories/{conclusion}")).json()
        assert got["stale"] is True and got["stale_because"] == because
        lineage = await http.get(f"/memories/{conclusion}/lineage")
        assert lineage.status_code == 200, lineage.text
        assert [m.get("stale") for m in lineage.json()["lineage"]] == [True]

        # Gone from default search, list and context.
        after = await _search(http, conclusion_text, scope=SCOPE, **OPEN)
        assert conclusion not in _ids(after) and premise in _ids(after)
        listed = (await http.get("/memories", params={"scope": SCOPE, "limit": 200})).json()
        assert conclusion not in [m["id"] for m in listed["memories"]]
        context = await _context(http, query=conclusion_text, scope=SCOPE)
        assert all(conclusion not in layer["cited_ids"] for layer in context["layers"].values())

        # include_stale brings it back, flagged.
        back = await _search(http, conclusion_text, scope=SCOPE, include_stale=True, **OPEN)
        (hit,) = [r for r in back["results"] if r["id"] == conclusion]
        assert hit["stale"] is True and hit["stale_because"] == because
        assert all("stale" not in r for r in back["results"] if r["id"] != conclusion)
        listed = (
            await http.get("/memories", params={"scope": SCOPE, "limit": 200, "include_stale": "true"})
        ).json()
        (item,) = [m for m in listed["memories"] if m["id"] == conclusion]
        assert item["stale"] is True
        context = await _context(http, query=conclusion_text, scope=SCOPE, include_stale=True)
        memories = context["layers"]["memories"]
        assert conclusion in memories["cited_ids"]
        assert f"[{conclusion[:8]}] (stale: {because})" in memories["text"]


async def test_evidence_in_another_principals_scope_is_not_revealed(stack: Stack) -> None:
    async with (
        httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as alice,
        httpx.AsyncClient(base_url=stack.base_url, headers=BOB, timeout=60) as bob,
    ):
        hidden = await _save(alice, "Alice's private note: the vendor discount code is ORCA-77", "discount code",
                             scope="user:alice")  # fmt: skip
        shown = await _save(bob, "Bob's team orders lab hardware from the Orca vendor", "hardware vendor")
        text = "Bob's lab hardware comes from Orca at a negotiated discount"
        conclusion = await _save(bob, text, "hardware pricing")
        await _edges(stack, (conclusion, shown), (conclusion, hidden))
        for depth in ("premises", "ancestry", "auto"):
            body = await _search(bob, text, scope="project:bobs", k=1, depth=depth)
            assert [r["id"] for r in _hits(body)] == [conclusion]
            assert [r["id"] for r in _evidence(body)] == [shown], depth
            # Not even a trace: the unreadable premise's id appears nowhere in the answer.
            assert hidden not in str(body) and "ORCA-77" not in str(body)
        context = await _context(bob, query=text, scope="project:bobs", depth="ancestry")
        assert hidden not in str(context) and "ORCA-77" not in str(context)
        assert shown in context["layers"]["memories"]["cited_ids"]
        # Alice may read both scopes, but evidence stays within the scopes searched.
        body = await _search(alice, text, scope="project:bobs", k=1, depth="premises")
        assert [r["id"] for r in _evidence(body)] == [shown]
