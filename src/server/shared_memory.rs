//! snowid's state in PostgreSQL shared memory, and how it starts.
//!
//! # Concurrency rules
//!
//! - The segment holds [`snowid_core::generator::Shared`]: the time base, the lease as generation
//!   sees it, the writer's claim, one stamp per shard (8,192), each on its own 64-byte cache
//!   line, so that shards never contend through false sharing and the read-mostly lines (time
//!   base, lease) are written only by the slow path, and the shards' tallies (IDs issued, waits),
//!   apart from the stamps. Beside it: the condition variable of the writer's claim, and the
//!   state of the check on Citus, with its own rules (see [`crate::server::citus::segment`]).
//! - The postmaster zeroes the segment in the shared-memory startup hook, before any backend
//!   exists, and starts the time base at the wall clock. Nothing is read from disk there. After a
//!   backend crash the postmaster builds a fresh segment the same way.
//! - The durable state lives in pages of the buffer manager (see [`crate::server::state`]), not
//!   here.
//!   The first caller that needs it after a (re)start, once recovery has ended, loads it into
//!   the segment while holding the writer's claim; until then the lease end is 0 and every caller
//!   takes the slow path, which waits for the loader.
//! - Issuing (the fast path) takes no lock: it loads the lease end (acquire), the time base and
//!   the shard's stamp, and advances the stamp with one compare-and-swap. A shard's stamp is
//!   otherwise changed only by `fetch_or` (a release), `fetch_max` (loading) and a CAS loop (taking
//!   a shard back); stamps only move forward, and a process that dies between its load and its
//!   CAS leaves nothing half-done.
//! - The time base's offset only grows (`fetch_max`); its comparison with the wall clock is done
//!   by whichever caller wins a CAS on the due time, every 10 ms.
//! - This segment is changed, beyond the shards' stamps, only by the holder of the writer's claim,
//!   an atomic taken by CAS (acquire) and given back with a release store; so is the durable
//!   state, by generation, releases and resumes. (The durable state is also written without the
//!   claim where nothing in this segment depends on it yet: its creation at `CREATE EXTENSION`
//!   and its fence while `pg_upgrade` brings databases in, both under a cluster-wide lock, see
//!   `crate::server::state::startup`; the cluster's witness, which start-up leaves with the state
//!   and `crate::server::releases` and `crate::server::pg_upgrade` rewrite, all through
//!   `crate::server::state::witness`; and the databases' records of the released shards, which
//!   `crate::server::releases` writes through `crate::server::databases`.) Nobody ever spins on
//!   the claim: a caller that needs the holder's work sleeps on the claim's condition variable,
//!   which the holder broadcasts when it gives the claim back (and a 10 ms timeout covers a
//!   missed wake-up); a cancel or `statement_timeout` ends the sleep. The holder makes its change
//!   durable (WAL flushed, and on the synchronous standbys) before it publishes anything; the
//!   lease end is published with a release store, so a caller that sees a lease also sees the
//!   shards and time base it was published with. A process that exits without unwinding (FATAL)
//!   gives the claim back in a `before_shmem_exit` callback.
//! - How many IDs a shard issued is counted by each process in its own memory, and added to the
//!   shard's tally, apart from every stamp's cache line, when its transaction ends (see
//!   [`crate::server::counters`]).
//! - Every backend and parallel worker inherits the segment's address from the postmaster.

use crate::server::citus::segment as citus_segment;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::clock::{sample_patiently, SystemClock};
use snowid_core::generator::Shared;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering::Relaxed};

/// Everything snowid keeps in shared memory.
#[repr(C)]
struct Segment {
    shared: Shared,
    /// Where callers sleep while another holds the writer's claim; its holder wakes them when
    /// it gives the claim back.
    claim_given_back: pg_sys::ConditionVariable,
    /// On Citus, the shards this node may generate for.
    citus: citus_segment::Segment,
}

/// The segment, for every process the postmaster forks (null until the startup hook has run).
static SEGMENT: AtomicPtr<Segment> = AtomicPtr::new(std::ptr::null_mut());

/// Set in the postmaster when the library is preloaded; inherited by every backend it forks.
static PRELOADED: AtomicBool = AtomicBool::new(false);

static mut PREVIOUS_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREVIOUS_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

/// Installs the hooks that request and build the segment. Call only from `_PG_init` during
/// `shared_preload_libraries` processing.
pub fn init() {
    // SAFETY: the postmaster runs this once while loading preloaded libraries, when hooks are
    // installed; the previous hooks are called first, as every extension must.
    unsafe {
        PREVIOUS_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request_segment);
        PREVIOUS_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(start_segment);
    }
    PRELOADED.store(true, Relaxed);
}

const SEGMENT_NAME: &std::ffi::CStr = c"snowid";

#[pg_guard]
unsafe extern "C-unwind" fn request_segment() {
    // SAFETY: called by PostgreSQL from its shared-memory request phase.
    unsafe {
        if let Some(previous) = PREVIOUS_REQUEST_HOOK {
            previous();
        }
        pg_sys::RequestAddinShmemSpace(size_of::<Segment>());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn start_segment() {
    // SAFETY: called by PostgreSQL once shared memory exists, in the postmaster (and again after
    // a crash restart), before any backend that could use the segment is started.
    unsafe {
        if let Some(previous) = PREVIOUS_STARTUP_HOOK {
            previous();
        }
        let mut found = false;
        let segment =
            pg_sys::ShmemInitStruct(SEGMENT_NAME.as_ptr(), size_of::<Segment>(), &mut found)
                .cast::<Segment>();
        if !found {
            // All zero is a valid segment: nothing loaded.
            std::ptr::write_bytes(segment, 0, 1);
            (*segment).shared.restart(sample_patiently(&SystemClock));
            pg_sys::ConditionVariableInit(&raw mut (*segment).claim_given_back);
            citus_segment::start(&raw mut (*segment).citus);
        }
        citus_segment::attach(&raw mut (*segment).citus);
        SEGMENT.store(segment, Relaxed);
    }
}

/// Whether this server loaded snowid through `shared_preload_libraries`.
#[inline]
pub fn preloaded() -> bool {
    PRELOADED.load(Relaxed)
}

/// The shared state, or `None` when the library was not preloaded.
#[inline(always)]
pub fn state() -> Option<&'static Shared> {
    // SAFETY: the pointer is null or points to the segment, which lives as long as the process.
    unsafe { SEGMENT.load(Relaxed).as_ref() }.map(|s| &s.shared)
}

/// The condition variable of the writer's claim, or null when not preloaded.
fn claim_condition() -> *mut pg_sys::ConditionVariable {
    let segment = SEGMENT.load(Relaxed);
    if segment.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the segment lives as long as the process; only the field's address is taken.
    unsafe { &raw mut (*segment).claim_given_back }
}

/// Sleeps until the writer's claim is given back, or `ms` milliseconds at most (a wake-up sent
/// between the caller's failed try and this sleep is missed, and the timeout covers it). A
/// cancel or `statement_timeout` raises its error from here.
pub fn sleep_for_claim(ms: u64) {
    let cv = claim_condition();
    if cv.is_null() {
        return;
    }
    // SAFETY: the condition variable was initialised with the segment; prepare, sleep and cancel
    // are PostgreSQL's protocol for a timed sleep (an error's abort cancels the sleep too).
    unsafe {
        pg_sys::ConditionVariablePrepareToSleep(cv);
        pg_sys::ConditionVariableTimedSleep(
            cv,
            ms.clamp(1, 1000) as std::ffi::c_long,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ConditionVariableCancelSleep();
    }
}

/// Wakes every process sleeping for the writer's claim.
pub fn wake_claim_waiters() {
    let cv = claim_condition();
    if !cv.is_null() {
        // SAFETY: as in `sleep_for_claim`; a broadcast only takes the variable's spinlock.
        unsafe { pg_sys::ConditionVariableBroadcast(cv) };
    }
}

/// This process's number as holder of the writer's claim: its PID, registering (once) the
/// callback that gives it back if the process exits without unwinding.
pub fn claimer() -> u32 {
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    if !REGISTERED.swap(true, Relaxed) {
        // SAFETY: a plain registration; the callback only touches shared memory.
        unsafe { pg_sys::before_shmem_exit(Some(give_back_claim), pg_sys::Datum::from(0)) };
    }
    // SAFETY: a plain read of this process's PID, set before it runs SQL.
    unsafe { pg_sys::MyProcPid as u32 }
}

#[pg_guard]
unsafe extern "C-unwind" fn give_back_claim(_code: i32, _arg: pg_sys::Datum) {
    // SAFETY: as in `claimer`.
    let me = unsafe { pg_sys::MyProcPid as u32 };
    if let Some(shared) = state() {
        shared.release_claim_of(me);
        wake_claim_waiters();
    }
}
