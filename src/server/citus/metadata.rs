//! Citus's own metadata, read in this database, and the other nodes asked for their claims over
//! Citus's connections.
//!
//! Everything here runs as the bootstrap superuser in a security-restricted operation (as
//! PostgreSQL's maintenance commands run), with `search_path` set to `pg_catalog, pg_temp` and
//! every operator and function qualified: nothing that a database owner made runs with those
//! rights. Citus's connections to the other nodes are made as that superuser, whom Citus itself
//! needs on every node, and give up after `citus.node_connection_timeout`, set here to
//! [`CONNECT_TIMEOUT`]. A question reaches the other node's snowid through a setting of its own
//! (see `super::answer`), with no name that a schema could resolve: nothing a database owner
//! creates there can answer in its place, and an error is an error.

use super::segment::Watched;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use snowid_core::citus::{Answer, Heard, Question};
use std::ffi::CStr;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

/// How long asking a node waits for its connection before taking the node as unreachable.
pub const CONNECT_TIMEOUT: &CStr = c"5s";

/// How long reading Citus's record waits for a change of it to commit (a change under way holds
/// the record's lock): past it the check is made again later.
pub const LOCK_TIMEOUT: &CStr = c"10s";

/// How long a round of questions may take: a node that accepts the connection and then does not
/// answer holds it up no longer.
const ASK_TIMEOUT_MS: i32 = 30_000;

/// How long an answer waits for a change of this node's group to commit (see [`local_group`]).
const ANSWER_LOCK_WAIT: Duration = Duration::from_secs(5);

/// A primary node in Citus's record of the nodes (`pg_dist_node`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub group: i32,
    pub host: String,
    pub port: i32,
    pub active: bool,
}

impl Node {
    /// `host:port`, as an error names the node.
    pub fn name(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// What Citus's metadata in this database says.
pub struct Metadata {
    pub watched: Watched,
    /// This node's group (`pg_dist_local_group`).
    pub group: i32,
    /// Every primary node Citus records, this one included where it is recorded.
    pub nodes: Vec<Node>,
    /// The last group number Citus gave out from its sequence here (0 where it gave none: on a
    /// worker, whose sequence the coordinator does not use).
    pub given: i32,
    /// A digest of every row of `pg_dist_node`, every column (metadata sync started or stopped
    /// changes no column [`Node`] has).
    pub record: String,
}

/// Reads Citus's metadata in this database; `None` where the citus extension is not installed
/// in it.
///
/// A change of the two tables calls for a check as soon as the backend making it ends the
/// command (see `super::invalidation`), before it commits. So the check first waits for every
/// transaction that is writing either table to end (it takes a share lock on each and lets go
/// at once, as `CREATE INDEX CONCURRENTLY` waits for writers, for [`LOCK_TIMEOUT`] at most), then
/// reads with a snapshot taken now, not the transaction's: it sees every change that called for
/// it, at any isolation level.
pub fn read() -> Option<Metadata> {
    let _context = Restricted::enter();
    let (local_group_table, node_table) = tables()?;
    for table in [local_group_table, node_table] {
        // SAFETY: plain lock calls on a table that exists (to_regclass found it); the wait is
        // interruptible and bounded by lock_timeout, and an error's abort releases the lock.
        unsafe {
            pg_sys::LockRelationOid(table, pg_sys::ShareLock as pg_sys::LOCKMODE);
            pg_sys::UnlockRelationOid(table, pg_sys::ShareLock as pg_sys::LOCKMODE);
        }
    }
    // The group, the last group given out, the record's digest, then a line per primary node:
    // group, port, active, host.
    let text = latest_text(
        c"SELECT pg_catalog.concat_ws(E'\\n', \
                 (SELECT groupid FROM pg_catalog.pg_dist_local_group), \
                 (SELECT CASE WHEN is_called THEN last_value ELSE 0 END \
                  FROM pg_catalog.pg_dist_groupid_seq), \
                 (SELECT pg_catalog.md5(pg_catalog.concat(pg_catalog.string_agg( \
                         n::pg_catalog.text, ',' ORDER BY n.nodeid))) \
                  FROM pg_catalog.pg_dist_node n), \
                 (SELECT pg_catalog.string_agg( \
                         pg_catalog.concat_ws(' ', groupid, nodeport, isactive, nodename), \
                         E'\\n' ORDER BY groupid, nodeid) \
                  FROM pg_catalog.pg_dist_node \
                  WHERE noderole::pg_catalog.text OPERATOR(pg_catalog.=) 'primary'))",
    )
    .unwrap_or_default();
    let mut lines = text.lines();
    let group = lines.next().and_then(|g| g.parse().ok()).unwrap_or(0);
    let given = lines
        .next()
        .and_then(|g| g.parse::<i64>().ok())
        .map_or(0, |g| g.clamp(0, i64::from(i32::MAX)) as i32);
    let record = lines.next().unwrap_or_default().to_string();
    let nodes = lines
        .filter_map(|line| {
            let mut fields = line.splitn(4, ' ');
            Some(Node {
                group: fields.next()?.parse().ok()?,
                port: fields.next()?.parse().ok()?,
                active: fields.next()? == "t",
                host: fields.next()?.to_string(),
            })
        })
        .collect();
    Some(Metadata {
        watched: Watched {
            // SAFETY: a plain read of this backend's database, set before it runs SQL.
            database: unsafe { pg_sys::MyDatabaseId },
            local_group_table,
            node_table,
        },
        group,
        nodes,
        given,
        record,
    })
}

/// The OIDs of `pg_dist_local_group` and `pg_dist_node`; `None` without citus in this database.
fn tables() -> Option<(pg_sys::Oid, pg_sys::Oid)> {
    let tables = latest_text(
        c"SELECT pg_catalog.concat_ws(' ', \
                 pg_catalog.to_regclass('pg_catalog.pg_dist_local_group')::pg_catalog.oid, \
                 pg_catalog.to_regclass('pg_catalog.pg_dist_node')::pg_catalog.oid) \
          FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'citus'",
    )?;
    let mut oids = tables.split(' ').map(|oid| oid.parse::<u32>().ok());
    match (oids.next(), oids.next()) {
        (Some(Some(local_group)), Some(Some(node))) => {
            Some((pg_sys::Oid::from(local_group), pg_sys::Oid::from(node)))
        }
        _ => None,
    }
}

/// This node's Citus group as this database records it now, and the last group Citus gave out
/// from its sequence here; `None` without citus here. A change of the group under way
/// (`citus_add_node` gives a worker its group in a transaction that commits on the worker just
/// after the coordinator's) is waited for, [`ANSWER_LOCK_WAIT`] at most, without an error: past
/// it the group committed so far is read.
pub fn local_group() -> Option<(i32, i32)> {
    let _context = Restricted::enter();
    let (local_group_table, _) = tables()?;
    let deadline = Instant::now() + ANSWER_LOCK_WAIT;
    loop {
        // SAFETY: a plain conditional lock call on a table that exists; let go at once.
        let got = unsafe {
            pg_sys::ConditionalLockRelationOid(
                local_group_table,
                pg_sys::ShareLock as pg_sys::LOCKMODE,
            )
        };
        if got {
            // SAFETY: the lock was just taken.
            unsafe {
                pg_sys::UnlockRelationOid(local_group_table, pg_sys::ShareLock as pg_sys::LOCKMODE)
            };
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        pgrx::check_for_interrupts!();
    }
    let text = latest_text(
        c"SELECT pg_catalog.concat_ws(' ', \
                 (SELECT groupid FROM pg_catalog.pg_dist_local_group), \
                 (SELECT CASE WHEN is_called THEN last_value ELSE 0 END \
                  FROM pg_catalog.pg_dist_groupid_seq))",
    )?;
    let mut fields = text.split(' ').map(|f| f.parse::<i64>().ok());
    match (fields.next(), fields.next()) {
        (Some(Some(group)), Some(Some(given))) => Some((
            i32::try_from(group).ok()?,
            given.clamp(0, i64::from(i32::MAX)) as i32,
        )),
        _ => None,
    }
}

/// The first column of the first row of a query, as text, read with a snapshot taken now (a
/// fresh catalog snapshot, which a leader in parallel mode may take too, unlike the latest
/// snapshot PostgreSQL's foreign-key checks use); `None` for no row or a null.
fn latest_text(query: &CStr) -> Option<String> {
    Spi::connect(|_client| {
        // SAFETY: inside the SPI connection `Spi::connect` made: prepare, run with a snapshot
        // taken now (read only, no triggers, one row), and copy the value out before the
        // connection ends; an error raised by any of them unwinds through here.
        unsafe {
            let plan = pg_sys::SPI_prepare(query.as_ptr(), 0, std::ptr::null_mut());
            if plan.is_null() {
                return None;
            }
            pg_sys::SPI_execute_snapshot(
                plan,
                std::ptr::null_mut(),
                std::ptr::null(),
                {
                    pg_sys::InvalidateCatalogSnapshot();
                    pg_sys::GetCatalogSnapshot(pg_sys::InvalidOid)
                },
                std::ptr::null_mut(),
                true,
                false,
                1,
            );
            let table = pg_sys::SPI_tuptable;
            if pg_sys::SPI_processed == 0 || table.is_null() {
                return None;
            }
            let value = pg_sys::SPI_getvalue(*(*table).vals, (*table).tupdesc, 1);
            (!value.is_null()).then(|| CStr::from_ptr(value).to_string_lossy().into_owned())
        }
    })
}

/// What an older snowid (or none) answers: it has no setting to ask through.
const OLDER: &str = "older";

/// The command that asks a node `question`, through its setting `snowid.citus_claim` (see
/// `super::answer`): setting it returns the answer. Every name in it is in `pg_catalog`, and the
/// question is plain ASCII with no quote or backslash (see `snowid_core::citus::Fields`), so it
/// reads the same whatever the node's settings and whatever its databases hold. A node whose
/// snowid does not define the setting answers [`OLDER`].
fn command(question: &Question) -> String {
    let text = question.to_text();
    debug_assert!(!text.contains('\'') && !text.contains('\\'));
    format!(
        "SELECT CASE WHEN pg_catalog.current_setting('snowid.citus_claim', true) IS NULL \
         THEN '{OLDER}' ELSE pg_catalog.set_config('snowid.citus_claim', '{text}', true) END"
    )
}

/// Asks each node its question over Citus's connections, all at once, and returns what each
/// said. A node that cannot be reached is [`Heard::Unreachable`]; one whose snowid cannot answer
/// is [`Heard::Older`]; anything else that is not an answer, an error included, is
/// [`Heard::Failed`], which no check takes as agreement.
pub fn ask(nodes: &[Node], questions: &[Question]) -> Vec<Heard> {
    if nodes.is_empty() {
        return Vec::new();
    }
    let hosts: Vec<String> = nodes.iter().map(|n| n.host.clone()).collect();
    let ports: Vec<i32> = nodes.iter().map(|n| n.port).collect();
    let commands: Vec<String> = questions.iter().map(command).collect();
    let _context = Restricted::enter();
    let asked = in_subtransaction(|| {
        within(ASK_TIMEOUT_MS, || {
            Spi::connect(|client| {
                client
                    .select(
                        "SELECT node_name, node_port, success, result \
                         FROM pg_catalog.master_run_on_worker($1, $2, $3, true)",
                        None,
                        &[
                            DatumWithOid::from(hosts),
                            DatumWithOid::from(ports),
                            DatumWithOid::from(commands),
                        ],
                    )?
                    .map(|row| {
                        Ok((
                            row.get::<String>(1)?.unwrap_or_default(),
                            row.get::<i32>(2)?.unwrap_or_default(),
                            row.get::<bool>(3)?.unwrap_or_default(),
                            row.get::<String>(4)?.unwrap_or_default(),
                        ))
                    })
                    .collect::<Result<Vec<_>, pgrx::spi::Error>>()
            })
        })
    });
    let answers = match asked {
        Ok(Ok(answers)) => answers,
        Ok(Err(e)) => return unheard(nodes, &e.to_string()),
        Err(why) => return unheard(nodes, &why),
    };
    nodes
        .iter()
        .map(|node| {
            let found = answers
                .iter()
                .find(|(host, port, _, _)| *host == node.host && *port == node.port);
            match found {
                Some((_, _, true, result)) if result == OLDER => Heard::Older,
                Some((_, _, true, result)) => match Answer::parse(result) {
                    Ok(answer) => Heard::Answered(Box::new(answer)),
                    Err(e) => Heard::Failed(e),
                },
                Some((_, _, false, why)) => heard_of_failure(why.trim()),
                None => Heard::Unreachable("no answer".into()),
            }
        })
        .collect()
}

/// Every node taken as unreachable: the round of questions did not finish (`why`).
fn unheard(nodes: &[Node], why: &str) -> Vec<Heard> {
    let why = format!("the questions to the nodes did not finish: {why}");
    nodes
        .iter()
        .map(|_| Heard::Unreachable(why.clone()))
        .collect()
}

/// Runs `f` in a subtransaction, as PL/pgSQL runs a block with an exception clause: an error
/// inside rolls the subtransaction back and comes out as its message, and the transaction goes
/// on.
fn in_subtransaction<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    // SAFETY: PostgreSQL's sequence for an internal subtransaction (PL/pgSQL's exception
    // blocks): begin it in the caller's memory context, then release it, or roll it back after an
    // error, and put the caller's context and resource owner back.
    let (context, owner) = unsafe {
        let saved = (pg_sys::CurrentMemoryContext, pg_sys::CurrentResourceOwner);
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(saved.0);
        saved
    };
    let result = PgTryBuilder::new(AssertUnwindSafe(|| Ok(f())))
        .catch_others(|caught| {
            Err(match caught {
                CaughtError::PostgresError(e)
                | CaughtError::ErrorReport(e)
                | CaughtError::RustPanic { ereport: e, .. } => e.message().to_string(),
            })
        })
        .execute();
    // SAFETY: ends the subtransaction begun above, as described there.
    unsafe {
        match result {
            Ok(_) => pg_sys::ReleaseCurrentSubTransaction(),
            Err(_) => pg_sys::RollbackAndReleaseCurrentSubTransaction(),
        }
        pg_sys::MemoryContextSwitchTo(context);
        pg_sys::CurrentResourceOwner = owner;
    }
    result
}

// PostgreSQL's functions of utils/timeout.h, which pgrx's bindings leave out; each call goes
// through pgrx's guard, so that an error raised inside unwinds as pgrx's own calls do.
unsafe extern "C-unwind" {
    fn enable_timeout_after(id: std::ffi::c_int, delay_ms: std::ffi::c_int);
    fn disable_timeout(id: std::ffi::c_int, keep_indicator: bool);
}

/// `STATEMENT_TIMEOUT` of PostgreSQL's `TimeoutId`, the same from 9.3 to 19.
const STATEMENT_TIMEOUT: std::ffi::c_int = 3;

/// Runs `f` under a statement timeout of `ms` (a background worker runs no statement, so none is
/// armed otherwise): past it, the wait inside ends with an error.
fn within<T>(ms: i32, f: impl FnOnce() -> T) -> T {
    // SAFETY: PostgreSQL registers the statement timeout in every process with a database
    // connection; it is disarmed below, and by the abort of an error.
    unsafe {
        pg_sys::ffi::pg_guard_ffi_boundary(|| enable_timeout_after(STATEMENT_TIMEOUT, ms));
    }
    let result = f();
    // SAFETY: as above.
    unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| disable_timeout(STATEMENT_TIMEOUT, false)) };
    result
}

/// The beginnings of what a failed command says when its connection failed, not the node's
/// answer: Citus's own words for a connection it could not make or lost, and libpq's and the
/// server's for a connection that broke, or a server shutting down or starting up (which no
/// snowid or database owner can send in an answer's place).
const CONNECTION_FAILED: &[&str] = &[
    "failed to connect to ",
    "connection lost",
    "query result unavailable",
    "server closed the connection unexpectedly",
    "terminating connection due to",
    "the database system is shutting down",
    "the database system is starting up",
    "could not receive data from server",
    "could not send data to server",
    "SSL SYSCALL error",
    "SSL connection has been closed unexpectedly",
];

/// What a failed command says: a connection that failed ([`CONNECTION_FAILED`]; the node is
/// then taken as unreachable), or the node's error (an answer no check takes as agreement).
fn heard_of_failure(why: &str) -> Heard {
    let why = why.strip_prefix("FATAL:").unwrap_or(why).trim_start();
    match CONNECTION_FAILED.iter().any(|start| why.starts_with(start)) {
        true => Heard::Unreachable(why.to_string()),
        false => Heard::Failed(why.to_string()),
    }
}

/// The bootstrap superuser in a security-restricted operation, with a safe `search_path` and
/// Citus's connection timeout, until dropped (or until the transaction ends, whose abort undoes
/// both as well).
struct Restricted {
    saved_user: pg_sys::Oid,
    saved_context: i32,
    nest_level: i32,
}

impl Restricted {
    fn enter() -> Restricted {
        let mut saved_user = pg_sys::InvalidOid;
        let mut saved_context = 0;
        // SAFETY: the sequence PostgreSQL's maintenance commands use to run as another role,
        // and the one a function's SET clause uses for settings; the strings are NUL-terminated.
        unsafe {
            pg_sys::GetUserIdAndSecContext(&mut saved_user, &mut saved_context);
            pg_sys::SetUserIdAndSecContext(
                pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID),
                saved_context
                    | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
                    | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
            );
            let nest_level = pg_sys::NewGUCNestLevel();
            for (name, value) in [
                (c"search_path", c"pg_catalog, pg_temp"),
                (c"citus.node_connection_timeout", CONNECT_TIMEOUT),
                (c"lock_timeout", LOCK_TIMEOUT),
            ] {
                pg_sys::set_config_option(
                    name.as_ptr(),
                    value.as_ptr(),
                    pg_sys::GucContext::PGC_USERSET,
                    pg_sys::GucSource::PGC_S_SESSION,
                    pg_sys::GucAction::GUC_ACTION_SAVE,
                    true,
                    0,
                    false,
                );
            }
            Restricted {
                saved_user,
                saved_context,
                nest_level,
            }
        }
    }
}

impl Drop for Restricted {
    fn drop(&mut self) {
        // SAFETY: undoes what `enter` did, in reverse order.
        unsafe {
            pg_sys::AtEOXact_GUC(true, self.nest_level);
            pg_sys::SetUserIdAndSecContext(self.saved_user, self.saved_context);
        }
    }
}
