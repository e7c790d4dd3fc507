"""The dedupe gate judged on its labelled set (dedupe_pairs.py) through the real save path: a fresh
database, the real embedder, curation on loopback gRPC. Each pair gets its own empty scope; the
older statement is saved (`Curation.Save`, what memory_save and POST /memories call), then the
newer one: merged when the second save answers `created: false`. A pair kept apart then gets the
daily consolidation of its scope (`Intelligence.Consolidate`), which may propose the supersede.

Also measured, for comparison: the gate before issue 27 (the two cosine gates alone, on the same
stored embeddings; the pairs have no description, so both gates read one cosine)."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
import numpy as np
from tqdm import tqdm

from hypermnesia.settings import CurationSettings
from hypermnesia.v1 import (
    common_pb2,
    curation_pb2,
    curation_pb2_grpc,
    intelligence_pb2,
    intelligence_pb2_grpc,
)
from tooling.evaluation import dedupe_pairs
from tooling.evaluation.dedupe_pairs import Pair
from tooling.local_stack import CONSOLIDATION_ON_DEMAND, scratch_stack

CALLER = common_pb2.Caller(principal="eval", grants=["eval:*"])
TIMEOUT_S = 120


@dataclass(frozen=True)
class Outcome:
    pair: Pair
    merged: bool
    cosine: float  # of the two statements' stored embeddings
    similar: bool  # the second save named the first under `similar`
    proposed: bool  # the daily consolidation proposed that the newer supersede the older


async def _embedding(pool: asyncpg.Pool, memory_id: str) -> np.ndarray:
    """The memory's stored vector, unit length."""
    value = await pool.fetchval("SELECT embedding::real[] FROM memories WHERE id = $1::uuid", memory_id)
    array = np.asarray(value, dtype=np.float32)
    return array / (np.linalg.norm(array) + 1e-12)


async def _judge(
    n: int,
    pair: Pair,
    curation: curation_pb2_grpc.CurationAsyncStub,
    intelligence: intelligence_pb2_grpc.IntelligenceAsyncStub,
    pool: asyncpg.Pool,
) -> Outcome:
    scope = f"eval:dedupe-{n}"
    first = await curation.Save(
        curation_pb2.SaveRequest(caller=CALLER, scope=scope, content=pair.older), timeout=TIMEOUT_S
    )
    older = await _embedding(pool, first.memory.id)
    second = await curation.Save(
        curation_pb2.SaveRequest(caller=CALLER, scope=scope, content=pair.newer), timeout=TIMEOUT_S
    )
    newer = await _embedding(pool, second.memory.id)
    proposed = False
    if second.created:
        reply = await intelligence.Consolidate(
            intelligence_pb2.ConsolidateRequest(caller=CALLER, job="daily", scope=scope), timeout=TIMEOUT_S
        )
        proposed = any(r.made_by_kind.get("contradiction", 0) for r in reply.reports)
    return Outcome(
        pair=pair,
        merged=not second.created,
        cosine=float(older @ newer),
        similar=any(s.id == first.memory.id for s in second.similar),
        proposed=proposed,
    )


async def evaluate(
    data_dir: Path,
    database_url: str | None,
    concurrency: int = 4,
    limit: int | None = None,
    work_dir: Path | None = None,
) -> list[Outcome]:
    """`limit`: at most this many pairs per rule and split (dedupe_pairs.build)."""
    pairs = dedupe_pairs.build(data_dir, limit)
    async with (
        scratch_stack(
            database_url,
            prefix="hm_eval",
            work_dir=work_dir,
            search_log_enabled=False,
            **CONSOLIDATION_ON_DEMAND,  # per pair, not on the server's schedule
        ) as stack,
        grpc.aio.insecure_channel(stack.curation_address) as channel,
    ):
        curation = curation_pb2_grpc.CurationStub(channel)
        intelligence = intelligence_pb2_grpc.IntelligenceStub(channel)
        pool = await asyncpg.create_pool(stack.database_url, min_size=1, max_size=concurrency)
        gate = asyncio.Semaphore(concurrency)
        try:
            with tqdm(total=len(pairs), desc="dedupe pairs", unit="pair", file=sys.stderr) as bar:

                async def one(n: int, pair: Pair) -> Outcome:
                    async with gate:
                        outcome = await _judge(n, pair, curation, intelligence, pool)
                    bar.update(1)
                    return outcome

                return list(await asyncio.gather(*(one(n, p) for n, p in enumerate(pairs))))
        finally:
            await pool.close()


# ---- figures -----------------------------------------------------------------------------------


def cosine_only(outcome: Outcome, settings: CurationSettings) -> bool:
    """The gate before issue 27: the two cosine gates alone (one cosine here: no descriptions)."""
    same_text = outcome.pair.older.strip() == outcome.pair.newer.strip()
    return same_text or outcome.cosine >= max(settings.dedupe_threshold, settings.dedupe_content_threshold)


@dataclass(frozen=True)
class Scores:
    pairs: int
    merge_precision: float
    merge_recall: float
    apart_precision: float
    apart_recall: float


def scores(labels: Iterable[tuple[str, bool]]) -> Scores:
    """(label, merged) pairs -> precision and recall of `merge` (label same) and of `keep apart`."""
    count = Counter((label, merged) for label, merged in labels)
    same_merged, diff_merged = count["same", True], count["different", True]
    same_apart, diff_apart = count["same", False], count["different", False]

    def ratio(a: int, b: int) -> float:
        return a / b if b else float("nan")

    return Scores(
        pairs=sum(count.values()),
        merge_precision=ratio(same_merged, same_merged + diff_merged),
        merge_recall=ratio(same_merged, same_merged + same_apart),
        apart_precision=ratio(diff_apart, diff_apart + same_apart),
        apart_recall=ratio(diff_apart, diff_apart + diff_merged),
    )


def format_report(outcomes: list[Outcome], settings: CurationSettings) -> str:
    lines = []
    for split in dedupe_pairs.SPLITS:
        mine = [o for o in outcomes if o.pair.split == split]
        lines += [f"### {split}", "", _rule_table(mine, settings), "", _score_table(mine, settings), ""]
    return "\n".join(lines).rstrip()


def _rule_table(outcomes: list[Outcome], settings: CurationSettings) -> str:
    header = [
        "rule",
        "label",
        "pairs",
        "cosine gates pass (the gate before merged these)",
        "merged",
        "kept apart, listed as similar",
        "supersede proposed",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    rules = [*dedupe_pairs.RESTATEMENTS, *dedupe_pairs.CHANGES]
    for rule in rules:
        mine = [o for o in outcomes if o.pair.rule == rule]
        if not mine:
            continue
        gate = sum(cosine_only(o, settings) for o in mine)
        cells = [
            rule,
            mine[0].pair.label,
            str(len(mine)),
            str(gate),
            str(sum(o.merged for o in mine)),
            str(sum(o.similar for o in mine if not o.merged)),
            str(sum(o.proposed for o in mine)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _score_table(outcomes: list[Outcome], settings: CurationSettings) -> str:
    near = [o for o in outcomes if cosine_only(o, settings)]
    rows = [
        ("this gate, all pairs", scores((o.pair.label, o.merged) for o in outcomes)),
        ("cosine alone, all pairs", scores((o.pair.label, cosine_only(o, settings)) for o in outcomes)),
        ("this gate, pairs the cosine gates pass", scores((o.pair.label, o.merged) for o in near)),
    ]
    header = ["gate", "pairs", "merge precision", "merge recall", "keep-apart precision", "keep-apart recall"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, s in rows:
        cells = [
            name,
            str(s.pairs),
            f"{s.merge_precision:.3f}",
            f"{s.merge_recall:.3f}",
            f"{s.apart_precision:.3f}",
            f"{s.apart_recall:.3f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
