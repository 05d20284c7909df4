//! `snowid_take_back(shard, id)`, the one statement that takes a released shard back: what it
//! refuses, and that a shard taken back issues above its other owner's last ID, after a restart
//! and on a standby promoted after it.

use snowid_integration::fences::*;
use snowid_integration::postgres::Client;
use snowid_integration::{code, one, Cluster};

/// `snowid_take_back(shard, id)` fails with `sqlstate` and a message containing `says`.
fn take_back_refused(db: &mut Client, shard: i32, id: i64, sqlstate: &str, says: &str) {
    match db.query_one("SELECT snowid_take_back($1, $2)", &[&shard, &id]) {
        Ok(_) => panic!("snowid_take_back({shard}, {id}) took a shard back where it must refuse"),
        Err(err) => {
            assert_eq!(code(&err), sqlstate, "{}", describe(&err));
            assert!(describe(&err).contains(says), "{}", describe(&err));
        }
    }
}

/// An ID of `shard` dated `seconds` past this server's clock: what its other owner could have
/// issued.
fn their_id(db: &mut Client, shard: i32, seconds: i32) -> i64 {
    db.query_one(
        "SELECT snowid_from_timestamp(clock_timestamp() + make_interval(secs => $2), $1, 0)",
        &[&shard, &f64::from(seconds)],
    )
    .unwrap()
    .get(0)
}

/// Guards against a take-back that takes what it should not, and changes anything when it
/// refuses: a shard never released here (55000: a resume, not a take-back, moves above another
/// server's IDs), an ID of another shard (22023: the shard would be taken back above an ID
/// that says nothing of it), and anything on a fenced server (55000, the fence's refusal: it
/// cannot know its own IDs). After each refusal the shard is as it was: 8 issues, 7 stays
/// released; once the fence is lifted, the take-back works.
#[test]
fn a_take_back_refuses_what_it_cannot_take_back() {
    let mut cluster = cluster_with_rows(8, 100);
    let old_max = max_id(&mut cluster.client());
    let mut db = cluster.client();
    db.batch_execute("SELECT snowid_release(7)").unwrap();
    let theirs8 = their_id(&mut db, 8, 1);
    take_back_refused(
        &mut db,
        8,
        theirs8,
        "55000",
        "snowid shard 8 is not released on this server",
    );
    assert_generates_above(&mut db, 8, old_max, "after the refused take-back of 8");
    let theirs9 = their_id(&mut db, 9, 1);
    take_back_refused(
        &mut db,
        7,
        theirs9,
        "22023",
        &format!("ID {theirs9} belongs to snowid shard 9, not to shard 7"),
    );
    assert_released(&mut db, 7, "after the refused take-back above shard 9's ID");
    drop(db);

    let old_max = max_id(&mut cluster.client()).max(theirs8);
    lose_the_state(&mut cluster, 8, old_max);
    let mut db = cluster.client();
    let theirs7 = their_id(&mut db, 7, 1);
    match db.query_one("SELECT snowid_take_back(7, $1)", &[&theirs7]) {
        Ok(_) => panic!("a fenced server took shard 7 back"),
        Err(err) => assert_fence_error(&err, "snowid_take_back on a fenced server"),
    }
    assert_refuses(&cluster, 8, old_max, "after the refused take-back");
    let rows = resume_rows(&mut db);
    assert!(!rows.is_empty());
    assert_released(&mut db, 7, "resumed");
    db.query_one("SELECT snowid_take_back(7, $1)", &[&theirs7])
        .unwrap_or_else(|e| panic!("the take-back once resumed: {}", describe(&e)));
    assert_generates_above(&mut db, 7, theirs7, "taken back once resumed");
}

/// Guards against a take-back that issues below the other owner's IDs, or that does not last:
/// A (with a streaming standby) releases shard 7; B, whose clock is 10 minutes ahead of A's,
/// resumes above A's last ID, issues for 7, and releases it back; A takes it back above B's last
/// ID. A's IDs for 7, and for its other shards, are above B's at once, also after a fast and an
/// immediate restart; A's standby, promoted after A stops, replayed the take-back and issues for
/// 7 above every ID of both.
#[test]
fn a_taken_back_shard_issues_above_its_other_owner_after_restarts_and_on_a_standby() {
    let mut a = cluster_with_rows(8, 100);
    let mut standby = Cluster::base_backup_of(&a, true);
    start(&mut standby);
    let mut on_a = a.client();
    let a_last: i64 = one(&mut on_a, "SELECT snowid_release(7)", &[]);

    let b = server_with_clock("+10m");
    let mut on_b = b.client();
    on_b.query_one("SELECT snowid_resume_above($1)", &[&a_last])
        .unwrap();
    let b_max = *next_ids(&mut on_b, 7, 1000).iter().max().unwrap();
    let b_last: i64 = one(&mut on_b, "SELECT snowid_release(7)", &[]);
    assert!(b_last >= b_max);
    drop(on_b);
    assert!(
        unix_ms_of(b_last) - unix_ms_of(a_last) > 500_000,
        "B's IDs are dated minutes past A's (the test is sharp)"
    );

    on_a.query_one("SELECT snowid_take_back(7, $1)", &[&b_last])
        .unwrap_or_else(|e| panic!("take back 7 above B's last ID: {}", describe(&e)));
    let mut a_max = b_last;
    for shard in [7, 8] {
        a_max = a_max.max(assert_generates_above(
            &mut on_a,
            shard,
            b_last,
            "A, shard taken back",
        ));
    }
    drop(on_a);
    for mode in ["fast", "immediate"] {
        restart(&mut a, mode);
        let mut on_a = a.client();
        a_max = assert_generates_above(&mut on_a, 7, a_max, &format!("A, after a {mode} restart"));
    }

    standby.wait_for_replay_of(&a);
    a.stop("immediate");
    standby.promote();
    assert_generates_above(
        &mut standby.client(),
        7,
        a_max,
        "A's standby, promoted after the take-back",
    );
}
