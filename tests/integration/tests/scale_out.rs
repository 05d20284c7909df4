//! Several servers, shard ownership, and the running state in snowid_info() and snowid_stats().

use snowid_integration::{create_worker_pid, parallel_settings, set_and_reload, Cluster};
use std::thread;

const CLIENTS_PER_SERVER: i32 = 4;
const ROWS_PER_CLIENT: i32 = 2_500;

/// Guards against the one way snowflake IDs collide across servers, two servers generating for
/// the same shard, and proves that disjoint `snowid.shards` need no coordination: three servers
/// on loopback, four concurrent clients each, inserting with `DEFAULT snowid_next(<owned shard>)`.
/// All rows merged into one primary key: none lost, none duplicated, and each client's IDs
/// increase in the order it inserted them. A server refuses a shard it does not own.
#[test]
fn three_servers_with_disjoint_shards_never_collide() {
    let servers = [("0-99", 7), ("100-199", 150), ("4000-4095,5000", 5000)];
    let clusters: Vec<Cluster> = servers
        .iter()
        .map(|(shards, shard)| {
            let cluster = Cluster::preloaded(&[("snowid.shards", &format!("'{shards}'"))]);
            cluster
                .client()
                .batch_execute(&format!(
                    "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowid_next({shard}),
                                          client int NOT NULL, n int NOT NULL)"
                ))
                .unwrap();
            cluster
        })
        .collect();

    thread::scope(|scope| {
        for cluster in &clusters {
            for client in 0..CLIENTS_PER_SERVER {
                scope.spawn(move || {
                    let mut db = cluster.client();
                    let insert = db
                        .prepare("INSERT INTO events (client, n) VALUES ($1, $2)")
                        .unwrap();
                    for n in 0..ROWS_PER_CLIENT {
                        db.execute(&insert, &[&client, &n]).unwrap();
                    }
                });
            }
        }
    });

    let mut merged = clusters[0].client();
    merged
        .batch_execute(
            "CREATE TABLE merged (id bigint PRIMARY KEY, server int NOT NULL, client int NOT NULL,
                                  n int NOT NULL)",
        )
        .unwrap();
    for (server, cluster) in clusters.iter().enumerate() {
        let rows = cluster
            .client()
            .query("SELECT id, client, n FROM events", &[])
            .unwrap();
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let client: Vec<i32> = rows.iter().map(|r| r.get(1)).collect();
        let n: Vec<i32> = rows.iter().map(|r| r.get(2)).collect();
        merged
            .execute(
                "INSERT INTO merged SELECT id, $1, client, n
                 FROM unnest($2::bigint[], $3::int[], $4::int[]) AS u(id, client, n)",
                &[&(server as i32), &ids, &client, &n],
            )
            .expect("no ID repeats across servers");
    }
    let row = merged
        .query_one(
            "SELECT count(*), count(DISTINCT id), count(DISTINCT snowid_shard(id)),
                    count(*) FILTER (WHERE id <= prev)
             FROM (SELECT id, lag(id) OVER (PARTITION BY server, client ORDER BY n) AS prev
                   FROM merged) s",
            &[],
        )
        .unwrap();
    let expected = i64::from(3 * CLIENTS_PER_SERVER * ROWS_PER_CLIENT);
    snowid_integration::assert_counts(
        &row,
        &[
            (expected, "every row arrived"),
            (expected, "no duplicates"),
            (3, "one shard per server"),
            (0, "each client's IDs increase in insert order"),
        ],
    );

    let err = clusters[0]
        .client()
        .query_one("SELECT snowid_next(150)", &[])
        .unwrap_err();
    let db_err = err.as_db_error().expect("a server error");
    assert_eq!(db_err.code().code(), "55000");
    assert_eq!(
        db_err.message(),
        "snowid shard 150 is not owned by this server"
    );
    assert_eq!(db_err.detail(), Some("snowid.shards is '0-99'."));
    assert!(
        db_err.hint().unwrap().contains("snowid_release(150)"),
        "the hint says how to hand the shard over: {db_err:?}"
    );
}

/// Guards against a shard set that cannot change without a restart, or that takes a typo as
/// "every shard": `snowid.shards` follows a reload, refuses malformed values in ALTER SYSTEM, and
/// a malformed value in postgresql.conf stops the server from starting.
#[test]
fn the_shard_set_reloads_and_refuses_malformed_values() {
    let mut cluster = Cluster::preloaded(&[("snowid.shards", "'0-9'")]);
    let mut db = cluster.client();
    let err = db.query_one("SELECT snowid_next(10)", &[]).unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code().code(), "55000");

    set_and_reload(&mut db, "snowid.shards", "0-9, 10", "0-9, 10");
    let shard: i32 = db
        .query_one("SELECT snowid_shard(snowid_next(10))", &[])
        .unwrap()
        .get(0);
    assert_eq!(shard, 10, "the reload took effect");
    let shards: String = db
        .query_one("SELECT shards FROM snowid_info()", &[])
        .unwrap()
        .get(0);
    assert_eq!(shards, "0-10", "shown in canonical form");

    let err = db
        .batch_execute("ALTER SYSTEM SET snowid.shards = '5-3'")
        .unwrap_err();
    let db_err = err.as_db_error().unwrap();
    assert_eq!(db_err.code().code(), "22023");
    assert_eq!(db_err.detail(), Some("The range \"5-3\" runs backwards."));
    let err = db.batch_execute("SET snowid.shards = '1'").unwrap_err();
    assert_eq!(
        err.as_db_error().unwrap().code().code(),
        "55P02",
        "not settable per session"
    );

    db.batch_execute("ALTER SYSTEM RESET snowid.shards")
        .unwrap();
    cluster.stop("fast");
    cluster.set("snowid.shards", "'0-9000'");
    let log = cluster
        .start()
        .expect_err("a malformed shard set must not start");
    assert!(
        log.contains("invalid value for parameter \"snowid.shards\""),
        "{log}"
    );
    assert!(log.contains("Shard 9000 is out of range"), "{log}");
}

/// Guards against an opaque running state: snowid_info() reports the layout, settings, time base
/// and high-water mark; snowid_stats() reports per shard the last ID, the count issued and the
/// throttled waits, and nothing for unused shards.
#[test]
fn info_and_stats_describe_the_running_state() {
    let cluster = Cluster::preloaded(&[("snowid.shards", "'40-49'"), ("snowid.max_lead", "0")]);
    let mut db = cluster.client();
    db.batch_execute(
        "SELECT count(snowid_next(42)) FROM generate_series(1, 1000);
         SELECT snowid_next(43) FROM generate_series(1, 10);
         SELECT count(snowid_next(44)) FROM generate_series(1, 5000);",
    )
    .unwrap();
    let last_43: i64 = db.query_one("SELECT snowid_next(43)", &[]).unwrap().get(0);

    let info = db
        .query_one(
            "SELECT epoch = '2026-01-01 00:00:00+00', layout, ids_per_ms,
                    exhausted_at = '2060-11-03 19:53:47.776+00', max_lead = '0', shards,
                    generating, abs(extract(epoch FROM time_base - clock_timestamp())) < 5,
                    high_water_mark > time_base, lease_writes >= 1, clock_steps_back
             FROM snowid_info()",
            &[],
        )
        .unwrap();
    assert!(info.get::<_, bool>(0));
    assert_eq!(info.get::<_, String>(1), "41/13/10");
    assert_eq!(info.get::<_, i32>(2), 1024);
    assert!(info.get::<_, bool>(3), "exhaustion date");
    assert!(info.get::<_, bool>(4), "max_lead");
    assert_eq!(info.get::<_, String>(5), "40-49");
    assert_eq!(info.get::<_, String>(6), "yes");
    assert!(info.get::<_, bool>(7), "time base is now");
    assert!(
        info.get::<_, bool>(8) && info.get::<_, bool>(9),
        "the high-water mark is ahead, and written"
    );
    assert_eq!(info.get::<_, i64>(10), 0);

    let rows = db
        .query(
            "SELECT shard, ids_issued, throttled_waits, last_id = $1 AND last_ts = snowid_timestamp($1)
                    AND last_seq = snowid_seq($1), released
             FROM snowid_stats() ORDER BY shard",
            &[&last_43],
        )
        .unwrap();
    let stats: Vec<(i32, i64, i64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(stats.len(), 3, "{stats:?}");
    assert_eq!(stats[0], (42, 1000, 0));
    assert_eq!(stats[1], (43, 11, 0));
    assert!(
        rows[1].get::<_, bool>(3),
        "shard 43's last ID is the one we saw"
    );
    assert_eq!((stats[2].0, stats[2].1), (44, 5000));
    assert!(stats[2].2 > 0, "a burst at lead 0 waits");
    assert!(
        rows.iter().all(|r| !r.get::<_, bool>(4)),
        "nothing released"
    );
}

/// Guards against a parallel worker drawing `snowid_next()` from a shard of its own (0.2.0 picked
/// the shard by the worker's backend number), which puts one statement's IDs on several shards
/// and breaks "one session's IDs strictly increase": a parallel scan on a server owning 10-13
/// evaluates `snowid_next()` in its workers, and every ID lands on the leader's shard. Each row
/// says which process computed it (`worker_pid()`), so the statement whose IDs are checked shows
/// that workers computed some of them.
#[test]
fn parallel_workers_draw_from_their_leaders_shard() {
    let cluster = Cluster::preloaded(&[("snowid.shards", "'10-13'")]);
    let mut db = cluster.client();
    create_worker_pid(&mut db);
    db.batch_execute(&format!(
        "CREATE TABLE big AS SELECT g FROM generate_series(1, 300000) g;
         ANALYZE big;
         {}",
        parallel_settings(3)
    ))
    .unwrap();
    let row = db
        .query_one(
            "SELECT count(DISTINCT shard), min(shard), count(*), count(DISTINCT id),
                    count(*) FILTER (WHERE pid <> pg_backend_pid())
             FROM (SELECT snowid_shard(snowid_next()) AS shard, snowid_next() AS id,
                          worker_pid() AS pid
                   FROM big WHERE g > 0) s",
            &[],
        )
        .unwrap();
    assert!(
        row.get::<_, i64>(4) > 0,
        "parallel workers computed rows of the statement checked (the test is sharp)"
    );
    assert_eq!(row.get::<_, i64>(0), 1, "one shard for the whole statement");
    let leader_shard: i32 = db
        .query_one("SELECT snowid_shard(snowid_next())", &[])
        .unwrap()
        .get(0);
    assert_eq!(row.get::<_, i32>(1), leader_shard, "the leader's");
    assert_eq!(row.get::<_, i64>(2), row.get::<_, i64>(3), "all distinct");
}
