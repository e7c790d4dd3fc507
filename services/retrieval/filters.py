"""The prefilter of every read: scopes, tags, kinds, types, repo, topic, time range, liveness (the
default) or validity at an instant (`as_of`), staleness, and whether derived conclusions count
(recall depth `explicit` leaves them out). Produces one SQL fragment over alias `m` with
numbered parameters, so the dense and lexical legs apply exactly the same filter."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hypermnesia.memory_rows import fresh_sql, live_sql
from hypermnesia.times import field_time
from hypermnesia.v1 import retrieval_pb2

# A derived conclusion is a memory with evidence edges (derived -> premise); the edges' primary
# key (derived_id, premise_id) answers this per row with one index probe.
STORED_SQL = "NOT EXISTS (SELECT 1 FROM evidence_edges e WHERE e.derived_id = m.id)"


@dataclass(frozen=True)
class Prefilter:
    scopes: list[str]
    tags: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    repo: str = ""
    since: datetime | None = None
    until: datetime | None = None
    as_of: datetime | None = None
    include_archived: bool = False
    topic: str = ""  # only memories filed under this topic (metadata.topic_id); empty = any
    # Stale conclusions (a premise changed) are left out like archived ones unless asked for.
    include_stale: bool = False
    # Stored rows only: recall depth `explicit` leaves derived conclusions out.
    stored_only: bool = False

    @property
    def narrows(self) -> bool:
        """Filters beyond scope and liveness, which may leave few rows of a large scope."""
        return bool(
            self.tags or self.kinds or self.types or self.repo or self.since or self.until or self.topic
        )

    def liveness(self) -> Prefilter:
        """The same scopes, as live (or stale, archived, as of) as asked, without the narrowing
        filters: what a hit's evidence is read under."""
        return Prefilter(
            scopes=self.scopes,
            as_of=self.as_of,
            include_archived=self.include_archived,
            include_stale=self.include_stale,
        )

    def sql(self, first_param: int) -> tuple[str, list[Any]]:
        """(`WHERE`-less condition over alias m, its parameters) numbered from first_param."""
        params: list[Any] = []

        def p(value: Any) -> str:
            params.append(value)
            return f"${first_param + len(params) - 1}"

        parts = [f"m.scope = ANY({p(self.scopes)}::text[])"]
        if self.tags:
            parts.append(f"m.tags @> {p(self.tags)}::text[]")
        if self.kinds:
            parts.append(f"m.kind = ANY({p(self.kinds)}::text[])")
        if self.types:
            parts.append(f"m.type = ANY({p(self.types)}::text[])")
        if self.repo:
            parts.append(f"m.repo = {p(self.repo)}")
        if self.topic:
            parts.append(f"m.metadata->>'topic_id' = {p(self.topic)}")
        if self.since is not None:
            parts.append(f"m.created_at >= {p(self.since)}")
        if self.until is not None:
            parts.append(f"m.created_at < {p(self.until)}")
        if self.as_of is not None:
            at = p(self.as_of)
            parts.append(
                f"m.created_at <= {at} AND m.valid_from <= {at} AND (m.valid_to IS NULL OR m.valid_to > {at})"
                f" AND (m.archived_at IS NULL OR m.archived_at > {at})"
                f" AND (m.expires_at IS NULL OR m.expires_at > {at})"
            )
        elif self.include_archived:
            parts.append("m.superseded_by IS NULL")
        else:
            parts.append(live_sql("m"))
        if not self.include_stale:
            if self.as_of is not None:
                # What was true then: a conclusion that went stale later was still fresh.
                parts.append(f"(m.stale_at IS NULL OR m.stale_at > {p(self.as_of)})")
            else:
                parts.append(fresh_sql("m"))
        if self.stored_only:
            parts.append(STORED_SQL)
        return " AND ".join(parts), params


def search_prefilter(request: retrieval_pb2.SearchRequest) -> Prefilter:
    """A search request's filters, read once from the proto. The topic restriction (topic_only)
    and derived conclusions (recall depth) are the search's to add: both need validating first."""
    return Prefilter(
        scopes=list(request.scopes),
        tags=list(request.tags),
        kinds=list(request.kinds),
        types=list(request.types),
        repo=request.repo,
        since=field_time(request, "since"),
        until=field_time(request, "until"),
        as_of=field_time(request, "as_of"),
        include_archived=request.include_archived,
        include_stale=request.include_stale,
    )
