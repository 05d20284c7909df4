\echo Use "ALTER EXTENSION snowid UPDATE TO '0.8.0'" to load this file. \quit

-- snowid 0.8.0.

-- Citus: the check on Citus (issues 51 items 8 and 9, 55). A node asks another through the
-- setting snowid.citus_claim, which only snowid defines, instead of calling snowid_citus_claim by
-- name in a schema a database owner can create in: the function goes (the library still answers
-- a node on 0.7.0 that calls it in a database not yet updated). snowid_citus_nodes() says the
-- group each node takes itself to be in, and the IDs it issued outside its claim.
DROP FUNCTION snowid_citus_claim(int, text);

DROP FUNCTION snowid_citus_nodes();
CREATE FUNCTION snowid_citus_nodes() RETURNS TABLE (
	node text,
	citus_group int,
	this_node bool,
	by_hand bool,
	claims text,
	generates text,
	shared text,
	unanswered text,
	own_group int,
	issued_outside text
)
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_citus_nodes_wrapper';
COMMENT ON FUNCTION snowid_citus_nodes() IS
    'On Citus: every node of the cluster as this node''s last check of its shards found it (waiting for a check that is due): the shards each claims, the group each takes itself to be in, the shards this node generates for, and those of its claim another node claims too, which neither generates for.';
