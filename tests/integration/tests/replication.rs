//! Replication, failover, restores and upgrades: across servers, a shard's IDs never go back.
//!
//! Each test builds real servers on loopback: a primary, a streaming standby made with
//! `pg_basebackup -R`, a restore from a base backup and archived WAL, a `pg_upgrade`. Wall clocks
//! are set back with libfaketime where the scenario needs it.

use snowid_integration::postgres::Client;
use snowid_integration::{Cluster, Watchdog};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(60);

fn code(err: &snowid_integration::postgres::Error) -> String {
    err.as_db_error()
        .map(|e| e.code().code().to_string())
        .unwrap_or_else(|| format!("{err}"))
}

/// The highest ID per shard in `t`.
fn max_per_shard(db: &mut Client) -> Vec<(i32, i64)> {
    db.query(
        "SELECT snowid_shard(id), max(id) FROM t GROUP BY 1 ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Fills `t` the way the scenarios need: on shard 1 a burst of three million IDs that runs
/// seconds ahead of the clock (the lead allows a minute), keeping its highest ID as a row; on
/// shard 2, rows at a normal rate.
fn fill(db: &mut Client) {
    db.batch_execute(
        "CREATE TABLE IF NOT EXISTS t (id bigint PRIMARY KEY);
         INSERT INTO t SELECT snowid_next(1) FROM generate_series(1, 1000);
         INSERT INTO t SELECT max(snowid_next(1)) FROM generate_series(1, 3000000);",
    )
    .unwrap();
    for _ in 0..200 {
        db.execute("INSERT INTO t VALUES (snowid_next(2))", &[])
            .unwrap();
    }
}

/// How far the burst on shard 1 ran ahead of the server's clock, in seconds.
fn burst_lead(db: &mut Client) -> f64 {
    db.query_one(
        "SELECT extract(epoch FROM snowid_timestamp(max(id)) - clock_timestamp())::float8
         FROM t WHERE snowid_shard(id) = 1",
        &[],
    )
    .unwrap()
    .get(0)
}

/// Every shard's next ID on `db` is above every ID `before` recorded for it, and so are the
/// next thousand.
fn assert_resumes_above(db: &mut Client, before: &[(i32, i64)], scenario: &str) {
    let _watchdog = Watchdog::new(db, DEADLINE);
    for &(shard, old_max) in before {
        let new_min: i64 = db
            .query_one(
                "SELECT min(snowid_next($1::int)) FROM generate_series(1, 1000)",
                &[&shard],
            )
            .unwrap()
            .get(0);
        assert!(
            new_min > old_max,
            "{scenario}: shard {shard} issued {new_min}, not above {old_max}"
        );
    }
}

/// Guards against a hot standby handing out the same IDs as its primary (293,115 duplicates of
/// 300k each were measured when it generated): a standby refuses to generate with 25006, like
/// nextval(), in any transaction, and still decodes; a read-only transaction on the primary
/// refuses too.
#[test]
fn a_hot_standby_refuses_to_generate_and_still_decodes() {
    let primary = Cluster::preloaded(&[]);
    primary
        .client()
        .batch_execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(3)); INSERT INTO t DEFAULT VALUES;")
        .unwrap();
    let mut standby = Cluster::base_backup_of(&primary, true);
    standby.start().unwrap();
    standby.wait_for_replay_of(&primary);

    let mut db = standby.client();
    for query in [
        "SELECT snowid_next(1)",
        "SELECT snowid_next(1::bigint)",
        "SELECT snowid_next()",
        "SELECT snowid_resume_above(0)",
    ] {
        let err = db.query_one(query, &[]).unwrap_err();
        let db_err = err.as_db_error().expect("a server error");
        assert_eq!(db_err.code().code(), "25006", "{query}: {db_err:?}");
        assert!(db_err.message().ends_with("during recovery"), "{db_err:?}");
        assert!(db_err.hint().unwrap().contains("primary"), "{db_err:?}");
    }
    let shard: i32 = db
        .query_one("SELECT (snowid_parse(id)).shard FROM t", &[])
        .unwrap()
        .get(0);
    assert_eq!(shard, 3, "decoding works on the standby");
    let generating: String = db
        .query_one("SELECT generating FROM snowid_info()", &[])
        .unwrap()
        .get(0);
    assert!(generating.starts_with("no: in recovery"), "{generating}");

    let mut db = primary.client();
    db.batch_execute("BEGIN READ ONLY").unwrap();
    let err = db.query_one("SELECT snowid_next(1)", &[]).unwrap_err();
    assert_eq!(code(&err), "25006");
    assert_eq!(
        err.as_db_error().unwrap().message(),
        "cannot execute snowid_next() in a read-only transaction"
    );
}

/// Guards against a promoted standby reissuing its old primary's IDs (52,131 duplicates with a
/// clock 2 s behind; 341,901 after a burst): the lease travels in WAL, so the standby, whose
/// clock runs five minutes behind, promoted after an immediate stop of its primary, resumes every
/// shard above every replicated ID, both after a burst that ran ahead and at a normal rate. The
/// primary runs with fsync on, so the durable path is the one exercised.
#[test]
fn failover_to_a_standby_whose_clock_is_behind() {
    let mut primary = Cluster::preloaded(&[("snowid.max_lead", "'60s'"), ("fsync", "on")]);
    let mut standby = Cluster::base_backup_of(&primary, true);
    standby.fake_wall_clock();
    standby.set_wall_clock_offset("-5m");
    standby.start().unwrap();

    let mut db = primary.client();
    fill(&mut db);
    let lead = burst_lead(&mut db);
    assert!(lead > 0.5, "the burst ran ahead of the clock ({lead} s)");
    standby.wait_for_replay_of(&primary);
    let before = max_per_shard(&mut standby.client());
    assert_eq!(before.len(), 2);
    primary.stop("immediate");
    standby.promote();
    let mut db = standby.client();
    let clock_behind_old_ids: f64 = db
        .query_one(
            "SELECT extract(epoch FROM snowid_timestamp(max(id)) - clock_timestamp())::float8 FROM t",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        clock_behind_old_ids > 290.0,
        "the new primary's clock really is minutes behind the old IDs ({clock_behind_old_ids} s)"
    );
    assert_resumes_above(&mut db, &before, "failover");
}

/// Guards against a restore going back (200,980 duplicates after a restore whose primary's clock
/// had stepped back; 261,296 on a server whose clock is an hour behind): a base backup plus the
/// archived WAL written after it, restored on a server whose clock is an hour behind, resumes
/// above every restored ID. The backup's copy of the state file predates the burst, so only the
/// replayed lease records can keep the order.
#[test]
fn a_restore_from_a_base_backup_and_archived_wal_with_the_clock_set_back() {
    let mut primary = Cluster::init();
    let archive_dir = primary.dir().join("archive");
    primary.run_as_server_user("mkdir", &[archive_dir.as_os_str()]);
    primary.set("archive_mode", "on");
    primary.set(
        "archive_command",
        &format!("'cp %p {}/%f'", archive_dir.display()),
    );
    primary.set("shared_preload_libraries", "'snowid'");
    primary.set("snowid.max_lead", "'60s'");
    primary.fake_wall_clock();
    primary.start().unwrap();
    primary
        .client()
        .batch_execute("CREATE EXTENSION snowid")
        .unwrap();
    let mut restored = Cluster::base_backup_of(&primary, false);

    let mut db = primary.client();
    fill(&mut db);
    // The primary's own clock steps back ten minutes while it runs: its IDs carry on from its
    // time base, ahead of its clock.
    primary.set_wall_clock_offset("-10m");
    std::thread::sleep(Duration::from_millis(100));
    db.batch_execute("INSERT INTO t SELECT snowid_next(2) FROM generate_series(1, 1000)")
        .unwrap();
    let before = max_per_shard(&mut db);
    let last_segment: String = db
        .query_one("SELECT pg_walfile_name(pg_switch_wal())", &[])
        .unwrap()
        .get(0);
    let deadline = std::time::Instant::now() + DEADLINE;
    while db
        .query_one(
            "SELECT coalesce(last_archived_wal >= $1, false) FROM pg_stat_archiver",
            &[&last_segment],
        )
        .unwrap()
        .get::<_, bool>(0)
        .eq(&false)
    {
        assert!(std::time::Instant::now() < deadline, "WAL was not archived");
        std::thread::sleep(Duration::from_millis(100));
    }
    primary.stop("immediate");

    restored.set(
        "restore_command",
        &format!("'cp {}/%f %p'", archive_dir.display()),
    );
    restored.set("archive_mode", "off");
    restored.run_as_server_user(
        "touch",
        &[restored.pgdata().join("recovery.signal").as_os_str()],
    );
    restored.fake_wall_clock();
    restored.set_wall_clock_offset("-1h");
    restored.start().unwrap();
    let mut db = restored.client();
    let deadline = std::time::Instant::now() + DEADLINE;
    while db
        .query_one("SELECT pg_is_in_recovery()", &[])
        .unwrap()
        .get::<_, bool>(0)
    {
        assert!(std::time::Instant::now() < deadline, "recovery did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        max_per_shard(&mut db),
        before,
        "every row was restored (the test is sharp)"
    );
    assert_resumes_above(&mut db, &before, "restore");
}

/// Guards against a standby that cannot replay snowid's WAL records failing obscurely: without
/// snowid preloaded, recovery stops at the first lease record with PostgreSQL's own message
/// naming the resource manager and the setting to fix.
#[test]
fn a_standby_without_snowid_preloaded_stops_with_a_clear_error() {
    let primary = Cluster::preloaded(&[]);
    let mut standby = Cluster::base_backup_of(&primary, true);
    standby.set("shared_preload_libraries", "''");
    standby.start().unwrap();
    primary
        .client()
        .query_one("SELECT snowid_next(1)", &[])
        .unwrap();
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let log = standby.log();
        if log.contains("resource manager with ID 128 not registered") {
            assert!(
                log.contains("shared_preload_libraries"),
                "the hint names the setting: {log}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no error:\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Guards against an older copy of the state file reissuing IDs (1,000 of 1,000 reissued when a
/// copy was put back and the server restarted with its clock behind): a file that does not
/// carry the seal of the last clean shutdown is refused with 55000, and resuming above the
/// highest ID, as the hint says, restores generation above every ID issued.
#[test]
fn an_older_copy_of_the_state_file_is_refused() {
    let mut cluster = Cluster::init();
    cluster.fake_wall_clock();
    cluster.set("shared_preload_libraries", "'snowid'");
    cluster.set("snowid.max_lead", "'60s'");
    cluster.start().unwrap();
    cluster
        .client()
        .batch_execute("CREATE EXTENSION snowid")
        .unwrap();
    let mut db = cluster.client();
    db.batch_execute("CREATE TABLE t (id bigint PRIMARY KEY); INSERT INTO t SELECT snowid_next(1) FROM generate_series(1, 1000)")
        .unwrap();
    cluster.stop("fast");
    let state = cluster.pgdata().join("snowid.state");
    let copy = cluster.dir().join("snowid.state.copy");
    cluster.run_as_server_user("cp", &[state.as_os_str(), copy.as_os_str()]);

    cluster.start().unwrap();
    let mut db = cluster.client();
    db.batch_execute("INSERT INTO t SELECT snowid_next(1) FROM generate_series(1, 2000000)")
        .unwrap();
    let before = max_per_shard(&mut db);
    cluster.stop("fast");
    cluster.run_as_server_user("cp", &[copy.as_os_str(), state.as_os_str()]);
    cluster.set_wall_clock_offset("-1h");
    cluster.start().unwrap();

    let mut db = cluster.client();
    let err = db.query_one("SELECT snowid_next(1)", &[]).unwrap_err();
    let db_err = err.as_db_error().expect("a server error");
    assert_eq!(db_err.code().code(), "55000");
    assert!(
        db_err.message().contains("older than the data directory"),
        "{db_err:?}"
    );
    assert!(
        db_err.hint().unwrap().contains("snowid_resume_above"),
        "{db_err:?}"
    );
    assert!(cluster.log().contains("snowid will not generate IDs"));

    db.batch_execute("SELECT snowid_resume_above(max(id)) FROM t")
        .unwrap();
    assert_resumes_above(&mut db, &before, "after resuming");
}

/// Guards against `pg_upgrade` going back (all 763,700 new IDs below the old ones after the old
/// cluster rode out a 10-minute backward step of the machine's clock): the state file does not
/// travel, so the upgraded cluster starts from the clock, ten minutes behind the old IDs. The
/// documented procedure, `snowid_resume_above(max(id))` before the first write, resumes above
/// every old ID at once.
#[test]
fn pg_upgrade_then_resume_above_the_old_ids() {
    let mut old = Cluster::init();
    if !old.bin_dir().join("pg_upgrade").exists() {
        snowid_integration::say(&format!(
            "pg_upgrade_then_resume_above_the_old_ids: not run: this PostgreSQL build has no \
             pg_upgrade ({}); the other majors run it",
            old.bin_dir().display()
        ));
        return;
    }
    old.fake_wall_clock();
    old.set("shared_preload_libraries", "'snowid'");
    old.start().unwrap();
    old.client()
        .batch_execute("CREATE EXTENSION snowid")
        .unwrap();
    let mut db = old.client();
    db.batch_execute(
        "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(4), n int);
         INSERT INTO t (n) SELECT g FROM generate_series(1, 1000) g;",
    )
    .unwrap();
    old.set_wall_clock_offset("-10m");
    std::thread::sleep(Duration::from_millis(100));
    db.batch_execute("INSERT INTO t (n) SELECT g FROM generate_series(1, 1000) g")
        .unwrap();
    let before = max_per_shard(&mut db);
    drop(db);
    old.stop("fast");

    let mut new = Cluster::init();
    new.set("shared_preload_libraries", "'snowid'");
    new.fake_wall_clock();
    new.set_wall_clock_offset("-10m");
    let out = new
        .server_command("pg_upgrade")
        .current_dir(new.dir())
        .arg("-b")
        .arg(old.bin_dir())
        .arg("-B")
        .arg(new.bin_dir())
        .arg("-d")
        .arg(old.pgdata())
        .arg("-D")
        .arg(new.pgdata())
        .arg("-p")
        .arg(old.port.to_string())
        .arg("-P")
        .arg(new.port.to_string())
        .output()
        .expect("run pg_upgrade");
    assert!(
        out.status.success(),
        "pg_upgrade failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    new.start().unwrap();
    let mut db = new.client();
    let rows: i64 = db.query_one("SELECT count(*) FROM t", &[]).unwrap().get(0);
    assert_eq!(rows, 2000);
    let behind: bool = db
        .query_one(
            "SELECT time_base < (SELECT snowid_timestamp(max(id)) FROM t) FROM snowid_info()",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        behind,
        "without resuming, the new cluster's IDs would sort below the old ones (the test is sharp)"
    );
    db.batch_execute("SELECT snowid_resume_above(max(id)) FROM t")
        .unwrap();
    assert_resumes_above(&mut db, &before, "pg_upgrade");
}

/// Guards against unreadable WAL: each lease is one record of snowid's resource manager, named
/// and described for pg_walinspect (and pg_waldump's in-server equivalent), and small.
#[test]
fn lease_records_are_named_and_described_in_the_wal() {
    let cluster = Cluster::preloaded(&[]);
    let mut db = cluster.client();
    let has_walinspect: bool = db
        .query_one(
            "SELECT count(*) > 0 FROM pg_available_extensions WHERE name = 'pg_walinspect'",
            &[],
        )
        .unwrap()
        .get(0);
    if !has_walinspect {
        snowid_integration::say(
            "lease_records_are_named_and_described_in_the_wal: not run: this PostgreSQL build \
             has no pg_walinspect",
        );
        return;
    }
    let start: String = db
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .unwrap()
        .get(0);
    db.query_one("SELECT snowid_next(1)", &[]).unwrap();
    let end: String = db
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .unwrap()
        .get(0);
    db.batch_execute("CREATE EXTENSION pg_walinspect").unwrap();
    let rows = db
        .query(
            "SELECT record_type, description, record_length
             FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)
             WHERE resource_manager = 'snowid'",
            &[&start, &end],
        )
        .unwrap();
    assert_eq!(rows.len(), 1, "one lease record for the first ID");
    assert_eq!(rows[0].get::<_, String>(0), "LEASE");
    let description: String = rows[0].get(1);
    assert!(
        description.starts_with("lease until ") && description.contains("epoch 2026-01-01"),
        "{description}"
    );
    let length: i32 = rows[0].get(2);
    eprintln!("a lease record is {length} bytes of WAL");
    assert!(length < 100, "{length} bytes");
}
