-- Adaptive fusion's knowledge of each scope key lives in Postgres and changes only at explicit,
-- logged refits (issue 27 item 3): every search observes the log ratio of its legs' clarities
-- (a search_log column, never read by a search), a refit fits a key's recent observations into an
-- estimate (hypermnesia/fusion_estimate.py, services/curation/fusion_refits.py), and searches
-- read the latest estimate of their key in the candidates' own statement. Ranking is then a
-- function of the store and the query: the same on every retrieval replica and after a restart.

-- The key of a list of searched scopes: its distinct scopes, sorted bytewise, one per line (a
-- scope holds no control characters, hypermnesia/validation.py check_scope). The same scopes in
-- any order are one key; a text key is compared with texteq, which is leakproof, so its index
-- serves a caller's lookup under row-level security (an array comparison's would not).
CREATE FUNCTION hm_scope_key(scopes text[]) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(string_agg(s, E'\n' ORDER BY s), '')
    FROM (SELECT DISTINCT unnest(scopes) COLLATE "C" AS s) d
$$;

-- A search's observation; NULL when it observed nothing (lexical-only, no lexical match, or a row
-- written before this migration). Refits read a key's newest observations through the index.
ALTER TABLE search_log ADD COLUMN clarity_log_ratio real;
CREATE INDEX search_log_observations_idx ON search_log (hm_scope_key(scopes), id)
    WHERE clarity_log_ratio IS NOT NULL;

-- One row per refit that changed an estimate: when, why, and how far into search_log it read.
CREATE TABLE fusion_refits (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    reason      text NOT NULL,   -- schedule, import, command (hypermnesia fusion refit), eval, bench
    scopes      text[],          -- limited to the keys holding one of these (an import's); NULL: every key
    last_log_id bigint NOT NULL, -- the newest search_log row when it ran
    keys        integer NOT NULL -- how many scope keys it gave a new estimate
);

-- Append-only: a key's estimate is its row of the latest refit; the earlier rows are its history.
CREATE TABLE fusion_estimates (
    scope_key    text NOT NULL,    -- hm_scope_key(scopes)
    refit_id     bigint NOT NULL REFERENCES fusion_refits (id),
    scopes       text[] NOT NULL,  -- the key's scopes, sorted
    estimate     double precision NOT NULL, -- what searches read
    mean         double precision NOT NULL, -- before shrinking toward the prior
    observations integer NOT NULL,
    last_log_id  bigint NOT NULL,  -- the newest observation it rests on
    PRIMARY KEY (scope_key, refit_id)
);

-- Row-level security as for the other tables keyed by scope (0025): a caller's search, acting as
-- hm_service, reads an estimate only when its grants permit every scope of the key (a search is
-- refused before that unless they do). Refits are the service's own work (the owner): hm_service
-- may read estimates and nothing more, and not the refits' own log.
ALTER TABLE fusion_estimates ENABLE ROW LEVEL SECURITY;
CREATE POLICY fusion_estimates_read ON fusion_estimates FOR SELECT TO hm_service
    USING (NOT EXISTS (SELECT 1 FROM unnest(scopes) AS s
                       WHERE NOT s LIKE ANY ((SELECT hm_grant_patterns('read'))::text[])));
GRANT SELECT ON fusion_estimates TO hm_service;
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON fusion_estimates FROM hm_service;
REVOKE ALL ON fusion_refits FROM hm_service;
REVOKE ALL ON SEQUENCE fusion_refits_id_seq FROM hm_service;
