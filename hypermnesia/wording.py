"""How a number is said in what a person reads (command output, summaries): one home, so every
line says "1 line" and "2 lines", never "1 lines"."""

from __future__ import annotations

__all__ = ["count"]


def count(n: int, word: str, plural: str | None = None) -> str:
    """`n` with the word in the number it takes: "1 line", "2 lines", "1 memory", "3 memories"
    "1,200 records" (`plural` where adding an s is wrong)."""
    if n == 1:
        return f"1 {word}"
    if plural is None:
        plural = word[:-1] + "ies" if word.endswith("y") and word[-2:-1] not in "aeiou" else word + "s"
    return f"{n} {plural}"
