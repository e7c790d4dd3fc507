-- The 3D map (issue 20): a position per memory from its embedding. Derived data, like the
-- lexical statistics: curation keeps it (services/curation/projection.py), any of it can be
-- recomputed from the vectors, and none of it is in the raw log.

-- The linear basis a position is computed with: position_k = (embedding . axis_k - offset_k) / scale_k
-- (offset_k = mean . axis_k). Each refit adds a row; the newest is current. The vectors have no
-- declared dimension here because the embedding pin sizes `memories.embedding` after migrations;
-- `dims` says which vectors a basis can project.
CREATE TABLE viz_basis (
    id          bigserial PRIMARY KEY,
    method      text NOT NULL CHECK (method IN ('pca')),
    -- The embedding model and dimension of the vectors it was fitted on: after a reindex to
    -- another model the basis no longer means anything, and the next pass refits.
    model_id    text NOT NULL,
    dims        integer NOT NULL,
    axis_x      vector NOT NULL,
    axis_y      vector NOT NULL,
    axis_z      vector NOT NULL,
    offsets     real[] NOT NULL,
    scales      real[] NOT NULL,
    -- How many memories had a vector when the basis was fitted: the growth a refit waits for.
    fitted_on   bigint NOT NULL,
    sample      integer NOT NULL,
    fitted_at   timestamptz NOT NULL DEFAULT now(),
    fit_ms      real NOT NULL DEFAULT 0
);

-- A memory's stored position, under the basis it was computed with. No foreign key: a deleted
-- memory's position is never read (reads join memories) and the next pass drops it; a foreign
-- key would make every delete of memories probe this table.
CREATE TABLE memory_positions (
    memory_id   uuid PRIMARY KEY,
    basis_id    bigint NOT NULL,
    x           real NOT NULL,
    y           real NOT NULL,
    z           real NOT NULL
);
CREATE INDEX memory_positions_basis_idx ON memory_positions (basis_id);

-- The one formula from a vector to a position under a basis: curation stores it, retrieval computes
-- it on read for a memory written since the last pass (vector_dims must match b.dims: callers check).
CREATE FUNCTION hm_viz_position(e vector, b viz_basis) RETURNS real[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY[
        ((-(e <#> b.axis_x)) - b.offsets[1]) / b.scales[1],
        ((-(e <#> b.axis_y)) - b.offsets[2]) / b.scales[2],
        ((-(e <#> b.axis_z)) - b.offsets[3]) / b.scales[3]
    ]::real[]
$$;
