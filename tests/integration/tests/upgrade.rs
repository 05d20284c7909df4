//! Upgrading from every earlier version (0.1.0 to 0.7.0): the paths users take, the WAL an earlier
//! version left, and the release bookkeeping that makes them exist; and no earlier version
//! installed afresh.

use snowid_integration::catalog::CATALOG;
use snowid_integration::fences::{
    assert_generates_above, assert_refuses, describe, start, ACCEPTED_AHEAD, STATE,
};
use snowid_integration::{
    code, old_installs, without_old_install_scripts, Cluster, OldInstallScripts,
};
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

/// The extension's version: the root Cargo.toml's package version.
fn extension_version() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    fs::read_to_string(root)
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("a version line")
        .to_string()
}

/// The version of snowid installed in `db`'s database.
fn extversion(db: &mut snowid_integration::postgres::Client) -> String {
    db.query_one(
        "SELECT extversion FROM pg_extension WHERE extname = 'snowid'",
        &[],
    )
    .unwrap()
    .get(0)
}

/// Guards against an upgrade that loses tables, breaks old defaults, or leaves the upgraded
/// extension different from a fresh install: an earlier version is installed and used with this
/// library, updated with ALTER EXTENSION, and then its old tables keep generating above their
/// old IDs, the new functions work, its catalog entries equal a fresh install's, and a pg_dump
/// of it restores into a new database that generates above the dumped IDs.
fn upgrade_from(from: &str) {
    let cluster = Cluster::preloaded(&[]);
    let mut admin = cluster.client();
    for db in ["old_db", "fresh_db", "restored_db"] {
        admin
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .unwrap();
    }

    let mut old = cluster.client_of("old_db");
    let scripts = OldInstallScripts::place();
    old.batch_execute(&format!(
        "CREATE EXTENSION snowid VERSION '{from}';
             CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowid_next(5), n int);
             INSERT INTO orders (n) SELECT g FROM generate_series(1, 1000) g;"
    ))
    .unwrap();
    // The update needs the upgrade scripts only, which every install has.
    drop(scripts);
    let version = extversion(&mut old);
    assert_eq!(version, from);
    let generating: String = old
        .query_one("SELECT generating FROM snowid_info()", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        generating, "yes",
        "{from}'s snowid_info() works with this library"
    );
    let old_max: i64 = old
        .query_one("SELECT max(id) FROM orders", &[])
        .unwrap()
        .get(0);

    // Its resume (0.2.0 on), by the symbol its script names (the current function's for 0.2.0
    // to 0.6.0, with one argument; 0.7.0's own), works with this library.
    let old_max = match from {
        "0.1.0" => old_max,
        _ => {
            let above = old_max + (1 << 23) * 1000;
            let floor: Option<std::time::SystemTime> = old
                .query_one("SELECT snowid_resume_above($1::bigint)", &[&above])
                .unwrap_or_else(|e| panic!("{from}'s snowid_resume_above: {}", describe(&e)))
                .get(0);
            assert!(
                floor.is_some(),
                "{from}'s snowid_resume_above returns the floor"
            );
            above
        }
    };

    old.batch_execute("ALTER EXTENSION snowid UPDATE").unwrap();
    let version = extversion(&mut old);
    assert_eq!(version, extension_version());

    old.batch_execute("INSERT INTO orders (n) SELECT g FROM generate_series(1001, 2000) g")
        .unwrap();
    let row = old
        .query_one(
            "SELECT min(id) FILTER (WHERE n > 1000), count(*), count(DISTINCT id),
                    snowid_shard(snowid_next(7::bigint)), snowid_shard_for(42),
                    (SELECT layout FROM snowid_info()),
                    snowid_shard(snowid_next()) BETWEEN 0 AND 8191
             FROM orders",
            &[],
        )
        .unwrap();
    assert!(
        row.get::<_, i64>(0) > old_max,
        "old tables generate above their old IDs"
    );
    assert_eq!(row.get::<_, i64>(1), 2000);
    assert_eq!(row.get::<_, i64>(2), 2000);
    assert_eq!(row.get::<_, i32>(3), 7);
    assert_eq!(row.get::<_, i32>(4), 4643);
    assert_eq!(row.get::<_, String>(5), "41/13/10");
    assert!(row.get::<_, bool>(6));

    let mut fresh = cluster.client_of("fresh_db");
    fresh.batch_execute("CREATE EXTENSION snowid").unwrap();
    let upgraded_catalog: String = old.query_one(CATALOG, &[]).unwrap().get(0);
    let fresh_catalog: String = fresh.query_one(CATALOG, &[]).unwrap().get(0);
    assert_eq!(
        upgraded_catalog, fresh_catalog,
        "the upgrade script makes exactly what a fresh install makes"
    );

    cluster.dump_and_restore("old_db", "restored_db");
    let mut restored = cluster.client_of("restored_db");
    let dumped_max: i64 = restored
        .query_one("SELECT max(id) FROM orders", &[])
        .unwrap()
        .get(0);
    let new_id: i64 = restored
        .query_one("INSERT INTO orders (n) VALUES (0) RETURNING id", &[])
        .unwrap()
        .get(0);
    assert!(
        new_id > dumped_max,
        "the restored table's default generates above"
    );
    let default: String = restored
        .query_one(
            "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'orders'::regclass",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(default, "snowid_next(5)");
}

#[test]
fn from_0_1_0_to_this_version_and_through_a_dump() {
    upgrade_from("0.1.0");
}

#[test]
fn from_0_2_0_to_this_version_and_through_a_dump() {
    upgrade_from("0.2.0");
}

#[test]
fn from_0_3_0_to_this_version_and_through_a_dump() {
    upgrade_from("0.3.0");
}

#[test]
fn from_0_4_0_to_this_version_and_through_a_dump() {
    upgrade_from("0.4.0");
}

#[test]
fn from_0_5_0_to_this_version_and_through_a_dump() {
    upgrade_from("0.5.0");
}

#[test]
fn from_0_6_0_to_this_version_and_through_a_dump() {
    upgrade_from("0.6.0");
}

#[test]
fn from_0_7_0_to_this_version_and_through_a_dump() {
    upgrade_from("0.7.0");
}

/// Item 4 of issue 51. Guards against an install that offers an earlier version's script (0.7.0
/// shipped `snowid--0.1.0.sql` to `snowid--0.6.0.sql`: snowid is trusted, so a database owner's
/// `CREATE EXTENSION snowid VERSION '0.1.0'` ran that script as the superuser and brought back
/// holes fixed since, her `format()` or index expression running in the superuser's statements).
/// On a server where no test has placed them, PostgreSQL itself refuses every earlier version,
/// from a database owner in her database and from a superuser, and lists the current version only
/// as available; an update to an earlier version is refused too; the current version installs.
#[test]
fn no_earlier_version_can_be_installed() {
    let cluster = Cluster::preloaded(&[]);
    let mut admin = cluster.client();
    admin.batch_execute("CREATE ROLE owner1 LOGIN").unwrap();
    for database in ["CREATE DATABASE mdb OWNER owner1", "CREATE DATABASE sdb"] {
        admin.batch_execute(database).unwrap();
    }
    let versions = old_installs::versions();
    assert_eq!(
        versions.first().map(String::as_str),
        Some("0.1.0"),
        "{versions:?}"
    );
    assert!(versions.len() >= 7, "0.1.0 to 0.7.0 at least: {versions:?}");
    without_old_install_scripts(|| {
        let available: Vec<String> = admin
            .query(
                "SELECT version FROM pg_available_extension_versions WHERE name = 'snowid'",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(available, vec![extension_version()]);
        let mut owner = cluster.client_as("owner1", "mdb");
        let mut superuser = cluster.client_of("sdb");
        for version in &versions {
            for (who, db) in [
                ("owner1 in mdb", &mut owner),
                ("postgres in sdb", &mut superuser),
            ] {
                let err = db
                    .batch_execute(&format!("CREATE EXTENSION snowid VERSION '{version}'"))
                    .expect_err("no earlier version installs");
                assert_eq!(code(&err), "22023", "{who}, {version}: {}", describe(&err));
                assert_eq!(
                    err.as_db_error().map(|e| e.message().to_string()),
                    Some(format!(
                        "extension \"snowid\" has no installation script nor update path for \
                         version \"{version}\""
                    )),
                    "{who}, {version}"
                );
            }
        }
        owner.batch_execute("CREATE EXTENSION snowid").unwrap();
        assert_eq!(extversion(&mut owner), extension_version());
        for version in &versions {
            let err = owner
                .batch_execute(&format!("ALTER EXTENSION snowid UPDATE TO '{version}'"))
                .expect_err("no update to an earlier version");
            assert_eq!(code(&err), "22023", "{version}: {}", describe(&err));
        }
    });
}

/// A lease record as snowid 0.2.0 wrote it in the WAL (info 0x00): version 1, four zero bytes,
/// then the epoch, the time base and the lease end, little-endian.
fn lease_record_of_0_2_0(lease_end_unix_ms: i64) -> Vec<u8> {
    let epoch = snowid_core::epoch::DEFAULT_EPOCH_UNIX_MS;
    [
        &1u32.to_le_bytes()[..],
        &[0; 4],
        &epoch.to_le_bytes(),
        &(lease_end_unix_ms - 1501).to_le_bytes(),
        &lease_end_unix_ms.to_le_bytes(),
    ]
    .concat()
}

/// Item 6. Guards against WAL of snowid 0.2.0 stopping recovery (0.5.0 no longer knew 0.2.0's
/// record kind, and its redo raised an ERROR, which ends the startup process: a standby, a crash
/// recovery or a restore through 0.2.0-era WAL could not run). A record of 0.2.0's lease (written
/// by the test builds' hook) is replayed by a streaming standby, which then still answers, and by
/// the crash recovery of a cluster left as 0.2.0 leaves it (its state in `snowid.state`, none in
/// `global/9128`), which starts, refuses to generate until resumed, and then generates above
/// its old IDs.
#[test]
fn wal_of_0_2_0_replays_and_its_cluster_is_fenced_until_resumed() {
    let mut primary = Cluster::init_preloaded_with_fake_clock();
    start(&mut primary);
    let mut db = primary.client();
    let scripts = OldInstallScripts::place();
    db.batch_execute(
        "CREATE EXTENSION snowid VERSION '0.2.0';
         CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(1));
         INSERT INTO t SELECT FROM generate_series(1, 1000);
         CREATE FUNCTION snowid_test_wal_record(int, bytea) RETURNS bigint
             LANGUAGE c AS 'snowid', 'snowid_test_wal_record_wrapper';
         CHECKPOINT;",
    )
    .unwrap();
    drop(scripts);
    let old_max: i64 = db.query_one("SELECT max(id) FROM t", &[]).unwrap().get(0);
    let mut standby = Cluster::base_backup_of(&primary, true);
    start(&mut standby);
    let lease_end = snowid_integration::now_unix_ms() + 5_000;
    db.query_one(
        "SELECT snowid_test_wal_record(0, $1)",
        &[&lease_record_of_0_2_0(lease_end)],
    )
    .unwrap_or_else(|e| panic!("writing 0.2.0's record: {}", describe(&e)));
    standby.wait_for_replay_of(&primary);
    assert!(
        standby
            .log()
            .contains("skipped a WAL record of snowid 0.2.0"),
        "the standby names what it skipped:\n{}",
        standby.log()
    );
    drop(standby);

    // The cluster as 0.2.0 leaves it, stopped without a checkpoint after the record: its crash
    // recovery replays the record.
    drop(db);
    primary.stop("immediate");
    primary.leave_0_2_0_state(lease_end);
    primary.set_wall_clock_offset("-10m");
    primary
        .start()
        .unwrap_or_else(|log| panic!("crash recovery through 0.2.0's WAL:\n{log}"));
    assert!(
        primary
            .log()
            .contains("skipped a WAL record of snowid 0.2.0"),
        "crash recovery replayed the record (written after the last checkpoint):\n{}",
        primary.log()
    );
    assert!(!primary.pgdata().join(STATE).exists());
    assert_refuses(&primary, 1, old_max, "0.2.0's state left behind");
    let mut db = primary.client();
    db.batch_execute("ALTER EXTENSION snowid UPDATE").unwrap();
    // 0.2.0 kept releases in memory only, and no database records any: the operator names none.
    let err = db
        .query("SELECT * FROM snowid_resume_above_columns()", &[])
        .expect_err("the released shards are unknown");
    assert_eq!(
        err.as_db_error().map(|e| e.message()),
        Some("snowid cannot tell which shards this cluster released"),
        "{}",
        describe(&err)
    );
    let rows = db
        .query(
            &format!(
                "SELECT * FROM snowid_resume_above_columns(released => '{{}}', \
                 accept_ahead => '{ACCEPTED_AHEAD}')"
            ),
            &[],
        )
        .unwrap_or_else(|e| panic!("none released: {}", describe(&e)));
    assert_eq!(rows.len(), 1);
    assert_generates_above(&mut db, 1, old_max, "resumed");
}

/// Guards against a release whose version bump was forgotten somewhere: the extension's version
/// is Cargo's (the control file takes it from there), the core crate moves with it, every earlier
/// version kept in tests/old-installs has a chain of upgrade scripts in sql/ to it, and every
/// upgrade script starts with the guard against being run by hand; and against an install script
/// in sql/, which the install routes would copy (item 4 of issue 51).
#[test]
fn versions_and_upgrade_scripts_agree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let version = extension_version();
    let version = version.as_str();
    let core_toml = fs::read_to_string(root.join("core/Cargo.toml")).unwrap();
    assert!(
        core_toml.contains(&format!("\nversion = \"{version}\"\n")),
        "core/Cargo.toml has version {version}"
    );
    let control = fs::read_to_string(root.join("snowid.control")).unwrap();
    assert!(control.contains("default_version = '@CARGO_VERSION@'"));

    let installs: BTreeSet<String> = old_installs::versions().into_iter().collect();
    let mut upgrades = Vec::new();
    for entry in fs::read_dir(root.join("sql")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name
            .strip_prefix("snowid--")
            .and_then(|n| n.strip_suffix(".sql"))
        else {
            continue;
        };
        match stem.split_once("--") {
            Some((from, to)) => {
                let text = fs::read_to_string(root.join("sql").join(&name)).unwrap();
                assert!(
                    text.starts_with(&format!(
                        "\\echo Use \"ALTER EXTENSION snowid UPDATE TO '{to}'\" to load this file. \\quit"
                    )),
                    "{name} starts with the guard"
                );
                upgrades.push((from.to_string(), to.to_string()));
            }
            None => panic!(
                "sql/{name} is an install script: sql/ holds upgrade scripts only (earlier \
                 install scripts are in tests/old-installs; the current one is generated)"
            ),
        }
    }
    assert!(
        !installs.contains(version),
        "the current version's install script is generated, not kept in tests/old-installs"
    );
    for old in &installs {
        let mut at = old.clone();
        let mut steps = 0;
        while at != version {
            let Some((_, to)) = upgrades.iter().find(|(from, _)| *from == at) else {
                panic!("no upgrade script from {at} (on the way from {old} to {version})");
            };
            at = to.clone();
            steps += 1;
            assert!(steps < 100, "a cycle of upgrade scripts");
        }
    }
    for (from, to) in &upgrades {
        assert!(
            installs.contains(from) || upgrades.iter().any(|(_, t)| t == from),
            "snowid--{from}--{to}.sql starts from a version nothing installs"
        );
    }
}
