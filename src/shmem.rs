//! snowid's state in PostgreSQL shared memory, and how it starts and stops.
//!
//! # Concurrency rules
//!
//! - The segment holds [`snowid_core::generator::Shared`]: the time base, the lease, and one cell
//!   per shard (8,192), each on its own 64-byte cache line, so that shards never contend through
//!   false sharing and the read-mostly lines (time base, lease) are not dirtied by generation.
//! - The postmaster builds the segment in the shared-memory startup hook, before any backend
//!   exists, from `$PGDATA/snowid.state` checked against `global/pg_control`. After a backend
//!   crash the postmaster builds a fresh segment the same way, and crash recovery then replays
//!   the lease records written since the last checkpoint (see [`crate::wal`]).
//! - A shard's stamp is only ever changed by compare-and-swap (issuing), by `fetch_or` (a
//!   release) or by `fetch_max` (WAL replay). Stamps only move forward. No lock is taken on the
//!   issuing path, and a process that dies between its load and its CAS leaves nothing half-done.
//! - The time base's offset only grows (`fetch_max`); its comparison with the wall clock is done
//!   by whichever caller wins a CAS on the due time.
//! - The lease end is read without a lock. It is raised only by a caller holding
//!   [`LEASE_LOCK`], after the lease is durable (WAL flushed, state file fsynced), or by WAL
//!   replay, which only happens where nothing is generated. Every value a reader sees is already
//!   safe to use; a reader that sees an old value takes the cold path and finds it extended.
//! - [`LEASE_LOCK`] is only ever taken conditionally (`LWLockConditionalAcquire`): a caller that
//!   cannot take it never queues on it, and waits on its latch instead, where a cancel or
//!   `statement_timeout` can end the wait. Only the writer waits for the flush.
//! - A shard's counters (IDs issued, waits) are bumped with relaxed `fetch_add` right after the
//!   caller's CAS on the same line, so they add no contention; readers may see them slightly
//!   behind the stamp.
//! - Every backend and parallel worker inherits the segment's address from the postmaster.

use crate::gucs;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic, PgSharedMemoryInitialization};
use snowid_core::clock::{sample_patiently, SystemClock};
use snowid_core::generator::Shared;
use snowid_core::lease::{self, LastStop, Start, StateFile};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering::Relaxed};

/// The shared state, as PostgreSQL's shared memory holds it.
#[repr(transparent)]
pub struct SharedState(pub Shared);

// SAFETY: plain atomics with no pointers; valid at any address in any process.
unsafe impl PGRXSharedMemory for SharedState {}

// SAFETY: no other shared-memory segment is named "snowid state".
static STATE: PgAtomic<SharedState> = unsafe { PgAtomic::new(c"snowid state") };

/// Serialises lease writes. Only ever taken without waiting (see the rules above).
pub static LEASE_LOCK: LeaseLock = LeaseLock(AtomicPtr::new(std::ptr::null_mut()));

/// Set in the postmaster when the library is preloaded; inherited by every backend it forks.
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// Requests the segment and the lock, and arranges for the state file to be sealed when the
/// server stops. Call only from `_PG_init` during `shared_preload_libraries` processing, after
/// the settings are defined.
pub fn init() {
    pg_shmem_init!(
        STATE = SharedState(Shared::start(
            sample_patiently(&SystemClock),
            &start_from_disk()
        ))
    );
    pg_shmem_init!(LEASE_LOCK = false);
    // SAFETY: registered in the postmaster, whose children drop it (on_exit_reset), so it runs
    // once, when the postmaster exits.
    unsafe { pg_sys::on_proc_exit(Some(seal_state_file), pg_sys::Datum::from(0)) };
    PRELOADED.store(true, Relaxed);
}

/// Whether this server loaded snowid through `shared_preload_libraries`.
#[inline]
pub fn preloaded() -> bool {
    PRELOADED.load(Relaxed)
}

/// The shared state, or `None` when the library was not preloaded.
#[inline]
pub fn state() -> Option<&'static Shared> {
    preloaded().then(|| &STATE.get().0)
}

/// Decides how generation starts, from the state file and `pg_control`, and says in the log why
/// it will not, if it will not. Runs in the postmaster.
fn start_from_disk() -> Start {
    let epoch_ms = gucs::epoch_unix_ms();
    let start = lease::start(lease::read(Path::new(".")), epoch_ms, last_stop());
    let why = match &start {
        Start::Resume { .. } => return start,
        Start::EpochMovedLater {
            recorded_epoch_unix_ms,
        } => format!(
            "snowid.epoch ({}) is later than the epoch of IDs already issued ({})",
            snowid_core::epoch::format(epoch_ms),
            snowid_core::epoch::format(*recorded_epoch_unix_ms)
        ),
        Start::Unreadable { reason } => format!("\"{}\" is unreadable: {reason}", lease::FILE_NAME),
        Start::Stale {
            sealed_at_lsn,
            checkpoint_lsn,
        } => format!(
            "\"{}\" is older than the data directory: it is sealed at {}, the last shutdown \
             checkpoint is at {}",
            lease::FILE_NAME,
            sealed_at_lsn.map_or("no checkpoint".into(), lease::format_lsn),
            lease::format_lsn(*checkpoint_lsn)
        ),
    };
    warning!("snowid will not generate IDs: {why}");
    start
}

/// How the server last stopped, from `global/pg_control`. A file that cannot be read counts as
/// an unclean stop, after which WAL replay restores what the state file lacks.
fn last_stop() -> LastStop {
    let unclean = LastStop {
        clean: false,
        checkpoint_lsn: 0,
    };
    let Ok(bytes) = std::fs::read("global/pg_control") else {
        return unclean;
    };
    if bytes.len() < size_of::<pg_sys::ControlFileData>() {
        return unclean;
    }
    // SAFETY: the file holds a ControlFileData at its start (PostgreSQL checked its CRC when it
    // started); every field is plain data, and the read copes with any alignment.
    let control =
        unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<pg_sys::ControlFileData>()) };
    LastStop {
        clean: matches!(
            control.state,
            pg_sys::DBState::DB_SHUTDOWNED | pg_sys::DBState::DB_SHUTDOWNED_IN_RECOVERY
        ),
        checkpoint_lsn: control.checkPoint,
    }
}

/// Seals the state file with the checkpoint the server stopped at, so that the next start can
/// tell this file from an older copy. Runs in the postmaster as it exits, after every other
/// process has stopped.
#[pg_guard]
unsafe extern "C-unwind" fn seal_state_file(_code: i32, _arg: pg_sys::Datum) {
    let dir = Path::new(".");
    if let Ok(Some(file)) = lease::read(dir) {
        let sealed = StateFile {
            sealed_at_lsn: Some(last_stop().checkpoint_lsn),
            unsealable: false,
            ..file
        };
        // SAFETY: a plain read of PostgreSQL's fsync setting.
        let fsync = unsafe { pg_sys::enableFsync };
        if let Err(e) = lease::write(dir, &sealed, fsync) {
            log!("could not seal \"{}\": {e}", lease::FILE_NAME);
        }
    }
}

/// The state file on a server that replays WAL: raised to cover a replayed record, durably,
/// so that a restartpoint passing the record loses nothing.
pub fn absorb_replayed(record: &lease::Record) -> std::io::Result<()> {
    let dir = Path::new(".");
    let merged = match lease::read(dir) {
        Ok(Some(file)) => file.record.merge(record),
        _ => *record,
    };
    // SAFETY: a plain read of PostgreSQL's fsync setting.
    let fsync = unsafe { pg_sys::enableFsync };
    lease::write(dir, &StateFile::running(merged), fsync)
}

/// An LWLock of its own, taken only with `LWLockConditionalAcquire`.
pub struct LeaseLock(AtomicPtr<pg_sys::LWLock>);

const LEASE_LOCK_NAME: &std::ffi::CStr = c"snowid lease";

impl LeaseLock {
    /// Takes the lock if it is free, without waiting.
    pub fn try_exclusive(&self) -> Option<LeaseLockGuard> {
        let lock = self.0.load(Relaxed);
        // SAFETY: the pointer was set at shared-memory start-up and points into the main LWLock
        // array, which every process maps at the same address.
        let taken = !lock.is_null()
            && unsafe { pg_sys::LWLockConditionalAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE) };
        taken.then_some(LeaseLockGuard(lock))
    }
}

impl PgSharedMemoryInitialization for LeaseLock {
    type Value = bool;

    unsafe fn on_shmem_request(&'static self) {
        // SAFETY: called from the shared-memory request hook, as PostgreSQL requires.
        unsafe { pg_sys::RequestNamedLWLockTranche(LEASE_LOCK_NAME.as_ptr(), 1) };
    }

    unsafe fn on_shmem_startup(&'static self, _value: bool) {
        // SAFETY: called from the shared-memory startup hook, after the tranche was requested.
        let padded = unsafe { pg_sys::GetNamedLWLockTranche(LEASE_LOCK_NAME.as_ptr()) };
        // SAFETY: GetNamedLWLockTranche returns a valid pointer or raises an error.
        self.0.store(unsafe { &raw mut (*padded).lock }, Relaxed);
    }
}

/// Releases the lease lock when dropped, unless an error already released every lock this
/// process held (PostgreSQL does that when it aborts the transaction).
pub struct LeaseLockGuard(*mut pg_sys::LWLock);

impl Drop for LeaseLockGuard {
    fn drop(&mut self) {
        // SAFETY: the pointer is the lease lock; releasing is only done when this process holds it.
        unsafe {
            if pg_sys::LWLockHeldByMe(self.0) {
                pg_sys::LWLockRelease(self.0);
            }
        }
    }
}
