-- Retrieval: the open tasks of a scope, for the active-task bonus of manager-mode searches
-- (services/retrieval/signals.py). Tasks are a small part of a scope; without this index the
-- lookup would read every live row of the scopes searched.
CREATE INDEX memories_open_tasks_idx ON memories (scope)
    WHERE type = 'task' AND kind = 'working' AND archived_at IS NULL AND superseded_by IS NULL;
