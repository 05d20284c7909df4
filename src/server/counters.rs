//! How many IDs each shard issued, counted where it costs the hot path nothing shared.
//!
//! Each process counts the IDs it issues in its own memory: one increment of a process-local
//! counter per ID, and the first ID of a shard since the last flush notes the shard in a list.
//! When the process's transaction ends (commit, abort, or a parallel worker's end), the counts
//! are added to the shards' tallies in shared memory (apart from the stamps the hot path
//! changes), where `snowid_stats()` reads them. A statement still running has not added its
//! counts yet; the session running it sees them (see [`unflushed`]).

use crate::server::shared_memory;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::layout::{Shard, SHARD_COUNT};
use std::cell::{Cell, UnsafeCell};

/// This process's counts since the last flush, and which shards they are for.
struct Local {
    counts: UnsafeCell<[u64; SHARD_COUNT]>,
    touched: UnsafeCell<[u16; SHARD_COUNT]>,
    touched_len: Cell<usize>,
}

// SAFETY: a PostgreSQL process runs SQL on one thread; nothing else touches these.
unsafe impl Sync for Local {}

static LOCAL: Local = Local {
    counts: UnsafeCell::new([0; SHARD_COUNT]),
    touched: UnsafeCell::new([0; SHARD_COUNT]),
    touched_len: Cell::new(0),
};

/// Counts one ID issued for `shard`. No shared memory, no allocation, and no panic: the masks
/// are no-ops for a shard, and a shard is noted at most once between flushes.
#[inline(always)]
pub fn count(shard: Shard) {
    let n = shard.index() & (SHARD_COUNT - 1);
    // SAFETY: see `Local`; nothing else borrows the arrays while this runs.
    unsafe {
        let counts = &mut *LOCAL.counts.get();
        if counts[n] == 0 {
            let len = LOCAL.touched_len.get();
            (*LOCAL.touched.get())[len & (SHARD_COUNT - 1)] = n as u16;
            LOCAL.touched_len.set(len + 1);
        }
        counts[n] = counts[n].wrapping_add(1);
    }
}

/// IDs this process issued for `shard` and has not added to shared memory yet.
pub fn unflushed(shard: usize) -> u64 {
    // SAFETY: see `Local`.
    unsafe { (*LOCAL.counts.get())[shard & (SHARD_COUNT - 1)] }
}

/// Adds this process's counts to the shards' cells, and starts counting afresh.
fn flush() {
    let Some(shared) = shared_memory::state() else {
        return;
    };
    // SAFETY: see `Local`.
    unsafe {
        let counts = &mut *LOCAL.counts.get();
        let touched = &*LOCAL.touched.get();
        for &n in &touched[..LOCAL.touched_len.get().min(SHARD_COUNT)] {
            let n = usize::from(n);
            if let Some(shard) = Shard::new(n as i32) {
                shared.tally(shard).add_issued(counts[n]);
            }
            counts[n] = 0;
        }
    }
    LOCAL.touched_len.set(0);
}

/// Registers the flush at the end of every transaction. Call from `_PG_init` in the postmaster
/// during preload: every process it forks inherits the registration.
pub fn register() {
    // SAFETY: a plain registration in the postmaster's top memory context.
    unsafe { pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut()) };
}

#[pg_guard]
unsafe extern "C-unwind" fn at_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    if matches!(
        event,
        XACT_EVENT_COMMIT
            | XACT_EVENT_ABORT
            | XACT_EVENT_PARALLEL_COMMIT
            | XACT_EVENT_PARALLEL_ABORT
            | XACT_EVENT_PREPARE
    ) {
        flush();
    }
}
