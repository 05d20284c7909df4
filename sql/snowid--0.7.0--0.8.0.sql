\echo Use "ALTER EXTENSION snowid UPDATE TO '0.8.0'" to load this file. \quit

-- snowid 0.8.0.

-- Public IDs (issue 54): the keys come from the file snowid.mask_key_file names, one per
-- database and versioned; domains (FF1's tweak) and prefixes; the keys' fingerprints, to compare
-- servers. The four 0.7.0 functions keep their signatures and symbols (their comments no longer
-- name the removed setting snowid.mask_key).
CREATE FUNCTION snowid_mask(id bigint, domain text) RETURNS bigint
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_in_domain_wrapper';
CREATE FUNCTION snowid_unmask(masked bigint, domain text, version integer DEFAULT NULL) RETURNS bigint
STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_unmask_in_domain_wrapper';
CREATE FUNCTION snowid_mask_text(id bigint, domain text, prefix text DEFAULT '') RETURNS text
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_text_in_domain_wrapper';
CREATE FUNCTION snowid_unmask_text(masked text, domain text, prefix text DEFAULT '') RETURNS bigint
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_unmask_text_in_domain_wrapper';
CREATE FUNCTION snowid_mask_keys() RETURNS TABLE (version integer, masks boolean, fingerprint text, derived boolean)
STRICT STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_keys_wrapper';
CREATE FUNCTION snowid_mask_key_fingerprint() RETURNS text
STRICT STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_key_fingerprint_wrapper';
COMMENT ON FUNCTION snowid_mask(bigint) IS
    'An ID''s public form: a non-negative bigint that says nothing of the ID''s time, shard or order without the key (FF1 of NIST SP 800-38G under this database''s key from snowid.mask_key_file). STABLE: the key can change.';
COMMENT ON FUNCTION snowid_unmask(bigint) IS
    'The ID a public form from snowid_mask stands for, under the key version that masks: for lookups, WHERE id = snowid_unmask($1).';
COMMENT ON FUNCTION snowid_mask_text(bigint) IS
    'An ID''s public form for URLs: snowid_mask as 13 symbols of Crockford''s base32, after a symbol of the key''s version from version 2.';
COMMENT ON FUNCTION snowid_unmask_text(text) IS
    'The ID a text from snowid_mask_text stands for, under the key version it names (any case; I, L and O read as 1, 1 and 0).';
COMMENT ON FUNCTION snowid_mask(bigint, text) IS
    'An ID''s public form in a domain (a table or type name, FF1''s tweak): two domains give one ID unrelated forms.';
COMMENT ON FUNCTION snowid_unmask(bigint, text, integer) IS
    'The ID a public form from snowid_mask(id, domain) stands for, under a key version (null: the one that masks).';
COMMENT ON FUNCTION snowid_mask_text(bigint, text, text) IS
    'An ID''s public form for URLs in a domain, after a prefix and _ where one is given (ord_...).';
COMMENT ON FUNCTION snowid_unmask_text(text, text, text) IS
    'The ID a text from snowid_mask_text(id, domain, prefix) stands for; a text without the prefix is refused.';
COMMENT ON FUNCTION snowid_mask_keys() IS
    'This database''s mask key versions: which masks, each one''s fingerprint (safe to show), and whether they are the default''s derived for this database.';
COMMENT ON FUNCTION snowid_mask_key_fingerprint() IS
    'This database''s mask keys'' fingerprints in one line: equal on every node, standby and Patroni member that gives its IDs the same public forms.';
