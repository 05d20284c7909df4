-- Decoding IDs under the default epoch, 2026-01-01 00:00:00+00.
SET timezone = 'UTC';
\set SHOW_CONTEXT never

-- (1000 << 23) | (5 << 10) | 7: one second after the epoch, shard 5, sequence 7.
SELECT * FROM snowid_parse(8388613127);
SELECT (snowid_parse(8388613127)).ts, (snowid_parse(8388613127)).shard, (snowid_parse(8388613127)).seq;
SELECT snowid_timestamp(8388613127), snowid_shard(8388613127), snowid_seq(8388613127);

-- The first and the last encodable IDs.
SELECT * FROM snowid_parse(0);
SELECT * FROM snowid_parse(9223372036854775807);

-- snowid_parse in a WHERE clause.
SELECT id FROM (VALUES (8388613127), (8388608000), (1024)) v(id) WHERE (snowid_parse(id)).shard = 5;

-- From timestamps back to IDs; sub-millisecond digits are truncated.
SELECT snowid_from_timestamp('2026-01-01 00:00:01.000999+00', 5, 7);
SELECT snowid_from_timestamp('2026-01-01 00:00:01+00') AS smallest_id_of_that_millisecond;
SELECT snowid_from_timestamp('2026-01-01 00:00:00+00') AS the_epoch;

-- Errors a user can meet while decoding.
SELECT * FROM snowid_parse(-1);
SELECT sqlstate_of('SELECT snowid_shard(-9223372036854775808)');
SELECT snowid_from_timestamp('2025-12-31 23:59:59.999+00');
SELECT sqlstate_of('SELECT snowid_from_timestamp(''infinity'')');
SELECT sqlstate_of('SELECT snowid_from_timestamp(''-infinity'')');
SELECT sqlstate_of('SELECT snowid_from_timestamp(''2060-11-03 19:53:47.776+00'')');
SELECT sqlstate_of('SELECT snowid_from_timestamp(''2060-11-03 19:53:47.775+00'')');
SELECT sqlstate_of('SELECT snowid_from_timestamp(''2026-06-01 00:00+00'', 8192)');
SELECT sqlstate_of('SELECT snowid_from_timestamp(''2026-06-01 00:00+00'', 0, 1024)');
SELECT sqlstate_of('SELECT snowid_from_timestamp(''2026-06-01 00:00+00'', 0, -1)');

-- Text that sorts like the ID (for JSON and JavaScript), and back.
SELECT snowid_text(8388613127), snowid_text(0), snowid_text(9223372036854775807);
SELECT bool_and((snowid_text(a) < snowid_text(b)) = (a < b)) AS sorts_like_the_id
FROM (SELECT (random() * 9e18)::bigint AS a, (random() * 9e18)::bigint AS b FROM generate_series(1, 10000)) s;
SELECT snowid_text(8388613127)::bigint = 8388613127 AS round_trips;
SELECT json_build_object('id', snowid_text(8388613127)) AS for_json;
SELECT snowid_text(-1);

-- NULL in, NULL out.
SELECT snowid_parse(NULL) IS NULL AS parse_null, snowid_shard(NULL) IS NULL AS shard_null;
