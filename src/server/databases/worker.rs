//! One job run in another database of the cluster: a dynamic background worker connects to it
//! (as the bootstrap superuser, allowed into databases that refuse connections), runs the job in
//! a transaction of its own, and writes how it ended into a dynamic shared-memory segment the
//! caller made, as JSON; the caller reads it once the worker has exited. Jobs run one at a time.
//! A cancel or `statement_timeout` of the caller stops the worker it waits for; a worker that
//! outlives its caller finds the segment gone, or writes into one nobody reads.

use super::release_records::{self, ReleaseRecord};
use super::survey::{self, DatabaseReport};
use super::{Failure, NO_WORKER};
use crate::errors;
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::pg_sys;
use pgrx::prelude::*;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};

/// What a worker is asked to do in its database.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Job {
    /// Read the database's snowid keys and its record of the released shards.
    Survey,
    /// Replace the database's record of the released shards with this one, or, with none,
    /// empty it: the database then knows nothing of them.
    Record(Option<ReleaseRecord>),
}

/// How a job ended, when it did not fail.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Outcome {
    Surveyed(DatabaseReport),
    /// Whether the record was written (false: snowid is not installed there, or its version
    /// keeps no record).
    Recorded(bool),
}

/// The most a report may take in its segment: a survey lists at most
/// [`survey::LISTED_COLUMNS`] columns, far below it.
const REPORT_BYTES: usize = 1 << 18;

/// The segment's header; the job's JSON follows it, then room for the outcome's.
#[repr(C)]
struct Channel {
    database: pg_sys::Oid,
    /// Set last, once the outcome is written.
    written: AtomicBool,
    job_len: u32,
    outcome_len: u32,
}

/// Runs `job` in database `database` (named `name` in messages) with a background worker, and
/// waits for it.
pub fn run(database: pg_sys::Oid, name: &str, job: &Job) -> Result<Outcome, Failure> {
    let job = serde_json::to_vec(job).map_err(|e| Failure::new("XX000", e.to_string()))?;
    let size = size_of::<Channel>() + job.len() + REPORT_BYTES;
    // SAFETY: dsm_create raises an error rather than return null without the flag that allows
    // it; the segment is zeroed and sized for the header, the job and the outcome, and lives
    // until detached or until the transaction ends.
    let (segment, channel) = unsafe {
        let segment = pg_sys::dsm_create(size, 0);
        let channel = pg_sys::dsm_segment_address(segment).cast::<Channel>();
        std::ptr::write_bytes(channel.cast::<u8>(), 0, size);
        (*channel).database = database;
        (*channel).job_len = job.len() as u32;
        std::ptr::copy_nonoverlapping(job.as_ptr(), channel.add(1).cast::<u8>(), job.len());
        (segment, channel)
    };
    let outcome = start_and_wait(segment, name).and_then(|()| {
        // SAFETY: the worker has exited: the segment is read by this process alone.
        unsafe { read_outcome(channel) }
    });
    // SAFETY: the segment is this process's, and nothing refers to it any more.
    unsafe { pg_sys::dsm_detach(segment) };
    outcome
}

/// Starts the worker for a segment and waits until it has exited.
fn start_and_wait(segment: *mut pg_sys::dsm_segment, name: &str) -> Result<(), Failure> {
    // SAFETY: a plain read of the segment's handle and of this process's PID.
    let (handle, pid) = unsafe { (pg_sys::dsm_segment_handle(segment), pg_sys::MyProcPid) };
    let builder = BackgroundWorkerBuilder::new(&format!("snowid in database {name}"))
        .set_type("snowid")
        .set_library("snowid")
        .set_function("snowid_database_worker")
        .set_argument(Some(pg_sys::Datum::from(handle)))
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .set_notify_pid(pid);
    let mut worker: pg_sys::BackgroundWorker = (&builder).into();
    let mut handle = std::ptr::null_mut();
    // SAFETY: a plain registration; PostgreSQL sets the handle when it returns true.
    if !unsafe { pg_sys::RegisterDynamicBackgroundWorker(&mut worker, &mut handle) } {
        return Err(Failure::new(
            NO_WORKER,
            "no background worker was free to connect to it (or the server runs in single-user \
             mode)",
        ));
    }
    let _running = RunningWorker(handle);
    // SAFETY: the handle is valid; the wait returns once the worker has exited (or never
    // started), and raises an error on a cancel, which `_running` answers by stopping it.
    unsafe { pg_sys::WaitForBackgroundWorkerShutdown(handle) };
    Ok(())
}

/// The outcome a worker wrote.
///
/// # Safety
///
/// `channel` is a segment made by [`run`] whose worker has exited.
unsafe fn read_outcome(channel: *const Channel) -> Result<Outcome, Failure> {
    // SAFETY: guaranteed by the caller; the outcome follows the job, within the segment.
    let bytes = unsafe {
        if !(*channel).written.load(Ordering::Acquire) {
            return Err(Failure::new(
                "XX000",
                "its background worker ended without a report; the server log says why",
            ));
        }
        let at = channel.add(1).cast::<u8>().add((*channel).job_len as usize);
        std::slice::from_raw_parts(at, (*channel).outcome_len as usize)
    };
    serde_json::from_slice::<Result<Outcome, Failure>>(bytes).unwrap_or_else(|e| {
        Err(Failure::new(
            "XX000",
            format!("its report cannot be read: {e}"),
        ))
    })
}

/// A worker being waited for, stopped when this is dropped: at once if the wait ends with an
/// error; after it has exited (when stopping it does nothing) otherwise.
struct RunningWorker(*mut pg_sys::BackgroundWorkerHandle);

impl Drop for RunningWorker {
    fn drop(&mut self) {
        // SAFETY: the handle is valid; terminating a worker that has exited does nothing.
        unsafe { pg_sys::TerminateBackgroundWorker(self.0) };
    }
}

/// The background worker: connects to its database, runs its job in a transaction of its own,
/// and writes how it ended into its caller's segment.
///
/// # Safety
///
/// Started by PostgreSQL as a dynamic background worker, with the handle of a segment made by
/// [`run`] as its argument.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_database_worker(argument: pg_sys::Datum) {
    // SAFETY: PostgreSQL's default handlers stay (SIGTERM ends the worker with FATAL).
    unsafe { pg_sys::BackgroundWorkerUnblockSignals() };
    // SAFETY: attaching returns null if the caller has gone and the segment with it.
    let segment = unsafe { pg_sys::dsm_attach(argument.value() as pg_sys::dsm_handle) };
    if segment.is_null() {
        return;
    }
    // SAFETY: the segment is attached; its address is where `run` wrote the Channel.
    let channel = unsafe { pg_sys::dsm_segment_address(segment).cast::<Channel>() };
    // SAFETY: the segment holds a Channel and the job after it; the caller does not touch it
    // until this worker exits.
    let (database, job) = unsafe {
        let job =
            std::slice::from_raw_parts(channel.add(1).cast::<u8>(), (*channel).job_len as usize);
        ((*channel).database, serde_json::from_slice::<Job>(job))
    };
    // SAFETY: connects this worker to the database as the bootstrap superuser; a database that
    // refuses connections (a template) is read all the same.
    unsafe {
        pg_sys::BackgroundWorkerInitializeConnectionByOid(
            database,
            pg_sys::InvalidOid,
            pg_sys::BGWORKER_BYPASS_ALLOWCONN,
        )
    };
    let outcome = match job {
        Ok(job) => in_own_transaction(|| match &job {
            Job::Survey => survey::this_database().map(Outcome::Surveyed),
            Job::Record(record) => {
                release_records::write_here(record.as_ref()).map(Outcome::Recorded)
            }
        }),
        Err(e) => Err(Failure::new(
            "XX000",
            format!("its job cannot be read: {e}"),
        )),
    };
    let bytes = serde_json::to_vec(&outcome)
        .ok()
        .filter(|b| b.len() <= REPORT_BYTES)
        .unwrap_or_else(|| {
            let failed: Result<Outcome, Failure> =
                Err(Failure::new("54000", "its report is too large"));
            serde_json::to_vec(&failed).unwrap_or_default()
        });
    // SAFETY: the room after the job is REPORT_BYTES long; the flag is set last.
    unsafe {
        let at = channel.add(1).cast::<u8>().add((*channel).job_len as usize);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, bytes.len());
        (*channel).outcome_len = bytes.len() as u32;
        (*channel).written.store(true, Ordering::Release);
    }
}

/// Runs `job` in a transaction of its own, committed if it succeeds; an error (and any ERROR
/// raised inside) aborts it and becomes the failure.
fn in_own_transaction(job: impl FnOnce() -> Result<Outcome, Failure>) -> Result<Outcome, Failure> {
    // SAFETY: the standard sequence for a transaction in a background worker.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    PgTryBuilder::new(std::panic::AssertUnwindSafe(|| {
        let outcome = job();
        // SAFETY: ends the transaction begun above: commits it, or aborts it after a failure.
        unsafe {
            pg_sys::PopActiveSnapshot();
            if outcome.is_ok() {
                pg_sys::CommitTransactionCommand();
            } else {
                pg_sys::AbortCurrentTransaction();
            }
        }
        outcome
    }))
    .catch_others(|caught| {
        // SAFETY: the error is caught; aborting cleans up the transaction and its snapshots.
        unsafe { pg_sys::AbortCurrentTransaction() };
        Err(match caught {
            pg_sys::panic::CaughtError::PostgresError(e)
            | pg_sys::panic::CaughtError::ErrorReport(e)
            | pg_sys::panic::CaughtError::RustPanic { ereport: e, .. } => {
                Failure::new(&errors::sqlstate(e.sql_error_code()), e.message())
            }
        })
    })
    .execute()
}
