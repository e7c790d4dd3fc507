"""The drop-in MCP behaviour through real clients (issue 17's "Done when"): with two tokens and three
projects (one by header, two by workspace roots), the `fastmcp` client shows every behaviour of the
memory tools, the scope rules and the errors; the official SDK client, making the same calls, reads
the same JSON."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types
import pytest
from fastmcp import Client as FastClient
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import FileUrl

from hypermnesia.scopes import project_scope, project_scope_for_root
from tests.conftest import Stack, start_stack
from tests.helpers import tool_json

# Alice holds no `project:*` grant: her session's project is hers to read and write all the same.
TOKENS = {
    "alice-token": {"principal": "alice", "scopes": ["user:alice", "shared"]},
    "bob-token": {"principal": "bob", "scopes": ["user:bob"]},
    "carol-token": {"principal": "carol", "scopes": ["user:carol"]},
}
AUTH_HEADER = "Authorization: Bearer <token>"
MEMORY_KEYS = {
    "id",
    "owner_id",
    "scope",
    "type",
    "content",
    "description",
    "tags",
    "metadata",
    "importance",
    "created_at",
    "updated_at",
    "last_accessed_at",
    "archived_at",
}
# The ten drop-in tools and the parameters existing clients call each with.
SEED_001_TOOLS = {
    "memory_search": {"query", "scope", "tags", "k", "min_similarity", "relative_cutoff"},
    "memory_save": {"content", "description", "scope", "type", "tags", "metadata", "importance"},
    "memory_update": {"memory_id", "content", "description", "type", "tags", "metadata", "importance"},
    "memory_get": {"memory_id"},
    "memory_list": {"scope", "tags", "limit", "include_archived", "full"},
    "memory_delete": {"memory_id"},
    "memory_forget": {"scope", "tags", "older_than_days", "importance_floor", "apply", "limit"},
    "memory_restore": {"memory_id"},
    "memory_stats": {"scope", "days"},
    "memory_usage_guide": {"section"},
}
NOBODY = "00000000-0000-0000-0000-000000000000"

STANDUP = "Our team's standup meeting happens every weekday at 9:30 in the morning"
FACTS = [
    (STANDUP, "standup time"),
    ("The staging database is PostgreSQL 16 running on a dedicated virtual machine", "staging database"),
    ("Deploy failures with ERR_7731 mean the artifact signature expired; re-sign the build", "ERR_7731"),
    ("Alice likes dark mode in every code editor she uses", "editor theme"),
]
STANDUP_QUESTION = "what time is the daily standup?"


@pytest.fixture(scope="module")
async def dropin(pg_server_url: str, embedder: str, model_cache: Path) -> AsyncIterator[Stack]:
    async with start_stack(pg_server_url, embedder, model_cache, auth_tokens=TOKENS) as running:
        yield running


class Refused(Exception):
    """A tool call that answered with an error; `message` is what the client showed."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


Call = Callable[[str, dict[str, Any]], Awaitable[Any]]
Connect = Callable[..., AbstractAsyncContextManager[Call]]


def _headers(token: str, project: str | None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if project:
        headers["X-Hypermnesia-Project"] = project
    return headers


def fastmcp_client(url: str) -> Connect:
    @asynccontextmanager
    async def connect(
        token: str, root: Path | None = None, project: str | None = None
    ) -> AsyncIterator[Call]:
        transport = StreamableHttpTransport(url, headers=_headers(token, project))
        async with FastClient(transport, roots=[root.as_uri()] if root else None) as client:

            async def call(tool: str, arguments: dict[str, Any]) -> Any:
                try:
                    return (await client.call_tool(tool, arguments)).data
                except ToolError as exc:
                    raise Refused(str(exc)) from exc

            yield call

    return connect


def sdk_client(url: str) -> Connect:
    @asynccontextmanager
    async def connect(
        token: str, root: Path | None = None, project: str | None = None
    ) -> AsyncIterator[Call]:
        async def roots(context: Any) -> mcp_types.ListRootsResult:
            assert root is not None
            return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri=FileUrl(root.as_uri()))])

        async with httpx2.AsyncClient(headers=_headers(token, project), timeout=60) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, list_roots_callback=roots if root else None) as client:

                async def call(tool: str, arguments: dict[str, Any]) -> Any:
                    result = await client.call_tool(tool, arguments)
                    if result.is_error:
                        shown = result.content[0]
                        assert isinstance(shown, mcp_types.TextContent)
                        raise Refused(shown.text)
                    return tool_json(result)  # structured_content, unwrapping {"result": ...}

                yield call

    return connect


@dataclass
class Transcript:
    """Every call's answer (or refusal) in order, to compare what two clients read."""

    entries: list[tuple[str, str, Any]] = field(default_factory=list)

    async def ok(self, call: Call, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        out = await call(tool, arguments or {})
        self.entries.append((tool, "ok", out))
        return out

    async def refused(self, call: Call, tool: str, arguments: dict[str, Any]) -> str:
        with pytest.raises(Refused) as caught:
            await call(tool, arguments)
        self.entries.append((tool, "refused", caught.value.message))
        return caught.value.message


@dataclass
class Places:
    """One run's projects: two workspace roots and two header-named projects."""

    root_a: Path
    root_b: Path
    header: str
    forget: str

    @classmethod
    def make(cls, base: Path, run: str) -> Places:
        root_a, root_b = base / run / "alpha", base / run / "beta"
        root_a.mkdir(parents=True)
        root_b.mkdir(parents=True)
        return cls(root_a, root_b, f"dropin-{run}", f"forget-{run}")

    @property
    def scope_a(self) -> str:
        return project_scope_for_root(self.root_a.as_uri())

    @property
    def scope_b(self) -> str:
        return project_scope_for_root(self.root_b.as_uri())

    def roles(self) -> dict[str, str]:
        return {
            self.scope_a: "<project A>",
            self.scope_b: "<project B>",
            project_scope(self.header): "<project H>",
            project_scope(self.forget): "<project F>",
        }


def _sorted_by_score(hits: list[dict[str, Any]]) -> bool:
    return all(a["score"] >= b["score"] for a, b in zip(hits, hits[1:], strict=False))


async def scenario(connect: Connect, places: Places) -> Transcript:
    """Issue 17 items 1-3 as an existing user meets them; asserts each behaviour as it goes."""
    t = Transcript()
    scope_a, scope_b = places.scope_a, places.scope_b

    # Project A, named by the client's workspace root; alice has no grant on it, and needs none.
    async with connect("alice-token", root=places.root_a) as alice_a:
        saved = [
            await t.ok(alice_a, "memory_save", {"content": content, "description": description})
            for content, description in FACTS
        ]
        first = saved[0]
        assert set(first) == {"created", "memory"} and first["created"] is True  # `replaced` only on a merge
        standup = first["memory"]
        assert MEMORY_KEYS <= set(standup)
        assert standup["scope"] == scope_a and standup["owner_id"] == "alice"
        assert standup["type"] == "fact" and standup["importance"] == 1.0  # the drop-in defaults
        ids = [s["memory"]["id"] for s in saved]

        # CRUD: get, update (only the given fields change), list (an index without bodies).
        got = await t.ok(alice_a, "memory_get", {"memory_id": standup["id"]})
        assert got["id"] == standup["id"] and got["content"] == STANDUP and got["scope"] == scope_a
        updated = await t.ok(
            alice_a, "memory_update", {"memory_id": standup["id"], "tags": ["team"], "importance": 2.0}
        )
        assert updated["tags"] == ["team"] and updated["importance"] == 2.0
        assert (
            updated["content"] == STANDUP and updated["id"] == standup["id"] and updated["scope"] == scope_a
        )
        index = await t.ok(alice_a, "memory_list")
        assert isinstance(index, list) and {m["id"] for m in index} == set(ids)
        assert all("content" not in m and m["description"] for m in index)
        full = await t.ok(alice_a, "memory_list", {"full": True, "limit": 2})
        assert len(full) == 2 and all(m["content"] for m in full)

        # Semantic ranking: the relevant memory first, sorted by a score never below the cosine.
        hits = await t.ok(alice_a, "memory_search", {"query": STANDUP_QUESTION})
        assert isinstance(hits, list) and hits[0]["id"] == standup["id"]
        assert all(0.0 <= h["similarity"] <= 1.0 and h["score"] >= h["similarity"] for h in hits)
        assert _sorted_by_score(hits)

        # min_similarity drops weak matches (relative_cutoff 0: only the absolute floor acts).
        broad = await t.ok(
            alice_a,
            "memory_search",
            {"query": STANDUP_QUESTION, "min_similarity": 0.0, "relative_cutoff": 0.0},
        )
        assert len(broad) == len(FACTS) and broad[0]["id"] == standup["id"]
        floor = round((broad[0]["similarity"] + broad[-1]["similarity"]) / 2, 3)
        narrowed = await t.ok(
            alice_a,
            "memory_search",
            {"query": STANDUP_QUESTION, "min_similarity": floor, "relative_cutoff": 0.0},
        )
        assert narrowed[0]["id"] == standup["id"] and len(narrowed) < len(broad)
        assert all(h["similarity"] >= floor for h in narrowed)

        # An exact token the embedding cannot see is found anyway: a keyword hit passes the floor.
        token_hits = await t.ok(
            alice_a, "memory_search", {"query": "ERR_7731", "min_similarity": 0.95, "relative_cutoff": 0.0}
        )
        assert [h["id"] for h in token_hits] == [ids[2]]
        assert token_hits[0]["lexical_match"] is True and token_hits[0]["similarity"] < 0.95

        # Dedupe: the same fact again updates the memory and says what it replaced.
        again = await t.ok(alice_a, "memory_save", {"content": STANDUP + ".", "description": "standup time"})
        assert again["created"] is False and again["memory"]["id"] == standup["id"]
        assert again["replaced"]["content"] == STANDUP and again["memory"]["content"] == STANDUP + "."

        # A scope the token may not use is refused, naming the scope.
        message = await t.refused(alice_a, "memory_save", {"content": "sneaky", "scope": "user:bob"})
        assert "'user:bob'" in message and "not granted" in message
        message = await t.refused(alice_a, "memory_search", {"query": "anything", "scope": "user:bob"})
        assert "'user:bob'" in message

        # The token's own grants: a user scope and `shared`.
        mine = (
            await t.ok(
                alice_a,
                "memory_save",
                {"content": "Alice's bike lock code is written in her notebook", "scope": "user:alice"},
            )
        )["memory"]
        assert mine["scope"] == "user:alice"
        wifi = (
            await t.ok(
                alice_a,
                "memory_save",
                {
                    "content": "The office wifi network is called Hypatia",
                    "description": "office wifi",
                    "scope": "shared",
                },
            )
        )["memory"]
        assert wifi["scope"] == "shared"

        # An unknown or malformed id answers null, not an error.
        for tool, arguments in (
            ("memory_get", {"memory_id": NOBODY}),
            ("memory_get", {"memory_id": "not-an-id"}),
            ("memory_update", {"memory_id": NOBODY, "content": "x"}),
            ("memory_restore", {"memory_id": NOBODY}),
        ):
            assert await t.ok(alice_a, tool, arguments) is None

        # Delete is hard, and a second delete says there was nothing to delete.
        assert await t.ok(alice_a, "memory_delete", {"memory_id": ids[3]}) == {"deleted": True}
        assert await t.ok(alice_a, "memory_delete", {"memory_id": ids[3]}) == {"deleted": False}
        assert await t.ok(alice_a, "memory_get", {"memory_id": ids[3]}) is None

    # Project B, another workspace root: A's memories stay in A; `shared` and the user scope cross.
    async with connect("alice-token", root=places.root_b) as alice_b:
        elsewhere = await t.ok(alice_b, "memory_search", {"query": STANDUP_QUESTION})
        assert all(h["scope"] != scope_a for h in elsewhere)
        assert await t.ok(alice_b, "memory_get", {"memory_id": standup["id"]}) is None
        assert all(m["scope"] != scope_a for m in await t.ok(alice_b, "memory_list"))
        crossing = await t.ok(alice_b, "memory_search", {"query": "what is the office wifi called?"})
        assert crossing[0]["id"] == wifi["id"] and crossing[0]["scope"] == "shared"
        assert (await t.ok(alice_b, "memory_get", {"memory_id": mine["id"]}))["scope"] == "user:alice"
        # An update and a supersede keep the memory's own scope, not the session's project.
        kept = await t.ok(alice_b, "memory_update", {"memory_id": mine["id"], "description": "bike lock"})
        assert kept["scope"] == "user:alice"
        corrected = await t.ok(
            alice_b,
            "memory_supersede",
            {
                "memory_id": mine["id"],
                "content": "Alice's bike lock code is 4471",
                "description": "bike lock",
            },
        )
        assert corrected["created"] is True and corrected["memory"]["scope"] == "user:alice"
        assert corrected["memory"]["supersedes"] == mine["id"]
        saved_b = await t.ok(alice_b, "memory_save", {"content": "Project B ships on Fridays"})
        assert saved_b["memory"]["scope"] == scope_b

    # The header names the project even when the client advertises a root.
    async with connect("alice-token", root=places.root_a, project=places.header) as alice_h:
        session = await t.ok(alice_h, "memory_usage_guide", {"section": "session"})
        assert session["session"]["project_scope"] == project_scope(places.header)
        assert session["session"]["project_source"] == "header"
        saved_h = await t.ok(alice_h, "memory_save", {"content": "The header project uses tabs"})
        assert saved_h["memory"]["scope"] == project_scope(places.header)
        assert await t.ok(alice_h, "memory_get", {"memory_id": standup["id"]}) is None

    # Bob in the same workspace as A: the session's project is any token's; alice's scopes are not.
    async with connect("bob-token", root=places.root_a) as bob_a:
        assert (await t.ok(bob_a, "memory_get", {"memory_id": standup["id"]}))["scope"] == scope_a
        assert await t.ok(bob_a, "memory_get", {"memory_id": corrected["memory"]["id"]}) is None
        wifi_for_bob = await t.ok(bob_a, "memory_search", {"query": "what is the office wifi called?"})
        assert all(h["scope"] != "shared" for h in wifi_for_bob)
        message = await t.refused(bob_a, "memory_save", {"content": "x", "scope": "shared"})
        assert "'shared'" in message

    # Forget: a dry run by default, `matched` the true total, `memories` at most `limit`; restore.
    async with connect("alice-token", project=places.forget) as alice_f:
        stale = [
            (await t.ok(alice_f, "memory_save", {"content": f"Old note about {w}", "importance": 0.5}))[
                "memory"
            ]
            for w in ("tulips", "volcanoes", "saxophones")
        ]
        criteria = {"older_than_days": 0, "importance_floor": 0.5, "limit": 2}
        here = {"scope": project_scope(places.forget)}
        dry = await t.ok(alice_f, "memory_forget", criteria)
        assert dry["dry_run"] is True and dry["matched"] == 3 and dry["truncated"] is True
        assert len(dry["memories"]) == 2
        assert len(await t.ok(alice_f, "memory_list", here)) == 3
        applied = await t.ok(alice_f, "memory_forget", {**criteria, "apply": True})
        assert applied["dry_run"] is False and applied["matched"] == 3 and applied["truncated"] is True
        assert all(m["archived_at"] for m in applied["memories"])
        assert await t.ok(alice_f, "memory_list", here) == []
        archived = await t.ok(alice_f, "memory_list", {**here, "include_archived": True})
        assert len(archived) == 3 and all(m["archived_at"] for m in archived)
        restored = await t.ok(alice_f, "memory_restore", {"memory_id": stale[0]["id"]})
        assert restored["id"] == stale[0]["id"] and restored["archived_at"] is None
        assert (await t.ok(alice_f, "memory_get", {"memory_id": stale[0]["id"]}))["id"] == stale[0]["id"]
        message = await t.refused(alice_f, "memory_restore", {"memory_id": stale[0]["id"]})
        assert "not archived" in message

        # Leave `shared` and `user:alice` as they were, for the next client's run.
        for memory_id in (mine["id"], corrected["memory"]["id"], wifi["id"]):
            assert await t.ok(alice_f, "memory_delete", {"memory_id": memory_id}) == {"deleted": True}
    return t


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIMES = {"created_at", "updated_at", "last_accessed_at", "archived_at", "expires_at"}


def normalised(transcript: Transcript, places: Places) -> tuple[Any, list[float]]:
    """The transcript with what differs between two runs named by role: ids by first appearance,
    project scopes by project, timestamps by whether they are set; scores apart (recency moves them
    by a hair between two runs), to compare within a tolerance."""
    ids: dict[str, str] = {}
    roles = places.roles()
    scores: list[float] = []

    def text(value: str) -> str:
        for scope, role in roles.items():
            value = value.replace(scope, role)
        return _UUID.sub(lambda m: ids.setdefault(m.group(0), f"<id {len(ids)}>"), value)

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k == "score":
                    scores.append(v)
                    continue
                out[k] = walk(v, k)
            return out
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        if key in _TIMES:
            return None if value is None else "<time>"
        if isinstance(value, str):
            return text(value)
        return value

    return walk(transcript.entries), scores


RUNS: dict[str, tuple[Transcript, Places]] = {}


async def _run(name: str, connect: Connect, base: Path) -> tuple[Transcript, Places]:
    if name not in RUNS:
        places = Places.make(base, name)
        RUNS[name] = (await scenario(connect, places), places)
    return RUNS[name]


async def test_fastmcp_client_reads_seed_001_answers(
    dropin: Stack, tmp_path_factory: pytest.TempPathFactory
) -> None:
    transcript, _ = await _run("fastmcp", fastmcp_client(dropin.mcp_url), tmp_path_factory.mktemp("roots"))
    assert len(transcript.entries) > 50


async def test_official_sdk_client_reads_the_same_json(
    dropin: Stack, tmp_path_factory: pytest.TempPathFactory
) -> None:
    base = tmp_path_factory.mktemp("roots")
    fast, fast_places = await _run("fastmcp", fastmcp_client(dropin.mcp_url), base)
    sdk, sdk_places = await _run("sdk", sdk_client(dropin.mcp_url), base)
    fast_json, fast_scores = normalised(fast, fast_places)
    sdk_json, sdk_scores = normalised(sdk, sdk_places)
    for (tool, outcome, fast_value), (_, _, sdk_value) in zip(fast_json, sdk_json, strict=True):
        assert sdk_value == fast_value, f"{tool} ({outcome}) reads differently"
    assert sdk_scores == pytest.approx(fast_scores, abs=1e-3)


async def test_missing_token_names_the_header(dropin: Stack) -> None:
    """Seed 001's behaviour, on purpose (it used to refuse the connection): a session without a
    valid token opens and lists the tools, and every tool call fails with a message naming the
    header to send, in both clients; REST answers 401 with the same message."""
    for headers, fragment in (
        ({}, "missing bearer token"),
        ({"Authorization": "Bearer wrong"}, "unknown bearer token"),
    ):
        async with FastClient(StreamableHttpTransport(dropin.mcp_url, headers=headers)) as client:
            names = {t.name for t in await client.list_tools()}
            assert set(SEED_001_TOOLS) <= names
            for tool, arguments in (
                ("memory_list", {"scope": "user:alice"}),
                ("memory_save", {"content": "not stored", "description": "x"}),
                ("memory_usage_guide", {}),
            ):
                with pytest.raises(ToolError) as refused:
                    await client.call_tool(tool, arguments)
                assert fragment in str(refused.value) and AUTH_HEADER in str(refused.value), tool

        async with httpx2.AsyncClient(timeout=30, headers=headers) as http:
            async with Client(streamable_http_client(dropin.mcp_url, http_client=http)) as sdk:
                assert set(SEED_001_TOOLS) <= {t.name for t in (await sdk.list_tools()).tools}
                result = await sdk.call_tool("memory_search", {"query": "standup"})
                text = result.content[0].text
                assert result.is_error and fragment in text and AUTH_HEADER in text, text

        async with httpx.AsyncClient(base_url=dropin.base_url, timeout=30) as http:
            rest = await http.get("/memories", headers=headers)
            assert rest.status_code == 401
            assert fragment in rest.json()["error"]["message"] and AUTH_HEADER in rest.text

    # Nothing was written by the refused save.
    async with FastClient(
        StreamableHttpTransport(dropin.mcp_url, headers=_headers("alice-token", None))
    ) as client:
        found = (
            await client.call_tool(
                "memory_search",
                {"query": "not stored", "k": 100, "min_similarity": 0.0, "relative_cutoff": 0.0},
            )
        ).data
        assert all(hit["content"] != "not stored" for hit in found)


async def test_tool_contract_is_seed_001s(dropin: Stack) -> None:
    """Names, parameters and defaults as existing clients expect them; a result the SDK wraps in
    {"result": ...} is marked so that fastmcp unwraps it; items stay plain objects."""
    async with FastClient(
        StreamableHttpTransport(dropin.mcp_url, headers=_headers("alice-token", "c"))
    ) as client:
        tools = {t.name: t for t in await client.list_tools()}
    for name, parameters in SEED_001_TOOLS.items():
        assert parameters <= set(tools[name].input_schema["properties"]), name
    properties = {name: tools[name].input_schema["properties"] for name in SEED_001_TOOLS}
    assert properties["memory_save"]["type"]["default"] == "fact"
    assert properties["memory_save"]["importance"]["default"] == 1.0
    assert tools["memory_save"].input_schema["required"] == ["content"]
    assert properties["memory_search"]["k"]["default"] == 10
    assert properties["memory_list"]["limit"]["default"] == 50
    assert properties["memory_forget"]["limit"]["default"] == 100
    assert properties["memory_forget"]["apply"]["default"] is False
    for name in ("memory_search", "memory_list", "memory_get", "memory_update", "memory_restore"):
        schema = tools[name].output_schema
        assert schema is not None and schema.get("x-fastmcp-wrap-result") is True, name
        assert set(schema["properties"]) == {"result"}
    for name in ("memory_save", "memory_delete", "memory_forget", "memory_stats"):
        schema = tools[name].output_schema
        assert schema is not None and "x-fastmcp-wrap-result" not in schema, name


async def test_rest_supersede_and_delete_follow_the_scope_rules(dropin: Stack) -> None:
    """Item 2 over REST: a supersede of a `user:` memory with no project header stays in its scope
    (it used to be refused for the session's default project); a second delete answers
    deleted: false; REST keeps its 404 for an unknown id."""
    carol = {"Authorization": "Bearer carol-token"}
    async with httpx.AsyncClient(base_url=dropin.base_url, headers=carol) as http:
        response = await http.post(
            "/memories", json={"content": "Carol's standing desk is set to 112 cm", "scope": "user:carol"}
        )
        assert response.status_code == 200, response.text
        old = response.json()["memory"]
        response = await http.post(
            f"/memories/{old['id']}/supersede", json={"content": "Carol's standing desk is set to 115 cm"}
        )
        assert response.status_code == 200, response.text
        new = response.json()["memory"]
        assert new["scope"] == "user:carol" and new["supersedes"] == old["id"]
        assert new["type"] == "fact" and new["importance"] == 1.0
        # Naming another scope is still refused: a correction lives where the memory does.
        elsewhere = await http.post(
            f"/memories/{new['id']}/supersede", json={"content": "x", "scope": "default"}
        )
        assert elsewhere.status_code == 400 and "same scope" in elsewhere.json()["error"]["message"]
        # Someone else's memory cannot be superseded: it is not there for them.
        bob = {"Authorization": "Bearer bob-token"}
        response = await http.post(f"/memories/{new['id']}/supersede", headers=bob, json={"content": "x"})
        assert response.status_code == 404
        response = await http.patch(f"/memories/{new['id']}", json={"description": "desk height"})
        assert response.status_code == 200 and response.json()["scope"] == "user:carol"

        assert (await http.delete(f"/memories/{new['id']}")).json() == {"deleted": True}
        again = await http.delete(f"/memories/{new['id']}")
        assert again.status_code == 200 and again.json() == {"deleted": False}
        assert (await http.get(f"/memories/{new['id']}")).status_code == 404
        assert (await http.get(f"/memories/{uuid.uuid4()}")).status_code == 404


async def test_roots_over_the_handshake_era_protocol(dropin: Stack, tmp_path: Path) -> None:
    """A client on the older protocol is asked for its roots mid-call (once per MCP session) rather
    than through an input_required round; it lands in the same project."""
    transport = StreamableHttpTransport(dropin.mcp_url, headers=_headers("alice-token", None))
    async with FastClient(transport, roots=[tmp_path.as_uri()], mode="legacy") as client:
        for _ in range(2):
            session = (await client.call_tool("memory_usage_guide", {"section": "session"})).data["session"]
            assert session["project_source"] == "roots" and session["workspace_roots_detected"] is True
            assert session["project_scope"] == project_scope_for_root(tmp_path.as_uri())


@pytest.mark.parametrize("client", ["fastmcp", "sdk"])
async def test_importance_and_tags_read_back_as_given(dropin: Stack, client: str) -> None:
    """importance 0.1 reads back as 0.1, not 0.10000000149011612 (the column was float4), and a tag
    given twice is stored once, on save and on update, in both clients and over REST."""
    connect = (fastmcp_client if client == "fastmcp" else sdk_client)(dropin.mcp_url)
    project = f"given-{client}"
    async with connect("alice-token", project=project) as call:
        saved = await call(
            "memory_save",
            {
                "content": f"The {client} canary deploys to one pod first",
                "description": "canary",
                "tags": ["deploy", "deploy", "canary"],
                "importance": 0.1,
            },
        )
        memory = saved["memory"]
        assert memory["importance"] == 0.1 and memory["tags"] == ["deploy", "canary"], memory
        got = await call("memory_get", {"memory_id": memory["id"]})
        assert got["importance"] == 0.1 and got["tags"] == ["deploy", "canary"]
        updated = await call(
            "memory_update", {"memory_id": memory["id"], "tags": ["a", "b", "a"], "importance": 0.3}
        )
        assert updated["tags"] == ["a", "b"] and updated["importance"] == 0.3, updated
    async with httpx.AsyncClient(
        base_url=dropin.base_url, headers=_headers("alice-token", project), timeout=60
    ) as http:
        patched = await http.patch(f"/memories/{memory['id']}", json={"tags": ["x", "x"], "importance": 0.7})
        assert patched.status_code == 200, patched.text
        assert patched.json()["tags"] == ["x"] and patched.json()["importance"] == 0.7
        rest = await http.post(
            "/memories", json={"content": f"{client}: REST keeps one tag", "tags": ["y", "y"]}
        )
        assert rest.json()["memory"]["tags"] == ["y"], rest.text


async def test_k2_without_a_floor_returns_both_of_seed_001s_memories(dropin: Stack) -> None:
    """Seed 001's own two-memory case (its test_semantic_recall_ranks_relevant_first): `k=2,
    min_similarity=0` returns both memories, the relevant one first. On MiniLM the second sits far
    below the first (cosine ~0.09 against ~0.58); the relative cutoff is calibrated to that scale
    (docs/EVAL.md, "The relative cutoff")."""
    tag = f"t-{uuid.uuid4().hex[:10]}"
    async with FastClient(
        StreamableHttpTransport(dropin.mcp_url, headers=_headers("alice-token", "k2"))
    ) as client:
        for content, description in (
            (
                "The user wants embedding models to run locally on CPU and be pluggable.",
                "User prefers local CPU pluggable embeddings",
            ),
            (
                "Deployment uses docker-compose with Postgres and pgvector.",
                "Deploy via docker-compose + pgvector",
            ),
        ):
            saved = await client.call_tool(
                "memory_save",
                {"content": content, "description": description, "scope": "user:alice", "tags": [tag]},
            )
            assert saved.data["created"] is True
        hits = (
            await client.call_tool(
                "memory_search",
                {
                    "query": "what embedding hardware and setup does the user want?",
                    "scope": "user:alice",
                    "tags": [tag],
                    "k": 2,
                    "min_similarity": 0.0,
                },
            )
        ).data
    assert len(hits) == 2, hits
    assert "embedding" in hits[0]["description"].lower()
    assert hits[0]["similarity"] >= hits[1]["similarity"]


async def test_stats_count_the_searches_just_made_in_seed_001s_shape(dropin: Stack) -> None:
    """memory_stats answers as seed 001 does (store size under `memories`, search health under
    `searches`, misses as `recent_empty_queries`) and counts the searches the caller has just made:
    the search log is written in batches, and stats write what is pending before reading it.
    REST's /stats keeps its flat form."""
    project = f"stats-{uuid.uuid4().hex[:8]}"
    scope = project_scope(project)
    miss = f"zzmiss{uuid.uuid4().hex}"
    async with FastClient(
        StreamableHttpTransport(dropin.mcp_url, headers=_headers("alice-token", project))
    ) as client:
        saved = await client.call_tool(
            "memory_save",
            {"content": "The nightly backup runs at 02:00 and keeps 14 days", "description": "backups"},
        )
        assert saved.data["memory"]["scope"] == scope
        found = await client.call_tool("memory_search", {"query": "when does the backup run?"})
        assert found.data
        nothing = await client.call_tool("memory_search", {"query": miss, "min_similarity": 0.99})
        assert nothing.data == []
        stats = (await client.call_tool("memory_stats", {"scope": scope, "days": 1})).data
    assert set(stats) == {"days", "memories", "searches", "recent_empty_queries"}
    assert stats["memories"] == {
        "active": 1,
        "archived": 0,
        "superseded": 0,
        "by_scope": [{"scope": scope, "active": 1, "archived": 0, "superseded": 0}],
    }
    searches = stats["searches"]
    assert searches["total"] == 2 and searches["empty"] == 1 and searches["empty_rate"] == 0.5
    assert searches["avg_hits"] > 0 and searches["avg_top_score"] > 0
    assert 0 < searches["p50_latency_ms"] <= searches["p95_latency_ms"] <= searches["p99_latency_ms"]
    assert stats["recent_empty_queries"] == [{"query": miss}]

    async with httpx.AsyncClient(base_url=dropin.base_url, headers=_headers("alice-token", project)) as http:
        rest = (await http.get("/stats", params={"scope": scope, "days": 1})).json()
    assert rest["searches"] == 2 and rest["empty"] == 1 and rest["recent_misses"] == [miss]
