"""Read-after-write across a read replica: WAL positions (LSNs) as the services pass them.

Curation answers every write with the position of the WAL after its commit, in the trailing
metadata key COMMIT_LSN_KEY (a write RPC may return a bare Memory, which has no room for it); the
gateway remembers the highest one per principal and sends it as `min_lsn` on that principal's
reads; retrieval serves such a read from its replica only once the replica has replayed that far
(services/retrieval/replica.py). Positions travel as integers: Postgres writes them `X/Y`, two
32-bit halves in hex.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["COMMIT_LSN_KEY", "commit_lsn", "format_lsn", "parse_lsn"]

COMMIT_LSN_KEY = "hm-commit-lsn"


def parse_lsn(text: str) -> int:
    """`16/B374D848` -> its 64-bit position."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def format_lsn(position: int) -> str:
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


def commit_lsn(metadata: Iterable[tuple[str, str | bytes]] | None) -> int:
    """The commit position a write's trailing metadata carries; 0 when it carries none."""
    for key, value in metadata or ():
        if key == COMMIT_LSN_KEY:
            try:
                return int(value)
            except ValueError:
                return 0
    return 0
