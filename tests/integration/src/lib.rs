//! Real PostgreSQL clusters for snowid's integration tests.
//!
//! Each [`Cluster`] gets its own temporary data directory and socket directory under `/tmp` and
//! a private loopback port, and is stopped (immediately) and removed when dropped, so a failing
//! test stops its server too. As root, PostgreSQL refuses to run, so every server command runs as
//! the `postgres` user through `sudo`; as anyone else, it runs as that user.
//!
//! The extension must already be installed into the server's directories
//! (`cargo pgrx install`); the test command does that first.
//!
//! Environment: `SNOWID_PG_CONFIG` picks the PostgreSQL installation
//! (default `/usr/lib/postgresql/15/bin/pg_config`); `SNOWID_UPGRADE_FROM`, where set, is the
//! `pg_config` of an older major with snowid installed, for `pg_upgrade` across majors.

use postgres::{Client, NoTls};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

pub mod catalog;
pub mod citus;
pub mod fences;
pub mod hostile;
pub mod old_installs;
pub mod patroni;
pub use old_installs::{without_old_install_scripts, OldInstallScripts};
pub use postgres;

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// Prefixes the commands a server runs for itself (archiving, restoring): they run without
/// libfaketime and need no faked clock (the server keeps its own). (The shell that runs them
/// still has it preloaded: see [`FaketimeShared`] for what kept one from running.)
const WITHOUT_FAKETIME: &str = "env -u LD_PRELOAD";

/// One PostgreSQL cluster owned by a test.
pub struct Cluster {
    pub port: u16,
    dir: PathBuf,
    bindir: PathBuf,
    env: Vec<(String, String)>,
    running: bool,
    /// Crash restarts in the log that a test has already waited for.
    crash_restarts_seen: AtomicUsize,
}

/// A new empty directory under /tmp, owned by the user the servers run as.
fn new_dir() -> PathBuf {
    new_dir_in(std::path::Path::new("/tmp"))
}

/// A new empty directory under `parent`, owned by the user the servers run as.
fn new_dir_in(parent: &std::path::Path) -> PathBuf {
    let dir = parent.join(format!(
        "snowid-it-{}-{}",
        std::process::id(),
        NEXT_DIR.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create the cluster directory");
    if is_root() {
        run(Command::new("chown").arg("postgres:postgres").arg(&dir));
    }
    dir
}

impl Cluster {
    fn unstarted(dir: PathBuf, bindir: PathBuf) -> Cluster {
        Cluster {
            port: free_port(),
            dir,
            bindir,
            env: Vec::new(),
            running: false,
            crash_restarts_seen: AtomicUsize::new(0),
        }
    }

    /// Runs initdb in a fresh temporary directory. Nothing is started yet.
    pub fn init() -> Cluster {
        Cluster::init_in(bindir_of(&pg_config()))
    }

    /// Runs initdb in a fresh directory under `parent` (a filesystem of the test's own, say).
    pub fn init_on(parent: &std::path::Path) -> Cluster {
        Cluster::init_with(new_dir_in(parent), bindir_of(&pg_config()))
    }

    /// A cluster of the older major that the test command names for `pg_upgrade` across majors
    /// (`SNOWID_UPGRADE_FROM`, that installation's `pg_config`, with snowid installed), made as
    /// [`Cluster::init`] makes one; `None` where none is named.
    pub fn init_of_upgrade_source() -> Option<Cluster> {
        let pg_config = std::env::var("SNOWID_UPGRADE_FROM").ok()?;
        Some(Cluster::init_in(bindir_of(&pg_config)))
    }

    /// Runs initdb with data checksums (`--data-checksums`) in a fresh temporary directory.
    pub fn init_with_data_checksums() -> Cluster {
        Cluster::init_with_args(new_dir(), bindir_of(&pg_config()), &["--data-checksums"])
    }

    /// Runs initdb without data checksums in a fresh temporary directory (from 18, initdb turns
    /// them on unless told not to).
    pub fn init_without_data_checksums() -> Cluster {
        let args: &[&str] = if major_number() >= 18 {
            &["--no-data-checksums"]
        } else {
            &[]
        };
        Cluster::init_with_args(new_dir(), bindir_of(&pg_config()), args)
    }

    fn init_in(bindir: PathBuf) -> Cluster {
        Cluster::init_with(new_dir(), bindir)
    }

    fn init_with(dir: PathBuf, bindir: PathBuf) -> Cluster {
        Cluster::init_with_args(dir, bindir, &[])
    }

    fn init_with_args(dir: PathBuf, bindir: PathBuf, args: &[&str]) -> Cluster {
        let cluster = Cluster::unstarted(dir, bindir);
        let pgdata = cluster.pgdata();
        let out = cluster
            .server_command("initdb")
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
            .args(args)
            .arg("-D")
            .arg(&pgdata)
            .output()
            .expect("run initdb");
        assert!(out.status.success(), "initdb failed: {}", text(&out));
        cluster.set("listen_addresses", "'127.0.0.1'");
        cluster.set("port", &cluster.port.to_string());
        cluster.set(
            "unix_socket_directories",
            &format!("'{}'", cluster.dir.display()),
        );
        cluster.set("fsync", "off");
        cluster.set("temp_file_limit", "'1GB'");
        cluster
    }

    /// A copy of a running primary made with `pg_basebackup` into a fresh directory, not
    /// started, on its own port and socket directory. With `standby`, it is a streaming standby
    /// (`-R`); without, a plain backup to restore from.
    pub fn base_backup_of(primary: &Cluster, standby: bool) -> Cluster {
        let cluster = Cluster::unstarted(new_dir(), primary.bindir.clone());
        let mut command = cluster.server_command("pg_basebackup");
        command
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-X",
                "stream",
                "--no-sync",
                "-c",
                "fast",
            ])
            .arg("-p")
            .arg(primary.port.to_string())
            .arg("-D")
            .arg(cluster.pgdata());
        if standby {
            command.arg("-R");
        }
        let out = command.output().expect("run pg_basebackup");
        assert!(out.status.success(), "pg_basebackup failed: {}", text(&out));
        cluster.set("port", &cluster.port.to_string());
        cluster.set(
            "unix_socket_directories",
            &format!("'{}'", cluster.dir.display()),
        );
        cluster
    }

    /// Promotes a standby and waits until it accepts writes.
    pub fn promote(&self) {
        let out = self
            .server_command("pg_ctl")
            .args(["promote", "-w", "-t", "60", "-D"])
            .arg(self.pgdata())
            .output()
            .expect("run pg_ctl promote");
        assert!(
            out.status.success(),
            "promote failed: {}\n{}",
            text(&out),
            self.log()
        );
    }

    /// Waits until this standby has replayed everything `primary` has written so far.
    pub fn wait_for_replay_of(&self, primary: &Cluster) {
        let target: String = primary
            .client()
            .query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
            .unwrap()
            .get(0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut db = self.client();
        loop {
            let caught_up: bool = db
                .query_one(
                    "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                    &[&target],
                )
                .unwrap()
                .get(0);
            if caught_up {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the standby did not replay up to {target}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Archives this cluster's WAL, from its next start on, into a directory of its own, which
    /// it returns (removed with the cluster: keep it until the restores from it are done).
    pub fn archive_wal(&self) -> PathBuf {
        let archive = self.dir.join("archive");
        self.run_as_server_user("mkdir", &[archive.as_os_str()]);
        self.set("archive_mode", "on");
        self.set(
            "archive_command",
            &format!("'{WITHOUT_FAKETIME} cp %p {}/%f'", archive.display()),
        );
        archive
    }

    /// Switches to a new WAL segment and waits until the archiver has archived it: everything
    /// written so far is in the archive.
    pub fn wait_for_archive(&self) {
        let mut db = self.client();
        let last_segment: String = db
            .query_one("SELECT pg_walfile_name(pg_switch_wal())", &[])
            .unwrap()
            .get(0);
        wait_until(
            &format!("the archiver has archived {last_segment}"),
            std::time::Duration::from_secs(60),
            || {
                db.query_one(
                    "SELECT coalesce(last_archived_wal >= $1, false) FROM pg_stat_archiver",
                    &[&last_segment],
                )
                .unwrap()
                .get(0)
            },
        );
    }

    /// Makes this stopped copy of a base backup a restore that replays WAL from `archive`: to
    /// the restore point `target` and no further, if one is named, then ends recovery on a new
    /// timeline.
    pub fn restore_from(&self, archive: &std::path::Path, target: Option<&str>) {
        self.set(
            "restore_command",
            &format!("'{WITHOUT_FAKETIME} cp {}/%f %p'", archive.display()),
        );
        self.set("archive_mode", "off");
        if let Some(name) = target {
            self.set("recovery_target_name", &format!("'{name}'"));
            self.set("recovery_target_action", "'promote'");
        }
        self.run_as_server_user(
            "touch",
            &[self.pgdata().join("recovery.signal").as_os_str()],
        );
    }

    /// Waits until the server has left recovery: a restore or a promotion is over.
    pub fn wait_until_out_of_recovery(&self) {
        let mut db = self.client();
        wait_until(
            "recovery has ended",
            std::time::Duration::from_secs(60),
            || {
                !db.query_one("SELECT pg_is_in_recovery()", &[])
                    .unwrap()
                    .get::<_, bool>(0)
            },
        );
    }

    /// This cluster's own directory (the data directory is `data` inside it), owned by the
    /// servers' user: a place for a WAL archive or a copy of a file.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// A started cluster with snowid preloaded and the extension created, plus any settings.
    pub fn preloaded(settings: &[(&str, &str)]) -> Cluster {
        Cluster::init().preload_and_start(settings)
    }

    /// Like [`Cluster::preloaded`], with the server's wall clock under the test's control (see
    /// [`Cluster::fake_wall_clock`]).
    pub fn preloaded_with_fake_clock() -> Cluster {
        Cluster::init_with_fake_clock().preload_and_start(&[])
    }

    /// A cluster not started yet, with snowid preloaded and the server's wall clock under the
    /// test's control (see [`Cluster::fake_wall_clock`]).
    pub fn init_preloaded_with_fake_clock() -> Cluster {
        let cluster = Cluster::init_with_fake_clock();
        cluster.set("shared_preload_libraries", "'snowid'");
        cluster
    }

    fn init_with_fake_clock() -> Cluster {
        let mut cluster = Cluster::init();
        cluster.fake_wall_clock();
        cluster
    }

    fn preload_and_start(mut self, settings: &[(&str, &str)]) -> Cluster {
        self.set("shared_preload_libraries", "'snowid'");
        for (name, value) in settings {
            self.set(name, value);
        }
        self.start()
            .unwrap_or_else(|log| panic!("the server did not start:\n{log}"));
        self.client()
            .batch_execute("CREATE EXTENSION snowid")
            .expect("create extension");
        self
    }

    pub fn pgdata(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Appends a setting to postgresql.conf; the last one written wins at the next start.
    pub fn set(&self, name: &str, value: &str) {
        let mut conf = OpenOptions::new()
            .append(true)
            .open(self.pgdata().join("postgresql.conf"))
            .expect("open postgresql.conf");
        writeln!(conf, "{name} = {value}").expect("write postgresql.conf");
    }

    /// Sets an environment variable for the server processes from the next start on.
    pub fn set_env(&mut self, name: &str, value: &str) {
        self.env.retain(|(n, _)| n != name);
        self.env.push((name.into(), value.into()));
    }

    /// Runs the server under libfaketime from the next start on: its wall clock is offset by
    /// what [`Cluster::set_wall_clock_offset`] last wrote (such as `-10m`), re-read on every
    /// call, so the clock can be stepped while the server runs. The monotonic clock stays real.
    pub fn fake_wall_clock(&mut self) {
        self.set_wall_clock_offset("+0");
        let file = self.dir.join("faketime").display().to_string();
        self.set_env(
            "LD_PRELOAD",
            "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        );
        self.set_env("FAKETIME_TIMESTAMP_FILE", &file);
        self.set_env("FAKETIME_NO_CACHE", "1");
        self.set_env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        let shared = FaketimeShared::of(&self.dir);
        shared.create();
        self.set_env("FAKETIME_SHARED", &shared.setting());
    }

    /// Steps the faked wall clock to this offset from real time, e.g. `-10m`, `-1h`, `+0`.
    pub fn set_wall_clock_offset(&self, offset: &str) {
        write_wall_clock_offset(&self.dir.join("faketime"), offset);
    }

    /// Starts the server and waits until it accepts connections. On failure, returns the log.
    pub fn start(&mut self) -> Result<(), String> {
        let out = self
            .server_command("pg_ctl")
            .args(["start", "-w", "-t", "60", "-D"])
            .arg(self.pgdata())
            .arg("-l")
            .arg(self.log_path())
            .output()
            .expect("run pg_ctl start");
        self.running = out.status.success();
        if self.running {
            Ok(())
        } else {
            let _ = self.try_stop("immediate");
            self.kill_unlisted_postmasters();
            Err(format!("{}\n{}", text(&out), self.log()))
        }
    }

    /// Stops the server: mode `fast`, `smart` or `immediate`. Fails the test if the server is
    /// still running afterwards (a stop that did not happen would let the next start fail, or
    /// leave a server behind).
    pub fn stop(&mut self, mode: &str) {
        if let Err(why) = self.try_stop(mode) {
            panic!("{why}");
        }
    }

    fn try_stop(&mut self, mode: &str) -> Result<(), String> {
        let out = self
            .server_command("pg_ctl")
            .args(["stop", "-w", "-t", "60", "-m", mode, "-D"])
            .arg(self.pgdata())
            .output()
            .map_err(|e| format!("run pg_ctl stop: {e}"))?;
        self.running = false;
        if out.status.success() || !self.pgdata().join("postmaster.pid").exists() {
            return Ok(());
        }
        let status = self
            .server_command("pg_ctl")
            .args(["status", "-D"])
            .arg(self.pgdata())
            .output()
            .map_err(|e| format!("run pg_ctl status: {e}"))?;
        // pg_ctl status exits with 3 when no server runs in the directory.
        if status.status.code() == Some(3) {
            return Ok(());
        }
        self.running = true;
        Err(format!(
            "pg_ctl stop -m {mode} failed and the server still runs: {}",
            text(&out)
        ))
    }

    /// A new connection as the superuser `postgres`.
    pub fn client(&self) -> Client {
        self.try_client().expect("connect to the test server")
    }

    /// A new connection that records every notice or warning the server sends it.
    pub fn client_recording_notices(
        &self,
    ) -> (Client, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = seen.clone();
        let client = postgres::Config::new()
            .host("127.0.0.1")
            .port(self.port)
            .user("postgres")
            .dbname("postgres")
            .notice_callback(move |notice| {
                sink.lock()
                    .unwrap()
                    .push(format!("{}: {}", notice.severity(), notice.message()))
            })
            .connect(NoTls)
            .expect("connect to the test server");
        (client, seen)
    }

    /// A new connection as the superuser `postgres` to another database of the cluster.
    pub fn client_of(&self, dbname: &str) -> Client {
        self.client_as("postgres", dbname)
    }

    /// A new connection as role `user` (which may log in) to a database of the cluster.
    pub fn client_as(&self, user: &str, dbname: &str) -> Client {
        postgres::Config::new()
            .host("127.0.0.1")
            .port(self.port)
            .user(user)
            .dbname(dbname)
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("connect to database {dbname} as {user}: {e}"))
    }

    /// `pg_dump -Fc` of one database restored with `pg_restore` into another (existing, empty)
    /// one, with this cluster's own programs; fails the test if either fails.
    pub fn dump_and_restore(&self, from: &str, to: &str) {
        let dump = self.dir.join(format!("{from}.dump"));
        let dump = dump.to_str().expect("a UTF-8 path");
        for (program, args) in [
            ("pg_dump", vec!["-Fc", "-d", from, "-f", dump]),
            ("pg_restore", vec!["-d", to, "--exit-on-error", dump]),
        ] {
            let out = self
                .server_command(program)
                .args(["-h", "127.0.0.1", "-U", "postgres", "-p"])
                .arg(self.port.to_string())
                .args(args)
                .output()
                .unwrap_or_else(|e| panic!("run {program}: {e}"));
            assert!(
                out.status.success(),
                "{program}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    pub fn try_client(&self) -> Result<Client, postgres::Error> {
        postgres::Config::new()
            .host("127.0.0.1")
            .port(self.port)
            .user("postgres")
            .dbname("postgres")
            .connect(NoTls)
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Runs `pg_upgrade` (in copy mode, its default) from `old` into this cluster, both stopped,
    /// as the servers' user, with `--check` if asked; fails the test if it fails.
    pub fn pg_upgrade_from(&self, old: &Cluster, check: bool) -> Output {
        let mut command = self.server_command("pg_upgrade");
        command
            .current_dir(self.dir())
            .arg("-b")
            .arg(old.bin_dir())
            .arg("-B")
            .arg(self.bin_dir())
            .arg("-d")
            .arg(old.pgdata())
            .arg("-D")
            .arg(self.pgdata())
            .arg("-p")
            .arg(old.port.to_string())
            .arg("-P")
            .arg(self.port.to_string());
        if check {
            command.arg("--check");
        }
        let out = command.output().expect("run pg_upgrade");
        assert!(
            out.status.success(),
            "pg_upgrade failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Waits until the log shows that the server finished a crash restart it had not finished
    /// when this was last called: each crash a test causes is waited for on its own.
    pub fn wait_for_crash_restart(&self) {
        const CRASH: &str = "all server processes terminated; reinitializing";
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let log = self.log();
            let crashes = log.matches(CRASH).count();
            if crashes > self.crash_restarts_seen.load(Ordering::Relaxed) {
                let last = log.rfind(CRASH).unwrap_or(0);
                if log[last..].contains("database system is ready to accept connections") {
                    self.crash_restarts_seen.store(crashes, Ordering::Relaxed);
                    return;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no crash restart:\n{log}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Kills one backend with SIGKILL (one that never called snowid) and waits for the crash
    /// restart that follows.
    pub fn kill_a_backend(&self) {
        let mut victim = self.client();
        let pid: i32 = victim
            .query_one("SELECT pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        self.kill("KILL", pid as u32);
        self.wait_for_crash_restart();
    }

    /// Starts the server again after its postmaster was killed, once the orphaned processes
    /// have noticed and left.
    pub fn restart_after_postmaster_kill(&mut self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            match self.start() {
                Ok(()) => return,
                Err(log) if std::time::Instant::now() > deadline => panic!("no restart:\n{log}"),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(500)),
            }
        }
    }

    /// The location of the latest checkpoint, as `global/pg_control` holds it (read directly:
    /// not every build here has `pg_controldata`). `ControlFileData` starts with the system
    /// identifier, two 32-bit versions, the state and the time, then the checkpoint's location,
    /// at byte 32 in every major from 15 to 18.
    pub fn checkpoint_lsn(&self) -> u64 {
        let control = fs::read(self.pgdata().join("global/pg_control")).expect("read pg_control");
        u64::from_le_bytes(control[32..40].try_into().unwrap())
    }

    /// Runs SQL in a single-user backend (`postgres --single`) on the stopped cluster, with the
    /// cluster's environment (its faked clock, say), and returns what it printed.
    pub fn single_user(&self, sql: &str) -> String {
        use std::process::Stdio;
        let mut child = self
            .server_command("postgres")
            .arg("--single")
            .arg("-D")
            .arg(self.pgdata())
            .arg("postgres")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a single-user backend");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(sql.as_bytes())
            .unwrap();
        let out = child
            .wait_with_output()
            .expect("the single-user backend ends");
        text(&out)
    }

    /// Puts a file into the data directory (`relative` to it), owned by the server's user.
    pub fn put_file(&self, relative: &str, contents: &[u8]) {
        let staged = self
            .dir
            .join(format!(".staged-{}", relative.replace('/', "_")));
        fs::write(&staged, contents).expect("stage the file");
        let target = self.pgdata().join(relative);
        self.run_as_server_user("cp", &[staged.as_os_str(), target.as_os_str()]);
        let _ = fs::remove_file(staged);
    }

    /// Removes a file from the data directory (`relative` to it).
    pub fn remove_file(&self, relative: &str) {
        let target = self.pgdata().join(relative);
        self.run_as_server_user("rm", &["-f".as_ref(), target.as_os_str()]);
    }

    /// Takes every file of snowid's state out of the stopped cluster's data directory: the state
    /// (`global/9128`), the cluster's witness (`global/9129`) and every database's witness
    /// (`base/<database>/9128`), as in a data directory no version since 0.4.0 has run in.
    pub fn remove_state_and_witnesses(&self) {
        self.remove_file("global/9128");
        self.remove_file("global/9129");
        for database in fs::read_dir(self.pgdata().join("base")).expect("list base/") {
            let name = database.expect("a database directory").file_name();
            self.remove_file(&format!("base/{}/9128", name.to_string_lossy()));
        }
    }

    /// Makes the stopped cluster's data directory what a 0.2.0 server leaves: its state file,
    /// `snowid.state` (a lease line, as 0.2.0 wrote it), and none of the later versions' files.
    pub fn leave_0_2_0_state(&self, lease_end_unix_ms: i64) {
        self.remove_state_and_witnesses();
        let file = format!(
            "snowid state 1\nepoch {}\nbase {}\nlease_end {lease_end_unix_ms}\n",
            snowid_core::epoch::DEFAULT_EPOCH_UNIX_MS,
            lease_end_unix_ms - 1501
        );
        self.put_file("snowid.state", file.as_bytes());
    }

    /// Rereads the configuration files.
    pub fn reload(&self) {
        let out = self
            .server_command("pg_ctl")
            .args(["reload", "-D"])
            .arg(self.pgdata())
            .output()
            .expect("run pg_ctl reload");
        assert!(out.status.success(), "reload failed: {}", text(&out));
    }

    /// The PID of the postmaster, from postmaster.pid.
    pub fn postmaster_pid(&self) -> u32 {
        let pidfile = fs::read_to_string(self.pgdata().join("postmaster.pid")).expect("pid file");
        pidfile
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("a pid")
    }

    /// The server's bin directory.
    pub fn bin_dir(&self) -> &std::path::Path {
        &self.bindir
    }

    /// The version of the server's programs, such as `18.6`.
    pub fn version(&self) -> String {
        let out = Command::new(self.bindir.join("pg_ctl"))
            .arg("--version")
            .output()
            .expect("run pg_ctl --version");
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .rsplit(") ")
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// A system program (`cp`, `mkdir`, ...) run as the server's OS user, so that what it writes
    /// belongs to the server.
    pub fn as_server_user(&self, program: &str) -> Command {
        if is_root() {
            let mut sudo = Command::new("sudo");
            sudo.args(["-u", "postgres", program]);
            sudo
        } else {
            Command::new(program)
        }
    }

    /// Runs a system program as the server's OS user and fails the test if it fails.
    pub fn run_as_server_user(&self, program: &str, args: &[&std::ffi::OsStr]) {
        run(self.as_server_user(program).args(args));
    }

    /// A PostgreSQL program from the server's bin directory, run as the server's OS user, with
    /// the cluster's environment.
    pub fn server_command(&self, program: &str) -> Command {
        let mut command = if is_root() {
            let mut sudo = Command::new("sudo");
            sudo.args(["-u", "postgres", "env"]);
            sudo
        } else {
            Command::new("env")
        };
        command.args(
            self.env
                .iter()
                .map(|(name, value)| format!("{name}={value}")),
        );
        command.arg(self.bindir.join(program));
        command
    }

    /// Sends a signal to a server process (the test runs as root or as the server's user).
    pub fn kill(&self, signal: &str, pid: u32) {
        run(Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string()));
    }

    /// Kills every postmaster started on this cluster's data directory that is still running,
    /// whether or not a `postmaster.pid` names it. One that hangs before writing that file (seen
    /// once under libfaketime, in a futex at start) outlives `pg_ctl start`'s timeout, and
    /// `pg_ctl stop` cannot find it: without this it would outlive its test.
    fn kill_unlisted_postmasters(&self) {
        use std::os::unix::ffi::OsStrExt;
        let pgdata = self.pgdata();
        let Ok(entries) = fs::read_dir("/proc") else {
            return;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let is_postgres = args.first().is_some_and(|a| a.ends_with(b"/postgres"));
            let on_ours = args.windows(2).any(|pair| {
                pair[0] == b"-D"
                    && std::path::Path::new(std::ffi::OsStr::from_bytes(pair[1])) == pgdata
            });
            if is_postgres && on_ours {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.running {
            if let Err(why) = self.try_stop("immediate") {
                // The last resort, so that no server outlives its test.
                eprintln!("{why}; killing the postmaster");
                if let Ok(pid) = fs::read_to_string(self.pgdata().join("postmaster.pid")) {
                    if let Some(pid) = pid.lines().next() {
                        let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
                    }
                }
            }
        }
        self.kill_unlisted_postmasters();
        // A server built with assertions (--enable-cassert) writes TRAP and aborts where one
        // fails; the postmaster then restarts, so nothing else may show it. Any TRAP fails the
        // test that started the server.
        let log = self.log();
        let traps: Vec<&str> = log.lines().filter(|l| l.contains("TRAP:")).collect();
        if std::thread::panicking() {
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- server log tail ({}):", self.dir.display());
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
        FaketimeShared::of(&self.dir).remove();
        if !traps.is_empty() && !std::thread::panicking() {
            panic!("an assertion failed in the server: {}", traps.join("\n"));
        }
    }
}

/// The SQLSTATE of a server error, or the client error as text.
pub fn code(err: &postgres::Error) -> String {
    err.as_db_error()
        .map(|e| e.code().code().to_string())
        .unwrap_or_else(|| format!("{err}"))
}

/// The wall clock now, in Unix milliseconds.
pub fn now_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Says something in every run, failing or not: it writes to the process's standard error
/// directly, which the test harness does not capture (it captures `eprintln!`).
pub fn say(text: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// Reports that a test did not run what it tests, and why: printed in every run (to the
/// process's standard error directly, which the test harness does not capture), and appended to
/// the file `SNOWID_NOT_RUN` names, if it is set, from which the test command prints its summary
/// of what was not run. A test that calls this returns at once; the harness counts it as passed,
/// so this line is what tells it apart.
pub fn not_run(test: &str, why: &str) {
    let line = format!("{test}: not run: {why}");
    say(&line);
    if let Ok(path) = std::env::var("SNOWID_NOT_RUN") {
        // One write of the whole line: tests run in parallel, and an appending write() is not
        // interleaved with another, where writeln!'s several writes would be.
        if let Ok(mut file) = OpenOptions::new().create(true).append(true).open(path) {
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// Records that a test which does not run everywhere (on a build without a tool it needs, or on
/// a major it is not meant for) ran here: a line appended to the file `SNOWID_RAN` names, if it
/// is set, from which the test command checks that every such test ran on some major of the
/// run, and on the major it is meant for.
pub fn ran(test: &str) {
    if let Ok(path) = std::env::var("SNOWID_RAN") {
        let line = format!("{test}: ran on PostgreSQL {}\n", major());
        if let Ok(mut file) = OpenOptions::new().create(true).append(true).open(path) {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// The PostgreSQL version the tests run against, such as `15.20` (or `19rc1 (Debian 19~rc1-1)`).
pub fn major() -> String {
    let out = Command::new(pg_config())
        .arg("--version")
        .output()
        .expect("run pg_config");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("PostgreSQL ")
        .to_string()
}

/// The major version's number (19 for "19~rc1").
pub fn major_number() -> u32 {
    major()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a major version number")
}

/// The `pg_config` of the PostgreSQL the tests run against.
fn pg_config() -> String {
    std::env::var("SNOWID_PG_CONFIG")
        .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_config".into())
}

pub(crate) fn bindir() -> PathBuf {
    bindir_of(&pg_config())
}

fn bindir_of(pg_config: &str) -> PathBuf {
    let out = Command::new(pg_config)
        .arg("--bindir")
        .output()
        .unwrap_or_else(|e| panic!("run {pg_config}: {e}"));
    assert!(out.status.success(), "{pg_config} --bindir: {}", text(&out));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Writes a libfaketime offset file (such as `-10m`) whole: into a file beside it, then renamed
/// over it. A server under libfaketime rereads the file at every clock call and exits if it
/// finds it empty, as a write in place leaves it for a moment.
/// The semaphore and memory segment libfaketime shares between the processes of one cluster run
/// under it. libfaketime (0.9.10) shares them between every process it is preloaded into, named
/// by `FAKETIME_SHARED`, which the first one (`pg_ctl` here) makes and never removes, and takes
/// the semaphore in clock calls: a process that stops while it holds it (a backend whose timeout
/// handler calls the clock while the clock call it interrupted holds it, or one killed there)
/// stalls every other one for good, such as the shell an archiver's `cp` runs in (a restore
/// test on 19 once waited a minute for a segment that was never archived). So each cluster gets
/// its own pair, made here with a count no number of stuck processes uses up, and removed with
/// the cluster. A glibc named semaphore is the file `/dev/shm/sem.NAME`, its count in its first
/// eight bytes (the rest zero); the segment is `/dev/shm/NAME`, zeros as libfaketime makes it.
struct FaketimeShared {
    name: String,
}

impl FaketimeShared {
    fn of(cluster_dir: &std::path::Path) -> FaketimeShared {
        let dir = cluster_dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy();
        FaketimeShared {
            name: format!("snowid_faketime_{dir}"),
        }
    }

    fn files(&self) -> [PathBuf; 2] {
        let shm = std::path::Path::new("/dev/shm");
        [shm.join(format!("sem.{}", self.name)), shm.join(&self.name)]
    }

    fn create(&self) {
        use std::os::unix::fs::PermissionsExt;
        let [semaphore, segment] = self.files();
        let mut count = 1_000_000u64.to_le_bytes().to_vec();
        count.resize(32, 0);
        for (path, bytes) in [(&semaphore, count), (&segment, vec![0u8; 4096])] {
            fs::write(path, bytes).expect("write libfaketime's shared file");
            // Read and written by the server's processes, whichever user they run as.
            fs::set_permissions(path, fs::Permissions::from_mode(0o666))
                .expect("open libfaketime's shared file to the server");
        }
    }

    /// `FAKETIME_SHARED`: the semaphore's and the segment's names.
    fn setting(&self) -> String {
        format!("/{0} /{0}", self.name)
    }

    fn remove(&self) {
        for path in self.files() {
            let _ = fs::remove_file(path);
        }
    }
}

pub fn write_wall_clock_offset(file: &std::path::Path, offset: &str) {
    let next = file.with_extension("next");
    fs::write(&next, format!("{offset}\n")).expect("write the faketime file");
    fs::rename(&next, file).expect("replace the faketime file");
}

fn run(command: &mut Command) {
    let out = command.output().expect("run a helper command");
    assert!(out.status.success(), "{command:?} failed: {}", text(&out));
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Cancels a client's running query if it is still running when the deadline passes, so that a
/// stall fails the test instead of hanging it. Server-side `statement_timeout` is not enough
/// under libfaketime, which also fakes the timers it relies on.
pub struct Watchdog {
    done: std::sync::mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    pub fn new(client: &Client, deadline: std::time::Duration) -> Watchdog {
        let cancel = client.cancel_token();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            if wait.recv_timeout(deadline) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                let _ = cancel.cancel_query(NoTls);
            }
        });
        Watchdog {
            done,
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let _ = self.done.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Waits until `condition` holds, polling; fails the test with `what` after `limit`. For a
/// condition the test can observe, in place of a sleep sized for this machine's speed.
pub fn wait_until(what: &str, limit: std::time::Duration, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting until {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// `ALTER SYSTEM SET name = value`, a reload, and a wait until `db`'s own session sees the
/// setting as `shown` (a session rereads its settings between statements, not during one): what
/// a test does before it checks a reload's effect in that session.
pub fn set_and_reload(db: &mut Client, name: &str, value: &str, shown: &str) {
    db.batch_execute(&format!("ALTER SYSTEM SET {name} = '{value}'"))
        .unwrap_or_else(|e| panic!("ALTER SYSTEM SET {name} = '{value}': {e}"));
    db.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until(
        &format!("the session sees {name} = '{shown}'"),
        std::time::Duration::from_secs(30),
        || {
            let now: String = db
                .query_one("SELECT current_setting($1)", &[&name])
                .unwrap()
                .get(0);
            now == shown
        },
    );
}

/// Creates `worker_pid()`, the process ID of whichever process evaluates it, marked parallel
/// safe (PL/pgSQL, so that it is not inlined into `pg_backend_pid()`, which is parallel
/// restricted), so that a statement can show which of its rows parallel workers computed.
pub fn create_worker_pid(db: &mut Client) {
    db.batch_execute(
        "CREATE FUNCTION worker_pid() RETURNS int LANGUAGE plpgsql VOLATILE PARALLEL SAFE
         AS $$ BEGIN RETURN pg_backend_pid(); END $$;",
    )
    .expect("create worker_pid()");
}

/// Session settings under which a scan of a table of a few hundred thousand rows runs in
/// `workers` parallel workers.
pub fn parallel_settings(workers: i32) -> String {
    format!(
        "SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
         SET min_parallel_table_scan_size = 0; SET max_parallel_workers_per_gather = {workers};"
    )
}

/// What one statement of `n` IDs on one shard did.
#[derive(Debug)]
pub struct Burst {
    /// How many IDs, and how many distinct.
    pub count: i64,
    pub distinct: i64,
    /// How far the furthest ID was dated past the clock read just after it was issued, in
    /// seconds. (Read before, the time the call waited, or this machine kept it waiting, would
    /// count as lead.)
    pub lead_s: f64,
    /// The shard's throttled waits since the server started: each is a caller that reached
    /// `snowid.max_lead` and waited for the clock.
    pub waits: i64,
    /// How many of its milliseconds filled all 1,024 IDs: none means the statement never
    /// outran the layout's ceiling here, so it could not run ahead of the clock.
    pub full_ms: i64,
    /// How far the wall clock was behind the time base at the last comparison after it, in
    /// seconds (`snowid_info().clock_behind`): the lead is bounded against the time base, which
    /// never steps back, and the wall clock may lag it by a few milliseconds.
    pub clock_behind_s: f64,
}

/// Takes `n` IDs for `shard` in one statement, as fast as this server issues them.
pub fn burst(db: &mut Client, shard: i32, n: i32) -> Burst {
    let _watchdog = Watchdog::new(db, std::time::Duration::from_secs(120));
    let row = db
        .query_one(
            "SELECT count(*), count(DISTINCT id),
                    max(extract(epoch FROM snowid_timestamp(id) - at))::float8,
                    count(*) FILTER (WHERE snowid_seq(id) = 1023)
             FROM (SELECT id, clock_timestamp() AS at
                   FROM (SELECT snowid_next($1::int) AS id FROM generate_series(1, $2)
                         OFFSET 0) ids) s",
            &[&shard, &n],
        )
        .unwrap_or_else(|e| panic!("a burst of {n} IDs on shard {shard}: {e}"));
    let after = db
        .query_one(
            "SELECT throttled_waits, (SELECT extract(epoch FROM clock_behind)::float8
                                      FROM snowid_info())
             FROM snowid_stats() WHERE shard = $1",
            &[&shard],
        )
        .unwrap();
    Burst {
        count: row.get(0),
        distinct: row.get(1),
        lead_s: row.get(2),
        waits: after.get(0),
        full_ms: row.get(3),
        clock_behind_s: after.get(1),
    }
}

/// The first column of the one row `sql` returns; the query must succeed.
pub fn one<T: postgres::types::FromSqlOwned>(
    db: &mut Client,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> T {
    db.query_one(sql, params)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

/// Waits until `sql`, a query of one boolean (of `pg_stat_activity`, say), returns true in `db`;
/// fails the test with `what` after 8 seconds.
pub fn wait_for(db: &mut Client, what: &str, sql: &str) {
    wait_until(what, std::time::Duration::from_secs(8), || {
        one::<bool>(db, sql, &[])
    });
}

/// Each of `row`'s first columns, a count, is the one `expected` gives, or fails with its words:
/// for the usual check of rows arrived, IDs distinct, IDs on their shards and in order.
pub fn assert_counts(row: &postgres::Row, expected: &[(i64, &str)]) {
    for (column, (count, what)) in expected.iter().enumerate() {
        assert_eq!(row.get::<_, i64>(column), *count, "{what}");
    }
}
