-- Retrieval: term frequencies a search can read cheaply.
--
-- BM25 needs each query term's frequency in a document. Reading it from the tsvector means
-- unnesting every lexeme of every candidate (about 36 us a row on a small machine: 150 ms for
-- 4,000 candidates). `lex_terms` keeps the composite lexemes once per occurrence, so a term's
-- frequency is `cardinality(array_positions(lex_terms, term))`, computed in C and only for the
-- terms the row matches (services/retrieval/repo.py).

CREATE FUNCTION hm_tsv_terms(tsv tsvector) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(u.lexeme), '{}')
    FROM unnest(tsv) AS u, generate_series(1, coalesce(cardinality(u.positions), 1))
$$;

-- Rows stay whole on their page (vector, tsvector and term list inline) up to about 4 KB: a search
-- reads those columns for every candidate, and a TOAST lookup per column per row was most of a
-- filtered search's time at 100,000 memories. The vector column (added by the embedding pin) is
-- stored MAIN (hypermnesia/db.py); an existing one is switched here, before the rewrite below.
ALTER TABLE memories SET (toast_tuple_target = 4080);
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'memories'::regclass AND attname = 'embedding'
               AND NOT attisdropped) THEN
        ALTER TABLE memories ALTER COLUMN embedding SET STORAGE MAIN;
    END IF;
END $$;

-- The column below rewrites the table and rebuilds its indexes; HNSW builds far faster when its
-- graph fits in memory.
SET LOCAL maintenance_work_mem = '512MB';

-- A generated column may not read another one, so the composite expression is repeated here.
ALTER TABLE memories ADD COLUMN lex_terms text[] GENERATED ALWAYS AS (
    hm_tsv_terms(
        to_tsvector('english'::regconfig, description || ' ' || content)
        || to_tsvector('simple'::regconfig, description || ' ' || content)
    )
) STORED;

-- Replaced by the per-term expression in services/retrieval/repo.py.
DROP FUNCTION hm_bm25(tsvector, integer, text[], float8[], float8, float8, float8);

-- Access-time bumps rewrite up to k rows after every search. As heap-only (HOT) updates they
-- skip every index; otherwise each bumped row costs an HNSW insertion (18-48 ms for 10 rows at
-- 100,000 memories), competing with the next search for the cores. HOT needs free space on the
-- page and no indexed column changed, so: pages keep 15% free, and the forget sweep's index on
-- last_accessed_at goes (the sweep reads a scope's live rows through memories_scope_idx).
ALTER TABLE memories SET (fillfactor = 85);
DROP INDEX memories_curation_forget_idx;

-- A lexeme as a one-term tsquery, quoted so the tsquery parser takes it as it is.
CREATE FUNCTION hm_quoted_tsquery(term text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ('''' || replace(replace(term, '\', '\\'), '''', '''''') || '''')::tsquery
$$;

-- A search sums a term's postings over every scope (the cost of reading it from the GIN index).
CREATE INDEX lexical_df_term_idx ON lexical_df (term);
