-- importance was real (float4): 0.1 was kept as 0.100000001490116 and every client read that back
-- (REST, MCP, export). Double precision keeps the value given. A value already stored becomes the
-- shortest decimal that its float4 prints as (0.1), which is what its writer sent.
ALTER TABLE memories
    ALTER COLUMN importance TYPE double precision USING importance::text::double precision;
