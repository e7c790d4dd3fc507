"""Ranking is a function of the store and the query (issue 27 item 3), on the real stack: curation
and one retrieval in this process, a second retrieval as its own `hypermnesia serve retrieval`
process on the same database, and the gateway process spreading searches over both (one address
list, round robin). Adaptive fusion's estimate of a scope changes only at refits (the command, an
import, curation's schedule), each logged; searches never change it, so a query ranks the same
after other searches, on either replica and after a restart of one.

Each test has a project of its own holding the same notes: twenty "Note: <topic> came up today"
and two more. Asked "note on <a paraphrase of a topic>", the dense leg stands out (one note is
the paraphrase) and the lexical one does not (every note holds "note"), so each such search
observes evidence for the dense leg. The probe question names the zebrafinch note's one rare word
but means Grandma's pie: at the prior lexical weight the zebrafinch note comes first; once a
refit has read that evidence, the pie does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import urllib.request
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import httpx
import pytest

from hypermnesia import row_security
from hypermnesia.settings import CurationSettings
from hypermnesia.v1 import common_pb2, retrieval_pb2, retrieval_pb2_grpc
from services.curation import fusion_refits
from services.curation.server import running as curation_running
from tests.conftest import create_database
from tooling.local_stack import gateway_process, local_stack
from tooling.process import free_port

TOKENS = {"rita-token": {"principal": "rita", "scopes": ["project:*"]}}
RITA = common_pb2.Caller(principal="rita", grants=["project:*"])
TIMEOUT_S = 60
TOPICS = [
    "the quarterly budget",
    "the new office lease",
    "hiring two engineers",
    "the database migration",
    "the holiday schedule",
    "a customer complaint about latency",
    "the security audit",
    "moving to Kubernetes",
    "the marketing launch",
    "renewing the cloud contract",
    "onboarding documentation",
    "the broken CI pipeline",
    "the coffee machine",
    "parking permits",
    "the annual conference trip",
    "password rotation policy",
    "the mobile app redesign",
    "vendor invoices",
    "team offsite planning",
    "the data retention rules",
]
# The same subjects in other words: what the dense leg finds and the lexical leg cannot.
PARAPHRASES = [
    "money planned for the next three months",
    "renting a different workplace",
    "recruiting a couple of developers",
    "moving records to another storage engine",
    "time off around Christmas",
    "a client unhappy with slow responses",
    "an inspection of our defences",
    "adopting container orchestration",
    "promoting the product release",
    "extending our hosting agreement",
    "guides for new starters",
    "automated build failures",
    "the espresso device in the kitchen",
    "permission to leave cars in the lot",
    "travel to the yearly industry event",
    "how often credentials must change",
    "refreshing the phone application look",
    "bills from suppliers",
    "organising a retreat away from the office",
    "how long we keep information",
]
ZEBRAFINCH = "The zebrafinch build flag turns on the experimental compiler"
PIE = "Grandma bakes an apple pie with cinnamon and two cups of sugar"
PROBE = "what sweet treat does granny make with zebrafinch"


@dataclass
class RetrievalProcess:
    """`hypermnesia serve retrieval` on a fixed port, so a restart keeps its address."""

    env: dict[str, str]
    port: int
    metrics_port: int
    log_path: Path
    child: asyncio.subprocess.Process | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.child = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "hypermnesia",
                "serve",
                "retrieval",
                env=self.env,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
            )
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub = retrieval_pb2_grpc.RetrievalStub(channel)
            for _ in range(600):
                if self.child.returncode is not None:
                    raise RuntimeError(f"retrieval exited:\n{self.log_path.read_text()[-2000:]}")
                try:
                    await stub.GetLiveSettings(common_pb2.LiveSettingsRequest(), timeout=1)
                    return
                except grpc.aio.AioRpcError:
                    await asyncio.sleep(0.1)
        raise TimeoutError(f"retrieval did not answer in 60 s; see {self.log_path}")

    async def stop(self) -> None:
        if self.child is not None and self.child.returncode is None:
            self.child.terminate()
            await self.child.wait()

    def searches_served(self) -> float:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            for line in response.read().decode().splitlines():
                if line.startswith("hm_search_seconds_count "):
                    return float(line.split()[1])
        raise AssertionError(f"{url} has no hm_search_seconds_count")


@dataclass
class Replicas:
    database_url: str
    pool: asyncpg.Pool  # the owner's view of the store
    curation_address: str
    first: str  # the in-process retrieval's address
    second: RetrievalProcess
    base_url: str  # the gateway, over both
    searcher: Any  # the in-process retrieval's


@pytest.fixture(scope="module")
async def replicas(
    pg_server_url: str, embedder: str, model_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Replicas]:
    database_url = await create_database(pg_server_url)
    logs = tmp_path_factory.mktemp("refits")
    # No scheduled refit inside the tests' stack: only the ones each test asks for.
    settings = {"auth_tokens": TOKENS, "require_auth": True, "fusion_refit_hours": 0}
    async with local_stack(database_url, embedder, model_cache, **settings) as stack:
        second = RetrievalProcess(
            env={
                **os.environ,
                "HM_DATABASE_URL": database_url,
                "HM_DATA_DIR": str(model_cache),
                "HM_EMBEDDER_ADDRESS": embedder,
                "HM_HOST": "127.0.0.1",
                "HM_RETRIEVAL_PORT": str(free_port()),
                "HM_RETRIEVAL_METRICS_PORT": str(free_port()),
                "HM_LOG_LEVEL": "WARNING",
            },
            port=0,
            metrics_port=0,
            log_path=logs / "retrieval-2.log",
        )
        second.port = int(second.env["HM_RETRIEVAL_PORT"])
        second.metrics_port = int(second.env["HM_RETRIEVAL_METRICS_PORT"])
        await second.start()
        pool = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
        try:
            async with gateway_process(
                f"{stack.retrieval_address},{second.address}",
                stack.curation_address,
                logs / "gateway.log",
                auth_tokens=TOKENS,
                require_auth=True,
            ) as base_url:
                yield Replicas(
                    database_url=database_url,
                    pool=pool,
                    curation_address=stack.curation_address,
                    first=stack.retrieval_address,
                    second=second,
                    base_url=base_url,
                    searcher=stack.searcher,
                )
        finally:
            await pool.close()
            await second.stop()


@asynccontextmanager
async def project(replicas: Replicas, name: str) -> AsyncIterator[httpx.AsyncClient]:
    """A REST client of the gateway for project:<name>, which it first fills with the notes."""
    headers = {"Authorization": "Bearer rita-token", "X-Hypermnesia-Project": name}
    async with httpx.AsyncClient(base_url=replicas.base_url, headers=headers, timeout=TIMEOUT_S) as http:
        notes = [f"Note: {topic} came up today" for topic in TOPICS] + [ZEBRAFINCH, PIE]
        response = await http.post(
            "/records/import",
            json={
                "records": [
                    {"type": "note", "content": c, "source_ref": f"n{i}"} for i, c in enumerate(notes)
                ]
            },
        )
        assert response.status_code == 200, response.text
        assert response.json()["imported"] == len(notes)
        yield http


async def ask(http: httpx.AsyncClient, query: str) -> list[str]:
    """The ids the gateway answers, in order (gates off: the ranking itself)."""
    response = await http.post(
        "/memories/search", json={"query": query, "k": 8, "min_similarity": 0, "relative_cutoff": 0}
    )
    assert response.status_code == 200, response.text
    return [hit["id"] for hit in response.json()["results"]]


async def ask_replica(address: str, scope: str, query: str) -> list[str]:
    """The ids one retrieval replica answers, asked directly as the gateway asks it."""
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await retrieval_pb2_grpc.RetrievalStub(channel).Search(
            retrieval_pb2.SearchRequest(
                caller=RITA, query=query, scopes=[scope], k=8, min_similarity=0, relative_cutoff=0
            ),
            timeout=TIMEOUT_S,
        )
    return [hit.memory.id for hit in reply.hits]


async def other_searches(http: httpx.AsyncClient, n: int) -> None:
    for i in range(n):
        assert await ask(http, f"note on {PARAPHRASES[i % len(PARAPHRASES)]}")


async def ids_of(pool: asyncpg.Pool, scope: str) -> dict[str, str]:
    rows = await pool.fetch("SELECT id::text, content FROM memories WHERE scope = $1", scope)
    return {r["content"]: r["id"] for r in rows}


async def logged(replicas: Replicas, scope: str, n: int) -> None:
    """Wait until `n` searches of `scope` have logged their observation (each replica writes its
    search_log rows within a second, off the hot path)."""
    for _ in range(300):
        await replicas.searcher.drain()
        count = await replicas.pool.fetchval(
            "SELECT count(*) FROM search_log WHERE scopes = ARRAY[$1] AND clarity_log_ratio IS NOT NULL",
            scope,
        )
        if count >= n:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"only {count} of {n} observations of {scope} were logged")


async def estimates(pool: asyncpg.Pool, scope: str) -> list[asyncpg.Record]:
    """Every estimate stored for the one-scope key, oldest first, with its refit."""
    return list(
        await pool.fetch(
            "SELECT e.estimate, e.observations, e.refit_id, r.reason, r.scopes AS refit_scopes"
            " FROM fusion_estimates e JOIN fusion_refits r ON r.id = e.refit_id"
            " WHERE e.scopes = ARRAY[$1] ORDER BY e.refit_id",
            scope,
        )
    )


async def cli(replicas: Replicas, *words: str, data_dir: Path | None = None) -> tuple[int, str, str]:
    """`python -m hypermnesia WORDS` on the store, as an operator runs it (asynchronous: the
    stack serves from this test's event loop); `data_dir` holds the model for commands that embed."""
    data = {"HM_DATA_DIR": str(data_dir)} if data_dir else {}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hypermnesia",
        *words,
        env={**os.environ, "HM_DATABASE_URL": replicas.database_url, **data},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await asyncio.wait_for(child.communicate(), 120)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


async def test_a_query_ranks_the_same_after_other_searches_until_a_refit(replicas: Replicas) -> None:
    scope = "project:refits-searches"
    async with project(replicas, "refits-searches") as http:
        notes = await ids_of(replicas.pool, scope)
        before = await ask(http, PROBE)
        # At the prior, the rare word's note leads.
        assert before.index(notes[ZEBRAFINCH]) < before.index(notes[PIE]), before

        served = replicas.second.searches_served()
        await other_searches(http, 20)
        assert await ask(http, PROBE) == before
        # The gateway spread them over both replicas.
        assert 0 < replicas.second.searches_served() - served < 21
        await other_searches(http, 40)
        assert await ask(http, PROBE) == before
        # The latest searches weigh most in the estimate (hypermnesia/fusion_estimate.py): the
        # probes are themselves evidence for the lexical leg, so the refit rests on forty more.
        await other_searches(http, 40)
        await logged(replicas, scope, 103)  # every search so far: the probe three times, a hundred others
        assert await estimates(replicas.pool, scope) == []  # searches observed; nothing was fit

        # An explicit refit reads the evidence those searches logged, and is logged itself.
        code, out, err = await cli(replicas, "fusion", "refit", "--json")
        assert code == 0, err
        done = json.loads(out)
        assert done["reason"] == fusion_refits.COMMAND and done["refit"] is not None
        fitted = [k for k in done["keys"] if k["scopes"] == [scope]]
        assert len(fitted) == 1 and fitted[0]["previous"] is None and fitted[0]["observations"] == 103
        assert fitted[0]["estimate"] < 0  # the dense leg was the clearer one
        (stored,) = await estimates(replicas.pool, scope)
        assert stored["refit_id"] == done["refit"] and stored["reason"] == "command"
        assert stored["estimate"] == pytest.approx(fitted[0]["estimate"])
        after = await ask(http, PROBE)
        assert after.index(notes[PIE]) < after.index(notes[ZEBRAFINCH]), after

        # Searches alone change nothing again: not the stored estimate, not the ranking.
        await other_searches(http, 20)
        assert await ask(http, PROBE) == after
        await logged(replicas, scope, 125)
        assert await estimates(replicas.pool, scope) == [stored]
        code, out, err = await cli(replicas, "fusion", "show")
        assert code == 0, err
        assert f"[{scope}]  estimate {stored['estimate']:+.3f}" in out and "command" in out


async def test_two_replicas_and_a_restarted_one_rank_alike(replicas: Replicas) -> None:
    scope = "project:refits-replicas"
    async with project(replicas, "refits-replicas") as http:
        notes = await ids_of(replicas.pool, scope)
        # One replica alone sees sixty searches: the other must still rank as it does.
        for i in range(60):
            await ask_replica(replicas.first, scope, f"note on {PARAPHRASES[i % len(PARAPHRASES)]}")
        first = await ask_replica(replicas.first, scope, PROBE)
        assert await ask_replica(replicas.second.address, scope, PROBE) == first
        assert [await ask(http, PROBE) for _ in range(4)] == [first] * 4
        assert first.index(notes[ZEBRAFINCH]) < first.index(notes[PIE])

        # The latest searches weigh most in the estimate (hypermnesia/fusion_estimate.py): the
        # probes just asked are themselves evidence for the lexical leg.
        await other_searches(http, 40)
        await logged(replicas, scope, 106)
        done = await fusion_refits.refit(replicas.pool, fusion_refits.COMMAND)
        (fitted,) = [k for k in done.keys if k.scopes == [scope]]
        refit = await ask_replica(replicas.first, scope, PROBE)
        assert refit != first and refit.index(notes[PIE]) < refit.index(notes[ZEBRAFINCH]), fitted
        assert await ask_replica(replicas.second.address, scope, PROBE) == refit
        assert [await ask(http, PROBE) for _ in range(4)] == [refit] * 4

        await replicas.second.stop()
        await replicas.second.start()
        assert await ask_replica(replicas.second.address, scope, PROBE) == refit
        assert [await ask(http, PROBE) for _ in range(4)] == [refit] * 4


async def test_a_query_asked_around_twenty_searches_on_two_replicas_and_a_restart_ranks_alike(
    replicas: Replicas, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 27 item 3's done-when, at a refit estimate (not the prior): the same query before and
    after twenty other searches, on either replica and through the gateway over both, and after a
    restart of one, returns the same ids in the same order; the refit that set it is logged."""
    scope = "project:refits-done"
    async with project(replicas, "refits-done") as http:
        await other_searches(http, 40)
        await logged(replicas, scope, 40)
        with caplog.at_level(logging.INFO, logger=fusion_refits.__name__):
            done = await fusion_refits.refit(replicas.pool, fusion_refits.COMMAND, [scope])
        assert done.id is not None and [k.scopes for k in done.keys] == [[scope]]
        assert f"fusion refit {done.id} (command): 1 scope keys: [{scope}] none ->" in caplog.text
        (stored,) = await estimates(replicas.pool, scope)
        assert stored["refit_id"] == done.id and stored["reason"] == "command" and stored["estimate"] < 0

        before = await ask(http, PROBE)
        assert len(before) == 8
        assert await ask_replica(replicas.first, scope, PROBE) == before
        assert await ask_replica(replicas.second.address, scope, PROBE) == before

        served = replicas.second.searches_served()
        await other_searches(http, 20)
        assert 0 < replicas.second.searches_served() - served < 20  # the gateway used both
        await logged(replicas, scope, 63)  # the twenty were observed, and changed nothing
        assert await estimates(replicas.pool, scope) == [stored]
        assert await ask(http, PROBE) == before
        assert await ask_replica(replicas.first, scope, PROBE) == before
        assert await ask_replica(replicas.second.address, scope, PROBE) == before

        await replicas.second.stop()
        await replicas.second.start()
        assert await ask_replica(replicas.second.address, scope, PROBE) == before
        assert [await ask(http, PROBE) for _ in range(4)] == [before] * 4


async def test_an_import_refits_the_keys_holding_its_scopes(
    replicas: Replicas, model_cache: Path, tmp_path: Path
) -> None:
    scope, untouched = "project:refits-import", "project:refits-elsewhere"
    async with project(replicas, "refits-import") as http, project(replicas, "refits-elsewhere") as other:
        await other_searches(http, 20)
        await other_searches(other, 20)
        await logged(replicas, scope, 20)
        await logged(replicas, untouched, 20)
        assert await estimates(replicas.pool, scope) == []
        response = await http.post(
            "/records/import", json={"records": [{"type": "note", "content": "Note: the printer jammed"}]}
        )
        assert response.status_code == 200 and response.json()["imported"] == 1, response.text
        (stored,) = await estimates(replicas.pool, scope)
        assert stored["reason"] == "import" and stored["refit_scopes"] == [scope]
        assert stored["observations"] == 20
        # The import's refit fit the keys holding its scopes, not the others.
        assert await estimates(replicas.pool, untouched) == []
        # Importing nothing new (the same source_ref again) is no refit moment.
        await other_searches(http, 5)
        await logged(replicas, scope, 25)
        again = await http.post(
            "/records/import", json={"records": [{"type": "note", "content": "Note: x", "source_ref": "n0"}]}
        )
        assert again.status_code == 200 and again.json()["imported"] == 0, again.text
        assert await estimates(replicas.pool, scope) == [stored]

        # `hypermnesia import` is the other import: it refits the keys holding what it imported.
        notes = tmp_path / "notes.md"
        notes.write_text("# Office\n\n- The printer on the second floor jams on Mondays\n")
        code, out, err = await cli(replicas, "import", str(notes), "--scope", scope, data_dir=model_cache)
        assert code == 0 and "imported 1" in out, err
        first, second = await estimates(replicas.pool, scope)
        assert first == stored and second["reason"] == "import" and second["refit_scopes"] == [scope]
        assert second["observations"] == 25
        assert await estimates(replicas.pool, untouched) == []


async def test_curation_refits_on_its_schedule(replicas: Replicas, model_cache: Path, embedder: str) -> None:
    scope = "project:refits-schedule"
    async with project(replicas, "refits-schedule") as http:
        await other_searches(http, 10)
        await logged(replicas, scope, 10)
        # A curation replica whose schedule is due within seconds (its first run waits at most a
        # period after start, counted from the last refit stored).
        settings = CurationSettings(
            database_url=replicas.database_url,
            data_dir=model_cache,
            embedder_address=embedder,
            curation_port=0,
            fusion_refit_hours=2 / 3600,
            viz_refresh_s=0,
            verify_hours=0,
            consolidation_daily_hours=0,
            consolidation_weekly_hours=0,
            consolidation_monthly_hours=0,
        )
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(curation_running(settings))
            for _ in range(300):
                stored = await estimates(replicas.pool, scope)
                if stored:
                    break
                await asyncio.sleep(0.1)
        assert [(e["reason"], e["observations"]) for e in stored] == [("schedule", 10)]


async def test_estimates_are_read_under_row_security(replicas: Replicas) -> None:
    """A caller's connection reads the estimate of a key only when its grants permit every scope
    of it, and writes none; the refits' own log is the service's alone."""
    async with project(replicas, "refits-rls") as http:
        await other_searches(http, 3)
        await logged(replicas, "project:refits-rls", 3)
        await fusion_refits.refit(replicas.pool, fusion_refits.COMMAND, ["project:refits-rls"])
    conn = await asyncpg.connect(replicas.database_url)
    try:
        await conn.execute(f"SET ROLE {row_security.SERVICE_ROLE}")

        async def visible(grants: list[str]) -> set[str]:
            with row_security.acting_as(row_security.for_caller(grants)):
                _role, read, _write = row_security.current_state()
            await conn.execute("SELECT set_config('hm.read_grants', $1, false)", read)
            return {r["scope_key"] for r in await conn.fetch("SELECT scope_key FROM fusion_estimates")}

        assert "project:refits-rls" in await visible(["project:refits-rls"])
        assert await visible(["project:refits-rls"]) == {"project:refits-rls"}
        assert "project:refits-rls" in await visible(["project:*"])
        assert await visible(["user:nobody"]) == set()
        assert await visible([]) == set()
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(
                "UPDATE fusion_estimates SET estimate = 0 WHERE scope_key = 'project:refits-rls'"
            )
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetchval("SELECT count(*) FROM fusion_refits")
    finally:
        await conn.close()
