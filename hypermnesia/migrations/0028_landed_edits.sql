-- Three changes that were made by editing migrations after they had landed, for the databases
-- that applied those files before the edits (the migrator kept only their names then, so they
-- never received them). Each statement does nothing where the edit did arrive: a database
-- migrated after the edits, or a new one. The migrator now keeps each file's sha256 and refuses
-- to start when a landed file changes (hypermnesia/migrator.py); and its records become its own.

-- From 0005: a search sums a term's postings over every scope (the cost of reading it from the
-- GIN index).
CREATE INDEX IF NOT EXISTS lexical_df_term_idx ON lexical_df (term);

-- From 0006: access bumps stay heap-only (HOT) updates at fillfactor 70 (see 0006 for why).
-- Applies to pages written from now on.
ALTER TABLE memories SET (fillfactor = 70);

-- From 0027: reasons written before 0027 (by the old trigger, so marked stale before 0027 was
-- applied) for a premise in another scope, or gone, lose the ids: the same words without them.
-- Only reasons still in the old form: the rewrite of one already rewritten would give NULL, and
-- reasons written since by 0027's trigger are right as they are (one naming a premise deleted
-- since, in the conclusion's own scope, keeps its id).
UPDATE memories m
   SET stale_because = 'a premise in another scope was '
       || split_part(substring(m.stale_because FROM '^premise [0-9a-f-]{36} was (.*)$'), ' by ', 1)
 WHERE m.stale_premise IS NOT NULL
   AND m.stale_because ~ '^premise [0-9a-f-]{36} was '
   AND m.stale_at < (SELECT applied_at FROM schema_migrations WHERE version = '0027_stale_premise.sql')
   AND NOT EXISTS (SELECT 1 FROM memories p WHERE p.id = m.stale_premise AND p.scope = m.scope);

-- The migrator's records are its own: 0025 granted every table to hm_service, the role callers'
-- requests run as, and no request reads or writes these (a deleted row re-applies a migration at
-- the next start; a rewritten sha256 hides an edited one).
REVOKE ALL ON schema_migrations FROM hm_service;
