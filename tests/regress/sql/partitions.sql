-- Time partitioning by ID: PARTITION BY RANGE (id) with bounds from snowid_from_timestamp.
SET timezone = 'UTC';
\set SHOW_CONTEXT never

CREATE TABLE clicks (id bigint PRIMARY KEY, url text) PARTITION BY RANGE (id);

-- The helper prints one CREATE TABLE per period; \gexec runs them.
SELECT snowid_partition_ddl('clicks', '2026-03-01 00:00+00', '2026-03-04 00:00+00');
SELECT snowid_partition_ddl('clicks', '2026-03-01 00:00+00', '2026-03-04 00:00+00') \gexec
SELECT snowid_partition_ddl('clicks', '2026-04-01 00:00+00', '2026-06-01 00:00+00', '1 month');
SELECT snowid_partition_ddl('clicks', '2026-07-01 00:00+00', '2026-07-01 02:00+00', '1 hour');

-- A rerun (from cron, say) emits only what is missing, and the statements are idempotent.
SELECT snowid_partition_ddl('clicks', '2026-03-01 00:00+00', '2026-03-05 00:00+00');
SELECT snowid_partition_ddl('clicks', '2026-03-01 00:00+00', '2026-03-05 00:00+00') \gexec
SELECT count(*) AS nothing_left FROM snowid_partition_ddl('clicks', '2026-03-01 00:00+00', '2026-03-05 00:00+00');

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

-- Names never collide: 28-day steps no longer share a month's name, nor hours across a
-- daylight-saving fall-back (names are in UTC), nor 30-second steps, nor a long parent's name.
CREATE TABLE w4 (id bigint) PARTITION BY RANGE (id);
SELECT snowid_partition_ddl('w4', '2026-03-01 00:00+00', '2026-06-01 00:00+00', '28 days');
SET timezone = 'America/New_York';
SELECT snowid_partition_ddl('w4', '2026-11-01 00:00', '2026-11-01 03:00', '1 hour');
SET timezone = 'UTC';
SELECT snowid_partition_ddl('w4', '2026-03-01 00:00+00', '2026-03-01 00:01:30+00', '30 seconds');
CREATE TABLE a_parent_table_whose_name_is_exactly_sixty_three_bytes_long_xxx (id bigint) PARTITION BY RANGE (id);
SELECT snowid_partition_ddl('a_parent_table_whose_name_is_exactly_sixty_three_bytes_long_xxx', '2026-03-01 00:00+00', '2026-03-01 00:00:00.002+00', '1 ms') \gexec
SELECT relname, length(relname) FROM pg_class WHERE relname LIKE 'a_parent_table%' ORDER BY 1;

-- Bad arguments are refused before anything is generated.
SELECT sqlstate_of($$SELECT snowid_partition_ddl('clicks', '-infinity', '2026-03-01')$$);
SELECT sqlstate_of($$SELECT snowid_partition_ddl('clicks', '2026-03-01', 'infinity')$$);
SELECT sqlstate_of($$SELECT snowid_partition_ddl('clicks', '2026-03-02', '2026-03-01')$$);
SELECT sqlstate_of($$SELECT snowid_partition_ddl('clicks', '2026-03-01', '2026-03-02', '0 days')$$);
SELECT sqlstate_of($$SELECT snowid_partition_ddl('clicks', '2026-03-01', '2026-03-02', '-1 day')$$);
SELECT sqlstate_of($$SELECT snowid_partition_ddl('clicks', '2026-03-01', '2026-03-02', '100 microseconds')$$);
SELECT sqlstate_of($$SELECT snowid_partition_ddl('clicks', '2026-03-01', '2030-03-01', '1 ms')$$);
SELECT sqlstate_of($$SELECT snowid_partition_ddl('clicks', '2026-03-01', '2026-03-05', '1 day', 3)$$);
SELECT sqlstate_of($$SELECT snowid_partition_ddl('clicks', '2026-03-01', '2026-03-05', '1 day', 0)$$);
SELECT count(*) FROM snowid_partition_ddl('clicks', '2026-03-10', '2026-03-13', '1 day', 3);
SELECT sqlstate_of($$SELECT snowid_partition_ddl('clicks', '2025-12-30 00:00+00', '2026-01-02 00:00+00')$$);
-- Only a table partitioned by range of one bigint column.
SELECT snowid_partition_ddl('pg_class', '2026-03-01', '2026-03-02');
CREATE TABLE by_list (id bigint) PARTITION BY LIST (id);
SELECT sqlstate_of($$SELECT snowid_partition_ddl('by_list', '2026-03-01', '2026-03-02')$$);
CREATE TABLE by_text (id text) PARTITION BY RANGE (id);
SELECT sqlstate_of($$SELECT snowid_partition_ddl('by_text', '2026-03-01', '2026-03-02')$$);
CREATE TABLE by_two (id bigint, n bigint) PARTITION BY RANGE (id, n);
SELECT sqlstate_of($$SELECT snowid_partition_ddl('by_two', '2026-03-01', '2026-03-02')$$);
-- A name taken by something else is an error, not silently skipped.
CREATE TABLE clicks_20260310 (x int);
SELECT snowid_partition_ddl('clicks', '2026-03-10', '2026-03-11');
DROP TABLE clicks_20260310;
-- A partition of that name with other bounds (a weekly series meeting a daily one) too.
SELECT snowid_partition_ddl('clicks', '2026-03-01', '2026-03-15', '7 days');
-- A parent that does not exist (a dangling OID) or that the caller has no privilege on is
-- refused before anything locks it: 42P01 and 42501, never an internal error.
SELECT sqlstate_of($$SELECT snowid_partition_ddl('-'::regclass, '2026-03-01', '2026-03-02')$$);
SELECT sqlstate_of($$SELECT snowid_partition_ddl(4000000000::oid::regclass, '2026-03-01', '2026-03-02')$$);
CREATE ROLE snowid_stranger;
GRANT EXECUTE ON FUNCTION sqlstate_of(text) TO snowid_stranger;
SET ROLE snowid_stranger;
SELECT sqlstate_of($$SELECT snowid_partition_ddl('clicks', '2026-03-01', '2026-03-02')$$);
RESET ROLE;
GRANT SELECT ON clicks TO snowid_stranger;
SET ROLE snowid_stranger;
SELECT count(*) AS with_a_privilege FROM snowid_partition_ddl('clicks', '2026-03-01', '2026-03-02');
RESET ROLE;
REVOKE ALL ON clicks FROM snowid_stranger;
REVOKE ALL ON FUNCTION sqlstate_of(text) FROM snowid_stranger;
DROP ROLE snowid_stranger;
