"""Recall depth (memory is a graph, but recall stays bounded): how far a read follows
the evidence graph (derived -> premise edges, migration 0021) beyond the rows it found.

- `explicit`: stored rows only; a derived conclusion (a memory with evidence edges) is left out.
- `derived`: stored rows plus derived conclusions (what a read returned before there was a graph).
- `premises`: plus the direct evidence of each derived hit (one hop).
- `ancestry`: plus the evidence of that evidence, transitively, within MAX_HOPS and MAX_ROWS.
- `auto`: one of the four, picked from what the retrieval found (choose_depth says the rule).

The policies and caps are fixed: no caller can ask for an unbounded walk. Search, context (the
retrieval service) and the Dialectic's Ask (curation) share these names, caps and the auto rule.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TypeVar

from hypermnesia.errors import InvalidArgument

__all__ = [
    "ANCESTRY",
    "AUTO",
    "DEPTHS",
    "DERIVED",
    "EXPLICIT",
    "MAX_HOPS",
    "MAX_ROWS",
    "PREMISES",
    "REQUESTED",
    "check_depth",
    "choose_depth",
    "hops_for",
]

EXPLICIT = "explicit"
DERIVED = "derived"
PREMISES = "premises"
ANCESTRY = "ancestry"
AUTO = "auto"
DEPTHS = (EXPLICIT, DERIVED, PREMISES, ANCESTRY, AUTO)

# The ancestry walk's fixed caps: evidence hops from a hit, and evidence rows added in all.
MAX_HOPS = 3
MAX_ROWS = 20

# The reason reported for a depth the caller named.
REQUESTED = "requested"

T = TypeVar("T")


def check_depth(depth: str, default: str) -> str:
    """The depth to use (`default` when empty), or a clear error naming the choices."""
    depth = depth or default
    if depth not in DEPTHS:
        raise InvalidArgument(f"depth {depth!r} is unknown; use one of {', '.join(DEPTHS)}")
    return depth


def hops_for(depth: str) -> int:
    """How many evidence hops a fixed policy walks from a derived hit (0: none)."""
    return {PREMISES: 1, ANCESTRY: MAX_HOPS}.get(depth, 0)


def choose_depth(
    depth: str, hit_ids: Sequence[T], derived: Collection[T], requested: str = REQUESTED
) -> tuple[str, str]:
    """The fixed policy to use and why. A named depth is used as asked, the reason `requested`.

    `auto` decides from the hits, best first, and which of them are derived conclusions:
    - nothing found: `explicit`, there is nothing to widen;
    - the best hit is a derived conclusion: `premises`, so the answer shows what it rests on;
    - a derived conclusion among the other hits: `derived`, kept as they are;
    - every hit a stored row: `explicit`, there is no conclusion to widen.
    It never picks `ancestry`: a transitive walk is asked for, not guessed."""
    if depth != AUTO:
        return depth, requested
    if not hit_ids:
        return EXPLICIT, "auto: nothing was found, so there is nothing to widen"
    if hit_ids[0] in derived:
        return (
            PREMISES,
            f"auto: the best hit {hit_ids[0]} is a derived conclusion, so its direct premises are added",
        )
    n = sum(1 for h in hit_ids if h in derived)
    if n:
        return (
            DERIVED,
            f"auto: the best hit is a stored row and {n} other hit(s) are derived conclusions; they are kept",
        )
    return EXPLICIT, "auto: every hit is a stored row; there are no derived conclusions to widen"
