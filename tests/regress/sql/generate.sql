-- Generating IDs as a column default.
\set SHOW_CONTEXT never

CREATE TABLE orders (
    id   bigint PRIMARY KEY DEFAULT snowid_next(5),
    n    int NOT NULL,
    item text
);
INSERT INTO orders (n, item) SELECT g, 'item ' || g FROM generate_series(1, 5000) g;

-- 5,000 rows in a few milliseconds: all distinct, all on shard 5, all positive.
SELECT count(*), count(DISTINCT id), min(snowid_shard(id)), max(snowid_shard(id)), bool_and(id > 0)
FROM orders;

-- IDs increase in insertion order, so "newest first" is ORDER BY id DESC.
SELECT bool_and(id > prev) AS increasing
FROM (SELECT id, lag(id) OVER (ORDER BY n) AS prev FROM orders) s
WHERE prev IS NOT NULL;
SELECT n FROM orders ORDER BY id DESC LIMIT 3;

-- The shard edges.
SELECT snowid_shard(snowid_next(0)) AS first_shard, snowid_shard(snowid_next(8191)) AS last_shard;
SELECT snowid_next(8192);
SELECT sqlstate_of('SELECT snowid_next(-1)');
SELECT sqlstate_of('SELECT snowid_next(2147483647)');
SELECT snowid_next(NULL) IS NULL AS strict;

-- The shard may come as any integer type, a whole numeric, or an untyped parameter: JDBC's
-- setLong, user_id % 8192 and node-postgres all work, and none is ambiguous.
SELECT snowid_shard(snowid_next(5::bigint)) AS int8, snowid_shard(snowid_next(6::smallint)) AS int2,
       snowid_shard(snowid_next(7.0)) AS numeric, snowid_shard(snowid_next('8')) AS unknown_literal;
PREPARE next_untyped AS SELECT snowid_shard(snowid_next($1));
EXECUTE next_untyped(9);
PREPARE next_int8(bigint) AS SELECT snowid_shard(snowid_next($1));
EXECUTE next_int8(10);
SELECT snowid_shard(snowid_next(user_id % 8192)) FROM (VALUES (8193::bigint)) v(user_id);
SELECT sqlstate_of('SELECT snowid_next(2.5)');
SELECT sqlstate_of('SELECT snowid_next(4294967301::bigint)');
SELECT sqlstate_of($$SELECT snowid_next('NaN'::float8)$$);
SELECT sqlstate_of('SELECT snowid_next(-0.5)');

-- Refused where nextval() is refused: in a read-only transaction (and on a hot standby).
BEGIN READ ONLY;
SELECT snowid_next(5);
ROLLBACK;
SET default_transaction_read_only = on;
SELECT sqlstate_of('SELECT snowid_next()');
RESET default_transaction_read_only;

-- snowid_next() picks one of the server's own shards, the same one for the whole session.
SELECT count(DISTINCT snowid_shard(id)) AS shards, bool_and(id > 0) AS positive
FROM (SELECT snowid_next() AS id FROM generate_series(1, 1000)) s;

-- A new ID is dated now.
SELECT abs(extract(epoch FROM snowid_timestamp(snowid_next(1)) - clock_timestamp())) < 5 AS dated_now;
