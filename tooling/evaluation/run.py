"""Runs an evaluation through the real service path: a fresh database, the real embedder,
curation (`ImportRecords`) and retrieval (`Search`) on loopback gRPC, then ranking metrics.

As a store is used: after the import, a calibration pass asks every question once (its answers
are not scored; the searches log their observations, as any search does), one refit of adaptive
fusion's estimates follows (services/curation/fusion_refits.py, as `hypermnesia fusion refit`
runs it; it reads no labels), and then each fusion's measured pass asks every question again.

Conversation sets are scored at two levels: the turn (each evidence turn a relevant memory) and
the session, as the LongMemEval scripts score it: a question's relevant sessions are those holding
its evidence turns, the ranked turns are read as the distinct sessions they belong to in rank order
(the first hit of a session places it), and recall@5/10 and nDCG@10 are taken over those. LoCoMo's
figures are also given per question category and per split (conversations 1-5 dev, 6-10 held out).
Each question's relative dates are read against its corpus's `now` (the conversation's last
session for LoCoMo), passed as the search's reference_time."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
from tqdm import tqdm

from hypermnesia.settings import RetrievalSettings
from hypermnesia.times import optional_timestamp
from hypermnesia.v1 import common_pb2, curation_pb2, curation_pb2_grpc, retrieval_pb2, retrieval_pb2_grpc
from services.curation import fusion_refits
from tooling.evaluation import datasets
from tooling.evaluation.metrics import ndcg_at, recall_at, reciprocal_rank
from tooling.local_stack import LocalStack, scratch_stack

LOADERS: dict[str, Callable[[Path], list[datasets.Corpus]]] = {
    "locomo": datasets.load_locomo,
    "locomo-proactive": datasets.load_locomo_proactive,
    "scifact": datasets.load_scifact,
    "scifact-train": datasets.load_scifact_train,
    "wordnet": datasets.load_wordnet,
}
RECORD_TYPE = {
    "locomo": "conversation",
    "locomo-proactive": "conversation",
    "scifact": "document",
    "scifact-train": "document",
    "wordnet": "note",
}
# The measure each set is judged on (the bar in docs/EVAL.md).
PRIMARY = {
    "locomo": "R@10",
    "locomo-proactive": "R@10",
    "scifact": "nDCG@10",
    "scifact-train": "nDCG@10",
    "wordnet": "R@10",
}


def depth_for(dataset: str) -> int:
    return 100 if dataset.startswith("scifact") else 10


# Conversation sets are searched this deep so that their session-level top 10 has ten distinct
# sessions to rank; their turn-level figures read the first depth_for(dataset) hits.
SESSION_DEPTH = 50


def search_depth(dataset: str) -> int:
    return SESSION_DEPTH if RECORD_TYPE[dataset] == "conversation" else depth_for(dataset)


IMPORT_BATCH = 500
CALLER = common_pb2.Caller(principal="eval", grants=["eval:*"])


@dataclass
class FusionResult:
    fusion: str
    metrics: dict[str, float]
    by_category: dict[int, float] = field(default_factory=dict)
    # Per category: its question count and its figures (turn R@10, session S-R@5/S-R@10/S-nDCG@10).
    categories: dict[int, dict[str, float]] = field(default_factory=dict)
    # LoCoMo's dev and held-out conversations scored apart (LOCOMO_SPLITS).
    splits: dict[str, FusionResult] = field(default_factory=dict)
    questions: int = 0
    search_seconds: float = 0.0
    # Questions answered lexical-only because the query embedding missed its deadline.
    degraded: int = 0

    @property
    def queries_per_second(self) -> float:
        return self.questions / self.search_seconds if self.search_seconds else 0.0


async def _import(
    stub: curation_pb2_grpc.CurationAsyncStub, corpus: datasets.Corpus, scope: str, kind: str, progress: tqdm
) -> dict[str, str]:
    """Import the corpus; returns memory id -> doc ref."""
    by_id: dict[str, str] = {}
    for start in range(0, len(corpus.docs), IMPORT_BATCH):
        batch = corpus.docs[start : start + IMPORT_BATCH]
        records = [
            curation_pb2.RecordInput(
                type=kind,
                scope=scope,
                content=d.content,
                description=d.description,
                source_ref=d.ref,
                thread_id=d.thread_id,
                created_at=optional_timestamp(d.created_at),
                speaker=d.speaker,
            )
            for d in batch
        ]
        reply = await stub.ImportRecords(
            curation_pb2.ImportRecordsRequest(caller=CALLER, records=records), timeout=600
        )
        for doc, memory_id in zip(batch, reply.ids, strict=True):
            by_id[memory_id] = doc.ref
        progress.update(len(batch))
    return by_id


async def _search_all(
    stub: retrieval_pb2_grpc.RetrievalAsyncStub,
    corpus: datasets.Corpus,
    scope: str,
    fusion: str,
    k: int,
    concurrency: int,
) -> list[tuple[list[str], bool]]:
    """The ranked memory ids of every question and whether it was answered lexical-only (gates
    off: the metrics judge the ranking)."""
    limit = asyncio.Semaphore(concurrency)

    async def one(question: datasets.Question) -> tuple[list[str], bool]:
        async with limit:
            reply = await stub.Search(
                retrieval_pb2.SearchRequest(
                    caller=CALLER,
                    query=question.text,
                    scopes=[scope],
                    k=k,
                    fusion=fusion,
                    min_similarity=0.0,
                    relative_cutoff=0.0,
                    reference_time=optional_timestamp(question.now or corpus.now),
                ),
                timeout=60,
            )
            return [hit.memory.id for hit in reply.hits], bool(reply.degraded)

    return await asyncio.gather(*(one(q) for q in corpus.questions))


def _sessions(order: list[str], session_of: dict[str, str]) -> list[str]:
    """The distinct sessions of ranked turns, in the order their first turn comes."""
    seen: dict[str, None] = {}
    for ref in order:
        session = session_of.get(ref)
        if session:
            seen.setdefault(session, None)
    return list(seen)


def score_ranked(
    dataset: str,
    corpora: list[datasets.Corpus],
    ranked: list[list[tuple[list[str], bool]]],
    refs: list[dict[str, str]],
    fusion: str,
    seconds: float,
) -> FusionResult:
    depth = depth_for(dataset)
    rows: dict[str, list[float]] = defaultdict(list)
    per_category: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    degraded = 0
    for corpus, runs, mapping in zip(corpora, ranked, refs, strict=True):
        session_of = {d.ref: d.thread_id for d in corpus.docs if d.thread_id}
        for question, (ids, was_degraded) in zip(corpus.questions, runs, strict=True):
            degraded += int(was_degraded)
            ranked_refs = [mapping.get(i, "") for i in ids]
            order = ranked_refs[:depth]  # the turn level reads what it always read
            rel = question.relevant
            for k in (1, 5, 10):
                rows[f"R@{k}"].append(recall_at(order, rel, k))
            rows["MRR"].append(reciprocal_rank(order, rel))
            rows["nDCG@10"].append(ndcg_at(order, rel, 10))
            if dataset.startswith("scifact"):
                rows["R@100"].append(recall_at(order, rel, 100))
            figures = {"R@10": recall_at(order, rel, 10)}
            if session_of:
                sessions = _sessions(ranked_refs, session_of)
                wanted = {session_of[ref]: 1 for ref in rel if ref in session_of}
                figures |= {
                    "S-R@5": recall_at(sessions, wanted, 5),
                    "S-R@10": recall_at(sessions, wanted, 10),
                    "S-nDCG@10": ndcg_at(sessions, wanted, 10),
                }
                for name in ("S-R@5", "S-R@10", "S-nDCG@10"):
                    rows[name].append(figures[name])
            if question.category:
                for name, value in figures.items():
                    per_category[question.category][name].append(value)
    return FusionResult(
        fusion=fusion,
        metrics={name: sum(v) / len(v) for name, v in rows.items()},
        by_category={c: sum(v["R@10"]) / len(v["R@10"]) for c, v in sorted(per_category.items())},
        categories={
            c: {"questions": float(len(v["R@10"]))} | {name: sum(x) / len(x) for name, x in v.items()}
            for c, v in sorted(per_category.items())
        },
        questions=len(rows["MRR"]),
        search_seconds=seconds,
        degraded=degraded,
    )


def score_with_splits(
    dataset: str,
    corpora: list[datasets.Corpus],
    ranked: list[list[tuple[list[str], bool]]],
    refs: list[dict[str, str]],
    fusion: str,
    seconds: float,
) -> FusionResult:
    """The whole set's figures, and for LoCoMo each split's (dev: conversations 1-5; held out: 6-10)."""
    result = score_ranked(dataset, corpora, ranked, refs, fusion, seconds)
    if dataset == "locomo":
        for split, numbers in datasets.LOCOMO_SPLITS.items():
            chosen = [n - 1 for n in numbers if n <= len(corpora)]
            if chosen:
                result.splits[split] = score_ranked(
                    dataset,
                    [corpora[n] for n in chosen],
                    [ranked[n] for n in chosen],
                    [refs[n] for n in chosen],
                    fusion,
                    0.0,
                )
    return result


@dataclass
class Loaded:
    """A dataset imported into a fresh stack: its corpora, memory id -> doc ref per corpus, the
    Retrieval stub, the in-process searcher (the tuner re-scores its candidate pools) and the
    stack (the refit reads its writer's pool; the abstention eval starts services of other
    settings over its database)."""

    dataset: str
    corpora: list[datasets.Corpus]
    refs: list[dict[str, str]]
    retrieval: retrieval_pb2_grpc.RetrievalAsyncStub
    searcher: Any
    stack: LocalStack


@asynccontextmanager
async def loaded(
    dataset: str,
    data_dir: Path,
    database_url: str | None,
    work_dir: Path | None = None,
    max_corpora: int | None = None,
) -> AsyncIterator[Loaded]:
    corpora = LOADERS[dataset](data_dir)[:max_corpora]
    async with (
        # search_log on: the calibration pass's observations are what the refit reads.
        scratch_stack(
            database_url,
            prefix="hm_eval",
            work_dir=work_dir,
            search_log_enabled=True,
            search_bump_access=False,
        ) as stack,
        grpc.aio.insecure_channel(stack.curation_address) as c_chan,
        grpc.aio.insecure_channel(stack.retrieval_address) as r_chan,
    ):
        curation = curation_pb2_grpc.CurationStub(c_chan)
        total = sum(len(c.docs) for c in corpora)
        started = time.perf_counter()
        with tqdm(total=total, desc=f"import {dataset}", unit="rec", file=sys.stderr) as bar:
            refs = [await _import(curation, c, f"eval:{c.name}", RECORD_TYPE[dataset], bar) for c in corpora]
        import_s = time.perf_counter() - started
        print(
            f"imported {total:,} records in {import_s:.1f} s ({total / import_s:.0f} records/s)",
            file=sys.stderr,
        )
        yield Loaded(dataset, corpora, refs, retrieval_pb2_grpc.RetrievalStub(r_chan), stack.searcher, stack)


async def calibrate(run: Loaded, k: int, concurrency: int) -> fusion_refits.Refit:
    """Every question asked once, unscored (each search logs its observation), then one refit."""
    started = time.perf_counter()
    for c in run.corpora:
        await _search_all(run.retrieval, c, f"eval:{c.name}", "adaptive", k, concurrency)
    await run.searcher.drain()  # search_log rows are written off the hot path
    done = await fusion_refits.refit(run.stack.writer.pool, "eval")
    print(
        f"calibrated in {time.perf_counter() - started:.1f} s: refit {done.id} fit {len(done.keys)} scopes"
        f" ({', '.join(f'{k.estimate.value:+.2f} from {k.estimate.observations}' for k in done.keys[:10])})",
        file=sys.stderr,
    )
    return done


async def evaluate(
    dataset: str,
    fusions: list[str],
    data_dir: Path,
    database_url: str | None,
    work_dir: Path | None = None,
    concurrency: int = 8,
    max_corpora: int | None = None,
    time_boosts: list[float] | None = None,
) -> list[FusionResult]:
    """Each fusion's figures; with `time_boosts`, each fusion under each time boost weight (the
    sweep that chooses HM_TIME_BOOST, set on the in-process searcher between passes) instead of
    under the service's setting."""
    k = search_depth(dataset)
    async with loaded(dataset, data_dir, database_url, work_dir, max_corpora) as run:
        await calibrate(run, k, concurrency)
        results = []
        configured = run.searcher.weights
        for fusion in fusions:
            for boost in time_boosts if time_boosts is not None else [None]:
                label = fusion
                if boost is not None:
                    run.searcher.weights = {m: replace(w, time=boost) for m, w in configured.items()}
                    label = f"{fusion} time {boost:g}"
                started = time.perf_counter()
                ranked = [
                    await _search_all(run.retrieval, c, f"eval:{c.name}", fusion, k, concurrency)
                    for c in run.corpora
                ]
                seconds = time.perf_counter() - started
                results.append(score_with_splits(dataset, run.corpora, ranked, run.refs, label, seconds))
        run.searcher.weights = configured
        return results


SESSION_NAMES = ["S-R@5", "S-R@10", "S-nDCG@10"]


def _category(c: int) -> str:
    return datasets.CATEGORIES.get(c, f"cat {c}")


def format_table(dataset: str, results: list[FusionResult]) -> str:
    names = ["R@1", "R@5", "R@10", "MRR", "nDCG@10"] + (["R@100"] if dataset.startswith("scifact") else [])
    names += [n for n in SESSION_NAMES if any(n in r.metrics for r in results)]
    categories = sorted({c for r in results for c in r.by_category})
    label = _category if dataset == "locomo" else lambda c: f"cat {c}"
    header = ["fusion", *names, *[f"R@10 {label(c)}" for c in categories], "queries/s", "lexical-only"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in results:
        cells = [
            r.fusion,
            *[f"{r.metrics[m]:.3f}" for m in names],
            *[f"{r.by_category.get(c, 0.0):.3f}" for c in categories],
            f"{r.queries_per_second:.0f}",
            str(r.degraded),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_categories(dataset: str, results: list[FusionResult]) -> str:
    """LoCoMo per split and category: turn R@10 and the session level, one row per fusion."""
    if dataset != "locomo":
        return ""
    out = []
    for split in ("dev", "held-out"):
        rows = [(r.fusion, r.splits[split]) for r in results if split in r.splits]
        if not rows:
            continue
        conversations = datasets.LOCOMO_SPLITS[split]
        first = rows[0][1]
        out.append(
            f"\n{split} (conversations {conversations.start}-{conversations.stop - 1}), "
            f"{first.questions} questions: R@10 / S-R@5 / S-R@10 / S-nDCG@10"
        )
        categories = sorted(first.categories)
        header = [
            "fusion",
            "all",
            *[f"{_category(c)} ({int(first.categories[c]['questions'])})" for c in categories],
        ]
        out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for fusion, r in rows:
            cells = [fusion, " / ".join(f"{r.metrics[n]:.3f}" for n in ["R@10", *SESSION_NAMES])]
            cells += [
                " / ".join(f"{r.categories[c].get(n, 0.0):.3f}" for n in ["R@10", *SESSION_NAMES])
                for c in categories
            ]
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def format_bar(dataset: str, results: list[FusionResult], default: str | None = None) -> str:
    """The bar on this set's measure: the default (HM_FUSION's, unless named) against the better
    single leg (it must be at least that) and the best other fusion (it must beat that on the
    mean over sets)."""
    default = default or RetrievalSettings.model_fields["fusion"].default
    by = {r.fusion: r.metrics[PRIMARY[dataset]] for r in results}
    if default not in by or not {"dense", "bm25"} <= by.keys():
        return ""
    leg = max(by["dense"], by["bm25"])
    others = {f: v for f, v in by.items() if f not in ("dense", "bm25", default)}
    line = (
        f"bar ({PRIMARY[dataset]}): {default} {by[default]:.3f} vs best single leg {leg:.3f}"
        f" -> {'met' if by[default] >= leg else 'NOT met'}"
    )
    if others:
        best = max(others, key=others.__getitem__)
        line += f"; best other fusion {best} {others[best]:.3f} ({by[default] - others[best]:+.3f})"
    return line
