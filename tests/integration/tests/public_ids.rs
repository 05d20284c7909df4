//! Public IDs: the keys live in a file only the server's user reads, a database's keys are its
//! own (no other database's owner can read its IDs or forge its links), no statement, setting or
//! log line shows a key, a new key version masks while older ones still read the links that name
//! them, domains keep tables apart, equal key files give one public form on every server, and
//! the mask is the documented FF1.

use snowid_core::mask::keys::{derive, Secret};
use snowid_core::mask::text::{self, Version};
use snowid_core::mask::{self, parse_hex, Mask};
use snowid_integration::postgres::{Client, SimpleQueryMessage};
use snowid_integration::{code, create_worker_pid, parallel_settings, wait_until, Cluster};
use std::time::Duration;

const KEY: &str = "8f1d6b2a4c7e9031a5b8d2f4e6c10397";
const NEXT_KEY: &str = "0c9e4a71d3b5f82604ae19c7b3d5e8f2a4c6b8d0e1f30517";
const DEFAULT_KEY: &str = "3d5e8f2a4c6b8d0e1f305170c9e4a71d";
const THIRD_KEY: &str = "d3b5f82604ae19c7b3d5e8f2a4c6b8d0e1f30517a4c6b8d0e1f305173d5e8f2a";
/// The file's name in the data directory.
const KEY_FILE: &str = "mask.keys";

/// Writes the key file into the data directory, owned by the server's user, with the mode given
/// (`600` is what the server accepts).
fn put_keys_with_mode(cluster: &Cluster, contents: &str, mode: &str) {
    cluster.put_file(KEY_FILE, contents.as_bytes());
    let path = cluster.pgdata().join(KEY_FILE);
    cluster.run_as_server_user("chmod", &[mode.as_ref(), path.as_os_str()]);
}

fn put_keys(cluster: &Cluster, contents: &str) {
    put_keys_with_mode(cluster, contents, "600");
}

/// A started cluster with snowid preloaded and created, the key file holding `keys`, named by
/// `snowid.mask_key_file`, and any other settings.
fn with_keys(keys: &str, settings: &[(&str, &str)]) -> Cluster {
    let mut cluster = Cluster::init();
    put_keys(&cluster, keys);
    cluster.set("shared_preload_libraries", "'snowid'");
    cluster.set("snowid.mask_key_file", &format!("'{KEY_FILE}'"));
    for (name, value) in settings {
        cluster.set(name, value);
    }
    cluster
        .start()
        .unwrap_or_else(|log| panic!("the server did not start:\n{log}"));
    cluster
        .client()
        .batch_execute("CREATE EXTENSION snowid")
        .expect("create extension");
    cluster
}

/// The mask of a key written in hexadecimal, used as it is (a database's own line).
fn own(key: &str) -> Mask {
    Mask::from_hex(key).unwrap()
}

/// The mask of the default key derived for a database.
fn derived(default: &str, database: &str) -> Mask {
    let key = derive(&parse_hex(default).unwrap(), database.as_bytes());
    Mask::from_bytes(key.bytes()).unwrap()
}

fn hex(key: &Secret) -> String {
    key.bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// Everything a statement showed: its rows as text, or its error with detail and hint.
fn everything_shown(db: &mut Client, sql: &str) -> String {
    match db.simple_query(sql) {
        Ok(messages) => messages
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(row) => Some(
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

fn assert_no_key(shown: &str, keys: &[&str], what: &str) {
    for key in keys {
        assert!(
            !shown.to_lowercase().contains(&key.to_lowercase()),
            "{what} showed a key: {shown}"
        );
    }
}

fn one<T: for<'a> snowid_integration::postgres::types::FromSql<'a>>(
    db: &mut Client,
    sql: &str,
) -> T {
    db.query_one(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

/// The error each of the four functions raises on a well-formed argument (the test fails if one
/// does not), with the statement.
fn errors_of_every_function(
    db: &mut Client,
) -> Vec<(&'static str, snowid_integration::postgres::error::DbError)> {
    [
        "SELECT snowid_mask(1)",
        "SELECT snowid_unmask(1)",
        "SELECT snowid_mask_text(1)",
        "SELECT snowid_unmask_text('0000000000001')",
        "SELECT snowid_mask_text(1, 'orders', 'ord')",
        "SELECT snowid_mask_key_fingerprint()",
    ]
    .into_iter()
    .map(|sql| {
        let err = db.batch_execute(sql).expect_err(sql);
        (sql, err.as_db_error().expect("a server error").clone())
    })
    .collect()
}

/// Guards against issue 54's first finding: one server-wide key let any database's owner unmask
/// another database's public IDs and forge its next link. Now a database with a line of its own
/// (`app`) uses its key, and one without (`shop`) the default derived for its name; `mall`'s
/// owner, a member of `pg_monitor` (so of `pg_read_all_settings`), gets from every function and
/// setting she can reach neither `app`'s nor `shop`'s IDs, links, fingerprints or keys. Each
/// database masks as the documented construction computes (the key as it is, or derived), so
/// the test knows what a leak would look like.
#[test]
fn a_second_databases_owner_reads_no_other_databases_ids_or_keys() {
    let cluster = with_keys(&format!("* 1 {DEFAULT_KEY}\napp 1 {KEY}\n"), &[]);
    let mut superuser = cluster.client();
    superuser
        .batch_execute("CREATE ROLE mallory LOGIN; GRANT pg_monitor TO mallory")
        .unwrap();
    for database in ["app", "shop", "mall OWNER mallory"] {
        superuser
            .batch_execute(&format!("CREATE DATABASE {database}"))
            .unwrap();
    }
    let id = 8_388_613_127i64;
    let mut victims = Vec::new();
    for (database, mask) in [("app", own(KEY)), ("shop", derived(DEFAULT_KEY, "shop"))] {
        let mut db = cluster.client_of(database);
        db.batch_execute("CREATE EXTENSION snowid").unwrap();
        let link: String = one(&mut db, &format!("SELECT snowid_mask_text({id})"));
        let next: String = one(&mut db, &format!("SELECT snowid_mask_text({})", id + 1));
        let masked: i64 = one(&mut db, &format!("SELECT snowid_mask({id})"));
        let fingerprint: String = one(&mut db, "SELECT snowid_mask_key_fingerprint()");
        victims.push((database, mask, link, next, masked, fingerprint));
    }
    let mut mallory = cluster.client_as("mallory", "mall");
    mallory.batch_execute("CREATE EXTENSION snowid").unwrap();
    let derived_keys: Vec<String> = ["app", "shop", "mall", "postgres"]
        .iter()
        .map(|db| hex(&derive(&parse_hex(DEFAULT_KEY).unwrap(), db.as_bytes())))
        .collect();
    let mut keys: Vec<&str> = vec![KEY, DEFAULT_KEY];
    keys.extend(derived_keys.iter().map(String::as_str));
    for (database, _, link, next, masked, fingerprint) in &victims {
        let unmasked: i64 = one(
            &mut mallory,
            &format!("SELECT snowid_unmask_text('{link}')"),
        );
        assert_ne!(unmasked, id, "mall reads {database}'s link");
        let unmasked: i64 = one(&mut mallory, &format!("SELECT snowid_unmask({masked})"));
        assert_ne!(unmasked, id, "mall reads {database}'s public ID");
        let forged: String = one(
            &mut mallory,
            &format!("SELECT snowid_mask_text({})", id + 1),
        );
        assert_ne!(&forged, next, "mall forges {database}'s next link");
        let own_fingerprint: String = one(&mut mallory, "SELECT snowid_mask_key_fingerprint()");
        assert_ne!(&own_fingerprint, fingerprint, "{database}");
    }
    // Each database masks as the documented construction computes: the key as it is, or derived.
    for (database, mask, link, _, masked, _) in &victims {
        assert_eq!(
            *masked,
            mask.mask(id).unwrap(),
            "{database} masks as documented"
        );
        assert_eq!(link, &mask::to_text(*masked).unwrap(), "{database}");
    }
    let masked: i64 = one(&mut mallory, &format!("SELECT snowid_mask({id})"));
    assert_eq!(masked, derived(DEFAULT_KEY, "mall").mask(id).unwrap());
    for sql in [
        "SHOW ALL",
        "SELECT * FROM pg_settings",
        "SELECT current_setting('snowid.mask_key_file')",
        "SHOW snowid.mask_key",
        "SELECT current_setting('snowid.mask_key', true)",
        "SELECT pg_read_file('mask.keys')",
        "SELECT pg_read_binary_file('mask.keys')",
        "SELECT * FROM pg_file_settings",
        "SELECT * FROM snowid_mask_keys()",
        "SELECT snowid_mask_key_fingerprint()",
        "SELECT snowid_unmask_text('not a public ID')",
        "SELECT snowid_unmask(-1, 'orders', 7)",
        "EXPLAIN (VERBOSE, SETTINGS) SELECT snowid_mask(1), snowid_mask_text(2, 'a', 'b')",
    ] {
        let shown = everything_shown(&mut mallory, sql);
        assert_no_key(&shown, &keys, sql);
    }
    // The file is the server's: a role that may read server files reads it, as it reads the
    // TLS key; pg_monitor may not.
    let refused = mallory
        .batch_execute("SELECT pg_read_file('mask.keys')")
        .unwrap_err();
    assert_eq!(code(&refused), "42501", "{refused}");
    assert_no_key(&cluster.log(), &keys, "the server log");
}

/// Guards against reading the key file anywhere but at start and at reload (a backend keeps
/// what it parsed; a change on disk alone changes nothing), against a reload that meets a file
/// it cannot use dropping the keys in force, and against a file that others can read, that is
/// malformed or missing, or a 0.7.0 `snowid.mask_key` line, being accepted at start. None of
/// those errors, nor the log, shows a key.
#[test]
fn the_key_file_is_read_at_start_and_reload_only() {
    let mut cluster = with_keys(&format!("* 1 {KEY}\n"), &[]);
    let id = 42i64;
    let first = derived(KEY, "postgres").mask(id).unwrap();
    let second = derived(NEXT_KEY, "postgres").mask(id).unwrap();
    let mut session = cluster.client();
    let masked = |db: &mut Client| -> i64 { one(db, &format!("SELECT snowid_mask({id})")) };
    assert_eq!(masked(&mut session), first);

    // A new file on disk is not read until a reload, by a session or a new backend.
    put_keys(&cluster, &format!("* 1 {NEXT_KEY}\n"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(masked(&mut session), first);
    assert_eq!(masked(&mut cluster.client()), first);
    cluster.reload();
    wait_until(
        "the session takes the new key",
        Duration::from_secs(30),
        || masked(&mut session) == second,
    );
    assert_eq!(masked(&mut cluster.client()), second);

    // A reload that meets a file it cannot use keeps the last good keys.
    let mistyped = format!("{}g", &KEY[..31]);
    for (contents, mode, logged) in [
        (format!("* 1 {KEY}\n"), "644", "has group or world access"),
        (
            format!("* 1 {KEY}\napp 1 {mistyped}\n"),
            "600",
            "Line 2: character 32 of the key",
        ),
    ] {
        put_keys_with_mode(&cluster, &contents, mode);
        cluster.reload();
        wait_until(
            &format!("the reload logs \"{logged}\""),
            Duration::from_secs(30),
            || cluster.log().contains(logged),
        );
        assert_eq!(masked(&mut session), second, "{logged}");
        assert_eq!(masked(&mut cluster.client()), second, "{logged}");
    }
    drop(session);
    cluster.stop("fast");

    // At start, each of these stops the server, saying why.
    for (contents, mode, logged) in [
        (format!("* 1 {KEY}\n"), "644", "has group or world access"),
        (format!("* 1 {KEY}\n"), "640", "has group or world access"),
        (
            format!("* 1 {KEY} unmask-only\n"),
            "600",
            "Every key of the default (*) is unmask-only",
        ),
        (
            format!("* 1 {mistyped}\n"),
            "600",
            "Line 1: character 32 of the key",
        ),
    ] {
        put_keys_with_mode(&cluster, &contents, mode);
        let log = cluster.start().expect_err(logged);
        assert!(log.contains(logged), "{logged}: {log}");
    }
    cluster.remove_file(KEY_FILE);
    let log = cluster.start().expect_err("a missing key file");
    assert!(
        log.contains("could not access mask key file \"mask.keys\""),
        "{log}"
    );
    // 0.7.0's setting, with a good key file: the server says how to move the key, and starts
    // once the line is gone (an empty value still names the setting).
    put_keys(&cluster, &format!("* 1 {KEY}\n"));
    cluster.set("snowid.mask_key", &format!("'{KEY}'"));
    let log = cluster.start().expect_err("0.7.0's setting");
    assert!(
        log.contains("unrecognized configuration parameter \"snowid.mask_key\""),
        "{log}"
    );
    assert!(log.contains("Move the key into the key file"), "{log}");
    cluster.set("snowid.mask_key", "''");
    assert!(cluster.start().is_err(), "an empty snowid.mask_key");
    assert_no_key(
        &cluster.log(),
        &[KEY, NEXT_KEY, &mistyped],
        "the server log",
    );
}

/// Guards against issue 54's rotation recipe losing links (item 4: typed with the aliases l, i
/// and o) and against a rotation that breaks links at all: with a key version 2 beside version
/// 1, new links name version 2 and every link of version 1 still reads, however typed; a
/// version staged `unmask-only` reads its links but does not mask; a version removed reads none
/// (22P02, naming it). Version 1's form is 0.7.0's, bit for bit. Also domains (two tables' forms
/// of one ID unrelated, a prefix checked) and issue 54's item 5: a byte outside ASCII in an
/// SQL_ASCII database is 22P02 like any malformed text, not 22021.
#[test]
fn a_new_key_version_masks_while_old_links_still_read() {
    let cluster = with_keys(&format!("* 1 {DEFAULT_KEY}\napp 1 {KEY}\n"), &[]);
    let mut db = cluster.client();
    db.batch_execute("CREATE DATABASE app").unwrap();
    db.batch_execute(
        "CREATE DATABASE asc_db ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0",
    )
    .unwrap();
    let mut app = cluster.client_of("app");
    app.batch_execute(
        "CREATE EXTENSION snowid;
         CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowid_next(3));
         INSERT INTO orders SELECT FROM generate_series(1, 200);",
    )
    .unwrap();
    let ids: Vec<i64> = app
        .query("SELECT id FROM orders ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let (v1, v2, v3) = (own(KEY), own(NEXT_KEY), own(THIRD_KEY));
    let version = |n| Version::new(n).unwrap();
    let links = |db: &mut Client| -> Vec<String> {
        db.query("SELECT snowid_mask_text(id) FROM orders ORDER BY id", &[])
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect()
    };
    let old_links = links(&mut app);
    for (id, link) in ids.iter().zip(&old_links) {
        assert_eq!(
            link,
            &mask::to_text(v1.mask(*id).unwrap()).unwrap(),
            "0.7.0's form"
        );
    }
    let lookup = |db: &mut Client, link: &str| -> Result<Option<i64>, String> {
        db.query_opt(
            "SELECT id FROM orders WHERE id = snowid_unmask_text($1)",
            &[&link],
        )
        .map(|row| row.map(|r| r.get(0)))
        .map_err(|e| {
            format!(
                "{} {}",
                code(&e),
                e.as_db_error().map(|d| d.to_string()).unwrap_or_default()
            )
        })
    };

    put_keys(
        &cluster,
        &format!(
            "* 1 {DEFAULT_KEY}\napp 1 {KEY}\napp 2 {NEXT_KEY}\napp 3 {THIRD_KEY} unmask-only\n"
        ),
    );
    cluster.reload();
    wait_until("new links name version 2", Duration::from_secs(30), || {
        links(&mut app)[0].len() == 14
    });
    let new_links = links(&mut app);
    let mut aliases = 0;
    for ((id, old), new) in ids.iter().zip(&old_links).zip(&new_links) {
        assert_eq!(
            new,
            &text::format(v2.mask(*id).unwrap(), version(2), "").unwrap()
        );
        assert_eq!(lookup(&mut app, new), Ok(Some(*id)));
        // The old link as a person might type it: lowercase, 1 as l or i, 0 as o.
        let typed: String = old
            .to_lowercase()
            .chars()
            .enumerate()
            .map(|(i, c)| match c {
                '1' if i % 2 == 0 => 'l',
                '1' => 'I',
                '0' => 'o',
                c => c,
            })
            .collect();
        aliases += usize::from(typed.contains(['l', 'I', 'o']));
        assert_eq!(
            lookup(&mut app, &typed),
            Ok(Some(*id)),
            "{old} typed as {typed}"
        );
        // A version staged unmask-only reads its links.
        let staged = text::format(v3.mask(*id).unwrap(), version(3), "").unwrap();
        assert_eq!(lookup(&mut app, &staged), Ok(Some(*id)));
    }
    assert!(aliases > 100, "only {aliases} links had a 0 or a 1");
    let keys: Vec<(i32, bool)> = app
        .query(
            "SELECT version, masks FROM snowid_mask_keys() ORDER BY version",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(keys, [(1, false), (2, true), (3, false)]);

    // Version 1 retired: its links read no more, and the error says why.
    put_keys(&cluster, &format!("* 1 {DEFAULT_KEY}\napp 2 {NEXT_KEY}\n"));
    cluster.reload();
    wait_until("version 1 is retired", Duration::from_secs(30), || {
        lookup(&mut app, &old_links[0]).is_err()
    });
    let refused = lookup(&mut app, &old_links[0]).unwrap_err();
    assert!(
        refused.starts_with("22P02") && refused.contains("version 1"),
        "{refused}"
    );

    // Domains: one ID, unrelated forms in two tables; a form of one does not read in the other.
    let id = ids[0];
    let orders: String = one(
        &mut app,
        &format!("SELECT snowid_mask_text({id}, 'orders', 'ord')"),
    );
    let users: String = one(
        &mut app,
        &format!("SELECT snowid_mask_text({id}, 'users', 'usr')"),
    );
    let in_orders = v2.mask_in(&v2.domain(b"orders"), id).unwrap();
    assert_eq!(orders, text::format(in_orders, version(2), "ord").unwrap());
    assert_ne!(orders[4..], users[4..]);
    let back: i64 = one(
        &mut app,
        &format!("SELECT snowid_unmask_text('{orders}', 'orders', 'ord')"),
    );
    assert_eq!(back, id);
    let across: i64 = one(
        &mut app,
        &format!(
            "SELECT snowid_unmask_text('usr_{}', 'users', 'usr')",
            &orders[4..]
        ),
    );
    assert_ne!(across, id);
    let back: i64 = one(
        &mut app,
        &format!("SELECT snowid_unmask(snowid_mask({id}, 'orders'), 'orders')"),
    );
    assert_eq!(back, id);
    let back: i64 = one(
        &mut app,
        &format!("SELECT snowid_unmask({}, '', 2)", v2.mask(id).unwrap()),
    );
    assert_eq!(back, id);
    for (sql, expected) in [
        (
            format!("SELECT snowid_unmask_text('{orders}', 'orders', 'usr')"),
            "22P02",
        ),
        (format!("SELECT snowid_unmask_text('{orders}')"), "22P02"),
        (
            format!("SELECT snowid_mask_text({id}, 'orders', 'or-d')"),
            "22023",
        ),
        (format!("SELECT snowid_unmask({id}, '', 1)"), "22023"),
        (format!("SELECT snowid_mask({id}, 'orders', 2)"), "42883"),
    ] {
        let err = app.batch_execute(&sql).unwrap_err();
        assert_eq!(code(&err), expected, "{sql}: {err}");
    }

    // An SQL_ASCII database: a byte outside ASCII is a malformed public ID, 22P02.
    let mut ascii = cluster.client_of("asc_db");
    ascii
        .batch_execute("CREATE EXTENSION snowid; SET client_encoding = 'SQL_ASCII'")
        .unwrap();
    for sql in [
        r"SELECT snowid_unmask_text(E'\xE9000000000000')",
        r"SELECT snowid_unmask_text(E'00000000000\xE90')",
        r"SELECT snowid_unmask_text(E'ord_\xE9000000000000', 'orders', 'ord')",
    ] {
        let err = ascii.batch_execute(sql).unwrap_err();
        assert_eq!(code(&err), "22P02", "{sql}: {err:?}");
        let detail = err
            .as_db_error()
            .unwrap()
            .detail()
            .unwrap_or_default()
            .to_string();
        assert!(detail.contains("byte 0xE9"), "{sql}: {detail}");
    }
    let err = ascii
        .batch_execute(r"SELECT snowid_mask_text(1, 'orders', E'\xE9')")
        .unwrap_err();
    assert_eq!(code(&err), "22023", "{err:?}");
}

/// Guards against issue 51's item 10 and issue 54's third finding: a statement naming a key
/// (0.7.0's `snowid.mask_key`, by every route: SET, set_config with the key inline or as a bound
/// parameter, ALTER DATABASE, ALTER ROLE, ALTER SYSTEM in and out of a transaction) is refused,
/// and its text reaches the log neither as the refusal's STATEMENT (the default
/// `log_min_error_statement`) nor under `log_statement = 'all'` and
/// `log_min_duration_statement = 0`, with its parameters. The log shows where the statement
/// was, hidden, so the test sees the lines a leak would be on.
#[test]
fn no_statement_naming_a_key_reaches_the_log() {
    let cluster = with_keys(
        &format!("* 1 {KEY}\n"),
        &[
            ("log_statement", "'all'"),
            ("log_min_duration_statement", "0"),
        ],
    );
    let mut db = cluster.client();
    db.batch_execute("CREATE ROLE monitor LOGIN; GRANT pg_monitor TO monitor")
        .unwrap();
    for statement in [
        format!("SET snowid.mask_key = '{KEY}'"),
        format!("SELECT set_config('snowid.mask_key', '{KEY}', false)"),
        format!("ALTER DATABASE postgres SET snowid.mask_key = '{KEY}'"),
        format!("ALTER ROLE monitor SET snowid.mask_key = '{KEY}'"),
        format!("ALTER SYSTEM SET snowid.mask_key = '{KEY}'"),
        format!("BEGIN; ALTER SYSTEM SET snowid.mask_key = '{KEY}'"),
    ] {
        let err = db.batch_execute(&statement).unwrap_err();
        assert!(
            code(&err).starts_with("42") || code(&err) == "25001",
            "{statement}: {err}"
        );
        db.batch_execute("ROLLBACK").ok();
    }
    let err = db
        .query("SELECT set_config('snowid.mask_key', $1, false)", &[&KEY])
        .unwrap_err();
    assert!(code(&err).starts_with("42"), "{err}");
    let mut monitor = cluster.client_as("monitor", "postgres");
    let shown = everything_shown(&mut monitor, &format!("SET snowid.mask_key = '{KEY}'"));
    assert!(shown.starts_with("42"), "{shown}");
    // Statements that do not name the old setting are logged as they are.
    db.batch_execute("SELECT 'logged as it is'").unwrap();
    wait_until(
        "the last statement is logged",
        Duration::from_secs(10),
        || cluster.log().contains("logged as it is"),
    );
    let log = cluster.log();
    assert_no_key(&log, &[KEY], "the server log");
    assert!(
        log.contains("statement: (hidden: it names snowid.mask_key)"),
        "{log}"
    );
    assert!(
        log.contains("invalid configuration parameter name \"snowid.mask_key\""),
        "{log}"
    );
}

/// Guards against two servers with equal key files giving an ID different public forms (a
/// standby from a base backup, which copies a key file kept in the data directory, and another
/// server given the same file, as a Citus node or a Patroni member is), and against the
/// fingerprint failing to tell a server with another key apart: equal files, equal
/// fingerprints and forms; another key, another fingerprint.
#[test]
fn equal_key_files_give_one_public_form_on_every_server() {
    let keys = format!("* 1 {KEY}\n* 2 {NEXT_KEY}\n");
    let primary = with_keys(&keys, &[]);
    let mut standby = Cluster::base_backup_of(&primary, true);
    standby.start().expect("the standby starts");
    let other = with_keys(&keys, &[]);
    let different = with_keys(&format!("* 1 {KEY}\n* 2 {THIRD_KEY}\n"), &[]);
    let sql =
        "SELECT snowid_mask_key_fingerprint(), snowid_mask_text(8388613127, 'orders', 'ord'), \
               snowid_unmask_text('2D476KTY36P9K')";
    let shown = |cluster: &Cluster| everything_shown(&mut cluster.client(), sql);
    let on_primary = shown(&primary);
    assert!(
        on_primary.starts_with("1:") && on_primary.contains(" 2*:"),
        "{on_primary}"
    );
    assert_eq!(shown(&standby), on_primary, "the standby");
    assert_eq!(
        shown(&other),
        on_primary,
        "another server with the same file"
    );
    let elsewhere = shown(&different);
    let fingerprint = |line: &str| line.split('|').next().unwrap().to_string();
    assert_ne!(fingerprint(&elsewhere), fingerprint(&on_primary));
    assert_eq!(
        fingerprint(&elsewhere).split(' ').next(),
        fingerprint(&on_primary).split(' ').next(),
        "version 1 is the same key on both"
    );
    assert_ne!(elsewhere, on_primary);
}

/// Guards against PARALLEL SAFE being untrue (a parallel worker without the keys, or with
/// others), and against the server's mask differing from the documented construction (FF1,
/// radix 2, 63 bits, the domain as the tweak) that applications may compute themselves: every
/// ID of a table scanned by parallel workers masks as the core computes it.
#[test]
fn parallel_workers_mask_as_documented() {
    let cluster = with_keys(&format!("postgres 1 {NEXT_KEY}\n"), &[]);
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
            "SELECT worker_pid(), id, snowid_mask(id), snowid_mask_text(id, 't', 'x') FROM t",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), 200_000);
    let mask = own(NEXT_KEY);
    let domain = mask.domain(b"t");
    let mut processes = std::collections::HashSet::new();
    for row in &rows {
        let (pid, id, masked, text): (i32, i64, i64, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        processes.insert(pid);
        assert_eq!(masked, mask.mask(id).unwrap(), "ID {id}");
        let in_domain = mask.mask_in(&domain, id).unwrap();
        assert_eq!(
            text,
            text::format(in_domain, Version::FIRST, "x").unwrap(),
            "ID {id}"
        );
    }
    assert!(
        processes.len() >= 2,
        "parallel workers masked: {processes:?}"
    );
}

/// Guards against a server with no keys masking with some default (every installation would
/// then share one key), and against an error that does not say what to set: no file named, and
/// a file without a key for the database, each refuse with 55000, naming the fix. Naming a file
/// with ALTER SYSTEM and a reload then masks.
#[test]
fn no_keys_refuse_and_name_the_setting() {
    let cluster = with_keys("app 1 8f1d6b2a4c7e9031a5b8d2f4e6c10397\n", &[]);
    let mut db = cluster.client();
    for (sql, db_err) in errors_of_every_function(&mut db) {
        assert_eq!(db_err.code().code(), "55000", "{sql}: {db_err}");
        assert_eq!(
            db_err.message(),
            "the mask key file has no key for database \"postgres\""
        );
    }
    snowid_integration::set_and_reload(&mut db, "snowid.mask_key_file", "", "");
    for (sql, db_err) in errors_of_every_function(&mut db) {
        assert_eq!(db_err.code().code(), "55000", "{sql}: {db_err}");
        assert_eq!(db_err.message(), "snowid.mask_key_file is not set");
        assert!(
            db_err.hint().unwrap().contains("snowid.mask_key_file"),
            "{sql}"
        );
    }
    put_keys(&cluster, &format!("postgres 1 {KEY}\n"));
    snowid_integration::set_and_reload(&mut db, "snowid.mask_key_file", KEY_FILE, KEY_FILE);
    let masked: i64 = one(&mut db, "SELECT snowid_mask(1)");
    assert_eq!(masked, own(KEY).mask(1).unwrap());
}

/// Guards against masking without the server's keys, and against a key in public view where
/// snowid is not preloaded (0.7.0's `snowid.mask_key` was then a placeholder any role could
/// SHOW): the functions refuse (55000, naming the fix), and what any role sees of the setting is
/// a path.
#[test]
fn without_preloading_the_mask_refuses() {
    let mut cluster = Cluster::init();
    put_keys(&cluster, &format!("* 1 {KEY}\n"));
    cluster.set("snowid.mask_key_file", &format!("'{KEY_FILE}'"));
    cluster.start().unwrap();
    let mut db = cluster.client();
    db.batch_execute("CREATE EXTENSION snowid; CREATE ROLE reader LOGIN")
        .unwrap();
    let mut reader = cluster.client_as("reader", "postgres");
    let shown = everything_shown(&mut reader, "SHOW snowid.mask_key_file");
    assert_eq!(shown, KEY_FILE);
    for sql in ["SHOW ALL", "SELECT * FROM pg_settings"] {
        assert_no_key(&everything_shown(&mut reader, sql), &[KEY], sql);
    }
    for (sql, db_err) in errors_of_every_function(&mut db) {
        assert_eq!(db_err.code().code(), "55000", "{sql}: {db_err}");
        assert_eq!(
            db_err.message(),
            "snowid must be loaded via shared_preload_libraries",
            "{sql}"
        );
        assert!(
            db_err.detail().unwrap().contains("snowid.mask_key_file"),
            "{sql}"
        );
    }
}

/// Guards against issue 54's second finding on Citus: nodes with the same key file must give an
/// ID one public form whether the coordinator or a worker computes it (a distributed query's
/// `snowid_mask_text(id)` runs on the workers), their fingerprints must agree, and the guide's
/// lookup form must reach one shard. The plain `WHERE id = snowid_unmask_text($1)` runs on every
/// shard (Citus routes by constants and parameters); an ID unmasked first and given as a
/// parameter, in a prepared statement or inside a PL/pgSQL function as the guide shows, is routed
/// to the one shard that holds it: with `citus.multi_task_query_log_level = error`, a statement
/// that would run on more than one shard fails, so the test sees the difference.
#[test]
fn a_lookup_by_public_id_reaches_one_citus_shard() {
    snowid_integration::skip_without_citus!();
    let citus = snowid_integration::citus::CitusCluster::unconfigured(2);
    let nodes: Vec<&Cluster> = std::iter::once(&citus.coordinator)
        .chain(&citus.workers)
        .collect();
    for node in &nodes {
        put_keys(node, &format!("* 1 {KEY}\n* 2 {NEXT_KEY}\n"));
        let mut db = node.client();
        snowid_integration::set_and_reload(&mut db, "snowid.mask_key_file", KEY_FILE, KEY_FILE);
    }
    let fingerprints: Vec<String> = nodes
        .iter()
        .map(|node| one(&mut node.client(), "SELECT snowid_mask_key_fingerprint()"))
        .collect();
    assert!(
        fingerprints.iter().all(|f| f == &fingerprints[0]),
        "{fingerprints:?}"
    );
    let mut db = citus.client();
    for sql in [
        "CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT snowid_next(), url text)",
        "SELECT create_distributed_table('photos', 'id')",
        "INSERT INTO photos (url) SELECT 'photo ' || g FROM generate_series(1, 100) g",
    ] {
        db.batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    db.batch_execute(
        "CREATE FUNCTION photo_by_url_id(url_id text) RETURNS SETOF photos
         LANGUAGE plpgsql STABLE AS $$
         DECLARE
             photo_id bigint := snowid_unmask_text(url_id);
         BEGIN
             RETURN QUERY SELECT * FROM photos WHERE id = photo_id;
         END $$;",
    )
    .unwrap();
    // Computed on the workers, in the shards' queries, and on the coordinator: one form.
    let rows = db
        .query("SELECT id, url, snowid_mask_text(id) FROM photos", &[])
        .unwrap();
    assert_eq!(rows.len(), 100);
    let mask = derived(NEXT_KEY, "postgres");
    for row in &rows {
        let (id, link): (i64, String) = (row.get(0), row.get(2));
        assert_eq!(
            link,
            text::format(mask.mask(id).unwrap(), Version::new(2).unwrap(), "").unwrap()
        );
        let here: String = db
            .query_one("SELECT snowid_mask_text($1::bigint)", &[&id])
            .unwrap()
            .get(0);
        assert_eq!(here, link);
    }
    let (id, url, link): (i64, String, String) = (rows[0].get(0), rows[0].get(1), rows[0].get(2));
    let tasks = |db: &mut Client, sql: &str| -> String {
        everything_shown(db, &format!("EXPLAIN (COSTS OFF) {sql}"))
            .lines()
            .find(|line| line.contains("Task Count"))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let plain = format!("SELECT url FROM photos WHERE id = snowid_unmask_text('{link}')");
    let every_shard = tasks(&mut db, "SELECT url FROM photos");
    assert_ne!(every_shard, "Task Count: 1");
    assert_eq!(tasks(&mut db, &plain), every_shard, "the plain form");
    db.batch_execute("PREPARE photo_by_id(bigint) AS SELECT url FROM photos WHERE id = $1")
        .unwrap();
    let unmasked: i64 = one(&mut db, &format!("SELECT snowid_unmask_text('{link}')"));
    assert_eq!(unmasked, id);
    assert_eq!(
        tasks(&mut db, &format!("EXECUTE photo_by_id({unmasked})")),
        "Task Count: 1"
    );
    db.batch_execute("SET citus.multi_task_query_log_level = error")
        .unwrap();
    let found: String = db
        .query_one("SELECT url FROM photo_by_url_id($1)", &[&link])
        .unwrap()
        .get(0);
    assert_eq!(found, url);
    let refused = everything_shown(&mut db, &plain);
    assert!(refused.contains("multi-task"), "{refused}");
}

/// Guards against issue 54's second finding: Citus nodes with other keys gave one ID two public
/// forms, silently (a distributed query's `snowid_mask_text(id)`, computed on a worker, differed
/// from the coordinator's, and the guide's lookup found nothing). A worker given another key
/// than the coordinator's: the Citus check compares the nodes' keys' fingerprints, and the mask
/// functions of both nodes refuse (55000), each naming the other node, while the fingerprint
/// functions still answer and IDs are still generated; given the same key again and reloaded,
/// both nodes mask again, to one form. Would fail if the check did not compare the keys (both
/// nodes would go on masking, to two forms) or if a refusal outlived the difference.
#[test]
fn citus_nodes_with_other_keys_refuse_to_mask_until_they_agree() {
    snowid_integration::skip_without_citus!();
    let citus = snowid_integration::citus::CitusCluster::unconfigured(1);
    let worker = &citus.workers[0];
    let nodes = [&citus.coordinator, worker];
    for (node, key) in [(nodes[0], KEY), (nodes[1], NEXT_KEY)] {
        put_keys(node, &format!("* 1 {key}\n"));
        let mut db = node.client();
        snowid_integration::set_and_reload(&mut db, "snowid.mask_key_file", KEY_FILE, KEY_FILE);
    }
    for (node, other) in [(nodes[0], nodes[1]), (nodes[1], nodes[0])] {
        let mut db = node.client();
        let mut last = String::new();
        wait_until(
            &format!("node {} refuses to mask, naming {}", node.port, other.port),
            Duration::from_secs(90),
            || match db.query_one("SELECT snowid_mask_text(1)", &[]) {
                Ok(_) => false,
                Err(e) => {
                    let db_err = e.as_db_error().expect("a server error");
                    last = format!("{} {}", db_err.message(), db_err.detail().unwrap_or(""));
                    assert_eq!(code(&e), "55000", "{last}");
                    last.contains("mask keys differ between Citus nodes")
                        && last.contains(&format!(":{}", other.port))
                }
            },
        );
        assert!(last.contains("fingerprints"), "{last}");
        for sql in [
            "SELECT snowid_mask(1)",
            "SELECT snowid_unmask(1)",
            "SELECT snowid_unmask_text('2D476KTY36P9K')",
            "SELECT snowid_mask_text(1, 'photos', 'pho')",
        ] {
            let err = db.query_one(sql, &[]).unwrap_err();
            assert_eq!(code(&err), "55000", "{sql}: {err}");
        }
    }
    let fingerprints: Vec<String> = nodes
        .iter()
        .map(|node| one(&mut node.client(), "SELECT snowid_mask_key_fingerprint()"))
        .collect();
    assert_ne!(fingerprints[0], fingerprints[1]);
    let mut db = citus.client();
    for sql in [
        "CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT snowid_next(), url text)",
        "SELECT create_distributed_table('photos', 'id')",
        "INSERT INTO photos (url) SELECT 'photo ' || g FROM generate_series(1, 50) g",
    ] {
        db.batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let count: i64 = one(&mut db, "SELECT count(DISTINCT id) FROM photos");
    assert_eq!(count, 50);
    // The same key on both: both mask again, to one form wherever it is computed.
    put_keys(worker, &format!("* 1 {KEY}\n"));
    worker.reload();
    for node in nodes {
        let mut db = node.client();
        wait_until(
            &format!("node {} masks again", node.port),
            Duration::from_secs(90),
            || db.query_one("SELECT snowid_mask_text(1)", &[]).is_ok(),
        );
    }
    let mask = derived(KEY, "postgres");
    let rows = db
        .query("SELECT id, snowid_mask_text(id) FROM photos", &[])
        .unwrap();
    assert_eq!(rows.len(), 50);
    for row in &rows {
        let (id, link): (i64, String) = (row.get(0), row.get(1));
        assert_eq!(
            link,
            text::format(mask.mask(id).unwrap(), Version::new(1).unwrap(), "").unwrap()
        );
    }
}
