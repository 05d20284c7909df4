//! Shards across plain servers (no Citus): handing a shard from one server to another while it
//! is in use, `snowid_next()` on a server's own shards, and shard arguments of every integer type
//! from a client.

use snowid_integration::postgres::fallible_iterator::FallibleIterator;
use snowid_integration::postgres::{self, types::Type, CancelToken, Client, NoTls};
use snowid_integration::{one, set_and_reload, wait_until, Cluster, Watchdog};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

/// A server error as `SQLSTATE message (detail)`, or the client error.
fn describe(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!(
            "{} {}{}",
            db.code().code(),
            db.message(),
            db.detail().map(|d| format!(" ({d})")).unwrap_or_default()
        ),
        None => error.to_string(),
    }
}

fn sqlstate(error: &postgres::Error) -> &str {
    error.as_db_error().map(|db| db.code().code()).unwrap_or("")
}

/// `ALTER SYSTEM SET snowid.shards`, reload, and wait until new statements of `db`'s session see
/// the new value (a session re-reads its settings between statements, not during one).
fn set_shards(db: &mut Client, shards: &str) {
    set_and_reload(db, "snowid.shards", shards, shards);
}

/// A started server with snowid preloaded whose wall clock runs `offset` (such as `-8s`) from
/// real time from its very start, under libfaketime; the monotonic clock stays real.
fn preloaded_with_clock_offset(offset: &str, shards: &str) -> Cluster {
    let mut cluster = Cluster::init_preloaded_with_fake_clock();
    cluster.set_wall_clock_offset(offset);
    cluster.set("snowid.shards", &format!("'{shards}'"));
    cluster
        .start()
        .unwrap_or_else(|log| panic!("the server did not start:\n{log}"));
    cluster
        .client()
        .batch_execute("CREATE EXTENSION snowid")
        .expect("create extension");
    cluster
}

/// When dropped, also while a panic unwinds: sets a flag and cancels whatever the clients run.
struct StopOnDrop<'a>(&'a AtomicBool, Vec<CancelToken>);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for cancel in &self.1 {
            let _ = cancel.cancel_query(NoTls);
        }
    }
}

const SHARD: i32 = 7;
/// How far B's wall clock is behind A's.
const B_BEHIND: &str = "-15s";

/// Guards against the two ways a shard hand-off can duplicate keys. On the old server A, a
/// statement already running when `snowid_release` returns could keep issuing IDs for the shard
/// (it read `snowid.shards` when it started, so removing the shard from the setting does not stop
/// it); and the new server B, whose clock is behind, could issue IDs for the shard at or below
/// A's last one.
///
/// A owns shard 7. Three sessions generate for it: a long `SELECT snowid_next(7) FROM
/// generate_series(...)` whose rows stream to the client as they are made, so every ID it issued
/// is seen even though it fails; a long `INSERT ... SELECT snowid_next(7)`; and a loop of short
/// statements. The test removes 7 from A's `snowid.shards` and reloads, then checks that the
/// long statement still issues IDs for 7 (an ID above the last one `snowid_stats()` showed after
/// the reload arrives), so what stops it can only be the release. Then `snowid_release(7)`
/// returns `last_id`. Both long statements must fail with 55000 "snowid shard 7 was released"
/// (the INSERT's rows roll back, so its IDs are never seen, and `last_id` may be one of them),
/// and no ID any A session received exceeds `last_id`.
///
/// B's wall clock runs 15 s behind from its start (checked: `last_id` is dated more than 5 s past
/// B's clock at the hand-off). `snowid_resume_above(last_id)`, then 7 added to B's
/// `snowid.shards`: B's first ID for 7 is above `last_id`, comes in under a second (waiting for
/// its clock would take seconds), and is dated more than 4 s ahead of B's own clock. A's and B's
/// IDs for 7, merged into one primary key, have no duplicate, and every one of B's is above
/// every one of A's.
#[test]
fn a_shard_handed_over_mid_statement_to_a_server_whose_clock_is_behind() {
    let (a, b) = thread::scope(|scope| {
        let a = scope.spawn(|| Cluster::preloaded(&[("snowid.shards", "'5-9'")]));
        let b = scope.spawn(|| preloaded_with_clock_offset(B_BEHIND, "100-101"));
        (a.join().unwrap(), b.join().unwrap())
    });
    a.client()
        .batch_execute("CREATE TABLE t (id bigint PRIMARY KEY)")
        .unwrap();

    // The newest ID the streaming statement has delivered, and how many.
    let streamed_latest = AtomicI64::new(0);
    let stop = AtomicBool::new(false);
    let streamed_count = AtomicUsize::new(0);
    let short_count = AtomicUsize::new(0);
    let started = Barrier::new(4);

    let (streamed, streamed_end, inserted_end, short, short_end, last_id, after_reload) =
        thread::scope(|scope| {
            let (started, streamed_latest, streamed_count) =
                (&started, &streamed_latest, &streamed_count);
            let (mut streaming_db, mut inserting_db) = (a.client(), a.client());
            // If the control below fails, the other sessions stop too.
            let _stop = StopOnDrop(
                &stop,
                vec![streaming_db.cancel_token(), inserting_db.cancel_token()],
            );
            // A set-returning function in FROM is materialized in full before the first row
            // comes out; in a select list it streams, so the long statements below generate
            // from their first millisecond, and the streaming one sends each ID as it is made.
            let streaming = scope.spawn(move || {
                let db = &mut streaming_db;
                let _watchdog = Watchdog::new(db, Duration::from_secs(40));
                let mut ids = Vec::new();
                started.wait();
                let mut rows = db
                    .query_raw(
                        "SELECT snowid_next(7) FROM (SELECT generate_series(1, 100000000)) g",
                        std::iter::empty::<i32>(),
                    )
                    .expect("start the streaming statement");
                let end = loop {
                    match rows.next() {
                        Ok(Some(row)) => {
                            let id: i64 = row.get(0);
                            ids.push(id);
                            streamed_latest.store(id, Ordering::Relaxed);
                            streamed_count.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(None) => break Ok(()),
                        Err(e) => break Err(e),
                    }
                };
                (ids, end)
            });
            let inserting = scope.spawn(move || {
                let db = &mut inserting_db;
                let _watchdog = Watchdog::new(db, Duration::from_secs(40));
                started.wait();
                db.execute(
                    "INSERT INTO t
                     SELECT snowid_next(7) FROM (SELECT generate_series(1, 100000000)) g",
                    &[],
                )
            });
            let short = scope.spawn(|| {
                let mut db = a.client();
                let next = db.prepare("SELECT snowid_next(7)").unwrap();
                let mut ids = Vec::new();
                started.wait();
                let end = loop {
                    if stop.load(Ordering::Relaxed) {
                        break None;
                    }
                    match db.query_one(&next, &[]) {
                        Ok(row) => {
                            ids.push(row.get::<_, i64>(0));
                            short_count.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => break Some(e),
                    }
                };
                (ids, end)
            });

            let mut control = a.client();
            started.wait();
            wait_until(
                "every session generates for shard 7",
                Duration::from_secs(20),
                || {
                    let inserting: i64 = control
                        .query_one(
                            "SELECT count(*) FROM pg_stat_activity
                             WHERE state = 'active' AND query LIKE 'INSERT INTO t%'",
                            &[],
                        )
                        .unwrap()
                        .get(0);
                    inserting == 1
                        && streamed_count.load(Ordering::Relaxed) >= 50_000
                        && short_count.load(Ordering::Relaxed) >= 100
                },
            );

            set_shards(&mut control, "5-6,8-9");
            // The running statements read snowid.shards when they started: they still generate
            // for 7. Wait for an ID issued after this moment to arrive.
            let after_reload: i64 = control
                .query_one(
                    "SELECT last_id FROM snowid_stats() WHERE shard = $1",
                    &[&SHARD],
                )
                .unwrap()
                .get(0);
            wait_until(
                "the streaming statement issues an ID for 7 after 7 left snowid.shards",
                Duration::from_secs(10),
                || streamed_latest.load(Ordering::Relaxed) > after_reload,
            );

            let last_id: i64 = one(&mut control, "SELECT snowid_release($1)", &[&SHARD]);

            let (streamed, streamed_end) = streaming.join().unwrap();
            let inserted_end = inserting.join().unwrap();
            let (short, short_end) = short.join().unwrap();
            (
                streamed,
                streamed_end,
                inserted_end,
                short,
                short_end,
                last_id,
                after_reload,
            )
        });

    // Both long statements were running when the release returned, and it stopped them.
    for (what, end) in [
        ("the streaming SELECT", streamed_end.map(|_| 0)),
        ("the INSERT ... SELECT", inserted_end),
    ] {
        let err = end.expect_err(&format!("{what} must fail once 7 is released"));
        assert_eq!(sqlstate(&err), "55000", "{what}: {}", describe(&err));
        assert_eq!(
            err.as_db_error().unwrap().message(),
            "snowid shard 7 was released",
            "{what}"
        );
    }
    let kept: i64 = a
        .client()
        .query_one("SELECT count(*) FROM t", &[])
        .unwrap()
        .get(0);
    assert_eq!(kept, 0, "the failed INSERT left no rows");
    // The short statements started after the reload are refused (not owned, or released).
    let short_end = short_end.expect("the short statements end with an error");
    assert_eq!(sqlstate(&short_end), "55000", "{}", describe(&short_end));

    let from_a: Vec<i64> = streamed.iter().chain(&short).copied().collect();
    let max_a = *from_a.iter().max().unwrap();
    let past_release = from_a.iter().filter(|&&id| id > last_id).count();
    assert_eq!(
        past_release, 0,
        "{past_release} IDs for shard 7 issued on A after snowid_release returned {last_id}"
    );
    assert!(
        streamed.windows(2).all(|w| w[0] < w[1]),
        "the streaming statement's IDs increase"
    );
    let issued_after_reload = streamed.iter().filter(|&&id| id > after_reload).count();
    println!(
        "A: streamed {} IDs ({issued_after_reload} of them after 7 left snowid.shards), {} short \
         statements; snowid_release(7) = {last_id}, the highest ID A's sessions saw {max_a}",
        streamed.len(),
        short.len()
    );

    // B is behind A by seconds.
    let mut on_b = b.client();
    let b_behind: f64 = on_b
        .query_one(
            "SELECT extract(epoch FROM snowid_timestamp($1) - clock_timestamp())::float8",
            &[&last_id],
        )
        .unwrap()
        .get(0);
    assert!(
        b_behind > 5.0,
        "B's clock must be seconds behind A's last ID, not {b_behind:.3} s"
    );
    let err = on_b
        .query_one("SELECT snowid_next(7)", &[])
        .expect_err("B does not own 7 yet");
    assert_eq!(sqlstate(&err), "55000", "{}", describe(&err));

    on_b.query_one("SELECT snowid_resume_above($1)", &[&last_id])
        .unwrap();
    set_shards(&mut on_b, "7,100-101");
    let took = Instant::now();
    let first_b: i64 = {
        let _watchdog = Watchdog::new(&on_b, Duration::from_secs(30));
        on_b.query_one("SELECT snowid_next(7)", &[]).unwrap().get(0)
    };
    let took = took.elapsed();
    let b_ahead_of_its_clock: f64 = on_b
        .query_one(
            "SELECT extract(epoch FROM snowid_timestamp($1) - clock_timestamp())::float8",
            &[&first_b],
        )
        .unwrap()
        .get(0);
    assert!(
        first_b > last_id,
        "B's first ID {first_b} is not above A's last {last_id}"
    );
    // "At once": B does not wait for its clock to reach A's last ID (a wait would last the
    // seconds B is behind, and count as a throttled wait of shard 7).
    let waits: i64 = on_b
        .query_one(
            "SELECT throttled_waits FROM snowid_stats() WHERE shard = 7",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        waits, 0,
        "B waited for its clock before its first ID ({took:?})"
    );
    assert!(
        took.as_secs_f64() < b_behind - 1.0,
        "B's first ID took {took:?}, as long as a wait for its clock, {b_behind:.3} s behind"
    );
    assert!(
        b_ahead_of_its_clock > 4.0,
        "B's first ID is dated {b_ahead_of_its_clock:.3} s past B's clock: it did not resume \
         above A's last ID"
    );
    let mut from_b: Vec<i64> = vec![first_b];
    from_b.extend(
        on_b.query("SELECT snowid_next(7) FROM generate_series(1, 20000)", &[])
            .unwrap()
            .iter()
            .map(|row| row.get::<_, i64>(0)),
    );
    println!(
        "B: first ID for 7 in {:.1} ms, dated {b_ahead_of_its_clock:.2} s ahead of B's clock \
         ({b_behind:.2} s behind A's last ID); {} IDs",
        took.as_secs_f64() * 1000.0,
        from_b.len()
    );

    // One table for both servers' IDs for shard 7.
    on_b.batch_execute("CREATE TABLE merged (id bigint PRIMARY KEY, server text NOT NULL)")
        .unwrap();
    for (server, ids) in [("A", &from_a), ("B", &from_b)] {
        on_b.execute(
            "INSERT INTO merged SELECT id, $1 FROM unnest($2::bigint[]) id",
            &[&server, ids],
        )
        .unwrap_or_else(|e| panic!("{server}'s IDs: {}", describe(&e)));
    }
    let row = on_b
        .query_one(
            "SELECT count(*), count(DISTINCT id),
                    max(id) FILTER (WHERE server = 'A'), min(id) FILTER (WHERE server = 'B'),
                    count(*) FILTER (WHERE snowid_shard(id) <> 7)
             FROM merged",
            &[],
        )
        .unwrap();
    let expected = (from_a.len() + from_b.len()) as i64;
    snowid_integration::assert_counts(
        &row,
        &[(expected, "every ID arrived"), (expected, "no duplicates")],
    );
    assert!(
        row.get::<_, i64>(3) > row.get::<_, i64>(2),
        "every one of B's IDs is above every one of A's"
    );
    assert_eq!(row.get::<_, i64>(4), 0, "all on shard 7");
}

/// Guards against `snowid_next()` without an argument issuing outside the server's own shards,
/// against every backend piling onto one shard, and against a session's IDs going backwards:
/// a server owning '10-13', 8 sessions connected at once inserting with `DEFAULT snowid_next()`.
/// Every ID is on 10-13, the sessions use more than one shard, each session sticks to one shard
/// and its IDs increase in its insert order, and all are distinct. A server whose
/// `snowid.shards` is empty refuses `snowid_next()` with 55000 and says why.
#[test]
fn snowid_next_without_a_shard_uses_the_servers_own() {
    const SESSIONS: i32 = 8;
    const ROWS: i32 = 400;
    let (owner, none) = thread::scope(|scope| {
        let owner = scope.spawn(|| Cluster::preloaded(&[("snowid.shards", "'10-13'")]));
        let none = scope.spawn(|| Cluster::preloaded(&[("snowid.shards", "''")]));
        (owner.join().unwrap(), none.join().unwrap())
    });
    owner
        .client()
        .batch_execute(
            "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowid_next(),
                                  session int NOT NULL, n int NOT NULL)",
        )
        .unwrap();

    let all_connected = Barrier::new(SESSIONS as usize);
    thread::scope(|scope| {
        for session in 0..SESSIONS {
            let (owner, all_connected) = (&owner, &all_connected);
            scope.spawn(move || {
                let mut db = owner.client();
                let insert = db
                    .prepare("INSERT INTO events (session, n) VALUES ($1, $2)")
                    .unwrap();
                // All sessions exist at once, so each has its own backend number.
                all_connected.wait();
                for n in 0..ROWS {
                    db.execute(&insert, &[&session, &n]).unwrap();
                }
            });
        }
    });

    let mut db = owner.client();
    let row = db
        .query_one(
            "SELECT count(*), count(DISTINCT id),
                    count(*) FILTER (WHERE snowid_shard(id) NOT BETWEEN 10 AND 13),
                    count(*) FILTER (WHERE id <= prev),
                    count(DISTINCT snowid_shard(id))
             FROM (SELECT id, lag(id) OVER (PARTITION BY session ORDER BY n) AS prev
                   FROM events) s",
            &[],
        )
        .unwrap();
    let expected = i64::from(SESSIONS * ROWS);
    snowid_integration::assert_counts(
        &row,
        &[
            (expected, "every row arrived"),
            (expected, "no duplicates"),
            (0, "IDs outside the owned shards 10-13"),
            (0, "each session's IDs increase in its insert order"),
        ],
    );
    let per_session: Vec<(i32, Vec<i32>)> = db
        .query(
            "SELECT session, array_agg(DISTINCT snowid_shard(id)) FROM events
             GROUP BY session ORDER BY session",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    println!("shards per session: {per_session:?}");
    assert!(
        per_session.iter().all(|(_, shards)| shards.len() == 1),
        "each session uses one shard: {per_session:?}"
    );
    let used: HashSet<i32> = per_session.iter().map(|(_, s)| s[0]).collect();
    assert!(
        used.len() > 1,
        "8 sessions all used one shard: {per_session:?}"
    );

    let err = none
        .client()
        .query_one("SELECT snowid_next()", &[])
        .expect_err("a server that owns no shard");
    let db_err = err.as_db_error().expect("a server error");
    assert_eq!(db_err.code().code(), "55000", "{}", describe(&err));
    assert_eq!(
        db_err.message(),
        "this server owns no snowid shard it may generate for"
    );
    assert!(
        db_err
            .detail()
            .is_some_and(|d| d.contains("snowid.shards is ''")),
        "{db_err:?}"
    );
    assert!(
        db_err.hint().is_some_and(|h| h.contains("snowid.shards")),
        "{db_err:?}"
    );
}

/// Guards against a shard argument that the client's types cannot reach or that lands on the
/// wrong shard: `snowid_next($1::bigint)` with an i64, `snowid_next($1::int)` with an i32,
/// `snowid_next($1)` untyped (the Rust client infers `double precision`, and PostgreSQL resolves
/// it to the float8 form), and a typed int8 parameter the JDBC way (`PREPARE p(bigint)`). Each
/// lands on its shard, and all forms share one per-shard state: interleaved on shard 5 their IDs
/// strictly increase. A bigint whose low 32 bits are a valid shard (2^32 + 7) is refused as out
/// of range (22003), not truncated to shard 7.
#[test]
fn shard_arguments_of_every_integer_type_from_a_client() {
    let cluster = Cluster::preloaded(&[]);
    let mut db = cluster.client();
    let as_bigint = db.prepare("SELECT snowid_next($1::bigint)").unwrap();
    let as_int = db.prepare("SELECT snowid_next($1::int)").unwrap();
    let untyped = db.prepare("SELECT snowid_next($1)").unwrap();
    assert_eq!(as_bigint.params(), &[Type::INT8]);
    assert_eq!(as_int.params(), &[Type::INT4]);
    assert_eq!(untyped.params(), &[Type::FLOAT8]);
    db.batch_execute("PREPARE p(bigint) AS SELECT snowid_next($1)")
        .unwrap();
    let shard_of = |db: &mut Client, id: i64| -> i32 {
        db.query_one("SELECT snowid_shard($1)", &[&id])
            .unwrap()
            .get(0)
    };

    let id = db.query_one(&as_bigint, &[&4242_i64]).unwrap().get(0);
    assert_eq!(shard_of(&mut db, id), 4242, "i64 as $1::bigint");
    let id = db.query_one(&as_int, &[&77_i32]).unwrap().get(0);
    assert_eq!(shard_of(&mut db, id), 77, "i32 as $1::int");
    let id = db.query_one(&untyped, &[&3.0_f64]).unwrap().get(0);
    assert_eq!(shard_of(&mut db, id), 3, "f64 as untyped $1");
    let id = db.query_one("EXECUTE p(8191)", &[]).unwrap().get(0);
    assert_eq!(shard_of(&mut db, id), 8191, "PREPARE p(bigint)");

    // Every form, interleaved on one shard.
    let mut ids = Vec::new();
    for _ in 0..200 {
        ids.push(
            db.query_one(&as_bigint, &[&5_i64])
                .unwrap()
                .get::<_, i64>(0),
        );
        ids.push(db.query_one(&as_int, &[&5_i32]).unwrap().get(0));
        ids.push(db.query_one(&untyped, &[&5.0_f64]).unwrap().get(0));
        ids.push(db.query_one("EXECUTE p(5)", &[]).unwrap().get(0));
    }
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "the forms of snowid_next share shard 5's state"
    );
    let shards: HashMap<i32, usize> = ids.iter().fold(HashMap::new(), |mut m, &id| {
        *m.entry(shard_of(&mut db, id)).or_default() += 1;
        m
    });
    assert_eq!(shards, HashMap::from([(5, ids.len())]));

    let wraps_to_7 = (1_i64 << 32) + 7;
    for err in [
        db.query_one(&as_bigint, &[&wraps_to_7]).unwrap_err(),
        db.query_one(&format!("EXECUTE p({wraps_to_7})"), &[])
            .unwrap_err(),
    ] {
        assert_eq!(sqlstate(&err), "22003", "{}", describe(&err));
        assert_eq!(
            err.as_db_error().unwrap().message(),
            "snowid shard 4294967303 is out of range"
        );
    }
    let err = db.query_one(&as_bigint, &[&-1_i64]).unwrap_err();
    assert_eq!(sqlstate(&err), "22003", "{}", describe(&err));
}

/// Guards against a handed-off shard coming back on the old owner's standby. 0.2.0 kept a
/// release in memory, and the changed `snowid.shards` in the old owner's configuration, and
/// neither reaches a standby: its promoted standby issued 180,217 of 200,000 IDs equal to the new
/// owner's. Here A owns 0-9 and streams to its standby A2; shard 7 is handed from A to B as
/// docs/operations.md says (release on A, resume on B, 7 added to B's shards and removed from
/// A's). A fails and A2 is promoted with its configuration still listing 7: it refuses 7 (55000)
/// while its other shards generate, also after a restart; B's IDs for 7 are all above A's last
/// one.
#[test]
fn a_release_reaches_the_old_owners_standby_and_outlives_its_promotion() {
    let mut a = Cluster::preloaded(&[("snowid.shards", "'0-9'")]);
    let mut a2 = Cluster::base_backup_of(&a, true);
    a2.start().unwrap();
    let b = Cluster::preloaded(&[("snowid.shards", "'100-101'")]);

    let mut on_a = a.client();
    on_a.batch_execute(
        "CREATE TABLE t (id bigint PRIMARY KEY);
         INSERT INTO t SELECT snowid_next(7) FROM generate_series(1, 10000);",
    )
    .unwrap();
    let last_id: i64 = one(&mut on_a, "SELECT snowid_release(7)", &[]);
    let mut on_b = b.client();
    on_b.query_one("SELECT snowid_resume_above($1)", &[&last_id])
        .unwrap();
    set_shards(&mut on_b, "7,100-101");
    set_shards(&mut on_a, "0-6,8-9");
    a2.wait_for_replay_of(&a);
    drop(on_a);
    a.stop("immediate");
    a2.promote();

    for restart in [false, true] {
        if restart {
            a2.stop("fast");
            a2.start().unwrap();
        }
        let mut on_a2 = a2.client();
        let shards: String = on_a2.query_one("SHOW snowid.shards", &[]).unwrap().get(0);
        assert_eq!(shards, "0-9", "A2's configuration still lists 7");
        let err = on_a2
            .query_one("SELECT snowid_next(7)", &[])
            .expect_err("the promoted standby refuses the released shard");
        assert_eq!(sqlstate(&err), "55000", "{}", describe(&err));
        assert_eq!(
            err.as_db_error().unwrap().message(),
            "snowid shard 7 was released"
        );
        let released: bool = one(
            &mut on_a2,
            "SELECT released FROM snowid_stats() WHERE shard = 7",
            &[],
        );
        assert!(released);
        let other: i64 = on_a2
            .query_one(
                "SELECT count(DISTINCT snowid_next(8)) FROM generate_series(1, 1000)",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(other, 1000, "its other shards generate");
    }
    let b_min: i64 = on_b
        .query_one(
            "SELECT min(snowid_next(7)) FROM generate_series(1, 100000)",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(b_min > last_id);
}
