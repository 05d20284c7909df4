//! A state page damaged on disk, on a cluster made with data checksums (where PostgreSQL's buffer
//! manager finds the damage) and without (where snowid's own check of the state finds it): while
//! the server is stopped, it fences; while it runs, the next change of the state fails with
//! XX001, no ID is issued past the last durable lease, and the restart the error's hint asks for
//! fences.

use snowid_integration::fences::*;
use snowid_integration::postgres::Client;
use snowid_integration::{code, wait_until, Cluster};
use std::time::Duration;

/// A started cluster (with data checksums or not) whose wall clock the test moves, snowid
/// preloaded, `settings` set, a table `t` keyed by shard 5 with 1,000 rows, and shard 7
/// released; returns it and the table's highest ID.
fn cluster(checksums: bool, settings: &[(&str, &str)]) -> (Cluster, i64) {
    let mut cluster = match checksums {
        true => Cluster::init_with_data_checksums(),
        false => Cluster::init_without_data_checksums(),
    };
    cluster.fake_wall_clock();
    cluster.set("shared_preload_libraries", "'snowid'");
    for (name, value) in settings {
        cluster.set(name, value);
    }
    start(&mut cluster);
    let mut db = cluster.client();
    let on: String = db.query_one("SHOW data_checksums", &[]).unwrap().get(0);
    assert_eq!(on == "on", checksums, "data_checksums is {on}");
    db.batch_execute(
        "CREATE EXTENSION snowid;
         CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(5));
         INSERT INTO t SELECT FROM generate_series(1, 1000);
         SELECT snowid_release(7);",
    )
    .unwrap();
    let old_max = max_id(&mut db);
    (cluster, old_max)
}

/// Whether `text` has PostgreSQL's error for a page of the state that failed its checksum
/// (from 18 the relation's path is quoted).
fn is_invalid_state_page(text: &str) -> bool {
    text.contains("invalid page in block 0 of relation global/9128")
        || text.contains("invalid page in block 0 of relation \"global/9128\"")
}

/// After the damage, the fence lifts only by the hint's resume, above the old IDs, and shard 7
/// stays released.
fn resumes_above(cluster: &Cluster, old_max: i64, what: &str) {
    let mut db = cluster.client();
    resume(&mut db, old_max);
    assert_generates_above(&mut db, 5, old_max, what);
    assert_released(&mut db, 7, what);
}

/// Guards against a state page that fails its checksum being read as no state at all, or as a
/// fresh one (the buffer manager hands snowid a zeroed page for it, which is also what a state
/// never created looks like): on a cluster with data checksums, one byte of block 0 flipped
/// while the server is stopped, and the clock set 10 minutes behind. The server starts, the page
/// fails its checksum (PostgreSQL's warning is in the log), and snowid refuses to generate until
/// the hint's resume.
#[test]
fn a_state_page_that_fails_its_checksum_fences() {
    let (mut cluster, old_max) = cluster(true, &[]);
    cluster.stop("fast");
    damage(&cluster, Damage::Block0ByteFlipped);
    cluster.set_wall_clock_offset(BEHIND);
    start(&mut cluster);
    assert_refuses(&cluster, 5, old_max, "a page that fails its checksum");
    assert!(
        is_invalid_state_page(&cluster.log()),
        "the page failed its checksum (the test is sharp):\n{}",
        cluster.log()
    );
    restart(&mut cluster, "fast");
    assert_refuses(&cluster, 5, old_max, "after a restart");
    resumes_above(&cluster, old_max, "a page that failed its checksum");
}

/// Whether the state's block 0 is in shared buffers (`None` where `pg_buffercache` is not
/// installed).
fn state_page_buffered(db: &mut Client) -> Option<bool> {
    db.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_buffercache")
        .ok()?;
    db.query_one(
        "SELECT count(*) > 0 FROM pg_buffercache
         WHERE relfilenode = 9128 AND reltablespace = 1664 AND relblocknumber = 0",
        &[],
    )
    .ok()
    .map(|r| r.get(0))
}

/// Guards against IDs issued under a lease that can no longer be renewed, and against an error
/// that says nothing of the damage, when a state page is damaged on disk while the server runs:
/// the page is written out by a checkpoint, a byte of it flipped on disk, and the page pushed out
/// of shared buffers (16 of them) by a table many times their size. The server keeps issuing
/// under the lease it has (into `t`), every ID dated before its end (the high-water mark read before the
/// damage), until it needs a new lease: that read of the page fails with XX001 (PostgreSQL's
/// "invalid page" with data checksums; snowid's "is damaged", with the hint to restart, without).
/// The restart fences, and the hint's resume lifts the fence above the old IDs.
fn damaged_while_running(checksums: bool) {
    let (mut cluster, old_max) = cluster(checksums, &[("shared_buffers", "'128kB'")]);
    let mut db = cluster.client();
    db.batch_execute(
        "CREATE TABLE filler (n int, pad text);
         CHECKPOINT;",
    )
    .unwrap();
    let lease_end_unix_ms: f64 = db
        .query_one(
            "SELECT extract(epoch FROM high_water_mark)::float8 * 1000 FROM snowid_info()",
            &[],
        )
        .unwrap()
        .get(0);
    let bytes = std::fs::read(cluster.pgdata().join(STATE)).expect("read the state");
    let mut flipped = bytes;
    flipped[24 + 20] ^= 0x40;
    cluster.put_file(STATE, &flipped);
    db.batch_execute(
        "INSERT INTO filler SELECT g, repeat('x', 1000) FROM generate_series(1, 3000) g",
    )
    .unwrap();
    if let Some(buffered) = state_page_buffered(&mut db) {
        assert!(
            !buffered,
            "the state's page left shared buffers (the test is sharp)"
        );
    }

    let mut issued = Vec::new();
    let mut failure = None;
    wait_until(
        "snowid needs a new lease, and reads the damaged page",
        Duration::from_secs(60),
        || match db.query_one("INSERT INTO t DEFAULT VALUES RETURNING id", &[]) {
            Ok(row) => {
                issued.push(row.get::<_, i64>(0));
                std::thread::sleep(Duration::from_millis(50));
                false
            }
            Err(err) => {
                failure = Some(err);
                true
            }
        },
    );
    let err = failure.unwrap();
    assert_eq!(code(&err), "XX001", "{}", describe(&err));
    let e = err.as_db_error().unwrap();
    if checksums {
        assert!(is_invalid_state_page(e.message()), "{}", describe(&err));
    } else {
        assert!(
            e.message()
                .starts_with("snowid's state in \"global/9128\" is damaged"),
            "{}",
            describe(&err)
        );
        assert!(
            e.hint().unwrap_or("").contains("Restart"),
            "{}",
            describe(&err)
        );
    }
    for id in &issued {
        assert!(
            (unix_ms_of(*id) as f64) < lease_end_unix_ms,
            "{id} is dated past the lease that was durable before the damage"
        );
    }
    let old_max = max_id(&mut db).max(old_max);
    drop(db);
    cluster.set_wall_clock_offset(BEHIND);
    restart(&mut cluster, "fast");
    assert_refuses(&cluster, 5, old_max, "the restart after the damage");
    resumes_above(&cluster, old_max, "the state damaged while running");
}

/// See [`damaged_while_running`].
#[test]
fn a_state_page_damaged_while_running_fails_with_xx001_under_data_checksums() {
    damaged_while_running(true);
}

/// See [`damaged_while_running`].
#[test]
fn a_state_page_damaged_while_running_fails_with_xx001_without_data_checksums() {
    damaged_while_running(false);
}
