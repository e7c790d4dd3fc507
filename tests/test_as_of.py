"""memory_search and memory_context `as_of` (issue 30), on the real stack: a project's memories
are created, one updated in place, one superseded, one deleted, one archived, one purged, and
searches and context assembled as of instants between those writes answer exactly the memories
and texts of then; without as_of the answers are today's; a bad or future as_of is refused naming
the parameter; a caller reads only its own scopes' past. At least one as_of call goes through a
real MCP client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.curation import memory_fields
from services.retrieval import as_of
from tests.conftest import Stack
from tests.helpers import mcp_session, tool_json
from tests.test_curation_admin import cli

PROJECT = "asof"
ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": PROJECT}
BOB = {"Authorization": "Bearer bob-token", "X-Hypermnesia-Project": "bobs"}
NO_GATES = {"min_similarity": 0.0, "relative_cutoff": 0.0, "k": 20}

RELEASE_V1 = "The release train leaves every Tuesday at noon"
RELEASE_V2 = "The release train leaves every Thursday at noon"
PAGER = "The on-call pager rotation is handled by Priya this quarter"
PASSWORD = "The staging database password rotates on the first of each month"
LIMIT_V1 = "The public API rate limit is 100 requests per minute"
LIMIT_V2 = "The public API rate limit is 500 requests per minute"
REVIEW = "The design review meeting happens on Fridays"
VENDOR = "The hardware vendor contact is Zed from Acme Servers"


@dataclass
class Timeline:
    ids: dict[str, str]  # name -> memory id
    before: datetime  # before the project's first write
    t1: datetime  # after the creates, before every change
    t2: datetime  # after the changes (and before the purge)


async def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


async def _save(http: httpx.AsyncClient, content: str) -> str:
    body = await _ok(await http.post("/memories", json={"content": content}))
    return str(body["memory"]["id"])


@pytest.fixture(scope="module")
async def timeline(stack: Stack, model_cache: Path) -> AsyncIterator[Timeline]:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        before = datetime.now(UTC)
        ids = {
            "release": await _save(http, RELEASE_V1),
            "pager": await _save(http, PAGER),
            "password": await _save(http, PASSWORD),
            "limit": await _save(http, LIMIT_V1),
            "vendor": await _save(http, VENDOR),
        }
        # Each instant is read after the writes before it have answered and before the next one
        # is sent: the raw log stamps a write when it is appended, on the same clock.
        t1 = datetime.now(UTC)
        await _ok(await http.patch(f"/memories/{ids['release']}", json={"content": RELEASE_V2}))
        superseded = await _ok(
            await http.post(f"/memories/{ids['limit']}/supersede", json={"content": LIMIT_V2})
        )
        ids["limit_v2"] = str(superseded["memory"]["id"])
        await _ok(await http.delete(f"/memories/{ids['password']}"))
        await _ok(await http.post(f"/memories/{ids['pager']}/archive"))
        ids["review"] = await _save(http, REVIEW)
        t2 = datetime.now(UTC)
        purged = await cli(stack.database_url, model_cache, "purge", ids["vendor"])
        assert purged.code == 0, purged.err
    yield Timeline(ids, before, t1, t2)


async def _search(http: httpx.AsyncClient, query: str, at: datetime | None = None) -> dict[str, Any]:
    body = {"query": query, **NO_GATES}
    if at is not None:
        body["as_of"] = at.isoformat()
    return await _ok(await http.post("/memories/search", json=body))


def _lexical(body: dict[str, Any]) -> dict[str, bool]:
    return {r["id"]: r["lexical_match"] for r in body["results"]}


def _texts(body: dict[str, Any]) -> dict[str, str]:
    return {r["id"]: r["content"] for r in body["results"]}


async def test_the_replay_of_the_whole_log_is_the_store(stack: Stack, timeline: Timeline) -> None:
    """as_of's replay (services/retrieval/as_of.py) of every record so far rebuilds the project's
    memories column for column as the writes left them (the access columns, which reads bump
    outside the log, aside); the purged memory is known only as purged."""
    scope = f"project:{PROJECT}"
    rows = await stack.pool.fetch(f"SELECT {memory_fields.SELECT_LIST} FROM memories WHERE scope = $1", scope)
    records = await stack.pool.fetch(as_of._RECORDS, [scope], datetime.now(UTC))
    state, purged = as_of.replay(records)
    live = {str(r["id"]): memory_fields.to_json(r) for r in rows}
    for memories in (state, live):
        for memory in memories.values():
            for name in memory_fields.ACCESS_COLUMNS:
                memory.pop(name)
    assert state == live
    assert purged == {timeline.ids["vendor"]}


async def test_search_answers_the_memories_and_texts_of_then(stack: Stack, timeline: Timeline) -> None:
    ids = timeline.ids
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        query = "release train rate limit pager password design review"
        at_t1 = await _search(http, query, timeline.t1)
        # Every memory of then, each with its text of then: the update, supersede, delete and
        # archive came later; the design review did not exist yet; the vendor's text is purged.
        assert _texts(at_t1) == {
            ids["release"]: RELEASE_V1,
            ids["pager"]: PAGER,
            ids["password"]: PASSWORD,
            ids["limit"]: LIMIT_V1,
        }
        assert at_t1["purged"] == [ids["vendor"]] and at_t1["degraded"] == ["as_of_purged"]

        at_t2 = await _search(http, query, timeline.t2)
        assert _texts(at_t2) == {
            ids["release"]: RELEASE_V2,
            ids["limit_v2"]: LIMIT_V2,
            ids["review"]: REVIEW,
        }
        assert at_t2["purged"] == [ids["vendor"]]

        # Without as_of: today's store, which holds what it held at t2 (the vendor is gone).
        today = await _search(http, query)
        assert _texts(today) == _texts(at_t2)
        assert "purged" not in today

        # Before the project's first write there was nothing to find.
        assert (await _search(http, query, timeline.before))["results"] == []


async def test_the_version_current_then_ranks_for_its_own_words(stack: Stack, timeline: Timeline) -> None:
    """The past is scored on its own texts: Tuesday finds the release memory only before the update
    changed it to Thursday, and the supersede chain answers the version current at each time."""
    ids = timeline.ids
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        for at, text in ((timeline.t1, RELEASE_V1), (timeline.t2, RELEASE_V2)):
            body = await _search(http, "which day does the release train leave", at)
            assert body["results"][0]["id"] == ids["release"]
            assert body["results"][0]["content"] == text
        # The keyword leg reads the text of then: "Tuesday" is a keyword match before the update
        # only (today the memory is still found, by meaning, but not by the word).
        exact = {"query": "Tuesday", "k": 5}
        then = await _ok(
            await http.post("/memories/search", json={**exact, "as_of": timeline.t1.isoformat()})
        )
        now = await _ok(await http.post("/memories/search", json=exact))
        assert _lexical(then)[ids["release"]] is True
        assert _lexical(now).get(ids["release"]) is not True
        for at, current, gone in ((timeline.t1, "limit", "limit_v2"), (timeline.t2, "limit_v2", "limit")):
            found = _texts(await _search(http, "API rate limit requests per minute", at))
            assert ids[current] in found and ids[gone] not in found


async def test_context_as_of(stack: Stack, timeline: Timeline) -> None:
    ids = timeline.ids
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        ask = {"query": "release train day and API rate limit", "mode": "answer"}
        then = await _ok(await http.post("/records/context", json={**ask, "as_of": timeline.t1.isoformat()}))
        cited = set(then["layers"]["memories"]["cited_ids"])
        assert {ids["release"], ids["limit"]} <= cited and ids["limit_v2"] not in cited
        assert "Tuesday" in then["context"] and "Thursday" not in then["context"]
        assert "100 requests" in then["context"] and "500 requests" not in then["context"]
        assert then["purged"] == [ids["vendor"]]

        now = await _ok(await http.post("/records/context", json=ask))
        assert "Thursday" in now["context"] and "Tuesday" not in now["context"]
        assert "500 requests" in now["context"] and "100 requests" not in now["context"]
        assert "purged" not in now

        # No query: the session-start view of then (what changed most recently, by importance).
        start = await _ok(await http.post("/records/context", json={"as_of": timeline.t1.isoformat()}))
        assert PASSWORD in start["context"] and REVIEW not in start["context"]


async def test_through_a_real_mcp_client(stack: Stack, timeline: Timeline) -> None:
    ids = timeline.ids
    async with mcp_session(stack.mcp_url, "alice-token", PROJECT, tools="full") as client:
        found = tool_json(
            await client.call_tool(
                "memory_search",
                {"query": "staging database password", "as_of": timeline.t1.isoformat(), **NO_GATES},
            )
        )
        # The tool answers the bare list of hits; each says what the answer lacks (a purged text).
        assert {h["id"]: h["content"] for h in found}[ids["password"]] == PASSWORD
        assert all("as_of_purged" in h["degraded"] for h in found)
        context = tool_json(
            await client.call_tool(
                "memory_context", {"query": "release train", "as_of": timeline.t1.isoformat()}
            )
        )
        assert RELEASE_V1 in context["context"]
        bad = await client.call_tool("memory_search", {"query": "release", "as_of": "last tuesday"})
        assert bad.is_error and "as_of" in bad.content[0].text
    # The default profile keeps as_of out of its tool list and says where it is.
    async with mcp_session(stack.mcp_url, "alice-token", PROJECT) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert "as_of" not in listed["memory_search"].input_schema["properties"]
        assert "as_of" not in listed["memory_context"].input_schema["properties"]
        refused = await client.call_tool("memory_context", {"as_of": timeline.t1.isoformat()})
        assert refused.is_error and "as_of" in refused.content[0].text and "full" in refused.content[0].text


async def test_bad_or_future_as_of_is_refused_naming_it(stack: Stack, timeline: Timeline) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        for path, body in (
            ("/memories/search", {"query": "release"}),
            ("/records/context", {"query": "release"}),
        ):
            bad = await http.post(path, json={**body, "as_of": "yesterday"})
            assert bad.status_code == 400, bad.text  # a malformed field is 400 here (gateway/app.py)
            assert "as_of" in bad.text and "ISO 8601" in bad.text
            future = await http.post(path, json={**body, "as_of": "2999-01-01T00:00:00Z"})
            assert future.status_code == 400, future.text
            assert "as_of" in future.text and "future" in future.text


async def test_the_past_of_scopes_a_caller_cannot_read_stays_closed(stack: Stack, timeline: Timeline) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=BOB, timeout=60) as http:
        at = timeline.t1.isoformat()
        denied = await http.post(
            "/memories/search", json={"query": "release train", "scope": f"project:{PROJECT}", "as_of": at}
        )
        assert denied.status_code == 403, denied.text
        own = await _ok(
            await http.post("/memories/search", json={"query": "release train", "as_of": at, **NO_GATES})
        )
        assert own["results"] == [] and "purged" not in own


HISTORY = "asof-history"
HISTORY_HEADERS = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": HISTORY}
JUNE = "Maya: the warehouse migration starts in June"
AUGUST = "Maya: the warehouse migration slipped to August"
PG13 = "The warehouse database runs on Postgres 13"
PG16 = "The warehouse database runs on Postgres 16"


async def test_imported_history_answers_as_of_its_own_dates(stack: Stack) -> None:
    """Records imported with the dates they happened on (a conversation, a note and its correction)
    are known from those dates: the turns of a thread and the version of a corrected note current
    at each time, in search and in the context's recent turns."""
    records = [
        {"type": "conversation", "thread_id": "standup", "source_ref": "s1", "created_at": "2023-05-01T09:00:00Z", "content": JUNE},
        {"type": "conversation", "thread_id": "standup", "source_ref": "s2", "prev_source_ref": "s1", "created_at": "2023-06-01T09:00:00Z", "content": AUGUST},
        {"type": "note", "source_ref": "n1", "created_at": "2023-05-02T00:00:00Z", "content": PG13},
        {"type": "note", "source_ref": "n2", "supersedes": "n1", "created_at": "2023-07-01T00:00:00Z", "content": PG16},
    ]  # fmt: skip
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HISTORY_HEADERS, timeout=60) as http:
        await _ok(await http.post("/records/import", json={"records": records}))
        query = "warehouse migration and database"
        for at, expected in (
            ("2022-01-01T00:00:00Z", set()),
            ("2023-05-15T00:00:00Z", {JUNE, PG13}),
            ("2023-06-15T00:00:00Z", {JUNE, AUGUST, PG13}),
            ("2023-07-15T00:00:00Z", {JUNE, AUGUST, PG16}),
        ):
            body = await _ok(
                await http.post("/memories/search", json={"query": query, "as_of": at, **NO_GATES})
            )
            assert set(_texts(body).values()) == expected, at
        context = await _ok(
            await http.post(
                "/records/context", json={"thread_id": "standup", "as_of": "2023-05-15T00:00:00Z"}
            )
        )
        assert JUNE in context["layers"]["recent"]["text"] and AUGUST not in context["context"]
        assert PG13 in context["context"] and PG16 not in context["context"]
