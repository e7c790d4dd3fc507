-- Row-level security, narrowed (after 0025): what hm_service, the role callers' requests run as,
-- may do beyond the policies.
--
-- Tables outside the policies, and why: tokens are resolved and managed only by internal work (no
-- request acts as hm_service there), so hm_service loses them. The rest (search_log, entities,
-- memory_entities, documents, lexical_df/lexical_scope, memory_positions, embedding_store, the
-- structure maps, llm_usage) are derived from or keyed by memories and read by service code that
-- filters by scope; search_log (callers' queries) is written by internal bookkeeping. They keep
-- the grants of 0025.
REVOKE ALL ON tokens FROM hm_service;

-- The SECURITY DEFINER functions of 0025 act across scopes as their owner. Triggers fire them
-- whoever writes; a request may call only the two the services call directly
-- (services/curation/graph_repo.py mark_stale, services/curation/repo.py delete_memory), and no
-- other role may call any of them.
REVOKE EXECUTE ON FUNCTION hm_evidence_no_cycle(), hm_mark_stale(uuid, text), hm_clear_stale(uuid),
    hm_propagate_change(), hm_forget_derived(), hm_version_text_hashes(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION hm_mark_stale(uuid, text), hm_version_text_hashes(uuid) TO hm_service;

-- From Postgres 16 a membership may be granted without the right to SET ROLE to it (a CREATEROLE
-- user who creates a role gets it that way by default): 0025's MEMBER check passed, and then every
-- request failed. The services switch roles with SET ROLE, so they need SET.
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 160000
       AND NOT pg_has_role(current_user, 'hm_service', 'SET') THEN
        BEGIN
            EXECUTE format('GRANT hm_service TO %I WITH SET TRUE', current_user);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION '% may not SET ROLE hm_service, which requests run as', current_user
                USING HINT = format('as a superuser run: GRANT hm_service TO %I WITH SET TRUE;'
                                    ' then restart the service', current_user);
        END;
    END IF;
END $$;
