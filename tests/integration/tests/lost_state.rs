//! What the durable state must never lose: a state that is gone or damaged, a verdict that no ID
//! has acted on yet (a cluster straight from 0.2.0), and the knowledge of which IDs were issued,
//! when a shard is released or a cluster is upgraded. Each case ends a server's ability to know
//! what it issued before; every one must refuse (55000) until a superuser resumes above the IDs
//! already issued, and nothing that is not such a case (a `pg_upgrade --check`, an abandoned
//! upgrade, a standby that replayed the resume) may be fenced.
//!
//! Every server's wall clock runs 10 minutes behind the IDs already issued when it starts again,
//! so that a server that generates from its clock issues IDs below the old ones.

use snowid_core::epoch::format as format_epoch;
use snowid_integration::fences::*;
use snowid_integration::{code, now_unix_ms, Cluster};

/// The state is damaged in a cluster with rows, and the server starts with its clock 10 minutes
/// behind them. It refuses (55000) after the start, a fast restart, an immediate restart (crash
/// recovery) and a backend killed with SIGKILL (a crash restart); `snowid_resume_above_columns()`
/// resumes above the rows, and IDs stay above them after one more restart.
fn lost_state_is_fenced_until_resumed(kind: Damage) {
    let mut cluster = cluster_with_rows(1, 1000);
    let old_max = max_id(&mut cluster.client());
    cluster.stop("fast");
    damage(&cluster, kind);
    cluster.set_wall_clock_offset(BEHIND);
    start(&mut cluster);
    assert_refuses(&cluster, 1, old_max, &format!("{kind:?}, first start"));
    assert_clock_behind(&mut cluster.client(), old_max);
    for mode in ["fast", "immediate"] {
        restart(&mut cluster, mode);
        assert_refuses(
            &cluster,
            1,
            old_max,
            &format!("{kind:?}, after a {mode} restart"),
        );
    }
    cluster.kill_a_backend();
    assert_refuses(
        &cluster,
        1,
        old_max,
        &format!("{kind:?}, after a backend was killed"),
    );

    let mut db = cluster.client();
    resume(&mut db, old_max);
    let mut highest = assert_generates_above(&mut db, 1, old_max, "once resumed");
    db.execute("INSERT INTO t DEFAULT VALUES", &[]).unwrap();
    highest = highest.max(max_id(&mut db));
    assert_eq!(generating(&mut db), "yes");
    drop(db);
    restart(&mut cluster, "fast");
    assert_generates_above(
        &mut cluster.client(),
        1,
        highest,
        "after a restart once resumed",
    );
}

/// Guards against a deleted state file starting a fresh, unfenced state (0.3.0 issued 1,001 of
/// 1,001 IDs below earlier ones): `global/9128` removed while the server is stopped.
#[test]
fn a_deleted_state_is_fenced_until_resumed() {
    lost_state_is_fenced_until_resumed(Damage::Deleted);
}

/// Guards against a state file truncated to 0 bytes starting a fresh, unfenced state (0.3.0
/// issued 1,001 of 1,001 IDs below earlier ones).
#[test]
fn a_state_truncated_to_zero_bytes_is_fenced_until_resumed() {
    lost_state_is_fenced_until_resumed(Damage::TruncatedToZeroBytes);
}

/// Guards against a state file cut to its first page (8192 bytes) starting a fresh, unfenced
/// state (0.3.0 issued 1,001 of 1,001 IDs below earlier ones).
#[test]
fn a_state_cut_to_its_first_page_is_fenced_until_resumed() {
    lost_state_is_fenced_until_resumed(Damage::CutToItsFirstPage);
}

/// Guards against a state file whose pages are all zero bytes (its length kept) starting a
/// fresh, unfenced state (0.3.0 issued 1,001 of 1,001 IDs below earlier ones).
#[test]
fn a_state_with_every_page_zeroed_is_fenced_until_resumed() {
    lost_state_is_fenced_until_resumed(Damage::EveryPageZeroed);
}

/// Guards against a state file whose block 0 alone is zeroed starting a fresh, unfenced state
/// (0.3.0 issued 1,001 of 1,001 IDs below earlier ones).
#[test]
fn a_state_with_block_0_zeroed_is_fenced_until_resumed() {
    lost_state_is_fenced_until_resumed(Damage::Block0Zeroed);
}

/// Guards against a lost state taken for a first start by `CREATE EXTENSION`: with `global/9128`
/// deleted while the server was stopped, and nothing generated since, the extension is created
/// in a new database (and, in another run, dropped and created again in the database that has
/// the rows). Each database's witness says the cluster had the state, so generation is fenced in
/// both databases, across a restart, until a superuser resumes above the rows; then IDs are
/// above them in both.
fn a_new_install_after_a_lost_state_is_fenced(in_a_new_database: bool) {
    let mut cluster = cluster_with_rows(1, 1000);
    let old_max = max_id(&mut cluster.client());
    cluster.stop("fast");
    damage(&cluster, Damage::Deleted);
    cluster.set_wall_clock_offset(BEHIND);
    start(&mut cluster);
    let mut db = if in_a_new_database {
        cluster
            .client()
            .batch_execute("CREATE DATABASE other")
            .unwrap();
        let mut other = cluster.client_of("other");
        other.batch_execute("CREATE EXTENSION snowid").unwrap();
        other
    } else {
        let mut db = cluster.client();
        db.batch_execute(
            "DROP EXTENSION snowid CASCADE;
             CREATE EXTENSION snowid;
             ALTER TABLE t ALTER COLUMN id SET DEFAULT snowid_next(1);",
        )
        .unwrap();
        db
    };
    let when = if in_a_new_database {
        "CREATE EXTENSION in a new database"
    } else {
        "DROP and CREATE EXTENSION"
    };
    match db.query_one("SELECT snowid_next(1)", &[]) {
        Ok(row) => issued_instead_of_refusing(&mut db, 1, row.get(0), old_max, when),
        Err(err) => assert_fence_error(&err, when),
    }
    drop(db);
    assert_refuses(
        &cluster,
        1,
        old_max,
        &format!("{when}, in the rows' database"),
    );
    restart(&mut cluster, "fast");
    assert_refuses(&cluster, 1, old_max, &format!("{when}, after a restart"));

    let mut db = cluster.client();
    resume(&mut db, old_max);
    assert_generates_above(&mut db, 1, old_max, "once resumed");
    if in_a_new_database {
        let ids = next_ids(&mut cluster.client_of("other"), 1, 1000);
        assert!(ids.iter().all(|&id| id > old_max), "the new database too");
    }
}

/// See [`a_new_install_after_a_lost_state_is_fenced`]: `CREATE EXTENSION` in a new database.
#[test]
fn create_extension_in_another_database_after_a_lost_state_is_fenced() {
    a_new_install_after_a_lost_state_is_fenced(true);
}

/// See [`a_new_install_after_a_lost_state_is_fenced`]: `DROP EXTENSION` and `CREATE EXTENSION`
/// again in the same database.
#[test]
fn dropping_and_creating_the_extension_after_a_lost_state_is_fenced() {
    a_new_install_after_a_lost_state_is_fenced(false);
}

/// A cluster with rows on shard `shard` whose data directory then holds what 0.2.0 leaves: its
/// state file, with a lease that ended a minute ago, before the rows' IDs, and none of the later
/// versions' files (which this version no longer reads: such a cluster is fenced until
/// resumed). It is started with its clock 10 minutes behind, and nothing has called snowid since
/// (not even to decode). Returns the rows' highest ID.
fn started_straight_from_0_2_0(shard: i32) -> (Cluster, i64) {
    let mut cluster = cluster_with_rows(shard, 1000);
    let old_max = max_id(&mut cluster.client());
    cluster.stop("fast");
    let lease_end = now_unix_ms() - 60_000;
    cluster.leave_0_2_0_state(lease_end);
    cluster.set_wall_clock_offset(BEHIND);
    assert!(
        unix_ms_of(old_max) > lease_end,
        "the rows' IDs are later than the file's lease (the test is sharp)"
    );
    start(&mut cluster);
    (cluster, old_max)
}

/// Resumes above `t`, checks the IDs, restarts (the clock still behind) and checks again.
fn resume_and_generate_above(cluster: &mut Cluster, old_max: i64) {
    let mut db = cluster.client();
    resume(&mut db, old_max);
    let highest = assert_generates_above(&mut db, 1, old_max, "once resumed");
    drop(db);
    restart(cluster, "fast");
    assert_generates_above(
        &mut cluster.client(),
        1,
        highest,
        "after a restart once resumed",
    );
}

/// Guards against losing a verdict to a crash restart before any ID acted on it: 0.3.0 refused
/// a stale 0.2.0 file (55000) at its first start, but a backend killed with SIGKILL before the
/// first `snowid_next` re-created shared memory without the verdict; the crash restart then
/// trusted the file and generated (1,001 of 1,001 IDs below earlier ones). Here the refusal of a
/// cluster straight from 0.2.0 must outlive the crash restart and one more restart, until
/// resumed.
#[test]
fn a_0_2_0_verdict_outlives_a_backend_killed_before_the_first_id() {
    let (mut cluster, old_max) = started_straight_from_0_2_0(1);
    cluster.kill_a_backend();
    assert_refuses(&cluster, 1, old_max, "after a backend was killed");
    assert_clock_behind(&mut cluster.client(), old_max);
    restart(&mut cluster, "fast");
    assert_refuses(&cluster, 1, old_max, "after one more restart");
    resume_and_generate_above(&mut cluster, old_max);
}

/// Guards against losing the verdict on a cluster straight from 0.2.0 to an immediate restart
/// before the first `snowid_next` (0.3.0 issued 1,001 of 1,001 IDs below earlier ones after
/// one, with a stale 0.2.0 file): the refusal must outlive it, until resumed.
#[test]
fn a_0_2_0_verdict_outlives_an_immediate_restart_before_the_first_id() {
    let (mut cluster, old_max) = started_straight_from_0_2_0(1);
    restart(&mut cluster, "immediate");
    assert_refuses(&cluster, 1, old_max, "after an immediate restart");
    assert_clock_behind(&mut cluster.client(), old_max);
    resume_and_generate_above(&mut cluster, old_max);
}

/// Guards against `snowid_info()` telling an operator all is well while a fence is pending
/// (0.3.0 said `generating` = `yes` before the first `snowid_next`, which then refused): before
/// anything is generated, it says `no: fenced ...`, and again after the refusal; once resumed it
/// says `yes`.
#[test]
fn snowid_info_reports_a_pending_fence_as_fenced() {
    let (cluster, old_max) = started_straight_from_0_2_0(1);
    let mut db = cluster.client();
    let before = generating(&mut db);
    assert!(
        before.starts_with("no: fenced"),
        "before any snowid_next, snowid_info() says generating = {before:?}"
    );
    drop(db);
    assert_refuses(&cluster, 1, old_max, "the first snowid_next");
    let mut db = cluster.client();
    assert_clock_behind(&mut db, old_max);
    resume(&mut db, old_max);
    assert_eq!(generating(&mut db), "yes");
    assert_generates_above(&mut db, 1, old_max, "once resumed");
}

/// Guards against releasing a shard whose last ID the server does not know (0.3.0, its state
/// lost, recorded a made-up last ID, 7168, shard 7 at the epoch, and B, resuming above it, issued
/// 1,000 of 1,000 IDs below A's): with `global/9128` deleted, `snowid_release(7)` is refused
/// (55000, with a hint); once resumed, it returns an ID at or above A's, and B's IDs are above
/// A's.
#[test]
fn a_release_on_a_server_whose_state_was_lost_is_refused_until_resumed() {
    let mut a = cluster_with_rows(7, 1000);
    let a_max = max_id(&mut a.client());
    a.stop("fast");
    damage(&a, Damage::Deleted);
    a.set_wall_clock_offset(BEHIND);
    start(&mut a);
    assert_release_refused(&a, a_max, "state deleted");
    resume(&mut a.client(), a_max);
    hand_off(&a, 7, a_max);
}

/// Guards against releasing a shard on a server whose IDs an old version's file stood for
/// (0.3.0 recorded a last ID taken from a stale 0.2.0 file's lease, below A's IDs, so B,
/// resuming above it, issued IDs below A's): `snowid_release(7)` is refused (55000, with a
/// hint); once resumed, the hand-off keeps B above A.
#[test]
fn a_release_on_a_server_straight_from_0_2_0_is_refused_until_resumed() {
    let (a, a_max) = started_straight_from_0_2_0(7);
    assert_release_refused(&a, a_max, "straight from 0.2.0");
    resume(&mut a.client(), a_max);
    hand_off(&a, 7, a_max);
}

/// Guards against releasing a shard under a later `snowid.epoch` than its IDs were issued under
/// (0.3.0 recorded a made-up last ID, 7168, shard 7 at the epoch, and B issued IDs below
/// A's): with the epoch moved to a day before now, `snowid_release(7)` is refused (55000); with
/// the epoch put back, the hand-off keeps B above A.
#[test]
fn a_release_under_a_later_epoch_is_refused_until_the_epoch_is_put_back() {
    let mut a = cluster_with_rows(7, 1000);
    let a_max = max_id(&mut a.client());
    a.stop("fast");
    let later = (now_unix_ms() - 86_400_000) / 1000 * 1000;
    assert!(later > EPOCH, "a day ago is later than the default epoch");
    a.set("snowid.epoch", &format!("'{}'", format_epoch(later)));
    start(&mut a);
    let err = a
        .client()
        .query_one("SELECT snowid_next(7)", &[])
        .expect_err("generation refuses a later epoch (the test is sharp)");
    assert_eq!(code(&err), "55000", "{}", describe(&err));
    assert_release_refused(&a, a_max, "a later epoch");
    a.stop("fast");
    a.set("snowid.epoch", &format!("'{}'", format_epoch(EPOCH)));
    start(&mut a);
    hand_off(&a, 7, a_max);
}

/// The old cluster, started again with its clock 10 minutes behind, generates above its rows,
/// also after `restarts` more restarts.
fn old_cluster_generates(old: &mut Cluster, old_max: i64, restarts: usize, after: &str) {
    old.set_wall_clock_offset(BEHIND);
    let mut highest = old_max;
    for round in 0..=restarts {
        if round == 0 {
            start(old);
        } else {
            restart(old, "fast");
        }
        let when = format!("the old cluster after {after}, start {}", round + 1);
        let mut db = old.client();
        if round == 0 {
            assert_clock_behind(&mut db, old_max);
        }
        match db.query_one("SELECT snowid_next(1)", &[]) {
            Ok(row) => assert!(
                row.get::<_, i64>(0) > highest,
                "{when}: issued {}, not above {highest}",
                row.get::<_, i64>(0)
            ),
            Err(err) => panic!("{when}: snowid_next(1) refused: {}", describe(&err)),
        }
        let generating = generating(&mut db);
        assert_eq!(generating, "yes", "{when}: snowid_info() says");
        highest = assert_generates_above(&mut db, 1, highest, &when);
        db.execute("INSERT INTO t DEFAULT VALUES", &[])
            .unwrap_or_else(|e| panic!("{when}: INSERT: {}", describe(&e)));
        highest = highest.max(max_id(&mut db));
    }
}

/// Guards against `pg_upgrade --check` fencing the cluster it only checked (0.3.0 left
/// `snowid.upgraded` in the old cluster, which then refused with 55000, durably): after the
/// check, the old cluster starts again and generates above its old IDs, also after a restart.
#[test]
fn pg_upgrade_check_leaves_the_old_cluster_generating() {
    if !has_pg_upgrade("pg_upgrade_check_leaves_the_old_cluster_generating") {
        return;
    }
    let (mut old, new, old_max) = clusters_to_upgrade(Cluster::init(), 1);
    let out = new.pg_upgrade_from(&old, true);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Clusters are compatible"),
        "the check ran: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    old_cluster_generates(&mut old, old_max, 1, "pg_upgrade --check");
}

/// Guards against an abandoned upgrade fencing the cluster it was abandoned for (0.3.0 left
/// `snowid.upgraded` in the old cluster during a copy-mode `pg_upgrade`, and the old cluster,
/// started again, refused with 55000, durably): after a real `pg_upgrade` in copy mode, whose new
/// cluster is fenced, the operator goes back to the old cluster, which generates above its old
/// IDs, also after two restarts.
#[test]
fn an_abandoned_copy_mode_upgrade_leaves_the_old_cluster_generating() {
    if !has_pg_upgrade("an_abandoned_copy_mode_upgrade_leaves_the_old_cluster_generating") {
        return;
    }
    let (mut old, mut new, old_max) = clusters_to_upgrade(Cluster::init(), 1);
    new.pg_upgrade_from(&old, false);
    start(&mut new);
    assert_refuses(&new, 1, old_max, "the new cluster made by pg_upgrade");
    new.stop("fast");
    drop(new);
    old_cluster_generates(&mut old, old_max, 2, "an abandoned pg_upgrade");
}

/// Guards against releasing a shard on a cluster fenced by `pg_upgrade` (0.3.0 recorded a
/// made-up last ID, 7168, and B, resuming above it, issued IDs below the old cluster's): on the
/// upgraded cluster `snowid_release(7)` is refused (55000, with a hint); once resumed, it returns
/// an ID at or above the old cluster's shard-7 IDs, and B's IDs are above them.
#[test]
fn a_release_on_a_cluster_fenced_by_pg_upgrade_is_refused_until_resumed() {
    if !has_pg_upgrade("a_release_on_a_cluster_fenced_by_pg_upgrade_is_refused_until_resumed") {
        return;
    }
    let (old, mut new, a_max) = clusters_to_upgrade(Cluster::init(), 7);
    new.pg_upgrade_from(&old, false);
    start(&mut new);
    assert_release_refused(&new, a_max, "after pg_upgrade");
    resume(&mut new.client(), a_max);
    hand_off(&new, 7, a_max);
}

/// How a standby of the upgraded cluster is made, before the new primary resumes.
#[derive(Clone, Copy, Debug)]
enum StandbyMadeBy {
    /// `pg_basebackup -R` from the started new primary, before anything called snowid there.
    BaseBackup,
    /// A copy of the new cluster's data directory taken after `pg_upgrade`, before the new
    /// primary's first start, as the rsync step in `pg_upgrade`'s documentation makes it.
    CopyBeforeTheFirstStart,
}

/// A streaming standby of `primary` from a copy of its data directory, taken while it is
/// stopped; not started.
fn cold_copy_as_standby(primary: &Cluster) -> Cluster {
    let standby = Cluster::init();
    let data = standby.pgdata();
    standby.run_as_server_user("rm", &["-rf".as_ref(), data.as_os_str()]);
    standby.run_as_server_user(
        "cp",
        &[
            "-a".as_ref(),
            primary.pgdata().as_os_str(),
            data.as_os_str(),
        ],
    );
    standby.set("port", &standby.port.to_string());
    standby.set(
        "unix_socket_directories",
        &format!("'{}'", standby.dir().display()),
    );
    standby.set(
        "primary_conninfo",
        &format!("'host=127.0.0.1 port={} user=postgres'", primary.port),
    );
    standby.run_as_server_user("touch", &[data.join("standby.signal").as_os_str()]);
    standby
}

/// After a real `pg_upgrade`, a standby of the new cluster, its clock 10 minutes behind, is made
/// before the new primary resumes; the new primary refuses, then resumes and inserts rows; the
/// standby replays them and is promoted after the primary stops. It must generate above every
/// primary ID, also after a restart.
fn a_standby_of_an_upgraded_cluster_generates_once_promoted(made_by: StandbyMadeBy) {
    let (old, mut new, old_max) = clusters_to_upgrade(Cluster::init(), 1);
    new.pg_upgrade_from(&old, false);
    drop(old);
    let mut standby = match made_by {
        StandbyMadeBy::CopyBeforeTheFirstStart => {
            let standby = cold_copy_as_standby(&new);
            start(&mut new);
            standby
        }
        StandbyMadeBy::BaseBackup => {
            start(&mut new);
            Cluster::base_backup_of(&new, true)
        }
    };
    standby.fake_wall_clock();
    standby.set_wall_clock_offset(BEHIND);
    start(&mut standby);

    let mut db = new.client();
    let err = db
        .query_one("SELECT snowid_next(1)", &[])
        .expect_err("the upgraded cluster is fenced before the resume");
    assert_fence_error(&err, "the new primary before the resume");
    resume(&mut db, old_max);
    db.batch_execute("INSERT INTO t SELECT FROM generate_series(1, 1000)")
        .unwrap();
    let primary_max = max_id(&mut db);
    assert!(primary_max > old_max);
    drop(db);
    standby.wait_for_replay_of(&new);
    let replayed = max_id(&mut standby.client());
    assert_eq!(replayed, primary_max, "the standby replayed the rows");
    new.stop("immediate");
    standby.promote();

    let mut db = standby.client();
    assert_clock_behind(&mut db, primary_max);
    let highest = assert_generates_above(&mut db, 1, primary_max, "the promoted standby");
    let generating = generating(&mut db);
    assert_eq!(
        generating, "yes",
        "the promoted standby: snowid_info() says"
    );
    db.execute("INSERT INTO t DEFAULT VALUES", &[])
        .unwrap_or_else(|e| panic!("INSERT on the promoted standby: {}", describe(&e)));
    drop(db);
    restart(&mut standby, "fast");
    assert_generates_above(
        &mut standby.client(),
        1,
        highest,
        "the promoted standby after a restart",
    );
}

/// Guards against a standby of an upgraded cluster staying fenced after it replayed the resume
/// (0.3.0: a standby made by `pg_basebackup` before the new primary's resume, promoted later,
/// refused with 55000): here the standby is made by `pg_basebackup` from the started new
/// primary before anything called snowid there.
#[test]
fn a_base_backup_standby_of_an_upgraded_cluster_generates_once_promoted() {
    if has_pg_upgrade("a_base_backup_standby_of_an_upgraded_cluster_generates_once_promoted") {
        a_standby_of_an_upgraded_cluster_generates_once_promoted(StandbyMadeBy::BaseBackup);
    }
}

/// Guards against the same with a standby made the way `pg_upgrade`'s documentation makes
/// standbys (its rsync step: a copy of the new cluster before its first start), which 0.3.0 also
/// left fenced after promotion though it replayed the resume.
#[test]
fn a_standby_copied_before_the_upgraded_cluster_started_generates_once_promoted() {
    if has_pg_upgrade(
        "a_standby_copied_before_the_upgraded_cluster_started_generates_once_promoted",
    ) {
        a_standby_of_an_upgraded_cluster_generates_once_promoted(
            StandbyMadeBy::CopyBeforeTheFirstStart,
        );
    }
}
