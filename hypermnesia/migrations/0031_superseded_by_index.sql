-- The supersede chain walk (hypermnesia/memory_rows.py) steps over a purged or deleted memory by
-- finding its predecessor through superseded_by, which had no index (supersedes has one, 0002).
CREATE INDEX memories_superseded_by_idx ON memories (superseded_by) WHERE superseded_by IS NOT NULL;
