//! The shared memory of the check on Citus: the set of shards the hot path reads, the last
//! check's report, and the nodes that asked this one without being in its record of the nodes;
//! part of snowid's segment (see `crate::server::shared_memory`), used only where Citus is
//! preloaded beside snowid.
//!
//! # Concurrency rules
//!
//! - One process checks: the background worker of [`super::checker`]. Its check's result, the
//!   set `generating` and the [`Report`] (which carries the fingerprint of the `snowid.shards` it
//!   used, so that the two always travel together), is written by it alone.
//! - `generating` is the set the last check found this node may generate for. Every call reads
//!   it without a lock (a load or two and a bit test); it is written only as below.
//! - `wanted` counts the events that call for a new check before anything is generated again:
//!   the start, a change of Citus's record of the nodes or of this node's group, a reload that
//!   changes `snowid.shards`, and another node whose claim the last check no longer matches.
//!   `checked` is the value of `wanted` that `generating` answers; while they differ, a check is
//!   due and `generating` is empty, so every call takes the slow path, which wakes the checker
//!   and waits. [`Segment::want_check`] raises `wanted` first and empties `generating` after;
//!   [`Segment::publish`] fills `generating` first, then sets `checked` to the `wanted` it read
//!   before the check began, then reads `wanted` again and empties `generating` if it moved. All
//!   of these are sequentially consistent, so whatever the interleaving, an event that comes
//!   after a check began leaves `generating` empty until a later check.
//! - `asks` counts calls to ask every other node again while generation goes on with the last
//!   check's result (a refused shard, another node's new claim): the checker's next check asks
//!   again if it moved since its last.
//! - `published` counts the checks published; a process that waits for a check after its own
//!   call for one waits for it to move past what it read first.
//! - The checker's latch and PID are set by the checker when it starts and cleared when it exits;
//!   any process may set the latch to wake it. Waiters sleep on `check_done`, 10 ms at most (a
//!   missed wake-up costs no more), and look again; a cancel or `statement_timeout` ends the wait.
//! - The report and the told nodes are [`Slot`]s: read under a sequence count, written by the
//!   checker (the report) or by any backend under the slot's writer lock (the told nodes).
//! - The postmaster zeroes the segment and sets `wanted` to 1 (a check is due) before any backend
//!   starts ([`start`]); after a crash it builds a fresh one the same way.

use super::message::Slot;
use super::report::{Report, ToldNodes};
use pgrx::pg_sys;
use snowid_core::layout::Shard;
use snowid_core::shard_set::{LiveShardSet, ShardSet};
use std::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64,
    Ordering::{Relaxed, SeqCst},
};

/// The report's slot: 256 KiB, about a thousand nodes' worth. A bigger report leaves out the
/// nodes that matter least, and says how many (see [`Report::shrink`]).
pub type ReportSlot = Slot<32768>;

/// The told nodes' slot: 64 KiB, some hundreds of nodes.
pub type ToldSlot = Slot<8192>;

/// The segment.
#[repr(C)]
pub struct Segment {
    generating: LiveShardSet,
    wanted: AtomicU64,
    checked: AtomicU64,
    asks: AtomicU64,
    published: AtomicU64,
    checker_latch: AtomicPtr<pg_sys::Latch>,
    checker_pid: AtomicU32,
    /// When the last checker to start began to connect to its database, in Unix milliseconds,
    /// while it has not yet connected (a FATAL there ends it: the database does not exist, say);
    /// 0 otherwise.
    connecting_since: AtomicI64,
    /// The database the last check read Citus's metadata in, and the OIDs of the two tables whose
    /// changes call for a new check there (`pg_dist_local_group`, `pg_dist_node`).
    database: AtomicU32,
    local_group_table: AtomicU32,
    node_table: AtomicU32,
    /// Whether the last check found a node whose public IDs' keys differ from this node's.
    mask_keys_differ: AtomicBool,
    check_done: pg_sys::ConditionVariable,
    report: ReportSlot,
    told: ToldSlot,
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

    /// Calls for a new check, stops generation until it is done, and wakes the checker. Safe
    /// anywhere, in an invalidation callback too: atomics and a latch only.
    pub fn want_check(&self) {
        self.wanted.fetch_add(1, SeqCst);
        self.generating.replace(&ShardSet::empty());
        fence(SeqCst);
        self.wake_checker();
    }

    /// Calls for a check that asks every other node again, while generation goes on with the
    /// last check's result; wakes the checker. Returns the count of published checks to wait
    /// past (see [`Segment::published`]).
    pub fn want_asking(&self) -> u64 {
        let published = self.published.load(SeqCst);
        self.asks.fetch_add(1, SeqCst);
        self.wake_checker();
        published
    }

    /// The value of `wanted` a check that begins now answers, and the count of calls to ask
    /// again it knows of.
    pub fn begin_check(&self) -> (u64, u64) {
        (self.wanted.load(SeqCst), self.asks.load(SeqCst))
    }

    /// How many checks were published.
    pub fn published(&self) -> u64 {
        self.published.load(SeqCst)
    }

    /// Puts a check's result in force, unless an event came after the check began (then the
    /// set stays empty, and the next check runs at once), and wakes the waiters. Call only as
    /// the checker. The report is published first: whoever sees the set sees its report.
    pub fn publish(&self, wanted_at_start: u64, generating: &ShardSet, report: &mut Report) {
        report.check = self.published.load(SeqCst) + 1;
        if self.report.publish(report).is_none() {
            // Not even the smallest report fits: nothing is put in force.
            return;
        }
        self.mask_keys_differ
            .store(report.mask_keys_differ.is_some(), SeqCst);
        self.generating.replace(generating);
        fence(SeqCst);
        self.checked.store(wanted_at_start, SeqCst);
        if self.wanted.load(SeqCst) != wanted_at_start {
            self.generating.replace(&ShardSet::empty());
            fence(SeqCst);
        }
        self.published.fetch_add(1, SeqCst);
        // SAFETY: a broadcast only takes the condition variable's spinlock.
        unsafe { pg_sys::ConditionVariableBroadcast((&raw const self.check_done).cast_mut()) };
    }

    /// Whether the last check found a node whose public IDs' keys differ from this node's (its
    /// report says which): one load, for the mask functions.
    pub fn mask_keys_differ(&self) -> bool {
        self.mask_keys_differ.load(SeqCst)
    }

    /// The last check's report, if any.
    pub fn report(&self) -> Option<Report> {
        self.report.read()
    }

    /// The nodes that asked this one without being in its record of the nodes.
    pub fn told(&self) -> &ToldSlot {
        &self.told
    }

    /// The told nodes as they are now.
    pub fn told_nodes(&self) -> ToldNodes {
        self.told.read().unwrap_or_default()
    }

    /// Records what the check read, for the invalidation callback.
    pub fn watch(&self, watched: &Watched) {
        self.database.store(watched.database.to_u32(), SeqCst);
        self.local_group_table
            .store(watched.local_group_table.to_u32(), SeqCst);
        self.node_table.store(watched.node_table.to_u32(), SeqCst);
    }

    /// What the last check recorded (see [`Segment::watch`]).
    pub fn watched(&self) -> Watched {
        Watched {
            database: pg_sys::Oid::from(self.database.load(SeqCst)),
            local_group_table: pg_sys::Oid::from(self.local_group_table.load(SeqCst)),
            node_table: pg_sys::Oid::from(self.node_table.load(SeqCst)),
        }
    }

    /// A checker starts, and connects to its database, at `now_unix_ms`.
    pub fn checker_connecting(&self, now_unix_ms: i64) {
        self.connecting_since.store(now_unix_ms, SeqCst);
    }

    /// Whether the last checker to start has tried to connect to its database for `patience_ms`
    /// or more, at `now_unix_ms`, and is gone or still trying.
    pub fn checker_could_not_connect(&self, now_unix_ms: i64, patience_ms: i64) -> bool {
        let since = self.connecting_since.load(SeqCst);
        since != 0 && now_unix_ms - since >= patience_ms && self.checker_pid() == 0
    }

    /// Makes the calling process, connected, the checker, to be woken through its latch.
    pub fn register_checker(&self, latch: *mut pg_sys::Latch, pid: u32) {
        self.checker_latch.store(latch, SeqCst);
        self.checker_pid.store(pid, SeqCst);
        self.connecting_since.store(0, SeqCst);
    }

    /// The checker is gone (it exits).
    pub fn unregister_checker(&self, pid: u32) {
        if self
            .checker_pid
            .compare_exchange(pid, 0, SeqCst, SeqCst)
            .is_ok()
        {
            self.checker_latch.store(std::ptr::null_mut(), SeqCst);
        }
    }

    /// The checker's PID, or 0 while none runs.
    pub fn checker_pid(&self) -> u32 {
        self.checker_pid.load(SeqCst)
    }

    fn wake_checker(&self) {
        let latch = self.checker_latch.load(SeqCst);
        if !latch.is_null() {
            // SAFETY: the latch is the checker's process latch, in shared memory for as long as
            // the server runs; setting a latch is safe from any process, in any context.
            unsafe { pg_sys::SetLatch(latch) };
        }
    }

    /// Sleeps until a check is published, or 10 ms at most. A cancel raises its error from here.
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
}
