\echo Use "ALTER EXTENSION snowid UPDATE TO '0.7.0'" to load this file. \quit

-- snowid 0.7.0.

-- Public IDs (issue 47): a keyed, reversible mask of the non-negative bigints (FF1 of NIST
-- SP 800-38G under the key in snowid.mask_key), so that an ID shown in a URL or an API says
-- nothing of when, where or how many, and its text form for URLs. STABLE: the result depends
-- on a setting a reload can change.
CREATE FUNCTION snowid_mask(id bigint) RETURNS bigint
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_wrapper';
CREATE FUNCTION snowid_unmask(masked bigint) RETURNS bigint
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_unmask_wrapper';
CREATE FUNCTION snowid_mask_text(id bigint) RETURNS text
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_text_wrapper';
CREATE FUNCTION snowid_unmask_text(masked text) RETURNS bigint
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_unmask_text_wrapper';
COMMENT ON FUNCTION snowid_mask(bigint) IS
    'An ID''s public form: a non-negative bigint that says nothing of the ID''s time, shard or order without the key in snowid.mask_key (FF1 of NIST SP 800-38G). STABLE: the key can change.';
COMMENT ON FUNCTION snowid_unmask(bigint) IS
    'The ID a public form from snowid_mask stands for, under the key in snowid.mask_key: for lookups, WHERE id = snowid_unmask($1).';
COMMENT ON FUNCTION snowid_mask_text(bigint) IS
    'An ID''s public form for URLs: snowid_mask as 13 symbols of Crockford''s base32.';
COMMENT ON FUNCTION snowid_unmask_text(text) IS
    'The ID a text from snowid_mask_text stands for (any case; I, L and O read as 1, 1 and 0).';
