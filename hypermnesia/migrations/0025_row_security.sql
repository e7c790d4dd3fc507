-- Row-level security (issue 21): defence in depth under the services' own scope checks. A request
-- made for a caller runs as the role hm_service with the caller's grants in two settings
-- (hypermnesia/row_security.py sets them on every acquire); the policies below let it read and
-- write only the rows of scopes those grants permit. A connection as hm_service that set nothing
-- reads and writes nothing. The owner (migrations, admin tooling, the services' internal work:
-- background jobs, admin RPCs) is not subject: RLS is enabled, not forced.

-- The role is cluster-wide: the first database's migration creates it. Creating it needs
-- CREATEROLE; without it, a superuser creates it once (deploy/kubernetes/postgres.yaml does).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'hm_service') THEN
        BEGIN
            CREATE ROLE hm_service NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN NULL;  -- another database's migration, just now
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'role hm_service does not exist and % may not create it', current_user
                    USING HINT = format('as a superuser run: CREATE ROLE hm_service NOLOGIN; GRANT hm_service TO %I;'
                                        ' then restart the service', current_user);
        END;
    END IF;
    IF NOT pg_has_role(current_user, 'hm_service', 'MEMBER') THEN
        EXECUTE format('GRANT hm_service TO %I', current_user);
    END IF;
    -- What the services' requests do: read and write rows, never DDL (that is the owner's).
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO hm_service', current_schema());
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO hm_service', current_schema());
    EXECUTE format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA %I TO hm_service', current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO hm_service',
                   current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO hm_service',
                   current_schema());
END $$;

-- The LIKE patterns of the grants in hm.read_grants or hm.write_grants (kind 'read' or 'write'), a
-- text[] literal: a scope matches itself, a prefix ending in '*' everything that starts with it,
-- as hypermnesia/scopes.py `permits`. Unset or empty: no pattern, so nothing. Policies call it as
-- `(SELECT hm_grant_patterns(...))::text[]`, an init plan evaluated once per query, not once per row.
CREATE FUNCTION hm_grant_patterns(kind text) RETURNS text[] LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(
               replace(replace(replace(CASE WHEN right(g, 1) = '*' THEN left(g, -1) ELSE g END,
                                       '\', '\\'), '%', '\%'), '_', '\_')
               || CASE WHEN right(g, 1) = '*' THEN '%' ELSE '' END), '{}')
    FROM unnest(coalesce(nullif(current_setting('hm.' || kind || '_grants', true), '')::text[], '{}')) AS g
$$;

ALTER TABLE memories ENABLE ROW LEVEL SECURITY;
CREATE POLICY memories_read ON memories FOR SELECT TO hm_service
    USING (scope LIKE ANY ((SELECT hm_grant_patterns('read'))::text[]));
CREATE POLICY memories_insert ON memories FOR INSERT TO hm_service
    WITH CHECK (scope LIKE ANY ((SELECT hm_grant_patterns('write'))::text[]));
CREATE POLICY memories_update ON memories FOR UPDATE TO hm_service
    USING (scope LIKE ANY ((SELECT hm_grant_patterns('write'))::text[]))
    WITH CHECK (scope LIKE ANY ((SELECT hm_grant_patterns('write'))::text[]));
CREATE POLICY memories_delete ON memories FOR DELETE TO hm_service
    USING (scope LIKE ANY ((SELECT hm_grant_patterns('write'))::text[]));

-- The raw log is append-only (its triggers refuse UPDATE and DELETE): reads and appends only.
ALTER TABLE records ENABLE ROW LEVEL SECURITY;
CREATE POLICY records_read ON records FOR SELECT TO hm_service
    USING (scope LIKE ANY ((SELECT hm_grant_patterns('read'))::text[]));
CREATE POLICY records_append ON records FOR INSERT TO hm_service
    WITH CHECK (scope LIKE ANY ((SELECT hm_grant_patterns('write'))::text[]));

-- A record's text belongs to the record's scope. (record_chain, the chain's head, holds no text
-- and no scope: every append moves it, so it stays outside.)
ALTER TABLE record_texts ENABLE ROW LEVEL SECURITY;
CREATE POLICY record_texts_read ON record_texts FOR SELECT TO hm_service
    USING (EXISTS (SELECT 1 FROM records r WHERE r.id = record_id
                   AND r.scope LIKE ANY ((SELECT hm_grant_patterns('read'))::text[])));
CREATE POLICY record_texts_write ON record_texts FOR ALL TO hm_service
    USING (EXISTS (SELECT 1 FROM records r WHERE r.id = record_id
                   AND r.scope LIKE ANY ((SELECT hm_grant_patterns('write'))::text[])))
    WITH CHECK (EXISTS (SELECT 1 FROM records r WHERE r.id = record_id
                        AND r.scope LIKE ANY ((SELECT hm_grant_patterns('write'))::text[])));

-- An evidence edge belongs to its conclusion (derived_id): the edges of a conclusion the caller
-- cannot read are not there for it. The memories lookup is itself under memories' policies.
ALTER TABLE evidence_edges ENABLE ROW LEVEL SECURITY;
CREATE POLICY evidence_edges_read ON evidence_edges FOR SELECT TO hm_service
    USING (EXISTS (SELECT 1 FROM memories m WHERE m.id = derived_id
                   AND m.scope LIKE ANY ((SELECT hm_grant_patterns('read'))::text[])));
CREATE POLICY evidence_edges_write ON evidence_edges FOR ALL TO hm_service
    USING (EXISTS (SELECT 1 FROM memories m WHERE m.id = derived_id
                   AND m.scope LIKE ANY ((SELECT hm_grant_patterns('write'))::text[])))
    WITH CHECK (EXISTS (SELECT 1 FROM memories m WHERE m.id = derived_id
                        AND m.scope LIKE ANY ((SELECT hm_grant_patterns('write'))::text[])));

ALTER TABLE identities ENABLE ROW LEVEL SECURITY;
CREATE POLICY identities_read ON identities FOR SELECT TO hm_service
    USING (scope LIKE ANY ((SELECT hm_grant_patterns('read'))::text[]));
CREATE POLICY identities_write ON identities FOR ALL TO hm_service
    USING (scope LIKE ANY ((SELECT hm_grant_patterns('write'))::text[]))
    WITH CHECK (scope LIKE ANY ((SELECT hm_grant_patterns('write'))::text[]));

ALTER TABLE proposals ENABLE ROW LEVEL SECURITY;
CREATE POLICY proposals_read ON proposals FOR SELECT TO hm_service
    USING (scope LIKE ANY ((SELECT hm_grant_patterns('read'))::text[]));
CREATE POLICY proposals_write ON proposals FOR ALL TO hm_service
    USING (scope LIKE ANY ((SELECT hm_grant_patterns('write'))::text[]))
    WITH CHECK (scope LIKE ANY ((SELECT hm_grant_patterns('write'))::text[]));

-- The graph's invariants hold across scopes whoever's write fires them: a conclusion never
-- outlives its facts (staleness reaches conclusions in scopes the writer cannot see), a cycle is
-- refused even when half of it is out of sight, and a deleted memory's derived rows go with it.
-- They run as their owner (not subject to the policies), with a fixed search_path.
DO $$
DECLARE
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY['hm_evidence_no_cycle()', 'hm_mark_stale(uuid, text)', 'hm_clear_stale(uuid)',
                              'hm_propagate_change()', 'hm_forget_derived()', 'hm_version_text_hashes(uuid)']
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = %I, pg_temp', fn, current_schema());
    END LOOP;
END $$;
