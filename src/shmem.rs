//! snowid's state in PostgreSQL shared memory.
//!
//! # Concurrency rules
//!
//! - The segment holds the time base, the lease, and one cell per shard (8,192): an `AtomicU64`
//!   stamp plus two counters, each cell on its own 64-byte cache line, so that shards never
//!   contend through false sharing and the read-mostly lines (time base, lease) are not dirtied
//!   by generation.
//! - The postmaster builds the segment in the shared-memory startup hook, before any backend
//!   exists, from `$PGDATA/snowid.state` (see [`crate::lease`]). After a backend crash the
//!   postmaster builds a fresh segment the same way.
//! - A stamp is only ever changed by [`crate::shard_state::issue`]: a load, then compare-and-swap,
//!   retried until it lands. Stamps only move forward. No lock is taken on this path, and a
//!   process that dies between the load and the CAS leaves nothing half-done.
//! - The time base's offset only grows (`fetch_max`); its comparison with the wall clock is done
//!   by whichever caller wins a CAS on the due time. See [`crate::time_base`].
//! - The lease end is read without a lock on the hot path. It is written only under
//!   [`LEASE_LOCK`], and only after the record covering it is durably on disk, so every value a
//!   reader sees is already safe to use. A reader that sees an old value just takes the cold path
//!   and finds the lease already extended.
//! - A shard's counters (IDs issued, waits) are bumped with relaxed `fetch_add` right after the
//!   caller's CAS on the same line, so they add no contention; readers may see them slightly
//!   behind the stamp.
//! - Every backend and parallel worker inherits the segment's address from the postmaster.

use crate::layout::{stamp, Shard, MAX_SEQ, SHARD_COUNT};
use crate::lease::{self, Start};
use crate::time_base::TimeBase;
use crate::{clock, epoch, gucs};
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic, PgLwLock};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering::Relaxed};

/// One shard's state, alone on its cache line: the last issued stamp, and counters that only
/// the callers who just changed that line touch.
#[repr(C, align(64))]
pub struct ShardCell {
    /// The last stamp issued on the shard.
    pub stamp: AtomicU64,
    issued: AtomicU64,
    waits: AtomicU64,
}

impl ShardCell {
    fn starting_at(stamp: u64) -> ShardCell {
        ShardCell {
            stamp: AtomicU64::new(stamp),
            issued: AtomicU64::new(0),
            waits: AtomicU64::new(0),
        }
    }

    /// Counts an issued ID. The line is already exclusively ours after the CAS.
    #[inline]
    pub fn count_issued(&self) {
        self.issued.fetch_add(1, Relaxed);
    }

    pub fn count_wait(&self) {
        self.waits.fetch_add(1, Relaxed);
    }

    /// IDs issued since start.
    pub fn issued(&self) -> u64 {
        self.issued.load(Relaxed)
    }

    /// Waits at the lead bound since start.
    pub fn waits(&self) -> u64 {
        self.waits.load(Relaxed)
    }
}

/// Why generation is refused, if it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    EpochMovedLater { recorded_epoch_unix_ms: i64 },
    StateUnreadable,
}

/// The lease as generation sees it.
#[repr(C, align(64))]
pub struct LeaseState {
    /// Exclusive end of the durable lease, in milliseconds since the epoch.
    end_ms: AtomicU64,
    /// The time base recorded with the last write, in Unix milliseconds.
    persisted_base_unix_ms: AtomicI64,
    /// Lease writes since start.
    writes: AtomicU64,
    /// 0: generate; 1: the epoch moved later; 2: the file is unreadable.
    refusal: AtomicU8,
    recorded_epoch_unix_ms: AtomicI64,
}

impl LeaseState {
    #[inline]
    pub fn end_ms(&self) -> u64 {
        self.end_ms.load(Relaxed)
    }

    /// Publishes a lease that is already durable.
    pub fn publish(&self, record: &lease::Record, epoch_unix_ms: i64) {
        self.persisted_base_unix_ms
            .store(record.base_unix_ms, Relaxed);
        self.end_ms
            .fetch_max((record.lease_end_unix_ms - epoch_unix_ms) as u64, Relaxed);
        self.writes.fetch_add(1, Relaxed);
    }

    pub fn refusal(&self) -> Option<Refusal> {
        match self.refusal.load(Relaxed) {
            0 => None,
            1 => Some(Refusal::EpochMovedLater {
                recorded_epoch_unix_ms: self.recorded_epoch_unix_ms.load(Relaxed),
            }),
            _ => Some(Refusal::StateUnreadable),
        }
    }

    pub fn persisted_base_unix_ms(&self) -> i64 {
        self.persisted_base_unix_ms.load(Relaxed)
    }

    pub fn writes(&self) -> u64 {
        self.writes.load(Relaxed)
    }
}

/// Rate limits for log warnings, in monotonic milliseconds of the last one of each kind.
#[repr(C, align(64))]
pub struct WarningClock {
    step_back: AtomicI64,
    ahead: AtomicI64,
}

pub enum Warning {
    StepBack,
    Ahead,
}

impl WarningClock {
    /// Whether a warning of this kind may be logged now, at most one per `every_ms`.
    pub fn allow(&self, kind: Warning, mono_ms: i64, every_ms: i64) -> bool {
        let last = match kind {
            Warning::StepBack => &self.step_back,
            Warning::Ahead => &self.ahead,
        };
        let previous = last.load(Relaxed);
        mono_ms - previous >= every_ms
            && last
                .compare_exchange(previous, mono_ms, Relaxed, Relaxed)
                .is_ok()
    }
}

/// Everything snowid keeps in shared memory.
#[repr(C)]
pub struct SharedState {
    pub time_base: TimeBase,
    pub lease: LeaseState,
    pub warnings: WarningClock,
    shards: [ShardCell; SHARD_COUNT],
}

// SAFETY: plain atomics with no pointers; valid at any address in any process.
unsafe impl PGRXSharedMemory for SharedState {}

impl SharedState {
    /// A shard's state.
    #[inline]
    pub fn shard(&self, shard: Shard) -> &ShardCell {
        &self.shards[shard.index()]
    }

    /// Every shard's state, in shard order.
    pub fn shards(&self) -> &[ShardCell] {
        &self.shards
    }

    /// Builds the state for a (re)start of shared memory from the persisted high-water mark.
    /// Runs in the postmaster.
    fn recovered() -> SharedState {
        let epoch_ms = gucs::epoch_unix_ms();
        let found = lease::read(Path::new("."));
        let start = lease::start(found, epoch_ms);
        let (base_floor, end_ms, refusal, recorded_epoch) = match start {
            Start::Resume {
                base_floor_unix_ms,
                lease_end_ms,
            } => (base_floor_unix_ms, lease_end_ms, 0, epoch_ms),
            Start::EpochMovedLater {
                recorded_epoch_unix_ms,
            } => {
                warning!(
                    "snowid will not generate IDs: snowid.epoch ({}) is later than the epoch of IDs already issued ({})",
                    epoch::format(epoch_ms),
                    epoch::format(recorded_epoch_unix_ms)
                );
                (i64::MIN, 0, 1, recorded_epoch_unix_ms)
            }
            Start::Unreadable { reason } => {
                warning!(
                    "snowid will not generate IDs: \"{}\" is unreadable: {reason}",
                    lease::FILE_NAME
                );
                (i64::MIN, 0, 2, epoch_ms)
            }
        };
        // Every shard resumes just below the lease end, so its next stamp is at or past it.
        let floor = if end_ms == 0 {
            0
        } else {
            stamp(end_ms - 1, MAX_SEQ as u64)
        };
        SharedState {
            time_base: TimeBase::starting_at(
                clock::monotonic_ms(),
                clock::unix_ms_now(),
                base_floor,
            ),
            lease: LeaseState {
                end_ms: AtomicU64::new(end_ms),
                persisted_base_unix_ms: AtomicI64::new(base_floor.max(0)),
                writes: AtomicU64::new(0),
                refusal: AtomicU8::new(refusal),
                recorded_epoch_unix_ms: AtomicI64::new(recorded_epoch),
            },
            warnings: WarningClock {
                step_back: AtomicI64::new(i64::MIN / 2),
                ahead: AtomicI64::new(i64::MIN / 2),
            },
            shards: std::array::from_fn(|_| ShardCell::starting_at(floor)),
        }
    }
}

static STATE: PgAtomic<SharedState> = unsafe { PgAtomic::new(c"snowid state") };

/// Serialises lease writes. Taken only on the cold path that extends the lease.
pub static LEASE_LOCK: PgLwLock<bool> = unsafe { PgLwLock::new(c"snowid lease") };

/// Set in the postmaster when the library is preloaded; inherited by every backend it forks.
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// Requests the segment and installs the startup hook. Call only from `_PG_init` during
/// `shared_preload_libraries` processing, after the settings are defined.
pub fn init() {
    pg_shmem_init!(STATE = SharedState::recovered());
    pg_shmem_init!(LEASE_LOCK = false);
    PRELOADED.store(true, Relaxed);
}

/// Whether this server loaded snowid through `shared_preload_libraries`.
pub fn preloaded() -> bool {
    PRELOADED.load(Relaxed)
}

/// The shared state, or `None` when the library was not preloaded.
#[inline]
pub fn state() -> Option<&'static SharedState> {
    preloaded().then(|| STATE.get())
}
