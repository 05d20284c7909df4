//! The cluster's databases, as a resume or a change of the released shards needs them: what each
//! holds (its snowid keys and its record of the released shards), read by a survey, and that
//! record written.
//!
//! - [`worker`]: one job run in one database, by a background worker connected to it, whose
//!   settings no database owner can steer;
//! - [`survey`]: what one database holds: the highest value of every column snowid fills, and
//!   the shards its record says the cluster released;
//! - [`key_reads`]: one key column of one table read as its owner, in a security-restricted
//!   operation, through its access method;
//! - [`release_records`]: each database's record of the released shards
//!   (`snowid_released_shards`);
//! - this module: every database in turn (the caller's own included, each read in a snapshot of
//!   its own), and the prepared transactions, whose rows no survey can see.
//!
//! Whatever runs in a database runs there as PostgreSQL's maintenance commands run: catalog
//! queries with `search_path` set to `pg_catalog, pg_temp` and every operator qualified; tables
//! read as their owners, with no code of anyone's; records written only in the extension's own
//! table, by the superuser that owns it, with no trigger or rule on it.

pub mod key_reads;
pub mod release_records;
pub mod survey;
pub mod worker;

use crate::errors;
use crate::server::waits;
use pgrx::pg_sys;
use pgrx::prelude::*;
use serde::{Deserialize, Serialize};
use survey::DatabaseReport;
use worker::{Job, Outcome};

/// Why reading or writing a database failed: the SQLSTATE of its error, its message, detail and
/// hint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

/// SQLSTATE 53400, configuration_limit_exceeded: no background worker was free, or there are
/// none (single-user mode).
const NO_WORKER: &str = "53400";
/// SQLSTATE 3D000, invalid_catalog_name: the database was dropped.
const NO_DATABASE: &str = "3D000";
/// SQLSTATE 55P03, lock_not_available: a lock stayed held past snowid's bound.
const LOCKED: &str = "55P03";

impl Failure {
    pub fn new(code: &str, message: impl Into<String>) -> Failure {
        Failure {
            code: code.into(),
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    /// What no version of this code does: a job or an answer that cannot be read.
    pub fn internal(message: impl Into<String>) -> Failure {
        Failure::new("XX000", message)
    }

    /// No background worker could be started.
    pub fn no_worker() -> Failure {
        Failure::new(
            NO_WORKER,
            "no background worker was free to connect to it (or the server runs in single-user \
             mode)",
        )
    }

    /// A worker that ended with no answer and no error: killed without a chance to say so.
    pub fn ended_without_answer() -> Failure {
        Failure::new(
            "57P01",
            "its background worker ended without an answer (terminated); the server log says why",
        )
    }

    /// The worker could not connect to its database: `holders` held it locked past the bound.
    pub fn database_locked(holders: &[i32]) -> Failure {
        Failure::new(
            LOCKED,
            format!(
                "it stayed locked against connecting for {} by {}",
                waits::lock_wait_words(),
                waits::processes(holders)
            ),
        )
    }

    /// A table the job needed stayed locked past the bound, by `holders`.
    pub fn table_locked(table: &str, holders: &[i32]) -> Failure {
        Failure::new(
            LOCKED,
            format!(
                "its table {table} stayed locked for {} by {}",
                waits::lock_wait_words(),
                waits::processes(holders)
            ),
        )
    }

    pub fn is_no_worker(&self) -> bool {
        self.code == NO_WORKER
    }

    /// The database was dropped while the job ran: it holds nothing any more.
    pub fn is_database_gone(&self) -> bool {
        self.code == NO_DATABASE
    }

    /// The failure as one line: its message, then its detail.
    pub fn describe(&self) -> String {
        match &self.detail {
            Some(detail) => format!("{} ({detail})", self.message),
            None => self.message.clone(),
        }
    }
}

/// Every database of the cluster that can be connected to in any way: its OID and name.
fn databases() -> Vec<(pg_sys::Oid, String)> {
    Spi::connect(|client| {
        client
            .select(
                "SELECT oid, datname::pg_catalog.text FROM pg_catalog.pg_database \
                 WHERE datconnlimit OPERATOR(pg_catalog.<>) -2 ORDER BY datname",
                None,
                &[],
            )?
            .map(|row| {
                Ok((
                    row.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid),
                    row.get::<String>(2)?.unwrap_or_default(),
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| errors::catalog_read_failed(&e))
}

/// Reads every database of the cluster but those `told` skips, each with a background
/// worker (the caller's own included, so that each is read in a snapshot taken now). Raises an
/// error, having changed nothing, if one of them cannot be read, or if a prepared transaction
/// holds rows no survey can see (before the survey, and after it: one prepared meanwhile). A
/// database dropped meanwhile holds nothing. Once a database has a column that cannot be read
/// (the resume is refused then), no later table another transaction holds locked is waited
/// for: one wait at most decides a refusal.
pub fn survey_every_database(told: &errors::Told) -> Vec<DatabaseReport> {
    refuse_while_transactions_are_prepared();
    let mut wait = true;
    let mut reports = Vec::new();
    for (oid, name) in databases()
        .into_iter()
        .filter(|(_, name)| !told.skipped.contains(name))
    {
        match worker::run(oid, &name, &Job::Survey { wait }) {
            Ok(Outcome::Surveyed(report)) => {
                if report.unreadable().next().is_some() {
                    wait = false;
                }
                reports.push(report);
            }
            Ok(Outcome::Recorded(_)) => {
                errors::survey_failed(&name, "XX000", "another job's answer", told)
            }
            Err(failure) if failure.is_database_gone() => {}
            Err(failure) if failure.is_no_worker() => errors::survey_needs_workers(&name),
            Err(failure) => errors::survey_failed(&name, &failure.code, &failure.describe(), told),
        }
    }
    refuse_while_transactions_are_prepared();
    reports
}

/// Rows of prepared transactions are invisible to every survey until they commit, and a
/// prepared transaction survives the restart after which a state is found lost: a resume
/// refuses while there is one, naming each.
fn refuse_while_transactions_are_prepared() {
    let prepared = Spi::connect(|client| {
        client
            .select(
                "SELECT pg_catalog.format('%L in database %I, prepared at %s', gid, database, prepared) \
                 FROM pg_catalog.pg_prepared_xacts ORDER BY prepared",
                None,
                &[],
            )?
            .map(|row| Ok(row.get::<String>(1)?.unwrap_or_default()))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| errors::catalog_read_failed(&e));
    if !prepared.is_empty() {
        errors::transactions_prepared(&prepared);
    }
}

/// What writing the records of every database came to, so far.
#[derive(Debug, Default)]
pub struct Recording {
    /// The databases that hold the new record.
    pub written: Vec<String>,
    /// The database that could not, and why.
    pub failed: Option<(String, Failure)>,
}

/// Replaces the record of every database where snowid is installed with `released` (shard, last
/// ID pairs), each by a background worker, in a transaction of its own that commits whatever
/// the caller's transaction does (a change of the released shards is not undone by ROLLBACK,
/// so neither is its record). Stops at the first database that cannot be written. A database
/// where snowid is not installed, or where its version keeps no record, or that was dropped
/// meanwhile, is skipped. `recording` says how far it got, also when an error (a cancel) ends
/// it.
/// Before each database, `writing` is told what has been written so far and which database is
/// next: what a process that ends without unwinding (FATAL) can still say.
pub fn record_in_every_database(
    released: &[(i32, i64)],
    recording: &mut Recording,
    writing: &mut dyn FnMut(&Recording, &str),
) {
    record_in(databases(), released, recording, writing);
}

/// [`record_in_every_database`], in the databases named only.
pub fn record_in_databases(names: &[String], released: &[(i32, i64)], recording: &mut Recording) {
    let named = databases()
        .into_iter()
        .filter(|(_, name)| names.contains(name))
        .collect();
    record_in(named, released, recording, &mut |_, _| {});
}

fn record_in(
    databases: Vec<(pg_sys::Oid, String)>,
    released: &[(i32, i64)],
    recording: &mut Recording,
    writing: &mut dyn FnMut(&Recording, &str),
) {
    let job = Job::Record(released.to_vec());
    for (oid, name) in databases {
        writing(recording, &name);
        match worker::run(oid, &name, &job) {
            Ok(Outcome::Recorded(true)) => recording.written.push(name),
            Ok(Outcome::Recorded(false)) => {}
            Ok(Outcome::Surveyed(_)) => {
                recording.failed = Some((name, Failure::internal("a survey's answer")));
                return;
            }
            Err(failure) if failure.is_database_gone() => {}
            Err(failure) => {
                recording.failed = Some((name, failure));
                return;
            }
        }
    }
}

/// `search_path` set to `pg_catalog, pg_temp` until dropped (or until the transaction ends), as
/// a function's `SET` clause would do it.
pub(crate) struct SafeSearchPath(std::ffi::c_int);

impl SafeSearchPath {
    pub(crate) fn set() -> SafeSearchPath {
        // SAFETY: the sequence PostgreSQL's own code uses for a temporary setting; the strings
        // are NUL-terminated.
        unsafe {
            let level = pg_sys::NewGUCNestLevel();
            pg_sys::set_config_option(
                c"search_path".as_ptr(),
                c"pg_catalog, pg_temp".as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_SAVE,
                true,
                0,
                false,
            );
            SafeSearchPath(level)
        }
    }
}

impl Drop for SafeSearchPath {
    fn drop(&mut self) {
        // SAFETY: undoes the nest level `set` opened (an error's abort would undo it too).
        unsafe { pg_sys::AtEOXact_GUC(true, self.0) };
    }
}
