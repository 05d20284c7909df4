//! One job run in one database of the cluster: a dynamic background worker connects to it (as
//! the bootstrap superuser, allowed into databases that refuse connections), runs the job in a
//! transaction of its own, and answers through a message queue (`shm_mq`) in a dynamic
//! shared-memory segment the caller made, as PostgreSQL's parallel workers and `pg_background`
//! do. The queue carries an answer of any size, and the worker's protocol output is redirected
//! into it, so that whatever ends the worker (an error, a FATAL such as a database dropped
//! meanwhile, a termination) reaches the caller with its SQLSTATE, message, detail and hint.
//!
//! The worker is steered by nothing a database owner (or anyone) set for a database or a role:
//! every setting of `ALTER DATABASE ... SET`, `ALTER ROLE ... SET` and `ALTER ROLE ... IN
//! DATABASE ... SET` (which PostgreSQL applies to every connection) is put back to what the
//! server's configuration says before the job runs ([`put_back_database_settings`]), whatever
//! the major's settings are; the session user is the bootstrap superuser again whatever
//! `session_authorization` said; and [`fixed_settings`] fix what the job depends on, whatever
//! the configuration says (no role switched to, no read-only or serializable default, no
//! timeout but the bound on lock waits, no `exit_on_error`, a safe `search_path`, standard
//! string literals, the database's own encoding for its messages, no damaged page read as
//! zeros, no parallel query).
//!
//! Every lock the worker waits for, its database's own included (`ALTER DATABASE ... RENAME`
//! held open by its owner, say), it waits for at most `super::super::waits::LOCK_WAIT`: its
//! `lock_timeout` is that bound from before it connects. A failure to connect within it names
//! the processes that held the database.
//!
//! Jobs run one at a time. A cancel or `statement_timeout` of the caller stops the worker it
//! waits for; a worker that outlives its caller finds the segment gone, or writes into a queue
//! nobody reads.

use super::failure::Failure;
use super::record_table::{self, Written};
use super::survey::{self, DatabaseReport};
use crate::server::fixed_settings::{set_override, FIXED_SETTINGS};
use crate::server::waits;
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::pg_sys;
use pgrx::prelude::*;
use serde::{Deserialize, Serialize};
use std::ffi::{c_void, CStr, CString};

/// What a worker is asked to do in its database.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Job {
    /// Read the database's snowid keys and its record of the released shards, waiting for a
    /// table another transaction holds locked only if `wait`.
    Survey { wait: bool },
    /// Replace the database's record of the released shards with these (shard, last ID) pairs.
    Record(Vec<(i32, i64)>),
}

/// How a job ended, when it did not fail.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Outcome {
    Surveyed(DatabaseReport),
    /// Whether the record was written (false: snowid is not installed there, or its version
    /// keeps no record).
    Written(bool),
}

/// [`FIXED_SETTINGS`], with the bound on lock waits, and the database's own encoding for the
/// messages it sends (as PostgreSQL's parallel workers do): no conversion, so none that fails.
fn fixed_settings() -> Vec<(CString, CString)> {
    // SAFETY: the name of the connected database's encoding, a static string.
    let encoding = unsafe { CStr::from_ptr(pg_sys::GetDatabaseEncodingName()) }.to_owned();
    FIXED_SETTINGS
        .iter()
        .map(|(name, value)| (CString::from(*name), CString::from(*value)))
        .chain([
            (c"lock_timeout".into(), waits::lock_wait_setting()),
            (c"client_encoding".into(), encoding),
        ])
        .collect()
}

/// Every setting PostgreSQL has in this process, as its `config_generic` records.
fn every_setting() -> &'static [*mut pg_sys::config_generic] {
    // SAFETY: PostgreSQL's own array of its settings, valid for the process's life (a setting
    // defined later makes a new one, which this does not keep).
    unsafe {
        #[cfg(feature = "pg15")]
        let (array, count) = (pg_sys::get_guc_variables(), pg_sys::GetNumConfigOptions());
        #[cfg(not(feature = "pg15"))]
        let (array, count) = {
            let mut count = 0;
            (pg_sys::get_guc_variables(&mut count), count)
        };
        match array.is_null() {
            true => &[],
            false => std::slice::from_raw_parts(array, count.max(0) as usize),
        }
    }
}

/// What a setting a database or a role can set says now, for each: taken before the worker
/// connects, from the server's configuration alone.
fn settings_before_connecting() -> Vec<(CString, CString)> {
    every_setting()
        .iter()
        .filter_map(|&setting| {
            // SAFETY: a record of PostgreSQL's setting array, and its value as text, copied
            // at once (numbers come in a static buffer).
            unsafe {
                let setting = &*setting;
                // `role`, `session_authorization` and the `transaction_*` settings (those a
                // RESET ALL leaves) are not put back: the first two are fixed by hand, the
                // others last one transaction, and the job's own follows the fixed defaults.
                let settable = matches!(
                    setting.context,
                    pg_sys::GucContext::PGC_USERSET | pg_sys::GucContext::PGC_SUSET
                ) && setting.flags
                    & (pg_sys::GUC_CUSTOM_PLACEHOLDER | pg_sys::GUC_NO_RESET_ALL) as i32
                    == 0;
                if !settable || setting.name.is_null() {
                    return None;
                }
                let value = pg_sys::GetConfigOption(setting.name, true, false);
                (!value.is_null()).then(|| {
                    (
                        CStr::from_ptr(setting.name).to_owned(),
                        CStr::from_ptr(value).to_owned(),
                    )
                })
            }
        })
        .collect()
}

/// Puts every setting a database's or role's `SET` changed back to what it said before the
/// worker connected (`before`), as an override: nothing set for a database or a role steers the
/// worker, in any major, whatever the setting.
fn put_back_database_settings(before: &[(CString, CString)]) {
    let from_the_catalog = [
        pg_sys::GucSource::PGC_S_GLOBAL,
        pg_sys::GucSource::PGC_S_DATABASE,
        pg_sys::GucSource::PGC_S_USER,
        pg_sys::GucSource::PGC_S_DATABASE_USER,
    ];
    for &setting in every_setting() {
        // SAFETY: a record of PostgreSQL's setting array.
        let (name, source) = unsafe { (CStr::from_ptr((*setting).name), (*setting).source) };
        if !from_the_catalog.contains(&source) {
            continue;
        }
        if let Some((_, value)) = before.iter().find(|(n, _)| n.as_c_str() == name) {
            set_override(name, value);
        }
    }
}

/// The queue's size: an answer larger than this passes through it in parts.
const QUEUE_BYTES: usize = 1 << 16;

/// The first byte of the worker's answer, beside the protocol messages ('E' an error, 'N' a
/// notice) that its redirected output sends.
const ANSWER: u8 = b'r';
/// The first byte of the message the worker sends once it has connected to its database.
const CONNECTED: u8 = b'c';

/// The segment's header; the job's JSON follows it, then the queue.
#[repr(C)]
struct Header {
    database: pg_sys::Oid,
    job_len: u32,
}

/// Where the queue starts, past the header and the job, aligned as `shm_mq` needs.
fn queue_offset(job_len: usize) -> usize {
    (size_of::<Header>() + job_len).next_multiple_of(pg_sys::MAXIMUM_ALIGNOF as usize)
}

// PostgreSQL's functions of libpq/pqmq.h, which pgrx's bindings leave out; each call goes
// through pgrx's guard, so that an error raised inside unwinds as pgrx's own calls do.
unsafe extern "C-unwind" {
    /// Sends this process's protocol output (its errors and notices) into a queue.
    fn pq_redirect_to_shm_mq(seg: *mut pg_sys::dsm_segment, mqh: *mut pg_sys::shm_mq_handle);
    /// Reads an ErrorResponse or NoticeResponse message into an ErrorData.
    fn pq_parse_errornotice(msg: pg_sys::StringInfo, edata: *mut pg_sys::ErrorData);
}

/// Runs `job` in database `database` (named `name` in messages) with a background worker, and
/// waits for its answer.
pub fn run(database: pg_sys::Oid, name: &str, job: &Job) -> Result<Outcome, Failure> {
    let job = serde_json::to_vec(job).map_err(|e| Failure::internal(e.to_string()))?;
    let size = queue_offset(job.len()) + QUEUE_BYTES;
    // SAFETY: dsm_create raises an error rather than return null without the flag that allows
    // it; the segment is sized for the header, the job and the queue, and lives until detached
    // or until the transaction ends. The queue is this process's to receive from.
    let (segment, queue) = unsafe {
        let segment = pg_sys::dsm_create(size, 0);
        let base = pg_sys::dsm_segment_address(segment).cast::<u8>();
        base.cast::<Header>().write(Header {
            database,
            job_len: job.len() as u32,
        });
        std::ptr::copy_nonoverlapping(job.as_ptr(), base.add(size_of::<Header>()), job.len());
        let mq = pg_sys::shm_mq_create(base.add(queue_offset(job.len())).cast(), QUEUE_BYTES);
        pg_sys::shm_mq_set_receiver(mq, pg_sys::MyProc);
        (
            segment,
            pg_sys::shm_mq_attach(mq, segment, std::ptr::null_mut()),
        )
    };
    let answer = start(segment, queue, name).and_then(|worker| {
        let answer = receive(queue).map_err(|(failure, connected)| match connected {
            false if failure.code == LOCK_NOT_AVAILABLE => {
                Failure::database_locked(&waits::holders_of_database(database))
            }
            _ => failure,
        });
        worker.exited();
        answer
    });
    // SAFETY: the segment is this process's, and nothing refers to it any more.
    unsafe { pg_sys::dsm_detach(segment) };
    answer
}

/// Starts the worker for a segment, and ties the queue to it, so that a worker that dies
/// before it attaches detaches the queue.
fn start(
    segment: *mut pg_sys::dsm_segment,
    queue: *mut pg_sys::shm_mq_handle,
    name: &str,
) -> Result<RunningWorker, Failure> {
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
        return Err(Failure::no_worker());
    }
    // SAFETY: both handles are valid for the rest of this call.
    unsafe { pg_sys::shm_mq_set_handle(queue, handle) };
    Ok(RunningWorker(handle))
}

/// SQLSTATE 55P03, lock_not_available: a lock wait ran past `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// Reads the worker's messages until its answer, its error, or its end; a failure comes with
/// whether the worker had connected to its database.
fn receive(queue: *mut pg_sys::shm_mq_handle) -> Result<Outcome, (Failure, bool)> {
    let mut connected = false;
    loop {
        let mut len: pg_sys::Size = 0;
        let mut data: *mut c_void = std::ptr::null_mut();
        // SAFETY: the queue is attached; the wait honours cancels (raised as errors, which
        // unwind through the worker's guard, stopping it).
        let result = unsafe { pg_sys::shm_mq_receive(queue, &mut len, &mut data, false) };
        if result != pg_sys::shm_mq_result::SHM_MQ_SUCCESS {
            return Err((Failure::ended_without_answer(), connected));
        }
        // SAFETY: shm_mq gives `len` bytes at `data`, valid until the next receive.
        let message = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) };
        match message.first() {
            Some(&ANSWER) => {
                return serde_json::from_slice::<Result<Outcome, Failure>>(&message[1..])
                    .unwrap_or_else(|e| Err(Failure::internal(format!("its answer: {e}"))))
                    .map_err(|failure| (failure, connected))
            }
            Some(&CONNECTED) => connected = true,
            Some(b'E') => return Err((error_of(message), connected)),
            // Notices, and anything else its redirected output sends, are not the answer.
            _ => {}
        }
    }
}

/// The failure an ErrorResponse message describes.
fn error_of(message: &[u8]) -> Failure {
    // SAFETY: the message is copied into a StringInfo of this process's memory context, which
    // pq_parse_errornotice reads; it fills the ErrorData with strings in the same context.
    unsafe {
        let mut buffer = pg_sys::StringInfoData::default();
        pg_sys::initStringInfo(&mut buffer);
        pg_sys::appendBinaryStringInfo(
            &mut buffer,
            message[1..].as_ptr().cast(),
            (message.len() - 1) as i32,
        );
        let mut error = pg_sys::ErrorData::default();
        pg_sys::ffi::pg_guard_ffi_boundary(|| pq_parse_errornotice(&mut buffer, &mut error));
        let text = |s: *mut std::ffi::c_char| {
            (!s.is_null()).then(|| CStr::from_ptr(s).to_string_lossy().into_owned())
        };
        Failure {
            code: crate::errors::sqlstate_of(error.sqlerrcode),
            message: text(error.message).unwrap_or_default(),
            detail: text(error.detail),
            hint: text(error.hint),
        }
    }
}

/// A worker being waited for, stopped if this is dropped before it has exited (the wait for it
/// ended with an error: a cancel).
struct RunningWorker(*mut pg_sys::BackgroundWorkerHandle);

impl RunningWorker {
    /// Waits for the worker to exit, which it does once it has answered, so that its slot is
    /// free for the next.
    fn exited(self) {
        // SAFETY: the handle is valid; the wait returns once the worker has exited, and raises
        // an error on a cancel, which the drop below answers by stopping it.
        unsafe { pg_sys::WaitForBackgroundWorkerShutdown(self.0) };
        std::mem::forget(self);
    }
}

impl Drop for RunningWorker {
    fn drop(&mut self) {
        // SAFETY: the handle is valid; terminating a worker that has exited does nothing.
        unsafe { pg_sys::TerminateBackgroundWorker(self.0) };
    }
}

/// The background worker: attaches to its caller's queue and sends its output there, connects
/// to its database, fixes the settings its job depends on, runs the job in a transaction of its
/// own, and answers. An error ends the worker, and its redirected output carries it to the
/// caller.
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
    // SAFETY: the segment holds the Header, the job and the queue as `run` laid them out; the
    // caller reads only the queue, which this process is the one sender of.
    let (database, job, queue) = unsafe {
        let base = pg_sys::dsm_segment_address(segment).cast::<u8>();
        let header = base.cast::<Header>().read();
        let job_len = header.job_len as usize;
        let job = std::slice::from_raw_parts(base.add(size_of::<Header>()), job_len).to_vec();
        let mq = base.add(queue_offset(job_len)).cast::<pg_sys::shm_mq>();
        pg_sys::shm_mq_set_sender(mq, pg_sys::MyProc);
        let queue = pg_sys::shm_mq_attach(mq, segment, std::ptr::null_mut());
        pg_sys::ffi::pg_guard_ffi_boundary(|| pq_redirect_to_shm_mq(segment, queue));
        (header.database, job, queue)
    };
    // Before it connects: the configuration's settings, to put back any that the database's or
    // a role's settings change, and the bound on every lock wait, its database's own included.
    let before = settings_before_connecting();
    set_override(c"lock_timeout", &waits::lock_wait_setting());
    // SAFETY: connects this worker to the database as the bootstrap superuser; a database that
    // refuses connections (a template) is read all the same. A database dropped meanwhile, or
    // locked past the bound, ends the worker here, with FATAL, which the queue carries.
    unsafe {
        pg_sys::BackgroundWorkerInitializeConnectionByOid(
            database,
            pg_sys::InvalidOid,
            pg_sys::BGWORKER_BYPASS_ALLOWCONN,
        )
    };
    // SAFETY: a database's `session_authorization` setting (which its owner may set) made
    // another role this worker's session user; it is the bootstrap superuser again, as it
    // connected. No catalog is read.
    unsafe { pg_sys::SetSessionAuthorization(pg_sys::BOOTSTRAP_SUPERUSERID.into(), true) };
    // SAFETY: the queue is attached as its sender; the caller reads it until the answer.
    unsafe { pg_sys::shm_mq_send(queue, 1, [CONNECTED].as_ptr().cast(), false, true) };
    put_back_database_settings(&before);
    for (name, value) in fixed_settings() {
        set_override(&name, &value);
    }
    let job: Job = serde_json::from_slice(&job)
        .unwrap_or_else(|e| error!("snowid's worker cannot read its job: {e}"));
    let outcome = in_own_transaction(|| match &job {
        Job::Survey { wait } => survey::this_database(*wait).map(Outcome::Surveyed),
        Job::Record(released) => match record_table::write_here(released)? {
            Written::Record => Ok(Outcome::Written(true)),
            Written::NoRecord => Ok(Outcome::Written(false)),
            Written::Untrusted(why) => Err(Failure::new("42501", why)),
        },
    });
    let mut answer = vec![ANSWER];
    answer.extend(serde_json::to_vec(&outcome).unwrap_or_default());
    // SAFETY: the queue is attached as its sender; a caller that has gone detached it, and the
    // send then returns SHM_MQ_DETACHED, which leaves nothing to do.
    unsafe {
        pg_sys::shm_mq_send(queue, answer.len(), answer.as_ptr().cast(), false, true);
    }
}

/// Runs `job` in a transaction of its own, committed if it succeeds and aborted if it returns a
/// failure. An error raised inside ends the worker (and, through its redirected output, reaches
/// the caller).
fn in_own_transaction(job: impl FnOnce() -> Result<Outcome, Failure>) -> Result<Outcome, Failure> {
    // SAFETY: the standard sequence for a transaction in a background worker.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let outcome = job();
    // SAFETY: ends the transaction begun above.
    unsafe {
        pg_sys::PopActiveSnapshot();
        if outcome.is_ok() {
            pg_sys::CommitTransactionCommand();
        } else {
            pg_sys::AbortCurrentTransaction();
        }
    }
    outcome
}
