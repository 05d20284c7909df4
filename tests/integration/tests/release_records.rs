//! A release survives every route that re-creates snowid's state: a lost `global/9128`, a
//! damaged block of it, and `pg_upgrade`. Each re-creates the state fenced, and holding no
//! release; the hint's resume (`snowid_resume_above_columns()`) lifts the fence with what the
//! databases record (`snowid_released_shards`), so the released shard stays refused, whatever
//! `snowid.shards` says, across restarts, until `snowid_take_back`. Where no database knows which
//! shards were released, the fence does not lift until a superuser names them.
//!
//! Every server's wall clock runs 10 minutes behind the IDs already issued when it starts again,
//! so that a server that generates from its clock issues IDs below the old ones.

use snowid_integration::fences::*;
use snowid_integration::postgres::Client;
use snowid_integration::{code, one, Cluster, OldInstallScripts};

/// Server A: `snowid.shards` names shard 7 explicitly, a table `t` keyed by shard 8 and `t7` by
/// shard 7, shard 8 issued last, and shard 7 released. Returns A, the last ID
/// `snowid_release(7)` returned, and t's highest ID.
fn a_with_shard_7_released(a: Cluster) -> (Cluster, i64, i64) {
    let mut a = a;
    a.fake_wall_clock();
    a.set("shared_preload_libraries", "'snowid'");
    a.set("snowid.shards", "'0-8191'");
    start(&mut a);
    let mut db = a.client();
    db.batch_execute(
        "CREATE EXTENSION snowid;
         CREATE TABLE t7 (id bigint PRIMARY KEY DEFAULT snowid_next(7));
         INSERT INTO t7 SELECT FROM generate_series(1, 1000);
         CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(8));
         INSERT INTO t SELECT FROM generate_series(1, 1000);",
    )
    .unwrap();
    let last7: i64 = one(&mut db, "SELECT snowid_release(7)", &[]);
    assert!(last7 >= max_of(&mut db, "t7"), "the release's last ID");
    let a8_max = max_id(&mut db);
    drop(db);
    (a, last7, a8_max)
}

/// After the hint's resume: shard 7 stays released (at its last ID, which a release again
/// returns), shard 8 generates above its old IDs, also after two restarts; then
/// `snowid_take_back(7, ...)` takes it back above its other owner's last ID.
fn assert_released_until_taken_back(cluster: &mut Cluster, last7: i64, a8_max: i64, when: &str) {
    for round in 0..=2 {
        if round > 0 {
            restart(cluster, "fast");
        }
        let when = format!("{when}, restart {round}");
        let mut db = cluster.client();
        assert_released(&mut db, 7, &when);
        assert_generates_above(&mut db, 8, a8_max, &when);
    }
    let mut db = cluster.client();
    let again: i64 = one(&mut db, "SELECT snowid_release(7)", &[]);
    assert!(
        again >= last7,
        "{when}: a release again returned {again}, below the recorded last ID {last7}"
    );
    let theirs: i64 = db
        .query_one(
            "SELECT snowid_from_timestamp(snowid_timestamp($1::bigint) + interval '1 second', 7, 0)",
            &[&last7],
        )
        .unwrap()
        .get(0);
    db.query_one("SELECT snowid_take_back(7, $1)", &[&theirs])
        .unwrap_or_else(|e| panic!("{when}: take back: {}", describe(&e)));
    assert_generates_above(&mut db, 7, theirs, &format!("{when}, taken back"));
}

/// The hint's resume, after which the state's re-creation is behind the cluster: it lists `t`
/// and `t7` in `postgres`.
fn resume_with_both_tables(db: &mut Client, a8_max: i64) {
    let rows = resume_rows(db);
    assert!(
        rows.contains(&key_column("postgres", "public.t", a8_max)),
        "{rows:?}"
    );
    assert_eq!(rows.len(), 2, "t and t7: {rows:?}");
}

/// Row 1. Guards against a release lost with the state (0.5.0: after `global/9128` was deleted
/// and the hint's resume ran, `snowid_next(7)` generated, on a server that had handed shard 7 to
/// another).
#[test]
fn a_release_survives_a_deleted_state() {
    let (mut a, last7, a8_max) = a_with_shard_7_released(Cluster::init());
    a.stop("fast");
    damage(&a, Damage::Deleted);
    a.set_wall_clock_offset(BEHIND);
    start(&mut a);
    assert_refuses(&a, 8, a8_max, "the state deleted");
    resume_with_both_tables(&mut a.client(), a8_max);
    assert_released_until_taken_back(&mut a, last7, a8_max, "the state deleted");
}

/// Row 3. Guards against a release lost with a damaged page (0.5.0: one byte of block 0 flipped
/// while stopped fenced the state as unreadable, and after the hint's resume shard 7
/// generated).
#[test]
fn a_release_survives_a_damaged_state_page() {
    let (mut a, last7, a8_max) = a_with_shard_7_released(Cluster::init());
    a.stop("fast");
    damage(&a, Damage::Block0ByteFlipped);
    a.set_wall_clock_offset(BEHIND);
    start(&mut a);
    assert_refuses(&a, 8, a8_max, "a byte of block 0 flipped");
    resume_with_both_tables(&mut a.client(), a8_max);
    assert_released_until_taken_back(&mut a, last7, a8_max, "a damaged page");
}

/// Row 2. Guards against a release lost with `pg_upgrade`, which carries no state (0.5.0: the
/// new cluster, with default settings, generated shard 7 after the hint's resume).
#[test]
fn a_release_survives_pg_upgrade() {
    if !has_pg_upgrade("a_release_survives_pg_upgrade") {
        return;
    }
    let (mut old, last7, a8_max) = a_with_shard_7_released(Cluster::init());
    old.stop("fast");
    let mut new = Cluster::init_preloaded_with_fake_clock();
    new.set_wall_clock_offset(BEHIND);
    new.pg_upgrade_from(&old, false);
    start(&mut new);
    assert_refuses(&new, 8, a8_max, "the upgraded cluster");
    resume_with_both_tables(&mut new.client(), a8_max);
    assert_released_until_taken_back(&mut new, last7, a8_max, "after pg_upgrade");
}

/// Guards against a release recorded only where it was made: every database where snowid is
/// installed records it, so a database dropped before the state is lost takes nothing with it;
/// a database that installs snowid later records the releases at install; and one that installs
/// it while the cluster is fenced knows nothing, and counts for nothing.
#[test]
fn every_database_records_a_release() {
    let mut a = cluster_with_rows(8, 1000);
    let a8_max = max_id(&mut a.client());
    a.client().batch_execute("CREATE DATABASE first").unwrap();
    let mut first = a.client_of("first");
    first.batch_execute("CREATE EXTENSION snowid").unwrap();
    let last7: i64 = one(&mut first, "SELECT snowid_release(7)", &[]);
    a.client().batch_execute("CREATE DATABASE other").unwrap();
    let mut other = a.client_of("other");
    other.batch_execute("CREATE EXTENSION snowid").unwrap();
    let recorded: Vec<i32> = one(&mut other, "SELECT shards FROM snowid_released_shards", &[]);
    assert_eq!(
        recorded,
        vec![7],
        "a new database records the releases at install"
    );
    let last9: i64 = one(&mut first, "SELECT snowid_release(9)", &[]);
    drop(first);
    for database in ["postgres", "other"] {
        let row = a
            .client_of(database)
            .query_one("SELECT shards, last_ids FROM snowid_released_shards", &[])
            .unwrap();
        let listed: (Vec<i32>, Vec<i64>) = (row.get(0), row.get(1));
        assert_eq!(listed, (vec![7, 9], vec![last7, last9]), "{database}");
    }
    drop(other);
    a.client().batch_execute("DROP DATABASE first").unwrap();
    a.stop("fast");
    damage(&a, Damage::Deleted);
    a.set_wall_clock_offset(BEHIND);
    start(&mut a);
    // A database that installs snowid now, while fenced, knows no release.
    a.client().batch_execute("CREATE DATABASE late").unwrap();
    let mut late = a.client_of("late");
    late.batch_execute("CREATE EXTENSION snowid").unwrap();
    let rows: i64 = one(
        &mut late,
        "SELECT count(*) FROM snowid_released_shards",
        &[],
    );
    assert_eq!(rows, 0, "installed while fenced: no record");
    resume(&mut a.client(), a8_max);
    let mut db = a.client();
    for shard in [7, 9] {
        assert_released(&mut db, shard, "after the resume");
        assert_released(&mut late, shard, "after the resume, in the late database");
    }
    assert_generates_above(&mut db, 8, a8_max, "after the resume");
    let recorded: Vec<i32> = one(&mut late, "SELECT shards FROM snowid_released_shards", &[]);
    assert_eq!(
        recorded,
        vec![7, 9],
        "the resume records them in every database again"
    );
}

/// Guards against a fence lifted with the released shards unknown: `pg_upgrade` of a cluster
/// whose databases run 0.5.0's SQL, which keeps no record of them (and the new cluster's own
/// witness says nothing of the old cluster's). The hint's resume refuses (55000, saying how to
/// name them), also after the update to this version's SQL while fenced; naming the shards lifts
/// the fence with them released, also after a restart; naming them on a server that is not
/// fenced is refused.
#[test]
fn a_fence_does_not_lift_until_unknown_releases_are_named() {
    if !has_pg_upgrade("a_fence_does_not_lift_until_unknown_releases_are_named") {
        return;
    }
    let scripts = OldInstallScripts::place();
    let (mut old, mut new, _) = clusters_to_upgrade_from(
        Cluster::init(),
        "CREATE EXTENSION snowid VERSION '0.5.0'",
        8,
    );
    drop(scripts);
    start(&mut old);
    let mut db = old.client();
    db.batch_execute("SELECT snowid_release(7)").unwrap();
    let old_max = max_id(&mut db);
    drop(db);
    old.stop("fast");
    new.pg_upgrade_from(&old, false);
    start(&mut new);
    let mut db = new.client();
    for when in ["on 0.5.0's SQL", "updated while fenced"] {
        let err = db
            .query("SELECT * FROM snowid_resume_above_columns()", &[])
            .expect_err("the released shards are unknown");
        assert_eq!(code(&err), "55000", "{when}: {}", describe(&err));
        let e = err.as_db_error().unwrap();
        assert_eq!(
            e.message(),
            "snowid cannot tell which shards this cluster released",
            "{when}"
        );
        assert!(
            e.hint().unwrap_or("").contains("released =>"),
            "{when}: the hint says how to name them: {}",
            describe(&err)
        );
        assert_refuses(&new, 8, old_max, when);
        db.batch_execute("ALTER EXTENSION snowid UPDATE").unwrap();
    }
    let rows = db
        .query(
            &format!(
                "SELECT * FROM snowid_resume_above_columns(released => '{{7}}', \
                 accept_ahead => '{ACCEPTED_AHEAD}')"
            ),
            &[],
        )
        .unwrap_or_else(|e| panic!("named: {}", describe(&e)));
    assert_eq!(rows.len(), 1);
    assert_released(&mut db, 7, "named");
    assert_generates_above(&mut db, 8, old_max, "named");
    restart(&mut new, "fast");
    let mut db = new.client();
    assert_released(&mut db, 7, "named, after a restart");
    let err = db
        .query(
            "SELECT * FROM snowid_resume_above_columns(released => '{9}')",
            &[],
        )
        .expect_err("not fenced: a release names itself");
    assert_eq!(code(&err), "55000", "{}", describe(&err));
    assert_generates_above(&mut db, 9, old_max, "shard 9 was not released");
}

/// Guards against a release that goes ahead while a database cannot record it, which a lost
/// state would then forget there: database `other` has snowid, and its `snowid_released_shards`
/// belongs to a role that is not a superuser, so snowid does not trust it and will not write it.
/// The release refuses, naming the database, and changes nothing: shard 7 still issues here, and
/// no database records it. Once the table is a superuser's again, the release goes through and
/// every database records it.
#[test]
fn a_release_that_a_database_cannot_record_changes_nothing() {
    let cluster = cluster_with_rows(7, 100);
    let old_max = max_id(&mut cluster.client());
    let mut other = new_database_with_snowid(
        &cluster,
        "other",
        "CREATE ROLE mallory;
         ALTER TABLE snowid_released_shards OWNER TO mallory;",
    );
    let mut db = cluster.client();
    match db.query_one("SELECT snowid_release(7)", &[]) {
        Ok(row) => panic!(
            "released shard 7 at {} while database other cannot record it",
            row.get::<_, i64>(0)
        ),
        Err(err) => assert!(
            describe(&err)
                .contains("snowid cannot release shard 7: database \"other\" cannot record it"),
            "{}",
            describe(&err)
        ),
    }
    let old_max = assert_generates_above(&mut db, 7, old_max, "after the refused release");
    for (name, records) in [("postgres", &mut db), ("other", &mut other)] {
        let recorded: Vec<Vec<i32>> = records
            .query("SELECT shards FROM snowid_released_shards", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(
            !recorded.iter().flatten().any(|&s| s == 7),
            "database {name} records shard 7 released: {recorded:?}"
        );
    }
    other
        .batch_execute("ALTER TABLE snowid_released_shards OWNER TO postgres")
        .unwrap();
    let last: i64 = one(&mut db, "SELECT snowid_release(7)", &[]);
    assert!(last >= old_max);
    assert_released(&mut db, 7, "once every database can record it");
    for records in [&mut db, &mut other] {
        let recorded: Vec<i32> = one(records, "SELECT shards FROM snowid_released_shards", &[]);
        assert_eq!(recorded, vec![7]);
    }
}

/// Issue 51, item 3. Guards against a release ended by a FATAL error that leaves memory, the
/// records and the WAL disagreeing (0.7.0: `pg_terminate_backend` of a release while its worker
/// waited left shard 7 refused in memory and listed as released by `snowid_stats` and the
/// records, but never durable: after a restart the shard generated again, and a standby never
/// had the release). Terminated while its worker waits on `zdb`'s record (held by an open `DROP
/// EXTENSION`), the release is undone as an error undoes it: shard 7 issues here at once, is not
/// listed as released, and issues after a restart too; the server log says it was not released
/// and which records list it; the next release writes every record.
#[test]
fn a_release_ended_by_pg_terminate_backend_is_undone_and_says_so() {
    let (mut cluster, owner, _) = a_record_held_by_an_open_drop();
    let mut db = cluster.client();
    db.batch_execute("CREATE TABLE t7 (id bigint PRIMARY KEY DEFAULT snowid_next(7))")
        .unwrap();
    db.batch_execute("INSERT INTO t7 SELECT FROM generate_series(1, 100)")
        .unwrap();
    let old_max = max_of(&mut db, "t7");
    let mut releasing = connect_to(cluster.port, "postgres", "postgres");
    let pid: i32 = one(&mut releasing, "SELECT pg_backend_pid()", &[]);
    let release = std::thread::spawn(move || {
        releasing
            .query_one("SELECT snowid_release(7)", &[])
            .map(|r| r.get::<_, i64>(0))
    });
    snowid_integration::wait_for(
        &mut db,
        "the release waits for zdb's record",
        "SELECT count(*) = 1 FROM pg_stat_activity \
                 WHERE backend_type = 'snowid' AND datname = 'zdb'",
    );
    db.query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap();
    let ended = release.join().unwrap();
    assert!(ended.is_err(), "the release was terminated: {ended:?}");
    snowid_integration::wait_until(
        "the log says what holds",
        std::time::Duration::from_secs(8),
        || cluster.log().contains("snowid shard 7 was not released"),
    );
    let log = cluster.log();
    let said = log
        .lines()
        .find(|l| l.contains("snowid shard 7 was not released"))
        .unwrap();
    assert!(
        said.contains("issues IDs on this server again") && said.contains("postgres"),
        "{said}"
    );
    let released: bool = one(
        &mut db,
        "SELECT released FROM snowid_stats() WHERE shard = 7",
        &[],
    );
    assert!(!released, "snowid_stats lists shard 7 as released");
    let after = assert_generates_above(&mut db, 7, old_max, "after the terminated release");
    // The restart ends the open DROP EXTENSION too.
    drop((db, owner));
    restart(&mut cluster, "fast");
    let mut db = cluster.client();
    let after = assert_generates_above(&mut db, 7, after, "after a restart");
    let last: i64 = db
        .query_one("SELECT snowid_release(7)", &[])
        .unwrap_or_else(|e| panic!("the release again: {}", describe(&e)))
        .get(0);
    assert!(last >= after);
    for (database, shards) in recorded_shards(&cluster, &["postgres", "zdb"]) {
        assert_eq!(shards, vec![7], "{database}");
    }
}
