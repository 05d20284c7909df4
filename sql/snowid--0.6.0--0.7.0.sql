\echo Use "ALTER EXTENSION snowid UPDATE TO '0.7.0'" to load this file. \quit

-- snowid 0.7.0.

-- Citus, first-class. A node of a Citus cluster with no snowid.shards of its own takes its
-- group's 32 shards, and every node checks its shards against every other node's, refusing
-- those another node claims too. A node's check asks the others with snowid_citus_claim over
-- Citus's connections; snowid_citus_nodes shows what this node's last check found. snowid_next()
-- says so in its comment.
CREATE FUNCTION snowid_citus_claim(asker_group int, asker_claim text) RETURNS text
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_citus_claim_wrapper';
REVOKE ALL ON FUNCTION snowid_citus_claim(int, text) FROM PUBLIC;
COMMENT ON FUNCTION snowid_citus_claim(int, text) IS
    'Superuser: what this Citus node claims, as another node''s check of its shards asks it over Citus''s connections (that node''s group and claim given, so that this node checks again if they make its last check out of date).';

CREATE FUNCTION snowid_citus_nodes() RETURNS TABLE (
	node text,
	citus_group int,
	this_node bool,
	by_hand bool,
	claims text,
	generates text,
	shared text,
	unanswered text
)
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_citus_nodes_wrapper';
COMMENT ON FUNCTION snowid_citus_nodes() IS
    'On Citus: every node of the cluster as this node''s last check of its shards found it (checking first if one is due): the shards each claims, the shards this node generates for, and those of its claim another node claims too, which neither generates for.';

COMMENT ON FUNCTION snowid_next() IS
    'The next ID on one of this server''s own shards (snowid.shards; on Citus, its group''s own unless snowid.shards is set, less any another node claims too), the same for every session of a backend: one DEFAULT for every node of a cluster.';
