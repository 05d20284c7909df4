//! The checker: one background worker per server where Citus is preloaded, connected to the
//! database `snowid.citus_database` names, that makes every check (see [`super::check`]).
//!
//! One process checks, so one database's Citus metadata decides this server's shards, and one
//! `snowid.shards` (the checker's, which it reloads as soon as the server does) is checked: a
//! backend whose own copy is older or newer waits for nothing and generates only for the shards
//! both allow. The checker wakes when:
//! - a check is due (the server started, Citus's record of the nodes or this node's group
//!   changed, another node told of a claim this node's last check does not match): generation
//!   waits for it;
//! - the configuration is reloaded: if `snowid.shards` changed, a check is due; if
//!   `snowid.citus_database` changed, the checker exits and the postmaster starts it again,
//!   connected to the new database;
//! - a backend or another node's question calls for asking every node again, while generation
//!   goes on (a refused shard, a node known only by its question);
//! - its timer runs out: while some node could not be heard from or some shard is refused, it
//!   asks every node again every [`AGAIN`], until they have answered and the overlap is gone, so
//!   that nodes that could not reach each other find an overlap once they can.
//!
//! A check that fails with an error is published as a failure (this node generates nothing, and
//! says why), and made again on the timer; one that waited too long for a change of Citus's
//! record to commit is made again at once. Its database's settings steer nothing here: the
//! checker is the bootstrap superuser, with the settings its queries depend on fixed.

use super::check::{self, Memory, OwnIds};
use super::report::fingerprint_of;
use super::segment::{segment, Segment};
use crate::server::fixed_settings::{set_override, FIXED_SETTINGS};
use crate::server::settings;
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use snowid_core::host::Clock;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

/// How often the checker asks every node again while some node could not be heard from, or some
/// shard is refused.
pub const AGAIN: Duration = Duration::from_secs(2);

/// How long the postmaster waits before it starts a checker that exited again.
pub const RESTART: Duration = Duration::from_secs(5);

/// The SQLSTATE of a lock wait past `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// Registers the checker. Call only from `_PG_init` during `shared_preload_libraries`
/// processing, where Citus is preloaded.
pub fn register() {
    BackgroundWorkerBuilder::new("snowid Citus check")
        .set_type("snowid Citus check")
        .set_library("snowid")
        .set_function("snowid_citus_checker")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(RESTART))
        .load();
}

/// The checker's main loop.
///
/// # Safety
///
/// Started by the postmaster as the background worker [`register`] registered.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_citus_checker(_argument: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let Some(segment) = segment() else {
        return;
    };
    let database = settings::citus_database();
    // A database that does not exist ends the worker here, with FATAL in the log; the backends
    // waiting for a check then say so (see `super::ensure_checked`).
    segment.checker_connecting(snowid_core::clock::SystemClock.wall_ms());
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    fix_settings();
    // SAFETY: plain reads of this process's latch and PID; the callback only touches shared
    // memory.
    let pid = unsafe {
        segment.register_checker(pg_sys::MyLatch, pg_sys::MyProcPid as u32);
        pg_sys::before_shmem_exit(Some(unregister), pg_sys::Datum::from(0));
        pg_sys::MyProcPid as u32
    };
    let own = super::presence::own_ids();
    let mut memory = Memory::starting_after(segment.report().as_ref(), &database);
    let mut again_at: Option<Instant> = None;
    let mut asks_seen: Option<u64> = None;
    loop {
        if BackgroundWorker::sighup_received() {
            // SAFETY: the reload every process makes at SIGHUP, outside a transaction.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
            // The public IDs' keys may have changed: ask every node again, to compare them,
            // while generation goes on.
            segment.want_asking();
            if settings::citus_database() != database {
                log!(
                    "snowid's Citus check restarts to read Citus's metadata in database \"{}\"",
                    settings::citus_database()
                );
                segment.want_check();
                segment.unregister_checker(pid);
                // SAFETY: exits with 1, which the postmaster answers by starting it again.
                unsafe { pg_sys::proc_exit(1) };
            }
        }
        let configured = settings::configured_shards();
        let checked_with = segment.report().map(|r| r.fingerprint);
        if checked_with.is_some_and(|f| f != fingerprint_of(&configured)) && !segment.check_due() {
            segment.want_check();
        }
        let (_, asks) = segment.begin_check();
        let timer = again_at.is_some_and(|at| Instant::now() >= at);
        if segment.check_due() || asks_seen != Some(asks) || timer {
            asks_seen = Some(asks);
            again_at = make_check(&mut memory, segment, &configured, timer, own);
            continue;
        }
        let wait = again_at.map_or(Duration::from_secs(60), |at| {
            at.saturating_duration_since(Instant::now())
        });
        if !BackgroundWorker::wait_latch(Some(wait.max(Duration::from_millis(1)))) {
            break;
        }
        // SAFETY: resets this process's latch after the wait, before looking again.
        unsafe { pg_sys::ResetLatch(pg_sys::MyLatch) };
        pgrx::check_for_interrupts!();
    }
}

/// Makes a check in a transaction of its own; returns when to make the next one unasked.
fn make_check(
    memory: &mut Memory,
    segment: &Segment,
    configured: &snowid_core::shard_set::ShardSet,
    ask: bool,
    own: OwnIds,
) -> Option<Instant> {
    let (wanted, _) = segment.begin_check();
    match in_transaction(|| check::run(memory, segment, configured, ask, own)) {
        Ok(outcome) => outcome.again.then(|| Instant::now() + AGAIN),
        Err((code, _)) if code == LOCK_NOT_AVAILABLE => Some(Instant::now()),
        Err((_, message)) => {
            let database = settings::citus_database();
            let fingerprint = fingerprint_of(configured);
            let _ = in_transaction(|| {
                check::publish_failure(
                    memory,
                    segment,
                    wanted,
                    &database,
                    fingerprint,
                    message.clone(),
                )
            });
            warning!("snowid could not check this Citus node's shards: {message}");
            Some(Instant::now() + AGAIN)
        }
    }
}

/// Runs `f` in a transaction of its own, committed if it returns and aborted if it raises an
/// error, which comes back as its SQLSTATE and message.
fn in_transaction<T>(f: impl FnOnce() -> T) -> Result<T, (String, String)> {
    // SAFETY: the standard sequence for a transaction in a background worker.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let result = PgTryBuilder::new(AssertUnwindSafe(|| Ok(f())))
        .catch_others(|caught| {
            Err(match caught {
                CaughtError::PostgresError(e)
                | CaughtError::ErrorReport(e)
                | CaughtError::RustPanic { ereport: e, .. } => (
                    crate::errors::sqlstate(e.sql_error_code()),
                    e.message().to_string(),
                ),
            })
        })
        .execute();
    // SAFETY: ends the transaction begun above; after an error, the abort cleans up what the
    // transaction held, as a background worker's error recovery does.
    unsafe {
        match result {
            Ok(_) => {
                pg_sys::PopActiveSnapshot();
                pg_sys::CommitTransactionCommand();
            }
            Err(_) => {
                pg_sys::AbortCurrentTransaction();
                pg_sys::MemoryContextSwitchTo(pg_sys::TopMemoryContext);
            }
        }
    }
    result
}

/// Puts back what the database's own settings (which its owner may set) changed: the session
/// user is the bootstrap superuser again, [`FIXED_SETTINGS`] fix what its queries depend on, and
/// lock waits are bounded by each query's own `lock_timeout` only.
fn fix_settings() {
    // SAFETY: a plain call, outside a transaction, with no catalog read.
    unsafe { pg_sys::SetSessionAuthorization(pg_sys::BOOTSTRAP_SUPERUSERID.into(), true) };
    for (name, value) in FIXED_SETTINGS {
        set_override(name, value);
    }
    set_override(c"lock_timeout", c"0");
}

#[pg_guard]
unsafe extern "C-unwind" fn unregister(_code: i32, _arg: pg_sys::Datum) {
    if let Some(segment) = segment() {
        // SAFETY: a plain read of this process's PID.
        segment.unregister_checker(unsafe { pg_sys::MyProcPid } as u32);
    }
}
