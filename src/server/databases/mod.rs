//! The cluster's databases, as a resume or a release needs them: what each holds (its snowid
//! keys and its record of the released shards), read by a survey, and that record written.
//!
//! - [`worker`]: one job run in another database, by a background worker connected to it;
//! - [`survey`]: what one database holds: the highest value of every column snowid fills, and
//!   the shards its record says the cluster released;
//! - [`release_records`]: each database's record of the released shards
//!   (`snowid_released_shards`), which carries a release through every route that re-creates the
//!   durable state: a lost or damaged `global/9128`, and `pg_upgrade`;
//! - this module: every database in turn, and the prepared transactions, whose rows no survey
//!   can see.
//!
//! Every query runs with `search_path` set to `pg_catalog, pg_temp`, whatever the database or
//! role sets, and reads or writes nothing a non-superuser made run as code: no view, no trigger,
//! no table a non-superuser owns is written.

pub mod release_records;
pub mod survey;
pub mod worker;

use crate::errors;
use pgrx::pg_sys;
use pgrx::prelude::*;
use release_records::ReleaseRecord;
use serde::{Deserialize, Serialize};
use survey::DatabaseReport;
use worker::{Job, Outcome};

/// Why reading or writing a database failed: the SQLSTATE of its error, and its message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub code: String,
    pub message: String,
}

/// SQLSTATE 53400, configuration_limit_exceeded: no background worker was free, or there are
/// none (single-user mode).
const NO_WORKER: &str = "53400";

impl Failure {
    pub fn new(code: &str, message: impl Into<String>) -> Failure {
        Failure {
            code: code.into(),
            message: message.into(),
        }
    }

    /// A worker that answered a job with another job's outcome, which no worker of this
    /// version does.
    pub fn unexpected() -> Failure {
        Failure::new(
            "XX000",
            "its background worker answered with another job's outcome",
        )
    }

    /// No background worker could be started.
    pub fn no_worker(&self) -> bool {
        self.code == NO_WORKER
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

/// This backend's database.
fn this_database() -> pg_sys::Oid {
    // SAFETY: a plain read of this backend's database, set before it runs SQL.
    unsafe { pg_sys::MyDatabaseId }
}

/// Reads every database of the cluster: its own in the caller's transaction, each other one
/// with a background worker. Raises an error, having changed nothing, if one of them cannot be
/// read, or if a prepared transaction holds rows no survey can see.
pub fn survey_every_database() -> Vec<DatabaseReport> {
    refuse_while_transactions_are_prepared();
    let here = this_database();
    databases()
        .into_iter()
        .map(|(oid, name)| {
            let report = if oid == here {
                survey::this_database()
            } else {
                match worker::run(oid, &name, &Job::Survey) {
                    Ok(Outcome::Surveyed(report)) => Ok(report),
                    Ok(_) => Err(Failure::unexpected()),
                    Err(failure) => Err(failure),
                }
            };
            report.unwrap_or_else(|failure| match failure.no_worker() {
                true => errors::survey_needs_workers(&name),
                false => errors::survey_failed(&name, &failure.message),
            })
        })
        .collect()
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

/// What recording the released shards in every database came to.
pub struct Recorded {
    /// The databases that hold the record now.
    pub written: Vec<String>,
    /// The databases where snowid is installed but that could not record it, and why.
    pub failed: Vec<(String, Failure)>,
}

/// Writes `record` into the record of every database where snowid is installed, or empties each
/// record (`None`), each by a background worker, in a transaction of its own that commits
/// whatever the caller's transaction does (a release is not undone by ROLLBACK, so neither is
/// its record). A database where snowid is not installed, or where its version keeps no record,
/// is skipped.
pub fn record_in_every_database(record: Option<&ReleaseRecord>) -> Recorded {
    let mut recorded = Recorded {
        written: Vec::new(),
        failed: Vec::new(),
    };
    let job = Job::Record(record.cloned());
    for (oid, name) in databases() {
        match worker::run(oid, &name, &job) {
            Ok(Outcome::Recorded(true)) => recorded.written.push(name),
            Ok(Outcome::Recorded(false)) => {}
            Ok(_) => recorded.failed.push((name, Failure::unexpected())),
            Err(failure) => recorded.failed.push((name, failure)),
        }
    }
    recorded
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
