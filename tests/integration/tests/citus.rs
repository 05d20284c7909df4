//! snowid under Citus: keys from every node of a cluster with no configuration, through nodes
//! added, removed, restarted and failed over, shards rebalanced and moved; overlapping shard
//! sets refused; Instagram's schema-per-shard model. Each test starts a coordinator and at least
//! two workers on loopback. Citus is built by `scripts/setup` for 15 (13.2.2), 16 and 18
//! (14.0.1), from the sources beside the project (no package registry here has it): each test
//! looks for it in the major under test, and where there is none it passes after saying that it
//! did not run, and why (see `snowid_integration::citus`), which CI accepts only where setup does
//! not build Citus.
//!
//! What these tests establish about Citus, the same for 13.2.2 and 14.0.1:
//! - A column `DEFAULT` is evaluated by the session that receives the `INSERT ... VALUES`,
//!   coordinator or worker, before Citus routes the row. `DEFAULT snowid_next()` therefore takes
//!   an ID from that node's own shards (its Citus group's 32, with no `snowid.shards`), and that
//!   session's own shard among them, so one `DEFAULT`, the same on every node, needs no
//!   coordination between inserts.
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
//! - `stop_metadata_sync_to_node` resets the worker's `pg_dist_local_group` to 0 and empties its
//!   `pg_dist_node`, in the coordinator's transaction (two-phase); `start_metadata_sync_to_node`
//!   gives both back.
//! - `citus_update_node` syncs the new address to the other workers in the background: until
//!   `pg_dist_node.metadatasynced` is true again, an insert through another worker can be routed
//!   to the old address.
//! - `CREATE ROLE` and `ALTER DATABASE ... OWNER` on the coordinator are propagated to the
//!   workers (`citus.enable_ddl_propagation` off keeps them local).
//! - A node's `snowid_citus_nodes()` answers from its last check, waiting only for a check that is
//!   due; generating on a node is what makes a refused shard ask again.

use snowid_integration::citus::{
    citus_version, client_on, cut_off, group_shards, socket_client, CitusCluster,
};
use snowid_integration::postgres::{self, Client};
use snowid_integration::{skip_without_citus, wait_until, Cluster};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
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

/// A coordinator and two workers with no `snowid.shards`: node `k` (0 the coordinator, then the
/// workers) is in Citus group `k` (checked), so it generates for shards `32 k` to `32 k + 31`, and
/// `snowid_shard(id) / 32` names the node that issued `id`.
fn start_three_nodes() -> CitusCluster {
    let started = Instant::now();
    let citus = CitusCluster::unconfigured(2);
    println!(
        "a coordinator and 2 workers started and joined in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    for (k, worker) in citus.workers.iter().enumerate() {
        assert_eq!(
            citus.group_of(worker.port),
            k as i32 + 1,
            "worker {k}'s group"
        );
    }
    citus
}

/// A distributed table keyed and distributed by `id DEFAULT snowid_next()`, with more columns.
fn create_keyed_table(citus: &CitusCluster, table: &str, columns: &str) {
    citus
        .client()
        .batch_execute(&format!(
            "CREATE TABLE {table} (id bigint PRIMARY KEY DEFAULT snowid_next(), {columns});
             SELECT create_distributed_table('{table}', 'id');"
        ))
        .expect("create the distributed table");
}

/// A distributed table keyed and distributed by `id DEFAULT snowid_next()`, recording through
/// which node (`node`), in which session and in what order (`n`) each row was inserted.
fn create_events(citus: &CitusCluster) {
    create_keyed_table(
        citus,
        "events",
        "node int NOT NULL, session int NOT NULL, n int NOT NULL",
    );
}

/// Fails the test unless `rows` (a table, or a subquery with its alias) holds `expected` rows,
/// every ID distinct, and none that any of `none` selects (an SQL condition, and what such a row
/// would mean).
fn assert_rows(db: &mut Client, rows: &str, expected: i64, none: &[(&str, &str)]) {
    let filters: String = none
        .iter()
        .map(|(condition, _)| format!(", count(*) FILTER (WHERE {condition})"))
        .collect();
    let row = db
        .query_one(
            &format!("SELECT count(*), count(DISTINCT id){filters} FROM {rows}"),
            &[],
        )
        .unwrap_or_else(|e| panic!("count the rows of {rows}: {}", describe(&e)));
    assert_eq!(row.get::<_, i64>(0), expected, "rows lost or added");
    assert_eq!(row.get::<_, i64>(1), expected, "duplicate IDs");
    for (k, (_, meaning)) in none.iter().enumerate() {
        assert_eq!(row.get::<_, i64>(k + 2), 0, "{meaning}");
    }
}

/// Checks the whole `events` table: `expected` rows, all distinct, each node's IDs in its own
/// shard set, each session's IDs on one shard and increasing in its insert order. Returns how
/// many (millisecond, sequence) pairs occur on more than one node: IDs that only the shard field
/// keeps apart.
fn check_events(db: &mut Client, expected: i64) -> i64 {
    assert_rows(
        db,
        "(SELECT id, node, lag(id) OVER (PARTITION BY node, session ORDER BY n) AS prev
          FROM events) s",
        expected,
        &[
            (
                "snowid_shard(id) / 32 <> node",
                "IDs outside the shard set of the node they were inserted through",
            ),
            (
                "id <= prev",
                "a session's IDs must increase in its insert order",
            ),
        ],
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

/// Guards against duplicate keys when every node of a Citus cluster with no snowid configuration
/// takes writes with the same `DEFAULT snowid_next()`: nodes issuing from overlapping shards (as
/// 0.6.0 did, every node owning every shard by default), or a node issuing outside its group's
/// own shards. A coordinator and two workers, in groups 0, 1 and 2, so owning 0-31, 32-63 and
/// 64-95, none with a `snowid.shards`; three
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

    let sessions = 3 * SESSIONS_PER_NODE as usize;
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
    assert_eq!(copied as i64, expected / 3);
    let shards: Vec<i32> = db
        .query_one(
            "SELECT array_agg(DISTINCT snowid_shard(id)) FROM events WHERE node = -1",
            &[],
        )
        .unwrap()
        .get(0);
    println!(
        "INSERT ... SELECT through the coordinator: {copied} rows with IDs from shards {shards:?}"
    );
    let on_the_coordinator = format!(
        "Citus {} evaluates the DEFAULT of a repartitioned INSERT ... SELECT on the workers",
        citus_version().unwrap_or_else(|| "?".into())
    );
    assert_rows(
        &mut db,
        "events",
        expected + copied as i64,
        &[(
            "node = -1 AND snowid_shard(id) NOT BETWEEN 32 AND 95",
            &on_the_coordinator,
        )],
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
/// Every node's `snowid.shards` is set by hand (1-3, 100-199, 200-299), and the check of each
/// against the others' lets disjoint sets through whole, whatever groups' blocks they cross.
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

/// A table for the long tests, keyed and distributed by `id DEFAULT snowid_next()`: each row
/// says which inserter sent it (`tag`) and the Citus group of the node it went through (`grp`),
/// whose shards (32 from `32 * grp`) its ID must be on.
fn create_rows(citus: &CitusCluster) {
    create_keyed_table(
        citus,
        "rows",
        "grp int NOT NULL, tag int NOT NULL, n int NOT NULL",
    );
}

/// Rows in each insert of the long tests: an `INSERT ... SELECT` from `generate_series`, whose
/// `DEFAULT` the node that receives it evaluates.
const BATCH: i32 = 1000;

/// One inserter: a session that inserts batches through the node on `port`, in group `grp`.
#[derive(Clone, Copy)]
struct Through {
    port: u16,
    grp: i32,
    tag: usize,
}

/// What the inserters did, by tag: the rows they inserted, and the errors they met (SQLSTATE and
/// message; a batch that fails inserts nothing).
struct Tally {
    rows: Vec<AtomicUsize>,
    errors: Mutex<Vec<(usize, String, String)>>,
}

impl Tally {
    fn new(tags: usize) -> Tally {
        Tally {
            rows: (0..tags).map(|_| AtomicUsize::new(0)).collect(),
            errors: Mutex::new(Vec::new()),
        }
    }

    fn rows(&self, tag: usize) -> usize {
        self.rows[tag].load(Ordering::SeqCst)
    }

    fn errors_of(&self, tag: usize) -> Vec<(String, String)> {
        self.errors
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.0 == tag)
            .map(|e| (e.1.clone(), e.2.clone()))
            .collect()
    }

    /// Waits until each of `tags` has inserted at least `rows` rows.
    fn wait_for(&self, tags: &[usize], rows: usize) {
        wait_until(
            &format!("the inserters {tags:?} have each inserted {rows} rows"),
            Duration::from_secs(300),
            || tags.iter().all(|&tag| self.rows(tag) >= rows),
        );
    }
}

/// Sets the flag when dropped: stops the inserters however the action ends.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Runs `action` while each of `through` inserts batches through its node without pause, and
/// stops them when it returns. Every error is recorded in the tally, and the inserter goes on.
fn while_inserting<R>(through: &[Through], tally: &Tally, action: impl FnOnce() -> R) -> R {
    let stop = AtomicBool::new(false);
    thread::scope(|scope| {
        for &t in through {
            let (stop, tally) = (&stop, tally);
            scope.spawn(move || {
                let mut db = client_on(t.port).unwrap_or_else(|e| {
                    panic!("connect to the node on port {}: {e}", t.port);
                });
                let insert = db
                    .prepare(
                        "INSERT INTO rows (grp, tag, n)
                         SELECT $1, $2, g FROM generate_series($3::int, $4::int) g",
                    )
                    .unwrap();
                let mut n = tally.rows(t.tag) as i32;
                while !stop.load(Ordering::SeqCst) {
                    let batch = [
                        &t.grp as _,
                        &(t.tag as i32) as _,
                        &n as _,
                        &(n + BATCH - 1) as _,
                    ];
                    match db.execute(&insert, &batch) {
                        Ok(rows) => {
                            tally.rows[t.tag].fetch_add(rows as usize, Ordering::SeqCst);
                            n += BATCH;
                        }
                        Err(e) => {
                            let (code, message) = match e.as_db_error() {
                                Some(db) => (db.code().code().to_string(), describe(&e)),
                                None => (String::new(), e.to_string()),
                            };
                            tally.errors.lock().unwrap().push((t.tag, code, message));
                            thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
            });
        }
        let _stop = StopOnDrop(&stop);
        action()
    })
}

/// What this node's last check found about itself: the shards it generates for.
fn generates(port: u16) -> String {
    client_on(port)
        .unwrap()
        .query_one(
            "SELECT generates FROM snowid_citus_nodes() WHERE this_node",
            &[],
        )
        .unwrap_or_else(|e| panic!("snowid_citus_nodes() on port {port}: {}", describe(&e)))
        .get(0)
}

/// The shards a group's node generates for with no configuration, as text.
fn block_text(group: i32) -> String {
    let shards = group_shards(group);
    format!("{}-{}", shards.start(), shards.end())
}

/// Rows that must come through each node in the long test.
const ROWS_PER_NODE: usize = 100_000;

/// Guards against duplicate keys on a Citus cluster with no snowid configuration as it changes
/// under load: a node added while every node inserts (it takes the next group's shards, not the
/// coordinator's, which a fresh node believes it has until Citus gives it its group, even in a
/// session that generated before it joined); a shard
/// rebalance onto it; a node drained and removed, and another added after it (group 4: Citus never
/// gives a group twice, so the new node never takes the removed one's shards); every node
/// restarted (the same shards after as before); a worker failed over to its streaming standby,
/// which is in the worker's group, generates for the same shards, and issues above every ID the
/// worker issued for each of them; and an `INSERT ... SELECT` whose keys the workers make. Rows
/// go in through every node throughout, in batches, except while the nodes restart and while the
/// worker fails over (its shard placements are unreachable then); at least 100,000 through each
/// node. No insert fails (a duplicate would fail the distributed primary key); at the end
/// count(*) = count(DISTINCT id) = the rows inserted, and every row's ID is on the shards of the
/// group of the node it went through.
#[test]
fn no_configuration_issues_a_duplicate_as_the_cluster_changes() {
    skip_without_citus!();
    let began = Instant::now();
    let mut citus = start_three_nodes();
    create_rows(&citus);
    let (c, w1, w2) = (
        citus.coordinator.port,
        citus.workers[0].port,
        citus.workers[1].port,
    );
    let mut standby = Cluster::base_backup_of(&citus.workers[0], true);
    standby
        .start()
        .unwrap_or_else(|log| panic!("the first worker's standby did not start:\n{log}"));
    let tally = Tally::new(6);
    let (tc, tw1, tw2, tw3, tw4, ts) = (0, 1, 2, 3, 4, 5);
    let through = |port, grp, tag| Through { port, grp, tag };
    let mut timings = Vec::new();
    let mut phase = |name: &str, since: &mut Instant| {
        timings.push(format!("{name} {:.1} s", since.elapsed().as_secs_f64()));
        *since = Instant::now();
    };
    let mut since = Instant::now();

    // A node added while every node inserts, then a rebalance onto it while it inserts too. Before
    // it joins, it believes it is in group 0, as Citus does, and a session of it generates for
    // the coordinator's shards; the same session takes its group's once it has joined.
    let w3 = CitusCluster::new_node(None);
    let mut early = w3.client();
    let shard_of_next = |db: &mut Client| -> i32 {
        db.query_one("SELECT snowid_shard(snowid_next())", &[])
            .unwrap_or_else(|e| panic!("snowid_next() on the new worker: {}", describe(&e)))
            .get(0)
    };
    assert!(group_shards(0).contains(&shard_of_next(&mut early)));
    let g3 = while_inserting(
        &[through(c, 0, tc), through(w1, 1, tw1), through(w2, 2, tw2)],
        &tally,
        || {
            tally.wait_for(&[tc, tw1, tw2], 5 * BATCH as usize);
            citus.add(&w3)
        },
    );
    assert_eq!(g3, 3, "the third worker's group");
    assert!(
        group_shards(3).contains(&shard_of_next(&mut early)),
        "a session of a node that joined keeps the shards it had before"
    );
    assert_eq!(generates(w3.port), block_text(3));
    phase("add", &mut since);
    while_inserting(
        &[
            through(c, 0, tc),
            through(w1, 1, tw1),
            through(w2, 2, tw2),
            through(w3.port, 3, tw3),
        ],
        &tally,
        || {
            tally.wait_for(&[tw3], 5 * BATCH as usize);
            citus
                .client()
                .batch_execute("SELECT rebalance_table_shards('rows')")
                .unwrap_or_else(|e| panic!("rebalance_table_shards: {}", describe(&e)));
            tally.wait_for(&[tw2], ROWS_PER_NODE);
        },
    );
    assert!(
        citus.placements("rows").iter().any(|p| p.1 == w3.port),
        "the rebalance moved shards onto the new worker: {:?}",
        citus.placements("rows")
    );
    phase("rebalance", &mut since);

    // The second worker drained and removed while the others insert; a node added after it.
    let w4 = CitusCluster::new_node(None);
    let g4 = while_inserting(
        &[
            through(c, 0, tc),
            through(w1, 1, tw1),
            through(w3.port, 3, tw3),
        ],
        &tally,
        || {
            let mut db = citus.client();
            db.execute(
                "SELECT citus_drain_node('127.0.0.1', $1)",
                &[&i32::from(w2)],
            )
            .unwrap_or_else(|e| panic!("citus_drain_node: {}", describe(&e)));
            db.execute(
                "SELECT citus_remove_node('127.0.0.1', $1)",
                &[&i32::from(w2)],
            )
            .unwrap_or_else(|e| panic!("citus_remove_node: {}", describe(&e)));
            citus.add(&w4)
        },
    );
    assert_eq!(g4, 4, "a node added after a removal takes a new group");
    citus.workers[1].stop("fast");
    phase("remove and add", &mut since);

    // Every node restarted: the same shards after as before.
    let mut w3 = w3;
    let mut w4 = w4;
    let live = [
        through(c, 0, tc),
        through(w1, 1, tw1),
        through(w3.port, 3, tw3),
        through(w4.port, 4, tw4),
    ];
    while_inserting(&live, &tally, || {
        tally.wait_for(&[tw3, tw4], ROWS_PER_NODE / 2)
    });
    let before: Vec<String> = [c, w1, w3.port, w4.port].map(generates).to_vec();
    assert_eq!(before, [0, 1, 3, 4].map(block_text));
    for node in [
        &mut citus.coordinator,
        &mut citus.workers[0],
        &mut w3,
        &mut w4,
    ] {
        node.stop("fast");
    }
    for node in [
        &mut citus.coordinator,
        &mut citus.workers[0],
        &mut w3,
        &mut w4,
    ] {
        node.start()
            .unwrap_or_else(|log| panic!("a node did not restart:\n{log}"));
    }
    let after: Vec<String> = [c, w1, w3.port, w4.port].map(generates).to_vec();
    assert_eq!(after, before, "the nodes' shards after the restart");
    while_inserting(&live, &tally, || {
        tally.wait_for(&[tc, tw1, tw3, tw4], ROWS_PER_NODE)
    });
    phase("restart", &mut since);

    // The first worker fails over to its standby, which has replayed everything it wrote.
    let mut db = citus.client();
    let last_of_w1: HashMap<i32, i64> = db
        .query(
            "SELECT snowid_shard(id), max(id) FROM rows WHERE tag = $1 GROUP BY 1",
            &[&(tw1 as i32)],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    standby.wait_for_replay_of(&citus.workers[0]);
    citus.workers[0].stop("immediate");
    standby.promote();
    standby.wait_until_out_of_recovery();
    db.execute(
        "SELECT citus_update_node(nodeid, '127.0.0.1', $1) FROM pg_dist_node WHERE nodeport = $2",
        &[&i32::from(standby.port), &i32::from(w1)],
    )
    .unwrap_or_else(|e| panic!("citus_update_node: {}", describe(&e)));
    // Citus syncs the new address to the other workers in the background: an insert through
    // one of them that comes first is routed to the old primary, and refused.
    wait_until(
        "Citus has synced the new address to every worker",
        Duration::from_secs(60),
        || {
            db.query_one(
                "SELECT bool_and(metadatasynced) FROM pg_dist_node WHERE hasmetadata",
                &[],
            )
            .unwrap()
            .get::<_, bool>(0)
        },
    );
    assert_eq!(
        citus.group_of(standby.port),
        1,
        "the standby takes its primary's group"
    );
    assert_eq!(generates(standby.port), block_text(1));
    while_inserting(
        &[
            through(c, 0, tc),
            through(standby.port, 1, ts),
            through(w3.port, 3, tw3),
            through(w4.port, 4, tw4),
        ],
        &tally,
        || tally.wait_for(&[ts], ROWS_PER_NODE),
    );
    let first_of_standby: HashMap<i32, i64> = db
        .query(
            "SELECT snowid_shard(id), min(id) FROM rows WHERE tag = $1 GROUP BY 1",
            &[&(ts as i32)],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let shared_shards: Vec<i32> = first_of_standby
        .keys()
        .filter(|shard| last_of_w1.contains_key(shard))
        .copied()
        .collect();
    println!(
        "after the failover the standby issued on shards {:?}, {} of which the worker had issued \
         on",
        first_of_standby
            .keys()
            .collect::<std::collections::BTreeSet<_>>(),
        shared_shards.len()
    );
    // And on every shard the worker issued on, asked for by number.
    let mut on_standby = client_on(standby.port).unwrap();
    for (&shard, &last) in &last_of_w1 {
        let next: i64 = on_standby
            .query_one("SELECT snowid_next($1::int)", &[&shard])
            .unwrap_or_else(|e| panic!("snowid_next({shard}) on the standby: {}", describe(&e)))
            .get(0);
        assert!(
            next > last,
            "the promoted standby's ID on shard {shard}, {next}, is not above the old worker's \
             last, {last}"
        );
    }
    for shard in shared_shards {
        assert!(
            first_of_standby[&shard] > last_of_w1[&shard],
            "the promoted standby's first ID on shard {shard}, {}, is not above the old \
             worker's last, {}",
            first_of_standby[&shard],
            last_of_w1[&shard]
        );
    }
    phase("failover", &mut since);

    // An INSERT ... SELECT from the table, sent to the coordinator: the workers make the keys.
    let copied = db
        .execute(
            "INSERT INTO rows (grp, tag, n) SELECT -1, -1, n FROM rows WHERE tag = 0 AND n < 20000",
            &[],
        )
        .unwrap_or_else(|e| panic!("INSERT ... SELECT by repartition: {}", describe(&e)));
    let made_by: Vec<i32> = db
        .query(
            "SELECT DISTINCT snowid_shard(id) / 32 FROM rows WHERE tag = -1 ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    println!("INSERT ... SELECT: {copied} rows keyed by the nodes of groups {made_by:?}");
    assert!(copied > 0);
    assert!(
        !made_by.is_empty() && made_by.iter().all(|g| [1, 3, 4].contains(g)),
        "the keys of a repartitioned INSERT ... SELECT are made on the workers, each on its own \
         shards: groups {made_by:?}"
    );

    let errors = tally.errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "{} inserts failed: {:#?}",
        errors.len(),
        &errors[..errors.len().min(20)]
    );
    let inserted: usize = (0..6).map(|tag| tally.rows(tag)).sum::<usize>() + copied as usize;
    let per_node: Vec<usize> = (0..6).map(|tag| tally.rows(tag)).collect();
    println!(
        "{inserted} rows, through the coordinator and the workers (the second removed, the first \
         failed over to its standby, the last two added): {per_node:?}; {timings:?}; {:.1} s in all",
        began.elapsed().as_secs_f64()
    );
    assert_rows(
        &mut db,
        "rows",
        inserted as i64,
        &[(
            "tag >= 0 AND snowid_shard(id) / 32 <> grp",
            "IDs off the shards of the group of the node they went through",
        )],
    );
    assert!(
        per_node.iter().all(|&rows| rows >= ROWS_PER_NODE),
        "every node took {ROWS_PER_NODE} rows: {per_node:?}"
    );
}

/// This node's row of `snowid_citus_nodes()` for a group: the node's name, and why it did not
/// answer (null where it did).
fn seen_as(port: u16, group: i32) -> (String, Option<String>) {
    let row = client_on(port)
        .unwrap()
        .query_one(
            "SELECT node, unanswered FROM snowid_citus_nodes()
             WHERE citus_group = $1 AND NOT this_node",
            &[&group],
        )
        .unwrap_or_else(|e| panic!("snowid_citus_nodes() on port {port}: {}", describe(&e)));
    (row.get(0), row.get(1))
}

/// The error a statement on the node on `port` fails with.
fn error_of(port: u16, sql: &str) -> postgres::Error {
    client_on(port)
        .unwrap()
        .query_one(sql, &[])
        .expect_err(&format!("{sql} on port {port} must fail"))
}

/// The error a statement on the node on `port` fails with, described, and its hint.
fn error_and_hint(port: u16, sql: &str) -> (String, String) {
    let err = error_of(port, sql);
    let hint = err.as_db_error().and_then(|e| e.hint()).unwrap_or_default();
    (describe(&err), hint.to_string())
}

/// Sets a setting with `ALTER SYSTEM` on `db`'s node, or resets it (`None`), and reloads.
fn alter_system(db: &mut Client, name: &str, value: Option<&str>) {
    let sql = match value {
        Some(value) => format!("ALTER SYSTEM SET {name} = '{value}'"),
        None => format!("ALTER SYSTEM RESET {name}"),
    };
    db.batch_execute(&sql).unwrap();
    db.batch_execute("SELECT pg_reload_conf()").unwrap();
}

/// Sets `snowid.shards` on a node, or resets it (`None`), reloads, and waits until the node's
/// check has taken it (its row of `snowid_citus_nodes()` says so).
fn set_shards(port: u16, shards: Option<&str>) {
    alter_system(&mut client_on(port).unwrap(), "snowid.shards", shards);
    wait_until(
        &format!("the node on port {port} checks with snowid.shards {shards:?}"),
        Duration::from_secs(30),
        || {
            let row = client_on(port)
                .unwrap()
                .query_one(
                    "SELECT by_hand, claims FROM snowid_citus_nodes() WHERE this_node",
                    &[],
                )
                .unwrap();
            let (by_hand, claims): (bool, String) = (row.get(0), row.get(1));
            by_hand == shards.is_some() && shards.is_none_or(|s| s == claims)
        },
    );
}

/// A little longer than the checker waits before it asks the nodes again while some node could
/// not be heard from or some shard is refused (2 s).
const CHECKER_AGAIN: Duration = Duration::from_secs(3);

/// Guards against two Citus nodes issuing the same ID because `snowid.shards` gives one of them
/// shards another node has: at start, at a reload on a live node, when a node is added, and
/// when the coordinator is set, the nodes whose claims overlap each refuse the shards they share,
/// before either issues one of them, with an error that names both nodes and the shards; and a
/// node whose group is past the 256 that get shards refuses to generate instead of wrapping onto
/// another group's. A coordinator and a worker left at the default (groups 0 and 1: 0-31,
/// 32-63), and a second worker set to 5-9, inside the coordinator's shards, started before the
/// coordinator is registered with Citus:
/// - at start, the second worker refuses 5-9 (it takes the coordinator, which it cannot ask, to
///   claim its group's shards) and so has none; the coordinator refuses them too;
/// - once the coordinator is set, the second worker asks it (its check is due again);
/// - while the coordinator and the first worker insert, the first worker's `snowid.shards` is set
///   to 10-20 and reloaded: its inserts fail with the error naming both nodes and 10-20, none of
///   its rows is on those shards, the coordinator stops generating for them too and its inserts
///   go on; reset, the first worker inserts again on its own shards and the coordinator takes
///   10-20 back;
/// - a third worker set to 40-45, inside the first worker's shards, is added: both refuse them;
/// - a node added in group 300 refuses with the capacity, and a hint naming unclaimed shards,
///   and generates once `snowid.shards` gives it those.
///
/// No insert fails but the first worker's while it overlaps; no ID repeats; every row is on the
/// shards of the node it went through.
#[test]
fn an_overlap_made_by_hand_is_refused_before_any_duplicate() {
    skip_without_citus!();
    let citus = CitusCluster::start_nodes(&[None, None, Some("5-9")], &[], false);
    create_rows(&citus);
    let (c, w1, w2) = (
        citus.coordinator.port,
        citus.workers[0].port,
        citus.workers[1].port,
    );
    let (name_c, name_w1, name_w2) = (
        format!("127.0.0.1:{c}"),
        format!("127.0.0.1:{w1}"),
        format!("127.0.0.1:{w2}"),
    );

    // At start: the second worker's set lies in the coordinator's shards, which Citus does not
    // record yet.
    let err = error_of(w2, "SELECT snowid_next()");
    let message = describe(&err);
    println!("snowid_next() on the worker set to 5-9: {message}");
    assert!(
        message.starts_with(&format!(
            "55000 this Citus node ({name_w2}) has no snowid shard"
        )) && message.contains(&name_w2)
            && message.contains("the coordinator claims its shards too")
            && message.contains("5-9"),
        "{message}"
    );
    let message = describe(&error_of(w2, "SELECT snowid_next(7)"));
    assert!(
        message.starts_with(&format!(
            "55000 snowid shard 7 is claimed by two Citus nodes, this one ({name_w2}) and the \
             coordinator"
        )),
        "{message}"
    );
    assert_eq!(generates(c), "0-4,10-31", "the coordinator refuses 5-9 too");
    let message = describe(&error_of(c, "SELECT snowid_next(5)"));
    assert!(
        message.contains(&name_w2) && message.contains("5-9"),
        "{message}"
    );
    assert_eq!(
        seen_as(w2, 0).0,
        "the coordinator",
        "before it is set, the coordinator is not asked"
    );

    // The coordinator set: the second worker checks again, and asks it.
    citus.set_coordinator();
    assert_eq!(seen_as(w2, 0), (name_c.clone(), None));
    assert_eq!(
        generates(w2),
        "",
        "still refused: the coordinator claims 5-9"
    );

    // An overlap made by hand on a live node.
    let tally = Tally::new(4);
    let (tc, tw1) = (0, 1);
    let load = [
        Through {
            port: c,
            grp: 0,
            tag: tc,
        },
        Through {
            port: w1,
            grp: 1,
            tag: tw1,
        },
    ];
    while_inserting(&load, &tally, || {
        tally.wait_for(&[tc, tw1], 5 * BATCH as usize);
        set_shards(w1, Some("10-20"));
        wait_until("the first worker refuses", Duration::from_secs(30), || {
            !tally.errors_of(tw1).is_empty()
        });
        wait_until(
            "the coordinator refuses 10-20 too",
            Duration::from_secs(30),
            || generates(c) == "0-4,21-31",
        );
        let at = tally.rows(tc);
        tally.wait_for(&[tc], at + 5 * BATCH as usize);
        set_shards(w1, None);
        let at = tally.rows(tw1);
        tally.wait_for(&[tw1], at + 5 * BATCH as usize);
        wait_until(
            "the coordinator takes 10-20 back",
            Duration::from_secs(30),
            || generates(c) == "0-4,10-31",
        );
    });
    let refusals = tally.errors_of(tw1);
    println!(
        "the first worker set to 10-20 refused {} inserts: {}",
        refusals.len(),
        refusals[0].1
    );
    for (code, message) in &refusals {
        assert_eq!(code, "55000", "{message}");
        assert!(
            message.contains(&name_w1) && message.contains(&name_c) && message.contains("10-20"),
            "the error names both nodes and the shards: {message}"
        );
    }
    assert!(
        tally.errors_of(tc).is_empty(),
        "the coordinator's inserts failed: {:?}",
        tally.errors_of(tc)
    );

    // A node added whose set lies in the first worker's shards.
    let w3 = CitusCluster::new_node(Some("40-45"));
    assert_eq!(citus.add(&w3), 3);
    let message = describe(&error_of(w3.port, "SELECT snowid_next(41)"));
    assert!(
        message.contains(&name_w1) && message.contains("40-45"),
        "{message}"
    );
    assert_eq!(
        generates(w1),
        "32-39,46-63",
        "the first worker refuses 40-45 too"
    );

    // A node in a group past the capacity.
    let w4 = CitusCluster::new_node(None);
    citus.add_in_group(&w4, 300);
    let (err, hint) = error_and_hint(w4.port, "SELECT snowid_next()");
    println!("snowid_next() in group 300: {err} (hint: {hint})");
    assert!(
        err.starts_with(
            "55000 this Citus node has no snowid shards: its group, 300, is past the 256 groups"
        ),
        "{err}"
    );
    let free = hint
        .split("such as ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("the hint names unclaimed shards: {hint}"))
        .to_string();
    assert_eq!(free, "128-159", "groups 0 to 3 are taken");
    set_shards(w4.port, Some(&free));
    wait_until(
        "the node in group 300 generates for the shards it was given",
        Duration::from_secs(30),
        || {
            client_on(w4.port)
                .unwrap()
                .query_one(
                    "SELECT snowid_shard(snowid_next()) BETWEEN 128 AND 159",
                    &[],
                )
                .map(|r| r.get::<_, bool>(0))
                .unwrap_or(false)
        },
    );

    let inserted = (tally.rows(tc) + tally.rows(tw1)) as i64;
    let on_the_coordinators = format!("tag = {tw1} AND snowid_shard(id) BETWEEN 10 AND 20");
    assert_rows(
        &mut citus.client(),
        "rows",
        inserted,
        &[
            (
                "snowid_shard(id) / 32 <> grp",
                "IDs off their node's shards",
            ),
            (
                &on_the_coordinators,
                "the first worker issued IDs on the coordinator's shards",
            ),
        ],
    );
}

/// Runs one of Citus's functions of a node (`stop_metadata_sync_to_node`, `citus_remove_node`,
/// ...) on the coordinator for the node on `port`.
fn on_a_node(citus: &CitusCluster, function: &str, port: u16) {
    citus
        .client()
        .execute(
            &format!("SELECT {function}('127.0.0.1', $1)"),
            &[&i32::from(port)],
        )
        .unwrap_or_else(|e| panic!("{function}: {}", describe(&e)));
}

/// What `count` calls of `snowid_next(shard)` return in one statement on `db`, for the shards
/// `first` to `last` in turn: the IDs, or the error the statement failed with.
fn ids_by(db: &mut Client, first: i32, last: i32, count: i32) -> Result<Vec<i64>, String> {
    db.query_one(
        "SELECT array_agg(snowid_next($1::int + g % ($2::int - $1::int + 1)))
         FROM generate_series(1, $3::int) g",
        &[&first, &last, &count],
    )
    .map(|row| row.get(0))
    .map_err(|e| describe(&e))
}

/// Generates IDs for the shards `first` to `last` on the node on `port`, adding them to `ids`,
/// until it refuses with an error that names each of `words` (or 30 s have passed, which fails
/// the test); each time, `nudge` runs first where given (a statement whose refusal makes the
/// node ask the others again). Returns the refusal.
fn generate_until_refused_with(
    port: u16,
    (first, last): (i32, i32),
    ids: &mut Vec<i64>,
    words: &[&str],
    nudge: Option<&str>,
) -> String {
    let mut refusal = String::new();
    wait_until(
        &format!("the node on port {port} refuses naming {words:?}"),
        Duration::from_secs(30),
        || {
            if let Some(sql) = nudge {
                let _ = client_on(port).unwrap().batch_execute(sql);
            }
            match ids_on(port, first, last, 2000) {
                Ok(more) => ids.extend(more),
                Err(why) => refusal = why,
            }
            words.iter().all(|word| refusal.contains(word))
        },
    );
    refusal
}

/// [`ids_by`] on a new connection to the node on `port`.
fn ids_on(port: u16, first: i32, last: i32, count: i32) -> Result<Vec<i64>, String> {
    ids_by(&mut client_on(port).unwrap(), first, last, count)
}

/// How many IDs occur on more than one of `sets`, or twice in one.
fn issued_twice(sets: &[&[i64]]) -> usize {
    let mut seen = HashSet::new();
    sets.iter()
        .flat_map(|set| set.iter())
        .filter(|id| !seen.insert(**id))
        .count()
}

/// Generates IDs for the shards `first` to `last` on each of `ports` at the same time, in
/// rounds of one statement each, adding them to `ids` (one list per port), until every node
/// refuses (or `limit` has passed, which fails the test). Returns each node's refusal.
fn generate_until_all_refuse(
    ports: &[u16],
    (first, last): (i32, i32),
    ids: &mut [Vec<i64>],
    limit: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut sessions: Vec<Client> = ports.iter().map(|&p| client_on(p).unwrap()).collect();
    let started = Barrier::new(sessions.len());
    loop {
        let round: Vec<Result<Vec<i64>, String>> = thread::scope(|scope| {
            let started = &started;
            let handles: Vec<_> = sessions
                .iter_mut()
                .map(|db| {
                    scope.spawn(move || {
                        started.wait();
                        ids_by(db, first, last, 2000)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut refusals = Vec::new();
        for (result, ids) in round.into_iter().zip(ids.iter_mut()) {
            match result {
                Ok(more) => ids.extend(more),
                Err(refusal) => refusals.push(refusal),
            }
        }
        if refusals.len() == ports.len() {
            return refusals;
        }
        let sets: Vec<&[i64]> = ids.iter().map(Vec::as_slice).collect();
        assert!(
            Instant::now() < deadline,
            "after {limit:?} the nodes on ports {ports:?} still generate for shards \
             {first}-{last} ({} IDs issued twice so far)",
            issued_twice(&sets)
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Guards against duplicate IDs after `stop_metadata_sync_to_node` (issue 55, item 1): Citus
/// resets that worker's `pg_dist_local_group` to 0 and empties its record of the nodes, so the
/// worker takes the coordinator's shards 0-31, while the coordinator still records it in group 1
/// and (before 0.8.0) took it to claim 32-63. A coordinator and a worker, both left at the
/// default, generate IDs for every shard of 0-31 in turn, in statements of 2,000, before and
/// after the call, until both refuse: the worker's answer says it takes itself to be in group 0,
/// so the coordinator refuses 0-31, and the worker, told the coordinator's claim by its question,
/// refuses them too; each names the other, and no ID is issued by both. After
/// `start_metadata_sync_to_node` each generates for its own group's shards again, still with no
/// ID issued twice.
///
/// Then, on the same worker, Citus in a second database (issue 51, item 9): `app`, with the
/// citus extension of a cluster of its own (its group 0), where a role that is no superuser calls
/// `snowid_next()` first after a restart. Before 0.8.0, whichever database checked first decided
/// the server's shards, and `app` made the worker generate the coordinator's. Now
/// `snowid.citus_database` names the database whose group counts (`postgres` by default), so the
/// worker generates for group 1's shards from every database. Named `app`, the worker takes group
/// 0 from it, and the coordinator, whose questions reach the worker in `postgres`, gets a refusal
/// to answer, which it takes as no agreement: it refuses every shard, naming the worker, and no
/// ID is issued twice. A database that does not exist leaves the worker refusing, saying so.
///
/// Last (issue 55, item 6): a worker that released every shard of its group is told so, not that
/// its group is past the 256 groups.
#[test]
fn a_worker_reset_to_group_0_or_reading_another_database_is_refused() {
    skip_without_citus!();
    let mut citus = CitusCluster::unconfigured(1);
    let (c, w) = (citus.coordinator.port, citus.workers[0].port);
    let (name_c, name_w) = (format!("127.0.0.1:{c}"), format!("127.0.0.1:{w}"));
    assert_eq!((generates(c), generates(w)), (block_text(0), block_text(1)));
    let mut ids = vec![
        ids_on(c, 0, 31, 2000).unwrap(),
        ids_on(w, 32, 63, 2000).unwrap(),
    ];

    on_a_node(&citus, "stop_metadata_sync_to_node", w);
    let refusals = generate_until_all_refuse(&[c, w], (0, 31), &mut ids, Duration::from_secs(30));
    println!("after stop_metadata_sync_to_node: {refusals:#?}");
    assert_eq!(
        issued_twice(&[&ids[0], &ids[1]]),
        0,
        "IDs issued by both nodes"
    );
    assert!(
        refusals[0].contains(&name_w) && refusals[0].contains("it takes itself to be in group 0"),
        "the coordinator's refusal names the worker and the group it takes itself to be in: {}",
        refusals[0]
    );
    assert!(
        refusals[1].contains(&name_c),
        "the worker's refusal names the coordinator: {}",
        refusals[1]
    );
    // Both keep refusing.
    thread::sleep(CHECKER_AGAIN);
    for port in [c, w] {
        assert!(
            ids_on(port, 0, 31, 100).is_err(),
            "port {port} generates again"
        );
    }

    on_a_node(&citus, "start_metadata_sync_to_node", w);
    wait_until(
        "each node generates for its own group's shards again",
        Duration::from_secs(30),
        || generates(c) == block_text(0) && generates(w) == block_text(1),
    );
    ids[0].extend(ids_on(c, 0, 31, 2000).unwrap());
    ids[1].extend(ids_on(w, 32, 63, 2000).unwrap());
    assert_eq!(issued_twice(&[&ids[0], &ids[1]]), 0, "IDs issued twice");

    // Citus in a second database of the worker, with a group of its own.
    let mut db = citus.workers[0].client();
    for sql in [
        "CREATE DATABASE app",
        "CREATE ROLE alice LOGIN",
        "GRANT ALL ON DATABASE app TO alice",
    ] {
        db.batch_execute(sql).unwrap();
    }
    citus.workers[0]
        .client_of("app")
        .batch_execute("CREATE EXTENSION citus; CREATE EXTENSION snowid;")
        .unwrap();
    citus.workers[0].stop("fast");
    citus.workers[0].start().unwrap();
    let shard: i32 = citus.workers[0]
        .client_as("alice", "app")
        .query_one("SELECT snowid_shard(snowid_next())", &[])
        .unwrap_or_else(|e| panic!("snowid_next() in app: {}", describe(&e)))
        .get(0);
    assert!(
        group_shards(1).contains(&shard),
        "a role's first snowid_next() in database app takes shard {shard}, not one of the worker's \
         group in the database snowid.citus_database names"
    );

    // The worker told to take its group from app, group 0 there: it keeps refusing what the
    // nodes it knew through postgres claim, the coordinator's shards; and the coordinator, once
    // it asks again (a refused shard makes it), gets a refusal to answer (its questions reach the
    // worker in postgres), which it takes as no agreement: it refuses every shard.
    alter_system(
        &mut client_on(w).unwrap(),
        "snowid.citus_database",
        Some("app"),
    );
    let refusal = generate_until_refused_with(w, (0, 31), &mut ids[1], &[&name_c], None);
    println!("the worker reads database app: {refusal}");
    let refusal = generate_until_refused_with(
        c,
        (0, 31),
        &mut ids[0],
        &[&name_w, "every shard"],
        Some("SELECT snowid_next(40)"),
    );
    println!("the coordinator asks it: {refusal}");
    assert_eq!(issued_twice(&[&ids[0], &ids[1]]), 0, "IDs issued twice");
    let unanswered: String = client_on(c)
        .unwrap()
        .query_one(
            "SELECT unanswered FROM snowid_citus_nodes() WHERE node = $1",
            &[&name_w],
        )
        .unwrap()
        .get(0);
    assert!(
        unanswered.contains("takes its Citus group from database \"app\""),
        "{unanswered}"
    );

    // A database that does not exist: the worker refuses, and says so.
    alter_system(
        &mut client_on(w).unwrap(),
        "snowid.citus_database",
        Some("nosuch"),
    );
    let mut message = String::new();
    wait_until(
        "the worker refuses, naming the database that does not exist",
        Duration::from_secs(30),
        || {
            message = describe(&error_of(w, "SELECT snowid_next()"));
            message.contains("\"nosuch\"")
        },
    );
    assert!(
        message.contains("snowid has not learnt this node's shards from Citus"),
        "{message}"
    );
    alter_system(&mut client_on(w).unwrap(), "snowid.citus_database", None);
    wait_until(
        "both nodes generate for their own group's shards again",
        Duration::from_secs(30),
        || ids_on(w, 32, 63, 10).is_ok() && ids_on(c, 0, 31, 10).is_ok(),
    );

    // Every shard of the worker's group released.
    client_on(w)
        .unwrap()
        .batch_execute("SELECT snowid_release(s) FROM generate_series(32, 63) s")
        .unwrap();
    let message = describe(&error_of(w, "SELECT snowid_next()"));
    assert!(
        message.contains("every shard of its claim is released")
            && !message.contains("past the 256"),
        "{message}"
    );
}

/// Guards against an overlap that outlives its cause (issue 55, items 2 and 3). A coordinator
/// and two workers left at the default (groups 0, 1 and 2):
/// - the second worker set to 40-50, inside the first worker's shards, and reloaded: both refuse
///   40-50, each naming the other; then reset and reloaded, and asked for nothing since, the
///   first worker takes 40-50 back all the same, within seconds. Before 0.8.0 a reload started
///   no check, and the first worker refused 40-50 until the second next generated;
/// - a statement on the second worker that calls `snowid_next()` every 10 ms spans a reload into
///   40-50 and a reset, while new sessions generate there too: the statement's session keeps its
///   settings as they were when it began, and the check follows the server's. Before 0.8.0 every
///   new session was refused from seconds after the reset until a restart (the shards of the
///   40-50 check were published with the fingerprint of the default's); now every new session
///   generates for the second worker's shards, from shortly after the reset to seconds after
///   the statement ends.
#[test]
fn an_overlap_ends_on_both_nodes_with_the_reload_that_ends_it() {
    skip_without_citus!();
    let citus = start_three_nodes();
    let (w1, w2) = (citus.workers[0].port, citus.workers[1].port);
    let (name_w1, name_w2) = (format!("127.0.0.1:{w1}"), format!("127.0.0.1:{w2}"));

    set_shards(w2, Some("40-50"));
    // Generate on the second worker once, as 0.7.0 needed for its check.
    let message = describe(&error_of(w2, "SELECT snowid_next()"));
    assert!(
        message.contains(&name_w1) && message.contains("40-50"),
        "{message}"
    );
    wait_until(
        "the first worker refuses 40-50",
        Duration::from_secs(30),
        || generates(w1) == "32-39,51-63",
    );
    let message = describe(&error_of(w1, "SELECT snowid_next(45)"));
    assert!(
        message.contains(&name_w2) && message.contains("40-50"),
        "{message}"
    );
    set_shards(w2, None);
    let reset = Instant::now();
    wait_until(
        "the first worker takes 40-50 back, with nothing generated on the second since",
        Duration::from_secs(15),
        || generates(w1) == block_text(1),
    );
    println!(
        "the first worker took 40-50 back {:.2} s after the second reset its set",
        reset.elapsed().as_secs_f64()
    );
    ids_on(w1, 40, 50, 100).unwrap();

    // A statement spanning a reload into 40-50 and a reset.
    let statement = thread::spawn(move || {
        client_on(w2).unwrap().batch_execute(
            "DO $$ BEGIN FOR i IN 1..400 LOOP
                 BEGIN PERFORM snowid_next(); EXCEPTION WHEN OTHERS THEN NULL; END;
                 PERFORM pg_sleep(0.01);
             END LOOP; END $$",
        )
    });
    let new_session = || -> Result<i32, String> {
        client_on(w2)
            .unwrap()
            .query_one("SELECT snowid_shard(snowid_next())", &[])
            .map(|row| row.get(0))
            .map_err(|e| describe(&e))
    };
    thread::sleep(Duration::from_millis(500));
    // New sessions throughout, four at a time, across both reloads.
    let stop = AtomicBool::new(false);
    thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    let _ = new_session();
                }
            });
        }
        thread::sleep(Duration::from_millis(300));
        set_shards(w2, Some("40-50"));
        thread::sleep(Duration::from_millis(700));
        set_shards(w2, None);
        thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::SeqCst);
    });
    let shown: String = client_on(w2)
        .unwrap()
        .query_one("SHOW snowid.shards", &[])
        .unwrap()
        .get(0);
    assert_eq!(shown, "0-8191");
    wait_until(
        "a new session on the second worker generates after the reset",
        Duration::from_secs(10),
        || new_session().is_ok(),
    );
    let mut sessions = 0;
    let until = Instant::now() + Duration::from_secs(6);
    while !statement.is_finished() || Instant::now() < until {
        let shard = new_session()
            .unwrap_or_else(|e| panic!("a new session on the second worker, after the reset: {e}"));
        assert!(group_shards(2).contains(&shard), "shard {shard}");
        sessions += 1;
        thread::sleep(Duration::from_millis(50));
    }
    statement.join().unwrap().unwrap();
    println!("{sessions} new sessions generated on the second worker after the reset");
}

/// Generates IDs for the shards `first` to `last` on each of `workers` at once, over their
/// sockets, in rounds for three seconds, adding them to `ids` (one list per worker). Returns each
/// one's last refusal (empty where it never refused).
fn generate_over_sockets(
    workers: &[Cluster],
    (first, last): (i32, i32),
    ids: &mut [Vec<i64>],
) -> Vec<String> {
    let mut refusals = vec![String::new(); workers.len()];
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let round: Vec<Result<Vec<i64>, String>> = thread::scope(|scope| {
            let handles: Vec<_> = workers
                .iter()
                .map(|worker| scope.spawn(move || ids_by_socket(worker, first, last, 2000)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (k, result) in round.into_iter().enumerate() {
            match result {
                Ok(more) => ids[k].extend(more),
                Err(why) => refusals[k] = why,
            }
        }
    }
    refusals
}

/// [`ids_by`] over the node's Unix socket (see `snowid_integration::citus::socket_client`).
fn ids_by_socket(node: &Cluster, first: i32, last: i32, count: i32) -> Result<Vec<i64>, String> {
    ids_by(&mut socket_client(node), first, last, count)
}

/// Cuts the workers off from every other node, and waits until each has asked the others again
/// and found them unreachable. A round of questions that a worker began before the others were
/// cut off (each reload, the cut's own included, makes a checker ask at once) could otherwise
/// still be answered after the next step sets another worker's shards, and hear a claim made
/// while they were apart. The checker makes one round at a time, so once one that found the
/// others unreachable is over, none that began before is still under way.
fn cut_off_from_each_other(workers: &[Cluster]) {
    for worker in workers {
        cut_off(worker, true);
    }
    for worker in workers {
        socket_client(worker)
            .batch_execute("SELECT pg_reload_conf()")
            .unwrap();
        for other in workers.iter().filter(|w| w.port != worker.port) {
            let name = format!("127.0.0.1:{}", other.port);
            wait_until(
                &format!(
                    "the worker on port {} finds {name} unreachable",
                    worker.port
                ),
                Duration::from_secs(30),
                || {
                    socket_client(worker)
                        .query_one(
                            "SELECT unanswered IS NOT NULL FROM snowid_citus_nodes() \
                             WHERE node = $1",
                            &[&name],
                        )
                        .is_ok_and(|row| row.get(0))
                },
            );
        }
    }
}

/// Guards against two nodes set by hand to the same shards both generating for them (issue 51,
/// item 8, and issue 55, item 4). A coordinator and two workers:
/// - the database owner of the Citus database (`postgres`, owned by a role that is no superuser)
///   creates `public.snowid_citus_claim(integer, text, integer DEFAULT 0)` on every node, which
///   made 0.7.0's question to another node ambiguous, and an error was taken as that node
///   claiming only its group's shards; then both workers are set to 5000-5009: they generate for
///   those shards, each statement 2,000 IDs across them, until both refuse them, naming each
///   other, with no ID issued by both;
/// - both reset; the first set to 6000-6009 while every node can reach it; then both cut off
///   from every other node (their `pg_hba.conf` rejects every TCP connection), and the second set
///   to 6000-6009 too. Before 0.8.0 each took the other, unreachable, to claim its group's shards,
///   and both generated for 6000-6009 for as long as they ran, even once they could reach each
///   other again. Now the second, cut off, refuses them (the first has not heard it claim them),
///   while the first generates, both at once, for seconds; connected again, with nothing reloaded,
///   both refuse 6000-6009 within seconds (the checker asks again while a node could not be heard
///   from), each naming the other as claiming them; and no ID is issued by both. Both set to
///   7000-7009 while cut off from each other: neither generates for them, each saying the other
///   has not heard it claim them; connected again, both refuse them for each other's claim.
#[test]
fn nodes_set_by_hand_to_one_set_refuse_it_whatever_the_owner_or_the_network_did() {
    skip_without_citus!();
    let citus = start_three_nodes();
    let (w1, w2) = (citus.workers[0].port, citus.workers[1].port);
    let (name_w1, name_w2) = (format!("127.0.0.1:{w1}"), format!("127.0.0.1:{w2}"));
    // On each node, with Citus's propagation of DDL off (each node gets its own).
    for node in citus.nodes() {
        node.client()
            .batch_execute(
                "SET citus.enable_ddl_propagation TO off;
                 CREATE ROLE mallory LOGIN; ALTER DATABASE postgres OWNER TO mallory;",
            )
            .unwrap();
        node.client_as("mallory", "postgres")
            .batch_execute(
                "SET citus.enable_ddl_propagation TO off;
                 CREATE FUNCTION public.snowid_citus_claim(integer, text, integer DEFAULT 0)
                 RETURNS text LANGUAGE sql AS $$ SELECT 'group:' $$;
                 ALTER DATABASE postgres SET search_path = public, pg_catalog;",
            )
            .unwrap_or_else(|e| panic!("the owner's objects: {}", describe(&e)));
    }
    set_shards(w1, Some("5000-5009"));
    set_shards(w2, Some("5000-5009"));
    let mut ids = vec![Vec::new(), Vec::new()];
    let refusals =
        generate_until_all_refuse(&[w1, w2], (5000, 5009), &mut ids, Duration::from_secs(30));
    println!("two workers set to 5000-5009: {refusals:#?}");
    assert_eq!(
        issued_twice(&[&ids[0], &ids[1]]),
        0,
        "IDs issued by both workers"
    );
    assert!(refusals[0].contains(&name_w2), "{}", refusals[0]);
    assert!(refusals[1].contains(&name_w1), "{}", refusals[1]);

    // The first worker set to 6000-6009 while every node can reach it; then both cut off from
    // each other, and the second set to 6000-6009 too.
    set_shards(w1, None);
    set_shards(w2, None);
    set_shards(w1, Some("6000-6009"));
    wait_until(
        "the first worker generates for 6000-6009",
        Duration::from_secs(30),
        || ids_on(w1, 6000, 6009, 10).is_ok(),
    );
    cut_off_from_each_other(citus.workers.as_slice());
    alter_system(
        &mut socket_client(&citus.workers[1]),
        "snowid.shards",
        Some("6000-6009"),
    );
    // Both keep on at it, at the same time, as long as they are cut off: the first generates, the
    // second refuses, since the first has not heard it claim those shards (or, where the second
    // heard the first's claim before it was cut off, since the first claims them).
    let mut ids = [Vec::new(), Vec::new()];
    let refusals = generate_over_sockets(&citus.workers, (6000, 6009), &mut ids);
    println!(
        "cut off: the first worker issued {} IDs for 6000-6009, the second {} ({})",
        ids[0].len(),
        ids[1].len(),
        refusals[1]
    );
    assert!(
        refusals[0].is_empty(),
        "the first worker refuses: {}",
        refusals[0]
    );
    assert!(
        ids[1].is_empty() && refusals[1].contains(&name_w1),
        "the second worker, set while it cannot reach the first, generates for the first's shards \
         ({} IDs issued by both): {}",
        issued_twice(&[&ids[0], &ids[1]]),
        refusals[1]
    );

    // Connected again, nothing reloaded: they find the overlap and both refuse, each naming the
    // other as claiming the shards.
    for worker in &citus.workers {
        cut_off(worker, false);
    }
    let connected = Instant::now();
    let refusals =
        generate_until_all_refuse(&[w1, w2], (6000, 6009), &mut ids, Duration::from_secs(20));
    println!(
        "connected again, both refuse 6000-6009 after {:.2} s: {refusals:#?}",
        connected.elapsed().as_secs_f64()
    );
    assert!(refusals[0].contains(&name_w2), "{}", refusals[0]);
    assert!(
        refusals[1].contains(&name_w1) && !refusals[1].contains("has not heard"),
        "{}",
        refusals[1]
    );
    assert_eq!(
        issued_twice(&[&ids[0], &ids[1]]),
        0,
        "IDs issued by both workers"
    );

    // Both set to 7000-7009 while cut off from each other: neither has heard the other claim
    // them, and neither generates for them until they have.
    set_shards(w1, None);
    set_shards(w2, None);
    cut_off_from_each_other(citus.workers.as_slice());
    for worker in &citus.workers {
        alter_system(
            &mut socket_client(worker),
            "snowid.shards",
            Some("7000-7009"),
        );
    }
    let mut ids = [Vec::new(), Vec::new()];
    let refusals = generate_over_sockets(&citus.workers, (7000, 7009), &mut ids);
    println!("both set while cut off: {refusals:#?}");
    for (k, other) in [(0, &name_w2), (1, &name_w1)] {
        assert!(
            ids[k].is_empty()
                && refusals[k].contains(other)
                && refusals[k].contains("has not heard"),
            "a worker set while it cannot reach the other generates ({} IDs issued by both): {}",
            issued_twice(&[&ids[0], &ids[1]]),
            refusals[k]
        );
    }
    for worker in &citus.workers {
        cut_off(worker, false);
    }
    wait_until(
        "the workers, connected again, refuse 7000-7009 for each other's claims",
        Duration::from_secs(20),
        || {
            [w1, w2].iter().zip(ids.iter_mut()).all(|(&port, ids)| {
                match ids_on(port, 7000, 7009, 2000) {
                    Ok(more) => {
                        ids.extend(more);
                        false
                    }
                    Err(why) => !why.contains("has not heard"),
                }
            })
        },
    );
    assert!(
        ids.iter().all(Vec::is_empty),
        "7000-7009 generated ({} IDs issued by both)",
        issued_twice(&[&ids[0], &ids[1]])
    );
}

/// Guards against a node added to a Citus cluster issuing IDs another node issued (issue 55,
/// items 5 and 7). A coordinator and two workers left at the default (groups 0, 1 and 2), and a
/// table keyed by `DEFAULT snowid_next()`:
/// - a server with the citus extension that is in no cluster yet (group 0, like the
///   coordinator), its clock 30 s ahead, generates IDs on its own, in four sessions, before
///   `citus_add_node` joins it: the coordinator, which claims those shards, logs them with the
///   node and the last ID, and so does the new node; and since that ID is dated after the
///   coordinator's clock, the coordinator refuses those shards, naming the node and the ID, until
///   `snowid_resume_above` of it, after which its IDs for them are above every one the new node
///   issued. Before 0.8.0 nothing was said, and the coordinator issued IDs for those shards
///   below the new node's;
/// - the second worker drained and removed, and left running (routing inserts with the metadata
///   it had), and Citus's group sequence moved to 255, as 219 nodes added and removed since would
///   leave it: the new node, in group 256, is refused with a hint that names no shard of a group
///   given out as free, and gives instead the way to take a removed node's, once that node is
///   stopped for good, with the resume above their highest ID. Before 0.8.0 the hint named the
///   removed node's shards as claimed by no node, and followed, gave duplicates with it. Followed
///   now (the second worker stopped, the resume run, the set given), the new node's IDs are above
///   every ID of those shards, and none equals one the removed worker issued.
#[test]
fn a_node_that_joins_after_generating_or_past_the_capacity_meets_no_ones_ids() {
    skip_without_citus!();
    let mut citus = start_three_nodes();
    create_rows(&citus);
    let (c, w2) = (citus.coordinator.port, citus.workers[1].port);
    let name_c = format!("127.0.0.1:{c}");

    // A server of its own, its clock ahead, generates before it joins.
    let w3 = CitusCluster::new_node_with_clock("+30s");
    let name_w3 = format!("127.0.0.1:{}", w3.port);
    let before: Vec<i64> = thread::scope(|scope| {
        let sessions: Vec<_> = (0..4)
            .map(|_| {
                let node = &w3;
                scope.spawn(move || {
                    let mut db = node.client();
                    db.query_one(
                        "SELECT array_agg(snowid_next()) FROM generate_series(1, 5000)",
                        &[],
                    )
                    .unwrap()
                    .get::<_, Vec<i64>>(0)
                })
            })
            .collect();
        sessions
            .into_iter()
            .flat_map(|s| s.join().unwrap())
            .collect()
    });
    let used: std::collections::BTreeSet<i32> =
        before.iter().map(|id| ((id >> 10) & 8191) as i32).collect();
    let last = *before.iter().max().unwrap();
    println!(
        "the new node generated {} IDs on shards {used:?}, up to {last}",
        before.len()
    );
    assert!(used.iter().all(|s| group_shards(0).contains(s)));

    // The second worker drained and removed, left running; the group sequence at 255.
    let mut db = citus.client();
    for command in ["citus_drain_node", "citus_remove_node"] {
        on_a_node(&citus, command, w2);
    }
    db.batch_execute("SELECT setval('pg_catalog.pg_dist_groupid_seq', 255)")
        .unwrap();
    assert_eq!(citus.add(&w3), 256);

    // The coordinator refuses the shards the new node used, until it resumes above its IDs.
    let shard = *used.iter().next().unwrap();
    let refused = |sql: &str| -> String { describe(&error_of(c, sql)) };
    wait_until(
        "the coordinator refuses the shards the new node used",
        Duration::from_secs(30),
        || {
            client_on(c)
                .unwrap()
                .query_one(&format!("SELECT snowid_next({shard})"), &[])
                .is_err()
        },
    );
    let message = refused(&format!("SELECT snowid_next({shard})"));
    println!("the coordinator, for shard {shard}: {message}");
    assert!(
        message.contains(&name_w3) && message.contains(&last.to_string()),
        "{message}"
    );
    for (node, what) in [(&citus.coordinator, &name_w3), (&w3, &name_c)] {
        wait_until("the join is logged", Duration::from_secs(10), || {
            node.log()
                .lines()
                .any(|l| l.contains("issued IDs for snowid shards") && l.contains(what.as_str()))
        });
    }
    let mut after_join = Vec::new();
    client_on(c)
        .unwrap()
        .execute("SELECT snowid_resume_above($1)", &[&last])
        .unwrap_or_else(|e| panic!("snowid_resume_above: {}", describe(&e)));
    for &s in &used {
        after_join.extend(ids_on(c, s, s, 500).unwrap());
    }
    assert_eq!(
        after_join.iter().filter(|&&id| id <= last).count(),
        0,
        "IDs the coordinator issued for the new node's shards at or below its last"
    );
    assert_eq!(issued_twice(&[&before, &after_join]), 0);

    // The new node, in group 256, and the hint it gets.
    let (err, hint) = error_and_hint(w3.port, "SELECT snowid_next()");
    println!("snowid_next() in group 256: {err} (hint: {hint})");
    assert!(
        err.contains("its group, 256, is past the 256 groups"),
        "{err}"
    );
    let mut on_w2 = ids_on(w2, 64, 95, 2000).unwrap();
    if let Some(free) = hint
        .split("such as ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
    {
        // The hint names shards as free: take them while the removed worker still runs.
        set_shards(w3.port, Some(free));
        let mut on_w3 = Vec::new();
        let limit = Instant::now() + Duration::from_secs(5);
        while Instant::now() < limit {
            on_w3.extend(ids_on(w3.port, 64, 95, 2000).unwrap_or_default());
            on_w2.extend(ids_on(w2, 64, 95, 2000).unwrap());
        }
        panic!(
            "the hint named {free} as free: taken, {} IDs were issued by both the removed worker \
             and the new node",
            issued_twice(&[&on_w2, &on_w3])
        );
    }
    assert!(
        hint.contains("BETWEEN 64 AND 95") && hint.contains("snowid_resume_above"),
        "the hint gives the removed worker's shards with the resume: {hint}"
    );
    // Followed: the removed worker stopped for good, the resume above their highest ID, the set.
    citus.workers[1].stop("fast");
    let highest: i64 = db
        .query_one(
            "SELECT greatest(max(id), $1) FROM rows WHERE snowid_shard(id) BETWEEN 64 AND 95",
            &[on_w2.iter().max().unwrap()],
        )
        .unwrap()
        .get(0);
    client_on(w3.port)
        .unwrap()
        .execute("SELECT snowid_resume_above($1)", &[&highest])
        .unwrap();
    set_shards(w3.port, Some("64-95"));
    let mut on_w3 = Vec::new();
    wait_until(
        "the new node generates for 64-95",
        Duration::from_secs(30),
        || {
            ids_on(w3.port, 64, 95, 2000)
                .map(|ids| on_w3.extend(ids))
                .is_ok()
        },
    );
    assert!(on_w3.iter().all(|&id| id > highest));
    assert_eq!(issued_twice(&[&on_w2, &on_w3]), 0);
}
