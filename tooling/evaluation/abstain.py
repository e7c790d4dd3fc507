"""The Dialectic's abstention, measured through the real service path: a dev set imported once,
then for each setting a curation service (and its retrieval) over that database, asked with
`Intelligence.Ask` as every client asks it.

Per store, two question sets:
- **off-topic**: questions about things never stored there, from the other public set. A LoCoMo
  conversation is asked SciFact's 300 test claims; SciFact is asked LoCoMo's 1,536 questions
  (categories 1-4). A claim on one of them is an answer made up from unrelated memories.
- **answerable**: LoCoMo's single-hop questions (category 4) of that conversation; SciFact's own
  test claims. One is answered when a claim cites a memory holding one of its evidence turns (a
  relevant abstract).

The floor is chosen on LoCoMo's first CALIBRATION_STORES conversations; the other conversations
and SciFact are held out.

As the fusion eval does (tooling/evaluation/run.py), the store is first calibrated as a store in
use is: its own questions searched once, then one refit of adaptive fusion's estimates. Ranking is
then a function of the store and the query, so the questions may be asked 8 at a time: every
setting sees the same rankings whatever order they land in, and differs only in the Dialectic.

    hypermnesia eval --dataset locomo --ask [--floors 0.2,0.25,0.3]
    hypermnesia eval --dataset scifact --ask
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from prometheus_client import REGISTRY
from tqdm import tqdm

from hypermnesia.settings import CurationSettings
from hypermnesia.v1 import intelligence_pb2, intelligence_pb2_grpc
from tooling.evaluation import datasets
from tooling.evaluation.run import CALLER, Loaded, calibrate, depth_for, loaded
from tooling.local_stack import local_stack

DATASETS = ("locomo", "scifact")
CALIBRATION_STORES = 5
SINGLE_HOP = 4
OFF = "off"
DEFAULT_FLOOR: float = CurationSettings.model_fields["dialectic_min_similarity"].default


@dataclass
class Store:
    scope: str
    group: str  # "locomo conv 1-5 (calibration)", ...
    refs: dict[str, str]  # memory id -> doc ref
    answerable: list[datasets.Question]
    offtopic: list[str]


@dataclass
class Tally:
    offtopic: int = 0
    offtopic_claimed: int = 0
    answerable: int = 0
    answerable_cited: int = 0


@dataclass
class SettingResult:
    setting: str  # "off" or the floor
    groups: dict[str, Tally] = field(default_factory=dict)
    lexical_only: int = 0  # searches whose query embedding missed its deadline


def stores(run: Loaded, data_dir: Path) -> list[Store]:
    """Each imported store with its answerable and off-topic questions (module docstring)."""
    if run.dataset == "locomo":
        offtopic = [q.text for q in datasets.load_scifact(data_dir)[0].questions]
        out = []
        for n, (corpus, refs) in enumerate(zip(run.corpora, run.refs, strict=True)):
            group = (
                "locomo conv 1-5 (calibration)" if n < CALIBRATION_STORES else "locomo conv 6-10 (held out)"
            )
            answerable = [q for q in corpus.questions if q.category == SINGLE_HOP]
            out.append(Store(f"eval:{corpus.name}", group, refs, answerable, offtopic))
        return out
    (corpus,) = run.corpora
    (refs,) = run.refs
    offtopic = [q.text for c in datasets.load_locomo(data_dir) for q in c.questions]
    return [Store(f"eval:{corpus.name}", "scifact (held out)", refs, corpus.questions, offtopic)]


def _degraded() -> int:
    return int(REGISTRY.get_sample_value("hm_search_degraded_total") or 0)


async def _ask_all(
    intel: intelligence_pb2_grpc.IntelligenceAsyncStub,
    all_stores: Sequence[Store],
    concurrency: int,
    desc: str,
) -> dict[str, Tally]:
    limit = asyncio.Semaphore(concurrency)
    groups: dict[str, Tally] = {}
    total = sum(len(s.answerable) + len(s.offtopic) for s in all_stores)
    with tqdm(total=total, desc=desc, unit="q", file=sys.stderr) as bar:

        async def one(store: Store, text: str, relevant: dict[str, int] | None) -> None:
            async with limit:
                reply = await intel.Ask(
                    intelligence_pb2.AskRequest(caller=CALLER, question=text, scopes=[store.scope]),
                    timeout=120,
                )
            bar.update(1)
            tally = groups.setdefault(store.group, Tally())
            if relevant is None:
                tally.offtopic += 1
                tally.offtopic_claimed += bool(reply.claims)
                return
            cited = {store.refs.get(c, "") for claim in reply.claims for c in claim.citations}
            tally.answerable += 1
            tally.answerable_cited += bool(cited & relevant.keys())

        jobs = [one(s, q.text, q.relevant) for s in all_stores for q in s.answerable]
        jobs += [one(s, text, None) for s in all_stores for text in s.offtopic]
        await asyncio.gather(*jobs)
    return groups


async def evaluate_abstention(
    dataset: str,
    settings: Sequence[str],
    data_dir: Path,
    database_url: str | None,
    concurrency: int = 8,
    max_corpora: int | None = None,
) -> list[SettingResult]:
    """For each setting ("off", or a floor such as "0.3"), the off-topic questions answered with a
    claim and the answerable ones citing their evidence, per group of stores."""
    results = []
    async with loaded(dataset, data_dir, database_url, max_corpora=max_corpora) as run:
        await calibrate(run, depth_for(dataset), concurrency)
        all_stores = stores(run, data_dir)
        for setting in settings:
            overrides: dict[str, Any] = (
                {"dialectic_abstain": False}
                if setting == OFF
                else {"dialectic_abstain": True, "dialectic_min_similarity": float(setting)}
            )
            with tempfile.TemporaryDirectory(prefix="hm-eval-ask-") as work:
                async with (
                    local_stack(
                        run.stack.database_url,
                        run.stack.embedder_address,
                        Path(work),
                        search_log_enabled=False,
                        search_bump_access=False,
                        **overrides,
                    ) as stack,
                    grpc.aio.insecure_channel(stack.curation_address) as channel,
                ):
                    before = _degraded()
                    groups = await _ask_all(
                        intelligence_pb2_grpc.IntelligenceStub(channel),
                        all_stores,
                        concurrency,
                        f"ask {dataset} ({'abstention off' if setting == OFF else 'floor ' + setting})",
                    )
                    results.append(SettingResult(setting, groups, _degraded() - before))
    return results


def _rate(part: int, whole: int) -> str:
    return f"{part:,} / {whole:,} ({part / whole:.1%})" if whole else "-"


def format_abstention(results: Sequence[SettingResult]) -> str:
    header = [
        "setting",
        "stores",
        "off-topic questions with a claim",
        "answerable questions citing their evidence",
        "lexical-only",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in results:
        name = "abstention off" if r.setting == OFF else f"floor {r.setting}"
        for group, t in sorted(r.groups.items()):
            cells = [
                name,
                group,
                _rate(t.offtopic_claimed, t.offtopic),
                _rate(t.answerable_cited, t.answerable),
                str(r.lexical_only),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
