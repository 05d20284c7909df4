//! Citus clusters for snowid's integration tests: a coordinator and workers on loopback, each a
//! [`Cluster`] of its own with snowid and Citus preloaded and its own `snowid.shards`.
//!
//! Citus is not part of snowid, and no package registry that the test machines reach has it:
//! `scripts/setup` builds it from its sources beside the project (13.2.2 for 15, 14.0.1 for 16
//! and 18). The tests look for an installed Citus for the major under test (`citus.control` in
//! its `pg_config --sharedir`/extension; see [`missing_citus`]). Tests call
//! [`skip_without_citus!`](crate::skip_without_citus) first, which returns (passing) with a plain
//! reason, listed in the run's summary, when there is none, and records that the test ran
//! otherwise; CI accepts the reason only on the majors setup does not build Citus for (see
//! `scripts/check-not-run`).
//!
//! # What a loopback Citus cluster needs
//!
//! Checked with a coordinator and two workers on 127.0.0.1, each on its own port, with Citus
//! 13.2.2 (PostgreSQL 15 and 16) and 14.0.1 (18) alike:
//!
//! - `shared_preload_libraries = 'citus,snowid'`. Citus refuses to load unless it comes first.
//! - TCP on loopback: Citus connects to every node, the coordinator included, with libpq over
//!   TCP, to the host and port given to `citus_set_coordinator_host` and `citus_add_node`.
//!   [`Cluster::init`] already listens on `127.0.0.1`, and `initdb -A trust` writes
//!   `host all all 127.0.0.1/32 trust` into `pg_hba.conf`; [`CitusCluster::start`] checks that
//!   line is there, since a password prompt between nodes would only show up as a connection
//!   failure deep inside Citus.
//! - TLS needs nothing: where PostgreSQL is built with OpenSSL (15 here),
//!   `citus.node_conninfo` defaults to `sslmode=require`, and `CREATE EXTENSION citus` itself
//!   generates a self-signed certificate and turns `ssl` on; the 16 and 18 here have no OpenSSL,
//!   and their nodes talk in plain text.
//! - `max_prepared_transactions` (two-phase commit across nodes) needs nothing either: at preload
//!   Citus raises 0 to twice `max_connections` (200 here).
//! - `wal_level = logical` only for moving shards with logical replication, which
//!   `citus_move_shard_placement` does by default (transfer mode `auto`) when every colocated
//!   table has a primary key or replica identity, and always with `force_logical`. With the
//!   default `replica` such a move fails with "logical decoding requires wal_level >= logical";
//!   `block_writes` moves work either way (and block writes to the shard while they copy). It is
//!   set on every node here, so that moves work while rows are being inserted.
//! - `citus.shard_count = 4` (instead of 32): fewer shard tables make `create_distributed_table`
//!   and moves quicker. It is only the default; `create_distributed_table(shard_count => ...)`
//!   overrides it.
//! - No `citus.enable_*_for_testing` setting is needed. `citus.enable_statistics_collection`,
//!   which would send usage reports over the network, is already off in both builds (Citus 14
//!   deprecates it).
//!
//! # Where a column DEFAULT is evaluated
//!
//! An `INSERT ... VALUES` sent to the coordinator evaluates `DEFAULT snowid_next(n)` on the
//! coordinator (the shard placement then receives a constant); one sent to a worker evaluates it on
//! that worker. An `INSERT ... SELECT` that reads from a distributed table (the `repartition`
//! method) evaluates defaults on the workers that run the `SELECT`, for the distribution column
//! too. A node that does not own shard `n` raises "snowid shard n is not owned by this server".
//!
//! # Nodes with no `snowid.shards`
//!
//! A node left at snowid's default takes its shards from its Citus group: 32 from `32 * group`
//! ([`group_shards`]). [`CitusCluster::unconfigured`] starts such a cluster;
//! [`CitusCluster::new_node`] and [`CitusCluster::add`] grow one.

use crate::postgres::Client;
use crate::Cluster;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Settings every Citus node gets; see the module documentation for why.
const CITUS_SETTINGS: &[(&str, &str)] = &[
    ("shared_preload_libraries", "'citus,snowid'"),
    ("wal_level", "logical"),
    ("citus.shard_count", "4"),
    ("temp_file_limit", "'1GB'"),
];

/// Why the Citus tests cannot run, or `None` when Citus is installed into the PostgreSQL that
/// `SNOWID_PG_CONFIG` names: its `citus.control` is in that major's extension directory.
pub fn missing_citus() -> Option<String> {
    let Some(sharedir) = pg_config("--sharedir") else {
        return Some("pg_config does not run (see SNOWID_PG_CONFIG)".into());
    };
    let control = sharedir.join("extension/citus.control");
    if control.is_file() {
        return None;
    }
    Some(format!(
        "Citus is not installed for PostgreSQL {} (no {}); no package registry here has it: \
         scripts/setup builds it from the sources beside the project for the majors that run \
         these tests (see scripts/setup, install_citus)",
        crate::major().split('.').next().unwrap_or_default(),
        control.display()
    ))
}

/// Whether Citus is installed (see [`missing_citus`]).
pub fn citus_installed() -> bool {
    missing_citus().is_none()
}

/// The Citus release that `citus_version()` names on a running node, such as `13.2.2`, recorded
/// by [`CitusCluster::start`]; `None` before any node started.
pub fn citus_version() -> Option<String> {
    RUNNING_RELEASE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

static RUNNING_RELEASE: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// The calling test's name: its thread's, or the module's where the harness runs it on the main
/// thread.
fn test_name(module: &str) -> String {
    let thread = std::thread::current();
    thread
        .name()
        .filter(|name| *name != "main")
        .unwrap_or(module)
        .to_string()
}

/// Reports that the calling test is skipped, and why (see [`crate::not_run`]).
pub fn print_skip(module: &str, why: &str) {
    crate::not_run(&test_name(module), why);
}

/// Records that the calling test ran (see [`crate::ran`]).
pub fn record_ran(module: &str) {
    crate::ran(&test_name(module));
}

/// Returns from the calling test, which then passes, with a printed reason, when Citus is not
/// installed; records that it ran otherwise:
///
/// ```ignore
/// #[test]
/// fn something_on_citus() {
///     snowid_integration::skip_without_citus!();
///     let citus = CitusCluster::start("5", &["0-4", "6-99"]);
///     // ...
/// }
/// ```
#[macro_export]
macro_rules! skip_without_citus {
    () => {
        if let Some(why) = $crate::citus::missing_citus() {
            $crate::citus::print_skip(module_path!(), &why);
            return;
        }
        $crate::citus::record_ran(module_path!());
    };
}

/// A coordinator and its workers, each its own server on loopback. Dropping it stops every
/// server (each [`Cluster`] stops its own) and removes their directories.
pub struct CitusCluster {
    pub coordinator: Cluster,
    pub workers: Vec<Cluster>,
}

impl CitusCluster {
    /// Starts a coordinator that owns the snowid shards `coordinator_shards` (a `snowid.shards`
    /// value such as `"5"` or `"0-99"`) and one worker per entry of `worker_shards`, creates
    /// `citus` and `snowid` on each, and joins them: the coordinator is registered with
    /// `citus_set_coordinator_host` (it holds no shards of distributed tables), each worker with
    /// `citus_add_node`.
    pub fn start(coordinator_shards: &str, worker_shards: &[&str]) -> CitusCluster {
        CitusCluster::start_with(coordinator_shards, worker_shards, &[])
    }

    /// Like [`CitusCluster::start`], with more settings for every node's postgresql.conf.
    pub fn start_with(
        coordinator_shards: &str,
        worker_shards: &[&str],
        settings: &[(&str, &str)],
    ) -> CitusCluster {
        let all_shards: Vec<Option<&str>> = std::iter::once(coordinator_shards)
            .chain(worker_shards.iter().copied())
            .map(Some)
            .collect();
        CitusCluster::start_nodes(&all_shards, settings, true)
    }

    /// A coordinator and `workers` workers, none with a `snowid.shards` of its own: each takes
    /// its shards from its Citus group.
    pub fn unconfigured(workers: usize) -> CitusCluster {
        CitusCluster::start_nodes(&vec![None; workers + 1], &[], true)
    }

    /// A coordinator and workers, with each node's `snowid.shards` (the coordinator's first;
    /// `None` leaves it at the default); the coordinator is registered with
    /// `citus_set_coordinator_host` only if `set_coordinator`.
    pub fn start_nodes(
        shards: &[Option<&str>],
        settings: &[(&str, &str)],
        set_coordinator: bool,
    ) -> CitusCluster {
        // initdb and the first start take about a second each; do them in parallel. Every node
        // is joined before anything panics on, so the ones that did start are dropped (stopped).
        let results: Vec<std::thread::Result<Cluster>> = std::thread::scope(|scope| {
            let handles: Vec<_> = shards
                .iter()
                .map(|&shards| scope.spawn(move || citus_node(shards, settings)))
                .collect();
            handles.into_iter().map(|h| h.join()).collect()
        });
        let mut nodes = Vec::with_capacity(results.len());
        let mut failure = None;
        for result in results {
            match result {
                Ok(node) => nodes.push(node),
                Err(panic) => failure = failure.or(Some(panic)),
            }
        }
        if let Some(panic) = failure {
            drop(nodes);
            std::panic::resume_unwind(panic);
        }
        let coordinator = nodes.remove(0);
        let citus = CitusCluster {
            coordinator,
            workers: nodes,
        };

        if set_coordinator {
            citus.set_coordinator();
        }
        for worker in &citus.workers {
            citus.add(worker);
        }
        citus
    }

    /// Registers the coordinator with `citus_set_coordinator_host`.
    pub fn set_coordinator(&self) {
        self.client()
            .execute(
                "SELECT citus_set_coordinator_host('127.0.0.1', $1)",
                &[&i32::from(self.coordinator.port)],
            )
            .expect("citus_set_coordinator_host");
    }

    /// A new node, started, with Citus and snowid created, not yet in the cluster (see
    /// [`CitusCluster::add`]); `shards` is its `snowid.shards` (`None`: the default).
    pub fn new_node(shards: Option<&str>) -> Cluster {
        citus_node(shards, &[])
    }

    /// A new node as [`CitusCluster::new_node`] makes one, at the default, whose wall clock
    /// runs `offset` (such as `+30s`) from real time (see [`Cluster::fake_wall_clock`]).
    pub fn new_node_with_clock(offset: &str) -> Cluster {
        started_citus_node(None, &[], |node| {
            node.fake_wall_clock();
            node.set_wall_clock_offset(offset);
        })
    }

    /// Adds a node to the cluster with `citus_add_node`, which gives it the next group. Returns
    /// the group.
    pub fn add(&self, node: &Cluster) -> i32 {
        self.client()
            .execute(
                "SELECT citus_add_node('127.0.0.1', $1)",
                &[&i32::from(node.port)],
            )
            .unwrap_or_else(|e| panic!("citus_add_node for port {}: {e}", node.port));
        self.group_of(node.port)
    }

    /// Adds a node to the cluster in the group given.
    pub fn add_in_group(&self, node: &Cluster, group: i32) {
        self.client()
            .execute(
                "SELECT citus_add_node('127.0.0.1', $1, groupid => $2)",
                &[&i32::from(node.port), &group],
            )
            .unwrap_or_else(|e| panic!("citus_add_node for port {}: {e}", node.port));
    }

    /// The Citus group of the primary node on a port, as the coordinator records it.
    pub fn group_of(&self, port: u16) -> i32 {
        self.client()
            .query_one(
                "SELECT groupid FROM pg_dist_node WHERE nodeport = $1 AND noderole = 'primary'",
                &[&i32::from(port)],
            )
            .unwrap_or_else(|e| panic!("the group of the node on port {port}: {e}"))
            .get(0)
    }

    /// A new connection to the coordinator.
    pub fn client(&self) -> Client {
        self.coordinator.client()
    }

    /// The coordinator, then the workers.
    pub fn nodes(&self) -> impl Iterator<Item = &Cluster> {
        std::iter::once(&self.coordinator).chain(self.workers.iter())
    }

    /// Where each shard of a distributed table is placed: (shard ID, port of the node).
    pub fn placements(&self, table: &str) -> Vec<(i64, u16)> {
        self.client()
            .query(
                "SELECT shardid, nodeport FROM citus_shards
                 WHERE table_name = $1::text::regclass ORDER BY shardid",
                &[&table],
            )
            .expect("read citus_shards")
            .iter()
            .map(|row| {
                let port: i32 = row.get(1);
                (row.get(0), u16::try_from(port).expect("a port"))
            })
            .collect()
    }

    /// Moves a shard placement (with its colocated shards) between nodes with
    /// `citus_move_shard_placement`. `mode` is the transfer mode: `auto`, `force_logical` or
    /// `block_writes`.
    pub fn move_shard(
        &self,
        shard: i64,
        from_port: u16,
        to_port: u16,
        mode: &str,
    ) -> Result<(), crate::postgres::Error> {
        self.client()
            .execute(
                "SELECT citus_move_shard_placement($1, '127.0.0.1', $2, '127.0.0.1', $3,
                                                   shard_transfer_mode => $4::text::citus.shard_transfer_mode)",
                &[&shard, &i32::from(from_port), &i32::from(to_port), &mode],
            )
            .map(|_| ())
    }
}

/// The shards a node whose `snowid.shards` is left at its default generates for: 32 from
/// `32 * group` (docs/operations.md, "Running on Citus").
pub fn group_shards(group: i32) -> std::ops::RangeInclusive<i32> {
    group * 32..=group * 32 + 31
}

/// A new connection as the superuser `postgres` to the server on a port of loopback.
pub fn client_on(port: u16) -> Result<Client, crate::postgres::Error> {
    crate::postgres::Config::new()
        .host("127.0.0.1")
        .port(port)
        .user("postgres")
        .dbname("postgres")
        .connect(crate::postgres::NoTls)
}

/// One node: a fresh cluster with Citus and snowid preloaded and created, with its own
/// `snowid.shards` if one is given.
fn citus_node(shards: Option<&str>, settings: &[(&str, &str)]) -> Cluster {
    started_citus_node(shards, settings, |_| {})
}

/// [`citus_node`], with `prepare` run on the node before it starts.
fn started_citus_node(
    shards: Option<&str>,
    settings: &[(&str, &str)],
    prepare: impl FnOnce(&mut Cluster),
) -> Cluster {
    let mut node = Cluster::init();
    prepare(&mut node);
    check_loopback_trust(&node);
    for (name, value) in CITUS_SETTINGS {
        node.set(name, value);
    }
    if let Some(shards) = shards {
        node.set("snowid.shards", &format!("'{shards}'"));
    }
    for (name, value) in settings {
        node.set(name, value);
    }
    node.start()
        .unwrap_or_else(|log| panic!("a Citus node did not start:\n{log}"));
    let mut db = node.client();
    db.batch_execute("CREATE EXTENSION citus; CREATE EXTENSION snowid;")
        .expect("create the citus and snowid extensions");
    // Which Citus runs: its release, for the tests' messages, and a library that matches the
    // installed extension's version (a citus.so left from another release fails here, plainly).
    let row = db
        .query_one(
            "SELECT citus_version(), extversion FROM pg_extension WHERE extname = 'citus'",
            &[],
        )
        .expect("read Citus's version");
    let (running, extversion): (String, String) = (row.get(0), row.get(1));
    let release = running
        .strip_prefix("Citus ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("citus_version() is {running:?}"))
        .to_string();
    let minor = release
        .rsplit_once('.')
        .map_or(release.as_str(), |(minor, _)| minor);
    assert!(
        extversion.starts_with(&format!("{minor}-")),
        "citus_version() is {running:?}, and the extension's version is {extversion}"
    );
    *RUNNING_RELEASE.lock().unwrap_or_else(|e| e.into_inner()) = Some(release);
    node
}

/// Citus's connections between nodes go over TCP to 127.0.0.1 and must not ask for a password.
fn check_loopback_trust(node: &Cluster) {
    let path = node.pgdata().join("pg_hba.conf");
    let hba = fs::read_to_string(&path).expect("read pg_hba.conf");
    let first_loopback_rule = hba
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.first() == Some(&"host") && fields.get(3) == Some(&"127.0.0.1/32"));
    assert_eq!(
        first_loopback_rule,
        Some(vec!["host", "all", "all", "127.0.0.1/32", "trust"]),
        "{} must trust every connection from 127.0.0.1, for Citus's connections between nodes",
        path.display()
    );
}

fn pg_config(option: &str) -> Option<PathBuf> {
    let pg_config = std::env::var("SNOWID_PG_CONFIG")
        .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_config".into());
    let out = Command::new(&pg_config).arg(option).output().ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// A new connection as the superuser `postgres` over the node's Unix socket: it reaches the
/// node while [`cut_off`] keeps every TCP connection out.
pub fn socket_client(node: &Cluster) -> Client {
    crate::postgres::Config::new()
        .host_path(node.dir())
        .port(node.port)
        .user("postgres")
        .dbname("postgres")
        .connect(crate::postgres::NoTls)
        .unwrap_or_else(|e| {
            panic!(
                "connect to the node on port {} by its socket: {e}",
                node.port
            )
        })
}

/// The first line of `pg_hba.conf` while a node is cut off from the network.
const CUT_OFF: &str = "host all all 127.0.0.1/32 reject # cut off by the test";

/// Cuts a node off from every other node (`cut`), or connects it again: while cut off, its
/// `pg_hba.conf` rejects every TCP connection, Citus's between nodes included (and Citus's
/// questions from it to the others fail too, where they are cut off as well). Its Unix socket
/// still takes [`socket_client`]'s connections.
pub fn cut_off(node: &Cluster, cut: bool) {
    let path = node.pgdata().join("pg_hba.conf");
    let hba = fs::read_to_string(&path).expect("read pg_hba.conf");
    let rest: Vec<&str> = hba.lines().filter(|line| *line != CUT_OFF).collect();
    let mut lines = Vec::new();
    if cut {
        lines.push(CUT_OFF);
    }
    lines.extend(rest);
    fs::write(&path, lines.join("\n") + "\n").expect("write pg_hba.conf");
    node.reload();
    // A reload takes effect when the postmaster gets to it: wait until a TCP connection is
    // refused (or taken) before the test's next step, so that nothing another node does
    // next (a reload of its own, which makes its checker ask at once) can still reach it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while node.try_client().is_ok() == cut {
        assert!(
            Instant::now() < deadline,
            "the node on port {} is not {} 30 s after its reload",
            node.port,
            if cut { "cut off" } else { "connected again" }
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
