//! The per-shard state in PostgreSQL shared memory.
//!
//! # Concurrency rules
//!
//! - The segment holds one `AtomicU64` stamp per shard (8,192 of them), each alone on its own
//!   64-byte cache line, so that shards never contend with each other through false sharing.
//! - The postmaster creates and zeroes the segment in the shared-memory startup hook, before any
//!   backend exists. After a backend crash the postmaster builds a fresh segment the same way.
//! - After that, a stamp is only ever changed by [`crate::shard_state::issue`]: a load followed
//!   by compare-and-swap, retried until it lands. No lock is taken, no process waits for
//!   another, and a process that dies between the load and the CAS leaves nothing half-done.
//! - Stamps only move forward; a CAS from a stale value fails and is retried with the new one.
//! - Every backend and parallel worker inherits the segment's address from the postmaster, so
//!   they all advance the same stamps.
//! - Nothing else lives here, and nothing here is read under a lock.

use crate::layout::{Shard, SHARD_COUNT};
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One shard's stamp, padded to a cache line.
#[repr(C, align(64))]
pub struct StampCell(AtomicU64);

/// The stamps of every shard.
#[repr(C)]
pub struct ShardStamps([StampCell; SHARD_COUNT]);

// SAFETY: plain atomics with no pointers; valid at any address in any process.
unsafe impl PGRXSharedMemory for ShardStamps {}

impl ShardStamps {
    const fn zeroed() -> Self {
        ShardStamps([const { StampCell(AtomicU64::new(0)) }; SHARD_COUNT])
    }
}

static STAMPS: PgAtomic<ShardStamps> = unsafe { PgAtomic::new(c"snowid shard stamps") };

/// Set in the postmaster when the library is preloaded; inherited by every backend it forks.
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// Requests the segment and installs the startup hook. Call only from `_PG_init` during
/// `shared_preload_libraries` processing.
pub fn init() {
    pg_shmem_init!(STAMPS = ShardStamps::zeroed());
    PRELOADED.store(true, Ordering::Relaxed);
}

/// Whether this server loaded snowid through `shared_preload_libraries`.
pub fn preloaded() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// The stamp cell of a shard, or `None` when the library was not preloaded.
#[inline]
pub fn stamp_cell(shard: Shard) -> Option<&'static AtomicU64> {
    preloaded().then(|| &STAMPS.get().0[shard.index()].0)
}
