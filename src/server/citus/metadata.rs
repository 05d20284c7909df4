//! Citus's own metadata, read in this database, and the other nodes asked for their claims over
//! Citus's connections.
//!
//! Everything here runs as the bootstrap superuser in a security-restricted operation (as
//! PostgreSQL's maintenance commands run), with `search_path` set to `pg_catalog, pg_temp` and
//! every operator and function qualified: nothing that a database owner made runs with those
//! rights. Citus's connections to the other nodes are made as that superuser, whom Citus itself
//! needs on every node, and give up after `citus.node_connection_timeout`, set here to
//! [`CONNECT_TIMEOUT`].

use super::segment::Watched;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;

/// How long asking a node waits for its connection before taking the node as unreachable.
pub const CONNECT_TIMEOUT: &CStr = c"5s";

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
    /// The schema snowid is installed in, quoted, to name its functions on the other nodes.
    pub snowid_schema: String,
}

/// Reads Citus's metadata in this database; `None` where the citus extension is not installed
/// in it.
///
/// A change of the two tables calls for a check as soon as the backend making it ends the
/// command (see `super::invalidation`), before it commits. So the check first waits for every
/// transaction that is writing either table to end (it takes a share lock on each and lets go
/// at once, as `CREATE INDEX CONCURRENTLY` waits for writers), then reads with a snapshot taken
/// now, not the transaction's: it sees every change that called for it, at any isolation level.
pub fn read() -> Option<Metadata> {
    let _context = Restricted::enter();
    let tables = latest_text(
        c"SELECT pg_catalog.concat_ws(' ', \
                 pg_catalog.to_regclass('pg_catalog.pg_dist_local_group')::pg_catalog.oid, \
                 pg_catalog.to_regclass('pg_catalog.pg_dist_node')::pg_catalog.oid) \
          FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'citus'",
    )?;
    let mut oids = tables.split(' ').map(|oid| oid.parse::<u32>().ok());
    let (Some(Some(local_group_table)), Some(Some(node_table))) = (oids.next(), oids.next()) else {
        return None;
    };
    for table in [local_group_table, node_table] {
        let table = pg_sys::Oid::from(table);
        // SAFETY: plain lock calls on a table that exists (to_regclass found it); the wait is
        // interruptible, and an error's abort releases the lock.
        unsafe {
            pg_sys::LockRelationOid(table, pg_sys::ShareLock as pg_sys::LOCKMODE);
            pg_sys::UnlockRelationOid(table, pg_sys::ShareLock as pg_sys::LOCKMODE);
        }
    }
    // The group, snowid's schema, then a line per primary node: group, port, active, host.
    let text = latest_text(
        c"SELECT pg_catalog.concat_ws(E'\\n', \
                 (SELECT groupid FROM pg_catalog.pg_dist_local_group), \
                 (SELECT pg_catalog.quote_ident(n.nspname::pg_catalog.text) \
                  FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n \
                    ON n.oid OPERATOR(pg_catalog.=) e.extnamespace \
                  WHERE e.extname OPERATOR(pg_catalog.=) 'snowid'), \
                 (SELECT pg_catalog.string_agg( \
                         pg_catalog.concat_ws(' ', groupid, nodeport, isactive, nodename), \
                         E'\\n' ORDER BY groupid, nodeid) \
                  FROM pg_catalog.pg_dist_node \
                  WHERE noderole::pg_catalog.text OPERATOR(pg_catalog.=) 'primary'))",
    )
    .unwrap_or_default();
    let mut lines = text.lines();
    let group = lines.next().and_then(|g| g.parse().ok()).unwrap_or(0);
    let snowid_schema = lines.next().unwrap_or("public").to_string();
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
            local_group_table: pg_sys::Oid::from(local_group_table),
            node_table: pg_sys::Oid::from(node_table),
        },
        group,
        nodes,
        snowid_schema,
    })
}

/// This node's Citus group as this database records it now; `None` without citus here.
pub fn local_group() -> Option<i32> {
    let _context = Restricted::enter();
    latest_text(
        c"SELECT 1 FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'citus'",
    )?;
    latest_text(c"SELECT groupid FROM pg_catalog.pg_dist_local_group")?
        .parse()
        .ok()
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

/// Runs one command on each node over Citus's connections, all at once, and returns each node's
/// result: the first column of the command's first row, or why there is none (the node could
/// not be reached, or the command failed there).
pub fn ask(nodes: &[Node], commands: &[String]) -> Vec<Result<String, String>> {
    if nodes.is_empty() {
        return Vec::new();
    }
    let hosts: Vec<String> = nodes.iter().map(|n| n.host.clone()).collect();
    let ports: Vec<i32> = nodes.iter().map(|n| n.port).collect();
    let _context = Restricted::enter();
    let answers = Spi::connect(|client| {
        client
            .select(
                "SELECT node_name, node_port, success, result \
                 FROM pg_catalog.master_run_on_worker($1, $2, $3, true)",
                None,
                &[
                    DatumWithOid::from(hosts),
                    DatumWithOid::from(ports),
                    DatumWithOid::from(commands.to_vec()),
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
    .unwrap_or_else(|e: pgrx::spi::Error| crate::errors::catalog_read_failed(&e));
    nodes
        .iter()
        .map(|node| {
            match answers
                .iter()
                .find(|(host, port, _, _)| *host == node.host && *port == node.port)
            {
                Some((_, _, true, result)) => Ok(result.clone()),
                Some((_, _, false, why)) => Err(why.trim().to_string()),
                None => Err("no answer".into()),
            }
        })
        .collect()
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
