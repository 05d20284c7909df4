//! Every operator statement's error says what happened. A release, a take-back, a resume and the
//! state's creation, cancelled while waiting for synchronous standbys that do not answer, are
//! durable on this server all the same: each error names the change that holds, and the next
//! step; none says "lease" or "no ID was handed out". Each holds after a restart, and none is
//! undone by ROLLBACK.

use snowid_integration::fences::*;
use snowid_integration::postgres::{Client, Error};
use snowid_integration::{code, Cluster};

const WAITS: &str = "canceling the wait for the synchronous standbys to confirm";

/// A preloaded server with `t` keyed by shard 8, whose commits and snowid's changes wait for a
/// synchronous standby named `nobody`, which never connects.
fn waiting_for_a_standby() -> (Cluster, i64) {
    let mut cluster = cluster_with_rows(8, 100);
    let old_max = max_id(&mut cluster.client());
    cluster.set("synchronous_standby_names", "'nobody'");
    restart(&mut cluster, "fast");
    (cluster, old_max)
}

/// The standby named is forgotten: nothing waits any more.
fn standbys_answer(cluster: &mut Cluster) {
    cluster.set("synchronous_standby_names", "''");
    restart(cluster, "fast");
}

/// Runs `sql` with a 3-second statement timeout; it must fail.
fn cancelled(db: &mut Client, sql: &str) -> Error {
    db.batch_execute("SET statement_timeout = '3s'").unwrap();
    let err = db
        .query(sql, &[])
        .expect_err("the wait for the standby is cancelled");
    db.batch_execute("SET statement_timeout = 0").unwrap();
    err
}

/// The error is 57014, its message names `change`, its detail says the change is durable here,
/// and nothing of a lease.
fn assert_says(err: &Error, change: &str, durable: &str) {
    assert_eq!(code(err), "57014", "{}", describe(err));
    let e = err.as_db_error().unwrap();
    assert_eq!(
        e.message(),
        format!("{WAITS} {change}"),
        "{}",
        describe(err)
    );
    let detail = e.detail().unwrap_or("");
    assert!(detail.contains(durable), "{}", describe(err));
    assert!(
        !detail.contains("no ID under it") && !e.message().contains("snowid's lease"),
        "{}",
        describe(err)
    );
    assert!(e.hint().is_some(), "a next step: {}", describe(err));
}

/// Row 6. Guards against a release whose error said the opposite of what happened (0.5.0: 57014
/// "canceling the wait for the synchronous standbys to confirm snowid's lease", "no ID under it
/// was handed out", yet shard 7 was released, then and after a restart). The error names the
/// release and says it holds; shard 7 is released then, after a restart, and in the databases'
/// record; once the standbys answer, the release again returns the same last ID.
#[test]
fn a_cancelled_release_says_the_shard_is_released() {
    let (mut cluster, _) = waiting_for_a_standby();
    let mut db = cluster.client();
    let err = cancelled(&mut db, "SELECT snowid_release(7)");
    assert_says(
        &err,
        "the release of snowid shard 7",
        "is released on this server, durably",
    );
    assert_released(&mut db, 7, "after the cancel");
    let recorded: Vec<i32> = db
        .query_one("SELECT shards FROM snowid_released_shards", &[])
        .unwrap()
        .get(0);
    assert_eq!(recorded, vec![7], "recorded although cancelled");
    drop(db);
    restart(&mut cluster, "fast");
    assert_released(&mut cluster.client(), 7, "after a restart");
    standbys_answer(&mut cluster);
    let mut db = cluster.client();
    let last: i64 = db
        .query_one("SELECT snowid_release(7)", &[])
        .unwrap()
        .get(0);
    let detail_last = err
        .as_db_error()
        .and_then(|e| e.detail())
        .unwrap_or("")
        .to_string();
    assert!(
        detail_last.contains(&format!("at last ID {last}")),
        "the error gave the last ID the release returns again ({last}): {detail_last}"
    );
}

/// Guards against a take-back whose error says nothing of the take-back: it holds here, and
/// after a restart the shard issues above the ID it was taken back above.
#[test]
fn a_cancelled_take_back_says_the_shard_is_taken_back() {
    let mut cluster = cluster_with_rows(8, 100);
    cluster
        .client()
        .batch_execute("SELECT snowid_release(7)")
        .unwrap();
    cluster.set("synchronous_standby_names", "'nobody'");
    restart(&mut cluster, "fast");
    let mut db = cluster.client();
    let theirs: i64 = db
        .query_one(
            "SELECT snowid_from_timestamp(clock_timestamp() + interval '2 seconds', 7, 0)",
            &[],
        )
        .unwrap()
        .get(0);
    let err = cancelled(&mut db, &format!("SELECT snowid_take_back(7, {theirs})"));
    assert_says(
        &err,
        "snowid's take-back of shard 7",
        "is taken back on this server, durably",
    );
    drop(db);
    standbys_answer(&mut cluster);
    assert_generates_above(
        &mut cluster.client(),
        7,
        theirs,
        "taken back, after a restart",
    );
}

/// Guards against a resume whose error says nothing of the resume: it holds here, and after a
/// restart every shard issues above the ID it resumed above.
#[test]
fn a_cancelled_resume_says_the_resume_holds() {
    let (mut cluster, old_max) = waiting_for_a_standby();
    let mut db = cluster.client();
    let above: i64 = db
        .query_one(
            "SELECT snowid_from_timestamp(clock_timestamp() + interval '5 seconds', 3, 9)",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(above > old_max);
    let err = cancelled(&mut db, &format!("SELECT snowid_resume_above({above})"));
    assert_says(
        &err,
        &format!("snowid's resume above ID {above}"),
        "The resume is durable on this server",
    );
    drop(db);
    standbys_answer(&mut cluster);
    assert_generates_above(&mut cluster.client(), 8, above, "resumed, after a restart");
}

/// Guards against the state's creation whose error says nothing of it: `CREATE EXTENSION`
/// fails, the state is created all the same, and once the standbys answer the extension installs
/// and generates, with the state not created twice (no fence).
#[test]
fn a_cancelled_creation_says_the_state_was_created() {
    let mut cluster = Cluster::init();
    cluster.set("shared_preload_libraries", "'snowid'");
    cluster.set("synchronous_standby_names", "'nobody'");
    start(&mut cluster);
    let mut db = cluster.client();
    let err = cancelled(&mut db, "CREATE EXTENSION snowid");
    assert_says(
        &err,
        "the creation of snowid's state",
        "was created on this server, durably, as a first start",
    );
    drop(db);
    standbys_answer(&mut cluster);
    let mut db = cluster.client();
    db.batch_execute("CREATE EXTENSION snowid").unwrap();
    assert_eq!(generating(&mut db), "yes");
    next_ids(&mut db, 1, 10);
}

/// Guards against a statement that is undone by ROLLBACK in the session's eyes but not on the
/// server: a release inside a transaction that rolls back stays a release, and stays recorded.
#[test]
fn a_release_is_not_undone_by_rollback() {
    let mut cluster = cluster_with_rows(8, 100);
    let mut db = cluster.client();
    db.batch_execute("BEGIN; SELECT snowid_release(7); ROLLBACK;")
        .unwrap();
    assert_released(&mut db, 7, "after the rollback");
    let recorded: Vec<i32> = db
        .query_one("SELECT shards FROM snowid_released_shards", &[])
        .unwrap()
        .get(0);
    assert_eq!(recorded, vec![7], "recorded by a transaction of its own");
    drop(db);
    restart(&mut cluster, "fast");
    assert_released(&mut cluster.client(), 7, "after a restart");
}
