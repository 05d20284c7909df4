//! Why a job in a database failed, as a worker reports it to its caller and the caller reports
//! it on: the SQLSTATE, message, detail and hint of the error, or of what ended the worker.

use crate::server::waits;
use serde::{Deserialize, Serialize};

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
