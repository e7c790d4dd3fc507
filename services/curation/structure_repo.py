"""Curation's SQL for the structural map: replace one repo's map in one transaction."""

from __future__ import annotations

import asyncpg

from hypermnesia.structure_map import StructureMap

# Loads of the same repo queue up behind each other; other repos are not blocked.
_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtextextended('hm:structure:' || $1, 0))"


async def replace_map(
    pool: asyncpg.Pool,
    repo: str,
    parsed: StructureMap,
    *,
    source_name: str,
    source_sha256: str,
    loaded_by: str,
) -> bool:
    """Swap the repo's map for `parsed`; True when an old map was replaced. Any failure rolls
    the whole transaction back, so readers see either the old map or the new one, never a mix."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(_LOCK_SQL, repo)
        # The cascade removes the old components, constraints and relationships with it.
        replaced = await conn.fetchval("DELETE FROM structure_maps WHERE repo = $1 RETURNING true", repo)
        await conn.execute(
            "INSERT INTO structure_maps (repo, source_name, source_sha256, loaded_by)"
            " VALUES ($1, $2, $3, $4)",
            repo,
            source_name,
            source_sha256,
            loaded_by,
        )
        await conn.executemany(
            "INSERT INTO components (repo, slug, name, parent_slug, responsibility, globs, priority, ordinal)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            [
                (repo, c.slug, c.name, c.parent, c.responsibility, list(c.globs), c.priority, n)
                for n, c in enumerate(parsed.components)
            ],
        )
        await conn.executemany(
            "INSERT INTO constraints (repo, id, component_slug, kind, severity, status, rule_text, rationale,"
            " ordinal) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            [
                (repo, c.id, c.component, c.kind, c.severity, c.status, c.text, c.rationale, n)
                for n, c in enumerate(parsed.constraints)
            ],
        )
        await conn.executemany(
            "INSERT INTO component_relationships (repo, from_slug, to_slug, kind, ordinal)"
            " VALUES ($1, $2, $3, $4, $5)",
            [(repo, r.from_slug, r.to_slug, r.kind, n) for n, r in enumerate(parsed.relationships)],
        )
    return bool(replaced)
