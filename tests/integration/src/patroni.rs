//! Patroni clusters on loopback for snowid's tests: one etcd and two Patroni nodes, each node's
//! PostgreSQL under a wall clock the test moves (libfaketime), on private ports in temporary
//! directories. Everything is killed and removed when the [`PatroniCluster`] is dropped, on
//! failure too.
//!
//! Patroni runs as the `postgres` OS user (it refuses root), through `sudo` when the tests run
//! as root. Only PostgreSQL's clock is faked, not Patroni's own (whose leader key and loop timing
//! must stay real): each node's `bin_dir` holds small scripts that run PostgreSQL's programs
//! under libfaketime.

use crate::{is_root, say};
use postgres::{Client, NoTls};
use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why Patroni cannot be used here, or `None` when `patroni` and `etcd` are installed.
pub fn missing_patroni() -> Option<String> {
    for program in ["patroni", "etcd"] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {program}"))
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !found {
            return Some(format!(
                "{program} is not installed (scripts/setup installs Debian's patroni, etcd-server and python3-etcd)"
            ));
        }
    }
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One Patroni node.
pub struct Node {
    pub name: String,
    pub pg_port: u16,
    pub api_port: u16,
    dir: PathBuf,
    config: PathBuf,
    process: Option<Child>,
}

impl Node {
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Sets this node's wall clock to an offset from real time, such as `-30s` or `+0`.
    pub fn set_clock(&self, offset: &str) {
        crate::write_wall_clock_offset(&self.dir.join("faketime"), offset);
    }

    /// A connection to this node's PostgreSQL.
    pub fn client(&self) -> Result<Client, postgres::Error> {
        postgres::Config::new()
            .host("127.0.0.1")
            .port(self.pg_port)
            .user("postgres")
            .dbname("postgres")
            .connect_timeout(Duration::from_secs(3))
            .connect(NoTls)
    }

    /// What `GET /patroni` says, or an empty string while the API does not answer.
    pub fn status(&self) -> String {
        http(self.api_port, "GET", "/patroni", "").unwrap_or_default()
    }

    /// Whether this node runs PostgreSQL as the leader.
    pub fn is_leader(&self) -> bool {
        let status = self.status();
        status.contains("\"state\": \"running\"")
            && (status.contains("\"role\": \"master\"") || status.contains("\"role\": \"primary\""))
    }

    /// Whether Patroni's store names this node the synchronous standby (in synchronous mode,
    /// the only node Patroni fails over to).
    pub fn is_sync_standby(&self) -> bool {
        self.status().contains("\"sync_standby\": true")
    }

    /// Whether this node runs PostgreSQL as a replica that streams from the leader.
    pub fn is_streaming_replica(&self) -> bool {
        let status = self.status();
        status.contains("\"state\": \"running\"")
            && status.contains("\"role\": \"replica\"")
            && self
                .client()
                .and_then(|mut c| c.query_one("SELECT status FROM pg_stat_wal_receiver", &[]))
                .map(|r| r.get::<_, String>(0) == "streaming")
                .unwrap_or(false)
    }

    /// Starts this node's Patroni.
    pub fn start(&mut self) {
        let mut command = if is_root() {
            let mut c = Command::new("sudo");
            c.args(["-u", "postgres"]);
            c
        } else {
            Command::new("env")
        };
        command
            .arg("patroni")
            .arg(&self.config)
            .stdin(Stdio::null());
        // Patroni logs to standard error.
        match fs::File::create(self.dir.join("patroni.log")) {
            Ok(log) => {
                if let Ok(copy) = log.try_clone() {
                    command.stdout(copy);
                }
                command.stderr(log);
            }
            Err(_) => {
                command.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        self.process = Some(command.spawn().expect("start patroni"));
    }

    /// Kills this node's Patroni and its PostgreSQL with SIGKILL: a machine dying.
    pub fn kill(&mut self) {
        let _ = Command::new("pkill")
            .args(["-9", "-f"])
            .arg(format!("patroni {}", self.config.display()))
            .status();
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Ok(pidfile) = fs::read_to_string(self.data_dir().join("postmaster.pid")) {
            if let Some(pid) = pidfile.lines().next() {
                let _ = Command::new("kill").args(["-9", pid.trim()]).status();
            }
        }
        // The postmaster's children leave once they see it gone.
        std::thread::sleep(Duration::from_millis(500));
    }

    pub fn log(&self) -> String {
        let mut log = fs::read_to_string(self.dir.join("patroni.log")).unwrap_or_default();
        if let Ok(entries) = fs::read_dir(self.data_dir().join("log")) {
            for entry in entries.flatten() {
                log.push_str(&fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
        log
    }
}

/// etcd and two Patroni nodes.
pub struct PatroniCluster {
    pub nodes: Vec<Node>,
    etcd: Option<Child>,
    dir: PathBuf,
}

impl PatroniCluster {
    /// Starts etcd and two nodes, `node1` first so that it bootstraps the cluster, and waits
    /// until `node1` leads and `node2` streams from it. `synchronous` turns on Patroni's
    /// synchronous mode. `clocks` are the nodes' wall-clock offsets from real time.
    pub fn start(name: &str, synchronous: bool, clocks: [&str; 2]) -> PatroniCluster {
        let dir = PathBuf::from(format!("/tmp/snowid-patroni-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the cluster directory");
        if is_root() {
            let _ = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status();
        }
        let (client_port, peer_port) = (free_port(), free_port());
        let etcd = Command::new("etcd")
            .args(["--name", "e1", "--data-dir"])
            .arg(dir.join("etcd"))
            .arg("--listen-client-urls")
            .arg(format!("http://127.0.0.1:{client_port}"))
            .arg("--advertise-client-urls")
            .arg(format!("http://127.0.0.1:{client_port}"))
            .arg("--listen-peer-urls")
            .arg(format!("http://127.0.0.1:{peer_port}"))
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://127.0.0.1:{peer_port}"))
            .arg("--initial-cluster")
            .arg(format!("e1=http://127.0.0.1:{peer_port}"))
            .stdout(Stdio::null())
            .stderr(
                fs::File::create(dir.join("etcd.log"))
                    .map(Stdio::from)
                    .unwrap_or(Stdio::null()),
            )
            .spawn()
            .expect("start etcd");
        let mut cluster = PatroniCluster {
            nodes: Vec::new(),
            etcd: Some(etcd),
            dir: dir.clone(),
        };
        wait_for("etcd answers", Duration::from_secs(30), || {
            http(client_port, "GET", "/health", "").is_some_and(|b| b.contains("true"))
        });
        for (i, clock) in clocks.iter().enumerate() {
            let node = new_node(&dir, &format!("node{}", i + 1), client_port, synchronous);
            node.set_clock(clock);
            cluster.nodes.push(node);
        }
        cluster.nodes[0].start();
        wait_for("node1 leads", Duration::from_secs(90), || {
            cluster.nodes[0].is_leader()
        });
        cluster.nodes[1].start();
        wait_for("node2 streams from node1", Duration::from_secs(90), || {
            cluster.nodes[1].is_streaming_replica()
        });
        cluster
    }

    /// The index of the node that leads now, if one does.
    pub fn leader(&self) -> Option<usize> {
        self.nodes.iter().position(|n| n.is_leader())
    }

    /// A planned switchover to `candidate`; returns once it leads and the old leader streams
    /// from it. (The old leader may close the request's connection while it demotes: the
    /// switchover still happens.)
    pub fn switchover(&self, candidate: usize) {
        let leader = self.leader().expect("a leader to switch over from");
        let body = format!(
            "{{\"leader\": \"{}\", \"candidate\": \"{}\"}}",
            self.nodes[leader].name, self.nodes[candidate].name
        );
        // Patroni refuses (412) a candidate it has not yet made the synchronous standby, in
        // synchronous mode: ask again until it accepts or the candidate leads.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match http(self.nodes[leader].api_port, "POST", "/switchover", &body) {
                Some(answer) if !answer.contains("witched over") && Instant::now() < deadline => {
                    if self.nodes[candidate].is_leader() {
                        break;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
                _ => break,
            }
        }
        wait_for(
            &format!("{} leads after the switchover", self.nodes[candidate].name),
            Duration::from_secs(90),
            || self.nodes[candidate].is_leader(),
        );
        wait_for(
            &format!(
                "{} streams from {}",
                self.nodes[leader].name, self.nodes[candidate].name
            ),
            Duration::from_secs(90),
            || self.nodes[leader].is_streaming_replica(),
        );
    }

    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("=== {}\n{}", n.name, n.log()))
            .collect()
    }
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for line in self
                .logs()
                .lines()
                .rev()
                .take(80)
                .collect::<Vec<_>>()
                .iter()
                .rev()
            {
                eprintln!("{line}");
            }
        }
        for node in &mut self.nodes {
            node.kill();
            let _ = Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "pkill -9 -f 'postgres.*-D {}' || true",
                    node.data_dir().display()
                ))
                .status();
        }
        if let Some(mut etcd) = self.etcd.take() {
            let _ = etcd.kill();
            let _ = etcd.wait();
        }
        for node_dir in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            crate::FaketimeShared::of(&node_dir.path()).remove();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn new_node(dir: &Path, name: &str, etcd_port: u16, synchronous: bool) -> Node {
    let node_dir = dir.join(name);
    fs::create_dir_all(&node_dir).expect("create the node directory");
    let (pg_port, api_port) = (free_port(), free_port());
    let bindir = fake_clock_bindir(&node_dir);
    let config = node_dir.join("patroni.yml");
    fs::write(
        &config,
        format!(
            r#"scope: snowid-{scope}
name: {name}
log:
  level: INFO
restapi:
  listen: 127.0.0.1:{api_port}
  connect_address: 127.0.0.1:{api_port}
etcd3:
  hosts: 127.0.0.1:{etcd_port}
bootstrap:
  dcs:
    ttl: 12
    loop_wait: 1
    retry_timeout: 5
    maximum_lag_on_failover: 1073741824
    synchronous_mode: {synchronous}
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        shared_preload_libraries: snowid
        wal_log_hints: 'on'
        wal_level: replica
        hot_standby: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
        fsync: 'off'
        temp_file_limit: 1GB
        snowid.shards: '5-6'
        snowid.promotion_margin: 90s
  initdb:
  - encoding: UTF8
  - auth: trust
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{pg_port}
  connect_address: 127.0.0.1:{pg_port}
  data_dir: {data}
  bin_dir: {bindir}
  pgpass: {pgpass}
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: '{sockets}'
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
"#,
            scope = dir.file_name().unwrap().to_string_lossy(),
            data = node_dir.join("data").display(),
            bindir = bindir.display(),
            pgpass = node_dir.join("pgpass").display(),
            sockets = node_dir.display(),
        ),
    )
    .expect("write the Patroni configuration");
    if is_root() {
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&node_dir)
            .status();
    }
    Node {
        name: name.into(),
        pg_port,
        api_port,
        dir: node_dir,
        config,
        process: None,
    }
}

/// A directory of scripts, one for each PostgreSQL program, that run it with the wall clock the
/// node's `faketime` file says (the monotonic clock stays real).
fn fake_clock_bindir(node_dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let real = crate::bindir();
    // Its own semaphore for libfaketime (see `crate::FaketimeShared`).
    let shared = crate::FaketimeShared::of(node_dir);
    shared.create();
    let bin = node_dir.join("bin");
    fs::create_dir_all(&bin).expect("create the wrapper directory");
    for entry in fs::read_dir(&real)
        .expect("read the bin directory")
        .flatten()
    {
        let script = format!(
            "#!/bin/sh\nexec env LD_PRELOAD=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 \
             FAKETIME_TIMESTAMP_FILE={} FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1 \
             FAKETIME_SHARED='{}' {} \"$@\"\n",
            node_dir.join("faketime").display(),
            shared.setting(),
            entry.path().display()
        );
        let path = bin.join(entry.file_name());
        fs::write(&path, script).expect("write a wrapper");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("make it executable");
    }
    bin
}

/// A minimal HTTP/1.0 request to a REST API on loopback: the response's body, or `None` when
/// nothing answers.
pub fn http(port: u16, method: &str, path: &str, body: &str) -> Option<String> {
    let mut stream =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

/// Waits until `condition` holds, polling; fails the test with `what` after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
    say(&format!("  {what}"));
}
