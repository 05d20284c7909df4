//! snowid under Patroni, the HA manager most PostgreSQL clusters run on: two nodes and one etcd on
//! loopback, in synchronous and in asynchronous mode, through a switchover, a kill -9 failover to
//! a standby whose replay lags and whose clock is behind, a pg_rewind rejoin, and a switch back,
//! while writers insert and take IDs with bare SELECTs. The nodes set `snowid.promotion_margin`
//! to 90 s, with no callback: every promoted node starts its IDs that far past its clock, and a
//! shard released before the operations stays released through all of them.

use snowid_integration::patroni::{missing_patroni, wait_for, PatroniCluster};
use snowid_integration::postgres::config::TargetSessionAttrs;
use snowid_integration::postgres::{Client, NoTls};
use snowid_integration::{not_run, ran, say};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// Sets a flag when dropped, also while a panic unwinds.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What the writers saw: every ID handed to them, when each write succeeded and on which node
/// (its port), and every error, counted by SQLSTATE (a lost connection, which has none, by the
/// client's message).
#[derive(Default)]
struct Seen {
    ids: Vec<i64>,
    inserted: usize,
    selected: usize,
    successes: Vec<(Instant, u16)>,
    errors: BTreeMap<String, usize>,
    /// The messages of 23505 errors: an insert that met a key already there, the duplicate
    /// this test exists to catch.
    duplicates: Vec<String>,
}

impl Seen {
    fn count_error(&mut self, err: &snowid_integration::postgres::Error) {
        let key = match err.as_db_error() {
            Some(e) => e.code().code().to_string(),
            None => format!("no SQLSTATE ({err})"),
        };
        if key == "23505" {
            self.duplicates.push(format!("{err:?}"));
        }
        *self.errors.entry(key).or_default() += 1;
    }

    /// Whether a write succeeded on the node at `port` after `after`.
    fn wrote_after(&self, after: Instant, port: u16) -> bool {
        self.successes
            .iter()
            .any(|&(at, on)| at > after && on == port)
    }
}

/// Shard 6, released before the operations, is refused as released.
fn assert_released(db: &mut Client, when: &str) {
    let err = db
        .query_one("SELECT snowid_next(6)", &[])
        .expect_err("shard 6 stays released");
    let message = err.as_db_error().map(|e| e.message().to_string());
    assert_eq!(
        message.as_deref(),
        Some("snowid shard 6 was released"),
        "{when}: {err:?}"
    );
}

/// A connection to whichever node accepts writes, and that node's port.
fn connect(ports: [u16; 2]) -> Option<(Client, u16)> {
    let mut client = snowid_integration::postgres::Config::new()
        .host("127.0.0.1")
        .port(ports[0])
        .host("127.0.0.1")
        .port(ports[1])
        .user("postgres")
        .dbname("postgres")
        .target_session_attrs(TargetSessionAttrs::ReadWrite)
        .connect_timeout(Duration::from_secs(2))
        .connect(NoTls)
        .ok()?;
    let port: i32 = client
        .query_one("SELECT inet_server_port()", &[])
        .ok()?
        .get(0);
    Some((client, port as u16))
}

/// A writer: inserts a row keyed by `DEFAULT snowid_next(5)` and takes an ID with a bare
/// SELECT, over and over, on whichever node accepts writes, until `stop`; every error is
/// counted, and the connection made again.
fn write_until(stop: &AtomicBool, ports: [u16; 2], seen: &Mutex<Seen>) {
    let mut db: Option<(Client, u16)> = None;
    while !stop.load(Ordering::Relaxed) {
        let Some((client, port)) = db.as_mut() else {
            db = connect(ports);
            if db.is_none() {
                thread::sleep(Duration::from_millis(50));
            }
            continue;
        };
        let port = *port;
        let inserted = client.query_one("INSERT INTO t DEFAULT VALUES RETURNING id", &[]);
        let selected = client.query_one("SELECT snowid_next(5)", &[]);
        let mut seen = seen.lock().unwrap();
        let mut ok = true;
        for (result, insert) in [(inserted, true), (selected, false)] {
            match result {
                Ok(row) => {
                    seen.ids.push(row.get(0));
                    if insert {
                        seen.inserted += 1;
                    } else {
                        seen.selected += 1;
                    }
                    seen.successes.push((Instant::now(), port));
                }
                Err(err) => {
                    seen.count_error(&err);
                    ok = false;
                }
            }
        }
        drop(seen);
        if !ok {
            db = None;
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Waits until a writer has written on the node at `port` after `after`: writes resumed after
/// an event, on the node that leads once it is over.
fn wait_for_writes_after(seen: &Mutex<Seen>, after: Instant, port: u16, event: &str) {
    wait_for(
        &format!("writes resumed on port {port} after {event}"),
        Duration::from_secs(60),
        || seen.lock().unwrap().wrote_after(after, port),
    );
}

/// The longest time between two successful writes within `[from, to]`.
fn longest_gap(successes: &[(Instant, u16)], from: Instant, to: Instant) -> Duration {
    let mut inside: Vec<Instant> = successes
        .iter()
        .map(|&(t, _)| t)
        .filter(|t| *t >= from && *t <= to)
        .collect();
    inside.sort();
    let mut edges = vec![from];
    edges.extend(inside);
    edges.push(to);
    edges
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

/// Guards against IDs handed out twice across Patroni's operations, in either replication mode.
/// node2's clock runs 30 s behind from the start; it takes over in a switchover, and its IDs must
/// continue above node1's. Then node1, the standby, has its clock set 60 s behind and its replay
/// paused (it lags), and node2 is killed with SIGKILL together with its Patroni: Patroni promotes
/// node1 after the leader key expires. node2's Patroni is started again, rewinds it with
/// pg_rewind and it rejoins as a standby; a switchover hands the lead back to it. Two writers
/// insert and take bare-SELECT IDs throughout. Every ID handed to them is distinct, all are on
/// shard 5, and the IDs after the failover are dated ahead of the promoted node's clock (the test
/// is sharp: without the lease replayed from WAL, that node would issue from its clock, a minute
/// behind). The promotion margin (90 s) dates the first IDs after the failover at least 91 s
/// past the promoted node's clock, where the replayed lease alone would date them about 61 s
/// past it; shard 6, released on node1 before the operations, is refused on every leader after
/// them. Every client error is counted by SQLSTATE and reported; a 23505 (an insert that met a
/// key already there) fails the test. After each event the writers must write again on the node
/// that then leads (a write that started after the event was over), and the last leader must
/// generate above every ID handed out.
fn patroni_operations(synchronous: bool) {
    // One cluster at a time: four servers, two Patroni and two writers at once are all two cores
    // can take without Patroni's timings slipping.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mode = if synchronous {
        "synchronous"
    } else {
        "asynchronous"
    };
    let test = format!("patroni_{mode}");
    if !snowid_integration::major().starts_with("15") {
        not_run(
            &test,
            &format!(
                "not for this major: the Patroni test runs on PostgreSQL 15, and this run is {}",
                snowid_integration::major()
            ),
        );
        return;
    }
    if let Some(why) = missing_patroni() {
        not_run(&test, &why);
        return;
    }
    ran(&test);
    let mut cluster = PatroniCluster::start(mode, synchronous, ["+0", "-30s"]);
    let ports = [cluster.nodes[0].pg_port, cluster.nodes[1].pg_port];
    cluster.nodes[0]
        .client()
        .unwrap()
        .batch_execute(
            "CREATE EXTENSION snowid;
             CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(5));
             SELECT snowid_release(6);",
        )
        .unwrap();
    wait_for("node2 has the table", Duration::from_secs(30), || {
        cluster.nodes[1]
            .client()
            .and_then(|mut c| c.query_one("SELECT to_regclass('t') IS NOT NULL", &[]))
            .is_ok_and(|r| r.get::<_, bool>(0))
    });

    let stop = AtomicBool::new(false);
    let seen = Mutex::new(Seen::default());
    // Each event: what it was, when it started, when it was over, and when writes had resumed
    // on the node that leads after it.
    let mut events: Vec<(&str, Instant, Instant, Instant)> = Vec::new();
    let mut sharp_behind_s = 0.0;
    let mut promoted_ahead_s = 0.0;
    thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| write_until(&stop, ports, &seen));
        }
        // If a step below fails, the writers stop too, so that the failure is reported.
        let _stop_writers = StopOnDrop(&stop);
        let began = Instant::now();
        wait_for_writes_after(&seen, began, ports[0], "the start");

        let event = "switchover to node2 (clock 30 s behind)";
        let started = Instant::now();
        cluster.switchover(1);
        let over = Instant::now();
        wait_for_writes_after(&seen, over, ports[1], event);
        events.push((event, started, over, Instant::now()));

        let event = "kill -9 failover to node1 (replay paused, clock 60 s behind)";
        if synchronous {
            // Patroni fails over only to the node its store names the synchronous standby,
            // which it does a few seconds after the switchover.
            wait_for(
                "node1 is the synchronous standby",
                Duration::from_secs(60),
                || cluster.nodes[0].is_sync_standby(),
            );
        }
        let started = Instant::now();
        cluster.nodes[0].set_clock("-60s");
        let mut standby = cluster.nodes[0].client().unwrap();
        standby
            .batch_execute("SELECT pg_wal_replay_pause()")
            .unwrap();
        drop(standby);
        // Writes go on while the standby's replay is paused: it lags.
        let paused = Instant::now();
        wait_for_writes_after(&seen, paused, ports[1], "the standby's replay paused");
        let newest_before: i64 = *seen.lock().unwrap().ids.iter().max().unwrap();
        cluster.nodes[1].kill();
        wait_for(
            "node1 leads after the failover",
            Duration::from_secs(90),
            || cluster.nodes[0].is_leader(),
        );
        let mut leader = cluster.nodes[0].client().unwrap();
        sharp_behind_s = leader
            .query_one(
                "SELECT extract(epoch FROM snowid_timestamp($1) - clock_timestamp())::float8",
                &[&newest_before],
            )
            .unwrap()
            .get(0);
        promoted_ahead_s = leader
            .query_one(
                "SELECT extract(epoch FROM snowid_timestamp(snowid_next(5)) - clock_timestamp())::float8",
                &[],
            )
            .unwrap()
            .get(0);
        assert_released(&mut leader, "node1 after the failover");
        drop(leader);
        let over = Instant::now();
        wait_for_writes_after(&seen, over, ports[0], event);
        events.push((event, started, over, Instant::now()));

        let event = "pg_rewind rejoin of node2";
        let started = Instant::now();
        cluster.nodes[1].start();
        wait_for(
            "node2 rejoins as a streaming standby after pg_rewind",
            Duration::from_secs(120),
            || cluster.nodes[1].is_streaming_replica(),
        );
        let over = Instant::now();
        wait_for_writes_after(&seen, over, ports[0], event);
        events.push((event, started, over, Instant::now()));

        let event = "switch back to node2";
        let started = Instant::now();
        cluster.switchover(1);
        let over = Instant::now();
        wait_for_writes_after(&seen, over, ports[1], event);
        events.push((event, started, over, Instant::now()));
        stop.store(true, Ordering::Relaxed);
    });

    let seen = seen.into_inner().unwrap();
    // First what the test exists for: no ID handed out twice.
    let errors: Vec<String> = seen
        .errors
        .iter()
        .map(|(code, n)| format!("{n} × {code}"))
        .collect();
    assert!(
        seen.duplicates.is_empty(),
        "{} inserts met a key already there (23505), the duplicate this test exists to catch: \
         {:?}; all errors: {errors:?}",
        seen.duplicates.len(),
        seen.duplicates
    );
    let distinct: HashSet<i64> = seen.ids.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        seen.ids.len(),
        "{} IDs handed out twice",
        seen.ids.len() - distinct.len()
    );
    assert!(seen.ids.iter().all(|id| (id >> 10) & 8191 == 5));
    let leader = cluster.leader().expect("a leader after the switch back");
    let mut last_leader = cluster.nodes[leader].client().unwrap();
    assert_released(&mut last_leader, "the leader after the switch back");
    // The last leader still generates, above every ID handed out.
    let newest = *seen.ids.iter().max().expect("IDs were handed out");
    let after: Vec<i64> = last_leader
        .query(
            "INSERT INTO t SELECT FROM generate_series(1, 100) RETURNING id",
            &[],
        )
        .unwrap_or_else(|e| panic!("the last leader generates: {e:?}"))
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        after.iter().all(|&id| id > newest),
        "the last leader's IDs are above every ID handed out ({newest})"
    );
    drop(last_leader);
    let log = cluster.logs();
    assert!(
        log.contains("running pg_rewind from "),
        "node2 rejoined through pg_rewind"
    );
    assert!(
        sharp_behind_s > 30.0,
        "the promoted node's clock was behind the last IDs ({sharp_behind_s:.1} s): the test is sharp"
    );
    assert!(
        promoted_ahead_s >= 90.5,
        "the first ID after the failover is dated {promoted_ahead_s:.1} s past the promoted node's clock, not the promotion margin (90 s) and the lead"
    );
    let mut report = format!(
        "{test}: {} IDs handed out ({} inserted, {} by bare SELECTs), none twice; the promoted node's clock was {sharp_behind_s:.1} s behind the newest ID, and its first ID {promoted_ahead_s:.1} s ahead of it",
        seen.ids.len(),
        seen.inserted,
        seen.selected
    );
    for (event, from, _, resumed) in &events {
        report.push_str(&format!(
            "\n  {event}: longest write gap {:.2} s",
            longest_gap(&seen.successes, *from, *resumed).as_secs_f64()
        ));
    }
    report.push_str(&format!(
        "\n  client errors by SQLSTATE: {}",
        if errors.is_empty() {
            "none".to_string()
        } else {
            errors.join(", ")
        }
    ));
    say(&report);
}

#[test]
fn patroni_synchronous() {
    patroni_operations(true);
}

#[test]
fn patroni_asynchronous() {
    patroni_operations(false);
}
