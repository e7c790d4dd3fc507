"""Choosing which waiting texts go into the next batch (pure; the batcher owns the queue).

A batch costs its number of texts times its longest text (everything is padded to that), so
texts of similar length are grouped: the oldest waiting text is always taken (nothing starves),
and neighbours in length are added while the batch stays within its size and token budget.
"""

from __future__ import annotations

from collections.abc import Sequence


def pick_batch(lengths: Sequence[int], anchor: int, *, max_size: int, max_tokens: int) -> list[int]:
    """Indices into `lengths` for one batch, always including `anchor`. A text longer than the
    token budget still goes, alone."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    pos = order.index(anchor)
    lo, hi = pos, pos  # the chosen texts are order[lo : hi + 1]
    longest = lengths[anchor]
    chosen = [anchor]
    while len(chosen) < max_size:
        count = len(chosen) + 1
        left = order[lo - 1] if lo > 0 else None  # shorter: padding grows by longest - its length
        right = order[hi + 1] if hi + 1 < len(order) else None  # longer: every row grows
        left_ok = left is not None and count * longest <= max_tokens
        right_ok = right is not None and count * lengths[right] <= max_tokens
        if not (left_ok or right_ok):
            break
        left_waste = longest - lengths[left] if left_ok and left is not None else None
        right_waste = (lengths[right] - longest) * len(chosen) if right_ok and right is not None else None
        take_left = right_waste is None or (left_waste is not None and left_waste <= right_waste)
        if take_left:
            lo -= 1
            chosen.append(order[lo])
        else:
            hi += 1
            chosen.append(order[hi])
            longest = lengths[order[hi]]
    return chosen
