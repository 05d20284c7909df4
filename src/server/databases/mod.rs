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
//! - [`record_table`]: each database's record of the released shards
//!   (`snowid_released_shards`);
//! - [`failure`], [`safe_search_path`]: why a job failed, and the `search_path` every query runs
//!   under, which the modules above share;
//! - this module: every database in turn (the caller's own included, each read in a snapshot of
//!   its own), and the prepared transactions, whose rows no survey can see.
//!
//! Whatever runs in a database runs there as PostgreSQL's maintenance commands run: catalog
//! queries with `search_path` set to `pg_catalog, pg_temp` and every operator qualified; tables
//! read as their owners, with no code of anyone's; records written only in the extension's own
//! table, by the superuser that owns it, with no trigger or rule on it.

pub mod failure;
pub mod key_reads;
pub mod record_table;
pub mod safe_search_path;
pub mod survey;
pub mod worker;

use crate::errors;
use failure::Failure;
use pgrx::pg_sys;
use pgrx::prelude::*;
use survey::DatabaseReport;
use worker::{Job, Outcome};

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
            Ok(Outcome::Written(_)) => {
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

/// Replaces the record of every database where snowid is installed with `released` (shard, last
/// ID pairs), each by a background worker, in a transaction of its own that commits whatever
/// the caller's transaction does (a change of the released shards is not undone by ROLLBACK,
/// so neither is its record). Stops at the first database that cannot be written, and returns
/// it with why. A database where snowid is not installed, or where its version keeps no record,
/// or that was dropped meanwhile, is skipped. `written` lists the databases written, also when
/// an error (a cancel) ends it; `before` is told, before each database, what has been written
/// and which is next: what a process that ends without unwinding (FATAL) can still say.
pub fn write_every_record(
    released: &[(i32, i64)],
    written: &mut Vec<String>,
    before: &mut dyn FnMut(&[String], &str),
) -> Result<(), (String, Failure)> {
    write_records(databases(), released, written, before)
}

/// [`write_every_record`], in the databases named only.
pub fn write_records_of(
    names: &[String],
    released: &[(i32, i64)],
    written: &mut Vec<String>,
) -> Result<(), (String, Failure)> {
    let named = databases()
        .into_iter()
        .filter(|(_, name)| names.contains(name))
        .collect();
    write_records(named, released, written, &mut |_, _| {})
}

fn write_records(
    databases: Vec<(pg_sys::Oid, String)>,
    released: &[(i32, i64)],
    written: &mut Vec<String>,
    before: &mut dyn FnMut(&[String], &str),
) -> Result<(), (String, Failure)> {
    let job = Job::Record(released.to_vec());
    for (oid, name) in databases {
        before(written, &name);
        match worker::run(oid, &name, &job) {
            Ok(Outcome::Written(true)) => written.push(name),
            Ok(Outcome::Written(false)) => {}
            Ok(Outcome::Surveyed(_)) => {
                return Err((name, Failure::internal("a survey's answer")));
            }
            Err(failure) if failure.is_database_gone() => {}
            Err(failure) => return Err((name, failure)),
        }
    }
    Ok(())
}
