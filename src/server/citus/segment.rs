//! The shared memory of the check on Citus: the set of shards the hot path reads, and the last
//! check's report; part of snowid's segment (see [`crate::server::shared_memory`]), used only
//! where Citus is preloaded beside snowid.
//!
//! # Concurrency rules
//!
//! - `generating` is the set the last check found this node may generate for. Every call reads
//!   it without a lock (a load or two and a bit test); it is written only as below.
//! - `wanted` counts the events that call for a new check: the start, a reload that changes
//!   `snowid.shards`, a change of Citus's record of the nodes or of this node's group, and another
//!   node whose claim the last check no longer matches. `checked` is the value of `wanted` that
//!   `generating` answers; while they differ, a check is due and `generating` is empty, so every
//!   call takes the slow path, which runs or waits for the check.
//!   [`Segment::want_check`] raises `wanted` first and empties `generating` after;
//!   [`Segment::publish`] fills `generating` first, then sets `checked` to the `wanted` it read
//!   before the check began, then reads `wanted` again and empties `generating` if it moved. All
//!   of these are sequentially consistent, so whatever the interleaving, an event that comes
//!   after a check began leaves `generating` empty until a later check.
//! - `checker` is the PID of the one process that runs a check, taken by compare-and-swap and
//!   given back when the check returns, fails, or its process exits (the `before_shmem_exit`
//!   callback that gives back the writer's claim gives it back too). The others sleep on `check_done`, 10 ms at most (a missed wake-up costs no more),
//!   and look again; a cancel or `statement_timeout` ends the wait.
//! - The report (the last check's findings, as JSON) is written only by the checker and read by
//!   anyone under a sequence count, odd while it is being written: a reader copies it and tries
//!   again if the count moved. It is made of atomics, so that a torn read is only a retry.
//! - The postmaster zeroes the segment and sets `wanted` to 1 (a check is due) before any backend
//!   starts ([`start`]); after a crash it builds a fresh one the same way.

use pgrx::pg_sys;
use snowid_core::layout::Shard;
use snowid_core::shard_set::{LiveShardSet, ShardSet};
use std::sync::atomic::{
    fence, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};

/// The most bytes a report takes: about 300 nodes' worth.
const REPORT_WORDS: usize = 8192;

/// The segment.
#[repr(C)]
pub struct Segment {
    generating: LiveShardSet,
    wanted: AtomicU64,
    checked: AtomicU64,
    /// How many times another node told this one of a claim its last check did not match: a
    /// check asks every node again if this moved since the last check that asked, even if
    /// Citus's record of the nodes is unchanged.
    claims_moved: AtomicU64,
    checker: AtomicU32,
    /// The database the last check read Citus's metadata in, and the OIDs of the two tables whose
    /// changes call for a new check there (`pg_dist_local_group`, `pg_dist_node`).
    database: AtomicU32,
    local_group_table: AtomicU32,
    node_table: AtomicU32,
    /// A fingerprint of the `snowid.shards` the last check used.
    configured: AtomicU64,
    report_count: AtomicU64,
    report_len: AtomicUsize,
    report: [AtomicU64; REPORT_WORDS],
    check_done: pg_sys::ConditionVariable,
}

static SEGMENT: AtomicPtr<Segment> = AtomicPtr::new(std::ptr::null_mut());

/// Builds the segment in zeroed shared memory: a check is due. Call only from the shared-memory
/// startup hook, in the postmaster, when it makes snowid's segment.
///
/// # Safety
///
/// `segment` points to the zeroed memory of a `Segment` that no other process uses yet.
pub unsafe fn start(segment: *mut Segment) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        (*segment).wanted.store(1, Relaxed);
        pg_sys::ConditionVariableInit(&raw mut (*segment).check_done);
    }
}

/// Makes the segment this process's (every process the postmaster forks inherits it).
pub fn attach(segment: *mut Segment) {
    SEGMENT.store(segment, Relaxed);
}

/// The segment, or `None` before the startup hook built it.
#[inline(always)]
pub fn segment() -> Option<&'static Segment> {
    // SAFETY: the pointer is null or points to the segment, which lives as long as the process.
    unsafe { SEGMENT.load(Relaxed).as_ref() }
}

/// The watched database and tables, as the last check recorded them.
pub struct Watched {
    pub database: pg_sys::Oid,
    pub local_group_table: pg_sys::Oid,
    pub node_table: pg_sys::Oid,
}

impl Segment {
    /// Whether the last check lets this node generate for a shard, and no check is due.
    #[inline(always)]
    pub fn allows(&self, shard: Shard) -> bool {
        self.generating.contains(shard)
    }

    /// The shards this node may generate for now (none while a check is due).
    pub fn generating(&self) -> ShardSet {
        self.generating.snapshot()
    }

    /// Whether a check is due.
    pub fn check_due(&self) -> bool {
        self.wanted.load(SeqCst) != self.checked.load(SeqCst)
    }

    /// Calls for a new check, and stops generation until it is done. `claims_moved`: another
    /// node's claim changed, so the check must ask every node again. Safe anywhere, in an
    /// invalidation callback too: atomics only.
    pub fn want_check(&self, claims_moved: bool) {
        if claims_moved {
            self.claims_moved.fetch_add(1, SeqCst);
        }
        self.wanted.fetch_add(1, SeqCst);
        self.generating.replace(&ShardSet::empty());
        fence(SeqCst);
    }

    /// The value of `wanted` a check that begins now answers, and the count of other nodes' new
    /// claims it knows of (a check that records it asks again only once it moves).
    pub fn begin_check(&self) -> (u64, u64) {
        let claims_moved = self.claims_moved.load(SeqCst);
        (self.wanted.load(SeqCst), claims_moved)
    }

    /// Puts a check's result in force, unless an event came after the check began (then the
    /// set stays empty, and the next call checks again). Call only as the checker.
    pub fn publish(&self, wanted_at_start: u64, generating: &ShardSet, report: &[u8]) {
        self.write_report(report);
        self.generating.replace(generating);
        fence(SeqCst);
        self.checked.store(wanted_at_start, SeqCst);
        if self.wanted.load(SeqCst) != wanted_at_start {
            self.generating.replace(&ShardSet::empty());
            fence(SeqCst);
        }
    }

    /// Records what the check read, for the invalidation callback and for a change of
    /// `snowid.shards`.
    pub fn watch(&self, watched: &Watched, configured_fingerprint: u64) {
        self.database.store(watched.database.to_u32(), SeqCst);
        self.local_group_table
            .store(watched.local_group_table.to_u32(), SeqCst);
        self.node_table.store(watched.node_table.to_u32(), SeqCst);
        self.configured.store(configured_fingerprint, SeqCst);
    }

    /// What the last check recorded (see [`Segment::watch`]).
    pub fn watched(&self) -> (Watched, u64) {
        (
            Watched {
                database: pg_sys::Oid::from(self.database.load(SeqCst)),
                local_group_table: pg_sys::Oid::from(self.local_group_table.load(SeqCst)),
                node_table: pg_sys::Oid::from(self.node_table.load(SeqCst)),
            },
            self.configured.load(SeqCst),
        )
    }

    /// Makes this process (`me`: its number as [`crate::server::shared_memory::claimer`] gives
    /// it, whose exit callback gives the role back too) the checker, if no other process is; the
    /// guard gives the role back.
    pub fn become_checker(&'static self, me: u32) -> Option<Checker> {
        self.checker
            .compare_exchange(0, me, Acquire, Relaxed)
            .is_ok()
            .then_some(Checker(self))
    }

    /// Gives the checker's role back if `who` holds it: for a process that exits without
    /// unwinding (PostgreSQL's FATAL).
    pub fn give_back_of(&self, who: u32) {
        let _ = self.checker.compare_exchange(who, 0, Release, Relaxed);
    }

    /// Sleeps until a check is done, or 10 ms at most. A cancel raises its error from here.
    pub fn wait_for_check(&self) {
        let cv = (&raw const self.check_done).cast_mut();
        // SAFETY: the condition variable was initialised with the segment; prepare, sleep and
        // cancel are PostgreSQL's protocol for a timed sleep (an error's abort cancels it too).
        unsafe {
            pg_sys::ConditionVariablePrepareToSleep(cv);
            pg_sys::ConditionVariableTimedSleep(cv, 10, pg_sys::PG_WAIT_EXTENSION);
            pg_sys::ConditionVariableCancelSleep();
        }
    }

    fn write_report(&self, bytes: &[u8]) {
        let bytes = &bytes[..bytes.len().min(REPORT_WORDS * 8)];
        self.report_count.fetch_add(1, SeqCst);
        for (word, chunk) in self.report.iter().zip(bytes.chunks(8)) {
            let mut padded = [0u8; 8];
            padded[..chunk.len()].copy_from_slice(chunk);
            word.store(u64::from_le_bytes(padded), Relaxed);
        }
        self.report_len.store(bytes.len(), Relaxed);
        self.report_count.fetch_add(1, Release);
    }

    /// The last check's report, if any.
    pub fn report(&self) -> Option<Vec<u8>> {
        loop {
            let before = self.report_count.load(Acquire);
            if before == 0 {
                return None;
            }
            if before % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let len = self.report_len.load(Relaxed).min(REPORT_WORDS * 8);
            let mut bytes = Vec::with_capacity(len.next_multiple_of(8));
            for word in &self.report[..len.div_ceil(8)] {
                bytes.extend_from_slice(&word.load(Relaxed).to_le_bytes());
            }
            fence(Acquire);
            if self.report_count.load(Relaxed) == before {
                bytes.truncate(len);
                return Some(bytes);
            }
        }
    }
}

/// The checker's role, given back (and the waiters woken) when dropped: on return, and on an
/// error, whose unwinding drops it.
pub struct Checker(&'static Segment);

impl Drop for Checker {
    fn drop(&mut self) {
        self.0.checker.store(0, Release);
        // SAFETY: a broadcast only takes the condition variable's spinlock.
        unsafe { pg_sys::ConditionVariableBroadcast((&raw const self.0.check_done).cast_mut()) };
    }
}
