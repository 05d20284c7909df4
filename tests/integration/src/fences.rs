//! What the tests of fences share: servers whose state is lost or damaged, or that `pg_upgrade`
//! made, the checks that they refuse (55000, with the hint naming the one statement that
//! resumes) or generate above every earlier ID, the resume itself, and a second server for
//! hand-offs. Every server's wall clock runs 10 minutes behind the IDs already issued when it
//! starts again, so that a server that generates from its clock issues IDs below the old ones.

use crate::postgres::{Client, Error};
use crate::{code, Cluster, Watchdog};
use snowid_core::epoch::DEFAULT_EPOCH_UNIX_MS;
use std::fs;
use std::time::Duration;

pub const DEADLINE: Duration = Duration::from_secs(60);
pub const EPOCH: i64 = DEFAULT_EPOCH_UNIX_MS;
/// The relation file that holds snowid's durable state.
pub const STATE: &str = "global/9128";
pub const PAGE: usize = 8192;
pub const FENCED: &str =
    "snowid will not generate IDs until a superuser resumes above the IDs already issued";
pub const RESUME: &str = "SELECT * FROM snowid_resume_above_columns();";
/// How far behind the IDs already issued a server's clock is when it starts again.
pub const BEHIND: &str = "-10m";
/// How far ahead of the clock the tests' resumes accept a key: the clock set back, and a minute.
pub const ACCEPTED_AHEAD: &str = "11 minutes";

/// When an ID issued under the default epoch was made, in Unix milliseconds: its top 41 bits.
pub fn unix_ms_of(id: i64) -> i64 {
    (id >> 23) + EPOCH
}
/// A server error as `SQLSTATE message (detail) [hint]`, or the client error.
pub fn describe(err: &Error) -> String {
    match err.as_db_error() {
        Some(e) => format!(
            "{} {} ({}) [{}]",
            e.code().code(),
            e.message(),
            e.detail().unwrap_or(""),
            e.hint().unwrap_or("")
        ),
        None => err.to_string(),
    }
}

pub fn start(cluster: &mut Cluster) {
    cluster
        .start()
        .unwrap_or_else(|log| panic!("the server did not start:\n{log}"));
}

pub fn restart(cluster: &mut Cluster, mode: &str) {
    cluster.stop(mode);
    start(cluster);
}

/// The server refuses shard `shard` because it was released (55000, "was released").
pub fn assert_released(db: &mut Client, shard: i32, when: &str) {
    match db.query_one("SELECT snowid_next($1::int)", &[&shard]) {
        Ok(row) => panic!(
            "{when}: snowid_next({shard}) issued {} for a released shard",
            row.get::<_, i64>(0)
        ),
        Err(err) => {
            assert_eq!(code(&err), "55000", "{when}: {}", describe(&err));
            assert_eq!(
                err.as_db_error().unwrap().message(),
                format!("snowid shard {shard} was released"),
                "{when}"
            );
        }
    }
}

/// The highest ID of a table.
pub fn max_of(db: &mut Client, table: &str) -> i64 {
    db.query_one(&format!("SELECT max(id) FROM {table}"), &[])
        .unwrap()
        .get(0)
}

pub fn max_id(db: &mut Client) -> i64 {
    db.query_one("SELECT max(id) FROM t", &[]).unwrap().get(0)
}

pub fn generating(db: &mut Client) -> String {
    db.query_one("SELECT generating FROM snowid_info()", &[])
        .unwrap()
        .get(0)
}

/// `n` new IDs for `shard`, in the order they were issued; the statement must succeed.
pub fn next_ids(db: &mut Client, shard: i32, n: i32) -> Vec<i64> {
    let _watchdog = Watchdog::new(db, DEADLINE);
    db.query(
        "SELECT snowid_next($1::int) FROM generate_series(1, $2)",
        &[&shard, &n],
    )
    .unwrap_or_else(|e| panic!("snowid_next({shard}) must generate: {}", describe(&e)))
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Every one of 1,000 new IDs for `shard` is above `old_max`; returns the highest.
pub fn assert_generates_above(db: &mut Client, shard: i32, old_max: i64, when: &str) -> i64 {
    let ids = next_ids(db, shard, 1000);
    let below = ids.iter().filter(|&&id| id <= old_max).count();
    assert_eq!(
        below, 0,
        "{when}: {below} of 1000 new IDs for shard {shard} at or below {old_max}"
    );
    *ids.iter().max().unwrap()
}

/// A server that should have refused issued `first` instead: fails the test, saying how many of
/// 1,001 IDs came out at or below `old_max`.
pub fn issued_instead_of_refusing(
    db: &mut Client,
    shard: i32,
    first: i64,
    old_max: i64,
    when: &str,
) -> ! {
    let mut ids = vec![first];
    {
        let _watchdog = Watchdog::new(db, DEADLINE);
        if let Ok(rows) = db.query(
            "SELECT snowid_next($1::int) FROM generate_series(1, 1000)",
            &[&shard],
        ) {
            ids.extend(rows.iter().map(|r| r.get::<_, i64>(0)));
        }
    }
    let below = ids.iter().filter(|&&id| id <= old_max).count();
    panic!(
        "{when}: snowid_next({shard}) issued IDs instead of refusing with 55000: {below} of {} \
         at or below the old max {old_max}",
        ids.len()
    );
}

/// The refusal this file is about: SQLSTATE 55000, the exact message, and a hint naming the
/// command that resumes.
pub fn assert_fence_error(err: &Error, what: &str) {
    assert_eq!(code(err), "55000", "{what}: {}", describe(err));
    let e = err.as_db_error().unwrap();
    assert_eq!(e.message(), FENCED, "{what}: {}", describe(err));
    assert!(
        e.hint().is_some_and(|h| h.contains(RESUME)),
        "{what}: the hint names the exact command: {}",
        describe(err)
    );
}

/// The server refuses to generate, for `snowid_next` and for a column default, and
/// `snowid_info()` says it is fenced.
pub fn assert_refuses(cluster: &Cluster, shard: i32, old_max: i64, when: &str) {
    let mut db = cluster.client();
    match db.query_one("SELECT snowid_next($1::int)", &[&shard]) {
        Ok(row) => issued_instead_of_refusing(&mut db, shard, row.get(0), old_max, when),
        Err(err) => assert_fence_error(&err, &format!("{when}: snowid_next({shard})")),
    }
    match db.execute("INSERT INTO t DEFAULT VALUES", &[]) {
        Ok(_) => panic!(
            "{when}: INSERT ... DEFAULT VALUES inserted a row (ID {}) instead of refusing",
            max_id(&mut db)
        ),
        Err(err) => assert_fence_error(&err, &format!("{when}: INSERT ... DEFAULT VALUES")),
    }
    let generating = generating(&mut db);
    assert!(
        generating.starts_with("no: fenced"),
        "{when}: snowid_info() says generating = {generating:?}"
    );
}

/// A row of `snowid_resume_above_columns()`: database, table, column, highest value.
pub type KeyColumn = (String, Option<String>, Option<String>, Option<i64>);

/// Runs the one statement a fence's hint names, `SELECT * FROM snowid_resume_above_columns()`,
/// accepting keys dated up to [`ACCEPTED_AHEAD`] ahead of the clock (the next step its refusal
/// names where they are: the servers of these tests restart with their clocks [`BEHIND`] the
/// IDs they issued), and returns its rows; it must succeed.
pub fn resume_rows(db: &mut Client) -> Vec<KeyColumn> {
    db.query(
        &format!("SELECT * FROM snowid_resume_above_columns(accept_ahead => '{ACCEPTED_AHEAD}')"),
        &[],
    )
    .unwrap_or_else(|e| panic!("resuming: {}", describe(&e)))
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

/// A key column as `snowid_resume_above_columns()` lists it.
pub fn key_column(database: &str, table: &str, max_id: i64) -> KeyColumn {
    (
        database.to_string(),
        Some(table.to_string()),
        Some("id".to_string()),
        Some(max_id),
    )
}

/// `snowid_resume_above_columns()` finds `t.id` at `old_max` in database `postgres`, and
/// nothing else, and resumes.
pub fn resume(db: &mut Client, old_max: i64) {
    assert_eq!(
        resume_rows(db),
        [key_column("postgres", "public.t", old_max)]
    );
}

/// A preloaded cluster with a faked wall clock (still right), a table `t` keyed by
/// `snowid_next(shard)`, and `rows` rows in it.
pub fn cluster_with_rows(shard: i32, rows: i32) -> Cluster {
    let mut cluster = Cluster::init_preloaded_with_fake_clock();
    start(&mut cluster);
    cluster
        .client()
        .batch_execute(&format!(
            "CREATE EXTENSION snowid;
             CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next({shard}));
             INSERT INTO t SELECT FROM generate_series(1, {rows});"
        ))
        .unwrap();
    cluster
}

/// The server's clock really is minutes behind `id` (the test is sharp).
pub fn assert_clock_behind(db: &mut Client, id: i64) {
    let ahead: f64 = db
        .query_one(
            "SELECT extract(epoch FROM snowid_timestamp($1::bigint) - clock_timestamp())::float8",
            &[&id],
        )
        .unwrap()
        .get(0);
    assert!(
        ahead > 500.0,
        "the ID {id} is dated {ahead} s past the server's clock, not minutes"
    );
}

/// What can happen to `global/9128` while the server is stopped.
#[derive(Clone, Copy, Debug)]
pub enum Damage {
    Deleted,
    TruncatedToZeroBytes,
    CutToItsFirstPage,
    EveryPageZeroed,
    Block0Zeroed,
    /// One byte of block 0's contents flipped: the page fails its checksum.
    Block0ByteFlipped,
}

pub fn damage(cluster: &Cluster, damage: Damage) {
    let bytes = fs::read(cluster.pgdata().join(STATE)).expect("read the state's pages");
    assert!(
        bytes.len() > PAGE && bytes.len().is_multiple_of(PAGE),
        "the state is whole pages, more than one, before the damage: {} bytes",
        bytes.len()
    );
    assert!(
        bytes.iter().any(|&b| b != 0),
        "the state holds something before the damage"
    );
    match damage {
        Damage::Deleted => cluster.remove_file(STATE),
        Damage::TruncatedToZeroBytes => cluster.put_file(STATE, &[]),
        Damage::CutToItsFirstPage => cluster.put_file(STATE, &bytes[..PAGE]),
        Damage::EveryPageZeroed => cluster.put_file(STATE, &vec![0; bytes.len()]),
        Damage::Block0Zeroed => {
            let mut zeroed = bytes;
            zeroed[..PAGE].fill(0);
            cluster.put_file(STATE, &zeroed);
        }
        Damage::Block0ByteFlipped => {
            let mut flipped = bytes;
            // Inside the state's header, after PostgreSQL's 24-byte page header.
            flipped[24 + 20] ^= 0x40;
            cluster.put_file(STATE, &flipped);
        }
    }
}

/// A new database `name` with snowid created in it and `sql` run there; a connection to it.
pub fn new_database_with_snowid(cluster: &Cluster, name: &str, sql: &str) -> Client {
    cluster
        .client()
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let mut db = cluster.client_of(name);
    db.batch_execute(&format!("CREATE EXTENSION snowid; {sql}"))
        .unwrap_or_else(|e| panic!("in database {name}: {}", describe(&e)));
    db
}

/// The state deleted while stopped, the clock set 10 minutes behind, started: fenced.
pub fn lose_the_state(cluster: &mut Cluster, shard: i32, old_max: i64) {
    cluster.stop("fast");
    damage(cluster, Damage::Deleted);
    cluster.set_wall_clock_offset(BEHIND);
    start(cluster);
    assert_refuses(cluster, shard, old_max, "the state lost");
}

/// A second server whose clock is 10 minutes behind, that owns every shard.
pub fn server_b() -> Cluster {
    server_with_clock(BEHIND)
}

/// A started server with snowid created, whose wall clock runs `offset` (such as `+10m`) from
/// real time, that owns every shard.
pub fn server_with_clock(offset: &str) -> Cluster {
    let mut b = Cluster::init();
    b.fake_wall_clock();
    b.set_wall_clock_offset(offset);
    b.set("shared_preload_libraries", "'snowid'");
    start(&mut b);
    b.client().batch_execute("CREATE EXTENSION snowid").unwrap();
    b
}

/// `snowid_release(7)` must be refused (55000, with a hint): the server does not know its last
/// ID for shard 7.
pub fn assert_release_refused(a: &Cluster, a_max: i64, when: &str) {
    match a.client().query_one("SELECT snowid_release(7)", &[]) {
        Ok(row) => panic!(
            "{when}: snowid_release(7) returned {} instead of refusing; A's shard-7 IDs go up \
             to {a_max}",
            row.get::<_, i64>(0)
        ),
        Err(err) => {
            assert_eq!(code(&err), "55000", "{when}: {}", describe(&err));
            let hint = err.as_db_error().unwrap().hint().unwrap_or("");
            assert!(
                !hint.trim().is_empty(),
                "{when}: the refusal has a hint: {}",
                describe(&err)
            );
        }
    }
}

/// The hand-off of `shard` that docs/operations.md gives, once A knows its IDs again:
/// `snowid_release(shard)` on A returns an ID at or above every one of A's IDs for it (`a_max` the
/// highest), and B, its clock 10 minutes behind, resumes above it and issues IDs for it above all
/// of A's.
pub fn hand_off(a: &Cluster, shard: i32, a_max: i64) {
    let last: i64 = a
        .client()
        .query_one("SELECT snowid_release($1)", &[&shard])
        .unwrap_or_else(|e| panic!("snowid_release({shard}) once A knows: {}", describe(&e)))
        .get(0);
    assert!(
        last >= a_max,
        "snowid_release({shard}) returned {last}, below A's shard-{shard} ID {a_max}"
    );
    let b = server_b();
    let mut on_b = b.client();
    assert_clock_behind(&mut on_b, a_max);
    on_b.query_one("SELECT snowid_resume_above($1)", &[&last])
        .unwrap_or_else(|e| panic!("resume above on B: {}", describe(&e)));
    assert_generates_above(&mut on_b, shard, a_max, "B, after the hand-off");
}

/// Whether this build has pg_upgrade; if not, reports the test as not run.
pub fn has_pg_upgrade(test: &str) -> bool {
    let bin_dir = pg_bin_dir();
    if bin_dir.join("pg_upgrade").exists() {
        crate::ran(test);
        return true;
    }
    crate::not_run(
        test,
        &format!(
            "this PostgreSQL build has no pg_upgrade ({}); the other majors run it",
            bin_dir.display()
        ),
    );
    false
}

/// The bin directory of the PostgreSQL the tests run against, as the harness finds it.
pub fn pg_bin_dir() -> std::path::PathBuf {
    let pg_config = std::env::var("SNOWID_PG_CONFIG")
        .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_config".into());
    let out = std::process::Command::new(&pg_config)
        .arg("--bindir")
        .output()
        .expect("run pg_config");
    std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A stopped old cluster with snowid preloaded, a faked clock and 1,000 rows keyed by
/// `snowid_next(shard)`, and a fresh new cluster with snowid preloaded, its clock 10 minutes
/// behind. Returns both and the old rows' highest ID.
pub fn clusters_to_upgrade(old: Cluster, shard: i32) -> (Cluster, Cluster, i64) {
    clusters_to_upgrade_from(old, "CREATE EXTENSION snowid", shard)
}

/// [`clusters_to_upgrade`], with the extension created in the old cluster by `create` (an earlier
/// version's SQL, say).
pub fn clusters_to_upgrade_from(
    mut old: Cluster,
    create: &str,
    shard: i32,
) -> (Cluster, Cluster, i64) {
    old.fake_wall_clock();
    old.set("shared_preload_libraries", "'snowid'");
    start(&mut old);
    let mut db = old.client();
    db.batch_execute(&format!(
        "{create};
         CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next({shard}));
         INSERT INTO t SELECT FROM generate_series(1, 1000);"
    ))
    .unwrap();
    let old_max = max_id(&mut db);
    drop(db);
    old.stop("fast");
    let new = Cluster::init_preloaded_with_fake_clock();
    new.set_wall_clock_offset(BEHIND);
    (old, new, old_max)
}

/// A cluster with `t` keyed by shard 8 in `postgres`, and `owner1`'s database `zdb` (the last by
/// name) with snowid; a connection of `owner1` there that holds `DROP EXTENSION snowid` open,
/// and so a lock on its record. Returns the cluster, that connection and t's highest ID.
pub fn a_record_held_by_an_open_drop() -> (Cluster, Client, i64) {
    a_record_held_by_an_open_drop_in("zdb")
}

/// [`a_record_held_by_an_open_drop`], in `owner1`'s database `database`.
pub fn a_record_held_by_an_open_drop_in(database: &str) -> (Cluster, Client, i64) {
    let cluster = cluster_with_rows(8, 100);
    let old_max = max_id(&mut cluster.client());
    let mut db = cluster.client();
    db.batch_execute("CREATE ROLE owner1 LOGIN").unwrap();
    db.batch_execute(&format!("CREATE DATABASE {database} OWNER owner1"))
        .unwrap();
    let mut owner = cluster.client_as("owner1", database);
    owner.batch_execute("CREATE EXTENSION snowid").unwrap();
    owner
        .batch_execute("BEGIN; DROP EXTENSION snowid;")
        .unwrap();
    (cluster, owner, old_max)
}

/// `snowid_release(shard)` in a thread of its own, on a connection of its own: its last ID, or
/// its error described.
pub fn release_in_a_thread(port: u16, shard: i32) -> std::thread::JoinHandle<Result<i64, String>> {
    std::thread::spawn(move || {
        connect_to(port, "postgres", "postgres")
            .query_one("SELECT snowid_release($1)", &[&shard])
            .map(|r| r.get::<_, i64>(0))
            .map_err(|e| describe(&e))
    })
}

/// The shards each database's record lists, by database.
pub fn recorded_shards(cluster: &Cluster, databases: &[&str]) -> Vec<(String, Vec<i32>)> {
    databases
        .iter()
        .map(|database| {
            let shards: Vec<i32> = cluster
                .client_of(database)
                .query_one("SELECT shards FROM snowid_released_shards", &[])
                .unwrap()
                .get(0);
            (database.to_string(), shards)
        })
        .collect()
}

/// A connection to `database` from another thread (for a statement that waits).
pub fn connect_to(port: u16, user: &str, database: &str) -> Client {
    Client::connect(
        &format!("host=127.0.0.1 port={port} user={user} dbname={database}"),
        crate::postgres::NoTls,
    )
    .unwrap()
}

/// The error has SQLSTATE `sqlstate` and says each of `says` (in its message, detail or hint).
pub fn assert_error(err: &Error, sqlstate: &str, says: &[&str]) {
    assert_eq!(code(err), sqlstate, "{}", describe(err));
    for said in says {
        assert!(
            describe(err).contains(said),
            "the error says {said:?}: {}",
            describe(err)
        );
    }
}
