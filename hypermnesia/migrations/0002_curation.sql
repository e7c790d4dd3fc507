-- Curation's additions: where a memory came from (thread order, document path and heading path,
-- state-object key), the document index, the entity index, and the indexes the write path and the
-- records API look things up by. Vector columns are never created here (the embedding pin does).

ALTER TABLE memories ADD COLUMN ordinal integer;           -- turn order in a thread, chunk order in a file
ALTER TABLE memories ADD COLUMN path text;                 -- document chunks: the file, relative to the repo
ALTER TABLE memories ADD COLUMN heading_path text[];       -- document chunks: the headings above the chunk
ALTER TABLE memories ADD COLUMN state_key text;            -- state objects: '<kind>/<key>'

CREATE INDEX memories_curation_source_ref_idx ON memories (scope, source_ref) WHERE source_ref IS NOT NULL;
CREATE INDEX memories_thread_ordinal_idx ON memories (scope, thread_id, ordinal) WHERE thread_id IS NOT NULL;
CREATE INDEX memories_curation_supersedes_idx ON memories (supersedes) WHERE supersedes IS NOT NULL;
CREATE INDEX memories_curation_state_idx ON memories (scope, state_key) WHERE state_key IS NOT NULL;
CREATE INDEX memories_curation_forget_idx ON memories (scope, last_accessed_at) WHERE archived_at IS NULL;
CREATE INDEX memories_curation_path_idx ON memories (scope, repo, path) WHERE path IS NOT NULL;

CREATE INDEX records_curation_scope_kind_time_idx ON records (scope, kind, created_at);
CREATE INDEX records_curation_thread_idx ON records (scope, thread_id) WHERE thread_id IS NOT NULL;

-- One row per ingested file: the hash that lets an unchanged file be skipped, and the chunks
-- (memories of kind 'document') that currently represent it.
CREATE TABLE documents (
    scope         text NOT NULL,
    repo          text NOT NULL,
    path          text NOT NULL,
    content_hash  text NOT NULL,
    chunk_ids     uuid[] NOT NULL DEFAULT '{}',
    ingested_at   timestamptz NOT NULL,
    retired_at    timestamptz,
    PRIMARY KEY (scope, repo, path)
);

-- Entity index: deterministic extraction, linked to the memories that mention them.
CREATE TABLE entities (
    id          bigserial PRIMARY KEY,
    scope       text NOT NULL,
    type        text NOT NULL,
    name        text NOT NULL,
    first_seen  timestamptz NOT NULL,
    last_seen   timestamptz NOT NULL,
    UNIQUE (scope, type, name)
);

CREATE TABLE memory_entities (
    memory_id  uuid NOT NULL,
    entity_id  bigint NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    PRIMARY KEY (memory_id, entity_id)
);
CREATE INDEX memory_entities_entity_idx ON memory_entities (entity_id);
