"""Input limits and checks. The services enforce them (they are the validation authority: a
check holds whoever calls); the gateway reads the limits to state them in its schemas.

Every limit here is documented in docs/TOOLS.md's "Limits" table; change both together.
"""

from __future__ import annotations

import json
import math
import unicodedata
import uuid
from typing import Any

from hypermnesia.errors import InvalidArgument

__all__ = [
    "IMPORTANCE_RANGE",
    "KINDS",
    "MAX_CONTENT_CHARS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_FORGET_LIMIT",
    "MAX_IMPORT_RECORDS",
    "MAX_LAYER_BUDGET",
    "MAX_LIST_LIMIT",
    "MAX_METADATA_BYTES",
    "MAX_QUERY_CHARS",
    "MAX_RECORD_QUERY_LIMIT",
    "MAX_REF_CHARS",
    "MAX_SCOPE_CHARS",
    "MAX_STATS_DAYS",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "MAX_TYPE_CHARS",
    "check_content",
    "check_description",
    "check_importance",
    "check_k",
    "check_kind",
    "check_limit",
    "check_metadata",
    "check_query",
    "check_scope",
    "check_tags",
    "check_topic",
    "check_type",
    "parse_id",
]

MAX_CONTENT_CHARS = 65_536
MAX_DESCRIPTION_CHARS = 1_000
# A prompt hook sends the conversation so far: long queries are read in part by each leg
# (services/retrieval/fusion.py), so the limit only bounds the request.
MAX_QUERY_CHARS = 16_384
MAX_SCOPE_CHARS = 200
MAX_TAGS = 50
MAX_TAG_CHARS = 100
MAX_TYPE_CHARS = 100
MAX_REF_CHARS = 500  # source refs, thread and topic ids
MAX_METADATA_BYTES = 16_384
IMPORTANCE_RANGE = (0.0, 10.0)
# Counts one request may ask for (each is checked by the service that answers it).
MAX_LIST_LIMIT = 500  # retrieval: List
MAX_STATS_DAYS = 3650  # retrieval: Stats
MAX_LAYER_BUDGET = 32_000  # retrieval: AssembleContext, tokens per layer
MAX_FORGET_LIMIT = 1000  # curation: Forget (memories listed)
MAX_FORGET_DAYS = 36_500  # curation: Forget (older_than_days; HM_FORGET_AFTER_DAYS has the same bound)
MAX_RECORD_QUERY_LIMIT = 10_000  # curation: QueryRecords
MAX_IMPORT_RECORDS = 5000  # curation: ImportRecords
KINDS = ("core", "working", "episodic", "semantic", "procedural", "document")


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" for ch in text)


def _check_text(text: str, field: str) -> None:
    """Reject lone surrogates: they are what invalid UTF-8 becomes when decoded with
    `surrogateescape`, and Postgres cannot store them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"{field} is not valid UTF-8 text; send UTF-8") from exc


def check_content(content: str, field: str = "content") -> str:
    _check_text(content, field)
    if not content.strip():
        raise InvalidArgument(f"{field} is empty; send the text to remember")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidArgument(
            f"{field} is {len(content):,} characters; the limit is {MAX_CONTENT_CHARS:,}. "
            "Split it into several memories or ingest it as a document"
        )
    if "\x00" in content:
        raise InvalidArgument(f"{field} contains a NUL character; remove it")
    return content


def check_description(description: str) -> str:
    _check_text(description, "description")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise InvalidArgument(
            f"description is {len(description):,} characters; the limit is {MAX_DESCRIPTION_CHARS:,} "
            "(it is a one-line summary)"
        )
    if "\x00" in description:
        raise InvalidArgument("description contains a NUL character; remove it")
    return description


def check_scope(scope: str) -> str:
    _check_text(scope, "scope")
    if scope == "" or not scope.strip():
        raise InvalidArgument("scope is empty; name one such as 'user:alice', 'project:x' or 'shared'")
    if scope != scope.strip():
        raise InvalidArgument("scope has leading or trailing whitespace; remove it")
    if _has_control(scope):
        raise InvalidArgument("scope contains control characters; use printable text like 'project:x'")
    if len(scope) > MAX_SCOPE_CHARS:
        raise InvalidArgument(f"scope is {len(scope)} characters; the limit is {MAX_SCOPE_CHARS}")
    return scope


def check_tags(tags: list[str]) -> list[str]:
    """The tags to store: each checked, a repeated one kept once (first place kept), so
    ["a", "a"] is stored as ["a"] by every write path (save, update, supersede, records, import)."""
    tags = list(dict.fromkeys(tags))
    if len(tags) > MAX_TAGS:
        raise InvalidArgument(f"{len(tags)} tags given; the limit is {MAX_TAGS}")
    for tag in tags:
        _check_text(tag, "tag")
        if not tag.strip() or _has_control(tag) or len(tag) > MAX_TAG_CHARS:
            raise InvalidArgument(
                f"tag {tag[:40]!r} is invalid: tags are 1-{MAX_TAG_CHARS} printable characters"
            )
    return tags


def check_type(type_: str) -> str:
    _check_text(type_, "type")
    if _has_control(type_) or len(type_) > MAX_TYPE_CHARS:
        raise InvalidArgument(f"type must be at most {MAX_TYPE_CHARS} printable characters")
    return type_


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise InvalidArgument(f"kind {kind!r} is unknown; use one of {', '.join(KINDS)}")
    return kind


def check_importance(importance: float) -> float:
    low, high = IMPORTANCE_RANGE
    if math.isnan(importance) or not low <= importance <= high:
        raise InvalidArgument(f"importance must be between {low:g} and {high:g}")
    return importance


def check_query(query: str) -> str:
    _check_text(query, "query")
    if not query.strip():
        raise InvalidArgument("query is empty; describe what you are looking for")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidArgument(
            f"query is {len(query):,} characters; the limit is {MAX_QUERY_CHARS:,}. Shorten it to the question"
        )
    if "\x00" in query:
        raise InvalidArgument("query contains a NUL character; remove it")
    return query


def check_topic(topic: str) -> str:
    """A search's active topic: compared with the topic_id records were filed under."""
    _check_text(topic, "topic")
    if len(topic) > MAX_REF_CHARS or _has_control(topic):
        raise InvalidArgument(
            f"topic must be at most {MAX_REF_CHARS} printable characters, like a record's topic_id"
        )
    return topic


def check_ref(ref: str, field: str) -> str:
    """A source ref, thread or topic id a request filters by."""
    _check_text(ref, field)
    if len(ref) > MAX_REF_CHARS or _has_control(ref):
        raise InvalidArgument(f"{field} must be at most {MAX_REF_CHARS} printable characters")
    return ref


def check_k(k: int, max_k: int) -> int:
    if not 1 <= k <= max_k:
        raise InvalidArgument(f"k must be between 1 and {max_k} (HM_SEARCH_MAX_K); got {k}")
    return k


def parse_id(value: str, what: str = "memory") -> uuid.UUID:
    """A memory's (or record's, task's: `what`) id from a request."""
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError) as exc:
        raise InvalidArgument(f"{str(value)[:60]!r} is not a {what} id (a UUID)") from exc


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def check_metadata(metadata: Any, field: str = "metadata") -> dict[str, Any]:
    """A JSON object of at most MAX_METADATA_BYTES, measured as compact UTF-8 JSON."""
    if not isinstance(metadata, dict):
        raise InvalidArgument(f'{field} must be a JSON object (e.g. {{"source": "chat"}})')
    # Postgres cannot store a NUL in text or jsonb: refuse it here, not as an internal error there.
    if _holds_nul(metadata):
        raise InvalidArgument(f"{field} must not contain a NUL character (\\u0000) in a key or value")
    size = len(json.dumps(metadata, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise InvalidArgument(
            f"{field} is {size:,} bytes as JSON; the limit is {MAX_METADATA_BYTES:,} (MAX_METADATA_BYTES). "
            "Keep large data in the content, or store a reference to it"
        )
    return metadata


def check_days(days: float, high: float, field: str) -> float:
    """A span in days: 0 to `high`. NaN and infinity fail too (JSON parsers accept them)."""
    if math.isnan(days) or not 0 <= days <= high:
        raise InvalidArgument(f"{field} must be between 0 and {high:g}; got {days:g}")
    return days


def check_limit(limit: int, high: int, field: str = "limit") -> int:
    """A count a request asks for: 1 to `high` (one of the MAX_*_LIMIT above)."""
    if not 1 <= limit <= high:
        raise InvalidArgument(f"{field} must be between 1 and {high}; got {limit}")
    return limit
