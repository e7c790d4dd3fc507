"""`hypermnesia bench consolidation`: consolidation over history moved in with its own dates.

Each LoCoMo conversation (public data, ../shared/data) goes into a scope of its own through
curation's import, every turn a conversation record dated by its 2023 session; then the weekly
and monthly jobs run on demand through the Consolidate RPC, as `hypermnesia consolidate` runs
them, and once more to show that a second run reads and proposes nothing. Last, every
conversation together in one scope (a larger history, read in batches). Per scope: turns read,
proposals, the sizes of the weekly groups, how alike their members are (mean cosine between two
members of a group, against two turns of the conversation drawn at random), and the run times.
The clustering's constants were chosen on conversation 1 (in-sample); 2-10 are held out."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from hypermnesia.pool import connect_pool
from hypermnesia.times import optional_timestamp
from hypermnesia.v1 import (
    common_pb2,
    curation_pb2,
    curation_pb2_grpc,
    intelligence_pb2,
    intelligence_pb2_grpc,
)
from services.curation import repo
from tooling.evaluation import datasets
from tooling.local_stack import CONSOLIDATION_ON_DEMAND, scratch_stack

__all__ = ["register", "run"]

CALLER = common_pb2.Caller(principal="bench", grants=["bench:*"])
IMPORT_BATCH = 500
RANDOM_PAIRS = 2000


async def _import(stub: curation_pb2_grpc.CurationAsyncStub, docs: list[datasets.Doc], scope: str) -> None:
    for start in range(0, len(docs), IMPORT_BATCH):
        records = [
            curation_pb2.RecordInput(
                type="conversation",
                scope=scope,
                content=d.content,
                source_ref=f"{d.thread_id}/{d.ref}",
                thread_id=d.thread_id,
                created_at=optional_timestamp(d.created_at),
            )
            for d in docs[start : start + IMPORT_BATCH]
        ]
        await stub.ImportRecords(
            curation_pb2.ImportRecordsRequest(caller=CALLER, records=records), timeout=900
        )


async def _consolidate(
    stub: intelligence_pb2_grpc.IntelligenceAsyncStub, job: str, scope: str
) -> intelligence_pb2.ConsolidateReport:
    reply = await stub.Consolidate(
        intelligence_pb2.ConsolidateRequest(caller=CALLER, job=job, scope=scope), timeout=3600
    )
    (report,) = reply.reports
    return report


def _mean_cosine(vectors: dict[uuid.UUID, np.ndarray], pairs: list[tuple[uuid.UUID, uuid.UUID]]) -> float:
    values = []
    for a, b in pairs:
        va, vb = vectors[a], vectors[b]
        values.append(float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb) + 1e-12)))
    return statistics.fmean(values) if values else float("nan")


async def _cohesion(pool: Any, scope: str, groups: list[list[str]]) -> tuple[float, float]:
    """Mean cosine of two members of one group, and of two turns of the scope drawn at random."""
    async with pool.acquire() as conn:
        ids = [r["id"] for r in await conn.fetch("SELECT id FROM memories WHERE scope = $1", scope)]
        vectors = {
            k: np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32)
            for k, v in (await repo.embeddings_for(conn, ids)).items()
        }
    inside = [(uuid.UUID(a), uuid.UUID(b)) for g in groups for i, a in enumerate(g) for b in g[i + 1 :]]
    draw = random.Random(0)
    chance = [tuple(draw.sample(ids, 2)) for _ in range(RANDOM_PAIRS)]
    return _mean_cosine(vectors, inside), _mean_cosine(vectors, chance)


async def _one_scope(
    curation: curation_pb2_grpc.CurationAsyncStub,
    intelligence: intelligence_pb2_grpc.IntelligenceAsyncStub,
    pool: Any,
    name: str,
    docs: list[datasets.Doc],
) -> dict[str, Any]:
    scope = f"bench:{name}"
    await _import(curation, docs, scope)
    started = time.perf_counter()
    weekly = await _consolidate(intelligence, "weekly", scope)
    weekly_s = time.perf_counter() - started
    started = time.perf_counter()
    monthly = await _consolidate(intelligence, "monthly", scope)
    monthly_s = time.perf_counter() - started
    again = [await _consolidate(intelligence, job, scope) for job in ("weekly", "monthly")]
    async with pool.acquire() as conn:  # every one (ListProposals answers at most 1,000)
        facts = [
            [str(e) for e in r["evidence"]]
            for r in await conn.fetch(
                "SELECT evidence FROM proposals WHERE scope = $1 AND kind = 'fact'", scope
            )
        ]
    sizes = sorted(len(g) for g in facts)
    inside, chance = await _cohesion(pool, scope, facts)
    return {
        "scope": name,
        "turns": len(docs),
        "sessions": len({d.thread_id for d in docs}),
        "weekly_read": weekly.read,
        "facts": weekly.made_by_kind.get("fact", 0),
        "group_sizes": {
            "min": sizes[0] if sizes else 0,
            "median": statistics.median(sizes) if sizes else 0,
            "max": sizes[-1] if sizes else 0,
        },
        "turns_in_a_group": sum(sizes),
        "cosine_in_group": round(inside, 3),
        "cosine_at_random": round(chance, 3),
        "weekly_s": round(weekly_s, 2),
        "monthly_read": monthly.read,
        "monthly_proposals": monthly.proposals_made,
        "monthly_s": round(monthly_s, 2),
        "second_run_read": sum(r.read for r in again),
        "second_run_proposals": sum(r.proposals_made for r in again),
        "second_run_ms": round(sum(r.duration_ms for r in again), 1),
    }


async def run(data_dir: Path, conversations: int, database_url: str | None) -> list[dict[str, Any]]:
    corpora = datasets.load_locomo(data_dir)[:conversations]
    results = []
    async with (
        scratch_stack(
            database_url,
            prefix="hm_bench",
            **CONSOLIDATION_ON_DEMAND,
        ) as stack,
        grpc.aio.insecure_channel(stack.curation_address) as channel,
    ):
        curation = curation_pb2_grpc.CurationStub(channel)
        intelligence = intelligence_pb2_grpc.IntelligenceStub(channel)
        pool = await connect_pool(stack.database_url, max_size=2)
        try:
            for n, corpus in enumerate(corpora, start=1):
                print(f"conversation {n}: {len(corpus.docs)} turns", file=sys.stderr)
                results.append(await _one_scope(curation, intelligence, pool, str(n), corpus.docs))
            if len(corpora) > 1:
                together = [
                    datasets.Doc(ref=d.ref, content=d.content, thread_id=f"c{n}-{d.thread_id}",
                                 created_at=d.created_at)
                    for n, corpus in enumerate(corpora, start=1) for d in corpus.docs
                ]  # fmt: skip
                print(f"every conversation in one scope: {len(together)} turns", file=sys.stderr)
                results.append(await _one_scope(curation, intelligence, pool, "all", together))
        finally:
            await pool.close()
    return results


def format_table(results: list[dict[str, Any]]) -> str:
    header = (
        "| scope | turns | weekly read | facts | group size min/median/max | turns grouped | cosine in group"
        " / at random | weekly s | monthly read / proposals / s | second run read / proposals / ms |"
    )
    lines = [header, "|" + "---|" * 10]
    for r in results:
        g = r["group_sizes"]
        lines.append(
            f"| {r['scope']} | {r['turns']:,} | {r['weekly_read']:,} | {r['facts']} |"
            f" {g['min']}/{g['median']:g}/{g['max']} | {r['turns_in_a_group']:,} |"
            f" {r['cosine_in_group']:.3f} / {r['cosine_at_random']:.3f} | {r['weekly_s']:.2f} |"
            f" {r['monthly_read']:,} / {r['monthly_proposals']} / {r['monthly_s']:.2f} |"
            f" {r['second_run_read']} / {r['second_run_proposals']} / {r['second_run_ms']:.0f} |"
        )
    return "\n".join(lines)


def cmd_bench_consolidation(args: argparse.Namespace) -> None:
    from hypermnesia.settings import CommonSettings
    from tooling.console import configure_logging, load_settings

    settings = load_settings(CommonSettings)
    configure_logging("WARNING")
    results = asyncio.run(run(Path(args.data_dir), args.conversations, settings.database_url))
    print(json.dumps(results, indent=2) if args.json else format_table(results))


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Adds `hypermnesia bench consolidation` (tooling/cli.py lists this module in COMMAND_MODULES)."""
    b = bench.add_parser(
        "consolidation",
        help="weekly and monthly consolidation on demand over LoCoMo conversations imported with "
        "their 2023 dates: what they read and propose, group cohesion, run times",
    )
    b.add_argument(
        "--data-dir",
        default=str(Path.cwd().parent / "shared" / "data"),
        help="folder holding locomo/ (default: ../shared/data)",
    )
    b.add_argument("--conversations", type=int, default=10, help="the first N conversations (1-10)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_consolidation)
