-- The structural model (tiers 0/1: the project map, a path's rules): components, constraints and component
-- relationships, loaded per repo from a map file in that repo. Slugs are unique per repo, not
-- globally. A load replaces all rows of its repo in one transaction (services/curation/structure_repo.py).

-- One row per repo with a loaded map: its presence is what "the repo has a map" means, even when
-- the map holds only global constraints.
CREATE TABLE structure_maps (
    repo           text PRIMARY KEY,
    source_name    text NOT NULL,
    source_sha256  text NOT NULL,
    loaded_by      text NOT NULL,
    loaded_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE components (
    repo            text NOT NULL REFERENCES structure_maps (repo) ON DELETE CASCADE,
    slug            text NOT NULL,
    name            text NOT NULL,
    parent_slug     text,
    responsibility  text NOT NULL DEFAULT '',
    globs           text[] NOT NULL DEFAULT '{}',
    priority        integer NOT NULL DEFAULT 0,
    ordinal         integer NOT NULL,            -- position in the file, for stable listings
    PRIMARY KEY (repo, slug),
    CHECK (parent_slug IS DISTINCT FROM slug),
    -- Deferred so a map's rows can be inserted in file order whatever the parent order.
    FOREIGN KEY (repo, parent_slug) REFERENCES components (repo, slug) DEFERRABLE INITIALLY DEFERRED
);

CREATE TABLE constraints (
    repo            text NOT NULL REFERENCES structure_maps (repo) ON DELETE CASCADE,
    id              text NOT NULL,
    component_slug  text,                        -- NULL: a global constraint
    kind            text NOT NULL CHECK (kind IN ('invariant', 'adr', 'convention')),
    severity        text NOT NULL CHECK (severity IN ('must', 'should', 'info')),
    status          text NOT NULL CHECK (status IN ('active', 'proposed', 'retired')),
    rule_text       text NOT NULL,
    rationale       text NOT NULL DEFAULT '',
    ordinal         integer NOT NULL,
    PRIMARY KEY (repo, id),
    FOREIGN KEY (repo, component_slug) REFERENCES components (repo, slug) DEFERRABLE INITIALLY DEFERRED
);
CREATE INDEX constraints_component_idx ON constraints (repo, component_slug) WHERE status = 'active';

CREATE TABLE component_relationships (
    repo       text NOT NULL REFERENCES structure_maps (repo) ON DELETE CASCADE,
    from_slug  text NOT NULL,
    to_slug    text NOT NULL,
    kind       text NOT NULL CHECK (kind IN ('depends_on', 'calls', 'uses')),
    ordinal    integer NOT NULL,
    PRIMARY KEY (repo, from_slug, to_slug),
    CHECK (from_slug <> to_slug),
    FOREIGN KEY (repo, from_slug) REFERENCES components (repo, slug) DEFERRABLE INITIALLY DEFERRED,
    FOREIGN KEY (repo, to_slug) REFERENCES components (repo, slug) DEFERRABLE INITIALLY DEFERRED
);
