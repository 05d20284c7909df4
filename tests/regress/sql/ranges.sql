-- Working with IDs in SQL: accessors, timestamp bounds, range scans on the primary key.
SET timezone = 'UTC';
\set SHOW_CONTEXT never

-- 100,000 events, one every 36 ms from 2026-03-01 00:00 UTC, on many shards.
CREATE TABLE events (id bigint PRIMARY KEY, body text);
INSERT INTO events
SELECT snowid_from_timestamp('2026-03-01 00:00+00'::timestamptz + g * interval '36 ms', g % 8192, g % 1024), 'e' || g
FROM generate_series(0, 99999) g;
ANALYZE events;

-- The accessors agree with snowid_parse, and the explicit-epoch form with the server's epoch.
SELECT count(*) AS disagreements
FROM events, snowid_parse(id) p
WHERE (p.ts, p.shard, p.seq) IS DISTINCT FROM (snowid_timestamp(id), snowid_shard(id), snowid_seq(id))
   OR snowid_timestamp(id, '2026-01-01 00:00:00+00') <> snowid_timestamp(id);

-- The bounds of an ID's millisecond bracket it: from_timestamp(ts) <= id < from_timestamp(ts + 1 ms).
SELECT count(*) AS outside_their_millisecond
FROM events
WHERE NOT (snowid_from_timestamp(snowid_timestamp(id)) <= id
           AND id < snowid_from_timestamp(snowid_timestamp(id) + interval '1 ms'));

-- [00:10, 00:11) by ID bounds selects exactly the events whose timestamp is in that minute.
SELECT count(*) FROM events
WHERE id >= snowid_from_timestamp('2026-03-01 00:10+00') AND id < snowid_from_timestamp('2026-03-01 00:11+00');
SELECT count(*) FROM events
WHERE snowid_timestamp(id) >= '2026-03-01 00:10+00' AND snowid_timestamp(id) < '2026-03-01 00:11+00';

-- The bounds are STABLE, so the planner uses them as index conditions on the primary key.
EXPLAIN (COSTS OFF)
SELECT * FROM events
WHERE id >= snowid_from_timestamp('2026-03-01 00:10+00') AND id < snowid_from_timestamp('2026-03-01 00:11+00');

-- Newest first, and "everything since", straight from the index.
EXPLAIN (COSTS OFF)
SELECT * FROM events WHERE id >= snowid_from_timestamp('2026-03-01 00:59+00') ORDER BY id DESC LIMIT 10;

-- The explicit-epoch form is IMMUTABLE, so it can back an expression index.
CREATE INDEX events_hour ON events (date_trunc('hour', snowid_timestamp(id, '2026-01-01 00:00:00+00') AT TIME ZONE 'UTC'));
SELECT sqlstate_of('CREATE INDEX ON events (snowid_timestamp(id))');
SELECT sqlstate_of($$SELECT snowid_timestamp(0, 'infinity')$$);
