-- Bearer tokens kept in the store (`hypermnesia token create`, and the token a first `up` makes for
-- the local user). Only the sha256 of a token is stored: a copy of the database does not hand out
-- working tokens. A revoked token stays, so `token list` shows what was revoked and when.
CREATE TABLE tokens (
    id             uuid PRIMARY KEY,
    token_sha256   text NOT NULL UNIQUE,
    principal      text NOT NULL,
    scopes         text[] NOT NULL DEFAULT '{}',
    description    text NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    revoked_at     timestamptz,
    last_used_at   timestamptz
);
