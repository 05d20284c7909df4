//! Fences and releases through every route that replays WAL into a new timeline: a promotion, a
//! point-in-time restore from a base backup, and the restarts after each on the new timeline;
//! and the promotion margin at the end of a point-in-time restore.
//!
//! The fences here come from a lost state: the primary's `global/9128` is deleted while it is
//! stopped, after its standby and its base backup were made, so that the fence reaches them only
//! through the WAL. Every server that generates where it must refuse fails the test, whatever
//! IDs it issues.

use snowid_integration::fences::*;
use snowid_integration::postgres::Client;
use snowid_integration::{now_unix_ms, Cluster};
use std::path::PathBuf;

/// A started primary that archives its WAL, whose wall clock the test moves, with snowid
/// preloaded, `settings` set, and a table `t` keyed by shard 5 with `rows` rows; and its archive.
fn archiving_primary(settings: &[(&str, &str)], rows: i32) -> (Cluster, PathBuf) {
    let mut primary = Cluster::init_preloaded_with_fake_clock();
    let archive = primary.archive_wal();
    for (name, value) in settings {
        primary.set(name, value);
    }
    start(&mut primary);
    primary
        .client()
        .batch_execute(&format!(
            "CREATE EXTENSION snowid;
             CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(5));
             INSERT INTO t SELECT FROM generate_series(1, {rows});"
        ))
        .unwrap();
    (primary, archive)
}

/// A primary that archives its WAL, with a table `t` keyed by shard 5 and a streaming standby,
/// made before anything below; then, after a base backup (not started, for a restore), shard 7
/// released, its state lost and fenced at the next start, and a restore point `fenced` after
/// the fence. Returns the primary (running, fenced), the standby (running, replayed up to the
/// restore point), the backup, the archive and the table's highest ID.
fn fenced_after_a_backup() -> (Cluster, Cluster, Cluster, PathBuf, i64) {
    let (mut primary, archive) = archiving_primary(&[], 1000);
    let mut standby = Cluster::base_backup_of(&primary, true);
    start(&mut standby);
    let backup = Cluster::base_backup_of(&primary, false);
    let mut db = primary.client();
    db.batch_execute(
        "SELECT snowid_release(7);
         INSERT INTO t SELECT FROM generate_series(1, 1000);",
    )
    .unwrap();
    let old_max = max_id(&mut db);
    drop(db);
    primary.stop("fast");
    damage(&primary, Damage::Deleted);
    start(&mut primary);
    assert_refuses(&primary, 5, old_max, "the primary, its state lost");
    primary
        .client()
        .batch_execute("SELECT pg_create_restore_point('fenced')")
        .unwrap();
    primary.wait_for_archive();
    standby.wait_for_replay_of(&primary);
    (primary, standby, backup, archive, old_max)
}

/// A fenced server stays fenced across a fast and an immediate restart on its timeline, and
/// then the hint's resume lifts the fence above `old_max`, with shard 7 still released.
fn fenced_across_restarts_until_resumed(cluster: &mut Cluster, old_max: i64, what: &str) {
    assert_refuses(cluster, 5, old_max, what);
    assert_release_refused(cluster, old_max, what);
    for mode in ["fast", "immediate"] {
        restart(cluster, mode);
        assert_refuses(
            cluster,
            5,
            old_max,
            &format!("{what}, after a {mode} restart"),
        );
    }
    let mut db = cluster.client();
    let rows = resume_rows(&mut db);
    assert!(
        rows.contains(&key_column("postgres", "public.t", old_max)),
        "{what}: {rows:?}"
    );
    assert_generates_above(&mut db, 5, old_max, &format!("{what}, resumed"));
    assert_released(&mut db, 7, &format!("{what}, resumed"));
}

/// Guards against a promotion that drops a fence (the promotion's record raises the time base's
/// floor, and a promotion that wrote a generating state would lift the fence unseen; every
/// promotion elsewhere in the tests is of an unfenced cluster): the standby replays the fence
/// made after it was created, is promoted, and refuses, also after a fast and an immediate
/// restart on its new timeline, until the hint's resume; shard 7, released before the fence,
/// stays released.
#[test]
fn a_fence_survives_a_promotion_and_restarts_on_the_new_timeline() {
    let (primary, mut standby, _backup, _archive, old_max) = fenced_after_a_backup();
    drop(primary);
    standby.promote();
    fenced_across_restarts_until_resumed(&mut standby, old_max, "the promoted standby");
}

/// Guards against a restore that forgets a fence or a release it replayed: the base backup,
/// made before shard 7 was released and before the fence, is restored to the restore point made
/// after the fence, and recovery ends there on a new timeline. The restored server refuses,
/// also after restarts on that timeline, until the hint's resume; shard 7 stays released.
#[test]
fn a_fence_and_a_release_survive_a_point_in_time_restore() {
    let (mut primary, standby, mut restored, archive, old_max) = fenced_after_a_backup();
    // Stopped, not dropped: the archive is in its directory.
    drop(standby);
    primary.stop("fast");
    restored.restore_from(&archive, Some("fenced"));
    start(&mut restored);
    restored.wait_until_out_of_recovery();
    fenced_across_restarts_until_resumed(&mut restored, old_max, "the restored server");
}

/// The first ID of a session, and how far past `since_unix_ms` it is dated, in seconds.
fn first_id_past(db: &mut Client, shard: i32, since_unix_ms: i64) -> (i64, f64) {
    let id = next_ids(db, shard, 1)[0];
    (id, (unix_ms_of(id) - since_unix_ms) as f64 / 1000.0)
}

/// Guards against the end of a point-in-time restore taken for a restart rather than a new
/// timeline, which would date its first IDs at its clock, where the old primary's unarchived
/// leases could be: with `snowid.promotion_margin = '30s'`, a backup restored to a restore
/// point issues its first ID at least the margin plus the lead (31 s) past the clock when the
/// restore started; a shard released after the backup stays released; and a restart on the
/// new timeline applies no second margin.
#[test]
fn a_point_in_time_restore_starts_past_its_clock_by_the_margin_and_keeps_releases() {
    let (mut primary, archive) = archiving_primary(&[("snowid.promotion_margin", "'30s'")], 100);
    let mut restored = Cluster::base_backup_of(&primary, false);
    let mut db = primary.client();
    db.batch_execute(
        "SELECT snowid_release(7);
         INSERT INTO t SELECT FROM generate_series(1, 1000);",
    )
    .unwrap();
    // A statement of its own: in the batch above, the point would precede the insert's commit.
    db.batch_execute("SELECT pg_create_restore_point('target')")
        .unwrap();
    let old_max = max_id(&mut db);
    drop(db);
    primary.wait_for_archive();
    // Stopped, not dropped: the archive is in its directory.
    primary.stop("immediate");

    restored.restore_from(&archive, Some("target"));
    let before_unix_ms = now_unix_ms();
    start(&mut restored);
    restored.wait_until_out_of_recovery();
    let mut db = restored.client();
    assert_eq!(max_id(&mut db), old_max, "every row was restored");
    let (first, past) = first_id_past(&mut db, 5, before_unix_ms);
    assert!(first > old_max);
    assert!(
        past >= 31.0 - 0.002,
        "the first ID after the restore is dated {past:.3} s past the clock when it started, \
         not the margin (30 s) and the lead (1 s)"
    );
    assert_released(&mut db, 7, "the restored server");
    drop(db);
    restart(&mut restored, "fast");
    let mut db = restored.client();
    assert_generates_above(&mut db, 5, first, "after a restart");
    assert_released(&mut db, 7, "after a restart");
    assert_eq!(
        restored
            .log()
            .matches("snowid recorded its promotion to timeline")
            .count(),
        1,
        "the new timeline is recorded once, not again at the restart"
    );
}
