"""Context assembly: a layered prompt, plus tiers 0 and 1 (the project map and the rules for a path).

Layers, most stable first, each within its own token budget counted with the embedder's
tokenizer: procedural, project (core memories + the tier-0 project map), path_rules (tier 1,
when a path is given), memories (hybrid search, answer or manager mode), documents, recent
(working memories + the thread's latest turns; never fewer than three turns if any exist).
Items are ranked, then added whole in rank order while they fit; the rest are counted as dropped.

Stale conclusions are left out unless `include_stale` (then flagged in the text). Recall depth
(hypermnesia/recall_depth.py) shapes the memories layer: `explicit` leaves derived conclusions out
of every layer; `premises`/`ancestry` add the evidence of the layer's derived rows after them
(within its budget, so evidence is dropped before a hit); `auto` decides from the layer's search.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import asyncpg

from hypermnesia import recall_depth, validation
from hypermnesia.embedder_client import EmbedderClient
from hypermnesia.errors import HypermnesiaError, InvalidArgument, Unavailable
from services.retrieval import as_of, reads, structure
from services.retrieval.filters import Prefilter
from services.retrieval.search import Evidence, Searcher, SearchInput, SearchOutput

log = logging.getLogger(__name__)

DEFAULT_BUDGETS = {
    "procedural": 300,
    "project": 600,
    "path_rules": 400,
    "memories": 1200,
    "documents": 800,
    "recent": 1500,
}
MIN_RECENT_TURNS = 3
_STATE_QUESTION = re.compile(
    r"\b(status|going on|where (were|are) we|next steps?|what('s| is) (left|pending|open)|catch me up|"
    r"resume|recap|open (tasks|threads))\b",
    re.I,
)


@dataclass
class Layer:
    name: str
    budget: int
    text: str = ""
    tokens: int = 0
    cited: list[str] = field(default_factory=list)
    dropped: int = 0


@dataclass(frozen=True)
class ContextInput:
    principal: str
    grants: tuple[str, ...]
    scopes: list[str]
    query: str = ""
    path: str = ""
    repo: str = ""
    mode: str = "auto"
    thread_id: str = ""
    budgets: dict[str, int] = field(default_factory=dict)
    include_stale: bool = False
    depth: str = ""  # empty = derived
    as_of: datetime | None = None  # assemble from the store as it was then (as_of.py)


@dataclass
class Assembled:
    layers: list[Layer]
    mode: str
    mode_reason: str
    degraded: list[str]
    depth: str
    depth_reason: str
    # As of a time: the memories present then whose text has since been purged (as_of.Past).
    purged: list[str] = field(default_factory=list)


def choose_mode(requested: str, query: str) -> tuple[str, str]:
    if requested in ("answer", "manager"):
        return requested, "requested"
    if requested not in ("", "auto"):
        raise InvalidArgument(f"mode {requested!r} is unknown; use answer, manager or auto")
    if not query.strip():
        return "manager", "auto: no query, so the session-start view (what is going on)"
    if _STATE_QUESTION.search(query):
        return "manager", "auto: the query asks about state or progress"
    return "answer", "auto: the query asks for information"


def _row_item(row: Any) -> tuple[str, str]:
    """A memory as a layer item; a stale one (only read with include_stale) says so and why."""
    note = f"stale: {row['stale_because']}" if row["stale_at"] is not None else ""
    return str(row["id"]), _item(row["id"], row["description"], row["content"], note)


def _evidence_item(e: Evidence) -> tuple[str, str]:
    row = e.row
    note = f"evidence for [{str(e.premise_of)[:8]}]"
    if row["stale_at"] is not None:
        note += f"; stale: {row['stale_because']}"
    return str(row["id"]), _item(row["id"], row["description"], row["content"], note)


def _item(memory_id: Any, description: str, content: str, note: str = "") -> str:
    head = f"[{str(memory_id)[:8]}]" + (f" ({note})" if note else "")
    if description and description != content:
        return f"- {head} {description}: {content}"
    return f"- {head} {content}"


class TokenCounter:
    """The embedder's tokenizer; when it cannot answer, a deliberately high estimate so a budget
    is still never exceeded, and the answer says so."""

    def __init__(self, embedder: EmbedderClient, degraded: list[str]) -> None:
        self.embedder = embedder
        self.degraded = degraded

    async def count(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        try:
            return await self.embedder.count_tokens(texts, timeout_s=5)
        except Unavailable:
            if "token_count_estimated" not in self.degraded:
                self.degraded.append("token_count_estimated")
            # WordPiece averages well under one token per 2 characters of English text.
            return [math.ceil(len(t) / 2) + 1 for t in texts]


async def fill(layer: Layer, items: list[tuple[str, str]], counter: TokenCounter, header: str = "") -> None:
    """Add (id, text) items in order while the layer stays within its budget."""
    if not items or layer.budget <= 0:
        layer.dropped = len(items)
        return
    texts = [text for _, text in items]
    counts = await counter.count([header, *texts]) if header else [0, *await counter.count(texts)]
    used = counts[0]
    lines = [header] if header else []
    for (item_id, text), n in zip(items, counts[1:], strict=True):
        if used + n + 1 > layer.budget:  # +1: the newline that joins it
            layer.dropped += 1
            continue
        lines.append(text)
        layer.cited.append(item_id)
        used += n + 1
    if len(lines) == (1 if header else 0):
        layer.dropped = len(items)
        layer.cited.clear()
        return
    layer.text = "\n".join(lines)
    # Counting the joined text is exact; drop from the end in the rare case joins added tokens.
    (layer.tokens,) = await counter.count([layer.text])
    while layer.tokens > layer.budget and len(lines) > (1 if header else 0):
        lines.pop()
        layer.cited.pop()
        layer.dropped += 1
        layer.text = "\n".join(lines)
        (layer.tokens,) = await counter.count([layer.text]) if layer.text else (0,)


class ContextAssembler:
    def __init__(self, pool: asyncpg.Pool, searcher: Searcher, embedder: EmbedderClient) -> None:
        self.pool = pool
        self.searcher = searcher
        self.embedder = embedder

    async def _search(
        self,
        pool: asyncpg.Pool,
        q: ContextInput,
        mode: str,
        kinds: list[str],
        k: int,
        degraded: list[str],
        done: list[SearchOutput],
        depth: str,
    ) -> SearchOutput:
        """One layer's search, not logged on its own: the assembly logs one search_log row for the
        question it was asked (assemble), however many layers searched for it."""
        out = await self.searcher.search(
            SearchInput(
                principal=q.principal,
                grants=q.grants,
                query=q.query,
                k=k,
                filters=Prefilter(scopes=q.scopes, kinds=kinds, include_stale=q.include_stale, as_of=q.as_of),
                mode=mode,
                depth=depth,
            ),
            log=False,
            pool=pool,
        )
        done.append(out)
        for flag in out.degraded:
            if flag not in degraded:
                degraded.append(flag)
        return out

    async def assemble(self, q: ContextInput, pool: asyncpg.Pool | None = None) -> Assembled:
        """The layers for `q`, read through `pool` (a read replica's; default the primary's); with
        `as_of`, from the store as it was then (the primary's), unless `pool` is that already."""
        mode, reason = choose_mode(q.mode, q.query)
        depth = recall_depth.check_depth(q.depth, recall_depth.DERIVED)
        # The layers beside `memories` keep or drop derived rows as asked; only `memories` widens.
        side_depth = recall_depth.EXPLICIT if depth == recall_depth.EXPLICIT else recall_depth.DERIVED
        stored_only = depth == recall_depth.EXPLICIT
        budgets = dict(DEFAULT_BUDGETS)
        for name, value in q.budgets.items():
            if name not in DEFAULT_BUDGETS:
                raise InvalidArgument(f"unknown layer {name!r}; layers are {', '.join(DEFAULT_BUDGETS)}")
            if not 0 <= value <= validation.MAX_LAYER_BUDGET:
                raise InvalidArgument(
                    f"the {name} budget must be between 0 and {validation.MAX_LAYER_BUDGET:,} tokens"
                )
            budgets[name] = value
        if q.path and not q.repo:
            raise InvalidArgument("a path needs its repo: pass repo (the project map the path belongs to)")
        if q.as_of is not None and not isinstance(pool, as_of.Past):
            as_of.check_instant(q.as_of)
            async with self.searcher.past(q.scopes, q.as_of) as past:
                return await self.assemble(q, cast(asyncpg.Pool, past))
        pool = pool or self.pool
        at = q.as_of
        # The project map and path rules are not versioned: an as-of block shows the current ones.
        maps = self.pool if isinstance(pool, as_of.Past) else pool
        degraded: list[str] = list(pool.degraded) if isinstance(pool, as_of.Past) else []
        searches: list[SearchOutput] = []
        started = time.perf_counter()
        counter = TokenCounter(self.embedder, degraded)
        layers = {name: Layer(name, budget) for name, budget in budgets.items()}
        scopes = q.scopes
        has_query = bool(q.query.strip())

        # 1. Procedural: how this team works.
        if has_query:
            out = await self._search(pool, q, mode, ["procedural"], 20, degraded, searches, side_depth)
            rows = [c.row for c in out.hits]
        else:
            rows = await reads.live_of_kinds(
                pool, scopes, ["procedural"], "important", 20, q.include_stale, stored_only, at
            )
        await fill(layers["procedural"], [_row_item(r) for r in rows], counter)

        # 2. Project: pinned core memories, then the tier-0 map (components + global invariants).
        core = await reads.live_of_kinds(
            pool, scopes, ["core"], "important", 50, q.include_stale, stored_only, at
        )
        items = [_row_item(r) for r in core]
        if q.repo:
            items += await self._project_map_items(maps, q)
        await fill(layers["project"], items, counter)

        # 3. Path rules (tier 1): deterministic, no model.
        if q.path:
            await fill(
                layers["path_rules"], await self._path_items(maps, q), counter, header=f"Rules for {q.path}:"
            )

        # 4. Memories: hybrid search (or, at session start, what changed most recently).
        # Evidence (premises, ancestry) follows the rows, so the budget drops it before a hit.
        kinds = ["episodic", "semantic"]
        if has_query:
            out = await self._search(pool, q, mode, kinds, 30, degraded, searches, depth)
            rows = [c.row for c in out.hits]
            evidence, depth_used, depth_reason = out.evidence, out.depth, out.depth_reason
        else:
            rows = await reads.live_of_kinds(
                pool, scopes, kinds, "recalled", 30, q.include_stale, stored_only, at
            )
            depth_used, depth_reason = depth, recall_depth.REQUESTED
            if depth == recall_depth.AUTO:
                depth_used = recall_depth.DERIVED
                depth_reason = (
                    "auto: no query, so no retrieval evidence to decide from; derived conclusions are kept"
                )
            evidence = []
            if recall_depth.hops_for(depth_used) and rows:
                evidence = await self.searcher.evidence(
                    SearchInput(
                        principal=q.principal, grants=q.grants, query="", k=0,
                        filters=Prefilter(scopes=scopes, include_stale=q.include_stale, as_of=at),
                    ),
                    [r["id"] for r in rows],
                    recall_depth.hops_for(depth_used),
                    pool=pool,
                )  # fmt: skip
        await fill(
            layers["memories"], [_row_item(r) for r in rows] + [_evidence_item(e) for e in evidence], counter
        )

        # 5. Documents: chunks that ground the memories.
        if has_query:
            out = await self._search(pool, q, mode, ["document"], 20, degraded, searches, side_depth)
            await fill(layers["documents"], [_row_item(c.row) for c in out.hits], counter)

        # 6. Recent: working memories and the thread's latest turns (oldest first, at least three).
        await self._fill_recent(pool, layers["recent"], q, counter, stored_only)

        if searches:
            self.searcher.log_searches(
                SearchInput(
                    principal=q.principal,
                    grants=q.grants,
                    query=q.query,
                    k=0,
                    filters=Prefilter(scopes=scopes),
                    mode=mode,
                ),
                searches,
                (time.perf_counter() - started) * 1000,
            )
        ordered = [layers[name] for name in DEFAULT_BUDGETS]
        purged = list(pool.purged) if isinstance(pool, as_of.Past) else []
        return Assembled(ordered, mode, reason, degraded, depth_used, depth_reason, purged)

    async def _project_map_items(self, pool: asyncpg.Pool, q: ContextInput) -> list[tuple[str, str]]:
        try:
            reply = await structure.project_map(pool, q.repo)
        except HypermnesiaError:
            return []  # no map for this repo: the layer holds what else there is
        items = [
            (
                "map",
                f"Project map of {reply.repo}: "
                + "; ".join(
                    f"{c.slug}{' (in ' + c.parent + ')' if c.parent else ''}: {c.responsibility}".strip()
                    for c in reply.components
                ),
            )
        ]
        items += [(c.id, f"- [{c.severity}] {c.text}") for c in reply.invariants]
        return items

    async def _path_items(self, pool: asyncpg.Pool, q: ContextInput) -> list[tuple[str, str]]:
        reply = await structure.resolve_path(pool, q.repo, q.path)
        items: list[tuple[str, str]] = []
        if reply.matched:
            items.append(
                (
                    reply.component.slug,
                    f"Component: {reply.component.slug} — {reply.component.responsibility}",
                )
            )
        elif reply.note:
            items.append(("note", reply.note))
        for c in reply.constraints:
            items.append((c.id, f"- [{c.severity}] {c.text} ({c.reason})"))
        return items

    async def _fill_recent(
        self, pool: asyncpg.Pool, layer: Layer, q: ContextInput, counter: TokenCounter, stored_only: bool
    ) -> None:
        working = await reads.live_of_kinds(
            pool, q.scopes, ["working"], "updated", 20, q.include_stale, stored_only, q.as_of
        )
        turns: list[asyncpg.Record] = []
        if q.thread_id:
            turns = await reads.latest_turns(
                pool, q.scopes, q.thread_id, 50, q.include_stale, stored_only, q.as_of
            )
        # Newest turns first when filling, shown oldest first; the last three are always kept.
        turn_items = [
            (
                str(r["id"]),
                _item(r["id"], "", r["content"], f"stale: {r['stale_because']}" if r["stale_at"] else ""),
            )
            for r in turns
        ]
        protected = turn_items[:MIN_RECENT_TURNS]
        rest = turn_items[MIN_RECENT_TURNS:]
        items = protected + [_row_item(r) for r in working] + rest
        await fill(layer, items, counter)
        if turns and layer.text:
            # Show the conversation in order, after the working memories.
            kept = set(layer.cited)
            turn_ids = {item_id for item_id, _ in turn_items}
            chronological = [text for item_id, text in reversed(turn_items) if item_id in kept]
            others = [text for item_id, text in items if item_id in kept and item_id not in turn_ids]
            reordered = "\n".join(others + chronological)
            (tokens,) = await counter.count([reordered])
            if tokens <= layer.budget:
                layer.text, layer.tokens = reordered, tokens
