//! Public IDs: the mask's key stays with the superusers, and the mask is the documented FF1.

use snowid_core::mask::{self, Mask};
use snowid_integration::postgres::error::DbError;
use snowid_integration::postgres::{Client, Config, NoTls};
use snowid_integration::{create_worker_pid, parallel_settings, wait_until, Cluster};
use std::time::Duration;

const KEY: &str = "8f1d6b2a4c7e9031a5b8d2f4e6c10397";
const NEXT_KEY: &str = "0c9e4a71d3b5f82604ae19c7b3d5e8f2a4c6b8d0e1f30517";

/// A key as postgresql.conf holds it.
fn quoted(key: &str) -> String {
    format!("'{key}'")
}

/// A connection as `role`, a login role that is not a superuser.
fn connect_as(cluster: &Cluster, role: &str) -> Client {
    Config::new()
        .host("127.0.0.1")
        .port(cluster.port)
        .user(role)
        .dbname("postgres")
        .connect(NoTls)
        .unwrap_or_else(|e| panic!("connect as {role}: {e}"))
}

/// Everything a statement showed: its rows as text, or its error with detail and hint.
fn everything_shown(db: &mut Client, sql: &str) -> String {
    match db.simple_query(sql) {
        Ok(messages) => messages
            .iter()
            .filter_map(|m| match m {
                snowid_integration::postgres::SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).unwrap_or("").to_string())
                        .collect::<Vec<_>>()
                        .join("|"),
                ),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => match e.as_db_error() {
            Some(db) => format!(
                "{}: {} {} {}",
                db.code().code(),
                db.message(),
                db.detail().unwrap_or(""),
                db.hint().unwrap_or("")
            ),
            None => e.to_string(),
        },
    }
}

/// The error each of the four functions raises on a well-formed argument (the test fails if one
/// does not), with the statement.
fn errors_of_every_function(db: &mut Client) -> Vec<(&'static str, DbError)> {
    [
        "SELECT snowid_mask(1)",
        "SELECT snowid_unmask(1)",
        "SELECT snowid_mask_text(1)",
        "SELECT snowid_unmask_text('0000000000001')",
    ]
    .into_iter()
    .map(|sql| {
        let err = db.batch_execute(sql).expect_err(sql);
        (sql, err.as_db_error().expect("a server error").clone())
    })
    .collect()
}

fn assert_no_key(shown: &str, keys: &[&str], what: &str) {
    for key in keys {
        assert!(
            !shown.to_lowercase().contains(&key.to_lowercase()),
            "{what} showed the key: {shown}"
        );
    }
}

/// Guards against the key leaking to a role that is not a superuser through any of the routes
/// PostgreSQL offers to read a setting: SHOW, SHOW ALL, current_setting, pg_settings,
/// pg_file_settings, a setting's error, an error of the functions, and EXPLAIN VERBOSE (with the
/// settings that affect planning). The same role masks and unmasks freely, and the superuser
/// reads the key, so the test would see it wherever it were shown.
#[test]
fn a_role_that_is_not_a_superuser_cannot_read_the_key() {
    let cluster = Cluster::preloaded(&[("snowid.mask_key", quoted(KEY).as_str())]);
    let mut superuser = cluster.client();
    let shown: String = superuser
        .query_one("SHOW snowid.mask_key", &[])
        .unwrap()
        .get(0);
    assert_eq!(shown, KEY, "the superuser reads the key");
    superuser
        .batch_execute(
            "CREATE ROLE app LOGIN;
             CREATE TABLE items (id bigint PRIMARY KEY DEFAULT snowid_next(4), name text);
             INSERT INTO items (name) SELECT 'item ' || i FROM generate_series(1, 1000) i;
             GRANT SELECT ON items TO app;",
        )
        .unwrap();
    let mut app = connect_as(&cluster, "app");
    let expected = Mask::from_hex(KEY).unwrap().mask(8_388_613_127).unwrap();
    let masked: i64 = app
        .query_one("SELECT snowid_mask(8388613127)", &[])
        .unwrap()
        .get(0);
    assert_eq!(masked, expected, "the role masks with the server's key");
    for (sql, refused) in [
        ("SHOW snowid.mask_key", true),
        ("SELECT current_setting('snowid.mask_key')", true),
        ("SELECT current_setting('snowid.mask_key', true)", true),
        ("SELECT * FROM pg_file_settings", true),
        ("SELECT * FROM pg_show_all_file_settings()", true),
        (
            "ALTER SYSTEM SET snowid.mask_key = '00000000000000000000000000000000'",
            true,
        ),
        (
            "SET snowid.mask_key = '00000000000000000000000000000000'",
            true,
        ),
        (
            "ALTER ROLE app SET snowid.mask_key = '00000000000000000000000000000000'",
            true,
        ),
        ("SHOW ALL", false),
        ("SELECT * FROM pg_settings", false),
        ("SELECT * FROM pg_settings WHERE name LIKE 'snowid%'", false),
        ("SELECT snowid_mask(-1)", true),
        ("SELECT snowid_unmask_text('not a public ID')", true),
        (
            "EXPLAIN (VERBOSE, SETTINGS, COSTS OFF) SELECT name, snowid_mask_text(id) FROM items \
             WHERE id = snowid_unmask(snowid_mask(42))",
            false,
        ),
        (
            "EXPLAIN (ANALYZE, VERBOSE, SETTINGS) SELECT snowid_mask(id), snowid_unmask(id) \
             FROM items",
            false,
        ),
    ] {
        let shown = everything_shown(&mut app, sql);
        assert_no_key(&shown, &[KEY], sql);
        assert_eq!(
            shown.starts_with("42501") || shown.starts_with("55P02") || shown.starts_with("22"),
            refused,
            "{sql}: {shown}"
        );
    }
    let listed = everything_shown(
        &mut app,
        "SELECT name FROM pg_settings WHERE name LIKE 'snowid.%'",
    );
    assert!(
        listed.contains("snowid.epoch") && !listed.contains("snowid.mask_key"),
        "{listed}"
    );
}

/// Guards against the key reaching the server's log. PostgreSQL logs every setting a reload
/// changes with its new value (the postmaster at LOG, each backend at DEBUG2), quotes a rejected
/// value in its error, and logs the statement that failed (an ALTER SYSTEM holding a mistyped
/// key). None of them may show a key: a mistyped one is the key but for a character.
#[test]
fn no_key_reaches_the_log() {
    let cluster = Cluster::preloaded(&[
        ("snowid.mask_key", quoted(KEY).as_str()),
        ("log_min_messages", "debug2"),
    ]);
    let mut db = cluster.client();
    let id = 8_388_613_127i64;
    cluster.set("snowid.mask_key", &quoted(NEXT_KEY));
    cluster.reload();
    let expected = Mask::from_hex(NEXT_KEY).unwrap().mask(id).unwrap();
    wait_until(
        "the session masks with the new key",
        Duration::from_secs(30),
        || {
            let masked: i64 = db
                .query_one("SELECT snowid_mask($1)", &[&id])
                .unwrap()
                .get(0);
            masked == expected
        },
    );
    let mistyped = format!("{}g", &NEXT_KEY[..NEXT_KEY.len() - 1]);
    let err = db
        .batch_execute(&format!("ALTER SYSTEM SET snowid.mask_key = '{mistyped}'"))
        .unwrap_err();
    assert_eq!(snowid_integration::code(&err), "22023", "{err}");
    // A reload that meets a mistyped key keeps the last good one.
    cluster.set("snowid.mask_key", &quoted(&mistyped));
    cluster.reload();
    wait_until(
        "the reload that met the mistyped key is logged",
        Duration::from_secs(30),
        || cluster.log().contains("contains errors"),
    );
    let masked: i64 = db
        .query_one("SELECT snowid_mask($1)", &[&id])
        .unwrap()
        .get(0);
    assert_eq!(masked, expected, "the last good key stays in force");
    let log = cluster.log();
    assert_no_key(&log, &[KEY, NEXT_KEY, &mistyped], "the server log");
    // The messages were logged, with the key written over: the test saw where it would be.
    assert!(
        log.contains(&format!(
            "parameter \"snowid.mask_key\" changed to \"{}\"",
            "*".repeat(48)
        )),
        "{log}"
    );
    assert!(
        log.contains("invalid value for parameter \"snowid.mask_key\""),
        "{log}"
    );
}

/// Guards against a server with no key masking with some default (every installation would then
/// share one key), and against an error that does not say what to set. Also a malformed key at
/// start-up stops the server, as any bad snowid setting does, without repeating the key.
#[test]
fn no_key_refuses_and_names_the_setting() {
    let cluster = Cluster::preloaded(&[]);
    let mut db = cluster.client();
    for (sql, db_err) in errors_of_every_function(&mut db) {
        assert_eq!(db_err.code().code(), "55000", "{sql}: {db_err}");
        assert_eq!(db_err.message(), "snowid.mask_key is not set");
        assert!(db_err.hint().unwrap().contains("snowid.mask_key"), "{sql}");
    }
    snowid_integration::set_and_reload(&mut db, "snowid.mask_key", KEY, KEY);
    let masked: i64 = db.query_one("SELECT snowid_mask(1)", &[]).unwrap().get(0);
    assert_eq!(masked, Mask::from_hex(KEY).unwrap().mask(1).unwrap());
    drop(db);
    drop(cluster);

    let mut cluster = Cluster::init();
    cluster.set("shared_preload_libraries", "'snowid'");
    let mistyped = format!("{}x", &KEY[1..]);
    cluster.set("snowid.mask_key", &quoted(&mistyped));
    let log = cluster.start().expect_err("a malformed key must not start");
    assert!(
        log.contains("invalid value for parameter \"snowid.mask_key\""),
        "{log}"
    );
    assert!(
        log.contains("Character 32 of the key is not a hexadecimal digit"),
        "{log}"
    );
    assert_no_key(&log, &[&mistyped, KEY], "the start-up log");
}

/// Guards against PARALLEL SAFE being untrue (a parallel worker without the key, or with
/// another), and against the server's mask differing from the documented construction (FF1,
/// radix 2, 63 bits, the empty tweak) that applications may compute themselves: every ID of a
/// table scanned by parallel workers masks as the core computes it.
#[test]
fn parallel_workers_mask_as_documented() {
    let cluster = Cluster::preloaded(&[("snowid.mask_key", quoted(NEXT_KEY).as_str())]);
    let mut db = cluster.client();
    create_worker_pid(&mut db);
    db.batch_execute(
        "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(7));
         INSERT INTO t SELECT snowid_next(7) FROM generate_series(1, 200000);
         ANALYZE t;",
    )
    .unwrap();
    db.batch_execute(&parallel_settings(2)).unwrap();
    let rows = db
        .query(
            "SELECT worker_pid(), id, snowid_mask(id), snowid_mask_text(id) FROM t",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), 200_000);
    let mask = Mask::from_hex(NEXT_KEY).unwrap();
    let mut processes = std::collections::HashSet::new();
    for row in &rows {
        let (pid, id, masked, text): (i32, i64, i64, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        processes.insert(pid);
        assert_eq!(masked, mask.mask(id).unwrap(), "ID {id}");
        assert_eq!(text, mask::to_text(masked).unwrap(), "ID {id}");
    }
    assert!(
        processes.len() >= 2,
        "parallel workers masked: {processes:?}"
    );
}

/// Guards against masking with a key PostgreSQL keeps in public view: without preloading,
/// `snowid.mask_key` in postgresql.conf is only a placeholder that any role can SHOW, so the
/// functions must refuse (55000, naming the fix) rather than read it.
#[test]
fn without_preloading_the_mask_refuses() {
    let mut cluster = Cluster::init();
    cluster.set("snowid.mask_key", &quoted(KEY));
    cluster.start().unwrap();
    let mut db = cluster.client();
    db.batch_execute("CREATE EXTENSION snowid").unwrap();
    for (sql, db_err) in errors_of_every_function(&mut db) {
        assert_eq!(db_err.code().code(), "55000", "{sql}: {db_err}");
        assert_eq!(
            db_err.message(),
            "snowid must be loaded via shared_preload_libraries",
            "{sql}"
        );
        assert!(
            db_err.detail().unwrap().contains("snowid.mask_key"),
            "{sql}"
        );
    }
}
