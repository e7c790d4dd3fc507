"""Who said a conversation turn: one home for the speaker a record keeps and for what makes a turn
the assistant's (an agent's own answer), which the import may leave out
(HM_STORE_ASSISTANT_TURNS) and a search weighs by its length (HM_ASSISTANT_TURN_WORDS).

A conversation record's `speaker` is kept in its memory's metadata under `speaker`; the capture
hook wrote `role` there before `speaker` existed, so either names the assistant."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["ASSISTANT", "SPEAKER_KEY", "is_assistant", "length_weight", "word_count"]

ASSISTANT = "assistant"
SPEAKER_KEY = "speaker"
_ROLE_KEY = "role"  # the capture hook's key before `speaker`


def is_assistant(metadata: Mapping[str, Any] | str | None) -> bool:
    """Whether a conversation turn's metadata (a mapping, or its JSON text as a row holds it) names
    the assistant as its speaker."""
    if isinstance(metadata, str):
        if ASSISTANT not in metadata.lower():  # most turns: no JSON to parse
            return False
        metadata = json.loads(metadata)
    if not isinstance(metadata, Mapping):
        return False
    for key in (SPEAKER_KEY, _ROLE_KEY):
        value = metadata.get(key)
        if isinstance(value, str) and value.strip().lower() == ASSISTANT:
            return True
    return False


def word_count(text: str) -> int:
    """Words as the gaps between them, counted without splitting (a search counts every long
    assistant turn among its candidates): runs of spaces count once each space, near enough."""
    stripped = text.strip()
    if not stripped:
        return 0
    return stripped.count(" ") + stripped.count("\n") + stripped.count("\t") + 1


# How steeply the weight falls with length: a fourth root halves a turn 16 times the full length.
LENGTH_EXPONENT = 0.25


def length_weight(words: int, full_weight_words: int) -> float:
    """What an assistant turn's relevance is multiplied by: 1 up to `full_weight_words` words, then
    (words / full_weight_words) ** -LENGTH_EXPONENT (a 2,000-word answer at 100: 0.47), so a long
    answer that touches everything does not outrank a user's one-line fact on every query, while
    an answer that alone matches a question still comes back first. 0 turns the weight off."""
    if full_weight_words <= 0 or words <= full_weight_words:
        return 1.0
    return float((words / full_weight_words) ** -LENGTH_EXPONENT)
