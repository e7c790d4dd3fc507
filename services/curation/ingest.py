"""Document ingestion: markdown files -> chunks -> document memories.

A file whose content hash is unchanged is skipped; a changed file's new chunks supersede its old
ones (old chunk i is closed by new chunk min(i, n-1)); a file gone from the tree has its chunks
retired. So re-running on an unchanged tree writes nothing. A file that is not UTF-8 text is
skipped and reported, never half-ingested.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from hypermnesia import validation
from hypermnesia.errors import InvalidArgument
from hypermnesia.secrets import Redaction, RedactMode, Redactor
from hypermnesia.v1 import curation_pb2
from hypermnesia.wording import count
from services.curation import chunker, documents_repo, entities, payloads, rawlog, repo
from services.curation.embedding import EmbedFn, embedding_text
from services.curation.messages import redacted_message
from services.curation.writer import new_memory

log = logging.getLogger(__name__)

MARKDOWN = (".md", ".markdown", ".mdx")
MAX_FILE_BYTES = 2_000_000


@dataclass
class IngestReport:
    files: int = 0
    unchanged: int = 0
    changed: int = 0
    added: int = 0
    retired: int = 0
    chunks_written: int = 0
    skipped: list[str] = field(default_factory=list)
    # The secrets masked in the documents (HM_REDACT=mask).
    redacted: Redaction = field(default_factory=Redaction)

    def to_message(self) -> curation_pb2.IngestResponse:
        return curation_pb2.IngestResponse(
            redacted=redacted_message(self.redacted),
            files=self.files,
            unchanged=self.unchanged,
            changed=self.changed,
            added=self.added,
            retired=self.retired,
            chunks_written=self.chunks_written,
            skipped=self.skipped,
        )

    def summary(self) -> str:
        masked = f"; {count(self.redacted.count, 'secret')} masked" if self.redacted.count else ""
        return (
            f"{count(self.files, 'file')}: {self.added} new, {self.changed} changed, {self.unchanged} unchanged, "
            f"{self.retired} retired, {len(self.skipped)} skipped; {count(self.chunks_written, 'chunk')} written"
            + masked
        )


# ---- walking a tree -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    base: str  # folder of the .gitignore, relative to the root ("" for the root)
    pattern: str
    negate: bool
    dir_only: bool
    anchored: bool

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.base:
            if not rel.startswith(self.base + "/"):
                return False
            rel = rel[len(self.base) + 1 :]
        if self.anchored:
            return fnmatch.fnmatchcase(rel, self.pattern) or fnmatch.fnmatchcase(rel, self.pattern + "/**")
        name = rel.rsplit("/", 1)[-1]
        return fnmatch.fnmatchcase(name, self.pattern) or fnmatch.fnmatchcase(rel, "*/" + self.pattern)


def _rules(gitignore: Path, base: str) -> list[_Rule]:
    rules = []
    for raw in gitignore.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        line = line[1:] if negate else line
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        rules.append(_Rule(base, line.lstrip("/").replace("**/", "*"), negate, dir_only, anchored))
    return rules


def _ignored(rules: list[_Rule], rel: str, is_dir: bool) -> bool:
    verdict = False
    for rule in rules:  # the last matching rule wins, as in git
        if rule.matches(rel, is_dir):
            verdict = not rule.negate
    return verdict


def walk_markdown(root: Path) -> tuple[list[tuple[str, bytes]], list[str]]:
    """(relative path, bytes) of every markdown file under root that .gitignore does not exclude,
    sorted; and the files skipped with the reason."""
    files: list[tuple[str, bytes]] = []
    skipped: list[str] = []
    rules: list[_Rule] = []

    def visit(folder: Path, rel_folder: str) -> None:
        gitignore = folder / ".gitignore"
        if gitignore.is_file():
            rules.extend(_rules(gitignore, rel_folder))
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            rel = f"{rel_folder}/{entry.name}" if rel_folder else entry.name
            if entry.name == ".git" or entry.is_symlink():
                continue
            is_dir = entry.is_dir()
            if _ignored(rules, rel, is_dir):
                continue
            if is_dir:
                visit(entry, rel)
            elif entry.suffix.lower() in MARKDOWN:
                if entry.stat().st_size > MAX_FILE_BYTES:
                    skipped.append(f"{rel}: larger than {MAX_FILE_BYTES:,} bytes")
                    continue
                files.append((rel, entry.read_bytes()))

    visit(root, "")
    return files, skipped


def _text(data: bytes) -> str | None:
    """The file as text, or None when it is binary (NUL bytes, or not UTF-8)."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


# ---- ingesting ------------------------------------------------------------------------------


class Ingester:
    def __init__(
        self,
        pool: asyncpg.Pool,
        embed: EmbedFn,
        count_tokens: chunker.CountFn,
        redact: RedactMode = "mask",
    ) -> None:
        self.pool = pool
        self.embed = embed
        self.count_tokens = count_tokens
        self.redact = redact

    async def ingest_files(
        self,
        principal: str,
        scope: str,
        repo_name: str,
        files: list[tuple[str, bytes]],
        progress: Callable[[int], Any] | None = None,
    ) -> IngestReport:
        validation.check_scope(scope)
        if not repo_name or len(repo_name) > 200:
            raise InvalidArgument("repo must be a name of 1-200 characters (e.g. the repository slug)")
        report = IngestReport(files=len(files))
        async with self.pool.acquire() as conn:
            known = await documents_repo.known_files(conn, scope, repo_name)
        # Every file is read and checked for secrets before any is written, so a refusal
        # (HM_REDACT=refuse) leaves the whole tree unwritten. The content hash is the file's own,
        # so an unchanged file is still recognised as one.
        scan = Redactor(self.redact)
        plan: list[tuple[str, str | None, str]] = []
        for path, data in files:
            text = _text(data)
            digest = hashlib.sha256(data).hexdigest()
            old = known.get(path)
            unchanged = old is not None and old["content_hash"] == digest and old["retired_at"] is None
            if text is not None and not unchanged:
                text = scan.text(text, path)
            plan.append((path, text, digest))
        report.redacted = scan.report
        present = set()
        for path, text, digest in plan:
            present.add(path)
            if text is None:
                report.skipped.append(f"{path}: binary file (not UTF-8 text)")
            else:
                old = known.get(path)
                if old is not None and old["content_hash"] == digest and old["retired_at"] is None:
                    report.unchanged += 1
                elif text.strip():
                    await self._write_file(principal, scope, repo_name, path, text, digest, old, report)
            if progress is not None:
                progress(1)
        gone = [p for p, r in known.items() if p not in present and r["retired_at"] is None]
        for path in gone:
            await self._retire(principal, scope, repo_name, path, known[path]["chunk_ids"])
            report.retired += 1
        return report

    async def _write_file(
        self,
        principal: str,
        scope: str,
        repo_name: str,
        path: str,
        text: str,
        digest: str,
        old: asyncpg.Record | None,
        report: IngestReport,
    ) -> None:
        chunks = await chunker.chunk(text, self.count_tokens)
        if not chunks:
            return
        now = datetime.now(UTC)
        rows = []
        for ordinal, part in enumerate(chunks):
            description = f"{path}: {' > '.join(part.heading_path)}" if part.heading_path else path
            rows.append(
                new_memory(
                    memory_id=uuid.uuid4(),
                    scope=scope,
                    owner=principal,
                    kind="document",
                    content=part.text,
                    at=now,
                    type="document",
                    description=description[: validation.MAX_DESCRIPTION_CHARS],
                    repo=repo_name,
                    path=path,
                    heading_path=list(part.heading_path),
                    ordinal=ordinal,
                    source_ref=f"{repo_name}/{path}#{ordinal}",
                    metadata={"content_hash": digest, "tokens": part.tokens},
                )
            )
        vectors = await self.embed([embedding_text(r["description"], r["content"]) for r in rows])
        old_ids: list[uuid.UUID] = (
            list(old["chunk_ids"]) if old is not None and old["retired_at"] is None else []
        )
        closes: dict[int, list[uuid.UUID]] = {}
        for i, old_id in enumerate(old_ids):
            closes.setdefault(min(i, len(rows) - 1), []).append(old_id)
        async with self.pool.acquire() as conn, conn.transaction():
            await rawlog.lock_head(conn)
            live_old = await documents_repo.heads(conn, old_ids)
            for i, row in enumerate(rows):
                mine = [c for c in closes.get(i, []) if c in live_old]
                row["supersedes"] = mine[0] if mine else None
                closes[i] = mine
            await repo.insert_memories(conn, rows, list(vectors))
            for i, row in enumerate(rows):
                for closed in closes[i]:
                    await repo.close_memory(conn, closed, row["id"], now)
            await rawlog.append_many(
                conn,
                [
                    rawlog.Entry(
                        id=row["id"],
                        scope=scope,
                        kind="document",
                        operation="ingest",
                        author=principal,
                        target_id=row["id"],
                        payload=payloads.create(row, closes=closes[i] or None),
                    )
                    for i, row in enumerate(rows)
                ],
            )
            await entities.link_many(
                conn, [(r["id"], scope, r["description"], r["content"], now) for r in rows]
            )
            await documents_repo.record_file(
                conn, scope, repo_name, path, digest, [r["id"] for r in rows], now
            )
        if old is None or old["retired_at"] is not None:
            report.added += 1
        else:
            report.changed += 1
        report.chunks_written += len(rows)

    async def _retire(
        self, principal: str, scope: str, repo_name: str, path: str, chunk_ids: list[uuid.UUID]
    ) -> None:
        now = datetime.now(UTC)
        async with self.pool.acquire() as conn, conn.transaction():
            await rawlog.lock_head(conn)
            live = await documents_repo.retire_chunks(conn, list(chunk_ids), now)
            await rawlog.append_many(
                conn,
                [
                    rawlog.Entry(
                        scope=scope,
                        kind="document",
                        operation="retire",
                        author=principal,
                        target_id=i,
                        payload=payloads.event("retire", i, now, path=path),
                    )
                    for i in live
                ],
            )
            await documents_repo.retire_file(conn, scope, repo_name, path, now)
