-- A trusted extension must give a database owner no route to more privilege. A database owner
-- can create functions and operators in public, and in schemas a superuser may put first in
-- search_path; if any snowid function called one of them, it would run with the superuser's
-- rights. Plant trojans for every function and operator snowid's SQL and catalog queries use
-- (and those snowid 0.1.0's snowid_partition_ddl called unqualified), in public and in a schema
-- placed before pg_catalog, then call every snowid function as a superuser. Nothing planted
-- may run.
SET timezone = 'UTC';
\set SHOW_CONTEXT never
CREATE TABLE trojan_log (what text);
CREATE SCHEMA evil;

CREATE FUNCTION evil.log(what text) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.trojan_log VALUES (what) $$;
CREATE FUNCTION evil.eq_oid_regclass(oid, regclass) RETURNS bool LANGUAGE sql
    AS $$ SELECT evil.log('=(oid, regclass)'); SELECT $1 OPERATOR(pg_catalog.=) $2::oid $$;
CREATE FUNCTION evil.eq_oid(oid, oid) RETURNS bool LANGUAGE sql
    AS $$ SELECT evil.log('=(oid, oid)'); SELECT $1 OPERATOR(pg_catalog.=) $2 $$;
CREATE FUNCTION evil.eq_int2(int2, int2) RETURNS bool LANGUAGE sql
    AS $$ SELECT evil.log('=(int2, int2)'); SELECT $1 OPERATOR(pg_catalog.=) $2 $$;
CREATE FUNCTION evil.ge_tstz(timestamptz, timestamptz) RETURNS bool LANGUAGE sql
    AS $$ SELECT evil.log('>=(timestamptz, timestamptz)'); SELECT $1 OPERATOR(pg_catalog.>=) $2 $$;
CREATE FUNCTION evil.lt_tstz(timestamptz, timestamptz) RETURNS bool LANGUAGE sql
    AS $$ SELECT evil.log('<(timestamptz, timestamptz)'); SELECT $1 OPERATOR(pg_catalog.<) $2 $$;
CREATE FUNCTION evil.cat(text, text) RETURNS text LANGUAGE sql
    AS $$ SELECT evil.log('||(text, text)'); SELECT pg_catalog.textcat($1, $2) $$;
CREATE FUNCTION evil.cat_name(name, text) RETURNS text LANGUAGE sql
    AS $$ SELECT evil.log('||(name, text)'); SELECT pg_catalog.textcat($1::text, $2) $$;
CREATE FUNCTION evil.eq_name(name, name) RETURNS bool LANGUAGE sql
    AS $$ SELECT evil.log('=(name, name)'); SELECT $1 OPERATOR(pg_catalog.=) $2 $$;
CREATE FUNCTION evil.max_step(bigint, bigint) RETURNS bigint LANGUAGE sql
    AS $$ SELECT evil.log('max(bigint)'); SELECT pg_catalog.int8larger($1, $2) $$;
DO $$
DECLARE s text;
BEGIN
    FOREACH s IN ARRAY ARRAY['evil', 'public'] LOOP
        EXECUTE format('CREATE OPERATOR %I.= (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = evil.eq_oid_regclass)', s);
        EXECUTE format('CREATE OPERATOR %I.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = evil.eq_oid)', s);
        EXECUTE format('CREATE OPERATOR %I.= (LEFTARG = int2, RIGHTARG = int2, FUNCTION = evil.eq_int2)', s);
        EXECUTE format('CREATE OPERATOR %I.>= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.ge_tstz)', s);
        EXECUTE format('CREATE OPERATOR %I.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.lt_tstz)', s);
        EXECUTE format('CREATE OPERATOR %I.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.cat)', s);
        EXECUTE format('CREATE OPERATOR %I.|| (LEFTARG = name, RIGHTARG = text, FUNCTION = evil.cat_name)', s);
        EXECUTE format('CREATE OPERATOR %I.= (LEFTARG = name, RIGHTARG = name, FUNCTION = evil.eq_name)', s);
        EXECUTE format('CREATE AGGREGATE %I.max(bigint) (SFUNC = evil.max_step, STYPE = bigint)', s);
        EXECUTE format($f$CREATE FUNCTION %I.convert_from(bytea, name) RETURNS text
            LANGUAGE sql AS 'SELECT evil.log(''convert_from''); SELECT ''id''::text'$f$, s);
        EXECUTE format($f$CREATE FUNCTION %I.getdatabaseencoding() RETURNS name
            LANGUAGE sql AS 'SELECT evil.log(''getdatabaseencoding''); SELECT ''UTF8''::name'$f$, s);
        EXECUTE format($f$CREATE FUNCTION %I.format(text, name, text, regclass, bigint, bigint) RETURNS text
            LANGUAGE sql AS 'SELECT evil.log(''format''); SELECT ''''::text'$f$, s);
        EXECUTE format($f$CREATE FUNCTION %I.to_char(timestamptz, text) RETURNS text
            LANGUAGE sql AS 'SELECT evil.log(''to_char''); SELECT ''''::text'$f$, s);
        EXECUTE format($f$CREATE FUNCTION %I.pg_get_expr(pg_node_tree, oid) RETURNS text
            LANGUAGE sql AS 'SELECT evil.log(''pg_get_expr''); SELECT ''''::text'$f$, s);
        EXECUTE format($f$CREATE FUNCTION %I.generate_series(timestamptz, timestamptz, interval) RETURNS SETOF timestamptz
            LANGUAGE sql AS 'SELECT evil.log(''generate_series''); SELECT now()'$f$, s);
        EXECUTE format($f$CREATE FUNCTION %I.pg_has_role(name, oid, text) RETURNS bool
            LANGUAGE sql AS 'SELECT evil.log(''pg_has_role''); SELECT true'$f$, s);
        EXECUTE format($f$CREATE FUNCTION %I.pg_get_serial_sequence(text, name) RETURNS text
            LANGUAGE sql AS 'SELECT evil.log(''pg_get_serial_sequence''); SELECT NULL::text'$f$, s);
        EXECUTE format($f$CREATE FUNCTION %I.format(text, regclass, name) RETURNS text
            LANGUAGE sql AS 'SELECT evil.log(''format''); SELECT ''SELECT 1''::text'$f$, s);
        EXECUTE format($f$CREATE FUNCTION %I.format(text, regclass, name, text, integer) RETURNS text
            LANGUAGE sql AS 'SELECT evil.log(''format''); SELECT ''SELECT 1''::text'$f$, s);
    END LOOP;
END
$$;
-- snowid's own functions, shadowed in the schema placed first.
CREATE FUNCTION evil.snowid_timestamp(bigint) RETURNS timestamptz LANGUAGE sql
    AS $$ SELECT evil.log('snowid_timestamp'); SELECT now() $$;
CREATE FUNCTION evil.snowid_shard(bigint) RETURNS int LANGUAGE sql
    AS $$ SELECT evil.log('snowid_shard'); SELECT 0 $$;
CREATE FUNCTION evil.snowid_seq(bigint) RETURNS int LANGUAGE sql
    AS $$ SELECT evil.log('snowid_seq'); SELECT 0 $$;
CREATE FUNCTION evil.snowid_from_timestamp(timestamptz, int, int) RETURNS bigint LANGUAGE sql
    AS $$ SELECT evil.log('snowid_from_timestamp'); SELECT 0::bigint $$;

CREATE TABLE sec_parts (id bigint) PARTITION BY RANGE (id);
CREATE TABLE sec_rows (id bigint PRIMARY KEY, user_id bigint);
CREATE TABLE sec_serial (id bigserial PRIMARY KEY);
INSERT INTO sec_serial DEFAULT VALUES;
CREATE TRIGGER sec_rows_id BEFORE INSERT ON sec_rows
    FOR EACH ROW EXECUTE FUNCTION public.snowid_fill_id('id', 'user_id');

-- The trap is set: a superuser with the hostile search_path calls everything.
SET search_path = evil, pg_catalog, public;
SELECT current_user, (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) current_user) AS superuser;
SELECT public.snowid_next(1) > 0, public.snowid_next(2::bigint) > 0, public.snowid_next(3.0) > 0,
       public.snowid_next() > 0;
SELECT * FROM public.snowid_parse(8388613127);
SELECT (public.snowid_parse(8388613127)).shard;
SELECT public.snowid_timestamp(8388613127) AT TIME ZONE 'UTC',
       public.snowid_timestamp(8388613127, '2026-01-01 00:00+00') AT TIME ZONE 'UTC',
       public.snowid_shard(8388613127), public.snowid_seq(8388613127),
       public.snowid_from_timestamp('2026-01-01 00:00:01+00', 5, 7);
SELECT public.snowid_shard_for(42), public.snowid_shard_for('42'::text),
       public.snowid_shard_for('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid);
SELECT public.snowid_partition_ddl('public.sec_parts', '2026-03-01 00:00+00', '2026-03-03 00:00+00');
SELECT public.snowid_partition_ddl('public.sec_parts', '2026-03-01 00:00+00', '2026-03-03 00:00+00') \gexec
SELECT pg_catalog.count(*) AS rerun FROM public.snowid_partition_ddl('public.sec_parts', '2026-03-01 00:00+00', '2026-03-03 00:00+00');
SELECT layout, generating FROM public.snowid_info();
SELECT pg_catalog.count(*) > 0 AS shards_used FROM public.snowid_stats();
SELECT public.snowid_resume_above(0) IS NOT NULL AS resumed;
SELECT public.snowid_take_back(8190, public.snowid_release(8190)) IS NOT NULL AS released_and_taken_back;
INSERT INTO public.sec_rows (user_id) VALUES (42);
SELECT col, max_id OPERATOR(pg_catalog.>) 0 AS has_ids FROM public.snowid_resume_above_columns()
WHERE tbl OPERATOR(pg_catalog.=) 'public.sec_rows';
SELECT public.snowid_shard(id) OPERATOR(pg_catalog.=) public.snowid_shard_for(42) AS filled FROM public.sec_rows;
SELECT sequence_fate FROM public.snowid_convert_column('public.sec_serial', 'id', 9);
INSERT INTO public.sec_serial DEFAULT VALUES;
SELECT public.snowid_shard(pg_catalog.max(id)) AS converted FROM public.sec_serial;

RESET search_path;
SELECT count(*) AS trojans_run, string_agg(DISTINCT what, ', ') AS which FROM trojan_log;

-- The operations that act on the whole server are for superusers only.
SELECT p.oid::regprocedure AS function, p.proacl
FROM pg_proc p
JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowid'
WHERE p.proacl IS NOT NULL
ORDER BY p.oid::regprocedure::text;
CREATE ROLE owner_not_super;
SET ROLE owner_not_super;
SELECT snowid_resume_above(0);
SELECT snowid_release(1);
SELECT snowid_take_back(1, 1024);
SELECT snowid_resume_above_columns();
SELECT snowid_resume_above_columns(released => '{7}');
-- The record of released shards: everyone reads it, nobody but snowid writes it (a forged or
-- emptied record would change what a fence lifts with).
SELECT count(*) FROM snowid_released_shards;
INSERT INTO snowid_released_shards VALUES (now(), '{}', '{}');
DELETE FROM snowid_released_shards;
RESET ROLE;
SELECT c.relname, r.rolsuper AS owned_by_a_superuser,
       (SELECT string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type)
        FROM aclexplode(c.relacl) a WHERE a.grantee = 0) AS granted_to_public
FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
WHERE c.relname = 'snowid_released_shards';
DROP ROLE owner_not_super;
