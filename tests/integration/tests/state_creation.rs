//! The state's creation survives a crash, an error and a full disk at every point, and a
//! damaged state file ends recovery in a fence, not a PANIC.
//!
//! The creation's points are the fault points the server offers its tests (the environment
//! variable `SNOWID_FAULT`, see `src/server/state/faults.rs`): after the state's file is
//! extended, after its WAL record is inserted, and after the record is durable, before the
//! witnesses. At each, the server crashes (SIGKILL) or raises an error. Whatever it left, the next
//! start decides again from the same evidence: a first install, where nothing was issued, is
//! created fresh and generates; a lost state, where IDs were issued, stays fenced.

use snowid_integration::fences::*;
use snowid_integration::postgres::Client;
use snowid_integration::{code, is_root, not_run, Cluster};
use std::process::Command;

const POINTS: [&str; 3] = ["extended", "logged", "durable"];
const FAULTS: [&str; 2] = ["crash", "error"];

/// A preloaded cluster, started with a fault point set (`point=fault`), not yet with snowid.
fn started_with_fault(fault: &str) -> Cluster {
    let mut cluster = Cluster::init_preloaded_with_fake_clock();
    cluster.set_env("SNOWID_FAULT", fault);
    start(&mut cluster);
    cluster
}

/// Runs `sql`, which must fail: by the fault's error, or by the connection lost to the crash (the
/// crash restart is waited for).
fn fails_at_the_fault(cluster: &Cluster, db: &mut Client, sql: &str, fault: &str) {
    let err = db
        .batch_execute(sql)
        .expect_err("the fault point fires during the creation (the test is sharp)");
    if fault.ends_with("=crash") {
        assert!(
            err.as_db_error().is_none() || code(&err) == "57P02",
            "{}",
            describe(&err)
        );
        cluster.wait_for_crash_restart();
    } else {
        assert_eq!(code(&err), "58000", "{}", describe(&err));
        assert!(
            describe(&err).contains("snowid fault point"),
            "{}",
            describe(&err)
        );
    }
}

/// Restarts the cluster without the fault.
fn without_the_fault(cluster: &mut Cluster) {
    cluster.stop("immediate");
    cluster.set_env("SNOWID_FAULT", "");
    start(cluster);
}

/// Guards against a creation cut short counting as a state, or as a lost one: `CREATE
/// EXTENSION` on a new cluster crashes or fails at each point of the state's creation; started
/// again without the fault, `CREATE EXTENSION` succeeds and the server generates, unfenced
/// (nothing was ever issued), also after a restart.
#[test]
fn a_first_install_cut_short_at_any_point_installs_again_unfenced() {
    for point in POINTS {
        for fault in FAULTS {
            let fault = format!("{point}={fault}");
            let mut cluster = started_with_fault(&fault);
            let mut db = cluster.client();
            fails_at_the_fault(&cluster, &mut db, "CREATE EXTENSION snowid", &fault);
            drop(db);
            without_the_fault(&mut cluster);
            let mut db = cluster.client();
            db.batch_execute("CREATE EXTENSION IF NOT EXISTS snowid")
                .unwrap_or_else(|e| panic!("{fault}: {}", describe(&e)));
            let first = next_ids(&mut db, 1, 10);
            assert_eq!(generating(&mut db), "yes", "{fault}");
            drop(db);
            restart(&mut cluster, "fast");
            assert_generates_above(&mut cluster.client(), 1, first[9], &fault);
        }
    }
}

/// Guards against a lost state's fenced creation cut short turning into a fresh start (0.4.0
/// removed an old version's mark before the state that replaced it was durable): with IDs
/// issued and the state deleted, the first generation crashes or fails at each point of the
/// fenced state's creation; started again without the fault, with the clock 10 minutes behind,
/// the server refuses (55000) until resumed, and generates above the old IDs afterwards.
#[test]
fn a_lost_states_fenced_creation_cut_short_at_any_point_stays_fenced() {
    for point in POINTS {
        for fault in FAULTS {
            let fault = format!("{point}={fault}");
            let mut cluster = cluster_with_rows(1, 1000);
            let old_max = max_id(&mut cluster.client());
            cluster.stop("fast");
            damage(&cluster, Damage::Deleted);
            cluster.set_env("SNOWID_FAULT", &fault);
            cluster.set_wall_clock_offset(BEHIND);
            start(&mut cluster);
            let mut db = cluster.client();
            fails_at_the_fault(&cluster, &mut db, "SELECT snowid_next(1)", &fault);
            drop(db);
            without_the_fault(&mut cluster);
            assert_refuses(&cluster, 1, old_max, &fault);
            restart(&mut cluster, "immediate");
            assert_refuses(&cluster, 1, old_max, &format!("{fault}, restarted"));
            let mut db = cluster.client();
            resume(&mut db, old_max);
            assert_generates_above(&mut db, 1, old_max, &fault);
        }
    }
}

/// Mounts a small tmpfs at `dir` (as root, or through sudo), for a disk that fills up.
fn mount_small_disk(dir: &std::path::Path, megabytes: u32) -> bool {
    let sudo = if is_root() {
        vec![]
    } else {
        vec!["sudo", "-n"]
    };
    let run = |args: &[&str]| {
        let mut all = sudo.clone();
        all.extend_from_slice(args);
        Command::new(all[0])
            .args(&all[1..])
            .status()
            .is_ok_and(|s| s.success())
    };
    std::fs::create_dir_all(dir).unwrap();
    let dir = dir.to_str().unwrap();
    run(&[
        "mount",
        "-t",
        "tmpfs",
        "-o",
        &format!("size={megabytes}m,mode=0777"),
        "tmpfs",
        dir,
    ])
}

fn unmount(dir: &std::path::Path) {
    let mut command = if is_root() {
        Command::new("umount")
    } else {
        let mut sudo = Command::new("sudo");
        sudo.args(["-n", "umount"]);
        sudo
    };
    let _ = command.arg(dir).status();
}

/// Unmounts the small disk when dropped, after the cluster on it has been stopped.
struct SmallDisk(std::path::PathBuf);

impl Drop for SmallDisk {
    fn drop(&mut self) {
        unmount(&self.0);
    }
}

/// Fills the filesystem holding `cluster` to the last byte, with a file in its directory.
fn fill_the_disk(cluster: &Cluster) {
    let filler = cluster.dir().join("filler");
    cluster.run_as_server_user(
        "sh",
        &[
            "-c".as_ref(),
            format!(
                "dd if=/dev/zero of='{}' bs=64k >/dev/null 2>&1; true",
                filler.display()
            )
            .as_ref(),
        ],
    );
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(cluster.dir())
        .output()
        .unwrap();
    let avail = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        avail.lines().nth(1).map(str::trim),
        Some("0"),
        "the disk is full (the test is sharp)"
    );
}

/// Runs `sql` on a full disk: it must fail with SQLSTATE 53100. Then frees the disk. A new WAL
/// segment is started first, so that the WAL has room left in a file already written.
fn fails_on_a_full_disk(cluster: &Cluster, db: &mut Client, sql: &str) {
    db.batch_execute("CHECKPOINT; SELECT pg_switch_wal(); CHECKPOINT;")
        .unwrap();
    fill_the_disk(cluster);
    let err = db
        .batch_execute(sql)
        .expect_err("no room for the state (the test is sharp)");
    cluster.run_as_server_user(
        "rm",
        &["-f".as_ref(), cluster.dir().join("filler").as_os_str()],
    );
    assert_eq!(code(&err), "53100", "{sql}: {}", describe(&err));
}

/// Guards against a full disk turning into a fresh state or a lost verdict: on a cluster whose
/// disk (a small tmpfs) is full, `CREATE EXTENSION` fails with SQLSTATE 53100 and leaves no
/// state; with room again it installs unfenced and generates. Then, with IDs issued and the state
/// deleted, the fenced creation at the first generation fails on the full disk (53100); with room
/// again the server refuses (55000), and generates above the old IDs once resumed.
#[test]
fn a_full_disk_during_the_creation_loses_nothing() {
    let disk = std::env::temp_dir().join(format!("snowid-full-disk-{}", std::process::id()));
    if !mount_small_disk(&disk, 160) {
        not_run(
            "a_full_disk_during_the_creation_loses_nothing",
            "mounting a tmpfs needs root or sudo, and neither worked",
        );
        return;
    }
    let _disk = SmallDisk(disk.clone());
    let mut cluster = Cluster::init_on(&disk);
    cluster.fake_wall_clock();
    cluster.set("shared_preload_libraries", "'snowid'");
    start(&mut cluster);
    let mut db = cluster.client();
    fails_on_a_full_disk(&cluster, &mut db, "CREATE EXTENSION snowid");
    db.batch_execute(
        "CREATE EXTENSION snowid;
         CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowid_next(1));
         INSERT INTO t SELECT FROM generate_series(1, 1000);",
    )
    .unwrap_or_else(|e| panic!("with room again: {}", describe(&e)));
    assert_eq!(generating(&mut db), "yes");
    let old_max = max_id(&mut db);
    drop(db);

    cluster.stop("fast");
    damage(&cluster, Damage::Deleted);
    cluster.set_wall_clock_offset(BEHIND);
    start(&mut cluster);
    let mut db = cluster.client();
    fails_on_a_full_disk(&cluster, &mut db, "SELECT snowid_next(1)");
    drop(db);
    assert_refuses(&cluster, 1, old_max, "with room again");
    restart(&mut cluster, "fast");
    assert_refuses(&cluster, 1, old_max, "restarted");
    let mut db = cluster.client();
    resume(&mut db, old_max);
    assert_generates_above(&mut db, 1, old_max, "once resumed");
    drop(db);
    cluster.stop("fast");
}

/// Code-read item: `full_page_writes = off`. Guards against a state file cut short ending
/// recovery in a PANIC ("WAL contains references to invalid pages"), as leases replayed without
/// an image of their page did: the state is cut to nothing between an immediate stop and the
/// start, with lease records after the last checkpoint; recovery completes, and the server
/// refuses (55000) until resumed.
#[test]
fn a_cut_state_without_full_page_writes_ends_recovery_in_a_fence() {
    let mut cluster = cluster_with_rows(1, 1000);
    cluster.set("full_page_writes", "off");
    restart(&mut cluster, "fast");
    let mut db = cluster.client();
    db.batch_execute(
        "CHECKPOINT;
         INSERT INTO t SELECT FROM generate_series(1, 1000);",
    )
    .unwrap();
    let old_max = max_id(&mut db);
    drop(db);
    cluster.stop("immediate");
    cluster.put_file(STATE, &[]);
    cluster.set_wall_clock_offset(BEHIND);
    start(&mut cluster);
    assert_refuses(&cluster, 1, old_max, "recovered with the state cut");
    let mut db = cluster.client();
    resume(&mut db, old_max);
    assert_generates_above(&mut db, 1, old_max, "once resumed");
}
