//! Replication, failover, restores and upgrades: across servers, a shard's IDs never go back.
//!
//! Each test builds real servers on loopback: a primary, a streaming standby made with
//! `pg_basebackup -R`, a restore from a base backup and archived WAL, a `pg_upgrade`. Wall clocks
//! are set back with libfaketime where the scenario needs it.

use snowid_integration::fences::ACCEPTED_AHEAD;
use snowid_integration::postgres::Client;
use snowid_integration::{code, Cluster, Watchdog};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(60);
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

/// Runs `snowid_resume_above_columns()`, accepting keys dated up to [`ACCEPTED_AHEAD`] ahead of
/// the clock (the servers here restart with their clocks set back), and returns the columns it
/// resumed above: (table, max).
fn resume_above_columns(db: &mut Client) -> Vec<(String, i64)> {
    db.query(
        &format!("SELECT tbl, max_id FROM snowid_resume_above_columns(accept_ahead => '{ACCEPTED_AHEAD}')"),
        &[],
    )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
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
/// shard above every replicated ID, both after IDs dated ahead of the primary's clock and at a
/// normal rate. The burst runs ahead of the clock as far as the machine's speed takes it; then
/// the primary's clock steps back 3 s, which its time base does not follow, so that shard 1's
/// last IDs are dated seconds ahead of the clock whatever the machine's speed (an assert-enabled
/// server is several times slower). The primary runs with fsync on, so the durable path is the
/// one exercised.
#[test]
fn failover_to_a_standby_whose_clock_is_behind() {
    let mut primary = Cluster::init_preloaded_with_fake_clock();
    primary.set("snowid.max_lead", "'60s'");
    primary.set("fsync", "on");
    primary.start().unwrap();
    primary
        .client()
        .batch_execute("CREATE EXTENSION snowid")
        .unwrap();
    let mut standby = Cluster::base_backup_of(&primary, true);
    standby.fake_wall_clock();
    standby.set_wall_clock_offset("-5m");
    standby.start().unwrap();

    let mut db = primary.client();
    fill(&mut db);
    primary.set_wall_clock_offset("-3s");
    db.batch_execute("INSERT INTO t SELECT snowid_next(1) FROM generate_series(1, 1000)")
        .unwrap();
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
    // Five minutes less the time the test took since the last old ID (11 s once on a loaded
    // machine): still minutes.
    assert!(
        clock_behind_old_ids > 240.0,
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
    let archive_dir = primary.archive_wal();
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
    primary.wait_for_archive();
    primary.stop("immediate");

    restored.restore_from(&archive_dir, None);
    restored.fake_wall_clock();
    restored.set_wall_clock_offset("-1h");
    restored.start().unwrap();
    restored.wait_until_out_of_recovery();
    let mut db = restored.client();
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

/// Guards against `pg_upgrade` going back (all 351,845 new IDs below the old ones when the
/// operator skipped the manual step, after the old cluster rode out a 10-minute backward step of
/// the machine's clock): snowid's state does not travel, and the upgraded cluster, its clock 10
/// minutes behind the old IDs, must not generate from its clock. It refuses (55000, naming the
/// command), also after a restart, until `snowid_resume_above_columns()` resumes above every
/// old ID; then it generates above them at once.
#[test]
fn pg_upgrade_fences_the_new_cluster_until_resumed() {
    let old = Cluster::init();
    if !old.bin_dir().join("pg_upgrade").exists() {
        snowid_integration::not_run(
            "pg_upgrade_fences_the_new_cluster_until_resumed",
            &format!(
                "this PostgreSQL build has no pg_upgrade ({}); the other majors run it",
                old.bin_dir().display()
            ),
        );
        return;
    }
    snowid_integration::ran("pg_upgrade_fences_the_new_cluster_until_resumed");
    upgrade_fences_until_resumed(old);
}

/// The same guarantee across majors, as operators upgrade: `pg_upgrade` from the major before
/// (18 to 19) leaves the new cluster refusing, also after a restart, until one
/// `snowid_resume_above_columns()`, then generating above every old ID. Runs where the test
/// command names the older major's installation (`SNOWID_UPGRADE_FROM`, set on 19).
#[test]
fn pg_upgrade_from_the_major_before_fences_the_new_cluster_until_resumed() {
    let Some(old) = Cluster::init_of_upgrade_source() else {
        snowid_integration::not_run(
            "pg_upgrade_from_the_major_before_fences_the_new_cluster_until_resumed",
            "not for this major: pg_upgrade across majors runs on PostgreSQL 19, from 18",
        );
        return;
    };
    snowid_integration::ran(
        "pg_upgrade_from_the_major_before_fences_the_new_cluster_until_resumed",
    );
    let old_major = old.version();
    let new_major = snowid_integration::major();
    assert_ne!(
        old_major.split(['.', 'r', 'b', ' ']).next(),
        new_major.split(['.', 'r', 'b', ' ']).next(),
        "an upgrade across majors ({old_major} to {new_major})"
    );
    upgrade_fences_until_resumed(old);
}

fn upgrade_fences_until_resumed(mut old: Cluster) {
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

    let mut new = Cluster::init_preloaded_with_fake_clock();
    new.set_wall_clock_offset("-10m");
    new.pg_upgrade_from(&old, false);
    for _ in 0..2 {
        new.start().unwrap();
        let mut db = new.client();
        let rows: i64 = db.query_one("SELECT count(*) FROM t", &[]).unwrap().get(0);
        assert_eq!(rows, 2000);
        let err = db
            .execute("INSERT INTO t (n) VALUES (0)", &[])
            .expect_err("the upgraded cluster is fenced");
        assert_eq!(code(&err), "55000", "{err:?}");
        let e = err.as_db_error().unwrap();
        assert!(e.detail().unwrap().contains("pg_upgrade"), "{e:?}");
        assert!(
            e.hint().unwrap().contains("snowid_resume_above_columns()"),
            "{e:?}"
        );
        drop(db);
        new.stop("fast");
    }
    new.start().unwrap();
    let mut db = new.client();
    let behind: bool = db
        .query_one(
            "SELECT time_base < (SELECT snowid_timestamp(max(id)) FROM t) FROM snowid_info()",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        behind,
        "the new cluster's clock is behind the old IDs (the test is sharp)"
    );
    let resumed = resume_above_columns(&mut db);
    assert_eq!(resumed, [("public.t".to_string(), before[0].1)]);
    assert_resumes_above(&mut db, &before, "pg_upgrade");
    db.execute("INSERT INTO t (n) VALUES (0)", &[]).unwrap();
}

/// Guards against unreadable WAL: the state's creation, at `CREATE EXTENSION`, is one record of
/// full-page images of its ten pages (PostgreSQL's own kind, which replays without snowid), and
/// each later change is one record of snowid's resource manager, named and described for
/// pg_walinspect (and pg_waldump's in-server equivalent): small leases, a release, a resume and a
/// take-back, each naming the page it changes.
#[test]
fn state_records_are_named_and_described_in_the_wal() {
    let mut cluster = Cluster::init();
    cluster.set("shared_preload_libraries", "'snowid'");
    cluster.start().unwrap();
    let mut db = cluster.client();
    let has_walinspect: bool = db
        .query_one(
            "SELECT count(*) > 0 FROM pg_available_extensions WHERE name = 'pg_walinspect'",
            &[],
        )
        .unwrap()
        .get(0);
    if !has_walinspect {
        snowid_integration::not_run(
            "state_records_are_named_and_described_in_the_wal",
            "this PostgreSQL build has no pg_walinspect",
        );
        return;
    }
    snowid_integration::ran("state_records_are_named_and_described_in_the_wal");
    let start: String = db
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .unwrap()
        .get(0);
    db.batch_execute(
        "CREATE EXTENSION snowid;
         SELECT snowid_next(1);
         SELECT snowid_resume_above(snowid_release(9));
         SELECT snowid_take_back(9, snowid_release(9));",
    )
    .unwrap();
    let end: String = db
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .unwrap()
        .get(0);
    db.batch_execute("CREATE EXTENSION pg_walinspect").unwrap();
    let rows = db
        .query(
            "SELECT record_type, description, record_length, block_ref
             FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)
             WHERE resource_manager = 'snowid' ORDER BY start_lsn",
            &[&start, &end],
        )
        .unwrap();
    let kinds: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(
        kinds,
        ["LEASE", "RELEASE", "RESUME", "RELEASE", "TAKE_BACK"]
    );
    let describe = |i: usize| rows[i].get::<_, String>(1);
    assert!(
        describe(0).starts_with("lease until ") && describe(0).contains("epoch 2026-01-01"),
        "{}",
        describe(0)
    );
    assert!(
        describe(1).starts_with("shard 9 released, last ID "),
        "{}",
        describe(1)
    );
    assert!(
        describe(2).starts_with("resumed above ID "),
        "{}",
        describe(2)
    );
    assert!(
        describe(4).starts_with("shard 9 taken back above ID "),
        "{}",
        describe(4)
    );
    for i in 0..kinds.len() {
        let blocks: String = rows[i].get(3);
        assert!(blocks.contains("rel 1664/0/9128"), "{blocks}");
        let length: i32 = rows[i].get(2);
        assert!(length < 200, "{}: {length} bytes", kinds[i]);
    }
    let creations: Vec<String> = db
        .query(
            "SELECT block_ref
             FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)
             WHERE resource_manager = 'XLOG' AND record_type = 'FPI'
               AND block_ref LIKE '%rel 1664/0/9128 %'",
            &[&start, &end],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        creations.len(),
        1,
        "one record creates the state: {creations:?}"
    );
    for block in 0..10 {
        assert!(
            creations[0].contains(&format!("rel 1664/0/9128 fork main blk {block} ")),
            "every page whole: {}",
            creations[0]
        );
    }
    let lease: i32 = rows[0].get(2);
    eprintln!("a lease record is {lease} bytes of WAL");
}

/// Guards against IDs handed out by bare SELECTs under a lease the synchronous standby never
/// received (0.2.0 flushed a lease locally only, and a SELECT has no XID, so nothing waited for
/// the standby; `nextval()` takes an XID for exactly this). With `synchronous_standby_names =
/// '*'`, a session takes IDs with bare SELECTs (the pre-allocation pattern) while the
/// standby's walreceiver is stopped: each SELECT either returns an ID under a lease the standby
/// confirmed, or waits until `statement_timeout` cancels it (57014). The primary then fails, and
/// the standby, its clock five minutes behind, is promoted: its first IDs are above every ID the
/// client was handed.
#[test]
fn pre_allocated_ids_under_synchronous_replication_survive_a_failover() {
    let mut primary = Cluster::preloaded(&[]);
    let mut standby = Cluster::base_backup_of(&primary, true);
    standby.fake_wall_clock();
    standby.set_wall_clock_offset("-5m");
    standby.start().unwrap();
    primary.set("synchronous_standby_names", "'*'");
    primary.reload();
    let mut db = primary.client();
    let _watchdog = Watchdog::new(&db, DEADLINE);
    // Handed out before the standby stops confirming: on a loaded machine, the lease this took
    // may run out before the first SELECT below, which then hands out nothing.
    let before_the_cut: i64 = db.query_one("SELECT snowid_next(5)", &[]).unwrap().get(0);
    drop(_watchdog);
    standby.wait_for_replay_of(&primary);

    // pg_basebackup -R wrote primary_conninfo into postgresql.auto.conf, which ALTER SYSTEM
    // (allowed on a standby) rewrites.
    let mut on_standby = standby.client();
    on_standby
        .batch_execute("ALTER SYSTEM SET primary_conninfo = ''")
        .unwrap();
    on_standby.batch_execute("SELECT pg_reload_conf()").unwrap();
    drop(on_standby);
    let deadline = std::time::Instant::now() + DEADLINE;
    while db
        .query_one("SELECT count(*) FROM pg_stat_replication", &[])
        .unwrap()
        .get::<_, i64>(0)
        > 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the walreceiver did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    db.batch_execute("SET statement_timeout = '2s'").unwrap();
    let next = db.prepare("SELECT snowid_next(5)").unwrap();
    let (mut handed, mut cancelled) = (vec![before_the_cut], 0);
    let until = std::time::Instant::now() + Duration::from_secs(6);
    while std::time::Instant::now() < until {
        match db.query_one(&next, &[]) {
            Ok(row) => handed.push(row.get::<_, i64>(0)),
            Err(err) => {
                assert_eq!(code(&err), "57014", "{err:?}");
                cancelled += 1;
            }
        }
    }
    assert!(
        cancelled > 0,
        "the lease ran out and its renewal waited for the standby (the test is sharp)"
    );
    let handed_max = *handed.iter().max().unwrap();
    snowid_integration::say(&format!(
        "pre_allocated_ids_under_synchronous_replication_survive_a_failover: {} IDs handed out, \
         {cancelled} SELECTs waited for the standby until cancelled",
        handed.len()
    ));
    drop(db);
    primary.stop("immediate");
    standby.promote();
    let mut db = standby.client();
    let _watchdog = Watchdog::new(&db, DEADLINE);
    let first: i64 = db
        .query_one(
            "SELECT min(snowid_next(5)) FROM generate_series(1, 1000)",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        first > handed_max,
        "the promoted standby issued {first}, not above {handed_max}, handed out on the primary"
    );
}

/// The server's major version number (`150020` gives 15).
fn server_major(db: &mut Client) -> i32 {
    let num: String = db.query_one("SHOW server_version_num", &[]).unwrap().get(0);
    num.parse::<i32>().unwrap() / 10000
}

/// Guards against a logical copy taking over writes below the IDs it copied: a subscriber
/// receives IDs as data and keeps no position of its own, so a subscriber whose clock is 10
/// minutes behind would generate below them. Logical replication carries sequences from 19 on
/// (`FOR ALL SEQUENCES`, `REFRESH SEQUENCES`), but snowid's position is not a sequence and does
/// not travel with them: the cut-over is the same on every major, one
/// `snowid_resume_above_columns()` on the subscriber, after which it generates above every
/// copied ID, also after a restart.
#[test]
fn a_logical_subscriber_takes_over_above_the_copied_ids_once_resumed() {
    let mut publisher = Cluster::init();
    publisher.set("wal_level", "logical");
    publisher.set("shared_preload_libraries", "'snowid'");
    publisher.start().unwrap();
    let mut subscriber = Cluster::init_preloaded_with_fake_clock();
    subscriber.set_wall_clock_offset("-10m");
    subscriber.start().unwrap();

    let table = "CREATE EXTENSION snowid;
                 CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(5), n int);";
    let mut pub_db = publisher.client();
    pub_db.batch_execute(table).unwrap();
    pub_db
        .batch_execute("INSERT INTO t (n) SELECT g FROM generate_series(1, 1000) g")
        .unwrap();
    let mut sub_db = subscriber.client();
    sub_db.batch_execute(table).unwrap();
    let sequences = server_major(&mut pub_db) >= 19;
    if sequences {
        pub_db
            .batch_execute(
                "CREATE SEQUENCE s;
                 SELECT nextval('s') FROM generate_series(1, 42);
                 CREATE PUBLICATION p FOR TABLE t;
                 CREATE PUBLICATION p_seq FOR ALL SEQUENCES;",
            )
            .unwrap();
        sub_db.batch_execute("CREATE SEQUENCE s").unwrap();
    } else {
        pub_db
            .batch_execute("CREATE PUBLICATION p FOR TABLE t")
            .unwrap();
    }
    let publications = if sequences { "p, p_seq" } else { "p" };
    sub_db
        .batch_execute(&format!(
            "CREATE SUBSCRIPTION sub CONNECTION 'host=127.0.0.1 port={} dbname=postgres' \
             PUBLICATION {publications}",
            publisher.port
        ))
        .unwrap();
    // Rows written while the subscription streams, too.
    pub_db
        .batch_execute("INSERT INTO t (n) SELECT g FROM generate_series(1001, 2000) g")
        .unwrap();
    let copied_max: i64 = pub_db
        .query_one("SELECT max(id) FROM t", &[])
        .unwrap()
        .get(0);
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let (rows, max): (i64, Option<i64>) = sub_db
            .query_one("SELECT count(*), max(id) FROM t", &[])
            .map(|r| (r.get(0), r.get(1)))
            .unwrap();
        if rows == 2000 && max == Some(copied_max) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the subscriber has {rows} rows"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The cut-over: sequences synchronised where the major can, writes stopped on the
    // publisher, the subscription dropped.
    if sequences {
        sub_db
            .batch_execute("ALTER SUBSCRIPTION sub REFRESH SEQUENCES")
            .unwrap();
        let deadline = std::time::Instant::now() + DEADLINE;
        while sub_db
            .query_one("SELECT last_value FROM s", &[])
            .map(|r| r.get::<_, i64>(0))
            .unwrap()
            != 42
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the sequence was synchronised"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    drop(pub_db);
    publisher.stop("fast");
    sub_db
        .batch_execute(
            "ALTER SUBSCRIPTION sub DISABLE;
             ALTER SUBSCRIPTION sub SET (slot_name = NONE);
             DROP SUBSCRIPTION sub;",
        )
        .unwrap();

    // The subscriber's own position is its clock's, 10 minutes behind the copied IDs, whatever
    // the sequences did: that is why the resume is needed.
    let unresumed: i64 = sub_db
        .query_one("SELECT snowid_next(6)", &[])
        .unwrap()
        .get(0);
    assert!(
        unresumed < copied_max,
        "the subscriber's clock is behind the copied IDs (the test is sharp)"
    );
    let resumed = resume_above_columns(&mut sub_db);
    assert_eq!(resumed, [("public.t".to_string(), copied_max)]);
    assert_resumes_above(&mut sub_db, &[(5, copied_max)], "logical cut-over");
    sub_db.execute("INSERT INTO t (n) VALUES (0)", &[]).unwrap();
    drop(sub_db);
    subscriber.stop("fast");
    subscriber.start().unwrap();
    assert_resumes_above(
        &mut subscriber.client(),
        &[(5, copied_max)],
        "logical cut-over, restarted",
    );
}
