"""Turning a natural-language query into the OR-converted tsquery text (seed 000): AND is too
strict for recall, so every content word is an alternative. Only word characters reach
to_tsquery, so no user text can break its syntax."""

from __future__ import annotations

import re

# Function words dropped from the `simple` (unstemmed) half; the English half drops its own.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these they
    this those through to too under until up very was we were what when where which while who whom
    why will with would you your yours yourself yourselves""".split()
)

_WORD = re.compile(r"[\w][\w.\-/:]*[\w]|[\w]", re.UNICODE)
_PART = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 64


def query_terms(query: str) -> list[str]:
    """Lower-cased distinct word tokens of the query, stopwords removed, order kept."""
    seen: dict[str, None] = {}
    for token in _WORD.findall(query.lower()):
        for part in _PART.findall(token):
            if part not in STOPWORDS and part not in seen:
                seen[part] = None
    return list(seen)[:MAX_TERMS]


def or_query(terms: list[str]) -> str:
    """`a | b | c` for to_tsquery; empty when the query has no content words."""
    return " | ".join(terms)
