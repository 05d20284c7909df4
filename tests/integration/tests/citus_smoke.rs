//! snowid under Citus: a coordinator and two workers on loopback, a distributed table keyed by
//! `DEFAULT snowid_next(5)`, with shard 5 owned by the coordinator. Needs Citus 13.2.2
//! (`scripts/citus`); without it each test passes after printing why it skipped.

use snowid_integration::citus::CitusCluster;
use snowid_integration::skip_without_citus;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

const CLIENTS: i32 = 4;
const ROWS_PER_CLIENT: i32 = 250;
const BULK_ROWS: i64 = 1_000;

fn create_table(citus: &CitusCluster) {
    citus
        .client()
        .batch_execute(
            "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(5), v int);
             SELECT create_distributed_table('t', 'id');",
        )
        .expect("create the distributed table");
}

/// Rows inserted through the coordinator get their IDs there, from the shard it owns, and are
/// spread over both workers' shard placements: all there, all distinct. An insert sent to a
/// worker evaluates the DEFAULT on that worker, which does not own shard 5, and fails.
#[test]
fn distributed_table_keyed_by_snowid_ids_from_the_coordinator() {
    skip_without_citus!();
    let started = Instant::now();
    let citus = CitusCluster::start("5", &["0-4", "6-99"]);
    println!(
        "a coordinator and 2 workers started and joined in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    create_table(&citus);

    thread::scope(|scope| {
        for client in 0..CLIENTS {
            let citus = &citus;
            scope.spawn(move || {
                let mut db = citus.client();
                let insert = db.prepare("INSERT INTO t (v) VALUES ($1)").unwrap();
                for n in 0..ROWS_PER_CLIENT {
                    db.execute(&insert, &[&(client * ROWS_PER_CLIENT + n)])
                        .unwrap();
                }
            });
        }
        scope.spawn(|| {
            // The SELECT runs on the coordinator, so the DEFAULT is evaluated there.
            citus
                .client()
                .execute(
                    "INSERT INTO t (v) SELECT -g FROM generate_series(1, $1::bigint) g",
                    &[&BULK_ROWS],
                )
                .unwrap();
        });
    });

    let expected = i64::from(CLIENTS * ROWS_PER_CLIENT) + BULK_ROWS;
    let mut db = citus.client();
    let row = db
        .query_one(
            "SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE snowid_shard(id) = 5)
             FROM t",
            &[],
        )
        .unwrap();
    let (rows, distinct, from_shard_5): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(rows, expected, "rows lost or duplicated");
    assert_eq!(distinct, expected, "duplicate IDs");
    assert_eq!(from_shard_5, expected, "IDs from a shard other than 5");

    // Count on the shard placements themselves, per worker.
    let per_node = db
        .query(
            "SELECT s.nodeport, sum(r.result::bigint)::bigint
             FROM run_command_on_shards('t', 'SELECT count(*) FROM %s') r
             JOIN citus_shards s USING (shardid)
             GROUP BY s.nodeport ORDER BY s.nodeport",
            &[],
        )
        .unwrap();
    let per_node: Vec<(i32, i64)> = per_node.iter().map(|r| (r.get(0), r.get(1))).collect();
    let mut worker_ports: Vec<i32> = citus.workers.iter().map(|w| i32::from(w.port)).collect();
    worker_ports.sort();
    assert_eq!(
        per_node.iter().map(|(port, _)| *port).collect::<Vec<_>>(),
        worker_ports,
        "rows are not on both workers: {per_node:?}"
    );
    assert!(per_node.iter().all(|(_, n)| *n > 0), "{per_node:?}");
    assert_eq!(per_node.iter().map(|(_, n)| n).sum::<i64>(), expected);
    println!("rows per worker (port, rows): {per_node:?}");

    let on_worker = citus.workers[0]
        .client()
        .execute("INSERT INTO t (v) VALUES (0)", &[])
        .expect_err("a worker does not own shard 5");
    let message = on_worker
        .as_db_error()
        .map(|e| e.message().to_owned())
        .unwrap_or_default();
    assert!(
        message.contains("snowid shard 5 is not owned by this server"),
        "{on_worker}"
    );
}

/// `citus_move_shard_placement` moves a shard of the table between the two workers (logical
/// replication, which needs `wal_level = logical`) while a client keeps inserting through the
/// coordinator: every insert succeeds and every row is there afterwards.
#[test]
fn shard_move_between_workers_while_inserting() {
    skip_without_citus!();
    let citus = CitusCluster::start("5", &["0-4", "6-99"]);
    create_table(&citus);
    citus
        .client()
        .batch_execute("INSERT INTO t (v) SELECT g FROM generate_series(1, 1000) g")
        .unwrap();
    let (from, to) = (citus.workers[0].port, citus.workers[1].port);
    let shard = citus
        .placements("t")
        .into_iter()
        .find(|(_, port)| *port == from)
        .map(|(shard, _)| shard)
        .expect("a shard placement on the first worker");

    let stop = AtomicBool::new(false);
    let inserted = AtomicUsize::new(0);
    let ids = Mutex::new(Vec::new());
    let (during, took) = thread::scope(|scope| {
        let inserter = scope.spawn(|| {
            let mut db = citus.client();
            let insert = db
                .prepare("INSERT INTO t (v) VALUES (1) RETURNING id")
                .unwrap();
            let mut mine = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let id: i64 = db.query_one(&insert, &[]).unwrap().get(0);
                mine.push(id);
                inserted.fetch_add(1, Ordering::Relaxed);
            }
            *ids.lock().unwrap() = mine;
        });
        while inserted.load(Ordering::Relaxed) < 100 && !inserter.is_finished() {
            thread::sleep(Duration::from_millis(10));
        }
        let before = inserted.load(Ordering::Relaxed);
        let started = Instant::now();
        let moved = citus.move_shard(shard, from, to, "auto");
        let took = started.elapsed();
        let during = inserted.load(Ordering::Relaxed) - before;
        thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
        inserter
            .join()
            .expect("every insert during the move succeeds");
        moved.expect("citus_move_shard_placement");
        (during, took)
    });
    println!(
        "moved shard {shard} from port {from} to {to} in {:.2} s; {during} rows inserted meanwhile",
        took.as_secs_f64()
    );
    assert!(during > 0, "no insert overlapped the move");
    assert!(citus.placements("t").contains(&(shard, to)));
    assert!(!citus.placements("t").contains(&(shard, from)));

    let ids = ids.into_inner().unwrap();
    let unique: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "duplicate IDs returned");
    let mut db = citus.client();
    let row = db
        .query_one("SELECT count(*), count(DISTINCT id) FROM t", &[])
        .unwrap();
    let expected = 1000 + ids.len() as i64;
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (expected, expected)
    );
    let found: i64 = db
        .query_one("SELECT count(*) FROM t WHERE id = ANY($1)", &[&ids])
        .unwrap()
        .get(0);
    assert_eq!(
        found,
        ids.len() as i64,
        "rows inserted during the move are missing"
    );
}
