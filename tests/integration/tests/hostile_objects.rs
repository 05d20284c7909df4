//! Items 5 to 7 of issue 51: what a database owner (`owner1`: no superuser, owner of the
//! database `mdb`, where she installs the trusted extension) plants in every place PostgreSQL
//! runs code or resolves a name, and the snowid functions a superuser calls in her database, and
//! the install and the update themselves (which run as a superuser when she runs them). Nothing of
//! hers runs as the superuser, and none of her objects or settings steers what snowid makes.
//!
//! Her planted objects, and what each would do if snowid resolved a name through her schema or
//! ran her code:
//! - domains named after built-in types (`text`, `int4`, `regclass`, ...) in `public`, and in
//!   `pg_temp` of her session, each with a CHECK that calls her trap;
//! - operators and functions in `public` shadowing built-in ones by name (`=`, `<>`, `&`,
//!   `cardinality`, `pg_get_expr`, `format`, `max`, ...), and overloads of snowid's own functions
//!   planted after the install;
//! - IMMUTABLE functions with constant arguments in an index expression, a partial index's
//!   predicate, a statistics object, an inheritance child's CHECK and a partition key (the
//!   planner folds those constants, running her function), and a forced row-level security
//!   policy;
//! - a composite type with a cast of hers to `text`;
//! - her database's `search_path = public, pg_catalog` (which puts her `public.text` before
//!   `pg_catalog.text` for every session, the superuser's too), and in her session `search_path`,
//!   `standard_conforming_strings = off`, `default_table_access_method`, and other settings an
//!   install script could meet.
//!
//! Her trap logs who it ran as and makes `owner1` a superuser if it runs as one, so that a test
//! sees the escalation itself. She cannot create an event trigger (a superuser's privilege, which
//! the install test checks), nor an access method: the superuser made `heap2` (a second name for
//! the heap) and, where Citus is installed, `citus_columnar`'s `columnar`, and granted nothing.

use snowid_integration::catalog::CATALOG;
use snowid_integration::citus::citus_installed;
use snowid_integration::fences::describe;
use snowid_integration::hostile::{assert_nothing_of_hers_ran_as_a_superuser, checker, TRAPS};
use snowid_integration::postgres::Client;
use snowid_integration::{code, major_number, Cluster, OldInstallScripts};

/// Domains named after the built-in types snowid's SQL names, in `public`; operators and
/// functions shadowing the built-in ones snowid's SQL calls. Each calls the trap, then does what
/// the built-in does.
const SHADOWS: &str = r#"
DO $$
DECLARE t pg_catalog.text;
BEGIN
    FOREACH t IN ARRAY ARRAY['text', 'int2', 'int4', 'int8', 'oid', 'regclass', 'regtype', 'name',
                             'timestamptz', 'interval', 'bool', 'uuid', 'char', 'bytea'] LOOP
        EXECUTE pg_catalog.format(
            'CREATE DOMAIN public.%I AS pg_catalog.%I CHECK (public.trap(%L))',
            t, t, 'domain public.' OPERATOR(pg_catalog.||) t);
    END LOOP;
END $$;
DO $$
DECLARE o pg_catalog.text[];
BEGIN
    FOREACH o SLICE 1 IN ARRAY ARRAY[
        ['=', 'oid', 'oideq'], ['=', 'name', 'nameeq'], ['=', 'int2', 'int2eq'],
        ['=', 'int4', 'int4eq'], ['=', 'int8', 'int8eq'], ['=', 'char', 'chareq'],
        ['=', 'text', 'texteq'], ['<>', 'char', 'charne'], ['<>', 'int4', 'int4ne'],
        ['<', 'oid', 'oidlt'], ['>', 'int2', 'int2gt'], ['>=', 'int8', 'int8ge'],
        ['&', 'int2', 'int2and']
    ] LOOP
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION public.%I(pg_catalog.%I, pg_catalog.%I) RETURNS %s LANGUAGE plpgsql
             AS $f$ BEGIN PERFORM public.trap(%L); RETURN pg_catalog.%I($1, $2); END $f$',
            'shadow_' OPERATOR(pg_catalog.||) o[3], o[2], o[2],
            CASE WHEN o[1] OPERATOR(pg_catalog.=) '&' THEN 'pg_catalog.int2'
                 ELSE 'pg_catalog.bool' END,
            'operator ' OPERATOR(pg_catalog.||) o[1] OPERATOR(pg_catalog.||) ' on '
                OPERATOR(pg_catalog.||) o[2],
            o[3]);
        EXECUTE pg_catalog.format(
            'CREATE OPERATOR public.%s (LEFTARG = pg_catalog.%I, RIGHTARG = pg_catalog.%I,
             FUNCTION = public.%I)',
            o[1], o[2], o[2], 'shadow_' OPERATOR(pg_catalog.||) o[3]);
    END LOOP;
END $$;
CREATE FUNCTION public.cardinality(pg_catalog.int4[]) RETURNS pg_catalog.int4 LANGUAGE plpgsql
AS $$ BEGIN PERFORM public.trap('cardinality'); RETURN pg_catalog.cardinality($1); END $$;
CREATE FUNCTION public.pg_get_expr(pg_catalog.pg_node_tree, pg_catalog.oid) RETURNS pg_catalog.text
LANGUAGE plpgsql
AS $$ BEGIN PERFORM public.trap('pg_get_expr'); RETURN pg_catalog.pg_get_expr($1, $2); END $$;
CREATE FUNCTION public.format(pg_catalog.text, pg_catalog.name, pg_catalog.name)
RETURNS pg_catalog.text LANGUAGE plpgsql
AS $$ BEGIN PERFORM public.trap('format'); RETURN pg_catalog.format($1, $2, $3); END $$;
CREATE FUNCTION public.pg_my_temp_schema() RETURNS pg_catalog.oid LANGUAGE plpgsql
AS $$ BEGIN PERFORM public.trap('pg_my_temp_schema'); RETURN pg_catalog.pg_my_temp_schema(); END $$;
CREATE FUNCTION public.max_step(pg_catalog.int8, pg_catalog.int8) RETURNS pg_catalog.int8
LANGUAGE plpgsql
AS $$ BEGIN PERFORM public.trap('max'); RETURN pg_catalog.int8larger($1, $2); END $$;
CREATE AGGREGATE public.max(pg_catalog.int8) (SFUNC = public.max_step, STYPE = pg_catalog.int8);
"#;

/// A preloaded cluster with `owner1` and her database `mdb` (her traps and shadows in it); the
/// superuser's access methods `heap2`, and `columnar` where Citus is installed, in `mdb`; a
/// tablespace `hers` that she may create tables in.
fn cluster_of_a_hostile_owner() -> Cluster {
    let cluster = Cluster::preloaded(&[]);
    let mut admin = cluster.client();
    for statement in [
        "CREATE ROLE owner1 LOGIN",
        "CREATE DATABASE mdb OWNER owner1",
    ] {
        admin.batch_execute(statement).unwrap();
    }
    let location = cluster.dir().join("hers");
    cluster.run_as_server_user("mkdir", &[location.as_os_str()]);
    admin
        .batch_execute(&format!(
            "CREATE TABLESPACE hers LOCATION '{}'",
            location.display()
        ))
        .unwrap();
    admin
        .batch_execute("GRANT CREATE ON TABLESPACE hers TO owner1")
        .unwrap();
    let mut admin = cluster.client_of("mdb");
    admin
        .batch_execute("CREATE ACCESS METHOD heap2 TYPE TABLE HANDLER heap_tableam_handler")
        .unwrap();
    if citus_installed() {
        admin
            .batch_execute("CREATE EXTENSION citus_columnar")
            .unwrap();
    }
    cluster
        .client_as("owner1", "mdb")
        .batch_execute(&format!("{TRAPS} {SHADOWS}"))
        .unwrap_or_else(|e| panic!("planting: {}", describe(&e)));
    cluster
}

/// The table access method she sets before she installs: Citus's columnar where it is installed
/// (0.7.0 then made a record no release could write), else `heap2`.
fn her_access_method() -> &'static str {
    match citus_installed() {
        true => "columnar",
        false => "heap2",
    }
}

/// A session of hers with everything an install script meets set against it: her schema before
/// `pg_catalog`, domains in `pg_temp` named after built-in types, backslashes in ordinary
/// literals taken as escapes, another table access method, her tablespace, and settings that
/// change how SQL reads and prints.
fn her_hostile_session(cluster: &Cluster, database: &str, access_method: &str) -> Client {
    let mut her = cluster.client_as("owner1", database);
    // PostgreSQL 19 no longer lets a session turn standard_conforming_strings off.
    let escapes = match major_number() < 19 {
        true => "SET standard_conforming_strings = off; SET escape_string_warning = off;",
        false => "",
    };
    her.batch_execute(&format!(
        "SET search_path = public, pg_catalog;
         {escapes}
         SET default_table_access_method = {};
         SET default_tablespace = hers;
         SET default_toast_compression = pglz;
         SET transform_null_equals = on;
         SET quote_all_identifiers = on;
         SET array_nulls = off;
         SET IntervalStyle = sql_standard;
         SET DateStyle = 'SQL, DMY';
         SET TimeZone = 'Pacific/Chatham';
         SET extra_float_digits = -15;
         SET bytea_output = escape;
         CREATE DOMAIN pg_temp.text AS pg_catalog.text CHECK (public.trap('domain pg_temp.text'));
         CREATE DOMAIN pg_temp.regclass AS pg_catalog.regclass
             CHECK (public.trap('domain pg_temp.regclass'));
         CREATE DOMAIN pg_temp.interval AS pg_catalog.interval
             CHECK (public.trap('domain pg_temp.interval'));
         CREATE DOMAIN pg_temp.timestamptz AS pg_catalog.timestamptz
             CHECK (public.trap('domain pg_temp.timestamptz'));",
        access_method
    ))
    .unwrap_or_else(|e| panic!("her session: {}", describe(&e)));
    her
}

/// The extension as a user or a dump sees it in a database (see `CATALOG`), printed with
/// `pg_catalog` alone on the `search_path`, so that her objects change nothing of how it prints
/// (with her `public.cardinality(int[])` in view, the record's CHECK would print qualified).
fn catalog_of(cluster: &Cluster, database: &str) -> String {
    let mut db = checker(cluster, database);
    db.batch_execute("SET search_path = ''").unwrap();
    db.query_one(CATALOG, &[]).unwrap().get(0)
}

/// The record table's access method in a database.
fn record_access_method(cluster: &Cluster, database: &str) -> String {
    checker(cluster, database)
        .query_one(
            "SELECT a.amname::text FROM pg_class c JOIN pg_am a ON a.oid = c.relam \
             WHERE c.relname = 'snowid_released_shards'",
            &[],
        )
        .unwrap()
        .get(0)
}

/// Items 5 and 7 (the install and the update). Guards against an install or an update that a
/// database owner's settings or objects steer, when she runs it and it runs as a superuser: a
/// record of the released shards made columnar by her `default_table_access_method` (0.7.0: every
/// `snowid_release` in the cluster then failed, 0A000), or put in her tablespace by her
/// `default_tablespace` (where a full disk of hers would fail every release), a comment changed
/// by her `standard_conforming_strings`, a type or function of hers resolved in the script, her
/// code run as the superuser. Installed in her hostile session, and updated from 0.7.0 in another of
/// her databases under the same session, the extension equals a plain install in a database of
/// the superuser's (functions, bodies, settings, comments, the record's access method and
/// columns), her trap never runs as the superuser, and a release then records in both. She cannot
/// create an event trigger to run in the script either.
#[test]
fn the_install_and_the_update_are_not_steered() {
    let cluster = cluster_of_a_hostile_owner();
    let mut admin = cluster.client();
    for statement in ["CREATE DATABASE plain", "CREATE DATABASE udb OWNER owner1"] {
        admin.batch_execute(statement).unwrap();
    }
    cluster
        .client_of("plain")
        .batch_execute("CREATE EXTENSION snowid")
        .unwrap();
    let mut udb = cluster.client_of("udb");
    udb.batch_execute("CREATE ACCESS METHOD heap2 TYPE TABLE HANDLER heap_tableam_handler")
        .unwrap();
    if citus_installed() {
        udb.batch_execute("CREATE EXTENSION citus_columnar")
            .unwrap();
    }
    cluster
        .client_as("owner1", "udb")
        .batch_execute(&format!("{TRAPS} {SHADOWS}"))
        .unwrap();

    let mut her = her_hostile_session(&cluster, "mdb", her_access_method());
    let err = her
        .batch_execute(
            "CREATE EVENT TRIGGER her_trigger ON ddl_command_start
             EXECUTE FUNCTION public.snowid_fill_id()",
        )
        .expect_err("only a superuser creates event triggers");
    assert_eq!(code(&err), "42501", "{}", describe(&err));
    her.batch_execute("CREATE EXTENSION snowid")
        .unwrap_or_else(|e| panic!("her install: {}", describe(&e)));
    assert_nothing_of_hers_ran_as_a_superuser(&cluster, &["mdb"], "after her install");
    let plain = catalog_of(&cluster, "plain");
    assert_eq!(
        catalog_of(&cluster, "mdb"),
        plain,
        "her install under her objects and settings equals a plain one"
    );
    assert_eq!(record_access_method(&cluster, "mdb"), "heap");

    // 0.7.0's script in her session (placed for that step) made the record hers to choose; with
    // 0.7.0's library a columnar one too, which nothing wrote until a release: the superuser makes
    // it so here, where Citus is installed (this library writes the record as the install
    // commits, and refuses a columnar one then). The update in her session puts everything right.
    let mut her = her_hostile_session(&cluster, "udb", "heap2");
    {
        let _scripts = OldInstallScripts::place();
        her.batch_execute("CREATE EXTENSION snowid VERSION '0.7.0'")
            .unwrap_or_else(|e| panic!("0.7.0 in her session: {}", describe(&e)));
    }
    assert_eq!(
        record_access_method(&cluster, "udb"),
        "heap2",
        "0.7.0's record took her default_table_access_method"
    );
    if citus_installed() {
        checker(&cluster, "udb")
            .batch_execute("ALTER TABLE public.snowid_released_shards SET ACCESS METHOD columnar")
            .unwrap();
    }
    let mut her = her_hostile_session(&cluster, "udb", her_access_method());
    her.batch_execute("ALTER EXTENSION snowid UPDATE")
        .unwrap_or_else(|e| panic!("her update: {}", describe(&e)));
    assert_nothing_of_hers_ran_as_a_superuser(&cluster, &["mdb", "udb"], "after her update");
    assert_eq!(
        catalog_of(&cluster, "udb"),
        plain,
        "her update under her objects and settings equals a plain install"
    );
    drop(her);

    // Every release records in both of her databases.
    let last: i64 = admin
        .query_one("SELECT snowid_release(9)", &[])
        .unwrap_or_else(|e| panic!("a release after her install and update: {}", describe(&e)))
        .get(0);
    assert!(last > 0);
    for database in ["mdb", "udb"] {
        let recorded: Vec<i32> = checker(&cluster, database)
            .query_one("SELECT shards FROM snowid_released_shards", &[])
            .unwrap()
            .get(0);
        assert_eq!(recorded, vec![9], "{database} records the release");
    }
    assert_nothing_of_hers_ran_as_a_superuser(&cluster, &["mdb", "udb"], "after the release");
}

/// Her partitioned tables, in `mdb`: one a superuser makes partitions for, and one keyed by an
/// expression with a constant the planner would fold.
const PARTITIONED: &str = r#"
CREATE TABLE public.events (id pg_catalog.int8 PRIMARY KEY DEFAULT snowid_next(5))
    PARTITION BY RANGE (id);
CREATE INDEX events_folded ON public.events ((id OPERATOR(pg_catalog.+) public.imm(0)));
CREATE TABLE public.by_expression (id pg_catalog.int8)
    PARTITION BY RANGE ((id OPERATOR(pg_catalog.+) public.imm(0)));
ALTER DATABASE mdb SET search_path = public, pg_catalog;
"#;

/// Item 5. Guards against a `snowid_partition_ddl` that a database owner's objects steer when a
/// superuser calls it in her database (0.7.0: its catalog query cast to `text` and `int4`
/// unqualified, so her database's `search_path = public, pg_catalog` resolved them to her
/// domains, whose CHECK made her a superuser). The superuser's session takes her database's
/// `search_path`; the statements come out, and a second call after running them emits none; a
/// table partitioned by an expression is refused (42809) without evaluating it; nothing of hers
/// ran as the superuser.
#[test]
fn partition_ddl_in_her_database_runs_nothing_of_hers() {
    let cluster = cluster_of_a_hostile_owner();
    cluster
        .client_as("owner1", "mdb")
        .batch_execute(&format!("CREATE EXTENSION snowid; {PARTITIONED}"))
        .unwrap_or_else(|e| panic!("{}", describe(&e)));
    let mut db = cluster.client_of("mdb");
    let path: String = db.query_one("SHOW search_path", &[]).unwrap().get(0);
    assert_eq!(
        path, "public, pg_catalog",
        "her database's search_path is in force"
    );
    let ddl = "SELECT public.snowid_partition_ddl('public.events', \
               '2026-03-01 00:00+00', '2026-03-04 00:00+00')";
    let statements: Vec<String> = db
        .query(ddl, &[])
        .unwrap_or_else(|e| panic!("{}", describe(&e)))
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(statements.len(), 3, "{statements:?}");
    assert_nothing_of_hers_ran_as_a_superuser(&cluster, &["mdb"], "snowid_partition_ddl");
    // Run as the table's owner, as the reference says: PostgreSQL folds her index expression's
    // constant for each new partition's index, which then runs as her.
    let mut as_owner = cluster.client_as("owner1", "mdb");
    for statement in &statements {
        as_owner.batch_execute(statement).unwrap();
    }
    let again = db.query(ddl, &[]).unwrap();
    assert!(again.is_empty(), "a rerun emits nothing");
    let err = db
        .query(
            "SELECT public.snowid_partition_ddl('public.by_expression', \
             '2026-03-01 00:00+00', '2026-03-04 00:00+00')",
            &[],
        )
        .expect_err("a table partitioned by an expression");
    assert_eq!(code(&err), "42809", "{}", describe(&err));
    assert_nothing_of_hers_ran_as_a_superuser(&cluster, &["mdb"], "snowid_partition_ddl");
}

/// Her tables for conversion, in `mdb`: `conv`, keyed by `bigserial`, with an index expression,
/// a partial index's predicate, a statistics object and an inheritance child's CHECK, each with
/// a constant the planner folds, and a forced policy; `conv_hidden`, whose forced policy hides a
/// key dated a year ahead; `conv_parted`, partitioned by an expression with such a constant;
/// `boxes`, keyed by her composite type with her cast to `text`.
const TO_CONVERT: &str = r#"
CREATE TABLE public.conv (id pg_catalog.int8 PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY,
                          n pg_catalog.int4);
CREATE INDEX conv_folded ON public.conv ((id OPERATOR(pg_catalog.+) public.imm(0)));
CREATE INDEX conv_partial ON public.conv (id) WHERE public.immb(0);
CREATE STATISTICS conv_stats ON (id OPERATOR(pg_catalog.+) public.imm(0)), n FROM public.conv;
CREATE TABLE public.conv_child (CHECK (id OPERATOR(pg_catalog.>) public.imm(-1)))
    INHERITS (public.conv);
INSERT INTO public.conv (n) SELECT g FROM pg_catalog.generate_series(1, 100) g;
INSERT INTO public.conv_child (id, n) VALUES (1000, 0);
ANALYZE public.conv;
ALTER TABLE public.conv ENABLE ROW LEVEL SECURITY;
ALTER TABLE public.conv FORCE ROW LEVEL SECURITY;
CREATE POLICY her_policy ON public.conv USING (public.immb(id));
CREATE TABLE public.conv_hidden (id pg_catalog.int8 PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY);
INSERT INTO public.conv_hidden (id)
    VALUES (1), (snowid_from_timestamp(pg_catalog.now() OPERATOR(pg_catalog.+) '1 year'));
ALTER TABLE public.conv_hidden ENABLE ROW LEVEL SECURITY;
ALTER TABLE public.conv_hidden FORCE ROW LEVEL SECURITY;
CREATE POLICY her_policy ON public.conv_hidden USING (id OPERATOR(pg_catalog.<) 1000);
CREATE TABLE public.conv_parted (id pg_catalog.int8 GENERATED BY DEFAULT AS IDENTITY)
    PARTITION BY RANGE ((id OPERATOR(pg_catalog.+) public.imm(0)));
CREATE TABLE public.conv_parted_all PARTITION OF public.conv_parted
    FOR VALUES FROM (MINVALUE) TO (MAXVALUE);
INSERT INTO public.conv_parted SELECT FROM pg_catalog.generate_series(1, 10);
CREATE TYPE public.idbox AS (v pg_catalog.int8);
CREATE FUNCTION public.box_text(b public.idbox) RETURNS pg_catalog.text LANGUAGE plpgsql
AS $$ BEGIN PERFORM public.trap('composite cast'); RETURN (b).v::pg_catalog.text; END $$;
CREATE CAST (public.idbox AS pg_catalog.text) WITH FUNCTION public.box_text(public.idbox);
CREATE TABLE public.boxes (k public.idbox);
ALTER DATABASE mdb SET search_path = public, pg_catalog;
"#;

/// Item 6. Guards against a `snowid_convert_column` that runs a database owner's code as the
/// superuser who converts her table (0.7.0: it read `max(col)` with a query, as the caller, whose
/// planning folded the constants of her index expression, partial index, statistics object and
/// child's CHECK, running her function as the superuser), or that her policy fools. The
/// superuser converts `conv` (its child's keys read too) and `conv_parted` in her database,
/// under her `search_path`; each takes its values from snowid above the old ones; `conv_hidden`,
/// whose policy hides a key dated a year ahead, is refused (55000) and left as it was; `boxes`,
/// of her composite type, is refused (42804) without her cast; nothing of hers ran as the
/// superuser; and she converts a table of her own the same way.
#[test]
fn convert_column_in_her_database_runs_nothing_of_hers() {
    let cluster = cluster_of_a_hostile_owner();
    cluster
        .client_as("owner1", "mdb")
        .batch_execute(&format!("CREATE EXTENSION snowid; {TO_CONVERT}"))
        .unwrap_or_else(|e| panic!("{}", describe(&e)));
    let mut db = cluster.client_of("mdb");
    for (table, highest) in [("conv", 1000), ("conv_parted", 10)] {
        let row = db
            .query_one(
                &format!(
                    "SELECT sequence_fate, first_id \
                     FROM public.snowid_convert_column('public.{table}', 'id', 5)"
                ),
                &[],
            )
            .unwrap_or_else(|e| panic!("converting {table}: {}", describe(&e)));
        assert_eq!(row.get::<_, String>(0), "dropped with the identity");
        assert!(row.get::<_, i64>(1) > highest);
        assert_nothing_of_hers_ran_as_a_superuser(
            &cluster,
            &["mdb"],
            &format!("converting {table}"),
        );
    }
    let default: String = checker(&cluster, "mdb")
        .query_one(
            "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef \
             WHERE adrelid = 'public.conv_child'::regclass",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(default, "snowid_next(5)", "the child's default too");

    let err = db
        .query(
            "SELECT * FROM public.snowid_convert_column('public.conv_hidden', 'id', 5)",
            &[],
        )
        .expect_err("a key dated a year ahead, hidden by her policy");
    assert_eq!(code(&err), "55000", "{}", describe(&err));
    assert!(
        describe(&err).contains("holds values at or above the IDs snowid would issue"),
        "{}",
        describe(&err)
    );
    let identity: String = checker(&cluster, "mdb")
        .query_one(
            "SELECT attidentity::text FROM pg_attribute \
             WHERE attrelid = 'public.conv_hidden'::regclass AND attname = 'id'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(identity, "d", "conv_hidden is left as it was");

    let err = db
        .query(
            "SELECT * FROM public.snowid_convert_column('public.boxes', 'k', 5)",
            &[],
        )
        .expect_err("her composite key");
    assert_eq!(code(&err), "42804", "{}", describe(&err));
    assert_nothing_of_hers_ran_as_a_superuser(&cluster, &["mdb"], "the refusals");

    let mut her = cluster.client_as("owner1", "mdb");
    her.batch_execute(
        "CREATE TABLE public.mine (id pg_catalog.int8 PRIMARY KEY GENERATED ALWAYS AS IDENTITY);
         INSERT INTO public.mine DEFAULT VALUES;
         SELECT public.snowid_convert_column('public.mine', 'id', 6);
         INSERT INTO public.mine DEFAULT VALUES;",
    )
    .unwrap_or_else(|e| panic!("her own conversion: {}", describe(&e)));
    let shards: Vec<i32> = checker(&cluster, "mdb")
        .query("SELECT snowid_shard(id) FROM public.mine ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        shards,
        vec![0, 6],
        "her identity key, then snowid's on shard 6"
    );
}

/// Items 5 and 6 (the decoders and the trigger). Guards against a decoder or `snowid_fill_id`
/// that a database owner's objects steer when a superuser calls it in her database: 0.7.0's
/// `snowid_parse` looked up `snowid_timestamp`, `snowid_shard` and `snowid_seq` at each call
/// under the caller's `search_path`, so her overloads of them (planted after the install) made
/// every call fail as ambiguous, or could be chosen. Under her database's `search_path`, with
/// those overloads planted, every decoder and generator answers as in any database, and a
/// superuser's insert into her table through `snowid_fill_id` gets its ID on the key's shard;
/// nothing of hers ran as the superuser.
#[test]
fn decoders_and_the_trigger_in_her_database_run_nothing_of_hers() {
    let cluster = cluster_of_a_hostile_owner();
    cluster
        .client_as("owner1", "mdb")
        .batch_execute(
            "CREATE EXTENSION snowid;
             CREATE TABLE public.photos (id pg_catalog.int8 PRIMARY KEY,
                                         user_id pg_catalog.int8 NOT NULL);
             CREATE TRIGGER photos_id BEFORE INSERT ON public.photos
                 FOR EACH ROW EXECUTE FUNCTION public.snowid_fill_id('id', 'user_id');
             CREATE FUNCTION public.snowid_timestamp(pg_catalog.int8, pg_catalog.int4 DEFAULT 0)
                 RETURNS pg_catalog.timestamptz LANGUAGE plpgsql
                 AS $$ BEGIN PERFORM public.trap('snowid_timestamp'); RETURN NULL; END $$;
             CREATE FUNCTION public.snowid_shard(pg_catalog.int8, pg_catalog.int4 DEFAULT 0)
                 RETURNS pg_catalog.int4 LANGUAGE plpgsql
                 AS $$ BEGIN PERFORM public.trap('snowid_shard'); RETURN -1; END $$;
             CREATE FUNCTION public.snowid_seq(pg_catalog.int8, pg_catalog.int4 DEFAULT 0)
                 RETURNS pg_catalog.int4 LANGUAGE plpgsql
                 AS $$ BEGIN PERFORM public.trap('snowid_seq'); RETURN -1; END $$;
             ALTER DATABASE mdb SET search_path = public, pg_catalog;",
        )
        .unwrap_or_else(|e| panic!("{}", describe(&e)));
    let mut db = cluster.client_of("mdb");
    // (1000 ms << 23) | (5 << 10) | 7: a second after the default epoch, shard 5, seq 7.
    let id: i64 = (1000 << 23) | (5 << 10) | 7;
    let row = db
        .query_one(
            "SELECT (public.snowid_parse($1)).shard, p.seq,
                    pg_catalog.to_char(p.ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'),
                    public.snowid_timestamp($1, '2026-01-01 00:00+00'::pg_catalog.timestamptz)
                        OPERATOR(pg_catalog.=) p.ts,
                    public.snowid_from_timestamp(p.ts, 5, 7),
                    public.snowid_text($1),
                    public.snowid_shard_for(42::pg_catalog.int8),
                    public.snowid_shard_for('42'::pg_catalog.text),
                    (public.snowid_parse(public.snowid_next(3))).shard
             FROM public.snowid_parse($1) p",
            &[&id],
        )
        .unwrap_or_else(|e| panic!("decoding under her search_path: {}", describe(&e)));
    assert_eq!(row.get::<_, i32>(0), 5);
    assert_eq!(row.get::<_, i32>(1), 7);
    assert_eq!(row.get::<_, String>(2), "2026-01-01 00:00:01");
    assert!(row.get::<_, bool>(3));
    assert_eq!(row.get::<_, i64>(4), id);
    assert_eq!(row.get::<_, String>(5), format!("{id:019}"));
    assert_eq!(row.get::<_, i32>(6), 4643);
    assert_eq!(row.get::<_, i32>(7), 4643);
    assert_eq!(row.get::<_, i32>(8), 3);
    let shard: i32 = db
        .query_one(
            "WITH p AS (INSERT INTO public.photos (user_id) VALUES (42) RETURNING id)
             SELECT (public.snowid_parse(id)).shard FROM p",
            &[],
        )
        .unwrap_or_else(|e| panic!("her table's trigger: {}", describe(&e)))
        .get(0);
    assert_eq!(shard, 4643, "the ID is on the shard of user 42");
    assert_nothing_of_hers_ran_as_a_superuser(&cluster, &["mdb"], "the decoders and the trigger");
}
