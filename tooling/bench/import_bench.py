"""`hypermnesia bench import`: bulk import through POST /records/import against the embedder's own
throughput on the same texts, side by side in one run, with the import's time per stage.

Records are conversation turns: LoCoMo's (public data, ../shared/data/locomo; one scope per
conversation, one thread per session, 23 words a turn on average) or synthetic turns of 20-100
words (LongMemEval-S's user turns average 43). The embedder is a real `hypermnesia serve embedder`
process; curation and retrieval run in this process (so their per-stage counters,
hm_import_stage_seconds, can be read), the gateway in a process of its own.

For each batch, the bench first embeds its texts through the embedder service exactly as the
import will (services/curation/embedding.BatchEmbedder: the same calls, batch size and calls in
flight), then imports the batch with one POST; the two are timed alternately, so both see the
same machine at the same moment. The embedder keeps no cache of document texts, so the import
embeds them again in full. Afterwards the raw log's chain is walked as `hypermnesia verify` does.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from hypermnesia.embedder_client import EmbedderClient
from services.curation.embedding import BatchEmbedder, embedding_text
from services.curation.metrics import IMPORT_STAGE_SECONDS
from tooling.bench.search import verify_store
from tooling.local_stack import embedder_process, gateway_process, local_stack, scratch_database

LOCOMO = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo" / "locomo10.json"
MAX_RECORDS = 200_000
MAX_BATCH = 5_000

_WORDS = (
    "yesterday I finally talked to my sister about the trip we planned for the summer and she said "
    "the flights to Lisbon are cheaper in June so we might book the apartment near the river after "
    "I get the bonus from work my manager approved the new schedule which means I can pick up the "
    "kids on Thursdays and still make it to the pottery class that I started last month with Anna "
    "the doctor told me to cut down on coffee and walk more so I bought new running shoes"
).split()


@dataclass
class Result:
    source: str
    records: int
    batch: int
    words_per_record: float
    embed_batch: int  # texts per Embed call, as the import sends them
    embedder_s: float
    import_s: float
    embedder_texts_per_s: float
    import_records_per_s: float
    ratio: float
    stages_s: dict[str, float] = field(default_factory=dict)
    verified_records: int = 0
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)


def locomo_records(limit: int) -> list[dict[str, Any]]:
    """LoCoMo's turns in conversation order: a scope per conversation, a thread per session, the
    session's date as each turn's time (a minute apart, in order)."""
    data = json.loads(LOCOMO.read_text())
    out: list[dict[str, Any]] = []
    for k, sample in enumerate(data):
        conversation = sample["conversation"]
        sessions = sorted(
            (key for key in conversation if key.startswith("session_") and key.count("_") == 1),
            key=lambda key: int(key.split("_")[1]),
        )
        for session in sessions:
            when = datetime.strptime(conversation[f"{session}_date_time"], "%I:%M %p on %d %B, %Y")
            for n, turn in enumerate(conversation[session]):
                out.append(
                    _record(
                        f"bench:locomo-{k}",
                        f"{turn['speaker']}: {turn['text']}",
                        f"locomo-{k}-{turn['dia_id']}",
                        f"locomo-{k}-{session}",
                        when + timedelta(minutes=n),
                    )
                )
                if len(out) == limit:
                    return out
    raise SystemExit(f"LoCoMo has {len(out):,} turns; ask for at most that many (--records)")


def synthetic_records(count: int, seed: int = 7) -> list[dict[str, Any]]:
    """Turns of 20-100 words (uniform), ten scopes of 40-turn threads, each text distinct."""
    rng = random.Random(seed)
    start = datetime(2024, 3, 1, 9, 0)
    return [
        _record(
            f"bench:user-{i % 10}",
            f"{i}: " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(20, 100))),
            f"turn-{i}",
            f"session-{i // 400}-{i % 10}",
            start + timedelta(minutes=i),
        )
        for i in range(count)
    ]


def _record(scope: str, content: str, ref: str, thread: str, at: datetime) -> dict[str, Any]:
    return {
        "type": "conversation",
        "scope": scope,
        "content": content,
        "source_ref": ref,
        "thread_id": thread,
        "created_at": at.isoformat() + "Z",
    }


def _stages() -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in IMPORT_STAGE_SECONDS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                out[sample.labels["stage"]] = sample.value
    return out


async def run(source: str, records: int, batch: int, database_url: str | None) -> Result:
    rows = locomo_records(records) if source == "locomo" else synthetic_records(records)
    texts = [embedding_text("", r["content"]) for r in rows]
    with tempfile.TemporaryDirectory(prefix="hm-bench-import-") as tmp:
        work = Path(tmp)
        async with (
            scratch_database(database_url, work, "hm_bench") as db_url,
            embedder_process(work) as embedder_address,
            # Task extraction off: it adds task memories (more embedding) the embedder-alone
            # figure would not count; the timed work is then one memory per record.
            local_stack(db_url, embedder_address, work, task_extraction=False) as stack,
            gateway_process(
                stack.retrieval_address, stack.curation_address, work / "gateway.log", require_auth=False
            ) as base_url,
        ):
            client = EmbedderClient(embedder_address)
            await client.wait_for_info(60)
            embeddings = BatchEmbedder(client, 60.0)
            await embeddings.many([f"warm up {i} " + texts[i] for i in range(min(64, len(texts)))])
            embedder_s = import_s = 0.0
            before = _stages()
            async with httpx.AsyncClient(base_url=base_url, timeout=600) as http:
                await _post(
                    http,
                    [
                        {**r, "source_ref": f"warm-up-{i}", "scope": "bench:warm-up"}
                        for i, r in enumerate(rows[:32])
                    ],
                )
                before = _stages()
                for start in range(0, len(rows), batch):
                    chunk = rows[start : start + batch]
                    t0 = time.perf_counter()
                    await embeddings.many(texts[start : start + batch])
                    t1 = time.perf_counter()
                    await _post(http, chunk)
                    t2 = time.perf_counter()
                    embedder_s += t1 - t0
                    import_s += t2 - t1
                    print(
                        f"  {start + len(chunk):>7,} records: embedder {len(chunk) / (t1 - t0):6.1f} texts/s,"
                        f" import {len(chunk) / (t2 - t1):6.1f} records/s",
                        file=sys.stderr,
                    )
            after = _stages()
            await client.close()
            stages = {name: after[name] - before.get(name, 0.0) for name in after}
            stages["gateway and transport"] = import_s - sum(stages.values())
            verified = await verify_store(db_url)
    words = sum(len(r["content"].split()) for r in rows) / len(rows)
    from services.curation.embedding import BATCH

    return Result(
        source=source,
        records=len(rows),
        batch=batch,
        words_per_record=words,
        embed_batch=BATCH,
        embedder_s=embedder_s,
        import_s=import_s,
        embedder_texts_per_s=len(rows) / embedder_s,
        import_records_per_s=len(rows) / import_s,
        ratio=embedder_s / import_s,
        stages_s=stages,
        verified_records=verified,
        load_average=os.getloadavg(),
    )


async def _post(http: httpx.AsyncClient, chunk: list[dict[str, Any]]) -> None:
    response = await http.post("/records/import", json={"records": chunk})
    if response.status_code != 200:
        raise RuntimeError(f"POST /records/import answered {response.status_code}: {response.text[:500]}")
    body = response.json()
    if body["imported"] != len(chunk):
        raise RuntimeError(f"imported {body['imported']} of {len(chunk)} records (skipped {body['skipped']})")


def report(result: Result) -> str:
    lines = [
        f"bench import: {result.records:,} {result.source} conversation turns"
        f" ({result.words_per_record:.0f} words on average), {result.batch} a call,"
        f" embedder calls of {result.embed_batch} texts",
        f"  embedder alone:         {result.embedder_texts_per_s:7.1f} texts/s   ({result.embedder_s:6.1f} s)",
        f"  POST /records/import:   {result.import_records_per_s:7.1f} records/s ({result.import_s:6.1f} s)",
        f"  import / embedder:      {result.ratio:7.0%}",
        "  import time by stage (ms per record, share):",
    ]
    per_record = Counter({name: 1000 * s / result.records for name, s in result.stages_s.items()})
    for name, ms in per_record.most_common():
        lines.append(f"    {name:<28} {ms:7.2f}  {ms / (1000 * result.import_s / result.records):6.1%}")
    lines.append(f"  raw log: verify ok, {result.verified_records:,} records, the chain holds")
    lines.append("  load average: " + " ".join(f"{v:.2f}" for v in result.load_average))
    return "\n".join(lines)


def main(source: str, records: int, batch: int, database_url: str | None, as_json: bool) -> None:
    result = asyncio.run(run(source, records, batch, database_url))
    print(json.dumps(asdict(result), indent=2) if as_json else report(result))
