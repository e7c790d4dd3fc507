"""Fusion of the dense and lexical legs, conversation context, the recency/importance blend, the
two gates and the diversity penalty.

Fusion modes (per request or HM_FUSION):
- `weighted` (the weighted blend): 0.6 * cosine + 0.4 * BM25 / max BM25 of the candidates.
- `boost` (the drop-in default of existing clients' servers): cosine + a bounded bonus for a lexical match that decays with lexical rank.
- `rrf` (reciprocal rank fusion): sum over the legs of 1 / (60 + rank), scaled so first in every leg is 1.
- `adaptive`: `weighted`'s form, leg weights from how clear each leg is, per the searched scopes'
  stored estimate (fusion.py).
- `dense`, `bm25`: one leg alone (cosine; BM25 / max BM25), the baselines the others must beat.
Context: a conversation turn is read with its neighbours, so a turn whose neighbour answers the
query, or whose thread is about it, rises (a memory with no thread is its own context); weighted,
its session as a whole (the mean cosine of its thread's best candidates) and its session's opening
turn count too. A long assistant turn's relevance is weighed down by its length (speakers.py).
"""

from __future__ import annotations

import math
import re
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from operator import itemgetter
from typing import Any

from hypermnesia import speakers
from hypermnesia.kinds import HALF_LIFE_DAYS
from services.retrieval import fusion

RRF_K = 60.0
IMPORTANCE_SCALE = 10.0
WEIGHTED_DENSE_SHARE = 0.6
DUPLICATE_JACCARD = 0.8
DUPLICATE_PENALTY = 0.5
# The session signal: the mean cosine of this many of a thread's most similar candidates.
SESSION_TURNS = 3
# group_by=thread: the best turns shown under each thread.
THREAD_TURNS = 3
_WORDS = re.compile(r"\w+")


@dataclass
class Candidate:
    row: Any
    similarity: float  # cosine, 0-1 (0 when the embedder was unavailable)
    bm25: float  # 0 when the memory shares no query term
    all_terms: bool  # the memory contains every (stemmed) query word: bypasses the gates
    prev_id: uuid.UUID | None = None
    next_id: uuid.UUID | None = None
    dense_rank: int | None = None
    lex_rank: int | None = None
    relevance: float = 0.0
    context: float = 0.0
    entity_overlap: float = 0.0  # Jaccard of the query's entities and the memory's (signals.py)
    task_bonus: float = 0.0  # signals.TASK_BONUS when an open task is or cites this memory
    topic_match: float = 0.0  # 1 when the memory is filed under the request's topic
    time_match: float = 0.0  # 1 when its event time falls in a date the query names (time_window.py)
    # Cosine of the query and its thread's opening turn (selected only when weighted).
    opening_similarity: float | None = None
    length_weight: float = 1.0  # a long assistant turn's relevance multiplier (speakers.py)
    group: int = 0  # group_by=thread: the 1-based rank of its thread
    score: float = 0.0
    extras: dict = field(default_factory=dict)

    @property
    def id(self) -> uuid.UUID:
        return self.row["id"]

    @property
    def lexical_match(self) -> bool:
        return self.all_terms


@dataclass(frozen=True)
class Weights:
    relevance: float
    recency: float
    importance: float
    lexical_boost: float
    rank_decay_k: float
    neighbour: float
    thread: float
    entity: float = 0.0
    task: float = 0.0
    topic: float = 0.0
    time: float = 0.0
    session: float = 0.0
    opening: float = 0.0


def assign_ranks(candidates: list[Candidate], have_vectors: bool) -> None:
    if have_vectors:
        for rank, c in enumerate(sorted(candidates, key=lambda c: -c.similarity)):
            c.dense_rank = rank
    for rank, c in enumerate(sorted((c for c in candidates if c.bm25 > 0), key=lambda c: -c.bm25)):
        c.lex_rank = rank


def fuse(
    candidates: list[Candidate],
    mode: str,
    w: Weights,
    have_vectors: bool,
    query_terms: int = 0,
    adaptive: fusion.AdaptiveParams = fusion.DEFAULT,
    estimate: float = 0.0,
) -> fusion.LegWeights | None:
    """Set each candidate's relevance according to the fusion mode; `adaptive` returns the leg
    weights it chose (`query_terms`: the query's distinct content words; `estimate`: the searched
    scopes' stored estimate, hypermnesia/fusion_estimate.py)."""
    assign_ranks(candidates, have_vectors)
    top = max((c.bm25 for c in candidates), default=0.0) or 1.0
    if mode == "adaptive":
        legs = fusion.leg_weights(
            [c.similarity for c in candidates],
            [c.bm25 for c in candidates],
            query_terms,
            have_vectors,
            adaptive,
            estimate,
        )
        for c in candidates:
            c.relevance = (
                legs.dense * fusion.dense_relevance(c.similarity, legs) + legs.lexical * c.bm25 / top
            )
        return legs
    if mode == "dense" and have_vectors:
        for c in candidates:
            c.relevance = c.similarity
        return None
    if mode in ("dense", "bm25"):  # dense without a vector has only the lexical leg to read
        for c in candidates:
            c.relevance = c.bm25 / top
        return None
    if mode == "rrf":
        # Scaled so first in every leg is 1: relevance is then on the 0-1 scale of the other
        # fusions, and the recency, importance, entity and topic terms weigh the same in each.
        best = (2.0 if have_vectors else 1.0) / (RRF_K + 1)
        for c in candidates:
            rrf = sum(1.0 / (RRF_K + r + 1) for r in (c.dense_rank, c.lex_rank) if r is not None)
            c.relevance = rrf / best
    elif mode == "weighted":
        share = WEIGHTED_DENSE_SHARE if have_vectors else 0.0
        for c in candidates:
            c.relevance = share * c.similarity + (1 - share) * c.bm25 / top
    else:  # boost
        for c in candidates:
            bonus = 0.0
            if c.lex_rank is not None:
                bonus = w.lexical_boost * w.rank_decay_k / (w.rank_decay_k + c.lex_rank)
            c.relevance = c.similarity + bonus
    return None


def weigh_assistant_turns(candidates: list[Candidate], full_weight_words: int) -> None:
    """A long assistant turn's relevance times speakers.length_weight (kept on the candidate, which
    the hit reports), before context: its neighbours read it weighed too."""
    if full_weight_words <= 0:
        return
    for c in candidates:
        row = c.row
        if row["type"] == "conversation" and speakers.is_assistant(row["metadata"]):
            c.length_weight = speakers.length_weight(speakers.word_count(row["content"]), full_weight_words)
            c.relevance *= c.length_weight


def add_context(candidates: list[Candidate], w: Weights) -> None:
    """context = (relevance + w_n * best neighbour + w_t * best of thread + w_s * session
    + w_o * opening) / (1 + w_n + w_t + w_s + w_o).

    Neighbours outside the candidate pool count as irrelevant. `session` is the mean cosine of the
    thread's SESSION_TURNS most similar candidates, `opening` the cosine of the thread's first
    turn (0 when not selected). Dividing by the weights keeps a memory without a thread (its own
    neighbour and thread) at exactly its relevance."""
    by_id = {c.id: c for c in candidates}
    thread_best: dict[tuple[str, str], float] = defaultdict(float)
    similarities: dict[tuple[str, str], list[float]] = defaultdict(list)
    for c in candidates:
        thread = c.row["thread_id"]
        if thread:
            key = (c.row["scope"], thread)
            thread_best[key] = max(thread_best[key], c.relevance)
            similarities[key].append(c.similarity)
    session: dict[tuple[str, str], float] = {}
    if w.session > 0:
        for key, values in similarities.items():
            best = sorted(values, reverse=True)[:SESSION_TURNS]
            session[key] = sum(best) / len(best)
    norm = 1.0 + w.neighbour + w.thread + w.session + w.opening
    for c in candidates:
        thread = c.row["thread_id"]
        if not thread:
            c.context = c.relevance
            continue
        key = (c.row["scope"], thread)
        neighbours = [by_id[n].relevance for n in (c.prev_id, c.next_id) if n in by_id]
        best_neighbour = max(neighbours, default=0.0)
        c.context = (
            c.relevance
            + w.neighbour * best_neighbour
            + w.thread * thread_best[key]
            + w.session * session.get(key, 0.0)
            + w.opening * max(0.0, c.opening_similarity or 0.0)
        ) / norm


def group_by_thread(ranked: list[Candidate], k: int, turns: int = THREAD_TURNS) -> list[Candidate]:
    """The k best threads of a ranked list (a memory outside any thread is its own), best first,
    each with its `turns` best hits in rank order, each hit numbered with its thread's rank."""
    groups: dict[tuple[str, str], list[Candidate]] = {}
    for c in ranked:
        thread = c.row["thread_id"]
        key = (c.row["scope"], thread) if thread else ("", str(c.id))
        members = groups.get(key)
        if members is None:
            if len(groups) == k:
                continue
            members = groups[key] = []
        if len(members) < turns:
            members.append(c)
    out = []
    for rank, members in enumerate(groups.values(), start=1):
        for c in members:
            c.group = rank
            out.append(c)
    return out


def recency(decay_class: str, last_accessed: datetime, now: datetime) -> float:
    half_life = HALF_LIFE_DAYS.get(decay_class)
    if half_life is None:
        return 1.0
    days = max(0.0, (now - last_accessed).total_seconds() / 86400.0)
    return math.exp(-math.log(2) * days / half_life)


def blend(candidates: list[Candidate], w: Weights, now: datetime | None = None) -> None:
    now = now or datetime.now(UTC)
    for c in candidates:
        row = c.row
        c.score = (
            w.relevance * c.context
            + w.recency * recency(row["decay_class"], row["last_accessed_at"], now)
            + w.importance * float(row["importance"]) / IMPORTANCE_SCALE
            + w.entity * c.entity_overlap
            + w.task * c.task_bonus
            + w.topic * c.topic_match
            + w.time * c.time_match
        )


def apply_gates(
    candidates: list[Candidate], min_similarity: float, relative_cutoff: float
) -> list[Candidate]:
    """The two precision gates. The absolute floor drops hits whose cosine is below `min_similarity`; the
    relative cutoff drops hits more than `relative_cutoff` below the best similarity. Hits that
    contain every query word bypass both. Flat results (nothing stands out by the cutoff) are not
    cut: the gate narrows a good answer's neighbourhood rather than inventing one."""
    kept = [c for c in candidates if c.lexical_match or c.similarity >= min_similarity]
    if relative_cutoff <= 0 or not kept:
        return kept
    best = max(c.similarity for c in kept)
    return [c for c in kept if c.lexical_match or c.similarity >= best - relative_cutoff]


def _word_set(text: str) -> frozenset[str]:
    return frozenset(_WORDS.findall(text.lower()))


def penalise_duplicates(ranked: list[Candidate], window: int) -> list[Candidate]:
    """Push a hit down when its words overlap a better hit's by more than DUPLICATE_JACCARD, so
    near-identical memories do not crowd the top k (the diversity penalty)."""
    head = ranked[:window]
    words = [_word_set(c.row["content"]) for c in head]
    for j in sorted({j for _better, j in _similar_pairs(words, DUPLICATE_JACCARD)}):
        head[j].score *= DUPLICATE_PENALTY
        head[j].extras["duplicate"] = True
    head.sort(key=lambda c: c.score, reverse=True)
    return head + ranked[window:]


def _similar_pairs(sets: list[frozenset[str]], threshold: float) -> list[tuple[int, int]]:
    """Pairs (i, j), i < j, whose Jaccard similarity exceeds `threshold`, by prefix filtering:
    with the words of every set in one order (rarest first), two sets that similar share a word
    among the first `len - ceil(threshold * len) + 1` of each. Only those pairs are compared:
    comparing every pair of 200 abstracts had cost 200 ms a search."""
    counts: Counter[str] = Counter(chain.from_iterable(sets))
    # One order for every set (ties by first appearance), rarest first so prefixes seldom meet.
    rarity = {w: n for n, (w, _) in enumerate(sorted(counts.items(), key=itemgetter(1)))}
    index: defaultdict[str, list[int]] = defaultdict(list)
    pairs = []
    for j, words in enumerate(sets):
        ordered = sorted(words, key=rarity.__getitem__)
        prefix = ordered[: len(ordered) - math.ceil(threshold * len(ordered)) + 1]
        earlier = {i for w in prefix for i in index[w]}
        for i in sorted(earlier):
            shared = len(words & sets[i])
            if shared / (len(words) + len(sets[i]) - shared) > threshold:
                pairs.append((i, j))
        for w in prefix:
            index[w].append(j)
    return pairs
