-- A stale conclusion names the premise that changed, but only to readers of the premise's scope.
--
-- stale_because used to read 'premise <id> was superseded by <id>' whatever the scopes, so a
-- reader of a conclusion learnt ids from a scope it may not see; and hm_clear_stale found the
-- conclusions a restored premise had made stale by that text. The premise now has a column of
-- its own (stale_premise, what hm_clear_stale matches), and the text names ids only when the
-- conclusion shares the premise's scope: otherwise 'a premise in another scope was <change>',
-- with no id (supersede and its successor stay in one scope, so the successor's id goes too).

ALTER TABLE memories ADD COLUMN stale_premise uuid;
UPDATE memories
   SET stale_premise = substring(stale_because FROM '^premise ([0-9a-f-]{36}) ')::uuid
 WHERE stale_because ~ '^premise [0-9a-f-]{36} ';
-- Reasons written before, for a premise in another scope (or gone, as the trigger reads it):
-- the same words without the ids.
UPDATE memories m
   SET stale_because = 'a premise in another scope was '
       || split_part(substring(m.stale_because FROM '^premise [0-9a-f-]{36} was (.*)$'), ' by ', 1)
 WHERE m.stale_premise IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM memories p WHERE p.id = m.stale_premise AND p.scope = m.scope);

DO $$
DECLARE
    path text := format('%I, pg_temp', current_schema());
BEGIN
    -- Marks every memory derived (transitively) from `premise` stale, naming the premise and the
    -- change to readers of its scope. `premise_scope` is given by the trigger (a deleted premise
    -- is gone by the time it runs); the two-argument form looks it up.
    EXECUTE format($f$
        CREATE FUNCTION hm_mark_stale(premise uuid, change text, premise_scope text) RETURNS void
        LANGUAGE sql SECURITY DEFINER SET search_path = %s AS $body$
            WITH RECURSIVE down(id) AS (
                SELECT e.derived_id FROM evidence_edges e WHERE e.premise_id = premise
                UNION
                SELECT e.derived_id FROM evidence_edges e JOIN down ON e.premise_id = down.id
            )
            UPDATE memories m
               SET stale_at = coalesce(m.stale_at, now()),
                   stale_premise = CASE WHEN m.stale_at IS NULL THEN premise ELSE m.stale_premise END,
                   stale_because = coalesce(m.stale_because,
                       CASE WHEN m.scope = premise_scope THEN 'premise ' || premise || ' was ' || change
                            ELSE 'a premise in another scope was ' || split_part(change, ' by ', 1) END)
              FROM down WHERE m.id = down.id;
        $body$ $f$, path);

    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION hm_mark_stale(premise uuid, change text) RETURNS void
        LANGUAGE sql SECURITY DEFINER SET search_path = %s AS $body$
            SELECT hm_mark_stale(premise, change, (SELECT scope FROM memories WHERE id = premise));
        $body$ $f$, path);

    -- Clears what `premise` made stale, when it comes back (a restore): only the conclusions it
    -- made stale, and only when none of their other premises is still not live.
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION hm_clear_stale(premise uuid) RETURNS void
        LANGUAGE sql SECURITY DEFINER SET search_path = %s AS $body$
            WITH RECURSIVE down(id) AS (
                SELECT e.derived_id FROM evidence_edges e WHERE e.premise_id = premise
                UNION
                SELECT e.derived_id FROM evidence_edges e JOIN down ON e.premise_id = down.id
            )
            UPDATE memories m SET stale_at = NULL, stale_because = NULL, stale_premise = NULL
              FROM down
             WHERE m.id = down.id
               AND m.stale_premise = premise
               AND NOT EXISTS (
                   SELECT 1 FROM evidence_edges e2 LEFT JOIN memories p ON p.id = e2.premise_id
                    WHERE e2.derived_id = m.id AND e2.premise_id <> premise
                      -- conclusions cleared together (a chain below the premise) do not hold each other back
                      AND e2.premise_id NOT IN (SELECT id FROM down)
                      AND (p.id IS NULL OR p.archived_at IS NOT NULL OR p.superseded_by IS NOT NULL
                           OR p.stale_at IS NOT NULL)
               );
        $body$ $f$, path);

    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION hm_propagate_change() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %s AS $body$
        BEGIN
            IF TG_OP = 'DELETE' THEN
                PERFORM hm_mark_stale(OLD.id, 'deleted', OLD.scope);
                RETURN OLD;
            END IF;
            IF OLD.superseded_by IS NULL AND NEW.superseded_by IS NOT NULL THEN
                PERFORM hm_mark_stale(NEW.id, 'superseded by ' || NEW.superseded_by, NEW.scope);
            ELSIF OLD.archived_at IS NULL AND NEW.archived_at IS NOT NULL THEN
                PERFORM hm_mark_stale(NEW.id, 'archived', NEW.scope);
            ELSIF OLD.archived_at IS NOT NULL AND NEW.archived_at IS NULL THEN
                PERFORM hm_clear_stale(NEW.id);
            ELSIF OLD.content IS DISTINCT FROM NEW.content OR OLD.description IS DISTINCT FROM NEW.description THEN
                PERFORM hm_mark_stale(NEW.id, 'updated', NEW.scope);
            ELSIF OLD.stale_at IS NULL AND NEW.stale_at IS NOT NULL THEN
                -- A conclusion marked stale by hand makes what rests on it stale too.
                PERFORM hm_mark_stale(NEW.id, 'stale', NEW.scope);
            END IF;
            RETURN NEW;
        END $body$ $f$, path);
END $$;

-- As 0026 for the functions it covers: callable by the owner's triggers, and by no other role.
REVOKE EXECUTE ON FUNCTION hm_mark_stale(uuid, text, text) FROM PUBLIC;
