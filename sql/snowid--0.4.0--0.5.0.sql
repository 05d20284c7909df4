\echo Use "ALTER EXTENSION snowid UPDATE TO '0.5.0'" to load this file. \quit

-- snowid 0.5.0 lifts a fence only above what every database of the cluster holds: the one
-- statement a fenced cluster needs, snowid_resume_above_columns(), now reads every database
-- (each other one with a background worker), partitioned tables and the rows that came in
-- through a parent included, and says which database each column is in. Its result has a new
-- column and tables by name, so it is created again.
DROP FUNCTION snowid_resume_above_columns();
CREATE FUNCTION snowid_resume_above_columns() RETURNS TABLE (
	"database" TEXT,
	"tbl" TEXT,
	"col" TEXT,
	"max_id" bigint
)
STRICT VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowid_resume_above_columns_wrapper';
REVOKE ALL ON FUNCTION snowid_resume_above_columns() FROM PUBLIC;
COMMENT ON FUNCTION snowid_resume_above_columns() IS
    'Superuser: snowid_resume_above the highest value of every column, in every database of the cluster, whose default calls snowid_next or that a snowid_fill_id trigger fills (partitions and children included); lists them. The one statement a fenced cluster needs.';

-- A resume no longer takes a released shard back; taking one back is its own act.
CREATE FUNCTION snowid_take_back(shard INT, above_id bigint) RETURNS timestamp with time zone
STRICT VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowid_take_back_wrapper';
REVOKE ALL ON FUNCTION snowid_take_back(int, bigint) FROM PUBLIC;
COMMENT ON FUNCTION snowid_take_back(int, bigint) IS
    'Superuser: takes back a shard this server released, above an ID of that shard (its other owner''s last ID, from snowid_release there), durably. Returns the new floor of the time base.';
COMMENT ON FUNCTION snowid_resume_above(bigint) IS
    'Superuser: from now on every ID this server issues is above this ID and dated after its millisecond, durably, and a fence is lifted (on a fenced server, above the highest snowid key of every database too). Released shards stay released. For pg_upgrade, logical copies and shard hand-offs. Returns the new floor of the time base.';

-- The state exists since 0.4.0's install or update; this leaves the cluster's witness beside it
-- (global/9129), which outlives every database, as well as this database's.
CREATE FUNCTION snowid_create_state(occasion text) RETURNS void
STRICT VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_create_state_wrapper';
SELECT @extschema@.snowid_create_state('update');
DROP FUNCTION @extschema@.snowid_create_state(text);
