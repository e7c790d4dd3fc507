-- What consolidation has already read (issue 27): a mark per memory and step (facts, summary,
-- procedures), so that a run can take everything no run has consolidated yet, whatever its age,
-- without reading the whole history again (services/curation/coverage.py). `seen_updated_at` is
-- the memory's updated_at when it was read: a memory edited since counts as not yet consolidated.
-- A mark holds no memory text; it goes with its memory.
CREATE TABLE consolidation_covered (
    memory_id uuid NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    step text NOT NULL,
    seen_updated_at timestamptz NOT NULL,
    covered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (memory_id, step)
);

-- Only consolidation, the service's internal work (row_security.internal), reads and writes the
-- marks; no caller's request does, so the role requests run as has no access (as with tokens, 0026).
REVOKE ALL ON consolidation_covered FROM hm_service;
