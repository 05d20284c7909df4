//! snowid_next against a real preloaded server with real clients: concurrency, bulk inserts,
//! parallel workers, and the shard-range edges.

use snowid_integration::{create_worker_pid, parallel_settings, Cluster};
use std::thread;

const TABLE: &str = "CREATE TABLE t (
    id bigint PRIMARY KEY DEFAULT snowid_next(5),
    client int NOT NULL,
    n int NOT NULL
)";

/// Guards against duplicates across connections (the per-backend-counter bug) and against lost
/// rows: eight sessions insert row by row in small transactions while a ninth bulk-inserts
/// 300,000 rows, all on shard 5 into one primary key. A duplicate would abort an insert with
/// 23505; every row must arrive, and each session's IDs must increase in its own order.
#[test]
fn concurrent_sessions_and_a_bulk_insert_on_one_shard_never_collide() {
    let cluster = Cluster::preloaded(&[]);
    cluster.client().batch_execute(TABLE).unwrap();
    let (clients, rows_each, bulk) = (8, 4_000, 300_000);

    thread::scope(|scope| {
        for client in 0..clients {
            let cluster = &cluster;
            scope.spawn(move || {
                let mut db = cluster.client();
                for batch in 0..rows_each / 100 {
                    let mut tx = db.transaction().unwrap();
                    let insert = tx
                        .prepare("INSERT INTO t (client, n) VALUES ($1, $2)")
                        .unwrap();
                    for i in 0..100 {
                        tx.execute(&insert, &[&client, &(batch * 100 + i)]).unwrap();
                    }
                    tx.commit().unwrap();
                }
            });
        }
        scope.spawn(|| {
            cluster
                .client()
                .execute(
                    "INSERT INTO t (client, n) SELECT -1, g FROM generate_series(1, $1) g",
                    &[&bulk],
                )
                .unwrap();
        });
    });

    let row = cluster
        .client()
        .query_one(
            "SELECT count(*), count(DISTINCT id), min(snowid_shard(id)), max(snowid_shard(id)),
                    count(*) FILTER (WHERE id <= prev)
             FROM (SELECT id, lag(id) OVER (PARTITION BY client ORDER BY n) AS prev FROM t) s",
            &[],
        )
        .unwrap();
    let expected = i64::from(clients * rows_each + bulk);
    assert_eq!(row.get::<_, i64>(0), expected, "every row arrived");
    assert_eq!(row.get::<_, i64>(1), expected, "no duplicate IDs");
    assert_eq!(
        (row.get::<_, i32>(2), row.get::<_, i32>(3)),
        (5, 5),
        "all on shard 5"
    );
    assert_eq!(
        row.get::<_, i64>(4),
        0,
        "each session's IDs increase in its insert order"
    );
}

/// Guards against wrap-around inside a millisecond (Instagram's `nextval() % 1024`): one
/// statement asks for 250,000 IDs, hundreds of times the 1,024 a millisecond holds; each must
/// be greater than the one before.
#[test]
fn one_statement_of_250k_ids_strictly_increases() {
    let cluster = Cluster::preloaded(&[]);
    let row = cluster
        .client()
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE id > prev), count(DISTINCT id), min(id)
             FROM (SELECT id, lag(id) OVER (ORDER BY n) AS prev
                   FROM (SELECT n, snowid_next(11) AS id FROM generate_series(1, 250000) n) g) s",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 250_000);
    assert_eq!(
        row.get::<_, i64>(1),
        249_999,
        "every ID is greater than the previous one"
    );
    assert_eq!(row.get::<_, i64>(2), 250_000);
    assert!(row.get::<_, i64>(3) > 0, "IDs are positive");
}

/// Guards against state that is per process rather than shared: parallel workers call
/// snowid_next on the same shard as the leader. Each row says which process computed its ID
/// (`worker_pid()`), so the very statement whose IDs are checked shows that workers other than
/// the leader issued them; and the IDs must all differ.
#[test]
fn parallel_workers_share_the_shard_state() {
    let cluster = Cluster::preloaded(&[]);
    let mut db = cluster.client();
    create_worker_pid(&mut db);
    db.batch_execute(&format!(
        "CREATE TABLE big AS SELECT g FROM generate_series(1, 400000) g;
         ANALYZE big;
         {}",
        parallel_settings(2)
    ))
    .unwrap();
    let row = db
        .query_one(
            "SELECT count(*), count(DISTINCT id), count(DISTINCT pid),
                    count(*) FILTER (WHERE pid <> pg_backend_pid())
             FROM (SELECT snowid_next(7) AS id, worker_pid() AS pid FROM big) s",
            &[],
        )
        .unwrap();
    assert!(
        row.get::<_, i64>(2) >= 2 && row.get::<_, i64>(3) > 0,
        "parallel workers computed IDs in the statement checked (the test is sharp): {} \
         processes, {} IDs from workers",
        row.get::<_, i64>(2),
        row.get::<_, i64>(3)
    );
    assert_eq!(row.get::<_, i64>(0), 400_000);
    assert_eq!(
        row.get::<_, i64>(1),
        400_000,
        "no duplicates across workers"
    );
}

#[test]
fn shard_edges() {
    let cluster = Cluster::preloaded(&[]);
    let mut db = cluster.client();
    for shard in [0, 8191] {
        let row = db
            .query_one(
                "SELECT snowid_shard(snowid_next($1::int)), snowid_next($1::int) > 0",
                &[&shard],
            )
            .unwrap();
        assert_eq!(row.get::<_, i32>(0), shard);
        assert!(row.get::<_, bool>(1));
    }
    for shard in [-1, 8192, i32::MAX] {
        let err = db
            .query_one("SELECT snowid_next($1::int)", &[&shard])
            .unwrap_err();
        let db_err = err.as_db_error().expect("a server error");
        assert_eq!(db_err.code().code(), "22003", "{db_err}");
        assert_eq!(
            db_err.message(),
            format!("snowid shard {shard} is out of range")
        );
        assert!(db_err.detail().unwrap().contains("0 to 8191"), "{db_err:?}");
        assert_eq!(
            db_err.file(),
            Some("generate.rs"),
            "the report names the place that raised it, not the errors module"
        );
    }
}

/// Guards against encoding and decoding disagreeing: for several shards, the parsed shard is the
/// one asked for, the sequence is in range, and the timestamp is within seconds of the clock.
#[test]
fn next_and_parse_round_trip() {
    let cluster = Cluster::preloaded(&[]);
    let mut db = cluster.client();
    for shard in [0, 1, 5, 42, 1023, 4096, 8191] {
        let row = db
            .query_one(
                "SELECT (p).shard, (p).seq,
                        abs(extract(epoch FROM (p).ts - clock_timestamp()))::float8
                 FROM (SELECT snowid_parse(snowid_next($1::int)) AS p) s",
                &[&shard],
            )
            .unwrap();
        assert_eq!(row.get::<_, i32>(0), shard);
        assert!((0..1024).contains(&row.get::<_, i32>(1)));
        let skew: f64 = row.get(2);
        assert!(skew < 5.0, "timestamp is {skew} s away from now");
    }
}
