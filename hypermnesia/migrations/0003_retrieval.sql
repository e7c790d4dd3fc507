-- Retrieval: real BM25 over the composite lexical index, and thread order for neighbour context.
--
-- ts_rank_cd has no inverse document frequency, so the lexical leg scores candidates with BM25.
-- Document frequencies are kept per scope (a scope is a corpus: a project, a user, an eval
-- conversation) and updated on write by triggers, so a search reads them with one index lookup.

-- Token count of a tsvector (sum of positions), for BM25 length normalisation.
CREATE FUNCTION hm_tsv_length(tsv tsvector) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(sum(cardinality(u.positions)), 0)::integer FROM unnest(tsv) AS u
$$;

-- A generated column may not read another one, so the composite expression is repeated here.
ALTER TABLE memories ADD COLUMN lex_len integer GENERATED ALWAYS AS (
    hm_tsv_length(
        to_tsvector('english'::regconfig, description || ' ' || content)
        || to_tsvector('simple'::regconfig, description || ' ' || content)
    )
) STORED;

CREATE TABLE lexical_scope (
    scope      text PRIMARY KEY,
    docs       bigint NOT NULL,
    total_len  bigint NOT NULL
);

CREATE TABLE lexical_df (
    scope  text NOT NULL,
    term   text NOT NULL,
    df     bigint NOT NULL,
    PRIMARY KEY (scope, term)
);

-- Rows are upserted in (scope, term) order so concurrent writers lock them in the same order.
CREATE FUNCTION hm_lexical_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO lexical_scope AS s (scope, docs, total_len)
        SELECT scope, count(*), sum(lex_len) FROM hm_new GROUP BY scope ORDER BY scope
        ON CONFLICT (scope) DO UPDATE
            SET docs = s.docs + EXCLUDED.docs, total_len = s.total_len + EXCLUDED.total_len;
    INSERT INTO lexical_df AS d (scope, term, df)
        SELECT n.scope, t.term, count(*)
        FROM hm_new n, unnest(tsvector_to_array(n.search_tsv)) AS t(term)
        GROUP BY n.scope, t.term ORDER BY 1, 2
        ON CONFLICT (scope, term) DO UPDATE SET df = d.df + EXCLUDED.df;
    RETURN NULL;
END $$;

CREATE FUNCTION hm_lexical_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE lexical_scope s SET docs = s.docs - o.docs, total_len = s.total_len - o.total_len
        FROM (SELECT scope, count(*) AS docs, sum(lex_len) AS total_len FROM hm_old GROUP BY scope
              ORDER BY scope) o
        WHERE s.scope = o.scope;
    UPDATE lexical_df d SET df = d.df - o.df
        FROM (SELECT n.scope, t.term, count(*) AS df
              FROM hm_old n, unnest(tsvector_to_array(n.search_tsv)) AS t(term)
              GROUP BY n.scope, t.term ORDER BY 1, 2) o
        WHERE d.scope = o.scope AND d.term = o.term;
    RETURN NULL;
END $$;

CREATE TRIGGER memories_lexical_insert AFTER INSERT ON memories
    REFERENCING NEW TABLE AS hm_new FOR EACH STATEMENT EXECUTE FUNCTION hm_lexical_add();
CREATE TRIGGER memories_lexical_delete AFTER DELETE ON memories
    REFERENCING OLD TABLE AS hm_old FOR EACH STATEMENT EXECUTE FUNCTION hm_lexical_remove();

-- Text edits are single-row updates; access-time bumps (the common update) skip the trigger.
CREATE FUNCTION hm_lexical_update_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE lexical_scope SET docs = docs - 1, total_len = total_len - OLD.lex_len WHERE scope = OLD.scope;
    UPDATE lexical_df SET df = df - 1
        WHERE scope = OLD.scope AND term = ANY (tsvector_to_array(OLD.search_tsv));
    INSERT INTO lexical_scope AS s (scope, docs, total_len) VALUES (NEW.scope, 1, NEW.lex_len)
        ON CONFLICT (scope) DO UPDATE SET docs = s.docs + 1, total_len = s.total_len + EXCLUDED.total_len;
    INSERT INTO lexical_df AS d (scope, term, df)
        SELECT NEW.scope, t.term, 1 FROM unnest(tsvector_to_array(NEW.search_tsv)) AS t(term) ORDER BY 2
        ON CONFLICT (scope, term) DO UPDATE SET df = d.df + 1;
    RETURN NULL;
END $$;

CREATE TRIGGER memories_lexical_update AFTER UPDATE ON memories
    FOR EACH ROW WHEN (OLD.search_tsv IS DISTINCT FROM NEW.search_tsv OR OLD.scope IS DISTINCT FROM NEW.scope)
    EXECUTE FUNCTION hm_lexical_update_row();

-- Recomputes the statistics from scratch (after a bulk rebuild that bypassed the triggers).
CREATE FUNCTION hm_lexical_recompute() RETURNS void LANGUAGE sql AS $$
    DELETE FROM lexical_scope;
    DELETE FROM lexical_df;
    INSERT INTO lexical_scope (scope, docs, total_len)
        SELECT scope, count(*), coalesce(sum(lex_len), 0) FROM memories GROUP BY scope;
    INSERT INTO lexical_df (scope, term, df)
        SELECT m.scope, t.term, count(*) FROM memories m, unnest(tsvector_to_array(m.search_tsv)) AS t(term)
        GROUP BY m.scope, t.term;
$$;

-- BM25 of one document for query terms with their idf.
CREATE FUNCTION hm_bm25(tsv tsvector, doc_len integer, terms text[], idfs float8[], avgdl float8,
                        k1 float8, b float8) RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(sum(
        q.idf * cardinality(u.positions) * (k1 + 1)
        / (cardinality(u.positions) + k1 * (1 - b + b * doc_len / greatest(avgdl, 1.0)))
    ), 0)
    FROM unnest(tsv) AS u JOIN unnest(terms, idfs) AS q(term, idf) ON q.term = u.lexeme
$$;

-- Neighbouring turns of a conversation: thread order is (created_at, id) within a scope.
CREATE INDEX memories_thread_idx ON memories (scope, thread_id, created_at, id) WHERE thread_id IS NOT NULL;

SELECT hm_lexical_recompute();
