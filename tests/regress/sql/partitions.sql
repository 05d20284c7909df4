-- Time partitioning by ID: PARTITION BY RANGE (id) with bounds from snowid_from_timestamp.
SET timezone = 'UTC';
\set SHOW_CONTEXT never

CREATE TABLE clicks (id bigint PRIMARY KEY, url text) PARTITION BY RANGE (id);

-- The helper prints one CREATE TABLE per period; \gexec runs them.
SELECT snowid_partition_ddl('clicks', '2026-03-01 00:00+00', '2026-03-04 00:00+00');
SELECT snowid_partition_ddl('clicks', '2026-03-01 00:00+00', '2026-03-04 00:00+00') \gexec
SELECT snowid_partition_ddl('clicks', '2026-03-01 00:00+00', '2026-05-01 00:00+00', '1 month');
SELECT snowid_partition_ddl('clicks', '2026-03-01 00:00+00', '2026-03-01 02:00+00', '1 hour');

-- Rows land in the partition of their time: one click an hour for three days.
INSERT INTO clicks
SELECT snowid_from_timestamp('2026-03-01 00:00+00'::timestamptz + g * interval '1 hour', 1), 'u' || g
FROM generate_series(0, 71) g;
SELECT tableoid::regclass AS partition, count(*), min(snowid_timestamp(id)), max(snowid_timestamp(id))
FROM clicks GROUP BY 1 ORDER BY 1;

-- A time-range query scans only the partitions it can match.
EXPLAIN (COSTS OFF)
SELECT count(*) FROM clicks
WHERE id >= snowid_from_timestamp('2026-03-02 06:00+00') AND id < snowid_from_timestamp('2026-03-02 07:00+00');
SELECT count(*) FROM clicks
WHERE id >= snowid_from_timestamp('2026-03-02 06:00+00') AND id < snowid_from_timestamp('2026-03-02 07:00+00');

-- Rows keyed by DEFAULT snowid_next land in the partition that holds now.
CREATE TABLE visits (id bigint PRIMARY KEY DEFAULT snowid_next(5), page text) PARTITION BY RANGE (id);
-- (The statements name today's date, so they are not echoed.)
\set ECHO none
SELECT snowid_partition_ddl('visits', date_trunc('day', now()) - interval '1 day', date_trunc('day', now()) + interval '2 days') \gexec
\set ECHO all
INSERT INTO visits (page) SELECT 'p' || g FROM generate_series(1, 1000) g;
SELECT count(*) AS rows, count(DISTINCT tableoid) AS partitions,
       bool_and(tableoid::regclass::text = 'visits_' || to_char(now(), 'YYYYMMDD')) AS in_todays_partition
FROM visits;

-- Bounds before the epoch are refused.
SELECT sqlstate_of($$SELECT snowid_partition_ddl('clicks', '2025-12-30 00:00+00', '2026-01-02 00:00+00')$$);
