-- The delivery log (issue 30 item 3): what each agent was given. One row per answer that delivered
-- memories (a search, a context block, a file's rules, a Dialectic answer): who, in which session
-- and thread, when, the request, the ids with their scores, and the sha256 of the exact bytes the
-- client received. Rows form a sha256 chain of their own along `seq`, as the raw log does
-- (services/curation/deliveries.py): entry_hash = sha256(canonical row + "\n" + prev_hash).
CREATE TABLE deliveries (
    seq          bigint PRIMARY KEY,
    principal    text NOT NULL,
    session      text NOT NULL DEFAULT '',
    thread       text NOT NULL DEFAULT '',
    operation    text NOT NULL,
    transport    text NOT NULL,
    delivered_at timestamptz NOT NULL,
    request      text NOT NULL,             -- the request's JSON, as the operation read it
    scopes       text[] NOT NULL CHECK (cardinality(scopes) > 0), -- what it read: who may see it
    items        text NOT NULL,             -- JSON: [{"id", "score"}], in the order delivered
    text_sha256  text NOT NULL,
    text_bytes   bigint NOT NULL,
    prev_hash    text NOT NULL,
    entry_hash   text NOT NULL
);
CREATE INDEX deliveries_session_idx ON deliveries (session, seq) WHERE session <> '';
CREATE INDEX deliveries_time_idx ON deliveries (delivered_at);

-- The chain's head and its floor. Retention (HM_DELIVERY_RETENTION_DAYS) drops the oldest rows
-- and keeps, as the floor, the last dropped seq and its entry_hash: the first kept row's prev_hash,
-- from which a verify walks. Rows at or below the floor are the only ones that may be deleted.
CREATE TABLE delivery_chain (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    last_seq   bigint NOT NULL,
    last_hash  text NOT NULL,
    floor_seq  bigint NOT NULL,
    floor_hash text NOT NULL
);
INSERT INTO delivery_chain (last_seq, last_hash, floor_seq, floor_hash)
    VALUES (0, repeat('0', 64), 0, repeat('0', 64));

-- Append-only: no UPDATE, no TRUNCATE, and a DELETE only below the floor that retention moved
-- first (so a dropped row always leaves its hash behind as the boundary).
CREATE FUNCTION deliveries_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND OLD.seq <= (SELECT floor_seq FROM delivery_chain) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'deliveries is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'only retention drops rows, at or below the chain''s floor (delivery_chain)';
END $$;
CREATE TRIGGER deliveries_no_update BEFORE UPDATE OR DELETE ON deliveries
    FOR EACH ROW EXECUTE FUNCTION deliveries_append_only();
CREATE TRIGGER deliveries_no_truncate BEFORE TRUNCATE ON deliveries
    FOR EACH STATEMENT EXECUTE FUNCTION deliveries_append_only();

-- Row-level security as for fusion_estimates (0029): a caller's listing, acting as hm_service,
-- reads a delivery only when its grants permit every scope the delivery read. Appends and
-- retention are the service's own work (the owner): hm_service reads and nothing more.
ALTER TABLE deliveries ENABLE ROW LEVEL SECURITY;
CREATE POLICY deliveries_read ON deliveries FOR SELECT TO hm_service
    USING (NOT EXISTS (SELECT 1 FROM unnest(scopes) AS s
                       WHERE NOT s LIKE ANY ((SELECT hm_grant_patterns('read'))::text[])));
GRANT SELECT ON deliveries TO hm_service;
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON deliveries FROM hm_service;
REVOKE ALL ON delivery_chain FROM hm_service;
