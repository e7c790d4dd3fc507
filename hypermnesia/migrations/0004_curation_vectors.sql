-- Vectors by the text they embed (sha256 of the embedding text), as float32 bytes: the raw layer's
-- embeddings. A rebuild re-uses them instead of re-embedding; reindex refills them with the new
-- model in the same transaction that moves the pin, so every row here belongs to the pinned model.
-- Not a `vector` column on purpose: nothing searches it, so it needs neither a dimension nor HNSW.
CREATE TABLE embedding_store (
    text_sha256  text PRIMARY KEY,
    vector       bytea NOT NULL
);
