-- The memory graph (memory is a graph, but recall stays bounded): evidence edges that
-- say why a conclusion exists, perspective (whose point of view, about whom), staleness that
-- follows a changed premise, and the Dreamer's proposals awaiting a decision.

-- Evidence: derived -> premise. A conclusion rests on its premises; the graph must stay acyclic,
-- whoever writes to it (the trigger below also refuses a raw-SQL insert that closes a cycle).
CREATE TABLE evidence_edges (
    derived_id  uuid NOT NULL,
    premise_id  uuid NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    created_by  text NOT NULL,
    PRIMARY KEY (derived_id, premise_id),
    CHECK (derived_id <> premise_id)
);
CREATE INDEX evidence_edges_premise_idx ON evidence_edges (premise_id);

CREATE FUNCTION hm_evidence_no_cycle() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- One writer at a time: two inserts that each close half of a cycle must not both pass.
    PERFORM pg_advisory_xact_lock(hashtextextended('hm:evidence', 0));
    -- A cycle exists when the new premise already rests (transitively) on the new derived row.
    IF EXISTS (
        WITH RECURSIVE up(id) AS (
            SELECT NEW.premise_id
            UNION
            SELECT e.premise_id FROM evidence_edges e JOIN up ON e.derived_id = up.id
        )
        SELECT 1 FROM up WHERE id = NEW.derived_id
    ) THEN
        RAISE EXCEPTION 'evidence edge % -> % would close a cycle', NEW.derived_id, NEW.premise_id
            USING ERRCODE = 'check_violation',
                  HINT = 'a conclusion cannot rest, even indirectly, on itself';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER evidence_edges_no_cycle BEFORE INSERT OR UPDATE ON evidence_edges
    FOR EACH ROW EXECUTE FUNCTION hm_evidence_no_cycle();

-- Perspective: identity nodes, owned by their author; a memory may say whose point of view it
-- records (observer) and about whom (observed).
CREATE TABLE identities (
    id          uuid PRIMARY KEY,
    scope       text NOT NULL,
    name        text NOT NULL,
    owner_id    text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (scope, name)
);
ALTER TABLE memories ADD COLUMN observer uuid;
ALTER TABLE memories ADD COLUMN observed uuid;

-- Staleness: a conclusion whose premise changed. Derived from the graph (like the access
-- counters, not part of the raw log's memory columns); the trigger below keeps it current.
ALTER TABLE memories ADD COLUMN stale_at timestamptz;
ALTER TABLE memories ADD COLUMN stale_because text;
CREATE INDEX memories_stale_idx ON memories (scope) WHERE stale_at IS NOT NULL;

-- Marks every memory derived (transitively) from `premise` stale, naming the premise and the change.
CREATE FUNCTION hm_mark_stale(premise uuid, change text) RETURNS void LANGUAGE sql AS $$
    WITH RECURSIVE down(id) AS (
        SELECT e.derived_id FROM evidence_edges e WHERE e.premise_id = premise
        UNION
        SELECT e.derived_id FROM evidence_edges e JOIN down ON e.premise_id = down.id
    )
    UPDATE memories m
       SET stale_at = coalesce(m.stale_at, now()),
           stale_because = coalesce(m.stale_because, 'premise ' || premise || ' was ' || change)
      FROM down WHERE m.id = down.id;
$$;

-- Clears what `premise` made stale, when it comes back (a restore): only the conclusions whose
-- stated reason is this premise, and only when none of their other premises is still not live.
CREATE FUNCTION hm_clear_stale(premise uuid) RETURNS void LANGUAGE sql AS $$
    WITH RECURSIVE down(id) AS (
        SELECT e.derived_id FROM evidence_edges e WHERE e.premise_id = premise
        UNION
        SELECT e.derived_id FROM evidence_edges e JOIN down ON e.premise_id = down.id
    )
    UPDATE memories m SET stale_at = NULL, stale_because = NULL
      FROM down
     WHERE m.id = down.id
       AND m.stale_because LIKE 'premise ' || premise || ' %'
       AND NOT EXISTS (
           SELECT 1 FROM evidence_edges e2 LEFT JOIN memories p ON p.id = e2.premise_id
            WHERE e2.derived_id = m.id AND e2.premise_id <> premise
              -- conclusions cleared together (a chain below the premise) do not hold each other back
              AND e2.premise_id NOT IN (SELECT id FROM down)
              AND (p.id IS NULL OR p.archived_at IS NOT NULL OR p.superseded_by IS NOT NULL
                   OR p.stale_at IS NOT NULL)
       );
$$;

CREATE FUNCTION hm_propagate_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM hm_mark_stale(OLD.id, 'deleted');
        RETURN OLD;
    END IF;
    IF OLD.superseded_by IS NULL AND NEW.superseded_by IS NOT NULL THEN
        PERFORM hm_mark_stale(NEW.id, 'superseded by ' || NEW.superseded_by);
    ELSIF OLD.archived_at IS NULL AND NEW.archived_at IS NOT NULL THEN
        PERFORM hm_mark_stale(NEW.id, 'archived');
    ELSIF OLD.archived_at IS NOT NULL AND NEW.archived_at IS NULL THEN
        PERFORM hm_clear_stale(NEW.id);
    ELSIF OLD.content IS DISTINCT FROM NEW.content OR OLD.description IS DISTINCT FROM NEW.description THEN
        PERFORM hm_mark_stale(NEW.id, 'updated');
    ELSIF OLD.stale_at IS NULL AND NEW.stale_at IS NOT NULL THEN
        -- A conclusion that went stale makes what rests on it stale too (the recursion above
        -- already covers the graph below it; this covers a conclusion marked stale by hand).
        PERFORM hm_mark_stale(NEW.id, 'stale');
    END IF;
    RETURN NEW;
END $$;

-- Only rows that are premises fire it (the WHEN keeps access bumps, the common update, free).
CREATE TRIGGER memories_propagate_update AFTER UPDATE OF content, description, superseded_by, archived_at, stale_at
    ON memories FOR EACH ROW
    WHEN (OLD.content IS DISTINCT FROM NEW.content OR OLD.description IS DISTINCT FROM NEW.description
          OR OLD.superseded_by IS DISTINCT FROM NEW.superseded_by OR OLD.archived_at IS DISTINCT FROM NEW.archived_at
          OR OLD.stale_at IS DISTINCT FROM NEW.stale_at)
    EXECUTE FUNCTION hm_propagate_change();
CREATE TRIGGER memories_propagate_delete AFTER DELETE ON memories
    FOR EACH ROW EXECUTE FUNCTION hm_propagate_change();

-- The Dreamer's proposals: derived memories, revisions, retirements and suggested supersedes that
-- wait for a decision (a person, or an agent through a tool). The Dreamer never approves.
CREATE TABLE proposals (
    id              uuid PRIMARY KEY,
    scope           text NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('fact', 'procedure', 'summary', 'revision', 'retirement',
                                                  'contradiction')),
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'rejected')),
    content         text NOT NULL,
    description     text NOT NULL DEFAULT '',
    rationale       text NOT NULL,
    evidence        uuid[] NOT NULL,
    supersedes      uuid,
    mode            text NOT NULL CHECK (mode IN ('llm', 'extractive')),
    -- What the proposal rests on (kind + sorted evidence + target): never proposed twice, whatever
    -- was decided the first time.
    evidence_key    text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    decided_by      text,
    decided_at      timestamptz,
    decision_reason text,
    result_id       uuid,
    UNIQUE (scope, evidence_key)
);
CREATE INDEX proposals_pending_idx ON proposals (scope, created_at) WHERE status = 'pending';

-- The optional LLM's daily token budget, counted per UTC day.
CREATE TABLE llm_usage (
    day     date PRIMARY KEY,
    tokens  bigint NOT NULL DEFAULT 0,
    calls   bigint NOT NULL DEFAULT 0
);
