-- The core store: embedding pin, the append-only raw log with its hash chain, curated memories,
-- and the search log. Vector columns are added by the embedding pin (hypermnesia/db.py), because
-- their dimension is the model's, known only when the first model is pinned.

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE embedding_pin (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    model_id   text NOT NULL,
    dimension  integer NOT NULL CHECK (dimension > 0),
    pinned_at  timestamptz NOT NULL DEFAULT now()
);

-- Raw log: every write appends one record. record_hash = sha256(canonical row || content_sha256
-- || record_hash at seq-1); the text lives in record_texts so a GDPR purge can remove it while
-- the chain still verifies.
CREATE TABLE records (
    id               uuid PRIMARY KEY,
    seq              bigint NOT NULL UNIQUE CHECK (seq > 0),
    scope            text NOT NULL,
    kind             text NOT NULL,
    operation        text NOT NULL,
    target_id        uuid,
    author           text NOT NULL,
    source_ref       text,
    prev_source_ref  text,
    thread_id        text,
    topic_id         text,
    created_at       timestamptz NOT NULL,
    content_sha256   text NOT NULL,
    record_hash      text NOT NULL,
    UNIQUE (scope, source_ref)
);
CREATE INDEX records_target_idx ON records (target_id);

CREATE TABLE record_texts (
    record_id  uuid PRIMARY KEY REFERENCES records (id),
    payload    text NOT NULL
);

-- The head of the chain. Appends lock this row, which makes seq gapless and the chain linear
-- under any number of concurrent writers.
CREATE TABLE record_chain (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    last_seq   bigint NOT NULL,
    last_hash  text NOT NULL
);
INSERT INTO record_chain (last_seq, last_hash) VALUES (0, repeat('0', 64));

CREATE FUNCTION records_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'records is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'write a new record (a correction supersedes the old one)';
END $$;

CREATE TRIGGER records_no_update BEFORE UPDATE OR DELETE ON records
    FOR EACH ROW EXECUTE FUNCTION records_append_only();
CREATE TRIGGER records_no_truncate BEFORE TRUNCATE ON records
    FOR EACH STATEMENT EXECUTE FUNCTION records_append_only();

-- Curated memories: derived from the raw log, rebuildable from it.
CREATE TABLE memories (
    id                uuid PRIMARY KEY,
    scope             text NOT NULL,
    repo              text,
    owner_id          text NOT NULL,
    type              text NOT NULL DEFAULT 'note',
    kind              text NOT NULL DEFAULT 'semantic'
                      CHECK (kind IN ('core', 'working', 'episodic', 'semantic', 'procedural', 'document')),
    description       text NOT NULL DEFAULT '',
    content           text NOT NULL,
    tags              text[] NOT NULL DEFAULT '{}',
    metadata          jsonb NOT NULL DEFAULT '{}',
    importance        real NOT NULL DEFAULT 1.0,
    decay_class       text NOT NULL DEFAULT 'slow' CHECK (decay_class IN ('none', 'slow', 'medium', 'fast')),
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    last_accessed_at  timestamptz NOT NULL,
    archived_at       timestamptz,
    expires_at        timestamptz,
    access_count      bigint NOT NULL DEFAULT 0,
    valid_from        timestamptz NOT NULL,
    valid_to          timestamptz,
    supersedes        uuid,
    superseded_by     uuid,
    source_ref        text,
    thread_id         text,
    -- Composite lexical index: stemmed English for meaning, `simple` for exact tokens
    -- such as identifiers, error codes and names the stemmer would mangle.
    search_tsv        tsvector GENERATED ALWAYS AS (
                          to_tsvector('english'::regconfig, description || ' ' || content)
                          || to_tsvector('simple'::regconfig, description || ' ' || content)
                      ) STORED
);
CREATE INDEX memories_scope_idx ON memories (scope) WHERE archived_at IS NULL AND superseded_by IS NULL;
CREATE INDEX memories_tsv_idx ON memories USING gin (search_tsv);
CREATE INDEX memories_tags_idx ON memories USING gin (tags);

CREATE TABLE search_log (
    id              bigserial PRIMARY KEY,
    at              timestamptz NOT NULL DEFAULT now(),
    principal       text NOT NULL,
    scopes          text[] NOT NULL,
    query           text NOT NULL,
    k               integer NOT NULL,
    candidates      integer NOT NULL,
    hits            integer NOT NULL,
    top_score       real,
    top_similarity  real,
    latency_ms      real NOT NULL,
    stage_ms        jsonb NOT NULL DEFAULT '{}',
    degraded        text[] NOT NULL DEFAULT '{}'
);
CREATE INDEX search_log_at_idx ON search_log (at);
