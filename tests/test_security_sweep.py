"""The security sweep (issue 21 item 6): two principals, each with content in every kind of store
(memories, a supersede chain, a derived conclusion with its evidence edges, proposals, a thread with
a task, a state object, a map), and every REST route of /openapi.json and every MCP tool called by
each with the other's ids and scopes, and with no scope at all. No answer (body, headers, error)
may name the other's content, ids, scopes or principal, and a foreign id must read exactly like an
unknown one. /metrics carries no principal, scope, token or content; injection strings in every
text field are stored verbatim or refused with a 4xx; no log line and no answer carries a token.

A route or tool the sweep has no case for fails the coverage tests: add its case to ROUTES/TOOLS."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
import httpx
import pytest
from google.protobuf import struct_pb2

from hypermnesia.settings import GatewaySettings
from hypermnesia.v1 import common_pb2, curation_pb2, curation_pb2_grpc, retrieval_pb2, retrieval_pb2_grpc
from services.curation import proposals, tokens
from tests.conftest import Stack, start_stack
from tests.helpers import mcp_session, tool_json

TOKENS = ("alice-token", "bob-token")
# A token that is no one's: answers and logs must not repeat it either.
BOGUS_TOKEN = "sweep-bogus-token-9f3a61c2"
# Routes served but not in the OpenAPI document; their answers are checked as well.
UNDOCUMENTED = ("GET /openapi.json", "GET /docs", "GET /redoc", "GET /ui/")
# Pages that describe the API (field examples such as 'user:alice'): checked for content and ids only.
DOCUMENTATION = {"GET /openapi.json", "GET /docs", "GET /redoc", "GET /ui/"}
SCRATCH = "sweep-scratch"
# The word in alice's repository map: maps are readable by any valid token (they hold rules, not
# memories: services/retrieval/structure.py), so its text is no secret; who loaded it is.
MAP_WORD = "qqmaprules"


@dataclass
class Tenant:
    """One principal and what it stored. `secret_scopes` are the scopes the other may never read."""

    name: str
    token: str
    project: str
    mark: str  # a word in every text it stores
    secret_scopes: list[str]
    ids: dict[str, str] = field(default_factory=dict)
    thread: str = ""
    # A repository map it loaded (alice only: bob's project is alice's to read with project:*).
    repo: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "X-Hypermnesia-Project": self.project}

    @property
    def private(self) -> str:
        return self.secret_scopes[0]

    def needles(self, documentation: bool = False) -> set[str]:
        """What the other principal's answers must never hold."""
        found = {self.mark, self.thread, *self.ids.values(), self.token}
        found |= {hashlib.sha256(self.token.encode()).hexdigest()[:16]}
        if not documentation:
            # 'shared' is a word of every guide and error text; its memories carry the mark anyway.
            found |= {self.name, *(s for s in self.secret_scopes if s != "shared")}
            if self.repo:
                found.add(self.repo)
        return {n for n in found if n}


ALICE = Tenant("alice", "alice-token", "alicep", "qqalicemark", ["user:alice", "shared", "project:alicep"])
BOB = Tenant("bob", "bob-token", "bobs", "qqbobmark", ["user:bob"])

MAP = f"""components:
  - slug: {MAP_WORD}core
    globs: ["src/**"]
    constraints:
      - {{id: {MAP_WORD}-rule, text: "{MAP_WORD}: never edit src by hand", severity: must}}
"""


class LogCapture(logging.Handler):
    """Every log record of the process, formatted, with its arguments and exception text."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a record whose arguments do not format is still inspected raw
            text = f"{record.msg!r} {record.args!r}"
        if record.exc_info and record.exc_info[1] is not None:
            text += f" {record.exc_info[1]!r}"
        self.lines.append(f"{record.name}: {text}")


CAPTURED = LogCapture()
# The test's own clients (httpx, the MCP client) are not the server: their debug lines are theirs.
CLIENT_LOGGERS = ("httpx", "httpcore", "httpx2", "mcp.client", "hpack", "asyncio")


@pytest.fixture(scope="module")
async def swept(pg_server_url: str, embedder: str, model_cache: Path) -> AsyncIterator[Stack]:
    root = logging.getLogger()
    level = root.level
    root.addHandler(CAPTURED)
    root.setLevel(logging.DEBUG)
    try:
        # Rate limits off: the sweep makes hundreds of calls from one principal. Every tool and
        # parameter listed (HM_MCP_TOOLS=full), so that every one is swept.
        async with start_stack(
            pg_server_url,
            embedder,
            model_cache,
            rate_writes_per_min=0,
            rate_searches_per_min=0,
            mcp_tools="full",
        ) as running:
            async with httpx.AsyncClient(base_url=running.base_url, timeout=120) as http:
                for tenant in (ALICE, BOB):
                    await _seed(running, http, tenant)
            await running.searcher.drain()  # the search log (what /stats reads) is written behind
            yield running
    finally:
        root.removeHandler(CAPTURED)
        root.setLevel(level)


async def _ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, (response.request.url, response.text)
    data: dict[str, Any] = response.json()
    return data


async def _seed(stack: Stack, http: httpx.AsyncClient, t: Tenant) -> None:
    h, m, scope = t.headers, t.mark, t.private

    async def save(content: str, where: str, **extra: Any) -> str:
        body = {"content": f"{m} {content}", "scope": where, **extra}
        return str((await _ok(await http.post("/memories", json=body, headers=h)))["memory"]["id"])

    t.ids["fact"] = await save(
        "the kestrel backup disk is encrypted with key ring seven",
        scope,
        description=f"{m} kestrel disk",
        tags=[f"{m}-tag"],
        metadata={f"{m}-key": f"{m}-value"},
    )
    t.ids["premise"] = await save("the kestrel backup runs nightly at two in the morning", scope)
    t.ids["old"] = await save("the heron staging cluster runs Postgres 15", scope)
    newer = await http.post(
        f"/memories/{t.ids['old']}/supersede",
        json={"content": f"{m} the heron staging cluster runs Postgres 16"},
        headers=h,
    )
    t.ids["new"] = str((await _ok(newer))["memory"]["id"])
    for other in t.secret_scopes[1:]:
        t.ids[other] = await save(f"the kestrel fact kept in {other}", other)
    # A derived conclusion with evidence edges, and a proposal left pending.
    async with stack.pool.acquire() as conn, conn.transaction():
        made = await proposals.propose(
            conn,
            [
                proposals.Draft(
                    scope=scope,
                    kind="fact",
                    content=f"{m} the kestrel backup is encrypted and nightly",
                    rationale=f"{m} both premises say so",
                    evidence=(uuid.UUID(t.ids["fact"]), uuid.UUID(t.ids["premise"])),
                    mode="extractive",
                ),
                proposals.Draft(
                    scope=scope,
                    kind="fact",
                    content=f"{m} the heron cluster was upgraded",
                    rationale=f"{m} the supersede says so",
                    evidence=(uuid.UUID(t.ids["new"]),),
                    mode="extractive",
                ),
            ],
            "system:dreamer",
        )
    t.ids["approved_proposal"], t.ids["pending_proposal"] = (str(p["id"]) for p in made)
    approved = await http.post(f"/proposals/{t.ids['approved_proposal']}/approve", json={}, headers=h)
    t.ids["derived"] = str((await _ok(approved))["memory_id"])
    # A thread whose turn yields a task, and a state object.
    t.thread = f"{m}-thread"
    turns = [
        f"{m} TODO: rotate the kestrel_backup encryption keys before Friday.",
        f"{m} Don't forget to rotate the kestrel_backup encryption keys.",
    ]
    records = [
        {
            "type": "conversation",
            "content": c,
            "source_ref": f"{m}-turn-{i}",
            "thread_id": t.thread,
            "scope": scope,
        }
        for i, c in enumerate(turns)
    ]
    imported = await _ok(await http.post("/records/import", json={"records": records}, headers=h))
    t.ids["turn"] = imported["ids"][0]
    state = {
        "type": "state_object",
        "scope": scope,
        "content": f"{m} deploy target is kestrel-eu",
        "state_kind": "deploy",
        "state_key": "target",
    }
    t.ids["state"] = (await _ok(await http.post("/records", json=state, headers=h)))["id"]
    document = {
        "type": "document",
        "scope": scope,
        "content": f"{m} runbook: restore kestrel from the key ring",
    }
    t.ids["document"] = (await _ok(await http.post("/records", json=document, headers=h)))["id"]
    # A search that finds nothing: /stats lists such misses, which must stay the searcher's.
    miss = {"query": f"{m}-miss zebra", "min_similarity": 1, "relative_cutoff": 0}
    assert not (await _ok(await http.post("/memories/search", json=miss, headers=h)))["results"]
    task = await stack.pool.fetchval(
        "SELECT id FROM memories WHERE type = 'task' AND scope = $1 AND content LIKE '%kestrel%'", scope
    )
    assert task is not None, f"no task was extracted from {t.name}'s thread"
    t.ids["task"] = str(task)
    if t is ALICE:
        t.repo = t.project
        loaded = await http.post(f"/map/{t.repo}", content=MAP, headers=h)
        await _ok(loaded)


# ---------------------------------------------------------------------------------------------
# The cases: per route, the calls an attacker makes with the victim's ids and scopes.


@dataclass
class Probe:
    """One call: REST (method, path, params, json/content) or MCP (tool, arguments). `foreign` is a
    victim id in it: the same call with an unknown id must answer the same."""

    method: str
    target: str
    params: dict[str, Any] | None = None
    json: Any = None
    content: str | None = None
    foreign: str | None = None
    # A write that succeeds in the attacker's own scope goes to a project of its own, so the
    # attacker's later listings do not show what the attacker itself wrote with the victim's names.
    project: str | None = None

    def with_id(self, old: str, new: str) -> Probe:
        swap = json.loads(json.dumps([self.target, self.params, self.json]).replace(old, new))
        return Probe(self.method, swap[0], swap[1], swap[2], self.content, None, self.project)

    def sent(self) -> str:
        return json.dumps([self.target, self.params, self.json, self.content])


Cases = Callable[[Tenant], list[Probe]]


def _scoped(v: Tenant) -> list[dict[str, Any]]:
    """No scope (the session's defaults) and each of the victim's scopes."""
    return [{}, *({"scope": s} for s in v.secret_scopes)]


def _ids(v: Tenant, *names: str) -> list[str]:
    return [v.ids[n] for n in names or v.ids]


def _per_id(method: str, template: str, v: Tenant, *names: str, body: Any = None) -> list[Probe]:
    return [Probe(method, template.format(id=i), json=body, foreign=i) for i in _ids(v, *names)]


MEMORY_IDS = ("fact", "premise", "old", "new", "derived", "task", "state", "document")
RECORD_IDS = ("fact", "old", "new", "derived", "turn", "state", "document")

ROUTES: dict[str, Cases] = {
    "POST /memories": lambda v: [
        Probe("POST", "/memories", json={"content": "the intruder writes", **s}) for s in _scoped(v)[1:]
    ],
    "POST /memories/search": lambda v: (
        [
            Probe("POST", "/memories/search", json={"query": "kestrel backup disk encryption", **s, **x})
            for s in _scoped(v)
            for x in ({}, {"include_archived": True, "include_stale": True, "depth": "ancestry"})
        ]
        + [
            Probe(
                "POST", "/memories/search", json={"query": "anything", "topic": v.thread, "topic_only": True}
            )
        ]
    ),
    "GET /memories": lambda v: (
        [Probe("GET", "/memories", params={**s, "include_archived": True, "full": True}) for s in _scoped(v)]
        + [Probe("GET", "/memories", params={"tags": f"{v.mark}-tag"})]
    ),
    # Applied only to the victim's scopes: with no scope it would forget the attacker's own.
    "POST /memories/forget": lambda v: [
        Probe("POST", "/memories/forget", json={"apply": bool(s), "older_than_days": 0, **s})
        for s in _scoped(v)
    ],
    "GET /memories/{memory_id}": lambda v: _per_id("GET", "/memories/{id}", v, *MEMORY_IDS),
    "PATCH /memories/{memory_id}": lambda v: _per_id(
        "PATCH", "/memories/{id}", v, *MEMORY_IDS, body={"content": "the intruder was here"}
    ),
    "DELETE /memories/{memory_id}": lambda v: _per_id("DELETE", "/memories/{id}", v, *MEMORY_IDS),
    "POST /memories/{memory_id}/restore": lambda v: _per_id("POST", "/memories/{id}/restore", v, *MEMORY_IDS),
    "POST /memories/{memory_id}/archive": lambda v: _per_id("POST", "/memories/{id}/archive", v, *MEMORY_IDS),
    "POST /memories/{memory_id}/supersede": lambda v: (
        _per_id("POST", "/memories/{id}/supersede", v, *MEMORY_IDS, body={"content": "the intruder corrects"})
        + _per_id("POST", "/memories/{id}/supersede", v, "fact", body={"content": "x", "scope": "user:bob"})
    ),
    "GET /memories/{memory_id}/lineage": lambda v: _per_id("GET", "/memories/{id}/lineage", v, *MEMORY_IDS),
    "GET /memories/{memory_id}/evidence": lambda v: [
        Probe("GET", f"/memories/{i}/evidence", params={"depth": d}, foreign=i)
        for i in _ids(v, *MEMORY_IDS)
        for d in ("premises", "ancestry")
    ],
    "GET /memories/{memory_id}/provenance": lambda v: _per_id(
        "GET", "/memories/{id}/provenance", v, *MEMORY_IDS
    ),
    "GET /stats": lambda v: [Probe("GET", "/stats", params={**s, "days": 365}) for s in _scoped(v)],
    "POST /records/context": lambda v: [
        Probe("POST", "/records/context", json={"query": "kestrel backup", "thread_id": v.thread, **s})
        for s in _scoped(v)
    ],
    "POST /tasks/{task_id}/{decision}": lambda v: [
        Probe("POST", f"/tasks/{v.ids['task']}/{d}", foreign=v.ids["task"]) for d in ("confirm", "dismiss")
    ],
    "POST /records": lambda v: (
        [
            Probe("POST", "/records", json={"type": "note", "content": "the intruder's note", **s})
            for s in _scoped(v)[1:]
        ]
        + [
            # Bob's own record naming alice's as the one it corrects, and following her thread.
            Probe(
                "POST",
                "/records",
                json={"type": "note", "content": "the intruder's correction", "supersedes": v.ids["fact"]},
                foreign=v.ids["fact"],
                project=SCRATCH,
            ),
            Probe(
                "POST",
                "/records",
                json={
                    "type": "conversation",
                    "content": "the intruder joins",
                    "thread_id": v.thread,
                    "prev_source_ref": f"{v.mark}-turn-0",
                },
                project=SCRATCH,
            ),
        ]
    ),
    "POST /records/import": lambda v: [
        Probe(
            "POST",
            "/records/import",
            json={"records": [{"type": "note", "content": "the intruder's import", **s}]},
        )
        for s in _scoped(v)[1:]
    ],
    "GET /records/query": lambda v: [
        Probe("GET", "/records/query", params={**s, **t})
        for s in _scoped(v)
        for t in ({}, {"thread_id": v.thread})
    ],
    "POST /records/query": lambda v: [
        Probe("POST", "/records/query", json={"scopes": v.secret_scopes, "thread_id": v.thread}),
        Probe("POST", "/records/query", json={"thread_id": v.thread}),
    ],
    "POST /records/rebuild": lambda v: [
        Probe("POST", "/records/rebuild", json={"check": True, "scopes": v.secret_scopes}),
        Probe("POST", "/records/rebuild", json={"check": True}),
    ],
    "GET /records/state/{kind}/{key}": lambda v: [
        Probe("GET", "/records/state/deploy/target", params=s) for s in _scoped(v)[1:]
    ],
    "GET /records/state/{kind}/{key}/history": lambda v: [
        Probe("GET", "/records/state/deploy/target/history", params=s) for s in _scoped(v)[1:]
    ],
    "GET /records/{record_id}": lambda v: _per_id("GET", "/records/{id}", v, *RECORD_IDS),
    "GET /records/{record_id}/lineage": lambda v: _per_id("GET", "/records/{id}/lineage", v, *RECORD_IDS),
    "GET /records/{record_id}/derivations": lambda v: _per_id(
        "GET", "/records/{id}/derivations", v, *RECORD_IDS
    ),
    "GET /map/{repo}": lambda v: [Probe("GET", f"/map/{r}") for r in _repos(v)],
    "GET /map/{repo}/resolve": lambda v: [
        Probe("GET", f"/map/{r}/resolve", params={"path": "src/app.py"}) for r in _repos(v)
    ],
    "POST /map/{repo}": lambda v: [
        Probe("POST", f"/map/{r}", content="components:\n  - slug: intruder\n    globs: ['**']\n")
        for r in _repos(v)
    ],
    "GET /proposals": lambda v: [
        Probe("GET", "/proposals", params={**s, "status": st})
        for s in _scoped(v)
        for st in ("all", "pending")
    ],
    "POST /proposals/{proposal_id}/approve": lambda v: _per_id(
        "POST", "/proposals/{id}/approve", v, "pending_proposal", "approved_proposal", body={}
    ),
    "POST /proposals/{proposal_id}/reject": lambda v: _per_id(
        "POST",
        "/proposals/{id}/reject",
        v,
        "pending_proposal",
        "approved_proposal",
        body={"reason": "the intruder says no"},
    ),
    "POST /dialectic/ask": lambda v: [
        Probe(
            "POST",
            "/dialectic/ask",
            json={"question": "how is the kestrel backup disk encrypted?", **s, "depth": d},
        )
        for s in _scoped(v)
        for d in ("auto", "ancestry")
    ],
    "GET /viz/graph": lambda v: [
        Probe("GET", "/viz/graph", params=s) for s in ({}, {"scope": v.secret_scopes})
    ],
    "GET /deliveries": lambda v: [
        Probe("GET", "/deliveries", params=p)
        for p in (
            {"principal": v.name},
            {"principal": v.name, "since": "2000-01-01T00:00:00Z", "limit": 1000},
        )
    ],
    "GET /health": lambda v: [Probe("GET", "/health")],
    "GET /health/live": lambda v: [Probe("GET", "/health/live")],
    "GET /metrics": lambda v: [Probe("GET", "/metrics")],
    "GET /openapi.json": lambda v: [Probe("GET", "/openapi.json")],
    "GET /docs": lambda v: [Probe("GET", "/docs")],
    "GET /redoc": lambda v: [Probe("GET", "/redoc")],
    "GET /ui/": lambda v: [Probe("GET", "/ui/")],
}


def _repos(v: Tenant) -> list[str]:
    # Any token may read a map (it holds rules), but not who loaded it (gateway/structure.py).
    return [v.repo] if v.repo else []


def _tool_ids(name: str, v: Tenant, *ids: str, **extra: Any) -> list[Probe]:
    return [Probe("TOOL", name, json={"memory_id": i, **extra}, foreign=i) for i in _ids(v, *ids)]


TOOLS: dict[str, Cases] = {
    "memory_save": lambda v: [
        Probe("TOOL", "memory_save", json={"content": "the intruder writes", **s}) for s in _scoped(v)[1:]
    ],
    "memory_search": lambda v: [
        Probe("TOOL", "memory_search", json={"query": "kestrel backup disk encryption", **s})
        for s in _scoped(v)
    ],
    "memory_get": lambda v: _tool_ids("memory_get", v, *MEMORY_IDS),
    "memory_update": lambda v: _tool_ids("memory_update", v, *MEMORY_IDS, content="the intruder was here"),
    "memory_delete": lambda v: _tool_ids("memory_delete", v, *MEMORY_IDS),
    "memory_forget": lambda v: [
        Probe("TOOL", "memory_forget", json={"apply": bool(s), "older_than_days": 0, **s}) for s in _scoped(v)
    ],
    "memory_restore": lambda v: _tool_ids("memory_restore", v, *MEMORY_IDS),
    "memory_supersede": lambda v: _tool_ids(
        "memory_supersede", v, *MEMORY_IDS, content="the intruder corrects"
    ),
    "task_decide": lambda v: [
        Probe("TOOL", "task_decide", json={"task_id": v.ids["task"], "decision": d}, foreign=v.ids["task"])
        for d in ("confirm", "dismiss")
    ],
    "memory_list": lambda v: [
        Probe("TOOL", "memory_list", json={**s, "include_archived": True, "full": True}) for s in _scoped(v)
    ],
    "memory_lineage": lambda v: _tool_ids("memory_lineage", v, *MEMORY_IDS),
    "memory_stats": lambda v: [Probe("TOOL", "memory_stats", json={**s, "days": 365}) for s in _scoped(v)],
    "memory_context": lambda v: [
        Probe("TOOL", "memory_context", json={"query": "kestrel backup", "thread_id": v.thread, **s})
        for s in _scoped(v)
    ],
    "project_map": lambda v: [Probe("TOOL", "project_map", json={"repo": r}) for r in _repos(v)],
    "rules_for_path": lambda v: [
        Probe("TOOL", "rules_for_path", json={"repo": r, "path": "src/app.py"}) for r in _repos(v)
    ],
    "memory_ask": lambda v: [
        Probe("TOOL", "memory_ask", json={"question": "how is the kestrel backup disk encrypted?", **s})
        for s in _scoped(v)
    ],
    "memory_deliveries": lambda v: [
        Probe("TOOL", "memory_deliveries", json=p)
        for p in (
            {"principal": v.name},
            {"principal": v.name, "since": "2000-01-01T00:00:00Z", "limit": 1000},
        )
    ],
    "proposals_list": lambda v: [
        Probe("TOOL", "proposals_list", json={**s, "status": "all"}) for s in _scoped(v)
    ],
    "proposal_decide": lambda v: [
        Probe(
            "TOOL",
            "proposal_decide",
            json={"proposal_id": v.ids[p], "decision": d, "reason": "no"},
            foreign=v.ids[p],
        )
        for p in ("pending_proposal", "approved_proposal")
        for d in ("approve", "reject")
    ],
    "memory_evidence": lambda v: _tool_ids("memory_evidence", v, *MEMORY_IDS, depth="ancestry"),
    "memory_provenance": lambda v: _tool_ids("memory_provenance", v, *MEMORY_IDS),
    "memory_usage_guide": lambda v: [Probe("TOOL", "memory_usage_guide", json={})],
}


# ---------------------------------------------------------------------------------------------
# Running the probes.


@dataclass
class Answer:
    status: int  # HTTP status, or 1 for a tool error and 0 for a tool result
    text: str  # headers and body, or the tool's text and structured content


async def _rest(http: httpx.AsyncClient, attacker: Tenant, probe: Probe) -> Answer:
    extra: dict[str, Any] = {}
    if probe.json is not None:
        extra["json"] = probe.json
    if probe.content is not None:
        extra["content"] = probe.content.encode()
    headers = attacker.headers
    if probe.project:
        headers = {**headers, "X-Hypermnesia-Project": probe.project}
    response = await http.request(probe.method, probe.target, params=probe.params, headers=headers, **extra)
    shown = "\n".join(f"{k}: {v}" for k, v in response.headers.items() if k.lower() != "date")
    return Answer(response.status_code, f"{shown}\n\n{response.text}")


async def _tool(client: Any, probe: Probe) -> Answer:
    result = await client.call_tool(probe.target, probe.json)
    texts = [getattr(c, "text", "") for c in result.content]
    structured = json.dumps(result.structured_content, ensure_ascii=False)
    return Answer(1 if result.is_error else 0, "\n".join(texts) + "\n" + structured)


def _leaks(answer: Answer, probe: Probe, victim: Tenant, label: str) -> list[str]:
    """The victim's needles in the answer, other than those the attacker itself sent."""
    sent = probe.sent()
    # A scope named from what was sent ('project:' + a repo in the path) is an echo too.
    needles = {
        n
        for n in victim.needles(documentation=label in DOCUMENTATION)
        if n not in sent and n.removeprefix("project:") not in sent
    }
    found = sorted(n for n in needles if n in answer.text)
    return (
        [
            f"{label} {probe.target} {probe.params or ''} {probe.json or ''} -> {answer.status} shows {found}: {answer.text[-400:]}"
        ]
        if found
        else []
    )


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


def _normal(text: str, ident: str) -> str:
    """An answer as compared with another: the id it was given, any id it made and any time are
    placeholders, as are the headers that differ from call to call."""
    text = UUID.sub("<UUID>", text.replace(ident, "<ID>"))
    text = TIME.sub("<TIME>", text)
    text = re.sub(r"^(content-length|x-request-id|mcp-session-id): .*$", "", text, flags=re.MULTILINE)
    return text


async def _sweep(
    call: Callable[[Probe], Awaitable[Answer]], cases: dict[str, Cases], victim: Tenant
) -> tuple[list[str], int]:
    problems: list[str] = []
    calls = 0
    for label, case in cases.items():
        for probe in case(victim):
            answer = await call(probe)
            calls += 1
            if answer.status >= 500:
                problems.append(
                    f"{label} {probe.target} {probe.json or ''} -> {answer.status}: {answer.text[-300:]}"
                )
            problems += _leaks(answer, probe, victim, label)
            if probe.foreign is not None:
                unknown = str(uuid.uuid4())
                other = await call(probe.with_id(probe.foreign, unknown))
                calls += 1
                mine, theirs = _normal(answer.text, probe.foreign), _normal(other.text, unknown)
                if (answer.status, mine) != (other.status, theirs):
                    problems.append(
                        f"{label} {probe.target}: a foreign id answers unlike an unknown one: "
                        f"{answer.status} {mine[-300:]!r} vs {other.status} {theirs[-300:]!r}"
                    )
    return problems, calls


async def _victim_state(stack: Stack, victim: Tenant) -> list[Any]:
    memories = await stack.pool.fetch(
        "SELECT id, scope, content, description, tags, metadata, archived_at, updated_at FROM memories"
        " WHERE scope = ANY($1::text[]) ORDER BY id",
        victim.secret_scopes,
    )
    props = await stack.pool.fetch(
        "SELECT id, status FROM proposals WHERE id = ANY($1::uuid[]) ORDER BY id",
        [victim.ids["pending_proposal"], victim.ids["approved_proposal"]],
    )
    components = await stack.pool.fetch(
        "SELECT * FROM components WHERE repo = $1 ORDER BY 1", victim.repo or ""
    )
    return [list(map(dict, memories)), list(map(dict, props)), list(map(dict, components))]


def _documented(spec: dict[str, Any]) -> set[str]:
    return {
        f"{method.upper()} {path}"
        for path, operations in spec["paths"].items()
        for method in operations
        if method in ("get", "post", "put", "patch", "delete")
    }


async def test_every_route_has_a_sweep_case(swept: Stack) -> None:
    async with httpx.AsyncClient(base_url=swept.base_url, timeout=60) as http:
        spec = (await http.get("/openapi.json")).json()
    routes = _documented(spec) | set(UNDOCUMENTED)
    assert routes == set(ROUTES), (
        f"routes without a sweep case: {sorted(routes - set(ROUTES))}; "
        f"cases for routes that are gone: {sorted(set(ROUTES) - routes)}"
    )


async def test_every_tool_has_a_sweep_case(swept: Stack) -> None:
    async with mcp_session(swept.mcp_url, BOB.token, BOB.project) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
    assert listed == set(TOOLS), (
        f"tools without a sweep case: {sorted(listed - set(TOOLS))}; "
        f"cases for tools that are gone: {sorted(set(TOOLS) - listed)}"
    )


@pytest.mark.parametrize(
    ("attacker", "victim"), [(BOB, ALICE), (ALICE, BOB)], ids=["bob-at-alice", "alice-at-bob"]
)
async def test_no_route_shows_the_other_principals_data(
    swept: Stack, attacker: Tenant, victim: Tenant
) -> None:
    before = await _victim_state(swept, victim)
    async with httpx.AsyncClient(base_url=swept.base_url, timeout=120) as http:

        async def call(probe: Probe) -> Answer:
            return await _rest(http, attacker, probe)

        problems, calls = await _sweep(call, ROUTES, victim)
    assert calls >= len(ROUTES)
    assert not problems, f"{len(problems)} problems in {calls} calls:\n" + "\n".join(problems)
    assert await _victim_state(swept, victim) == before, "an attacker's call changed the victim's data"


@pytest.mark.parametrize(
    ("attacker", "victim"), [(BOB, ALICE), (ALICE, BOB)], ids=["bob-at-alice", "alice-at-bob"]
)
async def test_no_tool_shows_the_other_principals_data(
    swept: Stack, attacker: Tenant, victim: Tenant
) -> None:
    before = await _victim_state(swept, victim)
    async with mcp_session(swept.mcp_url, attacker.token, attacker.project) as client:

        async def call(probe: Probe) -> Answer:
            return await _tool(client, probe)

        problems, calls = await _sweep(call, TOOLS, victim)
    assert calls >= len(TOOLS)
    assert not problems, f"{len(problems)} problems in {calls} calls:\n" + "\n".join(problems)
    assert await _victim_state(swept, victim) == before, "an attacker's call changed the victim's data"


async def test_each_principal_still_reads_its_own(swept: Stack) -> None:
    """The sweep's negative answers mean something only if the same calls work for the owner."""
    async with httpx.AsyncClient(base_url=swept.base_url, timeout=60) as http:
        for t in (ALICE, BOB):
            got = await _ok(await http.get(f"/memories/{t.ids['fact']}", headers=t.headers))
            assert t.mark in got["content"]
            listed = await _ok(
                await http.get("/memories", params={"scope": t.private, "full": True}, headers=t.headers)
            )
            assert any(t.mark in m["content"] for m in listed["memories"])
            ev = await _ok(await http.get(f"/memories/{t.ids['derived']}/evidence", headers=t.headers))
            assert {p["id"] for p in ev["premises"]} >= {t.ids["fact"], t.ids["premise"]}
            pending = await _ok(await http.get("/proposals", params={"scope": t.private}, headers=t.headers))
            assert t.ids["pending_proposal"] in {p["id"] for p in pending["proposals"]}
            stats = await _ok(await http.get("/stats", params={"days": 1}, headers=t.headers))
            assert f"{t.mark}-miss zebra" in stats["recent_misses"], stats
            doc = await _ok(await http.get(f"/records/{t.ids['document']}", headers=t.headers))
            assert t.mark in json.dumps(doc)
            lineage = await _ok(await http.get(f"/memories/{t.ids['new']}/lineage", headers=t.headers))
            assert t.ids["old"] in json.dumps(lineage)
            versions = lineage["versions"]
            assert [v["memory_id"] for v in versions] == [t.ids["old"], t.ids["new"]]
            assert all(t.mark in v["content"] and v["author"] == t.name for v in versions), versions


async def test_a_store_token_reaches_only_its_granted_projects(swept: Stack) -> None:
    """A token made by `hypermnesia token create` without a grant on a project cannot open it by
    sending its header; a HM_AUTH_TOKENS token keeps seed 001's rule (bob, granted no project of
    alice's, still reads her project by header), and a store token granted `project:*` reaches it."""
    secret = ALICE.ids["project:alicep"]
    dave, _row = await tokens.create(swept.pool, "dave", ["user:dave"])
    erin, _row = await tokens.create(swept.pool, "erin", ["user:erin", "project:*"])
    as_project = {"X-Hypermnesia-Project": ALICE.project}
    dave_h = {"Authorization": f"Bearer {dave}", **as_project}
    async with httpx.AsyncClient(base_url=swept.base_url, timeout=60) as http:
        got = await http.get(f"/memories/{secret}", headers=dave_h)
        unknown = await http.get(f"/memories/{uuid.uuid4()}", headers=dave_h)
        assert got.status_code == unknown.status_code == 404, got.text
        listed = await _ok(await http.get("/memories", params={"full": True}, headers=dave_h))
        found = await _ok(await http.post("/memories/search", json={"query": "kestrel"}, headers=dave_h))
        assert ALICE.mark not in json.dumps(listed) + json.dumps(found)
        for method, path, body in (
            ("GET", "/memories", {"scope": "project:alicep"}),
            ("POST", "/memories", {"content": "dave writes into alice's project"}),
            ("DELETE", f"/memories/{secret}", None),
        ):
            r = await http.request(
                method,
                path,
                params=body if method == "GET" else None,
                json=body if method == "POST" else None,
                headers=dave_h,
            )
            # A delete of a memory out of reach answers as for an unknown id: nothing deleted.
            refused = r.status_code in (403, 404) or (method == "DELETE" and r.json() == {"deleted": False})
            assert refused, (method, path, r.status_code, r.text)
        for token in ("bob-token", erin):
            reader = {"Authorization": f"Bearer {token}", **as_project}
            assert ALICE.mark in (await _ok(await http.get(f"/memories/{secret}", headers=reader)))["content"]
    async with mcp_session(swept.mcp_url, dave, ALICE.project) as client:
        for tool, arguments in (
            ("memory_get", {"memory_id": secret}),
            ("memory_search", {"query": "kestrel fact", "min_similarity": 0, "relative_cutoff": 0}),
            ("memory_list", {"full": True}),
        ):
            result = await client.call_tool(tool, arguments)
            assert ALICE.mark not in json.dumps(result.structured_content), (tool, result)
        deleted = await client.call_tool("memory_delete", {"memory_id": secret})
        assert deleted.is_error or tool_json(deleted) == {"deleted": False}
    async with httpx.AsyncClient(base_url=swept.base_url, timeout=60) as http:
        still = await _ok(await http.get(f"/memories/{secret}", headers=ALICE.headers))
        assert ALICE.mark in still["content"]


# ---------------------------------------------------------------------------------------------
# Injection strings in every text field.

URL_CHARS = 1000
LONG_UNICODE = "ü中😀\u0301" * 2000
INJECTIONS = [
    "'; DROP TABLE memories; --",
    "%s %d %(x)s",
    "$1 $2",
    "nul\x00byte",
    "{{7*7}} ${7*7}",
    "<script>alert(1)</script>",
    LONG_UNICODE,
    "\u202egnp.exe\u202c",
    "../../etc/passwd",
]


async def _tables(stack: Stack) -> dict[str, int]:
    present = {
        r["tablename"]
        for r in await stack.pool.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    }
    return {t: int(await stack.pool.fetchval(f"SELECT count(*) FROM {t}")) for t in sorted(present)}


def _field_bodies(text: str) -> list[tuple[str, str, Any, str]]:
    """(method, path, json body, field name) putting `text` in each text field of a write or a read."""
    return [
        ("POST", "/memories", {"content": text}, "content"),
        ("POST", "/memories", {"content": "inj desc", "description": text}, "description"),
        ("POST", "/memories", {"content": "inj type", "type": text}, "type"),
        # A content of its own: a save with the same content merges into the earlier one, adding its tags.
        ("POST", "/memories", {"content": f"inj tag {uuid.uuid4()}", "tags": [text]}, "tags"),
        ("POST", "/memories", {"content": "inj meta", "metadata": {"k": text, text: "v"}}, "metadata"),
        ("POST", "/memories", {"content": "inj scope", "scope": text}, "scope"),
        ("POST", "/memories", {"content": "inj kind", "kind": text}, "kind"),
        ("POST", "/memories/search", {"query": text}, "query"),
        ("POST", "/memories/search", {"query": "x", "tags": [text]}, "tags"),
        ("POST", "/memories/search", {"query": "x", "scope": text}, "scope"),
        ("POST", "/memories/search", {"query": "x", "topic": text}, "topic"),
        ("POST", "/memories/search", {"query": "x", "types": [text], "repo": text}, "types"),
        ("POST", "/records", {"type": "conversation", "content": "inj turn", "thread_id": text}, "thread_id"),
        ("POST", "/records", {"type": "note", "content": "inj ref", "source_ref": text}, "source_ref"),
        ("POST", "/records/query", {"thread_id": text}, "thread_id"),
        ("POST", "/records/context", {"query": text, "thread_id": text}, "query"),
        ("POST", "/dialectic/ask", {"question": text}, "question"),
        ("GET", "/memories", {"tags": text}, "tags"),
        ("GET", "/memories", {"scope": text}, "scope"),
        ("GET", "/proposals", {"scope": text, "status": text}, "scope"),
    ]


def _stored(field_name: str, sent: Any, memory: dict[str, Any]) -> bool:
    # A save that merges into a restatement adds its tags and keys to the memory's own.
    if field_name == "metadata":
        return all(memory["metadata"].get(k) == v for k, v in sent.items())
    if field_name == "tags":
        return all(tag in memory["tags"] for tag in sent)
    return memory[field_name] == sent


async def test_injection_strings_are_stored_verbatim_or_refused(swept: Stack) -> None:
    headers = {**ALICE.headers, "X-Hypermnesia-Project": "inj"}
    problems: list[str] = []
    before = await _tables(swept)
    written = 0
    async with httpx.AsyncClient(base_url=swept.base_url, timeout=120) as http:
        for text in INJECTIONS:
            for method, path, body, name in _field_bodies(text):
                if method == "GET":
                    # A URL holds at most 64 KiB (httpx): the long string is cut for query strings.
                    params = {k: v[:URL_CHARS] for k, v in body.items()}
                    r = await http.get(path, params=params, headers=headers)
                else:
                    r = await http.post(path, json=body, headers=headers)
                where = f"{method} {path} {name}={text[:40]!r}"
                if r.status_code >= 500:
                    problems.append(f"{where} -> {r.status_code}: {r.text[:300]}")
                elif r.status_code >= 400:
                    message = r.json().get("error", {}).get("message", "")
                    if not message:
                        problems.append(f"{where} -> {r.status_code} without a message: {r.text[:300]}")
                elif path == "/memories" and method == "POST":
                    written += 1
                    memory = r.json()["memory"]
                    got = await _ok(await http.get(f"/memories/{memory['id']}", headers=headers))
                    if not _stored(name, body[name], got):
                        problems.append(f"{where} stored as {got.get(name)!r:.200}")
                elif path == "/records" and r.status_code == 200:
                    written += 1
            # Update: the same strings through PATCH.
            target = await _ok(
                await http.post("/memories", json={"content": "inj patch target"}, headers=headers)
            )
            mid = target["memory"]["id"]
            for name, value in (
                ("content", text),
                ("description", text),
                ("tags", [text]),
                ("metadata", {"k": text}),
            ):
                r = await http.patch(f"/memories/{mid}", json={name: value}, headers=headers)
                where = f"PATCH {name}={text[:40]!r}"
                if r.status_code >= 500:
                    problems.append(f"{where} -> {r.status_code}: {r.text[:300]}")
                elif r.status_code == 200:
                    got = await _ok(await http.get(f"/memories/{mid}", headers=headers))
                    if not _stored(name, value, got):
                        problems.append(f"{where} stored as {got.get(name)!r:.200}")
            # The project header (as UTF-8 bytes: httpx sends str headers as ASCII only).
            if "\x00" not in text:
                raw = {**ALICE.headers, "X-Hypermnesia-Project": text}
                r = await http.post(
                    "/memories/search",
                    json={"query": "kestrel"},
                    headers={k.encode(): v.encode() for k, v in raw.items()},
                )
                if r.status_code >= 500:
                    problems.append(f"project header {text[:40]!r} -> {r.status_code}: {r.text[:300]}")
            # Path parameters: a state object's kind and key, a repo.
            segment = quote(text[:URL_CHARS], safe="")
            for path in (f"/records/state/{segment}/{segment}", f"/map/{segment}", f"/map/{segment}/resolve"):
                r = await http.get(path, params={"path": text[:URL_CHARS]}, headers=headers)
                if r.status_code >= 500:
                    problems.append(f"GET {path[:60]!r} -> {r.status_code}: {r.text[:300]}")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)
    after = await _tables(swept)
    assert set(after) == set(before), "a table appeared or vanished"
    assert after["memories"] >= before["memories"] and after["records"] >= before["records"]
    assert written > 0, "no injection string was stored at all: the check stored nothing to compare"


async def test_the_services_refuse_a_nul_themselves(swept: Stack) -> None:
    """The gateway refuses a NUL in any field (gateway/fields.py), but the services are the
    validation authority and the CLI and the other services call them directly: each of these
    answered INTERNAL (a NUL reached Postgres) when this sweep found them. Fails until the
    services check these fields themselves (see the sweep's report)."""
    caller = common_pb2.Caller(principal="alice", grants=["user:alice"])
    nul = "nul\x00byte"
    problems: list[str] = []
    async with (
        grpc.aio.insecure_channel(swept.curation_address) as c,
        grpc.aio.insecure_channel(swept.retrieval_address) as r,
    ):
        curation, retrieval = curation_pb2_grpc.CurationStub(c), retrieval_pb2_grpc.RetrievalStub(r)
        metadata = struct_pb2.Struct()
        metadata.update({"k": nul})
        calls: list[tuple[str, Awaitable[Any]]] = [
            (
                "Curation.Save metadata",
                curation.Save(
                    curation_pb2.SaveRequest(
                        caller=caller, scope="user:alice", content="x", metadata=metadata
                    ),
                    timeout=60,
                ),
            ),
            (
                "Curation.StateObject kind",
                curation.StateObject(
                    curation_pb2.StateRequest(caller=caller, scope="user:alice", kind=nul, key=nul),
                    timeout=60,
                ),
            ),
            (
                "Retrieval.Search types",
                retrieval.Search(
                    retrieval_pb2.SearchRequest(
                        caller=caller, query="x", scopes=["user:alice"], types=[nul], k=10
                    ),
                    timeout=60,
                ),
            ),
            (
                "Retrieval.Search repo",
                retrieval.Search(
                    retrieval_pb2.SearchRequest(
                        caller=caller, query="x", scopes=["user:alice"], repo=nul, k=10
                    ),
                    timeout=60,
                ),
            ),
            (
                "Retrieval.List tags",
                retrieval.List(
                    retrieval_pb2.ListRequest(caller=caller, scopes=["user:alice"], tags=[nul]), timeout=60
                ),
            ),
        ]
        for name, call in calls:
            try:
                await call
                problems.append(f"{name}: accepted")
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    problems.append(f"{name}: {exc.code().name} {exc.details()}")
    assert not problems, "\n".join(problems)


async def test_with_projects_as_a_boundary_a_map_is_its_projects(
    pg_server_url: str, embedder: str, model_cache: Path
) -> None:
    """HM_PROJECT_REQUIRES_GRANT=true: a project is read only with a grant on it, its map too."""
    async with (
        start_stack(pg_server_url, embedder, model_cache, project_requires_grant=True) as boundary,
        httpx.AsyncClient(base_url=boundary.base_url, timeout=60) as http,
    ):
        await _ok(await http.post(f"/map/{ALICE.project}", content=MAP, headers=ALICE.headers))
        saved = {"content": f"{ALICE.mark} the project's own fact"}
        await _ok(await http.post("/memories", json=saved, headers=ALICE.headers))
        as_alice = {**BOB.headers, "X-Hypermnesia-Project": ALICE.project}
        for headers in (BOB.headers, as_alice):
            for path, params in (
                (f"/map/{ALICE.project}", None),
                (f"/map/{ALICE.project}/resolve", {"path": "src/app.py"}),
            ):
                r = await http.get(path, params=params, headers=headers)
                assert r.status_code == 403, (path, headers, r.text)
                assert r.json()["error"]["message"] == "scope 'project:alicep' is not granted to this token"
        listed = await http.get("/memories", params={"full": True}, headers=as_alice)
        assert listed.status_code == 200 and ALICE.mark not in listed.text, listed.text
        own = await _ok(await http.get(f"/map/{ALICE.project}", headers=ALICE.headers))
        assert own["source"]["loaded_by"] == "alice"


# ---------------------------------------------------------------------------------------------
# /metrics, tokens in answers and logs.

LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


async def test_metrics_carry_no_principal_scope_token_or_content(swept: Stack) -> None:
    # Every service runs in this process (local_stack), so the gateway's /metrics is the registry
    # each service's own metrics port would serve.
    async with httpx.AsyncClient(base_url=swept.base_url, timeout=60) as http:
        text = (await http.get("/metrics")).text
    values = {m.group(2) for m in LABEL.finditer(text)}
    forbidden = {"alice", "bob", *TOKENS, BOGUS_TOKEN}
    for t in (ALICE, BOB):
        forbidden |= t.needles() | {t.project}
    bad = sorted(v for v in values if any(f in v for f in forbidden) or v.startswith(("user:", "project:")))
    assert not bad, f"label values naming a principal, scope, token or content: {bad}"
    assert re.search(r"^hm_\w+", text, re.MULTILINE), "no hypermnesia metric at all"


MCP_CALLS = (
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "sweep", "version": "1"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "memory_list", "arguments": {}}},
)


async def test_no_answer_echoes_a_token(swept: Stack) -> None:
    answers: list[str] = []
    async with httpx.AsyncClient(base_url=swept.base_url, timeout=60) as http:
        for header in (
            f"Bearer {BOGUS_TOKEN}",
            BOGUS_TOKEN,
            f"Basic {BOGUS_TOKEN}",
            f"Bearer {BOGUS_TOKEN} extra",
        ):
            for method, path in (("GET", "/memories"), ("POST", "/memories/search"), ("GET", "/viz/graph")):
                r = await http.request(
                    method,
                    path,
                    json={"query": "x"} if method == "POST" else None,
                    headers={"Authorization": header},
                )
                assert r.status_code == 401, (header, path, r.text)
                answers.append(f"{r.headers}\n{r.text}")
            # MCP opens a session without a valid token (seed 001) and refuses each tool call.
            mcp = {"Authorization": header, "Accept": "application/json, text/event-stream"}
            for call in MCP_CALLS:
                r = await http.post("/mcp", json=call, headers=mcp)
                assert r.status_code in (200, 202), r.text
                if "mcp-session-id" in r.headers:
                    mcp = {**mcp, "mcp-session-id": r.headers["mcp-session-id"]}
                answers.append(f"{r.headers}\n{r.text}")
            assert "Authorization: Bearer <token>" in answers[-1] and '"isError":true' in answers[-1]
    leaked = [a for a in answers if BOGUS_TOKEN in a]
    assert not leaked, leaked[0]


def test_settings_never_show_a_token() -> None:
    """A settings object gets printed (a startup log, a traceback's locals, a debugger): the tokens
    of HM_AUTH_TOKENS must not be in its repr, as HM_TOKEN's is not. Fails until
    hypermnesia/settings.py marks `auth_tokens` repr=False (see the sweep's report)."""
    tokens = {BOGUS_TOKEN: {"principal": "carol", "scopes": ["user:carol"]}}
    settings = GatewaySettings(auth_tokens=tokens, token=BOGUS_TOKEN)
    assert settings.auth_tokens == tokens
    assert BOGUS_TOKEN not in repr(settings) and BOGUS_TOKEN not in str(settings)


def test_no_log_line_carries_a_token(swept: Stack) -> None:
    """Runs after the sweep (pytest keeps file order): every server log line of the module so far."""
    secrets = {BOGUS_TOKEN, *TOKENS}
    for token in (*TOKENS, BOGUS_TOKEN):
        digest = hashlib.sha256(token.encode()).hexdigest()
        secrets |= {digest[:12], digest}
    lines = [line for line in CAPTURED.lines if not line.startswith(CLIENT_LOGGERS)]
    assert lines, "no log line captured: the capture is not wired"
    leaked = [line for line in lines if any(s in line for s in secrets)]
    assert not leaked, "\n".join(leaked[:10])
