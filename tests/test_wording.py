"""A count in what a person reads takes the right number: "1 line", "2 lines" (hypermnesia/wording.py,
used by every command's summary line)."""

from __future__ import annotations

import pytest

from hypermnesia.wording import count


@pytest.mark.parametrize(
    ("n", "word", "said"),
    [
        (1, "line", "1 line"),
        (2, "line", "2 lines"),
        (0, "proposal", "0 proposals"),
        (1, "proposal", "1 proposal"),
        (1, "memory", "1 memory"),
        (3, "memory", "3 memories"),
        (2, "day", "2 days"),
        (2, "revoked token", "2 revoked tokens"),
    ],
)
def test_a_count_takes_the_number_it_says(n: int, word: str, said: str) -> None:
    assert count(n, word) == said


def test_an_irregular_plural_is_given() -> None:
    assert count(2, "analysis", "analyses") == "2 analyses"
    assert count(1, "analysis", "analyses") == "1 analysis"
