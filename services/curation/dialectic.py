"""The Dialectic (issue 18, item 8): answers a question with claims that cite their evidence.

Evidence comes from the retrieval service's Search (the caller's own scopes and grants), widened
by a fixed recall depth: explicit (stored rows), derived (plus derived conclusions), premises
(plus their direct evidence), ancestry (transitive, MAX_HOPS/MAX_ROWS); `auto` picks one of those
from the evidence and says why. Extractive mode quotes the best sentence of each evidence row;
LLM mode phrases claims from the fenced evidence. Either way, before returning, the validator
drops every claim that cites nothing, or cites an id that is absent, outside the caller's scopes,
archived, stale, superseded, expired, deleted, or not among the evidence shown — the model can
phrase, it cannot keep a claim it cannot cite.

A search always finds something, so the Dialectic first asks whether what it found answers the
question at all: only hits at least `min_similarity` similar to the question (cosine; lexical hits,
which hold every word of it, pass) are evidence, and one of them must share a content word with the
question. When none does, the answer is no claim and `abstained` says why; the LLM is not asked.
Given evidence, the LLM is told to answer "not in memory" when it does not answer the question.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
import grpc
from pydantic import BaseModel, Field

from hypermnesia import validation
from hypermnesia.errors import InvalidArgument, Unavailable
from hypermnesia.grpc_client import open_channel
from hypermnesia.recall_depth import DEPTHS, MAX_HOPS, MAX_ROWS, choose_depth
from hypermnesia.scopes import permits, require
from hypermnesia.v1 import common_pb2, intelligence_pb2, retrieval_pb2, retrieval_pb2_grpc
from hypermnesia.words import content_words
from services.curation import graph_repo, metrics
from services.curation.graph import node_message, walk
from services.curation.llm import MODE_EXTRACTIVE, MODE_LLM, LlmClient

DEFAULT_K = 8
MAX_K = 50
MAX_EXTRACTIVE_CLAIMS = 6
SEARCH_TIMEOUT_S = 15.0

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"\w+")
NOT_IN_MEMORY = "not in memory"
ASK_TASK = (
    "Answer the question below using only these memories. Make short claims; each claim cites, in "
    "`citations`, the ids of the memories it rests on. Claims you cannot cite are not allowed. If "
    f'the memories do not answer the question, answer "{NOT_IN_MEMORY}": no claims, and '
    "`not_in_memory` true."
)


class ClaimModel(BaseModel):
    text: str = Field(min_length=1, max_length=2000)
    citations: list[str] = Field(default_factory=list, max_length=20)


class ClaimsModel(BaseModel):
    claims: list[ClaimModel] = Field(max_length=20)
    not_in_memory: bool = Field(False, description="True when the memories do not answer the question.")


@dataclass(frozen=True)
class Claim:
    text: str
    citations: tuple[str, ...]


def best_sentence(question: str, content: str) -> str:
    """The sentence of `content` sharing most content words with the question (the first on a tie)."""
    wanted = content_words(question)
    sentences = [s.strip() for s in _SENTENCE.split(content) if s.strip()] or [content.strip()]
    return max(sentences, key=lambda s: (len(wanted & content_words(s)), -sentences.index(s)))[:1000]


def answering(
    question: str, hits: Sequence[retrieval_pb2.SearchHit], min_similarity: float | None
) -> tuple[list[retrieval_pb2.SearchHit], str]:
    """The hits that may answer the question, in rank order, or none and why (the abstention).
    A hit answers when it is at least `min_similarity` similar to the question or holds every
    word of it (lexical); and one of those must share a content word with the question, or they
    are near it only in embedding space. None for `min_similarity`: every hit, no abstention."""
    if min_similarity is None:
        return list(hits), ""
    if not hits:
        return [], "nothing in memory matched the question"
    close = [h for h in hits if h.lexical_match or h.similarity >= min_similarity]
    if not close:
        best = max(hits, key=lambda h: h.similarity)
        return [], (
            f"no memory is close enough to the question: the closest ({best.memory.id}) has "
            f"similarity {best.similarity:.2f}, below the relevance floor {min_similarity:.2f}"
        )
    wanted = content_words(question)
    if not any(wanted & content_words(h.memory.content) for h in close):
        words = [w for w in _WORD.findall(question) if content_words(w)]
        return [], (
            f"no memory close to the question shares a word of its content ({', '.join(words[:8])})"
            if words
            else "the question has no content word to look for"
        )
    return close, ""


def _merged(claims: Sequence[Claim]) -> list[Claim]:
    """One claim per sentence: a conclusion and the premise it was distilled from often say the
    same thing, and the answer should say it once, citing both."""
    by_text: dict[str, list[str]] = {}
    for claim in claims:
        cited = by_text.setdefault(claim.text, [])
        cited.extend(c for c in claim.citations if c not in cited)
    return [Claim(text, tuple(cited)) for text, cited in by_text.items()]


class Dialectic:
    def __init__(
        self,
        pool: asyncpg.Pool,
        retrieval_address: str,
        llm: LlmClient | None,
        *,
        min_similarity: float | None,
    ) -> None:
        self.pool = pool
        self.retrieval_address = retrieval_address
        self.llm = llm
        # The relevance floor (HM_DIALECTIC_MIN_SIMILARITY); None never abstains (HM_DIALECTIC_ABSTAIN=false).
        self.min_similarity = min_similarity
        self._channel: grpc.aio.Channel | None = None

    def _stub(self) -> retrieval_pb2_grpc.RetrievalStub:
        # Connected on first use: the local stack starts curation before retrieval.
        if self._channel is None:
            self._channel = open_channel(self.retrieval_address)
        return retrieval_pb2_grpc.RetrievalStub(self._channel)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def ask(
        self, principal: str, grants: Sequence[str], question: str, scopes: Sequence[str], depth: str, k: int
    ) -> intelligence_pb2.AskResponse:
        validation.check_query(question)
        depth = depth or "auto"
        if depth not in DEPTHS:
            raise InvalidArgument(f"depth {depth!r} is unknown; use one of {', '.join(DEPTHS)}")
        scopes = list(scopes) or [g for g in grants if "*" not in g]
        if not scopes:
            raise InvalidArgument("name at least one scope to ask in (your grants are all wildcards)")
        for scope in scopes:
            validation.check_scope(scope)
        require(grants, scopes)
        k = k or DEFAULT_K
        validation.check_limit(k, MAX_K, "k")
        notes: list[str] = []
        found, degraded = await self._search(principal, grants, question, scopes, k)
        floor = self.min_similarity
        if degraded and floor is not None:
            # A lexical-only search has no similarity to judge; its hits share the question's words.
            floor = 0.0
            notes.append(f"search degraded ({', '.join(degraded)}): the relevance floor was not applied")
        hits, abstained = answering(question, found, floor)
        hit_ids = [uuid.UUID(h.memory.id) for h in hits]
        async with self.pool.acquire() as conn:
            derived = await graph_repo.derived_ids(conn, hit_ids)
            depth_used, depth_reason = choose_depth(depth, hit_ids, derived, f"depth {depth} was asked for")
            if depth_used == "explicit":
                hit_ids = [h for h in hit_ids if h not in derived]
            rows = {r["id"]: r for r in await graph_repo.nodes(conn, hit_ids)}
            evidence = [rows[h] for h in hit_ids if h in rows]
            hops = {h: 0 for h in rows}
            if depth_used in ("premises", "ancestry"):
                start = [h for h in hit_ids if h in derived]
                up = await walk(
                    conn, grants, start, upward=True, max_hops=1 if depth_used == "premises" else MAX_HOPS,
                    max_rows=MAX_ROWS,
                )  # fmt: skip
                for row in up.rows:
                    if row["id"] not in hops:
                        hops[row["id"]] = up.hops[row["id"]]
                        evidence.append(row)
        mode = MODE_EXTRACTIVE
        claims: list[Claim] | None = None
        if self.llm is None:
            notes.append("no LLM configured (HM_LLM_BASE_URL); extractive mode")
        elif abstained:
            notes.append("llm: not asked, since nothing retrieved answers the question")
        elif evidence:
            answer = await self.llm.structured(
                f"{ASK_TASK}\nQuestion: {question}",
                [(str(r["id"]), r["content"]) for r in evidence],
                ClaimsModel,
            )
            if answer.value is not None:
                mode = MODE_LLM
                claims = [Claim(c.text, tuple(c.citations)) for c in answer.value.claims]
                if answer.value.not_in_memory:
                    claims = []  # a claim beside "not in memory" is not an answer the model stands by
                    abstained = (
                        f'the LLM answered "{NOT_IN_MEMORY}": the memories shown ({len(evidence)}) do '
                        "not answer the question"
                    )
                elif not claims:
                    abstained = f"the LLM made no claim from the memories shown ({len(evidence)})"
            else:
                metrics.LLM_FALLBACKS.labels("dialectic").inc()
                notes.append(answer.note)
        if claims is None:
            claims = _merged(
                [
                    Claim(best_sentence(question, r["content"]), (str(r["id"]),))
                    for r in evidence[:MAX_EXTRACTIVE_CLAIMS]
                ]
            )
        kept, dropped = await self.validate(grants, claims, {str(r["id"]) for r in evidence})
        if not kept and not abstained:
            abstained = (
                "the validator dropped every claim (see dropped)"
                if dropped
                else "nothing retrieved answers the question"
            )
        return intelligence_pb2.AskResponse(
            mode=mode,
            claims=[intelligence_pb2.Claim(text=c.text, citations=list(c.citations)) for c in kept],
            dropped=[
                intelligence_pb2.DroppedClaim(text=c.text, citations=list(c.citations), reason=reason)
                for c, reason in dropped
            ],
            depth=depth_used,
            depth_reason=depth_reason,
            notes=notes,
            evidence=[node_message(r, hops.get(r["id"], 0)) for r in evidence],
            abstained=abstained,
        )

    async def _search(
        self, principal: str, grants: Sequence[str], question: str, scopes: list[str], k: int
    ) -> tuple[list[retrieval_pb2.SearchHit], list[str]]:
        """The hits, and what the search was missing (e.g. `embedder_unavailable`: lexical-only)."""
        request = retrieval_pb2.SearchRequest(
            caller=common_pb2.Caller(principal=principal, grants=list(grants)),
            query=question,
            scopes=scopes,
            k=k,
        )
        try:
            response = await self._stub().Search(request, timeout=SEARCH_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED):
                raise InvalidArgument(f"search refused the question: {exc.details()}") from exc
            raise Unavailable(
                f"the retrieval service at {self.retrieval_address} did not answer ({exc.code().name}); "
                "the Dialectic needs it for evidence (HM_RETRIEVAL_ADDRESS)"
            ) from exc
        return list(response.hits), list(response.degraded)

    async def validate(
        self, grants: Sequence[str], claims: Sequence[Claim], shown: set[str]
    ) -> tuple[list[Claim], list[tuple[Claim, str]]]:
        """Keep the claims whose every citation is a live, readable, non-stale memory among the
        evidence; the others are dropped with the first reason found."""
        ids: dict[str, uuid.UUID] = {}
        for claim in claims:
            for cited in claim.citations:
                try:
                    ids[cited] = uuid.UUID(cited)
                except (ValueError, AttributeError):
                    pass
        async with self.pool.acquire() as conn:
            rows = {r["id"]: r for r in await graph_repo.nodes(conn, list(ids.values()))}
        now = datetime.now(UTC)
        kept: list[Claim] = []
        dropped: list[tuple[Claim, str]] = []
        for claim in claims:
            reason = "cites nothing" if not claim.citations else ""
            for cited in claim.citations:
                if reason:
                    break
                memory_id = ids.get(cited)
                row = rows.get(memory_id) if memory_id else None
                # Absent, deleted and unreadable read the same: an unreadable row is not revealed.
                if memory_id is None:
                    reason = f"cites {cited[:60]!r}, which is not a memory id"
                elif row is None or not permits(grants, row["scope"]):
                    reason = f"cites {cited}, which does not exist"
                elif row["archived_at"] is not None:
                    reason = f"cites {cited}, which is archived"
                elif row["superseded_by"] is not None:
                    reason = f"cites {cited}, which was superseded by {row['superseded_by']}"
                elif row["stale_at"] is not None:
                    reason = f"cites {cited}, which is stale ({row['stale_because']})"
                elif row["expires_at"] is not None and row["expires_at"] <= now:
                    reason = f"cites {cited}, which has expired"
                elif cited not in shown:
                    reason = f"cites {cited}, which was not among the evidence"
            if reason:
                dropped.append((claim, reason))
            else:
                kept.append(claim)
        return kept, dropped
