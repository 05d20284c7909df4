//! snowid under Citus: keys from every node of a cluster, Instagram's schema-per-shard model, and
//! shard moves while rows are being inserted. Each test starts a coordinator and two workers on
//! loopback. Citus is never installed by this project (no package registry here has it): each
//! test looks for it in the major under test, and where there is none it passes after saying
//! that it did not run, and why (see `snowid_integration::citus`). Tested by hand with Citus
//! 13.2.2 on PostgreSQL 15 and 16, and 14.0.1 on 18.
//!
//! What these tests establish about Citus, the same for 13.2.2 and 14.0.1:
//! - A column `DEFAULT` is evaluated by the session that receives the `INSERT ... VALUES`,
//!   coordinator or worker, before Citus routes the row. `DEFAULT snowid_next()` therefore takes
//!   an ID from that node's own `snowid.shards` (and that session's own shard among them), so one
//!   `DEFAULT`, the same on every node, needs no coordination between nodes.
//! - An `INSERT ... SELECT` reading a distributed table runs by repartition: the `DEFAULT` is
//!   evaluated on the workers that read the source shards, whichever node received the
//!   statement. `DEFAULT snowid_next()` works there too; a constant `snowid_next(n)` would need
//!   every such worker to own `n`.
//! - The distribution column can be the snowid key itself: Citus accepts a volatile `DEFAULT` on
//!   it, and it must be the key if the key is the primary key, because a distributed table's
//!   `PRIMARY KEY` or `UNIQUE` constraint must include the distribution column. With `id` as both,
//!   the primary key is enforced across the whole table, so a duplicate anywhere would fail its
//!   insert.
//! - Schema-based sharding (`citus.enable_schema_based_sharding`) makes each new schema's tables
//!   a single-shard group placed on one worker. A `DEFAULT snowid_next(<the schema's shard>)` is
//!   evaluated on the coordinator for inserts sent there, so the coordinator owns those shards; a
//!   worker that does not own the shard refuses inserts sent to it.
//! - `citus_move_shard_placement`, by logical replication and with `block_writes`, moves a shard
//!   while inserts run through the coordinator and through both workers, with no failed insert:
//!   the rows carry their IDs, nothing is generated again on the target.

use snowid_integration::citus::{citus_version, CitusCluster};
use snowid_integration::postgres::{self, Client};
use snowid_integration::skip_without_citus;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Each node's own `snowid.shards`: node `k` (0 the coordinator, then the workers) owns
/// `100 k` to `100 k + 99`, so `snowid_shard(id) / 100` names the node that issued `id`.
const NODE_SHARDS: [&str; 3] = ["0-99", "100-199", "200-299"];

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

fn start_three_nodes() -> CitusCluster {
    let started = Instant::now();
    let citus = CitusCluster::start(NODE_SHARDS[0], &NODE_SHARDS[1..]);
    println!(
        "a coordinator and 2 workers started and joined in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    citus
}

/// A distributed table keyed and distributed by `id DEFAULT snowid_next()`, recording through
/// which node (`node`), in which session and in what order (`n`) each row was inserted.
fn create_events(citus: &CitusCluster) {
    citus
        .client()
        .batch_execute(
            "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowid_next(),
                                  node int NOT NULL, session int NOT NULL, n int NOT NULL);
             SELECT create_distributed_table('events', 'id');",
        )
        .expect("create the distributed table");
}

/// Checks the whole `events` table: `expected` rows, all distinct, each node's IDs in its own
/// shard set, each session's IDs on one shard and increasing in its insert order. Returns how
/// many (millisecond, sequence) pairs occur on more than one node: IDs that only the shard field
/// keeps apart.
fn check_events(db: &mut Client, expected: i64) -> i64 {
    let row = db
        .query_one(
            "SELECT count(*), count(DISTINCT id),
                    count(*) FILTER (WHERE snowid_shard(id) / 100 <> node),
                    count(*) FILTER (WHERE id <= prev)
             FROM (SELECT id, node, lag(id) OVER (PARTITION BY node, session ORDER BY n) AS prev
                   FROM events) s",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), expected, "rows lost or added");
    assert_eq!(row.get::<_, i64>(1), expected, "duplicate IDs");
    assert_eq!(
        row.get::<_, i64>(2),
        0,
        "IDs outside the shard set of the node they were inserted through"
    );
    assert_eq!(
        row.get::<_, i64>(3),
        0,
        "a session's IDs must increase in its insert order"
    );
    let sessions: Vec<(i32, i32, Vec<i32>)> = db
        .query(
            "SELECT node, session, array_agg(DISTINCT snowid_shard(id))
             FROM events GROUP BY 1, 2 ORDER BY 1, 2",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    println!("(node, session, shards): {sessions:?}");
    assert!(
        sessions.iter().all(|(_, _, shards)| shards.len() == 1),
        "each session's IDs come from one shard: {sessions:?}"
    );
    db.query_one(
        "SELECT count(*) FROM (SELECT 1 FROM events GROUP BY id >> 23, id & 1023
                               HAVING count(DISTINCT node) > 1) s",
        &[],
    )
    .unwrap()
    .get(0)
}

const SESSIONS_PER_NODE: i32 = 3;
const ROWS_PER_SESSION: i32 = 300;

/// Guards against duplicate keys when every node of a Citus cluster takes writes with the same
/// `DEFAULT snowid_next()`: nodes issuing from overlapping shards, or a node issuing outside its
/// own `snowid.shards`. A coordinator and two workers, owning 0-99, 100-199 and 200-299; three
/// sessions per node, all connected before any inserts and inserting at the same time (checked:
/// every session started before any finished), row by row, `INSERT ... VALUES` through their
/// node. Every insert succeeds (a duplicate would fail the distributed primary key), count(*) =
/// count(DISTINCT id) = rows attempted, each node's IDs are in its own shard set, each session's
/// are on one shard and increase in its insert order, and the rows reached every shard placement
/// on both workers. The test also counts (millisecond, sequence) pairs issued on more than one
/// node, and requires some: the nodes really issued IDs in the same milliseconds, which only the
/// shard field keeps apart. Last, an `INSERT ... SELECT` from the table itself, sent to the
/// coordinator, takes its IDs on the workers (repartition) and adds no duplicate either; and
/// Citus refuses to distribute such a table by another column while `id` is its primary key.
#[test]
fn every_node_takes_writes_with_the_same_default() {
    skip_without_citus!();
    let citus = start_three_nodes();
    create_events(&citus);

    let sessions = NODE_SHARDS.len() * SESSIONS_PER_NODE as usize;
    let all_connected = Barrier::new(sessions);
    let took = Instant::now();
    let results: Vec<(Vec<i64>, Instant, Instant)> = thread::scope(|scope| {
        let handles: Vec<_> = citus
            .nodes()
            .enumerate()
            .flat_map(|(node, cluster)| {
                (0..SESSIONS_PER_NODE).map(move |session| (node as i32, session, cluster))
            })
            .map(|(node, session, cluster)| {
                let all_connected = &all_connected;
                scope.spawn(move || {
                    let mut db = cluster.client();
                    let insert = db
                        .prepare(
                            "INSERT INTO events (node, session, n) VALUES ($1, $2, $3)
                             RETURNING id",
                        )
                        .unwrap();
                    all_connected.wait();
                    let started = Instant::now();
                    let ids = (0..ROWS_PER_SESSION)
                        .map(|n| {
                            db.query_one(&insert, &[&node, &session, &n])
                                .unwrap_or_else(|e| {
                                    panic!("insert through node {node}: {}", describe(&e))
                                })
                                .get(0)
                        })
                        .collect();
                    (ids, started, Instant::now())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let took = took.elapsed();
    let last_start = results.iter().map(|r| r.1).max().unwrap();
    let first_end = results.iter().map(|r| r.2).min().unwrap();
    assert!(
        last_start < first_end,
        "a session finished before another started: the inserts did not overlap"
    );
    let returned: HashSet<i64> = results.iter().flat_map(|r| r.0.iter().copied()).collect();
    let expected = i64::from(ROWS_PER_SESSION) * sessions as i64;
    assert_eq!(returned.len() as i64, expected, "duplicate IDs returned");

    let mut db = citus.client();
    let shared_ms_seq = check_events(&mut db, expected);
    let returned: Vec<i64> = returned.into_iter().collect();
    let found: i64 = db
        .query_one(
            "SELECT count(*) FROM events WHERE id = ANY($1)",
            &[&returned],
        )
        .unwrap()
        .get(0);
    assert_eq!(found, expected, "every returned ID is in the table");
    let per_placement: Vec<(i64, i32, i64)> = db
        .query(
            "SELECT s.shardid, s.nodeport, r.result::bigint
             FROM run_command_on_shards('events', 'SELECT count(*) FROM %s') r
             JOIN citus_shards s USING (shardid) ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    println!(
        "{expected} rows through 3 nodes x {SESSIONS_PER_NODE} sessions in {:.2} s; \
         (shard, port, rows): {per_placement:?}; {shared_ms_seq} (ms, seq) pairs issued on more \
         than one node",
        took.as_secs_f64()
    );
    let worker_ports: HashSet<i32> = citus.workers.iter().map(|w| i32::from(w.port)).collect();
    let used_ports: HashSet<i32> = per_placement.iter().map(|p| p.1).collect();
    assert_eq!(used_ports, worker_ports, "placements on both workers");
    assert!(
        per_placement.iter().all(|p| p.2 > 0),
        "every placement got rows"
    );
    assert!(
        shared_ms_seq > 0,
        "no two nodes issued IDs in the same millisecond with the same sequence number: the \
         nodes did not really write at the same time"
    );

    // An INSERT ... SELECT from the distributed table itself, sent to the coordinator: Citus
    // runs it by repartition, and the DEFAULT is evaluated on the workers that read the source
    // shards, not on the node that received the statement. The same DEFAULT works there too.
    let copied = db
        .execute(
            "INSERT INTO events (node, session, n)
             SELECT -1, session, n FROM events WHERE node = 0",
            &[],
        )
        .unwrap_or_else(|e| panic!("INSERT ... SELECT by repartition: {}", describe(&e)));
    let row = db
        .query_one(
            "SELECT count(*), count(DISTINCT id),
                    count(*) FILTER (WHERE node = -1 AND snowid_shard(id) NOT BETWEEN 100 AND 299),
                    array_agg(DISTINCT snowid_shard(id)) FILTER (WHERE node = -1)
             FROM events",
            &[],
        )
        .unwrap();
    assert_eq!(copied as i64, expected / 3);
    assert_eq!(row.get::<_, i64>(0), expected + copied as i64);
    assert_eq!(
        row.get::<_, i64>(1),
        expected + copied as i64,
        "duplicate IDs"
    );
    println!(
        "INSERT ... SELECT through the coordinator: {copied} rows with IDs from shards {:?}",
        row.get::<_, Vec<i32>>(3)
    );
    assert_eq!(
        row.get::<_, i64>(2),
        0,
        "Citus {} evaluates the DEFAULT of a repartitioned INSERT ... SELECT on the workers",
        citus_version().unwrap_or_else(|| "?".into())
    );

    // Why the key is the distribution column: a distributed table's primary key must include
    // the distribution column, so one distributed by another column could not enforce it.
    let err = db
        .batch_execute(
            "CREATE TABLE by_tenant (id bigint PRIMARY KEY DEFAULT snowid_next(),
                                     tenant int NOT NULL);
             SELECT create_distributed_table('by_tenant', 'tenant');",
        )
        .expect_err("a primary key without the distribution column");
    assert!(
        describe(&err).starts_with("0A000 cannot create constraint on \"by_tenant\""),
        "{}",
        describe(&err)
    );
}

const SCHEMAS: i32 = 3;
const SCHEMA_SESSIONS: i32 = 6;
const ROWS_PER_SCHEMA_SESSION: i32 = 300;

/// Guards against duplicates in Instagram's model on Citus, a schema per logical shard with
/// the shard number written into each table's `DEFAULT`: with schema-based sharding, three
/// schemas `tenant_1` to `tenant_3`, each table `DEFAULT snowid_next(<1, 2 or 3>)`, placed on
/// the workers (checked: on both). Six sessions insert through the coordinator, which owns
/// shards 1-3, at the same time, each cycling through the three schemas. Every insert succeeds,
/// each table's IDs carry its schema's shard, the three tables together hold no duplicate, each
/// session's IDs in each schema increase, and IDs of different schemas share (millisecond,
/// sequence) pairs, kept apart by the shard field. An insert sent to a worker, which does not
/// own the schema's shard, is refused with 55000: the `DEFAULT` runs where the insert arrives.
#[test]
fn schema_based_sharding_with_a_shard_per_schema() {
    skip_without_citus!();
    let citus = CitusCluster::start("1-3", &["100-199", "200-299"]);
    let mut db = citus.client();
    db.batch_execute("SET citus.enable_schema_based_sharding = on")
        .unwrap();
    for schema in 1..=SCHEMAS {
        db.batch_execute(&format!(
            "CREATE SCHEMA tenant_{schema};
             CREATE TABLE tenant_{schema}.posts (
                 id bigint PRIMARY KEY DEFAULT snowid_next({schema}),
                 session int NOT NULL, n int NOT NULL);"
        ))
        .unwrap();
    }
    let placed: Vec<(String, String, i32)> = db
        .query(
            "SELECT table_name::text, citus_table_type, nodeport FROM citus_shards
             ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    println!("(table, type, port): {placed:?}");
    assert_eq!(placed.len(), SCHEMAS as usize, "{placed:?}");
    assert!(placed.iter().all(|p| p.1 == "schema"), "{placed:?}");
    let ports: HashSet<i32> = placed.iter().map(|p| p.2).collect();
    let worker_ports: HashSet<i32> = citus.workers.iter().map(|w| i32::from(w.port)).collect();
    assert_eq!(
        ports, worker_ports,
        "the schemas are spread over both workers"
    );

    let all_connected = Barrier::new(SCHEMA_SESSIONS as usize);
    let inserted: Vec<Vec<(i32, i64)>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..SCHEMA_SESSIONS)
            .map(|session| {
                let (citus, all_connected) = (&citus, &all_connected);
                scope.spawn(move || {
                    let mut db = citus.client();
                    let inserts: Vec<_> = (1..=SCHEMAS)
                        .map(|schema| {
                            db.prepare(&format!(
                                "INSERT INTO tenant_{schema}.posts (session, n) VALUES ($1, $2)
                                 RETURNING id"
                            ))
                            .unwrap()
                        })
                        .collect();
                    all_connected.wait();
                    (0..ROWS_PER_SCHEMA_SESSION)
                        .map(|n| {
                            let schema = (session + n) % SCHEMAS + 1;
                            let id = db
                                .query_one(&inserts[schema as usize - 1], &[&session, &n])
                                .unwrap_or_else(|e| {
                                    panic!("insert into tenant_{schema}: {}", describe(&e))
                                })
                                .get(0);
                            (schema, id)
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let expected = i64::from(SCHEMA_SESSIONS * ROWS_PER_SCHEMA_SESSION);

    let mut all = HashSet::new();
    let mut ms_seq_schemas: BTreeMap<(i64, i64), HashSet<i32>> = BTreeMap::new();
    for schema in 1..=SCHEMAS {
        let row = db
            .query_one(
                &format!(
                    "SELECT count(*), count(DISTINCT id),
                            count(*) FILTER (WHERE snowid_shard(id) <> {schema}),
                            count(*) FILTER (WHERE id <= prev), array_agg(id)
                     FROM (SELECT id, lag(id) OVER (PARTITION BY session ORDER BY n) AS prev
                           FROM tenant_{schema}.posts) s"
                ),
                &[],
            )
            .unwrap();
        let rows: i64 = row.get(0);
        assert_eq!(row.get::<_, i64>(1), rows, "duplicates in tenant_{schema}");
        assert_eq!(
            row.get::<_, i64>(2),
            0,
            "IDs in tenant_{schema} without shard {schema}"
        );
        assert_eq!(
            row.get::<_, i64>(3),
            0,
            "a session's IDs in tenant_{schema} increase"
        );
        for id in row.get::<_, Vec<i64>>(4) {
            assert!(all.insert(id), "{id} is in two schemas");
            ms_seq_schemas
                .entry((id >> 23, id & 1023))
                .or_default()
                .insert(schema);
        }
    }
    assert_eq!(all.len() as i64, expected, "rows lost or added");
    let returned: HashSet<i64> = inserted.iter().flatten().map(|&(_, id)| id).collect();
    assert_eq!(
        returned, all,
        "the tables hold exactly the IDs the inserts returned"
    );
    let shared = ms_seq_schemas.values().filter(|s| s.len() > 1).count();
    println!(
        "{expected} rows into {SCHEMAS} schemas through the coordinator; {shared} (ms, seq) pairs \
         issued for more than one schema"
    );
    assert!(
        shared > 0,
        "the schemas' IDs never shared a millisecond and sequence"
    );

    let err = citus.workers[0]
        .client()
        .query_one(
            "INSERT INTO tenant_1.posts (session, n) VALUES (0, 0) RETURNING id",
            &[],
        )
        .expect_err("a worker does not own shard 1");
    let db_err = err.as_db_error().expect("a server error");
    assert_eq!(db_err.code().code(), "55000", "{}", describe(&err));
    assert_eq!(
        db_err.message(),
        "snowid shard 1 is not owned by this server"
    );
}

/// One insert's outcome in the shard-move test: the ID, and the test phase when the insert was
/// sent and when it returned (odd phases are moves in progress).
type Insert = (i64, u8, u8);

/// Guards against duplicate or lost keys when Citus moves a shard while rows are being
/// inserted into it, and against inserts failing during the move: IDs generated on the node
/// that receives the insert are carried to the new placement as they are, never generated again
/// there. The `events` table of the first test, two sessions inserting through the coordinator
/// and one through each worker, row by row, without pause, while one shard moves from the first
/// worker to the second by logical replication (`force_logical`) and then back with
/// `block_writes`. Every insert succeeds; inserts overlapped each move, and some of them went to
/// the shard being moved (counted, and required); afterwards count(*) = count(DISTINCT id) =
/// rows inserted, every ID an insert returned is there, each node's IDs are in its own shard
/// set and each session's increase.
#[test]
fn a_shard_moves_while_every_node_inserts() {
    skip_without_citus!();
    let citus = start_three_nodes();
    create_events(&citus);
    const SEED: i64 = 1_000;
    citus
        .client()
        .batch_execute(&format!(
            "INSERT INTO events (node, session, n)
             SELECT 0, -1, g FROM generate_series(1, {SEED}) g"
        ))
        .unwrap();
    let (w0, w1) = (citus.workers[0].port, citus.workers[1].port);
    let shard = citus
        .placements("events")
        .into_iter()
        .find(|(_, port)| *port == w0)
        .map(|(shard, _)| shard)
        .expect("a shard placement on the first worker");

    // (node, session): two sessions through the coordinator, one through each worker.
    let inserters = [(0, 0), (0, 1), (1, 0), (2, 0)];
    let phase = AtomicU8::new(0);
    let stop = AtomicBool::new(false);
    let failures = Mutex::new(Vec::new());
    let counts: Vec<std::sync::atomic::AtomicUsize> =
        inserters.iter().map(|_| Default::default()).collect();
    let mut moves = Vec::new();
    let inserts: Vec<Insert> = thread::scope(|scope| {
        let handles: Vec<_> = inserters
            .iter()
            .enumerate()
            .map(|(i, &(node, session))| {
                let cluster = citus.nodes().nth(node as usize).unwrap();
                let (phase, stop, failures, count) = (&phase, &stop, &failures, &counts[i]);
                scope.spawn(move || {
                    let mut db = cluster.client();
                    let insert = db
                        .prepare(
                            "INSERT INTO events (node, session, n) VALUES ($1, $2, $3)
                             RETURNING id",
                        )
                        .unwrap();
                    let mut mine = Vec::new();
                    let mut n = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let sent = phase.load(Ordering::SeqCst);
                        match db.query_one(&insert, &[&node, &session, &n]) {
                            Ok(row) => mine.push((row.get(0), sent, phase.load(Ordering::SeqCst))),
                            Err(e) => failures.lock().unwrap().push(format!(
                                "node {node} session {session} in phase {sent}: {}",
                                describe(&e)
                            )),
                        }
                        count.fetch_add(1, Ordering::SeqCst);
                        n += 1;
                    }
                    mine
                })
            })
            .collect();

        let wait_for_inserts = |at_least: usize| {
            let from: Vec<usize> = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
            let deadline = Instant::now() + Duration::from_secs(20);
            while counts
                .iter()
                .zip(&from)
                .any(|(c, f)| c.load(Ordering::SeqCst) < f + at_least)
            {
                assert!(Instant::now() < deadline, "the inserters stalled");
                thread::sleep(Duration::from_millis(10));
            }
        };
        let mut run_move = |from: u16, to: u16, mode: &str| {
            wait_for_inserts(50);
            phase.fetch_add(1, Ordering::SeqCst);
            let started = Instant::now();
            let moved = citus.move_shard(shard, from, to, mode);
            let took = started.elapsed();
            phase.fetch_add(1, Ordering::SeqCst);
            moves.push((mode.to_owned(), took, moved.map_err(|e| describe(&e))));
        };
        run_move(w0, w1, "force_logical");
        run_move(w1, w0, "block_writes");
        wait_for_inserts(50);
        stop.store(true, Ordering::SeqCst);
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });

    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} inserts failed during the moves (SQLSTATE 55000 and a 'snowid' message would be \
         snowid's; anything else is Citus's): {:#?}",
        failures.len(),
        &failures[..failures.len().min(20)]
    );
    for (mode, _, moved) in &moves {
        if let Err(e) = moved {
            panic!("citus_move_shard_placement ({mode}) failed: {e}");
        }
    }
    assert_eq!(
        citus
            .placements("events")
            .iter()
            .filter(|p| p.0 == shard)
            .count(),
        1
    );
    assert!(
        citus.placements("events").contains(&(shard, w0)),
        "moved back"
    );

    let mut db = citus.client();
    for (k, (mode, took, _)) in moves.iter().enumerate() {
        let during = 2 * k as u8 + 1;
        let overlapped: Vec<i64> = inserts
            .iter()
            .filter(|&&(_, sent, back)| sent <= during && during <= back)
            .map(|i| i.0)
            .collect();
        let inside: Vec<i64> = inserts
            .iter()
            .filter(|&&(_, sent, back)| sent == during && back == during)
            .map(|i| i.0)
            .collect();
        let mut in_shard = |ids: &Vec<i64>| -> i64 {
            db.query_one(
                "SELECT count(*) FROM unnest($1::bigint[]) id
                 WHERE get_shard_id_for_distribution_column('events', id) = $2",
                &[ids, &shard],
            )
            .unwrap()
            .get(0)
        };
        let overlapped_in_shard = in_shard(&overlapped);
        let inside_in_shard = in_shard(&inside);
        println!(
            "move {} ({mode}) of shard {shard} took {:.2} s: {} inserts overlapped it ({} into \
             that shard), {} ran entirely inside it ({} into that shard)",
            k + 1,
            took.as_secs_f64(),
            overlapped.len(),
            overlapped_in_shard,
            inside.len(),
            inside_in_shard
        );
        assert!(
            overlapped_in_shard > 0,
            "no insert into shard {shard} overlapped move {}",
            k + 1
        );
        if mode == "force_logical" {
            // Logical replication copies while writes go on; block_writes holds them back.
            assert!(
                inside_in_shard > 0,
                "no insert into shard {shard} ran entirely inside the logical move"
            );
        }
    }

    let expected = SEED + inserts.len() as i64;
    check_events(&mut db, expected);
    let ids: Vec<i64> = inserts.iter().map(|i| i.0).collect();
    let found: i64 = db
        .query_one("SELECT count(*) FROM events WHERE id = ANY($1)", &[&ids])
        .unwrap()
        .get(0);
    assert_eq!(
        found,
        ids.len() as i64,
        "rows inserted around the moves are missing"
    );
    println!("{expected} rows, all distinct, none failed");
}
