"""Function words, and the content words of a text: what the retrieval service's lexical leg
leaves out of a query (its OR-converted tsquery is built in SQL: services/retrieval/repo.py), and
what the Dialectic compares when it asks whether a sentence shares a question's content."""

from __future__ import annotations

import re

__all__ = ["STOPWORDS", "content_words", "fold"]

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

_WORD = re.compile(r"\w+")
# Inflections folded before comparing (research / researched / researching; city / cities), so a
# sentence shares a word with a question however either inflects it. A few rules, not a stemmer:
# the test is whether two texts share a word, not how well they match.
_SUFFIXES = (("ies", "y"), ("ied", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""))
_MIN_STEM = 3


def fold(word: str) -> str:
    """`word` (lower case) with a common English inflection and a final `e` taken off."""
    for suffix, replacement in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= _MIN_STEM:
            word = word[: -len(suffix)] + replacement
            break
    return word[:-1] if word.endswith("e") and len(word) > _MIN_STEM else word


def content_words(text: str) -> set[str]:
    """The text's words that are not function words, lower-cased and folded; single characters
    are left out."""
    words = (w.lower() for w in _WORD.findall(text))
    return {fold(w) for w in words if len(w) > 1 and w not in STOPWORDS}
