-- Installs snowid in the regression database, plus a helper that shows an error's SQLSTATE
-- next to its message, so that the expected output pins both.
CREATE EXTENSION snowid;
SELECT extname, extversion FROM pg_extension WHERE extname = 'snowid';

CREATE FUNCTION sqlstate_of(query text) RETURNS text LANGUAGE plpgsql
SET search_path = pg_catalog, public AS $$
BEGIN
    EXECUTE query;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- Every function's markings: volatility, parallel safety, strictness.
SELECT p.oid::regprocedure AS function, provolatile, proparallel, proisstrict
FROM pg_proc p
JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowid'
ORDER BY p.oid::regprocedure::text;

-- The settings, with their units and contexts.
SELECT name, setting, unit, context, vartype FROM pg_settings WHERE name LIKE 'snowid.%' ORDER BY name;
