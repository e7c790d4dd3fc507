-- Retrieval: term frequencies come from the tsvector itself.
--
-- A term's frequency is the number of positions its lexeme has in search_tsv, which ts_rank_cd
-- with unit weights returns in about a microsecond by binary search (services/retrieval/repo.py).
-- The per-occurrence word list of migration 0005 was scanned linearly, ~20 us per term for an
-- abstract, and made long rows bigger still: it goes.
ALTER TABLE memories DROP COLUMN lex_terms;
DROP FUNCTION hm_tsv_terms(tsvector);

-- Keep rows whole on their page up to the largest size a page allows, so a document chunk's
-- tsvector stays inline: out of line, each search fetched it through the TOAST index for every
-- candidate. Applies to rows written from now on.
ALTER TABLE memories SET (toast_tuple_target = 8160);

-- Every search rewrites its hits' access time. That is a heap-only (HOT) update, which skips
-- every index (two HNSW graphs for a large scope), only when the new row version fits on its
-- page: at fillfactor 85 a typical 2 KB memory did not (9 in 10 bumps updated every index, and
-- cost the next search ~10 ms at 100,000 memories); at 70 it does. Applies to pages written from
-- now on.
ALTER TABLE memories SET (fillfactor = 70);
