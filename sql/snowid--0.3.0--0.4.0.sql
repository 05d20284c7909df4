\echo Use "ALTER EXTENSION snowid UPDATE TO '0.4.0'" to load this file. \quit

-- snowid 0.4.0 creates its durable state when the extension is installed, so that a missing
-- state means a lost one (its file deleted, cut short or zeroed, or a cluster made by
-- pg_upgrade) and fences generation instead of starting fresh. 0.3.0 created the state at the
-- first generation: make sure it exists now, as 0.3.0 would have made it (from an old version's
-- file if one is left, fenced if that file is stale or unreadable). The function is dropped
-- again, as the install script does, so that nothing is left for a user to call.
CREATE FUNCTION snowid_create_state(occasion text) RETURNS void
STRICT VOLATILE LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_create_state_wrapper';
SELECT @extschema@.snowid_create_state('update');
DROP FUNCTION @extschema@.snowid_create_state(text);
