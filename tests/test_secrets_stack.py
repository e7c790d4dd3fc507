"""Secrets never stored (issue 30), on the real stack: every write path (REST save, update,
supersede, records append and import, which capture uses; the MCP tools; `hypermnesia ingest` and
`hypermnesia import`) with HM_REDACT=mask (the default: masked, reported), refuse (422 naming
kind and offset, nothing written) and off (kept); then, with no secret anywhere afterwards: not in
any table's text, the raw log, an export or a log line. `hypermnesia redact --scan/--apply` on
memories written with HM_REDACT=off leaves none either, and the chain still verifies.

The secrets are the evaluation corpus's (tooling/evaluation/secrets.py), one of each kind that the
detector catches: what is tested here is that no path goes around it (its recall is in docs/EVAL.md).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx
import pytest

from hypermnesia import secrets
from tests.conftest import Stack, start_stack
from tests.helpers import mcp_session, tool_json
from tests.test_curation_admin import cli
from tooling.evaluation import secrets as corpus

PROJECT = "secrets"
SCOPE = f"project:{PROJECT}"
ALICE = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": PROJECT}


def samples(seed: int) -> list[corpus.Example]:
    """One example of every kind of the corpus, the first the detector catches."""
    out = []
    for kind in corpus.KINDS:
        examples = [e for e in corpus.generate(seed, 4) if e.kind == kind]
        out.append(next(e for e in examples if corpus.caught(e, secrets.find(e.text))))
    return out


def fingerprint(secret: str) -> str:
    """What gives a secret away in any store of text: the start of its longest run of letters and
    digits, lower-cased (a tsvector lower-cases and splits tokens at punctuation)."""
    runs = [r for r in re.findall(r"[A-Za-z0-9]+", secret) if re.search(r"[A-Za-z]", r)]
    longest = max(runs, key=len)
    assert len(longest) >= 8, secret
    return longest[:10].lower()


async def text_dump(pool: asyncpg.Pool) -> str:
    """Every text column of every table (text, varchar, json, jsonb, arrays of text, tsvector)."""
    columns = await pool.fetch(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
        " AND udt_name IN ('text', 'varchar', 'bpchar', 'json', 'jsonb', '_text', '_varchar', 'tsvector')"
        " AND table_name IN (SELECT table_name FROM information_schema.tables"
        "   WHERE table_schema = 'public' AND table_type = 'BASE TABLE')"
    )
    assert {"memories", "record_texts", "search_log", "entities", "lexical_df"} <= {
        c["table_name"] for c in columns
    }
    parts = []
    for c in columns:
        rows = await pool.fetch(f'SELECT "{c["column_name"]}"::text AS v FROM "{c["table_name"]}"')
        parts += [f"{c['table_name']}.{c['column_name']}: {r['v']}" for r in rows if r["v"] is not None]
    return "\n".join(parts)


def leaked(examples: list[corpus.Example], *texts: str) -> list[str]:
    """The kinds whose secret shows in any of the texts."""
    haystack = "\n".join(texts).lower()
    return [e.kind for e in examples if fingerprint(e.secret) in haystack]


# The test's own clients, which log what they send at DEBUG (the MCP client logs every message):
# not the services' log.
CLIENT_LOGGERS = ("mcp.client", "httpx", "httpcore", "httpx2", "httpcore2")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(CLIENT_LOGGERS):
            return
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        self.lines.append(f"{record.name}: {text}")


@contextmanager
def service_logs() -> Iterator[_Lines]:
    """Every log line the in-process services, gateway and libraries emit, at every level."""
    root = logging.getLogger()
    handler, level = _Lines(), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def counts(pool: asyncpg.Pool) -> dict[str, int]:
    return {
        table: int(await pool.fetchval(f"SELECT count(*) FROM {table}"))
        for table in ("memories", "records", "record_texts", "documents")
    }


def md_tree(root: Path, texts: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts):
        (root / f"note-{i}.md").write_text(f"# Note {i}\n\nFrom the runbook.\n\n{text}\n", encoding="utf-8")
    return root


def dump_lines(texts: list[str]) -> str:
    now = datetime.now(UTC).isoformat()
    return "".join(
        json.dumps(
            {
                "id": str(uuid.uuid4()),
                "scope": SCOPE,
                "content": t,
                "owner_id": "alice",
                "kind": "semantic",
                "created_at": now,
            }
        )
        + "\n"
        for t in texts
    )


# ---- mask (the default) -------------------------------------------------------------------


async def test_every_write_path_masks_and_reports(stack: Stack) -> None:
    key = "AKIA" + "J4V7QX2M9PLR3T8B"
    token = "ghp_" + "Zq8x1Lm2Nv3Bc4Xz5Aq6Ws7Ed8Rf9Tg0Yh1Uj"
    expect = {"count": 1, "kinds": {"aws_access_key": 1}}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
        saved = (await http.post("/memories", json={"content": f"the staging key is {key}"})).json()
        assert saved["redacted"] == expect and saved["memory"]["content"] == (
            "the staging key is [REDACTED:aws_access_key]"
        )
        memory_id = saved["memory"]["id"]
        updated = (
            await http.patch(
                f"/memories/{memory_id}", json={"content": f"CI pushes with {token}", "tags": ["ci", token]}
            )
        ).json()
        assert updated["redacted"] == {"count": 2, "kinds": {"github_token": 2}}
        assert updated["content"] == "CI pushes with [REDACTED:github_token]"
        assert updated["tags"] == ["ci", "[REDACTED:github_token]"]
        superseded = (
            await http.post(
                f"/memories/{memory_id}/supersede",
                json={"content": f"now {key}", "metadata": {"env": {"AWS_KEY": key}}},
            )
        ).json()
        assert superseded["redacted"] == {"count": 2, "kinds": {"aws_access_key": 2}}
        assert superseded["memory"]["metadata"] == {"env": {"AWS_KEY": "[REDACTED:aws_access_key]"}}
        # A save with nothing to mask keeps the drop-in answer: no `redacted`.
        plain = (await http.post("/memories", json={"content": "the build takes nine minutes"})).json()
        assert "redacted" not in plain
        appended = (
            await http.post(
                "/records", json={"type": "conversation", "thread_id": "s1", "content": f"use {key}"}
            )
        ).json()
        assert appended["redacted"] == expect
        imported = (
            await http.post(
                "/records/import",
                json={
                    "records": [
                        {"type": "conversation", "thread_id": "s1", "content": "nothing here"},
                        {"type": "note", "content": f"token {token}", "description": f"key {key}"},
                    ]
                },
            )
        ).json()
        assert imported["redacted"] == {"count": 2, "kinds": {"aws_access_key": 1, "github_token": 1}}
        stored = (await http.get(f"/records/{imported['ids'][1]}")).json()
        assert stored["memory"]["content"] == "token [REDACTED:github_token]"
        assert stored["payload"]["memory"]["description"] == "key [REDACTED:aws_access_key]"
    async with mcp_session(stack.mcp_url, "alice-token", project=PROJECT, tools="full") as mcp:
        made = tool_json(await mcp.call_tool("memory_save", {"content": f"deploy key {key}"}))
        assert made["redacted"] == expect
        changed = tool_json(
            await mcp.call_tool(
                "memory_update", {"memory_id": made["memory"]["id"], "content": f"v2 {token}"}
            )
        )
        assert changed["redacted"] == {"count": 1, "kinds": {"github_token": 1}}
        corrected = tool_json(
            await mcp.call_tool(
                "memory_supersede", {"memory_id": made["memory"]["id"], "content": f"v3 {key}"}
            )
        )
        assert (
            corrected["redacted"] == expect
            and corrected["memory"]["content"] == "v3 [REDACTED:aws_access_key]"
        )


async def test_no_secret_of_the_corpus_is_stored_anywhere(
    stack: Stack, model_cache: Path, tmp_path: Path
) -> None:
    examples = samples(seed=11)
    assert len(examples) >= 25
    paths = (
        "save", "update", "supersede", "append", "import", "mcp_save", "mcp_update", "mcp_supersede",
        "search", "mcp_search", "ingest", "dump",
    )  # fmt: skip
    by_path: dict[str, list[corpus.Example]] = {p: [] for p in paths}
    for i, example in enumerate(examples):
        by_path[paths[i % len(paths)]].append(example)
    reported = 0
    with service_logs() as logs:
        async with httpx.AsyncClient(base_url=stack.base_url, headers=ALICE, timeout=60) as http:
            for e in by_path["save"]:
                answer = await http.post("/memories", json={"content": e.text, "description": "a credential"})
                reported += answer.json()["redacted"]["count"]
            for e in by_path["update"] + by_path["supersede"]:
                base = (await http.post("/memories", json={"content": f"placeholder {uuid.uuid4()}"})).json()
                if e in by_path["update"]:
                    answer = await http.patch(f"/memories/{base['memory']['id']}", json={"content": e.text})
                    reported += answer.json()["redacted"]["count"]
                else:
                    answer = await http.post(
                        f"/memories/{base['memory']['id']}/supersede", json={"content": e.text}
                    )
                    reported += answer.json()["redacted"]["count"]
            for n, e in enumerate(by_path["append"]):
                answer = await http.post(
                    "/records",
                    json={
                        "type": "conversation",
                        "thread_id": "capture-1",
                        "source_ref": f"t{n}",
                        "content": e.text,
                    },
                )
                reported += answer.json()["redacted"]["count"]
            answer = await http.post(
                "/records/import",
                json={"records": [{"type": "note", "content": e.text} for e in by_path["import"]]},
            )
            reported += answer.json()["redacted"]["count"]
            for e in by_path["search"]:
                assert (await http.post("/memories/search", json={"query": e.text})).status_code == 200
        async with mcp_session(stack.mcp_url, "alice-token", project=PROJECT, tools="full") as mcp:
            for e in by_path["mcp_save"]:
                reported += tool_json(await mcp.call_tool("memory_save", {"content": e.text}))["redacted"][
                    "count"
                ]
            for e in by_path["mcp_update"] + by_path["mcp_supersede"]:
                base = tool_json(
                    await mcp.call_tool("memory_save", {"content": f"placeholder {uuid.uuid4()}"})
                )
                tool = "memory_update" if e in by_path["mcp_update"] else "memory_supersede"
                out = tool_json(
                    await mcp.call_tool(tool, {"memory_id": base["memory"]["id"], "content": e.text})
                )
                reported += out["redacted"]["count"]
            for e in by_path["mcp_search"]:
                tool_json(await mcp.call_tool("memory_search", {"query": e.text}))
        await stack.searcher.drain()
    cli_out = []
    ingested = await cli(
        stack.database_url, model_cache, "ingest", str(md_tree(tmp_path / "docs", [e.text for e in by_path["ingest"]])),
        "--repo", "secrets-docs", "--scope", SCOPE,
    )  # fmt: skip
    assert ingested.code == 0 and "masked" in ingested.out, ingested
    dump = tmp_path / "dump.jsonl"
    dump.write_text(dump_lines([e.text for e in by_path["dump"]]), encoding="utf-8")
    imported = await cli(stack.database_url, model_cache, "import", str(dump))
    assert imported.code == 0 and "masked" in imported.out, imported
    exported = await cli(stack.database_url, model_cache, "export", "--scope", SCOPE)
    verified = await cli(stack.database_url, model_cache, "verify")
    assert verified.code == 0, verified
    cli_out += [ingested.out, ingested.err, imported.out, imported.err, exported.out, exported.err]

    written = [e for p in paths if p not in ("search", "mcp_search") for e in by_path[p]]
    assert reported >= len(written) - len(by_path["ingest"]) - len(by_path["dump"])
    tables = await text_dump(stack.pool)
    assert "[REDACTED:" in exported.out and tables.count("[REDACTED:") >= len(written)
    assert len(logs.lines) > 50  # the services did log (at every level) while this ran
    assert leaked(examples, tables) == []
    assert leaked(examples, exported.out) == []
    fingerprints = [fingerprint(e.secret) for e in examples]
    loud = sorted({line.split(":")[0] for line in logs.lines if any(f in line.lower() for f in fingerprints)})
    assert loud == [], loud
    assert leaked(examples, *cli_out) == []
    # The searches were logged, masked.
    queries = [r["query"] for r in await stack.pool.fetch("SELECT query FROM search_log")]
    assert sum("[REDACTED:" in q for q in queries) >= len(by_path["search"]) + len(by_path["mcp_search"])


# ---- refuse -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def refusing(pg_server_url: str, embedder: str, model_cache: Path) -> AsyncIterator[Stack]:
    async with start_stack(pg_server_url, embedder, model_cache, redact="refuse") as running:
        yield running


async def test_refuse_writes_nothing_and_names_kind_and_offset(
    refusing: Stack, model_cache: Path, tmp_path: Path
) -> None:
    key = "AKIA" + "J4V7QX2M9PLR3T8B"
    async with httpx.AsyncClient(base_url=refusing.base_url, headers=ALICE, timeout=60) as http:
        base = (await http.post("/memories", json={"content": "the deploy key lives in the vault"})).json()
        assert base["created"]
        memory_id = base["memory"]["id"]
        before = await counts(refusing.pool)
        for method, path, body, where in (
            (
                "POST",
                "/memories",
                {"content": f"key {key}"},
                "content holds a secret (aws_access_key at offset 4)",
            ),
            ("POST", "/memories", {"content": "ok", "description": f"the {key}"}, "description"),
            ("PATCH", f"/memories/{memory_id}", {"content": f"now {key}"}, "content"),
            ("PATCH", f"/memories/{memory_id}", {"metadata": {"k": key}}, "metadata.k"),
            (
                "POST",
                f"/memories/{memory_id}/supersede",
                {"content": f"moved: {key}"},
                "content holds a secret (aws_access_key at offset 7)",
            ),
            ("POST", "/records", {"type": "conversation", "content": f"use {key}"}, "content"),
            (
                "POST",
                "/records/import",
                {"records": [{"type": "note", "content": "fine"}, {"type": "note", "content": f"x {key}"}]},
                "records[1].content",
            ),
        ):
            answer = await http.request(method, path, json=body)
            assert answer.status_code == 422, (path, answer.text)
            message = answer.json()["error"]["message"]
            assert "aws_access_key" in message and where in message and key not in message, message
        assert (await http.post("/memories/search", json={"query": f"where is {key}"})).status_code == 200
    async with mcp_session(refusing.mcp_url, "alice-token", project=PROJECT) as mcp:
        result = await mcp.call_tool("memory_save", {"content": f"key {key}"})
        assert result.is_error and "aws_access_key" in result.content[0].text
    ingested = await cli(
        refusing.database_url, model_cache, "ingest", str(md_tree(tmp_path / "docs", ["plain", f"key {key}"])),
        "--repo", "r", "--scope", SCOPE, HM_REDACT="refuse",
    )  # fmt: skip
    assert ingested.code != 0 and "note-1.md holds a secret (aws_access_key" in ingested.err, ingested
    dump = tmp_path / "dump.jsonl"
    dump.write_text(dump_lines([f"key {key}"]), encoding="utf-8")
    imported = await cli(refusing.database_url, model_cache, "import", str(dump), HM_REDACT="refuse")
    assert imported.code == 4 and "line 1: content holds a secret (aws_access_key" in imported.err, imported
    assert await counts(refusing.pool) == before
    await refusing.searcher.drain()
    assert key not in await text_dump(refusing.pool)


# ---- off, then redact --scan / --apply ----------------------------------------------------


@pytest.fixture(scope="module")
async def keeping(pg_server_url: str, embedder: str, model_cache: Path) -> AsyncIterator[Stack]:
    async with start_stack(pg_server_url, embedder, model_cache, redact="off") as running:
        yield running


async def test_off_keeps_secrets_and_redact_apply_removes_them(keeping: Stack, model_cache: Path) -> None:
    examples = samples(seed=12)[:8]
    ids: list[str] = []
    async with httpx.AsyncClient(base_url=keeping.base_url, headers=ALICE, timeout=60) as http:
        for n, e in enumerate(examples):
            saved = (await http.post("/memories", json={"content": f"fact {n}: {e.text}"})).json()
            assert "redacted" not in saved and saved["memory"]["content"] == f"fact {n}: {e.text}"
            ids.append(saved["memory"]["id"])
        # A later version without the secret: the first version's text still holds it.
        patched = await http.patch(f"/memories/{ids[0]}", json={"content": "fact 0: rotated, see the vault"})
        assert patched.status_code == 200
        corrected = (
            await http.post(f"/memories/{ids[1]}/supersede", json={"content": "moved to the vault"})
        ).json()
        plain = (await http.post("/memories", json={"content": "the standup is at ten"})).json()
        assert (await http.post("/memories/search", json={"query": examples[2].text})).status_code == 200
    await keeping.searcher.drain()
    # The grep finds what is there: the secrets written with HM_REDACT=off.
    assert sorted(leaked(examples, await text_dump(keeping.pool))) == sorted(e.kind for e in examples)

    scanned = await cli(keeping.database_url, model_cache, "redact", "--scan")
    assert scanned.code == 0, scanned
    for memory_id in ids:
        assert f"memory {memory_id}" in scanned.out
    assert plain["memory"]["id"] not in scanned.out and corrected["memory"]["id"] not in scanned.out
    assert "search log: 1 queries" in scanned.out
    assert leaked(examples, scanned.out, scanned.err) == []

    applied = await cli(keeping.database_url, model_cache, "redact", "--apply")
    assert applied.code == 0 and "masked them" in applied.out, applied
    assert leaked(examples, applied.out, applied.err) == []
    assert leaked(examples, await text_dump(keeping.pool)) == []
    exported = await cli(keeping.database_url, model_cache, "export")
    assert leaked(examples, exported.out) == []
    verified = await cli(keeping.database_url, model_cache, "verify")
    assert verified.code == 0 and "the chain holds" in verified.out, verified
    rebuilt = await cli(keeping.database_url, model_cache, "rebuild", "--check")
    assert rebuilt.code == 0, rebuilt.out
    again = await cli(keeping.database_url, model_cache, "redact", "--scan")
    assert "0 memories hold secrets" in again.out, again.out

    async with httpx.AsyncClient(base_url=keeping.base_url, headers=ALICE, timeout=60) as http:
        # Every word that was not a secret is still there, as a new version of the same memory.
        # (Read from the table: the superseded one is no longer served by GET.)
        for n, (memory_id, e) in enumerate(zip(ids, examples, strict=True)):
            content = await keeping.pool.fetchval(
                "SELECT content FROM memories WHERE id = $1", uuid.UUID(memory_id)
            )
            if n == 0:
                assert content == "fact 0: rotated, see the vault"
            else:
                assert content == f"fact {n}: {secrets.masked(e.text)}"
        versions = (await http.get(f"/memories/{ids[2]}/lineage")).json()["versions"]
        assert versions[0]["text"] == "purged" and versions[-1]["reason"] == "redact"
        assert versions[-1]["content"] == f"fact 2: {secrets.masked(examples[2].text)}"
        unchanged = (await http.get(f"/memories/{plain['memory']['id']}")).json()
        assert unchanged["content"] == "the standup is at ten"
