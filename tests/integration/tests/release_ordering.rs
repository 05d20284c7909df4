//! A release's records can never be stale, and each step of a change of the released shards says
//! what holds when it is cancelled or fails: installs, releases and take-backs in different
//! databases are ordered (a cluster-wide lock, taken by an install at its commit), a release made
//! in the same transaction as `CREATE EXTENSION` is recorded, a database dropped while a release
//! runs is passed over, and a release cancelled before it is durable issues again and says so.
//!
//! Each `pg_upgrade` below starts a new cluster whose clock is 10 minutes behind the IDs the old
//! one issued; its resume accepts that ([`ACCEPTED_AHEAD`]).

use snowid_integration::fences::*;
use snowid_integration::{code, one, Cluster};
use std::thread;
use std::time::Duration;

/// A started old cluster to upgrade (faked clock, preloaded), and a new one, not started.
fn old_and_new() -> (Cluster, Cluster) {
    let mut old = Cluster::init();
    old.fake_wall_clock();
    old.set("shared_preload_libraries", "'snowid'");
    start(&mut old);
    let new = Cluster::init_preloaded_with_fake_clock();
    new.set_wall_clock_offset(BEHIND);
    (old, new)
}

/// Upgrades `old` (stopped here) into `new`, starts it, and runs the hint's resume there, in
/// `database`.
fn upgrade_and_resume(mut old: Cluster, new: &mut Cluster, database: &str) {
    old.stop("fast");
    new.pg_upgrade_from(&old, false);
    start(new);
    resume_rows(&mut new.client_of(database));
}

/// Row 4. Guards against a release made in the same transaction as `CREATE EXTENSION`, which
/// no database recorded (0.6.0: the workers could not see the uncommitted extension, the record
/// said nothing was released, and after `pg_upgrade` and the hint's resume shard 7 generated
/// again while its new owner issued it). The install writes its record at commit, from the state
/// the release left: after `pg_upgrade` shard 7 stays released, also after a restart.
#[test]
fn a_release_in_the_transaction_that_installs_is_recorded() {
    if !has_pg_upgrade("a_release_in_the_transaction_that_installs_is_recorded") {
        return;
    }
    let (old, mut new) = old_and_new();
    let mut db = old.client();
    db.batch_execute(
        "BEGIN;
         CREATE EXTENSION snowid;
         CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(8));
         INSERT INTO t SELECT FROM generate_series(1, 100);
         SELECT snowid_release(7);
         COMMIT;",
    )
    .unwrap();
    let recorded: Vec<i32> = one(&mut db, "SELECT shards FROM snowid_released_shards", &[]);
    assert_eq!(recorded, vec![7], "recorded at commit");
    drop(db);
    upgrade_and_resume(old, &mut new, "postgres");
    assert_released(&mut new.client(), 7, "after pg_upgrade");
    restart(&mut new, "fast");
    assert_released(&mut new.client(), 7, "after pg_upgrade and a restart");
}

/// Row 5. Guards against an install that a release or a take-back does not see (0.6.0: `owner1`
/// held `BEGIN; CREATE EXTENSION snowid` open in database `odb` while a superuser released shard
/// 7, then committed; its record, filled before the release, said nothing of it, and once the
/// extension was dropped from `postgres` and the cluster upgraded, shard 7 generated again; with
/// a take-back instead, a stale record kept the taken-back shard released). The install's record
/// is written at its commit, after the change: shard 7 stays released after the release, and is
/// not released after the take-back.
#[test]
fn an_install_that_commits_while_a_release_or_a_take_back_runs_records_its_outcome() {
    if !has_pg_upgrade(
        "an_install_that_commits_while_a_release_or_a_take_back_runs_records_its_outcome",
    ) {
        return;
    }
    for take_back in [false, true] {
        let (old, mut new) = old_and_new();
        let mut db = old.client();
        db.batch_execute(
            "CREATE EXTENSION snowid;
             CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(8));
             INSERT INTO t SELECT FROM generate_series(1, 100);
             CREATE ROLE owner1 LOGIN;",
        )
        .unwrap();
        db.batch_execute("CREATE DATABASE odb OWNER owner1")
            .unwrap();
        if take_back {
            db.batch_execute("SELECT snowid_release(7)").unwrap();
        }
        let mut owner = old.client_as("owner1", "odb");
        owner
            .batch_execute(
                "BEGIN;
                 CREATE EXTENSION snowid;
                 CREATE TABLE u (id bigint PRIMARY KEY DEFAULT snowid_next(6));
                 INSERT INTO u SELECT FROM generate_series(1, 100);",
            )
            .unwrap();
        if take_back {
            let theirs: i64 = db
                .query_one(
                    "SELECT snowid_from_timestamp(clock_timestamp() + interval '1 second', 7)",
                    &[],
                )
                .unwrap()
                .get(0);
            db.query_one("SELECT snowid_take_back(7, $1)", &[&theirs])
                .unwrap_or_else(|e| panic!("take back: {}", describe(&e)));
        } else {
            db.query_one("SELECT snowid_release(7)", &[])
                .unwrap_or_else(|e| panic!("release: {}", describe(&e)));
        }
        owner.batch_execute("COMMIT").unwrap();
        db.batch_execute("DROP EXTENSION snowid CASCADE").unwrap();
        drop((db, owner));
        upgrade_and_resume(old, &mut new, "odb");
        let mut db = new.client_of("odb");
        match take_back {
            false => assert_released(&mut db, 7, "released while odb installed"),
            // Not kept released by a stale record. (The ID it was taken back above is no key any
            // database holds, so the resume rises above the keys: docs/operations.md says to
            // resume above such an ID by number.)
            true => {
                next_ids(&mut db, 7, 10);
            }
        }
    }
}

/// A transaction that installs snowid cannot be prepared: its record is written at commit,
/// under a lock a prepared transaction would hold until `COMMIT PREPARED`.
#[test]
fn a_transaction_that_installs_cannot_be_prepared() {
    let cluster = Cluster::preloaded(&[("max_prepared_transactions", "2")]);
    let mut db = cluster.client();
    db.batch_execute("CREATE DATABASE other").unwrap();
    let mut other = cluster.client_of("other");
    let err = other
        .batch_execute("BEGIN; CREATE EXTENSION snowid; PREPARE TRANSACTION 'install';")
        .expect_err("refused");
    assert_eq!(code(&err), "0A000", "{}", describe(&err));
    let _ = other.batch_execute("ROLLBACK");
    let prepared: i64 = one(&mut db, "SELECT count(*) FROM pg_prepared_xacts", &[]);
    assert_eq!(prepared, 0);
    other.batch_execute("CREATE EXTENSION snowid").unwrap();
}

/// Row 9. Guards against a fence no statement could lift (0.6.0: a cluster upgraded while the
/// default epoch was configured, then given back its own, later epoch in postgresql.conf, refused
/// the hint's resume and a resume by number with 55000, its detail naming an epoch no ID was
/// issued under). The fence lifts under the epoch configured when it lifts; IDs then sort above
/// the old ones and decode under that epoch.
#[test]
fn an_upgraded_clusters_fence_lifts_under_its_own_epoch() {
    if !has_pg_upgrade("an_upgraded_clusters_fence_lifts_under_its_own_epoch") {
        return;
    }
    const EPOCH: &str = "'2026-10-29 00:00:00+00'";
    let mut old = Cluster::init();
    old.fake_wall_clock();
    old.set("shared_preload_libraries", "'snowid'");
    old.set("snowid.epoch", EPOCH);
    start(&mut old);
    let mut db = old.client();
    db.batch_execute(
        "CREATE EXTENSION snowid;
         CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(8));
         INSERT INTO t SELECT FROM generate_series(1, 100);",
    )
    .unwrap();
    let old_max = max_id(&mut db);
    drop(db);
    old.stop("fast");
    let mut new = Cluster::init_preloaded_with_fake_clock();
    new.set_wall_clock_offset(BEHIND);
    new.pg_upgrade_from(&old, false);
    new.set("snowid.epoch", EPOCH);
    start(&mut new);
    let mut db = new.client();
    let err = db
        .query_one("SELECT snowid_next(8)", &[])
        .expect_err("fenced");
    assert!(
        !describe(&err).contains("2026-01-01"),
        "no detail names an epoch no ID was issued under: {}",
        describe(&err)
    );
    resume_rows(&mut db);
    assert_generates_above(&mut db, 8, old_max, "the fence lifted under its own epoch");
    let epoch: String = db
        .query_one(
            "SELECT (epoch AT TIME ZONE 'UTC')::text FROM snowid_info()",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(epoch, "2026-10-29 00:00:00");
    restart(&mut new, "fast");
    assert_generates_above(&mut new.client(), 8, old_max, "and after a restart");
}

/// Row 10. Guards against a cancelled release that said nothing of what held (0.6.0: cancelled
/// by `statement_timeout` while a worker waited on a lock to write the last database's record,
/// it raised a plain 57014, and yet shard 7 was released, then and after a restart, with one
/// record empty). Cancelled before it is durable, the release is not made: shard 7 issues now and
/// after a restart, and the error says so and names the records already written. Failing on the
/// lock instead (past the record's wait), it refuses the same way, naming the database. Once the
/// lock is gone, the release goes through and every database records it.
#[test]
fn a_release_cancelled_or_failing_before_it_is_durable_is_not_made_and_says_so() {
    // The owner's connection holds the lock until the restart below ends it.
    let (mut cluster, _owner, old_max) = a_record_held_by_an_open_drop();
    let mut db = cluster.client();
    db.batch_execute("SET statement_timeout = '3s'").unwrap();
    let err = db
        .query_one("SELECT snowid_release(7)", &[])
        .expect_err("cancelled while zdb's record is locked");
    assert_eq!(code(&err), "57014", "{}", describe(&err));
    let e = err.as_db_error().unwrap();
    assert!(
        e.message().contains("snowid shard 7 was not released"),
        "{}",
        describe(&err)
    );
    assert!(
        e.detail()
            .unwrap_or("")
            .contains("\"postgres\" already list it as released"),
        "{}",
        describe(&err)
    );
    db.batch_execute("SET statement_timeout = 0").unwrap();
    let after = assert_generates_above(&mut db, 7, old_max, "after the cancelled release");
    // Failing on the lock: past the record's own wait (10 s), refused, naming zdb.
    let err = db
        .query_one("SELECT snowid_release(7)", &[])
        .expect_err("zdb's record stays locked");
    assert_error(
        &err,
        "55P03",
        &["snowid cannot release shard 7: database \"zdb\" cannot record it"],
    );
    let after = assert_generates_above(&mut db, 7, after, "after the refused release");
    drop(db);
    restart(&mut cluster, "fast");
    let mut db = cluster.client();
    assert_generates_above(&mut db, 7, after, "after a restart");
    let recorded: Vec<i32> = one(&mut db, "SELECT shards FROM snowid_released_shards", &[]);
    assert!(
        recorded.is_empty(),
        "written back as the state has it: {recorded:?}"
    );
    db.query_one("SELECT snowid_release(7)", &[])
        .unwrap_or_else(|e| panic!("once nothing holds the lock: {}", describe(&e)));
    for database in ["postgres", "zdb"] {
        let recorded: Vec<i32> = cluster
            .client_of(database)
            .query_one("SELECT shards FROM snowid_released_shards", &[])
            .unwrap()
            .get(0);
        assert_eq!(recorded, vec![7], "{database}");
    }
}

/// Row 11. Guards against XX000 where the cause has its own SQLSTATE (0.6.0: a database dropped
/// while a release ran failed it with a worker's FATAL passed through as XX000, and
/// `released => ARRAY[5, NULL]` raised pgrx's "array contains NULL" as XX000). A database
/// dropped meanwhile holds nothing to record, and the release goes through; a null in `released`
/// is 22004.
#[test]
fn a_database_dropped_while_a_release_runs_is_passed_over() {
    let (cluster, mut owner, _) = a_record_held_by_an_open_drop_in("adb");
    let mut db = cluster.client();
    db.batch_execute("CREATE DATABASE zdb").unwrap();
    cluster
        .client_of("zdb")
        .batch_execute("CREATE EXTENSION snowid")
        .unwrap();
    // The release waits on adb's record (the first by name); zdb is dropped meanwhile.
    let releasing = release_in_a_thread(cluster.port, 7);
    thread::sleep(Duration::from_millis(1500));
    db.batch_execute("DROP DATABASE zdb").unwrap();
    owner.batch_execute("ROLLBACK").unwrap();
    let last = releasing
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the release with zdb dropped: {e}"));
    assert!(last > 0);
    assert_released(&mut db, 7, "after the release");
    let recorded: Vec<i32> = one(&mut owner, "SELECT shards FROM snowid_released_shards", &[]);
    assert_eq!(recorded, vec![7], "adb records it");

    let err = db
        .query(
            "SELECT * FROM snowid_resume_above_columns(released => ARRAY[5, NULL])",
            &[],
        )
        .expect_err("a null shard");
    assert_eq!(code(&err), "22004", "{}", describe(&err));
    let err = db
        .query(
            "SELECT snowid_resume_above(1, skip_databases => ARRAY[NULL])",
            &[],
        )
        .expect_err("a null database");
    assert_eq!(code(&err), "22004", "{}", describe(&err));
}

/// Guards against a database copied from a template while a release runs, whose copy of the
/// template's record would say less than the state: the release is held up on another
/// database's record, `CREATE DATABASE copydb TEMPLATE tdb` waits for it (on the cluster-wide
/// lock, which `pg_stat_activity` shows as an extension's wait), and the copy's record lists the
/// shard.
#[test]
fn a_database_copied_while_a_release_runs_copies_its_record() {
    let (cluster, owner, _) = a_record_held_by_an_open_drop_in("adb");
    let mut db = cluster.client();
    db.batch_execute("CREATE DATABASE tdb").unwrap();
    cluster
        .client_of("tdb")
        .batch_execute("CREATE EXTENSION snowid")
        .unwrap();
    let mut owner = owner;
    let port = cluster.port;
    let releasing = release_in_a_thread(port, 7);
    thread::sleep(Duration::from_millis(1500));
    let copying = thread::spawn(move || {
        connect_to(port, "postgres", "postgres")
            .batch_execute("CREATE DATABASE copydb TEMPLATE tdb")
            .map_err(|e| describe(&e))
    });
    snowid_integration::wait_for(
        &mut db,
        "the copy waits for the release",
        "SELECT count(*) = 1 FROM pg_stat_activity \
             WHERE query LIKE 'CREATE DATABASE copydb%' AND wait_event_type = 'Extension'",
    );
    owner.batch_execute("ROLLBACK").unwrap();
    releasing
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the release: {e}"));
    copying
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the copy: {e}"));
    let recorded: Vec<i32> = cluster
        .client_of("copydb")
        .query_one("SELECT shards FROM snowid_released_shards", &[])
        .unwrap()
        .get(0);
    assert_eq!(recorded, vec![7], "the copy's record lists the release");
}

/// Guards against an install whose record is written at commit without the cluster-wide lock
/// (its record would be written from the state before a release that runs meanwhile, after the
/// release passed its database: a record saying less than the state). A release is held up on
/// `zdb`'s record after it passed `odb`; `CREATE EXTENSION snowid` in `odb` commits meanwhile,
/// and waits for the release (an extension's wait, which `pg_stat_activity` shows); once the
/// release is done, `odb`'s record lists the released shard.
#[test]
fn an_install_that_commits_while_a_release_runs_waits_for_it_and_records_it() {
    let (cluster, mut owner, _) = a_record_held_by_an_open_drop();
    let mut db = cluster.client();
    db.batch_execute("CREATE DATABASE odb").unwrap();
    let mut installing = cluster.client_of("odb");
    installing
        .batch_execute("BEGIN; CREATE EXTENSION snowid;")
        .unwrap();
    let releasing = release_in_a_thread(cluster.port, 7);
    snowid_integration::wait_for(
        &mut db,
        "the release waits for zdb's record",
        "SELECT count(*) = 1 FROM pg_stat_activity \
                 WHERE backend_type = 'snowid' AND datname = 'zdb'",
    );
    let committing =
        thread::spawn(move || installing.batch_execute("COMMIT").map_err(|e| describe(&e)));
    snowid_integration::wait_for(
        &mut db,
        "the install's commit waits for the release",
        "SELECT count(*) = 1 FROM pg_stat_activity \
                 WHERE datname = 'odb' AND query = 'COMMIT' AND wait_event_type = 'Extension'",
    );
    owner.batch_execute("ROLLBACK").unwrap();
    releasing
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the release: {e}"));
    committing
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the install: {e}"));
    for (database, shards) in recorded_shards(&cluster, &["odb", "postgres", "zdb"]) {
        assert_eq!(shards, vec![7], "{database}");
    }
}
