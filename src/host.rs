//! The issuing protocol's host inside PostgreSQL: the machine's clocks, the lease lock, the WAL
//! and the state file, latch waits, and the server log.

use crate::shmem::{LeaseLockGuard, LEASE_LOCK};
use crate::wal;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::clock::SystemClock;
use snowid_core::host::{Clock, Event, Interrupted, LeaseStore, Report, Wait};
use snowid_core::lease::{self, Record, StateFile};
use std::path::Path;

/// The host for calls in this backend. It has no state; the protocol is generic over it, so
/// every method below compiles into the caller.
pub struct PgHost;

impl Clock for PgHost {
    #[inline]
    fn monotonic_ms(&self) -> i64 {
        SystemClock.monotonic_ms()
    }

    #[inline]
    fn wall_ms(&self) -> i64 {
        SystemClock.wall_ms()
    }
}

impl LeaseStore for PgHost {
    type Error = std::io::Error;
    type Guard = LeaseLockGuard;

    fn try_lock(&self) -> Option<LeaseLockGuard> {
        LEASE_LOCK.try_exclusive()
    }

    /// The WAL record first, flushed, so that standbys and restores learn the lease before any
    /// ID under it can be committed; then the state file, fsynced, so that the lease survives
    /// checkpoints.
    fn persist(&self, record: &Record) -> std::io::Result<()> {
        wal::log_lease(record);
        // SAFETY: a plain read of PostgreSQL's fsync setting.
        let fsync = unsafe { pg_sys::enableFsync };
        lease::write(Path::new("."), &StateFile::running(*record), fsync)
    }
}

impl Wait for PgHost {
    /// Sleeps on the process latch, honouring query cancel, `statement_timeout` and postmaster
    /// death: an interrupt raises its error from here and never returns.
    fn wait(&self, ms: u64) -> Result<(), Interrupted> {
        let flags = pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH;
        // SAFETY: MyLatch is set up for every backend and worker before it runs SQL functions.
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                flags as i32,
                ms.clamp(1, 1000) as std::ffi::c_long,
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
        pg_sys::check_for_interrupts!();
        Ok(())
    }
}

impl Report for PgHost {
    /// Server log only: the client whose call noticed the clock has nothing to do about it.
    fn report(&self, event: Event) {
        let message = match event {
            Event::ClockSteppedBack { ms, behind_ms } => format!(
                "snowid saw the system clock step back by {ms} ms; IDs continue from the time \
                 base, which is now {behind_ms} ms ahead of the system clock"
            ),
            Event::RunningAhead { behind_ms } => format!(
                "snowid time base is {behind_ms} ms ahead of the system clock, more than \
                 snowid.max_lead; IDs carry timestamps from the time base until the clock \
                 catches up"
            ),
        };
        ereport!(
            PgLogLevel::LOG_SERVER_ONLY,
            PgSqlErrorCode::ERRCODE_WARNING,
            message
        );
    }
}
