//! What a database owner (`owner1`: no superuser, owner of databases `mdb` and `cdb`, where it
//! installed the trusted extension) can do to what a superuser runs cluster-wide: the survey of
//! every database's keys (every form of the resume), and the records a release and a take-back
//! write in every database. None of its code runs as the superuser; none of its settings, temp
//! tables, collations or values steer or stall it; and a superuser can always lift a fence
//! knowingly.
//!
//! Each trap is a function of `owner1`'s that, whenever it runs, logs who it ran as, and makes
//! `owner1` a superuser if it runs as one (so that the test would see the escalation itself).

use snowid_integration::fences::*;
use snowid_integration::hostile::{assert_nothing_of_hers_ran_as_a_superuser, TRAPS};
use snowid_integration::postgres::Client;
use snowid_integration::{code, not_run, ran, Cluster};

/// Row 2's places, in `mdb`, on bigint keys the survey reads: an expression index, a partial
/// index's predicate, a partition key expression, an expression statistics object, a CHECK
/// constraint of an inheritance child, and a row-level security policy forced on the owner that
/// hides every row. Each table has rows.
const PLACES: &str = r#"
CREATE TABLE k1 (id bigint PRIMARY KEY DEFAULT snowid_next(5));
CREATE INDEX k1_expr ON k1 (public.imm(id));
CREATE INDEX k1_partial ON k1 (id) WHERE public.immb(id);
CREATE STATISTICS k1_stats ON (public.imm(id)) FROM k1;
INSERT INTO k1 SELECT FROM generate_series(1, 200);
ANALYZE k1;
ALTER TABLE k1 ENABLE ROW LEVEL SECURITY;
ALTER TABLE k1 FORCE ROW LEVEL SECURITY;
CREATE POLICY hide ON k1 USING (public.immb(id) AND false);
CREATE TABLE kp (id bigint DEFAULT snowid_next(5)) PARTITION BY RANGE (public.imm(id));
CREATE TABLE kp1 PARTITION OF kp FOR VALUES FROM (MINVALUE) TO (MAXVALUE);
INSERT INTO kp SELECT FROM generate_series(1, 50);
CREATE TABLE kparent (id bigint DEFAULT snowid_next(5));
CREATE TABLE kchild (CHECK (public.immb(id))) INHERITS (kparent);
INSERT INTO kchild SELECT FROM generate_series(1, 50);
"#;

/// Row 1's and row 2's types, in `cdb`: a composite key with a cast to text, and an enum key with
/// a cast to text, each a function of `owner1`'s. The survey refuses both, by name, and runs
/// neither cast.
const TYPES: &str = r#"
CREATE TYPE public.idbox AS (v bigint);
CREATE FUNCTION public.box_text(b public.idbox) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.trap('composite cast'); RETURN (b).v::text; END $$;
CREATE CAST (public.idbox AS text) WITH FUNCTION public.box_text(public.idbox);
CREATE TABLE kb (k public.idbox DEFAULT ROW(snowid_next(5))::public.idbox);
INSERT INTO kb SELECT FROM generate_series(1, 10);
CREATE TYPE public.mood AS ENUM ('ok');
CREATE FUNCTION public.mood_text(m public.mood) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.trap('enum cast'); RETURN 'ok'; END $$;
CREATE CAST (public.mood AS text) WITH FUNCTION public.mood_text(public.mood);
CREATE TABLE ke (k public.mood DEFAULT CASE WHEN snowid_next(5) > 0 THEN 'ok'::public.mood END);
INSERT INTO ke SELECT FROM generate_series(1, 10);
"#;

/// A preloaded cluster with `t` (shard 5) in `postgres`, and `owner1`'s databases `mdb` and
/// `cdb`, each with snowid installed by `owner1` and its traps, `mdb` with `PLACES` and `cdb`
/// with `TYPES`.
fn cluster_of_a_hostile_owner() -> Cluster {
    let cluster = cluster_with_rows(5, 100);
    cluster
        .client()
        .batch_execute("CREATE ROLE owner1 LOGIN")
        .unwrap();
    for database in ["mdb", "cdb"] {
        cluster
            .client()
            .batch_execute(&format!("CREATE DATABASE {database} OWNER owner1"))
            .unwrap();
    }
    for (database, tables) in [("mdb", PLACES), ("cdb", TYPES)] {
        cluster
            .client_as("owner1", database)
            .batch_execute(&format!("CREATE EXTENSION snowid; {TRAPS} {tables}"))
            .unwrap_or_else(|e| panic!("{database}: {}", describe(&e)));
    }
    cluster
}

/// The state deleted while stopped, started again: fenced (the clock is right).
fn lose_state(cluster: &mut Cluster) {
    cluster.stop("fast");
    damage(cluster, Damage::Deleted);
    start(cluster);
}

/// The highest ID a table holds, read by the superuser bypassing its policies.
fn true_max(cluster: &Cluster, database: &str, sql: &str) -> i64 {
    let mut db = cluster.client_of(database);
    db.batch_execute("SET row_security = off").unwrap();
    db.query_one(sql, &[]).unwrap().get(0)
}

/// Rows 1 and 2. Guards against a survey that runs a database owner's code as the superuser
/// (0.6.0: a cast of `owner1`'s composite key type ran three times as the superuser during the
/// hint's resume and made `owner1` a superuser; functions in an expression index, a partial
/// index's predicate, a partition key, a statistics object, a child's CHECK and an enum's cast
/// ran as the superuser too), and against one an owner's policy fools (a forced policy hiding
/// every row). Every form of the resume, from the superuser's own database and from `owner1`'s,
/// reads `mdb`'s keys whole and runs nothing of `owner1`'s; `cdb`'s composite and enum keys are
/// refused by name; the superuser lifts the fence without `cdb` knowingly; a release and a
/// take-back then write `owner1`'s records running nothing either.
#[test]
fn no_code_of_a_database_owner_runs_as_the_superuser() {
    let mut cluster = cluster_of_a_hostile_owner();
    let k1_max = true_max(&cluster, "mdb", "SELECT max(id) FROM k1");
    let kb_max = true_max(&cluster, "cdb", "SELECT max((k).v) FROM kb");
    lose_state(&mut cluster);
    for caller in ["postgres", "mdb"] {
        let mut db = cluster.client_of(caller);
        for resume in [
            "SELECT * FROM snowid_resume_above_columns()".to_string(),
            format!("SELECT snowid_resume_above({k1_max})"),
        ] {
            let result = db.query(&resume, &[]);
            assert_nothing_of_hers_ran_as_a_superuser(
                &cluster,
                &["mdb", "cdb"],
                &format!("{resume} from {caller}"),
            );
            let err = result.expect_err("cdb's keys cannot be read");
            assert_eq!(code(&err), "55000", "{resume}: {}", describe(&err));
            let said = describe(&err);
            for named in [
                "public.kb.k in database \"cdb\": its type public.idbox is not one snowid reads",
                "public.ke.k in database \"cdb\": its type public.mood is not one snowid reads",
                "skip_databases => '{cdb}'",
            ] {
                assert!(said.contains(named), "{resume} from {caller}: {said}");
            }
            assert_refuses(&cluster, 5, k1_max, "after the refusal");
        }
    }
    // Knowingly: the superuser, who has read cdb's keys (kb's highest) itself, lifts the fence
    // above them without reading cdb; mdb is read whole, through the policy.
    let mut db = cluster.client_of("mdb");
    db.query(
        "SELECT snowid_resume_above($1, skip_databases => '{cdb}')",
        &[&kb_max],
    )
    .unwrap_or_else(|e| panic!("knowingly: {}", describe(&e)));
    assert_generates_above(&mut db, 5, kb_max.max(k1_max), "after the knowing resume");
    let rows = resume_rows_skipping(&mut cluster.client(), "cdb");
    for table in ["public.k1", "public.kp", "public.kparent"] {
        assert!(
            rows.iter()
                .any(|r| r.0 == "mdb" && r.1.as_deref() == Some(table)),
            "{table} is read: {rows:?}"
        );
    }
    let k1 = rows
        .iter()
        .find(|r| r.1.as_deref() == Some("public.k1"))
        .unwrap();
    assert_eq!(
        k1.3,
        Some(k1_max),
        "k1's highest key, through the policy that hides every row"
    );
    assert_nothing_of_hers_ran_as_a_superuser(&cluster, &["mdb", "cdb"], "after the resumes");
    // A release and a take-back write the records of mdb and cdb, running nothing of owner1's.
    let mut db = cluster.client();
    let last: i64 = db
        .query_one("SELECT snowid_release(9)", &[])
        .unwrap()
        .get(0);
    for database in ["mdb", "cdb"] {
        let recorded: Vec<i32> = cluster
            .client_of(database)
            .query_one("SELECT shards FROM snowid_released_shards", &[])
            .unwrap()
            .get(0);
        assert_eq!(recorded, vec![9], "{database} records the release");
    }
    let theirs = last + (1 << 23) * 1000;
    db.query_one("SELECT snowid_take_back(9, $1)", &[&theirs])
        .unwrap_or_else(|e| panic!("take back: {}", describe(&e)));
    assert_nothing_of_hers_ran_as_a_superuser(
        &cluster,
        &["mdb", "cdb"],
        "after a release and a take-back",
    );
}

/// `snowid_resume_above_columns()` without database `skipped`; its rows.
fn resume_rows_skipping(db: &mut Client, skipped: &str) -> Vec<KeyColumn> {
    db.query(
        "SELECT * FROM snowid_resume_above_columns(skip_databases => ARRAY[$1])",
        &[&skipped],
    )
    .unwrap_or_else(|e| panic!("resume without {skipped}: {}", describe(&e)))
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

/// Rows 6, 7 and 8. Guards against a cluster-wide statement that a database owner, or any login
/// role, stalls or steers (0.6.0: an empty temp table with a snowid default, held open by any
/// session, failed every resume with 0A000; `ALTER DATABASE ... SET default_transaction_read_only
/// = on`, `role` or `exit_on_error` refused every release in the cluster, or failed it with
/// XX000, and `session_authorization` made the worker the owner; a text key with a nondeterministic ICU collation failed every resume). Here all of them
/// at once: the release is recorded in `mdb`, and the hint's resume lifts a fence, reading the
/// text key, not reading the temp table.
#[test]
fn no_setting_temp_table_or_collation_of_an_owner_stalls_or_steers_it() {
    let mut cluster = cluster_with_rows(5, 100);
    let mut db = cluster.client();
    db.batch_execute("CREATE ROLE owner1 LOGIN; CREATE ROLE visitor LOGIN;")
        .unwrap();
    db.batch_execute("CREATE DATABASE mdb OWNER owner1")
        .unwrap();
    let mut owner = cluster.client_as("owner1", "mdb");
    owner
        .batch_execute(
            "CREATE EXTENSION snowid;
             CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(6));
             INSERT INTO t SELECT FROM generate_series(1, 100);
             GRANT SELECT ON t TO visitor;",
        )
        .unwrap();
    let icu = owner.batch_execute(
        "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
         CREATE TABLE tk (id text COLLATE ci DEFAULT snowid_text(snowid_next(6)));
         INSERT INTO tk SELECT FROM generate_series(1, 100);",
    );
    // Where the build has no ICU (the assert-enabled 15, say), the rest runs; the check of the
    // collation runs on the majors that have it, which the run's summary verifies.
    const TEST: &str = "no_setting_temp_table_or_collation_of_an_owner_stalls_or_steers_it";
    match &icu {
        Ok(()) => ran(TEST),
        Err(e) => not_run(
            TEST,
            &format!(
                "this PostgreSQL build has no ICU, so the nondeterministic collation is left out \
                 here: {}",
                describe(e)
            ),
        ),
    }
    let tk_max: Option<i64> = icu.as_ref().ok().map(|_| {
        owner
            .query_one("SELECT max(id::bigint) FROM tk", &[])
            .unwrap()
            .get(0)
    });
    owner
        .batch_execute(
            "ALTER DATABASE mdb SET default_transaction_read_only = on;
             ALTER DATABASE mdb SET role = 'owner1';
             ALTER DATABASE mdb SET session_authorization = 'owner1';
             ALTER DATABASE mdb SET default_transaction_isolation = 'serializable';
             ALTER DATABASE mdb SET exit_on_error = on;
             ALTER DATABASE mdb SET statement_timeout = '1ms';
             ALTER DATABASE mdb SET lock_timeout = '1ms';
             ALTER DATABASE mdb SET search_path = 'nowhere';
             ALTER DATABASE mdb SET transform_null_equals = on;",
        )
        .unwrap();
    drop(owner);
    let last: i64 = db
        .query_one("SELECT snowid_release(7)", &[])
        .unwrap_or_else(|e| panic!("release with mdb's settings: {}", describe(&e)))
        .get(0);
    assert!(last > 0);
    let mut mdb = snowid_integration::postgres::Config::new()
        .host("127.0.0.1")
        .port(cluster.port)
        .user("postgres")
        .dbname("mdb")
        .options("-c statement_timeout=0 -c lock_timeout=0 -c session_authorization=postgres")
        .connect(snowid_integration::postgres::NoTls)
        .unwrap();
    let recorded: Vec<i32> = mdb
        .query_one("SELECT shards FROM public.snowid_released_shards", &[])
        .unwrap()
        .get(0);
    assert_eq!(recorded, vec![7], "mdb records the release");
    drop(mdb);
    drop(db);
    lose_state(&mut cluster);
    // A session of any login role holds a temp table copied from t, snowid default and all, while
    // the resume runs (its own settings override the database's, as a client's do).
    let mut visitor = snowid_integration::postgres::Config::new()
        .host("127.0.0.1")
        .port(cluster.port)
        .user("visitor")
        .dbname("mdb")
        .options(
            "-c statement_timeout=0 -c default_transaction_read_only=off -c search_path=public",
        )
        .connect(snowid_integration::postgres::NoTls)
        .unwrap();
    visitor
        .batch_execute("CREATE TEMP TABLE stage (LIKE t INCLUDING ALL)")
        .unwrap();
    let rows = resume_rows(&mut cluster.client());
    assert!(
        !rows
            .iter()
            .any(|r| r.1.as_deref().is_some_and(|t| t.contains("stage"))),
        "a temp table is not read: {rows:?}"
    );
    if let Some(tk_max) = tk_max {
        assert!(
            rows.contains(&(
                "mdb".into(),
                Some("public.tk".into()),
                Some("id".into()),
                Some(tk_max)
            )),
            "the text key under a nondeterministic collation is read: {rows:?}"
        );
    }
    assert_released(
        &mut cluster.client(),
        7,
        "after the resume, as mdb recorded",
    );
    visitor.batch_execute("SELECT 1").unwrap();
}

/// Guards against a key a database owner stored ahead of the clock moving every shard's time
/// base (0.6.0: a key 50 minutes ahead did it with only a NOTICE, and resumes in a row, each
/// measured from the time base the one before had raised, could ratchet it further). The resume
/// refuses past `snowid.max_lead` and a minute ahead of the wall clock, naming the key; accepted,
/// it rises above it; a second key 50 minutes beyond that one is 100 minutes ahead of the wall
/// clock, and the same acceptance refuses it.
#[test]
fn a_key_stored_ahead_moves_the_time_base_no_further_than_the_superuser_accepts() {
    let mut cluster = cluster_with_rows(5, 100);
    let mut db = cluster.client();
    let old_max = max_id(&mut db);
    db.batch_execute("CREATE ROLE owner1 LOGIN").unwrap();
    db.batch_execute("CREATE DATABASE mdb OWNER owner1")
        .unwrap();
    let mut owner = cluster.client_as("owner1", "mdb");
    owner
        .batch_execute(
            "CREATE EXTENSION snowid;
             CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(6));
             INSERT INTO t VALUES
                 (snowid_from_timestamp(now() + interval '50 minutes', 6));",
        )
        .unwrap();
    lose_state(&mut cluster);
    let mut db = cluster.client();
    let err = db
        .query("SELECT * FROM snowid_resume_above_columns()", &[])
        .expect_err("a key 50 minutes ahead");
    assert_eq!(code(&err), "55000", "{}", describe(&err));
    assert!(
        describe(&err).contains("50.0 minutes ahead"),
        "{}",
        describe(&err)
    );
    assert!(
        describe(&err).contains("accept_ahead => '"),
        "{}",
        describe(&err)
    );
    assert_refuses(&cluster, 5, old_max, "after the refusal");
    for accepted in ["49 minutes", "11 minutes"] {
        db.query(
            "SELECT * FROM snowid_resume_above_columns(accept_ahead => $1::text::interval)",
            &[&accepted],
        )
        .expect_err("accepted less than the key needs");
    }
    db.query(
        "SELECT * FROM snowid_resume_above_columns(accept_ahead => '51 minutes')",
        &[],
    )
    .unwrap_or_else(|e| panic!("accepted: {}", describe(&e)));
    // The next key, 50 minutes beyond the first: 100 minutes ahead of the wall clock, whatever
    // the time base says now.
    cluster
        .client_as("owner1", "mdb")
        .batch_execute(
            "INSERT INTO t VALUES
                 (snowid_from_timestamp(now() + interval '100 minutes', 6));",
        )
        .unwrap();
    let err = db
        .query(
            "SELECT * FROM snowid_resume_above_columns(accept_ahead => '51 minutes')",
            &[],
        )
        .expect_err("no ratchet: measured from the wall clock");
    assert!(
        describe(&err).contains("100.0 minutes ahead")
            || describe(&err).contains("1.7 hours ahead"),
        "{}",
        describe(&err)
    );
}
