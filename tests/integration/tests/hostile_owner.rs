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
use snowid_integration::{code, not_run, one, ran, Cluster};

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
    let last: i64 = one(&mut db, "SELECT snowid_release(9)", &[]);
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
    let recorded: Vec<i32> = one(
        &mut mdb,
        "SELECT shards FROM public.snowid_released_shards",
        &[],
    );
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
    assert_error(&err, "55000", &["50.0 minutes ahead"]);
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

/// The bound every wait of the cluster-wide statements has (`LOCK_WAIT` in src/server/waits.rs).
const BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs `sql`, which must fail, and returns its error and how long it took.
fn timed_failure(
    db: &mut Client,
    sql: &str,
) -> (snowid_integration::postgres::Error, std::time::Duration) {
    let started = std::time::Instant::now();
    let _watchdog = snowid_integration::Watchdog::new(db, 6 * BOUND);
    let result = db.query(sql, &[]);
    let took = started.elapsed();
    match result {
        Ok(rows) => panic!("{sql} succeeded ({} rows) where it must fail", rows.len()),
        Err(err) => (err, took),
    }
}

/// The statement ended within the bound, after waiting for it: not sooner (it waited), and not
/// much later (nothing else waited).
fn assert_within_the_bound(sql: &str, took: std::time::Duration) {
    assert!(
        took >= BOUND - std::time::Duration::from_millis(500) && took < 2 * BOUND,
        "{sql} took {took:?}; it must end once, within {BOUND:?} of waiting"
    );
}

/// `owner1` (with CREATEDB) owning database `mdb`, where it installed snowid and keys `t` by
/// shard 6; a preloaded cluster with `t` keyed by shard 5 in `postgres`.
fn cluster_with_an_owners_database() -> Cluster {
    let cluster = cluster_with_rows(5, 100);
    let mut db = cluster.client();
    db.batch_execute("CREATE ROLE owner1 LOGIN CREATEDB")
        .unwrap();
    db.batch_execute("CREATE DATABASE mdb OWNER owner1")
        .unwrap();
    cluster
        .client_as("owner1", "mdb")
        .batch_execute(
            "CREATE EXTENSION snowid;
             CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(6));
             INSERT INTO t SELECT FROM generate_series(1, 100);",
        )
        .unwrap();
    cluster
}

/// The error names database `mdb` and the process that held it.
fn assert_names_mdb_and(err: &snowid_integration::postgres::Error, pid: i32, what: &str) {
    assert_eq!(code(err), "55P03", "{what}: {}", describe(err));
    let said = describe(err);
    let named = said
        .split("by process")
        .nth(1)
        .is_some_and(|processes| processes.contains(&pid.to_string()));
    assert!(
        said.contains("\"mdb\"") && named,
        "{what}: the error names the database and the process holding it: {said}"
    );
}

/// Issue 51, item 11. Guards against a database lock that stalls the cluster-wide statements
/// with no bound (0.7.0: a role with CREATEDB holding `ALTER DATABASE mdb RENAME` open stalled
/// every release, take-back and fence lift: the worker's connection waited on the database's
/// lock, and the caller on the worker). Each ends within the bound (measured), with 55P03 naming
/// `mdb` and the owner's process; a cancel ends the wait at once; once the rename is rolled back,
/// the release and the fence lift go through.
#[test]
fn a_database_held_locked_by_its_owner_stalls_no_statement_past_the_bound() {
    let mut cluster = cluster_with_an_owners_database();
    let mut db = cluster.client();
    let last9: i64 = one(&mut db, "SELECT snowid_release(9)", &[]);
    let hold = |cluster: &Cluster| {
        let mut owner = cluster.client_as("owner1", "postgres");
        owner
            .batch_execute("BEGIN; ALTER DATABASE mdb RENAME TO mdb_renamed;")
            .unwrap();
        let pid: i32 = one(&mut owner, "SELECT pg_backend_pid()", &[]);
        (owner, pid)
    };
    let (mut owner, pid) = hold(&cluster);
    let (err, took) = timed_failure(&mut db, "SELECT snowid_release(7)");
    assert_names_mdb_and(&err, pid, "the release");
    assert_within_the_bound("the release", took);
    assert_generates_above(&mut db, 7, 0, "after the refused release");
    // A cancel ends the wait: the take-back is durable, and says that mdb's record is not.
    let theirs = last9 + (1 << 23) * 1000;
    let started = std::time::Instant::now();
    let err = {
        let _cancel = snowid_integration::Watchdog::new(&db, std::time::Duration::from_secs(2));
        db.query_one("SELECT snowid_take_back(9, $1)", &[&theirs])
            .expect_err("cancelled while mdb is locked")
    };
    assert!(started.elapsed() < BOUND / 2, "the cancel ended the wait");
    assert_error(&err, "57014", &["was taken back"]);
    owner.batch_execute("ROLLBACK").unwrap();
    drop((db, owner));
    lose_state(&mut cluster);
    let (mut owner, pid) = hold(&cluster);
    let mut db = cluster.client();
    let (err, took) = timed_failure(&mut db, "SELECT * FROM snowid_resume_above_columns()");
    assert_names_mdb_and(&err, pid, "the fence lift");
    assert_within_the_bound("the fence lift", took);
    assert_refuses(&cluster, 5, 0, "after the refused fence lift");
    owner.batch_execute("ROLLBACK").unwrap();
    resume_rows(&mut db);
    db.query_one("SELECT snowid_release(7)", &[])
        .unwrap_or_else(|e| panic!("once mdb is free: {}", describe(&e)));
}

/// Issue 51, item 12. Guards against snowid's cluster-wide lock taken before PostgreSQL's own
/// (0.7.0: `owner1` held `COMMENT ON DATABASE mdb` open, then ran `CREATE DATABASE mcopy
/// TEMPLATE mdb`, whose session took snowid's lock and then waited for the template: every
/// `snowid_release` timed out, and `CREATE EXTENSION snowid` anywhere waited at its commit past
/// its `statement_timeout`). The copy holds nothing of snowid's while it waits for the template;
/// an install elsewhere commits within its `statement_timeout`; a release ends within the bound
/// naming `mdb` (a copy queued on a database keeps every new connection to it out) and the
/// process holding it; once the comment commits, the copy is made, and a release is recorded in
/// it too.
#[test]
fn a_copy_waiting_for_its_template_holds_nothing_of_snowids() {
    let cluster = cluster_with_an_owners_database();
    let mut db = cluster.client();
    db.batch_execute("CREATE DATABASE other").unwrap();
    let mut commenting = cluster.client_as("owner1", "postgres");
    commenting
        .batch_execute("BEGIN; COMMENT ON DATABASE mdb IS 'held';")
        .unwrap();
    let pid: i32 = one(&mut commenting, "SELECT pg_backend_pid()", &[]);
    let port = cluster.port;
    let copying = std::thread::spawn(move || {
        connect_to(port, "owner1", "postgres").batch_execute("CREATE DATABASE mcopy TEMPLATE mdb")
    });
    snowid_integration::wait_for(
        &mut db,
        "the copy waits for its template",
        "SELECT count(*) = 1 FROM pg_stat_activity
                 WHERE query LIKE 'CREATE DATABASE mcopy%' AND wait_event_type = 'Lock'",
    );
    let snowids: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
             WHERE a.query LIKE 'CREATE DATABASE mcopy%'
               AND l.locktype = 'advisory' AND l.classid = 1936617335",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        snowids, 0,
        "the waiting copy holds snowid's cluster-wide lock"
    );
    let mut other = cluster.client_of("other");
    let _watchdog = snowid_integration::Watchdog::new(&other, 3 * BOUND);
    let started = std::time::Instant::now();
    other
        .batch_execute("SET statement_timeout = '5s'; CREATE EXTENSION snowid;")
        .unwrap_or_else(|e| panic!("the install elsewhere: {}", describe(&e)));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let (err, took) = timed_failure(&mut db, "SELECT snowid_release(7)");
    assert_names_mdb_and(&err, pid, "the release");
    assert_within_the_bound("the release", took);
    commenting.batch_execute("COMMIT").unwrap();
    copying
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the copy: {}", describe(&e)));
    db.query_one("SELECT snowid_release(7)", &[])
        .unwrap_or_else(|e| panic!("the release once the copy is made: {}", describe(&e)));
    for (database, shards) in recorded_shards(&cluster, &["postgres", "mdb", "mcopy", "other"]) {
        assert_eq!(shards, vec![7], "{database}");
    }
}

/// Issue 51, item 13. Guards against a survey that waits for every locked table in turn while
/// the cluster-wide lock is held (0.7.0: a resume refused for four tables another session held
/// locked took 10 s each, 40 s). Four key tables of `mdb` held locked by `owner1`'s sessions: the
/// resume is refused within the bound, once, naming all four (the first waited for, the others
/// not).
#[test]
fn four_locked_tables_cost_one_wait() {
    let cluster = cluster_with_an_owners_database();
    let mut owner = cluster.client_as("owner1", "mdb");
    owner
        .batch_execute(
            "CREATE TABLE k1 (id bigint DEFAULT snowid_next(6));
             CREATE TABLE k2 (id bigint DEFAULT snowid_next(6));
             CREATE TABLE k3 (id bigint DEFAULT snowid_next(6));
             CREATE TABLE k4 (id bigint DEFAULT snowid_next(6));",
        )
        .unwrap();
    let holders: Vec<Client> = ["k1", "k2", "k3", "k4"]
        .iter()
        .map(|table| {
            let mut session = cluster.client_as("owner1", "mdb");
            session
                .batch_execute(&format!(
                    "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE;"
                ))
                .unwrap();
            session
        })
        .collect();
    let mut db = cluster.client();
    let (err, took) = timed_failure(&mut db, "SELECT * FROM snowid_resume_above_columns()");
    assert_eq!(code(&err), "55000", "{}", describe(&err));
    assert_within_the_bound("the resume", took);
    let said = describe(&err);
    assert!(
        said.contains("public.k1 stayed locked against reading for 10 s"),
        "{said}"
    );
    for table in ["k2", "k3", "k4"] {
        assert!(
            said.contains(&format!("public.{table} was locked against reading")),
            "{table}: {said}"
        );
    }
    drop(holders);
}

/// Issue 51, item 14. Guards against settings of a database or a role that steer the worker
/// (0.7.0 put back a fixed list, without `transaction_timeout` (17 on) or `client_encoding`:
/// `ALTER DATABASE mdb SET transaction_timeout = '1ms'` failed every release in the cluster).
/// `owner1` sets, for `mdb`, every kind of setting that changes what a query does or says (a
/// transaction timeout, the client encoding, parallel query forced where its workers cannot
/// connect, planner switches, memory, formats, row security, the table access method); a
/// superuser sets `zero_damaged_pages` for itself in `mdb`. A release is recorded in `mdb`; and a
/// damaged page holding `mdb`'s newest keys is not read as zeros: the resume refuses rather than
/// lift the fence below them.
#[test]
fn no_setting_of_a_database_or_role_steers_the_worker() {
    let mut cluster = cluster_with_an_owners_database();
    let major = snowid_integration::major_number();
    let mut settings = vec![
        "client_encoding = 'LATIN1'",
        "parallel_setup_cost = 0",
        "parallel_tuple_cost = 0",
        "min_parallel_table_scan_size = 0",
        "max_parallel_workers_per_gather = 4",
        "enable_hashjoin = off",
        "enable_mergejoin = off",
        "enable_indexscan = off",
        "work_mem = '64kB'",
        "DateStyle = 'SQL, DMY'",
        "extra_float_digits = -15",
        "bytea_output = 'escape'",
        "row_security = off",
        "plan_cache_mode = force_generic_plan",
        "default_table_access_method = 'heap'",
    ];
    if major >= 17 {
        settings.push("transaction_timeout = '1ms'");
    }
    settings.push(if major >= 16 {
        "debug_parallel_query = on"
    } else {
        "force_parallel_mode = on"
    });
    let mut owner = cluster.client_as("owner1", "postgres");
    for setting in &settings {
        owner
            .batch_execute(&format!("ALTER DATABASE mdb SET {setting}"))
            .unwrap_or_else(|e| panic!("{setting}: {}", describe(&e)));
    }
    owner
        .batch_execute("ALTER DATABASE mdb ALLOW_CONNECTIONS false")
        .unwrap();
    let mut db = cluster.client();
    db.batch_execute("ALTER ROLE postgres IN DATABASE mdb SET zero_damaged_pages = on")
        .unwrap();
    db.query_one("SELECT snowid_release(7)", &[])
        .unwrap_or_else(|e| panic!("the release with mdb's settings: {}", describe(&e)));
    owner
        .batch_execute("ALTER DATABASE mdb ALLOW_CONNECTIONS true")
        .unwrap();
    let recorded = recorded_in(&cluster, "mdb");
    assert_eq!(recorded, vec![7], "mdb records the release");
    // mdb's newest keys on a page of their own, which is then damaged.
    let (file, t_max) = {
        let mut mdb = superuser_in(&cluster, "mdb");
        mdb.batch_execute("INSERT INTO t SELECT FROM generate_series(1, 2000)")
            .unwrap();
        let file: String = one(&mut mdb, "SELECT pg_relation_filepath('t')", &[]);
        (file, max_of(&mut mdb, "t"))
    };
    drop(db);
    cluster.stop("fast");
    let path = cluster.pgdata().join(&file);
    let mut bytes = std::fs::read(&path).unwrap();
    let last_page = bytes.len() - 8192;
    // pd_lower past pd_upper: a page header no page has.
    bytes[last_page + 12] = 0xff;
    bytes[last_page + 13] = 0x7f;
    cluster.put_file(&file, &bytes);
    damage(&cluster, Damage::Deleted);
    start(&mut cluster);
    let mut db = cluster.client();
    match db.query("SELECT * FROM snowid_resume_above_columns()", &[]) {
        Ok(rows) => {
            let listed: Vec<(String, Option<String>, Option<i64>)> = rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(3)))
                .collect();
            panic!(
                "the fence lifted over a damaged page read as zeros: {listed:?} (mdb's t goes \
                 up to {t_max})"
            )
        }
        Err(err) => assert!(
            describe(&err).contains("could not read the snowid keys of database \"mdb\""),
            "{}",
            describe(&err)
        ),
    }
    assert_refuses(&cluster, 5, 0, "after the refusal");
}

/// A superuser's connection to `database`, whatever its settings say.
fn superuser_in(cluster: &Cluster, database: &str) -> Client {
    let mut options =
        "-c zero_damaged_pages=off -c statement_timeout=0 -c max_parallel_workers_per_gather=0"
            .to_string();
    if snowid_integration::major_number() >= 17 {
        options.push_str(" -c transaction_timeout=0");
    }
    snowid_integration::postgres::Config::new()
        .host("127.0.0.1")
        .port(cluster.port)
        .user("postgres")
        .dbname(database)
        .options(&options)
        .connect(snowid_integration::postgres::NoTls)
        .unwrap()
}

/// The shards `database` records as released.
fn recorded_in(cluster: &Cluster, database: &str) -> Vec<i32> {
    superuser_in(cluster, database)
        .query_one("SELECT shards FROM public.snowid_released_shards", &[])
        .unwrap()
        .get(0)
}

/// Guards against a table read as the superuser rather than as its owner on the access method's
/// path, where no SQL of the owner's runs and so nothing else could tell: a table access method
/// of the test build's (heap's own, logging who begins a scan or an index fetch) holds `owner1`'s
/// key tables `ks` (bigint, read from its index) and `kt` (text, read row by row). The resume
/// reads both as `owner1`, in a security-restricted operation, and never as the superuser.
#[test]
fn an_owners_table_is_read_as_its_owner_through_its_access_method() {
    let cluster = cluster_with_an_owners_database();
    superuser_in(&cluster, "mdb")
        .batch_execute(
            "CREATE FUNCTION spy_am(internal) RETURNS table_am_handler
                 LANGUAGE c AS 'snowid', 'snowid_test_spy_am';
             CREATE ACCESS METHOD spy TYPE TABLE HANDLER spy_am;",
        )
        .unwrap();
    cluster
        .client_as("owner1", "mdb")
        .batch_execute(
            "CREATE TABLE ks (id bigint PRIMARY KEY DEFAULT snowid_next(6)) USING spy;
             CREATE TABLE kt (id text DEFAULT snowid_text(snowid_next(6))) USING spy;
             INSERT INTO ks SELECT FROM generate_series(1, 100);
             INSERT INTO kt SELECT FROM generate_series(1, 100);",
        )
        .unwrap();
    let before = cluster.log().len();
    let rows = resume_rows(&mut cluster.client());
    assert!(
        rows.iter().any(|r| r.1.as_deref() == Some("public.kt")),
        "{rows:?}"
    );
    let log = cluster.log();
    let seen: Vec<&str> = log[before..]
        .lines()
        .filter(|l| l.contains("snowid test access method:"))
        .collect();
    for (what, table) in [("an index fetch", "ks"), ("a scan", "kt")] {
        let line = format!(
            "snowid test access method: {what} of {table} as owner1, in a security-restricted operation"
        );
        assert!(
            seen.iter().any(|l| l.contains(&line)),
            "{what} of {table}: {seen:#?}"
        );
    }
    assert!(
        !seen.iter().any(|l| l.contains(" as postgres")),
        "read as the superuser: {seen:#?}"
    );
}
