//! Every operator statement's error says what happened. A release, a take-back, a resume and the
//! state's creation, cancelled while waiting for synchronous standbys that do not answer, are
//! durable on this server all the same: each error names the change that holds, and the next
//! step; none says "lease" or "no ID was handed out". Each holds after a restart, and none is
//! undone by ROLLBACK.

use snowid_integration::fences::*;
use snowid_integration::postgres::{Client, Error};
use snowid_integration::{code, one, wait_until, Cluster};

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

/// The standby named is forgotten by a reload, with no restart: whatever the cancelled change
/// left in shared memory is what the next statement meets.
fn standbys_answer_without_a_restart(db: &mut Client) {
    db.batch_execute("ALTER SYSTEM SET synchronous_standby_names = ''")
        .unwrap();
    db.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until("the reload", std::time::Duration::from_secs(10), || {
        db.query_one("SHOW synchronous_standby_names", &[])
            .unwrap()
            .get::<_, String>(0)
            .is_empty()
    });
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
    let recorded: Vec<i32> = one(&mut db, "SELECT shards FROM snowid_released_shards", &[]);
    assert_eq!(recorded, vec![7], "recorded although cancelled");
    drop(db);
    restart(&mut cluster, "fast");
    assert_released(&mut cluster.client(), 7, "after a restart");
    standbys_answer(&mut cluster);
    let mut db = cluster.client();
    let last: i64 = one(&mut db, "SELECT snowid_release(7)", &[]);
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
    // Row 3: in force at once, before any restart (0.6.0: refused with 55000 until a restart).
    standbys_answer_without_a_restart(&mut db);
    assert_generates_above(&mut db, 7, theirs, "taken back, with no restart");
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
    // Row 3: every new ID is above, at once (0.6.0: 1,000 of 1,000 new IDs were at or below it
    // until a restart).
    standbys_answer_without_a_restart(&mut db);
    let below: i64 = db
        .query_one(
            "SELECT count(*) FROM (SELECT snowid_next(8) AS id FROM generate_series(1, 1000)) s              WHERE id <= $1",
            &[&above],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        below, 0,
        "new IDs at or below the ID resumed above, with no restart"
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
    let recorded: Vec<i32> = one(&mut db, "SELECT shards FROM snowid_released_shards", &[]);
    assert_eq!(recorded, vec![7], "recorded by a transaction of its own");
    drop(db);
    restart(&mut cluster, "fast");
    assert_released(&mut cluster.client(), 7, "after a restart");
}

/// Guards against a release or a take-back that waits for the synchronous standbys only where
/// the session's `synchronous_commit` asks it to, as a commit does: the change covers every
/// session's IDs, and with `off` or `local` (or `remote_write`) the hand-off would return before
/// the standbys have it. Each waits until cancelled, and says that it holds.
#[test]
fn a_release_and_a_take_back_wait_whatever_synchronous_commit_says() {
    let (cluster, _) = waiting_for_a_standby();
    let mut db = cluster.client();
    for (mode, shard) in [("off", 7), ("local", 9), ("remote_write", 10)] {
        db.batch_execute(&format!("SET synchronous_commit = {mode}"))
            .unwrap();
        let err = cancelled(&mut db, &format!("SELECT snowid_release({shard})"));
        assert_says(
            &err,
            &format!("the release of snowid shard {shard}"),
            "is released on this server, durably",
        );
        let theirs: i64 = db
            .query_one(
                "SELECT snowid_from_timestamp(clock_timestamp() + interval '2 seconds', $1, 0)",
                &[&shard],
            )
            .unwrap()
            .get(0);
        let err = cancelled(
            &mut db,
            &format!("SELECT snowid_take_back({shard}, {theirs})"),
        );
        assert_says(
            &err,
            &format!("snowid's take-back of shard {shard}"),
            "is taken back on this server, durably",
        );
    }
}

/// The PID of a session.
fn pid_of(db: &mut Client) -> i32 {
    db.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)
}

/// Whether the session `pid` waits, its wait event of type `wait_type` (and named `event`, if
/// given).
fn waits(db: &mut Client, pid: i32, wait_type: &str, event: Option<&str>) -> bool {
    db.query_one(
        "SELECT count(*) = 1 FROM pg_stat_activity
         WHERE pid = $1 AND wait_event_type = $2 AND ($3::text IS NULL OR wait_event = $3)",
        &[&pid, &wait_type, &event],
    )
    .unwrap()
    .get(0)
}

/// Waits until a new session's commit into the table `probe` waits for the synchronous standbys
/// (`SyncRep`), then cancels that wait: the walsenders' shared view says standbys are configured, as every
/// backend's commit reads it.
fn wait_until_commits_wait_for_standbys(cluster: &Cluster, control: &mut Client) {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let mut probe = cluster.client();
        let pid = pid_of(&mut probe);
        let committed =
            std::thread::spawn(move || probe.execute("INSERT INTO probe VALUES (1)", &[]));
        let waited = loop {
            if waits(control, pid, "IPC", Some("SyncRep")) {
                break true;
            }
            if committed.is_finished() {
                break false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        if waited {
            control
                .query_one("SELECT pg_cancel_backend($1)", &[&pid])
                .unwrap();
        }
        let _ = committed.join().unwrap();
        if waited {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no commit waited for the synchronous standby after the reload"
        );
    }
}

/// Guards against a release, a take-back or a lease that reads `synchronous_standby_names` from
/// its own backend's copy, which a backend that has not yet seen a reload still holds: three
/// sessions start a release of shard 7, a take-back of shard 9 and IDs until a new lease is
/// needed, in statements that first wait for a lock the test holds; meanwhile the standby
/// `nobody` is named and reloaded, and a new session's commit is seen waiting for it. Released, each statement finds its own session's
/// setting still empty (it rereads it only between statements; otherwise it changes nothing and
/// the test fails), and waits for the standby all the same, until cancelled (57014, naming the
/// change).
#[test]
fn a_backend_that_has_not_seen_the_reload_waits_for_the_standbys() {
    let cluster = cluster_with_rows(8, 100);
    let mut control = cluster.client();
    // The table the probe of the walsenders' view writes; and no commit of this session waits.
    control
        .batch_execute(
            "CREATE TABLE probe (n int);
             SET synchronous_commit = local;
             SELECT snowid_release(9);",
        )
        .unwrap();
    let theirs: i64 = control
        .query_one(
            "SELECT snowid_from_timestamp(clock_timestamp() + interval '2 seconds', 9, 0)",
            &[],
        )
        .unwrap()
        .get(0);
    // A lock for each session, so that each goes on alone: the other still waits for its lock,
    // not for the writer's claim the first one holds while it waits for the standby.
    control
        .batch_execute("SELECT pg_advisory_lock(1), pg_advisory_lock(2), pg_advisory_lock(3)")
        .unwrap();
    let changes = [
        (
            "snowid_release(7)".to_string(),
            "the release of snowid shard 7",
        ),
        (
            format!("snowid_take_back(9, {theirs})"),
            "snowid's take-back of shard 9",
        ),
        // IDs until one needs a new lease, a millisecond apart, so that none waits for the
        // clock (a wait of the same kind, which a cancel would end with its own error).
        (
            "(SELECT count(snowid_next(5)) FROM generate_series(1, 100000) g
              WHERE pg_sleep(0.001) IS NOT NULL)"
                .to_string(),
            "snowid's lease",
        ),
    ];
    std::thread::scope(|scope| {
        let sessions: Vec<_> = changes
            .iter()
            .zip(1..)
            .map(|((call, says), lock)| {
                let mut db = cluster.client();
                let pid = pid_of(&mut db);
                let sql = format!(
                    "SELECT CASE WHEN current_setting('synchronous_standby_names') = ''
                                 THEN {call}::text END
                     FROM (SELECT pg_advisory_xact_lock({lock}) OFFSET 0) l"
                );
                (
                    pid,
                    *says,
                    lock,
                    // Should the test fail while a session waits, the session is cancelled,
                    // so that the scope ends.
                    scope.spawn(move || {
                        let _watchdog = snowid_integration::Watchdog::new(&db, 2 * DEADLINE);
                        db.query_one(&sql, &[])
                    }),
                )
            })
            .collect();
        for (pid, _, _, _) in &sessions {
            wait_until("the session waits for the test's lock", DEADLINE, || {
                waits(&mut control, *pid, "Lock", Some("advisory"))
            });
        }
        control
            .batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
            .unwrap();
        control.batch_execute("SELECT pg_reload_conf()").unwrap();
        wait_until_commits_wait_for_standbys(&cluster, &mut control);
        for (pid, says, lock, session) in sessions {
            // The lease's session starts once no lease is left, so that its first ID needs a
            // new one (a renewal ahead of need would give up on the cancel, and leave the wait
            // to the call that needs the lease).
            wait_until("no lease is left", DEADLINE, || {
                control
                    .query_one(
                        "SELECT high_water_mark < clock_timestamp() FROM snowid_info()",
                        &[],
                    )
                    .unwrap()
                    .get(0)
            });
            control
                .query_one("SELECT pg_advisory_unlock($1)", &[&i64::from(lock)])
                .unwrap();
            wait_until(&format!("{says} waits or returns"), DEADLINE, || {
                session.is_finished() || waits(&mut control, pid, "Extension", None)
            });
            control
                .query_one("SELECT pg_cancel_backend($1)", &[&pid])
                .unwrap();
            match session.join().unwrap() {
                Ok(row) => panic!(
                    "{says} did not wait for the standby: it returned {:?} (NULL: the session \
                     had seen the reload, and the test is not sharp)",
                    row.get::<_, Option<String>>(0)
                ),
                Err(err) => {
                    assert_eq!(code(&err), "57014", "{}", describe(&err));
                    assert_eq!(
                        err.as_db_error().unwrap().message(),
                        format!("{WAITS} {says}"),
                        "{}",
                        describe(&err)
                    );
                }
            }
        }
    });
}

/// Row 3, the fence lift. Guards against a fence lift cancelled while waiting for the standbys
/// whose error says the fence is lifted while the server still refused (0.6.0: until a restart).
/// The hint's resume on a fenced server, cancelled so, is in force: the server generates above
/// the old IDs at once.
#[test]
fn a_cancelled_fence_lift_says_the_fence_is_lifted_and_it_is() {
    let mut cluster = cluster_with_rows(8, 100);
    let old_max = max_id(&mut cluster.client());
    lose_the_state(&mut cluster, 8, old_max);
    cluster.set("synchronous_standby_names", "'nobody'");
    restart(&mut cluster, "fast");
    let mut db = cluster.client();
    let err = cancelled(
        &mut db,
        &format!("SELECT * FROM snowid_resume_above_columns(accept_ahead => '{ACCEPTED_AHEAD}')"),
    );
    assert_says(
        &err,
        &format!("snowid's resume above ID {old_max}"),
        "its fence, if it had one, is lifted",
    );
    standbys_answer_without_a_restart(&mut db);
    assert_generates_above(&mut db, 8, old_max, "the fence lifted, with no restart");
}
