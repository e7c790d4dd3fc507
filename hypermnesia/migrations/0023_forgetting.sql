-- Deletion that can be proven (issue 22): when a memory row goes, nothing derived from it may keep
-- its text. The memory's own derived rows go with it here, whoever deletes it (the service's
-- delete, the admin purge, a rebuild dropping an extra row):
--   * its document frequencies: a term whose df falls to 0 is deleted, not kept at 0 (the term is
--     a word of the text; a row at df 0 would still name it);
--   * its evidence edges as a conclusion (its premises); the edges into it, where it is a premise,
--     stay (ids only, no text): they are how its conclusions know they went stale;
--   * entities of its scope that no memory links to any more (their name is a word of the text);
--   * its position on the 3D map.
-- Its kept vectors (embedding_store) are the raw layer's, not the curated row's: a rebuild that
-- drops and re-derives rows reuses them. The service's delete and the admin purge remove them
-- (services/curation/repo.py delete_memory, with hm_version_text_hashes below).

CREATE OR REPLACE FUNCTION hm_lexical_remove() RETURNS trigger LANGUAGE plpgsql AS $$
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
    DELETE FROM lexical_df d
        USING (SELECT DISTINCT n.scope, t.term
               FROM hm_old n, unnest(tsvector_to_array(n.search_tsv)) AS t(term)) o
        WHERE d.scope = o.scope AND d.term = o.term AND d.df <= 0;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION hm_lexical_update_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE lexical_scope SET docs = docs - 1, total_len = total_len - OLD.lex_len WHERE scope = OLD.scope;
    UPDATE lexical_df SET df = df - 1
        WHERE scope = OLD.scope AND term = ANY (tsvector_to_array(OLD.search_tsv));
    INSERT INTO lexical_scope AS s (scope, docs, total_len) VALUES (NEW.scope, 1, NEW.lex_len)
        ON CONFLICT (scope) DO UPDATE SET docs = s.docs + 1, total_len = s.total_len + EXCLUDED.total_len;
    INSERT INTO lexical_df AS d (scope, term, df)
        SELECT NEW.scope, t.term, 1 FROM unnest(tsvector_to_array(NEW.search_tsv)) AS t(term) ORDER BY 2
        ON CONFLICT (scope, term) DO UPDATE SET df = d.df + 1;
    -- An edit that drops a word must not leave the old word behind at df 0.
    DELETE FROM lexical_df
        WHERE scope = OLD.scope AND term = ANY (tsvector_to_array(OLD.search_tsv)) AND df <= 0;
    RETURN NULL;
END $$;

-- Leftovers of earlier deletes (rows the old functions kept at df 0).
DELETE FROM lexical_df WHERE df <= 0;

-- The key embedding_store uses for a memory's text (services/curation/embedding.py embedding_text
-- + services/curation/repo.py text_sha256).
CREATE FUNCTION hm_embedding_text_sha256(description text, content text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT encode(sha256(convert_to(
        CASE WHEN description <> '' THEN description || E'\n' || content ELSE content END, 'UTF8')), 'hex')
$$;

-- The embedding_store keys of every version of a memory's text, replayed from its records the way
-- services/curation/admin.py _embedded_texts does (a create's "memory", an update's "set").
CREATE FUNCTION hm_version_text_hashes(memory uuid) RETURNS text[] LANGUAGE plpgsql STABLE AS $$
DECLARE
    fields jsonb;
    description text := '';
    content text := '';
    seen boolean := false;
    hashes text[] := '{}';
BEGIN
    FOR fields IN
        SELECT coalesce(t.payload::jsonb -> 'memory', t.payload::jsonb -> 'set')
        FROM records r JOIN record_texts t ON t.record_id = r.id
        WHERE r.target_id = memory OR r.id = memory ORDER BY r.seq
    LOOP
        CONTINUE WHEN fields IS NULL OR jsonb_typeof(fields) <> 'object';
        IF fields ->> 'description' IS NOT NULL THEN
            description := fields ->> 'description'; seen := true;
        END IF;
        IF fields ->> 'content' IS NOT NULL THEN
            content := fields ->> 'content'; seen := true;
        END IF;
        IF seen THEN
            hashes := hashes || hm_embedding_text_sha256(description, content);
        END IF;
    END LOOP;
    RETURN hashes;
END $$;

CREATE FUNCTION hm_forget_derived() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM evidence_edges e USING hm_old o WHERE e.derived_id = o.id;
    DELETE FROM entities e
        WHERE e.scope IN (SELECT DISTINCT scope FROM hm_old)
          AND NOT EXISTS (SELECT 1 FROM memory_entities me WHERE me.entity_id = e.id);
    -- Its position on the 3D map (migration 0024, when present).
    IF to_regclass('memory_positions') IS NOT NULL THEN
        EXECUTE 'DELETE FROM memory_positions p USING hm_old o WHERE p.memory_id = o.id';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER memories_forget_derived AFTER DELETE ON memories
    REFERENCING OLD TABLE AS hm_old FOR EACH STATEMENT EXECUTE FUNCTION hm_forget_derived();
